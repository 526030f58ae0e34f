//! A worker: a BullMQ worker on the queue that calls its own tools, and publishes them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use bullmq::Job;
use plan_ports::{Registry, ToolContext, ToolError, codes};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::coordinator::failure_text;
use crate::registry::{self, PublishedTool, REFRESH_EVERY, WorkerEntry};
use crate::{PREFIX, Queue, QueueError};

/// How a worker works.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// Its id: in the registry of tools, and as the BullMQ worker's name on the jobs it runs.
    pub id: String,
    /// The machine it runs on, as the registry shows it.
    pub host: String,
    /// Most calls at once.
    pub concurrency: usize,
    /// How long a job stays locked to this worker without a renewal (the worker renews it at
    /// half that while the call runs). A worker that died holds its jobs this long, then
    /// another worker's stalled-job check hands them on.
    pub lock_duration: Duration,
    /// How long a drain (on `stop`) waits for the calls in hand before it leaves them to the
    /// stalled-job check.
    pub drain_timeout: Duration,
    /// Where the worker says what went wrong while it goes on; the library prints nothing.
    pub notices: Option<tokio::sync::mpsc::UnboundedSender<WorkerNotice>>,
    /// Runs only jobs signed with this secret (`PLAN_QUEUE_SECRET`); others fail, uncalled.
    pub secret: Option<crate::QueueSecret>,
}

/// Something that went wrong while a worker goes on working.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkerNotice {
    /// Something BullMQ's worker reported (a lost connection, say); it goes on.
    #[error("worker {worker}: {message}")]
    Trouble {
        /// The worker.
        worker: String,
        /// What went wrong.
        message: String,
    },
    /// The worker took a job a dead worker held.
    #[error("worker {worker}: took over job {job} from a worker that stopped answering")]
    TookOver {
        /// The worker.
        worker: String,
        /// The job's id.
        job: String,
    },
}

/// What a worker did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Calls it made (whatever their outcome).
    pub done: u64,
    /// Of those, calls a worker had started before and died in.
    pub claimed: u64,
}

