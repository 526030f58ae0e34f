//! A worker: reads steps from the stream as a member of the consumer group, calls its own
//! tools, writes each result to the run's results stream, and only then acknowledges.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use plan_engine::{Registry, ToolContext, ToolError, codes};
use redis::streams::{StreamAutoClaimReply, StreamId, StreamReadReply};
use serde_json::Value;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::coordinator::encode;
use crate::{GROUP, Queue, QueueError};

/// How a worker works.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// Its name in the consumer group (unique per worker).
    pub consumer: String,
    /// Most calls at once.
    pub concurrency: usize,
    /// How long an entry may sit unacknowledged and untouched before another worker claims it
    /// (its worker is presumed dead). A busy worker touches its entries well within it.
    pub visibility_timeout: Duration,
    /// Where the worker says what went wrong while it goes on (a failed read, a result it
    /// could not write); the library prints nothing.
    pub notices: Option<tokio::sync::mpsc::UnboundedSender<WorkerNotice>>,
}

/// Something that went wrong while a worker goes on working.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkerNotice {
    /// The worker reads the queue again after it failed (Redis restarted, say).
    #[error("worker {consumer}: reconnected to the queue")]
    Reconnected {
        /// The worker.
        consumer: String,
    },
    /// Reading the stream failed; the worker reconnects and tries again, waiting longer
    /// each time (up to 5 s).
    #[error("worker {consumer}: reading the queue failed: {error}")]
    ReadFailed {
        /// The worker.
        consumer: String,
        /// What Redis said.
        error: String,
    },
    /// A call's result could not be written; the entry stays unacknowledged, so another
    /// worker claims it and makes the call again.
    #[error("worker {consumer}: cannot write the result of {job}: {error}")]
    ResultNotWritten {
        /// The worker.
        consumer: String,
        /// The call's key (`RUN/STEP#ATTEMPT`).
        job: String,
        /// What Redis said.
        error: String,
    },
}

/// What a worker did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Calls it made and acknowledged.
    pub done: u64,
    /// Of those, calls it claimed from a worker presumed dead.
    pub claimed: u64,
}

