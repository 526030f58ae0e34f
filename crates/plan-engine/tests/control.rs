//! Control of a run: approvals, modes, guards, trigger rules, `fail_fast` and seeded retry
//! jitter. Time is tokio's paused clock.

mod common;

use common::*;
use plan_engine::{Mode, RunError, RunOptions, run};
use plan_types::{EventKind, PLAN_APPROVAL, PendingApproval, TaskStatus};
use serde_json::{Value, json};

fn pending(report: &plan_types::RunReport) -> Vec<(String, Option<Value>)> {
    report
        .pending_approvals
        .iter()
        .map(|p| (p.step_id.clone(), p.args.clone()))
        .collect()
}

fn called(h: &Harness) -> Vec<String> {
    let mut ids: Vec<String> = h.starts().into_iter().map(|(id, _)| id).collect();
    ids.sort();
    ids
}

fn deploy_plan() -> Value {
    json!({"steps": [
        {"id": "build", "tool": "work", "args": {"v": 1}, "binds": {"built": "$.args.v"}},
        {"id": "deploy", "tool": "work", "risk": "high", "args": {"version": "${built}"}, "depends_on": ["build"]},
        {"id": "notify", "tool": "work", "depends_on": ["deploy"]},
        {"id": "lint", "tool": "work"}
    ]})
}

#[tokio::test(start_paused = true)]
async fn a_high_risk_step_waits_while_independent_steps_run() {
    let h = Harness::new();
    let report = h.run(deploy_plan()).await;
    assert_eq!(report.task_status, TaskStatus::Waiting);
    assert_eq!(report.task_status.exit_code(), 5);
    assert_eq!(called(&h), ["build", "lint"]);
    assert_eq!(
        pending(&report),
        [("deploy".to_owned(), Some(json!({"version": 1})))],
        "the pending call shows its resolved arguments"
    );
    assert_eq!(
        summary(&report)[1..3],
        [
            row(
                "deploy",
                false,
                true,
                Some("GRAPH_HALT_AWAITING_APPROVAL: awaiting approval")
            ),
            row(
                "notify",
                false,
                true,
                Some("not started: the run is waiting for an approval")
            ),
        ]
    );
    let events = h.events.0.lock().unwrap();
    let awaiting: Vec<&Vec<PendingApproval>> = events
        .iter()
        .filter(|e| e.kind == EventKind::ApprovalAwaiting)
        .filter_map(|e| e.pending.as_ref())
        .collect();
    assert_eq!(awaiting.len(), 1, "one approval.awaiting event per halt");
    assert_eq!(awaiting[0][0].step_id, "deploy");
    assert_eq!(awaiting[0][0].tool.as_deref(), Some("work"));
    let last = events.last().unwrap();
    assert_eq!(last.kind, EventKind::RunFinished);
    assert_eq!(last.task_status, Some(TaskStatus::Waiting));
}

#[tokio::test(start_paused = true)]
async fn an_approved_step_runs_and_a_rejected_one_fails_and_skips_its_dependents() {
    let h = Harness::new();
    let report = h
        .run_with(deploy_plan(), |o| o.approvals.approve("deploy"))
        .await;
    assert_eq!(report.task_status, TaskStatus::Completed);
    assert_eq!(called(&h), ["build", "deploy", "lint", "notify"]);

    let h = Harness::new();
    let report = h
        .run_with(deploy_plan(), |o| {
            o.approvals.reject("deploy", "not on a Friday")
        })
        .await;
    assert_eq!(report.task_status, TaskStatus::Failed);
    assert_eq!(called(&h), ["build", "lint"]);
    let deploy = &report.records[1];
    let error = deploy.error.as_ref().unwrap();
    assert_eq!(error.code, "E_REJECTED");
    assert_eq!(error.message, "the call was not approved: not on a Friday");
    let notify = &report.records[2];
    assert_eq!(
        notify.reason.as_deref(),
        Some("dependency not satisfied: [\"deploy\"]")
    );
    assert_eq!(
        notify
            .upstream
            .as_deref()
            .unwrap()
            .get("deploy")
            .map(String::as_str),
        Some("rejected")
    );
}

