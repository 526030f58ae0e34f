//! Loading plans: every accepted source format's form, and every kind of invalid plan with its location.

use plan_graph::{Format, InvalidPlan, LoadOptions, LoadedPlan, Plan, Source, load};
use serde_json::json;

fn load_as(text: &str, format: Format) -> Result<LoadedPlan, InvalidPlan> {
    let name = if format == Format::Yaml {
        "plan.yaml"
    } else {
        "plan.json"
    };
    load(Source::new(name, text), format, &LoadOptions::default())
}

fn plan(text: &str, format: Format) -> Plan {
    match load_as(text, format) {
        Ok(loaded) => loaded.plan,
        Err(invalid) => panic!("expected a valid plan, got {:#?}", invalid.issues),
    }
}

/// Asserts the plan is invalid with exactly these errors: (code, message, line, column).
fn check_errors(text: &str, format: Format, expected: &[(&str, &str, usize, usize)]) {
    let invalid = match load_as(text, format) {
        Ok(loaded) => panic!("expected errors, got a valid plan {:#?}", loaded.plan),
        Err(invalid) => invalid,
    };
    let actual: Vec<(String, String, usize, usize)> = invalid
        .issues
        .iter()
        .filter(|issue| issue.is_error())
        .map(|issue| {
            let diagnostic = invalid.plan_source.diagnostic(issue);
            let (line, column) = diagnostic.position().unwrap_or((0, 0));
            (issue.code.to_owned(), issue.message.clone(), line, column)
        })
        .collect();
    let expected: Vec<(String, String, usize, usize)> = expected
        .iter()
        .map(|(c, m, l, col)| ((*c).to_owned(), (*m).to_owned(), *l, *col))
        .collect();
    assert_eq!(actual, expected);
}

#[test]
fn seed_000_payload_loads_unchanged() {
    let plan = plan(
        r#"{"steps": [
            {"step_id": "step_1", "tool": "echo", "args": {"x": 1}},
            {"step_id": "step_2", "tool": "fail", "depends_on": ["step_1"]}
        ]}"#,
        Format::Json,
    );
    assert_eq!(plan.steps.len(), 2);
    assert_eq!(plan.steps[1].id.0, "step_2");
    assert_eq!(plan.steps[1].depends_on[0].0, "step_1");
    assert!(plan.steps[1].args.is_empty());
}

#[test]
fn seed_003_plan_loads_with_index_and_result_variable() {
    let plan = plan(
        r#"{
  "id": "refactor-auth-001",
  "title": "Refactor Auth Module",
  "variables": {"module_path": "src/auth/handler.py"},
  "steps": [
    {"index": "1", "title": "Read auth module", "tool": "read_file",
     "args": {"path": "${module_path}"}, "depends_on": [], "result_variable": "auth_code"},
    {"index": "2", "title": "Write", "tool": "write_file",
     "args": {"path": "${module_path}", "content": "${auth_code}"}, "depends_on": ["1"]}
  ]
}"#,
        Format::Json,
    );
    assert_eq!(plan.id.as_deref(), Some("refactor-auth-001"));
    assert_eq!(
        plan.steps[0].binds.get("auth_code").map(String::as_str),
        Some("$")
    );
    assert_eq!(plan.variables["module_path"], json!("src/auth/handler.py"));
}

#[test]
fn seed_001_camel_case_and_mcp_tool_calls_load() {
    let plan = plan(
        r#"
steps:
  - id: fetch
    tool_calls: [{name: echo, args: {items: [1, 2]}}]
    binds: {items: "$.items", first: "$.items[0]"}
  - id: 2
    tool: echo
    dependsOn: [fetch]
    args: {n: "$var.first"}
"#,
        Format::Yaml,
    );
    assert_eq!(plan.steps[0].tool, "echo");
    assert_eq!(plan.steps[0].args["items"], json!([1, 2]));
    assert_eq!(plan.steps[1].id.0, "2", "numeric ids become strings");
    assert_eq!(plan.steps[1].depends_on[0].0, "fetch");
}

