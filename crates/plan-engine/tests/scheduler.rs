//! The scheduler against small in-test tools; time is tokio's paused clock, so timings are exact.
#![expect(clippy::unwrap_used, reason = "test helpers fail loudly on purpose")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use plan_engine::{Program, Registry, RunOptions, Tool, ToolContext, ToolError, ToolInfo, run};
use plan_graph::{Format, LoadOptions, Source, load};
use plan_types::{EventKind, RunReport, TaskStatus};
use serde_json::{Value, json};
use tokio::time::Instant;

mod common;

use common::*;

#[tokio::test(start_paused = true)]
async fn a_step_starts_when_its_own_dependencies_finish_not_its_level() {
    let h = Harness::new();
    // c needs only a (10 ms); b takes 100 ms. Batch execution would start c at 100 ms.
    let report = h.run(json!({"steps": [step("a", 10, &[]), step("b", 100, &[]), step("c", 10, &["a"]), step("d", 10, &["b", "c"])]})).await;
    assert_eq!(report.task_status, TaskStatus::Completed);
    assert_eq!(
        h.starts(),
        [
            ("a".into(), 0),
            ("b".into(), 0),
            ("c".into(), 10),
            ("d".into(), 100)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn the_makespan_is_the_critical_path() {
    let h = Harness::new();
    let start = Instant::now();
    h.run_with(
        json!({"steps": [step("1", 50, &[]), step("2", 200, &["1"]), step("3", 100, &["1"]), step("4", 50, &["2", "3"])]}),
        |o| o.max_concurrency = Some(8),
    )
    .await;
    assert_eq!(start.elapsed().as_millis(), 300);
}

#[tokio::test(start_paused = true)]
async fn max_concurrency_bounds_running_steps() {
    let h = Harness::new();
    let steps: Vec<Value> = (0..20).map(|i| step(&format!("s{i}"), 10, &[])).collect();
    let report = h
        .run_with(json!({"max_concurrency": 8, "steps": steps}), |o| {
            o.max_concurrency = Some(3)
        })
        .await;
    assert_eq!(report.task_status, TaskStatus::Completed);
    assert_eq!(
        h.log.most_running.load(Ordering::SeqCst),
        3,
        "the option wins over the plan"
    );

    let h = Harness::new();
    let steps: Vec<Value> = (0..20).map(|i| step(&format!("s{i}"), 10, &[])).collect();
    h.run(json!({"max_concurrency": 5, "steps": steps})).await;
    assert_eq!(
        h.log.most_running.load(Ordering::SeqCst),
        5,
        "the plan's limit applies"
    );

    let h = Harness::new();
    let steps: Vec<Value> = (0..20).map(|i| step(&format!("s{i}"), 10, &[])).collect();
    h.run(json!({"steps": steps})).await;
    assert_eq!(
        h.log.most_running.load(Ordering::SeqCst),
        4,
        "the default is 4"
    );
}

#[tokio::test(start_paused = true)]
async fn with_one_at_a_time_ready_steps_run_in_plan_order() {
    let h = Harness::new();
    let report = h
        .run_with(
            json!({"steps": [step("z", 10, &["y"]), step("x", 10, &[]), step("y", 10, &[]), step("w", 10, &["x"])]}),
            |o| o.max_concurrency = Some(1),
        )
        .await;
    let order: Vec<String> = h.starts().into_iter().map(|(id, _)| id).collect();
    // Ready at first: x, y (plan order x then y). After x: w becomes ready, but y was ready
    // first and comes earlier in the plan... ready steps always go in plan order: y (2) < w (3).
    assert_eq!(order, ["x", "y", "z", "w"]);
    let ids: Vec<&str> = report.records.iter().map(|r| r.step_id.as_str()).collect();
    assert_eq!(
        ids,
        ["z", "x", "y", "w", "__meta__"],
        "records in plan order"
    );
}

#[tokio::test(start_paused = true)]
async fn records_come_in_plan_order_whatever_finishes_first() {
    let h = Harness::new();
    let report = h
        .run(
            json!({"steps": [step("slow", 300, &[]), step("mid", 200, &[]), step("fast", 1, &[])]}),
        )
        .await;
    let ids: Vec<&str> = report.records.iter().map(|r| r.step_id.as_str()).collect();
    assert_eq!(ids, ["slow", "mid", "fast", "__meta__"]);
}

#[tokio::test(start_paused = true)]
async fn seed_000_failure_skip_and_meta_semantics() {
    let h = Harness::new();
    let report = h
        .run(json!({"steps": [
            {"id": "step_1", "tool": "work"},
            {"id": "step_2", "tool": "work", "args": {"fail_times": 9, "retryable": false}},
            {"id": "step_3", "tool": "work", "depends_on": ["step_2"]},
            {"id": "step_4", "tool": "work", "depends_on": ["step_3", "step_1"]},
        ]}))
        .await;
    assert_eq!(
        summary(&report),
        [
            row("step_1", true, false, None),
            row("step_2", false, false, Some("E_TOOL")),
            row(
                "step_3",
                false,
                true,
                Some(r#"dependency not satisfied: ["step_2"]"#)
            ),
            row(
                "step_4",
                false,
                true,
                Some(r#"dependency not satisfied: ["step_3"]"#)
            ),
            row(
                "__meta__",
                false,
                false,
                Some("one or more steps failed; task_status=FAILED")
            ),
        ]
    );
    assert_eq!(report.task_status, TaskStatus::Failed);
    assert_eq!(
        report.records[1].error.as_ref().unwrap().message,
        "failed on attempt 1"
    );
    assert_eq!(report.records[1].attempts, 1, "not retryable: one attempt");
}

#[tokio::test(start_paused = true)]
async fn unknown_dependencies_block_the_run() {
    let h = Harness::new();
    let report = h
        .run(json!({"steps": [
            {"id": "a", "tool": "work"},
            {"id": "b", "tool": "work", "args": {"fail_times": 1, "retryable": false}},
            {"id": "c", "tool": "work", "depends_on": ["a", "ghost", "phantom"]},
            {"id": "d", "tool": "work", "depends_on": ["c"]},
        ]}))
        .await;
    assert_eq!(
        summary(&report),
        [
            row("a", true, false, None),
            row("b", false, false, Some("E_TOOL")),
            row(
                "c",
                false,
                false,
                Some(r#"unknown dependency: ["ghost","phantom"]"#)
            ),
            row("d", false, true, Some(r#"dependency not satisfied: ["c"]"#)),
            row(
                "__meta__",
                false,
                false,
                Some("one or more steps depend on unknown steps; task_status=BLOCKED")
            ),
        ]
    );
    assert_eq!(
        report.task_status,
        TaskStatus::Blocked,
        "BLOCKED wins over FAILED"
    );
    assert_eq!(report.task_status.exit_code(), 4);
}

#[tokio::test(start_paused = true)]
async fn retryable_errors_retry_with_backoff_and_others_do_not() {
    let h = Harness::new();
    let start = Instant::now();
    let report = h
        .run(json!({"steps": [
            {"id": "flaky", "tool": "work", "args": {"fail_times": 2}, "retry": {"attempts": 3, "backoff_ms": 100, "jitter": "none"}},
            {"id": "hopeless", "tool": "work", "args": {"fail_times": 9}, "retry": {"attempts": 2, "backoff_ms": 10, "jitter": "none"}},
            {"id": "bad_args", "tool": "work", "args": {"fail_times": 9, "code": "E_ARGS_INVALID"}},
        ]}))
        .await;
    assert_eq!(report.records[0].attempts, 3);
    assert!(report.records[0].ok);
    assert_eq!(
        start.elapsed().as_millis(),
        300,
        "100 ms then 200 ms of backoff"
    );
    assert_eq!(report.records[1].attempts, 2);
    assert_eq!(
        report.records[1].error.as_ref().unwrap().message,
        "failed on attempt 2"
    );
    assert_eq!(
        report.records[2].attempts, 1,
        "E_ARGS_INVALID never retries"
    );
    let mut retrying: Vec<(String, u32, Option<u64>)> = h
        .events
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e.kind == EventKind::StepRetrying)
        .map(|e| {
            (
                e.step_id.as_deref().unwrap().to_owned(),
                e.attempt,
                e.delay_ms,
            )
        })
        .collect();
    retrying.sort();
    assert_eq!(
        retrying,
        [
            ("flaky".into(), 2, Some(100)),
            ("flaky".into(), 3, Some(200)),
            ("hopeless".into(), 2, Some(10))
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn timeouts_cancel_the_attempt_and_retry() {
    let h = Harness::new();
    let report = h
        .run(json!({"steps": [
            {"id": "slow", "tool": "work", "args": {"ms": 1000}, "timeout_ms": 50, "retry": {"attempts": 2, "backoff_ms": 1, "jitter": "none"}},
        ]}))
        .await;
    let record = &report.records[0];
    assert_eq!(record.error.as_ref().unwrap().code, "E_TIMEOUT");
    assert_eq!(
        record.error.as_ref().unwrap().message,
        "the attempt took longer than 50 ms and was cancelled"
    );
    assert_eq!(record.attempts, 2);
}

#[tokio::test(start_paused = true)]
async fn binds_feed_later_steps_and_unresolved_placeholders_fail_without_calling() {
    let h = Harness::new();
    let report = h
        .run(json!({
            "variables": {"who": "ada"},
            "steps": [
                {"id": "a", "tool": "work", "args": {"name": "${who}", "n": 2}, "result_variable": "first", "binds": {"n": "$.args.n"}},
                {"id": "b", "tool": "work", "args": {"greeting": "hi ${first.args.name} x${n}", "whole": "${first.args}"}, "depends_on": ["a"]},
                {"id": "c", "tool": "work", "args": {"x": "${first.nope}"}, "depends_on": ["a"]},
                {"id": "d", "tool": "work", "binds": {"z": "$.missing"}},
            ]
        }))
        .await;
    assert_eq!(
        report.records[1].result.as_ref().unwrap()["args"],
        json!({"greeting": "hi ada x2", "whole": {"name": "ada", "n": 2}})
    );
    let c = report.records[2].error.as_ref().unwrap();
    assert_eq!(
        (c.code.as_str(), c.message.as_str()),
        (
            "E_ARGS_UNRESOLVED",
            "`${first.nope}`: `first` has no field `nope`; it has `args`, `key`"
        )
    );
    assert_eq!(report.records[2].attempts, 0);
    assert!(
        !h.log.calls.lock().unwrap().iter().any(|c| c.0 == "c"),
        "c's tool was never called"
    );
    let d = report.records[3].error.as_ref().unwrap();
    assert_eq!(d.code, "E_BIND_UNRESOLVED");
    assert_eq!(*report.variables["n"], json!(2));
    assert_eq!(*report.variables["who"], json!("ada"));
    assert_eq!(
        report.records[0].result.as_ref().unwrap()["key"],
        json!("run1/a"),
        "idempotency key"
    );
}

#[tokio::test(start_paused = true)]
async fn inputs_override_plan_variables() {
    let h = Harness::new();
    let report = h
        .run_with(json!({"variables": {"who": "plan"}, "steps": [{"id": "a", "tool": "work", "args": {"w": "${who}"}}]}), |o| {
            o.inputs.insert("who".into(), json!("cli"));
        })
        .await;
    assert_eq!(
        report.records[0].result.as_ref().unwrap()["args"]["w"],
        json!("cli")
    );
}

#[tokio::test(start_paused = true)]
async fn a_panicking_tool_fails_only_its_step() {
    let h = Harness::new();
    let report = h.run(json!({"steps": [{"id": "boom", "tool": "work", "args": {"panic": true}}, step("fine", 5, &[])]})).await;
    assert_eq!(
        report.records[0].error.as_ref().unwrap().message,
        "the tool panicked"
    );
    assert!(report.records[1].ok);
}

#[tokio::test(start_paused = true)]
async fn cancelling_stops_running_tools_and_starts_nothing_new() {
    let h = Harness::new();
    let cancel = tokio_util::sync::CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        trigger.cancel();
    });
    let report = h
        .run_with(
            json!({"steps": [step("long", 1000, &[]), step("after", 10, &["long"])]}),
            |o| o.cancel = cancel,
        )
        .await;
    assert_eq!(
        report.records[0].error.as_ref().unwrap().code,
        "E_CANCELLED"
    );
    assert_eq!(
        report.records[1].reason.as_deref(),
        Some(r#"dependency not satisfied: ["long"]"#)
    );
}

#[tokio::test(start_paused = true)]
async fn events_tell_the_story_of_a_step() {
    let h = Harness::new();
    h.run(json!({"steps": [{"id": "a", "tool": "work", "args": {"fail_times": 1}, "retry": {"backoff_ms": 1}}, {"id": "b", "tool": "work", "depends_on": ["zzz"]}]})).await;
    let events = h.events.0.lock().unwrap();
    let story: Vec<(&str, Option<&str>, u32)> = events
        .iter()
        .map(|e| {
            let kind = serde_json::to_value(e.kind).unwrap();
            (
                kind.as_str().unwrap().to_owned().leak() as &str,
                e.step_id.as_deref(),
                e.attempt,
            )
        })
        .collect();
    assert_eq!(
        story,
        [
            ("run.started", None, 0),
            ("step.skipped", Some("b"), 0),
            ("tool.called", Some("a"), 1),
            ("tool.failed", Some("a"), 1),
            ("step.retrying", Some("a"), 2),
            ("tool.called", Some("a"), 2),
            ("tool.succeeded", Some("a"), 2),
            ("step.executed", Some("a"), 2),
            ("run.finished", None, 0),
        ]
    );
    let json = serde_json::to_value(&events[0]).unwrap();
    assert_eq!(json["type"], "run.started");
    assert_eq!(json["run_id"], "run1");
    assert_eq!(json["plan_id"], "test");
    assert!(json["ts"].as_str().unwrap().ends_with('Z'));
}

#[test]
fn unknown_tools_are_issues_with_suggestions() {
    let loaded = load(
        Source::new(
            "t.json",
            r#"{"steps": [{"id": "a", "tool": "wrok"}, {"id": "b", "tool": "nothing_like_it"}]}"#,
        ),
        Format::Json,
        &LoadOptions::default(),
    )
    .unwrap();
    let registry = Harness::new().registry();
    let Err(issues) = Program::compile(&loaded.plan, "t", &registry) else {
        panic!("expected issues")
    };
    let messages: Vec<(&str, Option<&str>)> = issues
        .iter()
        .map(|i| (i.message.as_str(), i.help.as_deref()))
        .collect();
    assert_eq!(
        messages,
        [
            ("unknown tool `wrok`", Some("did you mean `work`?")),
            (
                "unknown tool `nothing_like_it`",
                Some(
                    "a tool of BullMQ workers is known once a `plan-cli worker` publishes it, or when the plan declares it under `tools:` (name, queue, input_schema, risk)"
                )
            ),
        ]
    );
}

#[test]
fn previews_resolve_inputs_and_stand_in_for_later_results() {
    let plan = json!({"variables": {"p": "/x", "items": [{"id": "a"}, {"id": "b"}]}, "steps": [
        {"id": "a", "tool": "work", "args": {"path": "${p}/f"}, "result_variable": "later"},
        {"id": "b", "tool": "work", "args": {"v": "${later.x}", "n": "got ${later}"}, "depends_on": ["a"], "result_variable": "list"},
        {"id": "m", "tool": "work", "args": {"id": "$each.id", "i": "$index"}, "expand_on": "${items}", "expand_key": "$each.id"},
        {"id": "n", "tool": "work", "args": {"x": "$each"}, "expand_on": "$var.list", "depends_on": ["b"]},
        {"id": "o", "tool": "work", "args": {"x": "${nothing}"}},
    ]});
    let (program, _) = compile(&plan, &Harness::new().registry());
    let calls = program.preview(&serde_json::Map::new(), &Default::default());
    let shown: Vec<(String, Value, Option<String>, Option<String>)> = calls
        .into_iter()
        .map(|c| {
            (
                c.step_id,
                c.args,
                c.expand_on,
                c.error.map(|e| e.code.to_string()),
            )
        })
        .collect();
    assert_eq!(
        shown,
        [
            ("a".into(), json!({"path": "/x/f"}), None, None),
            (
                "b".into(),
                json!({"v": "<result of a>", "n": "got <result of a>"}),
                None,
                None
            ),
            ("m[a]".into(), json!({"id": "a", "i": 0}), None, None),
            ("m[b]".into(), json!({"id": "b", "i": 1}), None, None),
            (
                "n".into(),
                json!({"x": "<$each of each item>"}),
                Some("$var.list".into()),
                None
            ),
            (
                "o".into(),
                Value::Null,
                None,
                Some("E_ARGS_UNRESOLVED".into())
            ),
        ]
    );
}

fn records_of(report: &RunReport) -> Vec<(String, bool, Option<Value>, Option<String>)> {
    report
        .records
        .iter()
        .map(|r| {
            (
                r.step_id.clone(),
                r.ok,
                r.result.as_deref().cloned(),
                r.error
                    .as_ref()
                    .map(|e| format!("{}: {}", e.code, e.message)),
            )
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_map_step_runs_each_item_and_collects_binds_in_item_order() {
    let h = Harness::new();
    let report = h
        .run(json!({
            "variables": {"items": [{"n": 30}, {"n": 10}, {"n": 20}]},
            "steps": [
                {"id": "m", "tool": "work", "args": {"ms": "$each.n", "i": "$index"}, "expand_on": "$var.items", "binds": {"ns": "$.args.ms"}, "result_variable": "all"},
                {"id": "after", "tool": "work", "args": {"ns": "${ns}", "first": "${all[0].args.i}"}, "depends_on": ["m"]},
            ]
        }))
        .await;
    assert_eq!(report.task_status, TaskStatus::Completed);
    let ids: Vec<&str> = report.records.iter().map(|r| r.step_id.as_str()).collect();
    assert_eq!(
        ids,
        ["m-0", "m-1", "m-2", "m", "after", "__meta__"],
        "items, then the map step, in plan order"
    );
    assert_eq!(
        *report.variables["ns"],
        json!([30, 10, 20]),
        "item order, not completion order"
    );
    assert_eq!(
        report.records[4].result.as_ref().unwrap()["args"],
        json!({"ns": [30, 10, 20], "first": 0})
    );
    assert_eq!(
        report.records[3].result,
        Some(Arc::new(json!({"items": 3}))),
        "the map step's own record counts its items; their records hold the results"
    );
    // Items ran together; `after` waited for the slowest.
    let starts = h.starts();
    assert_eq!(
        starts.iter().find(|(id, _)| id == "after").map(|s| s.1),
        Some(30)
    );
    assert!(
        starts
            .iter()
            .filter(|(id, _)| id.starts_with("m-"))
            .all(|s| s.1 == 0)
    );
}

#[tokio::test(start_paused = true)]
async fn map_items_share_max_concurrency() {
    let h = Harness::new();
    let items: Vec<Value> = (0..12).map(|i| json!(i)).collect();
    let report = h
        .run_with(
            json!({"steps": [{"id": "m", "tool": "work", "args": {"ms": 10}, "expand_on": items}]}),
            |o| o.max_concurrency = Some(3),
        )
        .await;
    assert_eq!(report.task_status, TaskStatus::Completed);
    assert_eq!(h.log.most_running.load(Ordering::SeqCst), 3);
}

#[tokio::test(start_paused = true)]
async fn expand_key_names_items_and_rejects_duplicates_and_odd_keys() {
    let h = Harness::new();
    let report = h
        .run(json!({
            "variables": {"users": [{"id": "ada"}, {"id": 7}], "dupes": [{"id": "x"}, {"id": "x"}], "odd": [{"id": [1]}]},
            "steps": [
                {"id": "greet", "tool": "work", "args": {"k": "$key", "who": "${each.id}"}, "expand_on": "${users}", "expand_key": "$each.id"},
                {"id": "dupe", "tool": "work", "expand_on": "${dupes}", "expand_key": "$each.id"},
                {"id": "odd", "tool": "work", "expand_on": "${odd}", "expand_key": "$each.id"},
            ]
        }))
        .await;
    let rows = records_of(&report);
    assert_eq!(rows[0].0, "greet[ada]");
    assert_eq!(
        rows[0].2.as_ref().unwrap()["args"],
        json!({"k": "ada", "who": "ada"})
    );
    assert_eq!(rows[1].0, "greet[7]");
    assert_eq!(rows[3], ("dupe".into(), false, None, Some("E_EXPAND_DUPLICATE_KEY: `expand_key` gives `x` for items 0 and 1; keys must be unique".into())));
    assert_eq!(rows[4], ("odd".into(), false, None, Some("E_EXPAND_KEY: `expand_key` must give a string or a number; for item 0 it gives a list".into())));
    assert!(
        !h.log
            .calls
            .lock()
            .unwrap()
            .iter()
            .any(|c| c.0.starts_with("dupe")),
        "no item of a bad map runs"
    );
}

#[tokio::test(start_paused = true)]
async fn empty_lists_succeed_and_non_lists_fail() {
    let h = Harness::new();
    let report = h
        .run(json!({
            "variables": {"none": [], "text": "abc"},
            "steps": [
                {"id": "empty", "tool": "work", "expand_on": "${none}", "binds": {"got": "$.args"}},
                {"id": "after", "tool": "work", "args": {"got": "${got}"}, "depends_on": ["empty"]},
                {"id": "bad", "tool": "work", "expand_on": "${text}"},
            ]
        }))
        .await;
    let rows = records_of(&report);
    assert_eq!(
        rows[0],
        ("empty".into(), true, Some(json!({"items": 0})), None)
    );
    assert_eq!(rows[1].2.as_ref().unwrap()["args"], json!({"got": []}));
    assert_eq!(
        rows[2],
        (
            "bad".into(),
            false,
            None,
            Some("E_EXPAND_NOT_LIST: `expand_on` `${text}` is a string, not a list".into())
        )
    );
}

#[tokio::test(start_paused = true)]
async fn failed_items_fail_the_map_step_but_the_others_still_run() {
    let h = Harness::new();
    let report = h
        .run(json!({
            "variables": {"items": [0, 1, 2, 1, 0]},
            "steps": [
                {"id": "m", "tool": "work", "args": {"fail_times": "$each", "retryable": false, "extra": "${each}"}, "expand_on": "${items}"},
                {"id": "next", "tool": "work", "depends_on": ["m"]},
            ]
        }))
        .await;
    let rows = records_of(&report);
    let oks: Vec<bool> = rows[..5].iter().map(|r| r.1).collect();
    assert_eq!(oks, [true, false, false, false, true]);
    assert_eq!(
        rows[5],
        (
            "m".into(),
            false,
            None,
            Some("E_MAP_ITEMS_FAILED: 3 of 5 items failed: `m-1`, `m-2`, `m-3`".into())
        )
    );
    assert_eq!(
        report.records[6].reason.as_deref(),
        Some(r#"dependency not satisfied: ["m"]"#)
    );
    assert_eq!(report.task_status, TaskStatus::Failed);
}

#[tokio::test(start_paused = true)]
async fn a_map_can_run_over_a_list_another_step_produced() {
    let h = Harness::new();
    let report = h
        .run(json!({"steps": [
            {"id": "list", "tool": "work", "args": {"ids": ["a", "b"]}, "binds": {"ids": "$.args.ids"}},
            {"id": "each", "tool": "work", "args": {"id": "item-$each"}, "expand_on": "$var.ids", "depends_on": ["list"], "binds": {"out": "$.args.id"}},
        ]}))
        .await;
    assert_eq!(*report.variables["out"], json!(["item-a", "item-b"]));
}

/// `strict`: publishes a schema; the engine checks it before calling.
struct Strict(Arc<AtomicUsize>);

#[async_trait]
impl Tool for Strict {
    fn info(&self) -> ToolInfo {
        ToolInfo {
            name: "strict".into(),
            description: "test".into(),
            source: "test".into(),
            risk: plan_engine::Risk::Low,
            input_schema: json!({
                "type": "object",
                "properties": {"n": {"type": "integer", "minimum": 0}, "tags": {"type": "array", "items": {"type": "string"}}},
                "required": ["n"],
                "additionalProperties": false
            }),
        }
    }

    async fn call(&self, args: Value, _ctx: ToolContext) -> Result<Value, ToolError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(args)
    }
}

#[tokio::test]
async fn arguments_that_break_the_schema_fail_before_the_call() {
    let calls = Arc::new(AtomicUsize::new(0));
    let mut registry = Registry::new();
    registry.register(Strict(calls.clone()));
    let plan = json!({"variables": {"neg": -1}, "steps": [
        {"id": "good", "tool": "strict", "args": {"n": 1, "tags": ["a"]}},
        {"id": "bad", "tool": "strict", "args": {"n": "${neg}", "tags": ["a", 2], "extra": true}},
    ]});
    let (program, _) = compile(&plan, &registry);
    let report = run(&program, RunOptions::new("r")).await.unwrap();
    assert!(report.records[0].ok);
    let error = report.records[1].error.as_ref().unwrap();
    assert_eq!(error.code, "E_ARGS_INVALID");
    let pointers: Vec<&str> = error
        .details
        .as_ref()
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["pointer"].as_str().unwrap())
        .collect();
    assert_eq!(pointers, ["/", "/n", "/tags/1"]);
    assert!(
        error
            .message
            .starts_with("arguments do not match the schema of `strict`: /: "),
        "{}",
        error.message
    );
    assert_eq!(report.records[1].attempts, 0);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the bad call never reached the tool"
    );
}

#[tokio::test(start_paused = true)]
async fn env_values_reach_tools_but_never_the_output() {
    let h = Harness::new();
    let report = h
        .run_with(
            json!({"env": ["API_TOKEN", "UNSET_ONE"], "steps": [
                {"id": "call", "tool": "work", "args": {"auth": "Bearer ${env.API_TOKEN}"}, "result_variable": "response"},
                {"id": "fails", "tool": "work", "args": {"fail_times": 1, "retryable": false, "code": "E_X", "t": "${env.API_TOKEN}"}},
                {"id": "unset", "tool": "work", "args": {"t": "${env.UNSET_ONE}"}},
            ]}),
            |o| {
                o.env.insert("API_TOKEN".into(), "tok-123456".into());
                o.env.insert("NOT_LISTED".into(), "ignored".into());
            },
        )
        .await;
    let output = serde_json::to_string(&report).unwrap();
    assert!(!output.contains("tok-123456"), "{output}");
    assert_eq!(
        report.records[0].result.as_ref().unwrap()["args"]["auth"],
        json!("Bearer [redacted]")
    );
    assert_eq!(
        report.variables["response"]["args"]["auth"],
        json!("Bearer [redacted]")
    );
    let events = serde_json::to_string(&*h.events.0.lock().unwrap()).unwrap();
    assert!(!events.contains("tok-123456"));
    let unset = report.records[2].error.as_ref().unwrap();
    assert_eq!(unset.code, "E_ARGS_UNRESOLVED");
    assert!(unset.message.contains("UNSET_ONE"), "{}", unset.message);
}

/// For each call of `probe`: the step, and the steps the journal had committed by then.
type Seen = Arc<Mutex<Vec<(String, Vec<String>)>>>;

/// A journal in memory: what was committed, in order, and a switch to make it fail; with
/// `log`, also a log of batches (what it logged, and whether appending fails).
#[derive(Clone, Default)]
struct MemoryJournal {
    committed: Arc<Mutex<Vec<plan_types::Record>>>,
    commits: Arc<AtomicUsize>,
    fail_after: Option<usize>,
    ended: Arc<Mutex<Option<plan_types::RunEnd>>>,
    log: Option<MemoryLog>,
    /// Commits wait until this is set (or 10 s have passed, which sets `gate_timed_out`).
    gate: Option<Arc<std::sync::atomic::AtomicBool>>,
    gate_timed_out: Arc<std::sync::atomic::AtomicBool>,
}

#[derive(Clone, Default)]
struct MemoryLog {
    logged: Arc<Mutex<Vec<plan_types::Record>>>,
    numbers: Arc<Mutex<Vec<u64>>>,
    fails: bool,
}

impl plan_types::BatchLog for MemoryLog {
    fn append(
        &mut self,
        number: u64,
        batch: &plan_types::Batch,
    ) -> Result<(), plan_types::JournalError> {
        if self.fails {
            return Err(plan_types::JournalError("log full".into()));
        }
        self.numbers.lock().unwrap().push(number);
        self.logged
            .lock()
            .unwrap()
            .extend(batch.records.iter().map(|(_, r)| r.clone()));
        Ok(())
    }
}

impl MemoryJournal {
    /// The ids of the records committed, in order.
    fn committed_ids(&self) -> Vec<String> {
        self.committed
            .lock()
            .unwrap()
            .iter()
            .map(|r| r.step_id.clone())
            .collect()
    }

    /// The ids of the records durable now: committed or logged.
    fn durable(&self) -> Vec<String> {
        let mut ids = self.committed_ids();
        if let Some(log) = &self.log {
            ids.extend(log.logged.lock().unwrap().iter().map(|r| r.step_id.clone()));
        }
        ids
    }
}

impl plan_types::Journal for MemoryJournal {
    fn log(&mut self) -> Option<Box<dyn plan_types::BatchLog>> {
        self.log
            .clone()
            .map(|log| Box::new(log) as Box<dyn plan_types::BatchLog>)
    }

    fn commit(
        &mut self,
        batch: &plan_types::Batch,
        _upto: u64,
    ) -> Result<(), plan_types::JournalError> {
        if let Some(gate) = &self.gate {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while !gate.load(Ordering::SeqCst) {
                if std::time::Instant::now() > deadline {
                    self.gate_timed_out.store(true, Ordering::SeqCst);
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let n = self.commits.fetch_add(1, Ordering::SeqCst);
        if self.fail_after.is_some_and(|limit| n >= limit) {
            return Err(plan_types::JournalError("disk full".into()));
        }
        self.committed
            .lock()
            .unwrap()
            .extend(batch.records.iter().map(|(_, r)| (*r).clone()));
        Ok(())
    }

    fn finish(
        &mut self,
        end: plan_types::RunEnd,
        _at: std::time::SystemTime,
    ) -> Result<(), plan_types::JournalError> {
        *self.ended.lock().unwrap() = Some(end);
        Ok(())
    }
}

/// `probe`: records, when called, which steps the journal had made durable (committed or
/// logged); with `open`, lets the journal's gated commits through.
struct Probe {
    journal: MemoryJournal,
    seen: Seen,
}

#[async_trait]
impl Tool for Probe {
    fn info(&self) -> ToolInfo {
        test_info("probe")
    }

    async fn call(&self, args: Value, ctx: ToolContext) -> Result<Value, ToolError> {
        let committed = self.journal.durable();
        if args.get("open").is_some()
            && let Some(gate) = &self.journal.gate
        {
            gate.store(true, Ordering::SeqCst);
        }
        self.seen
            .lock()
            .unwrap()
            .push((ctx.step_id.to_string(), committed));
        if let Some(ms) = args.get("ms").and_then(Value::as_u64) {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        if args.get("fail").is_some() {
            return Err(ToolError::new("E_TOOL", "probe failed"));
        }
        Ok(json!({"step": ctx.step_id.to_string(), "v": args.get("v").cloned()}))
    }
}

struct JournalRun {
    journal: MemoryJournal,
    seen: Seen,
    program: Program,
}

impl JournalRun {
    fn new(plan: Value, journal: MemoryJournal) -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut registry = Registry::new();
        registry.register(Probe {
            journal: journal.clone(),
            seen: seen.clone(),
        });
        let (program, _) = compile(&plan, &registry);
        JournalRun {
            journal,
            seen,
            program,
        }
    }

    async fn run(
        &self,
        configure: impl FnOnce(&mut RunOptions),
    ) -> Result<RunReport, plan_engine::RunError> {
        let mut options = RunOptions::new("j");
        options.journal = Some(Box::new(self.journal.clone()));
        configure(&mut options);
        run(&self.program, options).await
    }

    fn called(&self) -> Vec<String> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .map(|(id, _)| id.clone())
            .collect()
    }
}

fn probe(id: &str, deps: &[&str]) -> Value {
    json!({"id": id, "tool": "probe", "args": {"ms": 5}, "depends_on": deps})
}

#[tokio::test(start_paused = true)]
async fn a_result_is_committed_before_any_dependent_starts() {
    let plan = json!({"max_concurrency": 8, "steps": [
        probe("a", &[]), probe("b", &[]), probe("c", &["a"]), probe("d", &["a", "b"]), probe("e", &["c", "d"]),
        {"id": "m", "tool": "probe", "expand_on": [1, 2, 3], "args": {"v": "$each"}, "depends_on": ["e"], "binds": {"vs": "$.v"}},
        {"id": "z", "tool": "probe", "args": {"v": "${vs}"}, "depends_on": ["m"]},
    ]});
    let run = JournalRun::new(plan.clone(), MemoryJournal::default());
    let report = run.run(|_| {}).await.unwrap();
    assert_eq!(report.task_status, TaskStatus::Completed);
    let deps: std::collections::HashMap<&str, Vec<&str>> = [
        ("c", vec!["a"]),
        ("d", vec!["a", "b"]),
        ("e", vec!["c", "d"]),
        ("m-0", vec!["e"]),
        ("z", vec!["m", "m-0", "m-1", "m-2"]),
    ]
    .into_iter()
    .collect();
    for (id, committed) in run.seen.lock().unwrap().iter() {
        for dep in deps.get(id.as_str()).into_iter().flatten() {
            assert!(
                committed.iter().any(|c| c == dep),
                "{id} started before {dep} was committed (committed: {committed:?})"
            );
        }
    }
    let committed = run.journal.committed_ids();
    assert_eq!(
        committed.len(),
        10,
        "every step and item once: {committed:?}"
    );
    assert!(run.journal.commits.load(Ordering::SeqCst) <= 10);
    assert_eq!(
        *run.journal.ended.lock().unwrap(),
        Some(plan_types::RunEnd::Finished(TaskStatus::Completed))
    );
}

#[tokio::test(start_paused = true)]
async fn a_block_node_starts_only_once_the_node_before_it_is_committed() {
    let node = || json!({"tool": "probe", "args": {"ms": 5}});
    let plan = json!({"steps": [{"id": "review", "block": {
        "entry_point": "a",
        "nodes": {"a": node(), "b": node(), "c": node()},
        "transitions": {"a": "b", "b": "c"}
    }}]});
    let run = JournalRun::new(plan, MemoryJournal::default());
    let report = run.run(|_| {}).await.unwrap();
    assert_eq!(report.task_status, TaskStatus::Completed);
    let seen = run.seen.lock().unwrap().clone();
    let called: Vec<&str> = seen.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(called, ["review/a#1", "review/b#1", "review/c#1"]);
    for (i, (id, committed)) in seen.iter().enumerate() {
        for (before, _) in &seen[..i] {
            assert!(
                committed.contains(before),
                "{id} started before {before} was committed (committed: {committed:?})"
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_resumed_run_skips_what_settled_and_ends_with_the_same_records() {
    let plan = json!({"steps": [
        probe("a", &[]),
        {"id": "b", "tool": "probe", "args": {"v": 1}, "depends_on": ["a"], "result_variable": "b_out"},
        {"id": "m", "tool": "probe", "expand_on": ["x", "y", "z"], "args": {"v": "$each"}, "depends_on": ["b"], "binds": {"vs": "$.v"}},
        {"id": "c", "tool": "probe", "args": {"v": "${b_out.v} ${vs}"}, "depends_on": ["m"]},
    ]});
    let full = JournalRun::new(plan.clone(), MemoryJournal::default())
        .run(|_| {})
        .await
        .unwrap();

    // As if the first attempt died after a, b and item m-1.
    let keep = ["a", "b", "m-1"];
    let restored = plan_types::Restored {
        checkpoints: Default::default(),
        earlier_attempts: Default::default(),
        records: full
            .records
            .iter()
            .filter(|r| keep.contains(&r.step_id.as_str()))
            .cloned()
            .collect(),
        variables: [("b_out".to_owned(), full.variables["b_out"].clone())]
            .into_iter()
            .collect(),
    };
    let again = JournalRun::new(plan, MemoryJournal::default());
    let resumed = again.run(|o| o.restored = Some(restored)).await.unwrap();
    assert_eq!(
        again.called(),
        ["m-0", "m-2", "c"],
        "settled steps and items do not run again"
    );
    let strip = |report: &RunReport| -> Vec<(String, bool, Option<Value>)> {
        report
            .records
            .iter()
            .map(|r| (r.step_id.clone(), r.ok, r.result.as_deref().cloned()))
            .collect()
    };
    assert_eq!(strip(&resumed), strip(&full));
    assert_eq!(resumed.variables, full.variables);
}

/// Hostile review: one step's id begins another's (`build`, `build/each`). A resumed run gave
/// `build/each-0` to `build` as a call inside it, ran the item again and reported it twice.
#[tokio::test(start_paused = true)]
async fn a_step_whose_id_begins_another_s_keeps_its_own_items_on_resume() {
    let plan = json!({"max_concurrency": 1, "steps": [
        probe("build", &[]),
        {"id": "build/each", "tool": "probe", "expand_on": [1, 2, 3], "args": {"v": "$each"}},
        {"id": "after", "tool": "probe", "args": {"v": 0}, "depends_on": ["build/each"]},
    ]});
    let full = JournalRun::new(plan.clone(), MemoryJournal::default())
        .run(|_| {})
        .await
        .unwrap();
    let keep = ["build", "build/each-0", "build/each-1"];
    let restored = plan_types::Restored {
        checkpoints: Default::default(),
        earlier_attempts: Default::default(),
        records: full
            .records
            .iter()
            .filter(|r| keep.contains(&r.step_id.as_str()))
            .cloned()
            .collect(),
        variables: Default::default(),
    };
    let again = JournalRun::new(plan, MemoryJournal::default());
    let resumed = again.run(|o| o.restored = Some(restored)).await.unwrap();
    assert_eq!(again.called(), ["build/each-2", "after"]);
    let ids = |report: &RunReport| -> Vec<String> {
        report.records.iter().map(|r| r.step_id.clone()).collect()
    };
    assert_eq!(ids(&resumed), ids(&full), "each record once, in plan order");
}

#[tokio::test(start_paused = true)]
async fn kept_failures_stay_failed_on_resume() {
    let plan = json!({"steps": [{"id": "a", "tool": "probe", "args": {"fail": true}}, probe("b", &["a"])]});
    let first = JournalRun::new(plan.clone(), MemoryJournal::default())
        .run(|_| {})
        .await
        .unwrap();
    let again = JournalRun::new(plan, MemoryJournal::default());
    let restored = plan_types::Restored {
        checkpoints: Default::default(),
        earlier_attempts: Default::default(),
        records: first.records.clone(),
        variables: Default::default(),
    };
    let report = again.run(|o| o.restored = Some(restored)).await.unwrap();
    assert!(
        again.called().is_empty(),
        "nothing runs: the failure is kept and b is skipped again"
    );
    assert_eq!(
        report.records[1].reason.as_deref(),
        Some(r#"dependency not satisfied: ["a"]"#)
    );
}

#[tokio::test(start_paused = true)]
async fn a_stopped_run_commits_only_what_succeeded() {
    let plan = json!({"steps": [
        {"id": "quick", "tool": "probe", "args": {"ms": 1}},
        {"id": "slow", "tool": "probe", "args": {"ms": 1000}},
        probe("after", &["slow"]),
    ]});
    let run = JournalRun::new(plan, MemoryJournal::default());
    let cancel = tokio_util::sync::CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        trigger.cancel();
    });
    let report = run.run(|o| o.cancel = cancel).await.unwrap();
    assert_eq!(report.task_status, TaskStatus::Stopped);
    assert_eq!(report.task_status.exit_code(), 130);
    let committed = run.journal.committed_ids();
    assert_eq!(
        committed,
        ["quick"],
        "the cancelled step and what it skipped must run on resume"
    );
    assert_eq!(
        *run.journal.ended.lock().unwrap(),
        Some(plan_types::RunEnd::Stopped)
    );
}

#[tokio::test(start_paused = true)]
async fn a_failing_journal_stops_the_run_before_dependents_start() {
    let plan = json!({"steps": [probe("a", &[]), probe("b", &["a"]), probe("c", &["b"])]});
    // The first commit (a's result) fails.
    let run = JournalRun::new(
        plan,
        MemoryJournal {
            fail_after: Some(0),
            ..MemoryJournal::default()
        },
    );
    let error = run.run(|_| {}).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "the ledger could not be written, so the run stopped: disk full"
    );
    assert_eq!(
        run.called(),
        ["a"],
        "b never started: a's result could not be made durable"
    );
}

/// Under `sync`, a chain's step starts once its dependency's batch is in the journal's log:
/// no commit is waited for (here none can be made until the last step runs).
#[tokio::test(start_paused = true)]
async fn with_a_log_a_chain_waits_for_appends_not_commits() {
    let plan = json!({"steps": [
        probe("a", &[]), probe("b", &["a"]), probe("c", &["b"]),
        {"id": "d", "tool": "probe", "args": {"open": true}, "depends_on": ["c"]},
    ]});
    let journal = MemoryJournal {
        log: Some(MemoryLog::default()),
        gate: Some(Arc::default()),
        ..MemoryJournal::default()
    };
    let run = JournalRun::new(plan, journal);
    let report = run.run(|_| {}).await.unwrap();
    assert_eq!(report.task_status, TaskStatus::Completed);
    assert!(
        !run.journal.gate_timed_out.load(Ordering::SeqCst),
        "a step waited for a commit"
    );
    let seen = run.seen.lock().unwrap().clone();
    let expected: Vec<(String, Vec<String>)> = [
        ("a", vec![]),
        ("b", vec!["a"]),
        ("c", vec!["a", "b"]),
        ("d", vec!["a", "b", "c"]),
    ]
    .into_iter()
    .map(|(id, durable)| {
        (
            id.to_owned(),
            durable.into_iter().map(str::to_owned).collect(),
        )
    })
    .collect();
    assert_eq!(
        seen, expected,
        "each step started once its dependency was logged"
    );
    let log = run.journal.log.as_ref().unwrap();
    assert_eq!(*log.numbers.lock().unwrap(), [1, 2, 3]);
    // Everything logged was committed as well, by the end.
    let committed = run.journal.committed_ids();
    assert_eq!(committed, ["a", "b", "c", "d"]);
}

#[tokio::test(start_paused = true)]
async fn a_failing_log_stops_the_run_before_dependents_start() {
    let plan = json!({"steps": [probe("a", &[]), probe("b", &["a"]), probe("c", &["b"])]});
    let run = JournalRun::new(
        plan,
        MemoryJournal {
            log: Some(MemoryLog {
                fails: true,
                ..MemoryLog::default()
            }),
            ..MemoryJournal::default()
        },
    );
    let error = run.run(|_| {}).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "the ledger could not be written, so the run stopped: log full"
    );
    assert_eq!(run.called(), ["a"]);
}

#[tokio::test(start_paused = true)]
async fn false_conditions_skip_their_step_and_what_depends_only_on_it() {
    let h = Harness::new();
    let report = h
        .run(json!({"variables": {"env": "staging", "n": 3}, "steps": [
            {"id": "a", "tool": "work", "args": {"v": 1}, "result_variable": "a_out"},
            {"id": "prod", "tool": "work", "when": "vars.env == 'production'", "depends_on": ["a"]},
            {"id": "after-prod", "tool": "work", "depends_on": ["prod"]},
            {"id": "big", "tool": "work", "when": "vars.n + 1 > 3 && vars.a_out.args.v == 1", "depends_on": ["a"]},
            {"id": "off-too", "tool": "work", "depends_on": ["prod", "after-prod"], "run_if": "any_success"},
            {"id": "m", "tool": "work", "when": "false", "expand_on": [1, 2]},
        ]}))
        .await;
    let rows: Vec<(String, bool, bool, Option<String>)> = report
        .records
        .iter()
        .map(|r| (r.step_id.clone(), r.ok, r.skipped, r.reason.clone()))
        .collect();
    let skipped = |id: &str| {
        (
            id.to_owned(),
            true,
            true,
            Some("condition false".to_owned()),
        )
    };
    assert_eq!(rows[1], skipped("prod"));
    assert_eq!(rows[2], skipped("after-prod"));
    assert_eq!((rows[3].1, rows[3].2), (true, false), "big ran");
    assert_eq!(
        rows[4],
        skipped("off-too"),
        "every dependency is off, whatever its trigger rule"
    );
    assert_eq!(
        rows[5],
        skipped("m"),
        "a map step skipped by its condition has no items"
    );
    assert_eq!(
        report.task_status,
        TaskStatus::Completed,
        "condition skips are not failures"
    );
    let called: Vec<String> = h.starts().into_iter().map(|(id, _)| id).collect();
    assert_eq!(called, ["a", "big"]);
}

#[tokio::test(start_paused = true)]
async fn a_step_that_needs_a_step_that_ran_and_one_that_is_off_makes_the_run_partial() {
    let h = Harness::new();
    let report = h
        .run(json!({"steps": [
            {"id": "tests", "tool": "work"},
            {"id": "lint", "tool": "work", "when": "false"},
            {"id": "publish", "tool": "work", "depends_on": ["tests", "lint"]},
            {"id": "announce", "tool": "work", "depends_on": ["publish"]},
        ]}))
        .await;
    let publish = &report.records[2];
    assert_eq!((publish.ok, publish.skipped), (false, true));
    assert_eq!(
        publish.reason.as_deref(),
        Some("dependency not satisfied: [\"lint\"]")
    );
    assert_eq!(
        publish.upstream.as_deref(),
        Some(&std::collections::BTreeMap::from([(
            "lint".to_owned(),
            "condition false".to_owned()
        )]))
    );
    let announce = &report.records[3];
    assert_eq!((announce.ok, announce.skipped), (false, true));
    assert_eq!(report.task_status, TaskStatus::Partial);
    let meta = report.records.last().unwrap();
    assert_eq!(meta.step_id, "__meta__");
    assert!(!meta.ok);
    assert_eq!(
        meta.reason.as_deref(),
        Some("some steps were skipped; task_status=PARTIAL")
    );
    let called: Vec<String> = h.starts().into_iter().map(|(id, _)| id).collect();
    assert_eq!(called, ["tests"]);
}

#[tokio::test(start_paused = true)]
async fn conditions_that_cannot_be_decided_fail_their_step() {
    let h = Harness::new();
    let report = h
        .run(json!({"variables": {"n": 1}, "steps": [
            {"id": "text", "tool": "work", "when": "'yes'"},
            {"id": "missing", "tool": "work", "when": "vars.absent > 1"},
            {"id": "after", "tool": "work", "depends_on": ["missing"]},
        ]}))
        .await;
    let errors: Vec<String> = report.records[..2]
        .iter()
        .map(|r| r.error.as_ref().unwrap().message.clone())
        .collect();
    assert!(
        errors[0].starts_with("`when: 'yes'`: a condition must be true or false"),
        "{}",
        errors[0]
    );
    assert!(
        errors[1].starts_with("`when: vars.absent > 1`: "),
        "{}",
        errors[1]
    );
    assert_eq!(
        report.records[0].error.as_ref().unwrap().code,
        "E_CONDITION"
    );
    assert_eq!(
        report.records[2].reason.as_deref(),
        Some(r#"dependency not satisfied: ["missing"]"#)
    );
    assert_eq!(report.task_status, TaskStatus::Failed);
}

fn block_step(block: Value) -> Value {
    json!({"id": "review", "args": {"goal": 2}, "block": block, "result_variable": "out"})
}

fn error_of(report: &RunReport, id: &str) -> (String, String, Option<Value>) {
    let record = report.records.iter().find(|r| r.step_id == id).unwrap();
    let error = record.error.as_ref().unwrap();
    (
        error.code.to_string(),
        error.message.clone(),
        error.details.clone(),
    )
}

#[tokio::test(start_paused = true)]
async fn a_block_loops_until_a_condition_holds_and_ends_with_the_last_result() {
    let h = Harness::new();
    // `bump` returns its n + 1 each time round (n comes from the previous bump, or 0).
    let report = h
        .run(json!({"variables": {"start": 0}, "steps": [block_step(json!({
            "entry_point": "bump",
            "nodes": {
                "bump": {"tool": "work", "args": {"n": "${nodes.bump.args.n}", "first": "${start}"}},
                "count": {"tool": "work", "args": {"n": "${nodes.bump.args.n}"}},
                "finish": {"tool": "work", "args": {"goal": "${input.goal}", "visits": "${nodes.count.args.n}"}},
            },
            "transitions": {
                "bump": "count",
                "count": [{"condition": "enough", "target": "finish"}, {"condition": "default", "target": "bump"}],
            },
            "conditions": {"enough": "attempt >= input.goal"},
        }))]}))
        .await;
    // `${nodes.bump.args.n}` does not resolve on the first bump: that node fails the block.
    let (code, message, _) = error_of(&report, "review");
    assert_eq!(code, "E_ARGS_UNRESOLVED");
    assert!(
        message.starts_with("node `review/bump#1` failed: `${nodes.bump.args.n}`"),
        "{message}"
    );

    let h = Harness::new();
    let report = h
        .run(json!({"steps": [block_step(json!({
            "entry_point": "bump",
            "nodes": {
                "bump": {"tool": "work", "args": {"k": 1}},
                "count": {"tool": "work", "args": {"k": 2}},
                "finish": {"tool": "work", "args": {"goal": "${input.goal}"}},
            },
            "transitions": {
                "bump": "count",
                "count": [{"condition": "enough", "target": "finish"}, {"condition": "default", "target": "bump"}],
            },
            "conditions": {"enough": "attempt >= input.goal && result.args.k == 2"},
        }))]}))
        .await;
    assert_eq!(report.task_status, TaskStatus::Completed);
    let ids: Vec<&str> = report.records.iter().map(|r| r.step_id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "review/bump#1",
            "review/count#1",
            "review/bump#2",
            "review/count#2",
            "review/finish#1",
            "review",
            "__meta__"
        ]
    );
    assert_eq!(
        report.records[5].result.as_ref().unwrap()["args"],
        json!({"goal": 2}),
        "the block's result is its last node's"
    );
    assert_eq!(report.variables["out"]["args"]["goal"], json!(2));
    let transitions: Vec<(Option<String>, Option<String>, Option<String>)> = h
        .events
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e.kind == EventKind::BlockTransition)
        .map(|e| (e.from.clone(), e.to.clone(), e.condition.clone()))
        .collect();
    let t = |from: &str, to: &str, condition: Option<&str>| {
        (
            Some(from.to_owned()),
            Some(to.to_owned()),
            condition.map(str::to_owned),
        )
    };
    assert_eq!(
        transitions,
        [
            t("bump", "count", None),
            t("count", "bump", Some("default")),
            t("bump", "count", None),
            t("count", "finish", Some("enough"))
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn blocks_fail_with_seed_002_reasons() {
    let run_block = |block: Value| async move {
        let h = Harness::new();
        let report = h.run(json!({"steps": [block_step(block)]})).await;
        error_of(&report, "review")
    };
    let (code, _, details) = run_block(json!({"entry_point": "a", "max_steps": 5, "nodes": {"a": {"tool": "work"}}, "transitions": {"a": "a"}})).await;
    assert_eq!(
        (code.as_str(), details),
        ("max_steps_exceeded", Some(json!({"max_steps": 5})))
    );

    let (code, _, details) = run_block(json!({
        "entry_point": "a", "nodes": {"a": {"tool": "work"}, "b": {"tool": "work"}},
        "transitions": {"a": [{"condition": "never", "target": "b"}]}, "conditions": {"never": "false"},
    }))
    .await;
    assert_eq!(
        (code.as_str(), details),
        ("no_transition", Some(json!({"node": "a"})))
    );

    let (code, message, details) = run_block(json!({
        "entry_point": "a", "nodes": {"a": {"tool": "work"}, "b": {"tool": "work"}},
        "transitions": {"a": [{"condition": "bad", "target": "b"}]}, "conditions": {"bad": "result.missing.field == 1"},
    }))
    .await;
    assert_eq!(code, "condition_resolution_error");
    assert!(
        message.starts_with("condition `bad` (`result.missing.field == 1`): "),
        "{message}"
    );
    assert_eq!(
        details,
        Some(json!({"condition": "bad", "expression": "result.missing.field == 1"}))
    );

    // A failed node fails the block, keeping the node's error.
    let (code, message, details) = run_block(json!({"entry_point": "a", "nodes": {"a": {"tool": "work", "args": {"fail_times": 9, "retryable": false}}}})).await;
    assert_eq!(code, "E_TOOL");
    assert_eq!(message, "node `review/a#1` failed: failed on attempt 1");
    assert_eq!(details.unwrap()["node"], json!("a"));
}

#[tokio::test(start_paused = true)]
async fn graphs_that_do_not_validate_fail_with_invalid_graph_or_unknown_node() {
    // `plan_graph::load` refuses these plans; built by hand, the engine still refuses to run them.
    let plan = |block: Value| -> plan_graph::Plan {
        let mut plan: plan_graph::Plan = load(
            Source::new("b.json", json!({"steps": [{"id": "review", "block": {"entry_point": "a", "nodes": {"a": {"tool": "work"}}}}]}).to_string()),
            Format::Json,
            &LoadOptions::default(),
        )
        .unwrap()
        .plan;
        plan.steps[0].block = Some(serde_json::from_value(block).unwrap());
        plan
    };
    for (block, reason) in [
        (
            json!({"entry_point": "nowhere", "nodes": {"a": {"tool": "work"}}}),
            "invalid_graph",
        ),
        (
            json!({"entry_point": "a", "nodes": {"a": {"tool": "work"}}, "transitions": {"a": "ghost"}}),
            "unknown_node",
        ),
        (
            json!({"entry_point": "a", "nodes": {"a": {"tool": "work"}}, "transitions": {"ghost": "a"}}),
            "unknown_node",
        ),
    ] {
        let program = Program::compile(&plan(block), "b", &Harness::new().registry()).unwrap();
        let report = run(&program, RunOptions::new("r")).await.unwrap();
        assert_eq!(report.records.last().map(|r| r.ok), Some(false));
        assert_eq!(error_of(&report, "review").0, reason);
    }
}

#[tokio::test(start_paused = true)]
async fn blocks_nest_and_the_same_inputs_give_the_same_path() {
    let plan = json!({"steps": [block_step(json!({
        "entry_point": "outer",
        "nodes": {
            "outer": {"block": {
                "entry_point": "x",
                "nodes": {"x": {"tool": "work", "args": {"v": "${input.goal}"}}, "y": {"tool": "work"}},
                "transitions": {"x": [{"condition": "big", "target": "y"}, {"condition": "default", "target": "x"}]},
                "conditions": {"big": "attempt == 2"},
            }},
            "last": {"tool": "work", "args": {"inner": "${nodes.outer.args}"}},
        },
        "transitions": {"outer": "last"},
    }))]});
    let mut paths = Vec::new();
    for _ in 0..1000 {
        let report = Harness::new().run(plan.clone()).await;
        paths.push(
            report
                .records
                .iter()
                .map(|r| r.step_id.clone())
                .collect::<Vec<_>>(),
        );
    }
    assert_eq!(
        paths[0],
        [
            "review/outer#1/x#1",
            "review/outer#1/x#2",
            "review/outer#1/y#1",
            "review/outer#1",
            "review/last#1",
            "review",
            "__meta__"
        ]
    );
    assert!(paths.iter().all(|p| *p == paths[0]), "1,000 runs, one path");
}
