//! Engine throughput: `cargo xtask bench` runs each workload in its own process (so peak RSS
//! is per workload) and collects the JSON lines this prints.
//!
//! `cargo bench -p plan-engine --bench engine -- [WORKLOAD...] [--ledger]`; workloads:
//! `independent` (10k), `independent-100k`, `layered` (50×200), `chain` (10k), `map-100k`,
//! `block-100k`, `makespan`. Each prints one JSON object: steps, the median wall time of the
//! runs, steps per second, and peak RSS above the process's baseline per step. The tool is
//! `echo` (it returns its arguments, as the built-in does, without leaving the process), so
//! the figures are the engine's own cost; `makespan` sleeps instead and reports how close the
//! run comes to its critical path.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use plan_engine::{Program, Registry, RunOptions, Tool, ToolContext, ToolError, ToolInfo, run};
use plan_graph::{Format, LoadOptions, Plan, Source, load};
use serde_json::{Value, json};

/// The built-in `echo`, in-process: returns its arguments.
struct Echo;

#[async_trait]
impl Tool for Echo {
    fn info(&self) -> ToolInfo {
        ToolInfo {
            name: "echo".into(),
            description: String::new(),
            source: "bench".into(),
            risk: plan_engine::Risk::Low,
            input_schema: json!({}),
        }
    }

    async fn call(&self, args: Value, _ctx: ToolContext) -> Result<Value, ToolError> {
        Ok(args)
    }
}

/// `sleep`: waits `ms` milliseconds, on a blocking thread with the OS's sleep: tokio's timer
/// rounds every sleep up to its next 1 ms tick, which along a 40-step critical path adds tens
/// of milliseconds that are the timer's, not the scheduler's. Returns how long it really slept.
struct Sleep;

#[async_trait]
impl Tool for Sleep {
    fn info(&self) -> ToolInfo {
        ToolInfo {
            name: "sleep".into(),
            description: String::new(),
            source: "bench".into(),
            risk: plan_engine::Risk::Low,
            input_schema: json!({}),
        }
    }

    async fn call(&self, args: Value, _ctx: ToolContext) -> Result<Value, ToolError> {
        let ms = args.get("ms").and_then(Value::as_u64).unwrap_or(0);
        let slept = tokio::task::spawn_blocking(move || {
            let started = Instant::now();
            std::thread::sleep(Duration::from_millis(ms));
            started.elapsed()
        })
        .await
        .map_err(|e| ToolError::new("E_TOOL", e.to_string()))?;
        Ok(json!({"slept_ms": ms, "actual_us": slept.as_micros() as u64}))
    }
}

