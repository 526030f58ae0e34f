//! What can go wrong in a run's lifecycle.

use plan_store::StoreError;

/// Why a lifecycle step could not be taken. More reasons may come: a match on it keeps an arm
/// for those.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LifecycleError {
    /// The ledger could not be read or written.
    #[error(transparent)]
    Ledger(#[from] StoreError),
    /// The request cannot be met as asked (a step that needs no decision, a run still owned by
    /// a live process, a plan that is not the run's): the caller's to fix.
    #[error("{0}")]
    Refused(String),
    /// The run is still running in a live process (which may not be plan-cli's: a process id
    /// can be reused).
    #[error("run {run_id} is still running in process {pid}")]
    StillRunning {
        /// The run.
        run_id: String,
        /// Its owner's process id.
        pid: u32,
    },
    /// A plan given to go on with is not the plan the run ran.
    #[error("{plan} is not the plan run {run_id} ran: {}", .changes.join(", "))]
    PlanDiffers {
        /// The given plan's name.
        plan: String,
        /// The run.
        run_id: String,
        /// How it differs (`step \`b\` changed`), each in a few words.
        changes: Vec<String>,
    },
    /// A step approved in advance is not one that waits for an approval.
    #[error("`{id}` is not a high-risk step ({})", if .gated.is_empty() { "the plan has none".to_owned() } else { format!("the plan's are {}", .gated.join(", ")) })]
    NotGated {
        /// The id given.
        id: String,
        /// The plan's steps that wait for approval.
        gated: Vec<String>,
    },
    /// The plan needs more than its author's policy allows.
    #[error(transparent)]
    Policy(#[from] crate::PolicyError),
    /// The run's plan could not be prepared again (its tools, or a plan that no longer
    /// compiles with them).
    #[error(transparent)]
    Prepare(Box<crate::PrepareError>),
    /// A plan given to compare with a run's does not load.
    #[error("{} is not a valid plan", .0.plan_source.name())]
    InvalidPlan(Box<plan_graph::InvalidPlan>),
    /// The ledger failed during the run, which stopped; what was committed stays, and the run
    /// can be resumed.
    #[error(
        "the ledger could not be written, so run {run_id} stopped: {message}\nwhat was recorded before is kept: fix the cause, then resume the run"
    )]
    Journal {
        /// The run.
        run_id: String,
        /// What the ledger said.
        message: String,
    },
    /// The run ended (its ledger is whole) but its state file could not be written at the end.
    #[error("run {run_id} ended, but {message}")]
    StateFile {
        /// The run.
        run_id: String,
        /// Why not.
        message: String,
    },
    /// A run's calls went to a queue whose address was not kept (it held credentials).
    #[error(
        "run {run_id}'s calls went to BullMQ queue `{name}` at an address that was not kept (it holds credentials): give the address again"
    )]
    QueueNotKept {
        /// The run.
        run_id: String,
        /// The queue's name.
        name: String,
    },
    /// The state file cannot be written there (nothing was recorded or run).
    #[error("the state file {source}")]
    StateFileUnusable {
        /// Whether it is the one the run kept from its start (else the one given now).
        kept: bool,
        /// Why it cannot be written.
        source: crate::StateFileError,
    },
    /// The events file cannot be opened (nothing was recorded or run).
    #[error("cannot open events file `{}`: {source}", .path.display())]
    EventsFile {
        /// The file.
        path: std::path::PathBuf,
        /// Why not.
        source: std::io::Error,
    },
    /// The model asked for a plan gave none that passed (or could not be asked).
    #[error(transparent)]
    Generate(plan_llm::LlmError),
    /// The model asked to re-plan a failed run gave no plan that passed (or could not be
    /// asked).
    #[error("re-planning run {run_id}: {source}")]
    Replan {
        /// The run.
        run_id: String,
        /// What the model's conversation ended with.
        source: plan_llm::LlmError,
    },
    /// Something that should not happen (a stored plan that no longer loads, the engine's
    /// task lost).
    #[error("{0}")]
    Internal(String),
    /// The tools a run goes on with could not be had (its MCP configuration, its queue).
    #[error(transparent)]
    Tools(#[from] crate::ToolsError),
}
