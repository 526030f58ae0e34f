//! `mcp serve` gives a client only what its operator allows. Each attack is driven through
//! the official Python MCP SDK client (installed by `cargo xtask prepare-mcp`) and must be
//! refused, with the server alive afterwards.
#![expect(clippy::unwrap_used, reason = "test helpers fail loudly on purpose")]

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

mod common;

use common::{Lab, path_str};

fn python() -> PathBuf {
    common::servers_dir().join("venv/bin/python")
}

/// Calls the server's tools in order, each `[tool, args]`, and prints one JSON answer per
/// call: `{"is_error", "text", "content"}`.
const CLIENT: &str = r#"
import asyncio, json, sys, os
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

async def main():
    server_args = json.loads(sys.argv[2])
    calls = json.loads(sys.argv[3])
    params = StdioServerParameters(command=sys.argv[1], args=["mcp", "serve"] + server_args, env=dict(os.environ))
    answers = []
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            for tool, args in calls:
                result = await session.call_tool(tool, args)
                answers.append({"is_error": bool(result.is_error), "text": result.content[0].text if result.content else "", "content": result.structured_content})
    print(json.dumps(answers))

asyncio.run(main())
"#;

fn serve(lab: &Lab, server_args: &[&str], calls: &Value) -> Vec<Value> {
    let script = lab.dir.path().join("client.py");
    std::fs::write(&script, CLIENT).unwrap();
    let output = std::process::Command::new(python())
        .current_dir(lab.dir.path())
        .env_remove("PLAN_DB")
        .env_remove("PLAN_LLM_URL")
        .env_remove("OPENAI_BASE_URL")
        .env("SECRET_TOKEN", "tok-123-secret")
        .arg(&script)
        .arg(env!("CARGO_BIN_EXE_plan-cli"))
        .arg(json!(server_args).to_string())
        .arg(calls.to_string())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice::<Value>(&output.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

fn step(tool: &str, args: Value) -> Value {
    json!({"steps": [{"id": "a", "tool": tool, "args": args}]})
}

/// A `plan_validate` answer that finds the plan invalid, with an error that says `says`.
fn invalid(answer: &Value, says: &str) {
    assert_eq!(answer["is_error"], json!(false), "{answer}");
    assert_eq!(answer["content"]["valid"], json!(false), "{answer}");
    let errors = answer["content"]["errors"].as_array().unwrap();
    assert!(
        errors
            .iter()
            .any(|error| error["message"].as_str().unwrap().contains(says)),
        "expected `{says}` in: {answer}"
    );
}

/// A call refused, saying `says`; for `plan_validate`, the plan found invalid for it (its
/// answer is the validation, as `validate --json` prints it).
fn refused(answer: &Value, says: &str) {
    if answer["content"]["valid"] == json!(false) {
        // Where the plan says it is the error's line and column there, not words.
        let says = match says.split_once(": ") {
            Some((path, rest)) if !path.contains(' ') => rest,
            _ => says,
        };
        return invalid(answer, says);
    }
    assert_eq!(answer["is_error"], json!(true), "{answer}");
    let text = answer["text"].as_str().unwrap();
    assert!(text.contains(says), "expected `{says}` in: {text}");
}

#[test]
fn by_default_a_client_gets_low_risk_tools_no_environment_and_no_approvals() {
    let lab = Lab::new();
    let ok_plan = json!({"steps": [
        {"id": "a", "tool": "echo", "args": {"x": 1}},
        {"id": "deploy", "tool": "echo", "risk": "high", "depends_on": ["a"]}]});
    let answers = serve(
        &lab,
        &["--max-plan-bytes", "20000", "--max-steps", "50"],
        &json!([
            ["plan_run", {"plan": step("exec", json!({"argv": ["printenv", "SECRET_TOKEN"]}))}],
            ["plan_run", {"plan": step("http", json!({"url": "http://127.0.0.1:9/"}))}],
            ["plan_run", {"plan": {"env": ["SECRET_TOKEN"], "steps": [{"id": "a", "tool": "echo", "args": {"t": "${env.SECRET_TOKEN}"}}]}}],
            ["plan_validate", {"plan": step("exec", json!({"argv": ["true"]}))}],
            ["plan_run", {"plan": ok_plan, "approve": ["deploy"]}],
            ["plan_run", {"plan": ok_plan}],
            ["plan_validate", {"plan": {"steps": [{"id": "a", "tool": "echo", "when": format!("{}1", "1+".repeat(6000))}]}}],
            ["plan_validate", {"plan": {"steps": (0..51).map(|i| json!({"id": format!("s{i}"), "tool": "echo"})).collect::<Vec<_>>()}}],
            ["plan_validate", {"plan": {"steps": [{"id": "a", "tool": "echo", "args": {"pad": "x".repeat(30_000)}}]}}],
            // A small plan over a large list given beside it (hostile review: 300,000 calls).
            ["plan_run", {"plan": {"steps": [{"id": "m", "tool": "echo", "expand_on": "${list}", "args": {"n": "$each"}}]},
                          "variables": {"list": (0..10_000).collect::<Vec<u32>>()}}],
            ["plan_validate", {"plan": ok_plan}],
        ]),
    );
    refused(
        &answers[0],
        "steps[0]: the step calls `exec` (medium risk), which is not allowed",
    );
    refused(
        &answers[1],
        "steps[0]: the step calls `http` (medium risk), which is not allowed",
    );
    refused(
        &answers[2],
        "env[0]: reading the environment variable `SECRET_TOKEN` is not allowed",
    );
    refused(&answers[3], "the step calls `exec`");
    refused(&answers[4], "does not let clients approve");
    // The run waits for the operator; the client cannot approve it, but may reject it.
    assert_eq!(
        answers[5]["content"]["task_status"],
        json!("WAITING"),
        "{}",
        answers[5]
    );
    // A plan's own problem is an answer, as `validate --json` gives it (not a refusal).
    assert_eq!(
        answers[6]["content"]["valid"],
        json!(false),
        "{}",
        answers[6]
    );
    let message = &answers[6]["content"]["errors"][0]["message"];
    assert!(
        message
            .as_str()
            .unwrap()
            .contains("`when` is too large: it is 12001 bytes long"),
        "{message}"
    );
    refused(&answers[7], "the plan has 51 steps; at most 50 are allowed");
    refused(&answers[8], "plans of at most 20000 are allowed");
    // Too large to read: an answer as data, placed nowhere in the text it did not read.
    assert_eq!(
        answers[8]["content"]["valid"],
        json!(false),
        "{}",
        answers[8]
    );
    assert_eq!(answers[8]["content"]["errors"][0]["line"], Value::Null);
    refused(&answers[9], "plans of at most 20000 are allowed");
    // After all of that the server is alive and answers.
    assert_eq!(answers[10]["is_error"], json!(false), "{}", answers[10]);

    let run_id = answers[5]["content"]["run_id"].as_str().unwrap().to_owned();
    let answers = serve(
        &lab,
        &[],
        &json!([
            ["plan_approve", {"run_id": run_id, "steps": ["deploy"]}],
            ["plan_approve", {"run_id": run_id, "all": true}],
            ["plan_approve", {"run_id": run_id, "steps": ["deploy"], "reject": true, "reason": "not today"}],
        ]),
    );
    refused(&answers[0], "does not let clients approve");
    refused(&answers[1], "does not let clients approve");
    assert_eq!(answers[2]["is_error"], json!(false), "{}", answers[2]);
    // The operator's own approval still works.
    let (_, status) = lab.json(&["status", &run_id, "--json"]);
    assert_eq!(status["task_status"], json!("WAITING"));
}

#[test]
fn what_the_operator_allows_is_still_bounded() {
    let lab = Lab::new();
    let work = lab.dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let answers = serve(
        &lab,
        &[
            "--allow-tool",
            "exec",
            "--workdir",
            path_str(&work),
            "--max-run-time",
            "1s",
        ],
        &json!([
            // exec's programs do not inherit the server's environment.
            ["plan_run", {"plan": step("exec", json!({"argv": ["printenv", "SECRET_TOKEN"], "check": false}))}],
            // They run in the operator's folder, and cannot leave it.
            ["plan_run", {"plan": step("exec", json!({"argv": ["pwd"]}))}],
            ["plan_run", {"plan": step("exec", json!({"argv": ["pwd"], "cwd": ".."}))}],
            ["plan_run", {"plan": step("exec", json!({"argv": ["pwd"], "cwd": "/"}))}],
            // A call runs a plan for at most --max-run-time; the run stops, resumable.
            ["plan_run", {"plan": step("sleep", json!({"ms": 20_000}))}],
            // http is still refused.
            ["plan_run", {"plan": step("http", json!({"url": "http://127.0.0.1:9/"}))}],
        ]),
    );
    let record = |answer: &Value| answer["content"]["records"][0].clone();
    assert_eq!(
        record(&answers[0])["result"]["stdout"],
        json!(""),
        "{}",
        answers[0]
    );
    assert_eq!(record(&answers[0])["result"]["exit_code"], json!(1));
    let pwd = record(&answers[1])["result"]["stdout"]
        .as_str()
        .unwrap()
        .trim()
        .to_owned();
    assert_eq!(Path::new(&pwd), work.canonicalize().unwrap());
    for answer in &answers[2..4] {
        let error = &record(answer)["error"];
        assert_eq!(error["code"], json!("E_ARGS_INVALID"), "{answer}");
        assert!(
            error["message"]
                .as_str()
                .unwrap()
                .contains("outside the folder"),
            "{answer}"
        );
    }
    assert_eq!(
        answers[4]["content"]["task_status"],
        json!("STOPPED"),
        "{}",
        answers[4]
    );
    refused(&answers[5], "the step calls `http`");
}

/// A client sees, decides and resumes only runs clients started: the operator's run is not
/// `last` for it, a prefix does not find it, a rejection cannot veto its waiting step, and a
/// resume cannot run it (with the operator's `exec`).
#[test]
fn a_client_cannot_see_decide_or_resume_the_operators_runs() {
    let lab = Lab::new();
    let plan = lab.write(
        "op.json",
        &json!({"steps": [
            {"id": "gate", "tool": "echo", "risk": "high"},
            {"id": "x", "tool": "exec", "args": {"argv": ["echo", "operator-output"]}, "depends_on": ["gate"]}]}),
    );
    let (code, report) = lab.json(&["run", path_str(&plan), "--json"]);
    assert_eq!(code, 5, "{report}");
    let run_id = report["run_id"].as_str().unwrap();
    let answers = serve(
        &lab,
        &["--allow-client-approval"],
        &json!([
            ["plan_status", {"run_id": "last"}],
            ["plan_status", {"run_id": run_id}],
            ["plan_status", {"run_id": &run_id[..4]}],
            ["plan_status", {"run_id": ""}],
            ["plan_approve", {"run_id": run_id, "steps": ["gate"], "reject": true}],
            ["plan_approve", {"run_id": "last", "all": true}],
            ["plan_resume", {"run_id": run_id}],
            // The client's own run is `last` for it.
            ["plan_run", {"plan": {"steps": [{"id": "mine", "tool": "echo", "args": {"t": 1}}]}}],
            ["plan_status", {"run_id": "last"}],
        ]),
    );
    for answer in &answers[..7] {
        refused(answer, "among the runs this server's clients started");
    }
    // `last`, a prefix and an empty id name no run of the operator's, and list none.
    for k in [0, 2, 3, 5] {
        let text = answers[k]["text"].as_str().unwrap();
        assert!(!text.contains(run_id), "{text}");
    }
    let mine = answers[7]["content"]["run_id"].as_str().unwrap();
    assert_eq!(
        answers[8]["content"]["run_id"],
        json!(mine),
        "{}",
        answers[8]
    );
    // The operator's run still waits for the operator, undecided.
    let (_, status) = lab.json(&["status", run_id, "--json"]);
    assert_eq!(status["task_status"], json!("WAITING"), "{status}");
    lab.cli()
        .args(["approve", run_id, "gate"])
        .assert()
        .success();
}

/// A run started where clients may not approve stays so: a second server on the same ledger
/// that lets its clients approve cannot approve it (hostile review), though it can reject.
#[test]
fn a_run_started_where_clients_may_not_approve_cannot_be_approved_through_another_server() {
    let lab = Lab::new();
    let plan = json!({"steps": [{"id": "h", "tool": "echo", "risk": "high", "args": {"t": 1}}]});
    let first = serve(&lab, &[], &json!([["plan_run", {"plan": plan}]]));
    assert_eq!(
        first[0]["content"]["task_status"],
        json!("WAITING"),
        "{}",
        first[0]
    );
    let run_id = first[0]["content"]["run_id"].as_str().unwrap();
    let second = serve(
        &lab,
        &["--allow-client-approval"],
        &json!([
            ["plan_approve", {"run_id": run_id, "steps": ["h"]}],
            ["plan_approve", {"run_id": run_id, "all": true}],
            ["plan_approve", {"run_id": run_id, "steps": ["h"], "reject": true}]
        ]),
    );
    refused(&second[0], "was started where clients may not approve");
    refused(&second[1], "was started where clients may not approve");
    assert!(
        second[2]["content"]["decided"] == json!(["h"]),
        "{}",
        second[2]
    );
}

/// A policy is checked against every call a plan can make: for each kind of call, a plan whose
/// only forbidden call is of that kind is refused, with where the plan makes it.
#[test]
fn every_kind_of_call_is_checked_not_only_the_steps_tools() {
    let lab = Lab::new();
    let exec = json!({"tool": "exec", "args": {"argv": ["id"]}});
    let echo = json!({"tool": "echo", "args": {"t": 1}});
    let task = |extra: Value| {
        let mut task = json!({"implement": echo});
        for (k, v) in extra.as_object().unwrap() {
            task[k] = v.clone();
        }
        json!({"workspace": {"repo": "."}, "steps": [{"id": "T1", "task": task}]})
    };
    let cases = [
        (
            json!({"steps": [{"id": "m", "tool": "exec", "expand_on": [1, 2], "args": {"argv": ["id"]}}]}),
            "steps[0]: the map step (one call per item) calls `exec`",
        ),
        (
            json!({"steps": [{"id": "b", "block": {"entry_point": "n", "nodes": {"n": exec}}}]}),
            "steps[0].block.nodes.n: the block node calls `exec`",
        ),
        (
            json!({"steps": [{"id": "b", "block": {"entry_point": "outer", "nodes": {"outer": {"block": {"entry_point": "n", "nodes": {"n": exec}}}}}}]}),
            "steps[0].block.nodes.outer.block.nodes.n: the block node calls `exec`",
        ),
        (
            task(json!({"implement": exec})),
            "steps[0].task.implement: the task's `implement` calls `exec`",
        ),
        (
            task(json!({"feedback": exec})),
            "steps[0].task.feedback: the task's `feedback` calls `exec`",
        ),
        (
            task(json!({"verify": [{"argv": ["sh", "-c", "id > owned"]}]})),
            "steps[0].task.verify[0]: the task's `verify` check calls `exec`",
        ),
        (
            {
                let mut plan = task(json!({}));
                plan["workspace"]["context_update"] = exec.clone();
                plan
            },
            "workspace.context_update: the workspace's `context_update` calls `exec`",
        ),
    ];
    let calls: Vec<Value> = cases
        .iter()
        .flat_map(|(plan, _)| {
            [
                json!(["plan_validate", {"plan": plan}]),
                json!(["plan_run", {"plan": plan}]),
            ]
        })
        .collect();
    let answers = serve(&lab, &["--allow-workspace"], &json!(calls));
    for (k, (_, says)) in cases.iter().enumerate() {
        refused(&answers[2 * k], says);
        refused(&answers[2 * k + 1], says);
    }
    assert!(!lab.dir.path().join("owned").exists());
    // Without --allow-workspace a task plan is refused for its workspace alone.
    let answers = serve(&lab, &[], &json!([["plan_run", {"plan": task(json!({}))}]]));
    refused(
        &answers[0],
        "workspace: task steps and their `workspace` (programs in git worktrees, merges into a branch) are not allowed",
    );
    // With it, the repository must be inside the work folder.
    let mut outside = task(json!({}));
    outside["workspace"]["repo"] = json!("..");
    let answers = serve(
        &lab,
        &["--allow-workspace"],
        &json!([["plan_run", {"plan": outside}]]),
    );
    refused(
        &answers[0],
        "workspace.repo: the repository `..` is outside the work folder",
    );
}

#[test]
fn the_operator_can_give_the_policy_as_a_file() {
    let lab = Lab::new();
    let work = lab.dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let policy = lab.write(
        "policy.json",
        &json!({"allow_tools": ["exec"], "workdir": path_str(&work), "max_steps": 2, "max_run_time": "1m"}),
    );
    let answers = serve(
        &lab,
        &["--policy", path_str(&policy)],
        &json!([
            ["plan_run", {"plan": step("exec", json!({"argv": ["pwd"]}))}],
            ["plan_validate", {"plan": {"steps": [
                {"id": "a", "tool": "echo"}, {"id": "b", "tool": "echo"}, {"id": "c", "tool": "echo"}]}}],
            ["plan_run", {"plan": step("http", json!({"url": "http://127.0.0.1:9/"}))}],
        ]),
    );
    let pwd = answers[0]["content"]["records"][0]["result"]["stdout"]
        .as_str()
        .unwrap()
        .trim()
        .to_owned();
    assert_eq!(
        Path::new(&pwd),
        work.canonicalize().unwrap(),
        "{}",
        answers[0]
    );
    refused(&answers[1], "at most 2 are allowed");
    refused(&answers[2], "the step calls `http`");

    // A policy that does not parse stops the server before it serves.
    let bad = lab.write("bad.json", &json!({"allow_tool": ["exec"]}));
    let stderr = lab.fails(&["mcp", "serve", "--policy", path_str(&bad)], 2);
    assert!(
        stderr.contains("not a valid policy: unknown field `allow_tool`"),
        "{stderr}"
    );
}

/// A client whose model is scripted: each sampling request is answered with the next plan of
/// `answers` and kept. Calls `plan_create_and_execute` with the goal; prints the answer and
/// the sampling requests it got.
const SAMPLING_CLIENT: &str = r#"
import asyncio, json, sys, os
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client

answers = json.loads(sys.argv[3])
requests = []

async def sampling(context, params):
    requests.append({
        "system": params.system_prompt,
        "messages": [{"role": m.role, "text": m.content.text} for m in params.messages],
    })
    text = json.dumps(answers[min(len(requests), len(answers)) - 1])
    return types.CreateMessageResult(role="assistant", content=types.TextContent(type="text", text=text), model="scripted", stop_reason="endTurn")

async def main():
    params = StdioServerParameters(command=sys.argv[1], args=["mcp", "serve"], env=dict(os.environ))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, sampling_callback=sampling) as session:
            await session.initialize()
            result = await session.call_tool("plan_create_and_execute", {"goal": sys.argv[2]})
            answer = {"is_error": bool(result.is_error), "text": result.content[0].text if result.content else "", "content": result.structured_content}
    print(json.dumps({"answer": answer, "requests": requests}))

asyncio.run(main())
"#;

/// Runs [`SAMPLING_CLIENT`] with `goal`, its model answering `answers` in turn (SECRET_TOKEN
/// set in the server's environment): what it printed.
fn sample(lab: &Lab, goal: &str, answers: &Value) -> Value {
    let script = lab.dir.path().join("sampling.py");
    std::fs::write(&script, SAMPLING_CLIENT).unwrap();
    let output = std::process::Command::new(python())
        .current_dir(lab.dir.path())
        .env_remove("PLAN_DB")
        .env_remove("PLAN_LLM_URL")
        .env_remove("OPENAI_BASE_URL")
        .env("SECRET_TOKEN", "tok-123-secret")
        .arg(&script)
        .arg(env!("CARGO_BIN_EXE_plan-cli"))
        .arg(goal)
        .arg(answers.to_string())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

#[test]
fn plan_create_and_execute_asks_the_client_s_own_model_and_checks_its_plan() {
    let lab = Lab::new();
    // The model first reaches for `exec`, which this server does not give clients; then it
    // writes a plan within the policy.
    let answers = json!([
        {"id": "listing", "steps": [{"id": "ls", "tool": "exec", "args": {"argv": ["ls"]}}]},
        {"id": "greeting", "title": "Greet", "steps": [
            {"id": "hi", "title": "Say hi", "tool": "echo", "args": {"text": "hi"}, "result_variable": "said"}
        ]}
    ]);
    let printed = sample(&lab, "greet the user", &answers);
    let answer = &printed["answer"];
    assert_eq!(answer["is_error"], json!(false), "{answer}");
    let content = &answer["content"];
    assert_eq!(content["success"], json!(true), "{content}");
    assert_eq!(content["plan_id"], json!("greeting"));
    assert_eq!(content["steps_completed"], json!(1));
    assert_eq!(content["steps_total"], json!(1));
    assert_eq!(content["results"]["said"]["text"], json!("hi"));
    assert_eq!(content["steps"][0]["tool"], json!("echo"));

    let requests = printed["requests"].as_array().unwrap();
    assert_eq!(requests.len(), 2, "{printed}");
    let system = requests[0]["system"].as_str().unwrap();
    assert!(
        system.contains("- echo: "),
        "the allowed tools are listed: {system}"
    );
    assert!(
        !system.contains("- exec: "),
        "tools the policy refuses are not offered: {system}"
    );
    assert!(
        requests[0]["messages"][0]["text"]
            .as_str()
            .unwrap()
            .contains("greet the user")
    );
    let second = requests[1]["messages"].as_array().unwrap();
    assert_eq!(
        second.len(),
        3,
        "the goal, the wrong answer, what is wrong: {second:?}"
    );
    assert!(
        second[2]["text"]
            .as_str()
            .unwrap()
            .contains("the step calls `exec`"),
        "{second:?}"
    );
    assert!(
        !second[2]["text"].as_str().unwrap().contains("--allow"),
        "feedback to a model never says how to widen the policy: {second:?}"
    );
}

#[test]
fn without_sampling_or_an_endpoint_plan_create_says_why() {
    let lab = Lab::new();
    let answers = serve(&lab, &[], &json!([["plan_create", {"goal": "anything"}]]));
    refused(
        &answers[0],
        "this client offers no sampling, and the server's operator configured no model",
    );
}

fn git_repo(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    common::git(dir, &["init", "-q", "-b", "trunk"]);
    std::fs::write(dir.join("readme"), "x\n").unwrap();
    common::git(dir, &["add", "-A"]);
    common::git(dir, &["commit", "-qm", "start"]);
}

/// With --allow-workspace, the repository git finds must lie in the work folder: a link out
/// of it, or a work folder inside someone's repository (git searches upward), are refused
/// before any branch is made; `workspace.tasks` (where the state file goes) is refused.
#[test]
fn a_clients_workspace_stays_in_the_work_folder() {
    let lab = Lab::new();
    let outside = lab.dir.path().join("outside/repo");
    git_repo(&outside);
    let work = lab.dir.path().join("outside/repo/work");
    std::fs::create_dir_all(&work).unwrap();
    let elsewhere = lab.dir.path().join("elsewhere");
    git_repo(&elsewhere);
    std::os::unix::fs::symlink(&elsewhere, work.join("ext")).unwrap();
    let task = |repo: &str, extra: Value| {
        let mut workspace = json!({"repo": repo, "max_attempts": 1});
        for (k, v) in extra.as_object().unwrap() {
            workspace[k] = v.clone();
        }
        json!({"workspace": workspace, "steps": [{"id": "T9", "task": {"implement": {"tool": "echo", "args": {}}}}]})
    };
    let victim = lab.dir.path().join("victim");
    let answers = serve(
        &lab,
        &["--allow-workspace", "--workdir", path_str(&work)],
        &json!([
            ["plan_run", {"plan": task("ext", json!({}))}],
            ["plan_run", {"plan": task(".", json!({}))}],
            ["plan_run", {"plan": task(".", json!({"tasks": path_str(&victim)}))}],
        ]),
    );
    refused(&answers[0], "is outside");
    refused(&answers[1], "is outside");
    refused(&answers[2], "workspace.tasks");
    for repo in [&outside, &elsewhere] {
        let branches = common::git(repo, &["branch", "--list", "worktree-*"]);
        assert_eq!(branches.trim(), "", "{}", repo.display());
    }
    assert!(!victim.exists());
}

/// The feedback a client's model gets never tells it how to widen the policy (no "add
/// `env:`" for a variable it may not read).
#[test]
fn a_client_s_model_is_not_told_to_list_a_variable_it_may_not_read() {
    let lab = Lab::new();
    let answers = json!([
        {"id": "peek", "steps": [{"id": "a", "tool": "echo", "args": {"t": "${env.SECRET_TOKEN}"}}]},
        {"id": "peek", "steps": [{"id": "a", "tool": "echo", "args": {"t": "hi"}}]}
    ]);
    let printed = sample(&lab, "peek", &answers);
    let requests = printed["requests"].as_array().unwrap();
    assert_eq!(requests.len(), 2, "{printed}");
    let feedback = requests[1]["messages"][2]["text"].as_str().unwrap();
    assert!(feedback.contains("SECRET_TOKEN"), "{feedback}");
    assert!(!feedback.contains("add `env:"), "{feedback}");
    assert!(!printed.to_string().contains("tok-123-secret"));
}

/// Under a policy the worktree folder must lie in the work folder too: a repository that is
/// the work folder, with the default `../.worktrees` beside it, is refused before anything is
/// made; a `worktree_dir` inside it is fine.
#[test]
fn a_clients_worktree_folder_stays_in_the_work_folder() {
    let lab = Lab::new();
    let work = lab.dir.path().join("work");
    git_repo(&work);
    let plan = |worktree_dir: Option<&str>| {
        let mut workspace = json!({"repo": ".", "max_attempts": 1});
        if let Some(dir) = worktree_dir {
            workspace["worktree_dir"] = json!(dir);
        }
        json!({"workspace": workspace, "steps": [{"id": "T1", "task": {"implement": {"tool": "echo", "args": {}}}}]})
    };
    let answers = serve(
        &lab,
        &["--allow-workspace", "--workdir", path_str(&work)],
        &json!([
            ["plan_run", {"plan": plan(None)}],
            ["plan_run", {"plan": plan(Some("../elsewhere"))}],
            ["plan_run", {"plan": plan(Some("wt"))}],
        ]),
    );
    refused(&answers[0], "worktree folder");
    refused(&answers[1], "worktree folder");
    assert!(!lab.dir.path().join(".worktrees").exists());
    assert!(!lab.dir.path().join("elsewhere").exists());
    // Inside, the task runs (and fails: echo changes nothing), in the work folder's `wt`.
    assert_eq!(answers[2]["is_error"], json!(false), "{}", answers[2]);
}

/// Goes on with one run from several `plan_resume` calls at once (hostile review: each ran
/// the run's steps again, since the run's owner, this server, is alive).
const RESUME_AT_ONCE: &str = r#"
import asyncio, json, sys, os
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

async def main():
    params = StdioServerParameters(command=sys.argv[1], args=["mcp", "serve", "--allow-client-approval"], env=dict(os.environ))
    plan = json.loads(sys.argv[2])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            started = await session.call_tool("plan_run", {"plan": plan})
            run = started.structured_content["run_id"]
            await session.call_tool("plan_approve", {"run_id": run, "steps": ["gate"]})
            answers = await asyncio.gather(*[session.call_tool("plan_resume", {"run_id": run}) for _ in range(3)])
            status = await session.call_tool("plan_status", {"run_id": run})
    print(json.dumps({
        "answers": [{"is_error": bool(a.is_error), "text": a.content[0].text if a.content else ""} for a in answers],
        "status": status.structured_content,
    }))

asyncio.run(main())
"#;

#[test]
fn a_run_goes_on_once_however_many_resumes_a_client_sends_at_once() {
    let lab = Lab::new();
    let script = lab.dir.path().join("resume.py");
    std::fs::write(&script, RESUME_AT_ONCE).unwrap();
    let plan = json!({"steps": [
        {"id": "gate", "tool": "echo", "args": {}, "risk": "high"},
        {"id": "slow", "tool": "sleep", "args": {"ms": 1500}, "depends_on": ["gate"]}
    ]});
    let output = std::process::Command::new(python())
        .current_dir(lab.dir.path())
        .env_remove("PLAN_DB")
        .arg(&script)
        .arg(env!("CARGO_BIN_EXE_plan-cli"))
        .arg(plan.to_string())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let result: Value = serde_json::from_slice(&output.stdout).unwrap();
    let answers = result["answers"].as_array().unwrap();
    let went_on: Vec<&Value> = answers
        .iter()
        .filter(|a| a["is_error"] == json!(false))
        .collect();
    assert_eq!(went_on.len(), 1, "{answers:?}");
    for answer in answers.iter().filter(|a| a["is_error"] == json!(true)) {
        refused(answer, "is already going on in this server");
    }
    let status = &result["status"];
    assert_eq!(status["task_status"], "COMPLETED", "{status}");
    let slow = status["records"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["step_id"] == "slow")
        .unwrap();
    assert_eq!(slow["attempts"], 1, "called once: {slow}");
}

/// Hostile review: with the default work folder (`.`, the server's folder) every client
/// workspace failed ("the workspace repository  is not a folder"): the run kept `.` as its
/// folder, and a plan's `repo: .` read from it named no folder.
#[test]
fn the_default_work_folder_holds_a_clients_workspace() {
    let lab = Lab::new();
    git_repo(lab.dir.path());
    let plan = json!({"workspace": {"repo": ".", "max_attempts": 1, "worktree_dir": "wt"},
        "steps": [{"id": "T1", "task": {"implement": {"tool": "echo", "args": {}}}}]});
    let answers = serve(
        &lab,
        &["--allow-workspace"],
        &json!([["plan_run", {"plan": plan}]]),
    );
    // The task runs (and fails: echo changes nothing), in the work folder's `wt`.
    assert_eq!(answers[0]["is_error"], json!(false), "{}", answers[0]);
    assert!(lab.dir.path().join("wt").exists());
}

/// A run under a policy keeps its approvals on when resumed with `--approvals off`, and the
/// operator is told so before it goes on, rather than finding the run waiting again.
#[test]
fn resuming_a_policy_run_with_approvals_off_says_they_stay_on() {
    let lab = Lab::new();
    let policy = lab.write("policy.json", &json!({}));
    let plan = lab.write(
        "gated.json",
        &json!({"steps": [{"id": "h", "tool": "echo", "risk": "high", "args": {"t": 1}}]}),
    );
    let (code, report) = lab.json(&[
        "run",
        path_str(&plan),
        "--policy",
        path_str(&policy),
        "--json",
    ]);
    assert_eq!(code, 5, "{report}");
    let run_id = report["run_id"].as_str().unwrap();
    let output = lab
        .cli()
        .args(["resume", run_id, "--approvals", "off", "--json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(
            "--approvals off is not followed: the run was started under a policy that keeps them on"
        ),
        "{stderr}"
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["task_status"], json!("WAITING"), "{report}");
}

#[test]
fn plan_validate_answers_what_validate_json_prints_for_the_same_plan() {
    let lab = Lab::new();
    // A warning (a variable nobody gives) and a call that waits for approval.
    let plan = json!({"steps": [
        {"id": "a", "tool": "echo", "args": {"x": "${nothing}"}},
        {"id": "d", "tool": "echo", "risk": "high"}
    ]});
    let file = lab.write("p.json", &plan);
    let (code, printed) = lab.json(&["validate", path_str(&file), "--json"]);
    assert_eq!(code, 0);
    let answers = serve(&lab, &[], &json!([["plan_validate", {"plan": plan}]]));
    let mut answered = answers[0]["content"].clone();
    assert_eq!(answered["warnings"][0]["code"], "plan::undefined_variable");
    // The same object, but for the plan's name and the CLI's own words on how to give a value.
    answered["plan_id"] = printed["plan_id"].clone();
    for warning in answered["warnings"].as_array_mut().unwrap() {
        warning["help"] = Value::Null;
    }
    let mut printed = printed;
    for warning in printed["warnings"].as_array_mut().unwrap() {
        warning["help"] = Value::Null;
    }
    assert_eq!(answered, printed);
    // An invalid plan too: the same errors, as data, through both.
    let bad = json!({"steps": [{"id": "a", "tool": "nope"}, {"id": "b", "tool": "echo", "depends_on": ["zz"]}]});
    let file = lab.write("bad.json", &bad);
    let (code, printed) = lab.json(&["validate", path_str(&file), "--json"]);
    assert_eq!(code, 2);
    let answers = serve(&lab, &[], &json!([["plan_validate", {"plan": bad}]]));
    assert_eq!(answers[0]["is_error"], json!(false), "{}", answers[0]);
    let mut answered = answers[0]["content"].clone();
    assert_eq!(answered["valid"], json!(false));
    assert_eq!(
        answered["errors"].as_array().unwrap().len(),
        1,
        "{answered}"
    );
    assert_eq!(
        answered["warnings"].as_array().unwrap().len(),
        1,
        "{answered}"
    );
    let mut printed = printed;
    for report in [&mut answered, &mut printed] {
        for key in ["errors", "warnings"] {
            for issue in report[key].as_array_mut().unwrap() {
                issue["help"] = Value::Null;
            }
        }
    }
    assert_eq!(answered, printed);
}

/// A plan's declared tools (`tools:`) carry their author's word for their risk and reach the
/// operator's workers: a client's plan may not declare any, even a low-risk one; and no plan
/// redefines a tool plan-cli has.
#[test]
fn a_client_cannot_declare_tools_and_no_plan_redefines_one() {
    let lab = Lab::new();
    let declaring = json!({
        "tools": [{"name": "wipe", "queue": "ops", "risk": "low"}],
        "steps": [{"id": "a", "tool": "wipe", "args": {}}]
    });
    let answers = serve(
        &lab,
        &[],
        &json!([["plan_run", {"plan": declaring}], ["plan_validate", {"plan": declaring}]]),
    );
    refused(
        &answers[0],
        "tools[0]: declaring tools (`wipe` on queue `ops`) is the operator's",
    );
    assert!(
        answers[1]["text"]
            .as_str()
            .unwrap()
            .contains("declaring tools"),
        "{}",
        answers[1]
    );
    let redefining = json!({"tools": [{"name": "echo", "queue": "ops"}], "steps": [{"id": "a", "tool": "echo"}]});
    let path = lab.write("redefine.json", &redefining);
    let said = lab.fails(&["validate", common::path_str(&path)], 2);
    assert!(
        said.contains(
            "the plan declares the tool `echo`, which plan-cli already has (it is built in)"
        ),
        "{said}"
    );
    // A client hears the same reason, not something of the server's MCP configuration.
    let answers = serve(
        &lab,
        &[],
        &json!([["plan_run", {"plan": redefining}], ["plan_validate", {"plan": redefining}]]),
    );
    for answer in &answers {
        let text = answer.to_string();
        assert!(
            text.contains(
                "the plan declares the tool `echo`, which plan-cli already has (it is built in)"
            ),
            "{answer}"
        );
        assert!(!text.contains("MCP configuration"), "{answer}");
    }
}

/// A client that may approve can answer a waiting call as `approve --input` does; a client
/// that may not approve cannot answer either.
#[test]
fn a_client_that_may_approve_answers_a_waiting_call_with_input() {
    let lab = Lab::new();
    let plan =
        json!({"steps": [{"id": "h", "tool": "echo", "risk": "high", "args": {"to": "dev"}}]});
    let first = serve(
        &lab,
        &["--allow-client-approval"],
        &json!([["plan_run", {"plan": plan}]]),
    );
    let run_id = first[0]["content"]["run_id"].as_str().unwrap();
    let answer = json!({"run_id": run_id, "steps": ["h"], "input": {"to": "prod"}});
    let denied = serve(&lab, &[], &json!([["plan_approve", answer]]));
    refused(&denied[0], "approve");
    let answers = serve(
        &lab,
        &["--allow-client-approval"],
        &json!([
            ["plan_approve", {"run_id": run_id, "steps": ["h"], "input": [1]}],
            ["plan_approve", answer],
            ["plan_resume", {"run_id": run_id}]
        ]),
    );
    refused(&answers[0], "must be a JSON object of arguments");
    assert_eq!(
        answers[1]["content"]["decided"],
        json!(["h"]),
        "{}",
        answers[1]
    );
    let resumed = &answers[2]["content"];
    assert_eq!(resumed["task_status"], json!("COMPLETED"), "{resumed}");
    assert_eq!(
        resumed["records"][0]["result"],
        json!({"to": "prod"}),
        "{resumed}"
    );
}
