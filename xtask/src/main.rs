//! Project automation: `cargo xtask <task>`.
//!
//! - `test`: everything CI checks for tests — prepares what the tests need, then runs every
//!   test of the workspace (unit, integration, CLI, fixtures).
//! - `test-fixtures`: runs every plan in `fixtures/` and compares with the insta snapshots in
//!   `fixtures/snapshots/` (review changes with `cargo insta review`).
//! - `bench`: the engine benchmarks, each workload in its own process, plus whole-binary runs;
//!   prints a table and writes `target/bench/summary.json`.
//! - `bench peer`: the same plans through the Python peer (mcp-cli 0.20.1, installed into
//!   `target/peer-venv`) and the release binary, alternating, in one run; prints each ratio.
//! - `fuzz [--inputs N] [--seed S]`: the loader's fuzz harness (xtask/fuzz) in release
//!   mode: mutated and generated plans through loading, validation, diagnostics and dry run;
//!   failing inputs are saved in `target/fuzz`. The tests run a short pass.
//! - `test-llm`: `plan create` against a real small model served by llama-cpp-python's server
//!   and llama.cpp's `llama-server`, both compiled here (opt-in: long the first time); see
//!   `llm.rs`.
//! - `prepare-mcp`: installs the real MCP servers the tests drive (npm and PyPI packages, at
//!   pinned versions) into `target/mcp-servers`; `test` does this first.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

mod architecture;
mod llm;
mod peer;
mod prereqs;
mod tasks;
mod ui;
#[allow(dead_code, reason = "the CLI's browser tests use the rest of it")]
mod webdriver;
use serde_json::{Value, json};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = project_root();
    match args.first().map(String::as_str) {
        Some("test") => test(&root, &args[1..]),
        Some("test-fixtures") => cargo(&root, &["test", "-p", "plan-cli", "--test", "fixtures"]),
        Some("bench") => bench(&root, &args[1..]),
        Some("prepare-mcp") => prereqs::ensure(&root)
            .and_then(|()| prepare_mcp_servers(&root))
            .map(|_| ()),
        Some("test-llm") => llm::test_llm(&root),
        Some("fuzz") => fuzz(&root, &args[1..]),
        // Internal: see `time_runs`.
        Some(MEASURE) => measure(&args[1..]),
        _ => {
            eprintln!(
                "usage: cargo xtask <test | test-fixtures | test-llm | bench [WORKLOAD...] | fuzz [--inputs N] [--seed S] | prepare-mcp>"
            );
            std::process::exit(2);
        }
    }
}

fn fuzz(root: &Path, extra: &[String]) -> Result<()> {
    cargo(root, &["build", "--release", "-p", "plan-fuzz"])?;
    let status = Command::new(root.join("target/release/plan-fuzz"))
        .args(["--fixtures", "fixtures", "--out", "target/fuzz"])
        .args(extra)
        .current_dir(root)
        .status()
        .context("running plan-fuzz")?;
    if !status.success() {
        bail!("the fuzz harness found failures (inputs saved in target/fuzz)");
    }
    Ok(())
}

fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

pub(crate) fn cargo(root: &Path, args: &[&str]) -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let status = Command::new(&cargo)
        .args(args)
        .current_dir(root)
        .status()
        .with_context(|| format!("running {cargo} {args:?}"))?;
    if !status.success() {
        bail!("`cargo {}` failed ({status})", args.join(" "));
    }
    Ok(())
}

