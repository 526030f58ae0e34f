//! Plans a model writes: from a goal ([`generate`], kept with [`store_generated`]), and the
//! new steps of a failed run (`replan`, through [`Replanner`]: `run --replan N`). Each answer is judged by
//! [`crate::check_for_model`] (plan-cli's whole validation and the model's policy), and the
//! problems go back to the model in the same conversation.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::SystemTime;

use plan_llm::{Ask, LlmError, Model, ToolDescription};
use plan_store::{Store, StoredPlan};
use plan_types::{Event, EventKind, RunReport};
use serde_json::Value;

use crate::{Author, LifecycleError, Policy, Toolbox, check_for_model};

/// A plan from `model` for `goal` that `check` accepts: its id (`id`, else the model's, else
/// one made from the goal) and the plan, with that id.
pub async fn generate(
    model: &mut dyn Model,
    goal: &str,
    id: Option<&str>,
    max_retries: u32,
    tools: &[ToolDescription],
    mut check: impl AsyncFnMut(&Value) -> Result<(), String>,
) -> Result<NewPlan, LlmError> {
    let with_id = |plan: &Value| {
        let mut plan = plan.clone();
        if let (Some(id), Some(object)) = (id, plan.as_object_mut()) {
            object.insert("id".into(), id.into());
        }
        plan
    };
    let schema = schema_for(tools);
    let request = Ask {
        goal,
        tools,
        schema: &schema,
        max_retries,
    };
    let created = plan_llm::create_plan(model, &request, async |plan: &Value| {
        check(&with_id(&as_written(plan, tools))).await
    })
    .await?;
    let mut plan = with_id(&as_written(&created.plan, tools));
    // A model's id is a name, never a path or a flag (`plan-cli run ID` reads a file of that
    // name first): any other becomes one made from the goal.
    let plan_id = match id {
        Some(id) => id.to_owned(),
        None => (plan["id"].as_str())
            .filter(|id| id.len() <= 64 && is_name(id))
            .map_or_else(|| slug(goal), str::to_owned),
    };
    if let Some(object) = plan.as_object_mut() {
        object.insert("id".into(), plan_id.clone().into());
    }
    Ok(NewPlan { plan_id, plan })
}

/// The plan schema a model that may call `tools` is asked to follow (plan-graph's generation
/// schema, and its strict variant).
pub fn schema_for(tools: &[ToolDescription]) -> plan_llm::Schema {
    let generation = plan_graph::generation_schema(&generation_tools(tools));
    plan_llm::Schema {
        full: generation.schema,
        strict: generation.strict,
        left_out: generation.left_out,
    }
}

fn generation_tools(tools: &[ToolDescription]) -> Vec<plan_graph::GenerationTool<'_>> {
    tools
        .iter()
        .map(|tool| plan_graph::GenerationTool {
            name: &tool.name,
            input_schema: &tool.input_schema,
        })
        .collect()
}

/// A model's answer as the plan format reads it: the `null`s it wrote for fields it leaves out
/// dropped ([`plan_graph::from_generation`]).
fn as_written(answer: &Value, tools: &[ToolDescription]) -> Value {
    let mut plan = answer.clone();
    plan_graph::from_generation(&mut plan, &generation_tools(tools));
    plan
}

/// A plan a model wrote, with the id it has (and is stored under, once stored).
#[derive(Debug, Clone, PartialEq)]
pub struct NewPlan {
    /// Its id, as `plan["id"]` says too.
    pub plan_id: String,
    /// The plan, as JSON.
    pub plan: Value,
}

/// [`generate`] with plan-cli's judgement of each answer: its validation and `policy`, and the
/// tools `policy` lets the model use as the only ones it is told of. `fallback_id` is the
/// plan's id while it is judged, when it has none.
pub async fn generate_checked(
    model: &mut dyn Model,
    goal: &str,
    id: Option<&str>,
    max_retries: u32,
    toolbox: &Toolbox,
    policy: &Policy,
) -> Result<NewPlan, LlmError> {
    let tools = toolbox.described(|info| policy.allows_tool(info)).await;
    let fallback_id = id.map_or_else(|| slug(goal), str::to_owned);
    // A weak model answers any goal with steps that only echo it. Said once: a goal that
    // asks only for a text gets the same plan again, and it stands.
    let can_work = tools.iter().any(|tool| !does_no_work(&tool.name));
    let mut told_it_does_nothing = false;
    generate(
        model,
        goal,
        id,
        max_retries,
        &tools,
        async |plan: &Value| {
            check_for_model(plan, &fallback_id, toolbox, policy, None, &tools).await?;
            if can_work && !told_it_does_nothing && does_nothing(plan) {
                told_it_does_nothing = true;
                return Err(DOES_NOTHING.to_owned());
            }
            Ok(())
        },
    )
    .await
}

