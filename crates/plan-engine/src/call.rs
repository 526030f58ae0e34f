//! One tool call, as steps, map items and block nodes all make it: attempts bounded by
//! `timeout_ms`, retryable errors tried again with backoff, events for each attempt, and the
//! attempts kept for the ledger.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use plan_graph::RetryPolicy;
use plan_types::{Event, EventKind, EventSink};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::guard::Guard;
use crate::redact::Redactor;
use crate::retry;
use plan_ports::{Progress, Tool, ToolContext, ToolError, codes};

/// What every tool call of a run shares.
#[derive(Clone)]
pub(crate) struct CallContext {
    pub(crate) run_id: Arc<str>,
    pub(crate) events: Option<Arc<dyn EventSink>>,
    pub(crate) redactor: Arc<Redactor>,
    pub(crate) cancel: CancellationToken,
    /// The plan's guards, which block nodes check too.
    pub(crate) guard: Option<Arc<Guard>>,
    pub(crate) jitter_seed: Option<u64>,
    /// Where tools' printed lines go (`run -v`).
    pub(crate) output: Option<plan_ports::OutputSink>,
    /// The folder every call's programs must stay in (`RunOptions::confined_to`).
    pub(crate) confined_to: Option<Arc<std::path::Path>>,
    /// Attempts calls made before they were run again (`Restored::earlier_attempts`), by id.
    pub(crate) earlier: Arc<std::collections::BTreeMap<String, u32>>,
    /// Every variable name the plan can define: what a missing variable's message suggests
    /// (`Scope::names`), the same whatever the timing.
    pub(crate) variable_names: Arc<[String]>,
    /// The plan answers (`chat.respond`): it talks to a chat, so each call is shown to it
    /// first (`assistant.delta`). A plan that does not answer pays nothing for it (it cost
    /// 20% of a 100,000-step run: see docs/benchmarks.md).
    pub(crate) chat: bool,
}

impl CallContext {
    /// The attempts call `id` made before this run of it: its first attempt now is the next.
    pub(crate) fn earlier(&self, id: &str) -> u32 {
        self.earlier.get(id).copied().unwrap_or(0)
    }

    /// Admits a call made in this run (see [`crate::admit::admit`]): the run's guards count
    /// it, the run's secrets are redacted from what waits.
    pub(crate) fn admit(
        &self,
        resolved: Result<Value, plan_types::StepError>,
        gate: &crate::admit::Gate<'_>,
        approvals: &plan_types::Approvals,
    ) -> crate::admit::Admission {
        crate::admit::admit(
            resolved,
            gate,
            approvals,
            self.guard.as_deref(),
            &self.redactor,
        )
    }
}

/// A call made inside a running step (a block's node, a task's call, the workspace's context
/// update): what to call, and how.
pub(crate) struct Inner<'a> {
    /// Its id in records and events (`review/check#2`, `T1/implement#1`).
    pub(crate) id: &'a str,
    pub(crate) tool_name: &'a Arc<str>,
    pub(crate) tool: &'a Arc<dyn Tool>,
    pub(crate) retry: RetryPolicy,
    pub(crate) timeout: Option<Duration>,
    /// The folder the tool works in (a task's worktree).
    pub(crate) working_dir: Option<Arc<std::path::Path>>,
    /// Attempts made before (see [`ToolCall::earlier`]).
    pub(crate) earlier: u32,
}

/// How a call made through [`CallContext::make`] ended.
pub(crate) enum Made {
    /// It ran, or admission refused it (`attempts` 0, nothing called): its outcome.
    Done {
        outcome: Result<Value, plan_types::StepError>,
        attempts: u32,
        took: Duration,
    },
    /// It waits for a decision: admission held it for an approval (nothing was called), or
    /// it was called and asked a person for input (the question).
    Waiting(plan_types::PendingApproval),
}

