//! Runs through a BullMQ queue: real `redis-server`s on free loopback ports, real worker
//! processes (plan-cli's, and BullMQ's own in Node and Python, from npm and PyPI), and
//! `kill -9`.
#![expect(clippy::unwrap_used, reason = "test helpers fail loudly on purpose")]

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{
    Lab, Redis, finish_within, free_port, outcomes, path_str, published, record, redis_cli,
    servers_dir, wait_until,
};
use predicates::prelude::*;
use serde_json::{Value, json};

fn worker(lab: &Lab, url: &str, extra: &[&str]) -> Child {
    let mut args = vec!["worker", "--queue", url];
    args.extend(extra);
    lab.spawn(&args)
}

/// Sends `signal` to a worker and waits for it: its exit code and what it wrote to stderr.
fn stop(child: Child, signal: &str) -> (Option<i32>, String) {
    Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .unwrap();
    let output = child.wait_with_output().unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// What a process wrote on stderr until it wrote `needle` (or closed stderr).
fn stderr_until(child: &mut Child, needle: &str) -> String {
    let mut stderr = child.stderr.take().unwrap();
    let mut text = String::new();
    let mut buffer = [0u8; 512];
    while !text.contains(needle) {
        match std::io::Read::read(&mut stderr, &mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => text.push_str(&String::from_utf8_lossy(&buffer[..n])),
        }
    }
    text
}

/// Runs one of the examples of `examples/queue` with Node, from a folder of the lab where the
/// npm packages the tests installed are found (Node looks for them beside the script).
fn node(lab: &Lab, script: &str, url: &str) -> Child {
    node_with(lab, script, url, &[])
}

/// [`node`], with environment variables.
fn node_with(lab: &Lab, script: &str, url: &str, env: &[(&str, &str)]) -> Child {
    let dir = node_dir(lab);
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/queue");
    std::fs::copy(examples.join(script), dir.join(script)).unwrap();
    Command::new("node")
        .arg(dir.join(script))
        .env("REDIS_URL", url)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("node")
}

/// A folder of the lab where Node finds the npm packages the tests installed (beside a script).
fn node_dir(lab: &Lab) -> std::path::PathBuf {
    let dir = lab.dir.path().join("node");
    if !dir.exists() {
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::symlink(
            servers_dir().join("npm/node_modules"),
            dir.join("node_modules"),
        )
        .unwrap();
    }
    dir
}

/// The Python worker of `examples/queue`, with the PyPI `bullmq` the tests installed.
fn python_worker(url: &str) -> Child {
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/queue");
    Command::new(servers_dir().join("venv/bin/python"))
        .arg(examples.join("worker.py"))
        .env("REDIS_URL", url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python")
}

/// The count in a plan-cli worker's last line: "N calls made (M taken over …)".
fn calls_made(log: &str) -> (u64, u64) {
    let line = log
        .lines()
        .find(|l| l.contains("calls made") || l.contains("call made"))
        .unwrap_or_else(|| panic!("no totals in the worker's log: {log}"));
    let numbers: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect();
    let n = numbers.len();
    (numbers[n - 2], numbers[n - 1])
}

/// A 500-step plan: chains of ten, some steps sleeping so that workers hold work for a while.
fn big_plan() -> Value {
    let steps: Vec<Value> = (0..500)
        .map(|i| {
            let deps: Vec<String> = if i % 10 == 0 {
                Vec::new()
            } else {
                vec![format!("s{}", i - 1)]
            };
            if i % 25 == 5 {
                json!({"id": format!("s{i}"), "tool": "sleep", "args": {"ms": 300}, "depends_on": deps})
            } else {
                json!({"id": format!("s{i}"), "tool": "echo", "args": {"n": i}, "depends_on": deps})
            }
        })
        .collect();
    json!({"max_concurrency": 16, "steps": steps})
}

#[test]
fn an_unreachable_queue_fails_the_run_at_once() {
    let lab = Lab::new();
    let plan = lab.write(
        "p.json",
        &json!({"steps": [{"id": "a", "tool": "echo", "args": {}}]}),
    );
    let url = format!("redis://127.0.0.1:{}", free_port());
    lab.cli()
        .args(["run", path_str(&plan), "--queue", &url])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("E_QUEUE_UNAVAILABLE"));
    let (_, runs) = lab.json(&["runs", "--json"]);
    assert!(runs.as_array().unwrap().is_empty(), "no run was started");
}

#[test]
fn three_workers_one_killed_mid_run_give_the_in_process_records() {
    let redis = Redis::start();
    let lab = Lab::new();
    let plan = lab.write("big.json", &big_plan());
    let (code, expected) = lab.json(&["run", path_str(&plan), "--json"]);
    assert_eq!(code, 0);

    let url = redis.url();
    // The victim works alone until it holds a sleeping call, and dies holding it, without a
    // chance to clean up: what it held is handed to the two workers started after it by
    // BullMQ's stalled-job check once its lock expires. (Waiting for the held job, not for a
    // fixed time, keeps this from depending on how fast the machine is.)
    let victim = worker(&lab, &url, &["--concurrency", "4", "--lock-duration", "2s"]);
    published(&redis, 1);
    let coordinator = lab.spawn(&["run", path_str(&plan), "--json", "--queue", &url]);
    let sleeping = |redis: &Redis| {
        redis_cli(redis, &["LRANGE", "bull:steps:active", "0", "-1"])
            .lines()
            .any(|job| {
                let step = job.split('/').nth(1).unwrap_or("");
                let number: u32 = step
                    .trim_start_matches('s')
                    .split('#')
                    .next()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                number % 25 == 5
            })
    };
    wait_until("the first worker never took a sleeping call", || {
        sleeping(&redis)
    });
    let (code, _) = stop(victim, "KILL");
    assert_eq!(code, None, "killed by a signal");
    assert_ne!(
        redis_cli(&redis, &["LLEN", "bull:steps:active"]),
        "0",
        "the killed worker held calls"
    );
    let workers: Vec<Child> = (0..2)
        .map(|_| worker(&lab, &url, &["--concurrency", "4", "--lock-duration", "2s"]))
        .collect();
    let output = coordinator.wait_with_output().unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["task_status"], "COMPLETED");
    assert_eq!(
        outcomes(&report),
        outcomes(&expected),
        "the same records as in-process"
    );
    // Each step is recorded once: the ledger's records are the report's, one per step.
    let (_, status) = lab.json(&["status", report["run_id"].as_str().unwrap(), "--json"]);
    let mut ids: Vec<String> = outcomes(&status).into_iter().map(|o| o.0).collect();
    let total = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), total);
    assert_eq!(total, 501);
    let mut claimed = 0;
    for survivor in workers {
        let (code, log) = stop(survivor, "TERM");
        assert_eq!(code, Some(0), "{log}");
        claimed += calls_made(&log).1;
    }
    assert!(
        claimed >= 1,
        "the survivors took over the dead worker's jobs"
    );
}

