//! The coordinator's side: tools whose calls become BullMQ jobs, and the listener that hands
//! each job's result back to the call waiting for it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use bullmq::{QueueEvent, QueueEventsOptions, QueueOptions};
use plan_ports::{Registry, Tool, ToolContext, ToolError, ToolInfo, codes};
use plan_types::ErrorCode;
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::registry::{self, Route, WorkerEntry};
use crate::{PREFIX, Queue, QueueError};

type Outcome = Result<Value, ToolError>;

/// How long Redis may stay unreachable, by default, before the coordinator gives the run up
/// (it can be resumed).
pub const DEFAULT_OUTAGE: Duration = Duration::from_secs(30);

/// A call with no event for this long is looked up in Redis: a result whose event was missed,
/// or a job Redis lost (it restarted without its data), is found that way.
const LOOK_AFTER: Duration = Duration::from_secs(5);

/// How the coordinator uses the queue.
#[derive(Debug, Clone)]
pub struct DispatchOptions {
    /// How long Redis may stay unreachable before the run is given up.
    pub outage: Duration,
    /// How long a call may wait for a worker to take it; `None`: as long as it takes.
    pub queue_timeout: Option<Duration>,
    /// Where the dispatcher says what a person watching the run should know (a call waiting
    /// for a worker); the library prints nothing.
    pub notices: Option<tokio::sync::mpsc::UnboundedSender<DispatchNotice>>,
    /// Signs every job with this secret (`PLAN_QUEUE_SECRET`), for workers that run only
    /// signed jobs.
    pub secret: Option<crate::QueueSecret>,
}

impl Default for DispatchOptions {
    fn default() -> Self {
        DispatchOptions {
            outage: DEFAULT_OUTAGE,
            queue_timeout: None,
            notices: None,
            secret: None,
        }
    }
}

/// Something the run's watcher should hear about the queue.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DispatchNotice {
    /// Calls of a tool wait: no queue has a worker for it.
    #[error("waiting for a worker for `{tool}`: {why}")]
    WaitingForWorker {
        /// The tool.
        tool: String,
        /// Why no queue qualifies.
        why: String,
    },
    /// A tool whose calls waited has a worker now.
    #[error("a worker for `{tool}` is here (queue `{queue}`)")]
    WorkerFound {
        /// The tool.
        tool: String,
        /// The queue its calls go to.
        queue: String,
    },
}

/// Sends calls to the workers as BullMQ jobs and routes their results back.
pub struct Dispatcher {
    base: Queue,
    options: DispatchOptions,
    /// A BullMQ producer per queue calls went to, each with a listener on its events.
    producers: tokio::sync::Mutex<HashMap<String, Arc<bullmq::Queue>>>,
    /// Calls waiting for their result, by job id.
    waiting: Mutex<HashMap<String, Waiting>>,
    /// The live workers, as last read.
    workers: Mutex<BTreeMap<String, WorkerEntry>>,
    /// Tools whose calls were said to wait for a worker.
    told: Mutex<HashSet<String>>,
    lost: CancellationToken,
}

/// A call no worker has answered yet.
struct Waiting {
    result: oneshot::Sender<Outcome>,
    queue: String,
    /// The job as added: added again if Redis comes back without it.
    tool: String,
    data: Value,
    /// When it was added, and when it was last heard of or looked up.
    added: Instant,
    checked: Instant,
    /// A worker took it.
    active: bool,
    /// Where the call's progress goes (`job.updateProgress` on the worker).
    progress: Option<plan_ports::Progress>,
}

impl Dispatcher {
    /// A dispatcher on `queue`; reads which workers serve which tools before it returns, and
    /// keeps watching Redis (a Redis gone for longer than `options.outage` cancels
    /// [`Dispatcher::lost`]).
    pub async fn new(queue: Queue, options: DispatchOptions) -> Result<Arc<Self>, QueueError> {
        let mut redis = queue.redis.clone();
        let workers = registry::live_workers(&mut redis)
            .await
            .map_err(|e| queue.error(e))?;
        let dispatcher = Arc::new(Dispatcher {
            base: queue,
            options,
            producers: tokio::sync::Mutex::default(),
            waiting: Mutex::default(),
            workers: Mutex::new(workers),
            told: Mutex::default(),
            lost: CancellationToken::new(),
        });
        tokio::spawn(watch(Arc::downgrade(&dispatcher)));
        Ok(dispatcher)
    }

