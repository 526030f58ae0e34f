//! The ledger through the binary: run history, status, resume, the plan registry, the state
//! file, and bad ledger files.
#![expect(clippy::unwrap_used, reason = "test helpers fail loudly on purpose")]

use predicates::prelude::*;
use serde_json::{Value, json};

mod common;

use common::{Lab, path_str, record};

fn without_durations(mut report: Value) -> Value {
    for record in report["records"].as_array_mut().unwrap() {
        record["duration_ms"] = json!(0);
    }
    report
}

#[test]
fn runs_are_recorded_under_dot_plan_and_status_repeats_run_json() {
    let lab = Lab::new();
    let plan = lab.write(
        "p.json",
        &json!({"variables": {"x": 1}, "steps": [
            {"id": "a", "tool": "echo", "args": {"x": "${x}"}, "result_variable": "a_out"},
            {"id": "b", "tool": "fail", "depends_on": ["a"]},
            {"id": "c", "tool": "echo", "depends_on": ["b"]},
        ]}),
    );
    let (code, report) = lab.json(&["run", path_str(&plan), "--json", "--var", "y=2"]);
    assert_eq!(code, 1);
    assert!(
        lab.dir.path().join(".plan/state.db").exists(),
        "the default ledger is .plan/state.db"
    );
    let run_id = report["run_id"].as_str().unwrap().to_owned();
    let (code, status) = lab.json(&["status", &run_id, "--json"]);
    assert_eq!(code, 0);
    assert_eq!(without_durations(status), without_durations(report.clone()));

    let (_, second) = lab.json(&["run", path_str(&plan), "--json"]);
    let (_, runs) = lab.json(&["runs", "--json"]);
    let listed: Vec<&str> = runs
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        listed,
        [second["run_id"].as_str().unwrap(), run_id.as_str()],
        "newest first"
    );
    assert_eq!(runs[0]["task_status"], "FAILED");
    assert_eq!(runs[0]["plan_id"], "p");
    assert!(runs[0]["started_at"].as_str().unwrap().ends_with('Z'));

    // Events are kept too, as NDJSON; --follow ends for a finished run.
    let output = lab
        .cli()
        .args(["events", &run_id, "--follow"])
        .output()
        .unwrap();
    let types: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(types.first().map(String::as_str), Some("run.started"));
    assert_eq!(types.last().map(String::as_str), Some("run.finished"));

    // A prefix of the id is enough; an unknown one is invalid input.
    lab.cli().args(["status", &run_id[..10]]).assert().code(0);
    lab.cli()
        .args(["status", "nope"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("no run `nope` in the ledger"));
}

