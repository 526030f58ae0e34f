//! `plan-cli ui`: the dashboard's server, against the real binary over real HTTP. Its guards
//! (the token as a bearer header on every API call, never a cookie; the Host header; no
//! caching, no referrer) and its JSON and SSE API, which must say exactly what `runs --json`,
//! `status RUN --json` and `events RUN` say.

#![expect(clippy::unwrap_used, reason = "test helpers fail loudly on purpose")]
mod common;

use std::time::Duration;

use common::Lab;
use common::ui::{
    TOKEN, Ui, bearer, gated_plan, post, request, serve, start, status_until, waiting_run,
};
use serde_json::{Value, json};

/// A lab with two finished runs (one failed), to read.
fn lab_with_runs() -> Lab {
    let lab = Lab::new();
    let ok = lab.write(
        "ok.json",
        &json!({"id": "ok", "steps": [{"id": "a", "tool": "echo", "args": {"text": "hello"}}]}),
    );
    let bad = lab.write(
        "bad.json",
        &json!({"id": "bad", "steps": [{"id": "b", "tool": "fail", "args": {"message": "no"}}]}),
    );
    lab.json(&["run", common::path_str(&ok), "--json"]);
    lab.json(&["run", common::path_str(&bad), "--json"]);
    lab
}

#[test]
fn every_api_call_needs_the_token_as_a_bearer_header_and_the_servers_own_host() {
    let lab = lab_with_runs();
    let (ui, url) = serve(&lab);
    assert!(url.ends_with(&format!("/?token={TOKEN}")), "{url}");
    let port = ui.port;

    let none = request(port, "GET", "/api/runs", &[]);
    assert_eq!(none.status, 401);
    assert_eq!(none.header("www-authenticate"), Some("Bearer"));
    assert!(none.json()["error"].as_str().unwrap().contains("Bearer"));
    let wrong = request(
        port,
        "GET",
        "/api/runs",
        &[("Authorization", "Bearer nope")],
    );
    assert_eq!(wrong.status, 401);
    // A cookie is never read: a page of another site cannot act through the browser.
    let cookie = format!("token={TOKEN}; plan-ui-token={TOKEN}");
    let cookie_only = request(port, "GET", "/api/runs", &[("Cookie", &cookie)]);
    assert_eq!(cookie_only.status, 401);
    let cookie_post = request(
        port,
        "POST",
        "/api/runs",
        &[("Cookie", &cookie), ("Origin", "http://evil.example")],
    );
    assert_eq!(cookie_post.status, 401, "{}", cookie_post.body);
    // DNS rebinding: a name that resolves here but is not this server's.
    let (name, value) = bearer();
    let foreign = format!("evil.example:{port}");
    let rebound = request(
        port,
        "GET",
        "/api/runs",
        &[(name, &value), ("Host", &foreign)],
    );
    assert_eq!(rebound.status, 403);
    let page = request(port, "GET", "/", &[("Host", &foreign)]);
    assert_eq!(page.status, 403, "pages too");
    let localhost = format!("localhost:{port}");
    let by_name = request(
        port,
        "GET",
        "/api/runs",
        &[(name, &value), ("Host", &localhost)],
    );
    assert_eq!(by_name.status, 200);

    // The page needs no token (it holds no data); nothing is cached, no referrer is sent.
    let page = request(port, "GET", "/", &[]);
    assert_eq!(page.status, 200);
    assert!(page.body.contains("<title>plan-cli runs</title>"));
    assert_eq!(page.header("cache-control"), Some("no-store"));
    assert_eq!(page.header("referrer-policy"), Some("no-referrer"));
    // Only the server's own scripts run: no inline one, whatever a plan's text holds.
    let policy = page.header("content-security-policy").unwrap_or("");
    assert!(policy.contains("script-src 'self';"), "{policy}");
    assert!(
        !page.body.contains("http://") && !page.body.contains("https://"),
        "nothing is fetched from elsewhere"
    );
}

#[test]
fn the_api_says_what_the_cli_says() {
    let lab = lab_with_runs();
    let (ui, _) = serve(&lab);
    let port = ui.port;
    let (name, value) = bearer();
    let auth = [(name, value.as_str())];

    let (_, runs) = lab.json(&["runs", "--json"]);
    let answer = request(port, "GET", "/api/runs", &auth);
    assert_eq!(answer.status, 200);
    assert_eq!(answer.json(), runs);
    assert_eq!(runs.as_array().unwrap().len(), 2);
    let failed = request(port, "GET", "/api/runs?status=failed", &auth).json();
    assert_eq!(failed.as_array().unwrap().len(), 1);
    assert_eq!(failed[0]["plan_id"], "bad");
    // Each run says how its steps ended, as of its end.
    assert_eq!(
        failed[0]["counts"],
        json!({"ok": 0, "failed": 1, "skipped": 0})
    );
    let by_plan = request(port, "GET", "/api/runs?plan=ok", &auth).json();
    assert_eq!(by_plan[0]["plan_id"], "ok");
    let bad_status = request(port, "GET", "/api/runs?status=nope", &auth);
    assert_eq!(bad_status.status, 400);
    assert!(
        bad_status.json()["error"]
            .as_str()
            .unwrap()
            .contains("COMPLETED")
    );

    for run in runs.as_array().unwrap() {
        let id = run["run_id"].as_str().unwrap();
        let (_, status) = lab.json(&["status", id, "--json"]);
        let answer = request(port, "GET", &format!("/api/runs/{id}"), &auth);
        assert_eq!(answer.status, 200);
        assert_eq!(answer.json(), status);

        let events = lab.cli().args(["events", id]).output().unwrap();
        let expected: Vec<String> = String::from_utf8_lossy(&events.stdout)
            .lines()
            .map(str::to_owned)
            .collect();
        let answer = request(port, "GET", &format!("/api/runs/{id}/events"), &auth);
        assert_eq!(answer.status, 200);
        assert!(
            answer
                .header("content-type")
                .is_some_and(|t| t.starts_with("text/event-stream"))
        );
        let got: Vec<String> = (answer.body.lines())
            .filter_map(|line| line.strip_prefix("data: "))
            .map(str::to_owned)
            .collect();
        assert_eq!(
            got, expected,
            "one event per ledger event, as `events` prints"
        );
        assert!(!expected.is_empty());
    }
    let missing = request(port, "GET", "/api/runs/01NOSUCHRUN", &auth);
    assert_eq!(missing.status, 404, "{}", missing.body);
}

