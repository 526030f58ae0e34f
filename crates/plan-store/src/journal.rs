//! The engine's [`Journal`] on the ledger: each batch is one immediate transaction.

use std::sync::{Arc, Mutex};

use plan_engine::{Batch, Event, EventSink, Journal, JournalError, RunEnd};
use rusqlite::{TransactionBehavior, params};

use crate::runs::RunState;
use crate::{Store, StoreError};

/// Events waiting for the next commit. Register it as an event sink; the journal drains it, so
/// events reach the ledger together with the records they describe.
#[derive(Default)]
pub struct EventBuffer(Mutex<Vec<String>>);

impl EventSink for EventBuffer {
    fn emit(&self, event: &Event) {
        if let Ok(line) = serde_json::to_string(event) {
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(line);
        }
    }
}

impl EventBuffer {
    fn take(&self) -> Vec<String> {
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
        let next_seq: i64 = store.conn.query_row(
            "SELECT coalesce(max(seq), 0) + 1 FROM events WHERE run_id = ?1",
            [run_id],
            |row| row.get(0),
        )?;
        Ok(RunJournal {
            store,
            run_id: run_id.to_owned(),
            events,
            next_seq,
        })
    }

    /// The ledger, once the run is over.
    pub fn into_store(self) -> Store {
        self.store
    }

    fn write(&mut self, batch: &Batch<'_>, events: &[String]) -> Result<(), StoreError> {
        let run_id = self.run_id.as_str();
        let transaction = self
            .store
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        {
            let mut insert_record = transaction.prepare_cached(
                "INSERT OR REPLACE INTO records (run_id, step_id, position, item, ok, record) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?;
            for (position, record) in &batch.records {
                let text = serde_json::to_string(record).map_err(|e| StoreError::Damaged {
                    what: "record",
                    message: e.to_string(),
                })?;
                let step = i64::try_from(position.step).unwrap_or(i64::MAX);
                let item = position.item.map(|k| i64::try_from(k).unwrap_or(i64::MAX));
                insert_record.execute(params![
                    run_id,
                    record.step_id,
                    step,
                    item,
                    record.ok,
                    text
                ])?;
            }
            let mut insert_variable = transaction.prepare_cached(
                "INSERT OR REPLACE INTO variables (run_id, name, value) VALUES (?1, ?2, ?3)",
            )?;
            for (name, value) in &batch.variables {
                insert_variable.execute(params![run_id, name, value.to_string()])?;
            }
            let mut insert_attempt = transaction.prepare_cached(
                "INSERT INTO attempts (run_id, step_id, attempt, started_at, duration_ms, ok, error_code, error_message) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?;
            for attempt in batch.attempts {
                insert_attempt.execute(params![
                    run_id,
                    &*attempt.step_id,
                    attempt.attempt,
                    crate::timestamp(attempt.started_at),
                    i64::try_from(attempt.duration_ms).unwrap_or(i64::MAX),
                    attempt.error.is_none(),
                    attempt.error.as_ref().map(|e| e.code.as_str()),
                    attempt.error.as_ref().map(|e| e.message.as_str()),
                ])?;
            }
            let mut insert_event = transaction
                .prepare_cached("INSERT INTO events (run_id, seq, event) VALUES (?1, ?2, ?3)")?;
            for (offset, event) in events.iter().enumerate() {
                let seq = self.next_seq + i64::try_from(offset).unwrap_or(i64::MAX);
                insert_event.execute(params![run_id, seq, event])?;
            }
            transaction.execute(
                "UPDATE runs SET updated_at = ?2 WHERE run_id = ?1",
                params![run_id, crate::timestamp(std::time::SystemTime::now())],
            )?;
        }
        transaction.commit()?;
        self.next_seq += i64::try_from(events.len()).unwrap_or(i64::MAX);
        Ok(())
    }
}

impl Journal for RunJournal {
    fn commit(&mut self, batch: &Batch<'_>) -> Result<(), JournalError> {
        let events = self.events.take();
        self.write(batch, &events)
            .map_err(|error| JournalError(error.to_string()))
    }

    fn finish(&mut self, end: RunEnd) -> Result<(), JournalError> {
        // Events emitted since the last commit (`run.finished` among them).
        let events = self.events.take();
        let empty = Batch {
            records: Vec::new(),
            variables: Vec::new(),
            attempts: &[],
        };
        self.write(&empty, &events)
            .map_err(|error| JournalError(error.to_string()))?;
        let (state, status) = match end {
            RunEnd::Finished(status) => (RunState::Finished, Some(status)),
            RunEnd::Stopped => (RunState::Stopped, None),
        };
        self.store
            .end_run(&self.run_id, state, status)
            .map_err(|error| JournalError(error.to_string()))
    }
}