/// Works until `stop` is cancelled, then drains: takes nothing new, finishes what it holds (up
/// to the drain timeout), withdraws its tools and returns.
pub async fn work(
    queue: Queue,
    tools: Registry,
    options: WorkerOptions,
    stop: CancellationToken,
) -> Result<WorkerStats, QueueError> {
    // Each tool's argument schema, compiled once: a job's arguments are checked as a run
    // checks a call's. A schema that does not compile checks nothing, and is said.
    let mut schemas = Schemas::new();
    for name in tools.names() {
        let Some(tool) = tools.get(&name) else {
            continue;
        };
        match plan_ports::schema::compile_schema(&tool.info().input_schema) {
            Ok(Some(schema)) => {
                schemas.insert(name, schema);
            }
            Ok(None) => {}
            Err(error) => notify(
                options.notices.as_ref(),
                WorkerNotice::Trouble {
                    worker: options.id.clone(),
                    message: format!(
                        "the schema of `{name}` does not compile, so its jobs' arguments are not checked: {error}"
                    ),
                },
            ),
        }
    }
    let schemas = Arc::new(schemas);
    let tools = Arc::new(tools);
    let done = Arc::new(AtomicU64::new(0));
    let claimed = Arc::new(AtomicU64::new(0));
    let processor = {
        let (tools, done, claimed) = (tools.clone(), done.clone(), claimed.clone());
        let (id, notices) = (options.id.clone(), options.notices.clone());
        let secret = options.secret.clone();
        move |job: Job, token: bullmq::worker::CancellationToken| {
            let (tools, done, claimed) = (tools.clone(), done.clone(), claimed.clone());
            let schemas = schemas.clone();
            let (id, notices) = (id.clone(), notices.clone());
            let secret = secret.clone();
            async move {
                // A job past the bound comes without its data (the patched fetch scripts):
                // refused uncalled, whoever wrote it.
                if let Some(length) = oversized(job.data()) {
                    let error = ToolError::new(
                        codes::E_ARGS_INVALID,
                        format!(
                            "worker {id} refused job {}: its fields hold {length} bytes, past the bound of {} bytes of data (1048576 of any other field, 64 fields)",
                            job.id(),
                            crate::MAX_JOB_DATA_BYTES
                        ),
                    );
                    return Err(bullmq::Error::Unrecoverable(failure_text(&error)));
                }
                // With a secret, a job not signed with it (added by whoever can write to the
                // Redis, or altered there) fails uncalled.
                if let Some(secret) = &secret
                    && let Err(refused) = secret.verify(job.name(), job.id(), job.data())
                {
                    let error = ToolError::new(
                        codes::E_TOOL,
                        format!("worker {id} refused job {}: {refused}", job.id()),
                    );
                    return Err(bullmq::Error::Unrecoverable(failure_text(&error)));
                }
                if job.attempts_started() > 1 {
                    claimed.fetch_add(1, Ordering::Relaxed);
                    notify(
                        notices.as_ref(),
                        WorkerNotice::TookOver {
                            worker: id.clone(),
                            job: job.id().to_owned(),
                        },
                    );
                }
                let outcome = call(&tools, &schemas, &id, &job, token).await;
                done.fetch_add(1, Ordering::Relaxed);
                // An unrecoverable failure: BullMQ does not retry it, plan-cli's policy does.
                outcome.map_err(|error| bullmq::Error::Unrecoverable(failure_text(&error)))
            }
        }
    };
    let lock_ms = options.lock_duration.as_millis().max(1000) as u64;
    let worker = bullmq::Worker::with_options(
        queue.name(),
        processor,
        bullmq::WorkerOptions {
            connection: queue.connection(),
            prefix: PREFIX.to_owned(),
            name: Some(options.id.clone()),
            concurrency: options.concurrency.max(1),
            lock_duration: lock_ms,
            // Other workers' dead jobs are looked for as often as a lock lasts.
            stalled_interval: lock_ms,
            ..Default::default()
        },
    )
    .await
    .map_err(|e| queue.error(e))?;
    let entry = WorkerEntry {
        queue: queue.name().to_owned(),
        tools: tools
            .names()
            .into_iter()
            .filter_map(|name| tools.get(&name).map(|tool| (name, tool.info())))
            .map(|(name, info)| PublishedTool {
                name,
                description: info.description,
                input_schema: info.input_schema,
                risk: info.risk,
            })
            .collect(),
        seen_ms: crate::now_ms(),
        host: options.host.clone(),
    };
    let mut redis = queue.redis.clone();
    registry::publish(&mut redis, &options.id, &entry)
        .await
        .map_err(|e| queue.error(format!("cannot publish the worker's tools: {e}")))?;
    let reports = async {
        while let Some(event) = worker.next_event().await {
            if let bullmq::worker::WorkerEvent::Error(message) = event {
                notify(
                    options.notices.as_ref(),
                    WorkerNotice::Trouble {
                        worker: options.id.clone(),
                        message,
                    },
                );
            }
        }
    };
    let refresh = async {
        loop {
            tokio::time::sleep(REFRESH_EVERY).await;
            let entry = WorkerEntry {
                seen_ms: crate::now_ms(),
                ..entry.clone()
            };
            let _ = registry::publish(&mut redis.clone(), &options.id, &entry).await;
        }
    };
    tokio::select! {
        () = stop.cancelled() => {}
        () = reports => {}
        () = refresh => {}
    }
    // Withdrawn first: no coordinator sends this worker's queue more calls on its account.
    let _ = registry::withdraw(&mut redis, &options.id).await;
    worker
        .close(options.drain_timeout.as_millis() as u64)
        .await
        .map_err(|e| queue.error(e))?;
    Ok(WorkerStats {
        done: done.load(Ordering::Relaxed),
        claimed: claimed.load(Ordering::Relaxed),
    })
}

/// The length of a job's fields that the fetch scripts withheld for their size (their marker
/// `{"__oversized__": LENGTH}` as its data); a job whose data is that marker and nothing else.
fn oversized(data: &Value) -> Option<u64> {
    let fields = data.as_object()?;
    match (fields.len(), fields.get("__oversized__")) {
        (1, Some(length)) => length.as_u64(),
        _ => None,
    }
}

fn notify(to: Option<&tokio::sync::mpsc::UnboundedSender<WorkerNotice>>, notice: WorkerNotice) {
    if let Some(to) = to {
        // A caller that stopped listening does not want to hear it.
        let _ = to.send(notice);
    }
}

/// The tools' compiled argument schemas, by name (tools that take any object have none).
type Schemas = std::collections::HashMap<String, Arc<plan_ports::schema::Validator>>;

