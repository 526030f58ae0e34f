//! The run lifecycle from a program, with the `plan-run` library alone (no CLI): start a plan
//! whose deploy step needs an approval, see the run wait, approve the step, resume the run.
//!
//! `cargo run -p plan-run --example approve_and_resume [LEDGER]` (a temporary ledger by
//! default). The crate's tests run it too.

use plan_run::{
    Decisions, Execution, PlanText, Prepared, Resumable, ResumeOptions, Strictness, Toolbox,
};
use plan_store::Store;
use plan_types::TaskStatus;

const PLAN: &str = r#"{
  "id": "deploy",
  "steps": [
    {"id": "build", "tool": "echo", "args": {"artifact": "app-1.2.tar"}, "binds": {"artifact": "$.artifact"}},
    {"id": "deploy", "tool": "echo", "args": {"deploying": "${artifact}"}, "depends_on": ["build"], "risk": "high"},
    {"id": "notify", "tool": "echo", "args": {"message": "deployed"}, "depends_on": ["deploy"]}
  ]
}"#;

/// Loads, validates and compiles the plan against the built-in tools, as every front-end of
/// plan-cli does.
async fn prepare(text: &str) -> Result<Prepared, plan_run::PrepareError> {
    let toolbox = Toolbox::new(plan_tools::builtin_registry());
    let no_env = |_: &str| None;
    let plan = PlanText::json("deploy.json", text, "deploy");
    plan_run::prepare(plan, Default::default(), &toolbox, Strictness::RUN, &no_env).await
}

/// Starts, approves and resumes; returns the final status.
pub(crate) fn run(ledger: &std::path::Path) -> Result<TaskStatus, Box<dyn std::error::Error>> {
    // Deep stacks, as plan-cli gives its runtime: conditions and data expressions are
    // evaluated where 32 MiB of stack are left (plan-engine's crate docs).
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(plan_types::json::VALUE_THREAD_STACK)
        .build()?;

    // 1. Start: `build` runs, `deploy` waits for its approval, `notify` waits for `deploy`.
    let prepared = runtime.block_on(prepare(PLAN))?;
    let store = Store::open(ledger)?;
    let started = runtime.block_on(plan_run::start(
        store,
        prepared,
        plan_run::Start::new(),
        Execution::new(),
    ))?;
    let run_id = started.report.run_id.clone();
    println!("run {run_id}: {}", started.report.task_status);
    for pending in &started.report.pending_approvals {
        println!(
            "  waiting for approval: {} {:?}",
            pending.step_id, pending.args
        );
    }

    // 2. Approve `deploy` (checked against the run's high-risk steps).
    let mut store = Store::open(ledger)?;
    let registry = plan_tools::builtin_registry();
    let decided = plan_run::approve(
        &mut store,
        &run_id,
        &Decisions {
            steps: vec!["deploy".to_owned()],
            ..Decisions::default()
        },
        |row| plan_run::gated_steps(row, &registry),
    )?;
    println!(
        "approved {:?}; still waiting: {:?}",
        decided.decided, decided.still_waiting
    );

    // 3. Resume: `build` is not run again, `deploy` and `notify` run.
    let from = match plan_run::prepare_resume(&store, &run_id, &ResumeOptions::default())? {
        Resumable::Continue(from) => from,
        Resumable::Finished(outcome) => return Ok(outcome.report.task_status),
    };
    let prepared = runtime.block_on(prepare(from.source.text()))?;
    let resumed = runtime.block_on(plan_run::resume(store, from, prepared, Execution::new()))?;
    for record in &resumed.report.records {
        println!(
            "  {} ok={} result={:?}",
            record.step_id, record.ok, record.result
        );
    }
    println!("run {run_id}: {}", resumed.report.task_status);
    Ok(resumed.report.task_status)
}

#[allow(dead_code, reason = "the tests call `run`, not `main`")]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let ledger = std::env::args_os()
        .nth(1)
        .map_or_else(|| dir.path().join("state.db"), std::path::PathBuf::from);
    let status = run(&ledger)?;
    if status != TaskStatus::Completed {
        return Err(format!("the run ended {status}").into());
    }
    Ok(())
}
