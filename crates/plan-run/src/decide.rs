//! Decisions on a waiting run's high-risk calls, kept in the ledger and read by `resume`.

use plan_engine::{Program, Registry};
use plan_store::{ApprovalRow, Decision, RunRow, RunState, Store};
use plan_types::PLAN_APPROVAL;

use crate::LifecycleError;
use crate::report::plan_of;

/// What to approve.
#[derive(Debug, Clone, Default)]
pub struct Decisions {
    /// Steps or map items (`deploy`, `deploy[prod]`); a step covers its items.
    pub steps: Vec<String>,
    /// Everything the run waits for.
    pub all: bool,
    /// The plan itself (a run in approval mode).
    pub plan: bool,
    /// An answer to overlay on the one call named (`approve RUN STEP --input JSON`): an
    /// object whose fields replace the call's arguments of the same names when it is made.
    pub input: Option<serde_json::Value>,
}

/// What a decision did: the ids decided, and what the run still waits for.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Decided {
    /// The run.
    pub run_id: String,
    /// The ids decided.
    pub decided: Vec<String>,
    /// What the run still waits for.
    pub still_waiting: Vec<String>,
    /// The task steps a rejection abandons (their merge waited for a decision): on resume
    /// each ends abandoned, its worktree kept.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub abandoned: Vec<String>,
}

/// Approves what `request` names in run `run` (its id or a unique prefix). `gated` gives the
/// run's high-risk steps (see [`gated_steps`]); it is asked only when ids are named, since
/// knowing them may mean starting the plan's MCP servers.
pub fn approve(
    store: &mut Store,
    run: &str,
    request: &Decisions,
    gated: impl FnOnce(&RunRow) -> Result<Vec<String>, LifecycleError>,
) -> Result<Decided, LifecycleError> {
    let row = open_run(store, run)?;
    let rows = store.approvals(&row.run_id)?;
    if let Some(input) = &request.input {
        let id = answered(request, &row, &rows, input)?;
        store.approve_with_input(&row.run_id, id, input)?;
        return decided(store, &row, vec![id.to_owned()]);
    }
    let is_question = |r: &&ApprovalRow| {
        r.request
            .as_ref()
            .is_some_and(plan_types::PendingApproval::is_question)
    };
    let mut ids: Vec<String> = if request.all {
        // Everything that waits for an approval; questions wait for their answers (they stay
        // waiting, listed in `still_waiting`).
        let asked = pending(&rows).any(|r| is_question(&r));
        let pending: Vec<String> = pending(&rows)
            .filter(|r| !is_question(r))
            .map(|r| r.step_id.clone())
            .collect();
        if pending.is_empty() && !request.plan && !asked {
            return Err(LifecycleError::Refused(format!(
                "nothing in run {} waits for an approval",
                row.run_id
            )));
        }
        pending
    } else {
        check_all(&request.steps, &row, &rows, gated)?;
        request.steps.clone()
    };
    if request.plan && !ids.iter().any(|id| id == PLAN_APPROVAL) {
        ids.insert(0, PLAN_APPROVAL.to_owned());
    }
    // A question a call asked is answered, not approved.
    let questions: Vec<&str> = pending(&rows)
        // Named, or (`--all` with nothing but questions waiting) all of them: said how to answer.
        .filter(|r| is_question(r) && (ids.contains(&r.step_id) || ids.is_empty()))
        .map(|r| r.step_id.as_str())
        .collect();
    if let Some(first) = questions.first() {
        return Err(LifecycleError::Refused(format!(
            "{} in run {} {} for input, not for an approval: answer with `approve {} {first} --input JSON` (an object of the asked fields), or refuse with `reject`",
            questions
                .iter()
                .map(|q| format!("`{q}`"))
                .collect::<Vec<_>>()
                .join(", "),
            row.run_id,
            if questions.len() == 1 { "asks" } else { "ask" },
            row.run_id,
        )));
    }
    // One transaction: an approval of several calls is never half made.
    store.decide_all(&row.run_id, &ids, Decision::Approved, None)?;
    decided(store, &row, ids)
}

