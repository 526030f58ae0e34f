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
    /// Compiles `text` if it is new, and checks that it reads only what `place` gives and
    /// calls only functions there are (`Err`: why not, in the plan author's words).
    pub(crate) fn add(&mut self, text: &str, place: &Place<'_>) -> Result<(), String> {
        if let Some(program) = self.compiled.get(text) {
            return check_references(program, place);
        }
        let program = plan_graph::on_condition_stack(|| cel::Program::compile(text))
            .map_err(|error| first_line(&error.to_string()))?;
        check_references(&program, place)?;
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

/// What an expression may read and call where it is written.
pub(crate) struct Place<'a> {
    /// The names it may read: `vars` everywhere; `each`, `index` (and `key`) in a map step's
    /// arguments; `result` in a bind; `result`, `input` and `attempt` in a block's branch
    /// condition.
    pub(crate) variables: &'a [&'a str],
    /// Data expressions (`${{ }}`) have `parseJson`, `toJson` and `lines`; conditions do not.
    pub(crate) data: bool,
}

impl Place<'_> {
    /// A data expression in a step's arguments, `expand_on`, a block node's or a task's.
    pub(crate) const DATA: Place<'static> = Place {
        variables: &["vars"],
        data: true,
    };
    /// A data expression in a map step's arguments.
    pub(crate) const ITEM: Place<'static> = Place {
        variables: &["vars", "each", "index", "key"],
        data: true,
    };
    /// A bind's expression.
    pub(crate) const BIND: Place<'static> = Place {
        variables: &["vars", "result"],
        data: true,
    };
    /// A step's `when`.
    pub(crate) const WHEN: Place<'static> = Place {
        variables: &["vars"],
        data: false,
    };
    /// A block's branch condition.
    pub(crate) const BRANCH: Place<'static> = Place {
        variables: &["vars", "result", "input", "attempt"],
        data: false,
    };
}

/// The first line of a CEL parse error, without its `ERROR: <input>:` prefix.
fn first_line(message: &str) -> String {
    let line = message.lines().next().unwrap_or("invalid expression");
    line.trim_start_matches("ERROR: ").to_owned()
}

/// What an expression reads and calls: its free names (not a macro's own loop variables)
/// and the functions it calls by name (operators aside), with whether each is called on a
/// value (`x.f()`).
#[derive(Default)]
struct References {
    variables: Vec<String>,
    functions: Vec<(String, bool)>,
    /// Calls on a bare name (`strings.quote(x)`, `optional.of(1)`): a qualified function's
    /// name when the name is no variable.
    qualified: Vec<(String, String)>,
}

fn collect(expr: &cel::IdedExpr, bound: &mut Vec<String>, found: &mut References) {
    use cel::common::ast::{EntryExpr, Expr};
    match &expr.expr {
        Expr::Unspecified | Expr::Literal(_) => {}
        Expr::Ident(name) => {
            if !name.starts_with('@') && !bound.contains(name) && !found.variables.contains(name) {
                found.variables.push(name.clone());
            }
        }
        Expr::Call(call) => {
            let name = &call.func_name;
            let operator = name.starts_with(['_', '@', '!', '-']);
            let member = call.target.is_some();
            if !operator
                && !found
                    .functions
                    .iter()
                    .any(|(n, m)| n == name && *m == member)
            {
                found.functions.push((name.clone(), member));
            }
            if let Some(target) = &call.target {
                if let Expr::Ident(namespace) = &target.expr
                    && !bound.contains(namespace)
                {
                    found.qualified.push((namespace.clone(), name.clone()));
                }
                collect(target, bound, found);
            }
            for arg in &call.args {
                collect(arg, bound, found);
            }
        }
        Expr::Comprehension(comprehension) => {
            collect(&comprehension.iter_range, bound, found);
            let before = bound.len();
            bound.push(comprehension.iter_var.clone());
            bound.extend(comprehension.iter_var2.clone());
            bound.push(comprehension.accu_var.clone());
            for part in [
                &comprehension.accu_init,
                &comprehension.loop_cond,
                &comprehension.loop_step,
                &comprehension.result,
            ] {
                collect(part, bound, found);
            }
            bound.truncate(before);
        }
        Expr::List(list) => {
            for element in &list.elements {
                collect(element, bound, found);
            }
        }
        Expr::Select(select) => collect(&select.operand, bound, found),
        Expr::Map(map) => {
            for entry in &map.entries {
                if let EntryExpr::MapEntry(entry) = &entry.expr {
                    collect(&entry.key, bound, found);
                    collect(&entry.value, bound, found);
                }
            }
        }
        Expr::Struct(object) => {
            for entry in &object.entries {
                if let EntryExpr::StructField(field) = &entry.expr {
                    collect(&field.value, bound, found);
                }
            }
        }
    }
}

