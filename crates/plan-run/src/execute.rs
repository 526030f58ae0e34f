//! Starting and resuming runs recorded in a ledger.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use plan_engine::{Mode, Program, RunError, RunOptions};
use plan_graph::{Format, LoadOptions, LoadedPlan, Plan, Source};
#[cfg(feature = "queue")]
use plan_queue::Dispatcher;
use plan_store::{Decision, EventBuffer, NewRun, RunJournal, RunRow, RunState, Store};
use plan_types::{Approvals, Durability, EventSink, Fanout, Restored, RunReport};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use crate::decide::can_wait;
use crate::report::{format_name, format_of, plan_of, report};
use crate::{LifecycleError, StateFile};

/// A plan ready to run: loaded, compiled against the tools it will call, with its inputs and
/// the values of the environment variables it lists (the caller reads the environment).
pub struct Prepared {
    /// The plan as loaded, with its source (stored with the run).
    pub loaded: LoadedPlan,
    /// The plan compiled against its tools.
    pub program: Program,
    /// JSON or YAML: kept with a run so `resume` reads the plan as it was.
    pub format: Format,
    /// Variables given by the caller; they win over the plan's.
    pub inputs: Map<String, Value>,
    /// Values of the environment variables the plan lists under `env:`.
    pub env: BTreeMap<String, String>,
    /// Variables given that the plan neither defines nor reads (see [`crate::prepare`]).
    pub unused_inputs: Vec<crate::UnusedInput>,
}

impl Prepared {
    /// The part of the plan `layer` and `task` select (`Plan::select`), compiled again against
    /// `registry`; the plan as written (kept with the run, and read by the state file) stays
    /// whole.
    pub fn select(
        self,
        layer: Option<&str>,
        task: Option<&str>,
        registry: &plan_engine::Registry,
    ) -> Result<Prepared, LifecycleError> {
        let part = self
            .loaded
            .plan
            .select(layer, task)
            .map_err(LifecycleError::Refused)?;
        let program =
            Program::compile(&part, self.program.plan_id(), registry).map_err(|issues| {
                LifecycleError::Refused(
                    issues
                        .iter()
                        .map(|issue| issue.message.clone())
                        .collect::<Vec<_>>()
                        .join("; "),
                )
            })?;
        Ok(Prepared { program, ..self })
    }
}

/// What a run of a prepared plan would call, called without anything (`run --dry-run`, a
/// preview): as `run --dry-run --json` prints it.
#[derive(Debug, serde::Serialize)]
pub struct DryRun {
    /// The plan's id.
    pub plan_id: String,
    /// Always true: nothing was called or recorded.
    pub dry_run: bool,
    /// Each call the run would make, with its arguments resolved as far as they can be before
    /// the run (or why a call would fail, or never be made).
    pub calls: Vec<plan_engine::PlannedCall>,
    /// The high-risk steps that would wait for an approval.
    pub needs_approval: Vec<String>,
}

impl DryRun {
    /// Whether a call would fail (its arguments do not resolve or fit its tool) or never be
    /// made (a dependency that is not in the plan): the run would not complete.
    pub fn would_fail(&self) -> bool {
        self.calls
            .iter()
            .any(|call| call.error.is_some() || call.not_run.is_some())
    }
}

impl Prepared {
    /// What a run of this plan would call (see [`DryRun`]).
    pub fn dry_run(&self) -> DryRun {
        DryRun {
            plan_id: self.program.plan_id().to_owned(),
            dry_run: true,
            calls: self.program.preview(&self.inputs, &self.env),
            needs_approval: self.program.gated_steps(),
        }
    }
}

/// How a run goes, whether started or resumed.
pub struct Execution {
    /// Most calls at once (overrides the plan's `max_concurrency`, and for a resumed run the
    /// limit it was started with).
    pub max_concurrency: Option<u32>,
    /// When results reach the ledger.
    pub durability: Durability,
    /// Where events go besides the ledger (a progress bar).
    pub events: Vec<Arc<dyn EventSink>>,
    /// Append every event to this file, one JSON line each (`tail -f` follows the run). It
    /// must open before anything is recorded; a disk that fills later costs lines, never the
    /// run.
    pub events_file: Option<std::path::PathBuf>,
    /// Cancelling it stops the run (resumably).
    pub cancel: CancellationToken,
    /// Where tools send the lines they print as they come (`run -v`), if anywhere.
    pub output: Option<plan_engine::OutputSink>,
    /// Whether high-risk calls wait for an approval: `None` as the run was started (for a
    /// resumed run that was given one) or as the plan says (its `approvals: false` turns them
    /// off), `Some` whatever those say, except that a run under a policy that forces them,
    /// and a run a model re-planned, keep them on whatever this says. With approvals off a
    /// high-risk call runs at once, and its `tool.called` event records that it ran so; a
    /// rejection still stops it.
    pub approvals: Option<bool>,
    /// Run every call on queue workers through this dispatcher (its tools must be the ones the
    /// program was compiled against). Losing the queue stops the run, resumably. (Feature
    /// `queue`.)
    #[cfg(feature = "queue")]
    pub queue: Option<Arc<Dispatcher>>,
    /// Keep the execute-state document in this file current as the ledger commits, and at the
    /// run's end. A new run keeps it with its sources; a resumed run given none keeps the one
    /// it was started with; a plan made from a task breakdown keeps one beside the breakdown
    /// by default (its `tasks` folder read from the run's folder). Checked before anything is
    /// recorded.
    pub state_file: Option<std::path::PathBuf>,
    /// The project's folder the state document names (`project_path`), as the caller sees it.
    pub project_path: Option<String>,
    /// The run stops (resumably, as a cancel stops it) after this long; a run under a policy
    /// stops after its `max_run_time` if that is shorter.
    pub time_limit: Option<std::time::Duration>,
}

