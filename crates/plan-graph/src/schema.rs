//! The plan format's JSON Schema, generated from the types plans are read into (schemars), so
//! it follows them: what the loader accepts field by field, with every alias it accepts
//! (`dependsOn` for `depends_on`, …) and no other field.

use serde_json::{Map, Value};

use crate::model::RawPlan;

/// Every alias the plan types accept: (type, field, alias). Checked against the serde
/// attributes of model.rs by a test, so it cannot fall behind them.
const ALIASES: &[(&str, &str, &str)] = &[
    ("RawToolCall", "args", "arguments"),
    ("RawStep", "id", "index"),
    ("RawStep", "id", "step_id"),
    ("RawStep", "depends_on", "dependsOn"),
    ("RawStep", "result_variable", "resultVariable"),
    ("RawStep", "timeout_ms", "timeoutMs"),
    ("RawStep", "expand_on", "expandOn"),
    ("RawStep", "expand_key", "expandKey"),
    ("RawStep", "run_if", "runIf"),
    ("RawPlan", "max_concurrency", "maxConcurrency"),
    ("RawPlan", "timeout_ms", "timeoutMs"),
    ("RawPlan", "fail_fast", "failFast"),
    ("RawPlan", "approvals", "approvalsEnabled"),
    ("Guards", "max_tool_calls", "maxToolCalls"),
    ("Guards", "per_tool", "perTool"),
    ("Guards", "max_duration_ms", "maxDurationMs"),
    ("Guards", "max_failures", "maxFailures"),
    ("Guards", "max_repeats", "maxRepeats"),
    ("Block", "on_failure", "onFailure"),
    ("Node", "timeout_ms", "timeoutMs"),
    ("Node", "on_failure", "onFailure"),
    ("Workspace", "worktree_dir", "worktreeDir"),
    ("Workspace", "commit_prefix", "commitPrefix"),
    ("Workspace", "no_commits", "noCommits"),
    ("Workspace", "max_attempts", "maxAttempts"),
    ("Workspace", "max_parallel", "maxParallel"),
    ("Workspace", "on_conflict", "onConflict"),
    ("Workspace", "context_update", "contextUpdate"),
    ("Workspace", "verify_after_merge", "verifyAfterMerge"),
    ("TaskCall", "timeout_ms", "timeoutMs"),
    ("Check", "not_contains", "notContains"),
    ("Check", "timeout_ms", "timeoutMs"),
];

/// Where the schema is published, for `$schema` lines in editors.
pub const PLAN_SCHEMA_ID: &str = "https://example.invalid/plan-cli/plan.schema.json";

/// The JSON Schema (draft 2020-12) of a plan file, JSON or YAML.
pub fn plan_schema() -> Value {
    let schema = schemars::schema_for!(RawPlan);
    let mut value = serde_json::to_value(schema).unwrap_or(Value::Null);
    if let Value::Object(root) = &mut value {
        root.insert("$id".into(), Value::from(PLAN_SCHEMA_ID));
        root.insert("title".into(), Value::from("plan-cli plan"));
        root.insert(
            "description".into(),
            Value::from(
                "A plan: steps (tool calls, map steps, composite blocks, task steps) with dependencies, variables and placeholders. See docs/plan-format.md.",
            ),
        );
        add_aliases(root, "RawPlan");
        if let Some(Value::Object(defs)) = root.get_mut("$defs") {
            for (name, definition) in defs.iter_mut() {
                // The schema names the types as plans do; the table as the code does.
                let rust_name = match name.as_str() {
                    "Step" => "RawStep",
                    "ToolCall" => "RawToolCall",
                    other => other,
                };
                if let Value::Object(definition) = definition {
                    add_aliases(definition, rust_name);
                }
            }
        }
    }
    value
}

