//! The scheduler: starts each step the moment its dependencies are done, at most
//! `max_concurrency` at once, and records outcomes in plan order.
//!
//! One loop owns all run state (variables, records, the ready queue), so nothing is locked:
//! tool calls run as tasks and report back through their join handles. A step reads the
//! variables when it starts; validation guarantees every variable it reads from another step
//! was bound by an ancestor, so what it reads never depends on timing.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use plan_graph::{META_STEP_ID, RetryPolicy};
use plan_vars::Scope;
use serde_json::{Map, Value};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::event::{Event, EventKind, EventSink};
use crate::program::{DEFAULT_MAX_CONCURRENCY, Program};
use crate::report::{Record, RunReport, StepError, TaskStatus};
use crate::retry;
use crate::tool::{Tool, ToolContext, ToolError, codes};

/// How to run a program.
#[derive(Clone)]
pub struct RunOptions {
    /// The run's id (the CLI makes a ULID).
    pub run_id: String,
    /// Overrides the plan's `max_concurrency`; the default is 4.
    pub max_concurrency: Option<usize>,
    /// Variables given by the caller; they win over the plan's `variables`.
    pub inputs: Map<String, Value>,
    /// Where events go, if anywhere.
    pub events: Option<Arc<dyn EventSink>>,
    /// Cancelling it stops the run: no new step starts, running tools are cancelled.
    pub cancel: CancellationToken,
}

impl RunOptions {
    /// Options with this run id and everything else default.
    pub fn new(run_id: impl Into<String>) -> Self {
        RunOptions {
            run_id: run_id.into(),
            max_concurrency: None,
            inputs: Map::new(),
            events: None,
            cancel: CancellationToken::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Succeeded,
    Failed,
    Skipped,
    Blocked,
}

struct Call {
    index: usize,
    run_id: Arc<str>,
    step_id: Arc<str>,
    tool_name: Arc<str>,
    tool: Arc<dyn Tool>,
    args: Value,
    retry: RetryPolicy,
    timeout: Option<Duration>,
    cancel: CancellationToken,
    events: Option<Arc<dyn EventSink>>,
}

struct Finished {
    index: usize,
    result: Result<Value, ToolError>,
    attempts: u32,
    elapsed: Duration,
}

struct Scheduler<'p> {
    program: &'p Program,
    run_id: Arc<str>,
    events: Option<Arc<dyn EventSink>>,
    vars: BTreeMap<String, Value>,
    remaining: Vec<usize>,
    records: Vec<Option<Record>>,
    outcomes: Vec<Option<Outcome>>,
    ready: BinaryHeap<Reverse<usize>>,
}

/// Runs a program to the end and returns its records.
pub async fn run(program: &Program, options: RunOptions) -> RunReport {
    let started = Instant::now();
    let run_id: Arc<str> = Arc::from(options.run_id.as_str());
    let limit = options
        .max_concurrency
        .or(program.max_concurrency)
        .unwrap_or(DEFAULT_MAX_CONCURRENCY)
        .max(1);
    let n = program.steps.len();
    let mut scheduler = Scheduler {
        program,
        run_id: run_id.clone(),
        events: options.events.clone(),
        vars: program.initial_variables(&options.inputs),
        remaining: program.deps.deps.iter().map(Vec::len).collect(),
        records: {
            // One slot more for `__meta__`, so the final records reuse this allocation.
            let mut records = Vec::with_capacity(n + 1);
            records.resize_with(n, || None);
            records
        },
        outcomes: vec![None; n],
        ready: BinaryHeap::new(),
    };
    scheduler.emit(|| {
        let mut event = Event::new(EventKind::RunStarted, &run_id);
        event.plan_id = Some(program.plan_id.clone());
        event
    });

    for i in 0..n {
        if !program.deps.unknown[i].is_empty() {
            let unknown: Vec<&str> = program.deps.unknown[i]
                .iter()
                .map(|d| d.0.as_str())
                .collect();
            let reason = format!("unknown dependency: {}", json_list(&unknown));
            scheduler.settle_without_running(i, Outcome::Blocked, false, reason);
        } else if scheduler.remaining[i] == 0 && scheduler.records[i].is_none() {
            scheduler.ready.push(Reverse(i));
        }
    }

    let mut running: JoinSet<Finished> = JoinSet::new();
    // Task id → step, to fail the right step if a tool panics.
    let mut task_steps: HashMap<tokio::task::Id, usize> = HashMap::new();
    loop {
        while running.len() < limit && !options.cancel.is_cancelled() {
            let Some(Reverse(i)) = scheduler.ready.pop() else {
                break;
            };
            if let Some(call) = scheduler.prepare(i, &options) {
                let handle = running.spawn(execute(call));
                task_steps.insert(handle.id(), i);
            }
        }
        let Some(joined) = running.join_next_with_id().await else {
            break;
        };
        match joined {
            Ok((id, finished)) => {
                task_steps.remove(&id);
                scheduler.finish(finished);
            }
            // A tool that panics fails its step; the run goes on.
            Err(join_error) => {
                if let Some(index) = task_steps.remove(&join_error.id()) {
                    let message = if join_error.is_panic() {
                        "the tool panicked"
                    } else {
                        "the tool's task was aborted"
                    };
                    let error = StepError {
                        code: codes::E_TOOL.into(),
                        message: message.into(),
                        details: None,
                    };
                    scheduler.fail(index, error, 1, Duration::ZERO);
                }
            }
        }
    }

    for i in 0..n {
        if scheduler.records[i].is_none() {
            scheduler.settle_without_running(
                i,
                Outcome::Skipped,
                true,
                "run cancelled before the step started".to_owned(),
            );
        }
    }
    scheduler.into_report(&options.run_id, started)
}

impl Scheduler<'_> {
    fn emit(&self, make: impl FnOnce() -> Event) {
        if let Some(sink) = &self.events {
            sink.emit(&make());
        }
    }