impl Execution {
    /// Defaults: the plan's concurrency, `sync` durability, no other sinks, no queue.
    pub fn new() -> Self {
        Execution {
            max_concurrency: None,
            durability: Durability::Sync,
            events: Vec::new(),
            events_file: None,
            cancel: CancellationToken::new(),
            output: None,
            approvals: None,
            #[cfg(feature = "queue")]
            queue: None,
            state_file: None,
            project_path: None,
            time_limit: None,
        }
    }
}

impl Execution {
    /// Sends the run's calls to `toolbox`'s queue, when it has one (`Toolbox::connect_queue`),
    /// as every front-end's run through a queue does: losing the queue stops the run.
    pub fn use_queue_of(&mut self, toolbox: &crate::Toolbox) {
        #[cfg(feature = "queue")]
        {
            self.queue = toolbox.queue().cloned();
        }
        #[cfg(not(feature = "queue"))]
        let _ = toolbox;
    }
}

impl Default for Execution {
    fn default() -> Self {
        Execution::new()
    }
}

/// A run's outcome. The plan is not in it: a run lets go of its plan once the plan is
/// compiled and recorded (a 100,000-step plan holds 26 MB), so a caller that shows the plan
/// beside the report keeps what it needs of it before the run, or reads it back with
/// [`plan_of`](crate::plan_of).
#[derive(Debug)]
pub struct Outcome {
    /// As `run --json` prints it.
    pub report: RunReport,
}

/// A new run: its id, what is approved in advance, its mode.
#[derive(Debug, Clone)]
pub struct Start {
    /// The run's id (a new ULID by default: sortable by time).
    pub run_id: String,
    /// High-risk steps (or map items) approved in advance.
    pub approve: Vec<String>,
    /// `Mode::Approval` waits for the plan's approval before the first step; a preview runs
    /// nothing and is refused here (see `Program::preview`).
    pub mode: Mode,
    /// The folder the run's programs run in (kept with the run, so that `resume` runs them in
    /// the same place; see [`working_dir_of`]).
    pub working_dir: Option<String>,
    /// The run runs only this layer's steps (`run --layer`; kept with the run for `resume`
    /// and the state file's `layer_filter`; see [`filters_of`]).
    pub layer_filter: Option<String>,
    /// The run runs only this step (`run --task`; the state file's `task_filter`).
    pub task_filter: Option<String>,
    /// Who wrote the plan (kept with the run: `mcp serve` shows a client only the runs
    /// clients started; see [`author_of`]).
    pub author: crate::Author,
    /// What the author may do, when the plan runs under a policy: [`start`] checks the plan
    /// against it, keeps approvals on when it says so, stops the run after its
    /// `max_run_time`, keeps every call's programs in its work folder, and the plan's git
    /// repository and worktree folder too (checked where git finds them). The run keeps it:
    /// [`resume`] holds the run to it again, whoever resumes it. `None`: the operator's
    /// powers.
    pub policy: Option<crate::Policy>,
    /// Where the run's tools come from and its state file (kept with the run: see
    /// [`sources_of`](crate::sources_of)).
    pub sources: crate::RunSources,
    /// What the front-end that started the run keeps with it, read back with
    /// [`front_end_of`] (`mcp serve` keeps the MCP task the run is). Null: nothing.
    pub front_end: Value,
}

impl Start {
    /// A new run id, nothing approved, `Mode::Auto`.
    pub fn new() -> Self {
        Start {
            run_id: ulid::Ulid::new().to_string(),
            approve: Vec::new(),
            mode: Mode::Auto,
            working_dir: None,
            layer_filter: None,
            task_filter: None,
            author: crate::Author::Operator,
            policy: None,
            sources: crate::RunSources::default(),
            front_end: Value::Null,
        }
    }
}

/// What the front-end that started run `row` kept with it ([`Start::front_end`]).
pub fn front_end_of(row: &RunRow) -> &Value {
    row.options.get("front_end").unwrap_or(&Value::Null)
}

/// Goes on with stored run `run` as `options` say ([`prepare_resume`], then
/// [`ResumeFrom::go_on`]): a finished run with nothing to run again only gives its report.
/// The one way a front-end that needs nothing between the two (`mcp serve`, a re-plan) goes on.
pub async fn continue_run(
    store: Store,
    run: &str,
    options: &ResumeOptions,
    toolbox: &crate::Toolbox,
    env: &dyn Fn(&str) -> Option<String>,
    execution: impl FnOnce(&Prepared) -> Execution,
) -> Result<Outcome, LifecycleError> {
    match prepare_resume(&store, run, options)? {
        Resumable::Finished(outcome) => Ok(outcome),
        Resumable::Continue(from) => from.go_on(store, toolbox, env, execution).await,
    }
}

/// The run `id` names (an id, a unique prefix, or `last`) among the runs whose plan `author`
/// wrote, its log folded in if its process died: an MCP client's `last` is the newest run
/// clients started, and a prefix never finds (or lists) a run another author started.
pub fn run_by(
    store: &mut Store,
    id: &str,
    author: crate::Author,
) -> Result<RunRow, LifecycleError> {
    let runs: Vec<RunRow> = store
        .runs()?
        .into_iter()
        .filter(|row| author_of(row) == author)
        .collect();
    let mut matching: Vec<&RunRow> = if id == plan_store::LAST_RUN {
        runs.first().into_iter().collect()
    } else if let Some(exact) = runs.iter().find(|row| row.run_id == id) {
        vec![exact]
    } else {
        runs.iter()
            .filter(|row| row.run_id.starts_with(id))
            .collect()
    };
    let whose = format!("the runs {} started", author.describe_plural());
    match matching.len() {
        0 => Err(LifecycleError::Refused(format!(
            "no run `{id}` among {whose}"
        ))),
        1 => {
            let row = matching.remove(0).clone();
            recover_interrupted(store, &row)?;
            Ok(row)
        }
        n => Err(LifecycleError::Refused(format!(
            "`{id}` is the start of {n} of {whose}: give more of the id"
        ))),
    }
}

