//! Where the engine's errors meet the recorded ones.

use plan_types::StepError;

use crate::tool::ToolError;

impl From<ToolError> for StepError {
    fn from(error: ToolError) -> Self {
        StepError {
            code: error.code,
            message: error.message,
            details: error.details.map(|details| *details),
        }
    }
}