/// A Chat Completions model at `endpoint`, asked as `settings` say, starting (unless
/// `settings` fix a format or a start) at the response format it took last time, as `ledger`
/// keeps it ([`remember_format`]).
pub fn http_model(
    ledger: &crate::Ledger,
    endpoint: plan_llm::Endpoint,
    mut settings: plan_llm::Settings,
) -> Result<plan_llm::Http, LifecycleError> {
    if settings.format.is_none() && settings.start.is_none() {
        let store = ledger.open()?;
        settings.start = store
            .model_format(&endpoint.base_url, &endpoint.model)?
            .and_then(|name| plan_llm::ResponseFormat::named(&name));
    }
    plan_llm::Http::with(endpoint, settings).map_err(LifecycleError::Generate)
}

/// Keeps the response format `model`'s server answered to, so that the next request to it
/// starts there instead of stepping down again.
pub fn remember_format(
    ledger: &crate::Ledger,
    model: &plan_llm::Http,
) -> Result<(), LifecycleError> {
    if let Some(format) = model.format_taken() {
        let endpoint = model.endpoint();
        ledger
            .open()?
            .set_model_format(&endpoint.base_url, &endpoint.model, format.name())?;
    }
    Ok(())
}

/// What a model hears of a plan that [`does_nothing`].
const DOES_NOTHING: &str = "- every step calls `echo`, `sleep`, `fail` or `chat.respond`, which do no work (`echo` gives back its arguments, `chat.respond` only answers): if the goal needs work done, call the tools that do it; if giving back a text is all it asks, answer with the same plan again";

/// The built-in tools that do no work (`fail` is for trying plans out).
const DO_NOTHING: [&str; 3] = ["echo", "sleep", "fail"];

/// Whether a tool does no work: one of [`DO_NOTHING`], or the answer (`chat.respond`).
fn does_no_work(tool: &str) -> bool {
    DO_NOTHING.contains(&tool) || plan_types::is_answer_tool(tool)
}

/// Whether every step of `plan` calls a tool that does no work.
fn does_nothing(plan: &Value) -> bool {
    plan["steps"].as_array().is_some_and(|steps| {
        steps
            .iter()
            .all(|step| step["tool"].as_str().is_some_and(does_no_work))
    })
}

/// What a plan is asked of a model for ([`plan_from_goal`]).
#[derive(Debug, Clone)]
pub struct Goal<'a> {
    /// The goal, in the user's words.
    pub text: &'a str,
    /// The plan's id; else the model's, else one made from the goal ([`slug`]).
    pub id: Option<&'a str>,
    /// How many times the model is told what is wrong with its plan and asked again.
    pub max_retries: u32,
    /// Whether the plan is stored over one its author stored before under that id.
    pub force: bool,
    /// Whose plan it is in the registry (a model's, an MCP client's): a run of it from there
    /// runs under that author's policy. (The policy [`plan_from_goal`] judges it by now is
    /// the one it is given.)
    pub author: Author,
}

impl<'a> Goal<'a> {
    /// `text`, asked by `author`: two more tries after a wrong answer, and never stored over
    /// another plan.
    pub fn new(text: &'a str, author: Author) -> Self {
        Goal {
            text,
            id: None,
            max_retries: 2,
            force: false,
            author,
        }
    }
}

/// A plan `model` writes for `goal` and plan-cli accepts ([`generate_checked`]: its
/// validation and `policy`), stored in `ledger`'s registry under its author
/// ([`store_generated`]): its id and the plan.
pub async fn plan_from_goal(
    model: &mut dyn Model,
    goal: &Goal<'_>,
    toolbox: &Toolbox,
    policy: &Policy,
    ledger: &crate::Ledger,
) -> Result<NewPlan, LifecycleError> {
    let generated = generate_checked(model, goal.text, goal.id, goal.max_retries, toolbox, policy)
        .await
        .map_err(LifecycleError::Generate)?;
    let by = model.name();
    store_generated(&mut ledger.open()?, generated, &by, goal.force, goal.author)
}