/// The runs whose plan `author` wrote, newest first (an MCP server's `tasks/list`).
pub fn runs_of(store: &Store, author: crate::Author) -> Result<Vec<RunRow>, LifecycleError> {
    let mut rows = store.runs()?;
    rows.retain(|row| author_of(row) == author);
    Ok(rows)
}

/// Run `id` exactly (no prefix, no `last`), if `author` wrote its plan; as it is stored (a
/// task a client follows, read without folding a dead process's log in).
pub fn exact_run_of(store: &Store, id: &str, author: crate::Author) -> Option<RunRow> {
    store
        .run(id)
        .ok()
        .filter(|row| row.run_id == id && author_of(row) == author)
}

/// Who wrote a run's plan, as its start kept it (the operator for runs from before authors
/// were kept).
pub fn author_of(row: &RunRow) -> crate::Author {
    row.options
        .get("author")
        .and_then(Value::as_str)
        .map_or(crate::Author::Operator, crate::Author::from_name)
}

/// The folder a run's programs run in, as its start kept it.
pub fn working_dir_of(row: &RunRow) -> Option<std::path::PathBuf> {
    row.options
        .get("working_dir")
        .and_then(Value::as_str)
        .map(std::path::PathBuf::from)
}

/// The layer and step a run was started for (`run --layer`, `run --task`), as its start kept
/// them: a resumed run runs the same part of its plan (see `Plan::select`).
pub fn filters_of(row: &RunRow) -> (Option<String>, Option<String>) {
    let text = |key: &str| {
        row.options
            .get(key)
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    (text("layer_filter"), text("task_filter"))
}

impl Default for Start {
    fn default() -> Self {
        Start::new()
    }
}

/// Records a new run of `prepared` in `store` and runs it.
pub async fn start(
    mut store: Store,
    prepared: Prepared,
    start: Start,
    mut execution: Execution,
) -> Result<Outcome, LifecycleError> {
    let Start {
        run_id,
        approve,
        mode,
        working_dir,
        layer_filter,
        task_filter,
        author,
        policy,
        mut sources,
        front_end,
    } = start;
    // Refused before anything is recorded: a preview runs nothing, so it leaves no run.
    if mode == Mode::Preview {
        return Err(LifecycleError::Refused(
            "a preview runs nothing: ask for the plan's calls instead".to_owned(),
        ));
    }
    // Its work folder kept absolute, so that a resume from another folder holds the run to
    // the same folder.
    let policy = match policy {
        Some(policy) => {
            let workdir = std::fs::canonicalize(&policy.workdir).map_err(|error| {
                LifecycleError::Refused(format!(
                    "cannot read the work folder {}: {error}",
                    policy.workdir.display()
                ))
            })?;
            Some(crate::Policy { workdir, ..policy })
        }
        None => None,
    };
    if let Some(policy) = &policy {
        hold_to(policy, author, &prepared, &mut execution)?;
    }
    // Kept with the run, from the root: a resume from another folder writes the same file.
    sources.state_file = (execution.state_file.take())
        .or(sources.state_file.take())
        .map(|path| std::path::absolute(&path).unwrap_or(path));
    execution.state_file.clone_from(&sources.state_file);
    let state_file = state_file_of(&mut execution, None, &prepared, working_dir.as_deref())?;
    let events_file = open_events_file(&mut execution)?;
    let workspace_root = policy
        .as_ref()
        .map(|policy| policy.workdir.display().to_string());
    let gated: Vec<String> = prepared.program.gated_steps();
    let mut approvals = Approvals::new();
    for id in &approve {
        if !can_wait(id, &gated) {
            return Err(LifecycleError::NotGated {
                id: id.clone(),
                gated,
            });
        }
        approvals.approve(id.clone());
    }
    let workspace = open_workspace(
        &prepared.loaded.plan,
        working_dir.as_deref(),
        workspace_root.as_deref(),
    )
    .await?;
    let options = json!({
        "max_concurrency": execution.max_concurrency,
        "mode": mode,
        "working_dir": working_dir,
        "layer_filter": layer_filter,
        "task_filter": task_filter,
        // Kept so that a resumed run keeps the switch it was started with.
        "approvals": execution.approvals,
        "author": author,
        "workspace_root": workspace_root,
        "policy": policy,
        "sources": sources,
        "front_end": front_end,
    });
    let started_at = plan_store::timestamp(SystemTime::now());
    store.begin_run(&NewRun {
        run_id: &run_id,
        plan_id: prepared.program.plan_id(),
        plan_name: prepared.loaded.source.name(),
        plan_format: format_name(prepared.format),
        plan_source: prepared.loaded.source.text(),
        inputs: &prepared.inputs,
        options: &options,
        owner_pid: std::process::id(),
        started_at: &started_at,
    })?;
    for id in &approve {
        store.decide(
            &run_id,
            id,
            Decision::Approved,
            Some("approved in advance, when the run started"),
        )?;
    }
    let from = From {
        started_at,
        restored: None,
        stored_limit: None,
        stored_approvals: None,
        approvals,
        mode,
        workspace,
        confined_to: workspace_root,
    };
    finish(
        events_file,
        execute(prepared, &run_id, store, from, execution, state_file).await,
    )
}

/// Opens the run's events file, as one more of its sinks.
fn open_events_file(
    execution: &mut Execution,
) -> Result<Option<Arc<crate::events_file::EventsFile>>, LifecycleError> {
    let Some(path) = &execution.events_file else {
        return Ok(None);
    };
    let file = crate::events_file::EventsFile::open(path).map_err(|source| {
        LifecycleError::EventsFile {
            path: path.clone(),
            source,
        }
    })?;
    let file = Arc::new(file);
    execution.events.push(file.clone());
    Ok(Some(file))
}

/// A run's outcome once its events file holds every event.
fn finish(
    events_file: Option<Arc<crate::events_file::EventsFile>>,
    outcome: Result<Outcome, LifecycleError>,
) -> Result<Outcome, LifecycleError> {
    if let Some(file) = events_file {
        file.close();
    }
    outcome
}

/// Holds a run of `prepared` to `policy` (its author's): the plan must meet it, approvals stay
/// on when it says so, and the run stops (resumably) after its `max_run_time`.
fn hold_to(
    policy: &crate::Policy,
    author: crate::Author,
    prepared: &Prepared,
    execution: &mut Execution,
) -> Result<(), LifecycleError> {
    policy.judge(author, prepared)?;
    if policy.forces_approvals() {
        execution.approvals = Some(true);
    }
    if let Some(limit) = policy.max_run_time {
        execution.time_limit = Some(execution.time_limit.map_or(limit, |given| given.min(limit)));
    }
    Ok(())
}

/// Why a stored run's high-risk calls wait for approvals whatever `resume` is given
/// ([`Execution::approvals`]), if they do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalsKeptOn {
    /// Its plan's author runs under a policy that keeps them on (a client, a model).
    Policy(crate::Author),
    /// A model re-planned the run (`run --replan`).
    Replanned,
}

