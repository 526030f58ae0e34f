//! The plan-cli run lifecycle as a library: everything between "here is a compiled plan" and
//! "here is its report", with the ledger as the record. The CLI and `plan-cli mcp serve` both
//! use it, with typed options; so can any program.
//!
//! - [`start`] records a new run of a [`Prepared`] plan and runs it; [`resume`] goes on with a
//!   stored run after [`prepare_resume`] has checked its owner, its plan and what to retry.
//! - [`approve`] and [`reject`] decide a waiting run's high-risk calls.
//! - [`report`] rebuilds the `run --json` object of any stored run (with records for the
//!   steps that have not settled); [`status_of`], [`plan_of`] and [`execute_state`] read the
//!   rest of what `status` and `state export` show.
//!
//! The library prints nothing and reads no environment: events go to the sinks the caller
//! gives, cancellation comes through the caller's token.
#![deny(missing_docs)]

mod decide;
mod error;
mod execute;
mod policy;
mod report;
mod sources;
mod state_file;

pub use decide::{Decided, Decisions, approve, can_wait, gated_steps, reject};
pub use error::LifecycleError;
pub use execute::{
    Execution, Outcome, Prepared, Resumable, ResumeFrom, ResumeOptions, Start, author_of,
    filters_of, free_plan_id, owner_alive, plan_drift, prepare_resume, recover_interrupted, resume,
    run_by, start, working_dir_of,
};
pub use policy::{Author, Policy, PolicyError, PolicyFile, PolicyFileError, Violation};
pub use report::{
    duration_of, ended_at, execute_state, format_name, format_of, plan_of, report, status_of,
};
pub use sources::{QueueSource, RunSources, sources_of};