#[test]
fn unknown_fields_point_at_the_key_with_a_suggestion() {
    let text = "steps:\n  - id: a\n    tool: echo\n    depend_on: [b]\n";
    let invalid = load_as(text, Format::Yaml).unwrap_err();
    let issue = &invalid.issues[0];
    assert_eq!(issue.message, "unknown field `depend_on`");
    assert_eq!(issue.help.as_deref(), Some("did you mean `depends_on`?"));
    assert_eq!(
        invalid.plan_source.diagnostic(issue).position(),
        Some((4, 5))
    );

    let text = "{\"steps\": [{\"id\": \"a\", \"tool\": \"echo\", \"argz\": {}}]}";
    let invalid = load_as(text, Format::Json).unwrap_err();
    assert_eq!(invalid.issues[0].message, "unknown field `argz`");
    assert_eq!(
        invalid
            .plan_source
            .diagnostic(&invalid.issues[0])
            .position(),
        Some((1, 40))
    );
}

#[test]
fn structural_errors_name_the_field_and_its_position() {
    check_errors(
        "steps:\n  - id: a\n    tool: echo\n  - id: a\n    tool: echo\n",
        Format::Yaml,
        &[("plan::duplicate_id", "two steps have the id `a`", 4, 9)],
    );
    check_errors(
        "steps:\n  - id: a\n    args: {}\n",
        Format::Yaml,
        &[("plan::missing_tool", "step `a` has no `tool`", 2, 5)],
    );
    check_errors(
        "steps:\n  - id: a\n    tool_calls: [{name: echo}, {name: sleep}]\n",
        Format::Yaml,
        &[(
            "plan::tool",
            "step `a` has 2 calls in `tool_calls`; a step makes exactly one call",
            3,
            32,
        )],
    );
    check_errors(
        "steps:\n  - id: __meta__\n    tool: echo\n",
        Format::Yaml,
        &[(
            "plan::invalid_id",
            "the id `__meta__` is the summary record's: ids of the form `__NAME__` are reserved",
            2,
            9,
        )],
    );
    // The workspace's call has an id of that form, so no step's events are read as its.
    check_errors(
        "steps:\n  - id: __context_update__\n    tool: echo\n",
        Format::Yaml,
        &[(
            "plan::invalid_id",
            "the id `__context_update__` is the workspace's `context_update` call's: ids of the form `__NAME__` are reserved",
            2,
            9,
        )],
    );
    // An id is shown on one line where a person reads it or decides by it.
    check_errors(
        "{\"steps\": [{\"id\": \"deploy\\n✓ scan\", \"tool\": \"echo\"}]}",
        Format::Json,
        &[(
            "plan::invalid_id",
            "a step id cannot hold control or invisible characters (a newline, a tab, an escape, a zero-width space, a direction mark)",
            1,
            19,
        )],
    );
    check_errors(
        "{\"id\": \"tidy\\u001b[2J\", \"steps\": []}",
        Format::Json,
        &[(
            "plan::invalid_id",
            "a plan id cannot hold control or invisible characters (a newline, a tab, an escape, a zero-width space, a direction mark)",
            1,
            8,
        )],
    );
    // Nor one that passes for another: `deploy` with a zero-width space, or reversed.
    check_errors(
        "{\"id\": \"deploy\\u200b\", \"steps\": [{\"id\": \"x\\u202eyolpeD\", \"tool\": \"echo\"}]}",
        Format::Json,
        &[
            (
                "plan::invalid_id",
                "a step id cannot hold control or invisible characters (a newline, a tab, an escape, a zero-width space, a direction mark)",
                1,
                41,
            ),
            (
                "plan::invalid_id",
                "a plan id cannot hold control or invisible characters (a newline, a tab, an escape, a zero-width space, a direction mark)",
                1,
                8,
            ),
        ],
    );
    check_errors(
        "max_concurrency: 0\nsteps: []\n",
        Format::Yaml,
        &[(
            "plan::invalid_value",
            "`max_concurrency` must be at least 1",
            1,
            18,
        )],
    );
    check_errors(
        "steps:\n  - id: a\n    tool: echo\n    risk: extreme\n",
        Format::Yaml,
        &[(
            "plan::schema",
            "unknown variant `extreme`, expected one of `low`, `medium`, `high`",
            4,
            11,
        )],
    );
    check_errors(
        "guards:\n  max_tool_calls: 0\n  per_tool: {echo: 0}\nsteps: []\n",
        Format::Yaml,
        &[
            (
                "plan::invalid_value",
                "`guards.max_tool_calls` must be at least 1",
                2,
                19,
            ),
            (
                "plan::invalid_value",
                "`guards.per_tool.echo` must be at least 1",
                3,
                20,
            ),
        ],
    );
    check_errors(
        "steps:\n  - id: a\n    tool: echo\n    run_if: always\n",
        Format::Yaml,
        &[(
            "plan::schema",
            "unknown variant `always`, expected one of `all_success`, `all_done`, `any_success`",
            4,
            13,
        )],
    );
}

