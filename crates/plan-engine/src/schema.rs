//! Tools' argument schemas: compiled once per tool, checked before every call, and the
//! violations a plan's own arguments already show, as issues at their place.

use plan_graph::{Issue, PlanPath};
use plan_types::StepError;
use plan_vars::{Placeholder, Root, Scope, Segment, ValueTemplate};
use serde_json::Value;

use plan_ports::{Tool, codes};

/// Resolves a call's arguments and checks them against its tool's schema: `E_ARGS_UNRESOLVED`
/// for a placeholder that does not resolve, else `E_ARGS_INVALID` listing each violation with
/// its JSON pointer, sorted. Steps, map items, block nodes and tasks all resolve calls here.
pub(crate) fn resolve_checked(
    args: &ValueTemplate,
    scope: &Scope<'_>,
    schema: Option<&jsonschema::Validator>,
    tool_name: &str,
) -> Result<Value, StepError> {
    let resolved = args
        .resolve(scope)
        .map_err(|error| StepError::new(codes::E_ARGS_UNRESOLVED, error.to_string()))?;
    if let Some(schema) = schema {
        plan_ports::schema::check_worded(schema, tool_name, &resolved, |error| {
            message_of(error, args)
        })?;
    }
    Ok(resolved)
}

/// A violation as said to the user: jsonschema's message, and why when a string that is one
/// placeholder gave a value of another type.
fn message_of(error: &jsonschema::ValidationError<'_>, args: &ValueTemplate) -> String {
    use jsonschema::error::ValidationErrorKind as Kind;
    let mut message = error.to_string();
    if matches!(error.kind(), Kind::Type { .. })
        && let Some(hint) =
            whole_placeholder_hint(args, &error.instance_path().to_string(), error.instance())
    {
        message.push_str(&hint);
    }
    message
}

/// Why a value the plan wrote as a string has another type: the string is exactly one
/// placeholder, which gives its value with the value's own type (`argv: ["${n}"]` with a
/// number `n` puts a number in `argv`). Says how to pass it as text instead.
fn whole_placeholder_hint(args: &ValueTemplate, pointer: &str, value: &Value) -> Option<String> {
    let kind = match value {
        Value::String(_) => return None,
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    };
    let placeholder = args.whole_placeholder_at(pointer)?;
    let as_text = expression_of(placeholder).map_or_else(String::new, |expression| {
        let convert = if matches!(value, Value::Bool(_) | Value::Number(_)) {
            "string"
        } else {
            "toJson"
        };
        format!("; `${{{{ {convert}({expression}) }}}}` passes it as text")
    });
    Some(format!(
        " (`{}` is the whole string, so it passes its value as it is, here {kind}{as_text})",
        placeholder.text()
    ))
}

/// The data expression that reads what `placeholder` reads, where there is one (expressions
/// never read the environment).
fn expression_of(placeholder: &Placeholder) -> Option<String> {
    let mut expression = match &placeholder.root {
        Root::Var(name) => format!("vars{}", field(name)),
        Root::Each => "each".to_owned(),
        Root::Index => "index".to_owned(),
        Root::Key => "key".to_owned(),
        Root::Env(_) => return None,
        Root::Expr(text) => text.trim().to_owned(),
    };
    for segment in &placeholder.path {
        match segment {
            Segment::Field(name) => expression.push_str(&field(name)),
            Segment::Index(i) => expression.push_str(&format!("[{i}]")),
        }
    }
    Some(expression)
}

/// `.name`, or `["name"]` for a name CEL would not read after a dot.
fn field(name: &str) -> String {
    const RESERVED: &[&str] = &[
        "as",
        "break",
        "const",
        "continue",
        "else",
        "false",
        "for",
        "function",
        "if",
        "import",
        "in",
        "let",
        "loop",
        "namespace",
        "null",
        "package",
        "return",
        "true",
        "var",
        "void",
        "while",
    ];
    let plain = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !RESERVED.contains(&name);
    if plain {
        format!(".{name}")
    } else {
        format!("[{}]", Value::String(name.to_owned()))
    }
}

pub(crate) use plan_ports::schema::{compile_schema, invalid_args};

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
pub(crate) fn known_violations(
    schema: &jsonschema::Validator,
    template: &ValueTemplate,
    args: &Value,
) -> Vec<Violation> {
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
                message: message_of(&error, template),
                missing,
                unexpected,
            })
        })
        .collect();
    violations.sort_by(|a, b| (&a.pointer, &a.message).cmp(&(&b.pointer, &b.message)));
    violations.dedup_by(|a, b| a.pointer == b.pointer && a.message == b.message);
    violations
}

/// The schema violations of one call's arguments that hold whatever the run brings, as
/// issues at `path` (the call's `args`): a missing argument at `args`, one the tool does not
/// take at its key (with the nearest one it does take), others at the value.
pub(crate) fn argument_issues(
    tool: &dyn Tool,
    tool_name: &str,
    schema: &jsonschema::Validator,
    template: &ValueTemplate,
    scope: &Scope<'_>,
    path: PlanPath,
    issues: &mut Vec<Issue>,
) {
    // With every placeholder standing in, only an out-of-range path can fail to resolve; the
    // run reports that one.
    let Ok(args) = template.resolve(scope) else {
        return;
    };
    let violations = known_violations(schema, template, &args);
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
        let at = path.clone().pointer(&violation.pointer);
        let top = violation.pointer.is_empty();
        if top && !violation.unexpected.is_empty() {
            for name in &violation.unexpected {
                // A command written as one string, as a shell takes it: `exec`'s is a list.
                let command = [
                    "cmd",
                    "command",
                    "commands",
                    "script",
                    "shell",
                    "run",
                    "commandline",
                ]
                .contains(&name.to_ascii_lowercase().as_str());
                let hint = match plan_graph::closest(name, &properties) {
                    _ if command && properties.iter().any(|p| p == "argv") => format!(
                        "a program and its arguments go in `argv`, as a list (`[\"ls\", \"-l\"]`; no shell reads it); {takes}"
                    ),
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

#[cfg(test)]
mod tests {
    use super::field;

    #[test]
    fn a_field_is_read_after_a_dot_only_where_cel_can() {
        for (name, read) in [
            ("files", ".files"),
            ("_a1", "._a1"),
            ("my-list", "[\"my-list\"]"),
            ("1st", "[\"1st\"]"),
            ("in", "[\"in\"]"),
            ("with \"quote\"", "[\"with \\\"quote\\\"\"]"),
            ("", "[\"\"]"),
        ] {
            assert_eq!(field(name), read, "{name}");
        }
    }
}
