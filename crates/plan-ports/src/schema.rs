//! Tools' argument schemas, compiled and checked the same way wherever a call is made: by the
//! engine before every call, and by a queue worker before it runs a job (a producer written
//! in another language gets the same JSON pointers a run gives).

use std::sync::Arc;

use plan_types::StepError;
use serde_json::Value;

use crate::codes;

pub use jsonschema::Validator;

/// A compiled argument schema; `None` for schemas that accept every object (nothing to check).
pub fn compile_schema(schema: &Value) -> Result<Option<Arc<jsonschema::Validator>>, String> {
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

/// Checks a call's arguments against its tool's schema, the one way every caller does (the
/// engine before a call and after an answer changed the arguments, a queue worker before it
/// runs a job): `E_ARGS_INVALID` listing each violation, sorted by pointer ([`invalid_args`]).
pub fn check(
    schema: &jsonschema::Validator,
    tool_name: &str,
    args: &Value,
) -> Result<(), StepError> {
    check_worded(schema, tool_name, args, |error| error.to_string())
}

/// [`check`], each violation's message as `word` says it (the engine adds why a placeholder
/// gave a value of another type).
pub fn check_worded(
    schema: &jsonschema::Validator,
    tool_name: &str,
    args: &Value,
    word: impl Fn(&jsonschema::ValidationError<'_>) -> String,
) -> Result<(), StepError> {
    // Valid arguments, by far the most common, cost no list of errors.
    if schema.is_valid(args) {
        return Ok(());
    }
    let mut violations: Vec<(String, String)> = schema
        .iter_errors(args)
        .map(|error| (error.instance_path().to_string(), word(&error)))
        .collect();
    violations.sort();
    Err(invalid_args(tool_name, violations))
}

/// How `args` break `schema`: each violation's JSON pointer and message, sorted.
pub fn violations(schema: &jsonschema::Validator, args: &Value) -> Vec<(String, String)> {
    let mut violations: Vec<(String, String)> = schema
        .iter_errors(args)
        .map(|error| (error.instance_path().to_string(), error.to_string()))
        .collect();
    violations.sort();
    violations
}

/// Violations in words, `POINTER: MESSAGE; …` (the root's pointer written `/`).
pub fn listing(violations: &[(String, String)]) -> String {
    let each: Vec<String> = violations
        .iter()
        .map(|(pointer, message)| {
            let pointer = if pointer.is_empty() { "/" } else { pointer };
            format!("{pointer}: {message}")
        })
        .collect();
    each.join("; ")
}

/// `E_ARGS_INVALID` listing each violation (JSON pointer, message) in order, in its message
/// and as `details`.
pub fn invalid_args(tool_name: &str, violations: Vec<(String, String)>) -> StepError {
    let violations: Vec<(String, String)> = violations
        .into_iter()
        .map(|(pointer, message)| {
            let pointer = if pointer.is_empty() {
                "/".to_owned()
            } else {
                pointer
            };
            (pointer, message)
        })
        .collect();
    StepError {
        code: codes::E_ARGS_INVALID,
        message: format!(
            "arguments do not match the schema of `{}`: {}",
            tool_name,
            listing(&violations)
        ),
        details: Some(Value::Array(
            violations
                .into_iter()
                .map(|(pointer, message)| serde_json::json!({"pointer": pointer, "message": message}))
                .collect(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_violation_is_named_by_its_pointer() {
        let schema = serde_json::json!({"type": "object", "properties": {"ms": {"type": "integer"}}, "required": ["ms"]});
        let schema = compile_schema(&schema).expect("compiles").expect("checks");
        let error = invalid_args(
            "sleep",
            violations(&schema, &serde_json::json!({"ms": "soon"})),
        );
        assert_eq!(error.code, codes::E_ARGS_INVALID);
        assert_eq!(
            error.message,
            "arguments do not match the schema of `sleep`: /ms: \"soon\" is not of type \"integer\""
        );
        assert_eq!(
            error.details,
            Some(
                serde_json::json!([{"pointer": "/ms", "message": "\"soon\" is not of type \"integer\""}])
            )
        );
        assert_eq!(
            check(&schema, "sleep", &serde_json::json!({"ms": "soon"})),
            Err(error)
        );
        assert_eq!(
            check(&schema, "sleep", &serde_json::json!({"ms": 5})),
            Ok(())
        );
        assert!(
            compile_schema(&serde_json::json!({"type": "object"}))
                .expect("ok")
                .is_none()
        );
    }
}