/// The one test command: README and `.ci/run` call it. It first makes sure the machine has
/// the programs the tests drive (`prereqs`: installed with apt-get as root, else the commands
/// to run), then installs the MCP servers, then runs every test.
/// Ends with one line totalling every test binary: `tests: N passed, M failed, K skipped`.
fn test(root: &Path, extra: &[String]) -> Result<()> {
    prereqs::ensure(root)?;
    // The MCP tests drive real servers, installed in target/mcp-servers.
    prepare_mcp_servers(root)?;
    // Every test binary runs even after one fails, so one run shows every failure.
    let mut args = vec!["test", "--workspace", "--all-targets", "--no-fail-fast"];
    args.extend(extra.iter().map(String::as_str));
    let mut totals = Totals::default();
    let all_targets = cargo_test(root, &args, &mut totals);
    // Doc tests are not part of --all-targets.
    let doc = cargo_test(root, &["test", "--workspace", "--doc"], &mut totals);
    // The real-model test of `plan create` needs an endpoint: with PLAN_LLM_URL it runs and
    // counts; without, it stays ignored, counted and named as skipped.
    let real_model = if std::env::var_os("PLAN_LLM_URL").is_some() {
        let before = totals.passed + totals.failed;
        let args = ["test", "-p", "plan-cli", "--test", "llm", "--", "--ignored"];
        let outcome = cargo_test(root, &args, &mut totals);
        let ran = totals.passed + totals.failed - before;
        totals.ignored = totals.ignored.saturating_sub(ran);
        outcome
    } else {
        println!(
            "SKIPPED: the real-model test of `plan create` (set PLAN_LLM_URL and PLAN_LLM_MODEL to run it)"
        );
        Ok(())
    };
    println!(
        "tests: {} passed, {} failed, {} skipped",
        totals.passed, totals.failed, totals.ignored
    );
    all_targets?;
    doc?;
    real_model
}

#[derive(Default)]
struct Totals {
    passed: u64,
    failed: u64,
    ignored: u64,
}

/// The npm and PyPI packages the tests drive, at pinned versions: MCP servers and SDKs, and
/// BullMQ in Node and Python (workers and producers of other languages on plan-cli's queue).
const NPM_SERVERS: &[&str] = &[
    "@modelcontextprotocol/server-filesystem@2026.8.31",
    "@modelcontextprotocol/server-everything@2026.8.31",
    "@modelcontextprotocol/server-memory@2026.8.31",
    "bullmq@6.7.0",
    "ioredis@5.11.1",
];
const PYPI_PACKAGES: &[&str] = &["mcp-server-time==2026.10.19", "mcp==2.3.0", "bullmq==3.4.4"];

/// Installs the MCP servers into `target/mcp-servers` unless the same versions are there
/// already, and returns that directory. Needs `npm` and `python3` (with `venv`).
fn prepare_mcp_servers(root: &Path) -> Result<PathBuf> {
    let dir = root.join("target").join("mcp-servers");
    let stamp = dir.join("installed.txt");
    let wanted = format!("{}\n{}\n", NPM_SERVERS.join("\n"), PYPI_PACKAGES.join("\n"));
    if std::fs::read_to_string(&stamp).is_ok_and(|have| have == wanted) {
        return Ok(dir);
    }
    eprintln!(
        "preparing the MCP servers the tests use in {}",
        dir.display()
    );
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir)?;
    let npm_dir = dir.join("npm");
    let mut npm = Command::new("npm");
    npm.arg("install")
        .arg("--prefix")
        .arg(&npm_dir)
        .args(["--no-audit", "--no-fund", "--loglevel=error"])
        .args(NPM_SERVERS);
    run(&mut npm, "npm install (is Node.js installed?)")?;
    let venv = dir.join("venv");
    run(
        Command::new("python3").arg("-m").arg("venv").arg(&venv),
        "python3 -m venv (is python3-venv installed?)",
    )?;
    run(
        Command::new(venv.join("bin").join("pip"))
            .args(["install", "--quiet", "--disable-pip-version-check"])
            .args(PYPI_PACKAGES),
        "pip install",
    )?;
    std::fs::write(&stamp, wanted)?;
    Ok(dir)
}

fn run(command: &mut Command, what: &str) -> Result<()> {
    let status = command
        .status()
        .with_context(|| format!("running {what}"))?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}

/// [`run`], naming the command by itself.
pub(crate) fn run_described(command: &mut Command) -> Result<()> {
    let what = format!("{command:?}");
    run(command, &what)
}

/// Runs `cargo test`, passing its output through and adding up its `test result:` lines.
fn cargo_test(root: &Path, args: &[&str], totals: &mut Totals) -> Result<()> {
    use std::io::{BufRead, BufReader};
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut child = Command::new(&cargo)
        .args(args)
        .current_dir(root)
        // A developer's Redis or approvals switch must not change what the tests run.
        .env_remove("PLAN_QUEUE")
        .env_remove("REDIS_URL")
        .env_remove("AGENT_APPROVALS_ENABLED")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .with_context(|| format!("running {cargo} {args:?}"))?;
    if let Some(stdout) = child.stdout.take() {
        for line in BufReader::new(stdout).lines() {
            let line = line?;
            println!("{line}");
            if let Some(rest) = line.strip_prefix("test result: ") {
                let count = |word: &str| -> u64 {
                    rest.split([';', '.'])
                        .find_map(|part| {
                            part.trim()
                                .strip_suffix(word)
                                .and_then(|n| n.trim().parse().ok())
                        })
                        .unwrap_or(0)
                };
                totals.passed += count(" passed");
                totals.failed += count(" failed");
                totals.ignored += count(" ignored");
            }
        }
    }
    let status = child.wait()?;
    if !status.success() {
        bail!("`cargo {}` failed ({status})", args.join(" "));
    }
    Ok(())
}

