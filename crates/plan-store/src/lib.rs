//! The durable ledger of plan-cli runs, in SQLite: runs (with their plan and inputs), step
//! records and attempts, variables, events, approvals, and a registry of stored plans.
//!
//! [`Store::open`] opens (or creates) a ledger file, applying schema migrations and refusing
//! files that are not plan-cli ledgers or were written by a newer plan-cli. [`RunJournal`]
//! implements the [`plan_types::Journal`] port: each batch the engine's writer thread hands it
//! is one `BEGIN IMMEDIATE` transaction. WAL mode with `synchronous=NORMAL` makes a commit
//! survive `kill -9` of the process without an fsync per commit; `busy_timeout` lets several
//! processes share one file. A step that waits for its dependencies' records need not wait for
//! a commit: the journal's log, a file of JSON lines beside the ledger, takes the batch in one
//! write, and commits fold it in later ([`RunJournal`], [`Store::recover`]).
//!
//! Reading a run back (here one the example records itself; plan-cli's runs read the same):
//!
//! ```
//! use std::sync::Arc;
//!
//! use plan_store::{EventBuffer, NewRun, RunJournal, Store};
//! use plan_types::{Batch, Journal, Position, Record};
//! use serde_json::json;
//!
//! let dir = tempfile::tempdir().unwrap();
//! let ledger = dir.path().join("state.db");
//! let mut store = Store::open(&ledger).unwrap();
//! store
//!     .begin_run(&NewRun {
//!         run_id: "R1",
//!         plan_id: "p",
//!         plan_name: "p.json",
//!         plan_format: "json",
//!         plan_source: r#"{"steps": [{"id": "a", "tool": "echo"}]}"#,
//!         inputs: &serde_json::Map::new(),
//!         options: &json!({}),
//!         owner_pid: std::process::id(),
//!         started_at: "2026-11-26T08:00:00.000Z",
//!     })
//!     .unwrap();
//! // What the engine's writer thread does with each batch of settled records.
//! let mut journal = RunJournal::new(store, "R1", Arc::new(EventBuffer::default())).unwrap();
//! let record: Record = serde_json::from_value(json!({
//!     "step_id": "a", "ok": true, "skipped": false, "result": {"hi": 1}, "attempts": 1, "duration_ms": 2
//! }))
//! .unwrap();
//! let batch = Batch {
//!     records: vec![(Position { step: 0, item: None }, record.clone())],
//!     ..Batch::default()
//! };
//! journal.commit(&batch, 1).unwrap();
//! drop(journal);
//!
//! let store = Store::open(&ledger).unwrap();
//! let row = store.run("R1").unwrap();
//! assert_eq!(row.plan_id, "p");
//! assert_eq!(store.records("R1").unwrap(), vec![record]);
//! ```
//!
//! This is the only crate that knows SQL. It depends on `plan-types` alone for the records,
//! events and the `Journal` port it stores: no async runtime, no plan parser, no engine.
#![deny(missing_docs)]

mod approvals;
mod events;
mod journal;
mod plans;
mod runs;
mod schema;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rusqlite::Connection;

pub use approvals::{ApprovalRow, Decision};
pub use journal::{EventBuffer, RunJournal};
pub use plans::StoredPlan;
pub use runs::{AttemptRow, NewRun, RunRow, RunState, StepCounts};

/// Where the ledger lives when neither `--db` nor `PLAN_DB` says.
pub const DEFAULT_PATH: &str = ".plan/state.db";

/// The run id that names the newest run (`plan-cli status last`).
pub const LAST_RUN: &str = "last";

/// Why the ledger could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The file or its directory could not be created or opened.
    #[error("cannot open the ledger {}: {message}", path.display())]
    Open {
        /// The ledger file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// There is no ledger file where one is to be read (only commands that record create one).
    #[error("there is no ledger at {}", path.display())]
    Missing {
        /// Where it was looked for.
        path: PathBuf,
    },
    /// The file exists but is not a plan-cli ledger.
    #[error("{} is not a plan-cli ledger: {why}", path.display())]
    Foreign {
        /// The file.
        path: PathBuf,
        /// How we know.
        why: String,
    },
    /// The ledger was written by a newer plan-cli.
    #[error("{} was written by a newer plan-cli (schema version {found}; this one knows up to {supported}): upgrade plan-cli", path.display())]
    TooNew {
        /// The file.
        path: PathBuf,
        /// Its schema version.
        found: i64,
        /// The newest this build knows.
        supported: i64,
    },
    /// No run, or no plan, with that id.
    #[error("no {what} `{id}` in the ledger")]
    NotFound {
        /// `run` or `plan`.
        what: &'static str,
        /// The id asked for.
        id: String,
    },
    /// A run id prefix that matches several runs.
    #[error("`{prefix}` matches several runs: {}", candidates.join(", "))]
    Ambiguous {
        /// The prefix given.
        prefix: String,
        /// The runs it matches.
        candidates: Vec<String>,
    },
    /// An approval decided the other way already.
    #[error("`{step_id}` is already {decision}; a decision is taken once")]
    Decided {
        /// The step or item.
        step_id: String,
        /// `approved` or `rejected`.
        decision: &'static str,
    },
    /// A plan id that is taken.
    #[error("a plan `{0}` is already stored")]
    PlanExists(String),
    /// The run's log beside the ledger (see [`RunJournal`]) could not be read or written.
    #[error("the run's log {}: {message}", path.display())]
    Log {
        /// The log file.
        path: PathBuf,
        /// What could not be done, and why.
        message: String,
    },
    /// A SQLite error: disk full, read-only file, I/O error, corruption.
    #[error("the ledger failed: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// A stored value that does not parse (a damaged row).
    #[error("the ledger holds a damaged {what}: {message}")]
    Damaged {
        /// What kind of row.
        what: &'static str,
        /// The parse error.
        message: String,
    },
}

