//! One plan, the same records, whatever the way it runs: generated plans (steps, binds, map
//! steps, blocks, `when`, `run_if`, failures with retries, steps that wait for an approval)
//! run by the real binary in-process, under `--durability async`, through `--queue` workers on
//! a real Redis, killed with `kill -9` and resumed until they end (by `plan-cli resume`, and
//! by the dashboard, the run going on in its process), and through `mcp serve` driven by the
//! official MCP Python SDK client. Their records must be the same, durations
//! aside. And a task plan (worktrees, a failed attempt, `verify_after_merge`) in-process,
//! under `--durability async`, through `--queue` workers and killed and resumed: the same
//! records, commit hashes and folders aside.
//!
//! CI runs a short pass; `PLAN_EQUIVALENCE_CASES=N` runs a longer one.
#![expect(clippy::unwrap_used, reason = "test helpers fail loudly on purpose")]

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Lab, Redis, path_str, published};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Value, json};

/// One generated step, before its id and dependencies are given.
#[derive(Debug, Clone)]
enum Kind {
    /// `echo` of its number and what an earlier step bound.
    Echo,
    /// `fail` for its first `times` attempts (always, when `None`), tried `attempts` times.
    Fail { times: Option<u32>, attempts: u32 },
    /// A map step over a literal list.
    Map { items: usize },
    /// A block of two nodes, the second reading the first.
    Block,
    /// `sleep` a few milliseconds (something for a kill to land on).
    Sleep { ms: u64 },
    /// A high-risk `echo`: the run waits for its approval.
    Approval,
    /// `respond` (`chat.respond`), read leniently: the run's answer, never a queue's job.
    Respond,
}

#[derive(Debug, Clone)]
struct Generated {
    kind: Kind,
    /// Earlier steps it depends on, as fractions of its position.
    deps: Vec<prop::sample::Index>,
    /// Its `when` reads the plan's `flag`.
    when: bool,
    /// `run_if: all_done`.
    all_done: bool,
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        4 => Just(Kind::Echo),
        2 => (prop::option::of(0u32..2), 1u32..3).prop_map(|(times, attempts)| Kind::Fail { times, attempts }),
        2 => (1usize..4).prop_map(|items| Kind::Map { items }),
        2 => Just(Kind::Block),
        2 => (0u64..25).prop_map(|ms| Kind::Sleep { ms }),
        1 => Just(Kind::Approval),
        1 => Just(Kind::Respond),
    ]
}

fn step() -> impl Strategy<Value = Generated> {
    (
        kind(),
        prop::collection::vec(any::<prop::sample::Index>(), 0..3),
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(kind, deps, when, all_done)| Generated {
            kind,
            deps,
            when,
            all_done,
        })
}

/// A plan of 2 to 7 generated steps, one of them a 40 ms `sleep` (where a kill lands), and
/// the value of its `flag`.
fn plan() -> impl Strategy<Value = Value> {
    (
        prop::collection::vec(step(), 2..8),
        any::<bool>(),
        any::<prop::sample::Index>(),
    )
        .prop_map(|(mut steps, flag, slow)| {
            let at = slow.index(steps.len());
            steps[at].kind = Kind::Sleep { ms: 40 };
            render(&steps, flag)
        })
}

