//! Runs every plan in `fixtures/` through the real binary (`plan-cli run FILE --json`) and
//! compares exit code, JSON output and diagnostics with the reviewed snapshots in
//! `fixtures/snapshots/`. Run ids and durations are redacted: everything else is deterministic.
//! `cargo xtask test-fixtures` runs this; `cargo insta review` accepts changes.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

fn redact(mut report: Value) -> Value {
    if let Some(run_id) = report.get_mut("run_id") {
        *run_id = Value::String("[run_id]".into());
    }
    if let Some(records) = report.get_mut("records").and_then(Value::as_array_mut) {
        for record in records {
            record["duration_ms"] = Value::String("[ms]".into());
        }
    }
    report
}

/// One ledger for the whole test, outside the repository.
fn ledger_path() -> &'static Path {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().expect("a temporary directory"))
        .path()
}

fn run_fixture(path: &Path) -> String {
    let dir = path.parent().expect("fixtures live in a directory");
    let name = path
        .file_name()
        .expect("a file")
        .to_string_lossy()
        .into_owned();
    let output = Command::new(env!("CARGO_BIN_EXE_plan-cli"))
        .args(["run", &name, "--json"])
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env("PLAN_DB", ledger_path().join("state.db"))
        .env("PLAN_CLI_FIXTURE_SECRET", "hunter2-fixture-secret")
        .output()
        .expect("plan-cli runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stdout = match serde_json::from_str::<Value>(&stdout) {
        Ok(report) => serde_json::to_string_pretty(&redact(report)).expect("serialises"),
        Err(_) => stdout.into_owned(),
    };
    format!(
        "exit code: {}\n--- stdout\n{}\n--- stderr\n{}",
        output
            .status
            .code()
            .map_or("signal".to_owned(), |c| c.to_string()),
        stdout.trim_end(),
        String::from_utf8_lossy(&output.stderr).trim_end()
    )
}

#[test]
fn fixtures() {
    insta::with_settings!({
        snapshot_path => "../../../fixtures/snapshots",
        prepend_module_to_snapshot => false,
        omit_expression => true,
    }, {
        insta::glob!("../../../fixtures", "*.{json,yaml,yml}", |path| {
            insta::assert_snapshot!(run_fixture(path));
        });
    });
}