impl std::fmt::Display for ApprovalsKeptOn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApprovalsKeptOn::Policy(author) => write!(
                f,
                "the run was started under a policy that keeps them on (its plan's author: {})",
                author.describe()
            ),
            ApprovalsKeptOn::Replanned => f.write_str("a model re-planned the run"),
        }
    }
}

/// Whether run `run`'s approvals stay on whatever a resume is given, and why: the one rule
/// [`resume`] applies, for a front-end to say so first.
pub fn approvals_kept_on(
    store: &Store,
    run: &str,
) -> Result<Option<ApprovalsKeptOn>, LifecycleError> {
    let row = store.run(run)?;
    if policy_of(&row).is_some_and(|policy| policy.forces_approvals()) {
        return Ok(Some(ApprovalsKeptOn::Policy(author_of(&row))));
    }
    if store.revisions(&row.run_id)? > 0 {
        return Ok(Some(ApprovalsKeptOn::Replanned));
    }
    Ok(None)
}

/// The policy a run was started under (see [`Start::policy`]); `None` for the operator's own
/// runs. A run whose author is not the operator is always under one: the restricted default,
/// in its stored work folder, when it kept none (a run from before policies were kept, or a
/// damaged one).
pub fn policy_of(row: &RunRow) -> Option<crate::Policy> {
    let stored = row.options.get("policy").filter(|value| !value.is_null());
    let restricted = || crate::Policy {
        workdir: stored_folder(row, "workspace_root").unwrap_or_else(|| ".".into()),
        ..crate::Policy::default()
    };
    match stored {
        Some(value) => Some(serde_json::from_value(value.clone()).unwrap_or_else(|_| restricted())),
        None if author_of(row) == crate::Author::Operator => None,
        None => Some(restricted()),
    }
}

/// A folder a run's start (or its re-plan) kept in its options under `key`.
fn stored_folder(row: &RunRow, key: &str) -> Option<std::path::PathBuf> {
    row.options
        .get(key)
        .and_then(Value::as_str)
        .map(std::path::PathBuf::from)
}

/// How to resume a run.
#[derive(Debug, Clone, Default)]
pub struct ResumeOptions {
    /// Run failed steps (and failed blocks, from their entry point) again.
    pub retry_failed: bool,
    /// Run these steps again, and every step that depends on them (`plan-cli retry`), even
    /// in a finished run.
    pub retry_steps: Vec<String>,
    /// Resume even if the run's process seems alive, or with a plan that differs.
    pub force: bool,
    /// A plan to check against the run's stored one (with `force`, to run instead of it).
    pub plan: Option<(Source, Format)>,
    /// The run's plan was just replaced by a new revision (`replan`): a finished run goes on
    /// with it, every record kept (the failed step's stays; the new steps run).
    pub replanned: bool,
    /// A policy the run must meet too, besides the one it was started under ([`policy_of`]):
    /// `mcp serve`'s as it is now. The run is held to both (each check, approvals on if either
    /// says so, the shorter time limit); its programs stay in the folder it was started with.
    pub also: Option<crate::Policy>,
}

/// What [`prepare_resume`] found.
#[derive(Debug)]
pub enum Resumable {
    /// The run has finished and nothing is to be retried: its report as it stands.
    Finished(Outcome),
    /// The run goes on: prepare this plan and call [`resume`].
    Continue(Box<ResumeFrom>),
}

/// A run to go on with: the plan to prepare (its text and format, the plan id and the inputs
/// to prepare it with), and what the run keeps.
#[derive(Debug)]
pub struct ResumeFrom {
    /// The run.
    pub row: RunRow,
    /// The plan to run: the stored one, or the one given with `force`.
    pub source: Source,
    /// Its format.
    pub format: Format,
    /// Failed steps to run again (their records are dropped by [`resume`]).
    retry_failed: bool,
    /// Steps to run again with their dependents.
    retry_steps: Vec<String>,
    /// The policy the run was started under ([`policy_of`]), and the one it must meet too
    /// ([`ResumeOptions::also`]).
    policy: Option<crate::Policy>,
    also: Option<crate::Policy>,
}