/// Adds the aliases of type `name` beside their fields, with the same schema; a required
/// field with aliases is required under one of its names.
fn add_aliases(object: &mut Map<String, Value>, name: &str) {
    let aliases: Vec<(&str, &str)> = ALIASES
        .iter()
        .filter(|(owner, _, _)| *owner == name)
        .map(|&(_, field, alias)| (field, alias))
        .collect();
    if aliases.is_empty() {
        return;
    }
    if let Some(Value::Object(properties)) = object.get_mut("properties") {
        for &(field, alias) in &aliases {
            if let Some(schema) = properties.get(field).cloned() {
                properties.insert(alias.to_owned(), schema);
            }
        }
    }
    let Some(Value::Array(required)) = object.get("required").cloned() else {
        return;
    };
    let mut kept = Vec::new();
    let mut one_of_names = Vec::new();
    for field in required {
        let names: Vec<&str> = aliases
            .iter()
            .filter(|(f, _)| Some(*f) == field.as_str())
            .map(|(_, alias)| *alias)
            .collect();
        if names.is_empty() {
            kept.push(field);
        } else {
            let mut all = vec![field.clone()];
            all.extend(names.into_iter().map(Value::from));
            one_of_names.push(all);
        }
    }
    object.insert("required".into(), Value::Array(kept));
    if !one_of_names.is_empty() {
        let all_of: Vec<Value> = one_of_names
            .into_iter()
            .map(|names| {
                let choices: Vec<Value> = names
                    .into_iter()
                    .map(|n| serde_json::json!({"required": [n]}))
                    .collect();
                serde_json::json!({"oneOf": choices})
            })
            .collect();
        object.insert("allOf".into(), Value::Array(all_of));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (type, field, alias) for every `alias = "…"` in model.rs, read from its source.
    fn aliases_in_source() -> Vec<(String, String, String)> {
        let source = include_str!("model.rs");
        let mut found = Vec::new();
        let mut owner = String::new();
        let mut pending: Vec<String> = Vec::new();
        for line in source.lines() {
            let line = line.trim();
            for keyword in ["struct ", "enum "] {
                if let Some(at) = line.find(keyword)
                    && line.starts_with("pub")
                {
                    owner = line[at + keyword.len()..]
                        .split(|c: char| !c.is_alphanumeric())
                        .next()
                        .unwrap_or("")
                        .to_owned();
                }
            }
            let mut rest = line;
            while let Some(at) = rest.find("alias = \"") {
                rest = &rest[at + 9..];
                if let Some(end) = rest.find('"') {
                    pending.push(rest[..end].to_owned());
                    rest = &rest[end..];
                }
            }
            if !pending.is_empty()
                && line.starts_with("pub")
                && let Some((field, _)) = line
                    .trim_start_matches("pub(crate) ")
                    .trim_start_matches("pub ")
                    .split_once(':')
            {
                for alias in pending.drain(..) {
                    found.push((owner.clone(), field.trim().to_owned(), alias));
                }
            }
        }
        found.sort();
        found
    }

    #[test]
    fn the_alias_table_is_the_serde_attributes() {
        let mut table: Vec<(String, String, String)> = ALIASES
            .iter()
            .map(|(a, b, c)| ((*a).to_owned(), (*b).to_owned(), (*c).to_owned()))
            .collect();
        table.sort();
        assert_eq!(table, aliases_in_source());
    }

    /// The schema and the loader agree on every fixture: a file the loader reads into its
    /// types (whatever its validation says after) passes the schema, and one it refuses
    /// (an unknown field, a wrong type) does not.
    #[test]
    fn the_schema_agrees_with_the_loader_on_every_fixture() {
        let validator = jsonschema::validator_for(&plan_schema()).unwrap();
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures");
        let mut checked = 0;
        let mut paths: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_file())
            .collect();
        paths.sort();
        // The plans people start from, too.
        let root = dir.join("..");
        paths.extend(
            [
                "crates/plan-run/src/starter.yaml",
                "examples/tasks/plan.yaml",
                "examples/mcp/refactor-auth.json",
            ]
            .map(|p| root.join(p)),
        );
        for path in paths {
            let text = std::fs::read_to_string(&path).unwrap();
            let value: Value = match path.extension().and_then(|e| e.to_str()) {
                Some("json") => match serde_json::from_str(&text) {
                    Ok(value) => value,
                    Err(_) => continue, // not JSON at all: no schema says anything
                },
                Some("yaml" | "yml") => match serde_saphyr::from_str(&text) {
                    Ok(value) => value,
                    Err(_) => continue,
                },
                _ => continue,
            };
            let loads = serde_json::from_value::<RawPlan>(value.clone()).is_ok();
            let errors: Vec<String> = validator
                .iter_errors(&value)
                .map(|e| e.to_string())
                .collect();
            assert_eq!(
                errors.is_empty(),
                loads,
                "{}: the loader {} it, the schema says {errors:?}",
                path.display(),
                if loads { "reads" } else { "refuses" }
            );
            checked += 1;
        }
        assert!(checked > 40, "only {checked} plans checked");
    }

    /// docs/plan.schema.json is the schema this build makes (`plan-cli schema` prints it).
    #[test]
    fn the_committed_schema_is_current() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/plan.schema.json");
        let mut current = serde_json::to_string_pretty(&plan_schema()).unwrap();
        current.push('\n');
        if std::env::var_os("PLAN_SCHEMA_UPDATE").is_some() {
            std::fs::write(&path, &current).unwrap();
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == current,
            "docs/plan.schema.json is out of date: run `PLAN_SCHEMA_UPDATE=1 cargo test -p plan-graph --lib schema` (or `plan-cli schema > docs/plan.schema.json`)"
        );
    }

    #[test]
    fn steps_take_an_id_under_any_of_its_names() {
        let schema = plan_schema();
        let step = &schema["$defs"]["Step"];
        assert!(step["properties"]["dependsOn"].is_object());
        assert_eq!(
            step["allOf"][0]["oneOf"],
            serde_json::json!([{"required": ["id"]}, {"required": ["index"]}, {"required": ["step_id"]}])
        );
        assert_eq!(schema["required"], serde_json::json!(["steps"]));
    }
}
