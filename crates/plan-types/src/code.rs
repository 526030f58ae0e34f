//! Error codes: the engine's own, named, and any other a tool gives, kept as it is.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A failed step's error code. Serialized as its string (`E_TOOL`, `invalid_graph`, …); a code
/// this build does not name (a tool's own) is kept as [`ErrorCode::Other`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// `E_TOOL`: a tool reported a failure.
    Tool,
    /// `E_TIMEOUT`: an attempt ran past its `timeout_ms` and was cancelled.
    Timeout,
    /// `E_ARGS_INVALID`: the resolved arguments do not fit the tool.
    ArgsInvalid,
    /// `E_ARGS_UNRESOLVED`: a placeholder in the arguments does not resolve.
    ArgsUnresolved,
    /// `E_BIND_UNRESOLVED`: a bind selector does not match the step's result.
    BindUnresolved,
    /// `E_CANCELLED`: the run was cancelled while the step ran.
    Cancelled,
    /// `E_TRANSPORT`: the connection to a remote tool failed.
    Transport,
    /// `E_IO`: reading or writing a file or a pipe failed.
    Io,
    /// `E_CONDITION`: a step's `when` is not true or false, or cannot be evaluated.
    Condition,
    /// `E_EXPAND_NOT_LIST`: a map step's `expand_on` is not a list.
    ExpandNotList,
    /// `E_EXPAND_KEY`: a map item's key is not a string or a number.
    ExpandKey,
    /// `E_EXPAND_DUPLICATE_KEY`: two map items have the same key.
    ExpandDuplicateKey,
    /// `E_MAP_ITEMS_FAILED`: some items of a map step failed.
    MapItemsFailed,
    /// `invalid_graph`: a block's graph does not validate.
    InvalidGraph,
    /// `unknown_node`: a block's transition names a node that does not exist.
    UnknownNode,
    /// `no_transition`: no branch of a block's transition matched.
    NoTransition,
    /// `max_steps_exceeded`: a block ran more than `max_steps` nodes.
    MaxStepsExceeded,
    /// `condition_resolution_error`: a block's condition is undefined, does not compile, or
    /// cannot be evaluated.
    ConditionResolutionError,
    /// `E_REJECTED`: a high-risk call's approval was refused.
    Rejected,
    /// `E_GUARD`: a guard (a budget of the plan's `guards`) stopped the call before it was made.
    Guard,
    /// `E_QUEUE_UNAVAILABLE`: the named queue does not answer.
    QueueUnavailable,
    /// `E_QUEUE_TIMEOUT`: no queue worker took the call within `--queue-timeout`.
    QueueTimeout,
    /// `E_WORKER_LOST`: the queue workers running the call died more than BullMQ allows.
    WorkerLost,
    /// `E_TASK_ABANDONED`: a task step used its last attempt without passing its checks.
    TaskAbandoned,
    /// `E_INPUT_REQUIRED`: the tool asked a person for input (an MCP server's elicitation)
    /// that the call was not given; the engine makes the call wait for the answer.
    InputRequired,
    /// Any other code, as a tool gave it.
    Other(String),
}

/// Every named code with its text, in one place: parsing and printing both read it.
const NAMED: &[(ErrorCode, &str)] = &[
    (ErrorCode::Tool, "E_TOOL"),
    (ErrorCode::Timeout, "E_TIMEOUT"),
    (ErrorCode::ArgsInvalid, "E_ARGS_INVALID"),
    (ErrorCode::ArgsUnresolved, "E_ARGS_UNRESOLVED"),
    (ErrorCode::BindUnresolved, "E_BIND_UNRESOLVED"),
    (ErrorCode::Cancelled, "E_CANCELLED"),
    (ErrorCode::Transport, "E_TRANSPORT"),
    (ErrorCode::Io, "E_IO"),
    (ErrorCode::Condition, "E_CONDITION"),
    (ErrorCode::ExpandNotList, "E_EXPAND_NOT_LIST"),
    (ErrorCode::ExpandKey, "E_EXPAND_KEY"),
    (ErrorCode::ExpandDuplicateKey, "E_EXPAND_DUPLICATE_KEY"),
    (ErrorCode::MapItemsFailed, "E_MAP_ITEMS_FAILED"),
    (ErrorCode::InvalidGraph, "invalid_graph"),
    (ErrorCode::UnknownNode, "unknown_node"),
    (ErrorCode::NoTransition, "no_transition"),
    (ErrorCode::MaxStepsExceeded, "max_steps_exceeded"),
    (
        ErrorCode::ConditionResolutionError,
        "condition_resolution_error",
    ),
    (ErrorCode::Rejected, "E_REJECTED"),
    (ErrorCode::Guard, "E_GUARD"),
    (ErrorCode::QueueUnavailable, "E_QUEUE_UNAVAILABLE"),
    (ErrorCode::QueueTimeout, "E_QUEUE_TIMEOUT"),
    (ErrorCode::WorkerLost, "E_WORKER_LOST"),
    (ErrorCode::TaskAbandoned, "E_TASK_ABANDONED"),
    (ErrorCode::InputRequired, "E_INPUT_REQUIRED"),
];

impl ErrorCode {
    /// The code as it is written: `E_TOOL`, `invalid_graph`, or a tool's own.
    pub fn as_str(&self) -> &str {
        match self {
            ErrorCode::Other(code) => code,
            named => NAMED
                .iter()
                .find(|(code, _)| code == named)
                .map_or("", |(_, text)| text),
        }
    }
}

impl From<&str> for ErrorCode {
    fn from(text: &str) -> Self {
        NAMED.iter().find(|(_, name)| *name == text).map_or_else(
            || ErrorCode::Other(text.to_owned()),
            |(code, _)| code.clone(),
        )
    }
}

impl From<String> for ErrorCode {
    fn from(text: String) -> Self {
        match ErrorCode::from(text.as_str()) {
            ErrorCode::Other(_) => ErrorCode::Other(text),
            named => named,
        }
    }
}

impl PartialEq<str> for ErrorCode {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for ErrorCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ErrorCode {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ErrorCode {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(ErrorCode::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_code_reads_back_as_itself() {
        for (code, text) in NAMED {
            assert_eq!(code.as_str(), *text);
            assert_eq!(&ErrorCode::from(*text), code);
            let json = serde_json::to_string(code).unwrap_or_default();
            assert_eq!(json, format!("\"{text}\""));
        }
    }

    #[test]
    fn a_tools_own_code_is_kept_as_it_is() {
        let code = ErrorCode::from("E_RATE_LIMITED");
        assert_eq!(code, ErrorCode::Other("E_RATE_LIMITED".into()));
        assert_eq!(code, "E_RATE_LIMITED");
        assert!(matches!(code, ErrorCode::Other(_)));
        assert!(!matches!(ErrorCode::from("E_TOOL"), ErrorCode::Other(_)));
    }
}
