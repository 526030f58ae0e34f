//! `verify_after_merge`: a merge queue that checks the combination of the base and each task
//! before the base moves. Two tasks that pass alone and break together (one renames a
//! function, the other calls it by its old name; no textual conflict), run with real git,
//! with and without the option; and kill -9 during a combination's check, then resume.

#![expect(clippy::unwrap_used, reason = "test helpers fail loudly on purpose")]
mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{Lab, assert_execute_state, git, path_str};
use serde_json::{Value, json};

/// `agent.sh ID ATTEMPT`: `rename` renames `calc.add` to `calc.plus`; `report` adds a
/// `report.py` that calls `calc.add`. Each passes its own check. A later attempt (after the
/// combination failed) merges the base into its branch and makes both agree.
const AGENT: &str = r#"#!/bin/sh
set -e
case "$1/$2" in
  rename/1) sed -i 's/def add/def plus/' calc.py ;;
  report/1) printf 'import calc\nassert calc.add(1, 2) == 3\n' > report.py ;;
  */*) git merge -q --no-edit trunk
       sed -i 's/def add/def plus/' calc.py
       for f in *.py; do sed -i 's/calc\.add(/calc.plus(/' "$f"; done ;;
esac
"#;

/// Runs every Python file of the folder it is in: the whole project's check.
const CHECK_ALL: &str = "for f in *.py; do python3 -B \"$f\" || exit 1; done";

fn repo(lab: &Lab) -> PathBuf {
    let dir = lab.dir.path().join("repo");
    std::fs::create_dir_all(&dir).unwrap();
    git(&dir, &["init", "-q", "-b", "trunk"]);
    std::fs::write(dir.join("calc.py"), "def add(a, b):\n    return a + b\n").unwrap();
    std::fs::write(dir.join("agent.sh"), AGENT).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.join("agent.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    git(&dir, &["add", "-A"]);
    git(&dir, &["commit", "-qm", "start"]);
    dir
}

/// The two tasks, in parallel from the same base; with `after_merge` checks when given.
fn plan(after_merge: Option<Value>) -> Value {
    let task = |id: &str, check: &str| {
        json!({"id": id, "task": {
            "implement": {"tool": "exec", "args": {"argv": ["./agent.sh", "${task.id}", "${task.attempt}"]}},
            "verify": [{"argv": ["python3", "-B", "-c", check]}]
        }})
    };
    let mut workspace = json!({"repo": ".", "max_parallel": 2});
    if let Some(checks) = after_merge {
        workspace["verify_after_merge"] = checks;
    }
    json!({"id": "pair", "workspace": workspace, "steps": [
        task("rename", "import calc; assert calc.plus(2, 3) == 5"),
        task("report", "import report"),
    ]})
}

/// Runs CHECK_ALL at every commit of the base's first-parent history; the commits where it
/// fails.
fn broken_commits(lab: &Lab, repo: &Path) -> Vec<String> {
    let probe = lab.dir.path().join("probe");
    let _ = std::fs::remove_dir_all(&probe);
    git(
        repo,
        &[
            "worktree",
            "add",
            "-q",
            "--detach",
            path_str(&probe),
            "trunk",
        ],
    );
    let commits = git(repo, &["rev-list", "--first-parent", "trunk"]);
    let mut broken = Vec::new();
    for commit in commits.lines() {
        git(&probe, &["checkout", "-q", "--detach", commit]);
        let ok = std::process::Command::new("sh")
            .args(["-c", CHECK_ALL])
            .current_dir(&probe)
            .output()
            .unwrap()
            .status
            .success();
        if !ok {
            broken.push(commit.to_owned());
        }
    }
    git(repo, &["worktree", "remove", "--force", path_str(&probe)]);
    broken
}

fn run(lab: &Lab, repo: &Path, plan: &Value) -> (i32, Value, Value) {
    let plan_path = repo.join("plan.json");
    std::fs::write(&plan_path, plan.to_string()).unwrap();
    let state_path = lab.dir.path().join("execute-state.json");
    let (code, report) = lab.json(&[
        "run",
        path_str(&plan_path),
        "--json",
        "--state-file",
        path_str(&state_path),
    ]);
    let state: Value =
        serde_json::from_str(&std::fs::read_to_string(&state_path).unwrap()).unwrap();
    assert_execute_state(&state);
    (code, report, state)
}

#[test]
fn without_verify_after_merge_two_good_tasks_land_a_broken_base() {
    let lab = Lab::new();
    let repo = repo(&lab);
    // plan.json is not Python; the check runs *.py only.
    let (code, report, _) = run(&lab, &repo, &plan(None));
    assert_eq!(code, 0, "{report}");
    let broken = broken_commits(&lab, &repo);
    assert_eq!(
        broken.len(),
        1,
        "the second merge breaks the base: {broken:?}"
    );
}

#[test]
fn verify_after_merge_never_lets_the_base_hold_a_failing_combination() {
    let lab = Lab::new();
    let repo = repo(&lab);
    let checks = json!([{"argv": ["sh", "-c", CHECK_ALL]}]);
    let (code, report, state) = run(&lab, &repo, &plan(Some(checks)));
    assert_eq!(code, 0, "{report}");
    assert_eq!(broken_commits(&lab, &repo), Vec::<String>::new());
    // The task that merged second failed its combination once, as a verification failure
    // naming the check, and fixed it from the feedback.
    let second = ["rename", "report"]
        .into_iter()
        .find(|id| state["tasks"][id]["attempts"] == 2)
        .unwrap_or_else(|| panic!("one task needed a second attempt: {state}"));
    let error = &state["tasks"][second]["errors"][0];
    assert_eq!(error["type"], "verification_failed", "{error}");
    assert_eq!(error["step"], format!("sh -c {CHECK_ALL}"));
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .starts_with("merged with `trunk`: "),
        "{error}"
    );
    let feedback = state["tasks"][second]["retry_feedback"][0]["feedback"]
        .as_str()
        .unwrap();
    assert!(
        feedback.contains("verify_after_merge") && feedback.contains("AttributeError"),
        "{feedback}"
    );
    // Each task merged once; the records name the combination's checks.
    let merges = git(&repo, &["log", "--merges", "--format=%s", "trunk"]);
    for id in ["rename", "report"] {
        let count = merges
            .lines()
            .filter(|l| l.starts_with(&format!("Merge task {id}:")))
            .count();
        assert_eq!(count, 1, "{merges}");
    }
    let ids: Vec<&str> = (report["records"].as_array().unwrap().iter())
        .filter_map(|r| r["step_id"].as_str())
        .collect();
    assert!(
        ids.iter()
            .any(|id| id.starts_with(&format!("{second}/merge-check-1#"))),
        "{ids:?}"
    );
}

/// A model's plan cannot smuggle a program in through `verify_after_merge`: its checks are
/// calls the policy sees.
#[test]
fn verify_after_merge_checks_are_calls_the_policy_sees() {
    let lab = Lab::new();
    let repo = repo(&lab);
    let plan_path = repo.join("plan.json");
    let mut plan = plan(Some(json!([{"argv": ["sh", "-c", "true"]}])));
    plan["steps"] = json!([{"id": "hi", "tool": "echo", "args": {"text": "hi"}}]);
    std::fs::write(&plan_path, plan.to_string()).unwrap();
    let policy = lab.dir.path().join("policy.json");
    std::fs::write(
        &policy,
        r#"{"allow_tools": ["echo"], "allow_workspace": true}"#,
    )
    .unwrap();
    let stderr = lab.fails(
        &[
            "validate",
            path_str(&plan_path),
            "--policy",
            path_str(&policy),
        ],
        2,
    );
    assert!(
        stderr.contains("verify_after_merge"),
        "the refusal names where the call is: {stderr}"
    );
}

/// kill -9 while a combination is being checked, then resume: no task merged twice, and
/// the base never holds a commit that fails the check.
#[test]
fn kill_9_during_a_combinations_check_then_resume() {
    let lab = Lab::new();
    let repo = repo(&lab);
    let marker = lab.dir.path().join("checking");
    let slow = format!("touch '{}'; sleep 2; {CHECK_ALL}", marker.display());
    let plan_value = plan(Some(json!([{"argv": ["sh", "-c", slow]}])));
    let plan_path = repo.join("plan.json");
    std::fs::write(&plan_path, plan_value.to_string()).unwrap();
    let mut run_id: Option<String> = None;
    let mut kills = 0;
    for round in 0..10 {
        let _ = std::fs::remove_file(&marker);
        let mut child = match &run_id {
            None => lab.spawn(&["run", path_str(&plan_path)]),
            Some(id) => lab.spawn(&["resume", id]),
        };
        // Killed once a combination's check has started (the marker), if it does.
        let mut finished = false;
        for _ in 0..400 {
            if child.try_wait().unwrap().is_some() {
                finished = true;
                break;
            }
            if marker.exists() {
                std::thread::sleep(Duration::from_millis(300));
                break;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        if !finished && child.try_wait().unwrap().is_none() {
            child.kill().unwrap();
            kills += 1;
        }
        child.wait().unwrap();
        if run_id.is_none() {
            let (_, runs) = lab.json(&["runs", "--json"]);
            run_id = runs[0]["run_id"].as_str().map(str::to_owned);
        }
        // The base is never broken, whenever the kill lands.
        assert_eq!(broken_commits(&lab, &repo), Vec::<String>::new());
        if finished || kills >= 3 {
            break;
        }
        assert!(round < 9, "the run never finished");
    }
    assert!(kills >= 1, "no kill landed during a check");
    eprintln!("{kills} kills during a combination's check");
    let id = run_id.unwrap();
    let output = lab
        .cli()
        .args(["resume", &id, "--json"])
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["task_status"], "COMPLETED", "{report}");
    assert_eq!(broken_commits(&lab, &repo), Vec::<String>::new());
    let merges = git(&repo, &["log", "--merges", "--format=%s", "trunk"]);
    for task in ["rename", "report"] {
        let count = merges
            .lines()
            .filter(|l| l.starts_with(&format!("Merge task {task}:")))
            .count();
        assert_eq!(
            count, 1,
            "{task} merged {count} times after {kills} kills:\n{merges}"
        );
    }
}

/// A link (or a folder) at the trial checkout's place that plan-cli did not make is refused,
/// and the task waits for a person: nothing is checked out or cleaned there.
#[test]
fn a_trial_checkout_plan_cli_did_not_make_is_never_used() {
    let lab = Lab::new();
    let repo = repo(&lab);
    let worktrees = lab.dir.path().join(".worktrees");
    std::fs::create_dir_all(&worktrees).unwrap();
    // A link to the repository itself: used as the trial, it would lose these.
    std::os::unix::fs::symlink(&repo, worktrees.join(".trial-trunk")).unwrap();
    std::fs::write(
        repo.join("calc.py"),
        "def add(a, b):\n    return a + b  # mine\n",
    )
    .unwrap();
    std::fs::write(repo.join("notes.txt"), "not committed\n").unwrap();
    let checks = json!([{"argv": ["sh", "-c", CHECK_ALL]}]);
    let mut one = plan(Some(checks));
    one["steps"].as_array_mut().unwrap().truncate(1);
    let plan_path = lab.dir.path().join("plan.json");
    std::fs::write(&plan_path, one.to_string()).unwrap();
    let mut plan_in_repo = one.clone();
    plan_in_repo["workspace"]["repo"] = json!(path_str(&repo));
    std::fs::write(&plan_path, plan_in_repo.to_string()).unwrap();
    let (_, report) = lab.json(&["run", path_str(&plan_path), "--json"]);
    assert_eq!(report["task_status"], "WAITING", "{report}");
    assert!(
        report
            .to_string()
            .contains("is not plan-cli's trial checkout"),
        "{report}"
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("notes.txt")).unwrap(),
        "not committed\n"
    );
    assert!(
        std::fs::read_to_string(repo.join("calc.py"))
            .unwrap()
            .contains("# mine")
    );
    assert_eq!(
        git(&repo, &["rev-parse", "--abbrev-ref", "HEAD"]).trim(),
        "trunk"
    );
}
