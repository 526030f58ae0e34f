//! A task executor's `execute-state.json` (schema 2.0), made from a run in the ledger, with
//! only the schema's values in every enum.
//!
//! Layers are the steps' `layer` fields when the plan gives them, else the plan's topological
//! levels. Tasks are the steps and map items. A task step reads back from its checkpoint (its
//! [`TaskState`]: attempts, commits, errors, feedback, worktree, merge queue entry). Any other
//! step maps onto the task statuses: a success is `completed`, a failure (its retries spent) is
//! `abandoned`, a step skipped because its condition was false is `completed` (nothing was left
//! to do), a step skipped because something it needs failed is `pending` (and its layer
//! `blocked`), a step whose call has started is `in_progress`. A block's calls are its nodes':
//! a block whose first node has been called is `in_progress` until it ends (`BUSY` in `status`).
//! The run is `completed` when it ended COMPLETED or PARTIAL (a PARTIAL run's steps that did not
//! run stay `pending`, and their layer `blocked`: nothing failed, and resuming it runs
//! nothing), `abandoned` when it ended FAILED, `stopped` when it waits or was stopped, or ran
//! a part (`--layer`, `--task`) and left the rest pending.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Duration;

use plan_graph::{Dependencies, Plan};
use plan_store::{AttemptRow, RunRow, RunState};
use plan_types::{Record, TaskPhase, TaskState, TaskStatus, reasons};
use serde_json::{Map, Value, json};

/// The schema version this writes.
pub(crate) const SCHEMA_VERSION: &str = "2.0";

/// Everything the document is made from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Inputs<'a> {
    /// The run.
    pub(crate) run: &'a RunRow,
    /// Its plan.
    pub(crate) plan: &'a Plan,
    /// Its records so far, in plan order.
    pub(crate) records: &'a [Record],
    /// Its attempts so far.
    pub(crate) attempts: &'a [AttemptRow],
    /// Its checkpoints: task steps' states (and blocks' positions), by step id.
    pub(crate) checkpoints: &'a BTreeMap<String, Value>,
    /// The folder the run runs in (the plan's), which the workspace is relative to.
    pub(crate) run_dir: Option<&'a Path>,
    /// How long the run has taken ([`crate::duration_of`]).
    pub(crate) elapsed: Duration,
}

struct Task<'a> {
    id: &'a str,
    layer: usize,
    tool: &'a str,
    /// A task step's state.
    state: Option<TaskState>,
    /// Whether it is a block step (its calls are its nodes').
    block: bool,
}

/// The state document.
pub(crate) fn execute_state(inputs: Inputs<'_>) -> Value {
    let mut document = document(inputs);
    whole_seconds(&mut document);
    document
}

