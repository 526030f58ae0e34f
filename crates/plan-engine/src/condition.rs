//! CEL conditions: a step's `when` and a block's branch conditions, compiled once and
//! evaluated over the run's variables (and, in a block, the node's result and input).

use std::collections::BTreeMap;
use std::sync::Arc;

use plan_types::StepError;
use serde_json::Value;

use plan_ports::codes;

/// A step's `when`, compiled once.
pub(crate) struct Condition {
    pub(crate) program: cel::Program,
    pub(crate) text: String,
}

impl Condition {
    /// True or false over the variables; anything else, or an evaluation error, is
    /// `E_CONDITION` naming the expression.
    pub(crate) fn holds(&self, vars: &BTreeMap<String, Arc<Value>>) -> Result<bool, StepError> {
        evaluate(&self.program, vars, None).map_err(|message| StepError {
            code: codes::E_CONDITION,
            message: format!("`when: {}`: {message}", self.text),
            details: None,
        })
    }
}

/// What a block's branch condition reads besides `vars`.
pub(crate) struct NodeScope<'a> {
    /// The node's result.
    pub(crate) result: &'a Value,
    /// The block's input.
    pub(crate) input: &'a Value,
    /// How many times the node has run.
    pub(crate) attempt: u32,
}

/// Evaluates a compiled CEL condition over the run's variables (`vars`) and, in a block, the
/// node's scope: true or false, or why not.
pub(crate) fn evaluate(
    program: &cel::Program,
    vars: &BTreeMap<String, Arc<Value>>,
    node: Option<NodeScope<'_>>,
) -> Result<bool, String> {
    // cel recurses over the expression and the values; see plan_graph::on_condition_stack.
    plan_graph::on_condition_stack(|| evaluate_here(program, vars, node))
}

fn evaluate_here(
    program: &cel::Program,
    vars: &BTreeMap<String, Arc<Value>>,
    node: Option<NodeScope<'_>>,
) -> Result<bool, String> {
    let mut context = cel_context();
    let object: BTreeMap<&str, CelJson<'_>> =
        vars.iter().map(|(k, v)| (k.as_str(), CelJson(v))).collect();
    set_variable(&mut context, "vars", object)?;
    if let Some(node) = node {
        set_variable(&mut context, "result", CelJson(node.result))?;
        set_variable(&mut context, "input", CelJson(node.input))?;
        set_variable(&mut context, "attempt", i64::from(node.attempt))?;
    }
    match program.execute(&context) {
        Ok(cel::Value::Bool(holds)) => Ok(holds),
        Ok(other) => Err(format!("a condition must be true or false, not {other:?}")),
        Err(error) => Err(failure(&error)),
    }
}

/// Why CEL could not evaluate an expression, said for a plan's author: an operator without
/// an overload for its operands is named with their CEL types, and numbers of two kinds get
/// the conversion to write, since CEL never converts numbers itself (`vars.n * 0.5` fails for
/// an integer `n`; `double(vars.n) * 0.5` works).
pub(crate) fn failure(error: &cel::ExecutionError) -> String {
    if let cel::ExecutionError::UnexpectedType { got, want } = error {
        // cel words these in Rust (`got 'DefaultMap({…})', want 'Arc<String>'`).
        return format!(
            "a function was given {} where it takes {}",
            rust_type_in_words(got),
            rust_type_in_words(want)
        );
    }
    let cel::ExecutionError::UnsupportedBinaryOperator(op, left, right) = error else {
        return error.to_string();
    };
    let symbol = match *op {
        "add" => "+",
        "sub" => "-",
        "mul" => "*",
        "div" => "/",
        "rem" => "%",
        other => other,
    };
    let (a, b) = (type_name(left), type_name(right));
    match (number(left), number(right)) {
        (Some(l), Some(r)) if a != b => format!(
            "`{symbol}` of {a} {l} and {b} {r}: CEL does not mix {a} and {b}; convert one with `{a}(…)` or `{b}(…)`"
        ),
        _ => format!("`{symbol}` does not apply to {a} and {b}"),
    }
}

