//! plan-cli against real MCP servers that other people wrote and publish:
//! `@modelcontextprotocol/server-filesystem` and `@modelcontextprotocol/server-everything`
//! (npm) and `mcp-server-time` (PyPI), unmodified, installed in `target/mcp-servers` by
//! `cargo xtask test` (or `cargo xtask prepare-mcp`).
#![expect(clippy::unwrap_used, reason = "test helpers fail loudly on purpose")]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{Lab, free_port, path_str, record, servers_dir};
use predicates::prelude::*;
use serde_json::{Value, json};

/// A lab whose `.plan/mcp.json` names the three servers; the filesystem server may use the
/// lab's directory only.
fn mcp_lab() -> Lab {
    let lab = Lab::new();
    let servers = servers_dir();
    let npm = servers.join("npm/node_modules/@modelcontextprotocol");
    common::use_mcp_servers(
        &lab,
        json!({
            "fs": {"command": "node", "args": [
                path_str(&npm.join("server-filesystem/dist/index.js")),
                path_str(lab.dir.path())
            ]},
            "everything": common::everything_server(),
            "time": {"command": path_str(&servers.join("venv/bin/mcp-server-time")), "args": ["--local-timezone", "UTC"]}
        }),
    );
    lab
}

/// The ids a report's run waits for, in its order.
fn waiting_ids(report: &Value) -> Vec<&str> {
    report["pending_approvals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["step_id"].as_str().unwrap())
        .collect()
}

/// Runs `plan` with `--json` and `--events`: the exit code, the report and the events' text.
fn run_with_events(lab: &Lab, plan: &Path) -> (i32, Value, String) {
    let events = lab.dir.path().join("events.ndjson");
    let (code, report) = lab.json(&[
        "run",
        path_str(plan),
        "--json",
        "--events",
        path_str(&events),
    ]);
    (code, report, std::fs::read_to_string(&events).unwrap())
}

/// Processes whose command line mentions `needle` (the lab's directory).
fn processes_mentioning(needle: &str) -> Vec<String> {
    let output = std::process::Command::new("ps")
        .args(["-eo", "pid,args"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|line| line.contains(needle) && !line.contains(" ps "))
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_plan_writes_lists_and_reads_files_through_the_filesystem_server() {
    let lab = mcp_lab();
    let dir = path_str(lab.dir.path()).to_owned();
    let plan = lab.write(
        "files.json",
        &json!({"variables": {"dir": dir}, "steps": [
            {"id": "write", "tool": "fs.write_file", "args": {"path": "${dir}/notes.txt", "content": "hello from a plan"}},
            {"id": "list", "tool": "fs.list_directory", "args": {"path": "${dir}"}, "depends_on": ["write"]},
            // The bare name works: only one server has `read_text_file`, and no built-in.
            {"id": "read", "tool": "read_text_file", "args": {"path": "${dir}/notes.txt"}, "depends_on": ["write"], "result_variable": "text"},
            // Its argument is a step's result, an object: only the call can tell it is wrong.
            {"id": "bad-args", "tool": "fs.read_text_file", "args": {"path": "${text}"}, "depends_on": ["read"]},
            {"id": "missing", "tool": "fs.read_text_file", "args": {"path": "${dir}/nope.txt"}}
        ]}),
    );
    // `write_file` says it is destructive, so it waits for an approval.
    let (code, report) = lab.json(&["run", path_str(&plan), "--json"]);
    assert_eq!(code, 5, "{report}");
    assert_eq!(report["pending_approvals"][0]["step_id"], "write");
    assert_eq!(report["pending_approvals"][0]["tool"], "fs.write_file");
    let run = report["run_id"].as_str().unwrap().to_owned();
    lab.cli()
        .args(["approve", &run, "write"])
        .assert()
        .success();
    let (code, report) = lab.json(&["resume", &run, "--json"]);
    assert_eq!(code, 1, "two steps fail on purpose: {report}");
    assert_eq!(
        std::fs::read_to_string(lab.dir.path().join("notes.txt")).unwrap(),
        "hello from a plan"
    );
    assert!(
        record(&report, "list")["result"]["content"]
            .as_str()
            .unwrap()
            .contains("[FILE] notes.txt")
    );
    assert_eq!(
        report["variables"]["text"],
        json!({"content": "hello from a plan"}),
        "structuredContent is the result"
    );
    let bad = &record(&report, "bad-args")["error"];
    assert_eq!(bad["code"], "E_ARGS_INVALID");
    assert!(
        bad["message"]
            .as_str()
            .unwrap()
            .contains("/path: {\"content\":\"hello from a plan\"} is not of type \"string\""),
        "{bad}"
    );
    let missing = &record(&report, "missing")["error"];
    assert_eq!(missing["code"], "E_TOOL", "isError: true is a tool error");
    assert!(
        missing["message"].as_str().unwrap().contains("ENOENT"),
        "{missing}"
    );
    assert!(
        processes_mentioning(&dir).is_empty(),
        "the servers stop with the run"
    );
    // Arguments known before the run are checked against the server's schema before
    // anything runs, as `validate` checks them.
    let plan = lab.write(
        "bad-args.json",
        &json!({"steps": [
            {"id": "write", "tool": "fs.write_file", "args": {"path": "${dir}/never.txt", "content": "x"}, "risk": "low"},
            {"id": "bad-args", "tool": "fs.read_text_file", "args": {"file": "notes.txt"}}
        ], "variables": {"dir": dir}}),
    );
    lab.cli()
        .args(["run", path_str(&plan)])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "`fs.read_text_file` needs the argument `path`",
        ));
    assert!(!lab.dir.path().join("never.txt").exists());
}

#[test]
fn structured_content_text_progress_and_timeouts_from_the_everything_server() {
    let lab = mcp_lab();
    let plan = lab.write(
        "everything.json",
        &json!({"steps": [
            {"id": "structured", "tool": "everything.get-structured-content", "args": {"location": "New York"}},
            {"id": "sum", "tool": "everything.get-sum", "args": {"a": 2, "b": 3}},
            {"id": "long", "tool": "everything.trigger-long-running-operation", "args": {"duration": 2, "steps": 4}},
            {"id": "too-long", "tool": "everything.trigger-long-running-operation", "args": {"duration": 30, "steps": 30},
             "timeout_ms": 1500, "retry": {"attempts": 1}}
        ]}),
    );
    let (code, report, events) = run_with_events(&lab, &plan);
    assert_eq!(code, 1, "{report}");
    let structured = &record(&report, "structured")["result"];
    assert!(structured["temperature"].is_number(), "{structured}");
    assert_eq!(record(&report, "sum")["result"], "The sum of 2 and 3 is 5.");
    assert_eq!(record(&report, "long")["ok"], true);
    let timed_out = &record(&report, "too-long")["error"];
    assert_eq!(timed_out["code"], "E_TIMEOUT");
    let progress: Vec<Value> = events
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["type"] == "tool.progress" && e["step_id"] == "long")
        .collect();
    // One notification per step, 0.5 s apart; the last comes right before the result, and
    // is reported too, before the call ends.
    assert_eq!(
        progress.len(),
        4,
        "every progress notification becomes an event: {progress:?}"
    );
    assert_eq!(progress[0]["progress"]["total"], 4.0);
    assert_eq!(progress[3]["progress"]["progress"], 4.0);
    let lines: Vec<&str> = events.lines().collect();
    let last_progress = lines
        .iter()
        .rposition(|l| l.contains("\"tool.progress\"") && l.contains("\"step_id\":\"long\""));
    let ended = lines
        .iter()
        .position(|l| l.contains("\"tool.succeeded\"") && l.contains("\"step_id\":\"long\""));
    assert!(
        last_progress < ended,
        "progress comes before the call's end"
    );
}

