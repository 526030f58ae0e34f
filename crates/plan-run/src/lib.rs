//! The plan-cli run lifecycle as a library: everything between "here is a compiled plan" and
//! "here is its report", with the ledger as the record. The CLI and `plan-cli mcp serve` both
//! use it, with typed options; so can any program.
//!
//! Start a run whose high-risk step waits, approve the step, resume the run:
//!
//! ```
//! use plan_graph::{Format, Source};
//! use plan_run::{Decisions, Execution, Resumable, ResumeOptions, Start, Strictness, Toolbox};
//! use plan_store::Store;
//! use plan_types::TaskStatus;
//!
//! let text = r#"{"steps": [
//!     {"id": "build", "tool": "echo"},
//!     {"id": "deploy", "tool": "echo", "risk": "high", "depends_on": ["build"]}
//! ]}"#;
//! let toolbox = Toolbox::new(plan_tools::builtin_registry());
//! let prepare = |source| {
//!     let text = plan_run::PlanText { source, format: Format::Json, fallback_id: "p".into() };
//!     plan_run::prepare(text, Default::default(), &toolbox, Strictness::RUN, &|_| None)
//! };
//! let dir = tempfile::tempdir().unwrap();
//! let ledger = dir.path().join("state.db");
//! let runtime = tokio::runtime::Builder::new_multi_thread()
//!     .enable_all()
//!     .thread_stack_size(plan_types::json::VALUE_THREAD_STACK)
//!     .build()
//!     .unwrap();
//!
//! let prepared = runtime.block_on(prepare(Source::new("p.json", text))).expect("valid");
//! let started = runtime
//!     .block_on(plan_run::start(Store::open(&ledger).unwrap(), prepared, Start::new(), Execution::new()))
//!     .unwrap();
//! assert_eq!(started.report.task_status, TaskStatus::Waiting);
//! let run = started.report.run_id;
//!
//! let mut store = Store::open(&ledger).unwrap();
//! let request = Decisions { steps: vec!["deploy".to_owned()], ..Decisions::default() };
//! let registry = plan_tools::builtin_registry();
//! plan_run::approve(&mut store, &run, &request, |row| plan_run::gated_steps(row, &registry)).unwrap();
//!
//! let Resumable::Continue(from) = plan_run::prepare_resume(&store, &run, &ResumeOptions::default()).unwrap()
//! else { panic!("the run goes on") };
//! let prepared = runtime.block_on(prepare(from.source.clone())).expect("valid");
//! let done = runtime.block_on(plan_run::resume(store, from, prepared, Execution::new())).unwrap();
//! assert_eq!(done.report.task_status, TaskStatus::Completed);
//! ```
//!
//! - [`prepare`] loads, validates and compiles a plan with the tools of a [`Toolbox`] (the
//!   built-ins, MCP servers, a queue's workers); [`generate`] and [`Replanner`] have a model
//!   write one, judged by [`check_for_model`].
//! - [`start`] records a new run of a [`Prepared`] plan and runs it; [`resume`] goes on with a
//!   stored run after [`prepare_resume`] has checked its owner, its plan and what to retry.
//! - [`approve`] and [`reject`] decide a waiting run's high-risk calls; [`cancel`] stops a run
//!   from outside its process.
//! - [`report`] rebuilds the `run --json` object of any stored run (with records for the
//!   steps that have not settled); [`status_of`], [`plan_of`] and [`execute_state`] read the
//!   rest of what `status` and `state export` show.
//!
//! - [`EventFeed`] reads a run's events as the ledger commits them (a live view of a run in
//!   another process), and [`Progress`] folds them into what a live view shows (the steps
//!   running, the map items done; [`Steps`] tells what each event's id names); [`Prepared::dry_run`] lists the calls a run would make; a
//!   [`Replanner`] re-plans a failed run within a budget and goes on with it to its end.
//!
//! - [`plan_from_goal`] has a model write a plan for a [`Goal`], judged and stored; [`Kept`] is
//!   what a stored run kept for the commands that go on with it (its tools' MCP
//!   configuration, its folder, its queue: [`RunSources::queue_going_on`]); [`Tally`] counts a
//!   report's records as every view counts them.
//! - [`PlanInput`], [`Variables`], [`Project`] and [`Ledger`] read what a person names (a plan
//!   file, stdin, a stored plan, a variables file, the nearest `.plan/` folder) as every
//!   front-end reads it; [`Validation`] is what validating a plan found, as data.
//!
//! The library prints nothing and reads no environment: events go to the sinks and the events
//! file the caller gives, cancellation comes through the caller's token.
#![deny(missing_docs)]

