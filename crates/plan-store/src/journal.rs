//! The engine's [`Journal`] on the ledger: each batch is one immediate transaction; a batch a
//! step waits for can be made durable sooner by the run's log, a file the commits fold in.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use plan_types::{Batch, BatchLog, Event, EventSink, Journal, JournalError, RunEnd};
use rusqlite::types::Value;
use rusqlite::{OptionalExtension, TransactionBehavior, params};
use serde::{Deserialize, Serialize};

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

/// Events numbered for the ledger, shared by a run's journal and its log: the log numbers the
/// events of each batch it appends, and the journal stores them with its next commit.
#[derive(Default)]
struct Numbered {
    next_seq: i64,
    /// Events the log has appended and the ledger does not hold yet.
    logged: Vec<(i64, EventRow)>,
    /// Whether the log has appended anything: commits then say how far they folded it.
    appended: bool,
    /// The last batch a commit folded (and recorded so in `run_logs`).
    folded: u64,
}

impl Numbered {
    /// Numbers what `events` holds.
    fn take(&mut self, events: &EventBuffer) -> Vec<(i64, EventRow)> {
        let taken = events.take();
        let first = self.next_seq;
        self.next_seq += i64::try_from(taken.len()).unwrap_or(i64::MAX);
        (first..).zip(taken).collect()
    }
}

fn lock(numbered: &Mutex<Numbered>) -> std::sync::MutexGuard<'_, Numbered> {
    numbered
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One batch as the ledger stores it, and as a line of a run's log.
#[derive(Default, Serialize, Deserialize)]
struct Entry {
    /// The batch's number (the last one's, for a group).
    n: u64,
    /// Step id, position, item and the record's stored text.
    records: Vec<(String, usize, Option<usize>, String)>,
    /// Name and value (JSON text).
    variables: Vec<(String, String)>,
    /// Step id and checkpoint (JSON text).
    checkpoints: Vec<(String, String)>,
    events: Vec<(i64, EventRow)>,
}

impl Entry {
    fn of(n: u64, batch: &Batch, events: Vec<(i64, EventRow)>) -> Result<Entry, StoreError> {
        let records = batch
            .records
            .iter()
            .map(|(position, record)| {
                Ok((
                    record.step_id.clone(),
                    position.step,
                    position.item,
                    crate::runs::record_text(record)?,
                ))
            })
            .collect::<Result<_, StoreError>>()?;
        Ok(Entry {
            n,
            records,
            variables: batch
                .variables
                .iter()
                .map(|(name, value)| (name.clone(), value.to_string()))
                .collect(),
            checkpoints: batch
                .checkpoints
                .iter()
                .map(|(step_id, checkpoint)| (step_id.clone(), checkpoint.to_string()))
                .collect(),
            events,
        })
    }

    /// Writes the entry's rows for run `key` (`run_id`). Replayed from a log, an event the
    /// ledger holds already is left as it is.
    fn store(
        self,
        transaction: &rusqlite::Transaction<'_>,
        run_id: &str,
        key: i64,
        replayed: bool,
    ) -> Result<(), StoreError> {
        // The entry's texts move into the statements' values: a group commit of a busy run
        // holds thousands of records, which are not copied again here.
        let Entry {
            records,
            variables,
            checkpoints,
            events,
            ..
        } = self;
        let count = |n: usize| Value::Integer(i64::try_from(n).unwrap_or(i64::MAX));
        let key = Value::Integer(key);
        let records: Vec<[Value; 5]> = records
            .into_iter()
            .map(|(step_id, position, item, text)| {
                [
                    key.clone(),
                    Value::Text(step_id),
                    count(position),
                    item.map_or(Value::Null, count),
                    Value::Text(text),
                ]
            })
            .collect();
        insert_rows(
            transaction,
            "INSERT OR REPLACE INTO step_records (run, step_id, position, item, record)",
            &records,
        )?;
        drop(records);
        let pairs = |pairs: Vec<(String, String)>| -> Vec<[Value; 3]> {
            pairs
                .into_iter()
                .map(|(name, value)| {
                    [
                        Value::Text(run_id.to_owned()),
                        Value::Text(name),
                        Value::Text(value),
                    ]
                })
                .collect()
        };
        insert_rows(
            transaction,
            "INSERT OR REPLACE INTO variables (run_id, name, value)",
            &pairs(variables),
        )?;
        let events: Vec<[Value; 10]> = events
            .iter()
            .map(|(seq, event)| event.values(&key, *seq))
            .collect();
        insert_rows(
            transaction,
            if replayed {
                "INSERT OR IGNORE INTO run_events (run, seq, kind, step_id, attempt, ts_ms, tool, duration_ms, ok, rest)"
            } else {
                "INSERT INTO run_events (run, seq, kind, step_id, attempt, ts_ms, tool, duration_ms, ok, rest)"
            },
            &events,
        )?;
        insert_rows(
            transaction,
            "INSERT OR REPLACE INTO checkpoints (run_id, step_id, checkpoint)",
            &pairs(checkpoints),
        )?;
        Ok(())
    }
}

