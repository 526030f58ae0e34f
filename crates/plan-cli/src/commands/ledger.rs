//! Commands that read the ledger: `runs`, `status`, `events`, `gc`, `state export`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use plan_graph::{LoadOptions, Plan, Source};
use plan_store::{RunRow, RunState, Store};
use plan_types::{Record, RunReport, TaskStatus};
use serde_json::{Value, json};

use super::plans::format_of;
use super::{pretty, print};
use crate::cli::{EventsArgs, GcArgs, JsonArgs, RunIdArgs, StateFormat};
use crate::exit::Failure;
use crate::ledger::Ledger;
use crate::output;

/// The status a stored run reports: how it ended, or that it is still running or stopped.
pub(crate) fn status_of(row: &RunRow) -> TaskStatus {
    match row.state {
        RunState::Finished => row.task_status.unwrap_or(TaskStatus::Failed),
        RunState::Stopped => TaskStatus::Stopped,
        RunState::Waiting => TaskStatus::Waiting,
        RunState::Running => TaskStatus::Running,
    }
}

/// The plan a run ran, as stored with it.
pub(crate) fn plan_of(row: &RunRow) -> Result<Plan, Failure> {
    let source = Source::new(row.plan_name.clone(), row.plan_source.clone());
    match plan_graph::load(source, format_of(&row.plan_format), &LoadOptions::default()) {
        Ok(loaded) => Ok(loaded.plan),
        Err(invalid) => Err(Failure::internal(format!(
            "the plan stored with run {} no longer loads: {}",
            row.run_id,
            invalid
                .issues
                .first()
                .map_or(String::new(), |i| i.message.clone())
        ))),
    }
}

/// The same object `run --json` printed (or would print), rebuilt from the ledger.
pub(crate) fn stored_report(store: &Store, row: &RunRow) -> Result<RunReport, Failure> {
    let plan = plan_of(row)?;
    let status = status_of(row);
    let pending = store.approvals(&row.run_id).map_err(Failure::ledger)?;
    let pending: Vec<&str> = pending
        .iter()
        .filter(|a| a.decision == plan_store::Decision::Pending)
        .map(|a| a.step_id.as_str())
        .collect();
    let stored = store.records(&row.run_id).map_err(Failure::ledger)?;
    let mut records = with_unsettled(&plan, stored, status, &pending);
    let elapsed = [Some(row.started_at.as_str()), row.finished_at.as_deref()]
        .map(|t| t.and_then(|t| humantime::parse_rfc3339(t).ok()));
    let duration = match elapsed {
        [Some(start), Some(end)] => end.duration_since(start).unwrap_or(Duration::ZERO),
        [Some(start), None] => SystemTime::now()
            .duration_since(start)
            .unwrap_or(Duration::ZERO),
        _ => Duration::ZERO,
    };
    records.push(Record::meta(
        status,
        u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
    ));
    let mut variables: BTreeMap<String, Arc<Value>> = plan
        .variables
        .iter()
        .map(|(k, v)| (k.clone(), Arc::new(v.clone())))
        .collect();
    variables.extend(
        row.inputs
            .iter()
            .map(|(k, v)| (k.clone(), Arc::new(v.clone()))),
    );
    variables.extend(store.variables(&row.run_id).map_err(Failure::ledger)?);
    let pending_approvals = if status == TaskStatus::Waiting {
        store
            .approvals(&row.run_id)
            .map_err(Failure::ledger)?
            .into_iter()
            .filter(|a| a.decision == plan_store::Decision::Pending)
            .map(|a| {
                a.request.unwrap_or(plan_types::PendingApproval {
                    step_id: a.step_id,
                    tool: None,
                    args: None,
                    reason: None,
                })
            })
            .collect()
    } else {
        Vec::new()
    };
    let checkpoints = store.checkpoints(&row.run_id).map_err(Failure::ledger)?;
    let block_ids = plan
        .steps
        .iter()
        .filter(|s| s.block.is_some())
        .map(|s| s.id.0.as_str());
    let mut blocks = plan_engine::block_states(block_ids, &records, &checkpoints);
    if row.state == RunState::Running {
        busy_blocks(store, row, &plan, &mut blocks)?;
    }
    Ok(RunReport {
        run_id: row.run_id.clone(),
        plan_id: row.plan_id.clone(),
        task_status: status,
        records,
        variables,
        pending_approvals,
        blocks,
    })
}