#[test]
fn bad_types_and_syntax_point_at_the_position() {
    check_errors(
        "{\"steps\": [{\"id\": \"a\", \"tool\": \"echo\", \"depends_on\": \"b\"}]}",
        Format::Json,
        &[(
            "plan::schema",
            "`depends_on` must be a list, not the string \"b\"",
            1,
            54,
        )],
    );
    check_errors(
        "{\"steps\": [",
        Format::Json,
        &[(
            "plan::syntax",
            "the document ends too early: a list (`[`) is not closed",
            1,
            11,
        )],
    );
    check_errors(
        "{}",
        Format::Json,
        &[("plan::missing_field", "missing field `steps`", 1, 2)],
    );
    let invalid = load_as("steps: [ {id: a\n", Format::Yaml).unwrap_err();
    assert_eq!(invalid.issues[0].code, "plan::syntax");
}

#[test]
fn cycles_are_errors_naming_every_member() {
    check_errors(
        r#"{"steps": [
  {"id": "a", "tool": "echo", "depends_on": ["c"]},
  {"id": "b", "tool": "echo", "depends_on": ["a"]},
  {"id": "c", "tool": "echo", "depends_on": ["b"]},
  {"id": "d", "tool": "echo", "depends_on": ["d"]}
]}"#,
        Format::Json,
        &[
            (
                "plan::cycle",
                "dependency cycle: `a` → `c` → `b` → `a`",
                2,
                46,
            ),
            ("plan::cycle", "dependency cycle: `d` → `d`", 5, 46),
        ],
    );
}

#[test]
fn unknown_dependencies_are_warnings_not_errors() {
    let loaded = load_as(
        r#"{"steps": [{"id": "a", "tool": "echo"}, {"id": "b", "tool": "echo", "depends_on": ["x"]}]}"#,
        Format::Json,
    )
    .unwrap();
    assert_eq!(loaded.warnings.len(), 1);
    assert_eq!(
        loaded.warnings[0].message,
        "step `b` depends on `x`, which is not a step of this plan"
    );
}

#[test]
fn reading_a_bound_variable_needs_a_dependency() {
    check_errors(
        r#"{"steps": [
  {"id": "a", "tool": "echo", "result_variable": "x"},
  {"id": "b", "tool": "echo", "args": {"v": "${x}"}}
]}"#,
        Format::Json,
        &[(
            "plan::unordered_read",
            "step `b` reads `x`, which step `a` binds, but does not depend on it",
            3,
            45,
        )],
    );
    check_errors(
        r#"{"steps": [
  {"id": "a", "tool": "echo", "result_variable": "x"},
  {"id": "b", "tool": "echo", "binds": {"x": "$"}}
]}"#,
        Format::Json,
        &[(
            "plan::bind_conflict",
            "steps `a` and `b` both bind `x` and neither depends on the other",
            3,
            41,
        )],
    );
    // Ordered through an intermediate step: fine.
    plan(
        r#"{"steps": [
  {"id": "a", "tool": "echo", "result_variable": "x"},
  {"id": "m", "tool": "echo", "depends_on": ["a"]},
  {"id": "b", "tool": "echo", "args": {"v": "${x}"}, "binds": {"x": "$"}, "depends_on": ["m"]}
]}"#,
        Format::Json,
    );
}

