//! Control of runs through the binary: approval round trips, modes, and signals.
#![expect(clippy::unwrap_used, reason = "test helpers fail loudly on purpose")]

mod common;

use std::time::{Duration, Instant};

use common::{Lab, path_str, process_ends, record, wait_for_pid};
use predicates::prelude::*;
use serde_json::{Value, json};

fn deploy_plan() -> Value {
    json!({"steps": [
        {"id": "build", "tool": "echo", "args": {"artifact": "app.tar"}, "result_variable": "build"},
        {"id": "deploy", "tool": "echo", "risk": "high", "args": {"artifact": "${build.artifact}"}, "depends_on": ["build"]},
        {"id": "notify", "tool": "echo", "args": {"text": "done"}, "depends_on": ["deploy"]},
        {"id": "lint", "tool": "echo", "args": {}}
    ]})
}

fn statuses(report: &Value) -> Vec<(String, bool, bool)> {
    report["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["step_id"].as_str().unwrap().to_owned(),
                r["ok"].as_bool().unwrap(),
                r["skipped"].as_bool().unwrap(),
            )
        })
        .collect()
}

/// The number of `tool.called` events of each step in the run's events.
fn calls_of(lab: &Lab, run: &str, step: &str) -> usize {
    let output = lab.cli().args(["events", run]).output().unwrap();
    tool_calls(&String::from_utf8_lossy(&output.stdout), step).len()
}

/// The `tool.called` events of `step` among NDJSON events.
fn tool_calls(ndjson: &str, step: &str) -> Vec<Value> {
    ndjson
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|e| e["type"] == "tool.called" && e["step_id"] == step)
        .collect()
}

