//! A stored run as `status` shows it: its report, its plan, its execute-state document.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use plan_graph::{Format, LoadOptions, Plan, Source};
use plan_store::{RunRow, RunState, Store};
use plan_types::{Record, RunReport, TaskStatus};
use serde_json::Value;

use crate::LifecycleError;

/// The status a stored run reports: how it ended, or that it is still running or stopped.
pub fn status_of(row: &RunRow) -> TaskStatus {
    match row.state {
        RunState::Finished => row.task_status.unwrap_or(TaskStatus::Failed),
        RunState::Stopped => TaskStatus::Stopped,
        RunState::Waiting => TaskStatus::Waiting,
        // Marked running, but its process is gone: it will never finish by itself.
        RunState::Running if crate::execute::owner_died(row) => TaskStatus::Interrupted,
        RunState::Running => TaskStatus::Running,
    }
}

/// When a run ended, as far as its time goes: when it finished, stopped or halted for a
/// decision; at its last event when its process died; `None` while its process runs.
pub fn ended_at(store: &Store, row: &RunRow) -> Result<Option<SystemTime>, LifecycleError> {
    let end = match (&row.finished_at, status_of(row)) {
        (Some(at), _) => at.clone(),
        (None, TaskStatus::Running) => return Ok(None),
        (None, TaskStatus::Interrupted) => store
            .last_event_at(&row.run_id)?
            .unwrap_or_else(|| row.updated_at.clone()),
        (None, _) => row.updated_at.clone(),
    };
    let parse = |t: &str| humantime::parse_rfc3339(t).ok();
    Ok(parse(&end).or_else(|| parse(&row.started_at)))
}

/// How long a run took, or has taken so far (until [`ended_at`], or now while it runs).
/// `status`, `runs` and the execute-state document all say this one figure.
pub fn duration_of(store: &Store, row: &RunRow) -> Result<Duration, LifecycleError> {
    let Ok(start) = humantime::parse_rfc3339(&row.started_at) else {
        return Ok(Duration::ZERO);
    };
    let end = ended_at(store, row)?.unwrap_or_else(SystemTime::now);
    Ok(end.duration_since(start).unwrap_or(Duration::ZERO))
}

/// The plan a run ran, as stored with it.
pub fn plan_of(row: &RunRow) -> Result<Plan, LifecycleError> {
    let source = Source::new(row.plan_name.clone(), row.plan_source.clone());
    match plan_graph::load(source, format_of(&row.plan_format), &LoadOptions::default()) {
        Ok(loaded) => Ok(loaded.plan),
        Err(invalid) => Err(LifecycleError::Internal(format!(
            "the plan stored with run {} no longer loads: {}",
            row.run_id,
            invalid
                .issues
                .first()
                .map_or(String::new(), |i| i.message.clone())
        ))),
    }
}

/// How a run stores its plan's format.
pub fn format_name(format: Format) -> &'static str {
    match format {
        Format::Json => "json",
        Format::Yaml => "yaml",
    }
}

/// The format a run stored as `name`.
pub fn format_of(name: &str) -> Format {
    if name == "yaml" {
        Format::Yaml
    } else {
        Format::Json
    }
}

/// The format of plan text given without a file name (stdin, an MCP client's text): JSON when
/// it is one JSON object, else YAML. Every front-end reads such text the same way.
pub fn format_of_text(text: &str) -> Format {
    let object = text.trim_start().starts_with('{')
        && serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok();
    if object { Format::Json } else { Format::Yaml }
}

/// A plan kept in the registry, as a plan source: its text (named as it was added), its format
/// and who wrote it.
#[derive(Debug, Clone)]
pub struct StoredSource {
    /// The plan's text.
    pub source: plan_graph::Source,
    /// JSON or YAML.
    pub format: Format,
    /// Who stored it (a model's and an MCP client's plans run under their policies).
    pub author: crate::Author,
}

