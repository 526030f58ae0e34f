//! Engine throughput: `cargo xtask bench` runs each workload in its own process (so peak RSS
//! is per workload) and collects the JSON lines this prints.
//!
//! `cargo bench -p plan-engine --bench engine -- [WORKLOAD...]`; workloads: `independent`,
//! `layered`, `chain`, `independent-100k`. Each prints one JSON object: steps, the median wall
//! time of the runs, steps per second, and peak RSS above the process's baseline per step.
//! The tool is a no-op, so the figures are the engine's own cost.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use plan_engine::{Program, Registry, RunOptions, Tool, ToolContext, ToolError, ToolInfo, run};
use plan_graph::{Plan, Step, StepId};
use serde_json::{Map, Value, json};

struct Noop;

#[async_trait]
impl Tool for Noop {
    fn info(&self) -> ToolInfo {
        ToolInfo {
            name: "noop".into(),
            description: String::new(),
            source: "bench".into(),
            input_schema: json!({}),
        }
    }

    async fn call(&self, args: Value, _ctx: ToolContext) -> Result<Value, ToolError> {
        Ok(args)
    }
}

fn step(id: String, depends_on: Vec<String>) -> Step {
    let mut args = Map::new();
    args.insert("n".into(), json!(1));
    Step {
        id: StepId(id),
        title: None,
        tool: "noop".into(),
        args,
        depends_on: depends_on.into_iter().map(StepId).collect(),
        binds: Default::default(),
        result_variable: None,
        retry: None,
        timeout_ms: None,
    }
}

fn plan(steps: Vec<Step>, max_concurrency: usize) -> Plan {
    Plan {
        id: Some("bench".into()),
        title: None,
        description: None,
        variables: Map::new(),
        max_concurrency: Some(max_concurrency),
        retry: None,
        timeout_ms: None,
        steps,
    }
}

/// `count` steps with no dependencies.
fn independent(count: usize) -> Plan {
    plan(
        (0..count).map(|i| step(format!("s{i}"), vec![])).collect(),
        64,
    )
}

/// `layers` × `width`, each step depending on 3 steps of the layer above, chosen by a fixed
/// seed so every run measures the same graph.
fn layered(layers: usize, width: usize) -> Plan {
    let mut rng = fastrand::Rng::with_seed(7);
    let mut steps = Vec::with_capacity(layers * width);
    for layer in 0..layers {
        for i in 0..width {
            let deps = if layer == 0 {
                vec![]
            } else {
                let mut picked: Vec<usize> = Vec::new();
                while picked.len() < 3.min(width) {
                    let candidate = rng.usize(0..width);
                    if !picked.contains(&candidate) {
                        picked.push(candidate);
                    }
                }
                picked
                    .into_iter()
                    .map(|p| format!("l{}-{p}", layer - 1))
                    .collect()
            };
            steps.push(step(format!("l{layer}-{i}"), deps));
        }
    }
    plan(steps, 64)
}

/// A chain: each step depends on the one before, so nothing overlaps.
fn chain(count: usize) -> Plan {
    plan(
        (0..count)
            .map(|i| {
                step(
                    format!("c{i}"),
                    if i == 0 {
                        vec![]
                    } else {
                        vec![format!("c{}", i - 1)]
                    },
                )
            })
            .collect(),
        4,
    )
}

fn rss_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| {
            line.strip_prefix(field).map(|rest| {
                rest.trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse()
                    .unwrap_or(0)
            })
        })
        .unwrap_or(0)
}

fn measure(
    name: &str,
    make: impl Fn() -> Plan,
    runs: usize,
    runtime: &tokio::runtime::Runtime,
) -> Value {
    let baseline = rss_kib("VmRSS:");
    let plan = make();
    let mut registry = Registry::new();
    registry.register(Noop);
    let compile_started = Instant::now();
    let program = Arc::new(
        Program::compile(&plan, "bench", &registry)
            .unwrap_or_else(|_| unreachable!("bench plans are valid")),
    );
    let compile = compile_started.elapsed();
    let prepared = rss_kib("VmRSS:");
    let steps = program.len();
    let mut times: Vec<Duration> = Vec::with_capacity(runs);
    for _ in 0..runs {
        let started = Instant::now();
        // As the CLI does: the scheduler runs on a worker thread, so the steps it spawns go to
        // that worker's LIFO slot instead of waking another thread.
        let program = program.clone();
        let report = runtime
            .block_on(runtime.spawn(async move { run(&program, RunOptions::new("bench")).await }))
            .expect("the run task does not panic");
        times.push(started.elapsed());
        assert_eq!(report.records.len(), steps + 1);
        assert_eq!(report.task_status, plan_engine::TaskStatus::Completed);
        drop(report);
    }
    times.sort();
    let median = times[times.len() / 2];
    let peak = rss_kib("VmHWM:");
    json!({
        "workload": name,
        "steps": steps,
        "runs": runs,
        "median_ms": median.as_secs_f64() * 1e3,
        "steps_per_sec": steps as f64 / median.as_secs_f64(),
        "us_per_step": median.as_secs_f64() * 1e6 / steps as f64,
        "compile_ms": compile.as_secs_f64() * 1e3,
        "peak_rss_mib": peak as f64 / 1024.0,
        // Everything: the plan, the compiled program, the run's state and its records.
        "bytes_per_step": peak.saturating_sub(baseline) as f64 * 1024.0 / steps as f64,
        // The plan and the compiled program alone.
        "plan_bytes_per_step": prepared.saturating_sub(baseline) as f64 * 1024.0 / steps as f64,
        // What running adds: scheduler state, task slots, and the records with their results.
        "run_bytes_per_step": peak.saturating_sub(prepared) as f64 * 1024.0 / steps as f64,
    })
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    // `cargo bench` passes `--bench`; `cargo test --all-targets` does not, and then a small
    // run of each shape checks that the benchmark still works without spending the time.
    if !std::env::args().any(|a| a == "--bench") {
        let shapes = [
            ("independent", independent(200)),
            ("layered", layered(4, 10)),
            ("chain", chain(50)),
        ];
        for (name, plan) in shapes {
            let result = measure(name, || plan.clone(), 1, &runtime);
            assert!(result["steps_per_sec"].as_f64().unwrap_or(0.0) > 0.0);
        }
        println!("bench smoke run: ok");
        return;
    }
    let mut wanted: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    if wanted.is_empty() {
        wanted = ["independent", "layered", "chain"]
            .map(String::from)
            .to_vec();
    }
    for name in wanted {
        let result = match name.as_str() {
            "independent" => measure(&name, || independent(10_000), 9, &runtime),
            "independent-100k" => measure(&name, || independent(100_000), 5, &runtime),
            "layered" => measure(&name, || layered(20, 50), 9, &runtime),
            "chain" => measure(&name, || chain(1_000), 9, &runtime),
            other => {
                eprintln!(
                    "unknown workload `{other}`; known: independent, independent-100k, layered, chain"
                );
                std::process::exit(2);
            }
        };
        println!("{result}");
    }
}
