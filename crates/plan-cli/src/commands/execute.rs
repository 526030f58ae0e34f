//! `run` and `resume`: a run recorded in the ledger as it goes.

use std::path::Path;
use std::sync::{Arc, Mutex};

use plan_graph::Severity;
use plan_run::Mode;
use plan_types::RunReport;
use tokio_util::sync::CancellationToken;

use super::{pretty, print};
use crate::cli::{ExecutionArgs, ResumeArgs, RunArgs};
use crate::exit::Failure;
use crate::output::{self, Live};
use crate::plan_file::prepare;
use crate::toolbox::Toolbox;
use plan_run::Ledger;
use plan_run::Steps;

pub(crate) fn run(args: &RunArgs, toolbox: &Toolbox, ledger: &Ledger) -> Result<i32, Failure> {
    // A stored plan a model or a client wrote keeps its author: it runs under that author's
    // policy (widened by this command's --allow-* flags), not with the operator's powers.
    let author = args.plan.input().author(ledger)?;
    if author != plan_run::Author::Operator && !args.execution.json {
        say!(
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
    // The run's programs, and a model's re-planned steps', stay in the run's folder.
    let policy = crate::policy::of(&args.policy)?.in_folder(working_dir.as_deref());
    let judged = crate::policy::judges(&args.policy, author);
    // A new run kept no queue, so no run is named to refuse.
    let queue = (args.execution).queue_of("", &plan_run::RunSources::default())?;
    if let Some(queue) = queue.as_ref().filter(|_| !args.dry_run) {
        toolbox.use_queue(queue)?;
    }
    // Judged as `validate` judges it: arguments known before the run that break their tool's
    // schema refuse the run before any step runs (what only the run gives is checked as each
    // call is made).
    let ready = prepare(&args.plan, toolbox, ledger, Severity::Error)?;
    let (layer, task) = (args.layer.as_deref(), args.task.as_deref());
    let ready = toolbox.block_on(plan_run::select(ready, layer, task, toolbox))?;
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
    let mut replanner = (args.replan > 0)
        .then(|| super::plans::replan_model(ledger))
        .transpose()?;
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
            queue: (queue.as_ref()).map(|queue| plan_run::QueueSource::of(&queue.url, &queue.name)),
            ..plan_run::RunSources::default()
        },
        ..plan_run::Start::new()
    };
    let execution = &args.execution;
    if judged && policy.keeps_approvals_on(ready.loaded.plan.approvals, execution.approvals) {
        let whose = match author {
            plan_run::Author::Model => "a model's",
            _ => "under --policy, a",
        };
        say!("warning: approvals stay on: {whose} plan runs with its high-risk calls gated");
    }
    execution.check_state_file()?;
    let store = ledger.open()?;
    let run_id = start.run_id.clone();
    let shown = Shown::new(&run_id, execution, toolbox);
    let settings = shown.execution(&ready);
    let mut outcome = shown.run(plan_run::start(store, ready, start, settings))?;
    if let Some(model) = &mut replanner {
        let replanning = plan_run::Replanning {
            secrets: &secrets,
            policy: &policy,
        };
        let mut replanner = plan_run::Replanner::new(args.replan, model, replanning);
        let mut said = |replanned: &plan_run::Replanned| {
            shown.finish_part();
            say!(
                "run {run_id}: {}; re-planned (revision {}), the run goes on",
                replanned.failure,
                replanned.revision
            );
        };
        let env = |name: &str| std::env::var(name).ok();
        let ended = shown.run(replanner.run_to_end(
            outcome,
            ledger,
            toolbox,
            &env,
            &mut |prepared| shown.execution_warned(prepared),
            &mut said,
        ));
        if let Err(error) = plan_run::remember_format(ledger, model) {
            say!("warning: the response format the model took is not kept: {error}");
        }
        outcome = ended?;
    }
    print_outcome(
        &outcome.report,
        shown.steps().as_deref(),
        execution,
        toolbox,
    )
}