/// A type as cel's errors spell it in Rust (a type, or a value's debug form), in CEL's words.
fn rust_type_in_words(rust: &str) -> &'static str {
    let named = [
        ("Arc<String>", "a string"),
        ("String", "a string"),
        ("Map", "a map"),
        ("List", "a list"),
        ("Vec", "a list"),
        ("Int", "an int"),
        ("i64", "an int"),
        ("UInt", "a uint"),
        ("u64", "a uint"),
        ("Float", "a double"),
        ("f64", "a double"),
        ("Bool", "a bool"),
        ("bool", "a bool"),
        ("Bytes", "bytes"),
        ("Null", "null"),
        ("Timestamp", "a timestamp"),
        ("Duration", "a duration"),
    ];
    named
        .iter()
        .find(|(prefix, _)| {
            rust.starts_with(prefix) || rust.starts_with(&format!("Default{prefix}"))
        })
        .map_or("a value of another type", |(_, words)| words)
}

/// A value's type as CEL names it (`double`, where cel's `Display` says `float`).
fn type_name(value: &cel::Value) -> &'static str {
    match value {
        cel::Value::Int(_) => "int",
        cel::Value::UInt(_) => "uint",
        cel::Value::Float(_) => "double",
        cel::Value::String(_) => "string",
        cel::Value::Bytes(_) => "bytes",
        cel::Value::Bool(_) => "bool",
        cel::Value::Null => "null",
        cel::Value::List(_) => "list",
        cel::Value::Map(_) => "map",
        _ => "another type",
    }
}

/// A number as CEL writes it; `None` for anything else.
fn number(value: &cel::Value) -> Option<String> {
    match value {
        cel::Value::Int(n) => Some(n.to_string()),
        cel::Value::UInt(n) => Some(format!("{n}u")),
        cel::Value::Float(n) => Some(n.to_string()),
        _ => None,
    }
}

/// A CEL context over the one environment every expression of a plan runs in (conditions and
/// data expressions): the standard library and the strings extension (`trim`, `split`, …).
/// The environment is built once for the process: `cel::Context::default()` builds it anew
/// each time, which made a block's loop crawl.
pub(crate) fn cel_context() -> cel::Context<'static, 'static> {
    static ENVIRONMENT: std::sync::OnceLock<Arc<cel::Env>> = std::sync::OnceLock::new();
    cel::Context::with_env(
        ENVIRONMENT
            .get_or_init(|| {
                let mut env = cel::Env::stdlib();
                // Declared once, with names of its own: cannot clash.
                let _ = env.add_extension(cel::extensions::strings);
                Arc::new(env)
            })
            .clone(),
    )
}

/// Gives the expression `value` under `name`.
pub(crate) fn set_variable(
    context: &mut cel::Context<'_, '_>,
    name: &str,
    value: impl serde::Serialize,
) -> Result<(), String> {
    context
        .add_variable(name, value)
        .map_err(|error| error.to_string())
}

/// JSON for CEL, with integers as signed where they fit: serde gives positive JSON integers as
/// unsigned, and CEL refuses `uint + int`, so `vars.count + 1` would fail.
pub(crate) struct CelJson<'a>(pub(crate) &'a Value);

impl serde::Serialize for CelJson<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        match self.0 {
            Value::Number(n) => match n.as_i64() {
                Some(i) => serializer.serialize_i64(i),
                None => n.serialize(serializer),
            },
            Value::Array(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(&CelJson(item))?;
                }
                seq.end()
            }
            Value::Object(map) => {
                let mut out = serializer.serialize_map(Some(map.len()))?;
                for (key, item) in map {
                    out.serialize_entry(key, &CelJson(item))?;
                }
                out.end()
            }
            other => other.serialize(serializer),
        }
    }
}