/// The one call an answer is for: a call that waits in run `row`, named alone.
fn answered<'a>(
    request: &'a Decisions,
    row: &RunRow,
    rows: &[ApprovalRow],
    input: &serde_json::Value,
) -> Result<&'a str, LifecycleError> {
    let refused = |why: String| Err(LifecycleError::Refused(why));
    let [id] = request.steps.as_slice() else {
        return refused("an answer is for one waiting call: name exactly one".to_owned());
    };
    if request.all || request.plan {
        return refused(
            "an answer is for one waiting call, not for everything or the plan".to_owned(),
        );
    }
    if !input.is_object() {
        return refused(format!(
            "the answer for `{id}` must be a JSON object of arguments (their names and values), not `{input}`"
        ));
    }
    // Decided already: the ledger says whether this is the same decision.
    let waiting = rows
        .iter()
        .find(|r| r.step_id == *id)
        .and_then(|r| r.request.as_ref());
    match waiting {
        Some(question) if question.is_question() => {
            // Checked against the schema the server asked with before the server sees it.
            let schema = question
                .input_schema
                .as_ref()
                .unwrap_or(&serde_json::Value::Null);
            let violations = match plan_ports::schema::compile_schema(schema) {
                Ok(Some(schema)) => plan_ports::schema::violations(&schema, input),
                Ok(None) | Err(_) => Vec::new(),
            };
            if violations.is_empty() {
                return Ok(id);
            }
            refused(format!(
                "the answer for `{id}` does not fit what was asked ({}): {}",
                question.question_text().unwrap_or_default(),
                plan_ports::schema::listing(&violations)
            ))
        }
        // A call (a block node's re-run, a task's merge and the plan have no tool).
        Some(request) if request.tool.is_some() => Ok(id),
        Some(_) => refused(format!(
            "`{id}` in run {} waits for a decision, not for a call's arguments: approve it without an answer",
            row.run_id
        )),
        None => refused(format!(
            "`{id}` is no call run {} waits for: an answer is given to a waiting call",
            row.run_id
        )),
    }
}

/// Rejects `steps` of run `run`: they fail with `E_REJECTED` and `reason`, and what depends on
/// them is skipped. `gated` as for [`approve`].
pub fn reject(
    store: &mut Store,
    run: &str,
    steps: &[String],
    reason: Option<&str>,
    gated: impl FnOnce(&RunRow) -> Result<Vec<String>, LifecycleError>,
) -> Result<Decided, LifecycleError> {
    let row = open_run(store, run)?;
    let rows = store.approvals(&row.run_id)?;
    check_all(steps, &row, &rows, gated)?;
    let reason = reason.unwrap_or("rejected without a reason");
    store.decide_all(&row.run_id, steps, Decision::Rejected, Some(reason))?;
    let mut decided = decided(store, &row, steps.to_vec())?;
    // A merge wait is read as every call id is, through the plan's steps.
    let plan = plan_of(&row)?;
    let index = plan_graph::StepIndex::new(plan.steps.iter().map(|step| step.id.0.as_str()));
    decided.abandoned = steps
        .iter()
        .filter_map(|id| match index.call_of(id)? {
            plan_graph::CallOf::Inside(i, inside) if plan.steps[i].task.is_some() => {
                let calls = plan_types::CallPath::segments_of(inside);
                matches!(calls.as_slice(), [call] if &*call.name == plan_types::MERGE)
                    .then(|| plan.steps[i].id.0.clone())
            }
            _ => None,
        })
        .collect();
    Ok(decided)
}

/// The run's steps that wait for an approval, from the plan stored with it, compiled against
/// `registry`.
pub fn gated_steps(row: &RunRow, registry: &Registry) -> Result<Vec<String>, LifecycleError> {
    let plan = plan_of(row)?;
    let program = Program::compile(&plan, &row.plan_id, registry).map_err(|issues| {
        LifecycleError::Refused(format!(
            "the plan of run {} no longer compiles: {}",
            row.run_id,
            issues.first().map_or("", |i| i.message.as_str())
        ))
    })?;
    Ok(program.gated_steps())
}