#[test]
fn placeholders_are_checked_at_load() {
    check_errors(
        "steps:\n  - id: a\n    tool: echo\n    args: {v: \"${oops\"}\n",
        Format::Yaml,
        &[(
            "plan::placeholder",
            "malformed placeholder: unterminated placeholder: `${` without a closing `}`",
            4,
            15,
        )],
    );
    check_errors(
        "steps:\n  - id: a\n    tool: echo\n    args: {v: \"$each.x\"}\n",
        Format::Yaml,
        &[(
            "plan::placeholder",
            "`$each.x` is only defined inside a map step (one with `expand_on`)",
            4,
            15,
        )],
    );
    let loaded = load_as(
        "steps:\n  - id: a\n    tool: echo\n    args: {v: \"${nope}\"}\n",
        Format::Yaml,
    )
    .unwrap();
    assert_eq!(loaded.warnings[0].code, "plan::undefined_variable");
    let loaded = load(
        Source::new(
            "p.yaml",
            "steps:\n  - id: a\n    tool: echo\n    args: {v: \"${given}\"}\n",
        ),
        Format::Yaml,
        &LoadOptions {
            provided_variables: vec!["given".into()],
            ..LoadOptions::default()
        },
    )
    .unwrap();
    assert!(loaded.warnings.is_empty());
}

#[test]
fn levels_and_renderings_follow_the_dependencies() {
    let plan = plan(
        r#"{"steps": [
  {"index": "1", "title": "Read auth module", "tool": "read_file"},
  {"index": "2", "title": "Find all usages", "tool": "search_code"},
  {"index": "3", "title": "Write refactored module", "tool": "write_file", "depends_on": ["1", "2"]},
  {"index": "4", "title": "Run tests", "tool": "run_tests", "depends_on": ["3"]}
]}"#,
        Format::Json,
    );
    let deps = plan_graph::Dependencies::new(&plan);
    assert_eq!(deps.levels(), vec![vec![0, 1], vec![2], vec![3]]);
    let ascii = plan_graph::render::ascii(&plan, &|_| plan_graph::render::Mark::Pending);
    assert_eq!(
        ascii,
        "○ 1. Read auth module         [read_file]\n\
         ○ 2. Find all usages          [search_code]  ∥\n\
         \n\
         ○ 3. Write refactored module  [write_file]   ← after: 1, 2\n\
         \n\
         ○ 4. Run tests                [run_tests]    ← after: 3\n"
    );
    assert!(plan_graph::render::mermaid(&plan).contains("    s0 --> s2\n"));
    assert!(plan_graph::render::dot(&plan).contains("    \"3\" -> \"4\";\n"));
}

#[test]
fn unknown_tools_are_reported_with_every_other_error() {
    let options = LoadOptions {
        known_tools: Some(vec!["echo".into(), "sleep".into()]),
        ..LoadOptions::default()
    };
    let text = "steps:\n  - id: a\n    tool: ech\n  - id: a\n    tool: sleep\n";
    let invalid = load(Source::new("p.yaml", text), Format::Yaml, &options).unwrap_err();
    let found: Vec<(&str, Option<&str>)> = invalid
        .issues
        .iter()
        .map(|i| (i.message.as_str(), i.help.as_deref()))
        .collect();
    assert_eq!(
        found,
        [
            ("two steps have the id `a`", Some("step ids must be unique")),
            ("unknown tool `ech`", Some("did you mean `echo`?")),
        ]
    );
}

