//! The coordinator's side: tools whose calls become stream entries, and the reader that
//! hands each result back to the call waiting for it.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use plan_engine::{Registry, Tool, ToolContext, ToolError, ToolInfo, codes};
use plan_types::ErrorCode;
use redis::streams::StreamReadReply;
use serde_json::Value;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::{E_QUEUE_UNAVAILABLE, Queue, QueueError};

type Outcome = Result<Value, ToolError>;

/// Sends calls to the workers and routes their results back.
pub struct Dispatcher {
    queue: Queue,
    /// Calls waiting for their result, by job id (`RUN/STEP#ATTEMPT`).
    waiting: Mutex<HashMap<String, Waiting>>,
    /// Results no call was waiting for yet: those of an earlier coordinator of the same run,
    /// found when a resumed run reads its results stream from the start.
    early: Mutex<HashMap<String, Outcome>>,
    /// Runs whose results stream is read.
    attached: Mutex<HashSet<String>>,
    lost: CancellationToken,
    /// How long Redis may stay unreachable before the run is given up.
    give_up_after: Duration,
    /// A key this coordinator sets in Redis: gone after a reconnection, Redis lost its data.
    marker: String,
}

/// A call a worker has not answered yet: where its result goes, and its entry, to add again
/// if Redis comes back without it.
struct Waiting {
    result: oneshot::Sender<Outcome>,
    entry: Vec<(&'static str, String)>,
}

/// How long Redis may stay unreachable, by default, before the coordinator gives the run up
/// (it can be resumed); meanwhile it reconnects, waiting longer each time.
pub const DEFAULT_OUTAGE: Duration = Duration::from_secs(30);
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const LAST_BACKOFF: Duration = Duration::from_secs(2);

impl Dispatcher {
    pub fn new(queue: Queue) -> Arc<Self> {
        Dispatcher::with_outage(queue, DEFAULT_OUTAGE)
    }

    /// A dispatcher that gives a run up once Redis has been unreachable for `outage`.
    pub fn with_outage(queue: Queue, outage: Duration) -> Arc<Self> {
        Arc::new(Dispatcher {
            queue,
            waiting: Mutex::default(),
            early: Mutex::default(),
            attached: Mutex::default(),
            lost: CancellationToken::new(),
            give_up_after: outage,
            marker: format!("plan:coordinator:{}", ulid::Ulid::new()),
        })
    }

    /// Sets this coordinator's marker key (for a week: a marker that expired only makes a
    /// later reconnection add the waiting calls again, which delivery at least once allows).
    async fn set_marker(&self) -> redis::RedisResult<()> {
        let mut writer = self.queue.writer.clone();
        redis::cmd("SET")
            .arg(&self.marker)
            .arg(1)
            .arg("EX")
            .arg(7 * 24 * 3600)
            .query_async(&mut writer)
            .await
    }

    /// Cancelled when Redis is lost for good: the caller should stop the run (it can be
    /// resumed); calls in flight fail with a retryable `E_QUEUE_UNAVAILABLE`.
    pub fn lost(&self) -> CancellationToken {
        self.lost.clone()
    }

    /// Starts reading the results of run `run_id`, from the beginning of its stream, so that
    /// results of calls an earlier coordinator made are found.
    pub async fn attach(self: &Arc<Self>, run_id: &str) -> Result<(), QueueError> {
        if !self
            .attached
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(run_id.to_owned())
        {
            return Ok(());
        }
        self.set_marker()
            .await
            .map_err(|e| self.queue.error(e.to_string()))?;
        let mut connection = self.queue.reader().await?;
        let key = Queue::results_stream(run_id);
        let this = self.clone();
        tokio::spawn(async move {
            let mut last = "0".to_owned();
            let mut failing_since: Option<tokio::time::Instant> = None;
            let mut backoff = FIRST_BACKOFF;
            loop {
                let reply: redis::RedisResult<Option<StreamReadReply>> = redis::cmd("XREAD")
                    .arg("COUNT")
                    .arg(512)
                    .arg("BLOCK")
                    .arg(1000)
                    .arg("STREAMS")
                    .arg(&key)
                    .arg(&last)
                    .query_async(&mut connection)
                    .await;
                match reply {
                    Ok(reply) => {
                        failing_since = None;
                        backoff = FIRST_BACKOFF;
                        for entry in reply.into_iter().flat_map(|r| r.keys).flat_map(|k| k.ids) {
                            last.clone_from(&entry.id);
                            let field = |name: &str| -> Option<String> {
                                entry
                                    .map
                                    .get(name)
                                    .and_then(|v| redis::from_redis_value(v.clone()).ok())
                            };
                            if let (Some(job), Some(outcome)) = (field("job"), field("outcome")) {
                                this.deliver(job, decode(&outcome));
                            }
                        }
                    }
                    Err(error) => {
                        let since = *failing_since.get_or_insert_with(tokio::time::Instant::now);
                        if since.elapsed() >= this.give_up_after {
                            this.give_up(&error.to_string());
                            return;
                        }
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(LAST_BACKOFF);
                        // A blocking read's connection does not come back by itself.
                        if let Ok(fresh) = this.queue.reader().await {
                            connection = fresh;
                            this.requeue_if_lost().await;
                        }
                    }
                }
                if this.lost.is_cancelled() {
                    return;
                }
            }
        });
        Ok(())
    }