/// The events of a live run come as they are committed, and the stream ends with the run.
#[test]
fn a_live_runs_events_follow_it_to_its_end() {
    let lab = Lab::new();
    let (ui, _) = serve(&lab);
    let plan = lab.write(
        "slow.json",
        &json!({"id": "slow", "steps": [
            {"id": "wait", "tool": "sleep", "args": {"ms": 1500}},
            {"id": "after", "tool": "echo", "args": {"text": "done"}, "depends_on": ["wait"]}
        ]}),
    );
    let mut run = lab.spawn(&["run", common::path_str(&plan)]);
    let id = loop {
        let (_, runs) = lab.json(&["runs", "--json"]);
        if let Some(id) = runs[0]["run_id"].as_str() {
            break id.to_owned();
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let (name, value) = bearer();
    let answer = request(
        ui.port,
        "GET",
        &format!("/api/runs/{id}/events"),
        &[(name, &value)],
    );
    assert!(run.wait().unwrap().success());
    let got: Vec<Value> = (answer.body.lines())
        .filter_map(|line| line.strip_prefix("data: "))
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let (_, status) = lab.json(&["status", &id, "--json"]);
    assert_eq!(status["task_status"], "COMPLETED");
    let after = lab.cli().args(["events", &id]).output().unwrap();
    assert_eq!(
        got.len(),
        String::from_utf8_lossy(&after.stdout).lines().count(),
        "every event, the last ones included: {}",
        answer.body
    );
    assert!(
        got.iter().any(|e| e["step_id"] == "after"),
        "{}",
        answer.body
    );
}

/// A run's graph: every step one node (a map of many items one node with its progress), each
/// with the status the ledger gives it, laid out left to right in dependency order; and the
/// run's page, which draws it from the API.
#[test]
fn a_runs_graph_has_each_step_once_with_its_status() {
    let lab = Lab::new();
    let items: Vec<u32> = (0..2000).collect();
    let plan = lab.write(
        "graph.json",
        &json!({"id": "graph", "steps": [
            {"id": "many", "tool": "echo", "args": {"text": "item ${each}"}, "expand_on": items},
            {"id": "bad", "tool": "fail", "args": {"message": "no"}, "depends_on": ["many"]},
            {"id": "after-bad", "tool": "echo", "args": {"text": "x"}, "depends_on": ["bad"]},
            {"id": "fine", "tool": "echo", "args": {"text": "y"}, "depends_on": ["many"]}
        ]}),
    );
    let (_, report) = lab.json(&["run", common::path_str(&plan), "--json"]);
    let id = report["run_id"].as_str().unwrap().to_owned();
    let (ui, _) = serve(&lab);
    let (name, value) = bearer();
    let answer = request(
        ui.port,
        "GET",
        &format!("/api/runs/{id}/graph"),
        &[(name, &value)],
    );
    assert_eq!(answer.status, 200, "{}", answer.body);
    let graph = answer.json();
    let nodes = graph["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 4, "a map of 2,000 items is one node");
    let node = |id: &str| nodes.iter().find(|n| n["id"] == id).unwrap().clone();
    assert_eq!(node("many")["status"], "ok");
    assert_eq!(node("many")["items"], json!({"done": 2000, "ok": 2000}));
    assert_eq!(node("bad")["status"], "failed");
    // As `status` says of it: skipped, its dependency having failed.
    assert_eq!(node("after-bad")["status"], "skipped");
    assert_eq!(node("fine")["status"], "ok");
    // Left to right in dependency order.
    assert!(node("many")["x"].as_f64() < node("bad")["x"].as_f64());
    assert!(node("bad")["x"].as_f64() < node("after-bad")["x"].as_f64());
    assert_eq!(node("bad")["x"], node("fine")["x"]);
    assert_ne!(
        node("bad")["y"],
        node("fine")["y"],
        "no two nodes in one place"
    );
    assert_eq!(graph["edges"].as_array().unwrap().len(), 3);
    let unauthorised = request(ui.port, "GET", &format!("/api/runs/{id}/graph"), &[]);
    assert_eq!(unauthorised.status, 401);
    // The page holds no data: it reads the API with the token.
    let page = request(ui.port, "GET", &format!("/runs/{id}"), &[]);
    assert_eq!(page.status, 200);
    assert!(
        page.body
            .contains("<script src=\"/assets/run.js\"></script>")
    );
    assert!(!page.body.contains(&id), "no run data in the page itself");
    // Its script, served as a file of the binary's, draws the graph from the API.
    let script = request(ui.port, "GET", "/assets/run.js", &[]);
    assert_eq!(script.header("content-type"), Some("text/javascript"));
    assert!(script.body.contains("/graph"), "{}", script.body);
    assert_eq!(request(ui.port, "GET", "/assets/nope.js", &[]).status, 404);
}

/// Approve, reject and cancel through the API do what `approve`, `reject` and `cancel` do:
/// the decision is in the ledger, and `resume` goes on from it; a cookie alone changes
/// nothing, and a step that waits for nothing is refused.
#[test]
fn waiting_calls_are_decided_through_the_api_as_the_cli_decides_them() {
    let lab = Lab::new();
    let plan = gated_plan(&lab, "out", None);
    let waiting = |lab: &Lab| waiting_run(lab, &plan);
    let (ui, _) = serve(&lab);
    let (name, value) = bearer();
    let auth = [(name, value.as_str())];

    let approved = waiting(&lab);
    let cookie = format!("token={TOKEN}");
    let path = format!("/api/runs/{approved}/approve");
    let by_cookie = post(
        ui.port,
        &path,
        &json!({"steps": ["deploy"]}),
        &[("Cookie", &cookie)],
    );
    assert_eq!(by_cookie.status, 401, "{}", by_cookie.body);
    let not_gated = post(ui.port, &path, &json!({"steps": ["build"]}), &auth);
    assert_eq!(not_gated.status, 400, "{}", not_gated.body);
    assert!(
        not_gated.body.contains("not a high-risk step"),
        "{}",
        not_gated.body
    );
    let answer = post(ui.port, &path, &json!({"steps": ["deploy"]}), &auth);
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.json()["decided"], json!(["deploy"]));
    let (code, report) = lab.json(&["resume", &approved, "--json"]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["task_status"], "COMPLETED");

    // An answer given with the approval is overlaid on the call's arguments.
    let answered = waiting(&lab);
    let path = format!("/api/runs/{answered}/approve");
    let answer = post(
        ui.port,
        &path,
        &json!({"steps": ["deploy"], "input": {"text": "answered"}}),
        &auth,
    );
    assert_eq!(answer.status, 200, "{}", answer.body);
    let (code, report) = lab.json(&["resume", &answered, "--json"]);
    assert_eq!(code, 0, "{report}");
    let deploy = &report["records"][1];
    assert_eq!(deploy["step_id"], "deploy");
    assert_eq!(deploy["result"], json!({"text": "answered"}), "{report}");

    let rejected = waiting(&lab);
    let path = format!("/api/runs/{rejected}/reject");
    let answer = post(
        ui.port,
        &path,
        &json!({"steps": ["deploy"], "reason": "not today"}),
        &auth,
    );
    assert_eq!(answer.status, 200, "{}", answer.body);
    let (_, report) = lab.json(&["resume", &rejected, "--json"]);
    assert_eq!(report["task_status"], "FAILED", "{report}");
    assert!(report.to_string().contains("not today"), "{report}");

    let cancelled = waiting(&lab);
    let answer = post(
        ui.port,
        &format!("/api/runs/{cancelled}/cancel"),
        &json!({}),
        &auth,
    );
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.json()["cancelled"], "was_waiting");
    let (_, status) = lab.json(&["status", &cancelled, "--json"]);
    assert_eq!(status["task_status"], "STOPPED", "{status}");
    let twice = post(
        ui.port,
        &format!("/api/runs/{cancelled}/cancel"),
        &json!({}),
        &auth,
    );
    assert_eq!(
        twice.json()["cancelled"],
        "already_stopped",
        "{}",
        twice.body
    );
}

/// What the binary prints on stdout; it must succeed.
fn text(lab: &Lab, args: &[&str]) -> String {
    let output = lab.command().args(args).output().unwrap();
    assert!(output.status.success(), "{args:?}: {output:?}");
    String::from_utf8(output.stdout).unwrap()
}

/// A report without what differs between two runs of one plan (ids, times).
fn records_of(report: &Value) -> Value {
    let mut records = report["records"].clone();
    for record in records.as_array_mut().unwrap() {
        let record = record.as_object_mut().unwrap();
        record.remove("duration_ms");
        if record["step_id"] == "__meta__" {
            record.remove("reason");
        }
    }
    records
}

/// Resume, retry and cancel through the API do what `resume`, `retry` and `cancel` do: the
/// run goes on in the dashboard's process, in the background, and ends with the records the
/// CLI's own resume gives; a run the dashboard goes on with is cancelled there, and the
/// dashboard lives on.
#[test]
fn runs_go_on_through_the_api_as_the_cli_goes_on_with_them() {
    let lab = Lab::new();
    let plan = gated_plan(&lab, "out", Some("after"));
    let waiting = |lab: &Lab| {
        let run = waiting_run(lab, &plan);
        text(lab, &["approve", &run, "deploy"]);
        run
    };
    let (ui, _) = serve(&lab);
    let (name, value) = bearer();
    let auth = [(name, value.as_str())];

    // The CLI's resume, and the dashboard's: the same records.
    let by_cli = waiting(&lab);
    let (code, cli_report) = lab.json(&["resume", &by_cli, "--json"]);
    assert_eq!(code, 0, "{cli_report}");
    let by_ui = waiting(&lab);
    let path = format!("/api/runs/{by_ui}/resume");
    let by_cookie = post(
        ui.port,
        &path,
        &json!({}),
        &[("Cookie", &format!("token={TOKEN}"))],
    );
    assert_eq!(by_cookie.status, 401, "{}", by_cookie.body);
    let answer = post(ui.port, &path, &json!({}), &auth);
    assert_eq!(answer.status, 202, "{}", answer.body);
    assert_eq!(answer.json(), json!({"run_id": by_ui, "going_on": true}));
    let report = status_until(&lab, &by_ui, |s| s["task_status"] == "COMPLETED");
    assert_eq!(records_of(&report), records_of(&cli_report));
    // Finished: nothing to go on with, its status said.
    let again = post(ui.port, &path, &json!({}), &auth);
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(again.json()["going_on"], false);
    assert_eq!(again.json()["task_status"], "COMPLETED");

    // Retry from a step: it and what follows it run again (their events twice), as
    // `plan-cli retry` runs them.
    let path = format!("/api/runs/{by_ui}/retry");
    let unknown = post(ui.port, &path, &json!({"steps": ["deplo"]}), &auth);
    assert_eq!(unknown.status, 400, "{}", unknown.body);
    assert!(
        unknown.body.contains("did you mean `deploy`"),
        "{}",
        unknown.body
    );
    let answer = post(ui.port, &path, &json!({"steps": ["deploy"]}), &auth);
    assert_eq!(answer.status, 202, "{}", answer.body);
    status_until(&lab, &by_ui, |s| {
        s["task_status"] != "RUNNING" && s["task_status"] != "INTERRUPTED"
    });
    let (_, retried) = lab.json(&["retry", &by_cli, "deploy", "--json"]);
    let report = status_until(&lab, &by_ui, |s| s["task_status"] == retried["task_status"]);
    assert_eq!(records_of(&report), records_of(&retried));
    let events = text(&lab, &["events", &by_ui]);
    let ran = |step: &str| {
        events
            .lines()
            .filter(|line| {
                line.contains("\"step.executed\"")
                    && line.contains(&format!("\"step_id\":\"{step}\""))
            })
            .count()
    };
    assert_eq!(
        (ran("build"), ran("deploy"), ran("after")),
        (1, 2, 2),
        "{events}"
    );

    // A run going on in the dashboard is stopped there, resumably; the dashboard goes on.
    let slow = lab.write(
        "slow.json",
        &json!({"id": "slow", "steps": [
            {"id": "gate", "tool": "echo", "risk": "high", "args": {"text": "go"}},
            {"id": "wait", "tool": "sleep", "args": {"ms": 60000}, "depends_on": ["gate"]}
        ]}),
    );
    let (_, report) = lab.json(&["run", common::path_str(&slow), "--json"]);
    let run = report["run_id"].as_str().unwrap().to_owned();
    text(&lab, &["approve", &run, "gate"]);
    let answer = post(
        ui.port,
        &format!("/api/runs/{run}/resume"),
        &json!({}),
        &auth,
    );
    assert_eq!(answer.status, 202, "{}", answer.body);
    status_until(&lab, &run, |s| s["task_status"] == "RUNNING");
    let twice = post(
        ui.port,
        &format!("/api/runs/{run}/resume"),
        &json!({}),
        &auth,
    );
    assert_eq!(twice.status, 409, "{}", twice.body);
    let answer = post(
        ui.port,
        &format!("/api/runs/{run}/cancel"),
        &json!({}),
        &auth,
    );
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.json()["cancelled"], "stopped");
    let (_, status) = lab.json(&["status", &run, "--json"]);
    assert_eq!(status["task_status"], "STOPPED", "{status}");
    assert_eq!(request(ui.port, "GET", "/api/runs", &auth).status, 200);

    // `plan-cli cancel` from a terminal signals the dashboard, which owns the run: it stops
    // that run (resumably) and goes on serving.
    let mut ui = ui;
    let resume = |ui: &common::ui::Ui| {
        let answer = post(
            ui.port,
            &format!("/api/runs/{run}/resume"),
            &json!({}),
            &auth,
        );
        assert_eq!(answer.status, 202, "{}", answer.body);
        status_until(&lab, &run, |s| s["task_status"] == "RUNNING");
    };
    resume(&ui);
    let said = text(&lab, &["cancel", &run]);
    assert!(said.contains(&format!("run {run} stopped")), "{said}");
    assert!(ui.ends_within(1).is_none(), "the dashboard goes on serving");
    assert_eq!(request(ui.port, "GET", "/api/runs", &auth).status, 200);
    // A SIGTERM of its own (no run asked to stop) stops its runs, then it ends.
    resume(&ui);
    ui.signal("TERM");
    let ended = ui.ends_within(60).expect("the dashboard ends on SIGTERM");
    assert!(ended.success(), "{ended:?}");
    let (_, status) = lab.json(&["status", &run, "--json"]);
    assert_eq!(status["task_status"], "STOPPED", "{status}");
}