#[test]
fn map_steps_are_checked_at_load() {
    check_errors(
        "steps:\n  - id: a\n    tool: echo\n    expand_key: $each.id\n",
        Format::Yaml,
        &[("plan::expand", "`expand_key` needs `expand_on`", 4, 5)],
    );
    check_errors(
        "variables: {xs: [1]}\nsteps:\n  - id: a\n    tool: echo\n    expand_on: \"items: ${xs}\"\n",
        Format::Yaml,
        &[(
            "plan::expand",
            "`expand_on` must be exactly one placeholder naming a list, not `items: ${xs}`",
            5,
            16,
        )],
    );
    check_errors(
        "steps:\n  - id: a\n    tool: echo\n    expand_on: 3\n",
        Format::Yaml,
        &[(
            "plan::expand",
            "`expand_on` must be a placeholder naming a list, or a list",
            4,
            16,
        )],
    );
    check_errors(
        "steps:\n  - id: a\n    tool: echo\n    expand_on: [1]\n    args: {k: $key}\n",
        Format::Yaml,
        &[(
            "plan::placeholder",
            "`$key` is only defined inside a map step that sets `expand_key`",
            5,
            15,
        )],
    );
    check_errors(
        "steps:\n  - id: a\n    tool: echo\n    expand_on: $each.list\n",
        Format::Yaml,
        &[(
            "plan::placeholder",
            "`$each.list` names an item, but `expand_on` is what makes the items",
            4,
            16,
        )],
    );
    check_errors(
        "env: [OK, bad-name, OK]\nsteps: []\n",
        Format::Yaml,
        &[
            (
                "plan::env",
                "`bad-name` is not an environment variable name",
                1,
                11,
            ),
            ("plan::env", "`OK` is listed twice", 1, 21),
        ],
    );
    // Fine: items by key, `$key` and `$index` inside, a literal list, the environment listed.
    let plan = plan(
        "env: [TOKEN]\nvariables: {users: [{id: a}]}\nsteps:\n  - id: m\n    tool: echo\n    expand_on: $var.users\n    expand_key: $each.id\n    args: {k: $key, i: $index, t: \"${env.TOKEN}\"}\n",
        Format::Yaml,
    );
    let expand = plan.steps[0].expand.as_ref().unwrap();
    assert_eq!(
        (expand.on.as_str(), expand.key.as_deref()),
        (Some("$var.users"), Some("$each.id"))
    );
    assert_eq!(plan.env, ["TOKEN"]);
}

#[test]
fn variables_files_are_objects() {
    let vars =
        plan_graph::load_variables(Source::new("v.yaml", "a: 1\nb: [x]\n"), Format::Yaml).unwrap();
    assert_eq!(serde_json::Value::Object(vars), json!({"a": 1, "b": ["x"]}));
    let invalid =
        plan_graph::load_variables(Source::new("v.json", "[1]"), Format::Json).unwrap_err();
    assert_eq!(
        invalid.issues[0].message,
        "this must be an object (`key: value` pairs), not a list"
    );
}

#[test]
fn conditions_compile_at_load_and_their_reads_are_ordered() {
    let invalid = load_as(
        "steps:\n  - id: a\n    tool: echo\n    when: \"vars.x >\"\n",
        Format::Yaml,
    )
    .unwrap_err();
    assert_eq!(invalid.issues[0].code, "plan::condition");
    assert!(
        invalid.issues[0]
            .message
            .starts_with("`when` is not a valid CEL expression: "),
        "{}",
        invalid.issues[0].message
    );
    check_errors(
        r#"{"steps": [
  {"id": "a", "tool": "echo", "result_variable": "x"},
  {"id": "b", "tool": "echo", "when": "vars.x.ok && vars['y'] == 1"}
]}"#,
        Format::Json,
        &[(
            "plan::unordered_read",
            "step `b` reads `x`, which step `a` binds, but does not depend on it",
            3,
            39,
        )],
    );
}

