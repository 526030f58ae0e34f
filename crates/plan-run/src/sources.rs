//! Where a run found its tools and what it keeps current besides the ledger, kept with the run
//! so that `resume`, `retry`, `approve` and `reject` find the same tools and files without the
//! flags repeated.

use std::path::PathBuf;

use plan_store::RunRow;
use serde::{Deserialize, Serialize};

/// Where a run's tools come from, and the state file it keeps.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunSources {
    /// The MCP configuration whose servers gave the run tools (an absolute path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_config: Option<PathBuf>,
    /// The BullMQ queue every call of the run went to. A Redis address with a password is
    /// not kept (the ledger is no place for it): such a run is given its queue again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueueSource>,
    /// The execute-state file the run keeps current (an absolute path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_file: Option<PathBuf>,
}

/// A BullMQ queue: the Redis it lives in and its name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueSource {
    /// `redis://HOST:PORT[/DB]`.
    pub url: String,
    /// The queue's name (keys `bull:NAME:*`).
    pub name: String,
}

impl QueueSource {
    /// The queue at `url` called `name`, if the address can be kept: one with a password in
    /// it (`redis://:secret@host`) cannot.
    pub fn keepable(url: &str, name: &str) -> Option<QueueSource> {
        let credentials = url
            .split_once("://")
            .map_or(url, |(_, rest)| rest)
            .split('/')
            .next()
            .is_some_and(|authority| authority.contains('@'));
        (!credentials).then(|| QueueSource {
            url: url.to_owned(),
            name: name.to_owned(),
        })
    }
}

/// The sources a run's start kept (none for runs from before they were kept).
pub fn sources_of(row: &RunRow) -> RunSources {
    row.options
        .get("sources")
        .and_then(|sources| serde_json::from_value(sources.clone()).ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::QueueSource;

    #[test]
    fn a_redis_address_with_credentials_is_not_kept() {
        assert!(QueueSource::keepable("redis://127.0.0.1:6379/2", "steps").is_some());
        assert!(QueueSource::keepable("redis://:secret@127.0.0.1:6379", "steps").is_none());
        assert!(QueueSource::keepable("rediss://user:pw@host/0", "steps").is_none());
    }
}
