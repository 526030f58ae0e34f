//! Where a task step stands (the task lifecycle of an `execute-state.json`): kept in the ledger
//! as the step's checkpoint after every change, so that a resumed run goes on from there and
//! the state file reads it back.

use serde::{Deserialize, Serialize};

/// The name of a task's merge wait inside the task: a merge that halted the run for a person
/// (a conflict under `on_conflict: wait`, or a merge git refused) waits for a decision as
/// `TASK/merge#N` (`CallPath::step(TASK).then(MERGE, N)`), N counting the task's waits
/// ([`TaskState::conflict_waits`]). Rejecting it abandons the task.
pub const MERGE: &str = "merge";

/// A task's status: exactly the state file's task status values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskPhase {
    /// Not started.
    #[default]
    Pending,
    /// Being implemented (an attempt's implement call runs).
    InProgress,
    /// Its checks run.
    Verifying,
    /// Passed its checks; waits in the merge queue.
    Verified,
    /// Being merged into the base branch.
    Merging,
    /// Merged.
    Completed,
    /// The last attempt failed; another follows.
    Failed,
    /// Failed its last allowed attempt (or was refused); its worktree is kept.
    Abandoned,
}

impl TaskPhase {
    /// The state file's word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskPhase::Pending => "pending",
            TaskPhase::InProgress => "in_progress",
            TaskPhase::Verifying => "verifying",
            TaskPhase::Verified => "verified",
            TaskPhase::Merging => "merging",
            TaskPhase::Completed => "completed",
            TaskPhase::Failed => "failed",
            TaskPhase::Abandoned => "abandoned",
        }
    }
}

/// A worktree's status: exactly the state file's worktree status values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorktreeStatus {
    /// Being created.
    Creating,
    /// In use.
    Active,
    /// Its branch is being merged.
    Merging,
    /// Removed after the merge.
    Cleaned,
    /// Kept for a person to look at.
    Abandoned,
}

/// A merge queue entry's status: exactly the state file's merge queue status values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QueueStatus {
    /// Back to waiting for verification (its merge conflicted).
    Pending,
    /// Verified, waiting for its turn.
    Ready,
    /// Being merged.
    Merging,
    /// Merged.
    Merged,
}

/// Why an attempt failed: exactly the state file's error types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskErrorKind {
    /// A check failed.
    VerificationFailed,
    /// The implement call failed, or changed nothing.
    ImplementationError,
    /// Merging into the base branch conflicted.
    MergeConflict,
}

/// One commit of a task's branch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskCommit {
    /// Its hash.
    pub hash: String,
    /// `implementation` (attempt 1) or `fix`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The attempt that made it.
    pub attempt: u32,
    /// Its message's first line.
    pub message: String,
    /// For a fix: the failure it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fixed: Option<String>,
}

/// One failed attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskError {
    /// The attempt.
    pub attempt: u32,
    /// Why it failed.
    #[serde(rename = "type")]
    pub kind: TaskErrorKind,
    /// What failed: the check's command, the implement call's tool, or `git merge`.
    pub step: String,
    /// What went wrong.
    pub message: String,
    /// When (RFC 3339).
    pub timestamp: String,
}

/// What the next attempt is told.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryFeedback {
    /// The attempt it is for.
    pub attempt: u32,
    /// The advice.
    pub feedback: String,
}

/// A task's place in the merge queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueEntry {
    /// Its status.
    pub status: QueueStatus,
    /// When it joined the queue (it is ordered by this).
    pub queued_at: String,
}

/// Everything known of one task step.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskState {
    /// Its status.
    pub status: TaskPhase,
    /// Attempts started so far.
    pub attempts: u32,
    /// Its worktree, while it has one.
    #[serde(default)]
    pub worktree_path: Option<String>,
    /// Its branch, while it has one.
    #[serde(default)]
    pub branch: Option<String>,
    /// When its worktree was made.
    #[serde(default)]
    pub worktree_created_at: Option<String>,
    /// Its worktree's status, once it has had one.
    #[serde(default)]
    pub worktree_status: Option<WorktreeStatus>,
    /// When its first attempt started.
    #[serde(default)]
    pub started_at: Option<String>,
    /// When it ended (merged or abandoned).
    #[serde(default)]
    pub completed_at: Option<String>,
    /// When it was merged.
    #[serde(default)]
    pub merged_at: Option<String>,
    /// The merge commit on the base branch.
    #[serde(default)]
    pub merge_commit: Option<String>,
    /// Its branch's commits, oldest first.
    #[serde(default)]
    pub commits: Vec<TaskCommit>,
    /// Its failed attempts.
    #[serde(default)]
    pub errors: Vec<TaskError>,
    /// The feedback given to its later attempts.
    #[serde(default)]
    pub retry_feedback: Vec<RetryFeedback>,
    /// Its merge queue entry, once verified.
    #[serde(default)]
    pub queue: Option<QueueEntry>,
    /// How many times merging halted the run for a person: a conflict under
    /// `on_conflict: wait`, or a merge git refused (uncommitted changes in the base's checkout).
    #[serde(default)]
    pub conflict_waits: u32,
}
