//! Task steps end to end, with real git in temporary repositories: an implementer script that
//! fixes its work from the feedback, a task that never passes, merge conflicts handled both
//! ways, and kill -9 at random moments of a breakdown in layers. Every state file written is
//! checked against the JSON Schema of execute-state.json 2.0.

#![expect(clippy::unwrap_used, reason = "test helpers fail loudly on purpose")]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{Lab, assert_execute_state, git, path_str};
use serde_json::{Value, json};

/// A repository at `<lab>/repo` on branch `trunk` (not `main`: nothing may assume the name),
/// with `files` committed.
fn repo(lab: &Lab, files: &[(&str, &str)]) -> PathBuf {
    let dir = lab.dir.path().join("repo");
    std::fs::create_dir_all(&dir).unwrap();
    git(&dir, &["init", "-q", "-b", "trunk"]);
    for (name, text) in files {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        if name.ends_with(".sh") {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
    }
    git(&dir, &["add", "-A"]);
    git(&dir, &["commit", "-qm", "start"]);
    dir
}

/// Runs a plan in the repository with a state file; the exit code, the report and the state.
fn run(lab: &Lab, repo: &Path, plan: &Value, extra: &[&str]) -> (i32, Value, Value) {
    let plan_path = repo.join("plan.json");
    std::fs::write(&plan_path, serde_json::to_string_pretty(plan).unwrap()).unwrap();
    let state = lab.dir.path().join("execute-state.json");
    let mut args = vec![
        "run",
        path_str(&plan_path),
        "--json",
        "--state-file",
        path_str(&state),
    ];
    args.extend_from_slice(extra);
    let (code, report) = lab.json(&args);
    let document: Value = serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap();
    assert_execute_state(&document);
    (code, report, document)
}

fn worktrees(lab: &Lab) -> PathBuf {
    lab.dir.path().join(".worktrees")
}

/// The stand-in coding agent: writes `calc.py`; wrong on its own, right once the feedback
/// shows the assertion that failed.
const AGENT: &str = r#"#!/bin/sh
case "$2" in
  *AssertionError*) printf 'def add(a, b):\n    return a + b\n' > calc.py ;;
  *) printf 'def add(a, b):\n    return a * b\n' > calc.py ;;
esac
"#;

fn calc_task(id: &str, depends_on: &[&str], layer: &str) -> Value {
    json!({
        "id": id,
        "title": format!("make add add ({id})"),
        "layer": layer,
        "depends_on": depends_on,
        "task": {
            "spec": "calc.add returns the sum",
            "implement": {"tool": "exec", "args": {"argv": ["${task.worktree}/agent.sh", "${task.id}", "${task.feedback}"]}},
            "verify": [{"argv": ["python3", "-B", "-c", "import calc; assert calc.add(2, 3) == 5, calc.add(2, 3)"]}]
        }
    })
}