    /// Resolves a ready step's arguments; a step whose placeholders do not resolve fails
    /// here without calling its tool.
    fn prepare(&mut self, i: usize, options: &RunOptions) -> Option<Call> {
        let step = &self.program.steps[i];
        match step.args.resolve(&Scope::with_vars(&self.vars)) {
            Ok(args) => Some(Call {
                index: i,
                run_id: self.run_id.clone(),
                step_id: step.id.clone(),
                tool_name: step.tool_name.clone(),
                tool: step.tool.clone(),
                args,
                retry: step.retry.clone(),
                timeout: step.timeout,
                cancel: options.cancel.child_token(),
                events: self.events.clone(),
            }),
            Err(error) => {
                let error = StepError {
                    code: codes::E_ARGS_UNRESOLVED.into(),
                    message: error.to_string(),
                    details: None,
                };
                self.fail(i, error, 0, Duration::ZERO);
                None
            }
        }
    }

    fn finish(&mut self, finished: Finished) {
        let Finished {
            index,
            result,
            attempts,
            elapsed,
        } = finished;
        let outcome = match result {
            Ok(value) => self.bind(index, value),
            Err(error) => Err(error.into()),
        };
        self.record_executed(index, outcome, attempts, elapsed);
    }

    /// Stores the step's binds, all or none: a selector that does not match the result fails
    /// the step.
    fn bind(&mut self, index: usize, value: Value) -> Result<Value, StepError> {
        let step = &self.program.steps[index];
        let mut bound = Vec::with_capacity(step.binds.len());
        for (name, selector) in &step.binds {
            match selector.select(&value, &self.vars) {
                Ok(selected) => bound.push((name.clone(), selected)),
                Err(error) => {
                    return Err(StepError {
                        code: codes::E_BIND_UNRESOLVED.into(),
                        message: format!("bind `{name}`: {error}"),
                        details: None,
                    });
                }
            }
        }
        self.vars.extend(bound);
        Ok(value)
    }

    fn fail(&mut self, index: usize, error: StepError, attempts: u32, elapsed: Duration) {
        self.record_executed(index, Err(error), attempts, elapsed);
    }

