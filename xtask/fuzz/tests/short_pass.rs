//! The short pass CI runs: a few thousand inputs through the harness's own binary (worker
//! processes and all). `cargo xtask fuzz --inputs 1000000` is the long one.

use std::path::Path;
use std::process::{Command, Output};

/// Runs the harness over the project's fixtures, saving failing inputs in `out`.
fn fuzz(inputs: &str, seed: &str, out: &Path, abort_at: Option<&str>) -> (Output, String, String) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut command = Command::new(env!("CARGO_BIN_EXE_plan-fuzz"));
    command
        .args(["--inputs", inputs, "--seed", seed, "--fixtures"])
        .arg(root.join("fixtures"))
        .arg("--out")
        .arg(out);
    if let Some(i) = abort_at {
        command.env("PLAN_FUZZ_ABORT_AT", i);
    }
    let output = command.output().expect("plan-fuzz runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output, stdout, stderr)
}

#[test]
fn a_short_pass_finds_no_failure() {
    let out = tempfile::tempdir().expect("a temporary folder");
    let (output, stdout, stderr) = fuzz("4000", "2", out.path(), None);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("fuzz: 4000 inputs (seed 2), 0 failures"),
        "{stdout}"
    );
}

#[test]
fn a_failure_is_caught_and_saved() {
    // A worker that dies on its input is a failure the parent names, not a lost count.
    let out = tempfile::tempdir().expect("a temporary folder");
    let (output, stdout, stderr) = fuzz("50", "3", out.path(), Some("17"));
    assert!(!output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("fuzz: 50 inputs (seed 3), 1 failures"),
        "{stdout}\n{stderr}"
    );
    assert!(stderr.contains("FAIL input 17"), "{stderr}");
    assert!(std::fs::read_dir(out.path()).expect("saved").count() == 1);
}
