//! `run` and `resume`: a run recorded in the ledger as it goes.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use plan_engine::{Mode, RunError, RunOptions};
use plan_graph::{LoadOptions, Plan, Source};
use plan_store::{Decision, EventBuffer, NewRun, RunJournal, RunState};
use plan_types::{Approvals, EventSink, Fanout, Restored, RunReport};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::ledger::{execute_state, plan_of, stored_report};
use super::plans::{format_name, format_of};
use super::{pretty, print};
use crate::cli::{ExecutionArgs, ResumeArgs, RunArgs};
use crate::events_file::EventsFile;
use crate::exit::Failure;
use crate::ledger::Ledger;
use crate::output::{self, Progress};
use crate::plan_file::{Ready, prepare, prepare_source};
use crate::toolbox::Toolbox;

/// What a run starts from besides its plan and flags.
struct Start {
    /// What an earlier attempt at the run settled (`resume`).
    restored: Option<Restored>,
    /// The `--max-concurrency` the run was started with.
    stored_limit: Option<u32>,
    approvals: Approvals,
    mode: Mode,
    /// With `--queue`: where the results of the run's calls come back.
    remote: Option<Arc<plan_queue::Dispatcher>>,
}

pub(crate) fn run(args: &RunArgs, toolbox: &Toolbox, ledger: &Ledger) -> Result<i32, Failure> {
    if let Some(url) = &args.execution.queue
        && !args.dry_run
    {
        toolbox.use_queue(url, &args.execution.queue_name)?;
    }
    let ready = prepare(&args.plan, toolbox, ledger)?;
    let mode = args.mode.map_or(ready.program.mode(), Mode::from);
    if args.dry_run || mode == Mode::Preview {
        let calls = ready.program.preview(&ready.inputs, &ready.env);
        let gated = ready.program.gated_steps();
        let text = if args.execution.json {
            pretty(&json!({
                "plan_id": ready.program.plan_id(),
                "dry_run": true,
                "calls": calls,
                "needs_approval": gated,
            }))
        } else {
            let mut text = String::new();
            if mode == Mode::Preview {
                // A preview also draws the graph, as `show` does.
                text.push_str(&plan_graph::render::ascii(&ready.loaded.plan, &|_| {
                    plan_graph::render::Mark::Pending
                }));
                text.push('\n');
            }
            text.push_str(&output::preview(ready.program.plan_id(), &calls));
            if !gated.is_empty() {
                text.push_str(&format!("needs approval: {}\n", gated.join(", ")));
            }
            text
        };
        print(&text)?;
        return Ok(0);
    }
    let json = args.execution.json;
    let (report, plan) = start_run(ready, &args.approve, mode, &args.execution, toolbox, ledger)?;
    print_outcome(&report, &plan, json)
}

/// Records a new run of a prepared plan and runs it; `approve` lists high-risk steps approved
/// in advance.
pub(crate) fn start_run(
    ready: Ready,
    approve: &[String],
    mode: Mode,
    execution: &ExecutionArgs,
    toolbox: &Toolbox,
    ledger: &Ledger,
) -> Result<(RunReport, Arc<Plan>), Failure> {
    let gated: Vec<String> = ready.program.gated_steps();
    let mut approvals = Approvals::new();
    for id in approve {
        if !super::approvals::can_wait(id, &gated) {
            let steps = if gated.is_empty() {
                "the plan has none".to_owned()
            } else {
                format!("the plan's are {}", gated.join(", "))
            };
            return Err(Failure::input(format!(
                "--approve {id}: `{id}` is not a high-risk step ({steps})"
            )));
        }
        approvals.approve(id.clone());
    }
    let mut store = ledger.open()?;
    let run_id = ulid::Ulid::new().to_string();
    let options = json!({
        "max_concurrency": execution.max_concurrency,
        "mode": mode,
    });
    store
        .begin_run(&NewRun {
            run_id: &run_id,
            plan_id: ready.program.plan_id(),
            plan_name: ready.loaded.source.name(),
            plan_format: format_name(ready.format),
            plan_source: ready.loaded.source.text(),
            inputs: &ready.inputs,
            options: &options,
            owner_pid: std::process::id(),
            started_at: &plan_store::timestamp(SystemTime::now()),
        })
        .map_err(Failure::ledger)?;
    for id in approve {
        store
            .decide(
                &run_id,
                id,
                Decision::Approved,
                Some("approved with run --approve"),
            )
            .map_err(Failure::ledger)?;
    }
    let start = Start {
        restored: None,
        stored_limit: None,
        approvals,
        mode,
        remote: toolbox.remote().cloned(),
    };
    execute(
        ready,
        &run_id,
        store,
        start,
        execution,
        ledger,
        toolbox.runtime(),
    )
}