#[test]
fn losing_redis_stops_the_run_and_resume_finishes_it() {
    let redis = Redis::start();
    let port = redis.port;
    let lab = Lab::new();
    let plan = lab.write(
        "slow.json",
        &json!({"steps": (0..20).map(|i| json!({"id": format!("s{i}"), "tool": "sleep", "args": {"ms": 200},
            "depends_on": if i == 0 { vec![] } else { vec![format!("s{}", i - 1)] }})).collect::<Vec<_>>()}),
    );
    let url = redis.url();
    let first = worker(&lab, &url, &[]);
    let coordinator = lab.spawn(&[
        "run",
        path_str(&plan),
        "--json",
        "--queue",
        &url,
        "--queue-outage",
        "2s",
    ]);
    std::thread::sleep(Duration::from_millis(900));
    drop(redis);
    let output = coordinator.wait_with_output().unwrap();
    assert_eq!(
        output.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["task_status"], "STOPPED");
    let run = report["run_id"].as_str().unwrap().to_owned();
    let done_before = outcomes(&report).iter().filter(|o| o.1).count();
    assert!(
        done_before >= 2,
        "some steps finished before Redis went away"
    );
    let _ = stop(first, "KILL");

    // Redis comes back (empty: it kept nothing), a worker with it, and the run goes on.
    let redis = Redis::on(port);
    let second = worker(&lab, &redis.url(), &[]);
    let (code, report) = lab.json(&["resume", &run, "--json", "--queue", &redis.url()]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["task_status"], "COMPLETED");
    let _ = stop(second, "TERM");
}

#[test]
fn workers_and_the_coordinator_reconnect_when_redis_restarts() {
    let redis = Redis::start();
    let port = redis.port;
    let lab = Lab::new();
    let plan = lab.write(
        "slow.json",
        &json!({"steps": (0..12).map(|i| json!({"id": format!("s{i}"), "tool": "sleep", "args": {"ms": 200},
            "depends_on": if i == 0 { vec![] } else { vec![format!("s{}", i - 1)] }})).collect::<Vec<_>>()}),
    );
    let url = redis.url();
    let first = worker(&lab, &url, &[]);
    let coordinator = lab.spawn(&["run", path_str(&plan), "--json", "--queue", &url]);
    std::thread::sleep(Duration::from_millis(700));
    // Redis goes away and comes back empty (no persistence): what was queued is gone.
    drop(redis);
    std::thread::sleep(Duration::from_millis(1500));
    let redis = Redis::on(port);
    let output = finish_within(coordinator, Duration::from_secs(90));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["task_status"], "COMPLETED", "{report}");
    let (code, worker_stderr) = stop(first, "TERM");
    assert_eq!(code, Some(0), "{worker_stderr}");
    drop(redis);
}

#[test]
fn a_run_on_a_queue_nobody_serves_says_it_waits() {
    let redis = Redis::start();
    let lab = Lab::new();
    let plan = lab.write("one.json", &json!({"steps": [{"id": "a", "tool": "echo"}]}));
    let url = redis.url();
    let mut coordinator = lab.spawn(&["run", path_str(&plan), "--json", "--queue", &url]);
    let text = stderr_until(&mut coordinator, "waiting for a worker");
    assert!(text.contains("waiting for a worker for `echo`"), "{text}");
    let serving = worker(&lab, &url, &[]);
    let output = finish_within(coordinator, Duration::from_secs(60));
    assert_eq!(output.status.code(), Some(0));
    let _ = stop(serving, "TERM");
}

