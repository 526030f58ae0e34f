//! One step's outcome: a [`Record`], as mcp-cli's and `execute_plan`'s plans shape it.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::code::ErrorCode;
use crate::report::TaskStatus;

/// The id of the summary record that ends every run's records.
pub const META_STEP_ID: &str = "__meta__";

/// The id of the workspace's `context_update` call, in its events, its approval and its
/// checkpoint.
pub const CONTEXT_UPDATE_ID: &str = "__context_update__";

/// Whether `id` is of the form plan-cli keeps for its own records, events and approvals
/// (`__meta__`, `__plan__`, `__context_update__`, and any it adds): `__NAME__`. No step takes
/// one, so that none is ever read as another.
pub fn is_reserved_id(id: &str) -> bool {
    id.len() > 4 && id.starts_with("__") && id.ends_with("__")
}

/// A failed step's error as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepError {
    /// A stable code such as `E_TOOL` or `E_TIMEOUT`.
    pub code: ErrorCode,
    /// What happened.
    pub message: String,
    /// Structured context, when the tool gave some.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
}

impl StepError {
    /// An error with this code and message, and no details.
    pub fn new(code: impl Into<ErrorCode>, message: impl Into<String>) -> Self {
        StepError {
            code: code.into(),
            message: message.into(),
            details: None,
        }
    }
}

/// The outcome of one step (or map item, or block node).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// The step (or `__meta__`).
    pub step_id: String,
    /// Whether it succeeded.
    pub ok: bool,
    /// Whether it was skipped rather than run.
    pub skipped: bool,
    /// The tool's result, when it succeeded. Shared: a variable bound to the whole result
    /// (`result_variable`, `binds: {x: "$"}`) and the ledger's copy of the record are the same
    /// value, not copies of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Arc<Value>>,
    /// Why it was skipped or blocked; for `__meta__`, the summary ending `task_status=…`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The error, when it failed. Boxed: most records have none, and a map's items make
    /// many records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Box<StepError>>,
    /// Attempts made (0 when it never ran). A call run again (`retry`, a retry of failures, an
    /// approved re-run of a failed block node) counts on from its earlier attempts, so this is
    /// the number of its last attempt, and each attempt has an identity of its own.
    pub attempts: u32,
    /// Wall time from its first attempt to its end.
    pub duration_ms: u64,
    /// For a step skipped because of its dependencies: how each unsatisfied one ended
    /// (`failed`, `skipped`, `blocked`, `rejected`), so a failure upstream is told apart from
    /// a skip upstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<Box<BTreeMap<String, String>>>,
}

impl Record {
    /// The `__meta__` record that ends every run's records.
    pub fn meta(status: TaskStatus, duration_ms: u64) -> Record {
        Record {
            step_id: META_STEP_ID.to_owned(),
            ok: status == TaskStatus::Completed,
            skipped: false,
            result: None,
            reason: Some(format!("{}; task_status={status}", status.summary())),
            error: None,
            attempts: 0,
            duration_ms,
            upstream: None,
        }
    }
}

/// The `reason`s of records of steps that did not run, where callers rebuild such records
/// (`plan-cli status` of a run that has not ended).
pub mod reasons {
    /// `when` was false, or every unsatisfied dependency was skipped by its own condition.
    pub const CONDITION_FALSE: &str = "condition false";
    /// A `risk: high` call without a decision yet: the halt named as the map-style executor
    /// names it (`GRAPH_HALT_AWAITING_APPROVAL`), then in words.
    pub const AWAITING_APPROVAL: &str = "GRAPH_HALT_AWAITING_APPROVAL: awaiting approval";
    /// A call that asked a person for input (an MCP server's elicitation) and waits for the
    /// answer: the same halt, in other words.
    pub const AWAITING_INPUT: &str = "GRAPH_HALT_AWAITING_APPROVAL: awaiting input";
    /// The halt's name alone, as the `approval.awaiting` event's `reason`.
    pub const HALT_AWAITING_APPROVAL: &str = "GRAPH_HALT_AWAITING_APPROVAL";
    /// Not started because the run halted for approvals.
    pub const WAITING_FOR_APPROVAL: &str = "not started: the run is waiting for an approval";
    /// Not started because the run was stopped.
    pub const STOPPED: &str = "the run stopped before it started";
    /// Called and not settled yet, in a run that is still going.
    pub const RUNNING: &str = "running";
    /// Called and not settled when the run's process died: `resume` runs it again.
    pub const INTERRUPTED: &str = "interrupted: the run's process died while it ran";
    /// Not started when the run's process died.
    pub const NOT_STARTED_INTERRUPTED: &str = "the run's process died before it started";
    /// Not started yet, in a run that is still going.
    pub const NOT_STARTED_YET: &str = "not started yet";
    /// How the reason of a step that depends on a step the plan does not have starts (the
    /// names follow): it never runs, and the run ends `BLOCKED`.
    pub const UNKNOWN_DEPENDENCY: &str = "unknown dependency";
}