mod access;
mod cancel;
mod decide;
mod error;
mod events_file;
mod execute;
mod gc;
mod generate;
#[cfg(feature = "import")]
mod import;
mod input;
mod policy;
mod prepare;
mod progress;
mod project;
mod report;
mod sources;
mod state_file;
pub mod summary;
mod toolbox;
mod validation;
pub mod words;

pub use access::{Access, AccessError, random_hex};
pub use cancel::{Cancelled, cancel, stop_asked, stops_asked, wait_stopped};
pub use decide::{
    Decided, Decisions, approve, can_wait, gated_steps, gated_steps_in, reject, waiting_for,
};
pub use error::LifecycleError;
pub use execute::{
    ApprovalsKeptOn, DryRun, Execution, Outcome, Prepared, Resumable, ResumeFrom, ResumeOptions,
    Start, approvals_kept_on, author_of, check_state_file, continue_run, exact_run_of, filters_of,
    front_end_of, owner_alive, plan_drift, policy_of, prepare_resume, read_run,
    recover_interrupted, resume, run_by, runs_of, start, working_dir_of,
};
pub use gc::{Collected, gc};
pub use generate::{
    Goal, NewPlan, Replanned, Replanner, Replanning, generate, generate_checked, http_model,
    plan_from_goal, remember_format, schema_for, slug, store_generated, store_prepared,
    stored_plan,
};
#[cfg(feature = "import")]
pub use import::{BreakdownError, ImportTasks, Imported, ShellCheck, import_tasks};
pub use input::{InputError, PlanInput, Variables, resolve_folder};
pub use policy::{Author, Policy, PolicyError, PolicyFile, PolicyFileError, Violation};
pub use prepare::{
    Inputs, PlanText, PrepareError, Problems, Strictness, UnusedInput, check_for_model, prepare,
    select,
};
pub use progress::{Part, Progress, Seen, Steps, Tally};
pub use project::{InitError, Ledger, MCP_CONFIG_NAME, Project};
pub use report::{
    EventBatch, EventFeed, RunFilter, RunSummary, StepState, StoredSource, duration_of, ended_at,
    execute_state, execute_state_of, format_name, format_of, format_of_text, output_of, plan_of,
    records_of, remove_plan, report, runs, status_of, stored_plans, stored_source,
};
pub use sources::{Kept, QueueSource, RunSources, sources_of};
pub use state_file::{StateFile, StateFileError};
pub use toolbox::{Catalog, PlanTools, ToolOwner, ToolSettings, Toolbox, ToolsError};

/// Where the values of environment variables come from, for a front-end that outlives a
/// borrow (`mcp serve`, the dashboard): the operator's environment, as the CLI reads it (the
/// libraries read none).
pub type Env = std::sync::Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;
pub use validation::{IssueReport, Validation};

/// The front-ends' one door: the types of the crates below that a front-end (the CLI, the
/// dashboard, `mcp serve`) must name reach it through here, so that its manifest lists what
/// it may call and the crates below stay this crate's to use. By choice the only re-exports.
pub use plan_engine::Mode;
pub use plan_tools::Exec;

/// The ledger's handle and read models, as this crate's functions take and give them.
pub mod ledger {
    pub use plan_store::{
        Decision, LAST_RUN, RunRow, RunState, Store, StoreError, StoredPlan, timestamp,
    };
}

/// Talking to a model (`plan create`, `--replan`): its endpoint, settings and errors.
pub mod model {
    pub use plan_llm::{
        Answer, DEFAULT_MAX_TOKENS, DEFAULT_TIMEOUT, Endpoint, Http, LlmError, Model, Pending,
        ResponseFormat, Schema, Settings, shortened,
    };
}

/// The BullMQ queue: a coordinator's options, and a worker's.
#[cfg(feature = "queue")]
pub mod queue {
    pub use plan_queue::{
        DEFAULT_QUEUE, DispatchOptions, Queue, QueueError, QueueSecret, WorkerOptions, WorkerStats,
        work,
    };
}