pub(crate) fn resume(
    args: &ResumeArgs,
    toolbox: &Toolbox,
    ledger: &Ledger,
) -> Result<i32, Failure> {
    let (report, plan) = continue_run(args, toolbox, ledger)?;
    print_outcome(&report, &plan, args.execution.json)
}

/// Goes on with a stored run (a finished one, unless failures are to be retried, only gives
/// its report).
pub(crate) fn continue_run(
    args: &ResumeArgs,
    toolbox: &Toolbox,
    ledger: &Ledger,
) -> Result<(RunReport, Arc<Plan>), Failure> {
    let mut store = ledger.open_existing()?;
    let row = store.run(&args.run).map_err(Failure::ledger)?;
    if row.state == RunState::Running
        && let Some(pid) = row
            .owner_pid
            .filter(|&pid| pid != std::process::id() && process_alive(pid))
        && !args.force
    {
        return Err(Failure::input(format!(
            "run {} is still running in process {pid}; stop it first, or resume with --force if that process is not plan-cli",
            row.run_id
        )));
    }
    if row.state == RunState::Finished && !args.retry_failed {
        // Nothing left to run: what it gave, as `run` reported it.
        return Ok((stored_report(&store, &row)?, Arc::new(plan_of(&row)?)));
    }
    if let Some(url) = &args.execution.queue {
        toolbox.use_queue(url, &args.execution.queue_name)?;
    }
    let mut source = Source::new(row.plan_name.clone(), row.plan_source.clone());
    let mut format = format_of(&row.plan_format);
    if let Some(file) = &args.plan {
        let (given, given_format) = crate::plan_file::read_source(file, ledger)?;
        if plan_store::plan_hash(given.text()) != row.plan_hash {
            let changes = differences(&plan_of(&row)?, &given, given_format)?;
            if !changes.is_empty() && !args.force {
                return Err(Failure::input(format!(
                    "{} is not the plan run {} ran: {}; resume without --plan to use the stored plan, or with --force to use this one",
                    file.display(),
                    row.run_id,
                    changes.join(", ")
                )));
            }
            if !changes.is_empty() {
                source = given;
                format = given_format;
            }
        }
    }
    let ready = prepare_source(
        source,
        format,
        row.plan_id.clone(),
        row.inputs.clone(),
        toolbox,
    )?;
    let mut records = store.records(&row.run_id).map_err(Failure::ledger)?;
    if args.retry_failed {
        // A failed step runs again; a failed block runs again from its entry point, so the
        // records of its nodes (`STEP/NODE#N`) go too.
        let failed: Vec<String> = records
            .iter()
            .filter(|r| r.error.is_some())
            .map(|r| r.step_id.clone())
            .collect();
        let forgotten = |id: &str| {
            failed
                .iter()
                .any(|f| id == f || id.starts_with(&format!("{f}/")))
        };
        let forget: Vec<String> = records
            .iter()
            .map(|r| r.step_id.clone())
            .filter(|id| forgotten(id))
            .collect();
        store
            .forget_records(&row.run_id, &forget)
            .map_err(Failure::ledger)?;
        records.retain(|r| !forgotten(&r.step_id));
    }
    let variables = store.variables(&row.run_id).map_err(Failure::ledger)?;
    let approvals = store.decisions(&row.run_id).map_err(Failure::ledger)?;
    let checkpoints = store.checkpoints(&row.run_id).map_err(Failure::ledger)?;
    store
        .resume_run(&row.run_id, std::process::id())
        .map_err(Failure::ledger)?;
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
    let start = Start {
        restored: Some(Restored {
            records,
            variables,
            checkpoints,
        }),
        stored_limit,
        approvals,
        mode,
        remote: toolbox.remote().cloned(),
    };
    execute(
        ready,
        &row.run_id,
        store,
        start,
        &args.execution,
        ledger,
        toolbox.runtime(),
    )
}

