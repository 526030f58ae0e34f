//! Runs and what they recorded.

use crate::LAST_RUN;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use plan_types::{Event, Record, TaskStatus};
use rusqlite::{OptionalExtension, params};
use serde_json::{Map, Value};

use crate::events::EventRow;
use crate::{Store, StoreError};

/// Where a run is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RunState {
    /// Started and not finished (or its process died: see `owner_pid`).
    Running,
    /// Stopped by the user (Ctrl+C); `resume` continues it.
    Stopped,
    /// Halted until approvals are decided; `resume` continues it.
    Waiting,
    /// Ran to the end; `task_status` says how.
    Finished,
}

impl RunState {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RunState::Running => "running",
            RunState::Stopped => "stopped",
            RunState::Waiting => "waiting",
            RunState::Finished => "finished",
        }
    }

    fn parse(text: &str) -> Result<Self, StoreError> {
        match text {
            "running" => Ok(RunState::Running),
            "stopped" => Ok(RunState::Stopped),
            "waiting" => Ok(RunState::Waiting),
            "finished" => Ok(RunState::Finished),
            other => Err(StoreError::Damaged {
                what: "run state",
                message: format!("unknown state `{other}`"),
            }),
        }
    }
}

/// What a new run stores about itself.
#[derive(Debug, Clone)]
pub struct NewRun<'a> {
    /// The run's id.
    pub run_id: &'a str,
    /// The plan's id.
    pub plan_id: &'a str,
    /// The plan's file name (for diagnostics when it is loaded again).
    pub plan_name: &'a str,
    /// `json` or `yaml`.
    pub plan_format: &'a str,
    /// The plan document as given.
    pub plan_source: &'a str,
    /// The run's variables from `--vars` and `--var`.
    pub inputs: &'a Map<String, Value>,
    /// Run options worth keeping (`max_concurrency`).
    pub options: &'a Value,
    /// The process running it.
    pub owner_pid: u32,
    /// When it started.
    pub started_at: &'a str,
}

/// A stored run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunRow {
    /// The run's id.
    pub run_id: String,
    /// The plan's id.
    pub plan_id: String,
    /// The plan's file name.
    #[serde(skip)]
    pub plan_name: String,
    /// `json` or `yaml`.
    #[serde(skip)]
    pub plan_format: String,
    /// The plan document as given.
    #[serde(skip)]
    pub plan_source: String,
    /// SHA-256 of the plan document.
    #[serde(skip)]
    pub plan_hash: String,
    /// `--vars` and `--var`.
    #[serde(skip)]
    pub inputs: Map<String, Value>,
    /// Run options (`max_concurrency`).
    #[serde(skip)]
    pub options: Value,
    /// Where the run is.
    pub state: RunState,
    /// How it ended, once finished.
    pub task_status: Option<TaskStatus>,
    /// The process that last ran it.
    #[serde(skip)]
    pub owner_pid: Option<u32>,
    /// When it started.
    pub started_at: String,
    /// When it last changed.
    pub updated_at: String,
    /// When it finished or stopped.
    pub finished_at: Option<String>,
}

impl RunRow {
    /// How many of its steps ended ok, failed or skipped, as of its last process's end (none
    /// for a run that has not ended yet, or that ended before these were kept).
    pub fn counts(&self) -> Option<StepCounts> {
        serde_json::from_value(self.options.get("counts")?.clone()).ok()
    }
}

/// How many steps of a run ended each way ([`RunRow::counts`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StepCounts {
    /// Succeeded.
    pub ok: u64,
    /// Failed (or were cut off: they run again on resume).
    pub failed: u64,
    /// Skipped: their condition, or what they depend on.
    pub skipped: u64,
}

/// One attempt of one step (or map item).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct AttemptRow {
    /// The step or item.
    pub step_id: String,
    /// 1 for the first try.
    pub attempt: u32,
    /// When it started.
    pub started_at: String,
    /// How long it took.
    pub duration_ms: u64,
    /// Whether it succeeded.
    pub ok: bool,
    /// The error's code, if it failed.
    pub error_code: Option<String>,
    /// The error's message, if it failed.
    pub error_message: Option<String>,
}

const RUN_COLUMNS: &str = "run_id, plan_id, plan_name, plan_format, plan_source, plan_hash, inputs, options, state, task_status, owner_pid, started_at, updated_at, finished_at";