/// Progress comes back for a call whatever calls came before it, on any server: rmcp numbers
/// progress tokens per server and replaces any the caller sets, so a token counted by plan-cli
/// across servers matched only by chance (two calls to another server first made it miss).
#[test]
fn progress_comes_back_whatever_calls_came_first() {
    let lab = mcp_lab();
    let dir = path_str(lab.dir.path()).to_owned();
    let plan = lab.write(
        "progress.json",
        &json!({"max_concurrency": 1, "steps": [
            {"id": "one", "tool": "fs.list_directory", "args": {"path": dir}},
            {"id": "two", "tool": "fs.list_directory", "args": {"path": dir}},
            {"id": "long", "tool": "everything.trigger-long-running-operation", "args": {"duration": 2, "steps": 4}}
        ]}),
    );
    let (code, report, events) = run_with_events(&lab, &plan);
    assert_eq!(code, 0, "{report}");
    let progress = events
        .lines()
        .filter(|line| line.contains("\"tool.progress\"") && line.contains("\"step_id\":\"long\""))
        .count();
    assert_eq!(progress, 4, "{progress} progress events for `long`");
}

#[test]
fn the_time_server_from_pypi_and_tools_listing() {
    let lab = mcp_lab();
    let plan = lab.write(
        "time.json",
        &json!({"steps": [{"id": "now", "tool": "time.get_current_time", "args": {"timezone": "Asia/Tokyo"}}]}),
    );
    let (code, report) = lab.json(&["run", path_str(&plan), "--json"]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(record(&report, "now")["result"]["timezone"], "Asia/Tokyo");

    let (code, tools) = lab.json(&["tools", "--json", "--server", "time"]);
    assert_eq!(code, 0);
    let names: Vec<&str> = tools
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["time.convert_time", "time.get_current_time"]);
    assert_eq!(tools[1]["source"], "time");
    assert!(tools[1]["input_schema"]["properties"]["timezone"].is_object());
    lab.cli()
        .args(["tools", "--server", "nope"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("no such server"));
}

#[test]
fn unknown_and_ambiguous_tools_are_load_errors() {
    let lab = mcp_lab();
    // A second filesystem server makes `read_text_file` ambiguous.
    let mut config: Value = serde_json::from_str(
        &std::fs::read_to_string(lab.dir.path().join(".plan/mcp.json")).unwrap(),
    )
    .unwrap();
    config["mcpServers"]["fs2"] = config["mcpServers"]["fs"].clone();
    lab.write(".plan/mcp.json", &config);
    let plan = lab.write(
        "p.json",
        &json!({"steps": [
            {"id": "a", "tool": "read_text_file", "args": {"path": "x"}},
            {"id": "b", "tool": "fs.read_txt_file", "args": {"path": "x"}}
        ]}),
    );
    lab.cli()
        .args(["validate", path_str(&plan)])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "`read_text_file` is a tool of several MCP servers: `fs.read_text_file`, `fs2.read_text_file`",
        ))
        .stderr(predicate::str::contains("unknown tool `fs.read_txt_file`"))
        .stderr(predicate::str::contains("did you mean `fs.read_text_file`?"));
}