/// A run's report, with how the summary names its plan's steps (`None` for `--json`, which
/// prints no summary).
type Ran = (RunReport, Option<Arc<Steps>>);

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
                let text = input.read(ledger, &mut std::io::stdin())?;
                Some((text.source, text.format))
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
    let queue = execution.queue_of(run, stored)?;
    execution.check_state_file()?;
    // A ledger that cannot be opened is said by the resume itself.
    if execution.approvals == Some(false)
        && let Ok(store) = ledger.open_reader()
        && let Ok(Some(why)) = plan_run::approvals_kept_on(&store, run)
    {
        say!("warning: --approvals off is not followed: {why}, so its high-risk calls wait");
    }
    let (report, steps) = continue_run(run, options, queue.as_ref(), execution, toolbox, ledger)?;
    let code = print_outcome(&report, steps.as_deref(), execution, toolbox)?;
    // A PARTIAL run has no failed step to run again: what it skipped follows from its plan.
    let failed = report.task_status == plan_types::TaskStatus::Failed;
    if failed && !options.retry_failed && !execution.json {
        say!(
            "run {0} ended {1}; run its failed steps (and what follows them) again with `plan-cli resume {0} --retry-failed`",
            report.run_id,
            report.task_status
        );
    }
    Ok(code)
}

/// Goes on with a stored run (a finished one, unless failures are to be retried, only gives
/// its report).
fn continue_run(
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
                Some(Arc::new(Steps::of_run(&store, &outcome.report.run_id)?))
            };
            return Ok((outcome.report, steps));
        }
        plan_run::Resumable::Continue(from) => from,
    };
    if let Some(queue) = queue {
        toolbox.use_queue(queue)?;
    }
    let shown = Shown::new(&from.row.run_id, execution, toolbox);
    let env = |name: &str| std::env::var(name).ok();
    let going_on = from.go_on(store, toolbox, &env, |prepared| {
        shown.execution_warned(prepared)
    });
    let outcome = shown.run(going_on)?;
    Ok((outcome.report, shown.steps()))
}

/// Prints a run's outcome as `run` does (the summary, or `--json`'s object) and gives the exit
/// code of its status; `toolbox` says whether its calls had a queue.
pub(crate) fn print_outcome(
    report: &RunReport,
    steps: Option<&Steps>,
    execution: &ExecutionArgs,
    toolbox: &Toolbox,
) -> Result<i32, Failure> {
    let json = execution.json;
    let run_id = &report.run_id;
    if json {
        super::print_json(report)?;
    } else {
        // Without the plan's steps (not expected), lines name steps by their ids alone.
        let none = Steps::default();
        let steps = steps.unwrap_or(&none);
        super::print_summary(&output::summary(report, steps, execution.show_results))?;
    }
    // The library says the run has no queue; the CLI says how to give it one.
    if plan_run::summary::lacks_queue(report, toolbox.has_queue()) && !json {
        say!(
            "hint: a tool of this plan runs on a BullMQ queue: give the run its Redis with `--queue redis://HOST:PORT` (or PLAN_QUEUE, or REDIS_URL), then `plan-cli resume {run_id} --retry-failed --queue …`"
        );
    }
    if report.task_status == plan_types::TaskStatus::Stopped && !json {
        say!("run {run_id} stopped; continue it with `plan-cli resume {run_id}`");
    }
    if report.task_status == plan_types::TaskStatus::Waiting && !json {
        let mut text = plan_run::summary::waiting(report);
        if let Some(next) = plan_run::summary::next_of(report) {
            text.push_str(&output::next(run_id, &next));
        }
        print(&text)?;
    }
    Ok(report.task_status.exit_code())
}

/// What the terminal adds to a run, from its start or resume to its end through every
/// re-plan: each part's execution (`--events`, the state file, the queue) with its progress
/// bar and lines, Ctrl+C, and a word when the queue is lost.
pub(crate) struct Shown<'a> {
    args: &'a ExecutionArgs,
    toolbox: &'a Toolbox,
    /// Stops the run (resumably) on Ctrl+C or SIGTERM, whichever part it is in.
    cancel: CancellationToken,
    /// The live view of the part going on, shared with the signal watcher, which writes above
    /// its bar.
    live: Arc<Mutex<Option<Arc<Live>>>>,
    /// How the summary names the steps of the last part's plan (`None` with `--json`).
    steps: Mutex<Option<Arc<Steps>>>,
}