#[test]
fn db_and_plan_db_choose_the_ledger() {
    let lab = Lab::new();
    let plan = lab.write("p.json", &json!({"steps": [{"id": "a", "tool": "echo"}]}));
    let db = lab.dir.path().join("elsewhere/my.db");
    lab.cli()
        .args(["--db", path_str(&db), "run", path_str(&plan)])
        .assert()
        .code(0);
    assert!(db.exists());
    assert!(!lab.dir.path().join(".plan").exists());
    let output = lab
        .cli()
        .env("PLAN_DB", &db)
        .args(["runs", "--json"])
        .output()
        .unwrap();
    assert_eq!(
        serde_json::from_slice::<Value>(&output.stdout)
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn resume_refuses_a_different_plan_unless_forced_and_retries_failures_on_request() {
    let lab = Lab::new();
    let marker = lab.dir.path().join("ready");
    let plan = json!({"steps": [
        {"id": "check", "tool": "exec", "args": {"argv": ["test", "-f", path_str(&marker)]}},
        {"id": "after", "tool": "echo", "depends_on": ["check"]},
    ]});
    let file = lab.write("p.json", &plan);
    let (code, report) = lab.json(&["run", path_str(&file), "--json"]);
    assert_eq!(code, 1);
    let run_id = report["run_id"].as_str().unwrap().to_owned();

    // Without --retry-failed a finished run just prints its records.
    let (code, again) = lab.json(&["resume", &run_id, "--json"]);
    assert_eq!((code, again["task_status"].as_str()), (1, Some("FAILED")));

    // A changed plan is refused, naming what changed.
    let mut changed = plan.clone();
    changed["steps"][1]["args"] = json!({"x": 1});
    changed["steps"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": "extra", "tool": "echo"}));
    let changed_file = lab.write("changed.json", &changed);
    lab.cli()
        .args([
            "resume",
            &run_id,
            "--retry-failed",
            "--plan",
            path_str(&changed_file),
        ])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "step `after` changed, step `extra` was added",
        ));

    std::fs::write(&marker, "").unwrap();
    let (code, resumed) = lab.json(&[
        "resume",
        &run_id,
        "--retry-failed",
        "--plan",
        path_str(&file),
        "--json",
    ]);
    assert_eq!(code, 0);
    assert_eq!(resumed["task_status"], "COMPLETED");
    assert_eq!(resumed["run_id"], json!(run_id));
    let (_, status) = lab.json(&["status", &run_id, "--json"]);
    assert_eq!(status["task_status"], "COMPLETED");
}

#[test]
fn retry_failed_runs_what_follows_a_failure_again_after_it_and_counts_attempts_on() {
    // build → test → deploy → cleanup (`run_if: all_done`). `test` fails once; its re-run is
    // attempt 2 (so `fail {times: 1}` passes), and cleanup, which ran after the skipped
    // deploy, runs again after the deploy that now happens.
    let lab = Lab::new();
    let deployed = lab.dir.path().join("deployed");
    let plan = lab.write(
        "d.json",
        &json!({"steps": [
            {"id": "build", "tool": "echo", "args": {"v": 1}},
            {"id": "test", "tool": "fail", "args": {"times": 1}, "depends_on": ["build"]},
            {"id": "deploy", "tool": "exec", "args": {"argv": ["touch", path_str(&deployed)]}, "depends_on": ["test"]},
            {"id": "cleanup", "tool": "exec", "run_if": "all_done", "depends_on": ["deploy"],
             "args": {"argv": ["test", "-f", path_str(&deployed)], "check": false}},
        ]}),
    );
    let (code, first) = lab.json(&["run", path_str(&plan), "--json"]);
    assert_eq!(code, 1);
    assert_eq!(record(&first, "cleanup")["result"]["exit_code"], 1);
    let run_id = first["run_id"].as_str().unwrap().to_owned();

    let (code, again) = lab.json(&["resume", &run_id, "--retry-failed", "--json"]);
    assert_eq!(
        (code, again["task_status"].as_str()),
        (0, Some("COMPLETED"))
    );
    assert_eq!(record(&again, "test")["attempts"], 2);
    assert_eq!(record(&again, "test")["result"]["attempt"], 2);
    assert_eq!(record(&again, "deploy")["ok"], true);
    assert_eq!(
        record(&again, "cleanup")["result"]["exit_code"],
        0,
        "cleanup ran again, after deploy"
    );
    // The ledger says the same.
    let (_, status) = lab.json(&["status", &run_id, "--json"]);
    assert_eq!(record(&status, "cleanup")["result"]["exit_code"], 0);
    assert_eq!(record(&status, "test")["attempts"], 2);

    // `retry` of a step that passed counts on too: its third attempt.
    let (code, retried) = lab.json(&["retry", &run_id, "test", "--json"]);
    assert_eq!(code, 0);
    assert_eq!(record(&retried, "test")["result"]["attempt"], 3);
}

#[test]
fn stored_plans_run_by_id() {
    let lab = Lab::new();
    let file = lab.write("deploy.json", &json!({"id": "deploy", "title": "Deploy it", "steps": [{"id": "a", "tool": "echo", "args": {"v": 1}}]}));
    lab.cli()
        .args(["plan", "add", path_str(&file)])
        .assert()
        .code(0)
        .stdout(predicate::str::contains("stored plan `deploy` (1 step)"));
    lab.cli()
        .args(["plan", "add", path_str(&file)])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("already stored"));
    lab.cli()
        .args(["plan", "add", path_str(&file), "--force"])
        .assert()
        .code(0);
    let (_, plans) = lab.json(&["plan", "list", "--json"]);
    assert_eq!(plans[0]["plan_id"], "deploy");
    assert_eq!(plans[0]["title"], "Deploy it");
    lab.cli()
        .args(["plan", "show", "deploy"])
        .assert()
        .code(0)
        .stdout(predicate::str::starts_with("deploy — Deploy it\n"));
    std::fs::remove_file(&file).unwrap();
    let (code, report) = lab.json(&["run", "deploy", "--json"]);
    assert_eq!((code, report["plan_id"].as_str()), (0, Some("deploy")));
    lab.cli().args(["plan", "rm", "deploy"]).assert().code(0);
    lab.cli()
        .args(["run", "deploy"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "no such file, and no stored plan has that id",
        ));
    lab.cli()
        .args(["plan", "show", "deploy"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "no stored plan has the id `deploy` (see `plan-cli plan list`)",
        ));
    // A stored plan whose text names no id is shown and run under the id it is stored
    // under, dots and all.
    let dotted = lab.write(
        "release.v2.json",
        &json!({"steps": [{"id": "a", "tool": "echo"}]}),
    );
    lab.cli()
        .args(["plan", "add", path_str(&dotted)])
        .assert()
        .code(0)
        .stdout(predicate::str::contains("stored plan `release.v2`"));
    std::fs::remove_file(&dotted).unwrap();
    lab.cli()
        .args(["plan", "show", "release.v2"])
        .assert()
        .code(0)
        .stdout(predicate::str::starts_with("release.v2\n"));
    let (_, report) = lab.json(&["run", "release.v2", "--json"]);
    assert_eq!(report["plan_id"], "release.v2");
    let bad = lab.write("bad.json", &json!({"steps": [{"id": "a", "tool": "nope"}]}));
    lab.cli()
        .args(["plan", "add", path_str(&bad)])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("unknown tool `nope`"));
}

#[test]
fn gc_deletes_old_finished_runs() {
    let lab = Lab::new();
    let plan = lab.write("p.json", &json!({"steps": [{"id": "a", "tool": "echo"}]}));
    lab.cli().args(["run", path_str(&plan)]).assert().code(0);
    lab.cli()
        .args(["gc", "--older-than", "30d"])
        .assert()
        .code(0)
        .stdout(predicate::str::starts_with("deleted 0 runs"));
    std::thread::sleep(std::time::Duration::from_millis(20));
    lab.cli()
        .args(["gc", "--older-than", "1ms"])
        .assert()
        .code(0)
        .stdout(predicate::str::starts_with("deleted 1 run "));
    let (_, runs) = lab.json(&["runs", "--json"]);
    assert_eq!(runs, json!([]));
    lab.cli()
        .args(["gc", "--older-than", "soon"])
        .assert()
        .code(2);
}