/// A record as stored: its JSON without `step_id` (a column of its own) and without the
/// fields that have their usual value (`ok: true`, `skipped: false`, one attempt, 0 ms), which
/// most records have: an `echo` step's row is 45 bytes shorter. Rows written whole (by older
/// plan-cli) read back the same.
#[derive(serde::Serialize)]
#[expect(clippy::box_collection, reason = "borrows `Record::upstream` as it is")]
struct StoredRecord<'a> {
    #[serde(skip_serializing_if = "is_true")]
    ok: bool,
    #[serde(skip_serializing_if = "is_false")]
    skipped: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: &'a Option<std::sync::Arc<Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: &'a Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: &'a Option<Box<plan_types::StepError>>,
    #[serde(skip_serializing_if = "is_one")]
    attempts: u32,
    #[serde(skip_serializing_if = "is_zero")]
    duration_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    upstream: &'a Option<Box<BTreeMap<String, String>>>,
}

/// A stored record read back, each field missing from the row at its usual value.
#[derive(serde::Deserialize)]
#[expect(clippy::box_collection, reason = "becomes `Record::upstream` as it is")]
struct ReadRecord {
    #[serde(default = "yes")]
    ok: bool,
    #[serde(default)]
    skipped: bool,
    #[serde(default)]
    result: Option<std::sync::Arc<Value>>,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    error: Option<Box<plan_types::StepError>>,
    #[serde(default = "one")]
    attempts: u32,
    #[serde(default)]
    duration_ms: u64,
    #[serde(default)]
    upstream: Option<Box<BTreeMap<String, String>>>,
}

#[expect(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if"
)]
fn is_true(value: &bool) -> bool {
    *value
}

#[expect(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if"
)]
fn is_false(value: &bool) -> bool {
    !*value
}

#[expect(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if"
)]
fn is_one(value: &u32) -> bool {
    *value == 1
}

#[expect(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if"
)]
fn is_zero(value: &u64) -> bool {
    *value == 0
}

fn yes() -> bool {
    true
}

fn one() -> u32 {
    1
}

pub(crate) fn record_text(record: &Record) -> Result<String, StoreError> {
    // Every field named: one added to `Record` does not compile here until it is stored.
    let Record {
        step_id: _,
        ok,
        skipped,
        result,
        reason,
        error,
        attempts,
        duration_ms,
        upstream,
    } = record;
    serde_json::to_string(&StoredRecord {
        ok: *ok,
        skipped: *skipped,
        result,
        reason,
        error,
        attempts: *attempts,
        duration_ms: *duration_ms,
        upstream,
    })
    .map_err(damaged("record"))
}

/// A record read back, with its step id (a row written whole holds it too; the column wins).
fn read_record(step_id: &str, text: &str) -> Result<Record, StoreError> {
    let read: ReadRecord = plan_types::json::from_str(text).map_err(damaged("record"))?;
    Ok(Record {
        step_id: step_id.to_owned(),
        ok: read.ok,
        skipped: read.skipped,
        result: read.result,
        reason: read.reason,
        error: read.error,
        attempts: read.attempts,
        duration_ms: read.duration_ms,
        upstream: read.upstream,
    })
}

/// A JSON error in a stored value of kind `what`, as a damaged-row error.
pub(crate) fn damaged(what: &'static str) -> impl Fn(serde_json::Error) -> StoreError {
    move |error| StoreError::Damaged {
        what,
        message: error.to_string(),
    }
}

impl Store {
    /// Records that a run started.
    pub fn begin_run(&mut self, run: &NewRun<'_>) -> Result<(), StoreError> {
        let inputs = serde_json::to_string(run.inputs).map_err(damaged("inputs"))?;
        self.conn.execute(
            "INSERT INTO runs (run_id, plan_id, plan_name, plan_format, plan_source, plan_hash, inputs, options, state, owner_pid, started_at, updated_at, key)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'running', ?9, ?10, ?10, (SELECT coalesce(max(key), 0) + 1 FROM runs))",
            params![
                run.run_id,
                run.plan_id,
                run.plan_name,
                run.plan_format,
                run.plan_source,
                crate::plan_hash(run.plan_source),
                inputs,
                run.options.to_string(),
                run.owner_pid,
                run.started_at
            ],
        )?;
        Ok(())
    }

