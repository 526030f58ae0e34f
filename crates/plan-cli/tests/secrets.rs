//! Secrets (the values of the environment variables a plan lists) never leave the process
//! unredacted: a plan sends them through every tool, in ids, errors and URLs, and every output
//! is searched for them in any case and encoding.
#![expect(clippy::unwrap_used, reason = "test helpers fail loudly on purpose")]

use std::path::Path;

use serde_json::{Value, json};

mod common;

use common::{Lab, path_str};

/// Quotes, spaces, capitals and non-ASCII; `hunter2` survives every encoding tried (JSON
/// escaping, percent-encoding, case changes).
const SECRET: &str = "Hunter2 \"Quoted\" Wört";
/// A secret that is a valid hostname label with capitals and a non-ASCII letter: URLs
/// lowercase it and spell it in punycode (`xn--geheimwrt-…`).
const HOST_SECRET: &str = "GeheimWört";

fn plan() -> Value {
    json!({
        "env": ["PLAN_TEST_S", "PLAN_TEST_H"],
        "steps": [
            {"id": "echoed", "tool": "echo", "args": {"auth": "Bearer ${env.PLAN_TEST_S}"}, "result_variable": "sent"},
            {"id": "printed", "tool": "exec", "args": {"argv": ["printf", "%s", "${env.PLAN_TEST_S}"]}},
            {"id": "encoded", "tool": "exec", "args": {"argv": ["sh", "-c", "echo \"$1\" | base64 -w0", "sh", "${env.PLAN_TEST_S}"]}},
            {"id": "json_escaped", "tool": "exec", "args": {"argv": ["python3", "-c", "import sys; print('{\"k\":\"' + ''.join('\\\\u%04x' % ord(c) for c in sys.argv[1]) + '\"}')", "${env.PLAN_TEST_S}"]}},
            {"id": "in_stderr", "tool": "exec", "args": {"argv": ["ls", "/nonexistent/${env.PLAN_TEST_S}"]}},
            {"id": "in_cwd", "tool": "exec", "args": {"argv": ["true"], "cwd": "/nonexistent/${env.PLAN_TEST_S}"}},
            {"id": "failed", "tool": "fail", "args": {"message": "cannot log in with ${env.PLAN_TEST_S}"}},
            {"id": "fetched", "tool": "http", "args": {"url": "http://${env.PLAN_TEST_H}.invalid/${env.PLAN_TEST_S}", "timeout_ms": 2000}},
            {"id": "schema", "tool": "sleep", "args": {"ms": "${env.PLAN_TEST_S}"}},
            {"id": "mapped", "tool": "echo", "expand_on": ["a"], "expand_key": "k-${env.PLAN_TEST_S}", "args": {"v": "${each}"}},
            {"id": "bad_path", "tool": "echo", "args": {"v": "${env.PLAN_TEST_S.field}"}},
            {"id": "gated", "tool": "echo", "risk": "high", "depends_on": ["echoed"], "args": {"token": "${env.PLAN_TEST_S}", "prev": "${sent}"}},
        ]
    })
}

/// Where a secret was found in `text`, in any of its forms, or None.
fn leak(text: &str) -> Option<String> {
    let lower = text.to_lowercase();
    // The last: the middle of `echo "$SECRET" | base64`.
    for needle in [
        "hunter2",
        "geheim",
        "wört",
        "w%c3%b6rt",
        "xn--",
        "dgvymiaiuxvvdgvk",
        // The secret printed as JSON escapes (`{"k":"\u0048\u0075…"}`), escaped again or not
        // where it is shown as JSON.
        "u0048",
    ] {
        if let Some(at) = lower.find(needle) {
            let start = lower[..at]
                .char_indices()
                .rev()
                .nth(60)
                .map_or(0, |(i, _)| i);
            let end = (at + 80).min(lower.len());
            let end = (end..=lower.len())
                .find(|&i| lower.is_char_boundary(i))
                .unwrap_or(lower.len());
            return Some(format!("`{needle}` in …{}…", &lower[start..end]));
        }
    }
    None
}

fn assert_clean(what: &str, bytes: &[u8]) {
    if let Some(found) = leak(&String::from_utf8_lossy(bytes)) {
        panic!("the secret leaks through {what}: {found}");
    }
}

fn run_cli(lab: &Lab, args: &[&str]) -> std::process::Output {
    lab.cli()
        .env("PLAN_TEST_S", SECRET)
        .env("PLAN_TEST_H", HOST_SECRET)
        .args(args)
        .output()
        .unwrap()
}

fn assert_output_clean(what: &str, output: &std::process::Output) {
    assert_clean(&format!("{what} (stdout)"), &output.stdout);
    assert_clean(&format!("{what} (stderr)"), &output.stderr);
}

