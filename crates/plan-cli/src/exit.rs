//! Exit codes and the errors that end a command early.

use plan_engine::TaskStatus;

/// Exit code for invalid input: a bad plan, bad flags, an unreadable file.
pub(crate) const INVALID_INPUT: i32 = 2;

/// Why a command stopped before doing its work.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) message: Option<String>,
    pub(crate) code: i32,
}

impl Failure {
    /// Invalid input with a message to print.
    pub(crate) fn input(message: impl Into<String>) -> Self {
        Failure {
            message: Some(message.into()),
            code: INVALID_INPUT,
        }
    }

    /// An invalid plan whose diagnostics are already printed.
    pub(crate) fn invalid_plan(name: &str, errors: usize) -> Self {
        Failure::input(format!(
            "{name} is not a valid plan ({errors} error{})",
            if errors == 1 { "" } else { "s" }
        ))
    }
}

/// `0` COMPLETED, `1` FAILED, `3` PARTIAL, `4` BLOCKED, `5` WAITING.
pub(crate) fn for_status(status: TaskStatus) -> i32 {
    status.exit_code()
}
