//! The removed reference forms (`$step-01…` and `[*]`), as a user meets them: `validate` and
//! `run` refuse a `$` followed by a step's id in every form, each once, at its line and column,
//! with what to write instead; `[*]` is refused with what replaced it; text that names no
//! step (`$HOME`, `$5`, `$$`) runs as text.
#![expect(clippy::unwrap_used, reason = "test helpers fail loudly on purpose")]

use std::path::Path;

use assert_cmd::Command;
use serde_json::Value;

/// The binary in `dir`, with a ledger there.
fn plan_cli(dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_plan-cli"));
    command
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env("PLAN_DB", dir.join("state.db"));
    for name in ["PLAN_QUEUE", "REDIS_URL", "AGENT_APPROVALS_ENABLED"] {
        command.env_remove(name);
    }
    command
}

/// `plan-cli ARGS` in `dir`: exit code, stdout, stderr.
fn output(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let output = plan_cli(dir).args(args).output().unwrap();
    (
        output.status.code().unwrap(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// A folder holding `plan.yaml` with `text`.
fn plan(text: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("plan.yaml"), text).unwrap();
    dir
}

const EVERY_FORM: &str = r#"variables: { items: [{id: 1}] }
steps:
  - id: step-01
    tool: echo
    args: { v: 1 }
  - id: step-02
    tool: echo
    depends_on: [step-01]
    args:
      bare: "$step-01"
      embedded: "see $step-01 now"
      dotted: "$step-01.v"
      indexed: "$step-01[0]"
      ids: "${items[*].id}"
"#;

/// Every form is an error at its string, the dotted one said once; `run` refuses the plan
/// with the very same diagnostics as `validate`, and calls nothing.
#[test]
fn every_removed_form_is_refused_once_by_validate_and_run_alike() {
    let dir = plan(EVERY_FORM);
    let (code, stdout, stderr) = output(dir.path(), &["validate", "plan.yaml"]);
    assert_eq!(code, 2, "{stdout}{stderr}");
    insta::assert_snapshot!("every_form_validate", stderr);
    assert_eq!(stderr.matches("`$step-01.v`").count(), 1, "{stderr}");
    assert!(!stderr.contains("list index"), "{stderr}");

    let (code, stdout, run_stderr) = output(dir.path(), &["run", "plan.yaml"]);
    assert_eq!(code, 2, "{stdout}{run_stderr}");
    assert_eq!(run_stderr, stderr);
    // Nothing ran: no run was stored.
    let (code, runs, _) = output(dir.path(), &["runs", "--json"]);
    assert_eq!((code, runs.trim()), (0, "[]"));

    // As data: each error with its line and column.
    let (code, stdout, _) = output(dir.path(), &["validate", "--json", "plan.yaml"]);
    assert_eq!(code, 2);
    let report: Value = serde_json::from_str(&stdout).unwrap();
    let errors: Vec<(String, u64, u64)> = report["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let message = e["message"].as_str().unwrap();
            let shown = message.split('`').nth(1).unwrap().to_owned();
            (
                shown,
                e["line"].as_u64().unwrap(),
                e["column"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        errors,
        [
            ("[*]".to_owned(), 14, 12),
            ("$step-01".to_owned(), 10, 13),
            ("$step-01".to_owned(), 11, 17),
            ("$step-01.v".to_owned(), 12, 15),
            ("$step-01[0]".to_owned(), 13, 16),
        ],
        "{report:#}"
    );
    assert_eq!(report["warnings"], serde_json::json!([]));
}

/// A `$` followed by what is no step of the plan is text, in a tool's arguments and in a
/// program's command line alike: shell variables, prices, `$$`, words that only start like
/// an id, numeric ids.
#[test]
fn text_that_names_no_step_runs_as_text() {
    let dir = plan(
        r#"steps:
  - id: "1"
    tool: echo
    args: { price: "costs $5", awk: "awk '{print $1}'" }
  - id: say
    tool: echo
    depends_on: ["1"]
    args:
      shell: "echo $HOME $PATH pid=$$ $say-hello $sayings"
      escaped: "$$say and $$say.v"
  - id: shell
    tool: exec
    args: { argv: [sh, -c, "printf '%s' \"$PLAN_REMOVED_TEST_NAME\""], env: { PLAN_REMOVED_TEST_NAME: ada } }
"#,
    );
    let (code, stdout, stderr) = output(dir.path(), &["validate", "plan.yaml"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.ends_with("is a valid plan: `plan`, 3 steps\n"),
        "{stdout}"
    );
    assert_eq!(stderr, "");

    let (code, stdout, stderr) = output(dir.path(), &["run", "plan.yaml", "--json"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    let records = report["records"].as_array().unwrap();
    assert_eq!(
        records[0]["result"],
        serde_json::json!({"price": "costs $5", "awk": "awk '{print $1}'"})
    );
    assert_eq!(
        records[1]["result"],
        serde_json::json!({
            "shell": "echo $HOME $PATH pid=$ $say-hello $sayings",
            "escaped": "$say and $say.v",
        })
    );
    assert_eq!(records[2]["result"]["stdout"], "ada");
}

/// The removed form's exact shape naming no step is a warning, the same from `validate` and
/// `run`, which goes on and passes the text.
#[test]
fn the_removed_shape_without_its_step_is_a_warning_from_validate_and_run() {
    let dir = plan(
        r#"steps:
  - id: step-1
    tool: echo
    args: { note: "$step-01.v" }
"#,
    );
    let (code, stdout, stderr) = output(dir.path(), &["validate", "plan.yaml"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.ends_with(", 1 step, 1 warning\n"), "{stdout}");
    insta::assert_snapshot!("shape_without_step_validate", stderr);

    let (code, stdout, run_stderr) = output(dir.path(), &["run", "plan.yaml", "--json"]);
    assert_eq!(code, 0, "{stdout}{run_stderr}");
    assert!(run_stderr.starts_with(&stderr), "{run_stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        report["records"][0]["result"],
        serde_json::json!({"note": "$step-01.v"})
    );
}

/// In a block and a task: a node's name and the step's own id, each with its own help.
#[test]
fn nodes_items_and_a_steps_own_id_are_refused_with_their_own_help() {
    let dir = plan(
        r#"variables: { users: [ada, bob] }
steps:
  - id: greet
    tool: echo
    expand_on: "${users}"
    args: { name: "$each" }
  - id: review
    depends_on: [greet]
    args: { first: "$greet-0" }
    block:
      entry_point: draft
      nodes:
        draft: { tool: echo, args: { text: "${input.first}" } }
        check: { tool: echo, args: { text: "$draft.text", own: "from $review" } }
      transitions: { draft: check }
"#,
    );
    let (code, stdout, stderr) = output(dir.path(), &["validate", "plan.yaml"]);
    assert_eq!(code, 2, "{stdout}{stderr}");
    insta::assert_snapshot!("nodes_items_own", stderr);
    let (code, _, run_stderr) = output(dir.path(), &["run", "plan.yaml"]);
    assert_eq!(code, 2);
    assert_eq!(run_stderr, stderr);
}
