//! The scheduler: starts each step the moment its dependencies are done, at most
//! `max_concurrency` calls at once, and records outcomes in plan order.
//!
//! One loop owns all run state (variables, records, the ready queue, map steps' items), so
//! nothing is locked: tool calls run as tasks and report back through their join handles. A
//! step reads the variables when it starts; validation guarantees every variable it reads from
//! another step was bound by an ancestor, so what it reads never depends on timing.
//!
//! A map step (`expand_on`) expands when it becomes ready: its items (`ID-0`, … or `ID[KEY]`)
//! join the ready queue right behind it, run like steps, and the map step settles when the
//! last item does, with its binds collected as lists in item order.

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
use crate::program::{
    DEFAULT_MAX_CONCURRENCY, ItemValues, Program, expand_items, item_ids, resolve_args,
};
use crate::redact::Redactor;
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
    /// Values of the environment variables the plan lists under `env:` (the engine reads no
    /// environment itself). They are redacted from records, variables and events.
    pub env: BTreeMap<String, String>,
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
            env: BTreeMap::new(),
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

/// A unit of work in the ready queue: a step, or item `k` of a map step. Ordered by plan
/// position, then item, so that with one call at a time the order is the plan's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Work {
    step: usize,
    /// 0 for the step itself, `k + 1` for item `k`.
    slot: usize,
}

/// A map step between its expansion and its last item.
struct MapRun {
    items: Items,
    ids: Vec<Arc<str>>,
    keys: Option<Vec<Value>>,
    records: Vec<Option<Record>>,
    /// Per bind (in the step's bind order), the value selected from each item's result.
    collected: Vec<Vec<Value>>,
    remaining: usize,
    failed: Vec<usize>,
    started: Instant,
}

/// A map step's list: shared with the variable it names when `expand_on` is `${name}`, so a
/// large list is not copied; otherwise its own.
enum Items {
    Shared(Arc<Value>),
    Owned(Vec<Value>),
}

impl Items {
    fn as_slice(&self) -> &[Value] {
        match self {
            Items::Shared(value) => value.as_array().map_or(&[], Vec::as_slice),
            Items::Owned(items) => items,
        }
    }
}

struct Call {
    step: usize,
    item: Option<usize>,
    run_id: Arc<str>,
    step_id: Arc<str>,
    tool_name: Arc<str>,
    tool: Arc<dyn Tool>,
    args: Value,
    retry: RetryPolicy,
    timeout: Option<Duration>,
    cancel: CancellationToken,
    events: Option<Arc<dyn EventSink>>,
    redactor: Arc<Redactor>,
}

struct Finished {
    step: usize,
    item: Option<usize>,
    result: Result<Value, ToolError>,
    attempts: u32,
    elapsed: Duration,
}

struct Scheduler<'p> {
    program: &'p Program,
    run_id: Arc<str>,
    events: Option<Arc<dyn EventSink>>,
    redactor: Arc<Redactor>,
    vars: BTreeMap<String, Arc<Value>>,
    env: BTreeMap<String, Value>,
    remaining: Vec<usize>,
    records: Vec<Option<Record>>,
    outcomes: Vec<Option<Outcome>>,
    ready: BinaryHeap<Reverse<Work>>,
    maps: HashMap<usize, MapRun>,
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
    let env = program.env_values(&options.env);
    let mut scheduler = Scheduler {
        program,
        run_id: run_id.clone(),
        events: options.events.clone(),
        redactor: Arc::new(Redactor::new(env.values().filter_map(Value::as_str))),
        vars: program.initial_variables(&options.inputs),
        env,
        remaining: program.deps.deps.iter().map(Vec::len).collect(),
        records: {
            // One slot more for `__meta__`, so the final records can reuse this allocation.
            let mut records = Vec::with_capacity(n + 1);
            records.resize_with(n, || None);
            records
        },
        outcomes: vec![None; n],
        ready: BinaryHeap::new(),
        maps: HashMap::new(),
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
            scheduler.record_not_run(i, false, reason);
            scheduler.settle(i, Outcome::Blocked);
        } else if scheduler.remaining[i] == 0 && scheduler.records[i].is_none() {
            scheduler.ready.push(Reverse(Work { step: i, slot: 0 }));
        }
    }

    let mut running: JoinSet<Finished> = JoinSet::new();
    // Task id → work, to fail the right step or item if a tool panics.
    let mut tasks: HashMap<tokio::task::Id, (usize, Option<usize>)> = HashMap::new();
    loop {
        while running.len() < limit && !options.cancel.is_cancelled() {
            let Some(Reverse(work)) = scheduler.ready.pop() else {
                break;
            };
            let item = work.slot.checked_sub(1);
            if item.is_none() && program.steps[work.step].expand.is_some() {
                // Expanding calls nothing: it only queues the items.
                scheduler.expand(work.step);
                continue;
            }
            if let Some(call) = scheduler.prepare(work.step, item, &options) {
                let handle = running.spawn(execute(call));
                tasks.insert(handle.id(), (work.step, item));
            }
        }
        let Some(joined) = running.join_next_with_id().await else {
            break;
        };
        match joined {
            Ok((id, finished)) => {
                tasks.remove(&id);
                scheduler.finish(finished);
            }
            // A tool that panics fails its step (or item); the run goes on.
            Err(join_error) => {
                if let Some((step, item)) = tasks.remove(&join_error.id()) {
                    let message = if join_error.is_panic() {
                        "the tool panicked"
                    } else {
                        "the tool's task was aborted"
                    };
                    let error = ToolError::new(codes::E_TOOL, message);
                    scheduler.finish(Finished {
                        step,
                        item,
                        result: Err(error),
                        attempts: 1,
                        elapsed: Duration::ZERO,
                    });
                }
            }
        }
    }

    scheduler.into_report(&options.run_id, started)
}