/// Prints a run's outcome as `run` does (the summary, or `--json`'s object) and gives the exit
/// code of its status.
pub(crate) fn print_outcome(report: &RunReport, plan: &Plan, json: bool) -> Result<i32, Failure> {
    let run_id = &report.run_id;
    if json {
        super::print_json(report)?;
    } else {
        print(&output::summary(report, plan))?;
    }
    if report.task_status == plan_types::TaskStatus::Stopped && !json {
        eprintln!("run {run_id} stopped; continue it with `plan-cli resume {run_id}`");
    }
    if report.task_status == plan_types::TaskStatus::Waiting && !json {
        print(&output::waiting(report))?;
    }
    Ok(report.task_status.exit_code())
}

/// The steps (and other fields) in which a plan file differs from a run's stored plan.
fn differences(
    stored: &Plan,
    given: &Source,
    format: plan_graph::Format,
) -> Result<Vec<String>, Failure> {
    let given = match plan_graph::load(given.clone(), format, &LoadOptions::default()) {
        Ok(loaded) => loaded.plan,
        Err(invalid) => {
            return Err(Failure::invalid_plan(
                invalid.plan_source.name(),
                invalid.error_count(),
                crate::plan_file::render(&invalid.plan_source, &invalid.issues),
            ));
        }
    };
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
    let (old, new) = (as_json(stored), as_json(&given));
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
    if rest(stored) != rest(&given) {
        changes.push("the plan's variables or settings changed".to_owned());
    }
    Ok(changes)
}

/// Whether a process is alive (Linux: its /proc entry exists). Elsewhere, assume it is.
fn process_alive(pid: u32) -> bool {
    let proc = Path::new("/proc");
    !proc.exists() || proc.join(pid.to_string()).exists()
}

/// Runs a prepared plan as run `run_id`, recording it in `store`.
fn execute(
    ready: Ready,
    run_id: &str,
    store: plan_store::Store,
    start: Start,
    args: &ExecutionArgs,
    ledger: &Ledger,
    runtime: &tokio::runtime::Runtime,
) -> Result<(RunReport, Arc<Plan>), Failure> {
    let ledger_events = Arc::new(EventBuffer::default());
    let journal = RunJournal::new(store, run_id, ledger_events.clone()).map_err(Failure::ledger)?;
    let mut sinks: Vec<Arc<dyn EventSink>> = vec![ledger_events];
    let events_file = match &args.events {
        Some(path) => Some(Arc::new(EventsFile::open(path).map_err(|error| {
            Failure::input(format!(
                "cannot open events file `{}`: {error}",
                path.display()
            ))
        })?)),
        None => None,
    };
    if let Some(file) = &events_file {
        sinks.push(file.clone());
    }
    let progress = if args.json {
        None
    } else {
        Progress::for_terminal(ready.program.len()).map(Arc::new)
    };
    if let Some(progress) = &progress {
        sinks.push(progress.clone());
    }
    let mut options = RunOptions::new(run_id);
    options.max_concurrency = args
        .max_concurrency
        .or(start.stored_limit)
        .map(|n| n as usize);
    options.inputs = ready.inputs;
    options.env = ready.env;
    options.events = Some(Arc::new(Fanout(sinks)));
    options.journal = Some(Box::new(journal));
    options.durability = args.durability.parse().map_err(Failure::input)?;
    options.restored = start.restored;
    options.approvals = start.approvals;
    options.mode = Some(start.mode);
    let cancel = CancellationToken::new();
    options.cancel = cancel.clone();

    let program = Arc::new(ready.program);
    let plan = Arc::new(ready.loaded.plan);
    let remote = start.remote.clone();
    let outcome = runtime.block_on(async {
        tokio::spawn(stop_on_signals(cancel.clone(), run_id.to_owned()));
        if let Some(remote) = &remote {
            // Results of calls an earlier coordinator of this run made are picked up, and
            // losing Redis stops the run (resumable) instead of hanging it.
            if let Err(error) = remote.attach(run_id).await {
                return Ok(Err(RunError::Journal(error.to_string())));
            }
            let (lost, stop) = (remote.lost(), cancel.clone());
            tokio::spawn(async move {
                lost.cancelled().await;
                eprintln!("the queue was lost; the run stops and can be resumed");
                stop.cancel();
            });
        }
        let state_writer = args.state_file.clone().map(|path| {
            let (plan, run_id, db) = (plan.clone(), run_id.to_owned(), ledger.path().to_path_buf());
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(250)).await;
                    let _ = write_state_file(&db, &run_id, &plan, &path);
                }
            })
        });
        // The scheduler runs as a task on a worker thread: the steps it spawns then start on
        // that worker's LIFO slot instead of waking another thread (a chain step costs ~4 µs
        // instead of ~15–50 µs).
        let engine = program.clone();
        let outcome = tokio::spawn(async move { plan_engine::run(&engine, options).await }).await;
        if let Some(writer) = state_writer {
            writer.abort();
        }
        outcome
    });
    if let Some(progress) = &progress {
        progress.finish();
    }
    if let Some(file) = &events_file {
        file.close();
    }
    if let Some(path) = &args.state_file {
        write_state_file(ledger.path(), run_id, &plan, path).map_err(Failure::internal)?;
    }
    if let (Some(remote), Ok(Ok(report))) = (&remote, &outcome)
        && !matches!(
            report.task_status,
            plan_types::TaskStatus::Stopped | plan_types::TaskStatus::Waiting
        )
    {
        runtime.block_on(remote.forget(run_id));
    }
    let report = match outcome {
        Ok(Ok(report)) => report,
        Ok(Err(RunError::Preview)) => {
            return Err(Failure::internal("a preview runs nothing"));
        }
        Ok(Err(RunError::Journal(message))) => {
            return Err(Failure::internal(format!(
                "the ledger could not be written, so run {run_id} stopped: {message}\nwhat was recorded before is kept: fix the cause, then `plan-cli resume {run_id}`"
            )));
        }
        Err(error) => {
            return Err(Failure::internal(format!(
                "the engine stopped unexpectedly: {error}"
            )));
        }
    };
    Ok((report, plan))
}