/// Works until `stop` is cancelled, then drains: takes nothing new, finishes (and
/// acknowledges) what it holds, and returns.
pub async fn work(
    queue: Queue,
    tools: Registry,
    options: WorkerOptions,
    stop: CancellationToken,
) -> Result<WorkerStats, QueueError> {
    let mut writer = queue.writer.clone();
    join_group(&queue).await?;
    let mut reader = queue.reader().await?;
    let mut backoff = FIRST_BACKOFF;
    let tools = Arc::new(tools);
    let slots = Arc::new(Semaphore::new(options.concurrency.max(1)));
    let done = Arc::new(AtomicU64::new(0));
    let mut claimed = 0;
    let mut running: JoinSet<()> = JoinSet::new();
    let visibility_ms = options.visibility_timeout.as_millis().max(1) as u64;
    let mut last_claim = tokio::time::Instant::now();
    let mut last_beat: Option<tokio::time::Instant> = None;
    while !stop.is_cancelled() {
        while running.try_join_next().is_some() {}
        if last_beat.is_none_or(|at| at.elapsed() >= Duration::from_secs(2)) {
            heartbeat(&queue, &options.consumer).await;
            last_beat = Some(tokio::time::Instant::now());
        }
        let free = slots.available_permits();
        if free == 0 {
            tokio::select! {
                _ = running.join_next() => {}
                () = stop.cancelled() => {}
            }
            continue;
        }
        let mut entries: Vec<StreamId> = Vec::new();
        // Entries of workers presumed dead come first.
        if last_claim.elapsed() >= options.visibility_timeout / 2 {
            last_claim = tokio::time::Instant::now();
            let reply: redis::RedisResult<StreamAutoClaimReply> = redis::cmd("XAUTOCLAIM")
                .arg(&queue.stream)
                .arg(GROUP)
                .arg(&options.consumer)
                .arg(visibility_ms)
                .arg("0-0")
                .arg("COUNT")
                .arg(free)
                .query_async(&mut writer)
                .await;
            if let Ok(reply) = reply {
                claimed += reply.claimed.len() as u64;
                entries.extend(reply.claimed);
            }
        }
        if entries.is_empty() {
            let block = (visibility_ms / 2).clamp(10, 1000);
            // Not raced against `stop`: entries read are held, so a read runs to its end
            // (at most `block` ms) and what it brings is worked on before draining.
            let reply: redis::RedisResult<Option<StreamReadReply>> = redis::cmd("XREADGROUP")
                .arg("GROUP")
                .arg(GROUP)
                .arg(&options.consumer)
                .arg("COUNT")
                .arg(free)
                .arg("BLOCK")
                .arg(block)
                .arg("STREAMS")
                .arg(&queue.stream)
                .arg(">")
                .query_async(&mut reader)
                .await;
            match reply {
                Ok(reply) => {
                    backoff = FIRST_BACKOFF;
                    entries.extend(reply.into_iter().flat_map(|r| r.keys).flat_map(|k| k.ids));
                }
                Err(error) => {
                    notify(
                        options.notices.as_ref(),
                        WorkerNotice::ReadFailed {
                            consumer: options.consumer.clone(),
                            error: error.to_string(),
                        },
                    );
                    tokio::select! {
                        () = tokio::time::sleep(backoff) => {}
                        () = stop.cancelled() => {}
                    }
                    backoff = (backoff * 2).min(LAST_BACKOFF);
                    // The connection a blocking read holds does not come back by itself: a new
                    // one, and the group again (a Redis that restarted empty has none).
                    if let Ok(fresh) = queue.reader().await
                        && join_group(&queue).await.is_ok()
                    {
                        reader = fresh;
                        notify(
                            options.notices.as_ref(),
                            WorkerNotice::Reconnected {
                                consumer: options.consumer.clone(),
                            },
                        );
                    }
                }
            }
        }
        for entry in entries {
            let Ok(permit) = slots.clone().acquire_owned().await else {
                break;
            };
            let job = Job {
                queue: queue.clone(),
                tools: tools.clone(),
                consumer: options.consumer.clone(),
                notices: options.notices.clone(),
                visibility: options.visibility_timeout,
                done: done.clone(),
            };
            running.spawn(async move {
                job.run(entry).await;
                drop(permit);
            });
        }
    }
    // Drain: what this worker holds is finished and acknowledged before it leaves.
    while running.join_next().await.is_some() {}
    let mut writer = queue.writer.clone();
    let _: redis::RedisResult<i64> = redis::cmd("HDEL")
        .arg("plan:workers")
        .arg(&options.consumer)
        .query_async(&mut writer)
        .await;
    Ok(WorkerStats {
        done: done.load(Ordering::Relaxed),
        claimed,
    })
}

fn notify(to: Option<&tokio::sync::mpsc::UnboundedSender<WorkerNotice>>, notice: WorkerNotice) {
    if let Some(to) = to {
        // A caller that stopped listening does not want to hear it.
        let _ = to.send(notice);
    }
}

/// `plan:workers` maps each worker to when it was last seen (milliseconds since the epoch).
/// The first wait after a failed read; it doubles up to [`LAST_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const LAST_BACKOFF: Duration = Duration::from_secs(5);

/// Creates the consumer group (and the stream) unless it exists.
async fn join_group(queue: &Queue) -> Result<(), QueueError> {
    let mut writer = queue.writer.clone();
    let created: redis::RedisResult<String> = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&queue.stream)
        .arg(GROUP)
        .arg("0")
        .arg("MKSTREAM")
        .query_async(&mut writer)
        .await;
    match created {
        Err(error) if error.code() != Some("BUSYGROUP") => {
            Err(queue.error(format!("cannot join the consumer group: {error}")))
        }
        _ => Ok(()),
    }
}

async fn heartbeat(queue: &Queue, consumer: &str) {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let mut writer = queue.writer.clone();
    let _: redis::RedisResult<i64> = redis::cmd("HSET")
        .arg("plan:workers")
        .arg(consumer)
        .arg(now)
        .query_async(&mut writer)
        .await;
}

struct Job {
    queue: Queue,
    tools: Arc<Registry>,
    consumer: String,
    notices: Option<tokio::sync::mpsc::UnboundedSender<WorkerNotice>>,
    visibility: Duration,
    done: Arc<AtomicU64>,
}