#[tokio::test(start_paused = true)]
async fn a_tools_own_risk_applies_unless_the_step_sets_one() {
    let h = Harness::new();
    let report = h
        .run(json!({"steps": [
            {"id": "by-tool", "tool": "danger"},
            {"id": "lowered", "tool": "danger", "risk": "low"},
            {"id": "raised", "tool": "work", "risk": "high"},
            {"id": "medium", "tool": "work", "risk": "medium"}
        ]}))
        .await;
    assert_eq!(report.task_status, TaskStatus::Waiting);
    assert_eq!(called(&h), ["lowered", "medium"]);
    let waiting: Vec<String> = pending(&report).into_iter().map(|(id, _)| id).collect();
    assert_eq!(waiting, ["by-tool", "raised"]);
}

#[tokio::test(start_paused = true)]
async fn approvals_are_keyed_by_map_item() {
    let plan = json!({
        "variables": {"targets": ["dev", "prod", "eu"]},
        "steps": [
            {"id": "deploy", "tool": "danger", "args": {"to": "$each"}, "expand_on": "$var.targets", "expand_key": "$each"},
            {"id": "after", "tool": "work", "depends_on": ["deploy"]}
        ]
    });
    let h = Harness::new();
    let report = h
        .run_with(plan.clone(), |o| {
            o.approvals.approve("deploy[dev]");
            o.approvals.reject("deploy[eu]", "no");
        })
        .await;
    assert_eq!(report.task_status, TaskStatus::Waiting);
    assert_eq!(called(&h), ["deploy[dev]"]);
    assert_eq!(
        pending(&report),
        [("deploy[prod]".to_owned(), Some(json!({"to": "prod"})))]
    );
    let eu = report
        .records
        .iter()
        .find(|r| r.step_id == "deploy[eu]")
        .unwrap();
    assert_eq!(eu.error.as_ref().unwrap().code, "E_REJECTED");

    // Approving the step approves every item that has no decision of its own.
    let h = Harness::new();
    let report = h
        .run_with(plan, |o| {
            o.approvals.approve("deploy");
            o.approvals.reject("deploy[eu]", "no");
        })
        .await;
    assert_eq!(report.task_status, TaskStatus::Failed);
    assert_eq!(called(&h), ["deploy[dev]", "deploy[prod]"]);
}

#[tokio::test(start_paused = true)]
async fn a_step_skipped_by_its_condition_is_never_left_pending() {
    let h = Harness::new();
    let report = h
        .run(json!({"variables": {"go": false}, "steps": [
            {"id": "deploy", "tool": "danger", "when": "vars.go"},
            {"id": "after", "tool": "work", "depends_on": ["deploy"]}
        ]}))
        .await;
    assert_eq!(report.task_status, TaskStatus::Completed);
    assert!(report.pending_approvals.is_empty());
}

#[tokio::test(start_paused = true)]
async fn approval_mode_runs_nothing_until_the_plan_is_approved() {
    let h = Harness::new();
    let report = h
        .run_with(deploy_plan(), |o| o.mode = Some(Mode::Approval))
        .await;
    assert_eq!(report.task_status, TaskStatus::Waiting);
    assert!(called(&h).is_empty());
    assert_eq!(pending(&report), [(PLAN_APPROVAL.to_owned(), None)]);

    // The plan's approval does not approve its high-risk steps.
    let h = Harness::new();
    let report = h
        .run_with(deploy_plan(), |o| {
            o.mode = Some(Mode::Approval);
            o.approvals.approve(PLAN_APPROVAL);
        })
        .await;
    assert_eq!(report.task_status, TaskStatus::Waiting);
    assert_eq!(called(&h), ["build", "lint"]);
}

