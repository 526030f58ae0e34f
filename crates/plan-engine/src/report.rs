//! What a run produces: one [`Record`] per step, in plan order, then `__meta__`.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::tool::ToolError;

/// How the run as a whole ended. Precedence: BLOCKED > FAILED > PARTIAL > COMPLETED.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TaskStatus {
    /// Every step succeeded.
    Completed,
    /// Some steps were skipped, none failed.
    Partial,
    /// A step failed.
    Failed,
    /// A step depends on a step the plan does not have.
    Blocked,
    /// The run halted for an approval.
    Waiting,
    /// The run was stopped (Ctrl+C) before it finished; `resume` continues it.
    Stopped,
    /// The run is still going (only in reports read from a ledger while it runs).
    Running,
}

impl TaskStatus {
    /// The process exit code of `plan-cli run` for this status.
    pub fn exit_code(self) -> i32 {
        match self {
            TaskStatus::Completed => 0,
            TaskStatus::Failed => 1,
            TaskStatus::Partial => 3,
            TaskStatus::Blocked => 4,
            TaskStatus::Waiting => 5,
            // The shell's convention for a process stopped by SIGINT.
            TaskStatus::Stopped => 130,
            TaskStatus::Running => 0,
        }
    }

    /// `COMPLETED`, `FAILED`, …
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Completed => "COMPLETED",
            TaskStatus::Partial => "PARTIAL",
            TaskStatus::Failed => "FAILED",
            TaskStatus::Blocked => "BLOCKED",
            TaskStatus::Waiting => "WAITING",
            TaskStatus::Stopped => "STOPPED",
            TaskStatus::Running => "RUNNING",
        }
    }
}

impl fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl TaskStatus {
    /// What `__meta__`'s reason says before `task_status=…`.
    pub fn summary(self) -> &'static str {
        match self {
            TaskStatus::Completed => "all steps succeeded",
            TaskStatus::Partial => "some steps were skipped",
            TaskStatus::Failed => "one or more steps failed",
            TaskStatus::Blocked => "one or more steps depend on unknown steps",
            TaskStatus::Waiting => "the run is waiting for an approval",
            TaskStatus::Stopped => "the run was stopped before it finished",
            TaskStatus::Running => "the run is still running",
        }
    }
}

impl Record {
    /// The `__meta__` record that ends every run's records.
    pub fn meta(status: TaskStatus, duration_ms: u64) -> Record {
        Record {
            step_id: plan_graph::META_STEP_ID.to_owned(),
            ok: status == TaskStatus::Completed,
            skipped: false,
            result: None,
            reason: Some(format!("{}; task_status={status}", status.summary())),
            error: None,
            attempts: 0,
            duration_ms,
            upstream: None,
        }
    }
}

/// A failed step's error as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepError {
    /// A stable code such as `E_TOOL` or `E_TIMEOUT`.
    pub code: String,
    /// What happened.
    pub message: String,
    /// Structured context, when the tool gave some.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
}

impl From<ToolError> for StepError {
    fn from(error: ToolError) -> Self {
        StepError {
            code: error.code,
            message: error.message,
            details: error.details.map(|details| *details),
        }
    }
}

/// The outcome of one step, as seed 000 shapes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// The step (or `__meta__`).
    pub step_id: String,
    /// Whether it succeeded.
    pub ok: bool,
    /// Whether it was skipped rather than run.
    pub skipped: bool,
    /// The tool's result, when it succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// Why it was skipped or blocked; for `__meta__`, the summary ending `task_status=…`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The error, when it failed. Boxed: most records have none, and a map's items make
    /// many records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Box<StepError>>,
    /// Attempts made (0 when it never ran).
    pub attempts: u32,
    /// Wall time from its first attempt to its end.
    pub duration_ms: u64,
    /// For a step skipped because of its dependencies: how each unsatisfied one ended
    /// (`failed`, `skipped`, `blocked`, `rejected`), so a failure upstream is told apart from
    /// a skip upstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<Box<BTreeMap<String, String>>>,
}

/// A call that waits for an approval: a `risk: high` step or map item, with the arguments it
/// would be called with; or, with `step_id` [`PLAN_APPROVAL`], the whole plan (`--mode
/// approval`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingApproval {
    /// The step or map item (`deploy`, `deploy[prod]`), or [`PLAN_APPROVAL`].
    pub step_id: String,
    /// The tool it would call (none for the plan, or a block step).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The resolved arguments (redacted), or a block's input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Value>,
    /// Why it waits, when not for a `risk: high` call: a block node that failed under
    /// `on_failure: wait` (approve to run it again, reject to fail the block).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The `reason`s of records of steps that did not run, where callers rebuild such records
/// (`plan-cli status` of a run that has not ended).
pub mod reasons {
    /// `when` was false, or every unsatisfied dependency was skipped by its own condition.
    pub const CONDITION_FALSE: &str = "condition false";
    /// A `risk: high` call without a decision yet.
    pub const AWAITING_APPROVAL: &str = "awaiting approval";
    /// Not started because the run halted for approvals.
    pub const WAITING_FOR_APPROVAL: &str = "not started: the run is waiting for an approval";
    /// Not started because the run was stopped.
    pub const STOPPED: &str = "the run stopped before it started";
}

/// The id under which the approval of a whole plan (`--mode approval`) is kept.
pub const PLAN_APPROVAL: &str = plan_graph::PLAN_APPROVAL_ID;

/// A finished run: the `--json` output of `plan-cli run`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    /// The run.
    pub run_id: String,
    /// The plan.
    pub plan_id: String,
    /// The outcome.
    pub task_status: TaskStatus,
    /// Every step in plan order, then `__meta__`.
    pub records: Vec<Record>,
    /// Variables at the end: inputs and every bind. Shared with the run, not copied: a
    /// plan's large lists appear here without a second copy.
    pub variables: BTreeMap<String, Arc<Value>>,
    /// What the run waits for, when it is `WAITING`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_approvals: Vec<PendingApproval>,
    /// Each block step's state and node, in plan order (absent for plans without blocks).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocks: Vec<crate::block::BlockState>,
}
