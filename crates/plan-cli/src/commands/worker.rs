//! `plan-cli worker`: a BullMQ worker that runs tool calls for `run --queue` coordinators
//! (or any producer of jobs of that shape).

use plan_run::queue::WorkerOptions;
use tokio_util::sync::CancellationToken;

use crate::cli::WorkerArgs;
use crate::exit::Failure;
use crate::toolbox::Toolbox;

pub(crate) fn worker(args: &WorkerArgs, toolbox: &Toolbox) -> Result<i32, Failure> {
    let Some(url) = args.queue_url() else {
        return Err(Failure::input(
            "a worker needs the queue's Redis: --queue redis://HOST:PORT (or PLAN_QUEUE, or REDIS_URL)",
        ));
    };
    let queue = (toolbox.block_on(plan_run::queue::Queue::connect(&url, &args.queue_name)))
        .map_err(|error| Failure::input(error.to_string()))?;
    // Every tool it has (built-ins, and the tools of the MCP configuration's servers), or
    // only those `--tools` names.
    let tools = match toolbox.block_on(toolbox.selected(&args.tools)) {
        Err(plan_run::ToolsError::Unknown(wanted)) => {
            return Err(Failure::input(format!(
                "--tools: this worker has no tool `{wanted}` (`plan-cli tools` lists them)"
            )));
        }
        tools => tools?,
    };
    let id = format!(
        "{}-{}-{}",
        std::env::var("HOSTNAME").unwrap_or_else(|_| "worker".to_owned()),
        std::process::id(),
        ulid::Ulid::new()
    );
    let (notices, mut heard) = tokio::sync::mpsc::unbounded_channel();
    let options = WorkerOptions {
        id: id.clone(),
        host: std::env::var("HOSTNAME").unwrap_or_default(),
        concurrency: args.concurrency as usize,
        lock_duration: args.lock_duration,
        drain_timeout: args.drain_timeout,
        notices: Some(notices),
        secret: crate::toolbox::queue_secret(),
    };
    crate::output::say(&format!(
        "worker {id}: taking calls from BullMQ queue `{}` ({}, {} at once{}); Ctrl+C or SIGTERM drains and stops",
        args.queue_name,
        crate::output::count(tools.names().len(), "tool", "tools"),
        args.concurrency,
        if options.secret.is_some() {
            ", signed jobs only"
        } else {
            ""
        }
    ));
    let stop = CancellationToken::new();
    let stats = toolbox.block_on(async {
        let signal_stop = stop.clone();
        // Watched before the worker takes a job, so that no signal is missed.
        let mut signals = crate::signals::Signals::new();
        tokio::spawn(async move {
            if signals.next().await {
                // Stop first: with its stderr closed (its parent gone), a print would fail,
                // and a worker must still stop when told.
                signal_stop.cancel();
                crate::output::say("worker draining: finishing the calls it holds");
            }
        });
        tokio::spawn(async move {
            while let Some(notice) = heard.recv().await {
                crate::output::say(&notice.to_string());
            }
        });
        plan_run::queue::work(queue, tools, options, stop).await
    });
    let stats = stats.map_err(|error| Failure::input(error.to_string()))?;
    crate::output::say(&format!(
        "worker {id}: {} call{} made ({} taken over from workers that died)",
        stats.done,
        if stats.done == 1 { "" } else { "s" },
        stats.claimed
    ));
    Ok(0)
}