/// Stores a generated plan in the registry, and says under which id: never over a plan
/// another author stored (a model's id that is taken so takes the next free one, `deploy-2`,
/// …); over one of its own author's only with `force`. `by` names the model.
pub fn store_generated(
    store: &mut Store,
    NewPlan { plan_id, mut plan }: NewPlan,
    by: &str,
    force: bool,
    author: Author,
) -> Result<NewPlan, LifecycleError> {
    // `{:#}`: pretty JSON, which a `Value` always makes.
    let text_of = |plan: &Value| format!("{plan:#}");
    let title = plan["title"].as_str().map(str::to_owned);
    let stored = stored_plan(
        &plan_id,
        title,
        format!("created from a goal by {by}"),
        plan_graph::Format::Json,
        text_of(&plan),
        author,
    );
    // The id is chosen in the write's own transaction: a plan the operator stores meanwhile
    // under the same id is never replaced.
    let with_id = |plan: &mut Value, id: &str| {
        if let Some(object) = plan.as_object_mut() {
            object.insert("id".into(), id.into());
        }
    };
    let stored_as = store.add_plan_apart(stored, force, |id| {
        let mut renamed = plan.clone();
        with_id(&mut renamed, id);
        text_of(&renamed)
    })?;
    if stored_as != plan_id {
        with_id(&mut plan, &stored_as);
    }
    Ok(NewPlan {
        plan_id: stored_as,
        plan,
    })
}

/// Stores the operator's plan, prepared (and so judged as a run would judge it), in the
/// registry under its id, its source's name and text: over one stored under that id only with
/// `replace`.
pub fn store_prepared(
    ledger: &crate::Ledger,
    prepared: &crate::Prepared,
    replace: bool,
) -> Result<(), LifecycleError> {
    let source = &prepared.loaded.source;
    let stored = stored_plan(
        prepared.program.plan_id(),
        prepared.loaded.plan.title.clone(),
        source.name().to_owned(),
        prepared.format,
        source.text().to_owned(),
        Author::Operator,
    );
    Ok(ledger.open()?.add_plan(&stored, replace)?)
}

/// A plan's text as the registry keeps it, added now.
pub fn stored_plan(
    plan_id: &str,
    title: Option<String>,
    name: String,
    format: plan_graph::Format,
    text: String,
    author: Author,
) -> StoredPlan {
    StoredPlan {
        plan_id: plan_id.to_owned(),
        title,
        name,
        format: crate::format_name(format).to_owned(),
        hash: plan_store::plan_hash(&text),
        source: text,
        added_at: plan_store::timestamp(SystemTime::now()),
        author: author.as_str().to_owned(),
    }
}

/// Whether `id` is a plain name: letters, digits, `-` and `_`, not beginning with `-`.
fn is_name(id: &str) -> bool {
    !id.is_empty()
        && !id.starts_with('-')
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// A plan id from a goal: its first words, lower case, joined by `-`.
pub fn slug(goal: &str) -> String {
    let words: Vec<String> = goal
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .take(6)
        .map(str::to_lowercase)
        .collect();
    if words.is_empty() {
        "plan".to_owned()
    } else {
        words.join("-")
    }
}

/// What a re-plan keeps to: the secrets the model must not see, and the model's policy.
pub struct Replanning<'a> {
    /// Values never shown to the model (the run's `env:` values).
    pub secrets: &'a [String],
    /// What the model's new steps may do.
    pub policy: &'a Policy,
}

/// A failed run, re-planned: the new revision of its plan is in the ledger.
#[derive(Debug, Clone)]
pub struct Replanned {
    /// The revision (1 for the first re-plan).
    pub revision: u32,
    /// The failure the model was asked to work around, in a line (secrets hidden).
    pub failure: String,
}

/// Where a re-planned run's options keep the folder its programs stay in (the model's policy's
/// work folder).
pub(crate) const REPLAN_FOLDER: &str = "replan_folder";

/// Re-plans a run each time it fails for good, within a budget of revisions (`run --replan
/// N`): [`Replanner::run_to_end`] goes on with the run after each revision
/// [`Replanner::next`] gives, until it is done; a front-end gives each part's execution.
pub struct Replanner<'a> {
    budget: u32,
    revisions: u32,
    model: &'a mut dyn Model,
    replanning: Replanning<'a>,
}

impl<'a> Replanner<'a> {
    /// At most `budget` revisions by `model`, kept to `replanning`.
    pub fn new(budget: u32, model: &'a mut dyn Model, replanning: Replanning<'a>) -> Self {
        Replanner {
            budget,
            revisions: 0,
            model,
            replanning,
        }
    }