#[test]
fn a_task_that_fails_verification_is_fixed_from_its_feedback_and_merged() {
    let lab = Lab::new();
    let repo = repo(
        &lab,
        &[
            ("agent.sh", AGENT),
            ("calc.py", "def add(a, b):\n    return 0\n"),
        ],
    );
    let plan = json!({"id": "calc", "workspace": {"repo": "."}, "steps": [calc_task("L1-001", &[], "1-core")]});
    let (code, report, state) = run(&lab, &repo, &plan, &[]);
    assert_eq!(code, 0, "{report}");
    // Merged into the base with a merge commit (two parents) naming the task.
    let log = git(&repo, &["log", "--merges", "--format=%s", "trunk"]);
    assert_eq!(log.trim(), "Merge task L1-001: make add add (L1-001)");
    assert_eq!(
        std::fs::read_to_string(repo.join("calc.py")).unwrap(),
        "def add(a, b):\n    return a + b\n"
    );
    // The worktree and branch are gone; the base is clean.
    assert!(!worktrees(&lab).join("L1-001").exists());
    assert_eq!(git(&repo, &["branch", "--list", "worktree-*"]).trim(), "");
    assert_eq!(
        git(&repo, &["status", "--porcelain", "--untracked-files=no"]),
        ""
    );

    let task = &state["tasks"]["L1-001"];
    assert_eq!(task["status"], "completed");
    assert_eq!(task["attempts"], 2);
    // The summary counts the task's calls as its own, not as a block's nodes.
    let run_id = report["run_id"].as_str().unwrap();
    let status = lab.cli().args(["status", run_id]).output().unwrap();
    let summary = String::from_utf8_lossy(&status.stdout);
    assert!(
        summary.contains(" task calls") && !summary.contains("block node"),
        "{summary}"
    );
    assert_eq!(task["errors"][0]["type"], "verification_failed");
    assert_eq!(task["errors"][0]["attempt"], 1);
    assert_eq!(task["retry_feedback"][0]["attempt"], 2);
    let feedback = task["retry_feedback"][0]["feedback"].as_str().unwrap();
    assert!(feedback.contains("AssertionError: 6"), "{feedback}");
    let kinds: Vec<&str> = task["commits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["implementation", "fix"]);
    assert_eq!(
        task["commits"][0]["message"],
        "[L1-001] make add add (L1-001)"
    );
    // plan-cli made the fix commit: its title repeats the failure, and nothing says what
    // was fixed, so `fixed` is left out.
    assert!(
        task["commits"][1]["message"]
            .as_str()
            .unwrap()
            .starts_with("[L1-001] Fix: ")
    );
    assert!(task["commits"][1].get("fixed").is_none(), "{task}");
    assert!(task["worktree_path"].is_null(), "removed once merged");
    // Each recorded commit is in the base.
    for commit in task["commits"].as_array().unwrap() {
        git(
            &repo,
            &[
                "merge-base",
                "--is-ancestor",
                commit["hash"].as_str().unwrap(),
                "trunk",
            ],
        );
    }
    assert!(task["merged_at"].is_string());
    assert_eq!(state["status"], "completed");
    assert_eq!(state["layers"]["1-core"]["status"], "completed");
    assert_eq!(state["worktrees"]["L1-001"]["status"], "cleaned");
    assert_eq!(
        state["merge_queue"],
        json!([{"task_id": "L1-001", "priority": 1, "status": "merged"}])
    );
    assert_eq!(state["metrics"]["total_retries"], 1);
    assert_eq!(state["options"]["max_parallel"], 3);
    let record = common::record(&report, "L1-001");
    assert_eq!(record["result"]["attempts"], 2);
    // Each change of the task is an event, in order.
    let run_id = report["run_id"].as_str().unwrap();
    let events = lab.cli().args(["events", run_id]).output().unwrap();
    let changes: Vec<String> = String::from_utf8_lossy(&events.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|event| event["type"] == "task.changed")
        .map(|event| format!("{}#{}", event["reason"].as_str().unwrap(), event["attempt"]))
        .collect();
    assert_eq!(
        changes,
        [
            "in_progress#1",
            "verifying#1",
            "failed#1",
            "in_progress#2",
            "verifying#2",
            "verified#2",
            "merging#2",
            "completed#2"
        ]
    );
}

#[test]
fn a_task_that_never_passes_is_abandoned_and_its_dependents_skipped() {
    let lab = Lab::new();
    let never = "#!/bin/sh\necho \"try $1\" >> tries.txt\n";
    let repo = repo(&lab, &[("never.sh", never)]);
    let plan = json!({"id": "never", "workspace": {"repo": ".", "max_attempts": 3}, "steps": [
        {"id": "L1-001", "layer": "1-core", "task": {
            "implement": {"tool": "exec", "args": {"argv": ["${task.worktree}/never.sh", "${task.attempt}"]}},
            "verify": [{"argv": ["sh", "-c", "echo all good"], "contains": "ALL GOOD"}]
        }},
        {"id": "L2-001", "layer": "2-more", "depends_on": ["L1-001"], "task": {
            "implement": {"tool": "exec", "args": {"argv": ["true"]}}
        }}
    ]});
    let (code, report, state) = run(&lab, &repo, &plan, &[]);
    assert_eq!(code, 1, "{report}");
    let task = &state["tasks"]["L1-001"];
    assert_eq!(task["status"], "abandoned");
    assert_eq!(task["attempts"], 3);
    assert_eq!(task["errors"].as_array().unwrap().len(), 3);
    assert!(
        task["errors"][2]["message"]
            .as_str()
            .unwrap()
            .contains("does not contain `ALL GOOD`"),
        "{task}"
    );
    assert_eq!(state["tasks"]["L2-001"]["status"], "pending");
    assert_eq!(state["layers"]["1-core"]["status"], "blocked");
    assert_eq!(state["layers"]["2-more"]["status"], "blocked");
    assert_eq!(state["abandoned"], json!(["L1-001"]));
    assert_eq!(state["status"], "abandoned");
    // The worktree is kept for a person, with every attempt's commit; the base is untouched.
    let kept = worktrees(&lab).join("L1-001");
    assert_eq!(
        std::fs::read_to_string(kept.join("tries.txt")).unwrap(),
        "try 1\ntry 2\ntry 3\n"
    );
    assert_eq!(state["worktrees"]["L1-001"]["status"], "abandoned");
    assert_eq!(git(&repo, &["log", "--format=%s", "trunk"]).trim(), "start");
    let record = common::record(&report, "L2-001");
    assert_eq!(record["skipped"], true);
    assert_eq!(
        common::record(&report, "L1-001")["error"]["code"],
        "E_TASK_ABANDONED"
    );
}

#[test]
fn an_attempt_that_changes_nothing_fails_clearly() {
    let lab = Lab::new();
    let repo = repo(&lab, &[("readme", "x\n")]);
    let plan = json!({"id": "idle", "workspace": {"repo": ".", "max_attempts": 1}, "steps": [
        {"id": "T1", "task": {"implement": {"tool": "exec", "args": {"argv": ["true"]}}}}
    ]});
    let (code, _, state) = run(&lab, &repo, &plan, &[]);
    assert_eq!(code, 1);
    let error = &state["tasks"]["T1"]["errors"][0];
    assert_eq!(error["type"], "implementation_error");
    assert_eq!(
        error["message"],
        "attempt 1 changed nothing in the worktree"
    );
    assert_eq!(git(&repo, &["log", "--format=%s", "trunk"]).trim(), "start");
}

/// Two tasks that write the same line: whichever merges second conflicts.
fn conflicting_plan(on_conflict: &str, agent: &str) -> Value {
    let task = |id: &str| {
        json!({"id": id, "layer": "1-both", "task": {
            "implement": {"tool": "exec", "args": {"argv": [agent, "${task.id}", "${task.feedback}"]}},
            "verify": [{"argv": ["test", "-s", "shared.txt"]}]
        }})
    };
    json!({"id": "clash", "workspace": {"repo": ".", "on_conflict": on_conflict, "max_parallel": 2},
           "steps": [task("A"), task("B")]})
}

/// Writes its id into shared.txt; told of a conflict, merges the base in and keeps both.
const MERGING_AGENT: &str = r#"#!/bin/sh
case "$2" in
  *conflicted*)
    git merge -q trunk >/dev/null 2>&1
    printf 'A\nB\n' > shared.txt
    git add shared.txt && git -c user.name=agent -c user.email=agent@localhost commit -qm "resolve with trunk" ;;
  *) echo "$1" > shared.txt; sleep 0.2 ;;
esac
"#;

#[test]
fn a_merge_conflict_is_a_failed_attempt_and_the_next_attempt_resolves_it() {
    let lab = Lab::new();
    let repo = repo(
        &lab,
        &[("agent.sh", MERGING_AGENT), ("shared.txt", "nobody\n")],
    );
    let agent = repo.join("agent.sh");
    let (code, report, state) = run(
        &lab,
        &repo,
        &conflicting_plan("retry", path_str(&agent)),
        &[],
    );
    assert_eq!(code, 0, "{report}\n{state}");
    assert_eq!(
        std::fs::read_to_string(repo.join("shared.txt")).unwrap(),
        "A\nB\n"
    );
    assert_eq!(
        git(&repo, &["status", "--porcelain", "--untracked-files=no"]),
        ""
    );
    // One of them conflicted (which depends on timing), once.
    let conflicted: Vec<&str> = ["A", "B"]
        .into_iter()
        .filter(|id| state["tasks"][id]["attempts"] == 2)
        .collect();
    assert_eq!(conflicted.len(), 1, "{state}");
    let error = &state["tasks"][conflicted[0]]["errors"][0];
    assert_eq!(error["type"], "merge_conflict");
    assert!(
        error["message"].as_str().unwrap().contains("shared.txt"),
        "{error}"
    );
    let feedback = state["tasks"][conflicted[0]]["retry_feedback"][0]["feedback"]
        .as_str()
        .unwrap();
    assert!(feedback.contains("git merge trunk"), "{feedback}");
    // Each task merged once (the agent's own merge of the base is not plan-cli's).
    let merges = git(&repo, &["log", "--merges", "--format=%s", "trunk"]);
    let tasks = merges
        .lines()
        .filter(|l| l.starts_with("Merge task "))
        .count();
    assert_eq!(tasks, 2, "{merges}");
    let queue: Vec<&str> = state["merge_queue"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["status"].as_str().unwrap())
        .collect();
    assert_eq!(queue, ["merged", "merged"]);
}