impl ResumeFrom {
    /// The run's plan prepared again to go on with ([`crate::prepare`] with the run's inputs,
    /// then the layer or task the run was started for), its tools from `toolbox`.
    pub async fn prepare(
        &self,
        toolbox: &crate::Toolbox,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Prepared, LifecycleError> {
        // A run whose calls went to a queue's workers goes on there: its calls must not run
        // in this process instead, whichever front-end resumes it.
        if let Some(queue) = crate::sources_of(&self.row).queue
            && !toolbox.has_queue()
        {
            return Err(LifecycleError::Refused(format!(
                "run {}'s calls go to the workers of BullMQ queue `{}`: go on with it where that queue is connected",
                self.row.run_id, queue.name
            )));
        }
        let text = crate::PlanText {
            source: self.source.clone(),
            format: self.format,
            fallback_id: self.row.plan_id.clone(),
        };
        let prepared = crate::prepare(
            text,
            self.row.inputs.clone().into(),
            toolbox,
            crate::Strictness::RUN,
            env,
        )
        .await
        .map_err(|error| LifecycleError::Prepare(Box::new(error)))?;
        // A run started for one layer or step goes on with just that part.
        let (layer, task) = filters_of(&self.row);
        crate::select(prepared, layer.as_deref(), task.as_deref(), toolbox).await
    }

    /// Goes on with the run: its plan prepared again ([`ResumeFrom::prepare`]), then
    /// [`resume`] with the execution `execution` makes for the prepared plan (a front-end
    /// shows the run by its steps).
    pub async fn go_on(
        self: Box<Self>,
        store: Store,
        toolbox: &crate::Toolbox,
        env: &dyn Fn(&str) -> Option<String>,
        execution: impl FnOnce(&Prepared) -> Execution,
    ) -> Result<Outcome, LifecycleError> {
        let prepared = self.prepare(toolbox, env).await?;
        let execution = execution(&prepared);
        resume(store, self, prepared, execution).await
    }
}

/// Checks that run `run` (its id or a unique prefix) can be resumed: its owner is gone (or
/// `force`), and a given plan is the run's (or `force`). A finished run without
/// `retry_failed` gives its report.
pub fn prepare_resume(
    store: &Store,
    run: &str,
    options: &ResumeOptions,
) -> Result<Resumable, LifecycleError> {
    let row = store.run(run)?;
    if let Some(pid) = owner_alive(&row)
        && !options.force
    {
        return Err(LifecycleError::StillRunning {
            run_id: row.run_id.clone(),
            pid,
        });
    }
    if !options.retry_steps.is_empty() {
        let plan = plan_of(&row)?;
        let ids: Vec<String> = plan.steps.iter().map(|s| s.id.0.clone()).collect();
        for step in &options.retry_steps {
            if !ids.contains(step) {
                let hint = plan_graph::closest(step, &ids)
                    .map(|near| format!(" (did you mean `{near}`?)"))
                    .unwrap_or_default();
                return Err(LifecycleError::Refused(format!(
                    "run {} has no step `{step}`{hint}",
                    row.run_id
                )));
            }
        }
    }
    if row.state == RunState::Finished
        && !options.retry_failed
        && options.retry_steps.is_empty()
        && !options.replanned
    {
        // Nothing left to run: what it gave, as `run` reported it.
        return Ok(Resumable::Finished(Outcome {
            report: report(store, &row)?,
        }));
    }
    let mut source = Source::new(row.plan_name.clone(), row.plan_source.clone());
    let mut format = format_of(&row.plan_format);
    if let Some((given, given_format)) = &options.plan
        && plan_store::plan_hash(given.text()) != row.plan_hash
    {
        let loaded = plan_graph::load(given.clone(), *given_format, &LoadOptions::default())
            .map_err(|invalid| LifecycleError::InvalidPlan(Box::new(invalid)))?;
        let changes = plan_drift(&plan_of(&row)?, &loaded.plan);
        if !changes.is_empty() && !options.force {
            return Err(LifecycleError::PlanDiffers {
                plan: given.name().to_owned(),
                run_id: row.run_id.clone(),
                changes,
            });
        }
        if !changes.is_empty() {
            source = given.clone();
            format = *given_format;
        }
    }
    Ok(Resumable::Continue(Box::new(ResumeFrom {
        source,
        format,
        retry_failed: options.retry_failed,
        retry_steps: options.retry_steps.clone(),
        policy: policy_of(&row),
        also: options.also.clone(),
        row,
    })))
}

/// Goes on with a run that [`prepare_resume`] cleared, with its plan prepared (with the run's
/// plan id and stored inputs): completed steps are not run again, decisions are read back.
pub async fn resume(
    mut store: Store,
    from: Box<ResumeFrom>,
    prepared: Prepared,
    mut execution: Execution,
) -> Result<Outcome, LifecycleError> {
    let ResumeFrom {
        row,
        source,
        retry_failed,
        retry_steps,
        policy,
        also,
        ..
    } = *from;
    // Whoever resumes it, a run of another author's plan is held to that author's policy,
    // and to the resuming front-end's too.
    for policy in policy.iter().chain(&also) {
        hold_to(policy, author_of(&row), &prepared, &mut execution)?;
    }
    let kept = crate::sources_of(&row).state_file;
    let given = (execution.state_file.as_deref())
        .map(|path| std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()));
    let folder = working_dir_of(&row);
    let folder = folder.as_deref().and_then(Path::to_str);
    let state_file = state_file_of(&mut execution, kept.clone(), &prepared, folder)?;
    // Another file given: the run keeps that one from now on (once nothing can refuse the
    // resume any more), so that no later resume writes the old one again.
    let keep_state_file = given.filter(|given| kept.as_ref() != Some(given));
    let events_file = open_events_file(&mut execution)?;
    // Prepared already: the text is not kept through the run.
    drop(source);
    // What the run's last process made durable in its log and did not commit is folded in
    // before anything is read back.
    store.recover(&row.run_id)?;
    // The run is this process's from here: claimed in one statement, so that of two processes
    // going on with it at once one gets it. What fails before it runs gives it back, stopped.
    let seen = (row.state == RunState::Running)
        .then_some(row.owner_pid)
        .flatten();
    if !store.resume_run(&row.run_id, std::process::id(), seen)? {
        let now = store.run(&row.run_id)?;
        return Err(LifecycleError::StillRunning {
            run_id: row.run_id.clone(),
            pid: now.owner_pid.unwrap_or(0),
        });
    }
    let restored = async {
        // A cancel asked of the run's last process is done with.
        if crate::cancel::stop_asked(&row) {
            store.set_option(&row.run_id, crate::cancel::STOP_ASKED, &Value::Null)?;
        }
        // Steps a model wrote into the plan (`replan`) wait for approvals whatever the run was
        // given (its policy's are `hold_to`'s).
        if approvals_kept_on(&store, &row.run_id)?.is_some() {
            execution.approvals = Some(true);
        }
        let mut records = store.records(&row.run_id)?;
        if retry_failed || !retry_steps.is_empty() {
            // A failed step runs again; a failed block runs again from its entry point, so the
            // records of its nodes (`STEP/NODE#N`) go too. A step named to run again goes with
            // its map items, its nodes, and every step that depends on it.
            let failed: Vec<String> = if retry_failed {
                records
                    .iter()
                    .filter(|r| r.error.is_some())
                    .map(|r| r.step_id.clone())
                    .collect()
            } else {
                Vec::new()
            };
            let plan = plan_of(&row)?;
            let deps = plan_graph::Dependencies::new(&plan);
            // The step of the plan a record is of (itself, an item, or a call inside it), if any:
            // a step of an earlier revision (`run --replan`) is none, and its record stays.
            let index =
                plan_graph::StepIndex::new(plan.steps.iter().map(|step| step.id.0.as_str()));
            let step_of = |id: &str| index.step_of(id);
            let failed: Vec<&String> = failed.iter().filter(|id| step_of(id).is_some()).collect();
            // Steps run again whole: the named ones, and every step after a named or a failed one
            // (what it saw of them changes: a `run_if: all_done` cleanup runs again after the
            // deploy it follows). One pass in dependency order: a step is marked when one of its
            // dependencies is.
            let mut again = vec![false; plan.steps.len()];
            let mut after = vec![false; plan.steps.len()];
            for id in &retry_steps {
                if let Some(i) = plan.position(id) {
                    again[i] = true;
                    after[i] = true;
                }
            }
            for id in &failed {
                if let Some(i) = step_of(id) {
                    after[i] = true;
                }
            }
            for i in deps.levels().into_iter().flatten() {
                if deps.deps[i].iter().any(|&d| after[d]) {
                    again[i] = true;
                    after[i] = true;
                }
            }
            // A failed map step keeps its items that succeeded, a failed block runs again from
            // its entry (its nodes' records go), and a step run again loses everything it made.
            let forgotten = |id: &str| {
                // A call inside a step goes with its step; an item is a call of its own.
                let top = match index.call_of(id) {
                    Some(plan_graph::CallOf::Inside(i, _)) => plan.steps[i].id.0.as_str(),
                    _ => id,
                };
                failed.iter().any(|f| id == f.as_str() || top == f.as_str())
                    || step_of(id).is_some_and(|i| again[i])
            };
            let forget: Vec<String> = records
                .iter()
                .map(|r| r.step_id.clone())
                .filter(|id| forgotten(id))
                .collect();
            store.forget_records(&row.run_id, &forget)?;
            records.retain(|r| !forgotten(&r.step_id));
        }
        let dir = working_dir_of(&row).map(|dir| dir.display().to_string());
        // The folder the run was started with: its policy's (or, for a run from before policies
        // were kept, the folder its start kept); a run a model re-planned keeps the model's
        // steps' programs in the folder the re-plan kept.
        let root = policy
            .as_ref()
            .map(|policy| policy.workdir.clone())
            .or_else(|| stored_folder(&row, "workspace_root"))
            .map(|root| root.display().to_string());
        let workspace =
            open_workspace(&prepared.loaded.plan, dir.as_deref(), root.as_deref()).await?;
        let confined_to = root.clone().or_else(|| {
            stored_folder(&row, crate::generate::REPLAN_FOLDER)
                .map(|root| root.display().to_string())
        });
        let variables = store.variables(&row.run_id)?;
        let approvals = store.decisions(&row.run_id)?;
        let checkpoints = store.checkpoints(&row.run_id)?;
        let earlier_attempts = store.earlier_attempts(&row.run_id)?;
        let stored_limit = row
            .options
            .get("max_concurrency")
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok());
        let mode = row
            .options
            .get("mode")
            .and_then(|mode| serde_json::from_value(mode.clone()).ok())
            .unwrap_or(Mode::Auto);
        let stored_approvals = row.options.get("approvals").and_then(Value::as_bool);
        Ok::<_, LifecycleError>(From {
            started_at: row.started_at.clone(),
            restored: Some(Restored {
                records,
                variables,
                checkpoints,
                earlier_attempts,
            }),
            stored_limit,
            stored_approvals,
            approvals,
            mode,
            workspace,
            confined_to,
        })
    }
    .await;
    let from = match restored {
        Ok(from) => from,
        Err(error) => {
            let _ = store.end_run(&row.run_id, RunState::Stopped, None, SystemTime::now());
            return Err(error);
        }
    };
    // The row holds the plan's text: only its id goes on.
    let run_id = row.run_id.clone();
    drop(row);
    if let Some(path) = keep_state_file {
        store.set_option(&run_id, "$.sources.state_file", &json!(path))?;
    }
    finish(
        events_file,
        execute(prepared, &run_id, store, from, execution, state_file).await,
    )
}