fn ledger_files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    std::fs::read_dir(dir.join(".plan"))
        .unwrap()
        .map(|entry| {
            let path = entry.unwrap().path();
            (
                path.display().to_string(),
                std::fs::read(&path).unwrap_or_default(),
            )
        })
        .collect()
}

#[test]
fn no_output_holds_a_secret_in_any_form() {
    let lab = Lab::new();
    let plan = lab.write("secrets.json", &plan());
    let plan = path_str(&plan);

    let dry = run_cli(&lab, &["run", plan, "--dry-run"]);
    assert_output_clean("the dry run", &dry);
    let dry_json = run_cli(&lab, &["run", plan, "--dry-run", "--json"]);
    assert_output_clean("the dry run's JSON", &dry_json);
    let dry_report: Value = serde_json::from_slice(&dry_json.stdout).unwrap();
    assert!(
        dry_report["calls"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["error"].is_object()),
        "the dry run shows the call that would fail: {dry_report}"
    );

    let human = run_cli(
        &lab,
        &[
            "run",
            plan,
            "--events",
            "events.ndjson",
            "--state-file",
            "state.json",
        ],
    );
    assert_output_clean("the human output", &human);
    let run = run_cli(&lab, &["run", plan, "--json"]);
    assert_output_clean("--json", &run);
    let report: Value = serde_json::from_slice(&run.stdout).unwrap();
    let run_id = report["run_id"].as_str().unwrap().to_owned();

    // The secret went where it was sent: the tools saw it, the outputs do not.
    let record = |id: &str| {
        report["records"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["step_id"].as_str().is_some_and(|s| s.starts_with(id)))
            .unwrap_or_else(|| panic!("no record {id}: {report}"))
            .clone()
    };
    assert_eq!(
        record("echoed")["result"]["auth"],
        json!("Bearer [redacted]")
    );
    assert_eq!(record("printed")["result"]["stdout"], json!("[redacted]"));
    assert_eq!(
        record("encoded")["result"]["stdout"],
        json!("[redacted]Ao=")
    );
    assert_eq!(
        record("failed")["error"]["message"],
        json!("cannot log in with [redacted]")
    );
    assert_eq!(record("mapped[")["step_id"], json!("mapped[k-[redacted]]"));
    for id in ["in_stderr", "in_cwd", "fetched", "schema", "bad_path"] {
        assert_eq!(record(id)["ok"], json!(false), "{id}: {}", record(id));
    }
    assert_eq!(report["task_status"], json!("WAITING"), "{report}");

    assert_clean(
        "the events file",
        &std::fs::read(lab.dir.path().join("events.ndjson")).unwrap(),
    );
    assert_clean(
        "the state file",
        &std::fs::read(lab.dir.path().join("state.json")).unwrap(),
    );
    for args in [
        vec!["status", run_id.as_str(), "--json"],
        vec!["status", run_id.as_str()],
        vec!["runs"],
        vec!["runs", "--json"],
        vec!["events", run_id.as_str()],
        vec!["resume", run_id.as_str(), "--json"],
    ] {
        let output = run_cli(&lab, &args);
        assert_output_clean(&args.join(" "), &output);
    }
    for (name, bytes) in ledger_files(lab.dir.path()) {
        assert_clean(&format!("the ledger file {name}"), &bytes);
    }
}

/// A data expression cannot cut a secret into pieces the redactor would not find: what binds,
/// variables and block nodes read of a result is redacted already (a secret reaches a tool
/// only through `${env.NAME}`). And `base64`'s output wrapped at 76 columns is redacted too.
#[test]
fn expressions_and_wrapped_base64_carry_no_piece_of_a_secret() {
    let lab = Lab::new();
    let secret = "tok-1234567890-secret-value-that-is-long-enough-to-wrap-base64-output";
    let plan = lab.write(
        "cut.json",
        &json!({"env": ["PLAN_TEST_S"], "steps": [
            {"id": "a", "tool": "echo", "args": {"t": "${env.PLAN_TEST_S}"},
             "binds": {"tail": "${{ result.t.substring(1) }}", "spaced": "${{ result.t.split('').join(' ') }}", "whole": "$.t"}},
            {"id": "b", "tool": "echo", "depends_on": ["a"], "args": {"v": "${{ vars.whole.substring(2) }}"}},
            {"id": "blk", "block": {"entry_point": "n1", "nodes": {
                "n1": {"tool": "echo", "args": {"t": "${env.PLAN_TEST_S}"}},
                "n2": {"tool": "echo", "args": {"v": "${nodes.n1.t}"}}
            }, "transitions": {"n1": "n2"}}},
            {"id": "wrapped", "tool": "exec", "args": {"argv": ["base64"], "stdin": "${env.PLAN_TEST_S}"}}
        ]}),
    );
    let output = lab
        .cli()
        .args(["run", path_str(&plan), "--json"])
        .env("PLAN_TEST_S", secret)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let report: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(report["task_status"], "COMPLETED", "{report}");
    for piece in [&secret[1..], &secret[2..], &secret[3..], "t o k - 1 2 3"] {
        assert!(!text.contains(piece), "`{piece}` in {text}");
    }
    let wrapped = record_result(&report, "wrapped");
    assert!(wrapped.contains("[redacted]"), "{wrapped}");
    assert!(
        wrapped.replace("[redacted]", "").trim().len() < 12,
        "{wrapped}"
    );
    for (name, bytes) in ledger_files(lab.dir.path()) {
        let bytes = String::from_utf8_lossy(&bytes);
        assert!(!bytes.contains(&secret[3..]), "{name}");
    }
}