/// Whether `c` would not show as itself on a line: a control character (a newline, a tab, an
/// escape), a line or paragraph separator, or an invisible format character (a zero-width
/// space, a direction mark or override, a soft hyphen). An id with one could draw a line of
/// its own or pass for another id; text shown on a line escapes them.
pub fn is_unprintable(c: char) -> bool {
    // Most ids are ASCII: one comparison, not twenty (a live view asks for every character
    // of every map item's id).
    if c.is_ascii() {
        return c.is_ascii_control();
    }
    c.is_control()
        || matches!(
            c,
            '\u{00AD}'
                | '\u{0600}'..='\u{0605}'
                | '\u{061C}'
                | '\u{06DD}'
                | '\u{070F}'
                | '\u{0890}'..='\u{0891}'
                | '\u{08E2}'
                | '\u{180E}'
                | '\u{200B}'..='\u{200F}'
                | '\u{2028}'..='\u{202E}'
                | '\u{2060}'..='\u{2064}'
                | '\u{2066}'..='\u{206F}'
                | '\u{FEFF}'
                | '\u{FFF9}'..='\u{FFFB}'
                | '\u{110BD}'
                | '\u{110CD}'
                | '\u{13430}'..='\u{1343F}'
                | '\u{1BCA0}'..='\u{1BCA3}'
                | '\u{1D173}'..='\u{1D17A}'
                | '\u{E0001}'
                | '\u{E0020}'..='\u{E007F}'
        )
}

/// Text from a plan or a tool (a map item's id from any tool's data, an error's message, a
/// tool's name) as a line shows it: every character that would not show as itself
/// ([`is_unprintable`]) escaped, newlines and tabs too, so that it stays on its
/// line and cannot draw one or pass for other text.
pub fn one_line(id: &str) -> std::borrow::Cow<'_, str> {
    // Printable ASCII, byte by byte, before any character is decoded: nearly every id.
    let printable_ascii = id.bytes().all(|b| (b' '..=b'~').contains(&b));
    if printable_ascii || !id.chars().any(is_unprintable) {
        return std::borrow::Cow::Borrowed(id);
    }
    let mut out = String::with_capacity(id.len() + 8);
    for c in id.chars() {
        if is_unprintable(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Text for a terminal: control characters that came from a plan or a tool (an id with an
/// escape sequence in it, say) are shown as `\u{1b}`, never sent to the terminal to act on.
/// Newlines and tabs stay.
pub fn terminal_safe(text: &str) -> std::borrow::Cow<'_, str> {
    let unsafe_char = |c: char| is_unprintable(c) && c != '\n' && c != '\t';
    if !text.chars().any(unsafe_char) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if unsafe_char(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::{is_reserved_id, is_unprintable};

    #[test]
    fn what_would_not_show_as_itself_is_unprintable() {
        for c in [
            '\n', '\t', '\u{1b}', '\u{200B}', '\u{202E}', '\u{2066}', '\u{FEFF}', '\u{2028}',
        ] {
            assert!(is_unprintable(c), "{:?}", c);
        }
        for c in ['a', 'é', '✓', '＿', ' ', '-', '/'] {
            assert!(!is_unprintable(c), "{c}");
        }
    }

    #[test]
    fn reserved_ids_are_those_of_the_form_double_underscore_name_double_underscore() {
        for id in ["__meta__", "__plan__", "__context_update__", "__x__"] {
            assert!(is_reserved_id(id), "{id}");
        }
        // Too short to have a name between the underscores, or not wrapped in them.
        for id in ["____", "___", "__", "_x_", "__x", "x__", "a__b__", "deploy"] {
            assert!(!is_reserved_id(id), "{id}");
        }
    }
}