    /// Cancelled when Redis is lost for good: the caller should stop the run (it can be
    /// resumed); calls in flight fail with a retryable `E_QUEUE_UNAVAILABLE`.
    pub fn lost(&self) -> CancellationToken {
        self.lost.clone()
    }

    /// The tools the live workers publish, by name (the first worker's description of each).
    pub fn published(&self) -> BTreeMap<String, ToolInfo> {
        registry::tool_infos(&lock(&self.workers))
    }

    /// The tools of `registry` and those the live workers publish, each a [`RemoteTool`]:
    /// plans validate as before (and may name tools only workers have), and every call runs
    /// on a worker. A tool both sides have keeps the local description, at the higher risk of
    /// the two: a worker cannot lower the risk of a tool plan-cli knows.
    pub fn remote(self: &Arc<Self>, registry: &Registry) -> Registry {
        let mut infos = self.published();
        for name in registry.names() {
            if let Some(tool) = registry.get(&name) {
                let mut info = tool.info();
                if let Some(published) = infos.get(&name) {
                    info.risk = info.risk.max(published.risk);
                }
                infos.insert(name, info);
            }
        }
        let mut remote = Registry::new();
        for (name, info) in infos {
            // The answer is the run's own, never a job (the map-style executor enqueues every
            // tool but its chat one).
            if plan_types::is_answer_tool(&name)
                && let Some(local) = registry.get(&name)
            {
                remote.register_as(name, local.clone());
                continue;
            }
            let tool = RemoteTool {
                dispatcher: self.clone(),
                name: name.clone(),
                info,
                queue: None,
            };
            remote.register_as(name, Arc::new(tool));
        }
        remote
    }

    /// A tool a plan declares (`tools:`), whose calls are jobs on `queue` for workers that
    /// publish nothing: the job's name is the tool's, its data as every call's.
    pub fn declared(self: &Arc<Self>, info: ToolInfo, queue: &str) -> Arc<dyn Tool> {
        Arc::new(RemoteTool {
            dispatcher: self.clone(),
            name: info.name.clone(),
            info,
            queue: Some(queue.to_owned()),
        })
    }

