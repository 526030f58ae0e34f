//! `approve` and `reject`: decisions on a run's high-risk calls, kept in the ledger and read by
//! `resume` (the logic is `plan_run::approve` and `plan_run::reject`).

use plan_run::ledger::RunRow;
use plan_run::words::approval;
use plan_run::{Decided, Decisions};

use super::print;
use crate::cli::{ApproveArgs, RejectArgs};
use crate::exit::Failure;
use crate::toolbox::Toolbox;
use plan_run::Ledger;

pub(crate) fn approve(
    args: &ApproveArgs,
    toolbox: &Toolbox,
    ledger: &Ledger,
) -> Result<i32, Failure> {
    let input = args
        .input
        .as_deref()
        .map(serde_json::from_str)
        .transpose()
        .map_err(|error| Failure::input(format!("`--input` is not JSON: {error}")))?;
    let decisions = Decisions {
        steps: args.steps.clone(),
        all: args.all,
        plan: args.plan,
        input,
    };
    let mut store = ledger.open_existing()?;
    let decided = plan_run::approve(&mut store, &args.run, &decisions, |row| gated(row, toolbox))?;
    let names: Vec<_> = decided.decided.iter().map(|id| approval(id)).collect();
    report(&decided, &format!("approved {}", names.join(", ")), "")
}

pub(crate) fn reject(
    args: &RejectArgs,
    toolbox: &Toolbox,
    ledger: &Ledger,
) -> Result<i32, Failure> {
    let mut store = ledger.open_existing()?;
    let reason = args.reason.as_deref();
    let decided = plan_run::reject(&mut store, &args.run, &args.steps, reason, |row| {
        gated(row, toolbox)
    })?;
    report(
        &decided,
        &format!("rejected {}", decided.decided.join(", ")),
        &plan_run::words::rejection_outcome(decided.decided.len(), &decided.abandoned),
    )
}

/// The run's high-risk steps, from its stored plan compiled against the tools it names (which
/// may start their MCP servers, or reach the queue the run's calls went to: its tools may be
/// only its workers').
fn gated(row: &RunRow, toolbox: &Toolbox) -> Result<Vec<String>, plan_run::LifecycleError> {
    // A queue whose address was not kept is not reached: its tools are then unknown here.
    if let Ok(Some((url, name))) =
        plan_run::sources_of(row).queue_going_on(&row.run_id, None, None, None)
    {
        let settings = crate::cli::QueueSettings::kept(url, name);
        toolbox.use_queue(&settings).map_err(|failure| {
            plan_run::LifecycleError::Refused(failure.message.unwrap_or_default())
        })?;
    }
    toolbox.block_on(plan_run::gated_steps_in(row, toolbox))
}

/// Says what was decided (and with `outcome`, what that does), what still waits, and how to
/// go on.
fn report(decided: &Decided, done: &str, outcome: &str) -> Result<i32, Failure> {
    let run = &decided.run_id;
    let mut text = format!("{done} in run {run}{outcome}\n");
    if !decided.still_waiting.is_empty() {
        let waiting: Vec<_> = decided
            .still_waiting
            .iter()
            .map(|id| approval(id))
            .collect();
        text.push_str(&format!("still waiting: {}\n", waiting.join(", ")));
    }
    text.push_str(&format!("continue it with `plan-cli resume {run}`\n"));
    print(&text)?;
    Ok(0)
}