    /// Records a step that ran (or tried to), then settles it.
    fn record_executed(
        &mut self,
        index: usize,
        outcome: Result<Value, StepError>,
        attempts: u32,
        elapsed: Duration,
    ) {
        let step_id = &self.program.steps[index].id;
        self.emit(|| {
            let mut event =
                Event::new(EventKind::StepExecuted, &self.run_id).step(step_id, attempts);
            event.ok = Some(outcome.is_ok());
            event.duration_ms = Some(millis(elapsed));
            event.error = outcome
                .as_ref()
                .err()
                .and_then(|e| serde_json::to_value(e).ok());
            event
        });
        let ok = outcome.is_ok();
        let (result, error) = match outcome {
            Ok(value) => (Some(value), None),
            Err(error) => (None, Some(error)),
        };
        self.records[index] = Some(Record {
            step_id: step_id.to_string(),
            ok,
            skipped: false,
            result,
            reason: None,
            error,
            attempts,
            duration_ms: millis(elapsed),
        });
        self.settle(
            index,
            if ok {
                Outcome::Succeeded
            } else {
                Outcome::Failed
            },
        );
    }

    /// Records a step that will not run (blocked or skipped), without settling it.
    fn record_not_run(&mut self, index: usize, skipped: bool, reason: String) {
        let step_id = &self.program.steps[index].id;
        self.emit(|| {
            let mut event = Event::new(EventKind::StepSkipped, &self.run_id).step(step_id, 0);
            event.reason = Some(reason.clone());
            event
        });
        self.records[index] = Some(Record {
            step_id: step_id.to_string(),
            ok: false,
            skipped,
            result: None,
            reason: Some(reason),
            error: None,
            attempts: 0,
            duration_ms: 0,
        });
    }

    fn settle_without_running(
        &mut self,
        index: usize,
        outcome: Outcome,
        skipped: bool,
        reason: String,
    ) {
        self.record_not_run(index, skipped, reason);
        self.settle(index, outcome);
    }

    /// Marks a step done and releases its dependents: each whose dependencies are now all
    /// done either becomes ready or, if one of them did not succeed, is skipped (which in
    /// turn releases its own dependents).
    fn settle(&mut self, index: usize, outcome: Outcome) {
        let program = self.program;
        self.outcomes[index] = Some(outcome);
        let mut done = vec![index];
        while let Some(i) = done.pop() {
            for &d in &program.deps.dependents[i] {
                self.remaining[d] -= 1;
                if self.remaining[d] != 0 || self.records[d].is_some() {
                    continue;
                }
                let unsatisfied: Vec<&str> = program.deps.deps[d]
                    .iter()
                    .filter(|&&dep| self.outcomes[dep] != Some(Outcome::Succeeded))
                    .map(|&dep| &*program.steps[dep].id)
                    .collect();
                if unsatisfied.is_empty() {
                    self.ready.push(Reverse(d));
                } else {
                    let reason = format!("dependency not satisfied: {}", json_list(&unsatisfied));
                    self.record_not_run(d, true, reason);
                    self.outcomes[d] = Some(Outcome::Skipped);
                    done.push(d);
                }
            }
        }
    }

    fn into_report(self, run_id: &str, started: Instant) -> RunReport {
        let has = |wanted: Outcome| self.outcomes.contains(&Some(wanted));
        let (status, summary) = if has(Outcome::Blocked) {
            (
                TaskStatus::Blocked,
                "one or more steps depend on unknown steps",
            )
        } else if has(Outcome::Failed) {
            (TaskStatus::Failed, "one or more steps failed")
        } else if has(Outcome::Skipped) {
            (TaskStatus::Partial, "some steps were skipped")
        } else {
            (TaskStatus::Completed, "all steps succeeded")
        };
        let elapsed = started.elapsed();
        self.emit(|| {
            let mut event = Event::new(EventKind::RunFinished, &self.run_id);
            event.task_status = Some(status);
            event.duration_ms = Some(millis(elapsed));
            event
        });
        // Every slot is filled by now (see `run`); `map` over `into_iter` collects in place.
        let mut records: Vec<Record> = self
            .records
            .into_iter()
            .map(|record| record.unwrap_or_else(unreachable_record))
            .collect();
        records.push(Record {
            step_id: META_STEP_ID.to_owned(),
            ok: status == TaskStatus::Completed,
            skipped: false,
            result: None,
            reason: Some(format!("{summary}; task_status={status}")),
            error: None,
            attempts: 0,
            duration_ms: millis(elapsed),
        });
        RunReport {
            run_id: run_id.to_owned(),
            plan_id: self.program.plan_id.to_string(),
            task_status: status,
            records,
            variables: self.vars,
        }
    }
}