    /// The producer of queue `name`, made (with its event listener) on first use.
    async fn producer(self: &Arc<Self>, name: &str) -> Result<Arc<bullmq::Queue>, QueueError> {
        let mut producers = self.producers.lock().await;
        if let Some(producer) = producers.get(name) {
            return Ok(producer.clone());
        }
        let connection = self.base.connection();
        // Events are read from the last one there now: none of a job added later is missed,
        // which reading from "$" once the listener happens to start would not promise.
        let mut redis = self.base.redis.clone();
        let events_key = format!("{PREFIX}:{name}:events");
        let last: Vec<(String, Vec<(String, String)>)> = redis::cmd("XREVRANGE")
            .arg(&events_key)
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(1)
            .query_async(&mut redis)
            .await
            .map_err(|e| self.base.error(e))?;
        let from = last
            .first()
            .map_or_else(|| "0".to_owned(), |(id, _)| id.clone());
        let events = bullmq::QueueEvents::with_options(
            name,
            QueueEventsOptions {
                connection: connection.clone(),
                prefix: PREFIX.to_owned(),
                blocking_timeout: 2000,
                last_event_id: Some(from),
                autorun: true,
            },
        )
        .await
        .map_err(|e| self.base.error(e))?;
        let producer = bullmq::Queue::with_options(
            name,
            QueueOptions {
                connection,
                prefix: PREFIX.to_owned(),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| self.base.error(e))?;
        let producer = Arc::new(producer);
        producers.insert(name.to_owned(), producer.clone());
        let this = Arc::downgrade(self);
        tokio::spawn(async move {
            while let Some(entry) = events.next_event().await {
                let Some(this) = this.upgrade() else { break };
                this.heard(entry.event);
            }
            events.close().await;
        });
        Ok(producer)
    }

    /// An event of a queue the calls went to.
    fn heard(self: &Arc<Self>, event: QueueEvent) {
        match event {
            QueueEvent::Completed {
                job_id,
                return_value,
                ..
            } => self.deliver(&job_id, returned(&return_value)),
            QueueEvent::Failed {
                job_id,
                failed_reason,
                ..
            } => self.deliver(&job_id, Err(failure(&failed_reason))),
            // BullMQ's `job.updateProgress(value)`, from a worker in any language: a number is
            // how far it got; an object may say `progress`, `total` and `message`; anything
            // else is a message.
            QueueEvent::Progress { job_id, data } => {
                let progress = lock(&self.waiting)
                    .get(&job_id)
                    .and_then(|waiting| waiting.progress.clone());
                if let Some(progress) = progress {
                    progress.report(progress_of(&data));
                }
            }
            QueueEvent::Active { job_id, .. } => {
                if let Some(waiting) = lock(&self.waiting).get_mut(&job_id) {
                    waiting.active = true;
                    waiting.checked = Instant::now();
                }
            }
            // The job was there already (an earlier coordinator of this run added it): it may
            // have finished before anyone listened.
            QueueEvent::Duplicated { job_id } => {
                let this = self.clone();
                tokio::spawn(async move { this.look_up(&job_id).await });
            }
            _ => {}
        }
    }

    /// Hands a result to the call waiting for it; a result nobody waits for is dropped.
    fn deliver(&self, job_id: &str, outcome: Outcome) {
        if let Some(waiting) = lock(&self.waiting).remove(job_id) {
            let _ = waiting.result.send(outcome);
        }
    }

    /// Looks a waiting call's job up in Redis: delivers its result if it finished, adds it
    /// again if Redis no longer has it.
    async fn look_up(self: &Arc<Self>, job_id: &str) {
        let Some(queue) = lock(&self.waiting).get_mut(job_id).map(|w| {
            w.checked = Instant::now();
            w.queue.clone()
        }) else {
            return;
        };
        let Ok(producer) = self.producer(&queue).await else {
            return;
        };
        match producer.get_job(job_id).await {
            Ok(None) => {
                let again = lock(&self.waiting)
                    .get(job_id)
                    .map(|w| (w.tool.clone(), w.data.clone()));
                if let Some((tool, data)) = again {
                    let _ = add(&producer, &tool, job_id, &data).await;
                }
            }
            Ok(Some(job)) => {
                if job.finished_on().is_none() {
                    if job.processed_on().is_some()
                        && let Some(waiting) = lock(&self.waiting).get_mut(job_id)
                    {
                        waiting.active = true;
                    }
                    return;
                }
                let outcome = if job.failed_reason().is_empty() {
                    returned(job.returnvalue())
                } else {
                    Err(failure(job.failed_reason()))
                };
                self.deliver(job_id, outcome);
            }
            Err(_) => {}
        }
    }

    /// The queue for a call of `tool` now, or why there is none.
    fn route(&self, tool: &str) -> Route {
        registry::route(&lock(&self.workers), tool, self.base.name())
    }

    fn notify(&self, notice: DispatchNotice) {
        if let Some(to) = &self.options.notices {
            let _ = to.send(notice);
        }
    }

    /// Redis is gone: every waiting call fails (retryably) and the run is told to stop.
    fn give_up(&self, why: &str) {
        self.lost.cancel();
        let waiting: Vec<_> = lock(&self.waiting).drain().collect();
        for (_, waiter) in waiting {
            let _ = waiter
                .result
                .send(Err(unavailable(format!("the queue was lost: {why}"))));
        }
    }
}

/// Watches Redis while the dispatcher lives: its health (a Redis gone for longer than the
/// outage gives the run up), the registry of workers, calls not heard of for a while, and
/// calls no worker took within the queue timeout.
async fn watch(dispatcher: Weak<Dispatcher>) {
    let mut failing_since: Option<Instant> = None;
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let Some(this) = dispatcher.upgrade() else {
            return;
        };
        if this.lost.is_cancelled() {
            return;
        }
        let mut redis = this.base.redis.clone();
        match registry::live_workers(&mut redis).await {
            Ok(workers) => {
                failing_since = None;
                *lock(&this.workers) = workers;
                // Tools whose calls were said to wait, and have a worker now.
                let told: Vec<String> = lock(&this.told).iter().cloned().collect();
                for tool in told {
                    if let Route::Queue(queue) = this.route(&tool) {
                        lock(&this.told).remove(&tool);
                        this.notify(DispatchNotice::WorkerFound { tool, queue });
                    }
                }
            }
            Err(error) => {
                let since = *failing_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= this.options.outage {
                    this.give_up(&error.to_string());
                    return;
                }
                continue;
            }
        }
        let now = Instant::now();
        let mut look = Vec::new();
        let mut expired = Vec::new();
        for (job_id, waiting) in lock(&this.waiting).iter() {
            if let Some(limit) = this.options.queue_timeout
                && !waiting.active
                && now.duration_since(waiting.added) >= limit
            {
                expired.push((job_id.clone(), waiting.queue.clone(), waiting.tool.clone()));
            } else if now.duration_since(waiting.checked) >= LOOK_AFTER && look.len() < 256 {
                look.push(job_id.clone());
            }
        }
        for job_id in look {
            this.look_up(&job_id).await;
        }
        for (job_id, queue, tool) in expired {
            expire(&this, &job_id, &queue, &tool).await;
        }
    }
}