/// A task's implement call and checks go to a worker with the worktree's folder: a worker on
/// the same machine runs them there, so the work lands in the task's branch and is merged.
#[test]
fn a_task_s_calls_run_on_a_worker_in_the_task_s_worktree() {
    let redis = Redis::start();
    let lab = Lab::new();
    let repo = lab.dir.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    common::git(&repo, &["init", "-q", "-b", "trunk"]);
    std::fs::write(repo.join("readme"), "x\n").unwrap();
    common::git(&repo, &["add", "-A"]);
    common::git(&repo, &["commit", "-qm", "start"]);
    let plan = repo.join("plan.json");
    std::fs::write(
        &plan,
        json!({"workspace": {"repo": "."}, "steps": [{"id": "T1", "task": {
            "implement": {"tool": "exec", "args": {"argv": ["touch", "made-by-worker"]}},
            "verify": [{"argv": ["test", "-f", "made-by-worker"]}]
        }}]})
        .to_string(),
    )
    .unwrap();
    let url = redis.url();
    let serving = worker(&lab, &url, &[]);
    let coordinator = lab.spawn(&["run", path_str(&plan), "--json", "--queue", &url]);
    let output = finish_within(coordinator, Duration::from_secs(60));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["task_status"], "COMPLETED", "{report}");
    assert!(
        repo.join("made-by-worker").exists(),
        "the worker's work was merged"
    );
    let _ = stop(serving, "TERM");
}

/// Tools that exist only on workers written in other languages with BullMQ's own packages: a
/// Node worker (npm `bullmq`) serves `greet`, a Python worker (PyPI `bullmq`) `word_count`,
/// each on a queue of its own; the plan validates against the schemas they publish, and each
/// call goes to the worker that has its tool.
#[test]
fn node_and_python_workers_serve_tools_a_plan_uses() {
    let redis = Redis::start();
    let lab = Lab::new();
    let url = redis.url();
    let node_worker = node(&lab, "worker.mjs", &url);
    let python = python_worker(&url);
    let ours = worker(&lab, &url, &[]);
    published(&redis, 3);
    // `tools --queue` lists what the workers publish beside plan-cli's own tools.
    let (code, tools) = lab.json(&["tools", "--json", "--queue", &url]);
    assert_eq!(code, 0, "{tools}");
    let tool = |name: &str| {
        tools
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("no `{name}` in {tools}"))
            .clone()
    };
    assert!(
        tool("greet")["source"]
            .as_str()
            .unwrap()
            .starts_with("worker node-")
    );
    assert_eq!(tool("greet")["input_schema"]["required"], json!(["name"]));
    assert!(
        tool("word_count")["source"]
            .as_str()
            .unwrap()
            .starts_with("worker python-")
    );
    assert_eq!(tool("echo")["source"], "builtin");
    let plan = lab.write(
        "p.json",
        &json!({"steps": [
            {"id": "hi", "tool": "greet", "args": {"name": "Ada"}, "binds": {"greeting": "$.greeting"}},
            {"id": "count", "tool": "word_count", "args": {"text": "${greeting}"}, "depends_on": ["hi"], "binds": {"words": "$.words"}},
            {"id": "both", "tool": "echo", "args": {"said": "${greeting}"}, "depends_on": ["hi"]},
            // The schema the Node worker published says `name` is a string: given a number that
            // only the run knows, the call is never made.
            {"id": "unnamed", "tool": "greet", "args": {"name": "${words}"}, "depends_on": ["count"]}
        ]}),
    );
    let (code, report) = lab.json(&["run", path_str(&plan), "--json", "--queue", &url]);
    assert_eq!(code, 1, "{report}");
    assert_eq!(
        record(&report, "hi")["result"],
        json!({"greeting": "Hello, Ada!", "by": "node"})
    );
    assert_eq!(
        record(&report, "count")["result"],
        json!({"words": 2, "by": "python"})
    );
    assert_eq!(
        record(&report, "both")["result"],
        json!({"said": "Hello, Ada!"})
    );
    assert_eq!(
        record(&report, "unnamed")["error"]["code"],
        "E_ARGS_INVALID"
    );
    // Each call was a BullMQ job on its worker's queue: name the tool, id the call's key.
    let run = report["run_id"].as_str().unwrap();
    let job = format!("bull:node-tools:{run}/hi#1");
    assert_eq!(redis_cli(&redis, &["HGET", &job, "name"]), "greet");
    let data: Value = serde_json::from_str(&redis_cli(&redis, &["HGET", &job, "data"])).unwrap();
    assert_eq!(data["tool"], "greet");
    assert_eq!(data["args"], json!({"name": "Ada"}));
    assert_eq!(
        (
            data["run_id"].as_str(),
            data["step_id"].as_str(),
            data["attempt"].as_u64()
        ),
        (Some(run), Some("hi"), Some(1))
    );
    assert!(data.get("deadline").is_some());
    let echo_job = format!("bull:steps:{run}/both#1");
    assert_eq!(redis_cli(&redis, &["HGET", &echo_job, "name"]), "echo");
    for child in [node_worker, python] {
        let (code, log) = stop(child, "TERM");
        assert_eq!(code, Some(0), "{log}");
    }
    let (_, log) = stop(ours, "TERM");
    assert_eq!(calls_made(&log), (1, 0), "{log}");
    // Stopped workers withdraw their tools.
    assert_eq!(redis_cli(&redis, &["HLEN", "plan:tools"]), "0");
}

/// A job any BullMQ producer adds to `steps` (here Node's) is run by `plan-cli worker`.
#[test]
fn a_node_producer_s_job_is_run_by_a_plan_cli_worker() {
    let redis = Redis::start();
    let lab = Lab::new();
    let url = redis.url();
    let ours = worker(&lab, &url, &[]);
    published(&redis, 1);
    let producer = node(&lab, "producer.mjs", &url);
    let output = finish_within(producer, Duration::from_secs(60));
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let result: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(result, json!({"hello": "from node"}));
    let (_, log) = stop(ours, "TERM");
    assert_eq!(calls_made(&log), (1, 0), "{log}");
}