fn record_result(report: &Value, id: &str) -> String {
    report["records"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["step_id"] == id)
        .map(|r| r["result"]["stdout"].as_str().unwrap_or("").to_owned())
        .unwrap()
}

/// The dashboard shows the ledger, where secrets are redacted, and nothing else: every API
/// route and page is read for a run of the plan above (waiting, then approved and resumed in
/// the dashboard's own process, which has the secrets in its environment), and none holds a
/// secret in any form; nor does what the dashboard prints.
#[test]
fn no_dashboard_answer_holds_a_secret() {
    use common::ui::{bearer, post, request, start, status_until};
    let lab = Lab::new();
    let file = lab.write("secrets.json", &plan());
    let run = run_cli(&lab, &["run", path_str(&file), "--json"]);
    let report: Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(report["task_status"], json!("WAITING"), "{report}");
    let run_id = report["run_id"].as_str().unwrap().to_owned();
    let added = run_cli(&lab, &["plan", "add", path_str(&file)]);
    assert!(added.status.success(), "{added:?}");
    let env = [("PLAN_TEST_S", SECRET), ("PLAN_TEST_H", HOST_SECRET)];
    let (mut ui, line) = start(&lab, &["--no-open"], &env);
    assert_clean("the dashboard's first line", line.as_bytes());
    let (name, value) = bearer();
    let auth = [(name, value.as_str())];
    let steps: Vec<String> = (plan()["steps"].as_array().unwrap().iter())
        .map(|step| step["id"].as_str().unwrap().to_owned())
        .collect();
    let read_everything = |when: &str| {
        let mut paths = vec![
            "/".to_owned(),
            format!("/runs/{run_id}"),
            "/api/runs".to_owned(),
            format!("/api/runs/{run_id}"),
            format!("/api/runs/{run_id}/graph"),
            format!("/api/runs/{run_id}/timeline"),
            format!("/api/runs/{run_id}/events"),
            "/plans".to_owned(),
            "/api/plans".to_owned(),
            "/api/plans/secrets".to_owned(),
        ];
        paths.extend(
            steps
                .iter()
                .map(|step| format!("/api/runs/{run_id}/steps/{step}")),
        );
        for path in paths {
            let answer = request(ui.port, "GET", &path, &auth);
            assert_eq!(answer.status, 200, "{path}: {}", answer.body);
            assert_clean(&format!("{when}: GET {path}"), answer.body.as_bytes());
        }
    };
    let gated_step = || {
        request(
            ui.port,
            "GET",
            &format!("/api/runs/{run_id}/steps/gated"),
            &auth,
        )
    };
    read_everything("waiting");
    // The waiting call's arguments, which hold the secret, are shown redacted.
    let gated = gated_step();
    assert_eq!(
        gated.json()["waiting"][0]["args"]["token"],
        json!("[redacted]")
    );
    let decided = post(
        ui.port,
        &format!("/api/runs/{run_id}/approve"),
        &json!({"steps": ["gated"]}),
        &auth,
    );
    assert_eq!(decided.status, 200, "{}", decided.body);
    assert_clean("the approval's answer", decided.body.as_bytes());
    let resumed = post(
        ui.port,
        &format!("/api/runs/{run_id}/resume"),
        &json!({}),
        &auth,
    );
    assert_eq!(resumed.status, 202, "{}", resumed.body);
    status_until(&lab, &run_id, |status| {
        status["task_status"] == json!("FAILED")
    });
    read_everything("resumed");
    // The gated call ran in the dashboard's process, with the secret, redacted on its way out.
    let gated = gated_step();
    assert_eq!(
        gated.json()["records"][0]["result"]["token"],
        json!("[redacted]"),
        "{}",
        gated.body
    );
    let retried = post(
        ui.port,
        &format!("/api/runs/{run_id}/retry"),
        &json!({"steps": ["gated"]}),
        &auth,
    );
    assert_clean("the retry's answer", retried.body.as_bytes());
    let output = ui.stop();
    assert_clean("what the dashboard printed", &output);
    for (name, bytes) in ledger_files(lab.dir.path()) {
        assert_clean(&format!("the ledger file {name}"), &bytes);
    }
}
