//! The stable, serializable types of a plan-cli run: what the engine produces, what the ledger
//! keeps and what `--json` prints. Serde only, no runtime: a program that reads records,
//! events or reports (or implements a ledger) depends on this crate alone.
//!
//! - [`Record`] is one step's outcome, [`StepError`] its error with an [`ErrorCode`];
//!   [`TaskStatus`] is how a run ended; [`RunReport`] is the `--json` object.
//! - [`Event`] is one line of the NDJSON event stream, sent to an [`EventSink`].
//! - [`Approvals`] are decisions on `risk: high` calls; [`PendingApproval`] is one that waits.
//! - [`Journal`] is the port the engine writes its ledger through, with [`Batch`]es of settled
//!   records, an optional [`BatchLog`] that makes a batch durable before it is committed, and
//!   [`Restored`] state for a resumed run.
//!
//! - [`TaskState`] is where a task step (a coding task in a git worktree) stands;
//!   [`task_id_problem`] says why an id cannot be a task's (it names a branch and a folder).
//!
//! - [`CallPath`] is a call's identity as a value (its step, then the block nodes and task
//!   calls it is inside, each with its run), rendered as the ids records and events carry.
//!
//! - [`json`] reads back JSON of any nesting depth.
//!
//! These shapes are a compatibility promise: they change only with a version bump.
#![deny(missing_docs)]

mod approval;
mod call_id;
mod code;
mod event;
mod journal;
pub mod json;
pub mod json_out;
mod record;
mod report;
mod risk;
mod task;
mod task_id;

pub use approval::{
    Approvals, MOST_QUESTION, PLAN_APPROVAL, PendingApproval, QUESTION_MARK, QUESTION_REASON,
    Questions, REDACTED, Verdict, kept_question_text, question_key, question_of, same_question,
};
pub use call_id::{CallPath, MapItem, Segment};
pub use code::ErrorCode;
pub use event::{Event, EventKind, EventSink, Fanout, ProgressReport};
pub use journal::{Batch, BatchLog, Durability, Journal, JournalError, Position, Restored, RunEnd};
pub use record::{
    CONTEXT_UPDATE_ID, META_STEP_ID, Record, StepError, is_reserved_id, is_unprintable, one_line,
    reasons, terminal_safe,
};
pub use report::{
    BlockPhase, BlockState, CHAT_RESPOND, RESPOND, RunReport, TaskStatus, is_answer_tool,
};
pub use risk::Risk;
pub use task::{
    MERGE, QueueEntry, QueueStatus, RetryFeedback, TaskCommit, TaskError, TaskErrorKind, TaskPhase,
    TaskState, WorktreeStatus,
};
pub use task_id::{MAX_TASK_ID_BYTES, task_id_problem};