#[test]
fn gc_spares_runs_that_can_resume_and_overwrites_what_it_deletes() {
    let lab = Lab::new();
    let finished = lab.write(
        "done.json",
        &json!({"steps": [{"id": "a", "tool": "echo", "args": {"mark": "gc-marker-7f3a9c"}}]}),
    );
    let waiting = lab.write(
        "wait.json",
        &json!({"steps": [{"id": "a", "tool": "echo", "risk": "high"}]}),
    );
    lab.cli()
        .args(["run", path_str(&finished)])
        .assert()
        .code(0);
    lab.cli().args(["run", path_str(&waiting)]).assert().code(5);
    let raw = || {
        let mut bytes = std::fs::read(lab.dir.path().join(".plan/state.db")).unwrap();
        bytes.extend(std::fs::read(lab.dir.path().join(".plan/state.db-wal")).unwrap_or_default());
        bytes
    };
    let marker = b"gc-marker-7f3a9c";
    assert!(raw().windows(marker.len()).any(|w| w == marker));
    lab.cli()
        .args([
            "gc",
            "--older-than",
            "0s",
            "--dry-run",
            "--include-unfinished",
        ])
        .assert()
        .code(0)
        .stdout(predicate::str::starts_with("would delete 2 runs"));
    let (_, runs) = lab.json(&["runs", "--json"]);
    assert_eq!(
        runs.as_array().unwrap().len(),
        2,
        "a dry run deletes nothing"
    );
    lab.cli()
        .args(["gc", "--older-than", "0s"])
        .assert()
        .code(0)
        .stdout(predicate::str::starts_with("deleted 1 run "));
    assert!(
        !raw().windows(marker.len()).any(|w| w == marker),
        "the deleted run's result is still in the file"
    );
    let (_, runs) = lab.json(&["runs", "--json"]);
    assert_eq!(
        runs.as_array().unwrap().len(),
        1,
        "the waiting run is kept: {runs}"
    );
    lab.cli()
        .args(["gc", "--older-than", "0s", "--include-unfinished"])
        .assert()
        .code(0)
        .stdout(predicate::str::starts_with("deleted 1 run "));
    let (_, runs) = lab.json(&["runs", "--json"]);
    assert_eq!(runs, json!([]));
}

#[test]
fn the_execute_state_document_follows_seed_004() {
    let lab = Lab::new();
    let plan = lab.write("p.json", &json!({"max_concurrency": 2, "steps": [
        {"id": "setup", "tool": "echo", "layer": "0-setup"},
        {"id": "flaky", "tool": "fail", "args": {"retryable": true, "times": 1, "message": "try again"}, "retry": {"backoff_ms": 1}, "depends_on": ["setup"], "layer": "1-work"},
        {"id": "broken", "tool": "fail", "args": {"message": "no"}, "depends_on": ["setup"], "layer": "1-work"},
        {"id": "after", "tool": "echo", "depends_on": ["broken"], "layer": "2-finish"},
    ]}));
    let state_file = lab.dir.path().join("out/execute-state.json");
    std::fs::create_dir_all(state_file.parent().unwrap()).unwrap();
    let (_, report) = lab.json(&[
        "run",
        path_str(&plan),
        "--json",
        "--state-file",
        path_str(&state_file),
    ]);
    let run_id = report["run_id"].as_str().unwrap();
    let (_, exported) = lab.json(&["state", "export", run_id, "--format", "execute-state"]);
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(&state_file).unwrap()).unwrap();
    assert_eq!(
        written["tasks"], exported["tasks"],
        "the state file is the final document"
    );
    assert_eq!(exported["schema_version"], "2.0");
    assert_eq!(exported["prd_slug"], "p");
    assert_eq!(exported["status"], "abandoned");
    assert_eq!(exported["options"]["max_parallel"], 2);
    let layers: Vec<&String> = exported["layers"].as_object().unwrap().keys().collect();
    assert_eq!(layers, ["0-setup", "1-work", "2-finish"]);
    assert_eq!(exported["layers"]["0-setup"]["status"], "completed");
    assert_eq!(exported["layers"]["1-work"]["tasks_total"], 2);
    assert_eq!(exported["layers"]["1-work"]["tasks_failed"], 1);
    assert_eq!(exported["layers"]["1-work"]["status"], "blocked");
    assert_eq!(exported["layers"]["2-finish"]["status"], "blocked");
    assert_eq!(exported["tasks"]["flaky"]["status"], "completed");
    assert_eq!(exported["tasks"]["flaky"]["attempts"], 2);
    assert_eq!(
        exported["tasks"]["flaky"]["errors"][0]["type"],
        "implementation_error"
    );
    assert_eq!(
        exported["tasks"]["flaky"]["errors"][0]["message"],
        "E_TOOL: try again"
    );
    assert_eq!(exported["tasks"]["broken"]["status"], "abandoned");
    // Skipped because `broken` failed: it never started.
    assert_eq!(exported["tasks"]["after"]["status"], "pending");
    assert_eq!(exported["completed"], json!(["setup", "flaky"]));
    assert_eq!(exported["failed"], json!([]));
    assert_eq!(exported["abandoned"], json!(["broken"]));
    common::assert_execute_state(&exported);
    common::assert_execute_state(&written);
    assert_eq!(
        exported["metrics"]["total_attempts"], 4,
        "setup 1, flaky 2, broken 1"
    );
    assert_eq!(exported["metrics"]["total_retries"], 1);
    assert_eq!(
        exported["metrics"]["tasks_remaining"], 1,
        "`after` never ran"
    );
    // No temporary files left beside it.
    assert_eq!(
        std::fs::read_dir(state_file.parent().unwrap())
            .unwrap()
            .count(),
        1
    );
}

#[test]
fn bad_ledger_files_are_clear_errors() {
    let lab = Lab::new();
    let plan = lab.write("p.json", &json!({"steps": [{"id": "a", "tool": "echo"}]}));
    let garbage = lab.dir.path().join("garbage.db");
    std::fs::write(&garbage, vec![b'x'; 4096]).unwrap();
    lab.cli()
        .args(["--db", path_str(&garbage), "run", path_str(&plan)])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("is not a plan-cli ledger"));
    lab.cli()
        .args(["--db", "/proc/no-such-dir/state.db", "run", path_str(&plan)])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "cannot open the ledger /proc/no-such-dir/state.db",
        ));
    lab.cli()
        .args(["status", "x"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "there is no ledger at .plan/state.db",
        ));
    // A FIFO (or any other file that is not a regular one) is refused, not read for good.
    let fifo = lab.dir.path().join("fifo.db");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    for args in [
        vec!["runs"],
        vec!["status", "last"],
        vec!["run", path_str(&plan)],
    ] {
        lab.cli()
            .args(["--db", path_str(&fifo)])
            .args(&args)
            .timeout(std::time::Duration::from_secs(30))
            .assert()
            .code(2)
            .stderr(predicate::str::contains(format!(
                "cannot open the ledger {}: it is a FIFO, not a ledger file",
                fifo.display()
            )));
    }
    // A dry run records nothing.
    lab.cli()
        .args(["run", path_str(&plan), "--dry-run"])
        .assert()
        .code(0);
    assert!(!lab.dir.path().join(".plan").exists());
}