impl<'a> Shown<'a> {
    /// Watches the signals (from now on, so that none is missed) and the queue for run
    /// `run_id`.
    pub(crate) fn new(run_id: &str, args: &'a ExecutionArgs, toolbox: &'a Toolbox) -> Self {
        let shown = Shown {
            args,
            toolbox,
            cancel: CancellationToken::new(),
            live: Arc::default(),
            steps: Mutex::default(),
        };
        let (cancel, live, run_id) = (shown.cancel.clone(), shown.live.clone(), run_id.to_owned());
        let lost = toolbox.queue().map(|queue| queue.lost());
        toolbox.block_on(async {
            let signals = crate::signals::Signals::new();
            tokio::spawn(stop_on_signals(signals, cancel.clone(), run_id, live));
            if let Some(lost) = lost {
                tokio::spawn(async move {
                    tokio::select! {
                        () = lost.cancelled() => say!("the queue was lost; the run stops and can be resumed"),
                        () = cancel.cancelled() => {}
                    }
                });
            }
        });
        shown
    }

    /// The execution of a part of the run whose plan is `prepared`, with a live view of it
    /// unless `--json` keeps stdout for its object and stderr quiet (`--events` is then the
    /// live feed). Steps are named as the plan names them; the plan itself goes once the run
    /// has compiled and recorded it.
    pub(crate) fn execution(&self, prepared: &plan_run::Prepared) -> plan_run::Execution {
        let args = self.args;
        let mut execution = plan_run::Execution::new();
        execution.approvals = args.approvals;
        execution.max_concurrency = args.max_concurrency;
        execution.durability = args.durability;
        execution.events_file = args.events.clone();
        execution.use_queue_of(self.toolbox);
        execution.cancel = self.cancel.clone();
        // Kept current by the run itself, as its ledger commits (a resumed run's own by default).
        execution.state_file = args.state_file.clone();
        execution.project_path = super::project_path();
        self.finish_part();
        if args.json {
            return execution;
        }
        let steps = Arc::new(Steps::of(&prepared.loaded.plan));
        let live = Arc::new(Live::new(steps.clone()));
        execution.events.push(live.clone());
        if args.verbose {
            let live = live.clone();
            execution.output = Some(Arc::new(move |step: &str, stream: &str, line: &str| {
                live.output(step, stream, line);
            }));
        }
        *lock(&self.steps) = Some(steps);
        *lock(&self.live) = Some(live);
        execution
    }

    /// Ends the live view of the part that went on (before anything else is said).
    pub(crate) fn finish_part(&self) {
        if let Some(live) = lock(&self.live).take() {
            live.finish();
        }
    }

    /// [`Shown::execution`] of a stored plan prepared again, whose warnings are said first.
    pub(crate) fn execution_warned(&self, prepared: &plan_run::Prepared) -> plan_run::Execution {
        crate::plan_file::report(&prepared.loaded.source, &prepared.loaded.warnings);
        self.execution(prepared)
    }

    /// Runs `part` (a start, a resume, the re-plans) to its end.
    pub(crate) fn run(
        &self,
        part: impl std::future::Future<Output = Result<plan_run::Outcome, plan_run::LifecycleError>>,
    ) -> Result<plan_run::Outcome, Failure> {
        let outcome = self.toolbox.block_on(part);
        self.finish_part();
        Ok(outcome?)
    }

    /// How the summary names the steps of the last part's plan (`None` with `--json`).
    pub(crate) fn steps(&self) -> Option<Arc<Steps>> {
        lock(&self.steps).clone()
    }
}

/// A lock that a panic elsewhere does not poison for the terminal.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Ctrl+C or SIGTERM stops the run: nothing new starts, running tools are cancelled, what
/// succeeded stays in the ledger, and `resume` continues. A second one exits at once: every
/// commit is a transaction, so the ledger stays consistent, and the calls in flight run again
/// on resume.
async fn stop_on_signals(
    mut signals: crate::signals::Signals,
    cancel: CancellationToken,
    run_id: String,
    live: Arc<Mutex<Option<Arc<Live>>>>,
) {
    // Above the progress bar when there is one, so that no line is left half drawn.
    let say = |line: &str| match lock(&live).as_ref() {
        Some(live) => live.say(line, None),
        None => say!("{line}"),
    };
    if !signals.next().await {
        return;
    }
    cancel.cancel();
    say(&format!(
        "stopping run {run_id}: running steps are cancelled, nothing new starts (press Ctrl+C again to exit at once)"
    ));
    if signals.next().await {
        if let Some(live) = lock(&live).take() {
            live.finish();
        }
        say!(
            "exiting at once; what finished is in the ledger: continue with `plan-cli resume {run_id}`"
        );
        std::process::exit(plan_types::TaskStatus::Stopped.exit_code());
    }
}