/// The log file of run `key`'s generation `generation` beside the ledger at `ledger`.
pub(crate) fn log_path(ledger: &Path, key: i64, generation: i64) -> PathBuf {
    let mut name = ledger.as_os_str().to_owned();
    name.push(format!("-run{key}-{generation}.log"));
    PathBuf::from(name)
}

impl Store {
    /// Folds into the ledger what run `key`'s log holds beyond what was folded before, if a
    /// process that ran it died (after `kill -9`) and left its log; then starts the run's
    /// next generation of log. Returns that generation. Only the run's owner, or a process
    /// that knows the owner is dead, may call it.
    fn recover_log(&mut self, run_id: &str, key: i64) -> Result<i64, StoreError> {
        let (generation, folded) = self.log_state(key)?;
        let left = log_path(&self.path, key, generation);
        let text = match std::fs::read(&left) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(error) => return Err(StoreError::log(&left, "cannot read it", &error)),
        };
        let transaction = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        // A line cut short (the process died inside its write) ends what the log holds: its
        // batch was never reported durable.
        for line in text.split(|&byte| byte == b'\n') {
            let Ok(entry) = serde_json::from_slice::<Entry>(line) else {
                break;
            };
            if i64::try_from(entry.n).unwrap_or(i64::MAX) > folded {
                entry.store(&transaction, run_id, key, true)?;
            }
        }
        transaction.execute(
            "INSERT OR REPLACE INTO run_logs (run, generation, folded) VALUES (?1, ?2, 0)",
            params![key, generation + 1],
        )?;
        transaction.commit()?;
        if !text.is_empty() {
            let _ = std::fs::remove_file(&left);
        }
        if generation > 1 {
            // What a process killed between the commit above and the removal left, the time
            // before: folded, and read by no later generation.
            let _ = std::fs::remove_file(log_path(&self.path, key, generation - 1));
        }
        Ok(generation + 1)
    }

    /// Folds into the ledger what a run that died left in its log (see [`RunJournal`]), so
    /// that `status` shows every step it completed. A no-op for a run that left none, and on
    /// a ledger opened read-only (which shows what was folded). Call it only for a run whose
    /// owner is not alive.
    pub fn recover(&mut self, run_id: &str) -> Result<(), StoreError> {
        if self.is_in_memory() || self.read_only {
            return Ok(());
        }
        let key = self.run_key(run_id)?;
        let (generation, _) = self.log_state(key)?;
        if log_path(&self.path, key, generation).exists() {
            self.recover_log(run_id, key)?;
        }
        Ok(())
    }

    /// Run `key`'s current log generation and the last batch of it folded ((0, 0) for a run
    /// that never had a log).
    fn log_state(&self, key: i64) -> Result<(i64, i64), StoreError> {
        Ok(self
            .conn
            .query_row(
                "SELECT generation, folded FROM run_logs WHERE run = ?1",
                [key],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .optional()?
            .unwrap_or((0, 0)))
    }
}

/// One run's journal on a ledger.
///
/// Besides its commits, a journal on a ledger file has a log ([`Journal::log`]): a file beside
/// the ledger to which the engine appends a batch its next step waits for, one line of JSON
/// per batch in a single write, instead of waiting for a commit. A line written survives
/// `kill -9` as a commit does (both are in the operating system's cache then; neither is
/// synced to the disk). Commits fold logged batches into the tables as they do the others and
/// say how far they folded (`run_logs`); the next journal of the run (`resume`), or
/// [`Store::recover`], folds what a dead process left, and the log is removed when the run
/// ends.
pub struct RunJournal {
    store: Store,
    run_id: String,
    /// The run's integer key, which its rows carry.
    key: i64,
    events: Arc<EventBuffer>,
    numbered: Arc<Mutex<Numbered>>,
    /// This process's log of the run, if the ledger is a file.
    log: Option<PathBuf>,
}

impl std::fmt::Debug for RunJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunJournal")
            .field("run_id", &self.run_id)
            .finish()
    }
}