/// Engine workloads, each without and (where listed) with the SQLite ledger.
const ENGINE_WORKLOADS: &[(&str, bool)] = &[
    ("independent", false),
    ("independent", true),
    ("independent-100k", false),
    ("independent-100k", true),
    ("layered", false),
    ("layered", true),
    ("chain", false),
    ("chain", true),
    ("map-100k", false),
    ("block-100k", false),
    ("makespan", false),
];
const ENGINE_BENCH: &[&str] = &["bench", "-q", "-p", "plan-engine", "--bench", "engine"];

fn bench(root: &Path, only: &[String]) -> Result<()> {
    let out_dir = root.join("target/bench");
    std::fs::create_dir_all(&out_dir)?;
    let wanted = |name: &str| only.is_empty() || only.iter().any(|o| o == name);
    let mut results: Vec<Value> = Vec::new();

    cargo(root, &[ENGINE_BENCH, &["--no-run"]].concat())?;
    for &(workload, ledger) in ENGINE_WORKLOADS.iter().filter(|(w, _)| wanted(w)) {
        // One process per workload, so that peak RSS belongs to it alone.
        let mut args: Vec<&str> = ENGINE_BENCH.to_vec();
        args.extend(["--", workload]);
        if ledger {
            args.push("--ledger");
        }
        results.push(json!({"kind": "engine", "result": bench_line(root, &args)?}));
    }

    if wanted("mcp") {
        // Needs a real MCP server: installed like for the tests.
        prepare_mcp_servers(root)?;
        let args = ["bench", "-q", "-p", "plan-tools", "--bench", "mcp"];
        results.push(json!({"kind": "mcp", "result": bench_line(root, &args)?}));
    }

    if wanted("queue") {
        cargo(root, &["build", "-q", "--release", "-p", "plan-cli"])?;
        let binary = root.join("target/release/plan-cli");
        results.extend(queue_bench(&binary, &out_dir)?);
    }

    if wanted("tasks") {
        cargo(root, &["build", "-q", "--release", "-p", "plan-cli"])?;
        let binary = root.join("target/release/plan-cli");
        for result in tasks::bench(&binary, &out_dir)? {
            results.push(json!({"kind": "cli", "result": result}));
        }
    }

    if only.iter().any(|o| o == "ui") {
        // Not part of a plain `bench`: it needs chromium and chromedriver.
        cargo(root, &["build", "-q", "--release", "-p", "plan-cli"])?;
        let binary = root.join("target/release/plan-cli");
        for result in ui::bench(&binary, &out_dir)? {
            results.push(json!({"kind": "ui", "result": result}));
        }
    }

    if wanted("ledger") {
        cargo(root, &["build", "-q", "--release", "-p", "plan-cli"])?;
        let binary = root.join("target/release/plan-cli");
        results.push(ledger_bench(&binary, &out_dir)?);
    }

    if only.iter().any(|o| o == "peer") {
        // Not part of a plain `bench`: it installs the Python peer and takes minutes.
        cargo(root, &["build", "-q", "--release", "-p", "plan-cli"])?;
        let binary = root.join("target/release/plan-cli");
        results.extend(peer::bench(root, &binary, &out_dir)?);
    }

    if wanted("resolve") {
        let args = ["bench", "-q", "-p", "plan-vars", "--bench", "resolve"];
        results.push(json!({"kind": "vars", "result": bench_line(root, &args)?}));
    }

    if wanted("cli") {
        cargo(root, &["build", "-q", "--release", "-p", "plan-cli"])?;
        let binary = root.join("target/release/plan-cli");
        let small = out_dir.join("three-steps.json");
        std::fs::write(
            &small,
            json!({"id": "three", "steps": [
                {"id": "a", "tool": "echo", "args": {"n": 1}},
                {"id": "b", "tool": "echo", "args": {"n": 2}, "depends_on": ["a"]},
                {"id": "c", "tool": "echo", "args": {"n": 3}, "depends_on": ["b"]}
            ]})
            .to_string(),
        )?;
        let cold = time_runs(&binary, &small, 21)?;
        results.push(json!({"kind": "cli", "result": {
            "workload": "cold start (3-step plan, whole process, ledger on)",
            "steps": 3, "runs": 21, "median_ms": ms(cold.wall),
            "peak_rss_mib": cold.peak_rss_mib,
        }}));
        let hundred_k = out_dir.join("independent-100k.json");
        let steps: Vec<Value> = (0..100_000)
            .map(|i| json!({"id": format!("s{i}"), "tool": "echo", "args": {"n": i}}))
            .collect();
        std::fs::write(
            &hundred_k,
            serde_json::to_string(
                &json!({"id": "independent-100k", "max_concurrency": 64, "steps": steps}),
            )?,
        )?;
        let whole = time_runs(&binary, &hundred_k, 3)?;
        results.push(json!({"kind": "cli", "result": {
            "workload": "100,000 independent echo steps (whole process, ledger on)",
            "steps": 100_000, "runs": 3, "median_ms": ms(whole.wall),
            "steps_per_sec": 100_000.0 / whole.wall.as_secs_f64(),
            "peak_rss_mib": whole.peak_rss_mib,
        }}));
        let layered = out_dir.join("layered-50x200.json");
        let mut rng = 7u64;
        let mut next = move |bound: u64| {
            // xorshift: a fixed graph on every run without another dependency.
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % bound
        };
        let mut steps: Vec<Value> = Vec::with_capacity(10_000);
        for layer in 0..50u64 {
            for i in 0..200u64 {
                let mut deps: Vec<String> = Vec::new();
                while layer > 0 && deps.len() < 3 {
                    let dep = format!("l{}-{}", layer - 1, next(200));
                    if !deps.contains(&dep) {
                        deps.push(dep);
                    }
                }
                steps.push(json!({"id": format!("l{layer}-{i}"), "tool": "echo", "args": {"n": i}, "depends_on": deps}));
            }
        }
        std::fs::write(
            &layered,
            serde_json::to_string(
                &json!({"id": "layered", "max_concurrency": 64, "steps": steps}),
            )?,
        )?;
        let whole = time_runs(&binary, &layered, 3)?;
        results.push(json!({"kind": "cli", "result": {
            "workload": "layered DAG 50×200 (whole process, ledger on)",
            "steps": 10_000, "runs": 3, "median_ms": ms(whole.wall),
            "steps_per_sec": 10_000.0 / whole.wall.as_secs_f64(),
            "peak_rss_mib": whole.peak_rss_mib,
        }}));
        let big = out_dir.join("independent-10k.json");
        let steps: Vec<Value> = (0..10_000)
            .map(|i| json!({"id": format!("s{i}"), "tool": "echo", "args": {"n": i}}))
            .collect();
        std::fs::write(
            &big,
            serde_json::to_string(
                &json!({"id": "independent-10k", "max_concurrency": 64, "steps": steps}),
            )?,
        )?;
        let whole = time_runs(&binary, &big, 5)?;
        results.push(json!({"kind": "cli", "result": {
            "workload": "10,000 echo steps (whole process: parse, validate, run, print JSON)",
            "steps": 10_000, "runs": 5, "median_ms": ms(whole.wall),
            "steps_per_sec": 10_000.0 / whole.wall.as_secs_f64(),
            "peak_rss_mib": whole.peak_rss_mib,
        }}));
        let map_plan = out_dir.join("map-100k.json");
        let items: Vec<Value> = (0..100_000)
            .map(|i| json!({"id": i, "name": format!("item {i}")}))
            .collect();
        let map = json!({"id": "map-100k", "max_concurrency": 64, "variables": {"items": items}, "steps": [
            {"id": "m", "tool": "echo", "expand_on": "${items}", "args": {"name": "$each.name", "i": "$index"}, "binds": {"names": "$.name"}}
        ]});
        std::fs::write(&map_plan, serde_json::to_string(&map)?)?;
        let mapped = time_runs(&binary, &map_plan, 3)?;
        results.push(json!({"kind": "cli", "result": {
            "workload": "map over 100,000 items with echo and a bind (whole process, --json)",
            "steps": 100_000, "runs": 3, "median_ms": ms(mapped.wall),
            "steps_per_sec": 100_000.0 / mapped.wall.as_secs_f64(),
            "peak_rss_mib": mapped.peak_rss_mib,
        }}));
    }

    println!(
        "{:<70} {:>9} {:>12} {:>10} {:>10} {:>11}",
        "workload", "steps", "steps/s", "µs/step", "peak MiB", "run B/step"
    );
    // The peer's comparisons print their own table as they go.
    for entry in results.iter().filter(|entry| entry["kind"] != "peer") {
        let r = &entry["result"];
        let number = |key: &str, decimals: usize| {
            r.get(key)
                .and_then(Value::as_f64)
                .map_or("-".to_owned(), |v| format!("{v:.decimals$}"))
        };
        let name = format!(
            "{} {}",
            entry["kind"].as_str().unwrap_or(""),
            r["workload"].as_str().unwrap_or("")
        );
        println!(
            "{:<70} {:>9} {:>12} {:>10} {:>10} {:>11} {:>10}",
            name,
            r.get("steps")
                .and_then(Value::as_u64)
                .map_or("-".to_owned(), |n| n.to_string()),
            number("steps_per_sec", 0),
            if r.get("us_per_step").is_some() {
                number("us_per_step", 2)
            } else {
                format!("{} ms", number("median_ms", 1))
            },
            number("peak_rss_mib", 1),
            number("run_bytes_per_step", 0),
            number("db_bytes_per_step", 0),
        );
    }
    let summary = out_dir.join("summary.json");
    std::fs::write(
        &summary,
        serde_json::to_string_pretty(&json!({"results": results}))?,
    )?;
    for entry in &results {
        let r = &entry["result"];
        if let Some(cpu) = r.get("plan_cli_cpu_ms_per_task").and_then(Value::as_f64) {
            println!(
                "  per task: plan-cli itself {cpu:.1} ms CPU, git {:.1} ms ({} git processes in all), implementer {:.1} ms",
                r["git_ms_per_task"].as_f64().unwrap_or(0.0),
                r["git_calls"],
                r["implementer_ms_per_task"].as_f64().unwrap_or(0.0),
            );
        }
        if let Some(share) = r.get("server_cpu_share").and_then(Value::as_f64) {
            println!(
                "  the dashboard's server: {:.0} ms CPU over the run's {:.0} ms ({:.0}% of a core) while a page followed it",
                r["cpu_ms"].as_f64().unwrap_or(0.0),
                r["run_ms"].as_f64().unwrap_or(0.0),
                share * 100.0
            );
        }
        if let Some(added) = r.get("added_wall_ms_per_task").and_then(Value::as_f64) {
            println!(
                "  verify_after_merge adds per task: {added:.1} ms wall, git {:.1} ms, plan-cli itself {:.1} ms CPU",
                r["added_git_ms_per_task"].as_f64().unwrap_or(0.0),
                r["added_plan_cli_cpu_ms_per_task"].as_f64().unwrap_or(0.0),
            );
        }
    }
    println!("\nwritten to {}", summary.display());
    Ok(())
}

