//! What the CLI's integration tests share: a lab directory with its own ledger, and the real
//! binary run inside it.
#![allow(dead_code, reason = "each test file uses a part of it")]

pub(crate) mod ui;

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::Value;

pub(crate) struct Lab {
    pub(crate) dir: tempfile::TempDir,
}

impl Lab {
    pub(crate) fn new() -> Self {
        Lab {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// The binary, run in the lab, deaf to the environment variables that would change what a
    /// test means: a developer's PLAN_DB, a Redis (PLAN_QUEUE, REDIS_URL) or approvals turned off.
    pub(crate) fn cli(&self) -> Command {
        Command::from_std(self.command())
    }

    /// As [`Lab::cli`], as a std `Command` (to spawn, or to give a process group).
    pub(crate) fn command(&self) -> std::process::Command {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_plan-cli"));
        command.current_dir(self.dir.path()).env("NO_COLOR", "1");
        for name in [
            "PLAN_DB",
            "PLAN_QUEUE",
            "REDIS_URL",
            "AGENT_APPROVALS_ENABLED",
        ] {
            command.env_remove(name);
        }
        command
    }

    /// Runs the binary expecting exit `code`: what it wrote to stderr.
    pub(crate) fn fails(&self, args: &[&str], code: i32) -> String {
        let output = self.cli().args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert_eq!(output.status.code(), Some(code), "{args:?}: {stderr}");
        stderr
    }

    /// The newest run's id (`runs --json`).
    pub(crate) fn newest_run_id(&self) -> String {
        let (_, runs) = self.json(&["runs", "--json"]);
        runs[0]["run_id"]
            .as_str()
            .unwrap_or_else(|| panic!("no run: {runs}"))
            .to_owned()
    }

    pub(crate) fn json(&self, args: &[&str]) -> (i32, Value) {
        let output = self.cli().args(args).output().unwrap();
        let value = serde_json::from_slice(&output.stdout).unwrap_or_else(|_| {
            panic!(
                "{args:?}: not JSON\n{}\n{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            )
        });
        (output.status.code().unwrap(), value)
    }

    /// Starts the binary in the lab without waiting for it, its stdout and stderr piped.
    pub(crate) fn spawn(&self, args: &[&str]) -> std::process::Child {
        self.command()
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    }

    pub(crate) fn write(&self, name: &str, plan: &Value) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, serde_json::to_string_pretty(plan).unwrap()).unwrap();
        path
    }
}

pub(crate) fn path_str(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// What must not depend on how a run went about it: each record's id, outcome and result.
pub(crate) fn outcomes(report: &Value) -> Vec<(String, bool, Value)> {
    report["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["step_id"].as_str().unwrap().to_owned(),
                r["ok"].as_bool().unwrap(),
                r.get("result").cloned().unwrap_or(Value::Null),
            )
        })
        .collect()
}

/// A loopback port nothing listens on (bound, noted, let go).
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The record of step (or item, or node) `id` in a `--json` report.
pub(crate) fn record<'a>(report: &'a Value, id: &str) -> &'a Value {
    report["records"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["step_id"] == id)
        .unwrap_or_else(|| panic!("no record {id} in {report}"))
}

/// Where `cargo xtask prepare-mcp` installed the MCP servers and the Python MCP SDK; a test
/// that needs them fails when they are missing.
pub(crate) fn servers_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/mcp-servers");
    assert!(
        dir.join("installed.txt").exists(),
        "the MCP servers are not installed: run `cargo xtask prepare-mcp` (`cargo xtask test` does it)"
    );
    dir
}

