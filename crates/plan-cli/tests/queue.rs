//! Runs through a Redis queue: real `redis-server`s on free loopback ports, real worker
//! processes, and `kill -9`.
#![expect(clippy::unwrap_used, reason = "test helpers fail loudly on purpose")]

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Lab, free_port, outcomes, path_str};
use predicates::prelude::*;
use serde_json::{Value, json};

/// A `redis-server` of the test's own, stopped when dropped.
struct Redis {
    child: Child,
    port: u16,
}

impl Redis {
    /// Starts one; a test that cannot start one fails (`.ci/run` installs redis-server with
    /// apt-get).
    fn start() -> Redis {
        let port = free_port();
        Redis::on(port)
    }

    fn on(port: u16) -> Redis {
        let child = match Command::new("redis-server")
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
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
        {
            Ok(child) => child,
            Err(error) => panic!(
                "redis-server cannot be started ({error}): install it (apt-get install redis-server)"
            ),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server never listened");
            std::thread::sleep(Duration::from_millis(20));
        }
        Redis { child, port }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

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

/// Waits for a process, killing it (and failing) if it takes longer than `limit`: a lost call
/// must fail a test, not hang it.
fn finish_within(child: Child, limit: Duration) -> std::process::Output {
    let pid = child.id();
    let (send, receive) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = send.send(child.wait_with_output());
    });
    match receive.recv_timeout(limit) {
        Ok(output) => output.unwrap(),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("the process did not finish within {limit:?}");
        }
    }
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
    let workers: Vec<Child> = (0..3)
        .map(|_| {
            worker(
                &lab,
                &url,
                &["--concurrency", "4", "--visibility-timeout-ms", "1000"],
            )
        })
        .collect();
    let coordinator = lab.spawn(&["run", path_str(&plan), "--json", "--queue", &url]);
    // Mid-run, one worker dies without a chance to clean up: what it held is claimed by the
    // others once the visibility timeout passes.
    std::thread::sleep(Duration::from_millis(500));
    let mut workers = workers.into_iter();
    let victim = workers.next().unwrap();
    let (code, _) = stop(victim, "KILL");
    assert_eq!(code, None, "killed by a signal");
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
        claimed += log
            .lines()
            .find_map(|l| l.split(" (").nth(1)?.split(' ').next()?.parse::<u64>().ok())
            .unwrap_or(0);
    }
    assert!(
        claimed >= 1,
        "the survivors took over the dead worker's steps"
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
    let (_, worker_stderr) = stop(first, "TERM");
    assert!(
        worker_stderr.contains("reconnected to the queue"),
        "{worker_stderr}"
    );
    drop(redis);
}

#[test]
fn a_run_on_a_queue_nobody_serves_says_it_waits() {
    let redis = Redis::start();
    let lab = Lab::new();
    let plan = lab.write("one.json", &json!({"steps": [{"id": "a", "tool": "echo"}]}));
    let url = redis.url();
    let mut coordinator = lab.spawn(&["run", path_str(&plan), "--json", "--queue", &url]);
    let mut stderr = coordinator.stderr.take().unwrap();
    let said = std::thread::spawn(move || {
        let mut text = String::new();
        let mut buffer = [0u8; 512];
        while !text.contains("waiting for a worker") {
            match std::io::Read::read(&mut stderr, &mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(n) => text.push_str(&String::from_utf8_lossy(&buffer[..n])),
            }
        }
        text
    });
    let text = said.join().unwrap();
    assert!(text.contains("waiting for a worker"), "{text}");
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