#[tokio::test]
async fn preview_mode_is_not_a_run() {
    let h = Harness::new();
    let (program, _) = compile(&deploy_plan(), &h.registry());
    assert_eq!(program.gated_steps(), ["deploy"]);
    let mut options = RunOptions::new("r");
    options.mode = Some(Mode::Preview);
    assert_eq!(run(&program, options).await.unwrap_err(), RunError::Preview);
}

#[tokio::test(start_paused = true)]
async fn max_tool_calls_stops_calls_past_the_budget_in_plan_order() {
    let h = Harness::new();
    let report = h
        .run_with(
            json!({"guards": {"max_tool_calls": 2}, "steps": [
                step("a", 1, &[]), step("b", 1, &[]), step("c", 1, &[]), step("d", 1, &["c"])
            ]}),
            |o| o.max_concurrency = Some(1),
        )
        .await;
    assert_eq!(called(&h), ["a", "b"]);
    assert_eq!(report.task_status, TaskStatus::Failed);
    let c = report.records[2].error.as_ref().unwrap();
    assert_eq!(c.code, "E_GUARD");
    assert_eq!(
        c.message,
        "guard `max_tool_calls` (2) stopped the call: the run has made 2 tool calls"
    );
    assert_eq!(
        report.records[3].reason.as_deref(),
        Some("dependency not satisfied: [\"c\"]"),
        "the dependents of a guarded step skip"
    );
}

#[tokio::test(start_paused = true)]
async fn per_tool_repeats_and_failures_guards() {
    let h = Harness::new();
    let report = h
        .run_with(
            json!({"guards": {"per_tool": {"danger": 1}, "max_repeats": 2}, "steps": [
                {"id": "d1", "tool": "danger", "risk": "low"},
                {"id": "d2", "tool": "danger", "risk": "low", "args": {"other": 1}},
                {"id": "same1", "tool": "work", "args": {"x": 1}},
                {"id": "same2", "tool": "work", "args": {"x": 1}},
                {"id": "same3", "tool": "work", "args": {"x": 1}},
                {"id": "different", "tool": "work", "args": {"x": 2}}
            ]}),
            |o| o.max_concurrency = Some(1),
        )
        .await;
    assert_eq!(called(&h), ["d1", "different", "same1", "same2"]);
    let guard_of = |i: usize| {
        report.records[i]
            .error
            .as_ref()
            .unwrap()
            .details
            .as_ref()
            .unwrap()["guard"]
            .clone()
    };
    assert_eq!(guard_of(1), json!("per_tool.danger"));
    assert_eq!(guard_of(4), json!("max_repeats"));

    let h = Harness::new();
    let report = h
        .run_with(
            json!({"guards": {"max_failures": 1}, "steps": [
                {"id": "bad", "tool": "work", "args": {"fail_times": 1, "retryable": false}},
                step("next", 1, &[])
            ]}),
            |o| o.max_concurrency = Some(1),
        )
        .await;
    assert_eq!(called(&h), ["bad"]);
    assert!(
        report.records[1]
            .error
            .as_ref()
            .unwrap()
            .message
            .starts_with("guard `max_failures` (1)")
    );
}

#[tokio::test(start_paused = true)]
async fn max_duration_stops_calls_that_would_start_late() {
    let h = Harness::new();
    let report = h
        .run(json!({"guards": {"max_duration_ms": 100}, "steps": [
            step("slow", 150, &[]), step("early", 10, &[]), step("late", 1, &["slow"])
        ]}))
        .await;
    assert_eq!(called(&h), ["early", "slow"]);
    assert_eq!(
        report.records[2]
            .error
            .as_ref()
            .unwrap()
            .details
            .as_ref()
            .unwrap()["guard"],
        json!("max_duration_ms")
    );
}

