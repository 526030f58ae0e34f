//! Tools' argument schemas: compiled once per tool, checked before every call.

use std::sync::Arc;

use plan_types::StepError;
use serde_json::Value;

use crate::tool::codes;

/// Checks resolved arguments against a tool's schema: `E_ARGS_INVALID` listing each violation
/// with its JSON pointer, sorted.
pub(crate) fn check_schema(
    schema: Option<&jsonschema::Validator>,
    tool_name: &str,
    args: Value,
) -> Result<Value, StepError> {
    if let Some(schema) = schema
        && !schema.is_valid(&args)
    {
        let mut violations: Vec<(String, String)> = schema
            .iter_errors(&args)
            .map(|error| {
                let pointer = error.instance_path().to_string();
                (
                    if pointer.is_empty() {
                        "/".to_owned()
                    } else {
                        pointer
                    },
                    error.to_string(),
                )
            })
            .collect();
        violations.sort();
        let listing: Vec<String> = violations
            .iter()
            .map(|(pointer, message)| format!("{pointer}: {message}"))
            .collect();
        return Err(StepError {
            code: codes::E_ARGS_INVALID,
            message: format!("arguments do not match the schema of `{}`: {}", tool_name, listing.join("; ")),
            details: Some(Value::Array(
                violations
                    .into_iter()
                    .map(|(pointer, message)| serde_json::json!({"pointer": pointer, "message": message}))
                    .collect(),
            )),
        });
    }
    Ok(args)
}

/// A validator, or none for schemas that accept every object (no need to check).
pub(crate) fn compile_schema(schema: &Value) -> Result<Option<Arc<jsonschema::Validator>>, String> {
    let accepts_any_object = match schema {
        Value::Object(map) => {
            map.is_empty()
                || (map.len() == 1 && map.get("type") == Some(&Value::String("object".into())))
        }
        Value::Bool(true) => true,
        _ => false,
    };
    if accepts_any_object {
        return Ok(None);
    }
    jsonschema::validator_for(schema)
        .map(|v| Some(Arc::new(v)))
        .map_err(|e| e.to_string())
}