/// A small MCP server written with the Python SDK: `pid` says which process serves, `crash`
/// kills it.
const CRASHING_SERVER: &str = r#"
import os
from mcp.server.mcpserver import MCPServer
server = MCPServer("crashy")

@server.tool()
def pid() -> dict:
    return {"pid": os.getpid()}

@server.tool()
def crash() -> str:
    os._exit(3)

server.run()
"#;

#[test]
fn a_crashed_server_fails_the_call_with_e_transport_and_is_restarted_once() {
    let lab = Lab::new();
    let script = lab.dir.path().join("crashy.py");
    std::fs::write(&script, CRASHING_SERVER).unwrap();
    let python = servers_dir().join("venv/bin/python");
    std::fs::create_dir_all(lab.dir.path().join(".plan")).unwrap();
    lab.write(
        ".plan/mcp.json",
        &json!({"mcpServers": {"crashy": {"command": path_str(&python), "args": [path_str(&script)]}}}),
    );
    let plan = lab.write(
        "p.json",
        &json!({"max_concurrency": 1, "steps": [
            {"id": "before", "tool": "crashy.pid", "args": {}},
            {"id": "crash", "tool": "crashy.crash", "args": {}, "depends_on": ["before"], "retry": {"attempts": 1}},
            {"id": "after", "tool": "crashy.pid", "args": {}, "run_if": "all_done", "depends_on": ["crash"]},
            {"id": "crash-again", "tool": "crashy.crash", "args": {}, "run_if": "all_done", "depends_on": ["after"], "retry": {"attempts": 1}},
            {"id": "no-more", "tool": "crashy.pid", "args": {}, "run_if": "all_done", "depends_on": ["crash-again"], "retry": {"attempts": 1}}
        ]}),
    );
    let (code, report) = lab.json(&["run", path_str(&plan), "--json"]);
    assert_eq!(code, 1, "{report}");
    let crash = &record(&report, "crash")["error"];
    assert_eq!(crash["code"], "E_TRANSPORT", "{crash}");
    let before = record(&report, "before")["result"]["pid"].as_u64().unwrap();
    let after = record(&report, "after")["result"]["pid"].as_u64().unwrap();
    assert_ne!(before, after, "the server was started again");
    assert_eq!(
        record(&report, "crash-again")["error"]["code"],
        "E_TRANSPORT"
    );
    let no_more = &record(&report, "no-more")["error"];
    assert!(
        no_more["message"]
            .as_str()
            .unwrap()
            .contains("was already restarted once"),
        "{no_more}"
    );
}

#[test]
fn ctrl_c_stops_the_servers_too() {
    let lab = mcp_lab();
    let dir = path_str(lab.dir.path()).to_owned();
    let plan = lab.write(
        "slow.json",
        &json!({"steps": [
            {"id": "list", "tool": "fs.list_directory", "args": {"path": dir}},
            {"id": "slow", "tool": "everything.trigger-long-running-operation", "args": {"duration": 60, "steps": 60}}
        ]}),
    );
    let events = lab.dir.path().join("events.ndjson");
    let mut child = lab.spawn(&["run", path_str(&plan), "--events", path_str(&events)]);
    // Ready once the long call reports progress (and so is running on the server).
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let seen = std::fs::read_to_string(&events).unwrap_or_default();
        if seen.contains("tool.progress") {
            break;
        }
        if Instant::now() >= deadline || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            let output = child.wait_with_output().unwrap();
            panic!(
                "the long operation never reported progress; events: {seen}\nstderr: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!processes_mentioning(&dir).is_empty(), "the fs server runs");
    std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(130));
    assert!(
        processes_mentioning(&dir).is_empty(),
        "no server outlives plan-cli: {:?}",
        processes_mentioning(&dir)
    );
}

/// Copies `from` into `to`, recursively.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

#[test]
fn the_readme_mcp_example_runs_as_documented() {
    // The README's command, run in a copy of the repository's example (the plan writes files).
    let lab = Lab::new();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    copy_dir(
        &root.join("examples/mcp"),
        &lab.dir.path().join("examples/mcp"),
    );
    std::fs::create_dir_all(lab.dir.path().join("target")).unwrap();
    std::os::unix::fs::symlink(servers_dir(), lab.dir.path().join("target/mcp-servers")).unwrap();
    let (code, report) = lab.json(&[
        "--mcp-config",
        "examples/mcp/mcp.json",
        "run",
        "examples/mcp/refactor-auth.json",
        "--approve",
        "4",
        "--json",
    ]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["plan_id"], "refactor-auth-001");
    let written =
        std::fs::read_to_string(lab.dir.path().join("examples/mcp/workspace/out/handler.py"))
            .unwrap();
    assert!(written.starts_with("\"\"\"The auth module the example plan refactors.\"\"\""));
    assert!(written.contains("FILES_SEEN = {\"content\":"));
    assert_eq!(record(&report, "5")["result"]["exit_code"], 0);
}

/// A client that is not ours: the official Python MCP SDK, driving `plan-cli mcp serve`.
const PYTHON_CLIENT: &str = r#"
import asyncio, json, sys, os
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