    /// When the run of `report` failed for good and the budget allows: the model's steps for
    /// the work left, stored as the run's next plan revision (`replan`). `None`: the run is
    /// done (it did not fail, or the budget is spent).
    pub async fn next(
        &mut self,
        store: &mut Store,
        report: &RunReport,
        toolbox: &Toolbox,
    ) -> Result<Option<Replanned>, LifecycleError> {
        if self.revisions >= self.budget || report.task_status != plan_types::TaskStatus::Failed {
            return Ok(None);
        }
        let replanned = replan(store, report, &mut *self.model, &self.replanning, toolbox).await?;
        self.revisions += 1;
        Ok(Some(replanned))
    }

    /// Goes on with the run of `outcome` for as long as it is re-planned: each time it fails
    /// for good and the budget allows, `replanned` hears of the revision, and the run goes on
    /// with it ([`ResumeOptions::replanned`](crate::ResumeOptions)) in the execution `execution`
    /// makes for its new plan. The last outcome, its report read as [`Replanner::finish`]
    /// reads it.
    pub async fn run_to_end(
        &mut self,
        mut outcome: crate::Outcome,
        ledger: &crate::Ledger,
        toolbox: &Toolbox,
        env: &dyn Fn(&str) -> Option<String>,
        execution: &mut dyn FnMut(&crate::Prepared) -> crate::Execution,
        replanned: &mut dyn FnMut(&Replanned),
    ) -> Result<crate::Outcome, LifecycleError> {
        loop {
            let mut store = ledger.open_existing()?;
            let Some(revision) = self.next(&mut store, &outcome.report, toolbox).await? else {
                break;
            };
            replanned(&revision);
            let options = crate::ResumeOptions {
                replanned: true,
                ..crate::ResumeOptions::default()
            };
            let run = outcome.report.run_id.clone();
            outcome =
                crate::continue_run(store, &run, &options, toolbox, env, &mut *execution).await?;
        }
        outcome.report = self.finish(&ledger.open_existing()?, outcome.report)?;
        Ok(outcome)
    }

    /// The run's report once done. After a re-plan it is read back from the ledger: the steps
    /// the last revision no longer has (the failed step the model replaced) are the run's too,
    /// as `status` shows them.
    pub fn finish(&self, store: &Store, report: RunReport) -> Result<RunReport, LifecycleError> {
        if self.revisions == 0 {
            return Ok(report);
        }
        let row = store.run(&report.run_id)?;
        crate::report(store, &row)
    }
}

/// Asks `model` for steps that finish the work of a run that failed for good (`report`): the
/// model is told the steps that succeeded with their results, the failure, the steps left and
/// the tools its policy allows. Its steps, checked with the steps that succeeded, are kept in
/// the ledger as the run's next plan revision; the run is then resumed with
/// `ResumeOptions::replanned`, and from then on, whoever resumes it, with approvals on.
pub(crate) async fn replan(
    store: &mut Store,
    report: &RunReport,
    model: &mut dyn Model,
    replanning: &Replanning<'_>,
    toolbox: &Toolbox,
) -> Result<Replanned, LifecycleError> {
    let Replanning { secrets, policy } = *replanning;
    let run_id = report.run_id.clone();
    let row = store.run(&run_id)?;
    let written = written_plan(&row.plan_source, &row.plan_format)?;
    let (request, done, taken) = request(&written, report, secrets);
    let tools = toolbox.described(|info| policy.allows_tool(info)).await;
    let schema = schema_for(&tools);
    let ask = Ask {
        goal: &request,
        tools: &tools,
        schema: &schema,
        max_retries: 2,
    };
    let check = async |answer: &Value| -> Result<(), String> {
        let answer = &as_written(answer, &tools);
        let combined = combine(&written, &done, answer, &taken)?;
        let new_steps: BTreeSet<String> = answer["steps"]
            .as_array()
            .into_iter()
            .flatten()
            .map(id_of)
            .collect();
        check_for_model(
            &combined,
            &row.plan_id,
            toolbox,
            policy,
            Some(&new_steps),
            &tools,
        )
        .await
    };
    let created = plan_llm::create_plan(model, &ask, check)
        .await
        .map_err(|source| LifecycleError::Replan {
            run_id: run_id.clone(),
            source,
        })?;
    let combined = combine(&written, &done, &as_written(&created.plan, &tools), &taken)
        .map_err(|problem| LifecycleError::Refused(problem.trim_start_matches("- ").to_owned()))?;
    let text = serde_json::to_string_pretty(&combined)
        .map_err(|error| LifecycleError::Internal(error.to_string()))?;
    let failure = redact(&failure_of(report), secrets);
    let revision = store.revisions(&run_id)? + 1;
    // The model's steps keep their programs in its policy's work folder, whoever resumes the
    // run (the operator's steps that ran before are not the model's to move).
    let folder = std::fs::canonicalize(&policy.workdir).map_err(|error| {
        LifecycleError::Refused(format!(
            "cannot read the work folder {}: {error}",
            policy.workdir.display()
        ))
    })?;
    let mut options = row.options.clone();
    if let Some(options) = options.as_object_mut() {
        options.insert(
            REPLAN_FOLDER.to_owned(),
            Value::String(folder.display().to_string()),
        );
    }
    let mut event = Event::new(EventKind::PlanReplanned, &Arc::from(run_id.as_str()));
    event.attempt = revision;
    event.plan_id = Some(Arc::from(row.plan_id.as_str()));
    event.reason = Some(failure.clone());
    store.replan(&run_id, &text, &options, &failure, &event)?;
    Ok(Replanned { revision, failure })
}