/// Checks that `program` reads only the names `place` gives and calls only functions its
/// environment has, so that what compiles here never fails at run time for a name.
pub(crate) fn check_references(program: &cel::Program, place: &Place<'_>) -> Result<(), String> {
    let mut found = References::default();
    plan_graph::on_condition_stack(|| collect(program.expression(), &mut Vec::new(), &mut found));
    // `strings.quote(x)`: a qualified function, when `strings` is not a variable here.
    let mut namespaces: Vec<&str> = Vec::new();
    let mut qualified_calls: Vec<&str> = Vec::new();
    for (namespace, name) in &found.qualified {
        if !place.variables.contains(&namespace.as_str())
            && exists(
                &format!("{namespace}.{name}()"),
                &[namespace, name],
                place.data,
            )
        {
            namespaces.push(namespace);
            qualified_calls.push(name);
        }
    }
    for (name, member) in &found.functions {
        if *member && qualified_calls.contains(&name.as_str()) {
            continue;
        }
        let probe = if *member {
            format!("null.{name}()")
        } else {
            format!("{name}()")
        };
        if !exists(&probe, &[name], place.data) {
            let hint = if !place.data && DATA_FUNCTIONS.contains(&name.as_str()) {
                format!(" (`{name}` is for data expressions, `${{{{ … }}}}`, not conditions)")
            } else {
                String::new()
            };
            let called = if *member {
                format!("`.{name}(…)`")
            } else {
                format!("`{name}(…)`")
            };
            return Err(format!(
                "{called}: there is no such function in CEL here{hint}"
            ));
        }
    }
    for name in &found.variables {
        let name = name.as_str();
        if !place.variables.contains(&name)
            && !namespaces.contains(&name)
            && !CEL_TYPE_NAMES.contains(&name)
        {
            let readable: Vec<String> = place.variables.iter().map(|n| format!("`{n}`")).collect();
            let hint = if place.variables.contains(&"vars") {
                format!(" (a variable `{name}` is `vars.{name}`)")
            } else {
                String::new()
            };
            return Err(format!(
                "`{name}` is not defined here: an expression here reads {}{hint}",
                readable.join(", ")
            ));
        }
    }
    Ok(())
}

/// The functions data expressions add to CEL's.
const DATA_FUNCTIONS: [&str; 3] = ["parseJson", "toJson", "lines"];

/// The names CEL gives its types (`type(x) == string`): readable everywhere.
const CEL_TYPE_NAMES: [&str; 10] = [
    "bool",
    "int",
    "uint",
    "double",
    "string",
    "bytes",
    "list",
    "map",
    "null_type",
    "type",
];

/// How many answers [`exists`] keeps: the names come from plans, and a long-lived `mcp serve`
/// must not keep every one a client ever sent.
const KNOWN_AT_MOST: usize = 4096;

/// Whether calling `probe` (`f()`, `null.f()`, `ns.f()`: no arguments) finds a function, asked
/// of the very environment expressions run in: it does unless CEL says one of `names` is
/// undeclared. The answer is cached (the environment never changes).
fn exists(probe: &str, names: &[&str], data: bool) -> bool {
    use std::sync::Mutex;
    /// `(probe, data)` → whether it finds a function.
    type Known = HashMap<(String, bool), bool>;
    static KNOWN: Mutex<Option<Known>> = Mutex::new(None);
    let key = (probe.to_owned(), data);
    if let Some(known) = KNOWN
        .lock()
        .ok()
        .and_then(|known| known.as_ref()?.get(&key).copied())
    {
        return known;
    }
    let exists = match cel::Program::compile(probe) {
        // A name CEL reserves: not ours to judge.
        Err(_) => true,
        Ok(program) => {
            let mut context = cel_context();
            if data {
                let _ = add_functions(&mut context);
            }
            !matches!(
                program.execute(&context),
                Err(cel::ExecutionError::UndeclaredReference(ref undeclared))
                    if names.contains(&undeclared.as_str())
                        || names.len() == 2 && undeclared.as_str() == probe.trim_end_matches("()")
            )
        }
    };
    if let Ok(mut known) = KNOWN.lock() {
        let known = known.get_or_insert_with(HashMap::new);
        if known.len() < KNOWN_AT_MOST {
            known.insert(key, exists);
        }
    }
    exists
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