async def main():
    params = StdioServerParameters(command=sys.argv[1], args=["mcp", "serve", "--allow-client-approval"], env=dict(os.environ))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            out = {}
            tools = await session.list_tools()
            out["tools"] = sorted(t.name for t in tools.tools)
            plan = {"steps": [
                {"id": "a", "tool": "echo", "args": {"x": 1}, "result_variable": "a"},
                {"id": "deploy", "tool": "echo", "risk": "high", "args": {"y": "${a.x}"}, "depends_on": ["a"]}]}
            run = await session.call_tool("plan_run", {"plan": plan})
            out["run"] = run.structured_content
            run_id = run.structured_content["run_id"]
            approved = await session.call_tool("plan_approve", {"run_id": run_id, "steps": ["deploy"]})
            out["approve"] = approved.structured_content
            resumed = await session.call_tool("plan_resume", {"run_id": run_id})
            out["resume"] = resumed.structured_content
            status = await session.call_tool("plan_status", {"run_id": run_id})
            out["status"] = status.structured_content["task_status"]
            bad = await session.call_tool("plan_validate", {"plan": "steps:\n  - id: a\n    tool: nope\n"})
            out["invalid"] = {"is_error": bad.is_error, "content": bad.structured_content}
            print(json.dumps(out))

asyncio.run(main())
"#;

#[test]
fn plan_cli_serves_mcp_to_the_python_sdk_client() {
    let lab = Lab::new();
    let script = lab.dir.path().join("client.py");
    std::fs::write(&script, PYTHON_CLIENT).unwrap();
    let output = std::process::Command::new(servers_dir().join("venv/bin/python"))
        .current_dir(lab.dir.path())
        .env_remove("PLAN_DB")
        .arg(&script)
        .arg(env!("CARGO_BIN_EXE_plan-cli"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let out: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        out["tools"],
        json!([
            "plan_approve",
            "plan_create",
            "plan_create_and_execute",
            "plan_execute",
            "plan_resume",
            "plan_run",
            "plan_status",
            "plan_validate"
        ])
    );
    assert_eq!(out["run"]["task_status"], "WAITING");
    assert_eq!(out["run"]["pending_approvals"][0]["args"], json!({"y": 1}));
    assert_eq!(out["approve"]["decided"], json!(["deploy"]));
    assert_eq!(out["resume"]["task_status"], "COMPLETED");
    assert_eq!(out["resume"]["records"][1]["result"], json!({"y": 1}));
    assert_eq!(out["status"], "COMPLETED");
    // An invalid plan is an answer, as `validate --json` prints it: every error as data, with
    // its line and column.
    let invalid = &out["invalid"];
    assert_eq!(invalid["is_error"], false, "{invalid}");
    assert_eq!(invalid["content"]["valid"], false, "{invalid}");
    let error = &invalid["content"]["errors"][0];
    assert_eq!(error["code"], "plan::unknown_tool", "{invalid}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("unknown tool `nope`"),
        "{invalid}"
    );
    assert_eq!((&error["line"], &error["column"]), (&json!(3), &json!(11)));
    // The runs went to the ledger like any other.
    let (_, runs) = lab.json(&["runs", "--json"]);
    assert_eq!(runs.as_array().unwrap().len(), 1);
}

#[test]
fn a_streamable_http_server_with_headers_from_the_environment() {
    let port = free_port();
    let script = servers_dir()
        .join("npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let mut server = std::process::Command::new("node")
        .arg(&script)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the HTTP server never listened");
        std::thread::sleep(Duration::from_millis(50));
    }
    let lab = Lab::new();
    std::fs::create_dir_all(lab.dir.path().join(".plan")).unwrap();
    lab.write(
        ".plan/mcp.json",
        &json!({"mcpServers": {"remote": {
            "url": format!("http://127.0.0.1:{port}/mcp"),
            "headers": {"X-Token": "${env.PLAN_TEST_TOKEN}"}
        }}}),
    );
    let plan = lab.write(
        "p.json",
        &json!({"steps": [{"id": "sum", "tool": "remote.get-sum", "args": {"a": 40, "b": 2}}]}),
    );
    let output = lab
        .cli()
        .env("PLAN_TEST_TOKEN", "t0k3n")
        .args(["run", path_str(&plan), "--json"])
        .output()
        .unwrap();
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        record(&report, "sum")["result"],
        "The sum of 40 and 2 is 42."
    );
    // Without the variable the configuration is refused, naming it.
    lab.cli()
        .env_remove("PLAN_TEST_TOKEN")
        .args(["run", path_str(&plan)])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "server `remote`: `${env.PLAN_TEST_TOKEN}` is not set in the environment",
        ));
}

#[test]
fn validate_checks_arguments_against_an_mcp_tools_schema() {
    let lab = mcp_lab();
    let plan = lab.write(
        "check.json",
        &json!({"steps": [
            {"id": "ok", "tool": "fs.read_text_file", "args": {"path": "notes.txt"}},
            {"id": "bad", "tool": "fs.read_text_file", "args": {"file": "notes.txt"}}
        ]}),
    );
    let output = lab
        .cli()
        .args(["validate", path_str(&plan)])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("`fs.read_text_file` needs the argument `path`")
            && stderr.contains("takes: path (required), tail, head")
            && stderr.contains("is not a valid plan (1 error)"),
        "{stderr}"
    );
}