impl Scheduler<'_> {
    fn emit(&self, make: impl FnOnce() -> Event) {
        if let Some(sink) = &self.events {
            let mut event = make();
            self.redactor.event(&mut event);
            sink.emit(&event);
        }
    }

    /// Resolves the arguments of a ready step or item and checks them against the tool's
    /// schema; if either fails, the step or item fails here without calling its tool.
    fn prepare(
        &mut self,
        step_index: usize,
        item: Option<usize>,
        options: &RunOptions,
    ) -> Option<Call> {
        let step = &self.program.steps[step_index];
        let base = Scope {
            vars: Some(&self.vars),
            env: Some(&self.env),
            ..Scope::default()
        };
        let (step_id, resolved) = match item {
            None => (step.id.clone(), resolve_args(step, &base)),
            Some(k) => {
                let map = &self.maps[&step_index];
                let values = ItemValues {
                    value: &map.items.as_slice()[k],
                    index: Value::from(k),
                    key: map.keys.as_ref().map(|keys| &keys[k]),
                };
                (map.ids[k].clone(), resolve_args(step, &values.scope(base)))
            }
        };
        match resolved {
            Ok(args) => Some(Call {
                step: step_index,
                item,
                run_id: self.run_id.clone(),
                step_id,
                tool_name: step.tool_name.clone(),
                tool: step.tool.clone(),
                args,
                retry: step.retry.clone(),
                timeout: step.timeout,
                cancel: options.cancel.child_token(),
                events: self.events.clone(),
                redactor: self.redactor.clone(),
            }),
            Err(error) => {
                self.finish_work(step_index, item, Err(error), 0, Duration::ZERO);
                None
            }
        }
    }

    /// Turns a ready map step into items, or settles it at once when its list is empty or
    /// cannot be had.
    fn expand(&mut self, i: usize) {
        let program = self.program;
        let step = &program.steps[i];
        let Some(expand) = &step.expand else { return };
        let scope = Scope {
            vars: Some(&self.vars),
            env: Some(&self.env),
            ..Scope::default()
        };
        let expanded = self.shared_list(expand).map_or_else(
            || expand_items(expand, &scope).map(Items::Owned),
            |shared| Ok(Items::Shared(shared)),
        );
        let expanded = expanded.and_then(|items| {
            let names = item_ids(step, expand, items.as_slice(), &scope)?;
            Ok((items, names.ids, names.keys))
        });
        let (items, ids, keys) = match expanded {
            Ok(expanded) => expanded,
            Err(error) => {
                self.record_executed(i, Err(error), 0, Duration::ZERO);
                return;
            }
        };
        if items.as_slice().is_empty() {
            // Zero items: the step succeeds, and each bind collects an empty list.
            for (name, _) in &step.binds {
                self.vars
                    .insert(name.clone(), Arc::new(Value::Array(Vec::new())));
            }
            self.record_executed(i, Ok(Value::Array(Vec::new())), 0, Duration::ZERO);
            return;
        }
        let count = items.as_slice().len();
        for k in 0..count {
            self.ready.push(Reverse(Work {
                step: i,
                slot: k + 1,
            }));
        }
        self.maps.insert(
            i,
            MapRun {
                items,
                ids,
                keys,
                records: (0..count).map(|_| None).collect(),
                // Items finish in any order; each fills its own slot, so lists keep item order.
                collected: step
                    .binds
                    .iter()
                    .map(|_| vec![Value::Null; count])
                    .collect(),
                remaining: count,
                failed: Vec::new(),
                started: Instant::now(),
            },
        );
    }

    /// The variable a map step runs over, shared, when `expand_on` is exactly `${name}` (or
    /// `$var.name`) and names a list.
    fn shared_list(&self, expand: &crate::program::CompiledExpand) -> Option<Arc<Value>> {
        let crate::program::ExpandSource::Placeholder(template) = &expand.on else {
            return None;
        };
        let placeholder = template.as_placeholder()?;
        if !placeholder.path.is_empty() {
            return None;
        }
        let value = self.vars.get(placeholder.variable()?)?;
        value.is_array().then(|| value.clone())
    }

    fn finish(&mut self, finished: Finished) {
        let Finished {
            step,
            item,
            result,
            attempts,
            elapsed,
        } = finished;
        self.finish_work(
            step,
            item,
            result.map_err(StepError::from),
            attempts,
            elapsed,
        );
    }

    fn finish_work(
        &mut self,
        step: usize,
        item: Option<usize>,
        outcome: Result<Value, StepError>,
        attempts: u32,
        elapsed: Duration,
    ) {
        match item {
            None => {
                let outcome = outcome.and_then(|value| self.bind(step, value));
                self.record_executed(step, outcome, attempts, elapsed);
            }
            Some(k) => self.finish_item(step, k, outcome, attempts, elapsed),
        }
    }

    /// Stores the step's binds, all or none: a selector that does not match the result fails
    /// the step.
    fn bind(&mut self, index: usize, value: Value) -> Result<Value, StepError> {
        let selected = self.select_binds(index, &value)?;
        let step = &self.program.steps[index];
        for ((name, _), value) in step.binds.iter().zip(selected) {
            self.vars.insert(name.clone(), Arc::new(value));
        }
        Ok(value)
    }

    fn select_binds(&self, index: usize, value: &Value) -> Result<Vec<Value>, StepError> {
        let step = &self.program.steps[index];
        step.binds
            .iter()
            .map(|(name, selector)| {
                selector
                    .select(value, &self.vars)
                    .map_err(|error| StepError {
                        code: codes::E_BIND_UNRESOLVED.into(),
                        message: format!("bind `{name}`: {error}"),
                        details: None,
                    })
            })
            .collect()
    }

    fn finish_item(
        &mut self,
        step: usize,
        k: usize,
        outcome: Result<Value, StepError>,
        attempts: u32,
        elapsed: Duration,
    ) {
        let outcome = outcome.and_then(|value| {
            self.select_binds(step, &value)
                .map(|selected| (value, selected))
        });
        let Some(map) = self.maps.get_mut(&step) else {
            return;
        };
        let item_id = map.ids[k].clone();
        let (ok, result, error) = match outcome {
            Ok((value, selected)) => {
                for (list, value) in map.collected.iter_mut().zip(selected) {
                    list[k] = value;
                }
                (true, Some(value), None)
            }
            Err(error) => {
                map.failed.push(k);
                (false, None, Some(error))
            }
        };
        map.remaining -= 1;
        let last = map.remaining == 0;
        let event_error = error.as_ref().and_then(|e| serde_json::to_value(e).ok());
        map.records[k] = Some(Record {
            step_id: item_id.to_string(),
            ok,
            skipped: false,
            result,
            reason: None,
            error: error.map(Box::new),
            attempts,
            duration_ms: millis(elapsed),
        });
        self.emit(|| {
            let mut event =
                Event::new(EventKind::StepExecuted, &self.run_id).step(&item_id, attempts);
            event.ok = Some(ok);
            event.duration_ms = Some(millis(elapsed));
            event.error = event_error;
            event
        });
        if last {
            self.finish_map(step);
        }
    }

    /// The last item is done: the map step succeeds with the list of item results (and its
    /// binds become lists) if every item succeeded, and fails naming the failed items if not.
    fn finish_map(&mut self, step: usize) {
        let program = self.program;
        let Some(map) = self.maps.get_mut(&step) else {
            return;
        };
        let elapsed = map.started.elapsed();
        let outcome = if map.failed.is_empty() {
            let collected = std::mem::take(&mut map.collected);
            for ((name, _), list) in program.steps[step].binds.iter().zip(collected) {
                self.vars.insert(name.clone(), Arc::new(Value::Array(list)));
            }
            // The items' records hold their results, and binds collect them as lists: the
            // step's own record only counts them (a copy of every result would double a
            // large map's memory and output).
            Ok(serde_json::json!({"items": map.records.len()}))
        } else {
            map.failed.sort_unstable();
            let total = map.records.len();
            let shown: Vec<String> = map
                .failed
                .iter()
                .take(10)
                .map(|&k| format!("`{}`", map.ids[k]))
                .collect();
            let more = map.failed.len().saturating_sub(shown.len());
            let mut message = format!(
                "{} of {total} items failed: {}",
                map.failed.len(),
                shown.join(", ")
            );
            if more > 0 {
                message.push_str(&format!(" and {more} more"));
            }
            Err(StepError {
                code: "E_MAP_ITEMS_FAILED".into(),
                message,
                details: None,
            })
        };
        self.record_executed(step, outcome, 0, elapsed);
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
            error: error.map(Box::new),
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
        self.records[index] = Some(not_run_record(step_id, skipped, reason));
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
                    self.ready.push(Reverse(Work { step: d, slot: 0 }));
                } else {
                    let reason = format!("dependency not satisfied: {}", json_list(&unsatisfied));
                    self.record_not_run(d, true, reason);
                    self.outcomes[d] = Some(Outcome::Skipped);
                    done.push(d);
                }
            }
        }
    }

    fn into_report(mut self, run_id: &str, started: Instant) -> RunReport {
        // Steps (and items) that a cancellation kept from starting.
        for i in 0..self.records.len() {
            if self.records[i].is_none() {
                self.records[i] = Some(not_run_record(
                    &self.program.steps[i].id,
                    true,
                    "run cancelled before the step started".to_owned(),
                ));
                self.outcomes[i] = Some(Outcome::Skipped);
            }
        }
        for map in self.maps.values_mut() {
            for (k, record) in map.records.iter_mut().enumerate() {
                if record.is_none() {
                    *record = Some(not_run_record(
                        &map.ids[k],
                        true,
                        "run cancelled before the item started".to_owned(),
                    ));
                }
            }
        }
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
        let meta = Record {
            step_id: META_STEP_ID.to_owned(),
            ok: status == TaskStatus::Completed,
            skipped: false,
            result: None,
            reason: Some(format!("{summary}; task_status={status}")),
            error: None,
            attempts: 0,
            duration_ms: millis(elapsed),
        };
        let mut records: Vec<Record> = if self.maps.is_empty() {
            // `map` over `into_iter` collects in place: no second copy of the records.
            self.records
                .into_iter()
                .map(|record| record.unwrap_or_else(unreachable_record))
                .collect()
        } else {
            // A map step's items come right before the step's own record.
            let items: usize = self.maps.values().map(|m| m.records.len()).sum();
            let mut records = Vec::with_capacity(self.records.len() + items + 1);
            for (i, record) in self.records.into_iter().enumerate() {
                if let Some(map) = self.maps.remove(&i) {
                    records.extend(
                        map.records
                            .into_iter()
                            .map(|r| r.unwrap_or_else(unreachable_record)),
                    );
                }
                records.push(record.unwrap_or_else(unreachable_record));
            }
            records
        };
        records.push(meta);
        let mut variables = self.vars;
        if !self.redactor.is_empty() {
            for record in &mut records {
                self.redactor.record(record);
            }
            variables
                .values_mut()
                .for_each(|value| self.redactor.value(Arc::make_mut(value)));
        }
        RunReport {
            run_id: run_id.to_owned(),
            plan_id: self.program.plan_id.to_string(),
            task_status: status,
            records,
            variables,
        }
    }
}

fn not_run_record(step_id: &str, skipped: bool, reason: String) -> Record {
    Record {
        step_id: step_id.to_owned(),
        ok: false,
        skipped,
        result: None,
        reason: Some(reason),
        error: None,
        attempts: 0,
        duration_ms: 0,
    }
}

/// Never produced: `into_report` fills every slot first. Kept total so that a bug shows as an
/// odd record rather than a panic.
fn unreachable_record() -> Record {
    not_run_record(
        "",
        true,
        "internal error: the step was never settled".to_owned(),
    )
}

/// Calls the tool, retrying retryable errors as the step's policy allows.
async fn execute(call: Call) -> Finished {
    let started = Instant::now();
    let finished = |result: Result<Value, ToolError>, attempts: u32| Finished {
        step: call.step,
        item: call.item,
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
            self.redactor.event(&mut event);
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
