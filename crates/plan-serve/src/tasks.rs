//! Plan runs as MCP tasks (protocol 2025-11-25): a task's id is its run's id, and where the
//! task stands is read from the ledger, so a task outlives the process that served it. This
//! module words a run as a task; `lib.rs` starts, drives and cancels the runs.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use plan_run::Author;
use plan_run::ledger::{RunRow, RunState, Store};
use plan_types::TaskStatus;

use crate::protocol::{Peer, RpcError, lock};
use crate::{Call, Driven, PlanServer, Served, TaskRun};

/// How often a client is asked to poll, and how often a waiting task's run is looked at for
/// decisions taken elsewhere (`plan-cli approve`, the dashboard).
pub(crate) const POLL_MS: u64 = 500;

/// Where a task stands (MCP's `TaskStatus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    Working,
    InputRequired,
    Completed,
    Failed,
    Cancelled,
}

impl Status {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Status::Working => "working",
            Status::InputRequired => "input_required",
            Status::Completed => "completed",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
        }
    }

    /// Whether it ends the task.
    pub(crate) fn is_terminal(self) -> bool {
        matches!(self, Status::Completed | Status::Failed | Status::Cancelled)
    }
}

/// A task as MCP's `Task` says it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Task {
    pub(crate) id: String,
    pub(crate) status: Status,
    pub(crate) message: Option<String>,
    pub(crate) created_at: String,
    pub(crate) updated_at: String,
    /// How long the client asked for it to be kept (runs are kept until `plan-cli gc`).
    pub(crate) ttl: Option<u64>,
}

impl Task {
    pub(crate) fn to_json(&self) -> Value {
        let mut task = json!({
            "taskId": self.id,
            "status": self.status.name(),
            "createdAt": self.created_at,
            "lastUpdatedAt": self.updated_at,
            "ttl": self.ttl,
            "pollInterval": POLL_MS,
        });
        if let Some(message) = &self.message {
            task["statusMessage"] = Value::String(message.clone());
        }
        task
    }
}

/// What `mcp serve` keeps with a run started as a task ([`plan_run::Start::front_end`]): the
/// tool it answers as, and the time to live the client asked for.
pub(crate) fn front_end(tool: &str, ttl: Option<u64>) -> Value {
    json!({"mcp_task": {"tool": tool, "ttl": ttl}})
}

/// The tool run `row`'s task answers as (`plan_run` for a run not started as a task).
pub(crate) fn tool_of(row: &RunRow) -> &str {
    plan_run::front_end_of(row)["mcp_task"]["tool"]
        .as_str()
        .unwrap_or("plan_run")
}

/// Where the task of run `row` stands, as its ledger says. `driven`: this process is running
/// it or waiting on its decisions now.
pub(crate) fn task_of(store: &Store, row: &RunRow, driven: bool) -> Task {
    let ttl = plan_run::front_end_of(row)["mcp_task"]["ttl"].as_u64();
    let (status, message) = match row.state {
        RunState::Waiting => (Status::InputRequired, Some(waiting_message(store, row))),
        RunState::Running if driven || plan_run::owner_alive(row).is_some() => {
            (Status::Working, None)
        }
        RunState::Running => (
            Status::Failed,
            Some(format!(
                "the process that ran it ended before it did: plan_resume with run_id {} goes on with it",
                row.run_id
            )),
        ),
        RunState::Stopped => (
            Status::Cancelled,
            Some(format!(
                "stopped: plan_resume with run_id {} goes on with it",
                row.run_id
            )),
        ),
        RunState::Finished => match row.task_status {
            Some(TaskStatus::Completed | TaskStatus::Partial) => (Status::Completed, None),
            other => (
                Status::Failed,
                Some(format!(
                    "the run ended {}",
                    other.map_or_else(|| "without a status".to_owned(), |s| s.to_string())
                )),
            ),
        },
    };
    Task {
        id: row.run_id.clone(),
        status,
        message,
        created_at: row.started_at.clone(),
        updated_at: row.updated_at.clone(),
        ttl,
    }
}