#[test]
fn one_broken_server_does_not_hide_the_others_tools() {
    let lab = mcp_lab();
    // The lab's three servers, and one that cannot start.
    let config_path = lab.dir.path().join(".plan/mcp.json");
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(&config_path).unwrap()).unwrap();
    config["mcpServers"]["broken"] = json!({"command": "/no/such/server"});
    std::fs::write(&config_path, config.to_string()).unwrap();
    let output = lab.cli().args(["tools"]).output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    let listed = String::from_utf8_lossy(&output.stdout);
    assert!(listed.contains("time.get_current_time"), "{listed}");
    assert!(listed.contains("fs.read_text_file"), "{listed}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("MCP server `broken` is not listed") && stderr.contains("/no/such/server"),
        "{stderr}"
    );
    // Columns line up whatever the server's name.
    let columns: Vec<usize> = listed
        .lines()
        .map(|line| {
            line.find("  builtin")
                .or_else(|| line.find("  fs "))
                .or_else(|| line.find("  time "))
                .or_else(|| line.find("  everything "))
                .unwrap()
        })
        .collect();
    assert!(columns.windows(2).all(|w| w[0] == w[1]), "{listed}");
}

/// An MCP server gets only the environment its `mcpServers` entry names (and what programs
/// need to start): a secret in plan-cli's environment does not reach it, so a plan cannot read
/// it back through a tool like `get-env`; one the entry names does.
#[test]
fn a_server_sees_only_the_environment_its_entry_names() {
    let lab = mcp_lab();
    let servers = servers_dir();
    let npm = servers.join("npm/node_modules/@modelcontextprotocol");
    lab.write(
        ".plan/mcp.json",
        &json!({"mcpServers": {
            "everything": {"command": "node", "args": [
                path_str(&npm.join("server-everything/dist/index.js")), "stdio"
            ], "env": {"GIVEN": "named-in-the-entry"}}
        }}),
    );
    let plan = lab.write(
        "env.json",
        &json!({"steps": [{"id": "env", "tool": "everything.get-env", "args": {}}]}),
    );
    let output = lab
        .command()
        .args(["run", path_str(&plan), "--json"])
        .env("SECRET_TOKEN", "s3cret-operator-value")
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    let text = record(&report, "env")["result"].to_string();
    assert_eq!(record(&report, "env")["ok"], true, "{report}");
    assert!(text.contains("named-in-the-entry"), "{text}");
    assert!(
        text.contains("PATH"),
        "programs still find their programs: {text}"
    );
    assert!(!text.contains("SECRET_TOKEN"), "{text}");
    assert!(!text.contains("s3cret-operator-value"), "{text}");
}

/// A run keeps the MCP configuration it was given: `approve` (of a call not waiting yet, which
/// compiles the plan) and `resume` find its servers' tools without `--mcp-config` again.
#[test]
fn a_run_with_mcp_config_is_approved_and_resumed_without_the_flag() {
    let lab = Lab::new();
    let servers = servers_dir();
    let config = lab.write(
        "servers.json",
        &json!({"mcpServers": {
            "time": {"command": path_str(&servers.join("venv/bin/mcp-server-time")), "args": ["--local-timezone", "UTC"]}
        }}),
    );
    let plan = lab.write(
        "time.json",
        &json!({"steps": [
            {"id": "now", "tool": "time.get_current_time", "risk": "high", "args": {"timezone": "UTC"}},
            {"id": "later", "tool": "time.get_current_time", "risk": "high", "args": {"timezone": "Asia/Tokyo"}, "depends_on": ["now"]}
        ]}),
    );
    let output = lab
        .cli()
        .args(["run", path_str(&plan), "--mcp-config", path_str(&config)])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(5));
    let said = String::from_utf8_lossy(&output.stdout);
    let run = lab.newest_run_id();
    assert!(said.contains(&format!("plan-cli approve {run}")), "{said}");
    lab.cli().args(["approve", &run, "now"]).assert().success();
    lab.cli()
        .args(["approve", &run, "later"])
        .assert()
        .success();
    let (code, report) = lab.json(&["resume", &run, "--json"]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(record(&report, "later")["result"]["timezone"], "Asia/Tokyo");
}

/// server-everything's `simulate-research-query` declares `taskSupport: "required"` (MCP
/// 2025-11-25 tasks): plan-cli calls it as a task, polls it, reads its result, and reports its
/// status messages as progress; a task that outlives the call's timeout fails the attempt with
/// `E_TIMEOUT`, as any call does.
#[test]
fn a_task_only_tool_is_called_as_a_task() {
    let lab = mcp_lab();
    let plan = lab.write(
        "research.json",
        &json!({"steps": [
            {"id": "research", "tool": "everything.simulate-research-query", "args": {"topic": "rust"}},
            {"id": "again", "tool": "everything.simulate-research-query", "args": {"topic": "go"}, "depends_on": ["research"]},
            {"id": "late", "tool": "everything.simulate-research-query", "args": {"topic": "zig"},
             "timeout_ms": 1500, "retry": {"attempts": 1}}
        ]}),
    );
    let (code, report, events) = run_with_events(&lab, &plan);
    assert_eq!(code, 1, "{report}");
    for step in ["research", "again"] {
        let result = record(&report, step)["result"].as_str().unwrap_or_default();
        assert!(
            result.contains("# Research Report") && result.contains("Stage 4: Generating report"),
            "{step}: {report}"
        );
    }
    assert_eq!(record(&report, "late")["error"]["code"], "E_TIMEOUT");
    let messages: Vec<String> = events
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["type"] == "tool.progress" && e["step_id"] == "research")
        .filter_map(|e| e["progress"]["message"].as_str().map(str::to_owned))
        .collect();
    assert!(
        messages.iter().any(|m| m.contains("Gathering sources")),
        "{messages:?}"
    );
}

