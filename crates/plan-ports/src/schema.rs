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
    let (violations, more) = worded(schema, args, word);
    let mut error = invalid_args(tool_name, violations);
    if more > 0 {
        error
            .message
            .push_str(&format!("; and {more} more violations"));
    }
    Err(error)
}

/// At most this many violations of a schema are listed, each message at most
/// [`MOST_VIOLATION_BYTES`] long: arguments can break a schema once per item of a list, and
/// a message can quote the value (a 4 MiB list of numbers where strings belong was 2 million
/// messages, 2.8 GB of a queue worker's memory, before this bound).
pub const MOST_VIOLATIONS: usize = 20;

/// The longest violation message kept, in bytes (cut at a character, with `…`).
pub const MOST_VIOLATION_BYTES: usize = 300;

/// How `args` break `schema`: each violation's JSON pointer and message, sorted; the first
/// [`MOST_VIOLATIONS`] found.
pub fn violations(schema: &jsonschema::Validator, args: &Value) -> Vec<(String, String)> {
    worded(schema, args, |error| error.to_string()).0
}

/// The first [`MOST_VIOLATIONS`] violations, sorted, and how many more there are.
fn worded(
    schema: &jsonschema::Validator,
    args: &Value,
    word: impl Fn(&jsonschema::ValidationError<'_>) -> String,
) -> (Vec<(String, String)>, usize) {
    let mut errors = schema.iter_errors(args);
    let mut violations: Vec<(String, String)> = errors
        .by_ref()
        .take(MOST_VIOLATIONS)
        .map(|error| (error.instance_path().to_string(), cut(word(&error))))
        .collect();
    let more = errors.count();
    violations.sort();
    (violations, more)
}

/// `message`, at most [`MOST_VIOLATION_BYTES`] long.
fn cut(mut message: String) -> String {
    if message.len() > MOST_VIOLATION_BYTES {
        let mut end = MOST_VIOLATION_BYTES;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push('…');
    }
    message
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
    }

    /// A list that breaks the schema once per item is listed up to the bound, and said
    /// counted; a message that quotes a long value is cut.
    #[test]
    fn violations_are_bounded_in_number_and_length() {
        let schema = serde_json::json!({"type": "object", "properties": {
            "argv": {"type": "array", "items": {"type": "string"}},
            "name": {"type": "string", "maxLength": 3}
        }});
        let schema = compile_schema(&schema).expect("compiles").expect("checks");
        let args = serde_json::json!({"argv": vec![0; 100_000]});
        let error = check(&schema, "exec", &args).unwrap_err();
        assert_eq!(
            error.details.as_ref().unwrap().as_array().unwrap().len(),
            MOST_VIOLATIONS
        );
        assert!(
            error.message.ends_with(&format!(
                "; and {} more violations",
                100_000 - MOST_VIOLATIONS
            )),
            "{}",
            &error.message[error.message.len() - 60..]
        );
        assert!(
            error.message.len() < MOST_VIOLATIONS * 100,
            "{}",
            error.message.len()
        );
        let long = "é".repeat(10_000);
        let error = check(&schema, "exec", &serde_json::json!({"name": long})).unwrap_err();
        assert!(
            error.message.len() < MOST_VIOLATION_BYTES + 200,
            "{}",
            error.message.len()
        );
        assert!(error.message.contains('…'));
        assert!(
            compile_schema(&serde_json::json!({"type": "object"}))
                .expect("ok")
                .is_none()
        );
    }
}