fn document(inputs: Inputs<'_>) -> Value {
    let Inputs {
        run,
        plan,
        records,
        attempts,
        checkpoints,
        run_dir,
        elapsed,
    } = inputs;
    let (layer_names, layer_of_step) = layers(plan);
    // Ids are read back through the plan's index only (a step id may hold `-`, `[`, `/`).
    let index = plan
        .steps
        .iter()
        .any(|s| s.block.is_some() || s.expand.is_some())
        .then(|| plan_graph::StepIndex::new(plan.steps.iter().map(|s| s.id.0.as_str())));
    let calls = Calls::of(plan, attempts, index.as_ref());
    let layout = plan.workspace.as_ref().zip(run_dir).map(|(settings, dir)| {
        plan_workspace::Layout::of(&crate::execute::workspace_settings(settings), dir)
    });
    let tasks = tasks_of(plan, records, checkpoints, index.as_ref(), &layer_of_step);
    let docs = TaskDocs::of(
        &tasks,
        records,
        &calls,
        run.state,
        layout.as_ref(),
        layer_names.len(),
    );
    let merge_queue = merge_queue_doc(docs.queue);
    let (layer_docs, current) = layer_entries(&layer_names, &docs.layer_stats);
    let TaskDocs {
        task_docs,
        worktree_docs,
        completed,
        failed,
        abandoned,
        total_attempts,
        total_retries,
        ..
    } = docs;

    // A run of a part (`--layer`, `--task`) that did its part leaves the rest pending: the
    // breakdown is not completed, and a run of the rest goes on from here.
    let left_pending = task_docs.values().any(|doc| doc["status"] == "pending");
    // A run of a part that ended PARTIAL left the rest of the breakdown to run too.
    let part_run = ["layer_filter", "task_filter"]
        .iter()
        .any(|key| run.options.get(*key).is_some_and(|v| !v.is_null()));
    let status = match (run.state, run.task_status) {
        (RunState::Running, _) if attempts.is_empty() && records.is_empty() => "initializing",
        (RunState::Running, _) => "in_progress",
        // A run halted for a decision, or stopped, goes on with `resume`.
        (RunState::Stopped | RunState::Waiting, _) => "stopped",
        (RunState::Finished, Some(TaskStatus::Completed)) if left_pending => "stopped",
        (RunState::Finished, Some(TaskStatus::Completed)) => "completed",
        // PARTIAL: nothing failed, and nothing is left that a resume would run (what did not
        // run, because what it needed was skipped, stays `pending`); `abandoned` says a
        // task's retries ran out, which none did.
        (RunState::Finished, Some(TaskStatus::Partial)) if part_run => "stopped",
        (RunState::Finished, Some(TaskStatus::Partial)) => "completed",
        (RunState::Finished, _) => "abandoned",
    };
    let elapsed = elapsed.as_secs();
    let option = |key: &str| run.options.get(key).cloned().unwrap_or(Value::Null);
    let settings = plan.workspace.as_ref();
    let project_path = layout
        .as_ref()
        .map(|l| l.repo.display().to_string())
        .or_else(|| run_dir.map(|d| d.display().to_string()));
    json!({
        "schema_version": SCHEMA_VERSION,
        "prd_slug": run.plan_id,
        "project_path": project_path,
        "worktree_dir": layout.as_ref().map(|l| l.worktree_dir.display().to_string()),
        // The breakdown the tasks come from; for a plan written by hand, the folder of the
        // plan that describes them.
        "tasks_path": match (settings.and_then(|s| s.tasks.as_ref()), run_dir) {
            (Some(tasks), Some(dir)) => Some(dir.join(tasks).display().to_string()),
            (Some(tasks), None) => Some(tasks.clone()),
            (None, dir) => dir.map(|d| d.display().to_string()),
        },
        "run_id": run.run_id,
        "started_at": run.started_at,
        // The run's row changes only when it starts, stops or ends; its attempts say more.
        "updated_at": attempts.iter().map(end_of).chain([run.updated_at.clone()]).max(),
        "completed_at": if matches!(status, "completed" | "abandoned") { run.finished_at.clone() } else { None },
        "status": status,
        "current_layer": current.map(|(_, name)| name),
        "current_batch": current.map(|(index, _)| index),
        "options": {
            "max_parallel": run
                .options
                .get("max_concurrency")
                .and_then(Value::as_u64)
                .or(plan.max_concurrency.map(|n| n as u64))
                .or(settings.map(|s| {
                    s.max_parallel.unwrap_or(plan_engine::DEFAULT_MAX_PARALLEL_TASKS) as u64
                }))
                .unwrap_or(plan_engine::DEFAULT_MAX_CONCURRENCY as u64),
            "layer_filter": option("layer_filter"),
            "task_filter": option("task_filter"),
            "commit_prefix": settings.map_or("", |s| s.commit_prefix.as_str()),
            // A plan without a workspace commits nothing.
            "no_commits": settings.is_none_or(|s| s.no_commits),
            "verbose": false,
            "quiet": false,
        },
        "layers": layer_docs,
        "tasks": task_docs,
        "worktrees": worktree_docs,
        "merge_queue": merge_queue,
        "completed": completed,
        "failed": failed,
        "abandoned": abandoned,
        "metrics": {
            "tasks_total": tasks.len(),
            "tasks_completed": completed.len(),
            // As each layer counts it: tasks that failed and have not completed (retrying or
            // abandoned), so the layers' `tasks_failed` add up to this.
            "tasks_failed": failed.len() + abandoned.len(),
            "tasks_abandoned": abandoned.len(),
            "tasks_remaining": tasks.len() - completed.len() - abandoned.len(),
            "total_attempts": total_attempts,
            "total_retries": total_retries,
            "elapsed_seconds": elapsed,
        },
        "context_update": context_update(plan, layout.as_ref(), checkpoints.get(plan_types::CONTEXT_UPDATE_ID)),
    })
}

