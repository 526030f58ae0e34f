//! A run of another author's plan keeps that author's policy: whoever resumes it (the CLI, a
//! program, `mcp serve`) holds it to the same rules: its programs stay in its work folder, it
//! stops after the policy's time limit, a policy narrowed since refuses it, and a wider one
//! widens nothing.
#![expect(clippy::unwrap_used, reason = "test helpers fail loudly on purpose")]

use std::time::Duration;

use plan_run::{Author, Decisions, Execution, Policy, Resumable, ResumeOptions, Start, Toolbox};
use plan_store::Store;
use plan_types::{RunReport, TaskStatus};
use serde_json::{Value, json};

mod common;
use common::{ledger, runtime};

/// The operator's own tools: `exec` not confined anywhere (as the CLI has it outside `mcp
/// serve`).
fn toolbox() -> Toolbox {
    Toolbox::new(plan_tools::builtin_registry())
}

/// A client's plan, started under `policy`.
fn start_as_client(
    runtime: &tokio::runtime::Runtime,
    ledger: &std::path::Path,
    plan: &Value,
    policy: &Policy,
) -> RunReport {
    let ready = common::prepare_json(runtime, &plan.to_string()).unwrap_or_else(|e| panic!("{e}"));
    let start = Start {
        author: Author::McpClient,
        policy: Some(policy.clone()),
        ..Start::new()
    };
    runtime
        .block_on(plan_run::start(
            Store::open(ledger).unwrap(),
            ready,
            start,
            Execution::new(),
        ))
        .unwrap()
        .report
}

/// Goes on with `run` as the operator's CLI does: no policy given, the plain toolbox.
fn resume(
    runtime: &tokio::runtime::Runtime,
    ledger: &std::path::Path,
    run: &str,
    options: &ResumeOptions,
) -> Result<RunReport, plan_run::LifecycleError> {
    let store = Store::open(ledger).unwrap();
    let Resumable::Continue(from) = plan_run::prepare_resume(&store, run, options)? else {
        panic!("the run goes on")
    };
    let ready = runtime
        .block_on(from.prepare(&toolbox(), &|_| None))
        .unwrap();
    runtime
        .block_on(plan_run::resume(store, from, ready, Execution::new()))
        .map(|outcome| outcome.report)
}

fn approve(ledger: &std::path::Path, run: &str, step: &str) {
    let mut store = Store::open(ledger).unwrap();
    let registry = plan_tools::builtin_registry();
    let request = Decisions {
        steps: vec![step.to_owned()],
        ..Decisions::default()
    };
    plan_run::approve(&mut store, run, &request, |row| {
        plan_run::gated_steps(row, &registry)
    })
    .unwrap();
}

fn exec_allowed(workdir: &std::path::Path) -> Policy {
    Policy {
        tools: ["exec".to_owned()].into(),
        workdir: workdir.to_path_buf(),
        ..Policy::default()
    }
}

#[test]
fn a_clients_run_resumed_by_the_operator_keeps_its_programs_in_its_work_folder() {
    let runtime = runtime();
    let (dir, ledger) = ledger();
    let workdir = dir.path().join("work");
    std::fs::create_dir(&workdir).unwrap();
    let plan = json!({"steps": [
        {"id": "wait", "tool": "echo", "risk": "high"},
        {"id": "inside", "tool": "exec", "args": {"argv": ["pwd"]}, "depends_on": ["wait"]},
        {"id": "escape", "tool": "exec", "args": {"argv": ["pwd"], "cwd": "/"}, "depends_on": ["wait"]}
    ]});
    let started = start_as_client(&runtime, &ledger, &plan, &exec_allowed(&workdir));
    assert_eq!(started.task_status, TaskStatus::Waiting);
    approve(&ledger, &started.run_id, "wait");

    let report = resume(
        &runtime,
        &ledger,
        &started.run_id,
        &ResumeOptions::default(),
    )
    .unwrap();
    let record = |id: &str| report.records.iter().find(|r| r.step_id == id).unwrap();
    let inside = record("inside");
    assert!(inside.ok, "{inside:?}");
    let printed = inside.result.as_ref().unwrap()["stdout"].as_str().unwrap();
    assert_eq!(
        printed.trim_end(),
        std::fs::canonicalize(&workdir)
            .unwrap()
            .display()
            .to_string()
    );
    let escape = record("escape");
    let error = escape.error.as_ref().unwrap();
    assert!(
        error
            .message
            .contains("outside the folder programs may run in"),
        "{error:?}"
    );
}

