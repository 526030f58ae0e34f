//! `run` and `resume`: a run recorded in the ledger as it goes.

use std::path::Path;
use std::sync::Arc;

use plan_engine::Mode;
use plan_graph::Severity;
use plan_types::RunReport;
use tokio_util::sync::CancellationToken;

use super::{pretty, print};
use crate::cli::{ExecutionArgs, ResumeArgs, RunArgs};
use crate::exit::Failure;
use crate::output::{self, Live, StepLabels};
use crate::plan_file::{Ready, prepare};
use crate::toolbox::Toolbox;
use plan_run::Ledger;

pub(crate) fn run(args: &RunArgs, toolbox: &Toolbox, ledger: &Ledger) -> Result<i32, Failure> {
    // A stored plan a model or a client wrote keeps its author: it runs under that author's
    // policy (widened by this command's --allow-* flags), not with the operator's powers.
    let author = args.plan.input().author(ledger)?;
    if author != plan_run::Author::Operator && !args.execution.json {
        eprintln!(
            "plan `{}` was written by {}: it runs under that author's policy (--allow-tool, --allow-env, --allow-workspace or --policy widen it)",
            args.plan.plan.display(),
            author.describe()
        );
    }
    run_as(args, author, toolbox, ledger)
}

/// `run`, of a plan `author` wrote: a model's plan (`plan create --run`) runs under the
/// model's policy (`args.policy`), with approvals on whatever it says; the operator's own runs
/// under a policy only when `--policy` gives one. Steps a model writes in `--replan` always
/// meet the model's policy.
pub(crate) fn run_as(
    args: &RunArgs,
    author: plan_run::Author,
    toolbox: &Toolbox,
    ledger: &Ledger,
) -> Result<i32, Failure> {
    let working_dir = args.plan.input().folder(args.execution.cwd.as_deref())?;
    let mut policy = crate::policy::of(&args.policy)?;
    // Unless the policy file names one, the work folder is where the run's programs run (the
    // plan file's folder, or --cwd): the run's programs, and a model's re-planned steps', stay
    // in it.
    if policy.workdir == Path::new(".")
        && let Some(dir) = &working_dir
    {
        policy.workdir.clone_from(dir);
    }
    let judged = author != plan_run::Author::Operator || args.policy.policy.is_some();
    if let Some(queue) = args.execution.queue_settings()
        && !args.dry_run
    {
        toolbox.use_queue(&queue)?;
    }
    let ready = prepare(&args.plan, toolbox, ledger, Severity::Warning)?;
    let ready = select(ready, args.layer.as_deref(), args.task.as_deref(), toolbox)?;
    let mode = args.mode.map_or(ready.program.mode(), Mode::from);
    if args.dry_run || mode == Mode::Preview {
        let dry_run = ready.dry_run();
        let text = if args.execution.json {
            pretty(&dry_run)
        } else {
            let mut text = String::new();
            if mode == Mode::Preview {
                // A preview also draws the graph, as `show` does.
                text.push_str(&plan_graph::render::ascii(&ready.loaded.plan, &|_| {
                    plan_graph::render::Mark::Pending
                }));
                text.push('\n');
            }
            text.push_str(&output::preview(&dry_run.plan_id, &dry_run.calls));
            if !dry_run.needs_approval.is_empty() {
                let gated = dry_run.needs_approval.join(", ");
                text.push_str(&format!("needs approval: {gated}\n"));
            }
            text
        };
        print(&text)?;
        // A dry run that finds a call that would fail says so in its exit code, as the run
        // would.
        return Ok(i32::from(args.dry_run && dry_run.would_fail()));
    }
    // A model to re-plan with is needed before anything runs, not after a failure.
    let mut replanner = (args.replan > 0).then(super::replan::model).transpose()?;
    let secrets: Vec<String> = ready.env.values().cloned().collect();
    let start = plan_run::Start {
        approve: args.approve.clone(),
        mode,
        working_dir: working_dir.map(|dir| dir.display().to_string()),
        layer_filter: args.layer.clone(),
        task_filter: args.task.clone(),
        author,
        // plan_run::start holds the run to it (and so does every resume).
        policy: judged.then(|| policy.clone()),
        sources: plan_run::RunSources {
            mcp_config: toolbox.config().map(Path::to_path_buf),
            queue: args
                .execution
                .queue_settings()
                .map(|queue| plan_run::QueueSource::of(&queue.url, &queue.name)),
            ..plan_run::RunSources::default()
        },
        ..plan_run::Start::new()
    };
    let execution = &args.execution;
    if judged
        && policy.forces_approvals()
        && (ready.loaded.plan.approvals == Some(false) || execution.approvals == Some(false))
    {
        let whose = match author {
            plan_run::Author::Model => "a model's",
            _ => "under --policy, a",
        };
        eprintln!("warning: approvals stay on: {whose} plan runs with its high-risk calls gated");
    }
    let mut outcome = start_run(ready, start, execution, toolbox, ledger)?;
    if let Some(model) = &mut replanner {
        let replanning = plan_run::Replanning {
            secrets: &secrets,
            policy: &policy,
        };
        let replanner = plan_run::Replanner::new(args.replan, model, replanning);
        outcome = super::replan::until_done(outcome, replanner, execution, toolbox, ledger)?;
    }
    print_outcome(&outcome.0, outcome.1.as_deref(), execution)
}