/// A run's attempts, by the call they are of.
struct Calls<'a> {
    /// Each step's, map item's and task's call's (`T1/implement#1`) attempts, by its id.
    by_id: HashMap<&'a str, Vec<&'a AttemptRow>>,
    /// A block's node calls (`review/draft#1`, nested ones too), by the block's id.
    of_nodes: HashMap<&'a str, Vec<&'a AttemptRow>>,
}

impl<'a> Calls<'a> {
    fn of(
        plan: &'a Plan,
        attempts: &'a [AttemptRow],
        index: Option<&plan_graph::StepIndex>,
    ) -> Self {
        let mut attempts_by_id: HashMap<&str, Vec<&AttemptRow>> = HashMap::new();
        // A block's node calls (`review/draft#1`, nested ones too), by the block's id.
        let mut node_attempts: HashMap<&str, Vec<&AttemptRow>> = HashMap::new();
        for attempt in attempts {
            if let Some(plan_graph::CallOf::Inside(i, _)) =
                index.and_then(|x| x.call_of(&attempt.step_id))
                && plan.steps[i].block.is_some()
            {
                node_attempts
                    .entry(plan.steps[i].id.0.as_str())
                    .or_default()
                    .push(attempt);
                continue;
            }
            attempts_by_id
                .entry(attempt.step_id.as_str())
                .or_default()
                .push(attempt);
        }
        Calls {
            by_id: attempts_by_id,
            of_nodes: node_attempts,
        }
    }
}

/// The document's tasks: each step, preceded by its map items (as the records order them).
fn tasks_of<'a>(
    plan: &'a Plan,
    records: &'a [Record],
    checkpoints: &BTreeMap<String, Value>,
    index: Option<&plan_graph::StepIndex>,
    layer_of_step: &[usize],
) -> Vec<Task<'a>> {
    // Map items' records, by their step, as the records order them.
    let mut items: Vec<Vec<&str>> = vec![Vec::new(); plan.steps.len()];
    for record in records {
        if let Some(plan_graph::CallOf::Item(i)) = index.and_then(|x| x.call_of(&record.step_id)) {
            items[i].push(&record.step_id);
        }
    }
    // Tasks: each step, preceded by its map items.
    let mut tasks: Vec<Task<'_>> = Vec::new();
    for (i, step) in plan.steps.iter().enumerate() {
        if step.expand.is_some() {
            for &id in &items[i] {
                tasks.push(Task {
                    id,
                    layer: layer_of_step[i],
                    tool: &step.tool,
                    state: None,
                    block: false,
                });
            }
        }
        let state = step
            .task
            .as_ref()
            .and_then(|_| checkpoints.get(&step.id.0))
            .and_then(|value| serde_json::from_value::<TaskState>(value.clone()).ok());
        tasks.push(Task {
            id: &step.id.0,
            layer: layer_of_step[i],
            tool: step.kind(),
            state,
            block: step.block.is_some(),
        });
    }

    tasks
}

/// Each task's entry, and what the layers, worktrees, merge queue and metrics count of them.
struct TaskDocs<'a> {
    task_docs: Map<String, Value>,
    worktree_docs: Map<String, Value>,
    /// The merge queue's entries: when each joined, its task, its status.
    queue: Vec<(String, &'a str, &'static str)>,
    completed: Vec<&'a str>,
    failed: Vec<&'a str>,
    abandoned: Vec<&'a str>,
    layer_stats: Vec<LayerStats>,
    total_attempts: u64,
    total_retries: u64,
}

