//! The cost of calling MCP tools through plan-cli's engine, against a direct rmcp client
//! calling the same stdio server (`@modelcontextprotocol/server-everything`'s `echo`).
//!
//! `cargo bench -p plan-tools --bench mcp` prints one JSON object: calls per second for 1,000
//! sequential calls directly and through the engine (a 1,000-step chain), the engine's
//! overhead per call, and calls per second with 16 calls at once both ways. The server comes
//! from `target/mcp-servers` (`cargo xtask prepare-mcp`). Without `--bench` (as in
//! `cargo test --all-targets`) it makes a few calls to check that it works.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use plan_engine::{Program, RunOptions, run};
use plan_graph::{Format, LoadOptions, Source, load};
use plan_tools::mcp::{McpConfig, McpServers};
use plan_types::TaskStatus;
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use serde_json::json;

type Client = Arc<RunningService<RoleClient, ()>>;

fn server_script() -> Option<PathBuf> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(
        "../../target/mcp-servers/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
    );
    path.exists().then_some(path)
}

fn per_sec(calls: usize, took: Duration) -> f64 {
    calls as f64 / took.as_secs_f64()
}

async fn echo(client: Client, i: usize) {
    let mut params = CallToolRequestParams::new("echo");
    params.arguments = json!({"message": format!("m{i}")}).as_object().cloned();
    client.call_tool(params).await.expect("echo answers");
}

/// `calls` echo calls straight through rmcp, `at_once` in flight at a time.
async fn direct(script: &PathBuf, calls: usize, at_once: usize) -> Duration {
    let mut command = tokio::process::Command::new("node");
    command.arg(script).arg("stdio");
    let (transport, _stderr) = TokioChildProcess::builder(command)
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the server starts");
    let client: Client = Arc::new(().serve(transport).await.expect("the server initialises"));
    // One call first, so that start-up is not measured.
    echo(client.clone(), 0).await;
    let started = Instant::now();
    let mut next = 0;
    while next < calls {
        let batch: Vec<_> = (next..(next + at_once).min(calls))
            .map(|i| tokio::spawn(echo(client.clone(), i)))
            .collect();
        next += batch.len();
        for handle in batch {
            handle.await.expect("the call task");
        }
    }
    let took = started.elapsed();
    if let Ok(client) = Arc::try_unwrap(client) {
        let _ = client.cancel().await;
    }
    took
}

fn program(text: &str, registry: &plan_engine::Registry) -> Program {
    let loaded = load(
        Source::new("bench.json", text),
        Format::Json,
        &LoadOptions::default(),
    )
    .expect("a valid plan");
    Program::compile(&loaded.plan, "bench", registry).expect("tools exist")
}

/// `calls` echo calls as plan steps: a chain when `at_once` is 1, else independent steps with
/// `max_concurrency: at_once`.
async fn through_engine(script: &PathBuf, calls: usize, at_once: usize) -> Duration {
    let config =
        json!({"mcpServers": {"everything": {"command": "node", "args": [script, "stdio"]}}});
    let config = McpConfig::parse(&config.to_string(), &|_| None).expect("a valid config");
    let servers = McpServers::new(config);
    let mut registry = plan_tools::builtin_registry();
    servers
        .register(&["everything".to_owned()], &mut registry)
        .await
        .expect("the server lists its tools");
    let steps: Vec<_> = (0..calls)
        .map(|i| {
            let deps = if at_once == 1 && i > 0 {
                vec![format!("s{}", i - 1)]
            } else {
                Vec::new()
            };
            json!({"id": format!("s{i}"), "tool": "everything.echo",
                   "args": {"message": format!("m{i}")}, "depends_on": deps})
        })
        .collect();
    let plan = program(
        &json!({"max_concurrency": at_once, "steps": steps}).to_string(),
        &registry,
    );
    // One call first, as `direct` does.
    let warm = json!({"steps": [{"id": "w", "tool": "everything.echo", "args": {"message": "w"}}]});
    let warm = program(&warm.to_string(), &registry);
    run(&warm, RunOptions::new("warm")).await.expect("runs");
    let started = Instant::now();
    let report = run(&plan, RunOptions::new("bench")).await.expect("runs");
    let took = started.elapsed();
    assert_eq!(report.task_status, TaskStatus::Completed);
    servers.shutdown().await;
    took
}

fn main() {
    let Some(script) = server_script() else {
        println!("mcp bench skipped: run `cargo xtask prepare-mcp` to install the server");
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let full = std::env::args().any(|a| a == "--bench");
    let calls = if full { 1_000 } else { 20 };
    let rounds = if full { 9 } else { 1 };
    // The server's own speed drifts between runs by more than the engine costs, so the two
    // ways are measured in alternation, round after round, and compared by their medians.
    let (mut direct_seq, mut engine_seq, mut direct_16, mut engine_16) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        direct_seq.push(runtime.block_on(direct(&script, calls, 1)));
        engine_seq.push(runtime.block_on(through_engine(&script, calls, 1)));
        direct_16.push(runtime.block_on(direct(&script, calls, 16)));
        engine_16.push(runtime.block_on(through_engine(&script, calls, 16)));
    }
    let median = |mut times: Vec<Duration>| {
        times.sort();
        times[times.len() / 2]
    };
    let (direct_seq, engine_seq) = (median(direct_seq), median(engine_seq));
    let (direct_16, engine_16) = (median(direct_16), median(engine_16));
    let overhead_us = (engine_seq.as_secs_f64() - direct_seq.as_secs_f64()) / calls as f64 * 1e6;
    println!(
        "{}",
        json!({
            "workload": "echo on server-everything over stdio, 1 at a time (engine vs direct rmcp)",
            "calls": calls,
            "steps": calls,
            "steps_per_sec": per_sec(calls, engine_seq),
            "us_per_step": engine_seq.as_secs_f64() / calls as f64 * 1e6,
            "direct_sequential_calls_per_sec": per_sec(calls, direct_seq),
            "engine_sequential_calls_per_sec": per_sec(calls, engine_seq),
            "engine_overhead_us_per_call": overhead_us,
            "engine_overhead_pct": (engine_seq.as_secs_f64() / direct_seq.as_secs_f64() - 1.0) * 100.0,
            "direct_16_at_once_calls_per_sec": per_sec(calls, direct_16),
            "engine_16_at_once_calls_per_sec": per_sec(calls, engine_16),
        })
    );
}