#[test]
fn blocks_are_validated_before_anything_runs() {
    let options = LoadOptions {
        known_tools: Some(vec!["echo".into()]),
        ..LoadOptions::default()
    };
    let text = r#"{"steps": [{"id": "review", "block": {
  "entry_point": "start",
  "nodes": {"draft": {"tool": "echo"}, "check": {"tool": "ecko"}, "both": {"tool": "echo", "block": {"entry_point": "x", "nodes": {"x": {"tool": "echo"}}}}},
  "transitions": {"draft": "nowhere", "ghost": "draft", "check": [{"condition": "passed", "target": "draft"}, {"condition": "undefined", "target": "draft"}]},
  "conditions": {"passed": "result.ok =="}
}}]}"#;
    let invalid = load(Source::new("b.json", text), Format::Json, &options).unwrap_err();
    let mut messages: Vec<String> = invalid.issues.iter().map(|i| i.message.clone()).collect();
    messages.sort();
    let expected = [
        "condition_resolution_error: condition `undefined` is not defined",
        "invalid_graph: node `both` needs exactly one of `tool` and `block`",
        "invalid_graph: the entry point `start` is not a node",
        "the branches after `check` have no `default`: if none matches, the block fails with `no_transition`",
        "unknown tool `ecko`",
        "unknown_node: `draft` goes to `nowhere`, which is not a node",
        "unknown_node: there is a transition from `ghost`, which is not a node",
    ];
    for message in expected {
        assert!(
            messages.iter().any(|m| m == message),
            "missing {message:?} in {messages:#?}"
        );
    }
    assert!(
        messages
            .iter()
            .any(|m| m
                .starts_with("condition_resolution_error: condition `passed` is not valid CEL")),
        "{messages:#?}"
    );

    // A good block loads; its step has no tool and its `args` are the block's input.
    let good = r#"{"steps": [{"id": "review", "args": {"n": 1}, "block": {"entry_point": "a", "nodes": {"a": {"tool": "echo", "args": {"v": "${input.n}"}}}}}]}"#;
    let loaded = load(Source::new("b.json", good), Format::Json, &options).unwrap();
    assert_eq!(loaded.plan.steps[0].tool, "");
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    let both = r#"{"steps": [{"id": "r", "tool": "echo", "block": {"entry_point": "a", "nodes": {"a": {"tool": "echo"}}}}]}"#;
    assert!(load(Source::new("b.json", both), Format::Json, &options).is_err());
}

#[test]
fn yaml_is_read_as_yaml_1_2_not_1_1() {
    let plan = plan(
        "steps:\n  - id: a\n    tool: echo\n    args: {b: y, c: on, d: no, e: yes, t: true, n: 012, o: 0o14, u: 1_000, i: 12}\n",
        Format::Yaml,
    );
    assert_eq!(
        serde_json::Value::Object((*plan.steps[0].args).clone()),
        json!({"b": "y", "c": "on", "d": "no", "e": "yes", "t": true, "n": "012", "o": 12, "u": "1_000", "i": 12})
    );
}

#[test]
fn variables_read_lists_every_name_a_plan_reads() {
    let plan = plan(
        r#"{"variables": {"unused": 1}, "steps": [
            {"id": "a", "tool": "echo", "args": {"x": "${version}", "y": ["$var.flags"], "h": "$${HOME}"}},
            {"id": "m", "tool": "echo", "expand_on": "${files}", "args": {"f": "$each"}},
            {"id": "w", "tool": "echo", "when": "vars.deploy == true"},
            {"id": "b", "block": {"entry_point": "n", "nodes": {"n": {"tool": "echo", "args": {"t": "${target}"}}}}}
        ]}"#,
        Format::Json,
    );
    let read: Vec<String> = plan_graph::variables_read(&plan).into_iter().collect();
    assert_eq!(read, ["deploy", "files", "flags", "target", "version"]);
}

#[test]
fn a_shell_variable_in_an_argument_gets_the_escape_as_help_at_its_string() {
    let loaded = load_as(
        "steps:\n  - id: a\n    tool: exec\n    args:\n      timeout_ms: 5\n      argv: [sh, -c, \"echo ${HOME}\"]\n",
        Format::Yaml,
    )
    .unwrap();
    let warning = &loaded.warnings[0];
    assert_eq!(warning.code, "plan::undefined_variable");
    assert!(
        warning.help.as_deref().unwrap().starts_with(
            "for a literal `${HOME}` (for a shell or program to expand), write `$${HOME}`"
        ),
        "{warning:?}"
    );
    let diagnostic = loaded.source.diagnostic(warning);
    assert_eq!(
        diagnostic.position(),
        Some((6, 22)),
        "at the string, not the args"
    );
}