impl<'a> TaskDocs<'a> {
    fn of(
        tasks: &'a [Task<'a>],
        records: &[Record],
        calls: &Calls<'_>,
        run: RunState,
        layout: Option<&plan_workspace::Layout>,
        layer_count: usize,
    ) -> Self {
        let records_by_id: HashMap<&str, &Record> =
            records.iter().map(|r| (r.step_id.as_str(), r)).collect();
        let mut task_docs = Map::new();
        let mut worktree_docs = Map::new();
        let mut queue: Vec<(String, &str, &'static str)> = Vec::new();
        let (mut completed, mut failed, mut abandoned) = (Vec::new(), Vec::new(), Vec::new());
        let mut layer_stats: Vec<LayerStats> =
            (0..layer_count).map(|_| LayerStats::default()).collect();
        let (mut total_attempts, mut total_retries) = (0u64, 0u64);
        for task in tasks {
            let record = records_by_id.get(task.id).copied();
            let tries = calls
                .by_id
                .get(task.id)
                .map(Vec::as_slice)
                .unwrap_or_default();
            let doc = match &task.state {
                Some(state) => {
                    let mut state = state.clone();
                    // The record has the last word on how it ended (a ledger from before the
                    // checkpoint said so, or a failure outside the lifecycle).
                    if record.is_some_and(|r| r.ok) {
                        state.status = TaskPhase::Completed;
                    }
                    task_doc(&state)
                }
                None if task.block => {
                    let nodes = calls
                        .of_nodes
                        .get(task.id)
                        .map(Vec::as_slice)
                        .unwrap_or_default();
                    block_doc(record, nodes, run)
                }
                None => plain_doc(task, record, tries, run),
            };
            let status = doc["status"].as_str().unwrap_or("pending").to_owned();
            let tried = doc["attempts"].as_u64().unwrap_or(0);
            total_attempts += tried;
            total_retries += tried.saturating_sub(1);
            match status.as_str() {
                "completed" => completed.push(task.id),
                "failed" => failed.push(task.id),
                "abandoned" => abandoned.push(task.id),
                _ => {}
            }
            let stats = &mut layer_stats[task.layer];
            stats.total += 1;
            stats.completed += usize::from(status == "completed");
            stats.failed += usize::from(status == "failed" || status == "abandoned");
            stats.active |= status != "pending";
            // Skipped because something it needs failed: its layer cannot finish.
            stats.blocked |= status == "abandoned"
                || record.is_some_and(|r| {
                    r.skipped && r.reason.as_deref() != Some(reasons::CONDITION_FALSE)
                });
            min_into(&mut stats.started_at, doc["started_at"].as_str());
            max_into(&mut stats.completed_at, doc["completed_at"].as_str());
            if let Some(state) = &task.state {
                if let Some(status) = state.worktree_status {
                    let path = layout.map(|l| l.worktree_dir.join(task.id).display().to_string());
                    worktree_docs.insert(
                        task.id.to_owned(),
                        json!({
                            "task_id": task.id,
                            "path": path.or_else(|| state.worktree_path.clone()),
                            "branch": plan_workspace::branch_of(task.id),
                            "created_at": state.worktree_created_at,
                            "status": status,
                        }),
                    );
                }
                if let Some(entry) = &state.queue {
                    let status = match entry.status {
                        plan_types::QueueStatus::Pending => "pending",
                        plan_types::QueueStatus::Ready => "ready",
                        plan_types::QueueStatus::Merging => "merging",
                        plan_types::QueueStatus::Merged => "merged",
                    };
                    queue.push((entry.queued_at.clone(), task.id, status));
                }
            }
            task_docs.insert(task.id.to_owned(), doc);
        }
        TaskDocs {
            task_docs,
            worktree_docs,
            queue,
            completed,
            failed,
            abandoned,
            layer_stats,
            total_attempts,
            total_retries,
        }
    }
}

