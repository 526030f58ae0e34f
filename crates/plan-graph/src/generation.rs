//! The plan schema a model is asked to follow (`plan create`, `run --replan`), beside the
//! editors' schema ([`crate::plan_schema`]).
//!
//! The editors' schema describes every form a plan may take: aliases (`dependsOn` beside
//! `depends_on`), defaults, boolean subschemas, blocks and tasks. A model constrained by it
//! may write two spellings of one field and be refused for it, and the servers that turn a
//! schema into a grammar refuse parts of it (llama.cpp: "schema must be an object" for a
//! boolean subschema; a `default: null` breaks its converter). The generation schema is made
//! for a model instead:
//! - the subset of the format a model writes for a goal: the plan's `id`, `title` and
//!   `steps`, each step a tool call (`id`, `tool`, `args`, `depends_on`, `result_variable`);
//! - canonical names only, no defaults, no boolean subschemas;
//! - a step per tool: `tool` is that tool's name, `args` that tool's input schema;
//! - OpenAI's strict mode where the tools allow it: every object closed with every property
//!   required, a field that may be left out written as nullable (`null` then means absent:
//!   [`from_generation`] drops it), a number or boolean argument may also be a string (a
//!   `${…}` placeholder). A free-form object (`echo`'s arguments, `exec`'s `env`) cannot be
//!   said strictly: the strict variant ([`GenerationSchema::strict`]) leaves out the optional
//!   fields that are one, and the tools that need one, and says which
//!   ([`GenerationSchema::left_out`]); the full schema keeps them, for a server that takes a
//!   schema without `strict`.
//!
//! The answer is still validated as any plan is (the tool's own schema included): the
//! generation schema guides the model, it does not replace validation.

use serde_json::{Map, Value, json};

/// A tool a generated plan may call: its name and input schema.
#[derive(Debug, Clone, Copy)]
pub struct GenerationTool<'a> {
    /// Its name, as a step's `tool`.
    pub name: &'a str,
    /// Its arguments' JSON Schema.
    pub input_schema: &'a Value,
}

/// The schema a model is asked to follow.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerationSchema {
    /// The JSON Schema, every tool with all its arguments.
    pub schema: Value,
    /// The same within OpenAI's strict mode ([`strict_problems`] finds none), when any tool
    /// can be said strictly: without what cannot ([`GenerationSchema::left_out`]).
    pub strict: Option<Value>,
    /// What the strict variant leaves out, one line each (`echo: its arguments are a
    /// free-form object`, `exec.env: a free-form object`).
    pub left_out: Vec<String>,
}

/// Fields of a strict JSON Schema OpenAI's structured outputs accept (its published list of
/// supported keywords); anything else makes a schema non-strict.
const STRICT_KEYWORDS: &[&str] = &[
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "const",
    "anyOf",
    "$ref",
    "$defs",
    "description",
    "title",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minItems",
    "maxItems",
];

/// An id or a variable's name as a model writes one: a plain name of at most 64 characters.
/// Bounded, so that a small model held to a grammar cannot write one without end (SmolLM2-135M
/// wrote a step id of digits until its tokens ran out).
const NAME_PATTERN: &str = "^[A-Za-z0-9_][A-Za-z0-9_-]{0,63}$";

/// The most steps a model's plan has, and dependencies a step: bounded, so that a small model
/// held to a grammar ends a list it would otherwise repeat until its tokens run out (SmolLM2
/// wrote `depends_on: ["fail", "fail", …]`). A plan larger than this is a person's to write.
const MAX_STEPS: usize = 50;
const MAX_DEPENDENCIES: usize = 20;

/// The string formats strict mode accepts.
const STRICT_FORMATS: &[&str] = &[
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "uuid",
];

/// OpenAI's limits on a strict schema: object properties in all, nesting depth, enum values
/// in all.
const MAX_PROPERTIES: usize = 5000;
const MAX_DEPTH: usize = 10;
const MAX_ENUM_VALUES: usize = 1000;

