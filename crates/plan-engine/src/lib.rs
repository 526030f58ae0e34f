//! The plan-cli engine: runs a plan's steps as their dependencies allow, in parallel up to a
//! limit, with retries and timeouts, and returns the records of every step in plan order.
//!
//! [`Program::compile`] binds a loaded [`plan_graph::Plan`] to the tools of a [`Registry`];
//! [`run`] executes it and returns a [`plan_types::RunReport`]. Tools implement [`Tool`];
//! built-in ones live in the `plan-tools` crate. Progress goes to a [`plan_types::EventSink`]
//! as events, and settled records to a [`plan_types::Journal`] on a writer thread of the
//! engine's own. The engine never touches the terminal, files or the environment: callers
//! decide where events and records go. The types it produces live in `plan-types`.
//!
//! Run it on threads with deep stacks, as plan-cli does: give the runtime's builder
//! `thread_stack_size(plan_types::json::VALUE_THREAD_STACK)`. Conditions and data expressions
//! are evaluated where 32 MiB of stack are left, and with less a stack is grown for each
//! evaluation (correct, but a few microseconds each: a block looping 100,000 times ran three
//! times slower on tokio's default 2 MiB). Only address space is reserved; pages are touched
//! as deep values need them.
#![deny(missing_docs)]

mod admit;
mod block;
mod call;
mod condition;
mod expression;
mod guard;
mod overlay;
mod program;
mod redact;
mod report;
mod retry;
mod run;
mod schema;
mod sites;
mod task;
mod tool;
mod writer;

pub use block::block_states;
pub use plan_graph::{Mode, Risk};
pub use program::{DEFAULT_MAX_CONCURRENCY, DEFAULT_MAX_PARALLEL_TASKS, PlannedCall, Program};
pub use redact::{REDACTED, Redactor};
pub use run::{RunError, RunOptions, run};
pub use sites::{CallKind, CallSite, qualified};
pub use task::{MergeOutcome, Workspace, WorkspaceError, Worktree};
pub use tool::{
    Output, OutputSink, Progress, Registry, Tool, ToolContext, ToolError, ToolInfo, codes,
};