/// A run's report, with how the summary names its plan's steps (`None` for `--json`, which
/// prints no summary).
pub(crate) type Ran = (RunReport, Option<Arc<StepLabels>>);

/// Records a new run of a prepared plan and runs it; `approve` lists high-risk steps approved
/// in advance.
pub(crate) fn start_run(
    ready: Ready,
    start: plan_run::Start,
    execution: &ExecutionArgs,
    toolbox: &Toolbox,
    ledger: &Ledger,
) -> Result<Ran, Failure> {
    check_state_file(execution)?;
    let store = ledger.open()?;
    let run_id = start.run_id.clone();
    drive(&run_id, ready, execution, toolbox, |prepared, settings| {
        plan_run::start(store, prepared, start, settings)
    })
}

pub(crate) fn resume(
    args: &ResumeArgs,
    stored: &plan_run::RunSources,
    toolbox: &Toolbox,
    ledger: &Ledger,
) -> Result<i32, Failure> {
    let options = plan_run::ResumeOptions {
        retry_failed: args.retry_failed,
        retry_steps: Vec::new(),
        force: args.force,
        plan: match &args.plan {
            Some(file) => {
                let input = plan_run::PlanInput {
                    path: file.clone(),
                    stored_only: false,
                };
                Some(input.read(ledger, &mut std::io::stdin())?)
            }
            None => None,
        },
        ..plan_run::ResumeOptions::default()
    };
    go_on(
        &args.run,
        &options,
        &args.execution,
        stored,
        toolbox,
        ledger,
    )
}

/// `retry RUN STEP...`: the run goes on with those steps and their dependents forgotten.
pub(crate) fn retry(
    args: &crate::cli::RetryArgs,
    stored: &plan_run::RunSources,
    toolbox: &Toolbox,
    ledger: &Ledger,
) -> Result<i32, Failure> {
    let options = plan_run::ResumeOptions {
        retry_steps: args.steps.clone(),
        ..plan_run::ResumeOptions::default()
    };
    go_on(
        &args.run,
        &options,
        &args.execution,
        stored,
        toolbox,
        ledger,
    )
}