/// What a waiting run waits for, as its task's `statusMessage`: the calls and what each
/// would be called with, and who decides.
fn waiting_message(store: &Store, row: &RunRow) -> String {
    let waiting: Vec<String> = plan_run::waiting_for(store, &row.run_id)
        .unwrap_or_default()
        .into_iter()
        .map(|(id, request)| match &request {
            Some(request) => format!("{id} ({})", plan_run::summary::waiting_call(request)),
            None => id,
        })
        .collect();
    format!(
        "waiting for approval: {}. The operator decides with `plan-cli approve {run} STEP` (a question: `plan-cli approve {run} ID --input JSON`, an object of the fields of its input_schema), or reject; the run then goes on by itself",
        waiting.join(", "),
        run = row.run_id
    )
}

/// Whether a waiting run's calls are all decided (so it can go on).
pub(crate) fn all_decided(store: &Store, run_id: &str) -> bool {
    plan_run::waiting_for(store, run_id).is_ok_and(|waiting| waiting.is_empty())
}

/// The result of a finished task: the tool's answer as the call would have had it, tied to
/// the task.
pub(crate) fn result_of(task_id: &str, answer: &Result<Value, String>) -> Value {
    let mut result = crate::call_result(answer);
    result["_meta"] = json!({crate::protocol::RELATED_TASK: {"taskId": task_id}});
    result
}

/// Marks a driven task ended when its driver returns, or panics: it is not left `working`,
/// and a closing server does not wait for it.
struct Ended {
    server: Arc<PlanServer>,
    id: String,
}

impl Drop for Ended {
    fn drop(&mut self) {
        if let Some(driven) = lock(&self.server.tasks).get_mut(&self.id) {
            driven.ended = true;
        }
    }
}

/// The run `id` names exactly in `store`, when a client started it.
fn client_row(store: &Store, id: &str) -> Option<RunRow> {
    plan_run::exact_run_of(store, id, Author::McpClient)
}

fn unknown(id: &str) -> RpcError {
    RpcError::params(format!(
        "no task `{id}` among the tasks of this server's clients"
    ))
}

impl PlanServer {
    /// Starts `served` with `args` as a task: the task is made at once, its run goes on in
    /// the background (see [`PlanServer::drive`]).
    pub(crate) fn create_task(
        self: &Arc<Self>,
        served: Served,
        args: Map<String, Value>,
        peer: Arc<Peer>,
        progress: Option<Value>,
        ttl: Option<u64>,
    ) -> Task {
        let now = plan_run::ledger::timestamp(std::time::SystemTime::now());
        let run_id = ulid::Ulid::new().to_string();
        let task = TaskRun {
            progress: (progress.clone()).map(|token| {
                Arc::new(crate::session::Progress::new(
                    peer.clone(),
                    token,
                    Some(run_id.clone()),
                ))
            }),
            run_id,
            ttl,
            cancel: CancellationToken::new(),
            tool: served,
        };
        lock(&self.tasks).insert(
            task.run_id.clone(),
            Driven {
                cancel: task.cancel.clone(),
                ended: false,
                refused: None,
                created_at: now.clone(),
                ttl,
            },
        );
        let call = Call {
            peer,
            task: Some(task.clone()),
            progress,
        };
        let id = task.run_id.clone();
        tokio::spawn(self.clone().drive(served, args, call));
        Task {
            id,
            status: Status::Working,
            message: None,
            created_at: now.clone(),
            updated_at: now,
            ttl,
        }
    }

    /// Runs a task's call, then, while its run waits for approvals, goes on with it each
    /// time they are all decided (by the operator, the dashboard or a client), until it ends,
    /// is stopped, or another process takes it. A run holds a blocking thread while it runs
    /// (at most [`crate::MAX_RUNS`] at once); a waiting one holds none.
    async fn drive(self: Arc<Self>, served: Served, args: Map<String, Value>, call: Call) {
        let Some(task) = call.task.clone() else {
            return;
        };
        let _ended = Ended {
            server: self.clone(),
            id: task.run_id.clone(),
        };
        let refused = self
            .blocking_work({
                let (call, id) = (call.clone(), task.run_id.clone());
                move |server| {
                    let answer = server.answer(served, &args, &call);
                    answer.err().filter(|_| server.row(&id).is_none())
                }
            })
            .await
            .flatten();
        if refused.is_none() {
            self.follow_decisions(&task, &call).await;
        }
        if let Some(driven) = lock(&self.tasks).get_mut(&task.run_id) {
            driven.refused = refused;
        }
    }