#[test]
fn retrying_a_failed_block_replaces_its_node_records() {
    // Without the marker the route is probe → warn → give-up (fails); with it, probe → done.
    // A retry must not keep `warn`'s record from the first route.
    let lab = Lab::new();
    let marker = lab.dir.path().join("ready");
    let plan = lab.write("b.json", &json!({"steps": [{"id": "review", "block": {
        "entry_point": "probe",
        "nodes": {
            "probe": {"tool": "exec", "args": {"argv": ["test", "-f", path_str(&marker)], "check": false}},
            "warn": {"tool": "echo"},
            "give-up": {"tool": "fail"},
            "done": {"tool": "echo"},
        },
        "transitions": {
            "probe": [{"condition": "ready", "target": "done"}, {"condition": "default", "target": "warn"}],
            "warn": "give-up",
        },
        "conditions": {"ready": "result.exit_code == 0"},
    }}]}));
    let (code, report) = lab.json(&["run", path_str(&plan), "--json"]);
    assert_eq!(code, 1);
    let run_id = report["run_id"].as_str().unwrap().to_owned();
    std::fs::write(&marker, "").unwrap();
    let (code, _) = lab.json(&["resume", &run_id, "--retry-failed", "--json"]);
    assert_eq!(code, 0);
    let (_, status) = lab.json(&["status", &run_id, "--json"]);
    let rows: Vec<(&str, bool)> = status["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["step_id"].as_str().unwrap(), r["ok"].as_bool().unwrap()))
        .collect();
    assert_eq!(
        rows,
        [
            ("review/probe#1", true),
            ("review/done#1", true),
            ("review", true),
            ("__meta__", true)
        ]
    );
}

#[test]
fn secrets_never_reach_the_ledger() {
    let lab = Lab::new();
    let plan = lab.write("s.json", &json!({"env": ["PLAN_CLI_TEST_SECRET"], "steps": [
        {"id": "call", "tool": "echo", "args": {"auth": "Bearer ${env.PLAN_CLI_TEST_SECRET}"}, "result_variable": "sent"},
    ]}));
    let output = lab
        .cli()
        .env("PLAN_CLI_TEST_SECRET", "s3cr3t-value-42")
        .args(["run", path_str(&plan), "--json"])
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    let run_id = report["run_id"].as_str().unwrap();
    // `status` reads records and bound variables back from the ledger.
    let (_, status) = lab.json(&["status", run_id, "--json"]);
    assert_eq!(
        status["variables"]["sent"]["auth"],
        json!("Bearer [redacted]")
    );
    assert_eq!(
        status["records"][0]["result"]["auth"],
        json!("Bearer [redacted]")
    );
    let raw = std::fs::read(lab.dir.path().join(".plan/state.db")).unwrap();
    let wal = std::fs::read(lab.dir.path().join(".plan/state.db-wal")).unwrap_or_default();
    let needle = b"s3cr3t-value-42";
    assert!(
        !raw.windows(needle.len()).any(|w| w == needle)
            && !wal.windows(needle.len()).any(|w| w == needle),
        "the secret is in the ledger file"
    );
}

#[test]
fn values_nested_deeper_than_json_parsers_allow_are_read_back() {
    // The test's own values nest deep too: give it the stack the binary gives its threads.
    std::thread::Builder::new()
        .stack_size(plan_types::json::VALUE_THREAD_STACK)
        .spawn(deep_values_round_trip)
        .unwrap()
        .join()
        .unwrap();
}

fn deep_values_round_trip() {
    // Each step echoes its dependency's result, so the last value nests 400 deep: past
    // serde_json's default limit of 128, which once made the ledger unreadable after the run.
    let lab = Lab::new();
    let steps: Vec<Value> = (0..400)
        .map(|i| {
            let mut step =
                json!({"id": format!("s{i}"), "tool": "echo", "result_variable": format!("r{i}")});
            if i > 0 {
                step["depends_on"] = json!([format!("s{}", i - 1)]);
                step["args"] = json!({"prev": format!("${{r{}}}", i - 1)});
            }
            step
        })
        .collect();
    let plan = lab.write("chain.json", &json!({"steps": steps}));
    let deep = |args: &[&str]| {
        let output = lab.cli().args(args).output().unwrap();
        let text = String::from_utf8(output.stdout).unwrap();
        let value: Value = plan_types::json::from_str(&text).unwrap_or_else(|e| {
            panic!("{args:?}: {e}\n{}", String::from_utf8_lossy(&output.stderr))
        });
        (output.status.code().unwrap(), value)
    };
    let (code, report) = deep(&["run", path_str(&plan), "--json"]);
    assert_eq!(code, 0, "{report}");
    let run_id = report["run_id"].as_str().unwrap().to_owned();
    let (code, status) = deep(&["status", &run_id, "--json"]);
    assert_eq!(code, 0);
    assert_eq!(without_durations(status), without_durations(report.clone()));
    let (code, resumed) = deep(&["resume", &run_id, "--json"]);
    assert_eq!(code, 0);
    let records = resumed["records"].as_array().unwrap();
    let last = records.iter().find(|r| r["step_id"] == "s399").unwrap();
    let mut last = &last["result"];
    let mut depth = 0;
    while let Some(inner) = last.get("prev") {
        last = inner;
        depth += 1;
    }
    assert_eq!(depth, 399);
}

#[test]
fn resume_reports_items_and_nodes_that_finished_before_it() {
    // The map step and the block finish, then the run waits; the resumed run's report must
    // have every record `status` has, the items' and nodes' included.
    let lab = Lab::new();
    let plan = lab.write(
        "p.json",
        &json!({"steps": [
            {"id": "m", "tool": "echo", "expand_on": [1, 2, 3], "args": {"v": "${each}"}},
            {"id": "b", "block": {
                "entry_point": "one",
                "nodes": {"one": {"tool": "echo"}, "two": {"tool": "echo"}},
                "transitions": {"one": "two"}}},
            {"id": "gate", "tool": "echo", "risk": "high", "depends_on": ["m", "b"]},
        ]}),
    );
    let (code, report) = lab.json(&["run", path_str(&plan), "--json"]);
    assert_eq!(code, 5, "{report}");
    let run_id = report["run_id"].as_str().unwrap().to_owned();
    lab.cli()
        .args(["approve", &run_id, "gate"])
        .assert()
        .code(0);
    let (code, resumed) = lab.json(&["resume", &run_id, "--json"]);
    assert_eq!(code, 0, "{resumed}");
    let (_, status) = lab.json(&["status", &run_id, "--json"]);
    let ids = |report: &Value| -> Vec<String> {
        report["records"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["step_id"].as_str().unwrap().to_owned())
            .collect()
    };
    for id in ["m-0", "m-1", "m-2", "b/one#1", "b/two#1"] {
        assert!(
            ids(&resumed).contains(&id.to_owned()),
            "{id} missing: {:?}",
            ids(&resumed)
        );
    }
    assert_eq!(ids(&resumed), ids(&status));
}

#[test]
fn a_state_file_that_cannot_be_written_is_refused_before_the_run() {
    let lab = Lab::new();
    let plan = lab.write("p.json", &json!({"steps": [{"id": "a", "tool": "echo"}]}));
    for (state, says) in [
        ("/dev/null", "is not a regular file"),
        (".", "is not a regular file"),
        ("no/such/folder/state.json", "cannot write in"),
    ] {
        lab.cli()
            .args(["run", path_str(&plan), "--state-file", state])
            .assert()
            .code(2)
            .stderr(predicate::str::contains(says));
    }
    // Nothing ran.
    assert!(!lab.dir.path().join(".plan/state.db").exists());
    // And the device is still one.
    let null = std::fs::metadata("/dev/null").unwrap().file_type();
    assert!(std::os::unix::fs::FileTypeExt::is_char_device(&null));
}

#[test]
fn a_resumed_run_whose_state_file_cannot_be_written_says_whose_file_it_is() {
    let lab = Lab::new();
    let plan = lab.write(
        "p.json",
        &json!({"steps": [{"id": "deploy", "tool": "echo", "risk": "high"}]}),
    );
    let state_file = lab.dir.path().join("out/state.json");
    std::fs::create_dir_all(state_file.parent().unwrap()).unwrap();
    let (code, report) = lab.json(&[
        "run",
        path_str(&plan),
        "--json",
        "--state-file",
        path_str(&state_file),
    ]);
    assert_eq!(report["task_status"], "WAITING", "exit {code}");
    let run_id = report["run_id"].as_str().unwrap();
    std::fs::remove_dir_all(lab.dir.path().join("out")).unwrap();
    // The file the run kept, not a flag nobody gave; and the way out.
    lab.cli()
        .args(["resume", run_id])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("the run's state file"))
        .stderr(predicate::str::contains(
            "give it another with --state-file FILE",
        ));
    // A given one that cannot be written is refused before the run goes on.
    lab.cli()
        .args(["resume", run_id, "--state-file", "no/such/folder/s.json"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "--state-file no/such/folder/s.json",
        ));
    // Another file is taken, and kept current.
    let other = lab.dir.path().join("other.json");
    lab.cli()
        .args(["approve", run_id, "deploy"])
        .assert()
        .success();
    lab.cli()
        .args(["resume", run_id, "--state-file", path_str(&other)])
        .assert()
        .success();
    let written: Value = serde_json::from_str(&std::fs::read_to_string(&other).unwrap()).unwrap();
    assert_eq!(written["status"], "completed");
}