fn render(steps: &[Generated], flag: bool) -> Value {
    let mut out: Vec<Value> = Vec::new();
    // Which earlier steps bind a value (`x<i>`) that later ones may read.
    let mut binds: Vec<bool> = Vec::new();
    for (i, generated) in steps.iter().enumerate() {
        let id = format!("s{i}");
        let mut deps: Vec<usize> = if i == 0 {
            Vec::new()
        } else {
            generated.deps.iter().map(|d| d.index(i)).collect()
        };
        deps.sort_unstable();
        deps.dedup();
        // Read what the nearest bound dependency bound.
        let read = deps
            .iter()
            .rev()
            .find(|&&d| binds[d])
            .map(|d| format!("${{x{d}}}"));
        let mut step = match &generated.kind {
            Kind::Echo => {
                let mut args = json!({"v": i});
                if let Some(read) = &read {
                    args["from"] = json!(read);
                }
                json!({"tool": "echo", "args": args, "binds": {format!("x{i}"): "$.v"}})
            }
            Kind::Fail { times, attempts } => {
                let mut args = json!({"message": format!("s{i} failed"), "retryable": true});
                if let Some(times) = times {
                    args["times"] = json!(times);
                }
                json!({"tool": "fail", "args": args, "retry": {"attempts": attempts, "backoff_ms": 1}})
            }
            Kind::Map { items } => {
                let list: Vec<String> = (0..*items).map(|k| format!("i{k}")).collect();
                json!({"tool": "echo", "expand_on": list, "args": {"item": "$each", "n": "$index"}})
            }
            Kind::Block => json!({"args": {"topic": i}, "block": {
                "entry_point": "a",
                "nodes": {
                    "a": {"tool": "echo", "args": {"t": "${input.topic}"}},
                    "b": {"tool": "echo", "args": {"seen": "${nodes.a.t}"}}
                },
                "transitions": {"a": "b"}
            }}),
            Kind::Sleep { ms } => json!({"tool": "sleep", "args": {"ms": ms}}),
            Kind::Approval => json!({"tool": "echo", "risk": "high", "args": {"deploy": i}}),
            Kind::Respond => {
                let mut args = json!({"message": format!("answer {i}"), "extra": true});
                if let Some(read) = &read {
                    args["seen"] = json!(read);
                }
                json!({"tool": "respond", "args": args})
            }
        };
        binds.push(matches!(generated.kind, Kind::Echo));
        step["id"] = json!(id);
        if !deps.is_empty() {
            step["depends_on"] = json!(deps.iter().map(|d| format!("s{d}")).collect::<Vec<_>>());
        }
        if generated.when {
            step["when"] = json!("vars.flag == true");
        }
        if generated.all_done {
            step["run_if"] = json!("all_done");
        }
        out.push(step);
    }
    if flag {
        // Half the plans end with an answer (`chat.respond`) after everything else.
        let all: Vec<String> = (0..steps.len()).map(|i| format!("s{i}")).collect();
        out.push(json!({"id": "answer", "tool": "chat.respond", "depends_on": all, "run_if": "all_done", "args": {"text": "done"}}));
    }
    json!({"id": "generated", "variables": {"flag": flag}, "steps": out})
}

/// What must be the same: each record without its duration, the status, the variables, what
/// waits for an approval and the run's answer.
fn comparable(report: &Value) -> Value {
    let records: Vec<Value> = report["records"]
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .map(|record| {
            let mut record = record.clone();
            if let Some(object) = record.as_object_mut() {
                object.remove("duration_ms");
                if object.get("step_id") == Some(&json!("__meta__")) {
                    // Its reason counts steps and says how long the run took.
                    object.remove("reason");
                }
            }
            record
        })
        .collect();
    let waiting: Vec<Value> = report["pending_approvals"]
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .map(|pending| pending["step_id"].clone())
        .collect();
    json!({
        "task_status": report["task_status"],
        "records": records,
        "variables": report["variables"],
        "waiting": waiting,
        "answer": report["answer"],
    })
}

