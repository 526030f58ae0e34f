//! Tools' argument schemas: compiled once per tool, checked before every call, and the
//! violations a plan's own arguments already show, as issues at their place.

use std::sync::Arc;

use plan_graph::{Issue, PlanPath};
use plan_types::StepError;
use plan_vars::{Scope, ValueTemplate};
use serde_json::Value;

use crate::tool::{Tool, codes};

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
            .map(|error| (error.instance_path().to_string(), error.to_string()))
            .collect();
        violations.sort();
        return Err(invalid_args(tool_name, violations));
    }
    Ok(args)
}

/// `E_ARGS_INVALID` listing each violation (JSON pointer, message) in order.
pub(crate) fn invalid_args(tool_name: &str, violations: Vec<(String, String)>) -> StepError {
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
    let listing: Vec<String> = violations
        .iter()
        .map(|(pointer, message)| format!("{pointer}: {message}"))
        .collect();
    StepError {
        code: codes::E_ARGS_INVALID,
        message: format!(
            "arguments do not match the schema of `{}`: {}",
            tool_name,
            listing.join("; ")
        ),
        details: Some(Value::Array(
            violations
                .into_iter()
                .map(|(pointer, message)| serde_json::json!({"pointer": pointer, "message": message}))
                .collect(),
        )),
    }
}

/// Stands in, when arguments are checked before a run, for a value only the run can give (a
/// step's result, a map item, a block's input, the environment).
pub(crate) const UNKNOWN: &str = "\u{1}value known at run time\u{1}";

/// One way arguments break a schema.
pub(crate) struct Violation {
    /// JSON pointer to the value (empty for the arguments themselves).
    pub(crate) pointer: String,
    pub(crate) message: String,
    /// A required property missing, or properties the schema does not allow.
    pub(crate) missing: Option<String>,
    pub(crate) unexpected: Vec<String>,
}

/// The schema violations of `args` that hold whatever [`UNKNOWN`] stands for: a violation at
/// a value holding it is dropped, unless it is about the keys of an object (a property
/// missing or not allowed), which no value can change.
pub(crate) fn known_violations(schema: &jsonschema::Validator, args: &Value) -> Vec<Violation> {
    use jsonschema::error::ValidationErrorKind as Kind;
    fn holds_unknown(value: &Value) -> bool {
        match value {
            Value::String(text) => text.contains(UNKNOWN),
            Value::Array(items) => items.iter().any(holds_unknown),
            Value::Object(map) => map.values().any(holds_unknown),
            _ => false,
        }
    }
    let mut violations: Vec<Violation> = schema
        .iter_errors(args)
        .filter_map(|error| {
            let (missing, unexpected) = match error.kind() {
                Kind::Required { property } => (property.as_str().map(str::to_owned), Vec::new()),
                Kind::AdditionalProperties { unexpected } => (None, unexpected.clone()),
                _ if holds_unknown(error.instance()) => return None,
                _ => (None, Vec::new()),
            };
            Some(Violation {
                pointer: error.instance_path().to_string(),
                message: error.to_string(),
                missing,
                unexpected,
            })
        })
        .collect();
    violations.sort_by(|a, b| (&a.pointer, &a.message).cmp(&(&b.pointer, &b.message)));
    violations.dedup_by(|a, b| a.pointer == b.pointer && a.message == b.message);
    violations
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

/// The schema violations of one call's arguments that hold whatever the run brings, as
/// issues at `path` (the call's `args`): a missing argument at `args`, one the tool does not
/// take at its key (with the nearest one it does take), others at the value.
pub(crate) fn argument_issues(
    tool: &dyn Tool,
    tool_name: &str,
    schema: &jsonschema::Validator,
    args: &ValueTemplate,
    scope: &Scope<'_>,
    path: PlanPath,
    issues: &mut Vec<Issue>,
) {
    // With every placeholder standing in, only an out-of-range path can fail to resolve; the
    // run reports that one.
    let Ok(args) = args.resolve(scope) else {
        return;
    };
    let violations = known_violations(schema, &args);
    if violations.is_empty() {
        return;
    }
    let input_schema = tool.info().input_schema;
    let properties: Vec<String> = input_schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|properties| properties.keys().cloned().collect())
        .unwrap_or_default();
    let required: Vec<&str> = input_schema
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let takes = if properties.is_empty() {
        format!("`{tool_name}` takes no named arguments")
    } else {
        let listed: Vec<String> = properties
            .iter()
            .map(|name| {
                if required.contains(&name.as_str()) {
                    format!("{name} (required)")
                } else {
                    name.clone()
                }
            })
            .collect();
        format!("`{tool_name}` takes: {}", listed.join(", "))
    };
    for violation in violations {
        let mut at = path.clone();
        for raw in violation.pointer.split('/').skip(1) {
            let segment = raw.replace("~1", "/").replace("~0", "~");
            at = match segment.parse::<usize>() {
                Ok(index) => at.index(index),
                Err(_) => at.key(&segment),
            };
        }
        let top = violation.pointer.is_empty();
        if top && !violation.unexpected.is_empty() {
            for name in &violation.unexpected {
                let hint = match plan_graph::closest(name, &properties) {
                    Some(near) => format!("did you mean `{near}`? {takes}"),
                    None => takes.clone(),
                };
                issues.push(
                    Issue::error(
                        "plan::args_invalid",
                        at.clone().key(name),
                        format!("`{tool_name}` has no argument `{name}`"),
                    )
                    .at_key()
                    .label("not an argument of this tool")
                    .help(hint),
                );
            }
            continue;
        }
        let (message, label) = match (&violation.missing, top) {
            (Some(name), true) => (
                format!("`{tool_name}` needs the argument `{name}`"),
                format!("no `{name}` here"),
            ),
            _ => {
                let shown = if top { "/" } else { violation.pointer.as_str() };
                let message = format!(
                    "the arguments do not match the schema of `{tool_name}`: {shown}: {}",
                    violation.message
                );
                (message, "does not match".to_owned())
            }
        };
        issues.push(
            Issue::error("plan::args_invalid", at, message)
                .label(label)
                .help(format!(
                    "{takes}; as written, the call fails with E_ARGS_INVALID"
                )),
        );
    }
}
