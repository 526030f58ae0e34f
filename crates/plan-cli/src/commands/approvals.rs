//! `approve` and `reject`: decisions on a run's high-risk calls, kept in the ledger and read by
//! `resume`.

use plan_engine::Program;
use plan_store::{ApprovalRow, Decision, RunRow, RunState, Store};
use plan_types::PLAN_APPROVAL;

use super::ledger::plan_of;
use super::print;
use crate::cli::{ApproveArgs, RejectArgs};
use crate::exit::Failure;
use crate::ledger::Ledger;
use crate::toolbox::Toolbox;

/// What a decision did: the ids decided, and what the run still waits for.
#[derive(Debug, serde::Serialize)]
pub(crate) struct Decided {
    pub(crate) run_id: String,
    pub(crate) decided: Vec<String>,
    pub(crate) still_waiting: Vec<String>,
}

pub(crate) fn approve(
    args: &ApproveArgs,
    toolbox: &Toolbox,
    ledger: &Ledger,
) -> Result<i32, Failure> {
    let decided = approve_calls(args, toolbox, ledger)?;
    let names: Vec<&str> = decided.decided.iter().map(|id| display(id)).collect();
    report(&decided, &format!("approved {}", names.join(", ")))
}

/// Approves what `args` names; see [`approve`].
pub(crate) fn approve_calls(
    args: &ApproveArgs,
    toolbox: &Toolbox,
    ledger: &Ledger,
) -> Result<Decided, Failure> {
    let mut store = ledger.open_existing()?;
    let row = open_run(&store, &args.run)?;
    let rows = store.approvals(&row.run_id).map_err(Failure::ledger)?;
    let mut ids: Vec<String> = if args.all {
        let pending: Vec<String> = pending(&rows).map(|r| r.step_id.clone()).collect();
        if pending.is_empty() && !args.plan {
            return Err(Failure::input(format!(
                "nothing in run {} waits for an approval",
                row.run_id
            )));
        }
        pending
    } else {
        check_all(&args.steps, &row, &rows, toolbox)?;
        args.steps.clone()
    };
    if args.plan && !ids.iter().any(|id| id == PLAN_APPROVAL) {
        ids.insert(0, PLAN_APPROVAL.to_owned());
    }
    for id in &ids {
        store
            .decide(&row.run_id, id, Decision::Approved, None)
            .map_err(Failure::ledger)?;
    }
    decided(&store, &row, ids)
}

pub(crate) fn reject(
    args: &RejectArgs,
    toolbox: &Toolbox,
    ledger: &Ledger,
) -> Result<i32, Failure> {
    let decided = reject_calls(args, toolbox, ledger)?;
    report(
        &decided,
        &format!(
            "rejected {}: they fail with E_REJECTED and what depends on them is skipped",
            decided.decided.join(", ")
        ),
    )
}

/// Rejects what `args` names; see [`reject`].
pub(crate) fn reject_calls(
    args: &RejectArgs,
    toolbox: &Toolbox,
    ledger: &Ledger,
) -> Result<Decided, Failure> {
    let mut store = ledger.open_existing()?;
    let row = open_run(&store, &args.run)?;
    let rows = store.approvals(&row.run_id).map_err(Failure::ledger)?;
    check_all(&args.steps, &row, &rows, toolbox)?;
    let reason = args
        .reason
        .as_deref()
        .unwrap_or("rejected without a reason");
    for id in &args.steps {
        store
            .decide(&row.run_id, id, Decision::Rejected, Some(reason))
            .map_err(Failure::ledger)?;
    }
    decided(&store, &row, args.steps.clone())
}

fn open_run(store: &Store, id: &str) -> Result<RunRow, Failure> {
    let row = store.run(id).map_err(Failure::ledger)?;
    if row.state == RunState::Finished {
        return Err(Failure::input(format!(
            "run {} has finished ({}): there is nothing left to approve",
            row.run_id,
            row.task_status.map_or("", |s| s.as_str())
        )));
    }
    Ok(row)
}

fn pending(rows: &[ApprovalRow]) -> impl Iterator<Item = &ApprovalRow> {
    rows.iter().filter(|r| r.decision == Decision::Pending)
}

/// The run's steps that wait for an approval, from the plan stored with it.
fn gated_steps(row: &RunRow, toolbox: &Toolbox) -> Result<Vec<String>, Failure> {
    let plan = plan_of(row)?;
    let tools = toolbox.for_plan(plan.tool_names())?;
    let program = Program::compile(&plan, &row.plan_id, &tools.registry).map_err(|issues| {
        Failure::input(format!(
            "the plan of run {} no longer compiles: {}",
            row.run_id,
            issues.first().map_or("", |i| i.message.as_str())
        ))
    })?;
    Ok(program.gated_steps())
}

/// Checks that each of `ids` can take a decision in run `row`.
fn check_all(
    ids: &[String],
    row: &RunRow,
    rows: &[ApprovalRow],
    toolbox: &Toolbox,
) -> Result<(), Failure> {
    let gated = gated_steps(row, toolbox)?;
    ids.iter()
        .try_for_each(|id| check_gated(id, &gated, rows, row))
}

/// A decision must name something that can wait: a pending call, a high-risk step, or an
/// item of a high-risk map step (`deploy-0`, `deploy[prod]`).
fn check_gated(
    id: &str,
    gated: &[String],
    rows: &[ApprovalRow],
    row: &RunRow,
) -> Result<(), Failure> {
    if rows.iter().any(|r| r.step_id == id) || can_wait(id, gated) {
        return Ok(());
    }
    let waiting: Vec<&str> = pending(rows).map(|r| display(&r.step_id)).collect();
    let mut message = format!(
        "`{id}` needs no decision in run {}: it is not a high-risk step",
        row.run_id
    );
    if !waiting.is_empty() {
        message.push_str(&format!(" (waiting: {})", waiting.join(", ")));
    }
    Err(Failure::input(message))
}

/// Whether `id` is one of the high-risk steps `gated`, or an item of one.
pub(crate) fn can_wait(id: &str, gated: &[String]) -> bool {
    gated
        .iter()
        .any(|step| id == step || plan_graph::is_item_of(id, step))
}

fn display(id: &str) -> &str {
    if id == PLAN_APPROVAL { "the plan" } else { id }
}

fn decided(store: &Store, row: &RunRow, ids: Vec<String>) -> Result<Decided, Failure> {
    let rows = store.approvals(&row.run_id).map_err(Failure::ledger)?;
    Ok(Decided {
        run_id: row.run_id.clone(),
        decided: ids,
        still_waiting: pending(&rows).map(|r| r.step_id.clone()).collect(),
    })
}

/// Says what was decided, what still waits, and how to go on.
fn report(decided: &Decided, done: &str) -> Result<i32, Failure> {
    let run = &decided.run_id;
    let mut text = format!("{done} in run {run}\n");
    if !decided.still_waiting.is_empty() {
        let waiting: Vec<&str> = decided.still_waiting.iter().map(|id| display(id)).collect();
        text.push_str(&format!("still waiting: {}\n", waiting.join(", ")));
    }
    text.push_str(&format!("continue it with `plan-cli resume {run}`\n"));
    print(&text)?;
    Ok(0)
}
