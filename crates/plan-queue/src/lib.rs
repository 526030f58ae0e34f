//! Redis-backed workers (the map-style executor's queue, on Redis Streams with a consumer group).
//!
//! The coordinator keeps the ledger and the scheduling; only tool calls travel. Each call of a
//! [`RemoteTool`] is one entry on the steps stream (`plan:steps` by default) with its resolved
//! arguments, its idempotency key `RUN/STEP#ATTEMPT` and the stream its result goes to
//! (`plan:results:RUN`). [`work`] runs a worker: a consumer in the group `plan-workers` that
//! calls its own tools, writes the result, and only then acknowledges the entry.
//!
//! Delivery is at least once: an entry a dead worker held is claimed by another (`XAUTOCLAIM`)
//! once it has been idle for the visibility timeout, and a worker still busy with an entry keeps
//! it by refreshing it. The coordinator takes the first result of each call and ignores the
//! rest, so the ledger gets one result per step.

mod coordinator;
mod worker;

use std::time::Duration;

pub use coordinator::{DEFAULT_OUTAGE, Dispatcher, RemoteTool};
pub use worker::{WorkerNotice, WorkerOptions, WorkerStats, work};

/// The stream of steps when none is named.
pub const DEFAULT_STREAM: &str = "plan:steps";

/// The consumer group every worker joins.
pub const GROUP: &str = "plan-workers";

/// The code of a call, or a run, that the queue cannot serve.
pub const E_QUEUE_UNAVAILABLE: &str = "E_QUEUE_UNAVAILABLE";

/// The queue could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("E_QUEUE_UNAVAILABLE: the queue at {url} cannot be used: {message}")]
pub struct QueueError {
    /// The queue's address (without a password).
    pub url: String,
    /// What went wrong.
    pub message: String,
}

/// A Redis queue: where steps go and results come back.
#[derive(Clone)]
pub struct Queue {
    client: redis::Client,
    /// For writes (XADD, XACK): one multiplexed connection, reconnecting by itself.
    writer: redis::aio::ConnectionManager,
    stream: String,
    url: String,
}

impl Queue {
    /// Connects to the queue at `url` (`redis://HOST:PORT[/DB]`) whose steps stream is
    /// `stream`; fails at once, with [`E_QUEUE_UNAVAILABLE`], if Redis does not answer.
    pub async fn connect(url: &str, stream: &str) -> Result<Queue, QueueError> {
        let shown = redact_url(url);
        let error = |message: String| QueueError {
            url: shown.clone(),
            message,
        };
        let client = redis::Client::open(url).map_err(|e| error(e.to_string()))?;
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(3)))
            .set_response_timeout(Some(Duration::from_secs(10)))
            .set_number_of_retries(2);
        let mut writer = client
            .get_connection_manager_with_config(config)
            .await
            .map_err(|e| error(e.to_string()))?;
        let _: String = redis::cmd("PING")
            .query_async(&mut writer)
            .await
            .map_err(|e| error(e.to_string()))?;
        Ok(Queue {
            client,
            writer,
            stream: stream.to_owned(),
            url: shown,
        })
    }

    /// A connection of its own for blocking reads (`XREAD … BLOCK` holds its connection).
    async fn reader(&self) -> Result<redis::aio::MultiplexedConnection, QueueError> {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(3)))
            .set_response_timeout(None);
        self.client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|e| self.error(e.to_string()))
    }

    fn error(&self, message: String) -> QueueError {
        QueueError {
            url: self.url.clone(),
            message,
        }
    }

    /// The stream a run's results come back on.
    fn results_stream(run_id: &str) -> String {
        format!("plan:results:{run_id}")
    }
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
}
