//! The plan-cli engine: runs a plan's steps as their dependencies allow, in parallel up to a
//! limit, with retries and timeouts, and returns seed 000's records in plan order.
//!
//! [`Program::compile`] binds a loaded [`plan_graph::Plan`] to the tools of a [`Registry`];
//! [`run`] executes it and returns a [`RunReport`]. Tools implement [`Tool`]; built-in ones
//! live in the `plan-tools` crate. Progress goes to an [`EventSink`] as [`Event`]s. The engine
//! never touches the terminal, files or the environment: callers decide where events go.
#![deny(missing_docs)]

mod approval;
mod block;
mod event;
mod guard;
mod journal;
mod program;
mod redact;
mod report;
mod retry;
mod run;
mod tool;

pub use approval::Approvals;
pub use block::{BlockPhase, BlockState, block_states};
pub use event::{Event, EventKind, EventSink, Fanout};
pub use journal::{Attempt, Batch, Journal, JournalError, Position, Restored, RunEnd};
pub use plan_graph::{Mode, Risk};
pub use program::{DEFAULT_MAX_CONCURRENCY, PlannedCall, Program};
pub use redact::REDACTED;
pub use report::{
    PLAN_APPROVAL, PendingApproval, Record, RunReport, StepError, TaskStatus, reasons,
};
pub use run::{RunError, RunOptions, run};
pub use tool::{Progress, ProgressReport, Registry, Tool, ToolContext, ToolError, ToolInfo, codes};