/// The merge queue: what merged first, then the rest in the order they joined it. Merges
/// take turns as they come, so a task that joined first may still wait (its merge conflicted
/// with one that went before it).
fn merge_queue_doc(mut queue: Vec<(String, &str, &'static str)>) -> Vec<Value> {
    queue.sort_by(|a, b| ((a.2 != "merged"), &a.0, a.1).cmp(&((b.2 != "merged"), &b.0, b.1)));
    queue
        .iter()
        .enumerate()
        .map(|(k, (_, id, status))| json!({"task_id": id, "priority": k + 1, "status": status}))
        .collect()
}

/// Each layer's entry, and the first layer not completed (its position and name).
fn layer_entries<'a>(
    layer_names: &'a [String],
    layer_stats: &[LayerStats],
) -> (Map<String, Value>, Option<(usize, &'a str)>) {
    let mut layer_docs = Map::new();
    let mut current: Option<(usize, &str)> = None;
    for (index, (name, stats)) in layer_names.iter().zip(layer_stats).enumerate() {
        let status = if stats.completed == stats.total {
            "completed"
        } else if stats.blocked {
            "blocked"
        } else if stats.active {
            "in_progress"
        } else {
            "pending"
        };
        if status != "completed" && current.is_none() {
            current = Some((index, name));
        }
        layer_docs.insert(
            name.clone(),
            json!({
                "status": status,
                "started_at": stats.started_at,
                "completed_at": if status == "completed" { stats.completed_at.clone() } else { None },
                "tasks_total": stats.total,
                "tasks_completed": stats.completed,
                "tasks_failed": stats.failed,
            }),
        );
    }

    (layer_docs, current)
}

/// Every timestamp of the document (`*_at`, `timestamp`) in one format, RFC 3339 to the
/// second in UTC, as the schema's examples write them (the ledger keeps milliseconds).
fn whole_seconds(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, value) in map.iter_mut() {
                if let Value::String(text) = value
                    && (key.ends_with("_at") || key == "timestamp")
                    && let Ok(time) = humantime::parse_rfc3339(text)
                {
                    *text = humantime::format_rfc3339_seconds(time).to_string();
                } else {
                    whole_seconds(value);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(whole_seconds),
        _ => {}
    }
}

/// A task step's entry, from its state.
fn task_doc(state: &TaskState) -> Value {
    let merged = state.status == TaskPhase::Completed;
    json!({
        "status": state.status.as_str(),
        "attempts": state.attempts,
        // Its worktree is removed once it is merged.
        "worktree_path": if merged { None } else { state.worktree_path.clone() },
        "branch": state.branch,
        "started_at": state.started_at,
        "completed_at": if state.status == TaskPhase::Abandoned { None } else { state.completed_at.clone() },
        "merged_at": state.merged_at,
        "commits": state.commits,
        "errors": state.errors,
        "retry_feedback": state.retry_feedback,
    })
}

/// The status of a step that is not a task step, from its record, and whether its call (a
/// block's: one of its nodes') has been made in a run that is going.
fn status_of(record: Option<&Record>, called: bool, run: RunState) -> &'static str {
    match record {
        Some(r) if r.ok => "completed",
        Some(r) if r.error.is_some() => "abandoned",
        Some(r) if r.reason.as_deref() == Some(reasons::CONDITION_FALSE) => "completed",
        Some(_) => "pending",
        None if called && run == RunState::Running => "in_progress",
        None => "pending",
    }
}

/// Any other step's (or map item's) entry, from its record and attempts.
fn plain_doc(
    task: &Task<'_>,
    record: Option<&Record>,
    tries: &[&AttemptRow],
    run: RunState,
) -> Value {
    let status = status_of(record, !tries.is_empty(), run);
    let started_at = tries.first().map(|a| a.started_at.clone());
    // Completed only: a step that failed for good is abandoned, not completed.
    let completed_at = record.filter(|r| r.ok).and(tries.last()).map(|a| end_of(a));
    let errors: Vec<Value> = tries
        .iter()
        .filter(|a| !a.ok)
        .map(|a| {
            json!({
                "attempt": a.attempt,
                // What the schema has for a call that failed.
                "type": "implementation_error",
                "step": task.tool,
                "message": format!("{}: {}", a.error_code.as_deref().unwrap_or("E_TOOL"), a.error_message.as_deref().unwrap_or("")),
                "timestamp": a.started_at,
            })
        })
        .collect();
    json!({
        "status": status,
        "attempts": tries.len(),
        "worktree_path": null,
        "branch": null,
        "started_at": started_at,
        "completed_at": completed_at,
        "merged_at": null,
        "commits": [],
        "errors": errors,
        "retry_feedback": [],
    })
}

