//! What a run shows while it runs: lines as they happen, in a CI log (a pipe) and in a
//! terminal (a real pseudo-terminal).
#![expect(clippy::unwrap_used, reason = "test helpers fail loudly on purpose")]

mod common;

use std::io::{BufRead, BufReader};

use common::{Lab, path_str};
use serde_json::json;

fn slow_plan(lab: &Lab) -> std::path::PathBuf {
    lab.write(
        "slow.json",
        &json!({"steps": [
            {"id": "first", "tool": "echo", "args": {}},
            {"id": "wait", "tool": "sleep", "args": {"ms": 1500}, "depends_on": ["first"]},
            {"id": "items", "tool": "echo", "expand_on": [1, 2, 3], "args": {"n": "$each"}, "depends_on": ["first"]},
            {"id": "broken", "tool": "fail", "args": {"message": "on purpose"}, "depends_on": ["wait"]}
        ]}),
    )
}

#[test]
fn in_a_log_each_line_comes_as_it_happens_with_its_time() {
    let lab = Lab::new();
    let plan = slow_plan(&lab);
    let mut child = lab.spawn(&["run", path_str(&plan)]);
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let mut seen = Vec::new();
    // Lines arrive while the run still runs: `wait` has started and the process is alive.
    loop {
        let line = lines.next().unwrap().unwrap();
        seen.push(line.clone());
        if line.contains("▶ wait [sleep]") {
            assert!(
                child.try_wait().unwrap().is_none(),
                "the line came only at the end"
            );
            break;
        }
    }
    seen.extend(lines.map(Result::unwrap));
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    // The run id first; every line starts with the time.
    let time = |line: &str| {
        let stamp = line.split(' ').next().unwrap();
        stamp.len() == 12 && stamp.as_bytes()[2] == b':' && stamp.as_bytes()[8] == b'.'
    };
    assert!(seen.iter().all(|l| time(l)), "{seen:#?}");
    assert!(
        seen[0].contains(" run 01") && seen[0].contains("plan `slow` · 4 steps"),
        "{seen:#?}"
    );
    let position = |needle: &str| {
        seen.iter()
            .position(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no `{needle}` in {seen:#?}"))
    };
    assert!(position("▶ first [echo]") < position("✓ first [echo]"));
    assert!(position("▶ wait [sleep]") < position("✓ wait [sleep]"));
    assert!(position("▶ items [echo]  (map)") < position("✓ items [echo]"));
    assert!(position("✗ broken [fail]") > position("✓ wait [sleep]"));
    assert!(seen[position("✗ broken [fail]")].contains("E_TOOL: on purpose"));
    // Items are not lines of their own unless they fail.
    assert!(!seen.iter().any(|l| l.contains("items-0")), "{seen:#?}");
    // The summary still goes to stdout.
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("FAILED: 4 steps (3 ok, 1 failed), 3 map items in"),
        "items are counted apart from steps: {stdout}"
    );
}

fn in_a_terminal(lab: &Lab, args: &[&str], env: &[(&str, &str)]) -> String {
    common::in_a_terminal(lab, args, env, None)
}

#[test]
fn on_a_terminal_a_bar_names_the_running_step_and_lines_stay_above_it() {
    let lab = Lab::new();
    let plan = slow_plan(&lab);
    let screen = in_a_terminal(&lab, &["run", path_str(&plan)], &[("NO_COLOR", "1")]);
    // The bar counts steps, not items, and names what runs.
    assert!(screen.contains("/4 steps"), "{screen}");
    assert!(screen.contains("running: wait"), "{screen}");
    assert!(screen.contains("items: 3/3 done"), "{screen}");
    // Lines carry no time on a terminal, and the summary follows, without colour.
    assert!(screen.contains("▶ wait [sleep]"), "{screen}");
    assert!(screen.contains("FAILED: 4 steps"), "{screen}");
    assert!(!screen.contains("\u{1b}[32m"), "NO_COLOR: {screen}");
}

#[test]
fn the_summary_is_in_colour_on_a_terminal_unless_no_color() {
    let lab = Lab::new();
    let plan = lab.write(
        "mixed.json",
        &json!({"steps": [
            {"id": "good", "tool": "echo", "args": {}},
            {"id": "bad", "tool": "fail", "args": {}}
        ]}),
    );
    let screen = in_a_terminal(&lab, &["run", path_str(&plan)], &[]);
    assert!(screen.contains("\u{1b}[32m✓\u{1b}[0m good"), "{screen:?}");
    assert!(screen.contains("\u{1b}[31m✗\u{1b}[0m bad"), "{screen:?}");
    assert!(screen.contains("FAILED\u{1b}[0m: 2 steps"), "{screen:?}");
    // Piped, never.
    let output = lab.cli().args(["status", "last"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&output.stdout).contains('\u{1b}'));
}

#[test]
fn verbose_streams_what_programs_print_as_it_comes_redacted() {
    let lab = Lab::new();
    let plan = lab.write(
        "talk.json",
        &json!({"env": ["PLAN_TEST_TOKEN"], "steps": [{"id": "talk", "tool": "exec", "args": {
            "argv": ["sh", "-c", "echo first; echo \"token=$TOKEN\" >&2; sleep 1.5; echo second"],
            "env": {"TOKEN": "${env.PLAN_TEST_TOKEN}"}
        }}]}),
    );
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_plan-cli"))
        .current_dir(lab.dir.path())
        .env("NO_COLOR", "1")
        .env("PLAN_TEST_TOKEN", "s3cr3t-value")
        .env_remove("PLAN_DB")
        .args(["run", path_str(&plan), "-v"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    loop {
        let line = lines.next().unwrap().unwrap();
        seen.push(line.clone());
        if line.ends_with("  talk │ first") {
            assert!(
                child.try_wait().unwrap().is_none(),
                "the line came only at the end"
            );
            break;
        }
    }
    seen.extend(lines.map(Result::unwrap));
    assert!(child.wait().unwrap().success());
    let all = seen.join("\n");
    assert!(all.contains("  talk ! token=[redacted]"), "{all}");
    assert!(all.contains("  talk │ second"), "{all}");
    assert!(!all.contains("s3cr3t-value"), "{all}");
}
