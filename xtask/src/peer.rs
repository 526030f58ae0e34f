//! `cargo xtask bench peer`: the same plans through the Python peer (mcp-cli 0.20.1's
//! `PlanRunner`, the executor of mcp-cli's execution plans) and through the release binary,
//! alternating, in one run, with each ratio printed.
//!
//! The peer is timed inside `execute_plan` only (its interpreter start and imports are not
//! counted), with its checkpoint on; plan-cli is timed as a whole process (parse, validate,
//! run, print `--json`) with a fresh ledger each run. Both run the plans `peer/bench.py`
//! generates (the peer's `noop` is plan-cli's `echo`).
//!
//! With `PLAN_BENCH_BASELINE=/path/to/an/older/plan-cli`, that binary runs the same plans in
//! the same rounds too, for before-and-after figures from one run.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::ms;
use serde_json::{Value, json};

const PEER_PACKAGE: &str = "mcp-cli==0.20.1";

/// One side-by-side comparison.
struct Scenario {
    name: &'static str,
    /// bench.py's scenario.
    peer_scenario: &'static str,
    max_concurrency: u32,
    bind: bool,
    rounds: usize,
    /// The dependency-driven ideal makespan, for the sleep scenarios.
    ideal_ms: Option<f64>,
}

const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "10,000 independent echo steps, concurrency 4",
        peer_scenario: "wide",
        max_concurrency: 4,
        bind: false,
        rounds: 5,
        ideal_ms: None,
    },
    Scenario {
        name: "10,000 independent echo steps, concurrency 64",
        peer_scenario: "wide",
        max_concurrency: 64,
        bind: false,
        rounds: 5,
        ideal_ms: None,
    },
    Scenario {
        name: "1,000-step chain, durability sync",
        peer_scenario: "linear",
        max_concurrency: 4,
        bind: false,
        rounds: 5,
        ideal_ms: None,
    },
    Scenario {
        name: "1,000-step chain with --bind (values nest 1,000 deep)",
        peer_scenario: "linear",
        max_concurrency: 4,
        bind: true,
        rounds: 3,
        ideal_ms: None,
    },
    Scenario {
        name: "skewed_anti: two chains of 1/100 ms sleeps in anti-phase",
        peer_scenario: "skewed_anti",
        max_concurrency: 4,
        bind: false,
        rounds: 5,
        ideal_ms: Some(505.0),
    },
];

/// Runs every scenario; returns one JSON object per scenario.
pub(crate) fn bench(root: &Path, binary: &Path, out_dir: &Path) -> Result<Vec<Value>> {
    let python = prepare_peer(root)?;
    let dir = out_dir.join("peer");
    std::fs::create_dir_all(&dir)?;
    // bench.py keeps its scratch HOME and checkpoints beside itself: run a copy.
    let script = dir.join("bench.py");
    std::fs::copy(root.join("xtask/peer/bench.py"), &script)?;
    let baseline = std::env::var_os("PLAN_BENCH_BASELINE").map(PathBuf::from);
    let load = load_average();
    let mut results = Vec::new();
    println!("machine load before: {load}");
    println!(
        "{:<60} {:>11} {:>11} {:>8} {:>11} {:>8}",
        "workload", "peer", "plan-cli", "ratio", "baseline", "ratio"
    );
    for scenario in SCENARIOS {
        let plan_path = dir.join(format!(
            "{}{}.json",
            scenario.peer_scenario,
            if scenario.bind { "-bind" } else { "" }
        ));
        write_plan(&python, &script, scenario, &plan_path)?;
        let db = dir.join("ledger.db");
        let mut peer_times = Vec::new();
        let mut ours = Vec::new();
        let mut before = Vec::new();
        // Alternating, so that a noisy spell of the machine hits both sides alike. The two
        // builds take turns at running first after the peer, whose writes the file system may
        // still be flushing when the next process syncs its ledger.
        for round in 0..scenario.rounds {
            peer_times.push(run_peer(&python, &script, scenario)?);
            let old_first = round % 2 == 1;
            if let Some(old) = baseline.as_ref().filter(|_| old_first) {
                before.push(run_ours(old, &plan_path, &db, scenario, false)?);
            }
            ours.push(run_ours(binary, &plan_path, &db, scenario, true)?);
            if let Some(old) = baseline.as_ref().filter(|_| !old_first) {
                before.push(run_ours(old, &plan_path, &db, scenario, false)?);
            }
        }
        let before = (!before.is_empty()).then(|| median(&mut before));
        let peer = median(&mut peer_times);
        let plan_cli = median(&mut ours);
        let ratio = peer.as_secs_f64() / plan_cli.as_secs_f64();
        println!(
            "{:<60} {:>9.1}ms {:>9.1}ms {:>7.2}× {:>11} {:>8}{}",
            scenario.name,
            ms(peer),
            ms(plan_cli),
            ratio,
            before.map_or("-".to_owned(), |b| format!("{:.1}ms", ms(b))),
            before.map_or("-".to_owned(), |b| format!(
                "{:.2}×",
                peer.as_secs_f64() / b.as_secs_f64()
            )),
            scenario.ideal_ms.map_or(String::new(), |ideal| format!(
                "  (plan-cli makespan {:.3} × the {ideal:.0} ms ideal)",
                ms(plan_cli) / ideal
            )),
        );
        results.push(json!({
            "kind": "peer",
            "result": {
                "workload": scenario.name,
                "peer_median_ms": ms(peer),
                "plan_cli_median_ms": ms(plan_cli),
                "ratio": ratio,
                "baseline_median_ms": before.map(ms),
                "rounds": scenario.rounds,
                "ideal_ms": scenario.ideal_ms,
                "makespan_over_ideal": scenario.ideal_ms.map(|ideal| ms(plan_cli) / ideal),
            }
        }));
    }
    println!("machine load after: {}", load_average());
    Ok(results)
}

