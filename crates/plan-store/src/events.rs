//! Events as ledger rows: the fields every event of a step has are columns (the kind as a
//! number, the time as milliseconds since the epoch), and only the rarer ones are kept as a
//! JSON object. A row reads back as the same [`Event`], serialized the same way.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use plan_types::{Event, EventKind};
use rusqlite::types::Value;
use serde_json::Map;

use crate::StoreError;
use crate::runs::damaged;
use crate::schema::EVENT_KINDS;

/// An event as the ledger keeps it (the columns of `run_events` after `run, seq`), made when
/// the event is emitted: smaller than the event (no text timestamp, the rare fields already
/// JSON), since a busy run's events wait in memory for the next commit. Read back, it gives the
/// same event.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct EventRow {
    pub(crate) kind: i64,
    pub(crate) step_id: Option<Arc<str>>,
    pub(crate) attempt: u32,
    pub(crate) ts_ms: i64,
    pub(crate) tool: Option<Arc<str>>,
    pub(crate) duration_ms: Option<u64>,
    pub(crate) ok: Option<bool>,
    pub(crate) rest: Option<String>,
}

impl EventRow {
    /// The row of `event`.
    pub(crate) fn of(event: &Event) -> Result<Self, StoreError> {
        let ts_ms = humantime::parse_rfc3339(&event.ts)
            .ok()
            .and_then(|at| at.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map_or(0, |since| {
                i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
            });
        let rest = Rest::of(event);
        let rest = if rest.is_empty() {
            None
        } else {
            Some(serde_json::to_string(&rest).map_err(damaged("event"))?)
        };
        Ok(EventRow {
            kind: kind_number(event.kind)?,
            step_id: event.step_id.clone(),
            attempt: event.attempt,
            ts_ms,
            tool: event.tool.clone(),
            duration_ms: event.duration_ms,
            ok: event.ok,
            rest,
        })
    }

    /// The columns `run, seq, kind, step_id, attempt, ts_ms, tool, duration_ms, ok, rest`, for
    /// run `key` at number `seq`.
    pub(crate) fn values(&self, key: &Value, seq: i64) -> [Value; 10] {
        let text = |value: &Option<Arc<str>>| {
            value
                .as_ref()
                .map_or(Value::Null, |v| Value::Text(v.to_string()))
        };
        [
            key.clone(),
            Value::Integer(seq),
            Value::Integer(self.kind),
            text(&self.step_id),
            Value::Integer(i64::from(self.attempt)),
            Value::Integer(self.ts_ms),
            text(&self.tool),
            self.duration_ms.map_or(Value::Null, |ms| {
                Value::Integer(i64::try_from(ms).unwrap_or(i64::MAX))
            }),
            self.ok
                .map_or(Value::Null, |ok| Value::Integer(i64::from(ok))),
            self.rest.clone().map_or(Value::Null, Value::Text),
        ]
    }
}

/// The fields of an event that are not columns: none, for most events. (A test checks that
/// an event with every field set reads back whole, so a field added to `Event` and not here
/// is caught.)
#[derive(serde::Serialize)]
struct Rest<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    plan_id: Option<&'a Arc<str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    delay_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    task_status: Option<plan_types::TaskStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    from: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    to: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    condition: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pending: Option<&'a Vec<plan_types::PendingApproval>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    progress: Option<&'a plan_types::ProgressReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<&'a str>,
}

impl<'a> Rest<'a> {
    fn of(event: &'a Event) -> Self {
        Rest {
            plan_id: event.plan_id.as_ref(),
            error: event.error.as_ref(),
            delay_ms: event.delay_ms,
            reason: event.reason.as_deref(),
            task_status: event.task_status,
            from: event.from.as_deref(),
            to: event.to.as_deref(),
            condition: event.condition.as_deref(),
            pending: event.pending.as_ref(),
            progress: event.progress.as_ref(),
            text: event.text.as_deref(),
        }
    }

    fn is_empty(&self) -> bool {
        self.plan_id.is_none()
            && self.error.is_none()
            && self.delay_ms.is_none()
            && self.reason.is_none()
            && self.task_status.is_none()
            && self.from.is_none()
            && self.to.is_none()
            && self.condition.is_none()
            && self.pending.is_none()
            && self.progress.is_none()
            && self.text.is_none()
    }
}

impl EventRow {
    /// The columns after `run, seq`, in the order [`EventRow::values`] gives them.
    pub(crate) const COLUMNS: &'static str =
        "kind, step_id, attempt, ts_ms, tool, duration_ms, ok, rest";

    /// Reads the columns starting at `first`.
    pub(crate) fn read(row: &rusqlite::Row<'_>, first: usize) -> rusqlite::Result<Self> {
        let text = |at: usize| -> rusqlite::Result<Option<Arc<str>>> {
            Ok(row.get::<_, Option<String>>(at)?.map(Arc::from))
        };
        Ok(EventRow {
            kind: row.get(first)?,
            step_id: text(first + 1)?,
            attempt: row.get(first + 2)?,
            ts_ms: row.get(first + 3)?,
            tool: text(first + 4)?,
            duration_ms: row
                .get::<_, Option<i64>>(first + 5)?
                .and_then(|ms| u64::try_from(ms).ok()),
            ok: row.get(first + 6)?,
            rest: row.get(first + 7)?,
        })
    }