/// A block step's entry, from its record and its nodes' calls: it has started once a node
/// has been called (the block runs as one attempt), and has gone on until its last node's
/// call ended.
fn block_doc(record: Option<&Record>, nodes: &[&AttemptRow], run: RunState) -> Value {
    let status = status_of(record, !nodes.is_empty(), run);
    let started = !nodes.is_empty() && !record.is_some_and(|r| r.skipped);
    json!({
        "status": status,
        "attempts": usize::from(started),
        "worktree_path": null,
        "branch": null,
        "started_at": nodes.first().filter(|_| started).map(|a| a.started_at.clone()),
        "completed_at": record.filter(|r| r.ok && started).and(nodes.last()).map(|a| end_of(a)),
        "merged_at": null,
        "commits": [],
        "errors": [],
        "retry_feedback": [],
    })
}

/// The context update: as the run left it (its checkpoint), else `skipped` unless the
/// repository has a PROJECT.md and the plan names a `context_update` call (`pending`).
fn context_update(
    plan: &Plan,
    layout: Option<&plan_workspace::Layout>,
    recorded: Option<&Value>,
) -> Value {
    if let Some(recorded) = recorded {
        let mut value = recorded.clone();
        // Its error is the run's (in its events); the schema has no place for it.
        if let Some(object) = value.as_object_mut() {
            object.remove("error");
        }
        return value;
    }
    let project_md = layout
        .map(|l| l.repo.join("PROJECT.md"))
        .filter(|p| p.is_file());
    let named = plan
        .workspace
        .as_ref()
        .is_some_and(|w| w.context_update.is_some());
    json!({
        "status": if project_md.is_some() && named { "pending" } else { "skipped" },
        "project_md_path": project_md.map(|p| p.display().to_string()),
        "features_added": [],
        "endpoints_added": [],
        "models_added": [],
        "commit_hash": null,
    })
}

#[derive(Default)]
struct LayerStats {
    total: usize,
    completed: usize,
    failed: usize,
    active: bool,
    blocked: bool,
    started_at: Option<String>,
    completed_at: Option<String>,
}

/// Layer names in order, and each step's layer: the `layer` fields when any step has one
/// (steps without one join the first), else the topological levels `0-level`, `1-level`, ….
fn layers(plan: &Plan) -> (Vec<String>, Vec<usize>) {
    if plan.steps.iter().any(|s| s.layer.is_some()) {
        let mut names: Vec<String> = Vec::new();
        let mut index: BTreeMap<String, usize> = BTreeMap::new();
        let of_step = plan
            .steps
            .iter()
            .map(|step| {
                let name = step.layer.clone().unwrap_or_else(|| "0-default".to_owned());
                *index.entry(name.clone()).or_insert_with(|| {
                    names.push(name);
                    names.len() - 1
                })
            })
            .collect();
        return (names, of_step);
    }
    let levels = Dependencies::new(plan).levels();
    let mut of_step = vec![0; plan.steps.len()];
    for (level, steps) in levels.iter().enumerate() {
        for &i in steps {
            of_step[i] = level;
        }
    }
    let names = (0..levels.len().max(1))
        .map(|level| format!("{level}-level"))
        .collect();
    (names, of_step)
}

/// When an attempt ended: its start plus its duration.
fn end_of(attempt: &AttemptRow) -> String {
    humantime::parse_rfc3339(&attempt.started_at)
        .map(|start| {
            plan_store::timestamp(start + std::time::Duration::from_millis(attempt.duration_ms))
        })
        .unwrap_or_else(|_| attempt.started_at.clone())
}

fn min_into(slot: &mut Option<String>, value: Option<&str>) {
    if let Some(value) = value
        && slot.as_deref().is_none_or(|current| value < current)
    {
        *slot = Some(value.to_owned());
    }
}

