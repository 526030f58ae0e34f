//! The short pass CI runs: a few thousand inputs through the harness's own binary (worker
//! processes and all). `cargo xtask fuzz --inputs 1000000` is the long one.

use std::path::Path;
use std::process::Command;

#[test]
fn a_short_pass_finds_no_failure() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = tempfile_dir();
    let output = Command::new(env!("CARGO_BIN_EXE_plan-fuzz"))
        .args(["--inputs", "4000", "--seed", "2", "--fixtures"])
        .arg(root.join("fixtures"))
        .arg("--out")
        .arg(out.path())
        .output()
        .expect("plan-fuzz runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("fuzz: 4000 inputs (seed 2), 0 failures"),
        "{stdout}"
    );
}

#[test]
fn a_failure_is_caught_and_saved() {
    // A worker that dies on its input is a failure the parent names, not a lost count.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = tempfile_dir();
    let output = Command::new(env!("CARGO_BIN_EXE_plan-fuzz"))
        .args(["--inputs", "50", "--seed", "3", "--fixtures"])
        .arg(root.join("fixtures"))
        .arg("--out")
        .arg(out.path())
        .env("PLAN_FUZZ_ABORT_AT", "17")
        .output()
        .expect("plan-fuzz runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("fuzz: 50 inputs (seed 3), 1 failures"),
        "{stdout}\n{stderr}"
    );
    assert!(stderr.contains("FAIL input 17"), "{stderr}");
    assert!(std::fs::read_dir(out.path()).expect("saved").count() == 1);
}

fn tempfile_dir() -> tempfile::TempDir {
    tempfile::tempdir().expect("a temporary folder")
}
