//! What a run keeps from its start and holds to whichever front-end goes on with it: the
//! queue its calls went to (they never run in the resuming process instead) and its state
//! file (kept current again; one that cannot be written is refused before anything is
//! recorded).
#![expect(clippy::unwrap_used, reason = "test helpers fail loudly on purpose")]

use plan_graph::{Format, Source};
use plan_run::{
    Decisions, Execution, LifecycleError, Prepared, Resumable, ResumeOptions, RunSources, Start,
    Strictness, Toolbox,
};
use plan_store::Store;
use plan_types::TaskStatus;

mod common;
use common::{ledger, runtime};

const WAITS: &str = r#"{"id": "p", "steps": [
    {"id": "build", "tool": "echo", "args": {"v": 1}},
    {"id": "deploy", "tool": "echo", "risk": "high", "depends_on": ["build"]}
]}"#;

fn prepare(runtime: &tokio::runtime::Runtime, toolbox: &Toolbox) -> Prepared {
    runtime
        .block_on(plan_run::prepare(
            Source::new("p.json", WAITS),
            Format::Json,
            "p",
            Default::default(),
            toolbox,
            Strictness::RUN,
            &|_| None,
        ))
        .unwrap()
}

/// Starts the plan (it waits on `deploy`), approves `deploy`, and clears the run to go on.
fn waiting_run(
    runtime: &tokio::runtime::Runtime,
    ledger: &std::path::Path,
    start: Start,
    execution: Execution,
) -> Box<plan_run::ResumeFrom> {
    let toolbox = Toolbox::new(plan_tools::builtin_registry());
    let store = Store::open(ledger).unwrap();
    let started = runtime
        .block_on(plan_run::start(
            store,
            prepare(runtime, &toolbox),
            start,
            execution,
        ))
        .unwrap();
    assert_eq!(started.report.task_status, TaskStatus::Waiting);
    let run = started.report.run_id;
    let mut store = Store::open(ledger).unwrap();
    let request = Decisions {
        steps: vec!["deploy".to_owned()],
        ..Decisions::default()
    };
    let registry = plan_tools::builtin_registry();
    plan_run::approve(&mut store, &run, &request, |row| {
        plan_run::gated_steps(row, &registry)
    })
    .unwrap();
    match plan_run::prepare_resume(&store, &run, &ResumeOptions::default()).unwrap() {
        Resumable::Continue(from) => from,
        Resumable::Finished(_) => panic!("the run goes on"),
    }
}

#[test]
fn a_run_whose_calls_went_to_a_queue_does_not_go_on_without_it() {
    let runtime = runtime();
    let (_dir, ledger) = ledger();
    let start = Start {
        sources: RunSources {
            queue: Some(plan_run::QueueSource::of("redis://127.0.0.1:1", "steps")),
            ..RunSources::default()
        },
        ..Start::new()
    };
    let from = waiting_run(&runtime, &ledger, start, Execution::new());
    // An `mcp serve` or a program with the built-ins alone: the run's `deploy` must not be
    // called here instead of on the queue's workers.
    let here = Toolbox::new(plan_tools::builtin_registry());
    let refused = runtime.block_on(from.prepare(&here, &|_| None));
    match refused {
        Err(LifecycleError::Refused(message)) => {
            assert!(message.contains("queue `steps`"), "{message}");
        }
        other => panic!("not refused: {:?}", other.map(|_| ())),
    }
}

#[test]
fn a_resumed_run_keeps_the_state_file_it_was_started_with() {
    let runtime = runtime();
    let (dir, ledger) = ledger();
    let state = dir.path().join("out/execute-state.json");
    std::fs::create_dir_all(state.parent().unwrap()).unwrap();
    let mut execution = Execution::new();
    execution.state_file = Some(state.clone());
    let from = waiting_run(&runtime, &ledger, Start::new(), execution);
    assert!(state.exists(), "the start writes it");
    std::fs::remove_file(&state).unwrap();
    // Resumed with no state file given, as `mcp serve` and `plan-cli resume` do.
    let toolbox = Toolbox::new(plan_tools::builtin_registry());
    let prepared = runtime.block_on(from.prepare(&toolbox, &|_| None)).unwrap();
    let store = Store::open(&ledger).unwrap();
    let done = runtime
        .block_on(plan_run::resume(store, from, prepared, Execution::new()))
        .unwrap();
    assert_eq!(done.report.task_status, TaskStatus::Completed);
    let document: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap();
    assert_eq!(document["status"], "completed", "{document}");
}

#[test]
fn a_state_file_that_cannot_be_written_is_refused_before_a_run_is_recorded() {
    let runtime = runtime();
    let (dir, ledger) = ledger();
    let toolbox = Toolbox::new(plan_tools::builtin_registry());
    let mut execution = Execution::new();
    // A folder is there: writing the document would replace it.
    execution.state_file = Some(dir.path().to_path_buf());
    let refused = runtime.block_on(plan_run::start(
        Store::open(&ledger).unwrap(),
        prepare(&runtime, &toolbox),
        Start::new(),
        execution,
    ));
    assert!(
        matches!(
            refused,
            Err(LifecycleError::StateFileUnusable { kept: false, .. })
        ),
        "{:?}",
        refused.map(|_| ())
    );
    common::assert_no_runs(&ledger);
}