/// The stored plan `id`, if the registry has one.
pub fn stored_source(store: &Store, id: &str) -> Result<Option<StoredSource>, LifecycleError> {
    Ok(store.find_plan(id)?.map(|stored| StoredSource {
        format: format_of(&stored.format),
        author: crate::Author::from_name(&stored.author),
        source: plan_graph::Source::new(stored.name, stored.source),
    }))
}

/// The same object `run --json` printed (or would print), rebuilt from the ledger.
pub fn report(store: &Store, row: &RunRow) -> Result<RunReport, LifecycleError> {
    let plan = plan_of(row)?;
    let status = status_of(row);
    let pending = store.approvals(&row.run_id)?;
    let pending: Vec<&str> = pending
        .iter()
        .filter(|a| a.decision == plan_store::Decision::Pending)
        .map(|a| a.step_id.as_str())
        .collect();
    let stored = store.records(&row.run_id)?;
    // Steps of a run that has not ended which were called (their records come when they
    // settle): running, or cut off by the process's death.
    let started = if matches!(status, TaskStatus::Running | TaskStatus::Interrupted) {
        started_steps(store, row, &plan)?
    } else {
        Vec::new()
    };
    let mut records = with_unsettled(&plan, stored, status, &pending, &started);
    let duration = duration_of(store, row)?;
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
    variables.extend(store.variables(&row.run_id)?);
    let pending_approvals = if status == TaskStatus::Waiting {
        let mut pending: Vec<plan_types::PendingApproval> = store
            .approvals(&row.run_id)?
            .into_iter()
            .filter(|a| a.decision == plan_store::Decision::Pending)
            .map(|a| {
                a.request.unwrap_or(plan_types::PendingApproval {
                    step_id: a.step_id,
                    tool: None,
                    args: None,
                    reason: None,
                    input_schema: None,
                })
            })
            .collect();
        // In plan order, as the run reported them.
        plan_graph::StepIndex::new(plan.steps.iter().map(|step| step.id.0.as_str()))
            .sort_pending(&mut pending);
        pending
    } else {
        Vec::new()
    };
    let checkpoints = store.checkpoints(&row.run_id)?;
    let block_ids = plan
        .steps
        .iter()
        .filter(|s| s.block.is_some())
        .map(|s| s.id.0.as_str());
    let mut blocks = plan_engine::block_states(block_ids, &records, &checkpoints);
    if row.state == RunState::Running {
        busy_blocks(store, row, &plan, &mut blocks)?;
    }
    let revisions = store.revisions(&row.run_id)?;
    let answer = plan_graph::Answers::of(&plan).and_then(|answers| answers.answer(&records));
    Ok(RunReport {
        run_id: row.run_id.clone(),
        plan_id: row.plan_id.clone(),
        task_status: status,
        records,
        variables,
        pending_approvals,
        blocks,
        replanned: revisions > 0,
        revisions,
        answer,
    })
}

/// The steps of a run that were called in its current attempt (a `tool.called` of the step or
/// of one of its map items or block nodes, or its block entered) since it last started or
/// resumed.
fn started_steps(store: &Store, row: &RunRow, plan: &Plan) -> Result<Vec<String>, LifecycleError> {
    let events = store.events_after(&row.run_id, 0)?;
    // Only this attempt's: events after the last `run.started`.
    let from = events
        .iter()
        .rposition(|(_, e)| e.kind == plan_types::EventKind::RunStarted)
        .unwrap_or(0);
    let index = plan_graph::StepIndex::new(plan.steps.iter().map(|s| s.id.0.as_str()));
    let mut started = Vec::new();
    for (_, event) in &events[from..] {
        if !matches!(
            event.kind,
            plan_types::EventKind::ToolCalled | plan_types::EventKind::BlockEntered
        ) {
            continue;
        }
        let Some(id) = event.step_id.as_deref() else {
            continue;
        };
        if let Some(step) = index.step_of(id).map(|i| &plan.steps[i])
            && !started.contains(&step.id.0)
        {
            started.push(step.id.0.clone());
        }
    }
    Ok(started)
}