/// A new 10,000-step run on a fresh ledger and on one already holding 1,000,000 recorded
/// steps (ten earlier runs of 100,000), alternating, five rounds each.
fn ledger_bench(binary: &Path, out_dir: &Path) -> Result<Value> {
    let write_plan = |name: &str, n: usize| -> Result<PathBuf> {
        let path = out_dir.join(name);
        let steps: Vec<Value> = (0..n)
            .map(|i| json!({"id": format!("s{i}"), "tool": "echo", "args": {"n": i}}))
            .collect();
        std::fs::write(
            &path,
            serde_json::to_string(&json!({"id": name, "max_concurrency": 64, "steps": steps}))?,
        )?;
        Ok(path)
    };
    let big_plan = write_plan("ledger-fill-100k.json", 100_000)?;
    let plan = write_plan("ledger-run-10k.json", 10_000)?;
    let full = out_dir.join("ledger-1m.db");
    let fresh = out_dir.join("ledger-fresh.db");
    remove_ledger(&full);
    for _ in 0..10 {
        let status = Command::new(binary)
            .args(["run", "--json"])
            .arg(&big_plan)
            .env("PLAN_DB", &full)
            .stdout(std::process::Stdio::null())
            .status()?;
        if !status.success() {
            bail!("filling the ledger failed ({status})");
        }
    }
    let time = |db: &Path| -> Result<Duration> {
        let started = Instant::now();
        let status = Command::new(binary)
            .args(["run", "--json"])
            .arg(&plan)
            .env("PLAN_DB", db)
            .stdout(std::process::Stdio::null())
            .status()?;
        if !status.success() {
            bail!("the 10k run failed ({status})");
        }
        Ok(started.elapsed())
    };
    let (mut on_fresh, mut on_full) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        remove_ledger(&fresh);
        on_fresh.push(time(&fresh)?);
        on_full.push(time(&full)?);
    }
    on_fresh.sort();
    on_full.sort();
    let (a, b) = (on_fresh[2], on_full[2]);
    let size = std::fs::metadata(&full).map_or(0, |m| m.len());
    Ok(json!({"kind": "ledger", "result": {
        "workload": "10,000 echo steps on a ledger holding 1,000,000 steps vs a fresh one",
        "steps": 10_000, "median_ms": ms(b), "fresh_median_ms": ms(a),
        "slowdown": b.as_secs_f64() / a.as_secs_f64(),
        "ledger_bytes": size,
    }}))
}