/// Ctrl+C or SIGTERM stops the run: nothing new starts, running tools are cancelled, what
/// succeeded stays in the ledger, and `resume` continues. A second one exits at once: every
/// commit is a transaction, so the ledger stays consistent, and the calls in flight run again
/// on resume.
async fn stop_on_signals(cancel: CancellationToken, run_id: String) {
    let mut signals = Signals::new();
    if !signals.next().await {
        return;
    }
    cancel.cancel();
    eprintln!(
        "stopping run {run_id}: running steps are cancelled, nothing new starts (press Ctrl+C again to exit at once)"
    );
    if signals.next().await {
        eprintln!(
            "exiting at once; what finished is in the ledger: continue with `plan-cli resume {run_id}`"
        );
        std::process::exit(plan_types::TaskStatus::Stopped.exit_code());
    }
}

/// Ctrl+C (SIGINT) and SIGTERM, watched from the start so that none is missed.
pub(crate) struct Signals {
    #[cfg(unix)]
    streams: Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>,
}

impl Signals {
    pub(crate) fn new() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Signals {
                streams: signal(SignalKind::interrupt())
                    .and_then(|i| Ok((i, signal(SignalKind::terminate())?)))
                    .ok(),
            }
        }
        #[cfg(not(unix))]
        Signals {}
    }

    /// Waits for the next signal; false if signals cannot be watched.
    pub(crate) async fn next(&mut self) -> bool {
        #[cfg(unix)]
        {
            let Some((interrupt, terminate)) = &mut self.streams else {
                return false;
            };
            tokio::select! {
                received = interrupt.recv() => received.is_some(),
                received = terminate.recv() => received.is_some(),
            }
        }
        #[cfg(not(unix))]
        {
            tokio::signal::ctrl_c().await.is_ok()
        }
    }
}

/// Writes the run's execute-state document to `path` atomically: a temporary file in the same
/// directory, renamed over the old one, so a reader never sees half a document.
fn write_state_file(db: &Path, run_id: &str, plan: &Plan, path: &PathBuf) -> Result<(), String> {
    let store = plan_store::Store::open(db).map_err(|e| e.to_string())?;
    let row = store.run(run_id).map_err(|e| e.to_string())?;
    let document = execute_state(&store, &row, plan).map_err(|f| f.message.unwrap_or_default())?;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut file = tempfile::NamedTempFile::new_in(dir)
        .map_err(|e| format!("cannot write the state file in {}: {e}", dir.display()))?;
    serde_json::to_writer_pretty(&mut file, &document).map_err(|e| e.to_string())?;
    file.write_all(b"\n").map_err(|e| e.to_string())?;
    file.persist(path)
        .map_err(|e| format!("cannot write the state file {}: {e}", path.display()))?;
    Ok(())
}