/// Removes a job no worker has taken yet; whether it did.
async fn withdraw(producer: &bullmq::Queue, job_id: &str) -> bool {
    matches!(
        producer.get_job_state(job_id).await,
        Ok(bullmq::JobState::Waiting | bullmq::JobState::Prioritized | bullmq::JobState::Delayed)
    ) && producer.remove(job_id).await.unwrap_or(false)
}

/// A call no worker took within the queue timeout: its job is removed (so no worker runs it
/// later) and the call fails. A job a worker took meanwhile is left to finish.
async fn expire(this: &Arc<Dispatcher>, job_id: &str, queue: &str, tool: &str) {
    let Ok(producer) = this.producer(queue).await else {
        return;
    };
    if withdraw(&producer, job_id).await {
        let limit = this.options.queue_timeout.unwrap_or_default();
        this.deliver(
            job_id,
            Err(ToolError::new(
                codes::E_QUEUE_TIMEOUT,
                format!(
                    "no worker took the call of `{tool}` within {}, the run's queue timeout",
                    humanize(limit)
                ),
            )),
        );
    }
}

fn humanize(d: Duration) -> String {
    if d.as_millis().is_multiple_of(1000) {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}

/// Adds a call's job; a job of that id already there is left as it is (BullMQ's own rule).
async fn add(
    producer: &bullmq::Queue,
    tool: &str,
    job_id: &str,
    data: &Value,
) -> Result<(), bullmq::Error> {
    producer
        .add(tool, data)
        .job_id(job_id)
        // One job per attempt: plan-cli's retry policy decides on another.
        .attempts(1)
        // Finished jobs stay a day: a resumed coordinator finds the results of calls an
        // earlier one made, and a dashboard shows them.
        .remove_on_complete(keep_a_day())
        .remove_on_fail(keep_a_day())
        .await
        .map(|_| ())
}

fn keep_a_day() -> bullmq::types::RemoveOnFinish {
    bullmq::types::RemoveOnFinish::Options(bullmq::types::KeepJobs {
        age: Some(24 * 3600),
        count: None,
        limit: None,
    })
}

/// A tool whose calls a worker makes.
pub struct RemoteTool {
    dispatcher: Arc<Dispatcher>,
    /// The name workers know the tool by (the job's name).
    name: String,
    info: ToolInfo,
    /// The queue its jobs go to, when the plan declares it there (else the queue of the
    /// workers that publish it).
    queue: Option<String>,
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
        // One job per attempt: a retry is a new job, a resumed coordinator's add of the same
        // attempt is not. A call made again with answers to the questions it asked is a new
        // job too (`@N`, the answers it carries): the job that asked has ended asking. BullMQ
        // refuses `:` in ids.
        let answered = ctx
            .answers
            .as_deref()
            .map_or(String::new(), |answers| format!("@{}", answers.len()));
        let job_id =
            format!("{}#{}{answered}", ctx.idempotency_key(), ctx.attempt).replace(':', "_");
        let queue = match &self.queue {
            Some(queue) => queue.clone(),
            None => self.wait_for_worker(&ctx).await?,
        };
        // Milliseconds since the epoch, null for none: a worker does not start a call whose
        // deadline has passed, and bounds the call by it.
        let deadline = ctx.deadline.map(|at| {
            at.duration_since(std::time::SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64)
        });
        let mut data = json!({
            "tool": self.name,
            "args": args,
            "run_id": &*ctx.run_id,
            "step_id": &*ctx.step_id,
            "attempt": ctx.attempt,
            "deadline": deadline,
        });
        // A run under a policy keeps its programs in its work folder, on a worker too.
        if let Some(dir) = &ctx.confined_to {
            data["confined_to"] = Value::from(dir.display().to_string());
        }
        // A task's calls work in its worktree: a worker on the same machine finds it.
        if let Some(dir) = &ctx.working_dir {
            data["working_dir"] = Value::from(dir.display().to_string());
        }
        // Answers a person gave to the questions the call asked before (an MCP server's
        // elicitations): the worker's tool gives them when it is asked again.
        if let Some(answers) = &ctx.answers {
            data["answers"] = serde_json::to_value(answers).unwrap_or_default();
        }
        if let Some(secret) = &dispatcher.options.secret {
            secret.sign(&self.name, &job_id, &mut data);
        }
        // No worker would be handed it (`MAX_JOB_DATA_BYTES`): said here, not waited for.
        let length = json_length(&data);
        if length > crate::MAX_JOB_DATA_BYTES {
            return Err(ToolError::new(
                codes::E_ARGS_INVALID,
                format!(
                    "the call's job would hold {length} bytes, past the queue's bound of {} bytes: a tool on a worker takes smaller arguments",
                    crate::MAX_JOB_DATA_BYTES
                ),
            ));
        }
        let producer = dispatcher
            .producer(&queue)
            .await
            .map_err(|e| unavailable(e.message))?;
        let receiver = {
            let (sender, receiver) = oneshot::channel();
            let now = Instant::now();
            lock(&dispatcher.waiting).insert(
                job_id.clone(),
                Waiting {
                    result: sender,
                    queue,
                    tool: self.name.clone(),
                    data: data.clone(),
                    added: now,
                    checked: now,
                    active: false,
                    progress: ctx.progress.clone(),
                },
            );
            receiver
        };
        if let Err(error) = add(&producer, &self.name, &job_id, &data).await {
            lock(&dispatcher.waiting).remove(&job_id);
            return Err(unavailable(format!("cannot add the call's job: {error}")));
        }
        tokio::select! {
            outcome = receiver => outcome.unwrap_or_else(|_| Err(unavailable("the queue was lost".to_owned()))),
            () = ctx.cancel.cancelled() => {
                lock(&dispatcher.waiting).remove(&job_id);
                // A job no worker has taken is removed, so that no worker started later runs
                // a call of a cancelled run (`resume` adds it again). A job a worker is running
                // stays: a resumed run adds it again under the same id and gets its result.
                withdraw(&producer, &job_id).await;
                Err(ToolError::new(codes::E_CANCELLED, "the call was cancelled while a worker ran it"))
            }
        }
    }
}

