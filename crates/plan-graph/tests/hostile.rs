//! Inputs that once crashed the loader (found by the fuzz harness, `cargo xtask fuzz`): each
//! loads to a plan or to issues that render, on a thread with a tokio worker's 2 MiB stack.

use plan_graph::{Format, LoadOptions, Source, load};

/// Loads and renders every issue as the CLI does; returns the rendered text.
fn load_and_render(text: String, format: Format) -> String {
    std::thread::Builder::new()
        .stack_size(2 * 1024 * 1024)
        .spawn(move || {
            let handler = miette::GraphicalReportHandler::new_themed(
                miette::GraphicalTheme::unicode_nocolor(),
            )
            .with_width(100);
            let mut out = String::new();
            if let Err(invalid) = load(Source::new("plan", text), format, &LoadOptions::default()) {
                for issue in &invalid.issues {
                    let diagnostic = invalid.plan_source.diagnostic(issue);
                    handler
                        .render_report(&mut out, &diagnostic)
                        .expect("renders");
                }
            }
            out
        })
        .expect("a thread starts")
        .join()
        .expect("no panic and no overflow")
}

#[test]
fn a_byte_order_mark_is_not_part_of_the_plan() {
    let text = "\u{feff}{\"steps\":[{\"id\":\"a\",\"tool\":\"echo\"}]}".to_owned();
    assert_eq!(load_and_render(text, Format::Json), "");
    let text = "\u{feff}steps:\n- id: a\n  tool: echo\n".to_owned();
    assert_eq!(load_and_render(text, Format::Yaml), "");
}

#[test]
fn errors_at_multibyte_characters_point_at_whole_characters() {
    // serde_json counts columns in bytes; the error is inside `日`.
    let out = load_and_render("{\"steps\": [日本]}".to_owned(), Format::Json);
    assert!(out.contains("plan:1:12"), "{out}");
    let out = load_and_render(
        "steps:\n  - id: a\n   ด tool: echo\n".to_owned(),
        Format::Yaml,
    );
    assert!(out.contains("plan::syntax"), "{out}");
    let out = load_and_render(
        "{\"steps\":[{\"id\":\"é日\",\"tool\":\"日本\",\"x🦀\":1}]}".to_owned(),
        Format::Json,
    );
    assert!(out.contains("unknown field `x🦀`"), "{out}");
}

#[test]
fn an_error_far_along_a_minified_line_shows_an_excerpt_with_its_real_column() {
    let steps: Vec<String> = (0..3000)
        .map(|i| format!("{{\"id\":\"s{i}\",\"tool\":\"echo\",\"args\":{{\"v\":\"日本日本\"}}}}"))
        .collect();
    let text = format!(
        "{{\"steps\":[{},{{\"id\":\"bad\",\"tool\":\"echo\",\"nope\":1}}]}}",
        steps.join(",")
    );
    let column = text[..text.find("\"nope\"").expect("present")]
        .chars()
        .count()
        + 1;
    let out = load_and_render(text, Format::Json);
    assert!(
        out.contains(&format!("plan:1:{column}]")),
        "expected column {column}: {out}"
    );
    assert!(out.contains("…"), "{out}");
    assert!(out.lines().all(|line| line.chars().count() < 400), "{out}");
}

#[test]
fn a_long_cycle_is_reported_without_recursion_and_named_by_its_first_steps() {
    let n = 30_000;
    let steps: Vec<String> = (0..n)
        .map(|i| {
            format!(
                "{{\"id\":\"s{i}\",\"tool\":\"echo\",\"depends_on\":[\"s{}\"]}}",
                (i + 1) % n
            )
        })
        .collect();
    let out = load_and_render(format!("{{\"steps\":[{}]}}", steps.join(",")), Format::Json);
    assert!(out.contains("… (29992 more) →"), "{out}");
}

#[test]
fn conditions_past_the_limits_are_errors() {
    for when in [
        format!("{}1", "1+".repeat(25_000)),
        format!("{}1{}", "(".repeat(5_000), ")".repeat(5_000)),
        format!("'{}\\\\q' == 'x'", "é".repeat(300_000)),
    ] {
        let text =
            format!("{{\"steps\":[{{\"id\":\"a\",\"tool\":\"echo\",\"when\":\"{when}\"}}]}}");
        let out = load_and_render(text, Format::Json);
        assert!(out.contains("plan::condition"), "{out}");
        assert!(out.contains("a condition may"), "{out}");
    }
}

#[test]
fn a_plan_past_the_size_limit_is_refused() {
    let options = LoadOptions {
        max_bytes: Some(10),
        ..LoadOptions::default()
    };
    let invalid = load(
        Source::new("plan", "{\"steps\": []}"),
        Format::Json,
        &options,
    )
    .expect_err("too large");
    assert_eq!(invalid.issues[0].code, "plan::too_large");
}