/// Runs a benchmark binary through cargo and parses the JSON line it prints.
/// Throughput through Redis on loopback: 10,000 `echo` steps with 4 workers, and 400 50 ms
/// `sleep` steps with 1 and then 2 workers (8 steps at once each).
fn queue_bench(binary: &Path, out_dir: &Path) -> Result<Vec<Value>> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let mut redis = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .stdout(std::process::Stdio::null())
        .spawn()
        .context("starting redis-server (apt-get install redis-server)")?;
    let url = format!("redis://127.0.0.1:{port}");
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if started.elapsed() > Duration::from_secs(10) {
            bail!("redis-server did not start");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let run = |plan: &Path, workers: usize, concurrency: u32| -> Result<Duration> {
        let mut children = Vec::new();
        for _ in 0..workers {
            children.push(
                Command::new(binary)
                    .args([
                        "worker",
                        "--queue",
                        &url,
                        "--concurrency",
                        &concurrency.to_string(),
                    ])
                    .stderr(std::process::Stdio::null())
                    .spawn()?,
            );
        }
        std::thread::sleep(Duration::from_millis(300));
        let db = plan.with_extension("db");
        remove_ledger(&db);
        let started = Instant::now();
        let status = Command::new(binary)
            .args(["run", "--json", "--queue", &url])
            .arg(plan)
            .env("PLAN_DB", &db)
            .stdout(std::process::Stdio::null())
            .status()?;
        let took = started.elapsed();
        for child in &mut children {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
        }
        for mut child in children {
            let _ = child.wait();
        }
        if !status.success() {
            bail!("the queued run of {} failed ({status})", plan.display());
        }
        Ok(took)
    };
    let echo_plan = out_dir.join("queue-echo-10k.json");
    let steps: Vec<Value> = (0..10_000)
        .map(|i| json!({"id": format!("s{i}"), "tool": "echo", "args": {"n": i}}))
        .collect();
    std::fs::write(
        &echo_plan,
        json!({"max_concurrency": 256, "steps": steps}).to_string(),
    )?;
    let sleep_plan = out_dir.join("queue-sleep-400.json");
    let steps: Vec<Value> = (0..400)
        .map(|i| json!({"id": format!("s{i}"), "tool": "sleep", "args": {"ms": 50}}))
        .collect();
    std::fs::write(
        &sleep_plan,
        json!({"max_concurrency": 64, "steps": steps}).to_string(),
    )?;
    let echo = run(&echo_plan, 4, 64)?;
    let one = run(&sleep_plan, 1, 8)?;
    let two = run(&sleep_plan, 2, 8)?;
    let _ = redis.kill();
    let _ = redis.wait();
    Ok(vec![
        json!({"kind": "queue", "result": {
            "workload": "10,000 echo steps through Redis, 4 workers (whole run)",
            "steps": 10_000, "median_ms": ms(echo),
            "steps_per_sec": 10_000.0 / echo.as_secs_f64(),
        }}),
        json!({"kind": "queue", "result": {
            "workload": "400 sleep 50 ms steps, 2 workers vs 1 (8 at once each)",
            "steps": 400, "median_ms": ms(two),
            "steps_per_sec": 400.0 / two.as_secs_f64(),
            "one_worker_ms": ms(one),
            "speedup_two_over_one": one.as_secs_f64() / two.as_secs_f64(),
        }}),
    ])
}