impl StoreError {
    /// A failure of the run's log at `path`: `what` could not be done, for `error`.
    fn log(path: &Path, what: &str, error: &std::io::Error) -> StoreError {
        StoreError::Log {
            path: path.to_path_buf(),
            message: format!("{what}: {error}"),
        }
    }
}

/// An open ledger.
pub struct Store {
    conn: Connection,
    path: PathBuf,
    /// Opened with [`Store::open_read_only`].
    read_only: bool,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

/// A ledger is a regular file (or none yet): SQLite would block for good reading a FIFO, and
/// a directory or a device is no ledger either. So are the files SQLite opens beside it
/// (`-journal`, `-wal`, `-shm`): a FIFO planted at `x.db-journal` by whoever can write the
/// ledger's folder hung every command.
fn refuse_other_than_a_file(path: &Path) -> Result<(), StoreError> {
    refuse_other_than_a_file_at(path)?;
    for beside in ["-journal", "-wal", "-shm"] {
        let mut name = path.as_os_str().to_owned();
        name.push(beside);
        refuse_other_than_a_file_at(Path::new(&name))?;
    }
    Ok(())
}

fn refuse_other_than_a_file_at(path: &Path) -> Result<(), StoreError> {
    // What a link leads to (`metadata`, not `symlink_metadata`): a link to a FIFO is a FIFO
    // to SQLite.
    let Ok(metadata) = std::fs::metadata(path) else {
        return Ok(());
    };
    if metadata.is_file() {
        return Ok(());
    }
    use std::os::unix::fs::FileTypeExt as _;
    let kind = metadata.file_type();
    let what = if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else {
        "something other than a regular file"
    };
    Err(StoreError::Open {
        path: path.to_path_buf(),
        message: format!("it is {what}, not a ledger file"),
    })
}

impl Store {
    /// Opens the ledger at `path`, creating it (and its directory) if needed, and brings its
    /// schema up to date.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        refuse_other_than_a_file(path)?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|error| StoreError::Open {
                path: path.to_path_buf(),
                message: format!("cannot create the directory {}: {error}", dir.display()),
            })?;
        }
        let conn = Connection::open(path).map_err(|error| StoreError::Open {
            path: path.to_path_buf(),
            message: error.to_string(),
        })?;
        Store::setup(conn, path)
    }

    /// Opens an existing ledger for reading only: for a ledger in a folder (or a file) this
    /// process may not write. Nothing is created or migrated, so the ledger must already be
    /// of this version.
    pub fn open_read_only(path: &Path) -> Result<Store, StoreError> {
        refuse_other_than_a_file(path)?;
        let open = |uri: String| -> Result<Store, StoreError> {
            let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY
                | rusqlite::OpenFlags::SQLITE_OPEN_URI
                | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
            let conn = Connection::open_with_flags(uri, flags)?;
            conn.busy_timeout(Duration::from_secs(30))?;
            schema::check_readable(&conn, path)?;
            Ok(Store {
                conn,
                path: path.to_path_buf(),
                read_only: true,
            })
        };
        let file = path
            .to_string_lossy()
            .replace('%', "%25")
            .replace('?', "%3f")
            .replace('#', "%23");
        // A ledger in write-ahead-log mode needs its shared-memory file, which a read-only
        // folder cannot hold; then the file is read as it is on disk (`immutable`), which is
        // what it is when nobody can write beside it.
        open(format!("file:{file}?mode=ro"))
            .or_else(|_| open(format!("file:{file}?immutable=1")))
            .map_err(|error| match error {
                StoreError::Sqlite(error) => StoreError::Open {
                    path: path.to_path_buf(),
                    message: error.to_string(),
                },
                other => other,
            })
    }

    /// A ledger in memory, for tests and for runs that keep nothing.
    pub fn in_memory() -> Result<Store, StoreError> {
        Store::setup(Connection::open_in_memory()?, Path::new(":memory:"))
    }

    fn setup(conn: Connection, path: &Path) -> Result<Store, StoreError> {
        // Several processes may share the file: wait for a writer rather than fail.
        conn.busy_timeout(Duration::from_secs(30))?;
        // A journal's multi-row inserts come in a few shapes per table (full chunks and the
        // last partial one); the default cache of 16 kept re-preparing them.
        conn.set_prepared_statement_cache_capacity(128);
        schema::check_and_migrate(&conn, path)?;
        Ok(Store {
            conn,
            path: path.to_path_buf(),
            read_only: false,
        })
    }

    /// The ledger file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the ledger is in memory, not in a file.
    fn is_in_memory(&self) -> bool {
        self.path == Path::new(":memory:")
    }
}

/// Now, as stored: RFC 3339 in UTC with milliseconds (these sort as text).
pub fn timestamp(at: SystemTime) -> String {
    humantime::format_rfc3339_millis(at).to_string()
}

/// The hash a run keeps of its plan document, to tell later whether a plan file changed.
pub fn plan_hash(text: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(text.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}