fn max_into(slot: &mut Option<String>, value: Option<&str>) {
    if let Some(value) = value
        && slot.as_deref().is_none_or(|current| value > current)
    {
        *slot = Some(value.to_owned());
    }
}

/// Where a run keeps its execute-state document current (`run --state-file`): written as the
/// ledger commits, not by reading the ledger on a timer.
#[derive(Debug, Clone)]
pub struct StateFile {
    /// The file (replaced whole each time: a reader never sees half a document).
    pub(crate) path: std::path::PathBuf,
    /// The project's path the document names (`project_path`), as the caller sees it.
    pub(crate) project_path: Option<String>,
}

/// Why a file cannot be a run's state file.
#[derive(Debug, thiserror::Error)]
pub enum StateFileError {
    /// Something other than a regular file is there; it would be replaced.
    #[error("{} is not a regular file; it would be replaced", .0.display())]
    NotAFile(std::path::PathBuf),
    /// Its folder cannot be written (the file is replaced through a file beside it).
    #[error("{}: cannot write in {}: {source}", .path.display(), .dir.display())]
    CannotWrite {
        /// The state file.
        path: std::path::PathBuf,
        /// Its folder.
        dir: std::path::PathBuf,
        /// Why not.
        source: std::io::Error,
    },
}

impl StateFile {
    /// Checks, before a run, that `path` can be its state file: a regular file (or nothing
    /// yet) in a folder this process can write. After the run would be too late.
    pub fn check(path: &Path) -> Result<(), StateFileError> {
        if let Ok(metadata) = std::fs::metadata(path)
            && !metadata.is_file()
        {
            return Err(StateFileError::NotAFile(path.to_path_buf()));
        }
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        tempfile::NamedTempFile::new_in(dir).map_err(|source| StateFileError::CannotWrite {
            path: path.to_path_buf(),
            dir: dir.to_path_buf(),
            source,
        })?;
        Ok(())
    }

    /// The state file of a run of `plan`: `given`, else the one beside its task breakdown
    /// ([`StateFile::beside_breakdown`]); `project_path` is the project's folder it names.
    pub(crate) fn for_run(
        given: Option<std::path::PathBuf>,
        plan: &Plan,
        folder: Option<&Path>,
        project_path: Option<String>,
    ) -> Option<StateFile> {
        let path = given.or_else(|| StateFile::beside_breakdown(plan, folder))?;
        Some(StateFile { path, project_path })
    }

    /// Where a plan made from a task breakdown keeps its state by default: beside the
    /// breakdown (its `tasks` read from the run's `folder`), as the original executor does
    /// (`None` for other plans, or where it could not be written).
    fn beside_breakdown(plan: &Plan, folder: Option<&Path>) -> Option<std::path::PathBuf> {
        let tasks = plan.workspace.as_ref()?.tasks.as_ref()?;
        let tasks = folder.map_or_else(|| Path::new(tasks).to_path_buf(), |dir| dir.join(tasks));
        let path = tasks.join("execute-state.json");
        StateFile::check(&path).is_ok().then_some(path)
    }
}

/// How often at most the document is written while the run goes (always at its end).
const STATE_FILE_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

/// A run's journal that also rewrites its state file after a commit (at most every
/// `STATE_FILE_EVERY`, and after the run's end), from the ledger it has just committed to. A
/// write that fails is kept in `failed` (the run goes on; the caller reports it).
pub(crate) struct StateFileJournal {
    pub(crate) inner: plan_store::RunJournal,
    pub(crate) file: StateFile,
    pub(crate) run_id: String,
    pub(crate) plan: plan_graph::Plan,
    pub(crate) last: Option<std::time::Instant>,
    pub(crate) failed: std::sync::Arc<std::sync::Mutex<Option<String>>>,
}

impl StateFileJournal {
    fn write(&mut self, now: bool) {
        if !now && self.last.is_some_and(|at| at.elapsed() < STATE_FILE_EVERY) {
            return;
        }
        self.last = Some(std::time::Instant::now());
        let outcome = self
            .document()
            .and_then(|document| write_whole(&self.file.path, &document));
        let mut failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
        *failed = outcome.err();
    }

