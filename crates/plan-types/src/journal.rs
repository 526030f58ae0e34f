//! The port the engine writes its ledger through: batches of settled records and bound variables
//! (attempts are the tool events that go with them), and how the run ended.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::approval::PendingApproval;
use crate::record::Record;
use crate::report::TaskStatus;

/// Where a record belongs in plan order: a step, or item `k` of a map step (items come right
/// before their step's own record).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    /// The step's position in the plan.
    pub step: usize,
    /// The map item (or block node), if this is one.
    pub item: Option<usize>,
}

/// Everything that settled since the last batch. Owned: the engine hands it to its ledger
/// writer and goes on.
#[derive(Debug, Default)]
pub struct Batch {
    /// Final records of steps and items, with where they belong.
    pub records: Vec<(Position, Record)>,
    /// Variables bound (or rebound), with their values then; a later entry for a name wins.
    pub variables: Vec<(String, Arc<Value>)>,
    /// Where block steps still running stand after their last finished node, by step id
    /// (opaque JSON, handed back in [`Restored::checkpoints`]): an interrupted block goes on
    /// from there instead of from its entry point. A later entry for a step wins.
    pub checkpoints: Vec<(String, Value)>,
}

impl Batch {
    /// True when there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty() && self.variables.is_empty() && self.checkpoints.is_empty()
    }

    /// Adds a later batch to this one, so that both are written in one commit.
    pub fn append(&mut self, later: Batch) {
        self.records.extend(later.records);
        self.variables.extend(later.variables);
        self.checkpoints.extend(later.checkpoints);
    }
}

/// How a run ended, for the ledger.
#[derive(Debug, Clone, PartialEq)]
pub enum RunEnd {
    /// It ran to the end.
    Finished(TaskStatus),
    /// It was stopped (cancelled) before the end; it can be resumed.
    Stopped,
    /// It halted until these calls (or the plan) are approved; `resume` goes on after the
    /// decisions.
    Waiting {
        /// What waits for a decision.
        pending: Vec<PendingApproval>,
        /// Where each waiting block step stopped (opaque JSON, handed back in
        /// [`Restored::checkpoints`]).
        checkpoints: Vec<(String, Value)>,
    },
}

/// A ledger failure: the run stops, since what it does could no longer be recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct JournalError(pub String);

/// A durable record of a run. The engine calls it from a writer thread of its own (or from the
/// scheduler's thread, when that has nothing else to do or the writer has fallen behind), one
/// call at a time, and hands it every batch in the order the batches settled. `commit` must not
/// return before the batch is durable: under [`Durability::Sync`] the engine starts no step
/// that depends on a batch's records until `commit` has returned, or until the journal's
/// [`BatchLog`] has taken the batch.
pub trait Journal: Send {
    /// Makes a batch durable, all of it or none of it. Batches are numbered from 1 in the
    /// order the engine sent them; `batch` holds every one up to number `upto` not committed
    /// before (several are committed together when they queue up).
    fn commit(&mut self, batch: &Batch, upto: u64) -> Result<(), JournalError>;

    /// Records how the run ended (after the last commit), and when: `at` is whole
    /// milliseconds, and the run's last record counts its duration to it, so the two agree.
    fn finish(&mut self, end: RunEnd, at: SystemTime) -> Result<(), JournalError>;

    /// Writes what the journal holds besides batches (events such as `tool.called`), when
    /// nothing has settled for a while: a long step shows in the ledger as running. Nothing by
    /// default.
    fn flush(&mut self) -> Result<(), JournalError> {
        Ok(())
    }

    /// A quicker way to make a batch durable than a commit, if the journal has one; the
    /// engine asks once, when the run starts. None by default.
    fn log(&mut self) -> Option<Box<dyn BatchLog>> {
        None
    }
}

/// A journal's quick path to durability, used on the scheduler's own thread when a step waits
/// for its dependencies' records (a chain): an append to a log, which the journal's `commit`
/// later folds into the ledger. After a crash the journal must recover from the log every
/// batch appended and not committed.
pub trait BatchLog: Send {
    /// Makes batch `number` durable (it survives the process being killed) before the journal
    /// commits it. Called in order of the numbers, each once, always before `commit` is given
    /// the batch.
    fn append(&mut self, number: u64, batch: &Batch) -> Result<(), JournalError>;
}

/// When what settles reaches the ledger (the names are LangGraph's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// A step starts only once the records and binds of its dependencies are committed, so a
    /// completed step is never run again after a crash. Steps with nothing uncommitted
    /// upstream never wait.
    #[default]
    Sync,
    /// Commits trail the run and nothing waits for them: a crash may run recently completed
    /// steps again.
    Async,
    /// Everything is written when the run ends or stops: a crash loses the whole attempt.
    Exit,
}

impl Durability {
    /// `sync`, `async` or `exit`.
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Sync => "sync",
            Durability::Async => "async",
            Durability::Exit => "exit",
        }
    }
}

impl fmt::Display for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Durability {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "sync" => Ok(Durability::Sync),
            "async" => Ok(Durability::Async),
            "exit" => Ok(Durability::Exit),
            other => Err(format!(
                "unknown durability `{other}`: expected sync, async or exit"
            )),
        }
    }
}

/// What a resumed run takes from its ledger: the records of steps that settled and the
/// variables they bound. Successful records are kept; failed ones are kept too unless the
/// caller dropped them (to retry those steps); skipped and blocked ones are worked out again.
#[derive(Debug, Clone, Default)]
pub struct Restored {
    /// Records by step or item id.
    pub records: Vec<Record>,
    /// Variables as last committed.
    pub variables: BTreeMap<String, Arc<Value>>,
    /// Where waiting block steps stopped, by step id, as given in [`RunEnd::Waiting`].
    pub checkpoints: BTreeMap<String, Value>,
    /// Attempts made by steps (or items) whose records were dropped to run them again, by
    /// id: a re-run's first attempt is the next number, so each attempt of a call has an
    /// identity of its own (a queue job id) and a tool's `attempt` keeps counting.
    pub earlier_attempts: BTreeMap<String, u32>,
}