impl RunJournal {
    /// The ledger it writes, as committed so far (what a document kept current as the run
    /// commits reads).
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// A journal for a run already in the ledger (`begin_run` or `resume_run` first); events
    /// emitted to `events` are stored with each commit, after those already stored. What an
    /// earlier process of the run left in its log is folded into the ledger first.
    pub fn new(
        mut store: Store,
        run_id: &str,
        events: Arc<EventBuffer>,
    ) -> Result<Self, StoreError> {
        let key = store.run_key(run_id)?;
        let log = if store.is_in_memory() {
            None
        } else {
            let generation = store.recover_log(run_id, key)?;
            Some(log_path(&store.path, key, generation))
        };
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
            numbered: Arc::new(Mutex::new(Numbered {
                next_seq,
                ..Numbered::default()
            })),
            log,
        })
    }

    /// The ledger, once the run is over.
    pub fn into_store(self) -> Store {
        self.store
    }

    fn write(&mut self, batch: &Batch, upto: u64) -> Result<(), StoreError> {
        let (events, appended) = {
            let mut numbered = lock(&self.numbered);
            let mut events = std::mem::take(&mut numbered.logged);
            events.extend(numbered.take(&self.events));
            (events, numbered.appended)
        };
        let folds = appended && upto > 0;
        if batch.is_empty() && events.is_empty() && !folds {
            return Ok(());
        }
        let entry = Entry::of(upto, batch, events)?;
        let transaction = self
            .store
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        entry.store(&transaction, &self.run_id, self.key, false)?;
        if folds {
            transaction.execute(
                "UPDATE run_logs SET folded = ?2 WHERE run = ?1",
                params![self.key, i64::try_from(upto).unwrap_or(i64::MAX)],
            )?;
        }
        // The run's row is not touched here: it holds the whole plan document, and rewriting
        // it on every commit made large plans' runs crawl.
        transaction.commit()?;
        if folds {
            lock(&self.numbered).folded = upto;
        }
        Ok(())
    }
}

/// The size beyond which a log that is folded whole is emptied before its next line, so that a
/// long chain's log stays small.
const TRIM_AT: u64 = 1 << 20;

/// The log of one run in one process: see [`RunJournal`].
struct RunLog {
    path: PathBuf,
    file: Option<std::fs::File>,
    /// Bytes in the file.
    size: u64,
    /// The last batch appended.
    last: u64,
    events: Arc<EventBuffer>,
    numbered: Arc<Mutex<Numbered>>,
}

impl RunLog {
    fn append(&mut self, number: u64, batch: &Batch) -> Result<(), StoreError> {
        let failed = |path: &Path, error: std::io::Error| {
            StoreError::log(path, "cannot write to it", &error)
        };
        if self.file.is_none() {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)
                .map_err(|error| StoreError::log(&self.path, "cannot create it", &error))?;
            self.file = Some(file);
        }
        let mut numbered = lock(&self.numbered);
        let events = numbered.take(&self.events);
        let entry = Entry::of(number, batch, events)?;
        let mut line = serde_json::to_vec(&entry).map_err(crate::runs::damaged("log entry"))?;
        line.push(b'\n');
        if let Some(file) = self.file.as_mut() {
            if self.size >= TRIM_AT && numbered.folded >= self.last {
                // Every line is in the ledger, and `run_logs` says so: a crash now or after
                // finds nothing in the log it lacks.
                file.set_len(0).map_err(|error| failed(&self.path, error))?;
                self.size = 0;
            }
            // One write: a line is in the log whole, or (the process killed inside it) cut
            // short at the end, where recovery stops.
            file.write_all(&line)
                .map_err(|error| failed(&self.path, error))?;
        }
        self.size += line.len() as u64;
        self.last = number;
        numbered.logged.extend(entry.events);
        numbered.appended = true;
        Ok(())
    }
}

impl BatchLog for RunLog {
    fn append(&mut self, number: u64, batch: &Batch) -> Result<(), JournalError> {
        RunLog::append(self, number, batch).map_err(|error| JournalError(error.to_string()))
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
    fn commit(&mut self, batch: &Batch, upto: u64) -> Result<(), JournalError> {
        self.write(batch, upto)
            .map_err(|error| JournalError(error.to_string()))
    }

    fn flush(&mut self) -> Result<(), JournalError> {
        self.write(&Batch::default(), 0)
            .map_err(|error| JournalError(error.to_string()))
    }

    fn log(&mut self) -> Option<Box<dyn BatchLog>> {
        Some(Box::new(RunLog {
            path: self.log.clone()?,
            file: None,
            size: 0,
            last: 0,
            events: self.events.clone(),
            numbered: self.numbered.clone(),
        }))
    }

    fn finish(&mut self, end: RunEnd, at: SystemTime) -> Result<(), JournalError> {
        // Events emitted since the last commit (`run.finished` among them).
        self.write(&Batch::default(), 0)
            .map_err(|error| JournalError(error.to_string()))?;
        if let Some(log) = &self.log {
            // Everything in it is folded now.
            match std::fs::remove_file(log) {
                Ok(()) => {}
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => {
                    return Err(JournalError(
                        StoreError::log(log, "cannot remove it", &error).to_string(),
                    ));
                }
            }
        }
        let (state, status) = match end {
            RunEnd::Finished(status) => (RunState::Finished, Some(status)),
            RunEnd::Stopped => (RunState::Stopped, None),
            RunEnd::Waiting {
                pending,
                checkpoints,
            } => {
                return self
                    .store
                    .halt_for_approvals(&self.run_id, &pending, &checkpoints, at)
                    .map_err(|error| JournalError(error.to_string()));
            }
        };
        self.store
            .end_run(&self.run_id, state, status, at)
            .map_err(|error| JournalError(error.to_string()))
    }
}