#[test]
fn a_step_id_that_a_call_inside_another_step_has_is_refused() {
    let refused = |steps: &str| -> Vec<String> {
        issues_of(&format!("{{\"steps\": {steps}}}"))
            .into_iter()
            .filter(|(code, _)| code == "plan::call_id")
            .map(|(_, message)| message)
            .collect()
    };
    let block = r#"{"id": "a", "block": {"entry_point": "n", "nodes": {"n": {"tool": "echo"}}}}"#;
    assert_eq!(
        refused(&format!(r#"[{block}, {{"id": "a/n#1", "tool": "echo"}}]"#)),
        ["the id `a/n#1` looks like a call inside block step `a`"]
    );
    let task = r#"{"id": "T1", "task": {"implement": {"tool": "echo"}}}"#;
    assert_eq!(
        refused(&format!(
            r#"[{task}, {{"id": "T1/implement#1", "tool": "echo"}}]"#
        )),
        ["the id `T1/implement#1` looks like a call inside task step `T1`"]
    );
    // Beside a step that makes no calls inside it, the same shape is just a name.
    assert!(
        refused(r#"[{"id": "a", "tool": "echo"}, {"id": "a/n#1", "tool": "echo"}]"#).is_empty()
    );
    // The id of a question another step's call asks (kept beside its approvals) is no step's.
    assert_eq!(
        refused(
            r#"[{"id": "ask", "tool": "echo"}, {"id": "ask@input#1", "tool": "echo", "risk": "high"}]"#
        ),
        ["the id `ask@input#1` holds `@input#`, which names the questions calls ask a person"]
    );
}

#[test]
fn ids_and_node_names_that_could_name_another_calls_run_are_refused() {
    let codes = |text: &str| -> Vec<String> {
        issues_of(text)
            .into_iter()
            .map(|(code, message)| format!("{code}: {message}"))
            .collect()
    };
    // Map `m[a` with key `x]` would make `m[a[x]]`, the id (and approval key) of `m`'s item
    // `a[x]` (hostile review: approving the echo ran the exec).
    let smuggled = r#"{"steps": [
        {"id": "m", "tool": "echo", "risk": "high", "expand_on": [{"k": "a[x]"}], "expand_key": "$each.k"},
        {"id": "m[a", "tool": "exec", "risk": "high", "depends_on": ["m"], "expand_on": [{"k": "x]"}],
         "expand_key": "$each.k", "args": {"argv": ["true"]}}
    ]}"#;
    assert_eq!(
        codes(smuggled),
        ["plan::item_id: the id `m[a` looks like an item of map step `m`"]
    );
    // A node named `inner/check` beside nested block `inner` with node `check`: one approval
    // key; `inner#1/check` one record id.
    for name in ["inner/check", "inner#1/check", "check#2@1"] {
        let plan = format!(
            r#"{{"steps": [{{"id": "b", "block": {{"entry_point": "{name}", "nodes": {{"{name}": {{"tool": "echo"}}}}}}}}]}}"#
        );
        assert_eq!(
            codes(&plan),
            [format!(
                "plan::block: invalid_graph: the node name `{name}` is empty or holds `/`, `#` or `@`"
            )],
            "{plan}"
        );
    }
}

/// Each problem `load` finds in JSON plan `text`, as its code and message (none when it loads).
fn issues_of(text: &str) -> Vec<(String, String)> {
    match load(
        Source::new("plan.json", text.to_owned()),
        Format::Json,
        &LoadOptions::default(),
    ) {
        Ok(_) => Vec::new(),
        Err(invalid) => invalid
            .issues
            .iter()
            .map(|issue| (issue.code.to_string(), issue.message.clone()))
            .collect(),
    }
}

/// A JSON plan that loads.
fn valid(plan: serde_json::Value) -> plan_graph::Plan {
    let source = Source::new("p.json", plan.to_string());
    let loaded = load(source, Format::Json, &LoadOptions::default()).expect("a valid plan");
    loaded.plan
}

/// A title, a tool's name or a condition a model wrote cannot draw lines of its own in the
/// picture a person reads before the plan runs.
#[test]
fn the_picture_keeps_each_step_on_its_line() {
    let plan = valid(serde_json::json!({"steps": [
        {"id": "a", "title": "build\n● deploy  [echo]", "tool": "echo"},
        {"id": "b", "tool": "echo", "depends_on": ["a"]}
    ]}));
    let picture = plan_graph::render::ascii(&plan, &|_| plan_graph::render::Mark::Pending);
    assert_eq!(
        picture.lines().filter(|l| !l.is_empty()).count(),
        2,
        "{picture}"
    );
    assert!(picture.contains("build\\n● deploy"), "{picture}");
}

/// Nor in Mermaid's picture, where a newline would end a node's line in the middle.
#[test]
fn mermaid_keeps_each_node_on_its_line() {
    let plan = valid(serde_json::json!({"steps": [
        {"id": "a", "title": "build\"]\n    x[\"forged", "tool": "echo"}
    ]}));
    let picture = plan_graph::render::mermaid(&plan);
    assert_eq!(picture.lines().count(), 2, "{picture}");
    assert!(!picture.contains("\n    x["), "{picture}");
}

/// A block's condition names and node names cannot end a label, an edge, or merge two nodes
/// into one in Mermaid's picture: `a-b` and `a_b` are two nodes, a condition with `|` or `"`
/// stays inside its quoted label.
#[test]
fn mermaid_keeps_a_blocks_names_apart_and_inside_their_labels() {
    let plan = valid(serde_json::json!({"steps": [{"id": "b", "block": {
        "entry_point": "a-b",
        "nodes": {"a-b": {"tool": "echo"}, "a_b": {"tool": "echo"}, "c": {"tool": "echo"}},
        "transitions": {"a-b": [
            {"condition": "ok|\"x] --> forged", "target": "a_b"},
            {"condition": "default", "target": "c"}
        ]},
        "conditions": {"ok|\"x] --> forged": "true"}
    }}]}));
    let picture = plan_graph::render::mermaid(&plan);
    let nodes = picture.lines().filter(|l| l.contains("[\"")).count();
    assert_eq!(nodes, 4, "the block and its three nodes: {picture}");
    assert!(
        picture.contains("-->|\"ok#124;#quot;x] --> forged\"| "),
        "the label quoted, its bar and quote as entities: {picture}"
    );
    let plan = valid(serde_json::json!({"steps": [{"id": "a#quot;", "tool": "echo"}]}));
    let picture = plan_graph::render::mermaid(&plan);
    assert!(
        picture.contains("a#35;quot;"),
        "the label quoted, its bar and quote as entities: {picture}"
    );
}
