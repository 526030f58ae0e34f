//! The harness the engine's integration tests share: a `work` tool that sleeps, fails and
//! logs as its arguments say, an event recorder, and helpers to run a JSON plan.
#![allow(dead_code, reason = "each test file uses a part of the harness")]
#![expect(clippy::unwrap_used, reason = "test helpers fail loudly on purpose")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use plan_engine::{
    Program, Registry, Risk, RunOptions, Tool, ToolContext, ToolError, ToolInfo, run,
};
use plan_graph::{Format, LoadOptions, Source, load};
use plan_types::{Event, EventSink, RunReport};
use serde_json::{Value, json};
use tokio::time::Instant;

/// Everything the test tools saw: call order, start and end times, most at once.
#[derive(Default)]
pub(crate) struct Log {
    pub(crate) calls: Mutex<Vec<(String, u32, Duration, Duration)>>,
    pub(crate) running: AtomicUsize,
    pub(crate) most_running: AtomicUsize,
}

/// `work`: sleeps `ms`, fails while `attempt <= fail_times` (retryable per `retryable`),
/// panics if `panic` is set; returns its args. `danger` is the same tool with a high risk.
pub(crate) struct Work {
    pub(crate) log: Arc<Log>,
    pub(crate) epoch: Instant,
    pub(crate) name: &'static str,
    pub(crate) risk: Risk,
}

#[async_trait]
impl Tool for Work {
    fn info(&self) -> ToolInfo {
        ToolInfo {
            risk: self.risk,
            ..test_info(self.name)
        }
    }

    async fn call(&self, args: Value, ctx: ToolContext) -> Result<Value, ToolError> {
        let now = self.log.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.log.most_running.fetch_max(now, Ordering::SeqCst);
        let start = self.epoch.elapsed();
        let ms = args.get("ms").and_then(Value::as_u64).unwrap_or(0);
        let slept = tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(ms)) => true,
            () = ctx.cancel.cancelled() => false,
        };
        self.log.running.fetch_sub(1, Ordering::SeqCst);
        self.log.calls.lock().unwrap().push((
            ctx.step_id.to_string(),
            ctx.attempt,
            start,
            self.epoch.elapsed(),
        ));
        assert!(slept || ms > 0);
        if args.get("panic").is_some() {
            panic!("test tool panics on purpose");
        }
        let fail_times = args.get("fail_times").and_then(Value::as_u64).unwrap_or(0);
        if u64::from(ctx.attempt) <= fail_times {
            let retryable = args
                .get("retryable")
                .and_then(Value::as_bool)
                .unwrap_or(true);
            let code = args.get("code").and_then(Value::as_str).unwrap_or("E_TOOL");
            let mut error = ToolError::new(code, format!("failed on attempt {}", ctx.attempt));
            error.retryable = retryable;
            return Err(error);
        }
        Ok(json!({"args": args, "key": ctx.idempotency_key()}))
    }
}

/// A test tool's description: any arguments.
pub(crate) fn test_info(name: &str) -> ToolInfo {
    ToolInfo {
        name: name.into(),
        description: "test".into(),
        source: "test".into(),
        risk: Risk::Low,
        input_schema: json!({}),
    }
}

#[derive(Default)]
pub(crate) struct Events(pub(crate) Mutex<Vec<Event>>);

impl EventSink for Events {
    fn emit(&self, event: &Event) {
        self.0.lock().unwrap().push(event.clone());
    }
}

pub(crate) struct Harness {
    pub(crate) log: Arc<Log>,
    pub(crate) events: Arc<Events>,
    pub(crate) epoch: Instant,
}

impl Harness {
    pub(crate) fn new() -> Self {
        Harness {
            log: Arc::default(),
            events: Arc::default(),
            epoch: Instant::now(),
        }
    }

    pub(crate) fn registry(&self) -> Registry {
        let mut registry = Registry::new();
        for (name, risk) in [("work", Risk::Low), ("danger", Risk::High)] {
            registry.register(Work {
                log: self.log.clone(),
                epoch: self.epoch,
                name,
                risk,
            });
        }
        registry
    }

    pub(crate) async fn run_with(
        &self,
        plan: Value,
        configure: impl FnOnce(&mut RunOptions),
    ) -> RunReport {
        let (program, _) = compile(&plan, &self.registry());
        let mut options = RunOptions::new("run1");
        options.events = Some(self.events.clone());
        configure(&mut options);
        run(&program, options)
            .await
            .expect("no journal, so no journal failure")
    }

    pub(crate) async fn run(&self, plan: Value) -> RunReport {
        self.run_with(plan, |_| {}).await
    }

    pub(crate) fn starts(&self) -> Vec<(String, u128)> {
        let mut calls: Vec<_> = self
            .log
            .calls
            .lock()
            .unwrap()
            .iter()
            .map(|c| (c.0.clone(), c.2.as_millis()))
            .collect();
        calls.sort_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(&b.0)));
        calls
    }
}

pub(crate) fn step(id: &str, ms: u64, deps: &[&str]) -> Value {
    json!({"id": id, "tool": "work", "args": {"ms": ms}, "depends_on": deps})
}

pub(crate) fn summary(report: &RunReport) -> Vec<(String, bool, bool, Option<String>)> {
    report
        .records
        .iter()
        .map(|r| {
            (
                r.step_id.clone(),
                r.ok,
                r.skipped,
                r.reason
                    .clone()
                    .or_else(|| r.error.as_ref().map(|e| e.code.to_string())),
            )
        })
        .collect()
}

/// The error message of step `id`'s record; panics when it has none.
pub(crate) fn error_message(report: &RunReport, id: &str) -> String {
    let record = report
        .records
        .iter()
        .find(|r| r.step_id == id)
        .unwrap_or_else(|| panic!("no record {id}: {:#?}", report.records));
    let error = record.error.as_ref();
    error
        .unwrap_or_else(|| panic!("{id} did not fail: {record:?}"))
        .message
        .clone()
}

pub(crate) fn row(
    id: &str,
    ok: bool,
    skipped: bool,
    why: Option<&str>,
) -> (String, bool, bool, Option<String>) {
    (id.to_owned(), ok, skipped, why.map(str::to_owned))
}

/// Loads a JSON test plan and binds it to `registry`'s tools (plan id `test`); panics with the
/// issues if either fails. The loaded text comes too, for locating issues.
pub(crate) fn compile(plan: &Value, registry: &Registry) -> (Program, Source) {
    let loaded = load(
        Source::new("test.json", plan.to_string()),
        Format::Json,
        &LoadOptions::default(),
    )
    .unwrap_or_else(|invalid| panic!("invalid test plan: {:#?}", invalid.issues));
    let program = Program::compile(&loaded.plan, "test", registry)
        .unwrap_or_else(|issues| panic!("the plan does not compile: {issues:#?}"));
    (program, loaded.source)
}