/// [`gated_steps`] with the tools of `toolbox` the run's plan names (which may start their
/// MCP servers).
pub async fn gated_steps_in(
    row: &RunRow,
    toolbox: &crate::Toolbox,
) -> Result<Vec<String>, LifecycleError> {
    let plan = plan_of(row)?;
    let tools = toolbox
        .for_plan_of(&plan)
        .await
        .map_err(|error| LifecycleError::Prepare(Box::new(error.into())))?;
    gated_steps(row, &tools.registry)
}

/// What run `run_id` waits on a decision for, in the order it asked: each waiting call's id,
/// and what it asked to call when it asked (a step approved ahead of its run asked nothing).
pub fn waiting_for(
    store: &Store,
    run_id: &str,
) -> Result<Vec<(String, Option<plan_types::PendingApproval>)>, LifecycleError> {
    Ok(store
        .approvals(run_id)?
        .into_iter()
        .filter(|approval| approval.decision == Decision::Pending)
        .map(|approval| (approval.step_id, approval.request))
        .collect())
}

/// Whether `id` is one of the high-risk steps `gated`, or an item of one.
pub fn can_wait(id: &str, gated: &[String]) -> bool {
    gated
        .iter()
        .any(|step| id == step || plan_graph::is_item_of(id, step))
}

fn open_run(store: &Store, id: &str) -> Result<RunRow, LifecycleError> {
    let row = store.run(id)?;
    if row.state == RunState::Finished {
        return Err(LifecycleError::Refused(format!(
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

/// Checks that each of `ids` can take a decision in run `row`: a pending call, a high-risk
/// step, or an item of a high-risk map step (`deploy-0`, `deploy[prod]`).
fn check_all(
    ids: &[String],
    row: &RunRow,
    rows: &[ApprovalRow],
    gated: impl FnOnce(&RunRow) -> Result<Vec<String>, LifecycleError>,
) -> Result<(), LifecycleError> {
    // Asked only for an id that waits for nothing yet: knowing the run's high-risk steps
    // means compiling its plan against its tools (an MCP server started, a queue reached).
    let mut gated = Some(gated);
    let mut known: Option<Vec<String>> = None;
    for id in ids {
        if rows.iter().any(|r| r.step_id == *id) {
            continue;
        }
        if known.is_none()
            && let Some(gated) = gated.take()
        {
            known = Some(gated(row)?);
        }
        if known.as_deref().is_some_and(|steps| can_wait(id, steps)) {
            continue;
        }
        let waiting: Vec<_> = pending(rows)
            .map(|r| crate::words::approval(&r.step_id))
            .collect();
        // A name that is no step of the plan at all is most likely a typo.
        let steps: Vec<String> = plan_of(row)
            .map(|plan| plan.steps.iter().map(|s| s.id.0.clone()).collect())
            .unwrap_or_default();
        let known = plan_graph::StepIndex::new(steps.iter().map(String::as_str))
            .step_of(id)
            .is_some();
        let mut message = if known || steps.is_empty() {
            format!(
                "`{id}` needs no decision in run {}: it is not a high-risk step",
                row.run_id
            )
        } else {
            let mut candidates = steps.clone();
            // The ids as they are typed, not as a sentence says them.
            candidates.extend(pending(rows).map(|r| r.step_id.clone()));
            let hint = plan_graph::closest(id, &candidates)
                .map(|near| format!(" (did you mean `{near}`?)"))
                .unwrap_or_default();
            format!("run {} has no step `{id}`{hint}", row.run_id)
        };
        if !waiting.is_empty() {
            message.push_str(&format!(" (waiting: {})", waiting.join(", ")));
        }
        return Err(LifecycleError::Refused(message));
    }
    Ok(())
}

fn decided(store: &Store, row: &RunRow, ids: Vec<String>) -> Result<Decided, LifecycleError> {
    let rows = store.approvals(&row.run_id)?;
    Ok(Decided {
        run_id: row.run_id.clone(),
        decided: ids,
        still_waiting: pending(&rows).map(|r| r.step_id.clone()).collect(),
        abandoned: Vec::new(),
    })
}