/// `plan-cli ARGS` in the lab: its exit code and stdout as JSON.
fn json_of(lab: &Lab, args: &[&str]) -> Value {
    let output = lab.command().args(args).output().unwrap();
    serde_json::from_slice(&output.stdout).unwrap_or_else(|_| {
        panic!(
            "{args:?}: {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// Starts the run, kills it with -9 after `delay`, and resumes it (killing each resume too,
/// twice) until a resume ends by itself: the ledger's report of the run, and whether the kill
/// left it half done (a resume then had records to restore).
fn killed_and_resumed(lab: &Lab, plan: &str, delay: Duration) -> (Value, bool) {
    let events = lab.dir.path().join("events.ndjson");
    let mut child = lab
        .command()
        .args(["run", plan, "--json", "--events"])
        .arg(&events)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The kill lands `delay` after the first call succeeded (or the run ended first): mid-run
    // most often, whatever the machine's speed.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::time::Instant::now() < deadline
        && child.try_wait().unwrap().is_none()
        && !std::fs::read_to_string(&events)
            .unwrap_or_default()
            .contains("\"tool.succeeded\"")
    {
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(delay);
    let _ = child.kill();
    let _ = child.wait();
    let runs = json_of(lab, &["runs", "--json"]);
    let Some(run) = runs[0]["run_id"].as_str().map(str::to_owned) else {
        // Killed before it recorded the run: nothing happened, run it whole.
        return (json_of(lab, &["run", plan, "--json"]), false);
    };
    let killed = json_of(lab, &["status", &run, "--json"]);
    let half_done = killed["task_status"] == "INTERRUPTED"
        && killed["records"]
            .as_array()
            .is_some_and(|records| records.iter().any(|r| r["ok"] == json!(true)));
    for _ in 0..2 {
        let mut child = lab
            .command()
            .args(["resume", &run, "--json"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(delay / 2);
        let _ = child.kill();
        let _ = child.wait();
    }
    // A finished run's resume gives its report as it stands.
    json_of(lab, &["resume", &run, "--json"]);
    (json_of(lab, &["status", &run, "--json"]), half_done)
}

/// The plan run, killed with `kill -9` `delay` after its first call succeeded, then resumed
/// through the dashboard (`POST /api/runs/RUN/resume`, the run going on in the dashboard's
/// process) until it ends: its status then.
fn killed_and_resumed_in_the_dashboard(lab: &Lab, plan: &str, delay: Duration) -> Value {
    use common::ui::{bearer, post, serve, status_until};
    let mut child = lab
        .command()
        .args(["run", plan, "--json"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(delay);
    let _ = child.kill();
    let _ = child.wait();
    let runs = json_of(lab, &["runs", "--json"]);
    let Some(run) = runs[0]["run_id"].as_str().map(str::to_owned) else {
        return json_of(lab, &["run", plan, "--json"]);
    };
    let (ui, _) = serve(lab);
    let (name, value) = bearer();
    let answer = post(
        ui.port,
        &format!("/api/runs/{run}/resume"),
        &json!({}),
        &[(name, &value)],
    );
    assert!(
        [200, 202].contains(&answer.status),
        "the dashboard's resume: {}",
        answer.body
    );
    status_until(lab, &run, |status| status["task_status"] != "RUNNING")
}

/// A `plan-cli worker` on `redis`'s queue, in a lab of its own, once it has published its
/// tools.
fn worker(redis: &Redis, concurrency: u32) -> (KillOnDrop, Lab) {
    let lab = Lab::new();
    let child = lab
        .command()
        .args(["worker", "--queue", &redis.url(), "--concurrency"])
        .arg(concurrency.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    published(redis, 1);
    (KillOnDrop(child), lab)
}

/// A process killed when the test ends, however it ends.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The official MCP Python SDK client: `plan_validate` and `plan_run` of each plan in one
/// session, their answers.
const CLIENT: &str = r#"
import asyncio, json, sys, os
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

async def main():
    plans = json.loads(open(sys.argv[2]).read())
    params = StdioServerParameters(command=sys.argv[1], args=["mcp", "serve"], env=dict(os.environ))
    answers = []
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            for plan in plans:
                answer = {}
                for tool in ["plan_validate", "plan_run"]:
                    result = await session.call_tool(tool, {"plan": plan})
                    text = result.content[0].text if result.content else "null"
                    answer[tool] = json.loads(text) if not result.is_error else {"error": text}
                answers.append(answer)
    print(json.dumps(answers))

asyncio.run(main())
"#;

fn through_mcp_serve(lab: &Lab, plans: &[Value]) -> Vec<Value> {
    python_client(lab, CLIENT, plans)
}

/// Runs `client` (a Python script given the binary and a file of `plans`) with the Python the
/// tests installed: the JSON list it prints, an answer per plan. A hang fails the test.
fn python_client(lab: &Lab, client: &str, plans: &[Value]) -> Vec<Value> {
    let script = lab.dir.path().join("client.py");
    std::fs::write(&script, client).unwrap();
    let list = lab.dir.path().join("plans.json");
    std::fs::write(&list, Value::Array(plans.to_vec()).to_string()).unwrap();
    let client = Command::new(common::servers_dir().join("venv/bin/python"))
        .current_dir(lab.dir.path())
        .env_remove("PLAN_DB")
        .arg(&script)
        .arg(env!("CARGO_BIN_EXE_plan-cli"))
        .arg(&list)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let output = common::finish_within(client, Duration::from_secs(600));
    assert!(
        output.status.success(),
        "the MCP client failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice::<Value>(&output.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

/// Runs each plan as an MCP task of one `mcp serve` session (raw JSON-RPC: `tools/call` with
/// `task`, `tasks/get` until it ends or waits for an approval), and answers its report: the
/// task's result (`tasks/result`), or for a task that waits, `plan_status` of its run.
const TASKS: &str = r#"
import json, subprocess, sys, time
server = subprocess.Popen([sys.argv[1], "mcp", "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
n = 0
def rpc(method, params):
    global n
    n += 1
    server.stdin.write(json.dumps({"jsonrpc": "2.0", "id": n, "method": method, "params": params}) + "\n")
    server.stdin.flush()
    while True:
        message = json.loads(server.stdout.readline())
        if message.get("id") == n and "method" not in message:
            return message
rpc("initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "harness", "version": "1"}})
answers = []
for plan in json.loads(open(sys.argv[2]).read()):
    task = rpc("tools/call", {"name": "plan_run", "arguments": {"plan": plan}, "task": {}})["result"]["task"]["taskId"]
    deadline = time.time() + 60
    while True:
        status = rpc("tasks/get", {"taskId": task})["result"]["status"]
        if status != "working":
            break
        assert time.time() < deadline, f"task {task} still working"
        time.sleep(0.05)
    if status == "input_required":
        answer = rpc("tools/call", {"name": "plan_status", "arguments": {"run_id": task}})["result"]
    else:
        answer = rpc("tasks/result", {"taskId": task})["result"]
    answers.append(answer["structuredContent"])
server.stdin.close()
server.wait(timeout=60)
print(json.dumps(answers))
"#;

/// [`TASKS`]'s answers for `plans`.
fn as_mcp_tasks(lab: &Lab, plans: &[Value]) -> Vec<Value> {
    python_client(lab, TASKS, plans)
}

fn cases() -> u32 {
    std::env::var("PLAN_EQUIVALENCE_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(12)
}

#[test]
fn every_way_a_plan_runs_gives_the_same_records() {
    let redis = Redis::start();
    let url = redis.url();
    let _worker = worker(&redis, 8);

    let mut runner = TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    });
    // The plans and their in-process reports, for one `mcp serve` session at the end.
    let served = std::cell::RefCell::new(Vec::new());
    // Cases a kill left half done, so that their resume restored records.
    let resumed_half_done = std::cell::Cell::new(0u32);
    // Cases whose run gave an answer (`chat.respond`).
    let answered = std::cell::Cell::new(0u32);
    let result = runner.run(&(plan(), 0u64..15), |(plan, kill_after_ms)| {
        let lab = Lab::new();
        let file = lab.write("plan.json", &plan);
        let file = path_str(&file);
        let expected = comparable(&json_of(&lab, &["run", file, "--json"]));
        if expected["answer"].is_string() {
            answered.set(answered.get() + 1);
        }
        let mut ways = vec![
            (
                "--durability async",
                comparable(&json_of(
                    &lab,
                    &["run", file, "--json", "--durability", "async"],
                )),
            ),
            (
                "--queue",
                comparable(&json_of(&lab, &["run", file, "--json", "--queue", &url])),
            ),
        ];
        let killed = Lab::new();
        let killed_file = killed.write("plan.json", &plan);
        let (report, half_done) = killed_and_resumed(
            &killed,
            path_str(&killed_file),
            Duration::from_millis(kill_after_ms),
        );
        if half_done {
            resumed_half_done.set(resumed_half_done.get() + 1);
        }
        ways.push(("kill -9 and resume", comparable(&report)));
        let dashboard = Lab::new();
        let dashboard_file = dashboard.write("plan.json", &plan);
        let report = killed_and_resumed_in_the_dashboard(
            &dashboard,
            path_str(&dashboard_file),
            Duration::from_millis(kill_after_ms),
        );
        ways.push(("kill -9 and resume in the dashboard", comparable(&report)));
        for (way, got) in ways {
            if got != expected {
                return Err(TestCaseError::fail(format!(
                    "{way} differs for plan {plan:#}\nin-process: {expected:#}\n{way}: {got:#}"
                )));
            }
        }
        let validated = comparable_validation(&json_of(&lab, &["validate", file, "--json"]));
        served.borrow_mut().push((plan, expected, validated));
        Ok(())
    });
    if let Err(error) = result {
        panic!("{error}");
    }
    eprintln!(
        "{} of the cases were killed half done and resumed",
        resumed_half_done.get()
    );
    assert!(
        answered.get() > 0,
        "no case gave an answer: it was never compared"
    );
    // The kills are worth something only if some landed mid-run.
    assert!(
        resumed_half_done.get() > 0,
        "no kill left a run half done: the kill -9 way was never tested"
    );
    let served = served.into_inner();
    let lab = Lab::new();
    let plans: Vec<Value> = served.iter().map(|(plan, _, _)| plan.clone()).collect();
    let answers = through_mcp_serve(&lab, &plans);
    let tasks = as_mcp_tasks(&Lab::new(), &plans);
    assert_eq!(tasks.len(), served.len());
    for ((plan, expected, _), report) in served.iter().zip(&tasks) {
        assert_eq!(
            &comparable(report),
            expected,
            "mcp serve's task differs for plan {plan:#}: {report:#}"
        );
    }
    for ((plan, expected, validated), answer) in served.iter().zip(&answers) {
        assert_eq!(
            &comparable(&answer["plan_run"]),
            expected,
            "mcp serve differs for plan {plan:#}: {answer:#}"
        );
        assert_eq!(
            &comparable_validation(&answer["plan_validate"]),
            validated,
            "plan_validate differs from validate --json for plan {plan:#}: {answer:#}"
        );
    }
}

/// A validation, but for the plan's default id (the file's name, or the server's) and each
/// issue's help (the CLI adds the flags that act on it).
fn comparable_validation(validation: &Value) -> Value {
    let mut validation = validation.clone();
    validation["plan_id"] = Value::Null;
    for key in ["errors", "warnings"] {
        for issue in validation[key].as_array_mut().into_iter().flatten() {
            issue["help"] = Value::Null;
        }
    }
    validation
}

/// A task plan in a fresh repository in `lab`: three tasks in a chain (the first wrong on its
/// first attempt), the combination checked before the base moves, then an `echo` step. The
/// plan file's path.
fn task_plan(lab: &Lab) -> std::path::PathBuf {
    let repo = lab.dir.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    common::git(&repo, &["init", "-q", "-b", "trunk"]);
    let agent = "#!/bin/sh\nif [ \"$1/$2\" = T1/1 ]; then echo wrong > \"$1.txt\"; else echo right > \"$1.txt\"; fi\n";
    std::fs::write(repo.join("agent.sh"), agent).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        repo.join("agent.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    common::git(&repo, &["add", "-A"]);
    common::git(&repo, &["commit", "-qm", "start"]);
    let task = |id: &str, deps: &[&str]| {
        json!({"id": id, "layer": "1-core", "depends_on": deps, "task": {
            "implement": {"tool": "exec", "args": {"argv": ["./agent.sh", "${task.id}", "${task.attempt}"]}},
            "verify": [{"argv": ["grep", "-q", "right", format!("{id}.txt")]}]
        }})
    };
    let plan = json!({"id": "chain", "workspace": {
            "repo": ".",
            "verify_after_merge": [{"argv": ["sh", "-c", "! grep -q wrong *.txt"]}]
        }, "steps": [
            task("T1", &[]), task("T2", &["T1"]), task("T3", &["T2"]),
            {"id": "done", "tool": "echo", "args": {"text": "merged"}, "depends_on": ["T3"]}
    ]});
    let file = repo.join("plan.json");
    std::fs::write(&file, plan.to_string()).unwrap();
    file
}

/// `comparable`, with what differs between repositories made apart written the same way:
/// commit hashes and the lab's folder.
fn comparable_tasks(report: &Value, lab: &Lab) -> Value {
    fn scrub(value: &mut Value, lab: &str) {
        match value {
            Value::String(text) => {
                let hex = text.len() >= 7
                    && text.len() <= 40
                    && text.bytes().all(|b| b.is_ascii_hexdigit());
                if hex {
                    *text = "<hash>".to_owned();
                } else if text.contains(lab) {
                    *text = text.replace(lab, "<lab>");
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|item| scrub(item, lab)),
            Value::Object(map) => map.values_mut().for_each(|item| scrub(item, lab)),
            _ => {}
        }
    }
    let mut value = comparable(report);
    let lab = std::fs::canonicalize(lab.dir.path()).unwrap();
    scrub(&mut value, &lab.display().to_string());
    scrub(
        &mut value,
        &lab.display().to_string().replace("/private", ""),
    );
    value
}

/// A task plan gives the same records in-process, under `--durability async`, through
/// `--queue` workers (which run the task's calls in its worktree on this machine), and killed
/// with `kill -9` and resumed; and its state file says the same.
#[test]
fn a_task_plan_gives_the_same_records_every_way() {
    let redis = Redis::start();
    let url = redis.url();
    let _worker = worker(&redis, 4);
    let way = |extra: &[&str]| {
        let lab = Lab::new();
        let file = task_plan(&lab);
        let mut args = vec!["run", path_str(&file), "--json"];
        args.extend_from_slice(extra);
        let report = json_of(&lab, &args);
        (comparable_tasks(&report, &lab), report)
    };
    let (expected, report) = way(&[]);
    assert_eq!(report["task_status"], "COMPLETED", "{report}");
    let ids: Vec<&str> = (report["records"].as_array().unwrap().iter())
        .filter_map(|r| r["step_id"].as_str())
        .collect();
    for id in [
        "T1/implement#1",
        "T1/check-1#1",
        "T1/implement#2",
        "T1/merge-check-1#2",
        "T3",
        "done",
    ] {
        assert!(ids.contains(&id), "{id} in {ids:?}");
    }
    for (name, extra) in [
        ("--durability async", vec!["--durability", "async"]),
        ("--queue", vec!["--queue", url.as_str()]),
    ] {
        let (got, _) = way(&extra);
        assert_eq!(got, expected, "{name} differs");
    }
    let mut kills_half_done = 0;
    for delay in [0u64, 40, 120] {
        let lab = Lab::new();
        let file = task_plan(&lab);
        let (report, half_done) =
            killed_and_resumed(&lab, path_str(&file), Duration::from_millis(delay));
        kills_half_done += u32::from(half_done);
        assert_eq!(
            comparable_tasks(&report, &lab),
            expected,
            "kill -9 after {delay} ms and resume differs"
        );
    }
    eprintln!("{kills_half_done} of 3 kills left the task plan half done");
}
