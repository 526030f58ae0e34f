//! What a front-end lists and shows of the ledger's runs, through plan-run alone: plans prepared
//! with `prepare` (unknown inputs found, bad ones refused with every problem), runs listed by
//! `runs` with their filters, and a step's records picked by `records_of`.
#![expect(clippy::unwrap_used, reason = "test helpers fail loudly on purpose")]

use plan_run::{Execution, Inputs, PrepareError, Prepared, RunFilter, Start, Strictness, Toolbox};
use plan_store::Store;
use plan_types::TaskStatus;
use serde_json::{Value, json};

mod common;
use common::{ledger, runtime};

fn prepare(
    runtime: &tokio::runtime::Runtime,
    plan: &Value,
    inputs: Inputs,
) -> Result<Prepared, PrepareError> {
    let toolbox = Toolbox::new(plan_tools::builtin_registry());
    runtime.block_on(plan_run::prepare(
        plan_run::PlanText::json("plan.json", plan.to_string(), "fallback"),
        inputs,
        &toolbox,
        Strictness::RUN,
        &|_| None,
    ))
}

fn run(runtime: &tokio::runtime::Runtime, ledger: &std::path::Path, plan: &Value) -> TaskStatus {
    let prepared = prepare(runtime, plan, Inputs::default()).unwrap();
    let store = Store::open(ledger).unwrap();
    runtime
        .block_on(plan_run::start(
            store,
            prepared,
            Start::new(),
            Execution::new(),
        ))
        .unwrap()
        .report
        .task_status
}

#[test]
fn preparing_finds_unused_inputs_types_text_and_reports_every_problem() {
    let runtime = runtime();
    let plan = json!({"id": "p", "variables": {"count": 1, "name": "x"},
        "steps": [{"id": "a", "tool": "echo", "args": {"n": "${count}", "who": "${name}"}}]});
    let inputs = Inputs {
        text: vec![
            ("count".to_owned(), "3".to_owned()),
            ("nmae".to_owned(), "y".to_owned()),
        ],
        check_names: true,
        ..Inputs::default()
    };
    let prepared = prepare(&runtime, &plan, inputs).unwrap();
    assert_eq!(prepared.inputs["count"], json!(3), "typed by the default");
    assert_eq!(prepared.unused_inputs.len(), 1);
    assert_eq!(prepared.unused_inputs[0].name, "nmae");
    assert_eq!(prepared.unused_inputs[0].near.as_deref(), Some("name"));

    let not_json = Inputs {
        text: vec![("count".to_owned(), "three".to_owned())],
        ..Inputs::default()
    };
    assert!(matches!(
        prepare(&runtime, &plan, not_json),
        Err(PrepareError::NotJson { ref name, .. }) if name == "count"
    ));

    // An unknown tool and a cycle: both, at once.
    let broken = json!({"steps": [
        {"id": "a", "tool": "no_such_tool"},
        {"id": "b", "tool": "echo", "depends_on": ["c"]},
        {"id": "c", "tool": "echo", "depends_on": ["b"]}
    ]});
    let Err(PrepareError::Invalid(problems)) = prepare(&runtime, &broken, Inputs::default()) else {
        panic!("the plan is not valid")
    };
    assert_eq!(problems.errors(), 2, "{:?}", problems.issues);
}

#[test]
fn runs_are_listed_newest_first_and_filtered() {
    let runtime = runtime();
    let (_dir, ledger) = ledger();
    let good = json!({"id": "good", "steps": [{"id": "a", "tool": "echo", "args": {"x": 1}}]});
    let bad =
        json!({"id": "bad", "steps": [{"id": "a", "tool": "fail", "args": {"message": "no"}}]});
    assert_eq!(run(&runtime, &ledger, &good), TaskStatus::Completed);
    assert_eq!(run(&runtime, &ledger, &bad), TaskStatus::Failed);
    assert_eq!(run(&runtime, &ledger, &good), TaskStatus::Completed);

    let mut store = Store::open(&ledger).unwrap();
    let all = plan_run::runs(&mut store, &RunFilter::default()).unwrap();
    let plans: Vec<&str> = all.iter().map(|r| r.plan_id.as_str()).collect();
    assert_eq!(plans, ["good", "bad", "good"], "newest first");
    assert!(all.iter().all(|r| r.finished_at.is_some()));

    let failed = RunFilter {
        status: Some(TaskStatus::Failed),
        ..RunFilter::default()
    };
    let listed = plan_run::runs(&mut store, &failed).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].plan_id, "bad");

    let newest_good = RunFilter {
        plan: Some("good".to_owned()),
        limit: Some(1),
        ..RunFilter::default()
    };
    let listed = plan_run::runs(&mut store, &newest_good).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].run_id, all[0].run_id);
    // As `runs --json` prints it.
    let json = serde_json::to_value(&listed[0]).unwrap();
    let keys: Vec<&String> = json.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "run_id",
            "plan_id",
            "task_status",
            "started_at",
            "finished_at",
            "duration_ms",
            "counts"
        ]
    );
    // How its steps ended, kept as it ended.
    assert_eq!(
        json["counts"],
        serde_json::json!({"ok": 1, "failed": 0, "skipped": 0})
    );
}

