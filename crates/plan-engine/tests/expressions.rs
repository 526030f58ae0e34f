//! Data expressions, `${{ EXPR }}`: text turned into data between steps.

mod common;

use common::Harness;
use plan_types::TaskStatus;
use serde_json::{Value, json};

fn result<'a>(report: &'a plan_types::RunReport, id: &str) -> &'a Value {
    report
        .records
        .iter()
        .find(|r| r.step_id == id)
        .and_then(|r| r.result.as_deref())
        .unwrap_or_else(|| panic!("no result for {id}: {:#?}", report.records))
}

#[tokio::test(start_paused = true)]
async fn a_list_found_at_run_time_is_mapped_over_and_fields_are_picked() {
    let harness = Harness::new();
    let report = harness
        .run(json!({"variables": {"who": "  Ada  "}, "steps": [
            // A tool's text output, as `ls` gives it: lines with a trailing newline.
            {"id": "list", "tool": "work", "args": {"out": "a.txt\nb.txt\n", "json": "{\"n\": 2, \"tags\": [\"x\", \"y\"]}"},
             "binds": {"files": "${{ lines(result.args.out) }}", "meta": "${{ parseJson(result.args.json) }}"}},
            {"id": "each", "tool": "work", "depends_on": ["list"], "expand_on": "${{ lines(vars.list_out) }}",
             "args": {"file": "${{ each.upperAscii() }}", "n": "${{ index + 1 }}"}},
            {"id": "mapped", "tool": "work", "depends_on": ["list"], "expand_on": "${files}", "args": {"f": "$each", "up": "${{ each.upperAscii() }}", "n": "${{ index + 1 }}"}},
            {"id": "use", "tool": "work", "depends_on": ["list"], "args": {
                "tags": "${{ vars.meta.tags }}",
                "count": "${{ size(vars.files) }}",
                "text": "hello ${{ vars.who.trim() }}: ${{ vars.meta.tags.join(',') }}",
                "json": "${{ toJson(vars.meta) }}",
                "obj": "${{ {'b': 1, 'a': 2, 'c': {'z': 1, 'y': 2}} }}"
            }}
        ]}))
        .await;
    assert_eq!(
        report.task_status,
        TaskStatus::Failed,
        "{:#?}",
        report.records
    );
    // `each` read a variable nothing defines: failed with a message naming the expression.
    let each = report.records.iter().find(|r| r.step_id == "each").unwrap();
    let error = each.error.as_ref().unwrap();
    assert_eq!(error.code, "E_ARGS_UNRESOLVED");
    assert!(
        error.message.contains("${{ lines(vars.list_out) }}"),
        "{}",
        error.message
    );
    assert_eq!(
        report.variables["files"].as_ref(),
        &json!(["a.txt", "b.txt"])
    );
    assert_eq!(
        result(&report, "mapped-1")["args"],
        json!({"f": "b.txt", "up": "B.TXT", "n": 2})
    );
    assert_eq!(
        result(&report, "use")["args"],
        json!({"tags": ["x", "y"], "count": 2, "text": "hello Ada: x,y", "json": "{\"n\":2,\"tags\":[\"x\",\"y\"]}",
               "obj": {"a": 2, "b": 1, "c": {"y": 2, "z": 1}}})
    );
    // CEL's maps have no order; records must: keys come sorted, whatever the hash seed.
    assert_eq!(
        serde_json::to_string(&result(&report, "use")["args"]["obj"]).unwrap(),
        r#"{"a":2,"b":1,"c":{"y":2,"z":1}}"#
    );
}

