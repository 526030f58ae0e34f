//! Where a run found its tools and what it keeps current besides the ledger, kept with the run
//! so that `resume`, `retry`, `approve` and `reject` find the same tools and files without the
//! flags repeated.

use std::path::{Path, PathBuf};

use plan_store::{RunRow, StoreError};
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
    /// The queue (its address and name) run `run_id`'s calls go to as it goes on: the address
    /// a front-end `given`, else the one the run kept, else `from_env` (REDIS_URL, which never
    /// overrides a kept queue); the queue `name` given, else the run's own (its calls must
    /// keep going to the queue its workers serve), else `steps` (`plan_queue::DEFAULT_QUEUE`). A run
    /// that kept a queue without its address (it held credentials) is refused unless the
    /// address is given again: its calls must not run anywhere else.
    pub fn queue_going_on(
        &self,
        run_id: &str,
        given: Option<&str>,
        name: Option<&str>,
        from_env: Option<&str>,
    ) -> Result<Option<(String, String)>, crate::LifecycleError> {
        let kept = self.queue.as_ref();
        let url = match (given, kept) {
            (Some(url), _) => url.to_owned(),
            (None, Some(QueueSource { url: Some(url), .. })) => url.clone(),
            (None, Some(QueueSource { url: None, name })) => {
                return Err(crate::LifecycleError::QueueNotKept {
                    run_id: run_id.to_owned(),
                    name: name.clone(),
                });
            }
            (None, None) => match from_env {
                Some(url) => url.to_owned(),
                None => return Ok(None),
            },
        };
        let name = name
            .map(str::to_owned)
            .or_else(|| kept.map(|kept| kept.name.clone()))
            .unwrap_or_else(|| DEFAULT_QUEUE.to_owned());
        Ok(Some((url, name)))
    }
}

/// The queue's name when none is given (as `plan_queue::DEFAULT_QUEUE`, which this crate
/// names without the feature `queue`).
const DEFAULT_QUEUE: &str = "steps";

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
    /// The run's id (`last` read once: the command goes on with this run, not with one
    /// started since).
    pub run_id: Option<String>,
    /// Where its tools come from, and its state file.
    pub sources: RunSources,
    /// The folder its programs run in ([`crate::working_dir_of`]).
    pub working_dir: Option<PathBuf>,
}

impl Kept {
    /// What run `run` of `ledger` kept: nothing for a ledger that is not there, or a run it
    /// does not know (or an id the start of several: the command that goes on with it says
    /// so itself). A ledger that cannot be read is an error, not "nothing kept": the command
    /// would go on with other tools and in another folder than the run's own.
    pub fn of(ledger: &Ledger, run: &str) -> Result<Kept, StoreError> {
        if !ledger.exists() {
            return Ok(Kept::default());
        }
        let row = match ledger.open_reader()?.run(run) {
            Ok(row) => row,
            Err(StoreError::NotFound { .. } | StoreError::Ambiguous { .. }) => {
                return Ok(Kept::default());
            }
            Err(error) => return Err(error),
        };
        Ok(Kept {
            sources: sources_of(&row),
            run_id: Some(row.run_id.clone()),
            working_dir: crate::working_dir_of(&row),
        })
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
    pub fn folder(&self, given: Option<&Path>) -> Result<Option<PathBuf>, InputError> {
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
    fn a_run_goes_on_with_its_queue_unless_given_another_address() {
        let sources = |url: &str| super::RunSources {
            queue: Some(QueueSource::of(url, "jobs")),
            ..super::RunSources::default()
        };
        let pair = |url: &str, name: &str| Some((url.to_owned(), name.to_owned()));
        let none = super::RunSources::default();
        // Not a queue run: the address given, else the environment's, else none.
        assert_eq!(none.queue_going_on("r", None, None, None).unwrap(), None);
        assert_eq!(
            none.queue_going_on("r", None, None, Some("redis://e"))
                .unwrap(),
            pair("redis://e", "steps")
        );
        assert_eq!(
            none.queue_going_on("r", Some("redis://g"), Some("q"), Some("redis://e"))
                .unwrap(),
            pair("redis://g", "q")
        );
        // A queue run: its own queue, whatever the environment says; its name kept when only
        // an address is given.
        let kept = sources("redis://127.0.0.1:6379");
        assert_eq!(
            kept.queue_going_on("r", None, None, Some("redis://e"))
                .unwrap(),
            pair("redis://127.0.0.1:6379", "jobs")
        );
        assert_eq!(
            kept.queue_going_on("r", Some("redis://g"), None, None)
                .unwrap(),
            pair("redis://g", "jobs")
        );
        // An address with credentials was not kept: refused without it, and never in a
        // message; given again, the run goes on with its own queue's name.
        let secret = sources("redis://:secret@host");
        let refused = secret
            .queue_going_on("r", None, None, Some("redis://e"))
            .unwrap_err();
        assert!(
            matches!(&refused, crate::LifecycleError::QueueNotKept { name, .. } if name == "jobs"),
            "{refused}"
        );
        assert!(!refused.to_string().contains("secret"), "{refused}");
        assert_eq!(
            secret
                .queue_going_on("r", Some("redis://:secret@host"), None, None)
                .unwrap(),
            pair("redis://:secret@host", "jobs")
        );
    }

    #[cfg(feature = "queue")]
    #[test]
    fn the_default_queue_is_bullmqs() {
        assert_eq!(super::DEFAULT_QUEUE, plan_queue::DEFAULT_QUEUE);
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