    /// After a reconnection: if Redis came back without this coordinator's marker (it
    /// restarted without persistence, so the steps stream went too), the calls still waiting
    /// are added again. Delivery was at least once already; the first result of each call is
    /// the one taken. (The stream itself is no sign: a worker that reconnected first has
    /// created it anew, empty.)
    async fn requeue_if_lost(&self) {
        let mut writer = self.queue.writer.clone();
        let exists: redis::RedisResult<i64> = redis::cmd("EXISTS")
            .arg(&self.marker)
            .query_async(&mut writer)
            .await;
        if exists != Ok(0) || self.set_marker().await.is_err() {
            return;
        }
        let entries: Vec<Vec<(&'static str, String)>> = self
            .waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .map(|w| w.entry.clone())
            .collect();
        for entry in entries {
            let _ = add_entry(&self.queue, &entry).await;
        }
    }

    /// How many workers have shown a sign of life in the last 10 seconds.
    pub async fn live_workers(&self) -> Result<usize, QueueError> {
        let mut writer = self.queue.writer.clone();
        let beats: HashMap<String, u64> = redis::cmd("HGETALL")
            .arg("plan:workers")
            .query_async(&mut writer)
            .await
            .map_err(|e| self.queue.error(e.to_string()))?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        Ok(beats
            .values()
            .filter(|&&at| now.saturating_sub(at) < 10_000)
            .count())
    }

    /// Hands a result to the call waiting for it; a second result of one call is ignored.
    fn deliver(&self, job: String, outcome: Outcome) {
        let waiter = self
            .waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&job);
        match waiter {
            Some(waiter) => {
                let _ = waiter.result.send(outcome);
            }
            None => {
                self.early
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .entry(job)
                    .or_insert(outcome);
            }
        }
    }

    /// Redis is gone: every waiting call fails (retryably) and the run is told to stop.
    fn give_up(&self, why: &str) {
        self.lost.cancel();
        let waiting: Vec<_> = self
            .waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
            .collect();
        for (_, waiter) in waiting {
            let _ = waiter
                .result
                .send(Err(unavailable(format!("the queue was lost: {why}"))));
        }
    }

    /// The tools of `registry`, each turned into a [`RemoteTool`] of the same name, schema and
    /// risk: plans validate as before, and every call runs on a worker.
    pub fn remote(self: &Arc<Self>, registry: &Registry) -> Registry {
        let mut remote = Registry::new();
        for name in registry.names() {
            if let Some(tool) = registry.get(&name) {
                let tool = RemoteTool {
                    dispatcher: self.clone(),
                    name: name.clone(),
                    info: tool.info(),
                };
                remote.register_as(name, Arc::new(tool));
            }
        }
        remote
    }

    /// Deletes a finished run's results stream.
    pub async fn forget(&self, run_id: &str) {
        let mut writer = self.queue.writer.clone();
        let _: redis::RedisResult<i64> = redis::cmd("DEL")
            .arg(Queue::results_stream(run_id))
            .query_async(&mut writer)
            .await;
    }
}

/// A tool whose calls a worker makes.
pub struct RemoteTool {
    dispatcher: Arc<Dispatcher>,
    /// The name the worker looks the tool up by.
    name: String,
    info: ToolInfo,
}

#[async_trait]
impl Tool for RemoteTool {
    fn info(&self) -> ToolInfo {
        self.info.clone()
    }