impl Job {
    async fn run(self, entry: StreamId) {
        let fields: HashMap<String, String> = entry
            .map
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), redis::from_redis_value(v.clone()).ok()?)))
            .collect();
        let field = |name: &str| fields.get(name).cloned().unwrap_or_default();
        let (job, reply) = (field("job"), field("reply"));
        let outcome = self.call(&fields, &entry.id).await;
        let mut writer = self.queue.writer.clone();
        if !job.is_empty() && !reply.is_empty() {
            let written: redis::RedisResult<String> = redis::cmd("XADD")
                .arg(&reply)
                .arg("*")
                .arg("job")
                .arg(&job)
                .arg("outcome")
                .arg(encode(&outcome))
                .query_async(&mut writer)
                .await;
            if let Err(error) = written {
                // Not acknowledged: another worker will claim it and run it again.
                notify(
                    self.notices.as_ref(),
                    WorkerNotice::ResultNotWritten {
                        consumer: self.consumer.clone(),
                        job,
                        error: error.to_string(),
                    },
                );
                return;
            }
        }
        let acked: redis::RedisResult<i64> = redis::cmd("XACK")
            .arg(&self.queue.stream)
            .arg(GROUP)
            .arg(&entry.id)
            .query_async(&mut writer)
            .await;
        if acked.is_ok() {
            self.done.fetch_add(1, Ordering::Relaxed);
        }
    }

    async fn call(
        &self,
        fields: &HashMap<String, String>,
        entry_id: &str,
    ) -> Result<Value, ToolError> {
        let field = |name: &str| fields.get(name).map(String::as_str).unwrap_or_default();
        let Some(tool) = self.tools.get(field("tool")) else {
            return Err(ToolError::new(
                codes::E_TOOL,
                format!("worker {} has no tool `{}`", self.consumer, field("tool")),
            ));
        };
        let args: Value = plan_types::json::from_str(field("args"))
            .map_err(|e| ToolError::invalid_args(format!("unreadable arguments: {e}")))?;
        let deadline = field("deadline")
            .parse::<u64>()
            .ok()
            .filter(|&ms| ms > 0)
            .map(|ms| SystemTime::UNIX_EPOCH + Duration::from_millis(ms));
        let left = deadline.map(|at| at.duration_since(SystemTime::now()).unwrap_or_default());
        if left == Some(Duration::ZERO) {
            return Err(ToolError::retryable(
                codes::E_TIMEOUT,
                "the step's deadline passed before a worker could start it",
            ));
        }
        let working_dir = match field("dir") {
            "" => None,
            dir if std::path::Path::new(dir).is_dir() => Some(Arc::from(std::path::Path::new(dir))),
            dir => {
                return Err(ToolError::new(
                    codes::E_TOOL,
                    format!(
                        "worker {} cannot see the folder the call works in ({dir}): a task's calls need a worker on the machine that holds the repository",
                        self.consumer
                    ),
                ));
            }
        };
        let ctx = ToolContext {
            run_id: Arc::from(field("run")),
            step_id: Arc::from(field("step")),
            attempt: field("attempt").parse().unwrap_or(1),
            cancel: CancellationToken::new(),
            progress: None,
            deadline,
            // A worker's programs print to nobody: results carry their output.
            output: None,
            working_dir,
        };
        // While the tool runs, the entry is touched now and then, so that no other worker
        // takes it for the entry of a dead one.
        let keep = async {
            let mut writer = self.queue.writer.clone();
            loop {
                tokio::time::sleep(self.visibility / 3).await;
                let _: redis::RedisResult<Value> = redis::cmd("XCLAIM")
                    .arg(&self.queue.stream)
                    .arg(GROUP)
                    .arg(&self.consumer)
                    .arg(0)
                    .arg(entry_id)
                    .arg("JUSTID")
                    .query_async(&mut writer)
                    .await
                    .map(|_: redis::Value| Value::Null);
            }
        };
        let bounded = async {
            match left {
                None => tool.call(args, ctx).await,
                Some(left) => tokio::time::timeout(left, tool.call(args, ctx))
                    .await
                    .unwrap_or_else(|_| {
                        Err(ToolError::retryable(
                            codes::E_TIMEOUT,
                            "the step ran past its deadline on the worker",
                        ))
                    }),
            }
        };
        tokio::select! {
            outcome = bounded => outcome,
            () = keep => unreachable!("touching the entry never ends"),
        }
    }
}