/// The plan schema for a model that may call `tools` (in that order).
pub fn generation_schema(tools: &[GenerationTool<'_>]) -> GenerationSchema {
    let mut full = Vec::new();
    let mut strict = Vec::new();
    let mut left_out = Vec::new();
    for tool in tools {
        let input = resolve_refs(tool.input_schema, tool.input_schema, 0);
        let args = model_schema(&input, true, tool.name, None).unwrap_or_else(|_| json!({}));
        full.push(step_schema(tool.name, args));
        let mut left = Vec::new();
        match model_schema(&input, true, tool.name, Some(&mut left)) {
            Ok(args) => {
                strict.push(step_schema(tool.name, args));
                left_out.extend(left);
            }
            Err(why) => left_out.push(format!(
                "{}: its arguments cannot be said strictly: {why}",
                tool.name
            )),
        }
    }
    let schema = plan_schema_of(full);
    let strict = (!strict.is_empty())
        .then(|| plan_schema_of(strict))
        .filter(|strict| strict_problems(strict).is_empty());
    GenerationSchema {
        schema,
        strict,
        left_out,
    }
}

/// A step that calls `tool` with `args`.
fn step_schema(tool: &str, args: Value) -> Value {
    json!({
        "type": "object",
        "description": format!("A call of `{tool}`."),
        "properties": {
            "id": {
                "type": "string",
                "pattern": NAME_PATTERN,
                "description": "The step's id: unique, letters, digits, `-` and `_`.",
            },
            "tool": {"type": "string", "enum": [tool]},
            "args": args,
            "depends_on": {
                "type": ["array", "null"],
                "items": {"type": "string", "pattern": NAME_PATTERN},
                "maxItems": MAX_DEPENDENCIES,
                "description": "The ids of the steps that must finish first.",
            },
            "result_variable": {
                "anyOf": [{"type": "string", "pattern": NAME_PATTERN}, {"type": "null"}],
                "description": "A name later steps read this step's result by, as ${NAME}.",
            },
        },
        "required": ["id", "tool", "args", "depends_on", "result_variable"],
        "additionalProperties": false,
    })
}

/// The plan whose steps are each one of `steps`.
fn plan_schema_of(mut steps: Vec<Value>) -> Value {
    let step = match steps.len() {
        // No tool at all: a step names one; validation says which exist.
        0 => step_schema_any(),
        1 => steps.pop().unwrap_or(Value::Null),
        _ => json!({"anyOf": steps}),
    };
    json!({
        "type": "object",
        "title": "plan-cli plan",
        "description": "A plan: steps, each a tool call, run in dependency order.",
        "properties": {
            "id": {
                "anyOf": [{"type": "string", "pattern": NAME_PATTERN}, {"type": "null"}],
                "description": "The plan's id.",
            },
            "title": {
                "anyOf": [{"type": "string", "pattern": "^[^\\n]{0,120}$"}, {"type": "null"}],
                "description": "What the plan does, in a line.",
            },
            "steps": {"type": "array", "minItems": 1, "maxItems": MAX_STEPS, "items": step},
        },
        "required": ["id", "title", "steps"],
        "additionalProperties": false,
    })
}

fn step_schema_any() -> Value {
    let mut step = step_schema(
        "",
        json!({"type": "object", "properties": {}, "required": [], "additionalProperties": false}),
    );
    step["properties"]["tool"] = json!({"type": "string"});
    step["description"] = json!("A tool call.");
    step
}

/// A generated plan as the format reads it: the `null` a model wrote for a field it leaves out
/// (strict mode has it write every field) is dropped, in the plan's own fields and in each
/// step's `args` (where the tool's schema does not require the field), so that a tool's own
/// schema, which knows no `null` there, accepts the arguments.
pub fn from_generation(plan: &mut Value, tools: &[GenerationTool<'_>]) {
    let Some(object) = plan.as_object_mut() else {
        return;
    };
    object.retain(|_, value| !value.is_null());
    let Some(steps) = object.get_mut("steps").and_then(Value::as_array_mut) else {
        return;
    };
    for step in steps {
        let Some(step) = step.as_object_mut() else {
            continue;
        };
        step.retain(|_, value| !value.is_null());
        let tool = step.get("tool").and_then(Value::as_str).map(str::to_owned);
        let schema = tools
            .iter()
            .find(|t| Some(t.name) == tool.as_deref())
            .map(|t| resolve_refs(t.input_schema, t.input_schema, 0));
        if let (Some(args), Some(schema)) = (step.get_mut("args"), schema) {
            drop_absent(args, &schema);
        }
    }
}

/// Removes the `null`s that stand for an absent optional property, as `schema` describes
/// `value`.
fn drop_absent(value: &mut Value, schema: &Value) {
    match value {
        Value::Object(object) => {
            let required = required_of(schema);
            let properties = schema["properties"].as_object();
            object.retain(|key, value| {
                !value.is_null()
                    || required.contains(&key.as_str())
                    || properties.and_then(|p| p.get(key)).is_some_and(allows_null)
            });
            if let Some(properties) = properties {
                for (key, value) in object.iter_mut() {
                    if let Some(schema) = properties.get(key) {
                        drop_absent(value, schema);
                    }
                }
            }
        }
        Value::Array(items) if schema["items"].is_object() => {
            for item in items {
                drop_absent(item, &schema["items"]);
            }
        }
        _ => {}
    }
}

/// The properties an object schema requires.
fn required_of(schema: &Value) -> Vec<&str> {
    (schema["required"].as_array().into_iter())
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

/// Whether `schema` itself accepts `null`.
fn allows_null(schema: &Value) -> bool {
    match &schema["type"] {
        Value::String(t) => t == "null",
        Value::Array(types) => types.iter().any(|t| t == "null"),
        _ => schema["anyOf"]
            .as_array()
            .is_some_and(|options| options.iter().any(allows_null)),
    }
}

/// `schema` with its local `$ref`s (`#/$defs/X`, `#/definitions/X`) replaced by what they
/// name, so that it can stand inside another document; a reference nested deeper than 8 (a
/// recursive type) becomes an open schema.
fn resolve_refs(schema: &Value, root: &Value, depth: usize) -> Value {
    match schema {
        Value::Object(object) => {
            if let Some(reference) = object.get("$ref").and_then(Value::as_str) {
                if depth >= 8 {
                    return json!({});
                }
                let target = reference
                    .strip_prefix('#')
                    .and_then(|pointer| root.pointer(pointer));
                return match target {
                    Some(target) => resolve_refs(target, root, depth + 1),
                    None => json!({}),
                };
            }
            let mut resolved = Map::new();
            for (key, value) in object {
                if key == "$defs" || key == "definitions" {
                    continue;
                }
                resolved.insert(key.clone(), resolve_refs(value, root, depth));
            }
            Value::Object(resolved)
        }
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|item| resolve_refs(item, root, depth))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// A tool's (resolved) input schema as a model is asked for it: no boolean subschemas, no
/// defaults or keywords outside [`STRICT_KEYWORDS`], objects with properties closed and every
/// property required (the optional ones nullable), a number or boolean also a string (a
/// placeholder). A free-form object stays open (`{"type": "object"}`); in strict mode
/// (`left_out` given) it cannot be said (`Err`: why), and an optional property that cannot is
/// left out and noted there with its path (`at`).
fn model_schema(
    schema: &Value,
    top: bool,
    at: &str,
    mut left_out: Option<&mut Vec<String>>,
) -> Result<Value, String> {
    let strict = left_out.is_some();
    let Value::Object(object) = schema else {
        // `true` (anything) is `{}`; `false` cannot be asked for: `{}` too, validation refuses.
        return if strict {
            Err("any value".to_owned())
        } else {
            Ok(json!({}))
        };
    };
    if let Some(options) = object.get("anyOf").or_else(|| object.get("oneOf"))
        && let Some(options) = options.as_array()
    {
        let mut out = Map::new();
        keep_words(object, &mut out);
        let mut said = Vec::new();
        let mut why = String::from("no option can be said strictly");
        for option in options {
            match model_schema(option, false, at, left_out.as_deref_mut()) {
                Ok(option) => said.push(option),
                Err(error) => why = format!("no option can be said strictly ({error})"),
            }
        }
        if said.is_empty() {
            return Err(why);
        }
        out.insert("anyOf".into(), Value::Array(said));
        return Ok(Value::Object(out));
    }
    let types: Vec<&str> = match &object.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ if object.contains_key("properties") => vec!["object"],
        _ => Vec::new(),
    };
    let mut out = Map::new();
    keep_words(object, &mut out);
    if types == ["object"] || (top && types.is_empty()) {
        let properties = object.get("properties").and_then(Value::as_object);
        let open = match object.get("additionalProperties") {
            Some(Value::Bool(false)) => false,
            // Properties beside a map of others cannot be closed.
            Some(_) => true,
            None => properties.is_none_or(Map::is_empty),
        };
        out.insert("type".into(), json!("object"));
        if open {
            if strict {
                return Err("a free-form object".to_owned());
            }
            if let Some(properties) = properties {
                let said = properties
                    .iter()
                    .filter_map(|(k, v)| Some((k.clone(), model_schema(v, false, at, None).ok()?)));
                out.insert("properties".into(), Value::Object(said.collect()));
            }
            return Ok(Value::Object(out));
        }
        let required = required_of(schema);
        let mut closed = Map::new();
        for (key, property) in properties.into_iter().flatten() {
            let is_required = required.contains(&key.as_str());
            let path = format!("{at}.{key}");
            let property = match model_schema(property, false, &path, left_out.as_deref_mut()) {
                Ok(property) if is_required => property,
                Ok(property) => nullable(property),
                Err(why) if is_required => return Err(format!("`{key}`: {why}")),
                Err(why) => {
                    if let Some(left_out) = left_out.as_deref_mut() {
                        left_out.push(format!("{path}: {why}"));
                    }
                    continue;
                }
            };
            closed.insert(key.clone(), property);
        }
        let names: Vec<Value> = closed.keys().map(|k| json!(k)).collect();
        out.insert("properties".into(), Value::Object(closed));
        out.insert("required".into(), Value::Array(names));
        out.insert("additionalProperties".into(), json!(false));
        return Ok(Value::Object(out));
    }
    if types == ["array"] {
        out.insert("type".into(), json!("array"));
        let items = match object.get("items") {
            Some(items) => model_schema(items, false, &format!("{at}[]"), left_out)
                .map_err(|why| format!("its items: {why}"))?,
            None if strict => return Err("a list of any values".to_owned()),
            None => json!({}),
        };
        out.insert("items".into(), items);
        return Ok(Value::Object(out));
    }
    if types.is_empty() {
        // Any value: only a lax schema can say so (or one that lists the values).
        return if !strict || out.contains_key("enum") || out.contains_key("const") {
            Ok(Value::Object(out))
        } else {
            Err("any value".to_owned())
        };
    }
    let mut types: Vec<&str> = types;
    if strict && types.iter().any(|t| matches!(*t, "object" | "array")) {
        return Err("a value of several shapes".to_owned());
    }
    // A placeholder (`${count}`) is a string wherever a number or a boolean goes.
    if !object.contains_key("enum")
        && types
            .iter()
            .any(|t| matches!(*t, "integer" | "number" | "boolean"))
        && !types.contains(&"string")
    {
        types.push("string");
    }
    out.insert(
        "type".into(),
        if types.len() == 1 {
            json!(types[0])
        } else {
            json!(types)
        },
    );
    Ok(Value::Object(out))
}

/// Copies the keywords a model's schema keeps (not the structural ones `model_schema`
/// writes itself).
fn keep_words(from: &Map<String, Value>, to: &mut Map<String, Value>) {
    for (key, value) in from {
        let kept = match key.as_str() {
            "description" | "title" => value.is_string(),
            "enum" => value.is_array(),
            "const" | "pattern" | "minimum" | "maximum" | "exclusiveMinimum"
            | "exclusiveMaximum" | "multipleOf" | "minItems" | "maxItems" => true,
            "format" => value.as_str().is_some_and(|f| STRICT_FORMATS.contains(&f)),
            _ => false,
        };
        if kept {
            to.insert(key.clone(), value.clone());
        }
    }
}

/// `schema`, accepting `null` too: `null` added to its `type` when that is all it says, else
/// `anyOf` it and `null` (llama.cpp's converters drop a `pattern` or `enum` beside a list of
/// types: llama-cpp-python's server let `"type": ["string", "null"]` with a pattern through as
/// any string).
fn nullable(mut schema: Value) -> Value {
    if allows_null(&schema) {
        return schema;
    }
    let Some(object) = schema.as_object_mut() else {
        return schema;
    };
    let plain = object
        .keys()
        .all(|key| matches!(key.as_str(), "type" | "description" | "title"));
    if !plain && !object.contains_key("anyOf") {
        return json!({"anyOf": [schema, {"type": "null"}]});
    }
    match object.get_mut("type") {
        Some(Value::String(t)) => {
            let t = t.clone();
            object.insert("type".into(), json!([t, "null"]));
        }
        Some(Value::Array(types)) => types.push(json!("null")),
        _ => {
            if let Some(options) = object.get_mut("anyOf").and_then(Value::as_array_mut) {
                options.push(json!({"type": "null"}));
            } else if !object.is_empty() {
                // A schema of no type (`{}`, a `const`): either it or null.
                return json!({"anyOf": [Value::Object(object.clone()), {"type": "null"}]});
            }
        }
    }
    schema
}

/// Where `schema` breaks OpenAI's published rules for strict structured outputs, one line
/// each; none means it is strict. The rules: the root is an object (not `anyOf`); every
/// object lists `properties`, requires each of them and sets `additionalProperties: false`;
/// no boolean subschema; only [`STRICT_KEYWORDS`] (so no `default`, `oneOf`, `allOf`, `not`,
/// `if`); formats from a short list; at most 5,000 properties, 10 levels of nesting and 1,000
/// enum values.
pub fn strict_problems(schema: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    if schema["type"] != "object" {
        problems.push("the root: not an object".to_owned());
    }
    let mut counts = (0, 0);
    strict_walk(schema, "", 0, &mut counts, &mut problems);
    let (properties, enums) = counts;
    if properties > MAX_PROPERTIES {
        problems.push(format!(
            "{properties} properties in all (at most {MAX_PROPERTIES})"
        ));
    }
    if enums > MAX_ENUM_VALUES {
        problems.push(format!(
            "{enums} enum values in all (at most {MAX_ENUM_VALUES})"
        ));
    }
    problems
}

fn strict_walk(
    schema: &Value,
    at: &str,
    depth: usize,
    counts: &mut (usize, usize),
    problems: &mut Vec<String>,
) {
    let here = if at.is_empty() { "the root" } else { at };
    let Value::Object(object) = schema else {
        problems.push(format!("{here}: a boolean subschema"));
        return;
    };
    if depth > MAX_DEPTH {
        problems.push(format!("{here}: nested deeper than {MAX_DEPTH} levels"));
        return;
    }
    for key in object.keys() {
        if !STRICT_KEYWORDS.contains(&key.as_str()) {
            problems.push(format!("{here}: `{key}` is not allowed"));
        }
    }
    if let Some(format) = object.get("format").and_then(Value::as_str)
        && !STRICT_FORMATS.contains(&format)
    {
        problems.push(format!("{here}: format `{format}`"));
    }
    if let Some(values) = object.get("enum").and_then(Value::as_array) {
        counts.1 += values.len();
    }
    let types: Vec<&str> = match object.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if types.contains(&"object") {
        match object.get("properties").and_then(Value::as_object) {
            None => problems.push(format!("{here}: a free-form object")),
            Some(properties) => {
                counts.0 += properties.len();
                let required = required_of(schema);
                for (key, property) in properties {
                    if !required.contains(&key.as_str()) {
                        problems.push(format!("{here}.{key}: not required"));
                    }
                    strict_walk(
                        property,
                        &format!("{at}.{key}"),
                        depth + 1,
                        counts,
                        problems,
                    );
                }
            }
        }
        if object.get("additionalProperties") != Some(&Value::Bool(false)) {
            problems.push(format!("{here}: `additionalProperties` is not false"));
        }
    } else if object.contains_key("properties") {
        problems.push(format!("{here}: properties without `type: object`"));
    }
    if let Some(items) = object.get("items") {
        strict_walk(items, &format!("{at}[]"), depth + 1, counts, problems);
    } else if types.contains(&"array") {
        problems.push(format!("{here}: an array without `items`"));
    }
    if let Some(options) = object.get("anyOf") {
        for (i, option) in options.as_array().into_iter().flatten().enumerate() {
            // A tool's step names the tool, so a reader finds it.
            let name = option["properties"]["tool"]["enum"][0]
                .as_str()
                .map_or_else(|| i.to_string(), str::to_owned);
            strict_walk(option, &format!("{at}<{name}>"), depth, counts, problems);
        }
    }
    if let Some(defs) = object.get("$defs").and_then(Value::as_object) {
        for (name, def) in defs {
            strict_walk(def, &format!("$defs.{name}"), 0, counts, problems);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool<'a>(name: &'a str, schema: &'a Value) -> GenerationTool<'a> {
        GenerationTool {
            name,
            input_schema: schema,
        }
    }

    #[test]
    fn a_closed_tool_schema_gives_a_strict_plan_schema() {
        let sleep = json!({"type": "object", "properties": {"ms": {"type": "integer", "minimum": 0}},
                           "required": ["ms"], "additionalProperties": false});
        let fail = json!({"type": "object", "properties": {
            "message": {"type": "string"}, "retryable": {"type": "boolean", "default": false}},
            "additionalProperties": false});
        let generated = generation_schema(&[tool("sleep", &sleep), tool("fail", &fail)]);
        let strict = generated.strict.expect("strict");
        assert_eq!(strict, generated.schema, "nothing left out");
        assert!(generated.left_out.is_empty(), "{:?}", generated.left_out);
        let fail_args = &strict["properties"]["steps"]["items"]["anyOf"][1]["properties"]["args"];
        assert_eq!(
            fail_args["properties"]["retryable"],
            json!({"type": ["boolean", "string", "null"]}),
            "optional: nullable; a boolean may be a placeholder; no default"
        );
        assert_eq!(fail_args["required"], json!(["message", "retryable"]));
        // Lists a grammar-held model would repeat without end are bounded.
        assert_eq!(strict["properties"]["steps"]["maxItems"], 50);
        let step = &strict["properties"]["steps"]["items"]["anyOf"][0];
        assert_eq!(step["properties"]["depends_on"]["maxItems"], 20);
        let text = strict.to_string();
        for alias in [
            "dependsOn",
            "resultVariable",
            "step_id",
            "\"index\"",
            "default",
        ] {
            assert!(!text.contains(alias), "{alias} in {text}");
        }
    }

    #[test]
    fn what_cannot_be_strict_is_left_out_of_the_strict_variant_and_said() {
        let echo = json!({"type": "object"});
        let exec = json!({"type": "object", "properties": {
            "argv": {"type": "array", "items": {"type": "string"}},
            "env": {"type": "object", "additionalProperties": {"type": "string"}}},
            "required": ["argv"], "additionalProperties": false});
        let generated = generation_schema(&[tool("echo", &echo), tool("exec", &exec)]);
        let strict = generated.strict.expect("exec can be said strictly");
        assert_eq!(strict_problems(&strict), Vec::<String>::new());
        let step = &strict["properties"]["steps"]["items"];
        assert_eq!(
            step["properties"]["tool"]["enum"],
            json!(["exec"]),
            "echo left out: {step}"
        );
        assert!(
            step["properties"]["args"]["properties"]
                .get("env")
                .is_none()
        );
        assert_eq!(
            generated.left_out,
            [
                "echo: its arguments cannot be said strictly: a free-form object",
                "exec.env: a free-form object"
            ]
        );
        // The full schema keeps both, open where they are open.
        let full = &generated.schema["properties"]["steps"]["items"]["anyOf"];
        assert_eq!(full[0]["properties"]["args"], json!({"type": "object"}));
        assert_eq!(
            full[1]["properties"]["args"]["properties"]["env"],
            json!({"type": ["object", "null"]})
        );
        assert!(!strict_problems(&generated.schema).is_empty());
    }

    #[test]
    fn refs_are_inlined_and_booleans_become_objects() {
        let schema = json!({"type": "object", "$defs": {"P": {"type": "string"}},
            "properties": {"p": {"$ref": "#/$defs/P"}, "any": true}, "required": ["p"],
            "additionalProperties": false});
        let generated = generation_schema(&[tool("t", &schema)]);
        let args = &generated.schema["properties"]["steps"]["items"]["properties"]["args"];
        assert_eq!(args["properties"]["p"], json!({"type": "string"}));
        assert_eq!(args["properties"]["any"], json!({}));
        assert!(!generated.schema.to_string().contains("$ref"));
    }

    #[test]
    fn nulls_for_absent_fields_are_dropped_but_not_required_or_nullable_ones() {
        let schema = json!({"type": "object", "properties": {
            "a": {"type": "string"}, "b": {"type": ["string", "null"]}, "c": {"type": "string"},
            "nested": {"type": "object", "properties": {"x": {"type": "integer"}}}},
            "required": ["c"]});
        let mut plan = json!({"id": null, "title": "t", "steps": [{"id": "s", "tool": "t",
            "depends_on": null, "result_variable": null,
            "args": {"a": null, "b": null, "c": null, "nested": {"x": null}}}]});
        from_generation(&mut plan, &[tool("t", &schema)]);
        assert_eq!(
            plan,
            json!({"title": "t", "steps": [{"id": "s", "tool": "t",
                "args": {"b": null, "c": null, "nested": {}}}]})
        );
    }

    #[test]
    fn the_strict_rules_are_checked() {
        for (schema, problem) in [
            (json!({"anyOf": []}), "the root: not an object"),
            (
                json!({"type": "object", "properties": {"a": true}, "required": ["a"], "additionalProperties": false}),
                "a boolean subschema",
            ),
            (
                json!({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": false}),
                ".a: not required",
            ),
            (
                json!({"type": "object", "properties": {}, "required": []}),
                "`additionalProperties` is not false",
            ),
            (
                json!({"type": "object", "properties": {"a": {"type": "string", "default": "x"}}, "required": ["a"], "additionalProperties": false}),
                "`default` is not allowed",
            ),
            (
                json!({"type": "object", "properties": {"a": {"oneOf": []}}, "required": ["a"], "additionalProperties": false}),
                "`oneOf` is not allowed",
            ),
        ] {
            let problems = strict_problems(&schema);
            assert!(
                problems.iter().any(|p| p.contains(problem)),
                "{problem}: {problems:?}"
            );
        }
    }
}