/// server-everything's entry in an `mcpServers` configuration (over stdio).
#[allow(dead_code, reason = "each test binary uses what it needs")]
pub(crate) fn everything_server() -> serde_json::Value {
    let index = servers_dir()
        .join("npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    serde_json::json!({"command": "node", "args": [path_str(&index), "stdio"]})
}

/// Gives `lab` the MCP servers `servers` (`{NAME: ENTRY}`), in its `.plan/mcp.json`.
#[allow(dead_code, reason = "each test binary uses what it needs")]
pub(crate) fn use_mcp_servers(lab: &Lab, servers: serde_json::Value) {
    std::fs::create_dir_all(lab.dir.path().join(".plan")).unwrap();
    lab.write(
        ".plan/mcp.json",
        &serde_json::json!({"mcpServers": servers}),
    );
}

/// The pid a test's program writes to `file`, once it has (within 30 s).
pub(crate) fn wait_for_pid(file: &Path) -> u32 {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        if let Some(pid) = std::fs::read_to_string(file)
            .ok()
            .and_then(|text| text.trim().parse::<u32>().ok())
        {
            return pid;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no pid in {} within 30 s: the program never started",
            file.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Whether process `pid` is gone within 10 s (a zombie, dead but not reaped, counts as gone).
pub(crate) fn process_ends(pid: u32) -> bool {
    let alive = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            !stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while alive() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    !alive()
}

/// Checks an execute-state.json document against the JSON Schema of schema 2.0 kept in the
/// repository (docs/schemas/execute-state.schema.json), enums included.
pub(crate) fn assert_execute_state(document: &Value) {
    let schema_path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/schemas/execute-state.schema.json"
    );
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(schema_path).unwrap()).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let problems: Vec<String> = validator
        .iter_errors(document)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        problems.is_empty(),
        "the state document breaks schema 2.0:\n{}\n{}",
        problems.join("\n"),
        serde_json::to_string_pretty(document).unwrap()
    );
    // What a JSON Schema cannot say: the counts agree, and the merge queue's priorities are
    // 1, 2, … in its order, the merged entries first (tasks merge in the order they queued).
    let layers = document["layers"].as_object().unwrap();
    let sum = |key: &str| {
        layers
            .values()
            .map(|l| l[key].as_u64().unwrap())
            .sum::<u64>()
    };
    let metrics = &document["metrics"];
    assert_eq!(
        metrics["tasks_failed"].as_u64(),
        Some(sum("tasks_failed")),
        "{document}"
    );
    assert_eq!(
        metrics["tasks_completed"].as_u64(),
        Some(sum("tasks_completed")),
        "{document}"
    );
    assert_eq!(
        metrics["tasks_total"].as_u64(),
        Some(sum("tasks_total")),
        "{document}"
    );
    let queue = document["merge_queue"].as_array().unwrap();
    for (k, entry) in queue.iter().enumerate() {
        assert_eq!(entry["priority"].as_u64(), Some(k as u64 + 1), "{document}");
    }
    let merged = queue.iter().take_while(|e| e["status"] == "merged").count();
    assert!(
        queue[merged..].iter().all(|e| e["status"] != "merged"),
        "merged entries come first: {document}"
    );
}

