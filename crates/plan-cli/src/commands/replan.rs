//! `run --replan N`: when a run fails for good, a model writes steps for the remaining work
//! (`plan_run::Replanner`), and the run goes on with them, shown as `run` shows a run.

use super::execute::{Ran, continue_run};
use crate::cli::ExecutionArgs;
use crate::exit::Failure;
use crate::toolbox::Toolbox;
use plan_run::Ledger;

/// The model `--replan` asks; checked before the run, so a missing one is said at once.
pub(crate) fn model() -> Result<plan_llm::Http, Failure> {
    let endpoint = plan_llm::Endpoint::from_env(None, &|name| std::env::var(name).ok())
        .ok()
        .flatten()
        .ok_or_else(|| {
            Failure::input(
                "--replan needs a model: set PLAN_LLM_URL (an OpenAI-compatible API's base URL ending in /v1) and PLAN_LLM_MODEL",
            )
        })?;
    plan_llm::Http::new(endpoint).map_err(|e| Failure::input(e.to_string()))
}

/// Goes on with the run each time `replanner` re-plans it; the last outcome.
pub(crate) fn until_done(
    mut outcome: Ran,
    mut replanner: plan_run::Replanner<'_>,
    execution: &ExecutionArgs,
    toolbox: &Toolbox,
    ledger: &Ledger,
) -> Result<Ran, Failure> {
    let next = |replanner: &mut plan_run::Replanner<'_>, outcome: &Ran| {
        let mut store = ledger.open_existing()?;
        toolbox
            .block_on(replanner.next(&mut store, &outcome.0, toolbox))
            .map_err(Failure::lifecycle)
    };
    while let Some(replanned) = next(&mut replanner, &outcome)? {
        let run_id = outcome.0.run_id.clone();
        eprintln!(
            "run {run_id}: {}; re-planned (revision {}), the run goes on",
            replanned.failure, replanned.revision
        );
        let options = plan_run::ResumeOptions {
            replanned: true,
            ..plan_run::ResumeOptions::default()
        };
        outcome = continue_run(&run_id, &options, None, execution, toolbox, ledger)?;
    }
    let store = ledger.open_existing()?;
    outcome.0 = replanner.finish(&store, outcome.0)?;
    Ok(outcome)
}