/// Never produced: `run` settles every step before building the report. Kept total so that a
/// bug shows as an odd record rather than a panic.
fn unreachable_record() -> Record {
    Record {
        step_id: String::new(),
        ok: false,
        skipped: true,
        result: None,
        reason: Some("internal error: the step was never settled".to_owned()),
        error: None,
        attempts: 0,
        duration_ms: 0,
    }
}

/// Calls the tool, retrying retryable errors as the step's policy allows.
async fn execute(call: Call) -> Finished {
    let started = Instant::now();
    let finished = |result: Result<Value, ToolError>, attempts: u32| Finished {
        index: call.index,
        result,
        attempts,
        elapsed: started.elapsed(),
    };
    let mut attempt = 1;
    loop {
        call.emit(EventKind::ToolCalled, attempt, |_| {});
        let attempt_started = Instant::now();
        let attempt_cancel = call.cancel.child_token();
        let ctx = ToolContext {
            run_id: call.run_id.clone(),
            step_id: call.step_id.clone(),
            attempt,
            cancel: attempt_cancel.clone(),
        };
        let invocation = call.tool.call(call.args.clone(), ctx);
        let result = tokio::select! {
            biased;
            () = call.cancel.cancelled() => Err(ToolError::new(codes::E_CANCELLED, "the run was cancelled while the tool ran")),
            result = with_timeout(invocation, call.timeout) => result,
        };
        // Tells a tool that outlives its attempt (timed out, cancelled) to stop.
        attempt_cancel.cancel();
        let attempt_ms = millis(attempt_started.elapsed());
        let error = match result {
            Ok(value) => {
                call.emit(EventKind::ToolSucceeded, attempt, |event| {
                    event.duration_ms = Some(attempt_ms)
                });
                return finished(Ok(value), attempt);
            }
            Err(error) => error,
        };
        call.emit(EventKind::ToolFailed, attempt, |event| {
            event.duration_ms = Some(attempt_ms);
            event.error = serde_json::to_value(&error).ok();
        });
        let never_retried =
            error.code == codes::E_ARGS_INVALID || error.code == codes::E_ARGS_UNRESOLVED;
        let retry = error.retryable
            && !never_retried
            && attempt < call.retry.attempts
            && !call.cancel.is_cancelled();
        if !retry {
            return finished(Err(error), attempt);
        }
        let delay = retry::delay(&call.retry, attempt, error.retry_after);
        call.emit(EventKind::StepRetrying, attempt + 1, |event| {
            event.tool = None;
            event.delay_ms = Some(millis(delay));
            event.error = serde_json::to_value(&error).ok();
        });
        tokio::select! {
            () = call.cancel.cancelled() => return finished(Err(error), attempt),
            () = tokio::time::sleep(delay) => {}
        }
        attempt += 1;
    }
}

impl Call {
    /// Sends a step event carrying the tool's name, when anyone listens.
    fn emit(&self, kind: EventKind, attempt: u32, fill: impl FnOnce(&mut Event)) {
        if let Some(sink) = &self.events {
            let mut event = Event::new(kind, &self.run_id).step(&self.step_id, attempt);
            event.tool = Some(self.tool_name.clone());
            fill(&mut event);
            sink.emit(&event);
        }
    }
}

async fn with_timeout<F>(invocation: F, timeout: Option<Duration>) -> Result<Value, ToolError>
where
    F: Future<Output = Result<Value, ToolError>>,
{
    match timeout {
        None => invocation.await,
        Some(limit) => match tokio::time::timeout(limit, invocation).await {
            Ok(result) => result,
            Err(_) => Err(ToolError::retryable(
                codes::E_TIMEOUT,
                format!(
                    "the attempt took longer than {} ms and was cancelled",
                    limit.as_millis()
                ),
            )),
        },
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// `["a","b"]`: the seed 000 form of a list of ids inside a reason.
fn json_list(ids: &[&str]) -> String {
    serde_json::to_string(ids).unwrap_or_default()
}
