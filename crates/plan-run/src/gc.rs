//! Deleting old runs (`plan-cli gc`): finished runs (and, when asked, unfinished ones) that
//! ended before a cutoff, with everything they recorded.

use std::time::{Duration, SystemTime};

use plan_store::RunRow;

use crate::{Ledger, LifecycleError};

/// What `gc` did, or would do.
#[derive(Debug, Clone)]
pub struct Collected {
    /// Runs that ended before it go: an RFC 3339 time.
    pub cutoff: String,
    /// How many runs were deleted (none on a dry run).
    pub deleted: usize,
    /// On a dry run, the runs that would go, oldest first.
    pub would_delete: Vec<RunRow>,
}

/// Deletes the runs of `ledger` that ended more than `older_than` ago (unfinished ones too if
/// `unfinished_too`); with `dry_run`, only lists them. A ledger that is not there has none.
pub fn gc(
    ledger: &Ledger,
    older_than: Duration,
    unfinished_too: bool,
    dry_run: bool,
) -> Result<Collected, LifecycleError> {
    let cutoff = SystemTime::now()
        .checked_sub(older_than)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let mut collected = Collected {
        cutoff: plan_store::timestamp(cutoff),
        deleted: 0,
        would_delete: Vec::new(),
    };
    if !ledger.exists() {
        return Ok(collected);
    }
    if dry_run {
        let store = ledger.open_reader()?;
        collected.would_delete = store.expired(&collected.cutoff, unfinished_too)?;
    } else {
        collected.deleted = ledger.open()?.gc(&collected.cutoff, unfinished_too)?;
    }
    Ok(collected)
}