/// A job goes only to a queue whose workers all have its tool: `echo` to the workers of
/// `steps`, `sleep` to those of `slow`.
#[test]
fn calls_go_only_to_workers_that_have_their_tool() {
    let redis = Redis::start();
    let lab = Lab::new();
    let url = redis.url();
    let echoes = worker(&lab, &url, &["--tools", "echo"]);
    let sleeps = worker(&lab, &url, &["--tools", "sleep", "--queue-name", "slow"]);
    published(&redis, 2);
    let steps: Vec<Value> = (0..10)
        .map(|i| {
            if i % 2 == 0 {
                json!({"id": format!("s{i}"), "tool": "echo", "args": {"i": i}})
            } else {
                json!({"id": format!("s{i}"), "tool": "sleep", "args": {"ms": 10}})
            }
        })
        .collect();
    let plan = lab.write("p.json", &json!({"steps": steps}));
    let (code, report) = lab.json(&["run", path_str(&plan), "--json", "--queue", &url]);
    assert_eq!(code, 0, "{report}");
    let run = report["run_id"].as_str().unwrap();
    assert_eq!(
        redis_cli(&redis, &["EXISTS", &format!("bull:steps:{run}/s0#1")]),
        "1"
    );
    assert_eq!(
        redis_cli(&redis, &["EXISTS", &format!("bull:slow:{run}/s1#1")]),
        "1"
    );
    assert_eq!(
        redis_cli(&redis, &["EXISTS", &format!("bull:steps:{run}/s1#1")]),
        "0"
    );
    let (_, log) = stop(echoes, "TERM");
    assert_eq!(calls_made(&log).0, 5, "{log}");
    let (_, log) = stop(sleeps, "TERM");
    assert_eq!(calls_made(&log).0, 5, "{log}");
}

/// With no worker for a tool the run says so within seconds, and `--queue-timeout` bounds
/// the wait: the call fails and no job is left for a worker to run later.
#[test]
fn a_tool_no_worker_serves_is_named_and_the_wait_is_bounded() {
    let redis = Redis::start();
    let lab = Lab::new();
    let url = redis.url();
    let echoes = worker(&lab, &url, &["--tools", "echo"]);
    published(&redis, 1);
    let plan = lab.write(
        "p.json",
        &json!({"steps": [
            {"id": "e", "tool": "echo", "args": {}},
            {"id": "x", "tool": "exec", "args": {"argv": ["true"]}}
        ]}),
    );
    let started = Instant::now();
    let coordinator = lab.spawn(&[
        "run",
        path_str(&plan),
        "--json",
        "--queue",
        &url,
        "--queue-timeout",
        "3s",
    ]);
    let output = finish_within(coordinator, Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("waiting for a worker for `exec`: no live worker serves `exec`"),
        "{stderr}"
    );
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(record(&report, "e")["ok"], true);
    assert_eq!(record(&report, "x")["error"]["code"], "E_QUEUE_TIMEOUT");
    assert!(started.elapsed() < Duration::from_secs(30));

    // The answer is the run's own, never a job: no worker serves `chat.respond` here, and
    // the run answers at once (the map-style executor enqueues every tool but its chat one).
    let answer = lab.write(
        "answer.json",
        &json!({"steps": [
            {"id": "e", "tool": "echo", "args": {"city": "Oslo"}, "result_variable": "e"},
            {"id": "say", "tool": "respond", "depends_on": ["e"], "args": {"text": "Hello ${e.city}"}}
        ]}),
    );
    let coordinator = lab.spawn(&[
        "run",
        path_str(&answer),
        "--json",
        "--queue",
        &url,
        "--queue-timeout",
        "3s",
    ]);
    let output = finish_within(coordinator, Duration::from_secs(60));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(output.status.code(), Some(0), "{report}");
    assert_eq!(report["answer"], "Hello Oslo");
    let (_, log) = stop(echoes, "TERM");
    assert_eq!(calls_made(&log).0, 2, "only the echoes were jobs: {log}");
}

