//! Commands that read the ledger: `runs`, `status`, `events`, `gc`, `state export`.

use std::time::Duration;

use super::{pretty, print};
use crate::cli::{EventsArgs, GcArgs, RunIdArgs, StateFormat, UiArgs};
use crate::exit::Failure;
use crate::output;
use crate::toolbox::Toolbox;
use plan_run::Ledger;

pub(crate) fn runs(args: &crate::cli::RunsArgs, ledger: &Ledger) -> Result<i32, Failure> {
    let wanted_status = (args.status.as_deref().map(plan_types::TaskStatus::named))
        .transpose()
        .map_err(|problem| Failure::input(format!("--status: {problem}")))?;
    let filter = plan_run::RunFilter {
        status: wanted_status,
        plan: args.plan.clone(),
        limit: args.limit,
    };
    let rows = if ledger.exists() {
        plan_run::runs(&mut ledger.open_reader()?, &filter)?
    } else {
        Vec::new()
    };
    let text = if args.json {
        pretty(&rows)
    } else if rows.is_empty() {
        let filtered = args.status.is_some() || args.plan.is_some();
        if filtered {
            "no runs match\n".to_owned()
        } else {
            format!("no runs yet in {}\n", ledger.path().display())
        }
    } else {
        let header = ["RUN", "STATUS", "PLAN", "STARTED", "TOOK"].map(str::to_owned);
        let lines = rows.iter().map(|row| {
            let took = output::duration(row.duration_ms);
            let cells = [
                &*row.run_id,
                row.task_status.as_str(),
                &row.plan_id,
                &row.started_at,
            ];
            [cells.map(str::to_owned).to_vec(), vec![took]].concat()
        });
        output::columns(
            &[header.to_vec()]
                .into_iter()
                .chain(lines)
                .collect::<Vec<_>>(),
            &[4],
        )
    };
    print(&text)?;
    Ok(0)
}

pub(crate) fn status(args: &RunIdArgs, ledger: &Ledger) -> Result<i32, Failure> {
    let mut store = ledger.open_reader()?;
    let row = plan_run::read_run(&mut store, &args.run)?;
    let report = plan_run::report(&store, &row)?;
    if !args.json {
        let plan = plan_run::plan_of(&row)?;
        let steps = plan_run::Steps::of(&plan);
        super::print_summary(&output::summary(&report, &steps, false))?;
        return Ok(0);
    }
    print(&pretty(&report))?;
    Ok(0)
}

/// `cancel RUN`: a running run's process is asked to stop (SIGTERM: it stops as on Ctrl+C,
/// keeping what finished); a run whose process is gone, or one waiting for approvals, is
/// marked stopped here. `resume` continues it either way.
pub(crate) fn cancel(args: &crate::cli::CancelArgs, ledger: &Ledger) -> Result<i32, Failure> {
    let mut store = ledger.open_existing()?;
    let (run, cancelled) =
        plan_run::cancel(&mut store, &args.run, std::time::Duration::from_secs(30))?;
    let message = match cancelled {
        plan_run::Cancelled::AlreadyStopped => format!("run {run} is already stopped\n"),
        plan_run::Cancelled::WasWaiting => format!(
            "run {run} was waiting for approvals; it is stopped now (`plan-cli resume {run}` continues it)\n"
        ),
        plan_run::Cancelled::Stopped(status) => {
            format!("run {run} stopped ({status}); `plan-cli resume {run}` continues it\n")
        }
        plan_run::Cancelled::Asked(pid) => {
            format!("asked process {pid} to stop run {run}; it has not stopped yet\n")
        }
        plan_run::Cancelled::OwnerDied => format!(
            "run {run}'s process had died; it is marked stopped (`plan-cli resume {run}` continues it)\n"
        ),
    };
    print(&message)?;
    Ok(0)
}