#[test]
fn a_step_s_records_are_its_own_its_items_and_the_calls_inside_it() {
    let runtime = runtime();
    let (_dir, ledger) = ledger();
    let plan = json!({"id": "p", "steps": [
        {"id": "each", "tool": "echo", "expand_on": [1, 2], "args": {"n": "${each}"}},
        {"id": "each2", "tool": "echo", "args": {}},
        {"id": "other", "tool": "echo", "args": {}}
    ]});
    assert_eq!(run(&runtime, &ledger, &plan), TaskStatus::Completed);
    let store = Store::open(&ledger).unwrap();
    let row = store.run("last").unwrap();
    let report = plan_run::report(&store, &row).unwrap();
    let plan = plan_run::plan_of(&row).unwrap();
    let ids = |step: Option<&str>| -> Vec<String> {
        plan_run::records_of(&report, &plan, step)
            .iter()
            .map(|r| r.step_id.clone())
            .collect()
    };
    assert_eq!(ids(Some("each")), ["each-0", "each-1", "each"]);
    assert_eq!(ids(Some("each-1")), ["each-1"], "one item");
    assert_eq!(ids(Some("nothing")), Vec::<String>::new());
    let everything = ids(None);
    assert!(everything.iter().all(|id| id != plan_types::META_STEP_ID));
    assert!(everything.contains(&"other".to_owned()));
}

#[test]
fn a_preview_is_refused_before_a_run_is_recorded() {
    let runtime = runtime();
    let (_dir, ledger) = ledger();
    let plan = json!({"id": "p", "steps": [{"id": "a", "tool": "echo", "args": {}}]});
    let prepared = prepare(&runtime, &plan, Inputs::default()).unwrap();
    let start = Start {
        mode: plan_engine::Mode::Preview,
        ..Start::new()
    };
    let refused = runtime.block_on(plan_run::start(
        Store::open(&ledger).unwrap(),
        prepared,
        start,
        Execution::new(),
    ));
    assert!(matches!(refused, Err(plan_run::LifecycleError::Refused(_))));
    common::assert_no_runs(&ledger);
}

#[test]
fn text_without_a_file_name_is_json_only_when_it_is_one_json_object() {
    use plan_graph::Format;
    assert_eq!(plan_run::format_of_text("  {\"steps\": []}"), Format::Json);
    // A YAML flow mapping starts with `{` too.
    assert_eq!(plan_run::format_of_text("{steps: []}"), Format::Yaml);
    assert_eq!(plan_run::format_of_text("steps: []\n"), Format::Yaml);
}

#[test]
fn an_event_feed_ends_with_the_run_and_when_its_process_died() {
    let runtime = runtime();
    let (_dir, ledger) = ledger();
    let plan = json!({"id": "p", "steps": [{"id": "a", "tool": "echo", "args": {}}]});
    assert_eq!(run(&runtime, &ledger, &plan), TaskStatus::Completed);
    let mut store = Store::open(&ledger).unwrap();
    let finished = plan_run::runs(&mut store, &RunFilter::default()).unwrap()[0]
        .run_id
        .clone();
    let mut feed = plan_run::EventFeed::new(&finished);
    let first = feed.next(&mut store).unwrap();
    assert!(first.over);
    let kinds: Vec<plan_types::EventKind> = first.events.iter().map(|e| e.kind).collect();
    assert_eq!(kinds.first(), Some(&plan_types::EventKind::RunStarted));
    assert_eq!(kinds.last(), Some(&plan_types::EventKind::RunFinished));
    assert!(
        feed.next(&mut store).unwrap().events.is_empty(),
        "read once"
    );

    // A run marked running whose process is gone (kill -9) adds nothing more until resumed.
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let pid = gone.id();
    gone.wait().unwrap();
    store
        .begin_run(&plan_store::NewRun {
            run_id: "killed",
            plan_id: "p",
            plan_name: "plan.json",
            plan_format: "json",
            plan_source: &plan.to_string(),
            inputs: &serde_json::Map::new(),
            options: &json!({}),
            owner_pid: pid,
            started_at: "2026-11-26T00:00:00.000Z",
        })
        .unwrap();
    let batch = plan_run::EventFeed::new("killed").next(&mut store).unwrap();
    assert!(batch.over, "a dead process's run is over for its feed");
}