impl CallContext {
    /// Makes an inner call the one way every call is made: admitted (its approval, the run's
    /// guards), then [`CallContext::call_admitted`]. The scheduler makes a step's own call the
    /// same way, in two halves: it admits in its loop and spawns the second half
    /// ([`StepCall::execute`]).
    pub(crate) async fn make(
        &self,
        call: Inner<'_>,
        resolved: Result<Value, plan_types::StepError>,
        gate: &crate::admit::Gate<'_>,
        approvals: &plan_types::Approvals,
    ) -> Made {
        let (args, approvals_off, asked) = match self.admit(resolved, gate, approvals) {
            crate::admit::Admission::Call {
                args,
                approvals_off,
                asked,
            } => (args, approvals_off, asked),
            crate::admit::Admission::Fail(error) => {
                return Made::Done {
                    outcome: Err(error),
                    attempts: 0,
                    took: Duration::ZERO,
                };
            }
            crate::admit::Admission::Wait(pending) => return Made::Waiting(pending),
        };
        let call = ToolCall {
            step_id: Arc::from(call.id),
            tool_name: call.tool_name.clone(),
            tool: call.tool.clone(),
            args,
            retry: call.retry,
            timeout: call.timeout,
            working_dir: call.working_dir,
            approvals_off,
            next_question: asked.next,
            answers: asked.answers,
            earlier: call.earlier,
        };
        self.call_admitted(call, gate.waits_as).await
    }

    /// The second half of every call, admitted already: called with its retries and timeout,
    /// its outcome what the tool said; a call that failed asking a person for input waits, as
    /// `waits_as`, for the answer, as an approval does. The one place a call's asking is read.
    pub(crate) async fn call_admitted(&self, call: ToolCall, waits_as: &str) -> Made {
        let (tool_name, next_question) = (call.tool_name.clone(), call.next_question);
        let started = Instant::now();
        let finished = call_tool(self, call).await;
        let outcome = finished.result.map_err(plan_types::StepError::from);
        if let Err(error) = &outcome
            && let Some(request) =
                crate::admit::input_request(waits_as, next_question, &tool_name, error)
        {
            return Made::Waiting(crate::admit::kept_question(request, &self.redactor));
        }
        Made::Done {
            outcome,
            attempts: finished.attempts,
            took: started.elapsed(),
        }
    }

    /// The record of call `id` that ended so (a block node's, a task's call's), redacted as
    /// every record is ([`executed_record`]).
    pub(crate) fn record(
        &self,
        id: &str,
        outcome: Result<Arc<Value>, plan_types::StepError>,
        attempts: u32,
        took: Duration,
    ) -> plan_types::Record {
        executed_record(id, outcome, attempts, took, &self.redactor)
    }
}

/// The record of a call that ran (or was refused before it ran, with 0 attempts), redacted:
/// the one function that makes one, for steps and map items (the scheduler, which holds the
/// run's redactor and makes a context per call, calls it itself) and block nodes and task
/// calls ([`CallContext::record`]).
pub(crate) fn executed_record(
    id: &str,
    outcome: Result<Arc<Value>, plan_types::StepError>,
    attempts: u32,
    took: Duration,
    redactor: &Redactor,
) -> plan_types::Record {
    let (ok, result, error) = match outcome {
        Ok(value) => (true, Some(value), None),
        Err(error) => (false, None, Some(Box::new(error))),
    };
    let mut record = plan_types::Record {
        step_id: id.to_owned(),
        ok,
        skipped: false,
        result,
        reason: None,
        error,
        attempts,
        duration_ms: millis(took),
        upstream: None,
    };
    redactor.record(&mut record);
    record
}

/// How a step's work ended, for the scheduler to settle.
pub(crate) struct Finished {
    pub(crate) step: usize,
    pub(crate) item: Option<usize>,
    /// A block's node records, a task's calls' records, in the order they ran.
    pub(crate) nested: Vec<plan_types::Record>,
    pub(crate) end: WorkEnd,
}

/// Whether a step's work is done, and if not what it waits for.
pub(crate) enum WorkEnd {
    /// As a call ends ([`Made`]): its outcome, or (a step's or map item's call that asked a
    /// person for input) the question it waits on, unsettled until the answer makes it again.
    /// A block or task ends so too, as one attempt (its calls count their own).
    Call(Made),
    /// A block or task stopped to wait: where it stands, and for what.
    Stopped(Value, plan_types::PendingApproval),
}

