//! Commands that read the ledger: `runs`, `status`, `events`, `gc`, `state export`.

use std::time::{Duration, SystemTime};

use plan_graph::Plan;
use plan_store::{RunRow, RunState, Store};
use plan_types::RunReport;
use serde_json::{Value, json};

use super::{pretty, print};
use crate::cli::{EventsArgs, GcArgs, JsonArgs, RunIdArgs, StateFormat};
use crate::exit::Failure;
use crate::ledger::Ledger;
use crate::output;

/// The plan a run ran, as stored with it.
pub(crate) fn plan_of(row: &RunRow) -> Result<Plan, Failure> {
    plan_run::plan_of(row).map_err(Failure::lifecycle)
}

/// The same object `run --json` printed (or would print), rebuilt from the ledger.
pub(crate) fn stored_report(store: &Store, row: &RunRow) -> Result<RunReport, Failure> {
    plan_run::report(store, row).map_err(Failure::lifecycle)
}

pub(crate) fn runs(args: &JsonArgs, ledger: &Ledger) -> Result<i32, Failure> {
    let rows = if ledger.exists() {
        ledger.open_reader()?.runs().map_err(Failure::ledger)?
    } else {
        Vec::new()
    };
    let text = if args.json {
        let list: Vec<Value> = rows
            .iter()
            .map(|row| {
                json!({
                    "run_id": row.run_id,
                    "plan_id": row.plan_id,
                    "task_status": plan_run::status_of(row),
                    "started_at": row.started_at,
                    "finished_at": row.finished_at,
                })
            })
            .collect();
        pretty(&list)
    } else if rows.is_empty() {
        format!("no runs yet in {}\n", ledger.path().display())
    } else {
        let width = rows.iter().map(|r| r.plan_id.len()).max().unwrap_or(0);
        rows.iter()
            .map(|row| {
                format!(
                    "{}  {:<9}  {:<width$}  {}\n",
                    row.run_id,
                    plan_run::status_of(row),
                    row.plan_id,
                    row.started_at
                )
            })
            .collect()
    };
    print(&text)?;
    Ok(0)
}

pub(crate) fn status(args: &RunIdArgs, ledger: &Ledger) -> Result<i32, Failure> {
    let store = ledger.open_reader()?;
    let row = store.run(&args.run).map_err(Failure::ledger)?;
    let report = stored_report(&store, &row)?;
    let text = if args.json {
        pretty(&report)
    } else {
        let plan = plan_of(&row)?;
        output::summary(&report, &plan, false)
    };
    print(&text)?;
    Ok(0)
}

/// `logs RUN [STEP]`: each record's output (see [`output::step_output`]) under a header.
pub(crate) fn logs(args: &crate::cli::LogsArgs, ledger: &Ledger) -> Result<i32, Failure> {
    let store = ledger.open_reader()?;
    let row = store.run(&args.run).map_err(Failure::ledger)?;
    let report = stored_report(&store, &row)?;
    let records: Vec<&plan_types::Record> = report
        .records
        .iter()
        .filter(|r| r.step_id != plan_graph::META_STEP_ID)
        .filter(|r| match &args.step {
            None => true,
            Some(step) => {
                r.step_id == *step
                    || plan_graph::is_item_of(&r.step_id, step)
                    || r.step_id.starts_with(&format!("{step}/"))
            }
        })
        .collect();
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
        let state = if record.ok && !record.skipped {
            "ok"
        } else if record.skipped {
            "skipped"
        } else {
            "failed"
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
    let store = ledger.open_reader()?;
    let row = store.run(&args.run).map_err(Failure::ledger)?;
    let mut after = 0;
    loop {
        let lines = store
            .events_after(&row.run_id, after)
            .map_err(Failure::ledger)?;
        for (seq, event) in &lines {
            let line =
                serde_json::to_string(event).map_err(|e| Failure::internal(e.to_string()))?;
            print(&format!("{line}\n"))?;
            after = *seq;
        }
        if !args.follow {
            return Ok(0);
        }
        // Read the state after the events: a run that ended has committed all of its events.
        let state = store.run(&row.run_id).map_err(Failure::ledger)?.state;
        if state != RunState::Running && lines.is_empty() {
            return Ok(0);
        }
        if lines.is_empty() {
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

pub(crate) fn gc(args: &GcArgs, ledger: &Ledger) -> Result<i32, Failure> {
    if !ledger.exists() {
        print("no ledger, nothing to delete\n")?;
        return Ok(0);
    }
    let cutoff = SystemTime::now()
        .checked_sub(args.older_than)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let cutoff = plan_store::timestamp(cutoff);
    if args.dry_run {
        let rows = ledger
            .open_reader()?
            .expired(&cutoff, args.include_unfinished)
            .map_err(Failure::ledger)?;
        let mut text = format!(
            "would delete {} run{} that ended before {cutoff}\n",
            rows.len(),
            if rows.len() == 1 { "" } else { "s" }
        );
        for row in &rows {
            text.push_str(&format!(
                "  {}  {}  {}\n",
                row.run_id,
                plan_run::status_of(row),
                row.plan_id
            ));
        }
        print(&text)?;
        return Ok(0);
    }
    let deleted = ledger
        .open()?
        .gc(&cutoff, args.include_unfinished)
        .map_err(Failure::ledger)?;
    print(&format!(
        "deleted {deleted} run{} that ended before {cutoff}\n",
        if deleted == 1 { "" } else { "s" },
    ))?;
    Ok(0)
}

pub(crate) fn state_export(
    run: &str,
    format: StateFormat,
    ledger: &Ledger,
) -> Result<i32, Failure> {
    let StateFormat::ExecuteState = format;
    let store = ledger.open_reader()?;
    let row = store.run(run).map_err(Failure::ledger)?;
    let document = execute_state(&store, &row, &plan_of(&row)?)?;
    print(&pretty(&document))?;
    Ok(0)
}

/// The execute-state document of a run, from the ledger, with the current directory as the
/// project's.
pub(crate) fn execute_state(store: &Store, row: &RunRow, plan: &Plan) -> Result<Value, Failure> {
    let cwd = std::env::current_dir()
        .ok()
        .map(|d| d.display().to_string());
    plan_run::execute_state(store, row, plan, cwd.as_deref()).map_err(Failure::lifecycle)
}