/// server-memory rewrites its whole file on each write, so parallel writes lose each other's
/// (a map of six observations kept two or three of them). `max_concurrency` on the server's
/// entry, or on one of its tools, makes the calls take turns, and every write is kept.
#[test]
fn max_concurrency_per_server_and_per_tool_keeps_every_write() {
    let memory =
        servers_dir().join("npm/node_modules/@modelcontextprotocol/server-memory/dist/index.js");
    let items = ["one", "two", "three", "four", "five", "six"];
    for limit in [
        json!({"max_concurrency": 1}),
        json!({"tools": {"add_observations": {"max_concurrency": 1}}}),
    ] {
        let lab = Lab::new();
        let file = lab.dir.path().join("memory.jsonl");
        let mut entry = json!({"command": "node", "args": [path_str(&memory)],
            "env": {"MEMORY_FILE_PATH": path_str(&file)}});
        for (key, value) in limit.as_object().unwrap() {
            entry[key] = value.clone();
        }
        std::fs::create_dir_all(lab.dir.path().join(".plan")).unwrap();
        lab.write(".plan/mcp.json", &json!({"mcpServers": {"memory": entry}}));
        let plan = lab.write(
            "observe.json",
            &json!({"steps": [
                {"id": "entity", "tool": "memory.create_entities", "args": {"entities": [{"name": "ada", "entityType": "person", "observations": []}]}},
                {"id": "observe", "tool": "memory.add_observations", "expand_on": items, "expand_key": "$each",
                 "args": {"observations": [{"entityName": "ada", "contents": ["$each"]}]}, "depends_on": ["entity"]},
                {"id": "graph", "tool": "memory.read_graph", "depends_on": ["observe"], "result_variable": "graph"}
            ]}),
        );
        let (code, report) = lab.json(&["run", path_str(&plan), "--json"]);
        assert_eq!(code, 0, "{report}");
        let mut kept: Vec<&str> = report["variables"]["graph"]["entities"][0]["observations"]
            .as_array()
            .unwrap_or_else(|| panic!("{report}"))
            .iter()
            .map(|o| o.as_str().unwrap())
            .collect();
        kept.sort_unstable();
        let mut all = items.to_vec();
        all.sort_unstable();
        assert_eq!(kept, all, "{limit}: every write is kept");
    }
}

/// A plan cannot declare a tool an MCP server of the configuration has by the same bare name,
/// whichever servers its other calls need.
#[test]
fn a_declared_tool_cannot_take_an_mcp_tools_bare_name() {
    let lab = mcp_lab();
    let plan = lab.write(
        "declares.json",
        &json!({"tools": [{"name": "get-sum", "queue": "q", "risk": "low"}],
                "steps": [{"id": "a", "tool": "get-sum", "args": {"a": 1, "b": 2}}]}),
    );
    let said = lab.fails(&["validate", path_str(&plan)], 2);
    assert!(
        said.contains("the plan declares the tool `get-sum`, which plan-cli already has"),
        "{said}"
    );
}

/// The turns are real: with `max_concurrency: 1` on one tool, three one-second calls of it
/// from a map take three seconds at least (a lower bound, which a slow machine only raises),
/// while another tool of the same server is not held up by them.
#[test]
fn a_tools_max_concurrency_makes_its_calls_take_turns() {
    let lab = Lab::new();
    let npm = servers_dir().join("npm/node_modules/@modelcontextprotocol");
    std::fs::create_dir_all(lab.dir.path().join(".plan")).unwrap();
    lab.write(
        ".plan/mcp.json",
        &json!({"mcpServers": {"everything": {"command": "node", "args": [
            path_str(&npm.join("server-everything/dist/index.js")), "stdio"],
            "tools": {"trigger-long-running-operation": {"max_concurrency": 1}}}}}),
    );
    let plan = lab.write(
        "turns.json",
        &json!({"steps": [
            {"id": "slow", "tool": "everything.trigger-long-running-operation",
             "expand_on": [1, 2, 3], "expand_key": "$each", "args": {"duration": 1, "steps": 1}},
            {"id": "sum", "tool": "everything.get-sum", "args": {"a": 1, "b": 2}}
        ]}),
    );
    let started = std::time::Instant::now();
    let (code, report) = lab.json(&["run", path_str(&plan), "--json"]);
    let took = started.elapsed();
    assert_eq!(code, 0, "{report}");
    assert!(
        took >= std::time::Duration::from_millis(2900),
        "three one-second calls taking turns took {took:?}"
    );
    // The other tool's call did not wait for the three.
    assert!(
        record(&report, "sum")["duration_ms"].as_u64().unwrap() < 1000,
        "{report}"
    );
}