    /// Claims run `run_id` for process `owner_pid` to go on with, as one statement: unless
    /// another process has claimed it since it was read, when it was not running or its owner
    /// was `seen` (a process that died). Whether it is this process's now: two processes that
    /// go on with a run at once never both get it.
    pub fn resume_run(
        &mut self,
        run_id: &str,
        owner_pid: u32,
        seen: Option<u32>,
    ) -> Result<bool, StoreError> {
        let claimed = self.conn.execute(
            "UPDATE runs SET state = 'running', task_status = NULL, finished_at = NULL, owner_pid = ?2, updated_at = ?3 WHERE run_id = ?1 AND (state != 'running' OR owner_pid IS ?4 OR owner_pid = ?2)",
            params![run_id, owner_pid, crate::timestamp(std::time::SystemTime::now()), seen],
        )?;
        Ok(claimed == 1)
    }

    /// Replaces a run's plan with a new revision (`run --replan`): the plan it had is kept
    /// in `plan_revisions` with `reason`, the run's row gets `source` (JSON) and `options`
    /// (what the re-planned run is held to), and `event` (its `plan.replanned`) is added to
    /// the run's events, all in one transaction. The new revision's number (1 for the first
    /// re-plan).
    pub fn replan(
        &mut self,
        run_id: &str,
        source: &str,
        options: &Value,
        reason: &str,
        event: &plan_types::Event,
    ) -> Result<u32, StoreError> {
        let key = self.run_key(run_id)?;
        let row = crate::events::EventRow::of(event)?;
        let transaction = self.conn.transaction()?;
        let kept: i64 = transaction.query_row(
            "SELECT count(*) FROM plan_revisions WHERE run_id = ?1",
            [run_id],
            |row| row.get(0),
        )?;
        let now = crate::timestamp(std::time::SystemTime::now());
        transaction.execute(
            "INSERT INTO plan_revisions (run_id, revision, plan_source, plan_hash, reason, replaced_at)
             SELECT run_id, ?2, plan_source, plan_hash, ?3, ?4 FROM runs WHERE run_id = ?1",
            params![run_id, kept, reason, now],
        )?;
        transaction.execute(
            "UPDATE runs SET plan_source = ?2, plan_hash = ?3, plan_format = 'json', updated_at = ?4, options = ?5 WHERE run_id = ?1",
            params![run_id, source, crate::plan_hash(source), now, options.to_string()],
        )?;
        let seq: i64 = transaction.query_row(
            "SELECT coalesce(max(seq), 0) + 1 FROM run_events WHERE run = ?1",
            [key],
            |row| row.get(0),
        )?;
        let values = row.values(&rusqlite::types::Value::Integer(key), seq);
        transaction.execute(
            "INSERT INTO run_events (run, seq, kind, step_id, attempt, ts_ms, tool, duration_ms, ok, rest) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            rusqlite::params_from_iter(values.iter()),
        )?;
        transaction.commit()?;
        Ok(u32::try_from(kept + 1).unwrap_or(u32::MAX))
    }

    /// Sets one value of what a run keeps of how it runs (its `options`), at `path` (a JSON
    /// path, `$.sources.state_file`), leaving the rest as it is: a resume given another state
    /// file keeps that one from then on.
    pub fn set_option(
        &mut self,
        run_id: &str,
        path: &str,
        value: &Value,
    ) -> Result<(), StoreError> {
        self.run_key(run_id)?;
        self.conn.execute(
            "UPDATE runs SET options = json_set(options, ?2, json(?3)), updated_at = ?4 WHERE run_id = ?1",
            params![
                run_id,
                path,
                value.to_string(),
                crate::timestamp(std::time::SystemTime::now())
            ],
        )?;
        Ok(())
    }

    /// How many times a run's plan was replaced (`run --replan`).
    pub fn revisions(&self, run_id: &str) -> Result<u32, StoreError> {
        let count: i64 = self.conn.query_row(
            "SELECT count(*) FROM plan_revisions WHERE run_id = ?1",
            [run_id],
            |row| row.get(0),
        )?;
        Ok(u32::try_from(count).unwrap_or(u32::MAX))
    }