#[test]
fn a_clients_run_stops_at_its_policys_time_limit_when_started_and_when_resumed() {
    let runtime = runtime();
    let (dir, ledger) = ledger();
    let policy = Policy {
        max_run_time: Some(Duration::from_millis(300)),
        ..exec_allowed(dir.path())
    };
    let plan =
        json!({"steps": [{"id": "slow", "tool": "exec", "args": {"argv": ["sleep", "30"]}}]});
    let started = start_as_client(&runtime, &ledger, &plan, &policy);
    assert_eq!(started.task_status, TaskStatus::Stopped);
    let resumed = resume(
        &runtime,
        &ledger,
        &started.run_id,
        &ResumeOptions::default(),
    )
    .unwrap();
    assert_eq!(resumed.task_status, TaskStatus::Stopped);
}

#[test]
fn a_policy_narrowed_since_the_start_refuses_the_resume_before_anything_runs() {
    let runtime = runtime();
    let (dir, ledger) = ledger();
    let plan = json!({"steps": [
        {"id": "wait", "tool": "echo", "risk": "high"},
        {"id": "run", "tool": "exec", "args": {"argv": ["true"]}, "depends_on": ["wait"]}
    ]});
    let started = start_as_client(&runtime, &ledger, &plan, &exec_allowed(dir.path()));
    approve(&ledger, &started.run_id, "wait");
    let narrowed = ResumeOptions {
        also: Some(Policy {
            workdir: dir.path().to_path_buf(),
            ..Policy::default()
        }),
        ..ResumeOptions::default()
    };
    let error = resume(&runtime, &ledger, &started.run_id, &narrowed).unwrap_err();
    assert!(error.to_string().contains("calls `exec`"), "{error}");
    let store = Store::open(&ledger).unwrap();
    let recorded = store.records(&started.run_id).unwrap();
    assert!(recorded.iter().all(|r| r.step_id != "run"), "{recorded:?}");
}

#[test]
fn a_wider_policy_at_the_resume_widens_nothing_the_run_was_started_under() {
    let runtime = runtime();
    let (dir, ledger) = ledger();
    let (work, elsewhere) = (dir.path().join("work"), dir.path().join("elsewhere"));
    std::fs::create_dir(&work).unwrap();
    std::fs::create_dir(&elsewhere).unwrap();
    let started_under = Policy {
        max_run_time: Some(Duration::from_millis(300)),
        ..exec_allowed(&work)
    };
    let plan = json!({"steps": [
        {"id": "wait", "tool": "echo", "risk": "high"},
        {"id": "where", "tool": "exec", "args": {"argv": ["pwd"]}, "depends_on": ["wait"]},
        {"id": "slow", "tool": "exec", "args": {"argv": ["sleep", "30"]}, "depends_on": ["where"]}
    ]});
    let started = start_as_client(&runtime, &ledger, &plan, &started_under);
    approve(&ledger, &started.run_id, "wait");
    // Another server, with another folder and a longer limit (hostile review).
    let wider = ResumeOptions {
        also: Some(Policy {
            max_run_time: Some(Duration::from_secs(60)),
            ..exec_allowed(&elsewhere)
        }),
        ..ResumeOptions::default()
    };
    let report = resume(&runtime, &ledger, &started.run_id, &wider).unwrap();
    assert_eq!(
        report.task_status,
        TaskStatus::Stopped,
        "the shorter limit holds"
    );
    let ran = report
        .records
        .iter()
        .find(|r| r.step_id == "where")
        .unwrap();
    let printed = ran.result.as_ref().unwrap()["stdout"].as_str().unwrap();
    assert_eq!(
        printed.trim_end(),
        std::fs::canonicalize(&work).unwrap().display().to_string()
    );
}