    async fn call(&self, args: Value, ctx: ToolContext) -> Result<Value, ToolError> {
        let dispatcher = &self.dispatcher;
        if dispatcher.lost.is_cancelled() {
            return Err(unavailable("the queue was lost".to_owned()));
        }
        // One key per attempt: a retry is a new entry, a redelivery of the same entry is not.
        let job = format!("{}#{}", ctx.idempotency_key(), ctx.attempt);
        let arguments = serde_json::to_string(&args).unwrap_or_default();
        // Milliseconds since the epoch, 0 for none: a worker does not start a call whose
        // deadline has passed, and bounds the call by it.
        let deadline = ctx.deadline.map_or(0, |at| {
            at.duration_since(std::time::SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64)
        });
        let entry: Vec<(&'static str, String)> = vec![
            ("job", job.clone()),
            ("run", ctx.run_id.to_string()),
            ("step", ctx.step_id.to_string()),
            ("attempt", ctx.attempt.to_string()),
            ("tool", self.name.clone()),
            ("args", arguments),
            ("key", job.clone()),
            ("deadline", deadline.to_string()),
            ("reply", Queue::results_stream(&ctx.run_id)),
            // A task's calls work in its worktree: a worker on the same machine finds it.
            (
                "dir",
                ctx.working_dir
                    .as_deref()
                    .map(|d| d.display().to_string())
                    .unwrap_or_default(),
            ),
        ];
        let receiver = {
            let mut waiting = dispatcher.waiting.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(outcome) = dispatcher
                .early
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&job)
            {
                // An earlier coordinator of this run already had this call made.
                return outcome;
            }
            let (sender, receiver) = oneshot::channel();
            waiting.insert(
                job.clone(),
                Waiting {
                    result: sender,
                    entry: entry.clone(),
                },
            );
            receiver
        };
        let added = add_entry(&dispatcher.queue, &entry).await;
        if let Err(error) = added {
            dispatcher
                .waiting
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&job);
            return Err(unavailable(format!("cannot queue the call: {error}")));
        }
        tokio::select! {
            outcome = receiver => outcome.unwrap_or_else(|_| Err(unavailable("the queue was lost".to_owned()))),
            () = ctx.cancel.cancelled() => {
                dispatcher.waiting.lock().unwrap_or_else(|e| e.into_inner()).remove(&job);
                Err(ToolError::new(codes::E_CANCELLED, "the call was cancelled while a worker ran it"))
            }
        }
    }
}

/// Adds a call's entry to the steps stream.
async fn add_entry(queue: &Queue, entry: &[(&'static str, String)]) -> redis::RedisResult<String> {
    let mut command = redis::cmd("XADD");
    command.arg(&queue.stream).arg("*");
    for (field, value) in entry {
        command.arg(*field).arg(value);
    }
    let mut writer = queue.writer.clone();
    command.query_async(&mut writer).await
}

fn unavailable(message: String) -> ToolError {
    ToolError::retryable(E_QUEUE_UNAVAILABLE, message)
}

/// A result as workers write it: `{"ok": true, "result"}` or `{"ok": false, "error": {"code",
/// "message", "retryable", "details"}}`.
pub(crate) fn encode(outcome: &Outcome) -> String {
    let value = match outcome {
        Ok(result) => serde_json::json!({"ok": true, "result": result}),
        Err(error) => serde_json::json!({"ok": false, "error": {
            "code": error.code,
            "message": error.message,
            "retryable": error.retryable,
            "retry_after_ms": error.retry_after.map(|d| d.as_millis() as u64),
            "details": error.details,
        }}),
    };
    value.to_string()
}

fn decode(text: &str) -> Outcome {
    let value: Value = plan_types::json::from_str(text).map_err(|e| {
        ToolError::new(
            codes::E_TOOL,
            format!("a worker sent an unreadable result: {e}"),
        )
    })?;
    if value["ok"].as_bool() == Some(true) {
        return Ok(value["result"].clone());
    }
    let error = &value["error"];
    let mut tool_error = ToolError::new(
        error["code"]
            .as_str()
            .map_or(codes::E_TOOL, ErrorCode::from),
        error["message"]
            .as_str()
            .unwrap_or("the worker reported a failure"),
    );
    tool_error.retryable = error["retryable"].as_bool().unwrap_or(false);
    tool_error.retry_after = error["retry_after_ms"].as_u64().map(Duration::from_millis);
    if !error["details"].is_null() {
        tool_error = tool_error.with_details(error["details"].clone());
    }
    Err(tool_error)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn outcomes_survive_the_wire() {
        let ok: Outcome = Ok(json!({"a": [1, 2]}));
        assert_eq!(decode(&encode(&ok)), ok);
        let mut error =
            ToolError::retryable("E_HTTP_STATUS", "503").with_details(json!({"status": 503}));
        error.retry_after = Some(Duration::from_millis(1500));
        let failed: Outcome = Err(error);
        assert_eq!(decode(&encode(&failed)), failed);
        assert_eq!(decode("nonsense").unwrap_err().code, "E_TOOL");
    }
}
