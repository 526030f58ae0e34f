//! What a run keeps from its start and holds to whichever front-end goes on with it: the
//! queue its calls went to (they never run in the resuming process instead) and its state
//! file (kept current again; one that cannot be written is refused before anything is
//! recorded).
#![expect(clippy::unwrap_used, reason = "test helpers fail loudly on purpose")]

use plan_graph::Format;
use plan_run::{
    Decisions, Execution, LifecycleError, Prepared, Resumable, ResumeOptions, RunSources, Start,
    Toolbox,
};
use plan_store::Store;
use plan_types::TaskStatus;

mod common;
use common::{Scripted, ledger, runtime};

const WAITS: &str = r#"{"id": "p", "steps": [
    {"id": "build", "tool": "echo", "args": {"v": 1}},
    {"id": "deploy", "tool": "echo", "risk": "high", "depends_on": ["build"]}
]}"#;

fn prepare(runtime: &tokio::runtime::Runtime) -> Prepared {
    common::prepare_json(runtime, WAITS).unwrap()
}

/// Starts the plan (it waits on `deploy`), approves `deploy`, and clears the run to go on.
fn waiting_run(
    runtime: &tokio::runtime::Runtime,
    ledger: &std::path::Path,
    start: Start,
    execution: Execution,
) -> Box<plan_run::ResumeFrom> {
    let store = Store::open(ledger).unwrap();
    let started = runtime
        .block_on(plan_run::start(store, prepare(runtime), start, execution))
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
    let mut execution = Execution::new();
    // A folder is there: writing the document would replace it.
    execution.state_file = Some(dir.path().to_path_buf());
    let refused = runtime.block_on(plan_run::start(
        Store::open(&ledger).unwrap(),
        prepare(&runtime),
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

#[test]
fn a_run_that_fails_for_good_is_re_planned_and_goes_on_to_its_end() {
    let runtime = runtime();
    let (_dir, ledger_path) = ledger();
    let toolbox = Toolbox::new(plan_tools::builtin_registry());
    let text = r#"{"id": "p", "steps": [
        {"id": "prepare", "tool": "echo", "args": {"v": 1}},
        {"id": "fetch", "tool": "fail", "args": {"message": "mirror down"}, "depends_on": ["prepare"]}
    ]}"#;
    let prepared = common::prepare_json(&runtime, text).unwrap();
    let failed = runtime
        .block_on(plan_run::start(
            Store::open(&ledger_path).unwrap(),
            prepared,
            Start::new(),
            Execution::new(),
        ))
        .unwrap();
    assert_eq!(failed.report.task_status, TaskStatus::Failed);
    let mut model = Scripted {
        name: "a scripted model",
        answers: vec![serde_json::json!({"steps": [
            {"id": "fallback", "tool": "echo", "args": {"v": 2}, "depends_on": ["prepare"]}
        ]})],
    };
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

#[test]
fn a_plan_from_a_goal_is_judged_then_stored_under_its_author_never_over_anothers() {
    let runtime = runtime();
    let (dir, _) = ledger();
    let ledger = plan_run::Ledger::new(Some(&dir.path().join("state.db")), None);
    let toolbox = Toolbox::new(plan_tools::builtin_registry());
    // The operator's own plan holds the id the model picks.
    let mine = plan_run::stored_plan(
        "deploy",
        None,
        "deploy.json".to_owned(),
        Format::Json,
        "{\"steps\": []}".to_owned(),
        plan_run::Author::Operator,
    );
    ledger.open().unwrap().add_plan(&mine, false).unwrap();
    // The first answer calls a tool the model's policy does not allow: it is told, and asked
    // again.
    let exec = serde_json::json!({"id": "deploy", "steps": [
        {"id": "go", "tool": "exec", "args": {"argv": ["true"]}}]});
    let echo = serde_json::json!({"id": "deploy", "steps": [
        {"id": "go", "tool": "echo", "args": {"v": 1}}]});
    let mut model = Scripted {
        answers: vec![exec, echo],
        name: "tiny-model",
    };
    let goal = plan_run::Goal::new("deploy the app", plan_run::Author::Model);
    let plan_run::NewPlan { plan_id: id, plan } = runtime
        .block_on(plan_run::plan_from_goal(
            &mut model,
            &goal,
            &toolbox,
            &plan_run::Policy::default(),
            &ledger,
        ))
        .unwrap();
    assert_eq!(id, "deploy-2", "the operator's `deploy` is never replaced");
    assert_eq!(plan["steps"][0]["tool"], "echo");
    let store = ledger.open_reader().unwrap();
    let stored = store.find_plan("deploy-2").unwrap().unwrap();
    assert_eq!(stored.author, "model");
    assert_eq!(stored.name, "created from a goal by tiny-model");
    assert_eq!(
        store.find_plan("deploy").unwrap().unwrap().author,
        "operator"
    );
    // Out of tries: the model's last problems, as a typed error; nothing stored.
    let mut stubborn = Scripted {
        answers: vec![serde_json::json!({"steps": [{"id": "x"}]}); 3],
        name: "tiny-model",
    };
    let goal = plan_run::Goal {
        max_retries: 1,
        ..plan_run::Goal::new("other", plan_run::Author::Model)
    };
    let refused = runtime.block_on(plan_run::plan_from_goal(
        &mut stubborn,
        &goal,
        &toolbox,
        &plan_run::Policy::default(),
        &ledger,
    ));
    assert!(
        matches!(refused, Err(LifecycleError::Generate(_))),
        "{refused:?}"
    );
    assert!(store.find_plan("other").unwrap().is_none());
}

#[test]
fn what_a_stored_run_kept_is_what_its_commands_go_on_with() {
    let runtime = runtime();
    let (dir, ledger_path) = ledger();
    let ledger = plan_run::Ledger::new(Some(&ledger_path), None);
    let config = dir.path().join("mcp.json");
    let start = Start {
        working_dir: Some(dir.path().display().to_string()),
        sources: RunSources {
            mcp_config: Some(config.clone()),
            ..RunSources::default()
        },
        ..Start::new()
    };
    let started = runtime
        .block_on(plan_run::start(
            Store::open(&ledger_path).unwrap(),
            prepare(&runtime),
            start,
            Execution::new(),
        ))
        .unwrap();
    let kept = plan_run::Kept::of(&ledger, "last").unwrap();
    assert_eq!(kept.run_id.as_deref(), Some(&*started.report.run_id));
    assert_eq!(kept.working_dir.as_deref(), Some(dir.path()));
    // Its own configuration, unless one is given; the project's only for a run that kept none.
    assert_eq!(kept.mcp_config(None, None), Some(config.clone()));
    let given = dir.path().join("other.json");
    assert_eq!(kept.mcp_config(Some(given.clone()), None), Some(given));
    assert_eq!(kept.folder(None).unwrap().as_deref(), Some(dir.path()));
    let sub = dir.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    assert_eq!(
        kept.folder(Some(&sub)).unwrap(),
        Some(sub.canonicalize().unwrap())
    );
    assert!(kept.folder(Some(&dir.path().join("none"))).is_err());
    // An unknown run, or no ledger: nothing kept (the command says what is wrong).
    let unknown = plan_run::Kept::of(&ledger, "01NOSUCHRUN").unwrap();
    assert_eq!(
        (unknown.sources, unknown.working_dir),
        (RunSources::default(), None)
    );
    let none = plan_run::Kept::of(
        &plan_run::Ledger::new(Some(&dir.path().join("no.db")), None),
        "x",
    )
    .unwrap();
    assert_eq!(none.working_dir, None);
    // A ledger that is there but cannot be read is said, not taken for one that kept nothing
    // (the run would go on in another folder, with other tools).
    let foreign = dir.path().join("foreign.db");
    std::fs::write(&foreign, "not a ledger, but a file someone wrote").unwrap();
    let unreadable = plan_run::Kept::of(&plan_run::Ledger::new(Some(&foreign), None), "last");
    assert!(unreadable.is_err(), "{unreadable:?}");
}
