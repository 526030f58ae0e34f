//! Data expressions, `${{ EXPR }}` in a step's arguments and `expand_on`: CEL over the run's
//! variables (`vars`) and the map item (`each`, `index`, `key`), with functions that turn text
//! into data: `parseJson`, `toJson`, `lines`, and CEL's strings extension (`trim`, `split`,
//! `join`, `lowerAscii`, `replace`, …).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use plan_vars::Scope;
use serde_json::Value;

use crate::condition::{CelJson, cel_context, failure, set_variable};

/// The expressions a program holds, each compiled once.
#[derive(Default)]
pub(crate) struct Expressions {
    compiled: HashMap<String, cel::Program>,
}

impl Expressions {
    /// Compiles `text` if it is new (`Err`: why it is not CEL).
    pub(crate) fn add(&mut self, text: &str) -> Result<(), String> {
        if self.compiled.contains_key(text) {
            return Ok(());
        }
        let program = plan_graph::on_condition_stack(|| cel::Program::compile(text))
            .map_err(|error| error.to_string())?;
        self.compiled.insert(text.to_owned(), program);
        Ok(())
    }

    /// The value of expression `text` over `scope` (its variables and map item).
    pub(crate) fn evaluate(&self, text: &str, scope: &Scope<'_>) -> Result<Value, String> {
        let program = self.program(text)?;
        plan_graph::on_condition_stack(|| evaluate_here(program, scope, None))
    }

    /// The value of a bind's expression over a step's `result` and the variables.
    pub(crate) fn evaluate_bind(
        &self,
        text: &str,
        result: &Value,
        vars: &BTreeMap<String, Arc<Value>>,
    ) -> Result<Value, String> {
        let program = self.program(text)?;
        let scope = Scope::with_vars(vars);
        plan_graph::on_condition_stack(|| evaluate_here(program, &scope, Some(result)))
    }

    fn program(&self, text: &str) -> Result<&cel::Program, String> {
        self.compiled
            .get(text)
            .ok_or_else(|| format!("`{text}` was not compiled"))
    }
}

fn evaluate_here(
    program: &cel::Program,
    scope: &Scope<'_>,
    result: Option<&Value>,
) -> Result<Value, String> {
    let mut context = cel_context();
    if let Some(result) = result {
        set_variable(&mut context, "result", CelJson(result))?;
    }
    let vars: BTreeMap<&str, CelJson<'_>> = scope
        .vars
        .map(|vars| {
            vars.names()
                .into_iter()
                .filter_map(|name| vars.get(name).map(|value| (name, CelJson(value))))
                .collect()
        })
        .unwrap_or_default();
    set_variable(&mut context, "vars", vars)?;
    if let Some(item) = &scope.item {
        set_variable(&mut context, "each", CelJson(item.value))?;
        set_variable(&mut context, "index", CelJson(item.index))?;
        if let Some(key) = item.key {
            set_variable(&mut context, "key", CelJson(key))?;
        }
    }
    add_functions(&mut context).map_err(|e| e.to_string())?;
    let value = program.execute(&context).map_err(|error| failure(&error))?;
    let json = value
        .json()
        .map_err(|error| format!("its value cannot be JSON: {error}"))?;
    Ok(sorted(json))
}

/// `value` with every object's keys in order: CEL's maps have none, and the same plan and
/// results must give the same records, byte for byte.
fn sorted(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(entries.into_iter().map(|(k, v)| (k, sorted(v))).collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
        other => other,
    }
}

/// `parseJson(text)`, `toJson(value)`, `lines(text)`.
fn add_functions(context: &mut cel::Context<'_, '_>) -> Result<(), cel::DeclarationError> {
    context.add_function("parseJson", |text: Arc<String>| -> cel::ResolveResult {
        let value: Value = plan_types::json::from_str(&text)
            .map_err(|error| cel::ExecutionError::function_error("parseJson", error))?;
        cel::to_value(CelJson(&value))
            .map_err(|error| cel::ExecutionError::function_error("parseJson", error))
    })?;
    context.add_function("toJson", |value: cel::Value| -> cel::ResolveResult {
        let json = value
            .json()
            .map_err(|error| cel::ExecutionError::function_error("toJson", error))?;
        Ok(cel::Value::String(Arc::new(sorted(json).to_string())))
    })?;
    context.add_function("lines", |text: Arc<String>| -> cel::Value {
        let lines: Vec<cel::Value> = text
            .lines()
            .map(|line| cel::Value::String(Arc::new(line.to_owned())))
            .collect();
        cel::Value::List(Arc::new(lines))
    })?;
    Ok(())
}
