//! The engine's [`Journal`] on the ledger: each batch is one immediate transaction.

use std::sync::{Arc, Mutex};

use plan_types::{Batch, Event, EventSink, Journal, JournalError, RunEnd};
use rusqlite::TransactionBehavior;
use rusqlite::types::Value;

use crate::events::EventRow;
use crate::runs::RunState;
use crate::{Store, StoreError};

/// Events waiting for the next commit. Register it as an event sink; the journal drains it, so
/// events reach the ledger together with the records they describe. The ledger's attempts
/// are these events (`tool.called`, then `tool.succeeded` or `tool.failed`): a run written
/// without this sink has none.
#[derive(Default)]
pub struct EventBuffer(Mutex<Vec<EventRow>>);

impl EventSink for EventBuffer {
    fn emit(&self, event: &Event) {
        // Every kind has a number (a unit test checks), so a row is always made.
        if let Ok(row) = EventRow::of(event) {
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(row);
        }
    }
}

impl EventBuffer {
    fn take(&self) -> Vec<EventRow> {
        std::mem::take(
            &mut *self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

/// One run's journal on a ledger.
pub struct RunJournal {
    store: Store,
    run_id: String,
    /// The run's integer key, which its rows carry.
    key: i64,
    events: Arc<EventBuffer>,
    next_seq: i64,
}

impl std::fmt::Debug for RunJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunJournal")
            .field("run_id", &self.run_id)
            .finish()
    }
}

impl RunJournal {
    /// A journal for a run already in the ledger (`begin_run` or `resume_run` first); events
    /// emitted to `events` are stored with each commit, after those already stored.
    pub fn new(store: Store, run_id: &str, events: Arc<EventBuffer>) -> Result<Self, StoreError> {
        let key = store.run_key(run_id)?;
        let next_seq: i64 = store.conn.query_row(
            "SELECT coalesce(max(seq), 0) + 1 FROM run_events WHERE run = ?1",
            [key],
            |row| row.get(0),
        )?;
        Ok(RunJournal {
            store,
            run_id: run_id.to_owned(),
            key,
            events,
            next_seq,
        })
    }

    /// The ledger, once the run is over.
    pub fn into_store(self) -> Store {
        self.store
    }

    fn write(&mut self, batch: &Batch, events: &[EventRow]) -> Result<(), StoreError> {
        let run_id = self.run_id.as_str();
        let key = Value::Integer(self.key);
        let transaction = self
            .store
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut records: Vec<[Value; 5]> = Vec::with_capacity(batch.records.len());
        for (position, record) in &batch.records {
            let item = position.item.map_or(Value::Null, |k| {
                Value::Integer(i64::try_from(k).unwrap_or(i64::MAX))
            });
            records.push([
                key.clone(),
                Value::Text(record.step_id.clone()),
                Value::Integer(i64::try_from(position.step).unwrap_or(i64::MAX)),
                item,
                Value::Text(crate::runs::record_text(record)?),
            ]);
        }
        insert_rows(
            &transaction,
            "INSERT OR REPLACE INTO step_records (run, step_id, position, item, record)",
            &records,
        )?;
        let variables: Vec<[Value; 3]> = batch
            .variables
            .iter()
            .map(|(name, value)| {
                [
                    Value::Text(run_id.to_owned()),
                    Value::Text(name.clone()),
                    Value::Text(value.to_string()),
                ]
            })
            .collect();
        insert_rows(
            &transaction,
            "INSERT OR REPLACE INTO variables (run_id, name, value)",
            &variables,
        )?;
        let mut event_rows: Vec<[Value; 10]> = Vec::with_capacity(events.len());
        for (offset, event) in events.iter().enumerate() {
            let seq = self.next_seq + i64::try_from(offset).unwrap_or(i64::MAX);
            event_rows.push(event.values(&key, seq));
        }
        insert_rows(
            &transaction,
            "INSERT INTO run_events (run, seq, kind, step_id, attempt, ts_ms, tool, duration_ms, ok, rest)",
            &event_rows,
        )?;
        let checkpoints: Vec<[Value; 3]> = batch
            .checkpoints
            .iter()
            .map(|(step_id, checkpoint)| {
                [
                    Value::Text(run_id.to_owned()),
                    Value::Text(step_id.clone()),
                    Value::Text(checkpoint.to_string()),
                ]
            })
            .collect();
        insert_rows(
            &transaction,
            "INSERT OR REPLACE INTO checkpoints (run_id, step_id, checkpoint)",
            &checkpoints,
        )?;
        // The run's row is not touched here: it holds the whole plan document, and rewriting
        // it on every commit made large plans' runs crawl.
        transaction.commit()?;
        self.next_seq += i64::try_from(events.len()).unwrap_or(i64::MAX);
        Ok(())
    }
}

/// Rows per INSERT statement: one statement with many rows costs SQLite much less than as
/// many statements, and 64 rows of up to 10 columns stays far below its parameter limit.
const ROWS_PER_STATEMENT: usize = 64;

/// Inserts rows with multi-row `VALUES` lists, `ROWS_PER_STATEMENT` at a time.
fn insert_rows<const N: usize>(
    transaction: &rusqlite::Transaction<'_>,
    head: &str,
    rows: &[[Value; N]],
) -> Result<(), StoreError> {
    let one_row = format!("({})", vec!["?"; N].join(", "));
    for chunk in rows.chunks(ROWS_PER_STATEMENT) {
        let sql = format!(
            "{head} VALUES {}",
            vec![one_row.as_str(); chunk.len()].join(", ")
        );
        let mut statement = transaction.prepare_cached(&sql)?;
        statement.execute(rusqlite::params_from_iter(chunk.iter().flatten()))?;
    }
    Ok(())
}

impl Journal for RunJournal {
    fn commit(&mut self, batch: &Batch) -> Result<(), JournalError> {
        let events = self.events.take();
        self.write(batch, &events)
            .map_err(|error| JournalError(error.to_string()))
    }

    fn flush(&mut self) -> Result<(), JournalError> {
        let events = self.events.take();
        if events.is_empty() {
            return Ok(());
        }
        self.write(&Batch::default(), &events)
            .map_err(|error| JournalError(error.to_string()))
    }

    fn finish(&mut self, end: RunEnd) -> Result<(), JournalError> {
        // Events emitted since the last commit (`run.finished` among them).
        let events = self.events.take();
        self.write(&Batch::default(), &events)
            .map_err(|error| JournalError(error.to_string()))?;
        let (state, status) = match end {
            RunEnd::Finished(status) => (RunState::Finished, Some(status)),
            RunEnd::Stopped => (RunState::Stopped, None),
            RunEnd::Waiting {
                pending,
                checkpoints,
            } => {
                return self
                    .store
                    .halt_for_approvals(&self.run_id, &pending, &checkpoints)
                    .map_err(|error| JournalError(error.to_string()));
            }
        };
        self.store
            .end_run(&self.run_id, state, status)
            .map_err(|error| JournalError(error.to_string()))
    }
}