fn bench_line(root: &Path, args: &[&str]) -> Result<Value> {
    let cargo_bin = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(cargo_bin)
        .args(args)
        .current_dir(root)
        .output()?;
    if !output.status.success() {
        bail!(
            "`cargo {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let line = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(line.trim()).with_context(|| format!("bench output: {line}"))
}

struct Timed {
    wall: Duration,
    peak_rss_mib: f64,
}

/// Median wall time of running the binary on a plan, `runs` times, and the largest peak RSS.
///
/// Each run is started by a small process of its own (this program's [`MEASURE`]), not by
/// this one: Linux carries the peak RSS of the memory a process replaces at `exec` into its
/// own figure, and a child spawned from here replaces this process's memory (vfork), which
/// holds the generated 100,000-step plans: every run then "peaked" at this process's size.
fn time_runs(binary: &Path, plan: &Path, runs: usize) -> Result<Timed> {
    let mut times = Vec::with_capacity(runs);
    let mut peak_kib = 0;
    // Each run records into a fresh ledger of its own, as a first run would.
    let db = plan.with_extension("db");
    for _ in 0..runs {
        remove_ledger(&db);
        let output = Command::new(std::env::current_exe()?)
            .arg(MEASURE)
            .arg(binary)
            .args(["run", "--json"])
            .arg(plan)
            .env("PLAN_DB", &db)
            .stderr(std::process::Stdio::inherit())
            .output()?;
        let text = String::from_utf8_lossy(&output.stdout);
        let measured: Value = serde_json::from_str(text.trim())
            .with_context(|| format!("measuring a run printed {text:?}"))?;
        // Every figure is required: a run measured as 0 s or 0 KiB would pass unnoticed.
        let field = |name: &str| {
            measured[name]
                .as_f64()
                .with_context(|| format!("measuring a run printed no `{name}`: {text:?}"))
        };
        let code = field("code")?;
        if code != 0.0 {
            bail!("{} exited with {code}", plan.display());
        }
        times.push(Duration::from_secs_f64(field("wall_s")?));
        peak_kib = peak_kib.max(field("max_rss_kib")? as i64);
    }
    times.sort();
    Ok(Timed {
        wall: times[times.len() / 2],
        peak_rss_mib: peak_kib as f64 / 1024.0,
    })
}

/// The internal subcommand that runs one command and prints its exit code, wall time and
/// peak RSS as JSON.
const MEASURE: &str = "__measure";

/// Runs `command` (stdout to /dev/null; stderr shown, so that a failing run says why) from
/// this small process, so that its peak RSS is its own (see [`time_runs`]).
fn measure(command: &[String]) -> Result<()> {
    let (program, args) = command.split_first().context("__measure needs a command")?;
    let started = Instant::now();
    let child = Command::new(program)
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .spawn()?;
    let (code, max_rss_kib) = wait_with_rusage(&child)?;
    let wall = started.elapsed();
    println!(
        "{}",
        json!({"code": code, "wall_s": wall.as_secs_f64(), "max_rss_kib": max_rss_kib})
    );
    Ok(())
}

/// Waits for the child with `wait4`, which also reports its peak RSS (std does not).
fn wait_with_rusage(child: &std::process::Child) -> Result<(i32, i64)> {
    let pid = libc::pid_t::try_from(child.id())?;
    let mut status: libc::c_int = 0;
    // SAFETY: `rusage` is plain data that wait4 fills in; the pid is our own child, which std
    // has not waited for (it only would on `wait`, which we never call).
    #[expect(
        unsafe_code,
        reason = "wait4 is the only way to get a child's peak RSS"
    )]
    let (waited, rusage) = unsafe {
        let mut rusage: libc::rusage = std::mem::zeroed();
        (libc::wait4(pid, &mut status, 0, &mut rusage), rusage)
    };
    if waited != pid {
        bail!("wait4 failed: {}", std::io::Error::last_os_error());
    }
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    Ok((code, rusage.ru_maxrss))
}

/// Deletes a ledger file with its WAL and shared-memory files, so a run starts on a fresh one.
fn remove_ledger(db: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}