#[test]
fn a_plan_folder_others_may_write_in_is_neither_the_project_nor_the_ledger() {
    use std::os::unix::fs::PermissionsExt;
    let lab = Lab::new();
    let plan = lab.write("p.json", &json!({"steps": [{"id": "a", "tool": "echo"}]}));
    // Anyone could have put a ledger or an MCP configuration (whose servers would start) here.
    let shared = lab.dir.path().join(".plan");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::write(
        shared.join("mcp.json"),
        r#"{"mcpServers": {"x": {"command": "sh", "args": ["-c", "touch planted"]}}}"#,
    )
    .unwrap();
    lab.cli()
        .args(["tools"])
        .assert()
        .success()
        .stdout(predicate::str::contains("x.").not())
        .stderr(predicate::str::contains(".plan is passed over"));
    lab.cli()
        .args(["run", path_str(&plan)])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "is another user's (or others may write in it)",
        ))
        .stderr(predicate::str::contains("--db"));
    assert!(!shared.join("state.db").exists());
    assert!(
        !lab.dir.path().join("planted").exists(),
        "no server of it started"
    );
    // `--db` records the run elsewhere.
    let db = lab.dir.path().join("mine.db");
    lab.cli()
        .args(["--db", path_str(&db), "run", path_str(&plan)])
        .assert()
        .success();
}