/// Installs the peer into `target/peer-venv` unless it is there already; returns its python.
fn prepare_peer(root: &Path) -> Result<PathBuf> {
    let venv = root.join("target/peer-venv");
    let python = venv.join("bin/python");
    let stamp = venv.join("installed.txt");
    if std::fs::read_to_string(&stamp).is_ok_and(|have| have == PEER_PACKAGE) {
        return Ok(python);
    }
    eprintln!("installing {PEER_PACKAGE} into {}", venv.display());
    let status = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .context("python3 -m venv (is python3-venv installed?)")?;
    if !status.success() {
        bail!("python3 -m venv failed ({status})");
    }
    let status = Command::new(venv.join("bin/pip"))
        .args([
            "install",
            "--quiet",
            "--disable-pip-version-check",
            PEER_PACKAGE,
        ])
        .status()
        .context("pip install")?;
    if !status.success() {
        bail!("pip install {PEER_PACKAGE} failed ({status})");
    }
    std::fs::write(&stamp, PEER_PACKAGE)?;
    Ok(python)
}

/// The scenario's plan as bench.py makes it, with plan-cli's `echo` for the peer's `noop`.
fn write_plan(python: &Path, script: &Path, scenario: &Scenario, out: &Path) -> Result<()> {
    let code = format!(
        "import sys, json; sys.path.insert(0, {dir:?}); import bench\n\
         plan, _ = bench.SCENARIOS[{name:?}]()\n\
         plan = bench.apply_bind(plan) if {bind} else plan\n\
         print(json.dumps(plan))",
        dir = script
            .parent()
            .map(|dir| dir.display().to_string())
            .unwrap_or_default(),
        name = scenario.peer_scenario,
        bind = if scenario.bind { "True" } else { "False" },
    );
    let output = Command::new(python).args(["-c", &code]).output()?;
    if !output.status.success() {
        bail!(
            "making the {} plan failed: {}",
            scenario.peer_scenario,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let mut plan: Value = serde_json::from_slice(&output.stdout)?;
    if let Some(steps) = plan["steps"].as_array_mut() {
        for step in steps {
            if step["tool"] == "noop" {
                step["tool"] = json!("echo");
            }
        }
    }
    std::fs::write(out, serde_json::to_string(&plan)?)?;
    Ok(())
}

/// One run of the peer in a process of its own; the time it reports for `execute_plan`.
fn run_peer(python: &Path, script: &Path, scenario: &Scenario) -> Result<Duration> {
    let mut command = Command::new(python);
    command
        .arg(script)
        .args(["--scenario", scenario.peer_scenario])
        .args(["--checkpoint", "on", "--runs", "1"])
        .args(["--max-concurrency", &scenario.max_concurrency.to_string()]);
    if scenario.bind {
        command.arg("--bind");
    }
    let output = command.output().context("running the peer")?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|line| line.starts_with('{'))
        .with_context(|| {
            format!(
                "the peer printed no result: {}",
                String::from_utf8_lossy(&output.stderr)
            )
        })?;
    let result: Value = serde_json::from_str(line)?;
    if result["all_ok"] != json!(true) {
        bail!("the peer's run failed: {line}");
    }
    let seconds = result["median_s"]
        .as_f64()
        .context("the peer's result has no median_s")?;
    Ok(Duration::from_secs_f64(seconds))
}

/// One whole-process run of plan-cli with a fresh ledger (`durability`: say `--durability
/// sync`, which a baseline from before the flag does not know).
fn run_ours(
    binary: &Path,
    plan: &Path,
    db: &Path,
    scenario: &Scenario,
    durability: bool,
) -> Result<Duration> {
    crate::remove_ledger(db);
    let started = Instant::now();
    let mut command = Command::new(binary);
    command.args(["run", "--json"]);
    if durability {
        command.args(["--durability", "sync"]);
    }
    let status = command
        .args(["--max-concurrency", &scenario.max_concurrency.to_string()])
        .arg(plan)
        .env("PLAN_DB", db)
        .stdout(Stdio::null())
        .status()?;
    let elapsed = started.elapsed();
    if !status.success() {
        bail!("plan-cli run {} failed ({status})", plan.display());
    }
    Ok(elapsed)
}

fn median(times: &mut [Duration]) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// The 1-, 5- and 15-minute load averages, to note how busy the machine was.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|_| "unknown".to_owned())
}