/// `resume` and `retry`: the stored run goes on as `options` say, shown as `execution` asks.
/// `stored` is what the run kept of where its tools are (its state file is plan_run's to keep).
fn go_on(
    run: &str,
    options: &plan_run::ResumeOptions,
    execution: &ExecutionArgs,
    stored: &plan_run::RunSources,
    toolbox: &Toolbox,
    ledger: &Ledger,
) -> Result<i32, Failure> {
    let queue = execution.queue_or(run, stored.queue.as_ref())?;
    check_state_file(execution)?;
    // A ledger that cannot be opened is said by the resume itself.
    if execution.approvals == Some(false)
        && let Ok(store) = ledger.open_reader()
        && let Ok(Some(why)) = plan_run::approvals_kept_on(&store, run)
    {
        eprintln!("warning: --approvals off is not followed: {why}, so its high-risk calls wait");
    }
    let (report, steps) = continue_run(run, options, queue.as_ref(), execution, toolbox, ledger)?;
    let code = print_outcome(&report, steps.as_deref(), execution)?;
    let failed = matches!(
        report.task_status,
        plan_types::TaskStatus::Failed | plan_types::TaskStatus::Partial
    );
    if failed && !options.retry_failed && !execution.json {
        eprintln!(
            "run {0} ended {1}; run its failed steps (and what follows them) again with `plan-cli resume {0} --retry-failed`",
            report.run_id, report.task_status
        );
    }
    Ok(code)
}

/// Goes on with a stored run (a finished one, unless failures are to be retried, only gives
/// its report).
pub(crate) fn continue_run(
    run: &str,
    options: &plan_run::ResumeOptions,
    queue: Option<&crate::cli::QueueSettings>,
    execution: &ExecutionArgs,
    toolbox: &Toolbox,
    ledger: &Ledger,
) -> Result<Ran, Failure> {
    let store = ledger.open_existing()?;
    let from = match plan_run::prepare_resume(&store, run, options)? {
        plan_run::Resumable::Finished(outcome) => {
            let steps = if execution.json {
                None
            } else {
                let row = store.run(&outcome.report.run_id)?;
                let plan = plan_run::plan_of(&row)?;
                Some(Arc::new(StepLabels::of(&plan)))
            };
            return Ok((outcome.report, steps));
        }
        plan_run::Resumable::Continue(from) => from,
    };
    if let Some(queue) = queue {
        toolbox.use_queue(queue)?;
    }
    let env = |name: &str| std::env::var(name).ok();
    let ready = toolbox.block_on(from.prepare(toolbox, &env))?;
    crate::plan_file::report(&ready.loaded.source, &ready.loaded.warnings);
    let run_id = from.row.run_id.clone();
    drive(&run_id, ready, execution, toolbox, |prepared, settings| {
        plan_run::resume(store, from, prepared, settings)
    })
}

/// Prints a run's outcome as `run` does (the summary, or `--json`'s object) and gives the exit
/// code of its status.
pub(crate) fn print_outcome(
    report: &RunReport,
    steps: Option<&StepLabels>,
    execution: &ExecutionArgs,
) -> Result<i32, Failure> {
    let json = execution.json;
    let run_id = &report.run_id;
    if json {
        super::print_json(report)?;
    } else {
        // Without the plan's steps (not expected), lines name steps by their ids alone.
        let none = StepLabels::default();
        let steps = steps.unwrap_or(&none);
        super::print_summary(&output::summary(report, steps, execution.show_results))?;
    }
    if report.task_status == plan_types::TaskStatus::Stopped && !json {
        eprintln!("run {run_id} stopped; continue it with `plan-cli resume {run_id}`");
    }
    if report.task_status == plan_types::TaskStatus::Waiting && !json {
        print(&output::waiting(report))?;
    }
    Ok(report.task_status.exit_code())
}

/// The part of a prepared plan that `--layer` and `--task` select (`plan_run::select`).
fn select(
    ready: Ready,
    layer: Option<&str>,
    task: Option<&str>,
    toolbox: &Toolbox,
) -> Result<Ready, Failure> {
    toolbox
        .block_on(plan_run::select(ready, layer, task, toolbox))
        .map_err(Failure::lifecycle)
}