#[test]
fn reading_a_step_by_its_id_is_told_how_a_step_makes_its_result_a_variable() {
    let loaded = load_as(
        "steps:\n  - id: build\n    tool: echo\n  - id: deploy\n    tool: echo\n    depends_on: [build]\n    args: {a: \"${build.artifact}\"}\n",
        Format::Yaml,
    )
    .unwrap();
    let warning = &loaded.warnings[0];
    assert_eq!(warning.code, "plan::undefined_variable");
    assert_eq!(
        warning.help.as_deref(),
        Some(
            "`build` is a step, and a step's result is a variable only when the step names it: add `result_variable: build` to step `build` for its whole result, or `binds: {NAME: $.field}` for a part"
        )
    );
}

#[test]
fn expressions_are_held_to_the_rules_of_placeholders() {
    check_errors(
        r#"{"steps": [
  {"id": "a", "tool": "echo", "args": {"x": "${{ each.name }}"}},
  {"id": "b", "tool": "echo", "result_variable": "out"},
  {"id": "c", "tool": "echo", "binds": {"y": "${{ result.v + vars.out.n }}"}},
  {"id": "m", "tool": "echo", "expand_on": [1], "args": {"i": "${{ index + 1 }}", "s": "${{ 'each' + vars.other.map(each, each) }}"}, "depends_on": ["b"]}
]}"#,
        Format::Json,
        &[
            (
                "plan::placeholder",
                "`$each` is only defined inside a map step (one with `expand_on`)",
                2,
                45,
            ),
            (
                "plan::unordered_read",
                "step `c` reads `out`, which step `b` binds, but does not depend on it",
                4,
                46,
            ),
        ],
    );
}

#[test]
fn every_steps_structural_error_is_reported_at_once() {
    check_errors(
        "title: several\nmax_concurrency: many\nsteps:\n  - id: a\n    tool: echo\n    timeout_ms: -5\n  - id: b\n    tool: echo\n    depends_on: x\n  - id: c\n    tol: echo\n    retry: {attempts: lots}\n",
        Format::Yaml,
        &[
            (
                "plan::schema",
                "`max_concurrency` must be a whole number of 0 or more, not the string \"many\"",
                2,
                18,
            ),
            (
                "plan::schema",
                "`timeout_ms` must be a whole number of 0 or more, not -5",
                6,
                17,
            ),
            (
                "plan::schema",
                "`depends_on` must be a list, not the string \"x\"",
                9,
                17,
            ),
            ("plan::unknown_field", "unknown field `tol`", 11, 5),
            // A second problem in the same step.
            (
                "plan::schema",
                "`attempts` must be a whole number of 0 or more, not the string \"lots\"",
                12,
                23,
            ),
        ],
    );
}

/// A long plan keeps every step in order, in both formats, and an error far along is placed
/// where it is.
#[test]
fn a_long_step_list_keeps_its_order_and_places_errors() {
    let steps: Vec<serde_json::Value> = (0..5_000)
        .map(|i| json!({"id": format!("s{i}"), "tool": "echo"}))
        .collect();
    let text = serde_json::to_string_pretty(&json!({ "steps": steps })).unwrap();
    for format in [Format::Json, Format::Yaml] {
        let loaded = plan(&text, format);
        let ids: Vec<String> = loaded.steps.iter().map(|s| s.id.0.clone()).collect();
        let expected: Vec<String> = (0..5_000).map(|i| format!("s{i}")).collect();
        assert_eq!(ids, expected);
    }
    let mut steps = steps;
    steps[4_321] = json!({"id": "s4321", "tool": "echo", "timeout_ms": "soon"});
    let text = serde_json::to_string_pretty(&json!({ "steps": steps })).unwrap();
    let line = text
        .lines()
        .position(|line| line.contains("\"soon\""))
        .unwrap()
        + 1;
    check_errors(
        &text,
        Format::Json,
        &[(
            "plan::schema",
            "`timeout_ms` must be a whole number of 0 or more, not the string \"soon\"",
            line,
            21,
        )],
    );
    check_errors(
        "{\"steps\": {\"id\": \"a\"}}",
        Format::Json,
        &[(
            "plan::schema",
            "`steps` must be a list, not an object",
            1,
            11,
        )],
    );
}