/// Blocks of a live run that entered and have not ended are `BUSY`, at the node their last
/// committed `block.transition` went to (or their entry point). Events reach the ledger with
/// the scheduler's commits, so the node may lag behind by a node or two.
fn busy_blocks(
    store: &Store,
    row: &RunRow,
    plan: &Plan,
    blocks: &mut [plan_types::BlockState],
) -> Result<(), Failure> {
    let events = store
        .events_after(&row.run_id, 0)
        .map_err(Failure::ledger)?;
    for block in blocks
        .iter_mut()
        .filter(|b| b.state == plan_types::BlockPhase::Ready)
    {
        let mut entered = false;
        let mut node = None;
        for (_, event) in &events {
            if event.step_id.as_deref() != Some(block.step_id.as_str()) {
                continue;
            }
            match event.kind {
                plan_types::EventKind::BlockEntered => entered = true,
                plan_types::EventKind::BlockTransition => node = event.to.clone(),
                _ => {}
            }
        }
        if entered {
            block.state = plan_types::BlockPhase::Busy;
            block.node = node.or_else(|| {
                let step = plan.steps.iter().find(|s| s.id.0 == block.step_id)?;
                Some(step.block.as_ref()?.entry_point.clone())
            });
        }
    }
    Ok(())
}

/// The stored records with a record for every step that has none yet (a run that is
/// running, stopped or waiting), in plan order, as `run` reports them.
fn with_unsettled(
    plan: &Plan,
    stored: Vec<Record>,
    status: TaskStatus,
    pending: &[&str],
) -> Vec<Record> {
    let ids: std::collections::HashSet<&str> = plan.steps.iter().map(|s| s.id.0.as_str()).collect();
    let reason = match status {
        TaskStatus::Waiting => plan_types::reasons::WAITING_FOR_APPROVAL,
        TaskStatus::Stopped => plan_types::reasons::STOPPED,
        _ => "not started yet",
    };
    let mut stored = stored.into_iter().peekable();
    let mut records = Vec::with_capacity(plan.steps.len());
    for step in &plan.steps {
        let mut found = false;
        // The store keeps plan order, a step's items and nodes right before the step.
        while let Some(record) = stored.peek() {
            if record.step_id == step.id.0 {
                found = true;
            } else if ids.contains(record.step_id.as_str()) {
                break;
            }
            records.extend(stored.next());
            if found {
                break;
            }
        }
        if !found {
            let reason = if pending.contains(&step.id.0.as_str()) {
                plan_types::reasons::AWAITING_APPROVAL
            } else {
                reason
            };
            records.push(Record {
                step_id: step.id.0.clone(),
                ok: false,
                skipped: true,
                result: None,
                reason: Some(reason.to_owned()),
                error: None,
                attempts: 0,
                duration_ms: 0,
                upstream: None,
            });
        }
    }
    records.extend(stored);
    records
}

pub(crate) fn runs(args: &JsonArgs, ledger: &Ledger) -> Result<i32, Failure> {
    let rows = if ledger.exists() {
        ledger.open()?.runs().map_err(Failure::ledger)?
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
                    "task_status": status_of(row),
                    "started_at": row.started_at,
                    "finished_at": row.finished_at,
                })
            })
            .collect();
        pretty(&list)
    } else if rows.is_empty() {
        "no runs yet\n".to_owned()
    } else {
        let width = rows.iter().map(|r| r.plan_id.len()).max().unwrap_or(0);
        rows.iter()
            .map(|row| {
                format!(
                    "{}  {:<9}  {:<width$}  {}\n",
                    row.run_id,
                    status_of(row),
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
    let store = ledger.open_existing()?;
    let row = store.run(&args.run).map_err(Failure::ledger)?;
    let report = stored_report(&store, &row)?;
    let text = if args.json {
        pretty(&report)
    } else {
        let plan = plan_of(&row)?;
        output::summary(&report, &plan)
    };
    print(&text)?;
    Ok(0)
}

pub(crate) fn events(args: &EventsArgs, ledger: &Ledger) -> Result<i32, Failure> {
    let store = ledger.open_existing()?;
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
    let deleted = ledger
        .open()?
        .gc(&plan_store::timestamp(cutoff))
        .map_err(Failure::ledger)?;
    print(&format!(
        "deleted {deleted} run{} that ended before {}\n",
        if deleted == 1 { "" } else { "s" },
        plan_store::timestamp(cutoff)
    ))?;
    Ok(0)
}

pub(crate) fn state_export(
    run: &str,
    format: StateFormat,
    ledger: &Ledger,
) -> Result<i32, Failure> {
    let StateFormat::ExecuteState = format;
    let store = ledger.open_existing()?;
    let row = store.run(run).map_err(Failure::ledger)?;
    let document = execute_state(&store, &row, &plan_of(&row)?)?;
    print(&pretty(&document))?;
    Ok(0)
}

/// Seed 004's document for a run, from the ledger.
pub(crate) fn execute_state(store: &Store, row: &RunRow, plan: &Plan) -> Result<Value, Failure> {
    let records = store.records(&row.run_id).map_err(Failure::ledger)?;
    let attempts = store.attempts(&row.run_id).map_err(Failure::ledger)?;
    let cwd = std::env::current_dir()
        .ok()
        .map(|d| d.display().to_string());
    Ok(plan_run::state_file::execute_state(
        plan_run::state_file::Inputs {
            run: row,
            plan,
            records: &records,
            attempts: &attempts,
            project_path: cwd.as_deref(),
            now: SystemTime::now(),
        },
    ))
}
