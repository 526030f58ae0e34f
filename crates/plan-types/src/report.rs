//! How a run ended: its [`TaskStatus`] and the [`RunReport`] that `--json` prints.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::approval::PendingApproval;
use crate::record::Record;

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
    /// The run's process died before it finished (killed, crashed, the machine went down):
    /// only in reports read from a ledger; `resume` continues it.
    Interrupted,
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
            TaskStatus::Stopped | TaskStatus::Interrupted => 130,
            TaskStatus::Running => 0,
        }
    }

    /// Every status, in the order help texts list them.
    pub const ALL: [TaskStatus; 8] = [
        TaskStatus::Completed,
        TaskStatus::Failed,
        TaskStatus::Partial,
        TaskStatus::Blocked,
        TaskStatus::Waiting,
        TaskStatus::Stopped,
        TaskStatus::Running,
        TaskStatus::Interrupted,
    ];

    /// The status `name` names, in any case (`completed`, `FAILED`); `Err` lists them.
    pub fn named(name: &str) -> Result<TaskStatus, String> {
        (TaskStatus::ALL.into_iter())
            .find(|status| status.as_str().eq_ignore_ascii_case(name))
            .ok_or_else(|| {
                let names: Vec<&str> = TaskStatus::ALL.iter().map(|s| s.as_str()).collect();
                format!("`{name}` is not a run's status ({})", names.join(", "))
            })
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
            TaskStatus::Interrupted => "INTERRUPTED",
        }
    }

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
            TaskStatus::Interrupted => "the run's process died before it finished",
        }
    }
}

impl fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A block step's state: `READY` before it starts (or between nodes, which a ledger cannot
/// see), `BUSY` while a node runs, `WAITING` for a decision, then `DONE`, `FAILED` or
/// `SKIPPED`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum BlockPhase {
    /// Not started.
    Ready,
    /// A node is running.
    Busy,
    /// Stopped at a node until an approval or a recovery is decided.
    Waiting,
    /// Finished with its last node's result.
    Done,
    /// Failed (its record says why).
    Failed,
    /// Skipped by its dependencies or its condition.
    Skipped,
}

/// Where a block step is, as `status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockState {
    /// The block step.
    pub step_id: String,
    /// Its state.
    pub state: BlockPhase,
    /// The node it is at (`check`, or `inner/deploy` in a nested block): the one waiting or
    /// running, or the last one that ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

/// A run's outcome: the `--json` output of `plan-cli run`, `status` and `resume`.
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
    pub blocks: Vec<BlockState>,
    /// The run's plan was re-planned after a failure (`run --replan`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replanned: bool,
    /// How many revisions of its plan the run has had after the first.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub revisions: u32,
    /// The run's answer: the text of its `chat.respond` calls that succeeded, in record
    /// order, a blank line between two (absent when the plan gives none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// The built-in tool whose text is the run's answer (the map-style executor's chat surface):
/// its calls' texts become [`RunReport::answer`] and `assistant.final` events.
pub const CHAT_RESPOND: &str = "chat.respond";

/// The other name [`CHAT_RESPOND`] goes by in plans.
pub const RESPOND: &str = "respond";

/// Whether a tool name is the answer tool's ([`CHAT_RESPOND`] or [`RESPOND`]).
pub fn is_answer_tool(tool: &str) -> bool {
    tool == CHAT_RESPOND || tool == RESPOND
}