/// CEL never converts numbers: `int * double` fails. The message names the operator and the
/// operands' CEL types and says what to write, in data expressions and conditions alike.
#[tokio::test(start_paused = true)]
async fn an_operator_on_two_kinds_of_numbers_says_which_conversion_to_write() {
    let harness = Harness::new();
    let report = harness
        .run(json!({"variables": {"n": 3, "tags": ["a"]}, "steps": [
            {"id": "scaled", "tool": "work", "args": {"x": "${{ vars.n * 0.5 }}"}},
            {"id": "fixed", "tool": "work", "args": {"x": "${{ double(vars.n) * 0.5 }}"}},
            {"id": "joined", "tool": "work", "args": {"x": "${{ vars.tags + 'b' }}"}},
            {"id": "gated", "tool": "work", "when": "vars.n + 0.5 > 3.0"}
        ]}))
        .await;
    let message = |id: &str| common::error_message(&report, id);
    assert_eq!(
        message("scaled"),
        "`${{ vars.n * 0.5 }}`: `*` of int 3 and double 0.5: CEL does not mix int and double; convert one with `int(…)` or `double(…)`"
    );
    assert_eq!(result(&report, "fixed")["args"]["x"], json!(1.5));
    assert_eq!(
        message("joined"),
        "`${{ vars.tags + 'b' }}`: `+` does not apply to list and string"
    );
    assert!(
        message("gated").contains("`+` of int 3 and double 0.5: CEL does not mix int and double"),
        "{}",
        message("gated")
    );
}

/// The messages compiling `plan` gives (it must load).
fn compile_problems(plan: Value) -> Vec<String> {
    let harness = Harness::new();
    let loaded = plan_graph::load(
        plan_graph::Source::new("test.json", plan.to_string()),
        plan_graph::Format::Json,
        &plan_graph::LoadOptions::default(),
    )
    .unwrap_or_else(|invalid| panic!("invalid test plan: {:#?}", invalid.issues));
    match plan_engine::Program::compile(&loaded.plan, "test", &harness.registry()) {
        Ok(_) => Vec::new(),
        Err(issues) => issues.into_iter().map(|issue| issue.message).collect(),
    }
}

/// What compiles runs: a name or function an expression's place does not have is found when
/// the plan is compiled (so `validate` reports it), not when the step runs.
#[test]
fn an_expression_reads_and_calls_only_what_its_place_has() {
    // Allowed: the item in a map step's key and arguments, a macro's own loop variable, the
    // strings extension, data functions in data expressions.
    let fine = json!({"variables": {"l": [{"id": 1}], "t": "a/b"}, "steps": [
        {"id": "m", "tool": "work", "expand_on": "$var.l", "expand_key": "${{ string(each.id).replace('/', '_') }}",
         "args": {"k": "$key", "i": "${{ index + 1 }}", "ids": "${{ vars.l.map(x, x.id) }}"}},
        {"id": "w", "tool": "work", "when": "vars.l.all(x, x.id > 0) && vars.t.contains('/')",
         "args": {"j": "${{ parseJson(toJson(vars.l)) }}"}},
    ]});
    assert_eq!(compile_problems(fine), Vec::<String>::new());

    let problems = compile_problems(json!({"variables": {"l": [1]}, "steps": [
        {"id": "w", "tool": "work", "when": "parseJson('{}') == {}"},
        {"id": "r", "tool": "work", "args": {"x": "${{ vars.l.reduce(a, b, a + b) }}"}},
        {"id": "e", "tool": "work", "args": {"x": "${{ result.v }}"}},
        {"id": "k", "tool": "work", "expand_on": "$var.l", "expand_key": "${{ nope(each) }}"},
    ]}));
    assert_eq!(
        problems,
        [
            "`when` is not a valid CEL expression: `parseJson(…)`: there is no such function in CEL here (`parseJson` is for data expressions, `${{ … }}`, not conditions)",
            "`${{ vars.l.reduce(a, b, a + b) }}` is not a valid expression: `.reduce(…)`: there is no such function in CEL here",
            "`${{ result.v }}` is not a valid expression: `result` is not defined here: an expression here reads `vars` (a variable `result` is `vars.result`)",
            "`${{ nope(each) }}` is not a valid expression: `nope(…)`: there is no such function in CEL here",
        ]
    );
}

/// A value of the wrong type for a function is named in CEL's words, not Rust's.
#[tokio::test(start_paused = true)]
async fn a_function_given_the_wrong_type_says_so_in_cel_s_words() {
    let harness = Harness::new();
    let report = harness
        .run(json!({"variables": {"m": {"t": "x"}}, "steps": [
            {"id": "p", "tool": "work", "args": {"v": "${{ parseJson(vars.m) }}"}}
        ]}))
        .await;
    assert_eq!(
        common::error_message(&report, "p"),
        "`${{ parseJson(vars.m) }}`: a function was given a map where it takes a string"
    );
}