/// `logs RUN [STEP]`: each record's output (see [`output::step_output`]) under a header.
pub(crate) fn logs(args: &crate::cli::LogsArgs, ledger: &Ledger) -> Result<i32, Failure> {
    let mut store = ledger.open_reader()?;
    let row = plan_run::read_run(&mut store, &args.run)?;
    let report = plan_run::report(&store, &row)?;
    let plan = plan_run::plan_of(&row)?;
    let records = plan_run::records_of(&report, &plan, args.step.as_deref());
    if records.is_empty() {
        let what = args
            .step
            .as_ref()
            .map_or_else(String::new, |step| format!(" for step `{step}`"));
        return Err(Failure::input(format!(
            "run {} has no records{what} yet",
            row.run_id
        )));
    }
    let mut text = String::new();
    for record in records {
        let state = match (record.ok, record.skipped) {
            (_, true) => "skipped",
            (true, false) => "ok",
            (false, false) => "failed",
        };
        text.push_str(&format!("── {} ({state}) ──\n", record.step_id));
        let out = output::step_output(record);
        if out.is_empty() {
            text.push_str("(no output)\n");
        } else {
            text.push_str(&out);
            if !out.ends_with('\n') {
                text.push('\n');
            }
        }
    }
    print(&text)?;
    Ok(0)
}

pub(crate) fn events(args: &EventsArgs, ledger: &Ledger) -> Result<i32, Failure> {
    // Following: a run whose process dies meanwhile has its log folded in.
    let mut store = if args.follow {
        ledger.open_existing()?
    } else {
        ledger.open_reader()?
    };
    let row = plan_run::read_run(&mut store, &args.run)?;
    let mut feed = plan_run::EventFeed::new(&row.run_id);
    loop {
        let batch = feed.next(&mut store)?;
        for event in &batch.events {
            let line =
                serde_json::to_string(event).map_err(|e| Failure::internal(e.to_string()))?;
            print(&format!("{line}\n"))?;
        }
        if !args.follow || (batch.over && batch.events.is_empty()) {
            return Ok(0);
        }
        if batch.events.is_empty() {
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

pub(crate) fn gc(args: &GcArgs, ledger: &Ledger) -> Result<i32, Failure> {
    if !ledger.exists() {
        print("no ledger, nothing to delete\n")?;
        return Ok(0);
    }
    let (older_than, unfinished) = (args.older_than, args.include_unfinished);
    let done = plan_run::gc(ledger, older_than, unfinished, args.dry_run)?;
    let cutoff = &done.cutoff;
    if !args.dry_run {
        let runs = output::count(done.deleted, "run", "runs");
        print(&format!("deleted {runs} that ended before {cutoff}\n"))?;
        return Ok(0);
    }
    let runs = output::count(done.would_delete.len(), "run", "runs");
    let mut text = format!("would delete {runs} that ended before {cutoff}\n");
    for row in &done.would_delete {
        let status = plan_run::status_of(row);
        text.push_str(&format!("  {}  {status}  {}\n", row.run_id, row.plan_id));
    }
    print(&text)?;
    Ok(0)
}

pub(crate) fn state_export(
    run: &str,
    format: StateFormat,
    ledger: &Ledger,
) -> Result<i32, Failure> {
    let StateFormat::ExecuteState = format;
    let store = ledger.open_reader()?;
    // The current directory is the project's, for a run that kept no folder.
    let cwd = super::project_path();
    let document = plan_run::execute_state(&store, run, cwd.as_deref())?;
    print(&pretty(&document))?;
    Ok(0)
}

/// `ui`: the dashboard's server until the process ends; `PLAN_UI_TOKEN` fixes the token.
pub(crate) fn ui(
    args: &UiArgs,
    tools: plan_run::ToolSettings,
    toolbox: &Toolbox,
    ledger: &Ledger,
) -> Result<i32, Failure> {
    let (notices, told) = std::sync::mpsc::channel();
    std::thread::spawn(move || told.iter().for_each(|notice| say!("{notice}")));
    let settings = plan_ui::Settings {
        toolbox: toolbox.shared(),
        tools,
        project_path: super::project_path(),
        env: std::sync::Arc::new(|name| std::env::var(name).ok()),
        notices: Some(notices),
        ledger: ledger.clone(),
        host: args.host,
        port: args.port,
        token: std::env::var("PLAN_UI_TOKEN").ok(),
    };
    let server = plan_ui::Server::bind(settings).map_err(|e| Failure::input(e.to_string()))?;
    if !args.host.is_loopback() {
        say!(
            "warning: the dashboard listens on {}: anyone who can reach it and has the token acts as you",
            args.host
        );
    }
    print(&format!("dashboard: {}\n", server.url()))?;
    if !args.no_open {
        server.open_in_browser(&std::env::temp_dir());
    }
    server
        .serve(crate::signals::forwarded(toolbox))
        .map_err(|e| Failure::internal(e.to_string()))?;
    Ok(0)
}