#[tokio::test(start_paused = true)]
async fn guards_count_block_nodes_too() {
    let h = Harness::new();
    let report = h
        .run(
            json!({"guards": {"per_tool": {"work": 2}}, "steps": [{"id": "loop", "block": {
                "entry_point": "a",
                "nodes": {"a": {"tool": "work"}, "b": {"tool": "work"}},
                "transitions": {"a": "b", "b": "a"}
            }}]}),
        )
        .await;
    assert_eq!(report.task_status, TaskStatus::Failed);
    let error = report.records.last().unwrap();
    assert_eq!(error.step_id, "__meta__");
    let block = report.records.iter().find(|r| r.step_id == "loop").unwrap();
    assert_eq!(block.error.as_ref().unwrap().code, "E_GUARD");
    assert_eq!(called(&h).len(), 2);
}

#[tokio::test(start_paused = true)]
async fn trigger_rules_run_cleanup_and_fan_in() {
    let h = Harness::new();
    let report = h
        .run(json!({"steps": [
            {"id": "ok", "tool": "work"},
            {"id": "bad", "tool": "work", "args": {"fail_times": 1, "retryable": false}},
            {"id": "after-bad", "tool": "work", "depends_on": ["bad"]},
            {"id": "teardown", "tool": "work", "depends_on": ["ok", "after-bad"], "run_if": "all_done"},
            {"id": "either", "tool": "work", "depends_on": ["ok", "bad"], "run_if": "any_success"},
            {"id": "neither", "tool": "work", "depends_on": ["bad", "after-bad"], "run_if": "any_success"},
            {"id": "both", "tool": "work", "depends_on": ["ok", "bad"]}
        ]}))
        .await;
    assert_eq!(called(&h), ["bad", "either", "ok", "teardown"]);
    let neither = &report.records[5];
    assert_eq!(
        neither.reason.as_deref(),
        Some("dependency not satisfied: [\"bad\",\"after-bad\"]")
    );
    let upstream = neither.upstream.as_deref().unwrap();
    assert_eq!(upstream["bad"], "failed");
    assert_eq!(
        upstream["after-bad"], "skipped",
        "a skip upstream is not a failure upstream"
    );
    assert_eq!(report.task_status, TaskStatus::Failed);
}