/// The plan as written (JSON or YAML), as JSON.
fn written_plan(source: &str, format: &str) -> Result<Value, LifecycleError> {
    let parsed = if format == "yaml" {
        serde_saphyr::from_str::<Value>(source).map_err(|e| e.to_string())
    } else {
        serde_json::from_str::<Value>(source).map_err(|e| e.to_string())
    };
    parsed.map_err(|e| LifecycleError::Internal(format!("cannot read the run's plan again: {e}")))
}

/// A step's id as written (a string, or a number as its digits).
fn id_of(step: &Value) -> String {
    crate::prepare::written_id(step).unwrap_or_default()
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
    // An old step's id, and an id the ledger already holds a record of under an old step (a
    // map item's `m-0`, a node's `b/n#1`): a new step of that id would take over its record.
    let old = plan_graph::StepIndex::new(taken.iter().map(String::as_str));
    let reused: Vec<String> = new_steps
        .iter()
        .map(id_of)
        .filter(|id| old.call_of(id).is_some())
        .collect();
    if !reused.is_empty() {
        return Err(format!(
            "- the ids {} are taken by the plan's earlier steps (or their items and calls): give the new steps new ids",
            reused.join(", ")
        ));
    }
    // The other way round: a new step whose items or calls would have an earlier id (new
    // block `clean` beside the earlier step `clean/tmp`, new map `wipe` beside `wipe-0`)
    // would take over its record, and the approval the operator gave it (hostile review).
    let new_ids: Vec<String> = new_steps.iter().map(id_of).collect();
    let new = plan_graph::StepIndex::new(new_ids.iter().map(String::as_str));
    let mut shadowing: Vec<String> = Vec::new();
    for old_id in taken {
        if let Some(plan_graph::CallOf::Item(i) | plan_graph::CallOf::Inside(i, _)) =
            new.call_of(old_id)
            && !shadowing.contains(&new_ids[i])
        {
            shadowing.push(new_ids[i].clone());
        }
    }
    if !shadowing.is_empty() {
        return Err(format!(
            "- the ids {} begin ids the plan's earlier steps have (their items and calls would be the same): give the new steps ids that do not",
            shadowing.join(", ")
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
        // An old map step's item or an old block's node would take over its record.
        for id in ["b-0", "b[k]", "a/n#1"] {
            let refused = combine(&written, &done, &json!({"steps": [{"id": id}]}), &taken);
            assert!(refused.unwrap_err().contains("are taken"), "{id}");
        }
        // The other way round (hostile review): a new block `clean` whose node `tmp` would be
        // `clean/tmp`, the earlier step the operator approved; a new map `wipe` over `wipe-0`.
        let taken = vec!["clean/tmp".to_owned(), "wipe-0".to_owned()];
        for id in ["clean", "wipe"] {
            let refused = combine(&written, &done, &json!({"steps": [{"id": id}]}), &taken);
            assert!(refused.unwrap_err().contains("begin ids"), "{id}");
        }
        assert!(
            combine(
                &written,
                &done,
                &json!({"steps": [{"id": "cleanup"}]}),
                &taken
            )
            .is_ok()
        );
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

    #[test]
    fn a_slug_is_the_goal_s_first_words() {
        assert_eq!(
            slug("Back up the DB, then: notify!"),
            "back-up-the-db-then-notify"
        );
        assert_eq!(slug("  ...  "), "plan");
    }
}