/// Runs a start or a resume with what the terminal adds: the events file, the progress bar,
/// Ctrl+C, and a word when the queue is lost.
fn drive<F>(
    run_id: &str,
    ready: Ready,
    args: &ExecutionArgs,
    toolbox: &Toolbox,
    run: impl FnOnce(plan_run::Prepared, plan_run::Execution) -> F,
) -> Result<Ran, Failure>
where
    F: std::future::Future<Output = Result<plan_run::Outcome, plan_run::LifecycleError>>,
{
    let prepared = ready;
    let mut settings = plan_run::Execution::new();
    settings.approvals = args.approvals;
    settings.max_concurrency = args.max_concurrency;
    settings.durability = args.durability;
    settings.events_file = args.events.clone();
    settings.queue = toolbox.queue().cloned();
    // Kept current by the run itself, as its ledger commits (a resumed run's own by default).
    settings.state_file = args.state_file.clone();
    settings.project_path = std::env::current_dir()
        .ok()
        .map(|dir| dir.display().to_string());
    // `--json` keeps stdout for its object and stderr quiet: `--events` is the live feed.
    // Otherwise the live view and the summary name steps as the plan does; the plan itself
    // goes once the run has compiled and recorded it.
    let steps = (!args.json).then(|| Arc::new(StepLabels::of(&prepared.loaded.plan)));
    let live = steps.clone().map(|steps| Arc::new(Live::new(steps)));
    if let Some(live) = &live {
        settings.events.push(live.clone());
        if args.verbose {
            let live = live.clone();
            settings.output = Some(Arc::new(move |step: &str, stream: &str, line: &str| {
                live.output(step, stream, line);
            }));
        }
    }
    let cancel = settings.cancel.clone();
    let lost = settings.queue.as_ref().map(|queue| queue.lost());
    let outcome = toolbox.block_on(async {
        tokio::spawn(stop_on_signals(cancel.clone(), run_id.to_owned(), live.clone()));
        if let Some(lost) = lost {
            let stopped = cancel.clone();
            tokio::spawn(async move {
                tokio::select! {
                    () = lost.cancelled() => eprintln!("the queue was lost; the run stops and can be resumed"),
                    () = stopped.cancelled() => {}
                }
            });
        }
        run(prepared, settings).await
    });
    if let Some(live) = &live {
        live.finish();
    }
    let outcome = outcome?;
    Ok((outcome.report, steps))
}

/// Ctrl+C or SIGTERM stops the run: nothing new starts, running tools are cancelled, what
/// succeeded stays in the ledger, and `resume` continues. A second one exits at once: every
/// commit is a transaction, so the ledger stays consistent, and the calls in flight run again
/// on resume.
async fn stop_on_signals(cancel: CancellationToken, run_id: String, live: Option<Arc<Live>>) {
    // Above the progress bar when there is one, so that no line is left half drawn.
    let say = |line: &str| match &live {
        Some(live) => live.say(line, None),
        None => eprintln!("{line}"),
    };
    let mut signals = Signals::new();
    if !signals.next().await {
        return;
    }
    cancel.cancel();
    say(&format!(
        "stopping run {run_id}: running steps are cancelled, nothing new starts (press Ctrl+C again to exit at once)"
    ));
    if signals.next().await {
        if let Some(live) = &live {
            live.finish();
        }
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

/// Refuses a `--state-file` that cannot be written before anything is done: plan_run checks it
/// too, but only once the ledger is open (a first run leaves no ledger behind) and a resumed
/// run's plan prepared.
fn check_state_file(execution: &ExecutionArgs) -> Result<(), Failure> {
    if let Some(path) = &execution.state_file {
        plan_run::StateFile::check(path)
            .map_err(|source| Failure::input(format!("--state-file {source}")))?;
    }
    Ok(())
}