#[test]
fn a_state_file_given_with_the_start_s_sources_is_kept_current_too() {
    let runtime = runtime();
    let (dir, ledger) = ledger();
    let state = dir.path().join("kept.json");
    let start = Start {
        sources: RunSources {
            state_file: Some(state.clone()),
            ..RunSources::default()
        },
        ..Start::new()
    };
    let from = waiting_run(&runtime, &ledger, start, Execution::new());
    assert!(state.exists(), "the start writes it");
    assert_eq!(
        plan_run::sources_of(&from.row).state_file.as_deref(),
        Some(state.as_path()),
        "and keeps it"
    );
}

#[test]
fn a_state_file_given_to_a_resume_is_the_one_the_run_keeps_from_then_on() {
    let runtime = runtime();
    let (dir, ledger) = ledger();
    let first = dir.path().join("first.json");
    let mut execution = Execution::new();
    execution.state_file = Some(first.clone());
    let from = waiting_run(&runtime, &ledger, Start::new(), execution);
    let run = from.row.run_id.clone();
    // Resumed with another file: the run is still waiting for nothing else, so it ends.
    let second = dir.path().join("second.json");
    let toolbox = Toolbox::new(plan_tools::builtin_registry());
    let prepared = runtime.block_on(from.prepare(&toolbox, &|_| None)).unwrap();
    let mut execution = Execution::new();
    execution.state_file = Some(second.clone());
    runtime
        .block_on(plan_run::resume(
            Store::open(&ledger).unwrap(),
            from,
            prepared,
            execution,
        ))
        .unwrap();
    let row = Store::open(&ledger).unwrap().run(&run).unwrap();
    assert_eq!(
        plan_run::sources_of(&row).state_file.as_deref(),
        Some(second.as_path())
    );
    assert!(second.exists());
}

/// A model that answers with the plans it was given, in turn.
struct Scripted(Vec<serde_json::Value>);

impl plan_llm::Model for Scripted {
    fn answer<'a>(
        &'a mut self,
        _messages: &'a [serde_json::Value],
        _schema: &'a serde_json::Value,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<String, plan_llm::LlmError>> + Send + 'a>,
    > {
        let answer = self.0.remove(0).to_string();
        Box::pin(async move { Ok(answer) })
    }
}

#[test]
fn a_run_that_fails_for_good_is_re_planned_and_goes_on_to_its_end() {
    let runtime = runtime();
    let (_dir, ledger_path) = ledger();
    let toolbox = Toolbox::new(plan_tools::builtin_registry());
    let text = r#"{"id": "p", "steps": [
        {"id": "prepare", "tool": "echo", "args": {"v": 1}},
        {"id": "fetch", "tool": "fail", "args": {"message": "mirror down"}, "depends_on": ["prepare"]}
    ]}"#;
    let prepared = runtime
        .block_on(plan_run::prepare(
            Source::new("p.json", text),
            Format::Json,
            "p",
            Default::default(),
            &toolbox,
            Strictness::RUN,
            &|_| None,
        ))
        .unwrap();
    let failed = runtime
        .block_on(plan_run::start(
            Store::open(&ledger_path).unwrap(),
            prepared,
            Start::new(),
            Execution::new(),
        ))
        .unwrap();
    assert_eq!(failed.report.task_status, TaskStatus::Failed);
    let mut model = Scripted(vec![serde_json::json!({"steps": [
        {"id": "fallback", "tool": "echo", "args": {"v": 2}, "depends_on": ["prepare"]}
    ]})]);
    let policy = plan_run::Policy::default();
    let replanning = plan_run::Replanning {
        secrets: &[],
        policy: &policy,
    };
    let mut replanner = plan_run::Replanner::new(2, &mut model, replanning);
    let ledger = plan_run::Ledger::new(Some(&ledger_path), None);
    let (mut parts, mut heard) = (0, Vec::new());
    let done = runtime
        .block_on(replanner.run_to_end(
            failed,
            &ledger,
            &toolbox,
            &|_| None,
            &mut |_| {
                parts += 1;
                Execution::new()
            },
            &mut |replanned| heard.push(replanned.revision),
        ))
        .unwrap();
    assert_eq!(done.report.task_status, TaskStatus::Completed);
    assert_eq!(
        (parts, heard),
        (1, vec![1]),
        "one re-plan, one part that went on"
    );
    assert_eq!(done.report.revisions, 1);
    let ids: Vec<&str> = done
        .report
        .records
        .iter()
        .map(|r| r.step_id.as_str())
        .collect();
    assert!(
        ids.contains(&"fetch") && ids.contains(&"fallback"),
        "{ids:?}"
    );
}