/// Runs git in `dir`; panics (failing the test) when git is missing or fails.
pub(crate) fn git(dir: &Path, args: &[&str]) -> String {
    let output = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "test")
        .env("GIT_AUTHOR_EMAIL", "test@localhost")
        .env("GIT_COMMITTER_NAME", "test")
        .env("GIT_COMMITTER_EMAIL", "test@localhost")
        .output()
        .expect("git must be installed for these tests");
    assert!(
        output.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Runs plan-cli in a real pseudo-terminal (stdout and stderr both on it) with `env` (and
/// without PLAN_DB or NO_COLOR unless `env` sets them); when it writes `prompt`, types `reply`
/// and Enter. All it wrote.
pub(crate) fn in_a_terminal(
    lab: &Lab,
    args: &[&str],
    env: &[(&str, &str)],
    answer: Option<(&str, &str)>,
) -> String {
    use portable_pty::{CommandBuilder, PtySize, native_pty_system};
    use std::io::{Read, Write};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};
    let pair = native_pty_system()
        .openpty(PtySize {
            rows: 30,
            cols: 120,
            pixel_width: 0,
            pixel_height: 0,
        })
        .unwrap();
    let mut command = CommandBuilder::new(env!("CARGO_BIN_EXE_plan-cli"));
    command.args(args);
    command.cwd(lab.dir.path());
    command.env_remove("PLAN_DB");
    command.env_remove("NO_COLOR");
    for (name, value) in env {
        command.env(name, value);
    }
    let mut child = pair.slave.spawn_command(command).unwrap();
    drop(pair.slave);
    let mut reader = pair.master.try_clone_reader().unwrap();
    let mut writer = pair.master.take_writer().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let reading = std::thread::spawn(move || {
        let mut chunk = [0u8; 4096];
        // A pseudo-terminal reports EIO once the other side is closed: the end.
        while let Ok(n) = reader.read(&mut chunk) {
            if n == 0 {
                break;
            }
            sink.lock().unwrap().extend_from_slice(&chunk[..n]);
        }
    });
    let text = || String::from_utf8_lossy(&seen.lock().unwrap()).into_owned();
    let deadline = Instant::now() + Duration::from_secs(60);
    if let Some((prompt, reply)) = answer {
        while !text().contains(prompt) {
            assert!(Instant::now() < deadline, "never asked: {}", text());
            std::thread::sleep(Duration::from_millis(20));
        }
        writer.write_all(format!("{reply}\r").as_bytes()).unwrap();
        writer.flush().unwrap();
    }
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the run did not end: {}", text());
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(writer);
    drop(pair.master);
    let _ = reading.join();
    text()
}

/// A `redis-server` of the test's own, stopped when dropped.
pub(crate) struct Redis {
    child: std::process::Child,
    pub(crate) port: u16,
}

impl Redis {
    /// Starts one; a test that cannot start one fails (`.ci/run` installs redis-server with
    /// apt-get).
    pub(crate) fn start() -> Redis {
        let port = free_port();
        Redis::on(port)
    }

    pub(crate) fn on(port: u16) -> Redis {
        Redis::with_args(port, &[])
    }

    /// One that asks every client for `password` (`redis://:PASSWORD@…`).
    #[allow(dead_code, reason = "each test binary uses what it needs")]
    pub(crate) fn with_password(password: &str) -> Redis {
        Redis::with_args(free_port(), &["--requirepass", password])
    }

    fn with_args(port: u16, extra: &[&str]) -> Redis {
        let child = match std::process::Command::new("redis-server")
            .args(extra)
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
            .stderr(std::process::Stdio::null())
            .spawn()
        {
            Ok(child) => child,
            Err(error) => panic!(
                "redis-server cannot be started ({error}): install it (apt-get install redis-server)"
            ),
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "redis-server never listened"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Redis { child, port }
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A Redis command's answer, through redis-cli.
pub(crate) fn redis_cli(redis: &Redis, args: &[&str]) -> String {
    let output = std::process::Command::new("redis-cli")
        .args(["-p", &redis.port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli (it comes with redis-server)");
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// Waits (up to 30 s) until `done` says so, failing with `what` if it never does.
pub(crate) fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "{what}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Waits until `n` workers have published their tools.
pub(crate) fn published(redis: &Redis, n: usize) {
    wait_until(&format!("{n} workers never published their tools"), || {
        redis_cli(redis, &["HLEN", "plan:tools"])
            .parse::<usize>()
            .unwrap_or(0)
            >= n
    });
}

/// Waits for a process, killing it (and failing) if it takes longer than `limit`: a lost call
/// or a hung server must fail a test, not hang it.
pub(crate) fn finish_within(
    child: std::process::Child,
    limit: std::time::Duration,
) -> std::process::Output {
    let pid = child.id();
    let (send, receive) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = send.send(child.wait_with_output());
    });
    match receive.recv_timeout(limit) {
        Ok(output) => output.unwrap(),
        Err(_) => {
            let _ = std::process::Command::new("kill")
                .args(["-9", &pid.to_string()])
                .status();
            panic!("the process did not finish within {limit:?}");
        }
    }
}