#[test]
fn a_project_made_under_any_umask_is_found_again() {
    use std::os::unix::fs::PermissionsExt;
    // Under umask 000 a plain `mkdir` makes a folder every user may write in, which is then
    // passed over as a project: `.plan/` is made private whatever the umask.
    for first in [&["init"][..], &["run", "p.json"][..]] {
        let lab = Lab::new();
        lab.write("p.json", &json!({"steps": [{"id": "a", "tool": "echo"}]}));
        let mut command = std::process::Command::new("sh");
        command
            .arg("-c")
            .arg("umask 000; exec \"$0\" \"$@\"")
            .arg(env!("CARGO_BIN_EXE_plan-cli"))
            .args(first)
            .current_dir(lab.dir.path())
            .env_remove("PLAN_DB");
        let output = command.output().unwrap();
        assert!(
            output.status.success(),
            "{first:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let mode = std::fs::metadata(lab.dir.path().join(".plan"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o022, 0, "{first:?}: .plan is {mode:o}");
        lab.cli().args(["run", "p.json"]).assert().success();
        lab.cli().args(["runs"]).assert().success();
    }
}

#[test]
fn a_ledger_in_a_read_only_folder_can_still_be_read() {
    use std::os::unix::fs::PermissionsExt;
    let lab = Lab::new();
    let plan = lab.write("p.json", &json!({"steps": [{"id": "a", "tool": "echo"}]}));
    let (code, report) = lab.json(&["run", path_str(&plan), "--json"]);
    assert_eq!(code, 0);
    let run_id = report["run_id"].as_str().unwrap().to_owned();
    let mode = |path: &std::path::Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    let folder = lab.dir.path().join(".plan");
    for entry in std::fs::read_dir(&folder).unwrap() {
        mode(&entry.unwrap().path(), 0o444);
    }
    mode(&folder, 0o555);
    mode(lab.dir.path(), 0o755);
    // Permissions do not bind root: as root, read as the user `nobody`.
    let root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .unwrap()
        .stdout
        == b"0\n";
    let read = |args: &[&str]| {
        let mut command = if root {
            let mut command = std::process::Command::new("setpriv");
            command
                .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(env!("CARGO_BIN_EXE_plan-cli"));
            command
        } else {
            std::process::Command::new(env!("CARGO_BIN_EXE_plan-cli"))
        };
        // Named: another user's `.plan/` is not found as a project (root's, read as `nobody`).
        let output = command
            .args(["--db", ".plan/state.db"])
            .args(args)
            .current_dir(lab.dir.path())
            .env_remove("PLAN_DB")
            .output()
            .unwrap();
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (code, stdout, stderr) = read(&["runs"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains(&run_id), "{stdout}");
    let (code, stdout, stderr) = read(&["status", &run_id, "--json"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("\"COMPLETED\""), "{stdout}");
    let (code, _, stderr) = read(&["events", &run_id]);
    assert_eq!(code, Some(0), "{stderr}");
    if root {
        // Unnamed, another user's `.plan/` is neither the project nor the ledger.
        let output = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_plan-cli"))
            .args(["runs"])
            .current_dir(lab.dir.path())
            .env_remove("PLAN_DB")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("another user's"), "{stderr}");
    }
    mode(&folder, 0o755);
}

#[test]
fn processes_started_together_on_a_new_ledger_all_run() {
    // Separate processes, not threads: each races to create and migrate the same new file.
    let lab = Lab::new();
    let plan = lab.write("p.json", &json!({"steps": [{"id": "a", "tool": "echo"}]}));
    for round in 0..5 {
        let db = lab.dir.path().join(format!("new-{round}.db"));
        let started: Vec<std::process::Child> = (0..8)
            .map(|_| {
                std::process::Command::new(env!("CARGO_BIN_EXE_plan-cli"))
                    .current_dir(lab.dir.path())
                    .args(["--db", path_str(&db), "run", path_str(&plan), "--json"])
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for child in started {
            let output = child.wait_with_output().unwrap();
            assert_eq!(
                output.status.code(),
                Some(0),
                "round {round}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let (_, runs) = lab.json(&["--db", path_str(&db), "runs", "--json"]);
        assert_eq!(runs.as_array().unwrap().len(), 8, "round {round}");
    }
}

#[test]
fn the_ledger_and_mcp_config_are_found_upward_as_git_finds_dot_git() {
    let lab = Lab::new();
    let plan = lab.write(
        "p.json",
        &json!({"steps": [{"id": "a", "tool": "echo", "args": {}}]}),
    );
    let (code, report) = lab.json(&["run", path_str(&plan), "--json"]);
    assert_eq!(code, 0);
    let run = report["run_id"].as_str().unwrap().to_owned();
    // From a folder deep inside the project: the same ledger, no new one.
    let deep = lab.dir.path().join("src/module");
    std::fs::create_dir_all(&deep).unwrap();
    let output = lab
        .cli()
        .current_dir(&deep)
        .args(["runs"])
        .output()
        .unwrap();
    assert!(output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stdout).contains(&run),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
    let output = lab
        .cli()
        .current_dir(&deep)
        .args(["run", "../../p.json", "--json"])
        .output()
        .unwrap();
    assert!(output.status.success());
    assert!(!deep.join(".plan").exists(), "no second ledger");
    let (_, runs) = lab.json(&["runs", "--json"]);
    assert_eq!(runs.as_array().unwrap().len(), 2);
    // `last` is the newest run, wherever a run id is asked for.
    let (_, last) = lab.json(&["status", "last", "--json"]);
    assert_eq!(last["run_id"], runs[0]["run_id"]);
    assert_ne!(last["run_id"].as_str(), Some(run.as_str()));
    // The project's MCP configuration is found the same way: a broken one is reported from
    // anywhere inside.
    std::fs::write(lab.dir.path().join(".plan/mcp.json"), "{not json").unwrap();
    let output = lab
        .cli()
        .current_dir(&deep)
        .args(["tools"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains(".plan/mcp.json"), "{stderr}");
    // Outside any project, an empty listing names where it looked.
    let elsewhere = tempfile::tempdir().unwrap();
    let output = lab
        .cli()
        .current_dir(elsewhere.path())
        .args(["runs"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "no runs yet in .plan/state.db\n"
    );
}

#[test]
fn init_starts_a_project_whose_starter_plan_validates_and_runs() {
    let lab = Lab::new();
    let output = lab.cli().args(["init"]).output().unwrap();
    assert!(output.status.success(), "{output:?}");
    assert!(lab.dir.path().join(".plan").is_dir());
    let text = std::fs::read_to_string(lab.dir.path().join("plan.yaml")).unwrap();
    assert!(
        text.starts_with(
            "# yaml-language-server: $schema=.plan/plan.schema.json\n# A starter plan"
        ),
        "commented, pointing editors at the schema: {text}"
    );
    // The schema it points at is the one `plan-cli schema` prints.
    let written = std::fs::read_to_string(lab.dir.path().join(".plan/plan.schema.json")).unwrap();
    let printed = lab.cli().args(["schema"]).output().unwrap();
    assert!(printed.status.success());
    assert_eq!(written, String::from_utf8_lossy(&printed.stdout));
    lab.cli()
        .args(["validate", "plan.yaml"])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "is a valid plan: `starter`, 4 steps",
        ));
    let (code, report) = lab.json(&["run", "plan.yaml", "--json"]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["task_status"], "COMPLETED");
    // It never overwrites a plan unless told to.
    std::fs::write(lab.dir.path().join("plan.yaml"), "mine").unwrap();
    let output = lab.cli().args(["init"]).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("plan.yaml exists; give --force"));
    assert_eq!(
        std::fs::read_to_string(lab.dir.path().join("plan.yaml")).unwrap(),
        "mine"
    );
    lab.cli().args(["init", "--force"]).assert().success();
    // Completion scripts name the commands.
    for shell in ["bash", "zsh", "fish"] {
        let output = lab.cli().args(["completions", shell]).output().unwrap();
        assert!(output.status.success());
        let script = String::from_utf8_lossy(&output.stdout);
        assert!(
            script.contains("resume") && script.contains("validate"),
            "{shell}"
        );
    }
}

#[test]
fn logs_print_what_steps_put_out_and_the_summary_shows_a_failures_tail() {
    let lab = Lab::new();
    let plan = lab.write(
        "build.json",
        &json!({"steps": [
            {"id": "build", "tool": "exec", "args": {"argv": ["sh", "-c", "echo compiling; echo 'warning: unused' >&2"]}},
            {"id": "test", "tool": "exec", "args": {"argv": ["sh", "-c", "for i in 1 2 3 4 5 6 7 8; do echo case $i ok; done; echo 'assertion failed: left == right' >&2; exit 1"]}, "depends_on": ["build"]},
            {"id": "m", "tool": "echo", "expand_on": ["a"], "args": {"x": "$each"}}
        ]}),
    );
    let output = lab.cli().args(["run", path_str(&plan)]).output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    let summary = String::from_utf8_lossy(&output.stdout);
    // The failure's last lines, under its line.
    assert!(
        summary
            .contains("    │ case 8 ok\n    │ [stderr]\n    │ assertion failed: left == right\n"),
        "{summary}"
    );
    assert!(!summary.contains("case 3 ok"), "only the tail: {summary}");

    let logs = lab.cli().args(["logs", "last"]).output().unwrap();
    assert!(logs.status.success());
    let text = String::from_utf8_lossy(&logs.stdout);
    assert!(
        text.starts_with("── build (ok) ──\ncompiling\n[stderr]\nwarning: unused\n── test (failed) ──\nE_EXIT_STATUS:"),
        "{text}"
    );
    assert!(text.contains("case 1 ok\ncase 2 ok"), "{text}");
    assert!(
        text.contains("── m-0 (ok) ──\n{\n  \"x\": \"a\"\n}"),
        "{text}"
    );
    // One step, a map step's items, and a step that is not there.
    let one = lab.cli().args(["logs", "last", "build"]).output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&one.stdout),
        "── build (ok) ──\ncompiling\n[stderr]\nwarning: unused\n"
    );
    let items = lab.cli().args(["logs", "last", "m"]).output().unwrap();
    assert!(String::from_utf8_lossy(&items.stdout).contains("── m-0 (ok) ──"));
    // `--show-results` puts each output under its line.
    let shown = lab
        .cli()
        .args(["run", path_str(&plan), "--show-results"])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.contains("✓ build [exec]")
            && shown.contains("ms\n    │ compiling\n    │ [stderr]\n    │ warning: unused\n"),
        "{shown}"
    );
    let missing = lab.cli().args(["logs", "last", "nope"]).output().unwrap();
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("has no records for step `nope`"));
}

#[test]
fn status_shows_running_steps_live_and_a_killed_run_as_interrupted() {
    let lab = Lab::new();
    let plan = lab.write(
        "live.json",
        &json!({"steps": [
            {"id": "quick", "tool": "echo", "args": {}},
            {"id": "slow", "tool": "sleep", "args": {"ms": 60000}, "depends_on": ["quick"]},
            {"id": "after", "tool": "echo", "args": {}, "depends_on": ["slow"]}
        ]}),
    );
    let mut child = lab.spawn(&["run", path_str(&plan)]);
    // While it runs, `slow` shows as running (its `tool.called` reaches the ledger although
    // nothing settles for a minute).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        let output = lab
            .cli()
            .args(["status", "last", "--json"])
            .output()
            .unwrap();
        if let Ok(status) = serde_json::from_slice::<Value>(&output.stdout)
            && status["records"][1]["reason"] == "running"
        {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "`slow` never showed as running"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(status["task_status"], "RUNNING");
    assert_eq!(status["records"][2]["reason"], "not started yet");
    let text = lab.cli().args(["status", "last"]).output().unwrap();
    assert!(String::from_utf8_lossy(&text.stdout).contains("▶ slow [sleep]  running"));

    child.kill().unwrap();
    child.wait().unwrap();
    let (_, runs) = lab.json(&["runs", "--json"]);
    assert_eq!(runs[0]["task_status"], "INTERRUPTED");
    let (_, status) = lab.json(&["status", "last", "--json"]);
    assert_eq!(status["task_status"], "INTERRUPTED");
    assert_eq!(
        status["records"][1]["reason"],
        "interrupted: the run's process died while it ran"
    );
    assert_eq!(
        status["records"][2]["reason"],
        "the run's process died before it started"
    );
    let text = lab.cli().args(["status", "last"]).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("· after [echo]  not started: the run's process died before it started")
            && text.contains("INTERRUPTED: 3 steps (1 ok, 1 interrupted, 1 not started)"),
        "{text}"
    );
}

#[test]
fn runs_filter_by_status_and_plan_and_show_aligned_durations() {
    let lab = Lab::new();
    let ok = lab.write(
        "ok.json",
        &json!({"steps": [{"id": "a", "tool": "echo", "args": {}}]}),
    );
    let bad = lab.write(
        "bad-plan.json",
        &json!({"steps": [{"id": "a", "tool": "fail", "args": {}}]}),
    );
    for plan in [&ok, &bad, &ok] {
        lab.json(&["run", path_str(plan), "--json"]);
    }
    let (_, failed) = lab.json(&["runs", "--status", "failed", "--json"]);
    assert_eq!(failed.as_array().unwrap().len(), 1);
    assert_eq!(failed[0]["plan_id"], "bad-plan");
    assert!(failed[0]["duration_ms"].is_u64());
    let (_, of_plan) = lab.json(&["runs", "--plan", "ok", "--json"]);
    assert_eq!(of_plan.as_array().unwrap().len(), 2);
    let (_, newest) = lab.json(&["runs", "--limit", "1", "--json"]);
    assert_eq!(newest.as_array().unwrap().len(), 1);
    assert_eq!(newest[0]["plan_id"], "ok");
    // Columns line up whatever the status and plan id.
    let output = lab.cli().args(["runs"]).output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    let (_, all) = lab.json(&["runs", "--json"]);
    let mut lines = text.lines();
    let header = lines.next().unwrap();
    assert!(header.starts_with("RUN "), "a header first: {text}");
    let starts: Vec<usize> = lines
        .clone()
        .zip(all.as_array().unwrap())
        .map(|(line, run)| line.find(run["started_at"].as_str().unwrap()).unwrap())
        .collect();
    assert!(starts.windows(2).all(|w| w[0] == w[1]), "{text}");
    assert_eq!(header.find("STARTED"), starts.first().copied(), "{text}");
    let ends: Vec<usize> = text.lines().map(|line| line.chars().count()).collect();
    assert!(
        ends.windows(2).all(|w| w[0] == w[1]),
        "durations end together: {text}"
    );
    let output = lab
        .cli()
        .args(["runs", "--status", "soon"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn programs_run_in_the_plan_files_folder_from_anywhere_and_resume_keeps_it() {
    let lab = Lab::new();
    let plans = lab.dir.path().join("plans");
    std::fs::create_dir_all(&plans).unwrap();
    std::fs::write(plans.join("data.txt"), "from the plan's folder\n").unwrap();
    // `cat data.txt` only works where the plan is; the second read waits for an approval.
    let plan = plans.join("p.json");
    std::fs::write(
        &plan,
        json!({"steps": [
            {"id": "read", "tool": "exec", "args": {"argv": ["cat", "data.txt"]}},
            {"id": "again", "tool": "exec", "risk": "high", "args": {"argv": ["cat", "data.txt"]}, "depends_on": ["read"]},
            {"id": "up", "tool": "exec", "args": {"argv": ["pwd"], "cwd": ".."}}
        ]})
        .to_string(),
    )
    .unwrap();
    let elsewhere = lab.dir.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::create_dir_all(elsewhere.join(".plan")).unwrap();
    let run = |args: &[&str]| {
        let output = lab
            .cli()
            .current_dir(&elsewhere)
            .args(args)
            .output()
            .unwrap();
        let report: Value = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
        (output.status.code(), report)
    };
    let (code, report) = run(&["run", path_str(&plan), "--json"]);
    assert_eq!(code, Some(5), "{report}");
    assert_eq!(
        report["records"][0]["result"]["stdout"],
        "from the plan's folder\n"
    );
    let up = std::fs::canonicalize(lab.dir.path()).unwrap();
    assert_eq!(
        report["records"][2]["result"]["stdout"],
        format!("{}\n", up.display()),
        "a relative cwd is the plan's folder's"
    );
    // Resumed from yet another folder, the run keeps its folder.
    lab.cli()
        .current_dir(&elsewhere)
        .args(["approve", "last", "again"])
        .assert()
        .success();
    let (code, report) = run(&["resume", "last", "--json"]);
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(
        report["records"][1]["result"]["stdout"],
        "from the plan's folder\n"
    );
    // --cwd says otherwise.
    let (code, report) = run(&[
        "run",
        path_str(&plan),
        "--json",
        "--cwd",
        path_str(&elsewhere),
    ]);
    assert_eq!(code, Some(1), "no data.txt there: {report}");
    let output = lab
        .cli()
        .args(["run", path_str(&plan), "--cwd", "/no/such/dir"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--cwd /no/such/dir"));
}

/// With one call at a time, ready steps are called in plan order, also when one of them waits
/// for its dependency's record to be durable (it is made durable then, not passed over).
#[test]
fn one_call_at_a_time_calls_steps_in_plan_order() {
    let lab = Lab::new();
    let plan = lab.write(
        "order.json",
        &json!({"steps": [
            {"id": "a", "tool": "echo"},
            {"id": "b", "tool": "echo", "depends_on": ["a"]},
            {"id": "c", "tool": "echo"},
            {"id": "d", "tool": "echo", "depends_on": ["b"]},
            {"id": "e", "tool": "echo"},
        ]}),
    );
    for durability in ["sync", "async"] {
        let events = lab.dir.path().join(format!("{durability}.ndjson"));
        let (code, _) = lab.json(&[
            "run",
            path_str(&plan),
            "--json",
            "--max-concurrency",
            "1",
            "--durability",
            durability,
            "--events",
            path_str(&events),
        ]);
        assert_eq!(code, 0);
        let called: Vec<String> = std::fs::read_to_string(&events)
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str::<Value>(line).unwrap())
            .filter(|event| event["type"] == "tool.called")
            .map(|event| event["step_id"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(
            called,
            ["a", "b", "c", "d", "e"],
            "--durability {durability}"
        );
    }
}