/// What `plan-workspace` reads of a plan's `workspace:`.
pub(crate) fn workspace_settings(settings: &plan_graph::Workspace) -> plan_workspace::Settings {
    plan_workspace::Settings {
        repo: settings.repo.clone(),
        worktree_dir: settings.worktree_dir.clone(),
        base: settings.base.clone(),
    }
}

/// The steps (and other settings) in which plan `given` differs from a run's `stored` plan,
/// each in a few words (`step "b" changed`); empty when they are the same.
pub fn plan_drift(stored: &Plan, given: &Plan) -> Vec<String> {
    let as_json = |plan: &Plan| -> Vec<(String, Value)> {
        plan.steps
            .iter()
            .map(|s| {
                (
                    s.id.0.clone(),
                    serde_json::to_value(s).unwrap_or(Value::Null),
                )
            })
            .collect()
    };
    let (old, new) = (as_json(stored), as_json(given));
    let mut changes = Vec::new();
    for (id, step) in &old {
        match new.iter().find(|(other, _)| other == id) {
            None => changes.push(format!("step `{id}` was removed")),
            Some((_, other)) if other != step => changes.push(format!("step `{id}` changed")),
            Some(_) => {}
        }
    }
    for (id, _) in new
        .iter()
        .filter(|(id, _)| !old.iter().any(|(other, _)| other == id))
    {
        changes.push(format!("step `{id}` was added"));
    }
    let rest = |plan: &Plan| {
        json!([
            plan.variables,
            plan.env,
            plan.max_concurrency,
            plan.retry,
            plan.timeout_ms
        ])
    };
    if rest(stored) != rest(given) {
        changes.push("the plan's variables or settings changed".to_owned());
    }
    changes
}