    /// Records how a run ended, and when.
    pub fn end_run(
        &mut self,
        run_id: &str,
        state: RunState,
        task_status: Option<TaskStatus>,
        at: std::time::SystemTime,
    ) -> Result<(), StoreError> {
        let now = crate::timestamp(at);
        self.conn.execute(
            "UPDATE runs SET state = ?2, task_status = ?3, finished_at = ?4, updated_at = ?4 WHERE run_id = ?1",
            params![run_id, state.as_str(), task_status.map(TaskStatus::as_str), now],
        )?;
        Ok(())
    }

    /// The run with this id, or with this unique id prefix, or the newest run for
    /// [`LAST_RUN`] (`last`, which no run id can start with: ids are upper case).
    pub fn run(&self, id: &str) -> Result<RunRow, StoreError> {
        if id == LAST_RUN {
            return self
                .conn
                .query_row(
                    &format!("SELECT {RUN_COLUMNS} FROM runs ORDER BY started_at DESC, run_id DESC LIMIT 1"),
                    [],
                    run_row,
                )
                .optional()?
                .unwrap_or_else(|| {
                    Err(StoreError::NotFound {
                        what: "run",
                        id: LAST_RUN.to_owned(),
                    })
                });
        }
        let exact = self
            .conn
            .query_row(
                &format!("SELECT {RUN_COLUMNS} FROM runs WHERE run_id = ?1"),
                [id],
                run_row,
            )
            .optional()?;
        if let Some(row) = exact {
            return row;
        }
        if id.is_empty() {
            return Err(StoreError::NotFound {
                what: "run",
                id: id.to_owned(),
            });
        }
        // A literal prefix: LIKE would read `%` and `_` in the id as wildcards.
        let mut statement = self.conn.prepare(&format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE substr(run_id, 1, length(?1)) = ?1 ORDER BY run_id LIMIT 10"
        ))?;
        let matches: Vec<RunRow> = statement
            .query_map([id], run_row)?
            .collect::<Result<Result<_, _>, _>>()??;
        match matches.len() {
            0 => Err(StoreError::NotFound {
                what: "run",
                id: id.to_owned(),
            }),
            1 => Ok(matches
                .into_iter()
                .next()
                .unwrap_or_else(|| unreachable!("one match"))),
            _ => Err(StoreError::Ambiguous {
                prefix: id.to_owned(),
                candidates: matches.into_iter().map(|r| r.run_id).collect(),
            }),
        }
    }

    /// Every run, newest first.
    pub fn runs(&self) -> Result<Vec<RunRow>, StoreError> {
        let mut statement = self.conn.prepare(&format!(
            "SELECT {RUN_COLUMNS} FROM runs ORDER BY started_at DESC, run_id DESC"
        ))?;
        let rows = statement
            .query_map([], run_row)?
            .collect::<Result<Result<Vec<_>, _>, _>>()??;
        Ok(rows)
    }

    /// The integer key a run's rows carry.
    /// Keeps with run `run_id` how its steps ended ([`RunRow::counts`]), so that a list of
    /// runs says it without reading their records.
    pub fn keep_counts(&mut self, run_id: &str, counts: StepCounts) -> Result<(), StoreError> {
        let counts = serde_json::to_value(counts).map_err(damaged("counts"))?;
        self.set_option(run_id, "$.counts", &counts)
    }

    pub(crate) fn run_key(&self, run_id: &str) -> Result<i64, StoreError> {
        self.conn
            .query_row("SELECT key FROM runs WHERE run_id = ?1", [run_id], |row| {
                row.get(0)
            })
            .optional()?
            .ok_or_else(|| StoreError::NotFound {
                what: "run",
                id: run_id.to_owned(),
            })
    }

    /// A run's records, in plan order (a map step's items before the step).
    pub fn records(&self, run_id: &str) -> Result<Vec<Record>, StoreError> {
        let key = self.run_key(run_id)?;
        let mut statement = self.conn.prepare_cached(
            "SELECT step_id, position, item, record FROM step_records WHERE run = ?1",
        )?;
        let mut rows: Vec<(i64, i64, String, String)> = statement
            .query_map([key], |row| {
                Ok((
                    row.get(1)?,
                    row.get::<_, Option<i64>>(2)?.unwrap_or(i64::MAX),
                    row.get(0)?,
                    row.get(3)?,
                ))
            })?
            .collect::<Result<_, _>>()?;
        // Sorted here rather than by an index: one index fewer on every write.
        rows.sort_unstable_by_key(|&(position, item, _, _)| (position, item));
        rows.iter()
            .map(|(_, _, step_id, text)| read_record(step_id, text))
            .collect()
    }

    /// Forgets some of a run's records (`resume --retry-failed` runs those steps again). The
    /// attempts each had made are kept ([`Store::earlier_attempts`]), in the same transaction:
    /// a re-run counts on from them.
    pub fn forget_records(&mut self, run_id: &str, step_ids: &[String]) -> Result<(), StoreError> {
        let transaction = self.conn.transaction()?;
        {
            // A record's `attempts` counts every attempt of the step so far, earlier runs'
            // included, so the larger figure is the step's.
            let mut earlier = transaction.prepare(
                "INSERT INTO earlier_attempts (run_id, step_id, attempts)
                 SELECT ?1, step_id, coalesce(json_extract(record, '$.attempts'), 1)
                 FROM step_records
                 WHERE run = (SELECT key FROM runs WHERE run_id = ?1) AND step_id = ?2
                   AND coalesce(json_extract(record, '$.attempts'), 1) > 0
                 ON CONFLICT (run_id, step_id)
                 DO UPDATE SET attempts = max(attempts, excluded.attempts)",
            )?;
            let mut records = transaction.prepare(
                "DELETE FROM step_records WHERE run = (SELECT key FROM runs WHERE run_id = ?1) AND step_id = ?2",
            )?;
            // A block run again from its entry point no longer goes on from where it waited.
            let mut checkpoints = transaction
                .prepare("DELETE FROM checkpoints WHERE run_id = ?1 AND step_id = ?2")?;
            for step_id in step_ids {
                earlier.execute(params![run_id, step_id])?;
                records.execute(params![run_id, step_id])?;
                checkpoints.execute(params![run_id, step_id])?;
            }
        }
        transaction.commit()?;
        Ok(())
    }

    /// The attempts each step (or item, or block node) of a run made before its record was
    /// forgotten to run it again: its next attempt is one more.
    pub fn earlier_attempts(&self, run_id: &str) -> Result<BTreeMap<String, u32>, StoreError> {
        let mut statement = self
            .conn
            .prepare_cached("SELECT step_id, attempts FROM earlier_attempts WHERE run_id = ?1")?;
        let rows = statement
            .query_map([run_id], |row| Ok((row.get(0)?, row.get(1)?)))?
            .collect::<Result<_, _>>()?;
        Ok(rows)
    }

    /// A run's variables as last committed: every bind so far.
    pub fn variables(&self, run_id: &str) -> Result<BTreeMap<String, Arc<Value>>, StoreError> {
        let mut statement = self
            .conn
            .prepare("SELECT name, value FROM variables WHERE run_id = ?1 ORDER BY name")?;
        let rows: Vec<(String, String)> = statement
            .query_map([run_id], |row| Ok((row.get(0)?, row.get(1)?)))?
            .collect::<Result<_, _>>()?;
        rows.into_iter()
            .map(|(name, text)| {
                Ok((
                    name,
                    Arc::new(plan_types::json::from_str(&text).map_err(damaged("variable"))?),
                ))
            })
            .collect()
    }

    /// Where a run's block steps that have not ended stand, by step id (see the engine's
    /// `Batch::checkpoints`).
    pub fn checkpoints(&self, run_id: &str) -> Result<BTreeMap<String, Value>, StoreError> {
        let mut statement = self
            .conn
            .prepare("SELECT step_id, checkpoint FROM checkpoints WHERE run_id = ?1")?;
        let rows = statement.query_map([run_id], |row| {
            Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
        })?;
        let mut checkpoints = BTreeMap::new();
        for row in rows {
            let (step_id, text) = row?;
            let value = plan_types::json::from_str(&text).map_err(damaged("checkpoint"))?;
            checkpoints.insert(step_id, value);
        }
        Ok(checkpoints)
    }

    /// A run's attempts, in the order they were made: each is a `tool.called` event and the
    /// `tool.succeeded` or `tool.failed` event of the same step and attempt.
    pub fn attempts(&self, run_id: &str) -> Result<Vec<AttemptRow>, StoreError> {
        let key = self.run_key(run_id)?;
        let mut statement = self.conn.prepare_cached(&format!(
            "SELECT {} FROM run_events WHERE run = ?1 AND kind IN (1, 2, 3) ORDER BY seq",
            EventRow::COLUMNS
        ))?;
        let events: Vec<EventRow> = statement
            .query_map([key], |row| EventRow::read(row, 0))?
            .collect::<Result<_, _>>()?;
        let mut attempts: Vec<AttemptRow> = Vec::new();
        // Where each started attempt is in `attempts`, by step and attempt number.
        let mut open: HashMap<(String, u32), usize> = HashMap::new();
        for event in events {
            let step_id = event.step_id.as_deref().unwrap_or_default().to_owned();
            match event.kind_name() {
                Some("tool.called") => {
                    open.insert((step_id.clone(), event.attempt), attempts.len());
                    attempts.push(AttemptRow {
                        step_id,
                        attempt: event.attempt,
                        started_at: crate::events::timestamp(event.ts_ms),
                        duration_ms: 0,
                        ok: false,
                        error_code: None,
                        error_message: None,
                    });
                }
                Some(kind) => {
                    let Some(&at) = open.get(&(step_id, event.attempt)) else {
                        continue;
                    };
                    let attempt = &mut attempts[at];
                    attempt.duration_ms = event.duration_ms.unwrap_or(0);
                    attempt.ok = kind == "tool.succeeded";
                    if !attempt.ok {
                        let rest: Value = event
                            .rest
                            .as_deref()
                            .map(plan_types::json::from_str)
                            .transpose()
                            .map_err(damaged("event"))?
                            .unwrap_or(Value::Null);
                        let text = |field: &str| rest["error"][field].as_str().map(str::to_owned);
                        attempt.error_code = text("code");
                        attempt.error_message = text("message");
                    }
                }
                None => {}
            }
        }
        Ok(attempts)
    }

    /// A run's events after sequence number `after` (0 for all), in order.
    pub fn events_after(&self, run_id: &str, after: i64) -> Result<Vec<(i64, Event)>, StoreError> {
        let key = self.run_key(run_id)?;
        let mut statement = self.conn.prepare_cached(&format!(
            "SELECT seq, {} FROM run_events WHERE run = ?1 AND seq > ?2 ORDER BY seq",
            EventRow::COLUMNS
        ))?;
        let rows: Vec<(i64, EventRow)> = statement
            .query_map(params![key, after], |row| {
                Ok((row.get(0)?, EventRow::read(row, 1)?))
            })?
            .collect::<Result<_, _>>()?;
        rows.into_iter()
            .map(|(seq, event)| Ok((seq, event.into_event(run_id)?)))
            .collect()
    }

    /// When a run's last event happened (RFC 3339), if it has any: where a run whose process
    /// died stopped.
    pub fn last_event_at(&self, run_id: &str) -> Result<Option<String>, StoreError> {
        let key = self.run_key(run_id)?;
        let ts_ms: Option<i64> = self
            .conn
            .prepare_cached(
                "SELECT ts_ms FROM run_events WHERE run = ?1 ORDER BY seq DESC LIMIT 1",
            )?
            .query_row([key], |row| row.get(0))
            .optional()?;
        Ok(ts_ms.map(crate::events::timestamp))
    }

    /// The runs [`Store::gc`] would delete, oldest first.
    pub fn expired(&self, cutoff: &str, unfinished_too: bool) -> Result<Vec<RunRow>, StoreError> {
        let mut statement = self.conn.prepare(&format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE {} AND finished_at < ?1 ORDER BY finished_at, run_id",
            expired_states(unfinished_too)
        ))?;
        let rows = statement
            .query_map([cutoff], run_row)?
            .collect::<Result<Result<Vec<_>, _>, _>>()??;
        Ok(rows)
    }

    /// Deletes finished runs that ended before `cutoff` (RFC 3339), with everything they
    /// recorded; with `unfinished_too`, also runs that stopped or wait (they could still be
    /// resumed). Running runs are always kept. Returns how many were deleted.
    ///
    /// What is deleted is overwritten, in the database file and its write-ahead log: a deleted
    /// run's results cannot be read back from the file.
    pub fn gc(&mut self, cutoff: &str, unfinished_too: bool) -> Result<usize, StoreError> {
        let states = expired_states(unfinished_too);
        // Logs a dead process left (see `RunJournal`) hold results too: they go with the runs.
        let mut statement = self.conn.prepare(&format!(
            "SELECT l.run, l.generation FROM run_logs l JOIN runs r ON r.key = l.run WHERE {states} AND finished_at < ?1"
        ))?;
        let logs: Vec<(i64, i64)> = statement
            .query_map([cutoff], |row| Ok((row.get(0)?, row.get(1)?)))?
            .collect::<Result<_, _>>()?;
        drop(statement);
        self.conn.pragma_update(None, "secure_delete", true)?;
        let deleted = self.conn.execute(
            &format!("DELETE FROM runs WHERE {states} AND finished_at < ?1"),
            [cutoff],
        );
        self.conn.pragma_update(None, "secure_delete", false)?;
        let deleted = deleted?;
        for (key, generation) in logs {
            let _ = std::fs::remove_file(crate::journal::log_path(&self.path, key, generation));
        }
        if deleted > 0 {
            // Until a checkpoint, the log still holds the pages as they were before.
            self.conn
                .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
        }
        Ok(deleted)
    }
}