/// Blocks of a live run that entered and have not ended are `BUSY`, at the node their last
/// committed `block.transition` went to (or their entry point). Events reach the ledger with
/// the scheduler's commits, so the node may lag behind by a node or two. A running block
/// commits where it stands after each node (so that a kill loses none): in a live run that
/// checkpoint is progress, not a wait (a run's waits are written when it halts).
fn busy_blocks(
    store: &Store,
    row: &RunRow,
    plan: &Plan,
    blocks: &mut [plan_types::BlockState],
) -> Result<(), LifecycleError> {
    let events = store.events_after(&row.run_id, 0)?;
    for block in blocks.iter_mut() {
        if block.state == plan_types::BlockPhase::Waiting {
            block.state = plan_types::BlockPhase::Busy;
            continue;
        }
        if block.state != plan_types::BlockPhase::Ready {
            continue;
        }
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

/// Whether record `id` goes with step `step` in the ledger's order: an item or a call inside
/// it, or a record of no step of the plan (a step of an earlier revision, `run --replan`).
fn goes_with(id: &str, step: usize, index: &plan_graph::StepIndex) -> bool {
    index.step_of(id).is_none_or(|of| of == step)
}

/// The stored records with a record for every step that has none yet (a run that is
/// running, stopped or waiting), in plan order, as `run` reports them.
fn with_unsettled(
    plan: &Plan,
    stored: Vec<Record>,
    status: TaskStatus,
    pending: &[&str],
    started: &[String],
) -> Vec<Record> {
    let index = plan_graph::StepIndex::new(plan.steps.iter().map(|s| s.id.0.as_str()));
    let reason = match status {
        TaskStatus::Waiting => plan_types::reasons::WAITING_FOR_APPROVAL,
        TaskStatus::Stopped => plan_types::reasons::STOPPED,
        TaskStatus::Interrupted => plan_types::reasons::NOT_STARTED_INTERRUPTED,
        _ => plan_types::reasons::NOT_STARTED_YET,
    };
    let started_reason = if status == TaskStatus::Interrupted {
        plan_types::reasons::INTERRUPTED
    } else {
        plan_types::reasons::RUNNING
    };
    let mut stored = stored.into_iter().peekable();
    let mut records = Vec::with_capacity(plan.steps.len());
    for (i, step) in plan.steps.iter().enumerate() {
        let mut found = false;
        // The store keeps plan order, a step's items and nodes right before the step.
        while let Some(record) = stored.peek() {
            if record.step_id == step.id.0 {
                found = true;
            } else if index.position(&record.step_id).is_some()
                || !goes_with(&record.step_id, i, &index)
            {
                // Another step's, or an item or node of a later step (this one has not
                // settled: its record is made up below).
                break;
            }
            records.extend(stored.next());
            if found {
                break;
            }
        }
        if !found {
            let asked =
                |id: &&str| plan_types::question_of(id).is_some_and(|(call, _)| call == step.id.0);
            let reason = if pending.contains(&step.id.0.as_str()) {
                plan_types::reasons::AWAITING_APPROVAL
            } else if pending.iter().any(asked) {
                plan_types::reasons::AWAITING_INPUT
            } else if started.contains(&step.id.0) {
                started_reason
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

/// Run `run`'s execute-state.json (schema 2.0) document, from the ledger (`state export`);
/// `project_path` is the folder the run counts from when it kept none (a plan's workspace is
/// relative to it).
pub fn execute_state(
    store: &Store,
    run: &str,
    project_path: Option<&str>,
) -> Result<Value, LifecycleError> {
    let row = store.run(run)?;
    execute_state_of(store, &row, &crate::plan_of(&row)?, project_path)
}

/// [`execute_state`] of a run read already, with its plan (the dashboard's task view has both).
pub fn execute_state_of(
    store: &Store,
    row: &RunRow,
    plan: &Plan,
    project_path: Option<&str>,
) -> Result<Value, LifecycleError> {
    let records = store.records(&row.run_id)?;
    let attempts = store.attempts(&row.run_id)?;
    let checkpoints = store.checkpoints(&row.run_id)?;
    let run_dir = crate::working_dir_of(row).or_else(|| project_path.map(std::path::PathBuf::from));
    Ok(crate::state_file::execute_state(
        crate::state_file::Inputs {
            run: row,
            plan,
            records: &records,
            attempts: &attempts,
            checkpoints: &checkpoints,
            run_dir: run_dir.as_deref(),
            elapsed: duration_of(store, row)?,
        },
    ))
}

/// The plans kept in the ledger (`plan list`, the dashboard's plans), as they were stored.
pub fn stored_plans(store: &Store) -> Result<Vec<plan_store::StoredPlan>, LifecycleError> {
    Ok(store.plans()?)
}

/// Removes stored plan `id` (`plan rm`); its runs keep the plan they ran.
pub fn remove_plan(store: &mut Store, id: &str) -> Result<(), LifecycleError> {
    Ok(store.remove_plan(id)?)
}

/// Which runs [`runs`] lists.
#[derive(Debug, Clone, Default)]
pub struct RunFilter {
    /// Only runs with this status.
    pub status: Option<TaskStatus>,
    /// Only runs of this plan.
    pub plan: Option<String>,
    /// At most this many (the newest).
    pub limit: Option<usize>,
}

/// A run as a list of runs shows it (`runs --json` prints these).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RunSummary {
    /// The run.
    pub run_id: String,
    /// Its plan.
    pub plan_id: String,
    /// Its status now ([`status_of`]).
    pub task_status: TaskStatus,
    /// When it was first started.
    pub started_at: String,
    /// When it last finished, if it has.
    pub finished_at: Option<String>,
    /// How long it has taken ([`duration_of`]).
    pub duration_ms: u64,
    /// How many of its steps ended ok, failed or skipped, as of its last end or halt (absent
    /// while it first runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counts: Option<plan_store::StepCounts>,
}

/// The ledger's runs, newest first, that `filter` keeps, with how long each took as `status`
/// says it: a run whose process died ran until its last event, with what its process made
/// durable before it died folded in first.
pub fn runs(store: &mut Store, filter: &RunFilter) -> Result<Vec<RunSummary>, LifecycleError> {
    let mut rows = store.runs()?;
    rows.retain(|row| {
        filter.status.is_none_or(|status| status_of(row) == status)
            && filter.plan.as_ref().is_none_or(|plan| row.plan_id == *plan)
    });
    if let Some(limit) = filter.limit {
        rows.truncate(limit);
    }
    let mut listed = Vec::with_capacity(rows.len());
    for row in rows {
        let task_status = status_of(&row);
        if task_status == TaskStatus::Interrupted {
            crate::recover_interrupted(store, &row)?;
        }
        let took = duration_of(store, &row)?;
        listed.push(RunSummary {
            counts: row.counts(),
            task_status,
            duration_ms: u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
            run_id: row.run_id,
            plan_id: row.plan_id,
            started_at: row.started_at,
            finished_at: row.finished_at,
        });
    }
    Ok(listed)
}

/// The records of `report` (a run of `plan`) a step's log shows: every call's, or those of
/// `step`: a step of the plan with its map items and the calls made inside it (block nodes, a
/// task's calls), or else the one call of that id (an item, a node, a step of an earlier
/// revision). The run's `__meta__` record is left aside.
pub fn records_of<'a>(
    report: &'a RunReport,
    plan: &Plan,
    step: Option<&str>,
) -> Vec<&'a plan_types::Record> {
    let index = plan_graph::StepIndex::new(plan.steps.iter().map(|s| s.id.0.as_str()));
    let wanted = step.map(|step| index.position(step));
    report
        .records
        .iter()
        .filter(|r| r.step_id != plan_graph::META_STEP_ID)
        .filter(|r| match wanted {
            None => true,
            Some(None) => Some(r.step_id.as_str()) == step,
            Some(wanted) => index.step_of(&r.step_id) == wanted,
        })
        .collect()
}

/// A run's events as the ledger commits them, read in batches (`events --follow`, a live view
/// of a run in another process).
#[derive(Debug, Clone)]
pub struct EventFeed {
    run_id: String,
    after: i64,
}

/// One read of an [`EventFeed`].
#[derive(Debug)]
pub struct EventBatch {
    /// The events committed since the last read, in order.
    pub events: Vec<plan_types::Event>,
    /// Whether the run can add no more: it ended, or its process died (a `kill -9`: `resume`
    /// goes on with it, in a new process whose events a new feed reads). Read before the
    /// events, so an ended run's last events are in this batch or an earlier one.
    pub over: bool,
}

impl EventFeed {
    /// From run `run_id`'s first event.
    pub fn new(run_id: &str) -> EventFeed {
        EventFeed {
            run_id: run_id.to_owned(),
            after: 0,
        }
    }

    /// The events committed since the last read. A run whose process died has what its log
    /// made durable folded in first (on a ledger opened for writing), so its last events are
    /// read too.
    pub fn next(&mut self, store: &mut Store) -> Result<EventBatch, LifecycleError> {
        // The state first: a run seen ended has committed every event the read below gets.
        let row = store.run(&self.run_id)?;
        let died = crate::execute::owner_died(&row);
        if died {
            crate::recover_interrupted(store, &row)?;
        }
        let over = row.state != RunState::Running || died;
        let lines = store.events_after(&self.run_id, self.after)?;
        if let Some((seq, _)) = lines.last() {
            self.after = *seq;
        }
        Ok(EventBatch {
            events: lines.into_iter().map(|(_, event)| event).collect(),
            over,
        })
    }
}

/// How the steps of `program` ended in `report`, as `status` words each ([`StepState`]): map
/// items and the calls inside a step are not steps, and a step still to run counts nowhere.
pub(crate) fn counts(report: &RunReport, program: &plan_engine::Program) -> plan_store::StepCounts {
    let mut counts = plan_store::StepCounts {
        ok: 0,
        failed: 0,
        skipped: 0,
    };
    // The report has every step's own record in plan order (its items' and inner calls'
    // around it): one pass beside the step ids, nothing built (a run's end is its peak of
    // memory, with the whole report held).
    let mut steps = program.step_ids().peekable();
    for record in &report.records {
        if steps.peek() != Some(&record.step_id.as_str()) {
            continue;
        }
        steps.next();
        match StepState::of(record, report.task_status) {
            StepState::Ok => counts.ok += 1,
            StepState::Failed => counts.failed += 1,
            StepState::Skipped | StepState::Blocked => counts.skipped += 1,
            StepState::Running
            | StepState::Interrupted
            | StepState::NotStarted
            | StepState::Waiting => {}
        }
    }
    counts
}

/// What a step's record says of it, as every front-end shows it (the summary's line, a node's
/// colour): read from the record and the status of its run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepState {
    /// Called and not ended yet (read from the ledger while the run goes).
    Running,
    /// Cut off while it ran (the run stopped, or its process died): it runs again on resume.
    Interrupted,
    /// Not had its turn: it runs on resume (or later in a run that goes on).
    NotStarted,
    /// Not started because the run waits for approvals: it runs on resume.
    Waiting,
    /// Skipped: its `when` was false, or what it depends on failed or was skipped.
    Skipped,
    /// Succeeded.
    Ok,
    /// Failed for good.
    Failed,
    /// Can never run (it depends on a step the plan does not have).
    Blocked,
}

impl StepState {
    /// The state of the step `record` is of, in a run of status `run`.
    pub fn of(record: &Record, run: TaskStatus) -> StepState {
        use plan_types::reasons;
        let reason = record.reason.as_deref().unwrap_or("");
        let untouched = !record.ok && record.upstream.is_none();
        if !record.ok && reason == reasons::RUNNING {
            StepState::Running
        } else if !record.ok && reason == reasons::INTERRUPTED {
            StepState::Interrupted
        } else if untouched
            && [
                reasons::STOPPED,
                reasons::NOT_STARTED_INTERRUPTED,
                reasons::NOT_STARTED_YET,
            ]
            .contains(&reason)
        {
            StepState::NotStarted
        } else if run == TaskStatus::Waiting && record.skipped && untouched {
            StepState::Waiting
        } else if record.ok && record.skipped {
            StepState::Skipped
        } else if record.ok {
            StepState::Ok
        } else if let Some(error) = &record.error {
            // Stopped with the run (Ctrl+C, SIGTERM, a time limit): not kept as a failure, so
            // a resume runs it again.
            if error.code == plan_engine::codes::E_CANCELLED {
                StepState::Interrupted
            } else {
                StepState::Failed
            }
        } else if record.skipped {
            StepState::Skipped
        } else {
            StepState::Blocked
        }
    }
}

/// What a step put out, as text (what `logs` prints): exec's stdout then stderr (marked), http's body, an MCP
/// tool's text, a failure's message with the output its details hold; else its result as JSON.
pub fn output_of(record: &Record) -> String {
    fn of(value: &serde_json::Value) -> Option<String> {
        let object = value.as_object()?;
        let text = |key: &str| object.get(key).and_then(serde_json::Value::as_str);
        if text("stdout").is_some() || text("stderr").is_some() {
            let mut out = text("stdout").unwrap_or("").to_owned();
            if let Some(stderr) = text("stderr").filter(|e| !e.is_empty()) {
                if !out.is_empty() && !out.ends_with('\n') {
                    out.push('\n');
                }
                out.push_str("[stderr]\n");
                out.push_str(stderr);
            }
            return Some(out);
        }
        if let Some(body) = text("body").or_else(|| text("content")) {
            return Some(body.to_owned());
        }
        let json = object.get("json")?;
        serde_json::to_string_pretty(json).ok()
    }
    if let Some(error) = &record.error {
        let mut out = format!("{}: {}\n", error.code, error.message);
        if let Some(details) = error.details.as_ref().and_then(of) {
            out.push_str(&details);
        }
        return out;
    }
    let Some(result) = record.result.as_deref() else {
        return record.reason.clone().unwrap_or_default();
    };
    of(result).unwrap_or_else(|| match result {
        serde_json::Value::String(text) => text.clone(),
        serde_json::Value::Null => String::new(),
        other => serde_json::to_string_pretty(other).unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::StepState;
    use plan_types::{Record, StepError, TaskStatus, reasons};

    fn record(ok: bool, skipped: bool, reason: &str) -> Record {
        let mut record = Record::meta(TaskStatus::Completed, 0);
        record.step_id = "s".to_owned();
        record.ok = ok;
        record.skipped = skipped;
        record.reason = Some(reason.to_owned()).filter(|r| !r.is_empty());
        record
    }

    #[test]
    fn a_record_reads_as_what_happened_to_its_step_in_its_run() {
        let state = |record: &Record, run| StepState::of(record, run);
        let running = TaskStatus::Running;
        assert_eq!(state(&record(true, false, ""), running), StepState::Ok);
        assert_eq!(
            state(&record(false, false, reasons::RUNNING), running),
            StepState::Running
        );
        assert_eq!(
            state(
                &record(false, false, reasons::INTERRUPTED),
                TaskStatus::Interrupted
            ),
            StepState::Interrupted
        );
        assert_eq!(
            state(&record(false, true, reasons::NOT_STARTED_YET), running),
            StepState::NotStarted
        );
        let waits = record(false, true, reasons::WAITING_FOR_APPROVAL);
        assert_eq!(state(&waits, TaskStatus::Waiting), StepState::Waiting);
        assert_eq!(state(&waits, TaskStatus::Failed), StepState::Skipped);
        assert_eq!(
            state(&record(true, true, reasons::CONDITION_FALSE), running),
            StepState::Skipped
        );
        let mut failed = record(false, false, "");
        failed.error = Some(Box::new(StepError::new("E_TOOL", "no")));
        assert_eq!(state(&failed, TaskStatus::Failed), StepState::Failed);
        failed.error = Some(Box::new(StepError::new(
            plan_engine::codes::E_CANCELLED,
            "stopped",
        )));
        assert_eq!(state(&failed, TaskStatus::Stopped), StepState::Interrupted);
        assert_eq!(
            state(
                &record(false, false, "unknown dependency `x`"),
                TaskStatus::Blocked
            ),
            StepState::Blocked
        );
    }
}
