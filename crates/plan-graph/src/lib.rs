//! The plan model of plan-cli: loading a plan from JSON or YAML, validating it, and
//! analysing its dependency graph.
//!
//! ```
//! use plan_graph::{Format, LoadOptions, Source, load};
//!
//! let text = r#"{"steps": [
//!     {"id": "build", "tool": "echo"},
//!     {"id": "test", "tool": "echo", "dependsOn": ["build"]}
//! ]}"#;
//! let loaded = load(Source::new("ci.json", text), Format::Json, &LoadOptions::default())
//!     .expect("a valid plan");
//! assert_eq!(loaded.plan.steps[1].depends_on[0].0, "build");
//!
//! // Every problem at once, each with its place in the text.
//! let broken = r#"{"steps": [{"id": "a", "tool": "echo", "depends_on": ["b"]},
//!                             {"id": "b", "tool": "echo", "depends_on": ["a"]}]}"#;
//! let invalid = load(Source::new("loop.json", broken), Format::Json, &LoadOptions::default())
//!     .expect_err("a cycle");
//! assert_eq!(invalid.issues[0].code, "plan::cycle");
//! let diagnostic = invalid.plan_source.diagnostic(&invalid.issues[0]);
//! assert!(format!("{:?}", miette::Report::new(diagnostic)).contains("loop.json:1:"));
//! ```
//!
//! [`load`] turns text into a [`Plan`] or an [`InvalidPlan`] listing every [`Issue`] with its
//! location; [`Source::diagnostic`] renders an issue as a miette diagnostic pointing at the
//! plan's line and column. The loader accepts every source format's form: `id`/`index`/`step_id`,
//! `depends_on`/`dependsOn`, `result_variable` and `binds`, mcp-cli's `tool_calls` with one
//! call, ids written as numbers. It is strict where those executors were lax: unknown fields,
//! duplicate ids, cycles, several calls in one step and unordered reads of bound variables are
//! errors, never silently fixed. Unknown dependencies are a warning: at run time they block
//! the step (as execute_plan does).
//!
//! This crate does no I/O. It compiles `when` and block conditions with the `cel` crate, only
//! to report a condition that does not compile at load time.
#![deny(missing_docs)]

mod answer;
mod condition;
mod dag;
mod generation;
mod issue;
mod load;
mod model;
mod normalize;
mod removed;
pub mod render;
mod schema;
mod source;
mod step_index;
mod validate;

pub use answer::Answers;
pub use condition::{
    ConditionError, MAX_CONDITION_BYTES, MAX_CONDITION_NESTING, MAX_CONDITION_OPERATORS,
    compile_condition, on_condition_stack,
};
pub use dag::Dependencies;
pub use generation::{
    GenerationSchema, GenerationTool, from_generation, generation_schema, strict_problems,
};
pub use issue::{Issue, Location, PlanDiagnostic, Severity, Source};
pub use load::{
    Format, InvalidPlan, LoadOptions, LoadedPlan, MAX_PLAN_BYTES, closest, load, load_variables,
};
pub use model::{
    Block, Branch, Check, DEFAULT_CHECK_TIMEOUT_MS, DEFAULT_MAX_ATTEMPTS, DeclaredTool, Expand,
    Guards, Jitter, Mode, Node, OnConflict, OnFailure, Plan, RetryPolicy, Risk, RunIf, Step,
    StepId, TaskCall, TaskSpec, Transition, Workspace,
};
pub use normalize::{META_STEP_ID, PLAN_APPROVAL_ID};
pub use plan_types::{MAX_TASK_ID_BYTES, task_id_problem};
pub use schema::{PLAN_SCHEMA_ID, plan_schema};
pub use source::{PathSegment, PlanPath, SourceMap};
pub use step_index::{CallOf, StepIndex};
pub use validate::{env_read, is_item_of, unknown_tool, variables_read};
