//! What a run reports while it goes: one [`Event`] per thing that happened, one NDJSON line
//! each.

use std::sync::Arc;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::approval::PendingApproval;
use crate::report::TaskStatus;

/// The kinds of event, named as in the NDJSON output (`run.started`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventKind {
    /// The run began.
    #[serde(rename = "run.started")]
    RunStarted,
    /// An attempt of a step called its tool.
    #[serde(rename = "tool.called")]
    ToolCalled,
    /// The tool returned a result.
    #[serde(rename = "tool.succeeded")]
    ToolSucceeded,
    /// The tool failed (the step may still retry).
    #[serde(rename = "tool.failed")]
    ToolFailed,
    /// A failed attempt will be tried again after a delay.
    #[serde(rename = "step.retrying")]
    StepRetrying,
    /// A step will not run (failed or unknown dependency).
    #[serde(rename = "step.skipped")]
    StepSkipped,
    /// A step finished, successfully or not.
    #[serde(rename = "step.executed")]
    StepExecuted,
    /// The run ended.
    #[serde(rename = "run.finished")]
    RunFinished,
    /// A block step (or nested block) started; `step_id` is its path.
    #[serde(rename = "block.entered")]
    BlockEntered,
    /// A block moved from one node to the next (`from`, `to`, and the `condition` that matched).
    #[serde(rename = "block.transition")]
    BlockTransition,
    /// A running tool reported progress (`progress` has how far).
    #[serde(rename = "tool.progress")]
    ToolProgress,
    /// The run halted until the calls in `pending` are approved.
    #[serde(rename = "approval.awaiting")]
    ApprovalAwaiting,
    /// The run's plan was replaced by a new revision after a failure (`run --replan`):
    /// `attempt` is the revision's number, `reason` the failure it answers.
    #[serde(rename = "plan.replanned")]
    PlanReplanned,
    /// A task step's status changed (`reason` is the new one: `in_progress`, `verifying`,
    /// `verified`, `merging`, `completed`, `failed`, `abandoned`); `attempt` is its attempt.
    #[serde(rename = "task.changed")]
    TaskChanged,
    /// A call is about to be made: `text` shows its input as a table (`| argument | value |`),
    /// once per call, before its first attempt (the map-style executor's chat stream).
    #[serde(rename = "assistant.delta")]
    AssistantDelta,
    /// A `chat.respond` call gave the run's answer: `text` is it.
    #[serde(rename = "assistant.final")]
    AssistantFinal,
}

/// One event. Fields that do not apply to its kind are left out of the JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// What happened.
    #[serde(rename = "type")]
    pub kind: EventKind,
    /// The run.
    pub run_id: Arc<str>,
    /// The step, for step and tool events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_id: Option<Arc<str>>,
    /// The attempt (0 for run events and skips).
    pub attempt: u32,
    /// When, in RFC 3339 with milliseconds (UTC).
    pub ts: String,
    /// The plan, on `run.started`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_id: Option<Arc<str>>,
    /// The tool, on tool events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<Arc<str>>,
    /// Whether the step succeeded, on `step.executed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ok: Option<bool>,
    /// Milliseconds taken, on `tool.succeeded`, `tool.failed` and `step.executed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// The error, on `tool.failed` and failed `step.executed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
    /// The delay before the next attempt, on `step.retrying`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    /// Why, on `step.skipped`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The outcome, on `run.finished`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_status: Option<TaskStatus>,
    /// The node left, on `block.transition`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// The node entered, on `block.transition`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// The branch condition that matched, on `block.transition` (none for a linear one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
    /// What waits for an approval, on `approval.awaiting`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<Vec<PendingApproval>>,
    /// How far a tool got, on `tool.progress`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<ProgressReport>,
    /// What the assistant says, on `assistant.delta` (a call's input as a table) and
    /// `assistant.final` (the answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

impl Event {
    /// An event of this kind, now, with every optional field empty.
    pub fn new(kind: EventKind, run_id: &Arc<str>) -> Self {
        Event {
            kind,
            run_id: run_id.clone(),
            step_id: None,
            attempt: 0,
            ts: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            plan_id: None,
            tool: None,
            ok: None,
            duration_ms: None,
            error: None,
            delay_ms: None,
            reason: None,
            task_status: None,
            from: None,
            to: None,
            condition: None,
            pending: None,
            progress: None,
            text: None,
        }
    }

    /// The same event, about attempt `attempt` of step `step_id`.
    #[must_use]
    pub fn step(mut self, step_id: &Arc<str>, attempt: u32) -> Self {
        self.step_id = Some(step_id.clone());
        self.attempt = attempt;
        self
    }
}

/// Receives events as they happen. Called from the engine's tasks: keep it quick.
pub trait EventSink: Send + Sync {
    /// Takes one event.
    fn emit(&self, event: &Event);
}

/// Sends every event to each of several sinks.
pub struct Fanout(pub Vec<Arc<dyn EventSink>>);

impl EventSink for Fanout {
    fn emit(&self, event: &Event) {
        for sink in &self.0 {
            sink.emit(event);
        }
    }
}

/// One progress report: how far, out of how much (when known), and what is happening.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProgressReport {
    /// How far the tool got (in its own units; increases).
    pub progress: f64,
    /// The total, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
    /// What is happening.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}
