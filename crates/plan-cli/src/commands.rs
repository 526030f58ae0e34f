//! One function per subcommand; each returns the process exit code.

use std::io::Write;
use std::sync::Arc;

use plan_engine::{EventSink, Fanout, Registry, RunOptions};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::cli::{GraphFormat, PlanArgs, RunArgs, ShowArgs, ToolsArgs};
use crate::events_file::EventsFile;
use crate::exit::{self, Failure};
use crate::output::{self, Progress};
use crate::plan_file::prepare;

pub(crate) fn run(args: &RunArgs, registry: &Registry) -> Result<i32, Failure> {
    let ready = prepare(&args.plan, registry)?;
    if args.dry_run {
        let calls = ready.program.preview(&ready.inputs, &ready.env);
        let text = if args.json {
            let value =
                json!({"plan_id": ready.program.plan_id(), "dry_run": true, "calls": calls});
            pretty(&value)
        } else {
            output::preview(ready.program.plan_id(), &calls)
        };
        print(&text)?;
        return Ok(0);
    }

    let mut sinks: Vec<Arc<dyn EventSink>> = Vec::new();
    if let Some(path) = &args.events {
        let file = EventsFile::open(path).map_err(|error| {
            Failure::input(format!(
                "cannot open events file `{}`: {error}",
                path.display()
            ))
        })?;
        sinks.push(Arc::new(file));
    }
    let progress = if args.json {
        None
    } else {
        Progress::for_terminal(ready.program.len()).map(Arc::new)
    };
    if let Some(progress) = &progress {
        sinks.push(progress.clone());
    }
    let mut options = RunOptions::new(ulid::Ulid::new().to_string());
    options.max_concurrency = args.max_concurrency.map(|n| n as usize);
    options.inputs = ready.inputs;
    options.env = ready.env;
    options.events = match sinks.len() {
        0 => None,
        1 => sinks.pop(),
        _ => Some(Arc::new(Fanout(sinks))),
    };
    let cancel = CancellationToken::new();
    options.cancel = cancel.clone();

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|error| Failure::input(format!("cannot start the async runtime: {error}")))?;
    let program = Arc::new(ready.program);
    let report = runtime.block_on(async {
        // Ctrl+C stops the run: nothing new starts, running tools are cancelled, and the
        // records still come out.
        let interrupt = cancel.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                interrupt.cancel();
            }
        });
        // The scheduler runs as a task on a worker thread: the steps it spawns then start on
        // that worker's LIFO slot instead of waking another thread (a chain step costs ~4 µs
        // instead of ~15–50 µs).
        let engine = program.clone();
        tokio::spawn(async move { plan_engine::run(&engine, options).await }).await
    });
    let report = report.map_err(|error| Failure {
        message: Some(format!("the engine stopped unexpectedly: {error}")),
        code: 1,
    })?;
    if let Some(progress) = &progress {
        progress.finish();
    }
    let text = if args.json {
        pretty(&report)
    } else {
        output::summary(&report, &ready.loaded.plan)
    };
    print(&text)?;
    Ok(exit::for_status(report.task_status))
}

pub(crate) fn validate(args: &PlanArgs, registry: &Registry) -> Result<i32, Failure> {
    let ready = prepare(args, registry)?;
    let warnings = ready.loaded.warnings.len();
    let steps = ready.program.len();
    let mut line = format!(
        "✓ {} is a valid plan: `{}`, {steps} step{}",
        ready.loaded.source.name(),
        ready.program.plan_id(),
        if steps == 1 { "" } else { "s" }
    );
    if warnings > 0 {
        line.push_str(&format!(
            ", {warnings} warning{}",
            if warnings == 1 { "" } else { "s" }
        ));
    }
    print(&format!("{line}\n"))?;
    Ok(0)
}

pub(crate) fn show(args: &ShowArgs, registry: &Registry) -> Result<i32, Failure> {
    let ready = prepare(&args.plan, registry)?;
    let plan = &ready.loaded.plan;
    let text = match args.format {
        GraphFormat::Ascii => {
            let title = plan
                .title
                .as_deref()
                .map_or(String::new(), |t| format!(" — {t}"));
            let picture = plan_graph::render::ascii(plan, &|_| plan_graph::render::Mark::Pending);
            format!("{}{title}\n\n{picture}", ready.program.plan_id())
        }
        GraphFormat::Mermaid => plan_graph::render::mermaid(plan),
        GraphFormat::Dot => plan_graph::render::dot(plan),
    };
    print(&text)?;
    Ok(0)
}

pub(crate) fn tools(args: &ToolsArgs, registry: &Registry) -> Result<i32, Failure> {
    let infos = registry.infos();
    let text = if args.json {
        pretty(&infos)
    } else {
        let width = infos.iter().map(|i| i.name.len()).max().unwrap_or(0);
        infos
            .iter()
            .map(|info| {
                format!(
                    "{:<width$}  {:<8} {}\n",
                    info.name, info.source, info.description
                )
            })
            .collect()
    };
    print(&text)?;
    Ok(0)
}

fn pretty(value: &impl serde::Serialize) -> String {
    let mut text = serde_json::to_string_pretty(value)
        .unwrap_or_else(|error| format!("{{\"error\": \"{error}\"}}"));
    text.push('\n');
    text
}

/// Writes to stdout; a closed pipe (`| head`) is not an error worth a message.
fn print(text: &str) -> Result<(), Failure> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(error) => Err(Failure {
            message: Some(format!("cannot write the output: {error}")),
            code: 1,
        }),
    }
}
