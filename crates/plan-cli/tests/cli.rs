//! The `plan-cli` binary, run as a user would.
#![expect(clippy::unwrap_used, reason = "test helpers fail loudly on purpose")]

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use predicates::prelude::*;
use serde_json::{Value, json};

/// The binary, with a ledger of this test process's own, outside the repository.
fn plan_cli() -> Command {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    let dir = DIR.get_or_init(|| tempfile::tempdir().unwrap());
    let mut command = Command::new(env!("CARGO_BIN_EXE_plan-cli"));
    command
        .env("NO_COLOR", "1")
        .env("PLAN_DB", dir.path().join("state.db"));
    for name in ["PLAN_QUEUE", "REDIS_URL", "AGENT_APPROVALS_ENABLED"] {
        command.env_remove(name);
    }
    command
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures")
        .join(name)
}

fn write_plan(dir: &Path, name: &str, plan: &Value) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_string_pretty(plan).unwrap()).unwrap();
    path
}

fn run_json(args: &[&str]) -> (i32, Value) {
    let output = plan_cli()
        .arg("run")
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    let report = serde_json::from_slice(&output.stdout).unwrap_or_else(|_| {
        panic!(
            "not JSON: {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (output.status.code().unwrap(), report)
}

/// Replaces run ids and durations so human output can be snapshotted.
fn redact(text: &str) -> String {
    text.split('\n')
        .map(|line| {
            line.split(' ')
                .map(|word| {
                    let digits = word.trim_end_matches("ms").trim_end_matches('s');
                    if word.len() == 26 && word.chars().all(|c| c.is_ascii_alphanumeric()) {
                        "[run_id]".to_owned()
                    } else if (word.ends_with("ms") || word.ends_with('s'))
                        && !digits.is_empty()
                        && digits.chars().all(|c| c.is_ascii_digit() || c == '.')
                    {
                        "[time]".to_owned()
                    } else {
                        word.to_owned()
                    }
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn help_is_the_cli_reference() {
    let output = plan_cli().arg("--help").output().unwrap();
    insta::assert_snapshot!("help", String::from_utf8_lossy(&output.stdout));
    let output = plan_cli().args(["run", "--help"]).output().unwrap();
    insta::assert_snapshot!("run_help", String::from_utf8_lossy(&output.stdout));
}

#[test]
fn exit_codes_follow_the_task_status() {
    plan_cli()
        .args(["run", fixture("02-mcp-cli-refactor.json").to_str().unwrap()])
        .assert()
        .code(0);
    plan_cli()
        .args([
            "run",
            fixture("01-execute-plan-example.json").to_str().unwrap(),
        ])
        .assert()
        .code(1);
    plan_cli()
        .args(["run", fixture("10-cycle.yaml").to_str().unwrap()])
        .assert()
        .code(2);
    plan_cli()
        .args([
            "run",
            fixture("09-unknown-dependency.json").to_str().unwrap(),
        ])
        .assert()
        .code(4);
    plan_cli()
        .args(["run", fixture("40-when-conditions.yaml").to_str().unwrap()])
        .assert()
        .code(3);
}

/// The record of `id` in a report.
fn record_of<'a>(report: &'a Value, id: &str) -> &'a Value {
    report["records"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["step_id"] == id)
        .unwrap_or_else(|| panic!("no record of `{id}` in {report}"))
}

/// `status RUN --json` of the run `report` is of: the same object.
fn status_of(report: &Value) -> Value {
    let output = plan_cli()
        .args(["status", report["run_id"].as_str().unwrap(), "--json"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    serde_json::from_slice(&output.stdout).unwrap()
}

/// Durations aside, as the ledger keeps them.
fn without_durations(mut report: Value) -> Value {
    for record in report["records"].as_array_mut().unwrap() {
        record.as_object_mut().unwrap().remove("duration_ms");
    }
    report
}

#[test]
fn a_run_that_skipped_a_step_it_could_have_run_is_partial() {
    let dir = tempfile::tempdir().unwrap();
    // `publish` needs `tests`, which ran, and `lint`, which its condition turned off: it could
    // have run and did not, and neither did `announce` after it.
    let plan = write_plan(
        dir.path(),
        "partial.json",
        &json!({"steps": [
            {"id": "tests", "tool": "echo", "args": {"passed": true}},
            {"id": "lint", "tool": "echo", "when": "false"},
            {"id": "publish", "tool": "echo", "depends_on": ["tests", "lint"], "run_if": "all_success"},
            {"id": "announce", "tool": "echo", "depends_on": ["publish"]}
        ]}),
    );
    let state = dir.path().join("state.json");
    let (code, report) = run_json(&[
        plan.to_str().unwrap(),
        "--state-file",
        state.to_str().unwrap(),
    ]);
    assert_eq!(code, 3, "{report}");
    assert_eq!(report["task_status"], "PARTIAL");
    // The execute-state document: the run ended and nothing failed, so it is `completed`
    // (not `abandoned`, which says a task's retries ran out); what did not run is pending.
    let document: Value = serde_json::from_slice(&std::fs::read(&state).unwrap()).unwrap();
    assert_eq!(document["status"], "completed", "{document}");
    assert!(document["completed_at"].is_string(), "{document}");
    assert_eq!(document["abandoned"], json!([]), "{document}");
    assert_eq!(
        document["tasks"]["publish"]["status"], "pending",
        "{document}"
    );
    assert_eq!(
        document["tasks"]["tests"]["status"], "completed",
        "{document}"
    );
    assert_eq!(record_of(&report, "lint")["ok"], true);
    assert_eq!(record_of(&report, "lint")["reason"], "condition false");
    let publish = record_of(&report, "publish");
    assert_eq!(
        (&publish["ok"], &publish["skipped"]),
        (&json!(false), &json!(true))
    );
    assert_eq!(publish["reason"], "dependency not satisfied: [\"lint\"]");
    assert_eq!(publish["upstream"], json!({"lint": "condition false"}));
    assert_eq!(
        record_of(&report, "announce")["upstream"],
        json!({"publish": "skipped"})
    );
    let meta = record_of(&report, "__meta__");
    assert_eq!(meta["ok"], false);
    assert_eq!(
        meta["reason"],
        "some steps were skipped; task_status=PARTIAL"
    );
    // The ledger says the same afterwards.
    assert_eq!(
        without_durations(status_of(&report)),
        without_durations(report.clone())
    );
    let output = plan_cli()
        .args(["run", plan.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    insta::assert_snapshot!(
        "summary_partial",
        redact(&String::from_utf8_lossy(&output.stdout))
    );
}

/// A run of a part (`--layer`) that ends PARTIAL leaves the rest of the breakdown to run: its
/// execute-state document says `stopped`, as a COMPLETED part run's does, not `completed`.
#[test]
fn a_part_run_that_ends_partial_is_stopped_in_the_state_file() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write_plan(
        dir.path(),
        "part.json",
        &json!({"steps": [
            {"id": "tests", "tool": "echo", "layer": "one"},
            {"id": "lint", "tool": "echo", "when": "false", "layer": "one"},
            {"id": "publish", "tool": "echo", "depends_on": ["tests", "lint"], "run_if": "all_success", "layer": "one"},
            {"id": "later", "tool": "echo", "layer": "two"}
        ]}),
    );
    let state = dir.path().join("state.json");
    let (code, report) = run_json(&[
        plan.to_str().unwrap(),
        "--layer",
        "one",
        "--state-file",
        state.to_str().unwrap(),
    ]);
    assert_eq!(
        (code, &report["task_status"]),
        (3, &json!("PARTIAL")),
        "{report}"
    );
    let document: Value = serde_json::from_slice(&std::fs::read(&state).unwrap()).unwrap();
    assert_eq!(document["status"], "stopped", "{document}");
    assert_eq!(
        document["tasks"]["later"]["status"], "pending",
        "{document}"
    );
}

/// A tool the plan declares on a queue, run without one: the step fails with the library's
/// words (which name no flag), and the CLI adds how to give the run its queue.
#[test]
fn a_queue_tool_run_without_a_queue_says_how_to_give_it_one() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write_plan(
        dir.path(),
        "queued.json",
        &json!({
            "tools": [{"name": "resize", "queue": "images", "input_schema": {"type": "object"}}],
            "steps": [{"id": "shrink", "tool": "resize", "args": {"path": "a.png"}}]
        }),
    );
    let output = plan_cli()
        .args(["run", plan.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(stdout.contains("E_QUEUE_UNAVAILABLE"), "{stdout}");
    assert!(
        stderr.contains("hint: a tool of this plan runs on a BullMQ queue: give the run its Redis with `--queue redis://HOST:PORT`"),
        "{stderr}"
    );
    // `--json` prints the report alone: its error is the library's, naming no flag.
    let (code, report) = run_json(&[plan.to_str().unwrap()]);
    assert_eq!(code, 1);
    let error = &record_of(&report, "shrink")["error"];
    assert_eq!(error["code"], "E_QUEUE_UNAVAILABLE", "{report}");
    assert!(
        !error["message"].as_str().unwrap().contains("--"),
        "{error}"
    );
}

#[test]
fn condition_skips_and_runs_of_a_part_stay_completed() {
    let dir = tempfile::tempdir().unwrap();
    // Everything `off` and `after` need is off: they are off with it, whatever their trigger
    // rule.
    let plan = write_plan(
        dir.path(),
        "completed.json",
        &json!({"steps": [
            {"id": "build", "tool": "echo", "layer": "one"},
            {"id": "off", "tool": "echo", "when": "false", "depends_on": ["build"], "layer": "one"},
            {"id": "after", "tool": "echo", "depends_on": ["off"], "run_if": "all_success", "layer": "two"},
            {"id": "either", "tool": "echo", "depends_on": ["off", "after"], "run_if": "any_success", "layer": "two"}
        ]}),
    );
    let plan = plan.to_str().unwrap();
    let (code, report) = run_json(&[plan]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["task_status"], "COMPLETED");
    for id in ["off", "after", "either"] {
        assert_eq!(record_of(&report, id)["ok"], true, "{id}: {report}");
        assert_eq!(record_of(&report, id)["reason"], "condition false", "{id}");
    }
    assert_eq!(record_of(&report, "__meta__")["ok"], true);
    assert_eq!(status_of(&report)["task_status"], "COMPLETED");
    // Steps a run of a part leaves out are not part of it: they get no record and do not
    // make it PARTIAL.
    for part in [&["--layer", "one"][..], &["--task", "build"]] {
        let mut args = vec![plan];
        args.extend(part);
        let (code, report) = run_json(&args);
        assert_eq!(code, 0, "{part:?}: {report}");
        assert_eq!(report["task_status"], "COMPLETED", "{part:?}");
        assert!(
            report["records"]
                .as_array()
                .unwrap()
                .iter()
                .all(|r| r["step_id"] != "after"),
            "{part:?}: {report}"
        );
        assert_eq!(status_of(&report)["task_status"], "COMPLETED", "{part:?}");
    }
    // And a run whose every step succeeds is COMPLETED.
    plan_cli()
        .args(["run", fixture("02-mcp-cli-refactor.json").to_str().unwrap()])
        .assert()
        .code(0);
}

#[test]
fn run_refuses_arguments_known_to_break_their_schema_before_any_step_runs() {
    let dir = tempfile::tempdir().unwrap();
    let written = dir.path().join("written.txt");
    std::fs::write(
        dir.path().join("bad.yaml"),
        format!(
            "steps:\n  - id: write\n    tool: exec\n    args: {{argv: [touch, \"{}\"]}}\n  - id: nap\n    tool: sleep\n    args: {{ms: soon}}\n",
            written.display()
        ),
    )
    .unwrap();
    let ledger = dir.path().join("state.db");
    let cli = || {
        let mut command = plan_cli();
        command.env("PLAN_DB", &ledger).current_dir(dir.path());
        command
    };
    let validated = cli().args(["validate", "bad.yaml"]).output().unwrap();
    assert_eq!(validated.status.code(), Some(2));
    let run = cli().args(["run", "bad.yaml"]).output().unwrap();
    assert_eq!(run.status.code(), Some(2));
    assert!(!written.exists(), "no step ran");
    assert!(run.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(stderr, String::from_utf8_lossy(&validated.stderr));
    for expected in [
        "× the arguments do not match the schema of `sleep`: /ms: \"soon\" is not of type \"integer\"",
        "bad.yaml:7:16]",
        "Error: bad.yaml is not a valid plan (1 error)",
    ] {
        assert!(stderr.contains(expected), "{expected}\n{stderr}");
    }
    // Nothing was recorded either.
    let runs = cli().args(["runs", "--json"]).output().unwrap();
    assert_eq!(runs.status.code(), Some(0), "{runs:?}");
    let runs: Value = serde_json::from_slice(&runs.stdout).unwrap();
    assert_eq!(runs, json!([]));

    // Arguments that only the run gives are checked as each call is made: the other steps run.
    let later = write_plan(
        dir.path(),
        "later.json",
        &json!({"steps": [
            {"id": "write", "tool": "exec", "args": {"argv": ["touch", written.display().to_string()]}},
            {"id": "a", "tool": "echo", "args": {"ms": "soon"}, "result_variable": "a"},
            {"id": "nap", "tool": "sleep", "args": {"ms": "${a.ms}"}, "depends_on": ["a"]}
        ]}),
    );
    cli()
        .args(["validate", later.to_str().unwrap()])
        .assert()
        .success();
    let (code, report) = run_json(&[later.to_str().unwrap()]);
    assert_eq!(code, 1, "{report}");
    assert!(written.exists());
    let error = &record_of(&report, "nap")["error"];
    assert_eq!(error["code"], "E_ARGS_INVALID");
    assert_eq!(error["details"][0]["pointer"], "/ms");
    assert_eq!(
        record_of(&report, "nap")["attempts"],
        0,
        "the tool was not called"
    );
}

#[test]
fn bad_flags_and_files_are_invalid_input() {
    plan_cli()
        .args(["run", "--max-concurrency", "0", "x.json"])
        .assert()
        .code(2);
    plan_cli()
        .args(["run", "--var", "novalue", "x.json"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("expected NAME=VALUE"));
    plan_cli()
        .args(["run", "--frobnicate", "x.json"])
        .assert()
        .code(2);
    plan_cli()
        .args(["run", "/no/such/plan.json"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "Error: cannot read plan `/no/such/plan.json`",
        ));
    plan_cli()
        .args([
            "validate",
            fixture("14-unknown-field.json").to_str().unwrap(),
        ])
        .assert()
        .code(2);
}

#[test]
fn a_plan_can_come_from_stdin() {
    let output = plan_cli()
        .args(["run", "-", "--json"])
        .write_stdin(r#"{"steps": [{"id": "a", "tool": "echo", "args": {"x": 1}}]}"#)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["plan_id"], "stdin");
    assert_eq!(report["records"][0]["result"], json!({"x": 1}));
    // YAML too.
    let output = plan_cli()
        .args(["run", "-", "--json"])
        .write_stdin("steps:\n  - id: a\n    tool: echo\n    args: {x: 2}\n")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["records"][0]["result"], json!({"x": 2}));
}

#[test]
fn var_values_are_strings_unless_the_plan_default_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write_plan(
        dir.path(),
        "vars.json",
        &json!({"variables": {"n": 1, "flags": [], "version": "1.0", "who": "plan"}, "steps": [{"id": "a", "tool": "echo", "args": {
            "n": "${n}", "flags": "${flags}", "version": "${version}", "who": "${who}", "extra": "${extra}", "typed": "${typed}"
        }}]}),
    );
    let (code, report) = run_json(&[
        plan.to_str().unwrap(),
        "--var",
        "n=41",
        "--var",
        "flags=[\"-v\"]",
        "--var",
        "version=1.10",
        "--var",
        "who=10",
        "--var",
        "extra=1e3",
        "--var-json",
        "typed={\"a\": [1, 2]}",
    ]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(
        report["records"][0]["result"],
        json!({"n": 41, "flags": ["-v"], "version": "1.10", "who": "10", "extra": "1e3", "typed": {"a": [1, 2]}})
    );
}

#[test]
fn bad_var_values_and_unknown_names_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write_plan(
        dir.path(),
        "vars.json",
        &json!({"variables": {"count": 1, "version": "1.0"}, "steps": [{"id": "a", "tool": "echo", "args": {"c": "${count}", "v": "${version}"}}]}),
    );
    let plan = plan.to_str().unwrap();
    // A number default: the text must be JSON.
    let output = plan_cli()
        .args(["run", plan, "--var", "count=many"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("the plan's default for `count` is a number (1)")
            && stderr.contains("`many` is not JSON"),
        "{stderr}"
    );
    // --var-json must be JSON.
    let output = plan_cli()
        .args(["run", plan, "--var-json", "version=1.x"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("`1.x` is not JSON"), "{stderr}");
    // One name, two flags.
    let output = plan_cli()
        .args(["run", plan, "--var", "version=2", "--var-json", "version=2"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("given by both --var and --var-json"),
        "{stderr}"
    );
    // A typo runs, with a warning naming the nearest variable.
    let output = plan_cli()
        .args(["run", plan, "--var", "verison=2", "--json"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("warning: variable `verison` is given, but the plan neither defines nor reads it (did you mean `version`?)"),
        "{stderr}"
    );
    // A name the plan reads without a default is not warned of.
    let output = plan_cli()
        .args(["run", plan, "--var", "version=2", "--json"])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&output.stderr).contains("warning"));
}

#[test]
fn dry_run_shows_the_calls_and_makes_none() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("touched");
    let plan = write_plan(
        dir.path(),
        "dry.json",
        &json!({"variables": {"file": marker}, "steps": [
            {"id": "touch", "tool": "exec", "args": {"argv": ["touch", "${file}"]}, "result_variable": "out"},
            {"id": "after", "tool": "echo", "args": {"code": "${out.exit_code}"}, "depends_on": ["touch"]}
        ]}),
    );
    let output = plan_cli()
        .args(["run", plan.to_str().unwrap(), "--dry-run"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.starts_with("dry run of `dry`: 2 calls, none made\n"),
        "{text}"
    );
    assert!(
        text.contains(r#"after  echo {"code":"<result of touch>"}  ← after: touch"#),
        "{text}"
    );
    assert!(!marker.exists(), "--dry-run called a tool");

    let (code, report) = run_json(&[plan.to_str().unwrap(), "--dry-run"]);
    assert_eq!(code, 0);
    assert_eq!(report["dry_run"], json!(true));
    assert_eq!(report["calls"][0]["args"]["argv"][1], json!(marker));
    assert!(!marker.exists());
}

fn read_events(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|e| panic!("bad NDJSON line {line:?}: {e}"))
        })
        .collect()
}

#[test]
fn events_are_appended_as_ndjson() {
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events.ndjson");
    let (code, report) = run_json(&[
        fixture("01-execute-plan-example.json").to_str().unwrap(),
        "--events",
        events.to_str().unwrap(),
    ]);
    assert_eq!(code, 1);
    let lines = read_events(&events);
    for event in &lines {
        assert_eq!(event["run_id"], report["run_id"]);
        assert!(event["attempt"].is_u64());
        assert!(event["ts"].as_str().unwrap().ends_with('Z'));
    }
    let kinds = |step: &str| -> Vec<String> {
        lines
            .iter()
            .filter(|e| e["step_id"] == step)
            .map(|e| e["type"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        kinds("step_1"),
        ["tool.called", "tool.succeeded", "step.executed"]
    );
    assert_eq!(
        kinds("step_2"),
        ["tool.called", "tool.failed", "step.executed"]
    );
    assert_eq!(kinds("step_3"), ["step.skipped"]);
    assert_eq!(lines.first().unwrap()["type"], "run.started");
    assert_eq!(lines.last().unwrap()["type"], "run.finished");
    assert_eq!(lines.last().unwrap()["task_status"], "FAILED");

    // A second run appends.
    run_json(&[
        fixture("28-execute-plan-no-args.json").to_str().unwrap(),
        "--events",
        events.to_str().unwrap(),
    ]);
    let again = read_events(&events);
    assert!(again.len() > lines.len());
    assert_eq!(again[..lines.len()], lines[..]);
}

fn called_order(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["type"] == "tool.called")
        .map(|e| e["step_id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn max_concurrency_one_runs_ready_steps_in_plan_order() {
    let dir = tempfile::tempdir().unwrap();
    let steps: Vec<Value> = ["e", "d", "c", "b", "a"]
        .iter()
        .map(|id| json!({"id": id, "tool": "sleep", "args": {"ms": 5}}))
        .collect();
    let plan = write_plan(dir.path(), "order.json", &json!({"steps": steps}));
    let events = dir.path().join("events.ndjson");
    run_json(&[
        plan.to_str().unwrap(),
        "--max-concurrency",
        "1",
        "--events",
        events.to_str().unwrap(),
    ]);
    assert_eq!(
        called_order(&read_events(&events)),
        ["e", "d", "c", "b", "a"]
    );
}

#[test]
fn independent_steps_run_together_up_to_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let steps: Vec<Value> = (0..6)
        .map(|i| json!({"id": format!("s{i}"), "tool": "sleep", "args": {"ms": 300}}))
        .collect();
    let plan = write_plan(dir.path(), "parallel.json", &json!({"steps": steps}));
    let events = dir.path().join("events.ndjson");
    run_json(&[plan.to_str().unwrap(), "--events", events.to_str().unwrap()]);
    let lines = read_events(&events);
    let first_done = lines
        .iter()
        .position(|e| e["type"] == "tool.succeeded")
        .unwrap();
    let called_before = lines[..first_done]
        .iter()
        .filter(|e| e["type"] == "tool.called")
        .count();
    assert_eq!(
        called_before, 4,
        "the default limit of 4 steps start together"
    );
}

/// `show` of a fixture in every format, each kept as a snapshot `{prefix}_{format}`.
fn snapshot_show(fixture_name: &str, prefix: &str) {
    let plan = fixture(fixture_name);
    for format in ["ascii", "mermaid", "dot"] {
        let output = plan_cli()
            .args(["show", plan.to_str().unwrap(), "--format", format])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(0));
        insta::assert_snapshot!(
            format!("{prefix}_{format}"),
            String::from_utf8_lossy(&output.stdout)
        );
    }
}

#[test]
fn show_draws_the_dag_three_ways() {
    snapshot_show("03-mcp-cli-diamond.json", "show");
}

#[test]
fn show_draws_blocks_as_sub_graphs() {
    snapshot_show("43-block-review.yaml", "show_block");
}

#[test]
fn tools_lists_the_builtins() {
    let output = plan_cli().arg("tools").output().unwrap();
    insta::assert_snapshot!("tools", String::from_utf8_lossy(&output.stdout));
    let output = plan_cli().args(["tools", "--json"]).output().unwrap();
    let tools: Value = serde_json::from_slice(&output.stdout).unwrap();
    let names: Vec<&str> = tools
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["chat.respond", "echo", "exec", "fail", "http", "sleep"]
    );
    assert_eq!(tools[2]["input_schema"]["required"], json!(["argv"]));
}

#[test]
fn validate_reports_success_and_warnings() {
    plan_cli()
        .args([
            "validate",
            fixture("02-mcp-cli-refactor.json").to_str().unwrap(),
        ])
        .assert()
        .code(0)
        .stdout(predicate::str::ends_with(
            "is a valid plan: `refactor-auth-001`, 4 steps\n",
        ));
    plan_cli()
        .args([
            "validate",
            fixture("09-unknown-dependency.json").to_str().unwrap(),
        ])
        .assert()
        .code(0)
        .stdout(predicate::str::ends_with(", 3 steps, 1 warning\n"))
        .stderr(predicate::str::contains(
            "step `b` depends on `does-not-exist`",
        ));
}

#[test]
fn the_human_summary_has_a_line_per_step() {
    let output = plan_cli()
        .args(["run", fixture("08-skip-cascade.yaml").to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    insta::assert_snapshot!(
        "summary_failed",
        redact(&String::from_utf8_lossy(&output.stdout))
    );
    let output = plan_cli()
        .args([
            "run",
            fixture("09-unknown-dependency.json").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    insta::assert_snapshot!(
        "summary_blocked",
        redact(&String::from_utf8_lossy(&output.stdout))
    );
    let output = plan_cli()
        .args([
            "run",
            fixture("06-retry-then-succeed.yaml").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    insta::assert_snapshot!(
        "summary_retried",
        redact(&String::from_utf8_lossy(&output.stdout))
    );
}

#[test]
fn vars_files_sit_between_the_plan_and_var_flags() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write_plan(
        dir.path(),
        "p.json",
        &json!({"variables": {"a": "plan", "b": "plan", "c": "plan"}, "steps": [{"id": "s", "tool": "echo", "args": {"a": "${a}", "b": "${b}", "c": "${c}", "d": "${d}"}}]}),
    );
    let yaml = dir.path().join("vars.yaml");
    std::fs::write(&yaml, "b: file\nc: file\nd: [1, 2]\n").unwrap();
    let (code, report) = run_json(&[
        plan.to_str().unwrap(),
        "--vars",
        yaml.to_str().unwrap(),
        "--var",
        "c=flag",
    ]);
    assert_eq!(code, 0);
    assert_eq!(
        report["records"][0]["result"],
        json!({"a": "plan", "b": "file", "c": "flag", "d": [1, 2]})
    );

    let json_file = dir.path().join("vars.json");
    std::fs::write(&json_file, r#"{"d": {"x": true}}"#).unwrap();
    let (_, report) = run_json(&[
        plan.to_str().unwrap(),
        "--vars",
        json_file.to_str().unwrap(),
    ]);
    assert_eq!(report["records"][0]["result"]["d"], json!({"x": true}));

    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "[1, 2]").unwrap();
    plan_cli()
        .args([
            "run",
            plan.to_str().unwrap(),
            "--vars",
            bad.to_str().unwrap(),
        ])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "this must be an object (`key: value` pairs), not a list",
        ))
        .stderr(predicate::str::contains("is not a valid variables file"));
}

#[test]
fn dry_run_expands_maps_whose_list_is_known() {
    let output = plan_cli()
        .args([
            "run",
            fixture("30-map-expand.yaml").to_str().unwrap(),
            "--dry-run",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    insta::assert_snapshot!("dry_run_map", String::from_utf8_lossy(&output.stdout));
    let output = plan_cli()
        .args([
            "run",
            fixture("39-map-executor-map.json").to_str().unwrap(),
            "--dry-run",
        ])
        .output()
        .unwrap();
    insta::assert_snapshot!(
        "dry_run_pending_map",
        String::from_utf8_lossy(&output.stdout)
    );
}

#[test]
fn control_characters_from_a_plan_never_reach_the_terminal_raw() {
    let dir = tempfile::tempdir().unwrap();
    // In an id the plan writes: refused, where it is.
    let plan = write_plan(
        dir.path(),
        "p.json",
        &json!({"steps": [{"id": "a\u{1b}[2J\u{7}", "tool": "echo"}]}),
    );
    let output = plan_cli()
        .current_dir(dir.path())
        .args(["run", plan.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("a step id cannot hold control or invisible characters"),
        "{stderr}"
    );
    assert!(
        !stderr.contains('\u{1b}') && !stderr.contains('\u{7}'),
        "{stderr:?}"
    );
    // In a map item's id made from data: escaped to one line, live and in the summary (a
    // newline in it draws no line of its own).
    let plan = write_plan(
        dir.path(),
        "m.json",
        &json!({"steps": [{"id": "m", "tool": "echo", "expand_on": ["x\u{1b}[2J\n✓ fake [exec]"], "expand_key": "$each"}]}),
    );
    let output = plan_cli()
        .current_dir(dir.path())
        .args(["run", plan.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    for text in [&output.stdout, &output.stderr] {
        let text = String::from_utf8_lossy(text);
        assert!(!text.contains('\u{1b}'), "{text:?}");
        assert!(!text.lines().any(|l| l.starts_with("✓ fake")), "{text}");
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("m[x\\u{1b}[2J\\n✓ fake [exec]]"),
        "{stdout}"
    );
}

#[test]
fn validate_checks_arguments_against_the_tools_schemas() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("p.yaml"),
        "variables: {wait: soon}\nsteps:\n  - id: list\n    tool: exec\n    args: {cmd: \"ls -la\"}\n  - id: get\n    tool: http\n    args: {uri: \"http://127.0.0.1:9/\"}\n  - id: nap\n    tool: sleep\n    args: {ms: \"${wait}\"}\n",
    )
    .unwrap();
    let plan = dir.path().join("p.yaml");
    let plan = plan.to_str().unwrap();
    let output = plan_cli().args(["validate", plan]).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    for expected in [
        "× `exec` needs the argument `argv`",
        "× `exec` has no argument `cmd`",
        "p.yaml:5:12]",
        "× `http` needs the argument `url`",
        "× `http` has no argument `uri`",
        "did you mean `url`?",
        "/ms: \"soon\" is not of type \"integer\"",
        "p.yaml:11:16]",
        "is not a valid plan (5 errors)",
    ] {
        assert!(stderr.contains(expected), "{expected}\n{stderr}");
    }
    // A variable given with the right type fixes that one (`--var wait=5` would be the string
    // "5": the plan's default is a string).
    let output = plan_cli()
        .args(["validate", plan, "--var-json", "wait=5"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("(4 errors)") && !stderr.contains("soon"),
        "{stderr}"
    );

    // `run`, and its dry run, refuse the same before anything runs, with the same words.
    for run in [&["run", plan, "--json"][..], &["run", plan, "--dry-run"]] {
        let output = plan_cli().args(run).output().unwrap();
        assert_eq!(output.status.code(), Some(2), "{run:?}");
        assert!(output.stdout.is_empty(), "{run:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("× `exec` needs the argument `argv`")
                && stderr.contains("is not a valid plan (5 errors)"),
            "{stderr}"
        );
    }

    // A value only the run gives is not blamed before it (the call checks it).
    let fine = write_plan(
        dir.path(),
        "fine.json",
        &json!({"steps": [
            {"id": "a", "tool": "echo", "args": {"ms": 5}, "result_variable": "a"},
            {"id": "b", "tool": "sleep", "args": {"ms": "${a.ms}"}, "depends_on": ["a"]}
        ]}),
    );
    let output = plan_cli()
        .args(["run", fine.to_str().unwrap(), "--dry-run"])
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "a value only the run gives is not blamed: {}",
        String::from_utf8_lossy(&output.stdout)
    );
    plan_cli()
        .args(["validate", fine.to_str().unwrap()])
        .assert()
        .success();
}

#[test]
fn expressions_turn_a_programs_output_into_a_list_to_map_over() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["a.txt", "b.txt"] {
        std::fs::write(dir.path().join(name), name).unwrap();
    }
    let plan = dir.path().join("files.yaml");
    std::fs::write(
        &plan,
        "steps:\n  - id: files\n    tool: exec\n    args: {argv: [ls]}\n    binds:\n      names: \"${{ lines(result.stdout).filter(f, f.endsWith('.txt')) }}\"\n  - id: read\n    tool: exec\n    depends_on: [files]\n    expand_on: \"${names}\"\n    args: {argv: [cat, \"$each\"]}\n    binds: {text: \"${{ result.stdout.trim() }}\"}\n  - id: report\n    tool: echo\n    depends_on: [read]\n    args: {joined: \"${{ vars.text.join('+') }}\", count: \"${{ size(vars.names) }}\"}\n",
    )
    .unwrap();
    let (code, report) = run_json(&[plan.to_str().unwrap()]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(
        report["variables"]["names"],
        json!(["a.txt", "b.txt"]),
        "no trailing empty line"
    );
    let last = &report["records"][4];
    assert_eq!(last["step_id"], "report");
    assert_eq!(last["result"], json!({"joined": "a.txt+b.txt", "count": 2}));
    // A bad expression is a load error at its string; an unordered read too.
    std::fs::write(
        &plan,
        "steps:\n  - id: a\n    tool: echo\n    args: {x: \"${{ 1 + }}\"}\n  - id: b\n    tool: echo\n    result_variable: out\n  - id: c\n    tool: echo\n    args: {y: \"${{ vars.out.x }}\"}\n",
    )
    .unwrap();
    let output = plan_cli()
        .args(["validate", plan.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("`${{ 1 + }}` is not a valid expression"),
        "{stderr}"
    );
    assert!(stderr.contains("files.yaml:4:15]"), "{stderr}");
    assert!(
        stderr.contains("step `c` reads `out`, which step `b` binds, but does not depend on it"),
        "{stderr}"
    );
}

#[test]
fn validate_json_gives_every_issue_as_data() {
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("bad.yaml");
    std::fs::write(
        &plan,
        "steps:\n  - id: a\n    tool: echo\n    timeout_ms: -5\n  - id: b\n    tol: echo\n",
    )
    .unwrap();
    let output = plan_cli()
        .args(["validate", plan.to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        output.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["valid"], false);
    assert_eq!(
        report["errors"],
        json!([
            {"severity": "error", "code": "plan::schema", "message": "`timeout_ms` must be a whole number of 0 or more, not -5", "line": 4, "column": 17, "label": "here", "help": null},
            {"severity": "error", "code": "plan::unknown_field", "message": "unknown field `tol`", "line": 6, "column": 5, "label": "not a field here", "help": "did you mean `tool`?"}
        ])
    );
    let good = write_plan(
        dir.path(),
        "good.json",
        &json!({"steps": [{"id": "a", "tool": "echo", "args": {"x": "${nothing}"}}, {"id": "d", "tool": "echo", "risk": "high"}]}),
    );
    let output = plan_cli()
        .args(["validate", good.to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["valid"], true);
    assert_eq!(report["steps"], 2);
    assert_eq!(report["needs_approval"], json!(["d"]));
    assert_eq!(report["warnings"][0]["code"], "plan::undefined_variable");
}

#[test]
fn tool_options_are_listed_only_where_tools_are_used_and_work_on_either_side() {
    let help = |args: &[&str]| {
        let output = plan_cli().args(args).output().unwrap();
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    for command in ["runs", "status", "logs", "gc", "cancel", "init"] {
        let text = help(&[command, "--help"]);
        assert!(
            !text.contains("--mcp-config") && !text.contains("--env-passthrough"),
            "{command}: {text}"
        );
    }
    for command in ["run", "resume", "validate", "tools", "worker"] {
        assert!(
            help(&[command, "--help"]).contains("--mcp-config"),
            "{command}"
        );
    }
    // Before the command or after it.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("mcp.json");
    std::fs::write(
        &config,
        r#"{"mcpServers": {"broken": {"command": "/no/such/server"}}}"#,
    )
    .unwrap();
    for args in [
        vec!["--mcp-config", config.to_str().unwrap(), "tools"],
        vec!["tools", "--mcp-config", config.to_str().unwrap()],
    ] {
        let output = plan_cli().args(&args).output().unwrap();
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        assert!(String::from_utf8_lossy(&output.stderr).contains("MCP server `broken`"));
    }
}

/// `validate` reports every problem at once: the plan's graph, its tools, what compiling finds
/// (expressions) and arguments that break their tools' schemas, in one round; a dependency
/// listed twice is only a warning; a block node's `vars.nodes` is no undefined variable.
#[test]
fn validate_reports_every_problem_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write_plan(
        dir.path(),
        "p.json",
        &json!({"steps": [
            {"id": "a", "tool": "echo", "depends_on": ["b"]},
            {"id": "b", "tool": "echo", "depends_on": ["a"]},
            {"id": "c", "tool": "nope"},
            {"id": "d", "tool": "exec", "args": {"argv": 5}},
            {"id": "e", "tool": "echo", "when": "parseJson('{}') == {}", "depends_on": ["d", "d"]},
            {"id": "r", "args": {"topic": "x"}, "block": {
                "entry_point": "n1",
                "nodes": {
                    "n1": {"tool": "echo", "args": {"t": "${input.topic}"}},
                    "n2": {"tool": "echo", "args": {"v": "${{ vars.nodes.n1.t + vars.input.topic }}"}}
                },
                "transitions": {"n1": "n2"}
            }},
        ]}),
    );
    let report = invalid(&plan);
    let codes = |key: &str| codes(&report, key);
    assert_eq!(
        codes("errors"),
        [
            "plan::unknown_tool",
            "plan::cycle",
            "plan::condition",
            "plan::args_invalid"
        ],
        "{report:#}"
    );
    assert_eq!(
        codes("warnings"),
        ["plan::duplicate_dependency"],
        "{report:#}"
    );
}

/// A map item whose key holds a `/` is an item, not a block node.
#[test]
fn an_item_key_with_a_slash_is_counted_as_an_item() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write_plan(
        dir.path(),
        "m.json",
        &json!({"steps": [{"id": "m", "tool": "echo", "expand_on": ["a/b", "c"], "expand_key": "$each"}]}),
    );
    plan_cli()
        .args(["run", plan.to_str().unwrap(), "--db"])
        .arg(dir.path().join("s.db"))
        .assert()
        .code(0)
        .stdout(predicates::str::contains("2 map items"));
}

/// The small things a newcomer meets: a dry run does not list a step that can never run as a
/// call; `show` of an empty plan says so; `runs` has a header; a plain `resume` of a failed run
/// says how to run its failures again; the live view names the plan, not `__plan__`, and says
/// `not run` as the summary does.
#[test]
fn newcomer_words() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let blocked = write_plan(
        dir.path(),
        "g.json",
        &json!({"steps": [{"id": "a", "tool": "echo"}, {"id": "b", "tool": "echo", "depends_on": ["zz"]}]}),
    );
    plan_cli()
        .args(["run", blocked.to_str().unwrap(), "--dry-run"])
        .assert()
        .code(1)
        .stdout(predicates::str::contains(
            "dry run of `g`: 1 call, none made; 1 step would not run\na  echo {}\nb  echo not run: it depends on `zz`, which is not a step of the plan\n",
        ));
    let run = plan_cli()
        .args(["run", blocked.to_str().unwrap(), "--db"])
        .arg(&db)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&run.stderr);
    assert!(
        said.contains("! b [echo]  not run: unknown dependency"),
        "{said}"
    );

    let empty = write_plan(dir.path(), "e.json", &json!({"steps": []}));
    plan_cli()
        .args(["show", empty.to_str().unwrap()])
        .assert()
        .code(0)
        .stdout("e\n\nno steps: a run of this plan calls nothing and completes at once\n");

    let approval = write_plan(
        dir.path(),
        "m.json",
        &json!({"mode": "approval", "steps": [{"id": "a", "tool": "echo"}]}),
    );
    let run = plan_cli()
        .args(["run", approval.to_str().unwrap(), "--db"])
        .arg(&db)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&run.stderr);
    assert!(said.contains("waiting for approval: the plan"), "{said}");

    let failing = write_plan(
        dir.path(),
        "f.json",
        &json!({"steps": [{"id": "x", "tool": "fail"}]}),
    );
    let (_, report) = run_json(&[failing.to_str().unwrap(), "--db", db.to_str().unwrap()]);
    let id = report["run_id"].as_str().unwrap();
    plan_cli()
        .args(["resume", id, "--db"])
        .arg(&db)
        .assert()
        .code(1)
        .stderr(predicates::str::contains(format!(
            "run {id} ended FAILED; run its failed steps (and what follows them) again with `plan-cli resume {id} --retry-failed`"
        )));

    plan_cli()
        .args(["runs", "--db"])
        .arg(&db)
        .assert()
        .code(0)
        .stdout(predicates::str::starts_with("RUN  "));

    // Suggestions name the field as the docs write it, and `argv` for a command.
    let typos = write_plan(
        dir.path(),
        "t.json",
        &json!({"steps": [{"id": "a", "tool": "echo", "depends": []}]}),
    );
    plan_cli()
        .args(["validate", typos.to_str().unwrap()])
        .assert()
        .code(2)
        .stderr(predicates::str::contains("did you mean `depends_on`?"));
    let command = write_plan(
        dir.path(),
        "c.json",
        &json!({"steps": [{"id": "a", "tool": "exec", "args": {"cmd": "ls -l"}}]}),
    );
    plan_cli()
        .args(["validate", command.to_str().unwrap()])
        .assert()
        .code(2)
        .stderr(predicates::str::contains(
            "a program and its arguments go in `argv`",
        ));
}

/// A problem of shape (a field that does not read) does not hide the others: with it set
/// aside, the rest of the plan is validated and compiled too, in the same round.
#[test]
fn a_shape_problem_does_not_hide_tool_and_argument_problems() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write_plan(
        dir.path(),
        "p.json",
        &json!({"steps": [
            {"id": "a", "tool": "echo", "map": {"x": 1}},
            {"id": "b", "tool": "nope"},
            {"id": "c", "tool": "exec", "args": {"argv": 5}},
            {"id": "d", "tol": "echo"},
        ]}),
    );
    let report = invalid(&plan);
    assert_eq!(
        codes(&report, "errors"),
        [
            "plan::unknown_field",
            "plan::unknown_field",
            "plan::unknown_tool",
            "plan::args_invalid"
        ],
        "{report:#}"
    );
}

/// `validate --json` of a plan that must be refused (exit 2): its report.
fn invalid(plan: &Path) -> Value {
    let output = plan_cli()
        .args(["validate", "--json", plan.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    serde_json::from_slice(&output.stdout).unwrap()
}

/// The codes of a `validate --json` report's `errors` or `warnings`, in order.
fn codes(report: &Value, key: &str) -> Vec<String> {
    report[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|issue| issue["code"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_plan_or_variables_file_without_end_is_refused_after_the_largest_plan() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db");
    // Read whole, /dev/zero would fill the memory; read to one byte past the bound, it is
    // too large.
    plan_cli()
        .args(["--db", db.to_str().unwrap(), "validate", "/dev/zero"])
        .timeout(std::time::Duration::from_secs(60))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("at most 134217728 are read"));
    let plan = write_plan(
        dir.path(),
        "p.json",
        &json!({"steps": [{"id": "a", "tool": "echo"}]}),
    );
    plan_cli()
        .args(["--db", db.to_str().unwrap(), "validate"])
        .arg(&plan)
        .args(["--vars", "/dev/zero"])
        .timeout(std::time::Duration::from_secs(60))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("is not a valid variables file"));
}

#[test]
fn a_closed_stderr_does_not_stop_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write_plan(
        dir.path(),
        "p.json",
        &json!({"steps": [{"id": "a", "tool": "echo", "args": {}}, {"id": "b", "tool": "echo", "args": {}, "depends_on": ["a"]}]}),
    );
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_plan-cli"))
        .current_dir(dir.path())
        .args(["run", plan.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Nobody reads what it says while it runs (`2>&1 | head -1` gone).
    drop(child.stderr.take());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "the run completes");
}

/// `mcp serve --help` names every tool the server offers (the list the server's tool list and
/// dispatch come from).
#[test]
fn the_serve_help_names_every_served_tool() {
    let output = plan_cli()
        .args(["mcp", "serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&output.stdout);
    let names = plan_serve::tool_names();
    assert_eq!(names.len(), 8);
    for name in names {
        assert!(help.contains(name), "{name} is not in:\n{help}");
    }
}

/// A declared tool's schema is compiled with the program, as every tool's is, and one that is
/// no JSON Schema is an error where the plan declares it.
#[test]
fn a_declared_tools_schema_that_does_not_compile_is_placed_at_its_declaration() {
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("p.json");
    std::fs::write(
        &plan,
        r#"{"tools":[{"name":"x","queue":"q","input_schema":{"type":"nope"}}],"steps":[{"id":"a","tool":"x"}]}"#,
    )
    .unwrap();
    let output = plan_cli()
        .current_dir(dir.path())
        .args(["validate", "p.json", "--json"])
        .output()
        .unwrap();
    let verdict: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(verdict["valid"], false, "{verdict}");
    let error = &verdict["errors"][0];
    assert_eq!(error["code"], "plan::tool_schema", "{verdict}");
    assert_eq!(error["line"], 1);
    assert_eq!(error["column"], 50, "{verdict}");
}