/// The states of runs `gc` may delete.
fn expired_states(unfinished_too: bool) -> &'static str {
    if unfinished_too {
        "state != 'running'"
    } else {
        "state = 'finished'"
    }
}

/// Maps a row; the outer error is SQLite's, the inner one a damaged stored value.
fn run_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Result<RunRow, StoreError>> {
    let inputs: String = row.get(6)?;
    let options: String = row.get(7)?;
    let state: String = row.get(8)?;
    let task_status: Option<String> = row.get(9)?;
    let build = || -> Result<RunRow, StoreError> {
        Ok(RunRow {
            run_id: row.get(0)?,
            plan_id: row.get(1)?,
            plan_name: row.get(2)?,
            plan_format: row.get(3)?,
            plan_source: row.get(4)?,
            plan_hash: row.get(5)?,
            inputs: plan_types::json::from_str(&inputs).map_err(damaged("inputs"))?,
            options: plan_types::json::from_str(&options).map_err(damaged("options"))?,
            state: RunState::parse(&state)?,
            task_status: task_status
                .map(|s| serde_json::from_value(Value::String(s)).map_err(damaged("task status")))
                .transpose()?,
            owner_pid: row.get(10)?,
            started_at: row.get(11)?,
            updated_at: row.get(12)?,
            finished_at: row.get(13)?,
        })
    };
    Ok(build())
}