/// The length of `value`'s JSON text, counted without writing it anywhere.
fn json_length(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing into a counter cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

impl RemoteTool {
    /// The queue this call goes to; waits (saying so once) while no queue has a worker for
    /// the tool, up to the queue timeout.
    async fn wait_for_worker(&self, ctx: &ToolContext) -> Result<String, ToolError> {
        let dispatcher = &self.dispatcher;
        let started = Instant::now();
        loop {
            match dispatcher.route(&self.name) {
                Route::Queue(queue) => return Ok(queue),
                Route::Unpublished(queue) => {
                    if lock(&dispatcher.told).insert(self.name.clone()) {
                        dispatcher.notify(DispatchNotice::WaitingForWorker {
                            tool: self.name.clone(),
                            why: format!(
                                "no worker has published its tools (plan-cli workers do); the \
                                 job waits in queue `{queue}` for any worker (start one with \
                                 `plan-cli worker --queue URL`)"
                            ),
                        });
                    }
                    return Ok(queue);
                }
                Route::Nobody(why) => {
                    if lock(&dispatcher.told).insert(self.name.clone()) {
                        dispatcher.notify(DispatchNotice::WaitingForWorker {
                            tool: self.name.clone(),
                            why: why.clone(),
                        });
                    }
                    if let Some(limit) = dispatcher.options.queue_timeout
                        && started.elapsed() >= limit
                    {
                        return Err(ToolError::new(
                            codes::E_QUEUE_TIMEOUT,
                            format!(
                                "no worker for `{}` within {}, the run's queue timeout: {why}",
                                self.name,
                                humanize(limit)
                            ),
                        ));
                    }
                }
            }
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(250)) => {}
                () = ctx.cancel.cancelled() => {
                    return Err(ToolError::new(codes::E_CANCELLED, "the call was cancelled while it waited for a worker"));
                }
                () = dispatcher.lost.cancelled() => {
                    return Err(unavailable("the queue was lost".to_owned()));
                }
            }
        }
    }
}