#[test]
fn an_approval_round_trip_waits_approves_and_resumes() {
    let lab = Lab::new();
    let plan = lab.write("deploy.json", &deploy_plan());
    let (code, report) = lab.json(&["run", path_str(&plan), "--json"]);
    assert_eq!(code, 5, "WAITING exits 5");
    assert_eq!(report["task_status"], "WAITING");
    assert_eq!(
        report["pending_approvals"],
        json!([{"step_id": "deploy", "tool": "echo", "args": {"artifact": "app.tar"}}])
    );
    let run = report["run_id"].as_str().unwrap().to_owned();

    // `status` shows the same object, pending approvals included.
    let (code, status) = lab.json(&["status", &run, "--json"]);
    assert_eq!(code, 0);
    assert_eq!(status["task_status"], "WAITING");
    assert_eq!(status["pending_approvals"], report["pending_approvals"]);
    assert_eq!(statuses(&status), statuses(&report));

    // A step that needs no approval is refused, naming what waits.
    lab.cli()
        .args(["approve", &run, "lint"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("`lint` needs no decision in run"))
        .stderr(predicate::str::contains("(waiting: deploy)"));
    // A name that is no step at all is a typo, and said so.
    lab.cli()
        .args(["approve", &run, "deplyo"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "has no step `deplyo` (did you mean `deploy`?)",
        ));

    // Resuming before a decision halts again, and calls nothing twice.
    let (code, _) = lab.json(&["resume", &run, "--json"]);
    assert_eq!(code, 5);
    assert_eq!(calls_of(&lab, &run, "build"), 1);

    lab.cli()
        .args(["approve", &run, "deploy"])
        .assert()
        .success()
        .stdout(predicate::str::contains("approved deploy in run"))
        .stdout(predicate::str::contains(format!(
            "continue it with `plan-cli resume {run}`"
        )));
    let (code, report) = lab.json(&["resume", &run, "--json"]);
    assert_eq!(code, 0);
    assert_eq!(report["task_status"], "COMPLETED");
    assert!(report.get("pending_approvals").is_none());
    assert_eq!(calls_of(&lab, &run, "build"), 1, "build never ran again");
    assert_eq!(calls_of(&lab, &run, "deploy"), 1);

    // A finished run takes no decisions.
    lab.cli()
        .args(["approve", &run, "deploy"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("has finished"));
}

/// The `__meta__` record's `duration_ms`.
fn run_duration_ms(report: &Value) -> u64 {
    record(report, "__meta__")["duration_ms"].as_u64().unwrap()
}

/// A resumed run's report says how long the whole run took, from its first start, as `status`
/// and `runs` say it afterwards: not only the resuming process's part.
#[test]
fn a_resumed_run_reports_its_whole_duration_as_status_and_runs_do() {
    let lab = Lab::new();
    let plan = lab.write("deploy.json", &deploy_plan());
    let (code, report) = lab.json(&["run", path_str(&plan), "--json"]);
    assert_eq!(code, 5);
    let run = report["run_id"].as_str().unwrap().to_owned();
    // The report and the ledger count to the same end, to the millisecond.
    let (_, waiting) = lab.json(&["status", &run, "--json"]);
    assert_eq!(run_duration_ms(&waiting), run_duration_ms(&report));
    std::thread::sleep(Duration::from_millis(300));
    lab.cli()
        .args(["approve", &run, "deploy"])
        .assert()
        .success();
    let (code, resumed) = lab.json(&["resume", &run, "--json"]);
    assert_eq!(code, 0);
    let took = run_duration_ms(&resumed);
    assert!(took >= 300, "{resumed}");
    let (_, status) = lab.json(&["status", &run, "--json"]);
    assert_eq!(run_duration_ms(&status), took, "{resumed} vs {status}");
    let (_, runs) = lab.json(&["runs", "--json"]);
    assert_eq!(
        runs[0]["duration_ms"].as_u64(),
        Some(run_duration_ms(&status))
    );
}

/// The `tool.called` events of `step` in a run's events file.
fn called_events(path: &std::path::Path, step: &str) -> Vec<Value> {
    tool_calls(&std::fs::read_to_string(path).unwrap(), step)
}

/// Approvals off, three ways (`--approvals off`, `approvals: false` in the plan, and
/// `AGENT_APPROVALS_ENABLED=false`): the high-risk step runs without waiting, and its
/// `tool.called` event, in the events file and in the ledger, says it ran without an approval.
/// `--approvals on` wins over the plan.
#[test]
fn approvals_off_runs_high_risk_steps_and_records_it() {
    let lab = Lab::new();
    let plan = lab.write("deploy.json", &deploy_plan());
    let mut off_in_plan = deploy_plan();
    off_in_plan["approvals"] = json!(false);
    let plan_off = lab.write("deploy-off.json", &off_in_plan);
    let ways: [(&std::path::Path, &[&str], Option<&str>); 3] = [
        (&plan, &["--approvals", "off"], None),
        (&plan_off, &[], None),
        (&plan, &[], Some("false")),
    ];
    for (i, (file, flags, env)) in ways.into_iter().enumerate() {
        let events = lab.dir.path().join(format!("events-{i}.ndjson"));
        let mut command = lab.cli();
        command
            .args([
                "run",
                path_str(file),
                "--json",
                "--events",
                path_str(&events),
            ])
            .args(flags);
        if let Some(value) = env {
            command.env("AGENT_APPROVALS_ENABLED", value);
        }
        let output = command.output().unwrap();
        let report: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(output.status.code(), Some(0), "way {i}: {report}");
        assert_eq!(report["task_status"], "COMPLETED");
        assert_eq!(record(&report, "deploy")["ok"], true);
        let called = called_events(&events, "deploy");
        assert_eq!(called.len(), 1);
        assert!(
            called[0]["reason"]
                .as_str()
                .is_some_and(|r| r.contains("approvals are off")),
            "{called:?}"
        );
        // A low-risk step's call says nothing of approvals.
        assert!(called_events(&events, "build")[0]["reason"].is_null());
        // The ledger keeps the same.
        let run = report["run_id"].as_str().unwrap();
        let stored = lab.dir.path().join(format!("stored-{i}.ndjson"));
        std::fs::write(
            &stored,
            lab.cli().args(["events", run]).output().unwrap().stdout,
        )
        .unwrap();
        assert_eq!(called_events(&stored, "deploy"), called);
    }
    // `--approvals on` over the plan's `approvals: false`: the step waits.
    let (code, report) = lab.json(&["run", path_str(&plan_off), "--json", "--approvals", "on"]);
    assert_eq!(code, 5, "{report}");
    assert_eq!(report["task_status"], "WAITING");
    lab.cli()
        .args(["run", path_str(&plan), "--approvals", "maybe"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("say on or off"));
}

/// A run started with `--approvals off` keeps it when resumed without the flag.
#[test]
fn a_resumed_run_keeps_the_approvals_switch_it_started_with() {
    let lab = Lab::new();
    let plan = lab.write(
        "p.json",
        &json!({"steps": [
            {"id": "flaky", "tool": "exec", "args": {"argv": ["test", "-f", "ready"]}},
            {"id": "deploy", "tool": "echo", "risk": "high", "args": {}, "depends_on": ["flaky"]}
        ]}),
    );
    let (code, report) = lab.json(&["run", path_str(&plan), "--json", "--approvals", "off"]);
    assert_eq!(code, 1, "{report}");
    let run = report["run_id"].as_str().unwrap();
    std::fs::write(lab.dir.path().join("ready"), "").unwrap();
    let (code, report) = lab.json(&["resume", run, "--retry-failed", "--json"]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(record(&report, "deploy")["ok"], true);
}

#[test]
fn a_rejection_fails_the_step_and_is_never_asked_again() {
    let lab = Lab::new();
    let plan = lab.write("deploy.json", &deploy_plan());
    let (_, report) = lab.json(&["run", path_str(&plan), "--json"]);
    let run = report["run_id"].as_str().unwrap().to_owned();
    lab.cli()
        .args(["reject", &run, "deploy", "--reason", "change freeze"])
        .assert()
        .success();
    // The decision is taken once: approving it now is refused.
    lab.cli()
        .args(["approve", &run, "deploy"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "`deploy` is already rejected; a decision is taken once",
        ));
    let (code, report) = lab.json(&["resume", &run, "--json"]);
    assert_eq!(code, 1);
    assert_eq!(report["task_status"], "FAILED");
    let deploy = &report["records"][1];
    assert_eq!(deploy["error"]["code"], "E_REJECTED");
    assert_eq!(
        deploy["error"]["message"],
        "the call was not approved: change freeze"
    );
    assert_eq!(
        report["records"][2]["upstream"],
        json!({"deploy": "rejected"})
    );
}

#[test]
fn run_approve_pre_approves_and_checks_its_steps() {
    let lab = Lab::new();
    let plan = lab.write("deploy.json", &deploy_plan());
    let (code, report) = lab.json(&["run", path_str(&plan), "--approve", "deploy", "--json"]);
    assert_eq!(code, 0);
    assert_eq!(report["task_status"], "COMPLETED");
    lab.cli()
        .args(["run", path_str(&plan), "--approve", "lint"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "--approve lint: `lint` is not a high-risk step (the plan's are deploy)",
        ));
}

#[test]
fn approval_mode_waits_for_the_plan_and_preview_runs_nothing() {
    let lab = Lab::new();
    let plan = lab.write(
        "plain.json",
        &json!({"steps": [{"id": "a", "tool": "echo", "args": {"x": 1}}]}),
    );
    let output = lab
        .cli()
        .args(["run", path_str(&plan), "--mode", "approval"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(5));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("the plan (it runs in approval mode)"),
        "{stdout}"
    );
    let (_, runs) = lab.json(&["runs", "--json"]);
    let run = runs[0]["run_id"].as_str().unwrap().to_owned();
    assert_eq!(calls_of(&lab, &run, "a"), 0);
    lab.cli()
        .args(["approve", &run, "--plan"])
        .assert()
        .success()
        .stdout(predicate::str::contains("approved the plan"));
    let (code, report) = lab.json(&["resume", &run, "--json"]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(calls_of(&lab, &run, "a"), 1);

    // A preview draws the graph and the calls, and records nothing.
    lab.cli()
        .args(["run", path_str(&plan), "--mode", "preview"])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "dry run of `plain`: 1 call, none made",
        ));
    let (_, runs) = lab.json(&["runs", "--json"]);
    assert_eq!(
        runs.as_array().unwrap().len(),
        1,
        "the preview is not a run"
    );
}

/// Starts a run of one long step, waits until it is running, then sends `signals`.
fn interrupted_run(signals: &[&str]) -> (Lab, std::process::Output, Duration) {
    let lab = Lab::new();
    let plan = lab.write(
        "slow.json",
        &json!({"steps": [
            {"id": "quick", "tool": "echo", "args": {}},
            {"id": "slow", "tool": "sleep", "args": {"ms": 60000}, "depends_on": ["quick"]},
            {"id": "after", "tool": "echo", "args": {}, "depends_on": ["slow"]}
        ]}),
    );
    let events = lab.dir.path().join("events.ndjson");
    let child = lab.spawn(&["run", path_str(&plan), "--events", path_str(&events)]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&events)
        .unwrap_or_default()
        .lines()
        .any(|l| l.contains("tool.called") && l.contains("\"slow\""))
    {
        assert!(Instant::now() < deadline, "the run never started `slow`");
        std::thread::sleep(Duration::from_millis(20));
    }
    let started = Instant::now();
    for signal in signals {
        let status = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }
    let output = child.wait_with_output().unwrap();
    (lab, output, started.elapsed())
}

#[test]
fn sigterm_stops_the_run_and_keeps_what_finished() {
    let (lab, output, took) = interrupted_run(&["TERM"]);
    assert_eq!(output.status.code(), Some(130));
    assert!(took < Duration::from_secs(20), "the sleep was cancelled");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("continue it with `plan-cli resume"),
        "{stderr}"
    );
    let (_, runs) = lab.json(&["runs", "--json"]);
    assert_eq!(runs[0]["task_status"], "STOPPED");
    let run = runs[0]["run_id"].as_str().unwrap().to_owned();
    let (_, status) = lab.json(&["status", &run, "--json"]);
    assert_eq!(status["records"][0]["ok"], true, "what finished is kept");
    assert_eq!(
        status["records"][1]["reason"], "the run stopped before it started",
        "the cancelled step is not recorded as done, so resume runs it again"
    );
    assert_eq!(calls_of(&lab, &run, "quick"), 1);
}

#[test]
fn two_interrupts_in_a_row_leave_the_ledger_consistent() {
    // SIGINT twice in a row: the first asks to stop; the second, if it arrives before the stop
    // is done, exits at once. Every built-in tool stops at once when cancelled, so which of
    // the two ends the process is a race: this checks the ledger either way, not the speed.
    let (lab, output, _) = interrupted_run(&["INT", "INT"]);
    assert_eq!(output.status.code(), Some(130));
    let (_, runs) = lab.json(&["runs", "--json"]);
    let run = runs[0]["run_id"].as_str().unwrap().to_owned();
    // The ledger opens and the run resumes: `quick` stays done, `slow` runs again.
    let (_, status) = lab.json(&["status", &run, "--json"]);
    assert_eq!(status["records"][0]["step_id"], "quick");
    assert_eq!(status["records"][0]["ok"], true);
    assert!(
        lab.cli()
            .args(["gc", "--older-than", "1d"])
            .output()
            .unwrap()
            .status
            .success()
    );
}

fn block_plan() -> Value {
    json!({"steps": [
        {"id": "review", "args": {"topic": "x"}, "block": {
            "entry_point": "draft",
            "on_failure": "wait",
            "nodes": {
                "draft": {"tool": "echo", "args": {"text": "draft ${input.topic}"}},
                // Fails the first time it runs (no marker yet), then succeeds.
                "check": {"tool": "exec", "args": {"argv": ["sh", "-c", "test -f marker || { touch marker; echo not yet >&2; exit 1; }"]}},
                "publish": {"tool": "echo", "risk": "high", "args": {"what": "${nodes.draft.text}"}}
            },
            "transitions": {"draft": "check", "check": "publish"}
        }},
        {"id": "after", "tool": "echo", "args": {}, "depends_on": ["review"]}
    ]})
}

#[test]
fn a_waiting_block_goes_on_from_its_node_after_each_decision() {
    let lab = Lab::new();
    let plan = lab.write("review.json", &block_plan());
    let (code, report) = lab.json(&["run", path_str(&plan), "--json"]);
    assert_eq!(code, 5);
    let run = report["run_id"].as_str().unwrap().to_owned();
    // `check` failed under `on_failure: wait`: the run asks whether to run it again.
    let pending = &report["pending_approvals"][0];
    assert_eq!(pending["step_id"], "review/check#1@1");
    assert!(
        pending["reason"]
            .as_str()
            .unwrap()
            .starts_with("failed with E_EXIT_STATUS"),
        "{pending}"
    );
    assert_eq!(
        report["blocks"],
        json!([{"step_id": "review", "state": "WAITING", "node": "check"}])
    );
    let (_, status) = lab.json(&["status", &run, "--json"]);
    assert_eq!(status["blocks"], report["blocks"]);
    assert_eq!(status["records"][0]["step_id"], "review/draft#1");

    lab.cli()
        .args(["approve", &run, "review/check#1@1"])
        .assert()
        .success();
    let (code, report) = lab.json(&["resume", &run, "--json"]);
    assert_eq!(code, 5, "now `publish` waits for its approval");
    assert_eq!(report["pending_approvals"][0]["step_id"], "review/publish");
    assert_eq!(
        report["pending_approvals"][0]["args"],
        json!({"what": "draft x"}),
        "the node reads results from before the wait"
    );
    assert_eq!(report["blocks"][0]["node"], "publish");

    lab.cli()
        .args(["approve", &run, "review/publish"])
        .assert()
        .success();
    let (code, report) = lab.json(&["resume", &run, "--json"]);
    assert_eq!(code, 0, "{report}");
    let ids: Vec<&str> = report["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["step_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            "review/draft#1",
            "review/check#1",
            "review/publish#1",
            "review",
            "after",
            "__meta__"
        ]
    );
    assert_eq!(report["blocks"][0]["state"], "DONE");
    assert_eq!(
        calls_of(&lab, &run, "review/draft#1"),
        1,
        "never from the entry again"
    );
    assert_eq!(
        calls_of(&lab, &run, "review/check#1"),
        2,
        "the approved second try"
    );
    assert_eq!(calls_of(&lab, &run, "review/publish#1"), 1);
}

#[test]
fn rejecting_a_recovery_fails_the_block() {
    let lab = Lab::new();
    let plan = lab.write("review.json", &block_plan());
    let (_, report) = lab.json(&["run", path_str(&plan), "--json"]);
    let run = report["run_id"].as_str().unwrap().to_owned();
    lab.cli()
        .args(["reject", &run, "review/check#1@1", "--reason", "give up"])
        .assert()
        .success();
    let (code, report) = lab.json(&["resume", &run, "--json"]);
    assert_eq!(code, 1);
    let block = record(&report, "review");
    assert_eq!(block["error"]["code"], "E_REJECTED");
    assert!(
        block["error"]["message"]
            .as_str()
            .unwrap()
            .contains("running it again was refused (give up)"),
        "{block}"
    );
    assert_eq!(report["blocks"][0]["state"], "FAILED");
    assert_eq!(report["records"][2]["step_id"], "after");
    assert_eq!(
        report["records"][2]["upstream"],
        json!({"review": "rejected"})
    );
}

#[test]
fn a_block_killed_mid_run_goes_on_from_its_last_finished_node() {
    let lab = Lab::new();
    // Each node notes that it ran, then takes a while.
    let node = |name: &str| json!({"tool": "exec", "args": {"argv": ["sh", "-c", format!("echo {name} >> runs.log; sleep 0.3")]}});
    let plan = lab.write(
        "block.json",
        &json!({"steps": [{"id": "review", "block": {
            "entry_point": "a",
            "nodes": {"a": node("a"), "b": node("b"), "c": node("c"), "d": node("d")},
            "transitions": {"a": "b", "b": "c", "c": "d"}
        }}]}),
    );
    let log = lab.dir.path().join("runs.log");
    let mut child = lab.spawn(&["run", path_str(&plan), "--json"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains('c')
    {
        assert!(Instant::now() < deadline, "the block never reached c");
        std::thread::sleep(Duration::from_millis(10));
    }
    // `c` is running: a and b are done and committed. The block is busy, not waiting.
    let (_, status) = lab.json(&["status", "last", "--json"]);
    assert_eq!(status["blocks"][0]["state"], "BUSY", "{status}");
    child.kill().unwrap();
    child.wait().unwrap();
    let (_, runs) = lab.json(&["runs", "--json"]);
    let run = runs[0]["run_id"].as_str().unwrap().to_owned();
    let (code, report) = lab.json(&["resume", &run, "--json"]);
    assert_eq!(code, 0, "{report}");
    let ran = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = ran.lines().collect();
    assert_eq!(
        lines,
        ["a", "b", "c", "c", "d"],
        "a and b are not run again; c, in flight at the kill, is"
    );
    let ids: Vec<&str> = report["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["step_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            "review/a#1",
            "review/b#1",
            "review/c#1",
            "review/d#1",
            "review",
            "__meta__"
        ]
    );
}

/// A block whose nodes are running is a task `in_progress` in the state file (it is `BUSY` in
/// `status --json`), from its first node's call to its end; then `completed`, one attempt.
#[test]
fn a_running_block_is_in_progress_in_the_state_file() {
    let lab = Lab::new();
    let node = |ms: u32| json!({"tool": "sleep", "args": {"ms": ms}});
    let last = json!({"tool": "exec", "args": {"argv": ["sh", "-c", "touch c.started; sleep 2"]}});
    let plan = lab.write(
        "block.json",
        &json!({"steps": [{"id": "review", "block": {
            "entry_point": "a",
            "nodes": {"a": node(300), "b": node(300), "c": last},
            "transitions": {"a": "b", "b": "c"}
        }}]}),
    );
    let state_file = lab.dir.path().join("execute-state.json");
    let mut child = lab.spawn(&[
        "run",
        path_str(&plan),
        "--json",
        "--state-file",
        path_str(&state_file),
    ]);
    let read = || -> Value {
        std::fs::read_to_string(&state_file)
            .ok()
            .and_then(|text| serde_json::from_str(&text).ok())
            .unwrap_or(Value::Null)
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !lab.dir.path().join("c.started").exists() {
        assert!(Instant::now() < deadline, "the block never reached c");
        std::thread::sleep(Duration::from_millis(10));
    }
    // `c` runs for 2 s: the document written after `a` or `b` ended says what the block does.
    let (_, status) = lab.json(&["status", "last", "--json"]);
    assert_eq!(status["blocks"][0]["state"], "BUSY", "{status}");
    let mut state = read();
    while state["tasks"]["review"]["status"] != "in_progress" {
        assert!(Instant::now() < deadline, "never in progress: {state}");
        std::thread::sleep(Duration::from_millis(20));
        state = read();
    }
    common::assert_execute_state(&state);
    assert_eq!(state["status"], "in_progress", "{state}");
    assert_eq!(
        state["layers"]["0-level"]["status"], "in_progress",
        "{state}"
    );
    assert_eq!(state["tasks"]["review"]["attempts"], 1, "{state}");
    assert!(
        state["tasks"]["review"]["started_at"].is_string(),
        "{state}"
    );
    assert!(child.wait().unwrap().success());
    let state = read();
    common::assert_execute_state(&state);
    assert_eq!(state["tasks"]["review"]["status"], "completed", "{state}");
    assert_eq!(state["tasks"]["review"]["attempts"], 1, "{state}");
    assert!(
        state["tasks"]["review"]["completed_at"].is_string(),
        "{state}"
    );
}

#[test]
fn ctrl_c_on_a_terminal_stops_exec_children_and_resume_runs_the_step_again() {
    use std::os::unix::process::CommandExt;
    let lab = Lab::new();
    // The step notes each start, leaves a background child (which a shell does not pass
    // SIGINT to) and waits for it.
    let script = "echo started >> starts.log; sleep 60 & echo $! > child.pid; wait";
    let plan = lab.write(
        "job.json",
        &json!({"steps": [
            {"id": "job", "tool": "exec", "args": {"argv": ["sh", "-c", script]}, "timeout_ms": 120000}
        ]}),
    );
    // As a terminal runs it: plan-cli leads a foreground process group, and Ctrl+C sends
    // SIGINT to that whole group.
    let child = lab
        .command()
        .args(["run", path_str(&plan)])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let pid_file = lab.dir.path().join("child.pid");
    let grandchild = wait_for_pid(&pid_file);
    // `--`: without it, `kill` may read the negative group id as an option.
    let group = format!("-{}", child.id());
    let status = std::process::Command::new("kill")
        .args(["-s", "INT", "--", &group])
        .status()
        .unwrap();
    assert!(status.success());
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(130), "{output:?}");
    // The step's own children are stopped with it.
    assert!(
        process_ends(grandchild),
        "the exec step's background child outlived the run"
    );
    // Interrupted, not failed: resume runs it again.
    let (_, runs) = lab.json(&["runs", "--json"]);
    assert_eq!(runs[0]["task_status"], "STOPPED");
    let run = runs[0]["run_id"].as_str().unwrap().to_owned();
    std::fs::remove_file(&pid_file).unwrap();
    let resumed = lab.spawn(&["resume", &run, "--json"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !pid_file.exists() {
        assert!(Instant::now() < deadline, "resume never ran the step again");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Stopped the same way (SIGTERM), so that its own child is stopped too.
    let status = std::process::Command::new("kill")
        .args(["-s", "TERM", &resumed.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(resumed.wait_with_output().unwrap().status.code(), Some(130));
    let starts = std::fs::read_to_string(lab.dir.path().join("starts.log")).unwrap();
    assert_eq!(starts.lines().count(), 2);
}

#[test]
fn retry_runs_a_step_again_with_what_depends_on_it() {
    let lab = Lab::new();
    let step = |id: &str, deps: &[&str]| json!({"id": id, "tool": "exec", "args": {"argv": ["sh", "-c", format!("echo {id} >> ran.log")]}, "depends_on": deps});
    let plan = lab.write(
        "chain.json",
        &json!({"steps": [step("a", &[]), step("b", &["a"]), step("c", &["b"]), step("d", &["a"])]}),
    );
    let (code, _) = lab.json(&["run", path_str(&plan), "--json"]);
    assert_eq!(code, 0);
    let (code, report) = lab.json(&["retry", "last", "b", "--json"]);
    assert_eq!(code, 0, "{report}");
    let ran = std::fs::read_to_string(lab.dir.path().join("ran.log")).unwrap();
    let mut again: Vec<&str> = ran.lines().skip(4).collect();
    again.sort_unstable();
    assert_eq!(again, ["b", "c"], "b and its dependent c, not a or d");
    assert_eq!(report["task_status"], "COMPLETED");
    let output = lab.cli().args(["retry", "last", "bb"]).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("has no step `bb` (did you mean `b`?)"),
        "{output:?}"
    );
}

#[test]
fn cancel_stops_a_running_run_from_elsewhere_and_marks_a_waiting_one_stopped() {
    let lab = Lab::new();
    let plan = lab.write(
        "slow.json",
        &json!({"steps": [
            {"id": "quick", "tool": "echo", "args": {}},
            {"id": "slow", "tool": "sleep", "args": {"ms": 60000}, "depends_on": ["quick"]}
        ]}),
    );
    let events = lab.dir.path().join("events.ndjson");
    let child = lab.spawn(&["run", path_str(&plan), "--events", path_str(&events)]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&events)
        .unwrap_or_default()
        .contains("\"slow\"")
    {
        assert!(Instant::now() < deadline, "the run never started `slow`");
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = lab.cli().args(["cancel", "last"]).output().unwrap();
    assert!(output.status.success(), "{output:?}");
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("stopped (STOPPED)"),
        "{output:?}"
    );
    assert_eq!(child.wait_with_output().unwrap().status.code(), Some(130));
    let (_, runs) = lab.json(&["runs", "--json"]);
    assert_eq!(runs[0]["task_status"], "STOPPED");
    // A run waiting for an approval is marked stopped.
    let gated = lab.write(
        "gated.json",
        &json!({"steps": [{"id": "deploy", "tool": "echo", "risk": "high", "args": {}}]}),
    );
    let (code, _) = lab.json(&["run", path_str(&gated), "--json"]);
    assert_eq!(code, 5);
    let output = lab.cli().args(["cancel", "last"]).output().unwrap();
    assert!(
        String::from_utf8_lossy(&output.stdout)
            .contains("was waiting for approvals; it is stopped now"),
        "{output:?}"
    );
    let (_, runs) = lab.json(&["runs", "--json"]);
    assert_eq!(runs[0]["task_status"], "STOPPED");
    // A finished run has nothing to cancel.
    let done = lab.write(
        "done.json",
        &json!({"steps": [{"id": "a", "tool": "echo", "args": {}}]}),
    );
    lab.json(&["run", path_str(&done), "--json"]);
    let output = lab.cli().args(["cancel", "last"]).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&output.stderr)
            .contains("has finished (COMPLETED): there is nothing to cancel"),
        "{output:?}"
    );
}

#[test]
fn a_program_dies_with_a_plan_cli_killed_by_sigkill() {
    let lab = Lab::new();
    // The program notes its pid (`$$$$`: a literal `$$` for the shell), then becomes `sleep`.
    let plan = lab.write(
        "long.json",
        &json!({"steps": [{"id": "long", "tool": "exec", "args": {"argv": ["sh", "-c", "echo $$$$ > program.pid; exec sleep 60"]}}]}),
    );
    let mut child = lab.spawn(&["run", path_str(&plan)]);
    let program = wait_for_pid(&lab.dir.path().join("program.pid"));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        process_ends(program),
        "the program outlived plan-cli (kill -9)"
    );
}

#[test]
fn an_approval_is_of_the_arguments_shown_and_other_arguments_ask_again() {
    let lab = Lab::new();
    std::fs::write(lab.dir.path().join("target.txt"), "dev").unwrap();
    let plan = lab.write(
        "deploy.json",
        &json!({"steps": [
            {"id": "pick", "tool": "exec", "args": {"argv": ["cat", "target.txt"]}, "result_variable": "pick"},
            {"id": "deploy", "tool": "echo", "risk": "high", "args": {"to": "${pick.stdout}"}, "depends_on": ["pick"]},
        ]}),
    );
    let (code, report) = lab.json(&["run", path_str(&plan), "--json"]);
    assert_eq!(code, 5, "{report}");
    assert_eq!(report["pending_approvals"][0]["args"], json!({"to": "dev"}));
    let run = report["run_id"].as_str().unwrap().to_owned();
    lab.cli()
        .args(["approve", &run, "deploy"])
        .assert()
        .success();
    // What the arguments come from changes, and the step runs again: the approval was of
    // `dev`, so `prod` waits for a decision of its own, and nothing is deployed meanwhile.
    std::fs::write(lab.dir.path().join("target.txt"), "prod").unwrap();
    let (code, report) = lab.json(&["retry", &run, "pick", "--json"]);
    assert_eq!(code, 5, "{report}");
    assert_eq!(
        report["pending_approvals"],
        json!([{"step_id": "deploy", "tool": "echo", "args": {"to": "prod"}}])
    );
    assert_eq!(calls_of(&lab, &run, "deploy"), 0);
    lab.cli()
        .args(["approve", &run, "deploy"])
        .assert()
        .success();
    let (code, report) = lab.json(&["resume", &run, "--json"]);
    assert_eq!(code, 0, "{report}");
    let deploy = report["records"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["step_id"] == "deploy")
        .unwrap();
    assert_eq!(deploy["result"], json!({"to": "prod"}));
    assert_eq!(calls_of(&lab, &run, "deploy"), 1);
}

#[test]
fn a_step_run_again_by_retry_is_shown_starting() {
    let lab = Lab::new();
    let plan = lab.write(
        "p.json",
        &json!({"steps": [{"id": "a", "tool": "echo", "args": {}}, {"id": "b", "tool": "echo", "args": {}, "depends_on": ["a"]}]}),
    );
    let (code, _) = lab.json(&["run", path_str(&plan), "--json"]);
    assert_eq!(code, 0);
    // Its call is attempt 2 (attempts count on across re-runs), and still a start.
    lab.cli()
        .args(["retry", "last", "b"])
        .assert()
        .success()
        .stderr(predicate::str::contains("▶ b [echo]"))
        .stderr(predicate::str::contains("✓ b [echo]"));
}

#[test]
fn an_answer_given_with_an_approval_is_overlaid_on_the_calls_arguments() {
    let lab = Lab::new();
    let plan = lab.write(
        "answer.json",
        &json!({"steps": [
            {"id": "build", "tool": "echo", "args": {"artifact": "app.tar"}, "result_variable": "build"},
            {"id": "deploy", "tool": "echo", "risk": "high", "args": {"artifact": "${build.artifact}", "to": "staging"}, "depends_on": ["build"]},
            {"id": "wait", "tool": "sleep", "risk": "high", "args": {"ms": 1}},
            {"id": "lint", "tool": "echo", "args": {}}
        ]}),
    );
    let (code, report) = lab.json(&["run", path_str(&plan), "--json"]);
    assert_eq!(code, 5, "{report}");
    let run = report["run_id"].as_str().unwrap().to_owned();

    // What is no answer, or no answer to a waiting call, is refused, and decides nothing.
    let refused = |args: &[&str], says: &str| {
        let mut all = vec!["approve", run.as_str()];
        all.extend_from_slice(args);
        lab.cli()
            .args(&all)
            .assert()
            .code(2)
            .stderr(predicate::str::contains(says));
    };
    refused(
        &["deploy", "--input", "{to: prod}"],
        "`--input` is not JSON",
    );
    refused(
        &["deploy", "--input", "[1]"],
        "must be a JSON object of arguments",
    );
    refused(&["lint", "--input", "{}"], "`lint` is no call run");
    refused(&["deploy", "wait", "--input", "{}"], "name exactly one");
    refused(&["--all", "--input", "{}"], "cannot be used with");
    let (_, status) = lab.json(&["status", &run, "--json"]);
    assert_eq!(
        status["pending_approvals"].as_array().unwrap().len(),
        2,
        "{status}"
    );

    // The answer's fields replace the arguments of their names; the others stay resolved.
    lab.cli()
        .args([
            "approve",
            &run,
            "deploy",
            "--input",
            r#"{"to": "prod", "note": "ok"}"#,
        ])
        .assert()
        .success()
        .stdout(predicate::str::contains("approved deploy in run"));
    // The same answer again changes nothing; another one, or none, is a second decision.
    lab.cli()
        .args([
            "approve",
            &run,
            "deploy",
            "--input",
            r#"{"to": "prod", "note": "ok"}"#,
        ])
        .assert()
        .success();
    refused(
        &["deploy", "--input", r#"{"to": "dev"}"#],
        "already approved with another answer",
    );
    // An answer the tool's schema refuses is asked again, with the schema's pointer; nothing
    // is called, and another answer is taken.
    lab.cli()
        .args(["approve", &run, "wait", "--input", r#"{"ms": "soon"}"#])
        .assert()
        .success();
    let (code, report) = lab.json(&["resume", &run, "--json"]);
    assert_eq!(code, 5, "{report}");
    assert_eq!(
        record(&report, "deploy")["result"],
        json!({"artifact": "app.tar", "to": "prod", "note": "ok"})
    );
    let asked = &report["pending_approvals"][0];
    assert_eq!(asked["step_id"], "wait", "{report}");
    let reason = asked["reason"].as_str().unwrap();
    assert!(reason.contains("does not fit"), "{reason}");
    assert!(reason.contains("/ms"), "{reason}");
    assert_eq!(
        calls_of(&lab, &run, "wait"),
        0,
        "a refused answer calls nothing"
    );
    lab.cli()
        .args(["approve", &run, "wait", "--input", r#"{"ms": 2}"#])
        .assert()
        .success();
    let (code, report) = lab.json(&["resume", &run, "--json"]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(record(&report, "wait")["result"], json!({"slept_ms": 2}));
    // Read from the ledger again, the answered calls' records are the same.
    let (_, status) = lab.json(&["status", &run, "--json"]);
    assert_eq!(status["records"], report["records"]);
}

/// The map-style executor's chat surface: `respond` / `chat.respond` read leniently, their
/// texts the run's answer (printed last, `answer` in `--json` and `status`), and the
/// `assistant.delta` / `assistant.final` events, secrets kept out.
#[test]
fn a_plans_answer_is_printed_last_kept_as_answer_and_streamed_as_assistant_events() {
    let lab = Lab::new();
    let plan = lab.write(
        "chat.json",
        &json!({"env": ["CHAT_SECRET"], "steps": [
            {"id": "look", "tool": "echo", "args": {"city": "Paris", "key": "${env.CHAT_SECRET}"}, "result_variable": "look"},
            {"id": "reply", "tool": "respond", "depends_on": ["look"], "args": {"text": "Sunny in ${look.city}.", "extra": [1]}},
            {"id": "each", "tool": "chat.respond", "depends_on": ["reply"], "expand_on": ["a", "b"], "args": {"message": "$each"}},
            {"id": "talk", "depends_on": ["each"], "args": {}, "block": {"entry_point": "say", "nodes": {"say": {"tool": "respond", "args": {"text": 7}}}}},
            {"id": "quiet", "tool": "respond", "depends_on": ["talk"], "args": {}}
        ]}),
    );
    let answer = "Sunny in Paris.\n\na\n\nb\n\n7";
    // Lenient: an extra field, a number for `text`, no field at all are no errors.
    lab.cli()
        .env("CHAT_SECRET", "hunter2-chat")
        .args(["validate", path_str(&plan)])
        .assert()
        .success();
    let output = lab
        .cli()
        .env("CHAT_SECRET", "hunter2-chat")
        .args(["run", path_str(&plan)])
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(output.status.success(), "{stdout}");
    assert!(
        stdout.ends_with(&format!("· run {}\n\n{answer}\n", lab.newest_run_id())),
        "the answer comes last:\n{stdout}"
    );
    let run = lab.newest_run_id();
    let (code, report) = lab.json(&["status", &run, "--json"]);
    assert_eq!(code, 0);
    assert_eq!(report["answer"], json!(answer), "{report}");
    let (code, json_run) = {
        let output = lab
            .cli()
            .env("CHAT_SECRET", "hunter2-chat")
            .args(["run", path_str(&plan), "--json"])
            .output()
            .unwrap();
        (
            output.status.code(),
            serde_json::from_slice::<Value>(&output.stdout).unwrap(),
        )
    };
    assert_eq!(code, Some(0));
    assert_eq!(json_run["answer"], json!(answer));
    let status = lab.cli().args(["status", &run]).output().unwrap();
    assert!(
        String::from_utf8_lossy(&status.stdout).ends_with(&format!("{answer}\n")),
        "status prints it last too"
    );

    // Each call's input as a table, before the call; each answer as it is given.
    let events = lab.cli().args(["events", &run]).output().unwrap();
    let events: Vec<Value> = String::from_utf8_lossy(&events.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let of = |kind: &str| -> Vec<&Value> { events.iter().filter(|e| e["type"] == kind).collect() };
    let deltas = of("assistant.delta");
    // Map items run side by side: theirs come in either order.
    let mut ids: Vec<&str> = deltas
        .iter()
        .map(|e| e["step_id"].as_str().unwrap())
        .collect();
    ids[2..4].sort_unstable();
    assert_eq!(
        ids,
        ["look", "reply", "each-0", "each-1", "talk/say#1", "quiet"]
    );
    let look = deltas[0]["text"].as_str().unwrap();
    assert!(
        look.starts_with("| argument | value |\n|---|---|\n"),
        "{look}"
    );
    assert!(look.contains("| city | Paris |"), "{look}");
    assert!(
        look.contains("[redacted]") && !look.contains("hunter2"),
        "{look}"
    );
    for delta in &deltas {
        let at = |kind: &str| {
            events
                .iter()
                .position(|e| e["type"] == kind && e["step_id"] == delta["step_id"])
                .unwrap()
        };
        assert!(at("assistant.delta") < at("tool.called"), "{delta}");
    }
    let mut finals: Vec<&Value> = of("assistant.final")
        .into_iter()
        .map(|e| &e["text"])
        .collect();
    finals[1..3].sort_by_key(|text| text.to_string());
    assert_eq!(
        finals,
        [
            &json!("Sunny in Paris."),
            &json!("a"),
            &json!("b"),
            &json!("7")
        ]
    );
    // A plan that does not answer has no answer, and streams no inputs.
    let plain = lab.write(
        "plain.json",
        &json!({"steps": [{"id": "e", "tool": "echo", "args": {}}]}),
    );
    let (_, without) = lab.json(&["run", path_str(&plain), "--json"]);
    assert!(without.get("answer").is_none(), "{without}");
    let events = lab.cli().args(["events", "last"]).output().unwrap();
    let events = String::from_utf8_lossy(&events.stdout);
    assert!(
        events.contains("tool.called") && !events.contains("assistant."),
        "{events}"
    );
}
