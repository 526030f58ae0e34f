//! `bench ui`: the dashboard in headless Chromium (over WebDriver, as its tests drive it)
//! against the release binary: the time from opening a run's page to its graph drawn, for a run
//! of 10,000 steps and for a map of 100,000 items (drawn as one node); and the CPU the
//! dashboard's server spends while a page follows a live run of 10,000 steps.

use std::io::BufRead as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use serde_json::{Value, json};

use crate::webdriver::Browser;

const TOKEN: &str = "bench-ui-token-0123456789";

/// Each figure of the benchmark.
pub(crate) fn bench(binary: &Path, out_dir: &Path) -> Result<Vec<Value>> {
    let dir = out_dir.join("ui");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let db = dir.join("ledger.db");
    let layered = write(&dir, "steps-10k.json", &layered_plan(100, 100, None))?;
    let items: Vec<u32> = (0..100_000).collect();
    let map = write(
        &dir,
        "map-100k.json",
        &json!({"id": "map-100k", "max_concurrency": 64, "steps": [
            {"id": "each", "tool": "echo", "expand_on": items, "args": {"item": "$each"}}
        ]}),
    )?;
    let layered_run = run(binary, &db, &layered)?;
    let map_run = run(binary, &db, &map)?;
    let mut ui = Ui::start(binary, &db)?;
    let browser = Browser::start(1280, 1000).map_err(|e| anyhow!(e))?;
    let mut results = Vec::new();
    for (workload, run_id, nodes) in [
        ("first graph, 10,000 steps", &layered_run, 10_000),
        ("first graph, a map of 100,000 items", &map_run, 1),
    ] {
        let mut times = Vec::new();
        for _ in 0..3 {
            times.push(first_graph(&browser, ui.port, run_id, nodes)?);
        }
        times.sort_by(f64::total_cmp);
        results.push(json!({
            "workload": format!("ui {workload} (headless Chromium)"),
            "steps": if nodes == 1 { 100_000 } else { 10_000 },
            "median_ms": times[1],
            "runs": times.len(),
        }));
    }
    // Following a live run (10,000 steps of 20 ms, 64 at once): the server's CPU from the
    // run's start to its end, with its page open and following (each event asks for the run
    // again, paced by the page).
    let live = write(&dir, "live-10k.json", &layered_plan(100, 100, Some(20)))?;
    let before = ui.cpu()?;
    let started = Instant::now();
    let mut running = Command::new(binary)
        .arg("--db")
        .arg(&db)
        .args(["run", "--json"])
        .arg(&live)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let run_id = loop {
        let listed = Command::new(binary)
            .arg("--db")
            .arg(&db)
            .args(["runs", "--json", "--plan", "live-10k"])
            .output()?;
        let runs: Value = serde_json::from_slice(&listed.stdout).unwrap_or(Value::Null);
        if let Some(id) = runs[0]["run_id"].as_str() {
            break id.to_owned();
        }
        if started.elapsed() > Duration::from_secs(60) {
            bail!("the live run did not start");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    browser
        .open(&format!(
            "http://127.0.0.1:{}/runs/{run_id}?token={TOKEN}",
            ui.port
        ))
        .map_err(|e| anyhow!(e))?;
    let status = running.wait()?;
    let run_ms = started.elapsed().as_secs_f64() * 1000.0;
    if !status.success() {
        bail!("the live run failed ({status})");
    }
    // The page sees the end (its last reads are the server's too).
    browser
        .wait_for(
            "the page to show the end",
            Duration::from_secs(120),
            Duration::from_millis(50),
            "return document.getElementById('status').textContent;",
            |s| s == "COMPLETED",
        )
        .map_err(|e| anyhow!(e))?;
    let cpu_ms = (ui.cpu()? - before).as_secs_f64() * 1000.0;
    results.push(json!({
        "workload": "ui server CPU following a live run of 10,000 steps",
        "steps": 10_000,
        "cpu_ms": cpu_ms,
        "run_ms": run_ms,
        "server_cpu_share": cpu_ms / run_ms,
    }));
    ui.stop();
    Ok(results)
}

/// `rows` chains of `columns` echo steps (or `sleep` steps of `sleep_ms`), each step after the
/// one before it in its chain and after the next chain's one (a graph with crossings to lay
/// out, not just lines).
fn layered_plan(rows: usize, columns: usize, sleep_ms: Option<u64>) -> Value {
    let id = |r: usize, c: usize| format!("s{c}-{r}");
    let mut steps = Vec::new();
    for c in 0..columns {
        for r in 0..rows {
            let mut step = match sleep_ms {
                Some(ms) => json!({"id": id(r, c), "tool": "sleep", "args": {"ms": ms}}),
                None => json!({"id": id(r, c), "tool": "echo", "args": {"n": c * rows + r}}),
            };
            if c > 0 {
                step["depends_on"] = json!([id(r, c - 1), id((r + 1) % rows, c - 1)]);
            }
            steps.push(step);
        }
    }
    let name = if sleep_ms.is_some() {
        "live-10k"
    } else {
        "steps-10k"
    };
    json!({"id": name, "max_concurrency": 64, "steps": steps})
}

fn write(dir: &Path, name: &str, plan: &Value) -> Result<std::path::PathBuf> {
    let path = dir.join(name);
    std::fs::write(&path, plan.to_string())?;
    Ok(path)
}

/// Runs a plan to its end in ledger `db`: its run id.
fn run(binary: &Path, db: &Path, plan: &Path) -> Result<String> {
    let output = Command::new(binary)
        .arg("--db")
        .arg(db)
        .args(["run", "--json"])
        .arg(plan)
        .output()?;
    let report: Value = serde_json::from_slice(&output.stdout).with_context(|| {
        format!(
            "{}: {}",
            plan.display(),
            String::from_utf8_lossy(&output.stderr)
        )
    })?;
    report["run_id"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| anyhow!("no run id: {report}"))
}

/// Opens run `run_id`'s page: the milliseconds from the start of the navigation to the graph
/// drawn (the page's `plan-ui:first-graph` mark), once it has `nodes` nodes.
fn first_graph(browser: &Browser, port: u16, run_id: &str, nodes: usize) -> Result<f64> {
    browser.open("about:blank").map_err(|e| anyhow!(e))?;
    browser
        .open(&format!(
            "http://127.0.0.1:{port}/runs/{run_id}?token={TOKEN}"
        ))
        .map_err(|e| anyhow!(e))?;
    let mark = browser
        .wait_for(
            "the graph",
            Duration::from_secs(300),
            Duration::from_millis(20),
            "const m = performance.getEntriesByName('plan-ui:first-graph'); return m.length ? [m[0].startTime, document.querySelectorAll('g.step').length] : null;",
            |v| !v.is_null(),
        )
        .map_err(|e| anyhow!(e))?;
    if mark[1].as_u64() != Some(nodes as u64) {
        bail!("run {run_id}'s graph has {} nodes, not {nodes}", mark[1]);
    }
    mark[0].as_f64().ok_or_else(|| anyhow!("no time: {mark}"))
}

/// `plan-cli ui` on the ledger, killed when dropped.
struct Ui {
    child: std::process::Child,
    port: u16,
}

impl Ui {
    fn start(binary: &Path, db: &Path) -> Result<Ui> {
        let mut child = Command::new(binary)
            .arg("--db")
            .arg(db)
            .args(["ui", "--port", "0", "--no-open"])
            .env("PLAN_UI_TOKEN", TOKEN)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let mut line = String::new();
        let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
        std::io::BufReader::new(stdout).read_line(&mut line)?;
        let port = line
            .trim()
            .strip_prefix("dashboard: http://127.0.0.1:")
            .and_then(|rest| rest.split('/').next())
            .and_then(|port| port.parse().ok())
            .ok_or_else(|| anyhow!("the dashboard said {line:?}"))?;
        Ok(Ui { child, port })
    }

    /// The CPU time the server has used (user and system), from /proc.
    fn cpu(&self) -> Result<Duration> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id()))?;
        // After the command's name (in parentheses): fields 14 and 15 of the line, in ticks.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest)
            .unwrap_or("")
            .split_whitespace()
            .collect();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<u64>().ok())
                .unwrap_or(0)
        };
        // SAFETY: sysconf reads a constant of the system.
        #[allow(unsafe_code)]
        let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
        let total = ticks(11) + ticks(12);
        Ok(Duration::from_millis(total * 1000 / per_second))
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Ui {
    fn drop(&mut self) {
        self.stop();
    }
}