/// A worker's `job.updateProgress` value as a progress report.
fn progress_of(data: &Value) -> plan_types::ProgressReport {
    let text = |value: &Value| match value {
        Value::String(text) => Some(text.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    };
    match data {
        Value::Number(n) => plan_types::ProgressReport {
            progress: n.as_f64().unwrap_or_default(),
            total: None,
            message: None,
        },
        Value::Object(fields) if fields.get("progress").is_some_and(Value::is_number) => {
            plan_types::ProgressReport {
                progress: fields["progress"].as_f64().unwrap_or_default(),
                total: fields.get("total").and_then(Value::as_f64),
                message: fields.get("message").and_then(text),
            }
        }
        other => plan_types::ProgressReport {
            progress: 0.0,
            total: None,
            message: text(other),
        },
    }
}

fn unavailable(message: String) -> ToolError {
    ToolError::retryable(codes::E_QUEUE_UNAVAILABLE, message)
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// A job's return value (JSON text) as the call's result.
fn returned(text: &str) -> Outcome {
    if text.is_empty() {
        return Ok(Value::Null);
    }
    plan_types::json::from_str(text).map_err(|e| {
        ToolError::new(
            codes::E_TOOL,
            format!("a worker returned a value that is not JSON: {e}"),
        )
    })
}

/// A job's failure as the call's error. plan-cli workers write the error as JSON (`{"code",
/// "message", "retryable", "retry_after_ms", "details"}`) so nothing is lost; any other
/// worker's reason is the message of an `E_TOOL` error.
pub(crate) fn failure(reason: &str) -> ToolError {
    if let Ok(value) = serde_json::from_str::<Value>(reason)
        && let (Some(code), Some(message)) = (value["code"].as_str(), value["message"].as_str())
    {
        let mut error = ToolError::new(ErrorCode::from(code), message);
        error.retryable = value["retryable"].as_bool().unwrap_or(false);
        error.retry_after = value["retry_after_ms"].as_u64().map(Duration::from_millis);
        if !value["details"].is_null() {
            error = error.with_details(value["details"].clone());
        }
        return error;
    }
    // BullMQ's own words when a job's worker died once too often.
    if reason.contains("stalled more than allowable limit") {
        return ToolError::retryable(
            codes::E_WORKER_LOST,
            format!("the workers running the call died: {reason}"),
        );
    }
    ToolError::new(codes::E_TOOL, reason)
}

/// How a plan-cli worker writes a failure (read back by [`failure`]).
pub(crate) fn failure_text(error: &ToolError) -> String {
    json!({
        "code": error.code,
        "message": error.message,
        "retryable": error.retryable,
        "retry_after_ms": error.retry_after.map(|d| d.as_millis() as u64),
        "details": error.details,
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_survive_the_wire() {
        let mut error =
            ToolError::retryable("E_HTTP_STATUS", "503").with_details(json!({"status": 503}));
        error.retry_after = Some(Duration::from_millis(1500));
        assert_eq!(failure(&failure_text(&error)), error);
        // A Node or Python worker's `throw new Error("boom")`.
        let other = failure("boom");
        assert_eq!(
            (other.code.as_str(), other.message.as_str()),
            ("E_TOOL", "boom")
        );
        assert!(!other.retryable);
        assert!(failure("job stalled more than allowable limit").retryable);
    }

    #[test]
    fn a_workers_progress_is_read_whatever_its_shape() {
        let report = progress_of(&json!(40));
        assert_eq!(
            (report.progress, report.total, report.message),
            (40.0, None, None)
        );
        let report = progress_of(&json!({"progress": 2, "total": 5, "message": "two of five"}));
        assert_eq!(
            (report.progress, report.total, report.message.as_deref()),
            (2.0, Some(5.0), Some("two of five"))
        );
        let report = progress_of(&json!("halfway"));
        assert_eq!(report.message.as_deref(), Some("halfway"));
        let report = progress_of(&json!({"step": "copy"}));
        assert_eq!(report.message.as_deref(), Some("{\"step\":\"copy\"}"));
    }

    #[test]
    fn return_values_are_json() {
        assert_eq!(returned(r#"{"a":[1,2]}"#), Ok(json!({"a": [1, 2]})));
        assert_eq!(returned(""), Ok(Value::Null));
        assert_eq!(returned("nope").unwrap_err().code, "E_TOOL");
    }
}
