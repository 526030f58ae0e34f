//! `run --replan N`: when a run fails for good, a model gets the steps that succeeded with
//! their results, the failure, the steps left and the tools, and writes steps for the remaining
//! work. They are checked with the steps that succeeded (plan-cli's whole validation, problems
//! sent back in the same conversation), kept in the ledger as a new revision of the run's plan,
//! and run with the run's variables; the failed step's record stays.

use std::sync::Arc;

use plan_types::{Event, EventKind, RunReport, TaskStatus};
use serde_json::Value;

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

/// What a re-plan keeps to: the secrets the model must not see, and the model's policy.
pub(crate) struct Replanning<'a> {
    pub(crate) secrets: &'a [String],
    pub(crate) policy: &'a plan_run::Policy,
}

/// Re-plans a failed run up to `budget` times; the last outcome. The model's new steps meet
/// its policy (every call they can make, the environment they read) and run with approvals on.
pub(crate) fn until_done(
    mut outcome: Ran,
    budget: u32,
    model: &mut plan_llm::Http,
    replanning: &Replanning<'_>,
    frontend: &Frontend,
    toolbox: &Toolbox,
    ledger: &Ledger,
) -> Result<Ran, Failure> {
    let Replanning { secrets, policy } = *replanning;
    let forced;
    let frontend = if policy.forces_approvals() && frontend.approvals != Some(true) {
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
        let row = ledger
            .open_existing()?
            .run(&run_id)
            .map_err(Failure::ledger)?;
        let written = written_plan(&row.plan_source, &row.plan_format)?;
        let (request, done, taken) = request(&written, &outcome.0, secrets);
        let mut check = |answer: &Value| -> Result<(), String> {
            let combined = combine(&written, &done, answer, &taken)?;
            let new_steps: std::collections::BTreeSet<String> = answer["steps"]
                .as_array()
                .into_iter()
                .flatten()
                .map(id_of)
                .collect();
            crate::plan_file::check_for_model(
                &combined,
                &row.plan_id,
                toolbox,
                policy,
                Some(&new_steps),
            )
        };
        let tools = super::plans::describe_tools(toolbox, |info| policy.allows_tool(info));
        let schema = plan_graph::plan_schema();
        let ask = plan_llm::Ask {
            goal: &request,
            tools: &tools,
            schema: &schema,
            max_retries: 2,
        };
        let created = toolbox
            .block_on(plan_llm::create_plan(model, &ask, &mut check))
            .map_err(|error| Failure::input(format!("re-planning run {run_id}: {error}")))?;
        let combined = combine(&written, &done, &created.plan, &taken).map_err(Failure::input)?;
        let text = serde_json::to_string_pretty(&combined)
            .map_err(|e| Failure::internal(e.to_string()))?;
        let failure = failure_of(&outcome.0);
        let mut store = ledger.open_existing()?;
        let revision = store.revisions(&run_id).map_err(Failure::ledger)? + 1;
        let mut event = Event::new(EventKind::PlanReplanned, &Arc::from(run_id.as_str()));
        event.attempt = revision;
        event.plan_id = Some(Arc::from(row.plan_id.as_str()));
        event.reason = Some(redact(&failure, secrets));
        store
            .replan(&run_id, &text, &redact(&failure, secrets), &event)
            .map_err(Failure::ledger)?;
        drop(store);
        eprintln!("run {run_id}: {failure}; re-planned (revision {revision}), the run goes on");
        let options = plan_run::ResumeOptions {
            replanned: true,
            ..plan_run::ResumeOptions::default()
        };
        outcome = continue_run(&run_id, &options, None, frontend, toolbox, ledger)?;
        revisions = revision;
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

/// The plan as written (JSON or YAML), as JSON.
fn written_plan(source: &str, format: &str) -> Result<Value, Failure> {
    let parsed = if format == "yaml" {
        serde_saphyr::from_str::<Value>(source).map_err(|e| e.to_string())
    } else {
        serde_json::from_str::<Value>(source).map_err(|e| e.to_string())
    };
    parsed.map_err(|e| Failure::internal(format!("cannot read the run's plan again: {e}")))
}

/// A step's id as written (a string, or a number as its digits).
fn id_of(step: &Value) -> String {
    ["id", "index", "step_id"]
        .iter()
        .find_map(|key| step.get(*key))
        .map(|id| id.as_str().map_or_else(|| id.to_string(), str::to_owned))
        .unwrap_or_default()
}

/// What the model is told, the steps that succeeded (as written), and every id taken.
fn request(
    written: &Value,
    report: &RunReport,
    secrets: &[String],
) -> (String, Vec<Value>, Vec<String>) {
    let steps = written["steps"].as_array().cloned().unwrap_or_default();
    let record = |id: &str| report.records.iter().find(|r| r.step_id == id);
    let mut done = Vec::new();
    let mut text = format!(
        "A plan (id `{}`{}) ran and a step failed for good. Write steps that finish its work another way.\n",
        report.plan_id,
        written["title"]
            .as_str()
            .map(|t| format!(", \"{t}\""))
            .unwrap_or_default()
    );
    text.push_str("\nSteps that succeeded (they stay; do not repeat them):\n");
    for step in &steps {
        let id = id_of(step);
        if let Some(r) = record(&id).filter(|r| r.ok && !r.skipped) {
            let result = r.result.as_ref().map(|v| v.to_string()).unwrap_or_default();
            let result: String = result.chars().take(2000).collect();
            text.push_str(&format!(
                "- {} (tool `{}`): result {result}\n",
                id,
                step["tool"].as_str().unwrap_or("")
            ));
            done.push(step.clone());
        }
    }
    text.push_str(&format!("\nThe failure:\n- {}\n", failure_of(report)));
    text.push_str("\nSteps not done:\n");
    for step in &steps {
        let id = id_of(step);
        if !record(&id).is_some_and(|r| r.ok && !r.skipped) {
            text.push_str(&format!("- {}: {}\n", id, step));
        }
    }
    let variables: Vec<&String> = report.variables.keys().collect();
    let taken: Vec<String> = steps.iter().map(id_of).collect();
    text.push_str(&format!(
        "\nAnswer with a plan object whose `steps` are only the new steps. They may depend on the steps that succeeded and read the variables they bound ({}). Do not use these ids again: {}.\n",
        if variables.is_empty() { "none".to_owned() } else { variables.iter().map(|v| format!("`{v}`")).collect::<Vec<_>>().join(", ") },
        taken.join(", ")
    ));
    (redact(&text, secrets), done, taken)
}

/// The new plan: the written one with the steps that succeeded, then the answer's steps.
fn combine(
    written: &Value,
    done: &[Value],
    answer: &Value,
    taken: &[String],
) -> Result<Value, String> {
    let new_steps = answer["steps"]
        .as_array()
        .ok_or("- the answer has no `steps` list")?;
    let reused: Vec<String> = new_steps
        .iter()
        .map(id_of)
        .filter(|id| taken.contains(id))
        .collect();
    if !reused.is_empty() {
        return Err(format!(
            "- the ids {} are taken by the plan's earlier steps: give the new steps new ids",
            reused.join(", ")
        ));
    }
    let mut combined = written.clone();
    let mut steps = done.to_vec();
    steps.extend(new_steps.iter().cloned());
    combined["steps"] = Value::Array(steps);
    Ok(combined)
}

/// The first failure of a report, in a line.
fn failure_of(report: &RunReport) -> String {
    report
        .records
        .iter()
        .find_map(|r| {
            r.error
                .as_ref()
                .filter(|_| r.step_id != plan_types::META_STEP_ID)
                .map(|e| format!("step `{}` failed: {}: {}", r.step_id, e.code, e.message))
        })
        .unwrap_or_else(|| "the run failed".to_owned())
}

/// `text` with each secret value replaced, in every form the engine's records hide (any case,
/// percent- or JSON-encoded).
fn redact(text: &str, secrets: &[String]) -> String {
    plan_engine::Redactor::new(secrets.iter().map(String::as_str)).redacted(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn new_steps_may_not_take_old_ids() {
        let written = json!({"id": "p", "steps": [{"id": "a"}, {"id": "b"}]});
        let done = vec![json!({"id": "a"})];
        let taken = vec!["a".to_owned(), "b".to_owned()];
        let combined = combine(&written, &done, &json!({"steps": [{"id": "c"}]}), &taken).unwrap();
        assert_eq!(combined["steps"], json!([{"id": "a"}, {"id": "c"}]));
        let refused = combine(&written, &done, &json!({"steps": [{"id": "b"}]}), &taken);
        assert!(refused.unwrap_err().contains("b are taken"));
    }

    #[test]
    fn secrets_are_replaced() {
        assert_eq!(
            redact("key=abc123", &["abc123".into()]),
            format!("key={}", plan_engine::REDACTED)
        );
        // As the engine does: a secret that came back upper-cased or URL-encoded is hidden too.
        assert_eq!(
            redact("KEY=ABC123 url=a%20b", &["abc123".into(), "a b".into()]),
            format!("KEY={0} url={0}", plan_engine::REDACTED)
        );
    }
}