/// Opening the browser never puts the token in a process's arguments (other users can list
/// them): the opener gets a page only this user can read. A token given by hand must be long
/// and plain; an address other than 127.0.0.1 is the one printed.
#[test]
fn the_token_stays_out_of_sight_and_weak_tokens_are_refused() {
    use std::os::unix::fs::PermissionsExt;
    let lab = Lab::new();
    let bin = lab.dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let said = lab.dir.path().join("opened.txt");
    std::fs::write(
        bin.join("xdg-open"),
        format!("#!/bin/sh\necho \"$@\" > '{}'\n", said.display()),
    )
    .unwrap();
    std::fs::set_permissions(bin.join("xdg-open"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let (ui, _) = start(&lab, &[], &[("PATH", &path)]);
    let mut opened = String::new();
    for _ in 0..100 {
        opened = std::fs::read_to_string(&said).unwrap_or_default();
        if !opened.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(ui);
    assert!(!opened.is_empty(), "the opener was called");
    assert!(
        !opened.contains(TOKEN),
        "the token is not in its arguments: {opened}"
    );
    let page = std::path::Path::new(opened.trim());
    let mode = std::fs::metadata(page).unwrap().permissions().mode();
    assert_eq!(mode & 0o077, 0, "only its user reads the page: {mode:o}");
    assert!(
        std::fs::read_to_string(page)
            .unwrap()
            .contains(&format!("?token={TOKEN}"))
    );

    for weak in ["short", "has spaces in it, a+b&c"] {
        let output = lab
            .command()
            .args(["ui", "--port", "0", "--no-open"])
            .env("PLAN_UI_TOKEN", weak)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{weak}");
        assert!(String::from_utf8_lossy(&output.stderr).contains("at least 16 characters"));
    }

    let (_ui, line) = start(&lab, &["--no-open", "--host", "127.0.0.2"], &[]);
    assert!(line.starts_with("dashboard: http://127.0.0.2:"), "{line}");
}

// --- In a real browser: headless Chromium over WebDriver.

mod webdriver;
use webdriver::Browser;

/// Where a test's screenshot goes: the docs' own pictures with UPDATE_SCREENSHOTS=1 (so that
/// docs/ui.md shows real runs), else the target folder.
fn screenshot(browser: &Browser, name: &str) {
    let dir = if std::env::var_os("UPDATE_SCREENSHOTS").is_some() {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/ui")
    } else {
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("screenshots")
    };
    browser.screenshot(&dir.join(format!("{name}.png")));
}

/// Each step's `data-status` on the page, by step id.
const STATUSES: &str = "return Object.fromEntries([...document.querySelectorAll('g.step')].map(g => [g.dataset.stepId, g.dataset.status]));";

/// The page's run status line.
const STATUS: &str = "return document.getElementById('status').textContent;";

/// The dashboard's URL for a run's page (the token in it, as the printed URL has it).
fn page(ui: &Ui, run: &str) -> String {
    format!("http://127.0.0.1:{}/runs/{run}?token={TOKEN}", ui.port)
}

/// A finished run's page: each step's status (as the API says it, in text too), a map step as
/// one node with its items, the timeline with its critical path, and a step's panel (opened by
/// the keyboard) with its output.
#[test]
fn a_finished_runs_page_shows_each_steps_status_its_timeline_and_its_output() {
    let lab = Lab::new();
    let plan = lab.write(
        "mixed.json",
        &json!({"id": "mixed", "steps": [
            // Slow enough that `fetch` → `check` is the critical path whatever the machine's
            // load (the map's items are echoes; CI once saw them outlast a quick `fetch`).
            {"id": "fetch", "tool": "exec", "args": {"argv": ["sh", "-c", "sleep 0.3; echo fetched 3 rows"]}},
            {"id": "rows", "tool": "echo", "expand_on": [1, 2, 3], "args": {"text": "$each"}},
            {"id": "check", "tool": "fail", "args": {"message": "schema drift"}, "depends_on": ["fetch"]},
            {"id": "publish", "tool": "echo", "args": {"text": "out"}, "depends_on": ["check", "rows"]}
        ]}),
    );
    let (_, report) = lab.json(&["run", common::path_str(&plan), "--json"]);
    let run = report["run_id"].as_str().unwrap().to_owned();
    let (ui, _) = serve(&lab);
    let (name, value) = bearer();
    let auth = [(name, value.as_str())];
    let graph = request(ui.port, "GET", &format!("/api/runs/{run}/graph"), &auth).json();
    let browser = Browser::start(1280, 1000);

    browser.open(&format!("http://127.0.0.1:{}/?token={TOKEN}", ui.port));
    browser.wait_for(
        "the runs list",
        20,
        "return document.querySelectorAll('tbody tr').length;",
        |n| n == &json!(1),
    );
    // How its steps ended, in words: fetch and the map ok, check failed, publish skipped.
    let steps = browser.script(
        "return document.querySelector('tbody td.steps').textContent;",
        &[],
    );
    assert_eq!(steps, "2 ok · 1 failed · 1 skipped");
    screenshot(&browser, "runs");

    browser.open(&page(&ui, &run));
    let shown = browser.wait_for("the graph", 20, STATUSES, |s| {
        s.as_object().is_some_and(|s| s.len() == 4)
    });
    let expected: serde_json::Map<String, Value> = (graph["nodes"].as_array().unwrap().iter())
        .map(|node| {
            (
                node["id"].as_str().unwrap().to_owned(),
                node["status"].clone(),
            )
        })
        .collect();
    assert_eq!(shown, Value::Object(expected));
    assert_eq!(
        shown,
        json!({"fetch": "ok", "rows": "ok", "check": "failed", "publish": "skipped"})
    );
    // Not by colour alone: the status is written in each node, a map's items with it.
    let texts = browser.script(
        "return [...document.querySelectorAll('g.step text.status')].map(t => t.textContent);",
        &[],
    );
    assert_eq!(
        texts,
        json!(["✓ ok", "✓ ok · 3/3 items", "✗ failed", "– skipped"])
    );
    assert_eq!(browser.script(STATUS, &[]), "FAILED");
    // The timeline: every call once (three items), the critical path marked.
    let bars = browser.script(
        "return [...document.querySelectorAll('#timeline rect.bar')].map(r => [r.dataset.call, r.dataset.critical]);",
        &[],
    );
    let mut calls: Vec<_> = bars
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b[0].as_str().unwrap().to_owned())
        .collect();
    calls.sort();
    assert_eq!(calls, ["check", "fetch", "rows-0", "rows-1", "rows-2"]);
    assert!(
        bars.as_array()
            .unwrap()
            .iter()
            .any(|b| b == &json!(["check", "true"])),
        "{bars}"
    );
    // By keyboard: a step takes the focus and Enter opens its panel, with its output.
    browser.type_into("g.step[data-step-id=\"fetch\"]", "\u{E007}");
    let panel = browser.wait_for(
        "the step panel",
        20,
        "const p = document.getElementById('panel'); return p.hidden ? '' : p.textContent;",
        |text| text.as_str().is_some_and(|t| t.contains("fetched 3 rows")),
    );
    assert!(
        panel.as_str().unwrap().contains("tool.succeeded"),
        "{panel}"
    );
    screenshot(&browser, "run");
    browser.type_into("body", "\u{E00C}");
    browser.wait_for(
        "the panel to close",
        10,
        "return document.getElementById('panel').hidden;",
        |v| v == &json!(true),
    );
}

/// A live run's nodes change on the open page as its steps finish, without a reload.
#[test]
fn a_live_runs_nodes_change_without_reloading() {
    let lab = Lab::new();
    let plan = lab.write(
        "live.json",
        &json!({"id": "live", "steps": [
            {"id": "first", "tool": "sleep", "args": {"ms": 5000}},
            {"id": "second", "tool": "echo", "args": {"text": "done"}, "depends_on": ["first"]}
        ]}),
    );
    let (ui, _) = serve(&lab);
    // The browser first: starting it is the slow part (seconds on a busy machine), and the
    // page must open while `first` still runs.
    let browser = Browser::start(1000, 800);
    let mut running = lab.spawn(&["run", common::path_str(&plan)]);
    let run = {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let (_, runs) = lab.json(&["runs", "--json"]);
            if let Some(id) = runs[0]["run_id"].as_str() {
                break id.to_owned();
            }
            assert!(std::time::Instant::now() < deadline, "no run started");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    browser.open(&page(&ui, &run));
    browser.wait_for("first running", 20, STATUSES, |s| s["first"] == "running");
    assert_eq!(browser.script(STATUSES, &[])["second"], "pending");
    browser.script("window.sameDocument = true; return null;", &[]);
    browser.wait_for("the run to end", 60, STATUSES, |s| {
        s == &json!({"first": "ok", "second": "ok"})
    });
    browser.wait_for("COMPLETED", 20, STATUS, |s| s == "COMPLETED");
    assert_eq!(
        browser.script("return window.sameDocument === true;", &[]),
        true,
        "the page was reloaded"
    );
    assert!(running.wait().unwrap().success());
}

/// A waiting run is decided and resumed by clicks, and the page follows it to its end; a
/// rejection's reason given on the page is the run's.
#[test]
fn a_waiting_run_is_approved_and_resumed_by_clicks() {
    let lab = Lab::new();
    let plan = gated_plan(&lab, "to production", Some("notify"));
    let waiting = |lab: &Lab| waiting_run(lab, &plan);
    let (ui, _) = serve(&lab);
    let browser = Browser::start(1280, 900);

    let run = waiting(&lab);
    browser.open(&page(&ui, &run));
    let shown = browser.wait_for("deploy waiting", 20, STATUSES, |s| s["deploy"] == "waiting");
    assert_eq!(
        shown,
        json!({"build": "ok", "deploy": "waiting", "notify": "pending"})
    );
    // The call is shown with the arguments it would be called with.
    let call = browser.script(
        "return document.querySelector('.waiting-call[data-step-id=\"deploy\"]').textContent;",
        &[],
    );
    assert!(call.as_str().unwrap().contains("to production"), "{call}");
    screenshot(&browser, "run-waiting");
    // Approved with an answer (`approve --input`): it replaces the argument of its name.
    browser.type_into(
        "textarea[aria-label=\"answer for deploy\"]",
        r#"{"text": "to staging"}"#,
    );
    browser.click("[data-action=\"approve\"][data-step-id=\"deploy\"]");
    browser.click("#toolbar [data-action=\"resume\"]");
    browser.wait_for("COMPLETED", 60, STATUS, |s| s == "COMPLETED");
    browser.wait_for("every step ok", 20, STATUSES, |s| {
        s == &json!({"build": "ok", "deploy": "ok", "notify": "ok"})
    });
    let (_, status) = lab.json(&["status", &run, "--json"]);
    assert_eq!(status["task_status"], "COMPLETED", "{status}");
    let deploy = common::record(&status, "deploy");
    assert_eq!(deploy["result"], json!({"text": "to staging"}), "{status}");

    let run = waiting(&lab);
    let reason = "input[aria-label=\"reason for rejecting deploy\"]";
    browser.open(&page(&ui, &run));
    browser.type_into(reason, "freeze week");
    browser.click("[data-action=\"reject\"][data-step-id=\"deploy\"]");
    browser.click("#toolbar [data-action=\"resume\"]");
    browser.wait_for("FAILED", 60, STATUS, |s| s == "FAILED");
    let (_, status) = lab.json(&["status", &run, "--json"]);
    assert!(status.to_string().contains("freeze week"), "{status}");
}

/// "Run again from here" in a step's panel runs it and what follows it again, as `plan-cli
/// retry` does; the page follows the run anew.
#[test]
fn a_step_is_run_again_from_its_panel() {
    let lab = Lab::new();
    let plan = lab.write(
        "chain.json",
        &json!({"id": "chain", "steps": [
            {"id": "a", "tool": "echo", "args": {"text": "a"}},
            {"id": "b", "tool": "echo", "args": {"text": "b"}, "depends_on": ["a"]},
            {"id": "c", "tool": "echo", "args": {"text": "c"}, "depends_on": ["b"]}
        ]}),
    );
    let (_, report) = lab.json(&["run", common::path_str(&plan), "--json"]);
    let run = report["run_id"].as_str().unwrap().to_owned();
    let (ui, _) = serve(&lab);
    let browser = Browser::start(1280, 900);
    browser.open(&page(&ui, &run));
    browser.click("g.step[data-step-id=\"b\"]");
    browser.click("#panel [data-action=\"retry\"]");
    let executed = |step: &str| {
        let events = text(&lab, &["events", &run]);
        (events.lines())
            .filter(|l| {
                l.contains("\"step.executed\"") && l.contains(&format!("\"step_id\":\"{step}\""))
            })
            .count()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while executed("c") < 2 {
        let said = browser.script("return document.getElementById('error').textContent;", &[]);
        assert!(
            std::time::Instant::now() < deadline,
            "c did not run again; the page says {said}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!((executed("a"), executed("b"), executed("c")), (1, 2, 2));
    browser.wait_for("COMPLETED", 60, STATUS, |s| s == "COMPLETED");
    let panel = browser.script(
        "return document.getElementById('panel-body').textContent;",
        &[],
    );
    assert!(panel.as_str().unwrap().contains("attempt"), "{panel}");
}

/// A task breakdown's board: its layers as columns, each task a card with its status, its
/// attempts of the most it has, its last failure and the feedback its next attempt got, its
/// commits; the merge queue in order; and the run's state file, as `state export` writes it.
#[test]
fn a_breakdowns_board_shows_each_task_with_its_attempts_failure_and_commits() {
    let lab = Lab::new();
    let repo = lab.dir.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    // The stand-in coding agent: wrong at first, right once the feedback shows the failure.
    let agent = "#!/bin/sh\ncase \"$2\" in\n  *AssertionError*) printf 'def add(a, b):\\n    return a + b\\n' > calc.py ;;\n  *) printf 'def add(a, b):\\n    return a * b\\n' > calc.py ;;\nesac\n";
    std::fs::write(repo.join("agent.sh"), agent).unwrap();
    std::fs::write(repo.join("calc.py"), "def add(a, b):\n    return 0\n").unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        let executable = std::fs::Permissions::from_mode(0o755);
        std::fs::set_permissions(repo.join("agent.sh"), executable).unwrap();
    }
    common::git(&repo, &["init", "-q", "-b", "trunk"]);
    common::git(&repo, &["add", "-A"]);
    common::git(&repo, &["commit", "-qm", "start"]);
    let task = |id: &str, layer: &str, after: &[&str]| {
        json!({
            "id": id, "title": format!("make add add ({id})"), "layer": layer, "depends_on": after,
            "task": {
                "implement": {"tool": "exec", "args": {"argv": ["${task.worktree}/agent.sh", "${task.id}", "${task.feedback}"]}},
                "verify": [{"argv": ["python3", "-B", "-c", "import calc; assert calc.add(2, 3) == 5, calc.add(2, 3)"]}]
            }
        })
    };
    let plan = json!({"id": "calc", "workspace": {"repo": ".", "max_attempts": 3}, "steps": [
        task("L1-001", "1-core", &[]),
        task("L2-001", "2-more", &["L1-001"])
    ]});
    let file = repo.join("plan.json");
    std::fs::write(&file, plan.to_string()).unwrap();
    let (code, report) = lab.json(&["run", common::path_str(&file), "--json"]);
    assert_eq!(code, 0, "{report}");
    let run = report["run_id"].as_str().unwrap().to_owned();
    let (ui, _) = serve(&lab);
    let (name, value) = bearer();
    let tasks = request(
        ui.port,
        "GET",
        &format!("/api/runs/{run}/tasks"),
        &[(name, &value)],
    );
    assert_eq!(tasks.status, 200, "{}", tasks.body);
    // The state the board reads is `state export`'s (but for when each was read).
    let without_time = |mut document: Value| {
        document.as_object_mut().unwrap().remove("updated_at");
        document
    };
    let exported = text(&lab, &["state", "export", &run]);
    let expected = without_time(serde_json::from_str(&exported).unwrap());
    let served = without_time(tasks.json()["state"].clone());
    assert_eq!(served, expected, "the board's state is `state export`'s");

    let browser = Browser::start(1280, 1100);
    browser.open(&page(&ui, &run));
    let board = browser.wait_for(
        "the board",
        20,
        "return [...document.querySelectorAll('#board section.layer')].map(l => [l.dataset.layer, [...l.querySelectorAll('article.task')].map(t => [t.dataset.taskId, t.dataset.status, t.querySelector('.attempts').textContent])]);",
        |b| b.as_array().is_some_and(|b| b.len() == 2),
    );
    assert_eq!(
        board,
        json!([
            [
                "1-core",
                [["L1-001", "completed", "✓ completed · attempt 2 of 3"]]
            ],
            [
                "2-more",
                [["L2-001", "completed", "✓ completed · attempt 2 of 3"]]
            ]
        ])
    );
    let card = browser.script(
        "return document.querySelector('article.task[data-task-id=\"L1-001\"]').textContent;",
        &[],
    );
    let card = card.as_str().unwrap();
    assert!(
        card.contains("last failure (attempt 1, verification_failed"),
        "{card}"
    );
    assert!(
        card.contains("feedback for attempt 2:") && card.contains("AssertionError"),
        "{card}"
    );
    assert!(
        card.contains("implementation (attempt 1)") && card.contains("fix (attempt 2)"),
        "{card}"
    );
    let queue = browser.script(
        "return [...document.querySelectorAll('#merge-queue li')].map(li => li.textContent);",
        &[],
    );
    assert_eq!(queue, json!(["L1-001: merged", "L2-001: merged"]));
    let state = browser.script("return JSON.parse(document.getElementById('state-json').textContent).tasks['L2-001'].status;", &[]);
    assert_eq!(state, "completed");
    browser.script(
        "document.getElementById('tasks').scrollIntoView(); return null;",
        &[],
    );
    screenshot(&browser, "tasks");
}

/// The plans registry: each stored plan, its graph, and what `validate` finds, shown at its
/// line in the plan's text.
#[test]
fn the_plans_page_shows_each_stored_plan_with_its_graph_and_its_problems_at_their_line() {
    let lab = Lab::new();
    let good = lab.dir.path().join("good.yaml");
    std::fs::write(
        &good,
        "id: good\ntitle: Fetch and count\nsteps:\n  - id: fetch\n    tool: echo\n    args: {text: rows}\n  - id: count\n    tool: echo\n    depends_on: [fetch]\n    args: {text: counted}\n",
    )
    .unwrap();
    // Stored with a warning (`plan add` judges arguments leniently); `validate` calls it an error.
    let loose = lab.dir.path().join("loose.yaml");
    std::fs::write(
        &loose,
        "id: loose\nsteps:\n  - id: wait\n    tool: sleep\n    args:\n      ms: soon\n",
    )
    .unwrap();
    for file in [&good, &loose] {
        text(&lab, &["plan", "add", common::path_str(file)]);
    }
    let (code, validated) = lab.json(&["validate", "loose", "--json"]);
    assert_ne!(code, 0, "{validated}");
    let (ui, _) = serve(&lab);
    let (name, value) = bearer();
    let auth = [(name, value.as_str())];
    let listed = request(ui.port, "GET", "/api/plans", &auth).json();
    let (_, cli) = lab.json(&["plan", "list", "--json"]);
    assert_eq!(listed, cli, "the registry is `plan list --json`'s");
    let detail = request(ui.port, "GET", "/api/plans/loose", &auth).json();
    assert_eq!(
        detail["validation"], validated,
        "judged as `validate --json` judges it"
    );
    let missing = request(ui.port, "GET", "/api/plans/nope", &auth);
    assert_eq!(missing.status, 400, "{}", missing.body);

    let browser = Browser::start(1280, 900);
    browser.open(&format!("http://127.0.0.1:{}/plans?token={TOKEN}", ui.port));
    browser.click("tr[data-plan-id=\"good\"] a");
    let graph = browser.wait_for("the good plan's graph", 20, STATUSES, |s| {
        s.as_object().is_some_and(|s| s.len() == 2)
    });
    assert_eq!(graph, json!({"fetch": "pending", "count": "pending"}));
    assert!(
        browser
            .script(
                "return document.getElementById('verdict').textContent;",
                &[]
            )
            .as_str()
            .unwrap()
            .starts_with("✓ valid: 2 steps")
    );
    browser.click("tr[data-plan-id=\"loose\"] a");
    let verdict = browser.wait_for(
        "the loose plan's verdict",
        20,
        "return document.getElementById('verdict').textContent;",
        |v| v.as_str().is_some_and(|v| v.starts_with("✗")),
    );
    assert_eq!(verdict, "✗ not valid: 1 error(s)");
    assert_eq!(
        browser.script(STATUSES, &[]),
        json!({}),
        "no graph of an invalid plan"
    );
    // The error sits under the line it is at, in words.
    let line = validated["errors"][0]["line"].as_u64().unwrap();
    let marked = browser.script(
        "return [...document.querySelectorAll('#source li.issue')].map(li => [Number(li.dataset.line), li.textContent]);",
        &[],
    );
    let marked = marked.as_array().unwrap();
    assert_eq!(marked.len(), 1, "{marked:?}");
    assert_eq!(marked[0][0], json!(line));
    let shown = marked[0][1].as_str().unwrap();
    assert!(
        shown.starts_with("      ms: soon") && shown.contains("^ error:"),
        "{shown}"
    );
    screenshot(&browser, "plans");
}

/// A block step's panel draws the block as a graph of its own: its nodes with their
/// statuses, its transitions with their conditions, and the path the run took, the
/// transitions it took marked.
#[test]
fn a_blocks_panel_draws_its_nodes_transitions_and_the_path_taken() {
    let lab = Lab::new();
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/43-block-review.yaml");
    let (code, report) = lab.json(&["run", common::path_str(&fixture), "--json"]);
    assert_eq!(code, 0, "{report}");
    let run = report["run_id"].as_str().unwrap().to_owned();
    let (ui, _) = serve(&lab);
    let (name, value) = bearer();
    let detail = request(
        ui.port,
        "GET",
        &format!("/api/runs/{run}/steps/review"),
        &[(name, &value)],
    )
    .json();
    // check runs three times (attempt 1 and 2 fail `passed`), fix twice in between.
    let path = ["draft", "check", "fix", "check", "fix", "check", "done"];
    assert_eq!(detail["block"]["path"], json!(path));

    let browser = Browser::start(1280, 1000);
    browser.open(&page(&ui, &run));
    browser.click("g.step[data-step-id=\"review\"]");
    let nodes = browser.wait_for(
        "the block's graph",
        20,
        "return Object.fromEntries([...document.querySelectorAll('#panel g.node')].map(g => [g.dataset.node, g.dataset.status]));",
        |n| n.as_object().is_some_and(|n| n.len() == 4),
    );
    assert_eq!(
        nodes,
        json!({"draft": "ok", "check": "ok", "fix": "ok", "done": "ok"})
    );
    let edges = browser.script(
        "return [...document.querySelectorAll('#panel path.edge')].map(p => [p.dataset.from, p.dataset.to, p.classList.contains('taken')]);",
        &[],
    );
    let mut edges = edges.as_array().unwrap().clone();
    edges.sort_by_key(|e| e.to_string());
    assert_eq!(
        edges,
        [
            json!(["check", "done", true]),
            json!(["check", "fix", true]),
            json!(["draft", "check", true]),
            json!(["fix", "check", true]),
        ]
    );
    let labels = browser.script(
        "return [...document.querySelectorAll('#panel text.edge-label')].map(t => t.textContent).sort();",
        &[],
    );
    assert_eq!(
        labels,
        json!(["default ✔ taken", "passed ✔ taken", "✔ taken", "✔ taken"])
    );
    let said = browser.script(
        "return document.querySelector('#panel .block-path').textContent;",
        &[],
    );
    assert_eq!(said, format!("path taken: {}", path.join(" → ")));
    screenshot(&browser, "run-block");
}

/// A question an MCP server asked (elicitation: server-everything's
/// `trigger-elicitation-request`) is shown with what it asks and the schema of the answer, and
/// answered in the page; resumed from there, the call is given the answer.
#[test]
fn a_servers_question_is_answered_in_the_page() {
    let lab = Lab::new();
    common::use_mcp_servers(&lab, json!({"everything": common::everything_server()}));
    let plan = lab.write(
        "ask.json",
        &json!({"steps": [{"id": "ask", "tool": "everything.trigger-elicitation-request", "args": {}}]}),
    );
    let run = waiting_run(&lab, &plan);
    let (ui, _) = serve(&lab);
    let browser = Browser::start(1280, 900);
    browser.open(&page(&ui, &run));
    browser.wait_for("ask waiting", 20, STATUSES, |s| s["ask"] == "waiting");
    let question = browser.script(
        "return document.querySelector('.waiting-call[data-step-id=\"ask@input#1\"]').textContent;",
        &[],
    );
    let question = question.as_str().unwrap();
    assert!(question.contains("Please provide inputs"), "{question}");
    assert!(
        question.contains("Your full, legal name"),
        "the schema is shown: {question}"
    );
    browser.type_into(
        "textarea[aria-label=\"answer to ask@input#1\"]",
        r#"{"name": "Grace Hopper"}"#,
    );
    browser.click("[data-action=\"approve\"][data-step-id=\"ask@input#1\"]");
    browser.click("#toolbar [data-action=\"resume\"]");
    browser.wait_for("COMPLETED", 60, STATUS, |s| s == "COMPLETED");
    let (_, status) = lab.json(&["status", &run, "--json"]);
    assert!(
        status["records"][0]["result"]
            .to_string()
            .contains("Grace Hopper"),
        "{status}"
    );
}
