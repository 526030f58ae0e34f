//! Tool calls as BullMQ jobs, so that workers on other machines, in any language BullMQ
//! serves (Node, Python, Elixir, PHP, Rust), run a plan's steps.
//!
//! The coordinator keeps the ledger and the scheduling; only tool calls travel. Each call of a
//! [`RemoteTool`] is one job on a BullMQ queue (`steps` by default, keys `bull:steps:*`): job
//! name the tool, job id the call's idempotency key `RUN/STEP#ATTEMPT`, data `{"tool", "args",
//! "run_id", "step_id", "attempt", "deadline"}`. The job's return value is the call's result;
//! its failure the call's error. Because the job id is the idempotency key, a resumed
//! coordinator that adds a call again gets the job an earlier one added (BullMQ keeps one job
//! per id), and its result when it had finished.
//!
//! [`work`] runs a BullMQ worker (the `bullmq-official` crate, BullMQ's own Lua scripts): lock
//! renewal while a call runs, stalled-job recovery when a worker dies mid-call, drain on stop.
//!
//! Workers publish the tools they serve in the hash [`REGISTRY_KEY`] ([`WorkerEntry`]), so a
//! coordinator can validate plans that name tools only workers have, and send a job for a tool
//! only to a queue every one of whose workers serves it.

mod coordinator;
mod registry;
mod signing;
mod worker;

use std::time::Duration;

pub use coordinator::{DEFAULT_OUTAGE, DispatchNotice, DispatchOptions, Dispatcher, RemoteTool};
pub use registry::{PublishedTool, REGISTRY_KEY, STALE_AFTER, WorkerEntry};
pub use signing::{QueueSecret, SIGNATURE_FIELD, Unsigned, canonical};
pub use worker::{WorkerNotice, WorkerOptions, WorkerStats, work};

/// The queue tool calls go to when none is named.
pub const DEFAULT_QUEUE: &str = "steps";

/// The most a job's data may hold (its JSON text): 16 MiB. A coordinator adds no larger job
/// (the call fails with `E_ARGS_INVALID`), and a worker is never handed a larger one: the
/// patched scripts of the vendored BullMQ (vendor/README.md) give it the job's length instead,
/// so that a job written straight into Redis cannot make a worker read it all before refusing.
pub const MAX_JOB_DATA_BYTES: usize = 16 << 20;

/// BullMQ's default key prefix: a queue `steps` lives in the keys `bull:steps:*`.
pub const PREFIX: &str = "bull";

/// The queue could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("E_QUEUE_UNAVAILABLE: the queue at {url} cannot be used: {message}")]
pub struct QueueError {
    /// The queue's address (without a password).
    pub url: String,
    /// What went wrong.
    pub message: String,
}

/// A BullMQ queue on a Redis: where calls go, and where workers take them from.
#[derive(Clone)]
pub struct Queue {
    /// The address as given, password included: BullMQ's connections need it.
    url: String,
    /// The address as shown in messages.
    shown: String,
    name: String,
    /// For what is not BullMQ's: the tool registry, and the coordinator's health check.
    redis: redis::aio::ConnectionManager,
}

impl Queue {
    /// Connects to the queue `name` at `url` (`redis://HOST:PORT[/DB]`); fails at once, with
    /// `E_QUEUE_UNAVAILABLE`, if Redis does not answer or the name cannot be a queue's.
    pub async fn connect(url: &str, name: &str) -> Result<Queue, QueueError> {
        let shown = redact_url(url);
        let error = |message: String| QueueError {
            url: shown.clone(),
            message,
        };
        if name.is_empty() || name.contains(':') {
            return Err(error(format!(
                "`{name}` cannot be a queue's name (it must be non-empty, without `:`)"
            )));
        }
        let client = redis::Client::open(url).map_err(|e| error(e.to_string()))?;
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(3)))
            .set_response_timeout(Some(Duration::from_secs(5)))
            .set_number_of_retries(1);
        let mut redis = client
            .get_connection_manager_with_config(config)
            .await
            .map_err(|e| error(e.to_string()))?;
        let _: String = redis::cmd("PING")
            .query_async(&mut redis)
            .await
            .map_err(|e| error(e.to_string()))?;
        Ok(Queue {
            url: url.to_owned(),
            shown,
            name: name.to_owned(),
            redis,
        })
    }

    /// The tools the live workers on this Redis publish, by name (whatever queue they work
    /// on), as a coordinator would offer them.
    pub async fn published_tools(
        &self,
    ) -> Result<std::collections::BTreeMap<String, plan_ports::ToolInfo>, QueueError> {
        let workers = registry::live_workers(&mut self.redis.clone())
            .await
            .map_err(|e| self.error(e))?;
        Ok(registry::tool_infos(&workers))
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// BullMQ's connection options for this Redis.
    fn connection(&self) -> bullmq::options::RedisConnectionOptions {
        bullmq::options::RedisConnectionOptions {
            url: self.url.clone(),
            ..Default::default()
        }
    }

    fn error(&self, message: impl std::fmt::Display) -> QueueError {
        QueueError {
            url: self.shown.clone(),
            message: message.to_string(),
        }
    }
}

/// Milliseconds since the epoch, as BullMQ and the registry count time.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// `redis://user:secret@host` → `redis://user:***@host`: errors never show a password.
fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let credentials = &url[scheme + 3..at];
            match credentials.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn urls_lose_their_passwords() {
        assert_eq!(
            super::redact_url("redis://u:pw@h:6379/0"),
            "redis://u:***@h:6379/0"
        );
        assert_eq!(super::redact_url("redis://h:6379"), "redis://h:6379");
    }

    /// The bound the patched fetch scripts hold jobs to is this crate's.
    #[test]
    fn the_fetch_scripts_bound_job_data_as_the_crate_says() {
        let commands = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../vendor/bullmq-official/src/commands"
        );
        for script in ["moveToActive-11", "moveToFinished-14", "moveToDelayed-11"] {
            let text = std::fs::read_to_string(format!("{commands}/{script}.lua")).unwrap();
            assert!(
                text.contains(&format!(
                    "if dataLength > {} then",
                    super::MAX_JOB_DATA_BYTES
                )) && text.contains("length + string.len(field) > 1048576"),
                "{script}"
            );
            assert!(
                text.contains("return {jobFieldsBounded(jobKey), jobId, 0, 0}"),
                "{script}"
            );
        }
    }
}