/// Plans are written as JSON text and loaded like any plan file, so the benchmark follows the
/// format; the text is built directly (a `Value` tree of 100,000 steps would leave ~100 MB of
/// freed memory resident and blur the memory figures).
fn step(id: String, depends_on: Vec<String>) -> String {
    let deps = serde_json::to_string(&depends_on).unwrap_or_default();
    format!(r#"{{"id":"{id}","tool":"echo","args":{{"n":1}},"depends_on":{deps}}}"#)
}

fn plan(steps: Vec<String>, max_concurrency: usize) -> Plan {
    plan_from(&format!(
        r#"{{"id":"bench","max_concurrency":{max_concurrency},"steps":[{}]}}"#,
        steps.join(",")
    ))
}

fn plan_from(text: &str) -> Plan {
    let options = LoadOptions::default();
    match load(Source::new("bench.json", text), Format::Json, &options) {
        Ok(loaded) => loaded.plan,
        Err(invalid) => panic!("invalid bench plan: {:?}", invalid.issues),
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

/// One map step over `count` items, each resolving `$each` and `$index`, with a bind that
/// collects every item's value into one list.
fn map(count: usize) -> Plan {
    let items: Vec<String> = (0..count)
        .map(|i| format!(r#"{{"id":{i},"name":"item {i}"}}"#))
        .collect();
    plan_from(&format!(
        r#"{{"id":"bench-map","max_concurrency":64,"variables":{{"items":[{}]}},"steps":[{{"id":"m","tool":"echo","expand_on":"${{items}}","args":{{"name":"$each.name","i":"$index"}},"binds":{{"names":"$.name"}}}}]}}"#,
        items.join(",")
    ))
}

/// One block step looping `loops` times through two nodes, a CEL condition deciding each time
/// whether to go round again.
fn block_loop(loops: usize) -> Plan {
    plan_from(&format!(
        r#"{{"id":"bench-block","steps":[{{"id":"loop","args":{{"loops":{loops}}},"block":{{"entry_point":"a","max_steps":{},"nodes":{{"a":{{"tool":"echo","args":{{"n":1}}}},"b":{{"tool":"echo","args":{{"n":2}}}},"done":{{"tool":"echo","args":{{"n":3}}}}}},"transitions":{{"a":"b","b":[{{"condition":"more","target":"a"}},{{"condition":"default","target":"done"}}]}},"conditions":{{"more":"attempt < input.loops"}}}}}}]}}"#,
        2 * loops + 1
    ))
}

/// A seeded random DAG of `count` `sleep` steps of 1–50 ms: step `i` depends on up to 3 of
/// the 40 steps before it. Returns the plan and its critical path (the longest chain of
/// sleeps), which no schedule can beat.
fn sleep_dag(count: usize) -> (Plan, Duration, Vec<Vec<usize>>) {
    let mut rng = fastrand::Rng::with_seed(11);
    let mut steps = Vec::with_capacity(count);
    let mut finish: Vec<u64> = Vec::with_capacity(count);
    let mut all_deps = Vec::with_capacity(count);
    for i in 0..count {
        let ms = rng.u64(1..=50);
        let mut deps: Vec<usize> = Vec::new();
        if i > 0 {
            for _ in 0..rng.usize(0..=3) {
                let dep = rng.usize(i.saturating_sub(40)..i);
                if !deps.contains(&dep) {
                    deps.push(dep);
                }
            }
        }
        let start = deps.iter().map(|&d| finish[d]).max().unwrap_or(0);
        finish.push(start + ms);
        all_deps.push(deps.clone());
        let deps: Vec<String> = deps.iter().map(|d| format!("s{d}")).collect();
        steps.push(format!(
            r#"{{"id":"s{i}","tool":"sleep","args":{{"ms":{ms}}},"depends_on":{}}}"#,
            serde_json::to_string(&deps).unwrap_or_default()
        ));
    }
    let critical = finish.iter().copied().max().unwrap_or(0);
    (
        plan(steps, count),
        Duration::from_millis(critical),
        all_deps,
    )
}

/// Workload 6: how close a run of 500 sleeps comes to its critical path (1.0 is the limit).
fn makespan(runtime: &tokio::runtime::Runtime) -> Value {
    let (plan, critical, deps) = sleep_dag(500);
    let mut registry = Registry::new();
    registry.register(Echo).register(Sleep);
    let program = Arc::new(
        Program::compile(&plan, "bench", &registry)
            .unwrap_or_else(|_| unreachable!("bench plans are valid")),
    );
    let mut ratios = Vec::new();
    let mut observed_ratios = Vec::new();
    let mut times = Vec::new();
    for _ in 0..5 {
        let program = program.clone();
        let started = Instant::now();
        let report = runtime
            .block_on(runtime.spawn(async move { run(&program, RunOptions::new("bench")).await }))
            .expect("the run task does not panic")
            .expect("no ledger");
        let took = started.elapsed();
        assert_eq!(report.task_status, plan_types::TaskStatus::Completed);
        ratios.push(took.as_secs_f64() / critical.as_secs_f64());
        // The critical path of what the sleeps really took (the OS oversleeps a little).
        let mut finish = vec![0u64; deps.len()];
        for (i, record) in report.records.iter().take(deps.len()).enumerate() {
            let actual = record
                .result
                .as_ref()
                .and_then(|r| r["actual_us"].as_u64())
                .unwrap_or(0);
            let start = deps[i].iter().map(|&d| finish[d]).max().unwrap_or(0);
            finish[i] = start + actual;
        }
        let observed = finish.iter().copied().max().unwrap_or(1) as f64 / 1e6;
        observed_ratios.push(took.as_secs_f64() / observed);
        times.push(took);
    }
    observed_ratios.sort_by(f64::total_cmp);
    ratios.sort_by(f64::total_cmp);
    times.sort();
    json!({
        "workload": "makespan (500 sleeps of 1–50 ms, seeded DAG)",
        "steps": 500,
        "runs": 5,
        "median_ms": times[2].as_secs_f64() * 1e3,
        "critical_path_ms": critical.as_secs_f64() * 1e3,
        "makespan_over_critical_path": ratios[2],
        "makespan_over_observed_critical_path": observed_ratios[2],
    })
}

/// The number of items a map plan's `items` variable holds.
fn map_items(plan: &Plan) -> usize {
    plan.variables
        .get("items")
        .and_then(Value::as_array)
        .map_or(0, Vec::len)
}

/// Resets VmHWM to the current RSS (Linux: writing 5 to clear_refs), so each run's peak is
/// its own. Where that is not possible the peak is the process's, which is only larger.
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
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

/// With `ledger`, each run records into a fresh SQLite ledger (WAL, synchronous=NORMAL) as
/// `plan-cli run` does; its size per step is reported.
fn measure(
    name: &str,
    make: impl Fn() -> Plan,
    runs: usize,
    ledger: bool,
    runtime: &tokio::runtime::Runtime,
) -> Value {
    let baseline = rss_kib("VmRSS:");
    let plan = make();
    let mut registry = Registry::new();
    registry.register(Echo).register(Sleep);
    let compile_started = Instant::now();
    let program = Arc::new(
        Program::compile(&plan, "bench", &registry)
            .unwrap_or_else(|_| unreachable!("bench plans are valid")),
    );
    let compile = compile_started.elapsed();
    let prepared = rss_kib("VmRSS:");
    let steps = plan
        .steps
        .iter()
        .map(|s| match (&s.expand, &s.block) {
            (Some(_), _) => map_items(&plan),
            // Node runs: two per loop, and the last.
            (_, Some(block)) => block.max_steps as usize,
            _ => 1,
        })
        .sum::<usize>();
    // The program has its own copy of everything it needs; like the CLI, let the plan go.
    drop(plan);
    let mut times: Vec<Duration> = Vec::with_capacity(runs);
    let mut run_peaks: Vec<u64> = Vec::with_capacity(runs);
    let ledger_dir = tempfile::tempdir().expect("a temporary directory");
    let mut db_bytes = 0;
    for run_index in 0..runs {
        reset_peak_rss();
        let mut options = RunOptions::new("bench");
        let db = ledger_dir.path().join(format!("run{run_index}.db"));
        if ledger {
            options.journal = Some(Box::new(journal(&db)));
        }
        // As the CLI does: the scheduler runs on a worker thread, so the steps it spawns go to
        // that worker's LIFO slot instead of waking another thread.
        let program = program.clone();
        let started = Instant::now();
        let report = runtime
            .block_on(runtime.spawn(async move { run(&program, options).await }))
            .expect("the run task does not panic")
            .expect("the ledger works");
        times.push(started.elapsed());
        run_peaks.push(rss_kib("VmHWM:"));
        assert!(report.records.len() > steps);
        assert_eq!(report.task_status, plan_types::TaskStatus::Completed);
        drop(report);
        if ledger {
            db_bytes = ["", "-wal"]
                .iter()
                .filter_map(|suffix| std::fs::metadata(format!("{}{suffix}", db.display())).ok())
                .map(|m| m.len())
                .sum();
        }
    }
    times.sort();
    let median = times[times.len() / 2];
    // The median of the runs' own peaks (each run starts from a reset high-water mark).
    run_peaks.sort_unstable();
    let peak = run_peaks[run_peaks.len() / 2];
    let mut result = json!({
        "workload": if ledger { format!("{name} (ledger)") } else { name.to_owned() },
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
    });
    if ledger {
        result["db_bytes_per_step"] = json!(db_bytes as f64 / steps as f64);
    }
    result
}

/// A journal on a new ledger file, with the run begun, as `plan-cli run` sets it up.
fn journal(db: &std::path::Path) -> plan_store::RunJournal {
    let mut store = plan_store::Store::open(db).expect("a ledger");
    let inputs = serde_json::Map::new();
    store
        .begin_run(&plan_store::NewRun {
            run_id: "bench",
            plan_id: "bench",
            plan_name: "bench.json",
            plan_format: "json",
            plan_source: "{}",
            inputs: &inputs,
            options: &json!({}),
            owner_pid: std::process::id(),
            started_at: &plan_store::timestamp(std::time::SystemTime::now()),
        })
        .expect("the run begins");
    plan_store::RunJournal::new(store, "bench", Arc::default()).expect("a journal")
}

fn main() {
    // Threads with the stack plan-cli gives its runtime: conditions and data expressions
    // evaluated with less stack left run on a stack grown for each evaluation (32 MiB mapped
    // and unmapped), which made block-100k three times slower here than through the CLI.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(plan_types::json::VALUE_THREAD_STACK)
        .build()
        .expect("a runtime");
    // `cargo bench` passes `--bench`; `cargo test --all-targets` does not, and then a small
    // run of each shape checks that the benchmark still works without spending the time.
    if !std::env::args().any(|a| a == "--bench") {
        let shapes = [
            ("independent", independent(200)),
            ("layered", layered(4, 10)),
            ("chain", chain(50)),
            ("map", map(100)),
            ("block", block_loop(50)),
        ];
        for (name, plan) in shapes {
            let result = measure(name, || plan.clone(), 1, true, &runtime);
            assert!(result["steps_per_sec"].as_f64().unwrap_or(0.0) > 0.0);
        }
        println!("bench smoke run: ok");
        return;
    }
    let ledger = std::env::args().any(|a| a == "--ledger");
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
            "independent" => measure(&name, || independent(10_000), 9, ledger, &runtime),
            "independent-100k" => measure(&name, || independent(100_000), 5, ledger, &runtime),
            "layered" => measure(&name, || layered(50, 200), 5, ledger, &runtime),
            "chain" => measure(&name, || chain(10_000), 5, ledger, &runtime),
            "makespan" => makespan(&runtime),
            "map-100k" => measure(&name, || map(100_000), 5, ledger, &runtime),
            "block-100k" => measure(&name, || block_loop(100_000), 3, ledger, &runtime),
            other => {
                eprintln!(
                    "unknown workload `{other}`; known: independent, independent-100k, layered, chain, map-100k, block-100k"
                );
                std::process::exit(2);
            }
        };
        println!("{result}");
    }
}
