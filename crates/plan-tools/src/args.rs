//! Typed arguments: a tool's args object into its struct, or `E_ARGS_INVALID` saying why.

use plan_ports::ToolError;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub(crate) fn parse<T: DeserializeOwned>(tool: &str, args: Value) -> Result<T, ToolError> {
    serde_json::from_value(args)
        .map_err(|error| ToolError::invalid_args(format!("`{tool}` arguments: {error}")))
}

pub(crate) const SOURCE: &str = "builtin";