    fn document(&self) -> Result<Value, String> {
        let store = self.inner.store();
        let row = store.run(&self.run_id).map_err(|e| e.to_string())?;
        crate::report::execute_state_of(store, &row, &self.plan, self.file.project_path.as_deref())
            .map_err(|e| e.to_string())
    }
}

/// Writes `document` to `path` whole: a new file of its own beside it (never one already
/// there: a link planted at a name known in advance would redirect the write), renamed over it.
fn write_whole(path: &std::path::Path, document: &Value) -> Result<(), String> {
    use std::io::Write;
    let mut text = serde_json::to_string_pretty(document).map_err(|e| e.to_string())?;
    text.push('\n');
    let dir = path
        .parent()
        .filter(|dir| !dir.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let failed =
        |error: std::io::Error| format!("cannot write the state file {}: {error}", path.display());
    let mut builder = tempfile::Builder::new();
    builder.prefix(".execute-state.").suffix(".tmp");
    // Readable as a file written plainly would be (a temporary file is private by default).
    #[cfg(unix)]
    builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644));
    let mut temporary = builder.tempfile_in(dir).map_err(failed)?;
    temporary.write_all(text.as_bytes()).map_err(failed)?;
    // Removed with the handle if the rename fails.
    temporary
        .persist(path)
        .map_err(|error| failed(error.error))?;
    Ok(())
}

impl plan_types::Journal for StateFileJournal {
    fn commit(
        &mut self,
        batch: &plan_types::Batch,
        upto: u64,
    ) -> Result<(), plan_types::JournalError> {
        self.inner.commit(batch, upto)?;
        self.write(false);
        Ok(())
    }

    fn finish(
        &mut self,
        end: plan_types::RunEnd,
        at: std::time::SystemTime,
    ) -> Result<(), plan_types::JournalError> {
        self.inner.finish(end, at)?;
        self.write(true);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), plan_types::JournalError> {
        self.inner.flush()?;
        self.write(false);
        Ok(())
    }

    fn log(&mut self) -> Option<Box<dyn plan_types::BatchLog>> {
        self.inner.log()
    }
}

#[cfg(test)]
mod tests {
    #[cfg(unix)]
    #[test]
    fn a_link_planted_beside_the_state_file_is_not_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let precious = dir.path().join("precious.txt");
        std::fs::write(&precious, "the operator's data").unwrap();
        let path = dir.path().join("state.json");
        // The name the document used to be written to first, known in advance.
        let planted = dir
            .path()
            .join(format!(".state.json.{}.tmp", std::process::id()));
        std::os::unix::fs::symlink(&precious, &planted).unwrap();
        super::write_whole(&path, &serde_json::json!({"status": "completed"})).unwrap();
        assert_eq!(
            std::fs::read_to_string(&precious).unwrap(),
            "the operator's data"
        );
        assert!(
            std::fs::read_to_string(&path)
                .unwrap()
                .contains("completed")
        );
        // Nothing is left beside it but the link that was there.
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 3, "{left:?}");
    }

    #[test]
    fn a_breakdown_s_state_file_is_beside_its_tasks_read_from_the_run_s_folder() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("proj/tasks")).unwrap();
        let text = r#"{"workspace": {"repo": ".", "tasks": "tasks"}, "steps": []}"#;
        let plan = plan_graph::load(
            plan_graph::Source::new("p.json", text),
            plan_graph::Format::Json,
            &plan_graph::LoadOptions::default(),
        )
        .unwrap()
        .plan;
        let folder = dir.path().join("proj");
        let file = super::StateFile::for_run(None, &plan, Some(&folder), None).unwrap();
        assert_eq!(file.path, folder.join("tasks/execute-state.json"));
        // A given file wins; without a folder to read `tasks` from, none is found here.
        let given = dir.path().join("given.json");
        let file = super::StateFile::for_run(Some(given.clone()), &plan, Some(&folder), None);
        assert_eq!(file.unwrap().path, given);
    }
}