/// The process that owns a run marked running, if it is alive and not this one.
pub fn owner_alive(row: &RunRow) -> Option<u32> {
    if row.state != RunState::Running {
        return None;
    }
    row.owner_pid
        .filter(|&pid| pid != std::process::id() && process_alive(pid))
}

/// Folds into the ledger what a run whose process died (`kill -9`) had made durable in its log
/// and not yet committed, so that a report shows every step it completed; also when `cancel`
/// has marked it stopped since. A no-op for a run still running in a live process (this one
/// included: it may be writing its log) or that left no log, and on a ledger opened read-only.
/// (`resume` does it too, before it goes on.)
pub fn recover_interrupted(store: &mut Store, row: &RunRow) -> Result<(), LifecycleError> {
    let running = row.state == RunState::Running && !owner_died(row);
    if !running {
        store.recover(&row.run_id)?;
    }
    Ok(())
}

/// The run with this id (or a unique prefix, or `last`), with what its process made durable
/// before it died folded in ([`recover_interrupted`]): what every reader of a run shows.
pub fn read_run(store: &mut Store, id: &str) -> Result<RunRow, LifecycleError> {
    let row = store.run(id)?;
    recover_interrupted(store, &row)?;
    Ok(row)
}

/// Whether a run marked running lost its process (killed, crashed): it will never finish by
/// itself, and `resume` continues it.
pub(crate) fn owner_died(row: &RunRow) -> bool {
    row.state == RunState::Running
        && row
            .owner_pid
            .is_some_and(|pid| pid != std::process::id() && !process_alive(pid))
}

/// Whether a process is alive (Linux: its /proc entry exists and it is not a zombie, dead
/// but not yet reaped). Elsewhere, assume it is.
fn process_alive(pid: u32) -> bool {
    let proc = Path::new("/proc");
    if !proc.exists() {
        return true;
    }
    match std::fs::read_to_string(proc.join(pid.to_string()).join("stat")) {
        // `PID (COMMAND) STATE ...`: the command may hold spaces and parentheses.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_none_or(|state| state != 'Z' && state != 'X'),
        Err(_) => false,
    }
}

/// What a run starts from besides its plan and execution settings.
struct From {
    /// When the run was first started, as the ledger keeps it.
    started_at: String,
    /// What an earlier attempt at the run settled (`resume`).
    restored: Option<Restored>,
    /// The `max_concurrency` the run was started with.
    stored_limit: Option<u32>,
    /// The approvals switch the run was started with (`--approvals`), if one was given.
    stored_approvals: Option<bool>,
    approvals: Approvals,
    mode: Mode,
    /// The git repository of the plan's task steps.
    workspace: Option<Arc<dyn plan_engine::Workspace>>,
    /// The folder the run's programs stay in (its policy's, or the one a re-plan kept).
    confined_to: Option<String>,
}

/// Opens the plan's `workspace` (the git repository its task steps work in), relative to the
/// run's folder (else the current one): before the run is recorded, so a repository that is
/// not there refuses the run rather than failing every task.
async fn open_workspace(
    plan: &Plan,
    dir: Option<&str>,
    root: Option<&str>,
) -> Result<Option<Arc<dyn plan_engine::Workspace>>, LifecycleError> {
    let Some(settings) = &plan.workspace else {
        return Ok(None);
    };
    let dir = match dir {
        Some(dir) => std::path::PathBuf::from(dir),
        None => std::env::current_dir()
            .map_err(|e| LifecycleError::Refused(format!("cannot read the current folder: {e}")))?,
    };
    let workspace = plan_workspace::GitWorkspace::open(&workspace_settings(settings), &dir)
        .await
        .map_err(|error| LifecycleError::Refused(error.to_string()))?;
    if let Some(root) = root {
        // The repository git found (through links, or upward from a subfolder) and the
        // worktree folder must lie in the root: a policy's check of the plan's text can see
        // neither. (The worktree folder is resolved already, links followed.)
        let root_path = std::fs::canonicalize(root).map_err(|e| {
            LifecycleError::Refused(format!("cannot read the work folder {root}: {e}"))
        })?;
        for (what, path) in [
            ("repository", workspace.repo()),
            ("worktree folder", workspace.worktree_dir()),
        ] {
            let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
            if !real.starts_with(&root_path) {
                return Err(LifecycleError::Refused(format!(
                    "the workspace's {what} {} is outside {}, the folder plans of this author may use (set `worktree_dir` to a folder inside it)",
                    path.display(),
                    root_path.display()
                )));
            }
        }
    }
    Ok(Some(Arc::new(workspace)))
}

