//! Arguments checked against tools' schemas before a run: what is known is checked, what only
//! the run gives is never blamed.
#![expect(clippy::unwrap_used, reason = "test helpers fail loudly on purpose")]

mod common;

use async_trait::async_trait;
use plan_engine::{Program, Registry, Risk, Tool, ToolContext, ToolError, ToolInfo};
use serde_json::{Map, Value, json};

/// A tool that takes `n` (an integer, required) and `name` (lower-case letters).
struct Typed;

#[async_trait]
impl Tool for Typed {
    fn info(&self) -> ToolInfo {
        ToolInfo {
            name: "typed".into(),
            description: "test".into(),
            source: "test".into(),
            risk: Risk::Low,
            input_schema: json!({
                "type": "object",
                "properties": {"n": {"type": "integer"}, "name": {"type": "string", "pattern": "^[a-z]+$"}},
                "required": ["n"],
                "additionalProperties": false
            }),
        }
    }

    async fn call(&self, args: Value, _: ToolContext) -> Result<Value, ToolError> {
        Ok(args)
    }
}

fn program(plan: Value) -> (Program, plan_graph::Source) {
    let mut registry = Registry::new();
    registry.register(Typed);
    common::compile(&plan, &registry)
}

/// Each issue as (line, column, message).
fn found(plan: Value, inputs: Value) -> Vec<(usize, usize, String)> {
    let (program, source) = program(plan);
    let inputs: Map<String, Value> = serde_json::from_value(inputs).unwrap();
    program
        .check_arguments(&inputs)
        .into_iter()
        .map(|issue| {
            assert!(issue.is_error());
            let diagnostic = source.diagnostic(&issue);
            let (line, column) = diagnostic.position().unwrap();
            (line, column, issue.message)
        })
        .collect()
}

#[test]
fn literal_arguments_are_checked_where_they_are_written() {
    let plan = json!({"env": ["TOKEN"], "variables": {"count": "three", "good": 3}, "steps": [
        {"id": "ok", "tool": "typed", "args": {"n": 1, "name": "abc"}},
        {"id": "missing", "tool": "typed", "args": {"name": "abc"}},
        {"id": "typo", "tool": "typed", "args": {"n": 1, "nmae": "abc"}},
        {"id": "wrong", "tool": "typed", "args": {"n": "one"}},
        {"id": "from_var", "tool": "typed", "args": {"n": "${count}"}},
        {"id": "from_good_var", "tool": "typed", "args": {"n": "${good}"}},
        {"id": "from_step", "tool": "typed", "args": {"n": "${out}"}, "depends_on": ["bind"]},
        {"id": "bind", "tool": "typed", "args": {"n": 1}, "result_variable": "out"},
        {"id": "from_env", "tool": "typed", "args": {"n": 1, "name": "${env.TOKEN}"}},
        {"id": "from_item", "tool": "typed", "args": {"n": "$each"}, "expand_on": "${out}", "depends_on": ["bind"]},
        {"id": "partly", "tool": "typed", "args": {"n": 1, "name": "x-${out}"}, "depends_on": ["bind"]},
        {"id": "block", "block": {"entry_point": "a", "nodes": {
            "a": {"tool": "typed", "args": {"n": "${input.n}"}},
            "b": {"tool": "typed", "args": {"n": true}}
        }, "transitions": {"a": "b"}}}
    ]});
    let issues = found(plan.clone(), json!({}));
    let messages: Vec<&str> = issues.iter().map(|(_, _, m)| m.as_str()).collect();
    assert_eq!(
        messages,
        [
            "`typed` needs the argument `n`",
            "`typed` has no argument `nmae`",
            "the arguments do not match the schema of `typed`: /n: \"one\" is not of type \"integer\"",
            "the arguments do not match the schema of `typed`: /n: \"three\" is not of type \"integer\"",
            "the arguments do not match the schema of `typed`: /n: true is not of type \"integer\"",
        ],
        "values a step, an item, the environment or a block's input give are not blamed: {issues:?}"
    );
    // Each is at what is wrong (the plan is one line of JSON: columns tell them apart).
    let text = plan.to_string();
    let column_of = |needle: &str| text.find(needle).unwrap() + 1;
    assert_eq!(issues[1].1, column_of("\"nmae\""));
    assert_eq!(issues[2].1, column_of("\"one\""));
    assert_eq!(issues[4].1, column_of("true"));

    // Inputs win over the plan's variables.
    let issues = found(plan, json!({"count": 3, "good": "x"}));
    let messages: Vec<&str> = issues.iter().map(|(_, _, m)| m.as_str()).collect();
    assert!(
        messages.contains(&"the arguments do not match the schema of `typed`: /n: \"x\" is not of type \"integer\""),
        "{messages:?}"
    );
    assert!(
        !messages.iter().any(|m| m.contains("three")),
        "{messages:?}"
    );
}