/// A step's or map item's own call, with where its outcome goes.
pub(crate) struct StepCall {
    pub(crate) step: usize,
    pub(crate) item: Option<usize>,
    pub(crate) context: CallContext,
    pub(crate) call: ToolCall,
}

impl StepCall {
    /// Calls the step's (or item's) tool: the scheduler's second half of a call,
    /// [`CallContext::call_admitted`] (it admitted the call in its loop).
    pub(crate) async fn execute(self) -> Finished {
        let id = self.call.step_id.clone();
        Finished {
            step: self.step,
            item: self.item,
            nested: Vec::new(),
            end: WorkEnd::Call(self.context.call_admitted(self.call, &id).await),
        }
    }
}

/// How a tool call (with its retries) ended.
pub(crate) struct ToolFinished {
    pub(crate) result: Result<Value, ToolError>,
    pub(crate) attempts: u32,
}

/// The reason on the `tool.called` event of a high-risk call that ran with approvals off.
pub(crate) const APPROVALS_OFF: &str = "high risk, run without an approval: approvals are off";

/// One tool call: what to call, with what, and how to retry and bound it. Steps, map items
/// and block nodes all make their calls this way.
pub(crate) struct ToolCall {
    pub(crate) step_id: Arc<str>,
    pub(crate) tool_name: Arc<str>,
    pub(crate) tool: Arc<dyn Tool>,
    pub(crate) args: Value,
    pub(crate) retry: RetryPolicy,
    pub(crate) timeout: Option<Duration>,
    /// The folder the tool works in (a task's worktree).
    pub(crate) working_dir: Option<Arc<std::path::Path>>,
    /// A high-risk call made only because approvals are off: its `tool.called` events say so.
    pub(crate) approvals_off: bool,
    /// Answers to the questions the call asked before (`ToolContext::answers`).
    pub(crate) answers: Option<Arc<[plan_ports::Answer]>>,
    /// The number the call's next question takes (`admit::Asked::next`).
    pub(crate) next_question: usize,
    /// Attempts the call made before (an earlier run of it, since run again): its attempts
    /// go on counting from there, so each has an identity of its own (a queue job id). The
    /// retry policy's budget is for this run's attempts.
    pub(crate) earlier: u32,
}

