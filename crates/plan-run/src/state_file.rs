//! A task executor's `execute-state.json` (schema 2.0), made from a run in the ledger: layers are the
//! steps' `layer` fields when the plan gives them, else the plan's topological levels; tasks are
//! the steps and map items, with their attempts and errors.

use std::collections::{BTreeMap, HashMap};
use std::time::SystemTime;

use plan_graph::{Dependencies, Plan};
use plan_store::{AttemptRow, RunRow, RunState};
use plan_types::Record;
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
    /// The directory the run was started from.
    pub(crate) project_path: Option<&'a str>,
    /// Now, for the elapsed time of a run still going.
    pub(crate) now: SystemTime,
}

struct Task<'a> {
    id: &'a str,
    layer: usize,
    tool: &'a str,
}

/// The state document.
pub(crate) fn execute_state(inputs: Inputs<'_>) -> Value {
    let Inputs {
        run,
        plan,
        records,
        attempts,
        project_path,
        now,
    } = inputs;
    let (layer_names, layer_of_step) = layers(plan);
    let records_by_id: HashMap<&str, &Record> =
        records.iter().map(|r| (r.step_id.as_str(), r)).collect();
    let mut attempts_by_id: HashMap<&str, Vec<&AttemptRow>> = HashMap::new();
    for attempt in attempts {
        attempts_by_id
            .entry(attempt.step_id.as_str())
            .or_default()
            .push(attempt);
    }

    // Tasks: each step, preceded by its map items (as the records order them).
    let mut tasks: Vec<Task<'_>> = Vec::new();
    for (i, step) in plan.steps.iter().enumerate() {
        let item_prefix = (format!("{}-", step.id), format!("{}[", step.id));
        if step.expand.is_some() {
            for record in records {
                let id = record.step_id.as_str();
                let numbered = id
                    .strip_prefix(&item_prefix.0)
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
                if numbered || (id.starts_with(&item_prefix.1) && id.ends_with(']')) {
                    tasks.push(Task {
                        id,
                        layer: layer_of_step[i],
                        tool: &step.tool,
                    });
                }
            }
        }
        tasks.push(Task {
            id: &step.id.0,
            layer: layer_of_step[i],
            tool: &step.tool,
        });
    }

    let mut task_docs = Map::new();
    let (mut completed, mut failed, mut abandoned) = (Vec::new(), Vec::new(), Vec::new());
    let mut layer_stats: Vec<LayerStats> =
        layer_names.iter().map(|_| LayerStats::default()).collect();
    for task in &tasks {
        let record = records_by_id.get(task.id).copied();
        let tries = attempts_by_id
            .get(task.id)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let status = match record {
            Some(r) if r.ok => "completed",
            Some(r) if r.error.is_some() => "failed",
            Some(r) if r.skipped => "skipped",
            Some(_) => "blocked",
            None if !tries.is_empty() && run.state == RunState::Running => "in_progress",
            None => "pending",
        };
        match status {
            "completed" => completed.push(task.id),
            "failed" => failed.push(task.id),
            "skipped" | "blocked" => abandoned.push(task.id),
            _ => {}
        }
        let started_at = tries.first().map(|a| a.started_at.clone());
        let completed_at = record
            .filter(|r| r.ok || r.error.is_some())
            .and(tries.last())
            .map(|a| end_of(a));
        let stats = &mut layer_stats[task.layer];
        stats.total += 1;
        stats.completed += usize::from(status == "completed");
        stats.failed += usize::from(status == "failed");
        stats.active |= status != "pending";
        min_into(&mut stats.started_at, started_at.as_deref());
        max_into(&mut stats.completed_at, completed_at.as_deref());
        let errors: Vec<Value> = tries
            .iter()
            .filter(|a| !a.ok)
            .map(|a| {
                json!({
                    "attempt": a.attempt,
                    "type": a.error_code,
                    "step": task.tool,
                    "message": a.error_message,
                    "timestamp": a.started_at,
                })
            })
            .collect();
        task_docs.insert(
            task.id.to_owned(),
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
            }),
        );
    }

    let mut layer_docs = Map::new();
    let mut current: Option<(usize, &str)> = None;
    for (index, (name, stats)) in layer_names.iter().zip(&layer_stats).enumerate() {
        let status = if stats.failed > 0 {
            "failed"
        } else if stats.completed == stats.total {
            "completed"
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

    let status = match (run.state, run.task_status) {
        (RunState::Running, _) => "in_progress".to_owned(),
        // The schema has no waiting state: a run halted for approvals is stopped until resumed.
        (RunState::Stopped | RunState::Waiting, _) => "stopped".to_owned(),
        (RunState::Finished, Some(status)) => status.as_str().to_ascii_lowercase(),
        (RunState::Finished, None) => "finished".to_owned(),
    };
    let total_attempts = attempts.len();
    let attempted_tasks = attempts_by_id.len();
    let end = run
        .finished_at
        .as_deref()
        .and_then(|t| humantime::parse_rfc3339(t).ok())
        .unwrap_or(now);
    let elapsed = humantime::parse_rfc3339(&run.started_at)
        .ok()
        .and_then(|start| end.duration_since(start).ok())
        .map_or(0, |d| d.as_secs());
    json!({
        "schema_version": SCHEMA_VERSION,
        "prd_slug": run.plan_id,
        "project_path": project_path,
        "worktree_dir": null,
        "tasks_path": null,
        "run_id": run.run_id,
        "started_at": run.started_at,
        // The run's row changes only when it starts, stops or ends; its attempts say more.
        "updated_at": attempts.iter().map(end_of).chain([run.updated_at.clone()]).max(),
        "completed_at": run.finished_at,
        "status": status,
        "current_layer": current.map(|(_, name)| name),
        "current_batch": current.map(|(index, _)| index),
        "options": {
            "max_parallel": run
                .options
                .get("max_concurrency")
                .and_then(Value::as_u64)
                .or(plan.max_concurrency.map(|n| n as u64))
                .unwrap_or(plan_engine::DEFAULT_MAX_CONCURRENCY as u64),
            "layer_filter": null,
            "task_filter": null,
            "commit_prefix": "",
            "no_commits": true,
            "verbose": false,
            "quiet": false,
        },
        "layers": layer_docs,
        "tasks": task_docs,
        "worktrees": {},
        "merge_queue": [],
        "completed": completed,
        "failed": failed,
        "abandoned": abandoned,
        "metrics": {
            "tasks_total": tasks.len(),
            "tasks_completed": completed.len(),
            "tasks_failed": failed.len(),
            "tasks_abandoned": abandoned.len(),
            "tasks_remaining": tasks.len() - completed.len() - failed.len() - abandoned.len(),
            "total_attempts": total_attempts,
            "total_retries": total_attempts - attempted_tasks,
            "elapsed_seconds": elapsed,
        },
        "context_update": {
            "status": "not_applicable",
            "project_md_path": null,
            "features_added": [],
            "endpoints_added": [],
            "models_added": [],
            "commit_hash": null,
        },
    })
}

#[derive(Default)]
struct LayerStats {
    total: usize,
    completed: usize,
    failed: usize,
    active: bool,
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
