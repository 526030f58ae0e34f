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
//! A plan run with a tool of the caller's own:
//!
//! ```
//! use async_trait::async_trait;
//! use plan_engine::{Program, Registry, RunOptions, Tool, ToolContext, ToolError, ToolInfo};
//! use plan_graph::{Format, LoadOptions, Source};
//! use serde_json::{Value, json};
//!
//! /// Doubles `n`.
//! struct Double;
//!
//! #[async_trait]
//! impl Tool for Double {
//!     fn info(&self) -> ToolInfo {
//!         ToolInfo {
//!             name: "double".to_owned(),
//!             description: "Doubles n".to_owned(),
//!             source: "example".to_owned(),
//!             input_schema: json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}),
//!             risk: plan_graph::Risk::Low,
//!         }
//!     }
//!
//!     async fn call(&self, args: Value, _ctx: ToolContext) -> Result<Value, ToolError> {
//!         let n = args["n"].as_i64().ok_or_else(|| ToolError::invalid_args("n"))?;
//!         Ok(json!({"n": n * 2}))
//!     }
//! }
//!
//! let text = r#"{"steps": [
//!     {"id": "a", "tool": "double", "args": {"n": 2}, "binds": {"x": "$.n"}},
//!     {"id": "b", "tool": "double", "args": {"n": "${x}"}, "depends_on": ["a"]}
//! ]}"#;
//! let loaded = plan_graph::load(Source::new("p.json", text), Format::Json, &LoadOptions::default())
//!     .expect("valid");
//! let mut registry = Registry::new();
//! registry.register(Double);
//! let program = Program::compile(&loaded.plan, "p", &registry).expect("compiles");
//! let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
//! let report = runtime
//!     .block_on(plan_engine::run(&program, RunOptions::new("run-1")))
//!     .expect("runs");
//! assert_eq!(report.task_status, plan_types::TaskStatus::Completed);
//! assert_eq!(report.records[1].result.as_deref(), Some(&json!({"n": 8})));
//! ```
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
mod chat;
mod condition;
mod expression;
mod guard;
mod kind;
mod overlay;
mod program;
mod redact;
mod retry;
mod run;
mod schema;
mod sites;
mod task;
mod writer;

pub use block::block_states;
pub use plan_graph::{Mode, Risk};
pub use plan_ports::{
    Output, OutputSink, Progress, Registry, Tool, ToolContext, ToolError, ToolInfo, codes,
};
pub use program::{DEFAULT_MAX_CONCURRENCY, DEFAULT_MAX_PARALLEL_TASKS, PlannedCall, Program};
pub use redact::{REDACTED, Redactor};
pub use run::{RunError, RunOptions, run};
pub use sites::{CallKind, CallSite, qualified};
pub use task::{MergeOutcome, Workspace, WorkspaceError, Worktree};