#[test]
fn previews_fail_only_what_would_fail() {
    let (program, _) = program(json!({"steps": [
        {"id": "bind", "tool": "typed", "args": {"n": 1}, "result_variable": "out"},
        {"id": "later", "tool": "typed", "args": {"n": "${out.n}"}, "depends_on": ["bind"]},
        {"id": "bad", "tool": "typed", "args": {"n": 1, "extra": "${out}"}, "depends_on": ["bind"]},
    ]}));
    let calls = program.preview(&Map::new(), &Default::default());
    let errors: Vec<Option<String>> = calls
        .iter()
        .map(|c| c.error.as_ref().map(|e| e.message.clone()))
        .collect();
    assert_eq!(errors[0], None);
    assert_eq!(
        errors[1], None,
        "`<result of bind>` is not blamed for not being an integer"
    );
    assert_eq!(
        errors[2].as_deref(),
        Some(
            "arguments do not match the schema of `typed`: /: Additional properties are not allowed ('extra' was unexpected)"
        )
    );
    assert_eq!(calls[1].args, json!({"n": "<result of bind>"}));
}

/// A string that is exactly one placeholder passes its value with the value's own type; when
/// that type is what the schema refuses, the message says so and how to pass text instead,
/// before the run (values the plan gives) and in the run (values the run gives) alike.
#[tokio::test]
async fn a_whole_placeholder_of_the_wrong_type_says_how_to_pass_text() {
    let plan = json!({"variables": {"flag": true, "my-list": [7]}, "steps": [
        {"id": "flag", "tool": "typed", "args": {"n": 1, "name": "${flag}"}},
        {"id": "listed", "tool": "typed", "args": {"n": 1, "name": "${my-list[0]}"}},
        {"id": "inside", "tool": "typed", "args": {"n": 1, "name": "X${flag}"}},
        {"id": "each", "tool": "typed", "args": {"n": 1, "name": "${each}"}, "expand_on": [3]},
        {"id": "shape", "tool": "typed", "args": {"n": 1, "name": "${{ {'a': 1} }}"}}
    ]});
    let messages: Vec<String> = found(plan.clone(), json!({}))
        .into_iter()
        .map(|(_, _, message)| message)
        .collect();
    assert_eq!(
        messages,
        [
            "the arguments do not match the schema of `typed`: /name: true is not of type \"string\" (`${flag}` is the whole string, so it passes its value as it is, here a boolean; `${{ string(vars.flag) }}` passes it as text)",
            "the arguments do not match the schema of `typed`: /name: 7 is not of type \"string\" (`${my-list[0]}` is the whole string, so it passes its value as it is, here a number; `${{ string(vars[\"my-list\"][0]) }}` passes it as text)",
            "the arguments do not match the schema of `typed`: /name: \"Xtrue\" does not match \"^[a-z]+$\"",
        ]
    );
    let (program, _) = program(plan);
    let report = plan_engine::run(&program, plan_engine::RunOptions::new("r"))
        .await
        .unwrap();
    let error_of = |id: &str| common::error_message(&report, id);
    assert_eq!(
        error_of("each-0"),
        "arguments do not match the schema of `typed`: /name: 3 is not of type \"string\" (`${each}` is the whole string, so it passes its value as it is, here a number; `${{ string(each) }}` passes it as text)"
    );
    assert_eq!(
        error_of("shape"),
        "arguments do not match the schema of `typed`: /name: {\"a\":1} is not of type \"string\" (`${{ {'a': 1} }}` is the whole string, so it passes its value as it is, here an object; `${{ toJson({'a': 1}) }}` passes it as text)"
    );
    assert!(error_of("flag").ends_with("`${{ string(vars.flag) }}` passes it as text)"));
}