/// Makes the call a job asks for. Its data: `{"tool", "args", "run_id", "step_id",
/// "attempt", "deadline", "working_dir", "confined_to", "answers"}`; the tool defaults to the job's name, so a job any
/// BullMQ producer adds with `{"args": …}` runs too; `args` is required.
async fn call(
    tools: &Registry,
    schemas: &Schemas,
    worker: &str,
    job: &Job,
    token: bullmq::worker::CancellationToken,
) -> Result<Value, ToolError> {
    let data = job.data();
    let name = data["tool"].as_str().unwrap_or(job.name());
    let Some(tool) = tools.get(name) else {
        return Err(ToolError::new(
            codes::E_TOOL,
            format!("worker {worker} has no tool `{name}`"),
        ));
    };
    // A job without arguments is a producer's mistake, not a call with none: it is refused
    // rather than run with `{}`.
    let args = match data.get("args") {
        Some(args @ Value::Object(_)) => args.clone(),
        None | Some(Value::Null) => {
            return Err(ToolError::invalid_args(format!(
                "job {} has no `args`: a job's data is {{\"tool\": NAME, \"args\": {{...}}}} (`{{}}` for a call without arguments)",
                job.id()
            )));
        }
        Some(other) => {
            return Err(ToolError::invalid_args(format!(
                "the job's `args` must be an object, not {other}"
            )));
        }
    };
    if let Some(schema) = schemas.get(name)
        && let Err(error) = plan_ports::schema::check(schema, name, &args)
    {
        let mut refused = ToolError::new(error.code, error.message);
        if let Some(details) = error.details {
            refused = refused.with_details(details);
        }
        return Err(refused);
    }
    let deadline = data["deadline"]
        .as_u64()
        .filter(|&ms| ms > 0)
        .map(|ms| SystemTime::UNIX_EPOCH + Duration::from_millis(ms));
    let left = deadline.map(|at| at.duration_since(SystemTime::now()).unwrap_or_default());
    if left == Some(Duration::ZERO) {
        return Err(ToolError::retryable(
            codes::E_TIMEOUT,
            "the step's deadline passed before a worker could start it",
        ));
    }
    let working_dir = match data["working_dir"].as_str() {
        None | Some("") => None,
        Some(dir) if std::path::Path::new(dir).is_dir() => {
            Some(Arc::from(std::path::Path::new(dir)))
        }
        Some(dir) => {
            return Err(ToolError::new(
                codes::E_TOOL,
                format!(
                    "worker {worker} cannot see the folder the call works in ({dir}): a task's calls need a worker on the machine that holds the repository"
                ),
            ));
        }
    };
    // A run under a policy keeps its programs in its work folder on a worker too: a tool
    // that runs programs refuses any folder outside it, and every folder when it cannot see
    // it (other tools do not care).
    let confined_to = data["confined_to"]
        .as_str()
        .filter(|dir| !dir.is_empty())
        .map(|dir| Arc::from(std::path::Path::new(dir)));
    // Answers a person gave the call's earlier questions: a job whose `answers` do not read
    // is refused, not run as if it had none (its server would ask the person again).
    let answers = match data.get("answers") {
        None | Some(Value::Null) => None,
        Some(answers) => {
            let answers: Vec<plan_ports::Answer> = serde_json::from_value(answers.clone())
                .map_err(|error| {
                    ToolError::invalid_args(format!(
                        "job {}'s `answers` are not [{{\"question\": TEXT, \"answer\": {{...}}}}]: {error}",
                        job.id()
                    ))
                })?;
            (!answers.is_empty()).then(|| Arc::from(answers))
        }
    };
    let cancel = CancellationToken::new();
    let ctx = ToolContext {
        run_id: Arc::from(data["run_id"].as_str().unwrap_or_default()),
        step_id: Arc::from(data["step_id"].as_str().unwrap_or(job.id())),
        attempt: data["attempt"].as_u64().map_or(1, |n| n as u32),
        cancel: cancel.clone(),
        progress: None,
        deadline,
        // A worker's programs print to nobody: results carry their output.
        output: None,
        working_dir,
        confined_to,
        answers,
    };
    let call = async {
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
        outcome = call => outcome,
        // BullMQ cancels a job its worker gave up (a lock lost to another worker).
        () = token.cancelled() => {
            cancel.cancel();
            Err(ToolError::new(codes::E_CANCELLED, "the worker gave the job up"))
        }
    }
}