/// Calls a tool, retrying retryable errors as `retry` allows; each attempt is bounded by
/// `timeout` and stops when the run is cancelled.
pub(crate) async fn call_tool(context: &CallContext, call: ToolCall) -> ToolFinished {
    let ToolCall {
        step_id,
        tool_name,
        tool,
        mut args,
        retry,
        timeout,
        working_dir,
        approvals_off,
        answers,
        next_question: _,
        earlier,
    } = call;
    let emit = |kind: EventKind, attempt: u32, fill: &dyn Fn(&mut Event)| {
        if let Some(sink) = &context.events {
            let mut event = Event::new(kind, &context.run_id).step(&step_id, attempt);
            event.tool = Some(tool_name.clone());
            fill(&mut event);
            context.redactor.event(&mut event);
            sink.emit(&event);
        }
    };
    let first = earlier.saturating_add(1);
    if context.chat && context.events.is_some() {
        // What is about to be called, as a chat shows it: the input as a table, its secrets
        // taken out before it is laid out (an escaped `|` would hide one from the redactor).
        let table = crate::chat::input_table(&args, &|text| context.redactor.string(text));
        emit(EventKind::AssistantDelta, first, &|event| {
            event.text = Some(table.clone());
        });
    }
    // The last attempt the retry policy allows in this run of the call.
    let last = earlier.saturating_add(retry.attempts.max(1));
    let mut attempt = first;
    loop {
        emit(EventKind::ToolCalled, attempt, &|event| {
            if approvals_off {
                event.reason = Some(APPROVALS_OFF.to_owned());
            }
        });
        let attempt_started = Instant::now();
        let attempt_started_at = SystemTime::now();
        let attempt_cancel = context.cancel.child_token();
        let progress = context.events.clone().map(|sink| {
            let (run_id, step_id, tool_name) =
                (context.run_id.clone(), step_id.clone(), tool_name.clone());
            let redactor = context.redactor.clone();
            Progress::new(move |report| {
                let mut event =
                    Event::new(EventKind::ToolProgress, &run_id).step(&step_id, attempt);
                event.tool = Some(tool_name.clone());
                event.progress = Some(report);
                if let Some(progress) = &mut event.progress
                    && let Some(message) = &mut progress.message
                {
                    redactor.string(message);
                }
                sink.emit(&event);
            })
        });
        let ctx = ToolContext {
            run_id: context.run_id.clone(),
            step_id: step_id.clone(),
            attempt,
            cancel: attempt_cancel.clone(),
            progress,
            deadline: timeout.map(|limit| attempt_started_at + limit),
            output: context.output.clone().map(|sink| {
                let (step_id, redactor) = (step_id.clone(), context.redactor.clone());
                plan_ports::Output::new(move |stream, line| {
                    let mut line = line.to_owned();
                    redactor.string(&mut line);
                    sink(&step_id, stream, &line);
                })
            }),
            working_dir: working_dir.clone(),
            confined_to: context.confined_to.clone(),
            answers: answers.clone(),
        };
        // The last attempt the policy allows gets the arguments themselves; an earlier one a
        // copy (compact: a tool such as `echo` keeps it in its result).
        let attempt_args = if attempt < last {
            plan_vars::compact(&args)
        } else {
            std::mem::take(&mut args)
        };
        let invocation = with_timeout(tool.call(attempt_args, ctx), timeout);
        tokio::pin!(invocation);
        let result = tokio::select! {
            biased;
            () = context.cancel.cancelled() => {
                // The tool sees the cancellation too (its token is a child of the run's): it
                // gets a moment to stop what it started (exec stops its process group) before
                // it is dropped. Whatever it returns, the call was cancelled: resume runs it
                // again.
                let _ = tokio::time::timeout(CANCEL_GRACE, &mut invocation).await;
                Err(ToolError::new(codes::E_CANCELLED, "the run was cancelled while the tool ran"))
            }
            result = &mut invocation => result,
        };
        // Tells a tool that outlives its attempt (timed out, cancelled) to stop.
        attempt_cancel.cancel();
        let attempt_ms = millis(attempt_started.elapsed());
        let error = match result {
            Ok(value) => {
                emit(EventKind::ToolSucceeded, attempt, &|event| {
                    event.duration_ms = Some(attempt_ms)
                });
                if plan_types::is_answer_tool(&tool_name)
                    && let Some(text) = value.get("text").and_then(Value::as_str)
                    && !text.is_empty()
                {
                    emit(EventKind::AssistantFinal, attempt, &|event| {
                        event.text = Some(text.to_owned());
                    });
                }
                return ToolFinished {
                    result: Ok(value),
                    attempts: attempt,
                };
            }
            Err(error) => error,
        };
        emit(EventKind::ToolFailed, attempt, &|event| {
            event.duration_ms = Some(attempt_ms);
            event.error = serde_json::to_value(&error).ok();
        });
        let never_retried =
            error.code == codes::E_ARGS_INVALID || error.code == codes::E_ARGS_UNRESOLVED;
        let again =
            error.retryable && !never_retried && attempt < last && !context.cancel.is_cancelled();
        if !again {
            return ToolFinished {
                result: Err(error),
                attempts: attempt,
            };
        }
        let unit = retry::jitter_unit(context.jitter_seed, &step_id, attempt);
        // Backoff grows with this run's attempts, as if the earlier ones were not there.
        let delay = retry::delay(&retry, attempt - earlier, error.retry_after, unit);
        emit(EventKind::StepRetrying, attempt + 1, &|event| {
            event.tool = None;
            event.delay_ms = Some(millis(delay));
            event.error = serde_json::to_value(&error).ok();
        });
        tokio::select! {
            () = context.cancel.cancelled() => return ToolFinished { result: Err(error), attempts: attempt },
            () = tokio::time::sleep(delay) => {}
        }
        attempt += 1;
    }
}

/// How long a cancelled tool may take to stop what it started before it is dropped.
const CANCEL_GRACE: Duration = Duration::from_secs(3);

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

pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