    /// The kind's name (`tool.called`), if this build knows the number.
    pub(crate) fn kind_name(&self) -> Option<&'static str> {
        EVENT_KINDS
            .iter()
            .find(|(number, _)| *number == self.kind)
            .map(|(_, name)| *name)
    }

    /// The event as it was emitted, for run `run_id`.
    pub(crate) fn into_event(self, run_id: &str) -> Result<Event, StoreError> {
        let kind = self.kind_name().ok_or_else(|| StoreError::Damaged {
            what: "event",
            message: format!("unknown event kind {}", self.kind),
        })?;
        let mut fields: Map<String, serde_json::Value> = match &self.rest {
            Some(text) => plan_types::json::from_str(text).map_err(damaged("event"))?,
            None => Map::new(),
        };
        fields.insert("type".into(), kind.into());
        fields.insert("run_id".into(), run_id.into());
        if let Some(step_id) = self.step_id {
            fields.insert("step_id".into(), step_id.as_ref().into());
        }
        fields.insert("attempt".into(), self.attempt.into());
        fields.insert("ts".into(), timestamp(self.ts_ms).into());
        if let Some(tool) = self.tool {
            fields.insert("tool".into(), tool.as_ref().into());
        }
        if let Some(ms) = self.duration_ms {
            fields.insert("duration_ms".into(), ms.into());
        }
        if let Some(ok) = self.ok {
            fields.insert("ok".into(), ok.into());
        }
        serde_json::from_value(serde_json::Value::Object(fields)).map_err(damaged("event"))
    }
}

fn kind_number(kind: EventKind) -> Result<i64, StoreError> {
    let name = serde_json::to_value(kind).map_err(damaged("event"))?;
    EVENT_KINDS
        .iter()
        .find(|(_, known)| name == *known)
        .map(|(number, _)| *number)
        .ok_or_else(|| StoreError::Damaged {
            what: "event",
            message: format!("no stored number for the event kind {name}"),
        })
}

/// Milliseconds since the epoch, as RFC 3339 with milliseconds (the events' `ts`).
pub(crate) fn timestamp(ms: i64) -> String {
    let at = SystemTime::UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime::format_rfc3339_millis(at).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_kind_has_a_number() {
        // Written out so that a kind added to `EventKind` stops this from compiling until it
        // is listed here, and then fails until it has a number.
        let listed = |kind: EventKind| match kind {
            EventKind::RunStarted
            | EventKind::ToolCalled
            | EventKind::ToolSucceeded
            | EventKind::ToolFailed
            | EventKind::StepRetrying
            | EventKind::StepSkipped
            | EventKind::StepExecuted
            | EventKind::RunFinished
            | EventKind::BlockEntered
            | EventKind::BlockTransition
            | EventKind::ToolProgress
            | EventKind::ApprovalAwaiting
            | EventKind::PlanReplanned
            | EventKind::TaskChanged
            | EventKind::AssistantDelta
            | EventKind::AssistantFinal => kind,
        };
        let all = [
            EventKind::RunStarted,
            EventKind::ToolCalled,
            EventKind::ToolSucceeded,
            EventKind::ToolFailed,
            EventKind::StepRetrying,
            EventKind::StepSkipped,
            EventKind::StepExecuted,
            EventKind::RunFinished,
            EventKind::BlockEntered,
            EventKind::BlockTransition,
            EventKind::ToolProgress,
            EventKind::ApprovalAwaiting,
            EventKind::PlanReplanned,
            EventKind::TaskChanged,
            EventKind::AssistantDelta,
            EventKind::AssistantFinal,
        ];
        let mut numbers: Vec<i64> = all
            .into_iter()
            .map(|kind| kind_number(listed(kind)).unwrap_or_else(|e| panic!("{e}")))
            .collect();
        numbers.sort_unstable();
        numbers.dedup();
        assert_eq!(
            numbers.len(),
            all.len(),
            "each kind has a number of its own"
        );
    }

    #[test]
    fn an_event_with_every_field_set_reads_back_whole() {
        let event: Event = serde_json::from_value(serde_json::json!({
            "type": "block.transition", "run_id": "r", "step_id": "s", "attempt": 2,
            "ts": "2026-01-01T00:00:00.123Z", "plan_id": "p", "tool": "echo", "ok": false,
            "duration_ms": 5, "error": {"code": "E_IO", "message": "m"}, "delay_ms": 7,
            "reason": "why", "task_status": "FAILED", "from": "a", "to": "b",
            "condition": "passed", "pending": [{"step_id": "d", "tool": "exec"}],
            "progress": {"progress": 1.0, "total": 2.0, "message": "half"}, "text": "said"
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let all = serde_json::to_value(&event).unwrap_or_default();
        assert_eq!(
            all.as_object().map(serde_json::Map::len),
            Some(19),
            "every field is set"
        );
        // Through SQLite, as the journal writes it and `events_after` reads it.
        let conn = rusqlite::Connection::open_in_memory().unwrap_or_else(|e| panic!("{e}"));
        conn.execute_batch(&format!("CREATE TABLE t (run, seq, {})", EventRow::COLUMNS))
            .unwrap_or_else(|e| panic!("{e}"));
        let row = EventRow::of(&event)
            .unwrap_or_else(|e| panic!("{e}"))
            .values(&Value::Integer(1), 1);
        conn.execute(
            "INSERT INTO t VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            rusqlite::params_from_iter(row.iter()),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let stored = conn
            .query_row(&format!("SELECT {} FROM t", EventRow::COLUMNS), [], |row| {
                EventRow::read(row, 0)
            })
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(stored.into_event("r").ok(), Some(event));
    }

    #[test]
    fn timestamps_keep_their_milliseconds() {
        assert_eq!(timestamp(1_790_000_000_123), "2026-09-21T14:13:20.123Z");
    }
}