#[cfg(test)]
mod tests {
    use super::{read_record, record_text};
    use plan_types::Record;
    use serde_json::json;

    /// A record is stored without its usual values and reads back whole; a row written whole
    /// (by an older plan-cli, with its step id) reads back the same.
    #[test]
    fn records_are_stored_short_and_read_back_whole() {
        let usual: Record = serde_json::from_value(json!({
            "step_id": "s", "ok": true, "skipped": false, "result": {"i": 3}, "attempts": 1, "duration_ms": 0
        }))
        .unwrap();
        assert_eq!(record_text(&usual).unwrap(), r#"{"result":{"i":3}}"#);
        assert_eq!(
            read_record("s", &record_text(&usual).unwrap()).unwrap(),
            usual
        );
        let unusual: Record = serde_json::from_value(json!({
            "step_id": "t", "ok": false, "skipped": true, "reason": "upstream failed",
            "attempts": 0, "duration_ms": 12, "upstream": {"a": "failed"}
        }))
        .unwrap();
        assert_eq!(
            read_record("t", &record_text(&unusual).unwrap()).unwrap(),
            unusual
        );
        let whole = r#"{"step_id":"s","ok":true,"skipped":false,"result":{"i":3},"attempts":1,"duration_ms":0}"#;
        assert_eq!(read_record("s", whole).unwrap(), usual);
        let without_id =
            r#"{"ok":true,"skipped":false,"result":{"i":3},"attempts":2,"duration_ms":5}"#;
        assert_eq!(read_record("s", without_id).unwrap().attempts, 2);
    }
}