    /// Runs `work` on a blocking thread; `None` if it panicked.
    async fn blocking_work<T: Send + 'static>(
        self: &Arc<Self>,
        work: impl FnOnce(&Arc<Self>) -> T + Send + 'static,
    ) -> Option<T> {
        let server = self.clone();
        tokio::task::spawn_blocking(move || work(&server))
            .await
            .ok()
    }

    /// Waits while run `task` waits, and goes on with it once everything it waits for is
    /// decided; a cancel marks it stopped. Waiting is a timer, not a thread: any number of
    /// waiting runs cost the server nothing but a look at the ledger each [`POLL_MS`].
    async fn follow_decisions(self: &Arc<Self>, task: &TaskRun, call: &Call) {
        enum Next {
            Done,
            Cancel,
            GoOn,
            Wait,
        }
        loop {
            let (id, cancelled) = (task.run_id.clone(), task.cancel.is_cancelled());
            let next = self
                .blocking_work(move |server| {
                    let Some(row) = server.row(&id) else {
                        return Next::Done;
                    };
                    if row.state != RunState::Waiting || server.closing.is_cancelled() {
                        return Next::Done;
                    }
                    if cancelled {
                        return Next::Cancel;
                    }
                    let decided = (server.settings.ledger.open_existing())
                        .is_ok_and(|store| all_decided(&store, &id));
                    if decided { Next::GoOn } else { Next::Wait }
                })
                .await
                .unwrap_or(Next::Done);
            match next {
                Next::Done => return,
                Next::Cancel => {
                    let id = task.run_id.clone();
                    self.blocking_work(move |server| {
                        if let Ok(mut store) = server.settings.ledger.open_existing() {
                            let _ = plan_run::cancel(&mut store, &id, Duration::ZERO);
                        }
                    })
                    .await;
                    return;
                }
                Next::GoOn => {
                    let (id, call) = (task.run_id.clone(), call.clone());
                    let went_on = self
                        .blocking_work(move |server| {
                            let options = plan_run::ResumeOptions {
                                also: Some(server.settings.policy.clone()),
                                ..plan_run::ResumeOptions::default()
                            };
                            server.go_on(&id, &options, &call).is_ok()
                        })
                        .await;
                    // Another process may have taken it (the operator's `resume`): the
                    // ledger tells from now on.
                    if went_on != Some(true) {
                        return;
                    }
                }
                Next::Wait => {
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_millis(POLL_MS)) => {}
                        () = task.cancel.cancelled() => {}
                        () = self.closing.cancelled() => {}
                    }
                }
            }
        }
    }

    /// The client run `id` is exactly (no prefix, no `last`: a task id is whole).
    /// One row read by its key: this is what polling asks, several times a second per task.
    fn row(&self, id: &str) -> Option<RunRow> {
        let store = self.settings.ledger.open_existing().ok()?;
        client_row(&store, id)
    }

    /// Where task `id` stands. A waiting run no process follows is followed from now on, so
    /// that it goes on once decided (after a restart too).
    pub(crate) fn task(self: &Arc<Self>, id: &str) -> Result<Task, RpcError> {
        let driven = lock(&self.tasks).get(id).cloned();
        // One opening for the row and the task: polling asks this several times a second.
        let found = (self.settings.ledger.open_existing().ok())
            .and_then(|store| client_row(&store, id).map(|row| (store, row)));
        let Some((store, row)) = found else {
            return match driven {
                Some(driven) => Ok(Task {
                    id: id.to_owned(),
                    status: match driven.refused {
                        Some(_) => Status::Failed,
                        None if driven.ended => Status::Failed,
                        None => Status::Working,
                    },
                    message: driven.refused.clone(),
                    created_at: driven.created_at.clone(),
                    updated_at: driven.created_at,
                    ttl: driven.ttl,
                }),
                None => Err(unknown(id)),
            };
        };
        let following = driven.as_ref().is_some_and(|driven| !driven.ended);
        // A run this process is running (a plain `plan_run`, a `plan_resume`) is going on,
        // though its owner's pid is this process's own.
        let running_here = lock(&self.going_on).contains_key(id);
        let mut task = task_of(&store, &row, following || running_here);
        if let Some(driven) = driven {
            task.ttl = task.ttl.or(driven.ttl);
        }
        if task.status == Status::InputRequired && !following {
            self.follow(&row);
        }
        Ok(task)
    }

    /// Follows waiting run `row`, which no driver of this process follows.
    fn follow(self: &Arc<Self>, row: &RunRow) {
        let task = TaskRun {
            run_id: row.run_id.clone(),
            ttl: None,
            cancel: CancellationToken::new(),
            tool: Served::named(tool_of(row)).unwrap_or(Served::Run),
            progress: None,
        };
        {
            let mut tasks = lock(&self.tasks);
            if tasks.get(&row.run_id).is_some_and(|driven| !driven.ended)
                || tasks.values().filter(|driven| !driven.ended).count() >= crate::MAX_FOLLOWED
            {
                return;
            }
            tasks.insert(
                row.run_id.clone(),
                Driven {
                    cancel: task.cancel.clone(),
                    ended: false,
                    refused: None,
                    created_at: row.started_at.clone(),
                    ttl: None,
                },
            );
        }
        let server = self.clone();
        let call = Call {
            peer: Arc::new(Peer::detached()),
            task: Some(task),
            progress: None,
        };
        tokio::spawn(async move {
            let Some(task) = call.task.clone() else {
                return;
            };
            let _ended = Ended {
                server: server.clone(),
                id: task.run_id.clone(),
            };
            server.follow_decisions(&task, &call).await;
        });
    }

    /// The result of task `id`, once it has ended (`tasks/result` waits for it).
    pub(crate) async fn task_result(self: &Arc<Self>, id: &str) -> Result<Value, RpcError> {
        loop {
            let server = self.clone();
            let owned = id.to_owned();
            let task = tokio::task::spawn_blocking(move || server.task(&owned))
                .await
                .map_err(|e| RpcError::internal(e.to_string()))??;
            if task.status.is_terminal() {
                break;
            }
            // A closing server answers what it has rather than keep the client (and its own
            // end) waiting.
            if self.closing.is_cancelled() {
                return Err(RpcError::internal(format!(
                    "the server is closing before task {id} ended: ask a later session for its result"
                )));
            }
            tokio::time::sleep(Duration::from_millis(POLL_MS / 2)).await;
        }
        let server = self.clone();
        let owned = id.to_owned();
        tokio::task::spawn_blocking(move || server.answer_of(&owned))
            .await
            .map_err(|e| RpcError::internal(e.to_string()))?
    }

    /// The answer of ended task `id`, as its tool answers: read from the ledger, so a task
    /// another process ran (or this one, before a restart) answers as it did.
    fn answer_of(&self, id: &str) -> Result<Value, RpcError> {
        let answer = match self.row(id) {
            Some(row) => {
                // Read as `plan_status` reads it: a dead process's log folded in first.
                let mut store = self.open_existing().map_err(RpcError::internal)?;
                let row = plan_run::run_by(&mut store, &row.run_id, Author::McpClient)
                    .map_err(|e| RpcError::internal(e.to_string()))?;
                let report = plan_run::report(&store, &row)
                    .map_err(|e| RpcError::internal(e.to_string()))?;
                match Served::named(tool_of(&row)) {
                    Some(Served::Execute | Served::CreateAndExecute) => plan_run::plan_of(&row)
                        .map(|plan| crate::executed(&row.plan_id, &plan, &report))
                        .map_err(|e| e.to_string()),
                    _ => crate::to_json(&report),
                }
            }
            None => match lock(&self.tasks)
                .get(id)
                .map(|driven| driven.refused.clone())
            {
                Some(Some(refused)) => Err(refused),
                Some(None) => Err("the task ended before its run was recorded".to_owned()),
                None => return Err(unknown(id)),
            },
        };
        Ok(result_of(id, &answer))
    }

    /// Stops task `id`'s run, resumably, and says where the task stands then.
    pub(crate) fn cancel_task(self: &Arc<Self>, id: &str) -> Result<Task, RpcError> {
        let task = self.task(id)?;
        if task.status.is_terminal() {
            return Err(RpcError::params(format!(
                "task {id} is {} already: there is nothing to cancel",
                task.status.name()
            )));
        }
        let here: Vec<CancellationToken> = [
            lock(&self.tasks)
                .get(id)
                .filter(|d| !d.ended)
                .map(|d| d.cancel.clone()),
            lock(&self.going_on).get(id).cloned(),
        ]
        .into_iter()
        .flatten()
        .collect();
        if here.is_empty() {
            // Another process runs it, or none does (it waits): as `plan-cli cancel` stops it.
            let mut store = self.open_existing().map_err(RpcError::internal)?;
            plan_run::cancel(&mut store, id, Duration::from_secs(10))
                .map_err(|e| RpcError::internal(e.to_string()))?;
        }
        here.iter().for_each(CancellationToken::cancel);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let task = self.task(id)?;
            if task.status.is_terminal() || std::time::Instant::now() > deadline {
                return Ok(task);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The tasks of this server's clients, newest first: every run a client started, and the
    /// tasks refused before their run was recorded.
    pub(crate) fn list_tasks(self: &Arc<Self>, cursor: Option<&str>) -> Result<Value, RpcError> {
        const PAGE: usize = 100;
        let skip: usize = match cursor {
            Some(cursor) => cursor.parse().map_err(|_| {
                RpcError::params(format!("`{cursor}` is not a cursor of tasks/list"))
            })?,
            None => 0,
        };
        let mut ids: Vec<(String, String)> = match self.settings.ledger.open_existing() {
            Ok(store) => plan_run::runs_of(&store, Author::McpClient)
                .map_err(|e| RpcError::internal(e.to_string()))?
                .into_iter()
                .map(|row| (row.started_at, row.run_id))
                .collect(),
            Err(_) => Vec::new(),
        };
        ids.extend(
            lock(&self.tasks)
                .iter()
                .filter(|(_, driven)| driven.refused.is_some())
                .map(|(id, driven)| (driven.created_at.clone(), id.clone())),
        );
        ids.sort_unstable_by(|a, b| b.cmp(a));
        let tasks: Vec<Value> = ids
            .iter()
            .skip(skip)
            .take(PAGE)
            .filter_map(|(_, id)| self.task(id).ok())
            .map(|task| task.to_json())
            .collect();
        let mut list = json!({"tasks": tasks});
        if ids.len() > skip.saturating_add(PAGE) {
            list["nextCursor"] = Value::String((skip + PAGE).to_string());
        }
        Ok(list)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_says_every_field_mcp_asks_for() {
        let task = Task {
            id: "01J".to_owned(),
            status: Status::InputRequired,
            message: Some("waiting".to_owned()),
            created_at: "2026-11-27T10:00:00Z".to_owned(),
            updated_at: "2026-11-27T10:00:01Z".to_owned(),
            ttl: None,
        };
        assert_eq!(
            task.to_json(),
            json!({
                "taskId": "01J",
                "status": "input_required",
                "statusMessage": "waiting",
                "createdAt": "2026-11-27T10:00:00Z",
                "lastUpdatedAt": "2026-11-27T10:00:01Z",
                "ttl": null,
                "pollInterval": POLL_MS,
            })
        );
        assert!(!Status::Working.is_terminal() && !Status::InputRequired.is_terminal());
        assert!(Status::Cancelled.is_terminal());
    }
}