#[tokio::test(start_paused = true)]
async fn fail_fast_starts_nothing_after_the_first_failure() {
    let h = Harness::new();
    let report = h
        .run_with(
            json!({"fail_fast": true, "steps": [
                {"id": "bad", "tool": "work", "args": {"ms": 10, "fail_times": 1, "retryable": false}},
                step("running", 50, &[]),
                step("queued", 1, &[]),
                step("after", 1, &["running"])
            ]}),
            |o| o.max_concurrency = Some(2),
        )
        .await;
    assert_eq!(report.task_status, TaskStatus::Failed);
    assert_eq!(called(&h), ["bad", "running"], "running steps finish");
    assert!(report.records[1].ok);
    for i in [2, 3] {
        assert_eq!(
            report.records[i].reason.as_deref(),
            Some("not started: `bad` failed and the plan has `fail_fast: true`")
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_jitter_seed_makes_retry_delays_reproducible() {
    let plan = json!({"steps": [
        {"id": "flaky", "tool": "work", "args": {"fail_times": 3}, "retry": {"attempts": 4, "backoff_ms": 1000, "jitter": "full"}},
        {"id": "other", "tool": "work", "args": {"fail_times": 3}, "retry": {"attempts": 4, "backoff_ms": 1000, "jitter": "full"}}
    ]});
    let delays = |h: &Harness| -> Vec<(String, u64)> {
        let mut delays: Vec<(String, u64)> = h
            .events
            .0
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e.kind == EventKind::StepRetrying)
            .map(|e| {
                (
                    e.step_id.as_deref().unwrap().to_owned(),
                    e.delay_ms.unwrap(),
                )
            })
            .collect();
        delays.sort();
        delays
    };
    let mut seen = Vec::new();
    for seed in [7, 7, 8] {
        let h = Harness::new();
        let report = h
            .run_with(plan.clone(), |o| o.jitter_seed = Some(seed))
            .await;
        assert_eq!(report.task_status, TaskStatus::Completed);
        seen.push(delays(&h));
    }
    assert_eq!(seen[0].len(), 6);
    assert_eq!(seen[0], seen[1], "the same seed gives the same delays");
    assert_ne!(seen[0], seen[2], "another seed gives others");
    assert!(seen[0].iter().all(|(_, ms)| *ms <= 4000));
}

/// A journal that keeps what it is given, as a ledger would.
#[derive(Default, Clone)]
struct Kept(
    std::sync::Arc<std::sync::Mutex<(Vec<plan_types::Record>, Option<plan_types::RunEnd>)>>,
);

impl plan_types::Journal for Kept {
    fn commit(
        &mut self,
        batch: &plan_types::Batch,
        _upto: u64,
    ) -> Result<(), plan_types::JournalError> {
        let mut kept = self.0.lock().expect("not poisoned");
        for (_, record) in &batch.records {
            kept.0.retain(|r| r.step_id != record.step_id);
            kept.0.push(record.clone());
        }
        Ok(())
    }

    fn finish(
        &mut self,
        end: plan_types::RunEnd,
        _at: std::time::SystemTime,
    ) -> Result<(), plan_types::JournalError> {
        self.0.lock().expect("not poisoned").1 = Some(end);
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn a_nested_block_waits_at_its_node_and_goes_on_from_there() {
    let plan = json!({"steps": [{"id": "outer", "block": {
        "entry_point": "first",
        "nodes": {
            "first": {"tool": "work", "args": {"n": 1}},
            "inner": {"block": {
                "entry_point": "prepare",
                "nodes": {
                    "prepare": {"tool": "work", "args": {"n": 2}},
                    "deploy": {"tool": "danger", "args": {"n": "${nodes.prepare.args.n}"}}
                },
                "transitions": {"prepare": "deploy"}
            }},
            "last": {"tool": "work", "args": {"n": 4}}
        },
        "transitions": {"first": "inner", "inner": "last"}
    }}]});
    let h = Harness::new();
    let kept = Kept::default();
    let journal = kept.clone();
    let report = h
        .run_with(plan.clone(), |o| o.journal = Some(Box::new(journal)))
        .await;
    assert_eq!(report.task_status, TaskStatus::Waiting);
    assert_eq!(
        pending(&report),
        [("outer/inner/deploy".to_owned(), Some(json!({"n": 2})))]
    );
    assert_eq!(report.blocks[0].node.as_deref(), Some("inner/deploy"));
    assert_eq!(called(&h), ["outer/first#1", "outer/inner#1/prepare#1"]);
    let (records, end) = kept.0.lock().unwrap().clone();
    let Some(plan_types::RunEnd::Waiting { checkpoints, .. }) = end else {
        panic!("the run should have ended waiting");
    };
    assert_eq!(checkpoints.len(), 1);
    let committed: Vec<&str> = records.iter().map(|r| r.step_id.as_str()).collect();
    assert_eq!(committed, ["outer/first#1", "outer/inner#1/prepare#1"]);

    // Resumed with the approval: the block goes on at `inner/deploy`.
    let h = Harness::new();
    let report = h
        .run_with(plan, |o| {
            o.approvals.approve("outer/inner/deploy");
            o.restored = Some(plan_types::Restored {
                records,
                variables: Default::default(),
                checkpoints: checkpoints.into_iter().collect(),
                ..plan_types::Restored::default()
            });
        })
        .await;
    assert_eq!(report.task_status, TaskStatus::Completed);
    assert_eq!(called(&h), ["outer/inner#1/deploy#1", "outer/last#1"]);
    let ids: Vec<&str> = report.records.iter().map(|r| r.step_id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "outer/first#1",
            "outer/inner#1/prepare#1",
            "outer/inner#1/deploy#1",
            "outer/inner#1",
            "outer/last#1",
            "outer",
            "__meta__"
        ]
    );
    assert_eq!(
        report.records[5].result,
        Some(std::sync::Arc::new(
            json!({"args": {"n": 4}, "key": "run1/outer/last#1"})
        ))
    );
}