/// A coordinator killed while a worker runs a call, then resumed: the call's job id is its
/// idempotency key, so the resumed run finds the job (and its result) instead of adding
/// another; the worker made the call once.
#[test]
fn a_resumed_coordinator_never_adds_a_call_twice() {
    let redis = Redis::start();
    let lab = Lab::new();
    let url = redis.url();
    let ours = worker(&lab, &url, &[]);
    published(&redis, 1);
    let plan = lab.write(
        "p.json",
        &json!({"steps": [{"id": "long", "tool": "sleep", "args": {"ms": 1500}}]}),
    );
    let coordinator = lab.spawn(&["run", path_str(&plan), "--json", "--queue", &url]);
    wait_until("the worker never took the job", || {
        redis_cli(&redis, &["LLEN", "bull:steps:active"]) == "1"
    });
    let (code, _) = stop(coordinator, "KILL");
    assert_eq!(code, None);
    let (_, runs) = lab.json(&["runs", "--json"]);
    let run = runs[0]["run_id"].as_str().unwrap().to_owned();
    // Resumed while the job runs, and again (a no-op) once it has finished.
    let (code, report) = lab.json(&["resume", &run, "--json", "--queue", &url]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(record(&report, "long")["result"], json!({"slept_ms": 1500}));
    let (_, log) = stop(ours, "TERM");
    assert_eq!(calls_made(&log), (1, 0), "{log}");
}

/// Ctrl+C of a `--queue` run (and so `cancel`, which asks the run's process to stop the same
/// way) removes the jobs no worker has taken: a worker started later runs nothing of the
/// cancelled run.
#[test]
fn a_cancelled_queue_run_leaves_no_job_for_a_later_worker() {
    let redis = Redis::start();
    let lab = Lab::new();
    let marker = lab.dir.path().join("ran");
    let plan = lab.write(
        "one.json",
        &json!({"steps": [{"id": "a", "tool": "exec", "args": {"argv": ["touch", path_str(&marker)]}}]}),
    );
    let url = redis.url();
    let mut coordinator = lab.spawn(&["run", path_str(&plan), "--json", "--queue", &url]);
    assert!(
        stderr_until(&mut coordinator, "waiting for a worker").contains("waiting for a worker")
    );
    wait_until("the call's job was never added", || {
        redis_cli(&redis, &["LLEN", "bull:steps:wait"]) == "1"
    });
    let (code, _) = stop(coordinator, "INT");
    assert_ne!(code, Some(0));
    assert_eq!(redis_cli(&redis, &["LLEN", "bull:steps:wait"]), "0");
    let serving = worker(&lab, &url, &[]);
    published(&redis, 1);
    std::thread::sleep(Duration::from_secs(2));
    let _ = stop(serving, "TERM");
    assert!(!marker.exists(), "a worker ran a call of the cancelled run");
}

/// With PLAN_QUEUE_SECRET on both sides, coordinators sign their jobs and workers run only
/// signed ones: a job from a producer without the secret (anyone who can write to the Redis)
/// fails uncalled, one signed with another secret too; a producer with the secret (Node's
/// crypto, the documented bytes) and a coordinator with it are served.
#[test]
fn with_a_queue_secret_workers_run_only_jobs_signed_with_it() {
    let redis = Redis::start();
    let lab = Lab::new();
    let url = redis.url();
    let secret = [("PLAN_QUEUE_SECRET", "shared-secret")];
    let ours = {
        let mut command = lab.command();
        command
            .args(["worker", "--queue", &url])
            .env("PLAN_QUEUE_SECRET", "shared-secret")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command.spawn().unwrap()
    };
    published(&redis, 1);
    // Unsigned: refused, and the tool is not called.
    let output = finish_within(node(&lab, "producer.mjs", &url), Duration::from_secs(60));
    assert!(!output.status.success());
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(said.contains("the job is not signed"), "{said}");
    // Signed with another secret: refused.
    let output = finish_within(
        node_with(
            &lab,
            "producer.mjs",
            &url,
            &[("PLAN_QUEUE_SECRET", "a-guess")],
        ),
        Duration::from_secs(60),
    );
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("does not match"));
    // Signed with the secret: served.
    let output = finish_within(
        node_with(&lab, "producer.mjs", &url, &secret),
        Duration::from_secs(60),
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let result: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(result, json!({"hello": "from node"}));
    // A coordinator with the secret signs its jobs; one without it is refused.
    let plan = lab.write(
        "one.json",
        &json!({"steps": [{"id": "a", "tool": "echo", "args": {"n": 1}}]}),
    );
    let signed = lab
        .command()
        .args(["run", path_str(&plan), "--json", "--queue", &url])
        .env("PLAN_QUEUE_SECRET", "shared-secret")
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&signed.stdout).unwrap();
    assert_eq!(report["task_status"], "COMPLETED", "{report}");
    let unsigned = lab
        .command()
        .args(["run", path_str(&plan), "--json", "--queue", &url])
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&unsigned.stdout).unwrap();
    assert_eq!(report["task_status"], "FAILED", "{report}");
    assert!(
        report["records"][0]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("the job is not signed"),
        "{report}"
    );
    let (_, log) = stop(ours, "TERM");
    assert!(log.contains("signed jobs only"), "{log}");
    assert_eq!(
        calls_made(&log).0,
        2,
        "only the two signed jobs were called: {log}"
    );
}

