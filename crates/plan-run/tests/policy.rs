//! A model's policy (the default `Policy`) refuses each kind of call alone, wherever the plan
//! makes it, and says where; the operator's allows everything; a re-plan's new steps are
//! judged alone, the environment they read included.
#![expect(clippy::unwrap_used, reason = "test helpers fail loudly on purpose")]

use std::collections::BTreeSet;

use plan_engine::Program;
use plan_graph::{Format, LoadOptions, Source};
use plan_run::{Author, Policy};
use serde_json::{Value, json};

fn compiled(plan: &Value) -> (plan_graph::Plan, Program) {
    let loaded = plan_graph::load(
        Source::new("plan.json", plan.to_string()),
        Format::Json,
        &LoadOptions::default(),
    )
    .unwrap_or_else(|invalid| panic!("{plan}: {:?}", invalid.issues));
    let program = Program::compile(&loaded.plan, "p", &plan_tools::builtin_registry()).unwrap();
    (loaded.plan, program)
}

fn refused(policy: &Policy, plan: &Value) -> Vec<String> {
    let (plan, program) = compiled(plan);
    match policy.check(Author::Model, &plan, &program) {
        Ok(()) => Vec::new(),
        Err(error) => error
            .violations
            .iter()
            .map(|v| format!("{}: {}", v.path, v.message))
            .collect(),
    }
}

#[test]
fn each_kind_of_call_is_refused_alone_where_the_plan_makes_it() {
    let exec = json!({"tool": "exec", "args": {"argv": ["id"]}});
    let echo = json!({"tool": "echo", "args": {"t": 1}});
    let task = |extra: Value| {
        let mut task = json!({"implement": echo});
        for (k, v) in extra.as_object().unwrap() {
            task[k] = v.clone();
        }
        json!({"workspace": {"repo": "."}, "steps": [{"id": "T1", "task": task}]})
    };
    let mut with_update = task(json!({}));
    with_update["workspace"]["context_update"] = exec.clone();
    let cases = [
        (
            json!({"steps": [{"id": "s", "tool": "http", "args": {"url": "http://127.0.0.1:9/"}}]}),
            "steps[0]: the step calls `http`",
        ),
        (
            json!({"steps": [{"id": "m", "tool": "exec", "expand_on": [1, 2], "args": {"argv": ["id"]}}]}),
            "steps[0]: the map step (one call per item) calls `exec`",
        ),
        (
            json!({"steps": [{"id": "b", "block": {"entry_point": "n", "nodes": {"n": exec}}}]}),
            "steps[0].block.nodes.n: the block node calls `exec`",
        ),
        (
            task(json!({"implement": exec})),
            "steps[0].task.implement: the task's `implement` calls `exec`",
        ),
        (
            task(json!({"feedback": exec})),
            "steps[0].task.feedback: the task's `feedback` calls `exec`",
        ),
        (
            task(json!({"verify": [{"argv": ["id"]}]})),
            "steps[0].task.verify[0]: the task's `verify` check calls `exec`",
        ),
        (
            with_update,
            "workspace.context_update: the workspace's `context_update` calls `exec`",
        ),
    ];
    let mut model = Policy {
        workspace: true,
        ..Policy::default()
    };
    for (plan, says) in &cases {
        let found = refused(&model, plan);
        assert_eq!(found.len(), 1, "{plan}: {found:?}");
        assert!(found[0].starts_with(says), "{found:?}");
        assert!(refused(&Policy::operator(), plan).is_empty());
    }
    // Allowed by name, the same plans pass.
    model
        .tools
        .extend(["exec".to_owned(), "builtin.http".to_owned()]);
    for (plan, _) in &cases {
        assert!(refused(&model, plan).is_empty(), "{plan}");
    }
    // Without the workspace, a task plan is refused for it alone.
    let found = refused(&Policy::default(), &task(json!({})));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("workspace: task steps"), "{found:?}");
}

#[test]
fn a_replans_new_steps_are_judged_alone_with_the_environment_they_read() {
    let plan = json!({"env": ["TOKEN"], "steps": [
        {"id": "old", "tool": "exec", "args": {"argv": ["true", "${env.TOKEN}"]}},
        {"id": "fine", "tool": "echo", "args": {"t": 1}, "depends_on": ["old"]},
        {"id": "peek", "tool": "echo", "expand_on": [1], "expand_key": "${env.TOKEN}", "args": {"t": 1}}
    ]});
    let (plan, program) = compiled(&plan);
    let policy = Policy::default();
    let new: BTreeSet<String> = ["fine".to_owned()].into();
    assert_eq!(
        policy.check_steps(Author::Model, &plan, &program, &new),
        Ok(())
    );
    let new: BTreeSet<String> = ["fine".to_owned(), "peek".to_owned()].into();
    let error = policy
        .check_steps(Author::Model, &plan, &program, &new)
        .unwrap_err();
    assert_eq!(error.violations.len(), 1, "{error}");
    assert!(
        error.violations[0]
            .message
            .contains("reads the environment variable `TOKEN`"),
        "{error}"
    );
    // The whole plan, as a model's, is refused for the operator's step and `env:`.
    let error = policy.check(Author::Model, &plan, &program).unwrap_err();
    assert_eq!(error.violations.len(), 2, "{error}");
}

/// What `validate` says of another author's plan is what a run of it meets: its size too, and
/// each violation is a problem at its place in the plan.
#[test]
fn a_plan_is_judged_for_validation_as_its_run_is() {
    let text =
        json!({"steps": [{"id": "a", "tool": "exec", "args": {"argv": ["true"]}}]}).to_string();
    let toolbox = plan_run::Toolbox::new(plan_tools::builtin_registry());
    let prepared = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(plan_run::prepare(
            plan_run::PlanText::json("p.json", text.clone(), "p"),
            Default::default(),
            &toolbox,
            plan_run::Strictness::VALIDATE,
            &|_| None,
        ))
        .unwrap();
    let small = Policy {
        max_plan_bytes: 10,
        ..Policy::default()
    };
    let refused = small.judge(Author::Model, &prepared).unwrap_err();
    assert!(
        refused.to_string().contains("plans of at most 10"),
        "{refused}"
    );
    let too_large = plan_run::Validation::judged(&prepared, Author::Model, Some(&small));
    assert!(!too_large.valid);
    assert!(
        too_large.errors[0].message.contains("plans of at most 10"),
        "{:?}",
        too_large.errors
    );
    let validation =
        plan_run::Validation::judged(&prepared, Author::Model, Some(&Policy::default()));
    assert!(!validation.valid);
    let error = &validation.errors[0];
    assert_eq!(error.code, "policy::not_allowed");
    assert!(error.message.contains("calls `exec`"), "{}", error.message);
    assert_eq!(
        (error.line, error.column),
        (Some(1), Some(11)),
        "at the step"
    );
    // The operator's own plan is judged only under a policy the operator gives.
    assert!(plan_run::Validation::judged(&prepared, Author::Operator, None).valid);
    let held = plan_run::Validation::judged(&prepared, Author::Operator, Some(&Policy::default()));
    assert!(
        !held.valid,
        "under a policy the operator's plan is held to it too"
    );
}