/// A server's question (elicitation: server-everything's `trigger-elicitation-request`, which
/// it offers only to clients that declare they answer forms) makes the call wait as an
/// approval does, with what it asks and the schema of the answer; a person answers with
/// `approve RUN ask@input#1 --input JSON`, and the call, made again, is given the answer when
/// the server asks again. A refusal fails the call.
#[test]
fn a_servers_question_waits_for_a_person_and_is_answered_when_asked_again() {
    let lab = mcp_lab();
    let plan = lab.write(
        "ask.json",
        &json!({"steps": [
            {"id": "ask", "tool": "everything.trigger-elicitation-request", "args": {}, "result_variable": "ask"},
            {"id": "after", "tool": "respond", "depends_on": ["ask"], "args": {"text": "${ask}"}}
        ]}),
    );
    let (code, report, events) = run_with_events(&lab, &plan);
    assert_eq!(code, 5, "{report}");
    let run = report["run_id"].as_str().unwrap().to_owned();
    let pending = &report["pending_approvals"];
    assert_eq!(pending.as_array().unwrap().len(), 1, "{pending}");
    assert_eq!(pending[0]["step_id"], "ask@input#1");
    assert_eq!(pending[0]["tool"], "everything.trigger-elicitation-request");
    assert_eq!(
        pending[0]["reason"],
        "input required: Please provide inputs for the following fields:"
    );
    assert_eq!(
        pending[0]["input_schema"]["properties"]["name"]["type"],
        "string"
    );
    assert_eq!(
        record(&report, "ask")["reason"],
        "GRAPH_HALT_AWAITING_APPROVAL: awaiting input"
    );
    assert!(events.contains("\"code\":\"E_INPUT_REQUIRED\""), "{events}");
    let (_, status) = lab.json(&["status", &run, "--json"]);
    assert_eq!(status["pending_approvals"], report["pending_approvals"]);
    assert_eq!(
        record(&status, "ask")["reason"],
        record(&report, "ask")["reason"]
    );

    // A question is answered, not approved.
    for args in [
        vec!["approve", &run, "ask@input#1"],
        vec!["approve", &run, "--all"],
    ] {
        lab.cli()
            .args(&args)
            .assert()
            .code(2)
            .stderr(predicate::str::contains(
                "asks for input, not for an approval",
            ));
    }
    // An answer that does not fit the schema asked with is refused before any server sees it.
    lab.cli()
        .args(["approve", &run, "ask@input#1", "--input", r#"{"name": 5}"#])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("does not fit what was asked"))
        .stderr(predicate::str::contains("/name"));
    lab.cli()
        .args([
            "approve",
            &run,
            "ask@input#1",
            "--input",
            r#"{"name": "Ada Lovelace", "check": true}"#,
        ])
        .assert()
        .success();
    let (code, report) = lab.json(&["resume", &run, "--json"]);
    assert_eq!(code, 0, "{report}");
    let said = record(&report, "ask")["result"].to_string();
    assert!(said.contains("- Name: Ada Lovelace"), "{said}");
    assert!(said.contains("\\\"action\\\": \\\"accept\\\""), "{said}");
    assert!(report["answer"].as_str().unwrap().contains("Ada Lovelace"));

    // Refused: the call fails, and what depends on it is skipped.
    let (code, report, _) = run_with_events(&lab, &plan);
    assert_eq!(code, 5, "{report}");
    let run = report["run_id"].as_str().unwrap().to_owned();
    lab.cli()
        .args(["reject", &run, "ask@input#1", "--reason", "not today"])
        .assert()
        .success();
    let (code, report) = lab.json(&["resume", &run, "--json"]);
    assert_eq!(code, 1, "{report}");
    let ask = record(&report, "ask");
    assert_eq!(ask["error"]["code"], "E_REJECTED", "{ask}");
    assert_eq!(
        ask["error"]["message"],
        "the input the call asked for was refused: not today"
    );
    assert_eq!(record(&report, "after")["skipped"], true);
}

/// Questions of map items and block nodes wait under their calls' ids, in plan order, and are
/// answered one by one; `approve --all` approves what waits for an approval and leaves the
/// questions waiting. (`max_concurrency: 1`: one call at a time, so each question is its call's.)
#[test]
fn questions_of_map_items_and_block_nodes_are_answered_each_under_its_call() {
    let lab = Lab::new();
    let mut everything = common::everything_server();
    everything["max_concurrency"] = json!(1);
    common::use_mcp_servers(&lab, json!({ "everything": everything }));
    let ask = "everything.trigger-elicitation-request";
    let plan = lab.write(
        "asks.json",
        &json!({"steps": [
            {"id": "each", "tool": ask, "expand_on": ["a", "b"], "args": {}},
            {"id": "talk", "args": {}, "block": {"entry_point": "ask", "nodes": {"ask": {"tool": ask, "args": {}}}}},
            {"id": "deploy", "tool": "echo", "risk": "high", "args": {"to": "prod"}}
        ]}),
    );
    let (code, report) = lab.json(&["run", path_str(&plan), "--json"]);
    assert_eq!(code, 5, "{report}");
    let run = report["run_id"].as_str().unwrap().to_owned();
    let waiting = waiting_ids(&report);
    assert_eq!(
        waiting,
        [
            "each-0@input#1",
            "each-1@input#1",
            "talk/ask@input#1",
            "deploy"
        ]
    );
    lab.cli()
        .args(["approve", &run, "--all"])
        .assert()
        .success()
        .stdout(predicate::str::contains("approved deploy in run"));
    let (_, status) = lab.json(&["status", &run, "--json"]);
    let still = waiting_ids(&status);
    assert_eq!(
        still,
        ["each-0@input#1", "each-1@input#1", "talk/ask@input#1"],
        "questions wait for their answers"
    );
    for (id, name) in [
        ("each-0@input#1", "Ada"),
        ("each-1@input#1", "Grace"),
        ("talk/ask@input#1", "Barbara"),
    ] {
        lab.cli()
            .args([
                "approve",
                &run,
                id,
                "--input",
                &json!({"name": name}).to_string(),
            ])
            .assert()
            .success();
    }
    let (code, report) = lab.json(&["resume", &run, "--json"]);
    assert_eq!(code, 0, "{report}");
    for (id, name) in [
        ("each-0", "Ada"),
        ("each-1", "Grace"),
        ("talk/ask#1", "Barbara"),
    ] {
        let said = record(&report, id)["result"].to_string();
        assert!(said.contains(&format!("- Name: {name}")), "{id}: {said}");
    }
    assert_eq!(record(&report, "deploy")["result"], json!({"to": "prod"}));
}

/// A long call (`timeout_ms` of a minute or more) is made as a task where its tool takes one
/// (`taskSupport: "optional"`: `mcp serve`'s `plan_run`), a tool that refuses a task
/// (`plan_validate`, `forbidden`: -32601) is then called plainly, and a short call is plain.
/// Seen from the serving side: its ledger keeps which runs were tasks.
#[test]
fn long_calls_are_tasks_where_the_tool_takes_one() {
    let lab = Lab::new();
    let inner = lab.dir.path().join("inner.db");
    common::use_mcp_servers(
        &lab,
        json!({"planner": {"command": env!("CARGO_BIN_EXE_plan-cli"), "args": ["mcp", "serve"], "env": {"PLAN_DB": path_str(&inner)}}}),
    );
    let plan = lab.write(
        "p.json",
        &json!({"steps": [
            {"id": "long", "tool": "planner.plan_run", "timeout_ms": 120_000, "args": {"plan": {"id": "long", "steps": [{"id": "a", "tool": "sleep", "args": {"ms": 200}}]}}},
            {"id": "check", "tool": "planner.plan_validate", "timeout_ms": 120_000, "args": {"plan": {"steps": [{"id": "a", "tool": "echo", "args": {}}]}}},
            {"id": "short", "tool": "planner.plan_run", "args": {"plan": {"id": "short", "steps": [{"id": "b", "tool": "echo", "args": {}}]}}}
        ]}),
    );
    let (code, report) = lab.json(&[
        "run",
        path_str(&plan),
        "--json",
        "--approve",
        "long",
        "--approve",
        "short",
    ]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(
        record(&report, "long")["result"]["task_status"],
        "COMPLETED"
    );
    assert_eq!(record(&report, "check")["result"]["valid"], true);
    assert_eq!(
        record(&report, "short")["result"]["task_status"],
        "COMPLETED"
    );
    // Which runs the server ran as tasks: the long one alone.
    let output = std::process::Command::new("python3")
        .arg("-c")
        .arg("import sqlite3, sys, json; c = sqlite3.connect(sys.argv[1]); print(json.dumps({p: json.loads(o).get('front_end') for p, o in c.execute('select plan_id, options from runs')}))")
        .arg(&inner)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let front_ends: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        front_ends["long"]["mcp_task"]["tool"], "plan_run",
        "{front_ends}"
    );
    assert_eq!(front_ends["short"], Value::Null, "{front_ends}");
}

/// An answer is for the call as it asked, with its arguments (as an approval is): run again
/// with other arguments (`retry` of what they come from), the call asks anew instead of being
/// given the old answer.
#[test]
fn an_answer_is_not_given_to_the_call_with_other_arguments() {
    let lab = mcp_lab();
    std::fs::write(lab.dir.path().join("target.txt"), "staging").unwrap();
    let plan = lab.write(
        "ask.json",
        &json!({"steps": [
            {"id": "pick", "tool": "exec", "args": {"argv": ["cat", "target.txt"]}, "result_variable": "pick"},
            {"id": "ask", "tool": "everything.trigger-elicitation-request", "depends_on": ["pick"], "args": {"about": "${pick.stdout}"}}
        ]}),
    );
    let (code, report) = lab.json(&["run", path_str(&plan), "--json"]);
    assert_eq!(code, 5, "{report}");
    let run = report["run_id"].as_str().unwrap().to_owned();
    assert_eq!(
        report["pending_approvals"][0]["args"],
        json!({"about": "staging"})
    );
    lab.cli()
        .args([
            "approve",
            &run,
            "ask@input#1",
            "--input",
            r#"{"name": "Ada"}"#,
        ])
        .assert()
        .success();
    let (code, report) = lab.json(&["resume", &run, "--json"]);
    assert_eq!(code, 0, "{report}");
    std::fs::write(lab.dir.path().join("target.txt"), "prod").unwrap();
    let (code, report) = lab.json(&["retry", &run, "pick", "--json"]);
    assert_eq!(
        code, 5,
        "asked again, not answered with the answer for staging: {report}"
    );
    let asked = &report["pending_approvals"][0];
    assert_eq!(asked["step_id"], "ask@input#2", "{report}");
    assert_eq!(asked["args"], json!({"about": "prod"}));
    // Refused, then asked of other arguments again: a new question, which can be answered.
    lab.cli()
        .args(["reject", &run, "ask@input#2", "--reason", "not prod"])
        .assert()
        .success();
    let (code, report) = lab.json(&["resume", &run, "--json"]);
    assert_eq!(code, 1, "{report}");
    std::fs::write(lab.dir.path().join("target.txt"), "dev").unwrap();
    let (code, report) = lab.json(&["retry", &run, "pick", "--json"]);
    assert_eq!(code, 5, "{report}");
    assert_eq!(
        report["pending_approvals"][0]["step_id"], "ask@input#3",
        "{report}"
    );
    lab.cli()
        .args([
            "approve",
            &run,
            "ask@input#3",
            "--input",
            r#"{"name": "Dev"}"#,
        ])
        .assert()
        .success();
    let (code, report) = lab.json(&["resume", &run, "--json"]);
    assert_eq!(code, 0, "{report}");
    assert!(
        record(&report, "ask")["result"]
            .to_string()
            .contains("- Name: Dev")
    );
}