/// A call run again through the queue (`retry`, `resume --retry-failed`, a failed block node
/// someone approved to run again) is a new job with the next attempt number: BullMQ keeps
/// finished jobs, so reusing the first one's id gave back its failure.
#[test]
fn a_call_run_again_through_the_queue_is_a_new_job_and_counts_attempts_on() {
    let redis = Redis::start();
    let lab = Lab::new();
    let url = redis.url();
    let ours = worker(&lab, &url, &[]);
    published(&redis, 1);
    let plan = lab.write(
        "p.json",
        &json!({"steps": [
            {"id": "flaky", "tool": "fail", "args": {"times": 1}},
            {"id": "review", "depends_on": ["flaky"], "block": {
                "entry_point": "check",
                "on_failure": "wait",
                "nodes": {"check": {"tool": "fail", "args": {"times": 1}}}
            }},
        ]}),
    );
    let (code, first) = lab.json(&["run", path_str(&plan), "--json", "--queue", &url]);
    assert_eq!(code, 1, "{first}");
    let run = first["run_id"].as_str().unwrap().to_owned();

    // resume --retry-failed: `flaky` is its second attempt, a job of its own.
    let (code, report) = lab.json(&["resume", &run, "--retry-failed", "--json", "--queue", &url]);
    assert_eq!(code, 5, "the block's node failed and waits: {report}");
    assert_eq!(record(&report, "flaky")["result"], json!({"attempt": 2}));
    assert_eq!(
        report["pending_approvals"][0]["step_id"],
        "review/check#1@1"
    );
    // Approved, the failed node runs again as attempt 2.
    lab.cli()
        .args(["approve", &run, "review/check#1@1"])
        .assert()
        .success();
    let (code, report) = lab.json(&["resume", &run, "--json", "--queue", &url]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(
        record(&report, "review/check#1")["result"],
        json!({"attempt": 2})
    );
    assert_eq!(record(&report, "review/check#1")["attempts"], 2);

    // `retry` of a step that passed: attempt 3, not the finished job of attempt 2.
    let (code, report) = lab.json(&["retry", &run, "flaky", "--json", "--queue", &url]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(record(&report, "flaky")["result"], json!({"attempt": 3}));
    let jobs = redis_cli(&redis, &["KEYS", "bull:steps:*flaky*"]);
    for attempt in 1..=3 {
        assert!(
            jobs.contains(&format!("flaky#{attempt}")),
            "a job per attempt: {jobs}"
        );
    }
    // A dropped `Child` runs on: the worker is stopped, or every test run leaves one behind.
    stop(ours, "TERM");
}

/// A run keeps its queue: a high-risk call of a tool only a worker serves is approved,
/// rejected and resumed without `--queue` given again (the plan is compiled against the
/// workers' tools, found through the queue the run used).
#[test]
fn a_waiting_run_on_a_worker_s_tool_is_approved_and_resumed_without_its_flags() {
    let redis = Redis::start();
    let lab = Lab::new();
    let url = redis.url();
    let node_worker = node(&lab, "worker.mjs", &url);
    let ours = worker(&lab, &url, &[]);
    published(&redis, 2);
    let plan = lab.write(
        "p.json",
        &json!({"steps": [
            {"id": "hi", "tool": "greet", "risk": "high", "args": {"name": "Ada"}},
            {"id": "bye", "tool": "greet", "risk": "high", "args": {"name": "Bob"}, "depends_on": ["hi"]},
        ]}),
    );
    let (code, report) = lab.json(&["run", path_str(&plan), "--json", "--queue", &url]);
    assert_eq!(code, 5, "{report}");
    let run = report["run_id"].as_str().unwrap().to_owned();
    lab.cli().args(["approve", &run, "hi"]).assert().success();
    // `bye` waits for nothing yet: deciding it compiles the plan against the workers' tools,
    // through the queue the run kept.
    lab.cli()
        .args(["reject", &run, "bye", "--reason", "not today"])
        .assert()
        .success();
    let (code, report) = lab.json(&["resume", &run, "--json"]);
    assert_eq!(code, 1, "bye was rejected: {report}");
    assert_eq!(
        record(&report, "hi")["result"],
        json!({"greeting": "Hello, Ada!", "by": "node"})
    );
    assert_eq!(record(&report, "bye")["error"]["code"], "E_REJECTED");
    for child in [node_worker, ours] {
        let (code, log) = stop(child, "TERM");
        assert_eq!(code, Some(0), "{log}");
    }
}

#[test]
fn a_run_on_a_queue_whose_address_holds_a_password_goes_on_once_it_is_given_again() {
    let redis = Redis::with_password("s3cret");
    let lab = Lab::new();
    let url = format!("redis://:s3cret@127.0.0.1:{}", redis.port);
    let plan = lab.write(
        "p.json",
        &json!({"steps": [{"id": "deploy", "tool": "echo", "risk": "high", "args": {"v": 1}}]}),
    );
    let (code, report) = lab.json(&[
        "run",
        path_str(&plan),
        "--json",
        "--queue",
        &url,
        "--queue-name",
        "jobs",
    ]);
    assert_eq!(code, 5, "it waits for its approval: {report}");
    let run = report["run_id"].as_str().unwrap().to_owned();
    lab.cli()
        .args(["approve", &run, "deploy"])
        .assert()
        .success();
    // The address was not kept (it holds the password): without it, refused, the password
    // nowhere in what is said.
    lab.cli()
        .args(["resume", &run])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "give the address again with --queue URL",
        ))
        .stderr(predicate::str::contains("s3cret").not());
    // Given again, the run goes on, on its own queue (`jobs`, not given again), where a worker
    // of that queue makes the call.
    let ours = worker(&lab, &url, &["--queue-name", "jobs"]);
    let (code, report) = lab.json(&["resume", &run, "--json", "--queue", &url]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(record(&report, "deploy")["result"], json!({"v": 1}));
    let (code, log) = stop(ours, "TERM");
    assert_eq!(code, Some(0), "{log}");
    assert!(
        log.contains("1 call made"),
        "the worker made the call: {log}"
    );
}

/// The worker contract for workers written from BullMQ's documentation alone
/// (examples/queue/plain-worker.mjs and plain_worker.py publish nothing): the plan declares
/// their tools with the queues they take jobs from; each call is a job there, its result the
/// worker's return value, its `job.updateProgress` the call's `tool.progress`; arguments that
/// break a declared schema never become a job.
#[test]
fn workers_written_from_bullmqs_docs_serve_the_tools_a_plan_declares() {
    let redis = Redis::start();
    let lab = Lab::new();
    let url = redis.url();
    let mut node_worker = node(&lab, "plain-worker.mjs", &url);
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/queue");
    let mut python = Command::new(servers_dir().join("venv/bin/python"))
        .arg(examples.join("plain_worker.py"))
        .env("REDIS_URL", &url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python");
    assert!(stderr_until(&mut node_worker, "ready").contains("ready"));
    assert!(stderr_until(&mut python, "ready").contains("ready"));
    // With a queue every call is a job: plan-cli's own worker runs `echo`.
    let ours = worker(&lab, &url, &[]);
    published(&redis, 1);
    // The example as it is, and one call whose arguments break the declared schema once the
    // run gives them (steps are its last key).
    let mut text = std::fs::read_to_string(examples.join("declared.yaml")).unwrap();
    text.push_str("  - id: wrong\n    tool: resize\n    depends_on: [thumbnail]\n    args: {path: x.png, width: \"${thumbnail.path}\"}\n");
    let plan = lab.dir.path().join("declared.yaml");
    std::fs::write(&plan, text).unwrap();
    let events = lab.dir.path().join("events.ndjson");
    let (code, report) = lab.json(&[
        "run",
        path_str(&plan),
        "--json",
        "--queue",
        &url,
        "--events",
        path_str(&events),
    ]);
    assert_eq!(code, 1, "{report}");
    assert_eq!(
        record(&report, "thumbnail")["result"],
        json!({"path": "photo-320.png", "width": 320, "by": "node"})
    );
    assert_eq!(
        record(&report, "caption")["result"],
        json!({"words": 5, "by": "python"})
    );
    assert_eq!(
        record(&report, "summary")["result"],
        json!({"image": "photo-320.png", "words": 5})
    );
    let wrong = &record(&report, "wrong")["error"];
    assert_eq!(wrong["code"], "E_ARGS_INVALID", "{wrong}");
    assert!(
        wrong["message"].as_str().unwrap().contains("/width"),
        "{wrong}"
    );
    let run = report["run_id"].as_str().unwrap();
    assert_eq!(
        redis_cli(
            &redis,
            &["EXISTS", &format!("bull:images:{run}/thumbnail#1")]
        ),
        "1",
        "a job on the declared queue, named by the call"
    );
    assert_eq!(
        redis_cli(&redis, &["EXISTS", &format!("bull:images:{run}/wrong#1")]),
        "0",
        "no job for arguments that break the schema"
    );
    let progress: Vec<Value> = std::fs::read_to_string(&events)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|event| event["type"] == "tool.progress")
        .collect();
    let of = |step: &str| -> Vec<Value> {
        progress
            .iter()
            .filter(|e| e["step_id"] == step)
            .map(|e| e["progress"].clone())
            .collect()
    };
    assert_eq!(
        of("thumbnail"),
        [
            json!({"progress": 1.0, "total": 2.0, "message": "reading photo.png"}),
            json!({"progress": 2.0, "total": 2.0, "message": "resized to 320"})
        ]
    );
    assert_eq!(of("caption"), [json!({"progress": 50.0})]);
    for child in [node_worker, python, ours] {
        let (code, log) = stop(child, "TERM");
        assert_eq!(code, Some(0), "{log}");
    }
}

/// A plan-cli worker refuses a job without `args` (it never runs a call with `{}`), and
/// words a job's argument errors as a run does: JSON pointers into the arguments.
#[test]
fn a_plan_cli_worker_refuses_jobs_without_args_and_names_bad_arguments_by_pointer() {
    let redis = Redis::start();
    let lab = Lab::new();
    let url = redis.url();
    let ours = worker(&lab, &url, &[]);
    published(&redis, 1);
    let dir = node_dir(&lab);
    std::fs::write(
        dir.join("bad-jobs.mjs"),
        r#"
import { Job, Queue, QueueEvents } from 'bullmq';
const url = new URL(process.env.REDIS_URL);
const connection = { host: url.hostname, port: Number(url.port) };
const queue = new Queue('steps', { connection });
const events = new QueueEvents('steps', { connection, lastEventId: '0-0' });
await events.waitUntilReady();
const answers = {};
for (const [name, data] of [
  ['no-args', { tool: 'echo' }],
  ['bad-args', { tool: 'sleep', args: { ms: 'soon' } }],
]) {
  const job = await queue.add(data.tool, data, { jobId: name });
  try {
    answers[name] = { result: await job.waitUntilFinished(events, 30000) };
  } catch (error) {
    answers[name] = { failed: error.message };
  }
}
console.log(JSON.stringify(answers));
await events.close();
await queue.close();
"#,
    )
    .unwrap();
    let producer = Command::new("node")
        .arg(dir.join("bad-jobs.mjs"))
        .env("REDIS_URL", &url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let output = finish_within(producer, Duration::from_secs(60));
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let answers: Value = serde_json::from_slice(&output.stdout).unwrap();
    let failed = |name: &str| {
        answers[name]["failed"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    assert!(failed("no-args").contains("has no `args`"), "{answers}");
    assert!(
        failed("bad-args").contains("/ms") && failed("bad-args").contains("E_ARGS_INVALID"),
        "{answers}"
    );
    let (_, log) = stop(ours, "TERM");
    assert_eq!(calls_made(&log), (2, 0), "{log}");
}

/// A question an MCP server asks a worker's call (elicitation) waits as it does in-process;
/// answered, the call is made again on a worker, which gives the server the answer (it goes
/// with the job, `answers`).
#[test]
fn a_question_asked_on_a_worker_is_answered_through_the_job() {
    let redis = Redis::start();
    let lab = Lab::new();
    let url = redis.url();
    common::use_mcp_servers(&lab, json!({"everything": common::everything_server()}));
    let workers = worker(
        &lab,
        &url,
        &["--tools", "everything.trigger-elicitation-request"],
    );
    published(&redis, 1);
    let plan = lab.write(
        "ask.json",
        &json!({"steps": [{"id": "ask", "tool": "everything.trigger-elicitation-request", "args": {}}]}),
    );
    let (code, report) = lab.json(&["run", path_str(&plan), "--json", "--queue", &url]);
    assert_eq!(code, 5, "{report}");
    assert_eq!(
        report["pending_approvals"][0]["step_id"], "ask@input#1",
        "{report}"
    );
    let run = report["run_id"].as_str().unwrap().to_owned();
    lab.cli()
        .args([
            "approve",
            &run,
            "ask@input#1",
            "--input",
            r#"{"name": "Katherine Johnson"}"#,
        ])
        .assert()
        .success();
    let (code, report) = lab.json(&["resume", &run, "--json", "--queue", &url]);
    assert_eq!(code, 0, "{report}");
    let said = record(&report, "ask")["result"].to_string();
    assert!(said.contains("- Name: Katherine Johnson"), "{said}");
    let (_, log) = stop(workers, "TERM");
    assert_eq!(calls_made(&log).0, 2, "asked once, answered once: {log}");
}

/// A job whose data is past the queue's bound (16 MiB), or with another field past 1 MiB,
/// written straight into Redis by any producer, is refused without the worker ever reading it: the worker's peak memory stays
/// far below the job's size, and it goes on serving. A plan's call that large is refused by
/// its coordinator before it is added.
#[test]
fn a_job_past_the_bound_is_refused_unread_and_a_call_that_large_is_not_added() {
    let redis = Redis::start();
    let lab = Lab::new();
    let url = redis.url();
    let ours = worker(&lab, &url, &[]);
    published(&redis, 1);
    let dir = node_dir(&lab);
    std::fs::write(
        dir.join("big-job.mjs"),
        r#"
import { Job, Queue, QueueEvents } from 'bullmq';
import { Redis } from 'ioredis';
const url = new URL(process.env.REDIS_URL);
const connection = { host: url.hostname, port: Number(url.port) };
const queue = new Queue('steps', { connection });
const events = new QueueEvents('steps', { connection, lastEventId: '0-0' });
await events.waitUntilReady();
const answers = {};
for (const [name, data] of [
  ['big', { tool: 'echo', args: { text: 'x'.repeat(48 * 1024 * 1024) } }],
  ['small', { tool: 'echo', args: { text: 'after' } }],
]) {
  const job = await queue.add(data.tool, data, { jobId: name });
  try {
    answers[name] = { result: await job.waitUntilFinished(events, 60000) };
  } catch (error) {
    answers[name] = { failed: error.message };
  }
}
// Small data, and 48 MiB in a field of the job's hash no producer API writes: written
// straight into Redis, as any client of it can.
const redis = new Redis(Number(url.port), url.hostname);
await redis.hset('bull:steps:junk', {
  name: 'echo', data: JSON.stringify({ tool: 'echo', args: { text: 'junk' } }),
  opts: '{}', timestamp: String(Date.now()), delay: '0', priority: '0',
  junk: 'z'.repeat(48 * 1024 * 1024),
});
await redis.lpush('bull:steps:wait', 'junk');
await redis.zadd('bull:steps:marker', 0, '0');
try {
  const junk = await Job.fromId(queue, 'junk');
  answers.junk = { result: await junk.waitUntilFinished(events, 60000) };
} catch (error) {
  answers.junk = { failed: error.message };
}
redis.disconnect();
console.log(JSON.stringify(answers));
await events.close();
await queue.close();
"#,
    )
    .unwrap();
    let producer = Command::new("node")
        .arg(dir.join("big-job.mjs"))
        .env("REDIS_URL", &url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let output = finish_within(producer, Duration::from_secs(120));
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let answers: Value = serde_json::from_slice(&output.stdout).unwrap();
    let failed = answers["big"]["failed"].as_str().unwrap_or_default();
    assert!(
        failed.contains("past the bound of 16777216 bytes") && failed.contains("E_ARGS_INVALID"),
        "{answers}"
    );
    assert_eq!(
        answers["small"]["result"],
        json!({"text": "after"}),
        "{answers}"
    );
    // A field past its bound other than the data is withheld as well: the job is refused.
    let junk = answers["junk"]["failed"].as_str().unwrap_or_default();
    assert!(
        junk.contains("past the bound of 16777216 bytes") && junk.contains("E_ARGS_INVALID"),
        "{answers}"
    );
    // The worker's peak resident memory: a worker that read either 48 MiB job would be past it.
    let status = std::fs::read_to_string(format!("/proc/{}/status", ours.id())).unwrap();
    let peak_kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    assert!(
        peak_kib < 40 * 1024,
        "the worker's peak memory was {peak_kib} KiB"
    );
    // A plan's call of 17 MiB: its coordinator refuses to add it, naming the bound.
    let plan = lab.write(
        "big.json",
        &json!({"steps": [{"id": "a", "tool": "echo", "args": {"text": "y".repeat(17 << 20)}}]}),
    );
    let output = lab
        .command()
        .args(["run", path_str(&plan), "--json", "--queue", &url])
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    let error = &report["records"][0]["error"];
    assert_eq!(report["task_status"], "FAILED", "{error}");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("past the queue's bound"), "{message}");
    let (_, log) = stop(ours, "TERM");
    assert_eq!(
        calls_made(&log),
        (1, 0),
        "only the small job was called: {log}"
    );
}
