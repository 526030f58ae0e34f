//! Where a run found its tools and what it keeps current besides the ledger, kept with the run
//! so that `resume`, `retry`, `approve` and `reject` find the same tools and files without the
//! flags repeated.

use std::path::{Path, PathBuf};

use plan_store::RunRow;
use serde::{Deserialize, Serialize};

use crate::{InputError, Ledger, Project};

/// Where a run's tools come from, and the state file it keeps.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunSources {
    /// The MCP configuration whose servers gave the run tools (an absolute path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_config: Option<PathBuf>,
    /// The BullMQ queue every call of the run went to. A Redis address with a password is
    /// not kept (the ledger is no place for it): the queue's name is, so that the run is
    /// never resumed without its queue by mistake.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueueSource>,
    /// The execute-state file the run keeps current (an absolute path; [`crate::start`] sets
    /// it from [`crate::Execution::state_file`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_file: Option<PathBuf>,
}

impl RunSources {
    /// The queue (its address and name) run `run_id`'s calls go to as it goes on, unless a
    /// front-end names another: the one the run kept, if any. A run that kept a queue without
    /// its address (it held credentials) is refused: its calls must not run anywhere else, so
    /// the address must be given again.
    pub fn kept_queue(
        &self,
        run_id: &str,
    ) -> Result<Option<(String, String)>, crate::LifecycleError> {
        match &self.queue {
            None => Ok(None),
            Some(QueueSource {
                url: Some(url),
                name,
            }) => Ok(Some((url.clone(), name.clone()))),
            Some(QueueSource { url: None, name }) => Err(crate::LifecycleError::QueueNotKept {
                run_id: run_id.to_owned(),
                name: name.clone(),
            }),
        }
    }
}

/// A BullMQ queue: the Redis it lives in and its name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueSource {
    /// `redis://HOST:PORT[/DB]`; `None` when the address held credentials and was not kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The queue's name (keys `bull:NAME:*`).
    pub name: String,
}

impl QueueSource {
    /// The queue at `url` called `name`, to keep with a run: an address with credentials in
    /// it (`redis://:secret@host`, `rediss://user:pw@host`, a socket's
    /// `unix:///run/redis.sock?pass=secret`) is left out, and so is one that holds an `@`, a
    /// query or a fragment anywhere (what cannot be told safe is not kept).
    pub fn of(url: &str, name: &str) -> QueueSource {
        let plain = !url.contains(['@', '?', '#']);
        QueueSource {
            url: plain.then(|| url.to_owned()),
            name: name.to_owned(),
        }
    }
}

/// What a stored run kept for the commands that go on with it (`resume`, `retry`, `approve`,
/// `reject`): where its tools are and the folder its programs run in.
#[derive(Debug, Clone, Default)]
pub struct Kept {
    /// Where its tools come from, and its state file.
    pub sources: RunSources,
    /// The folder its programs run in ([`crate::working_dir_of`]).
    pub working_dir: Option<PathBuf>,
}

impl Kept {
    /// What run `run` of `ledger` kept: nothing for a ledger that is not there or cannot be
    /// read, or an unknown run (the command that goes on with it says so itself).
    pub fn of(ledger: &Ledger, run: &str) -> Kept {
        let row = ledger
            .exists()
            .then(|| ledger.open_reader().ok()?.run(run).ok())
            .flatten();
        row.map(|row| Kept {
            sources: sources_of(&row),
            working_dir: crate::working_dir_of(&row),
        })
        .unwrap_or_default()
    }

    /// The MCP configuration whose servers give the tools: `given` (a front-end's setting),
    /// else the run's own (so that `approve` and `resume` find its tools without the flag
    /// repeated), else `project`'s.
    pub fn mcp_config(&self, given: Option<PathBuf>, project: Option<&Project>) -> Option<PathBuf> {
        given
            .or_else(|| self.sources.mcp_config.clone())
            .or_else(|| project.and_then(Project::mcp_config))
    }

    /// The folder the run's programs run in as it goes on: `given` (made absolute and
    /// checked, [`crate::resolve_folder`]), else the run's own.
    pub fn working_dir(&self, given: Option<&Path>) -> Result<Option<PathBuf>, InputError> {
        match given {
            Some(dir) => crate::resolve_folder(dir).map(Some),
            None => Ok(self.working_dir.clone()),
        }
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
    fn a_run_goes_on_with_its_queue_only_where_its_address_was_kept() {
        let sources = |url: &str| super::RunSources {
            queue: Some(QueueSource::of(url, "steps")),
            ..super::RunSources::default()
        };
        assert_eq!(super::RunSources::default().kept_queue("r").unwrap(), None);
        assert_eq!(
            sources("redis://127.0.0.1:6379").kept_queue("r").unwrap(),
            Some(("redis://127.0.0.1:6379".to_owned(), "steps".to_owned()))
        );
        let refused = sources("redis://:secret@host").kept_queue("r").unwrap_err();
        assert!(
            matches!(&refused, crate::LifecycleError::QueueNotKept { name, .. } if name == "steps"),
            "{refused}"
        );
        assert!(!refused.to_string().contains("secret"), "{refused}");
    }

    #[test]
    fn a_redis_address_with_credentials_is_not_kept() {
        let kept = |url: &str| QueueSource::of(url, "steps").url;
        assert_eq!(
            kept("redis://127.0.0.1:6379/2").as_deref(),
            Some("redis://127.0.0.1:6379/2")
        );
        assert_eq!(kept("redis://:secret@127.0.0.1:6379"), None);
        assert_eq!(kept("rediss://user:pw@host/0"), None);
        assert_eq!(kept("redis://user:pw@host?db=1"), None);
        assert_eq!(kept("unix:///tmp/r.sock?pass=s3cret"), None);
        assert_eq!(kept("redis+unix:///tmp/r.sock?user=u&pass=p"), None);
        assert_eq!(
            kept("unix:///tmp/r.sock").as_deref(),
            Some("unix:///tmp/r.sock")
        );
        assert_eq!(QueueSource::of("redis://:s@h", "jobs").name, "jobs");
    }
}
