//! `run --replan N`: when a run fails for good, a model writes steps for the remaining work
//! (`plan_run::replan`), and the run goes on with them, shown as `run` shows a run.

use plan_types::TaskStatus;

use super::execute::{Frontend, Ran, continue_run};
use crate::exit::Failure;
use crate::ledger::Ledger;
use crate::toolbox::Toolbox;

/// The model `--replan` asks; checked before the run, so a missing one is said at once.
pub(crate) fn model() -> Result<plan_llm::Http, Failure> {
    let endpoint = super::plans::endpoint(None)?.ok_or_else(|| {
        Failure::input(
            "--replan needs a model: set PLAN_LLM_URL (an OpenAI-compatible API's base URL ending in /v1) and PLAN_LLM_MODEL",
        )
    })?;
    plan_llm::Http::new(endpoint).map_err(|e| Failure::input(e.to_string()))
}

/// Re-plans a failed run up to `budget` times; the last outcome. The model's new steps meet
/// its policy (every call they can make, the environment they read) and run with approvals on.
pub(crate) fn until_done(
    mut outcome: Ran,
    budget: u32,
    model: &mut plan_llm::Http,
    replanning: &plan_run::Replanning<'_>,
    frontend: &Frontend,
    toolbox: &Toolbox,
    ledger: &Ledger,
) -> Result<Ran, Failure> {
    let forced;
    let frontend = if replanning.policy.forces_approvals() && frontend.approvals != Some(true) {
        forced = Frontend {
            approvals: Some(true),
            ..frontend.clone()
        };
        &forced
    } else {
        frontend
    };
    let mut revisions = 0;
    while revisions < budget && outcome.0.task_status == TaskStatus::Failed {
        let run_id = outcome.0.run_id.clone();
        let mut store = ledger.open_existing()?;
        let replanned = toolbox
            .block_on(plan_run::replan(
                &mut store, &outcome.0, model, replanning, toolbox,
            ))
            .map_err(Failure::lifecycle)?;
        drop(store);
        eprintln!(
            "run {run_id}: {}; re-planned (revision {}), the run goes on",
            replanned.failure, replanned.revision
        );
        let options = plan_run::ResumeOptions {
            replanned: true,
            ..plan_run::ResumeOptions::default()
        };
        outcome = continue_run(&run_id, &options, None, frontend, toolbox, ledger)?;
        revisions = replanned.revision;
    }
    if revisions > 0 {
        // The run's records are the ledger's: the steps the last revision no longer has (the
        // failed step the model replaced) are the run's too, as `status` shows them.
        let store = ledger.open_existing()?;
        let row = store.run(&outcome.0.run_id).map_err(Failure::ledger)?;
        outcome.0 = plan_run::report(&store, &row).map_err(Failure::lifecycle)?;
    }
    Ok(outcome)
}