/// Two tasks that write the same line under `on_conflict: wait`: the run halts WAITING on
/// the second merge. The repository, the run's report and its state file.
fn waiting_on_a_conflict(lab: &Lab) -> (PathBuf, Value, Value) {
    let simple = "#!/bin/sh\necho \"$1\" > shared.txt\nsleep 0.2\n";
    let repo = repo(lab, &[("agent.sh", simple), ("shared.txt", "nobody\n")]);
    let agent = repo.join("agent.sh");
    let (code, report, state) = run(lab, &repo, &conflicting_plan("wait", path_str(&agent)), &[]);
    assert_eq!(code, 5, "WAITING: {report}");
    (repo, report, state)
}

#[test]
fn on_conflict_wait_halts_the_run_until_a_person_resolves_it() {
    let lab = Lab::new();
    let (repo, report, state) = waiting_on_a_conflict(&lab);
    let run_id = report["run_id"].as_str().unwrap().to_owned();
    assert_eq!(state["status"], "stopped");
    // The base is clean, not mid-merge.
    assert_eq!(
        git(&repo, &["status", "--porcelain", "--untracked-files=no"]),
        ""
    );
    assert!(!repo.join(".git/MERGE_HEAD").exists());
    let waiting = ["A", "B"]
        .into_iter()
        .find(|id| state["tasks"][id]["status"] == "verified")
        .expect("one task waits, verified");
    assert_eq!(
        state["tasks"][waiting]["errors"][0]["type"],
        "merge_conflict"
    );
    let pending = report["pending_approvals"].to_string();
    assert!(pending.contains(&format!("{waiting}/merge#1")), "{pending}");

    // A person resolves it in the worktree, then resumes.
    let tree = worktrees(&lab).join(waiting);
    let _ = Command::new("git")
        .args(["merge", "-q", "trunk"])
        .current_dir(&tree)
        .output()
        .unwrap();
    std::fs::write(tree.join("shared.txt"), "A\nB\n").unwrap();
    git(&tree, &["add", "shared.txt"]);
    git(&tree, &["commit", "-qm", "resolved by hand"]);
    let (code, report) = lab.json(&["resume", &run_id, "--json"]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(
        std::fs::read_to_string(repo.join("shared.txt")).unwrap(),
        "A\nB\n"
    );
    let merges = git(&repo, &["log", "--merges", "--format=%s", "trunk"]);
    let tasks = merges
        .lines()
        .filter(|l| l.starts_with("Merge task "))
        .count();
    assert_eq!(tasks, 2, "{merges}");
}

#[test]
fn a_merge_over_uncommitted_changes_halts_the_run_and_resume_merges_without_redoing_the_work() {
    let lab = Lab::new();
    // The agent counts its runs outside the repository.
    let runs = lab.dir.path().join("runs.txt");
    let agent = format!(
        "#!/bin/sh\necho run >> '{}'\nprintf 'def add(a, b):\\n    return a + b\\n' > calc.py\n",
        runs.display()
    );
    let repo = repo(
        &lab,
        &[
            ("agent.sh", &agent),
            ("calc.py", "def add(a, b):\n    return 0\n"),
        ],
    );
    // A person's edit, not committed, of the file the task changes.
    let mine = "def add(a, b):\n    return 0  # mine\n";
    std::fs::write(repo.join("calc.py"), mine).unwrap();
    let plan = json!({"id": "dirty", "workspace": {"repo": "."}, "steps": [
        calc_task("T1", &[], "1-calc"),
        {"id": "T2", "depends_on": ["T1"], "task": {
            "implement": {"tool": "exec", "args": {"argv": ["touch", "after.txt"]}}
        }}
    ]});
    let (code, report, state) = run(&lab, &repo, &plan, &[]);
    assert_eq!(code, 5, "WAITING: {report}");
    let pending = &report["pending_approvals"][0];
    assert_eq!(pending["step_id"], "T1/merge#1", "{report}");
    let reason = pending["reason"].as_str().unwrap();
    assert!(
        reason.contains("would be overwritten by merge: calc.py") && reason.contains("stash"),
        "{reason}"
    );
    assert_eq!(state["tasks"]["T1"]["status"], "verified", "{state}");
    assert_eq!(std::fs::read_to_string(repo.join("calc.py")).unwrap(), mine);
    assert!(!repo.join("after.txt").exists(), "its dependent waits");

    git(&repo, &["stash", "-q"]);
    let run_id = report["run_id"].as_str().unwrap();
    let (code, report) = lab.json(&["resume", run_id, "--json"]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(
        std::fs::read_to_string(repo.join("calc.py")).unwrap(),
        "def add(a, b):\n    return a + b\n"
    );
    assert!(repo.join("after.txt").exists(), "its dependent ran");
    assert_eq!(
        std::fs::read_to_string(&runs).unwrap(),
        "run\n",
        "the verified work was merged, not done again"
    );
}

#[test]
fn a_plan_with_tasks_but_no_repository_is_refused_before_it_runs() {
    let lab = Lab::new();
    let plan = lab.write(
        "p.json",
        &json!({"workspace": {"repo": "nowhere"}, "steps": [
            {"id": "T1", "task": {"implement": {"tool": "exec", "args": {"argv": ["true"]}}}}
        ]}),
    );
    let stderr = lab.fails(&["run", path_str(&plan)], 2);
    assert!(stderr.contains("is not a folder"), "{stderr}");
    let (_, runs) = lab.json(&["runs", "--json"]);
    assert_eq!(runs, json!([]), "no run is recorded");
}

/// A task whose worktree cannot be made (a branch of its name that plan-cli did not make is
/// in the way) has failed its attempt: `failed` in the state file with the error, not
/// `pending` with an attempt counted; no worktree is listed for it.
#[test]
fn a_task_whose_worktree_cannot_be_made_is_failed_with_the_error() {
    let lab = Lab::new();
    let repo = repo(&lab, &[("agent.sh", AGENT)]);
    git(&repo, &["branch", "worktree-T1"]);
    let plan = json!({"id": "blocked", "workspace": {"repo": "."}, "steps": [calc_task("T1", &[], "1-core")]});
    let (code, report, state) = run(&lab, &repo, &plan, &[]);
    assert_eq!(code, 1, "{report}");
    let error = &common::record(&report, "T1")["error"];
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("cannot make the worktree of task `T1`"),
        "{error}"
    );
    let task = &state["tasks"]["T1"];
    assert_eq!(task["status"], "failed", "{state}");
    assert_eq!(task["attempts"], 1, "{state}");
    assert_eq!(task["errors"][0]["attempt"], 1, "{state}");
    assert_eq!(task["errors"][0]["type"], "implementation_error", "{state}");
    assert_eq!(task["errors"][0]["step"], "git worktree add", "{state}");
    assert!(
        task["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("the branch `worktree-T1` exists and plan-cli did not make it"),
        "{state}"
    );
    assert_eq!(state["failed"], json!(["T1"]), "{state}");
    assert_eq!(state["worktrees"], json!({}), "{state}");
    assert_eq!(state["metrics"]["total_attempts"], 1, "{state}");
    // With the branch out of the way, `resume --retry-failed` runs the task (its attempts
    // started over, as for an abandoned task).
    git(&repo, &["branch", "-D", "worktree-T1"]);
    let run_id = report["run_id"].as_str().unwrap();
    let state_path = lab.dir.path().join("execute-state.json");
    let (code, report) = lab.json(&[
        "resume",
        run_id,
        "--json",
        "--retry-failed",
        "--state-file",
        path_str(&state_path),
    ]);
    assert_eq!(code, 0, "{report}");
    let state: Value =
        serde_json::from_str(&std::fs::read_to_string(&state_path).unwrap()).unwrap();
    common::assert_execute_state(&state);
    assert_eq!(state["tasks"]["T1"]["status"], "completed", "{state}");
    assert_eq!(state["worktrees"]["T1"]["status"], "cleaned", "{state}");
}

#[test]
fn task_steps_are_checked_when_the_plan_is_read() {
    let lab = Lab::new();
    let plan = lab.write(
        "p.json",
        &json!({"steps": [
            {"id": "T1", "task": {"implement": {"tool": "exce", "args": {}}, "verify": [{"argv": []}]}}
        ]}),
    );
    let stderr = lab.fails(&["validate", path_str(&plan)], 2);
    assert!(stderr.contains("needs the plan's `workspace`"), "{stderr}");
    assert!(stderr.contains("a check needs a program"), "{stderr}");
    assert!(stderr.contains("exce"), "{stderr}");
}

/// kill -9 at random moments of a breakdown of 6 tasks in 3 layers (max_parallel 3), then
/// `resume`, until it finishes: no task merged twice, no recorded commit lost, the base never
/// left mid-merge.
#[test]
fn kill_9_at_any_moment_then_resume_merges_each_task_once() {
    let lab = Lab::new();
    let agent = "#!/bin/sh\necho \"$1 $2\" >> \"$1.txt\"\nsleep 0.$(( 2 + $(od -An -N1 -tu1 /dev/urandom) % 6 ))\n";
    let repo = repo(&lab, &[("agent.sh", agent)]);
    let task = |id: &str, layer: &str, deps: &[&str]| {
        json!({"id": id, "layer": layer, "depends_on": deps, "task": {
            "implement": {"tool": "exec", "args": {"argv": ["${task.worktree}/agent.sh", "${task.id}", "${task.attempt}"]}},
            "verify": [{"argv": ["test", "-s", format!("{id}.txt")]}]
        }})
    };
    let plan = json!({"id": "layers", "workspace": {"repo": ".", "max_parallel": 3}, "steps": [
        task("L0-001", "0-setup", &[]), task("L0-002", "0-setup", &[]),
        task("L1-001", "1-core", &["L0-001"]), task("L1-002", "1-core", &["L0-001", "L0-002"]),
        task("L2-001", "2-top", &["L1-001"]), task("L2-002", "2-top", &["L1-002"]),
    ]});
    let plan_path = repo.join("plan.json");
    std::fs::write(&plan_path, serde_json::to_string_pretty(&plan).unwrap()).unwrap();
    let state_path = lab.dir.path().join("execute-state.json");
    let mut run_id: Option<String> = None;
    let mut kills = 0;
    let mut seed = 0x9e37_79b9_u64;
    for round in 0..60 {
        let child = match &run_id {
            None => lab.spawn(&[
                "run",
                path_str(&plan_path),
                "--state-file",
                path_str(&state_path),
            ]),
            Some(id) => lab.spawn(&["resume", id, "--state-file", path_str(&state_path)]),
        };
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        // The first kills land early (creating worktrees, implementing), later ones anywhere.
        let delay = Duration::from_millis(100 + seed % (300 + 200 * round.min(5)));
        let mut child = child;
        std::thread::sleep(delay);
        let finished = child.try_wait().unwrap().is_some();
        if !finished {
            child.kill().unwrap();
            kills += 1;
        }
        child.wait().unwrap();
        if run_id.is_none() {
            let (_, runs) = lab.json(&["runs", "--json"]);
            run_id = runs[0]["run_id"].as_str().map(str::to_owned);
        }
        if finished {
            break;
        }
        assert!(round < 59, "the run never finished");
    }
    // A last resume finishes whatever is left (and reports a finished run as it is).
    let id = run_id.expect("a run was recorded");
    let output = lab
        .cli()
        .args([
            "resume",
            &id,
            "--json",
            "--state-file",
            path_str(&state_path),
        ])
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["task_status"], "COMPLETED", "{report}");
    assert!(kills >= 3, "only {kills} kills landed");
    eprintln!("{kills} kills");

    let state: Value =
        serde_json::from_str(&std::fs::read_to_string(&state_path).unwrap()).unwrap();
    assert_execute_state(&state);
    let merges = git(&repo, &["log", "--merges", "--format=%s", "trunk"]);
    for id in ["L0-001", "L0-002", "L1-001", "L1-002", "L2-001", "L2-002"] {
        let count = merges
            .lines()
            .filter(|line| line.starts_with(&format!("Merge task {id}:")))
            .count();
        assert_eq!(
            count, 1,
            "{id} merged {count} times ({kills} kills):\n{merges}"
        );
        assert!(
            repo.join(format!("{id}.txt")).exists(),
            "{id}'s work is lost"
        );
        for commit in state["tasks"][id]["commits"].as_array().unwrap() {
            git(
                &repo,
                &[
                    "merge-base",
                    "--is-ancestor",
                    commit["hash"].as_str().unwrap(),
                    "trunk",
                ],
            );
        }
        assert_eq!(state["tasks"][id]["status"], "completed");
    }
    assert!(!repo.join(".git/MERGE_HEAD").exists());
    assert_eq!(
        git(&repo, &["status", "--porcelain", "--untracked-files=no"]),
        ""
    );
}

/// A breakdown folder shaped like a PRD-to-tasks breakdown's `docs/tasks/<slug>/`.
fn breakdown(repo: &Path) -> PathBuf {
    let dir = repo.join("docs/tasks/greeter");
    std::fs::create_dir_all(dir.join("1-foundation")).unwrap();
    std::fs::create_dir_all(dir.join("2-backend")).unwrap();
    std::fs::write(
        dir.join("manifest.json"),
        r#"{"prd_slug": "greeter", "prd_name": "Greeter", "generated_at": "2026-01-10T10:00:00Z"}"#,
    )
    .unwrap();
    std::fs::write(
        dir.join("layer_plan.json"),
        r#"{"layers": [{"name": "1-foundation", "tasks": ["L1-001"]}, {"name": "2-backend", "tasks": ["L2-001"]}],
            "dependency_graph": {"L1-001": [], "L2-001": ["L1-001"]}}"#,
    )
    .unwrap();
    let task = |id: &str, name: &str, layer: &str, file: &str, word: &str| {
        format!(
            r#"<task>
  <meta><id>{id}</id><name>{name}</name><layer>{layer}</layer><priority>1</priority></meta>
  <context><tech-stack>POSIX sh</tech-stack></context>
  <objective>Write {file}.</objective>
  <requirements>
    <requirement id="1">The file `{file}` holds the word {word}</requirement>
  </requirements>
  <files-to-create><file>{file}</file></files-to-create>
  <verification>
    <step>Run: `test -s {file}` - the file exists</step>
    <step>Verify: `cat {file}` shows `{word}`</step>
    <step>Check: the word is spelt right</step>
  </verification>
</task>"#
        )
    };
    std::fs::write(
        dir.join("1-foundation/L1-001.xml"),
        task(
            "L1-001",
            "Write hello",
            "1-foundation",
            "hello.txt",
            "hello",
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("2-backend/L2-001.xml"),
        task("L2-001", "Write world", "2-backend", "world.txt", "world"),
    )
    .unwrap();
    dir
}

/// Reads the prompt (its last argument) and writes what the task's requirement asks for.
const PROMPT_AGENT: &str = r#"#!/bin/sh
prompt="$1"
file=$(printf '%s\n' "$prompt" | sed -n 's/.*The file `\([^`]*\)` holds the word \([a-z]*\).*/\1/p' | head -1)
word=$(printf '%s\n' "$prompt" | sed -n 's/.*The file `\([^`]*\)` holds the word \([a-z]*\).*/\2/p' | head -1)
echo "$word" > "$file"
"#;

#[test]
fn an_imported_breakdown_runs_layer_after_layer() {
    let lab = Lab::new();
    let repo = repo(&lab, &[("agent.sh", PROMPT_AGENT)]);
    let dir = breakdown(&repo);
    let plan_path = lab.dir.path().join("greeter.json");
    let output = lab
        .cli()
        .args([
            "import",
            "tasks",
            path_str(&dir),
            "--implement",
            "./agent.sh",
            "--repo",
            path_str(&repo),
            "-o",
            path_str(&plan_path),
        ])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let plan: Value = serde_json::from_str(&std::fs::read_to_string(&plan_path).unwrap()).unwrap();
    assert_eq!(plan["id"], "greeter");
    assert_eq!(plan["steps"][1]["depends_on"], json!(["L1-001"]));
    assert_eq!(plan["steps"][0]["layer"], "1-foundation");
    assert_eq!(
        plan["steps"][0]["task"]["verify"],
        json!([
            {"argv": ["test", "-s", "hello.txt"]},
            {"argv": ["cat", "hello.txt"], "contains": "hello"}
        ])
    );
    let spec = plan["steps"][0]["task"]["spec"].as_str().unwrap();
    assert!(spec.contains("Write hello.txt."), "{spec}");
    assert!(spec.contains("Check: the word is spelt right"), "{spec}");

    let (code, report) = lab.json(&["run", path_str(&plan_path), "--json"]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(
        std::fs::read_to_string(repo.join("hello.txt")).unwrap(),
        "hello\n"
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("world.txt")).unwrap(),
        "world\n"
    );
    // The state file is kept beside the breakdown by default.
    let state: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("execute-state.json")).unwrap())
            .unwrap();
    assert_execute_state(&state);
    assert_eq!(state["prd_slug"], "greeter");
    assert_eq!(state["layers"]["2-backend"]["status"], "completed");
    assert!(
        state["tasks_path"]
            .as_str()
            .unwrap()
            .ends_with("docs/tasks/greeter")
    );
}

