//! What a durable ledger sees of a run: batches of settled records, bound variables and
//! attempts, each committed before any step that depends on them starts.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use serde_json::Value;

use crate::report::{PendingApproval, Record, StepError, TaskStatus};

/// Where a record belongs in plan order: a step, or item `k` of a map step (items come right
/// before their step's own record).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    /// The step's position in the plan.
    pub step: usize,
    /// The map item, if this is one.
    pub item: Option<usize>,
}

/// One try of one step or item.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    /// The step or item.
    pub step_id: Arc<str>,
    /// 1 for the first try.
    pub attempt: u32,
    /// When it started.
    pub started_at: SystemTime,
    /// How long it took.
    pub duration_ms: u64,
    /// How it failed, if it did.
    pub error: Option<StepError>,
}

/// Everything that settled since the last commit.
#[derive(Debug)]
pub struct Batch<'a> {
    /// Final records of steps and items, with where they belong.
    pub records: Vec<(Position, &'a Record)>,
    /// Variables bound (or rebound), with their values now.
    pub variables: Vec<(&'a str, &'a Value)>,
    /// Attempts that ended.
    pub attempts: &'a [Attempt],
    /// Where block steps still running stand after their last finished node, by step id
    /// (opaque JSON, handed back in [`Restored::checkpoints`]): an interrupted block goes on
    /// from there instead of from its entry point.
    pub checkpoints: Vec<(&'a str, &'a Value)>,
}

impl Batch<'_> {
    /// True when there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
            && self.variables.is_empty()
            && self.attempts.is_empty()
            && self.checkpoints.is_empty()
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

/// A durable record of a run. `commit` must not return before the batch is durable: the
/// scheduler starts no step that depends on the batch's records until it has.
pub trait Journal: Send {
    /// Makes a batch durable, all of it or none of it.
    fn commit(&mut self, batch: &Batch<'_>) -> Result<(), JournalError>;

    /// Records how the run ended (after the last commit).
    fn finish(&mut self, end: RunEnd) -> Result<(), JournalError>;
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
}