/// Refuses a state file given to a run ([`Execution::state_file`]) that cannot be written. The
/// run refuses it too, but only once the ledger is open: a front-end asks first, so that a
/// refused first run leaves no ledger behind.
pub fn check_state_file(path: &Path) -> Result<(), LifecycleError> {
    StateFile::check(path).map_err(|source| LifecycleError::StateFileUnusable {
        kept: false,
        source,
    })
}

/// The state file a run keeps current: the one `execution` gives, else `kept` (a resumed run's
/// own), else the one beside the plan's task breakdown (its `tasks` read from the run's folder,
/// `folder`, as the document reads it); a given or kept one that cannot be written is refused
/// before anything is recorded.
fn state_file_of(
    execution: &mut Execution,
    kept: Option<std::path::PathBuf>,
    prepared: &Prepared,
    folder: Option<&str>,
) -> Result<Option<StateFile>, LifecycleError> {
    let given = execution.state_file.take();
    let was_kept = given.is_none() && kept.is_some();
    let path = given.or(kept);
    if let Some(path) = &path {
        StateFile::check(path).map_err(|source| LifecycleError::StateFileUnusable {
            kept: was_kept,
            source,
        })?;
    }
    let folder = folder.map(str::to_owned).or(execution.project_path.clone());
    Ok(StateFile::for_run(
        path,
        &prepared.loaded.plan,
        folder.as_deref().map(Path::new),
        execution.project_path.clone(),
    ))
}

/// Runs a prepared plan as run `run_id`, recording it in `store`.
async fn execute(
    prepared: Prepared,
    run_id: &str,
    store: Store,
    from: From,
    execution: Execution,
    state_file: Option<StateFile>,
) -> Result<Outcome, LifecycleError> {
    // The run's last record counts from its first start (a resumed run's too, as `status`
    // counts it later; the `run.finished` event says how long this attempt took).
    let started_at = humantime::parse_rfc3339(&from.started_at).ok();
    let ledger_events = Arc::new(EventBuffer::default());
    // Where the run's counts are kept once it ends (the journal holds the ledger till then).
    let ledger = store.path().to_path_buf();
    let journal = RunJournal::new(store, run_id, ledger_events.clone())?;
    let state_failed = Arc::new(std::sync::Mutex::new(None));
    let journal: Box<dyn plan_types::Journal> = match state_file {
        None => Box::new(journal),
        Some(file) => Box::new(crate::state_file::StateFileJournal {
            inner: journal,
            file,
            run_id: run_id.to_owned(),
            plan: prepared.loaded.plan.clone(),
            last: None,
            failed: state_failed.clone(),
        }),
    };
    let mut sinks: Vec<Arc<dyn EventSink>> = vec![ledger_events];
    sinks.extend(execution.events);
    let mut options = RunOptions::new(run_id);
    options.max_concurrency = execution
        .max_concurrency
        .or(from.stored_limit)
        .map(|n| n as usize);
    options.inputs = prepared.inputs;
    options.env = prepared.env;
    options.events = Some(Arc::new(Fanout(sinks)));
    options.output = execution.output.clone();
    options.journal = Some(journal);
    options.started_at = started_at;
    options.durability = execution.durability;
    options.restored = from.restored;
    options.approvals = from.approvals;
    // This invocation's switch, else the one the run was started with, else the plan's.
    if execution
        .approvals
        .or(from.stored_approvals)
        .or(prepared.loaded.plan.approvals)
        .is_some_and(|on| !on)
    {
        options.approvals.turn_off();
    }
    options.mode = Some(from.mode);
    options.cancel = execution.cancel.clone();
    options.workspace = from.workspace;
    options.confined_to = from.confined_to.map(|root| Arc::from(Path::new(&root)));
    // The run needs only the program: the plan and its text go now, not after the run.
    drop(prepared.loaded);
    let program = Arc::new(prepared.program);
    let journal_failed = |message: String| LifecycleError::Journal {
        run_id: run_id.to_owned(),
        message,
    };
    #[cfg(feature = "queue")]
    if let Some(queue) = &execution.queue {
        // Losing the queue stops the run (resumable) instead of hanging it. (Results of calls
        // an earlier coordinator of this run made come back by the calls' job ids.)
        let (lost, stop) = (queue.lost(), execution.cancel.clone());
        tokio::spawn(async move {
            lost.cancelled().await;
            stop.cancel();
        });
    }
    // The timer ends with the run (the guard is dropped on every way out of this function).
    let finished = CancellationToken::new();
    let _finished = finished.clone().drop_guard();
    if let Some(limit) = execution.time_limit {
        let stop = execution.cancel.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = tokio::time::sleep(limit) => stop.cancel(),
                () = finished.cancelled() => {}
            }
        });
    }
    // The scheduler runs as a task: the steps it spawns then start on its worker's LIFO slot
    // instead of waking another thread (a chain step costs ~4 µs instead of ~15–50 µs).
    let engine = program.clone();
    let outcome = tokio::spawn(async move { plan_engine::run(&engine, options).await }).await;
    let report = match outcome {
        Ok(Ok(report)) => report,
        Ok(Err(RunError::Preview)) => {
            return Err(LifecycleError::Refused("a preview runs nothing".to_owned()));
        }
        Ok(Err(RunError::Journal(message))) => return Err(journal_failed(message)),
        Err(error) => {
            return Err(LifecycleError::Internal(format!(
                "the engine stopped unexpectedly: {error}"
            )));
        }
    };
    // How its steps ended, for a list of runs to say without reading their records (counted
    // from the report in memory: nothing to read back). A ledger that cannot take it costs the
    // list its counts, never the run.
    if let Ok(mut store) = Store::open(&ledger) {
        let _ = store.keep_counts(run_id, crate::report::counts(&report, &program));
    }
    if let Some(message) = state_failed
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
    {
        return Err(LifecycleError::StateFile {
            run_id: run_id.to_owned(),
            message,
        });
    }
    Ok(Outcome { report })
}