#[test]
fn a_malformed_breakdown_names_the_file_and_the_element() {
    let lab = Lab::new();
    let repo = repo(&lab, &[("readme", "x\n")]);
    let dir = breakdown(&repo);
    let import = |lab: &Lab| {
        let output = lab
            .cli()
            .args(["import", "tasks", path_str(&dir), "--implement", "agent"])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2));
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    std::fs::write(
        dir.join("2-backend/L2-001.xml"),
        "<task><meta><id>L2-001</id><layer>2-backend</layer></meta></task>",
    )
    .unwrap();
    let stderr = import(&lab);
    assert!(
        stderr.contains("L2-001.xml: <meta> has no <name>"),
        "{stderr}"
    );
    std::fs::write(dir.join("2-backend/L2-001.xml"), "<task><meta>").unwrap();
    let stderr = import(&lab);
    assert!(
        stderr.contains("L2-001.xml: is not well-formed XML"),
        "{stderr}"
    );
    std::fs::write(
        dir.join("layer_plan.json"),
        r#"{"dependency_graph": {"L2-001": "L1-001"}}"#,
    )
    .unwrap();
    std::fs::remove_file(dir.join("2-backend/L2-001.xml")).unwrap();
    let stderr = import(&lab);
    assert!(
        stderr.contains("layer_plan.json: `dependency_graph.L2-001` is not a list of task ids"),
        "{stderr}"
    );
}

/// A copy of `examples/tasks` at `<lab>/<name>`, made a git repository on `main`.
fn example_copy(lab: &Lab, name: &str) -> PathBuf {
    fn copy_dir(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                copy_dir(&entry.path(), &to.join(entry.file_name()));
            } else {
                std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
            }
        }
    }
    let copy = lab.dir.path().join(name);
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/tasks"),
        &copy,
    );
    git(&copy, &["init", "-q", "-b", "main"]);
    git(&copy, &["add", "-A"]);
    git(&copy, &["commit", "-qm", "start"]);
    copy
}

/// The example of docs/tasks.md, run as the guide says: copied, made a repository, its
/// breakdown (in the original's format) imported and run; and its hand-written plan.yaml.
#[test]
fn the_documented_example_runs_as_the_guide_says() {
    let lab = Lab::new();
    let copy = example_copy(&lab, "calc");
    let import = lab
        .cli()
        .current_dir(&copy)
        .args(["import", "tasks", "breakdown", "--implement"])
        .arg("./agent.sh ${task.id} ${task.feedback}")
        .args(["-o", "tasks.json"])
        .output()
        .unwrap();
    assert!(
        import.status.success(),
        "{}",
        String::from_utf8_lossy(&import.stderr)
    );
    let output = lab
        .cli()
        .current_dir(&copy)
        .args(["run", "tasks.json"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let calc = std::fs::read_to_string(copy.join("calc.py")).unwrap();
    assert!(
        calc.contains("return a + b") && calc.contains("return a * b"),
        "{calc}"
    );
    // The state file goes beside the breakdown.
    let state: Value = serde_json::from_str(
        &std::fs::read_to_string(copy.join("breakdown/execute-state.json")).unwrap(),
    )
    .unwrap();
    assert_execute_state(&state);
    assert_eq!(state["prd_slug"], "calc");
    assert_eq!(
        state["tasks"]["L1-001"]["attempts"], 2,
        "the first try at add is wrong on purpose"
    );
    assert_eq!(state["tasks"]["L2-001"]["attempts"], 1);
    assert_eq!(state["status"], "completed");

    let copy = example_copy(&lab, "calc-yaml");
    let output = lab
        .cli()
        .current_dir(&copy)
        .args(["run", "plan.yaml", "--state-file", "execute-state.json"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let state: Value =
        serde_json::from_str(&std::fs::read_to_string(copy.join("execute-state.json")).unwrap())
            .unwrap();
    assert_execute_state(&state);
    assert_eq!(state["tasks"]["L1-add"]["attempts"], 2);
    assert_eq!(state["status"], "completed");
}

#[test]
fn layer_and_task_filters_run_a_part_of_the_breakdown() {
    let lab = Lab::new();
    let writer = "#!/bin/sh\necho \"$1\" > \"$1.txt\"\n";
    let repo = repo(&lab, &[("writer.sh", writer)]);
    let task = |id: &str, layer: &str, deps: &[&str]| {
        json!({"id": id, "layer": layer, "depends_on": deps, "task": {
            "implement": {"tool": "exec", "args": {"argv": ["${task.worktree}/writer.sh", "${task.id}"]}}
        }})
    };
    let plan = json!({"id": "parts", "workspace": {"repo": "."}, "steps": [
        task("L1-001", "1-core", &[]), task("L1-002", "1-core", &[]),
        task("L2-001", "2-top", &["L1-001"]),
    ]});
    let (code, report, state) = run(&lab, &repo, &plan, &["--layer", "1-core"]);
    assert_eq!(code, 0, "{report}");
    assert!(repo.join("L1-001.txt").exists() && repo.join("L1-002.txt").exists());
    assert!(!repo.join("L2-001.txt").exists(), "layer 2-top is not run");
    assert_eq!(state["options"]["layer_filter"], "1-core");
    assert_eq!(state["tasks"]["L2-001"]["status"], "pending");
    assert_eq!(state["layers"]["1-core"]["status"], "completed");
    assert_eq!(state["layers"]["2-top"]["status"], "pending");
    // The breakdown is not completed: this run did its part, and 2-top is left.
    assert_eq!(state["status"], "stopped");
    assert!(state["completed_at"].is_null());

    let (code, report, state) = run(&lab, &repo, &plan, &["--task", "L2-001"]);
    assert_eq!(code, 0, "{report}");
    assert!(repo.join("L2-001.txt").exists());
    assert_eq!(state["options"]["task_filter"], "L2-001");
    // The task's calls (its implement call, its checks), then the task, then `__meta__`.
    let ids: Vec<&str> = report["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["step_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        ["L2-001/implement#1", "L2-001", "__meta__"],
        "{report}"
    );

    let plan = repo.join("plan.json");
    let stderr = lab.fails(&["run", path_str(&plan), "--task", "L2-01"], 2);
    assert!(
        stderr.contains("the plan has no step `L2-01` (did you mean `L2-001`?)"),
        "{stderr}"
    );
}

#[test]
fn a_high_risk_implementer_waits_for_its_approval() {
    let lab = Lab::new();
    let writer = "#!/bin/sh\necho done > out.txt\n";
    let repo = repo(&lab, &[("writer.sh", writer)]);
    let plan = json!({"id": "gated", "workspace": {"repo": "."}, "steps": [
        {"id": "T1", "task": {"implement": {"tool": "exec", "risk": "high",
            "args": {"argv": ["${task.worktree}/writer.sh"]}}}}
    ]});
    let (code, report, state) = run(&lab, &repo, &plan, &[]);
    assert_eq!(code, 5, "WAITING: {report}");
    assert!(
        report["pending_approvals"]
            .to_string()
            .contains("T1/implement"),
        "{report}"
    );
    assert_eq!(state["tasks"]["T1"]["status"], "in_progress");
    assert!(!repo.join("out.txt").exists());
    let run_id = report["run_id"].as_str().unwrap();
    lab.cli()
        .args(["approve", run_id, "T1/implement"])
        .assert()
        .success();
    let (code, report) = lab.json(&["resume", run_id, "--json"]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(
        std::fs::read_to_string(repo.join("out.txt")).unwrap(),
        "done\n"
    );
    assert_eq!(
        common::record(&report, "T1")["result"]["attempts"],
        1,
        "the attempt is not counted twice"
    );
}

/// A task left `in_progress` (here waiting for its implementer's approval) whose worktree is
/// removed before the run is resumed goes back to `pending` without counting an attempt: the
/// same attempt runs, in a worktree made anew, and no error is recorded.
#[test]
fn a_worktree_gone_on_resume_starts_the_attempt_over_without_counting_it() {
    let lab = Lab::new();
    let writer = "#!/bin/sh\necho done > out.txt\n";
    let repo = repo(&lab, &[("writer.sh", writer)]);
    let plan = json!({"id": "gone", "workspace": {"repo": "."}, "steps": [
        {"id": "T1", "task": {"implement": {"tool": "exec", "risk": "high",
            "args": {"argv": ["${task.worktree}/writer.sh"]}}}}
    ]});
    let (code, report, state) = run(&lab, &repo, &plan, &[]);
    assert_eq!(code, 5, "WAITING: {report}");
    assert_eq!(state["tasks"]["T1"]["status"], "in_progress");
    assert_eq!(state["tasks"]["T1"]["attempts"], 1);
    let worktree = worktrees(&lab).join("T1");
    git(
        &repo,
        &["worktree", "remove", "--force", path_str(&worktree)],
    );
    assert!(!worktree.exists());
    let run_id = report["run_id"].as_str().unwrap();
    lab.cli()
        .args(["approve", run_id, "T1/implement"])
        .assert()
        .success();
    let state_path = lab.dir.path().join("execute-state.json");
    let (code, report) = lab.json(&[
        "resume",
        run_id,
        "--json",
        "--state-file",
        path_str(&state_path),
    ]);
    assert_eq!(
        code, 0,
        "the approved attempt ran, not a new one waiting: {report}"
    );
    let state: Value =
        serde_json::from_str(&std::fs::read_to_string(&state_path).unwrap()).unwrap();
    assert_execute_state(&state);
    let task = &state["tasks"]["T1"];
    assert_eq!(task["status"], "completed", "{state}");
    assert_eq!(task["attempts"], 1, "{state}");
    assert_eq!(task["errors"], json!([]), "{state}");
    assert_eq!(task["commits"][0]["attempt"], 1, "{state}");
    assert_eq!(state["metrics"]["total_attempts"], 1, "{state}");
    assert_eq!(
        std::fs::read_to_string(repo.join("out.txt")).unwrap(),
        "done\n"
    );
}

#[test]
fn the_context_update_runs_after_the_last_task_when_the_project_has_a_project_md() {
    let lab = Lab::new();
    let writer = "#!/bin/sh\necho \"$1\" > \"$1.txt\"\n";
    let update = "#!/bin/sh\necho \"- added by $1\" >> PROJECT.md\necho '{\"features_added\": [\"greeting\"], \"models_added\": []}'\n";
    let repo = repo(
        &lab,
        &[
            ("writer.sh", writer),
            ("update.sh", update),
            ("PROJECT.md", "# Project\n"),
        ],
    );
    let plan = |update: &str, id: &str| {
        json!({"id": "ctx", "workspace": {"repo": ".", "context_update": {"tool": "exec",
            "args": {"argv": [update, "${task.tasks}"]}}},
        "steps": [{"id": id, "task": {"implement": {"tool": "exec",
            "args": {"argv": ["${task.worktree}/writer.sh", "${task.id}"]}}}}]})
    };
    let script = path_str(&repo.join("update.sh")).to_owned();
    let (code, report, state) = run(&lab, &repo, &plan(&script, "T1"), &[]);
    assert_eq!(code, 0, "{report}");
    let update = &state["context_update"];
    assert_eq!(update["status"], "completed", "{state}");
    assert_eq!(update["features_added"], json!(["greeting"]));
    let hash = update["commit_hash"].as_str().unwrap();
    assert_eq!(git(&repo, &["rev-parse", "trunk"]).trim(), hash);
    assert_eq!(
        std::fs::read_to_string(repo.join("PROJECT.md")).unwrap(),
        "# Project\n- added by T1\n"
    );
    assert_eq!(
        git(&repo, &["status", "--porcelain", "--untracked-files=no"]),
        ""
    );

    // A context update that fails fails the run, after the tasks are merged.
    let (code, report, state) = run(&lab, &repo, &plan("/nonexistent/update", "T2"), &[]);
    assert_eq!(code, 1);
    assert_eq!(state["context_update"]["status"], "pending");
    assert_eq!(state["tasks"]["T2"]["status"], "completed");
    let meta = common::record(&report, "__meta__");
    assert!(
        meta["reason"]
            .as_str()
            .unwrap()
            .starts_with("the context update after the last task failed"),
        "{meta}"
    );
}

#[test]
fn without_a_project_md_the_context_update_is_skipped() {
    let lab = Lab::new();
    let writer = "#!/bin/sh\necho \"$1\" > \"$1.txt\"\n";
    let repo = repo(&lab, &[("writer.sh", writer)]);
    let plan = json!({"id": "ctx", "workspace": {"repo": ".", "context_update": {"tool": "exec",
            "args": {"argv": ["/nonexistent/update"]}}},
        "steps": [{"id": "T1", "task": {"implement": {"tool": "exec",
            "args": {"argv": ["${task.worktree}/writer.sh", "${task.id}"]}}}}]});
    let (code, report, state) = run(&lab, &repo, &plan, &[]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(state["context_update"]["status"], "skipped");
}

#[test]
fn a_feedback_call_turns_a_failed_check_into_advice_for_the_next_attempt() {
    let lab = Lab::new();
    // The agent keeps what it was told, and gets it right once told to add.
    let agent = r#"#!/bin/sh
echo "$1" >> told.txt
case "$1" in
  *"use +"*) printf 'def add(a, b):\n    return a + b\n' > calc.py ;;
  *) printf 'def add(a, b):\n    return a * b\n' > calc.py ;;
esac
"#;
    // The advisor reads the failure and says what to do.
    let advisor = "#!/bin/sh\ncase \"$2\" in *AssertionError*) echo \"advice for $1: use + instead\" ;; *) echo 'no idea' ;; esac\n";
    let repo = repo(&lab, &[("agent.sh", agent), ("advisor.sh", advisor)]);
    let advisor = path_str(&repo.join("advisor.sh")).to_owned();
    let plan = json!({"id": "advised", "workspace": {"repo": "."}, "steps": [{"id": "T1", "task": {
        "implement": {"tool": "exec", "args": {"argv": ["${task.worktree}/agent.sh", "${task.feedback}"]}},
        "verify": [{"argv": ["python3", "-B", "-c", "import calc; assert calc.add(2, 3) == 5"]}],
        "feedback": {"tool": "exec", "args": {"argv": [advisor, "${failure.step}", "${failure.output}"]}}
    }}]});
    let (code, report, state) = run(&lab, &repo, &plan, &[]);
    assert_eq!(code, 0, "{report}");
    let feedback = &state["tasks"]["T1"]["retry_feedback"][0];
    assert_eq!(feedback["attempt"], 2);
    assert_eq!(
        feedback["feedback"],
        "advice for python3 -B -c import calc; assert calc.add(2, 3) == 5: use + instead"
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("told.txt")).unwrap(),
        "\nadvice for python3 -B -c import calc; assert calc.add(2, 3) == 5: use + instead\n"
    );
}

#[test]
fn an_abandoned_task_runs_again_with_resume_retry_failed() {
    let lab = Lab::new();
    // Gets it right only once a person has fixed what it needed (the flag file).
    let agent = "#!/bin/sh\nif [ -f \"$1\" ]; then echo 'ALL GOOD' > status.txt; else echo \"try\" >> tries.txt; fi\n";
    let repo = repo(&lab, &[("agent.sh", agent)]);
    let flag = lab.dir.path().join("fixed");
    let plan = json!({"id": "again", "workspace": {"repo": ".", "max_attempts": 2}, "steps": [
        {"id": "T1", "task": {
            "implement": {"tool": "exec", "args": {"argv": ["${task.worktree}/agent.sh", path_str(&flag)]}},
            "verify": [{"argv": ["cat", "status.txt"], "contains": "ALL GOOD"}]
        }},
        {"id": "T2", "depends_on": ["T1"], "task": {
            "implement": {"tool": "exec", "args": {"argv": ["touch", "after.txt"]}}
        }}
    ]});
    let (code, report, state) = run(&lab, &repo, &plan, &[]);
    assert_eq!(code, 1, "{report}");
    assert_eq!(state["tasks"]["T1"]["status"], "abandoned");
    let run_id = report["run_id"].as_str().unwrap();
    // Without --retry-failed the abandoned task stays abandoned.
    let (code, _) = lab.json(&["resume", run_id, "--json"]);
    assert_eq!(code, 1);
    std::fs::write(&flag, "").unwrap();
    let (code, report) = lab.json(&["resume", run_id, "--json", "--retry-failed"]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(
        std::fs::read_to_string(repo.join("status.txt")).unwrap(),
        "ALL GOOD\n"
    );
    assert!(repo.join("after.txt").exists(), "its dependent ran");
}

#[test]
fn a_conflict_waiting_for_a_person_can_be_refused_which_abandons_the_task() {
    let lab = Lab::new();
    let (repo, report, state) = waiting_on_a_conflict(&lab);
    let run_id = report["run_id"].as_str().unwrap().to_owned();
    let waiting = ["A", "B"]
        .into_iter()
        .find(|id| state["tasks"][id]["status"] == "verified")
        .expect("one task waits");
    lab.cli()
        .args([
            "reject",
            &run_id,
            &format!("{waiting}/merge#1"),
            "--reason",
            "not now",
        ])
        .assert()
        .success()
        .stdout(predicates::str::contains(format!(
            "on resume task `{waiting}` is abandoned, its worktree kept"
        )));
    let (code, report) = lab.json(&["resume", &run_id, "--json"]);
    assert_eq!(code, 1, "{report}");
    let record = common::record(&report, waiting);
    assert_eq!(record["error"]["code"], "E_TASK_ABANDONED", "{record}");
    assert!(
        record["error"]["message"]
            .as_str()
            .unwrap()
            .contains("merging again was refused: not now"),
        "{record}"
    );
    // Its worktree is kept; the base has the other task's work only.
    assert!(worktrees(&lab).join(waiting).exists());
    assert_eq!(
        git(&repo, &["status", "--porcelain", "--untracked-files=no"]),
        ""
    );
}

/// An attempt a kill -9 interrupted starts again from the task's last recorded commit: what
/// the killed implementer had half written (a new file, an edit) is gone, so it never reaches
/// the base.
#[test]
fn a_resumed_attempt_starts_from_a_clean_worktree() {
    let lab = Lab::new();
    let started = lab.dir.path().join("started-once");
    // First run: writes half its work, then hangs (and is killed). After: writes the result.
    let agent = format!(
        "#!/bin/sh\nif [ ! -e {0} ]; then echo half > partial.txt; echo broken >> readme; touch {0}; sleep 60; fi\necho done > result.txt\n",
        path_str(&started)
    );
    let repo = repo(&lab, &[("agent.sh", &agent), ("readme", "kept\n")]);
    let plan = json!({"workspace": {"repo": "."}, "steps": [{"id": "T1", "task": {
        "implement": {"tool": "exec", "args": {"argv": ["${task.worktree}/agent.sh"]}},
        "verify": [{"argv": ["test", "-f", "result.txt"]}]
    }}]});
    let plan_path = repo.join("plan.json");
    std::fs::write(&plan_path, plan.to_string()).unwrap();
    let mut child = lab.spawn(&["run", path_str(&plan_path)]);
    // Both half-made changes are on disk once `started` is.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !started.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the agent never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let (_, runs) = lab.json(&["runs", "--json"]);
    let id = runs[0]["run_id"].as_str().unwrap().to_owned();
    let (code, report) = lab.json(&["resume", &id, "--json"]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["task_status"], "COMPLETED", "{report}");
    assert!(repo.join("result.txt").exists(), "the work was merged");
    assert!(
        !repo.join("partial.txt").exists(),
        "the killed attempt's file was merged"
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("readme")).unwrap(),
        "kept\n"
    );
}

/// A task's calls are recorded like a block's nodes, so the run's guards count them on resume:
/// killed with -9 at any moment and resumed, a run whose `max_tool_calls` runs out in its
/// third task ends as the uninterrupted run does (the calls made before the kill still count).
#[test]
fn guards_count_a_task_s_calls_across_kill_9_and_resume() {
    let agent = "#!/bin/sh\necho \"$1\" >> \"$1.txt\"\nsleep 0.15\n";
    let task = |id: &str, deps: &[&str]| {
        json!({"id": id, "depends_on": deps, "task": {
            "implement": {"tool": "exec", "args": {"argv": ["${task.worktree}/agent.sh", "${task.id}"]}},
            "verify": [{"argv": ["test", "-s", format!("{id}.txt")]}]
        }})
    };
    // Two calls a task: T1 and T2 take four, T3's implement the fifth; its check is refused.
    let plan = json!({"id": "guarded-tasks", "guards": {"max_tool_calls": 5},
        "workspace": {"repo": ".", "max_attempts": 1}, "steps": [
        task("T1", &[]), task("T2", &["T1"]), task("T3", &["T2"]), task("T4", &["T3"]),
    ]});
    let verdicts = |report: &Value| -> Vec<(String, bool, Value)> {
        report["records"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| ["T1", "T2", "T3", "T4"].contains(&r["step_id"].as_str().unwrap()))
            .map(|r| {
                (
                    r["step_id"].as_str().unwrap().to_owned(),
                    r["ok"].as_bool().unwrap(),
                    r["error"]["code"].clone(),
                )
            })
            .collect()
    };
    let uninterrupted = {
        let lab = Lab::new();
        let repo = repo(&lab, &[("agent.sh", agent)]);
        let (_, report, _) = run(&lab, &repo, &plan, &[]);
        verdicts(&report)
    };
    assert_eq!(
        uninterrupted.iter().map(|v| v.1).collect::<Vec<_>>(),
        [true, true, false, false],
        "{uninterrupted:?}"
    );
    for kill_after_ms in [250, 450, 700, 900] {
        let lab = Lab::new();
        let repo = repo(&lab, &[("agent.sh", agent)]);
        let plan_path = repo.join("plan.json");
        std::fs::write(&plan_path, plan.to_string()).unwrap();
        let mut child = lab.spawn(&["run", path_str(&plan_path)]);
        std::thread::sleep(Duration::from_millis(kill_after_ms));
        let _ = child.kill();
        child.wait().unwrap();
        let (_, runs) = lab.json(&["runs", "--json"]);
        let id = runs[0]["run_id"].as_str().unwrap().to_owned();
        let (_, report) = lab.json(&["resume", &id, "--json"]);
        let (_, status) = lab.json(&["status", &id, "--json"]);
        assert_eq!(
            verdicts(&report),
            uninterrupted,
            "killed after {kill_after_ms} ms: {report}"
        );
        assert_eq!(verdicts(&status), uninterrupted);
    }
}
