//! The task lifecycle against an in-memory workspace (no git): where a resumed task goes on
//! from each state it can be left in, the merge queue's order, and what ends a task early.
#![expect(clippy::unwrap_used, reason = "test helpers fail loudly on purpose")]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use plan_engine::{
    MergeOutcome, Program, Registry, RunOptions, Tool, ToolContext, ToolError, ToolInfo, Workspace,
    WorkspaceError, Worktree, run,
};
use plan_graph::{Format, LoadOptions, Source, load};
use plan_types::{RunReport, TaskPhase, TaskState, TaskStatus};
use serde_json::{Value, json};

/// What the fake repository holds and what was done to it.
#[derive(Default)]
struct Repo {
    /// Task → its branch's commits.
    branches: BTreeMap<String, Vec<String>>,
    /// Tasks with a worktree.
    worktrees: Vec<String>,
    /// Tasks merged, in order (a task twice here is a double merge).
    merged: Vec<String>,
    /// Files the implementer "wrote" and not yet committed, by task.
    dirty: BTreeMap<String, bool>,
    /// Tasks whose next merge conflicts.
    conflicts: Vec<String>,
    /// Tasks whose next merge git refuses (changes in the base's checkout in the way).
    refusals: Vec<String>,
    /// Calls of `merge`, whatever they found.
    merge_calls: usize,
    commits: usize,
    /// The implementer removes its worktree each time.
    vanish: bool,
}

#[derive(Clone, Default)]
struct FakeWorkspace(Arc<Mutex<Repo>>);

#[async_trait]
impl Workspace for FakeWorkspace {
    fn base(&self) -> &str {
        "trunk"
    }
    fn worktree(&self, task: &str) -> Option<Worktree> {
        let repo = self.0.lock().unwrap();
        repo.worktrees.iter().any(|t| t == task).then(|| Worktree {
            path: PathBuf::from(format!("/wt/{task}")),
            branch: format!("worktree-{task}"),
        })
    }
    async fn create(&self, task: &str) -> Result<Worktree, WorkspaceError> {
        let mut repo = self.0.lock().unwrap();
        repo.worktrees.push(task.to_owned());
        repo.branches.entry(task.to_owned()).or_default();
        Ok(Worktree {
            path: PathBuf::from(format!("/wt/{task}")),
            branch: format!("worktree-{task}"),
        })
    }
    async fn head(&self, task: &str) -> Result<String, WorkspaceError> {
        let repo = self.0.lock().unwrap();
        Ok(repo.branches[task]
            .last()
            .cloned()
            .unwrap_or_else(|| "base".into()))
    }
    async fn commit_all(&self, task: &str, message: &str) -> Result<(), WorkspaceError> {
        let mut repo = self.0.lock().unwrap();
        if repo.dirty.remove(task).is_some() {
            repo.commits += 1;
            let hash = format!("{:07x}", repo.commits);
            let _ = message;
            repo.branches.get_mut(task).unwrap().push(hash);
        }
        Ok(())
    }
    async fn commits_since(
        &self,
        task: &str,
        since: &str,
    ) -> Result<Vec<plan_ports::Commit>, WorkspaceError> {
        let repo = self.0.lock().unwrap();
        let commits = &repo.branches[task];
        let from = commits.iter().position(|c| c == since).map_or(0, |k| k + 1);
        Ok(commits[from..]
            .iter()
            .map(|c| plan_ports::Commit {
                hash: c.clone(),
                subject: format!("commit {c}"),
                body: String::new(),
            })
            .collect())
    }
    async fn merge(&self, task: &str, _message: &str) -> Result<MergeOutcome, WorkspaceError> {
        let mut repo = self.0.lock().unwrap();
        repo.merge_calls += 1;
        if repo.merged.iter().any(|t| t == task) {
            return Ok(MergeOutcome::AlreadyMerged(format!("merge-{task}")));
        }
        if let Some(k) = repo.refusals.iter().position(|t| t == task) {
            repo.refusals.remove(k);
            return Err(WorkspaceError(
                "error: Your local changes to the following files would be overwritten by merge: calc.py".into(),
            ));
        }
        if let Some(k) = repo.conflicts.iter().position(|t| t == task) {
            repo.conflicts.remove(k);
            return Ok(MergeOutcome::Conflict(vec!["shared.txt".into()]));
        }
        repo.merged.push(task.to_owned());
        Ok(MergeOutcome::Merged(format!("merge-{task}")))
    }
    async fn remove(&self, task: &str) -> Result<(), WorkspaceError> {
        let mut repo = self.0.lock().unwrap();
        repo.worktrees.retain(|t| t != task);
        Ok(())
    }

    /// The branch keeps its commits up to `commit` (none without one).
    async fn reset(&self, task: &str, commit: Option<&str>) -> Result<(), WorkspaceError> {
        let mut repo = self.0.lock().unwrap();
        let commits = repo.branches.entry(task.to_owned()).or_default();
        let keep = commit.map_or(0, |c| {
            commits.iter().position(|h| h == c).map_or(0, |k| k + 1)
        });
        commits.truncate(keep);
        Ok(())
    }
}

/// `agent`: "writes" in the task's worktree (so the attempt has something to commit), and
/// logs the task and the feedback it was given.
struct Agent {
    repo: FakeWorkspace,
    log: Arc<Mutex<Vec<(String, String)>>>,
}

#[async_trait]
impl Tool for Agent {
    fn info(&self) -> ToolInfo {
        info("agent")
    }
    async fn call(&self, args: Value, ctx: ToolContext) -> Result<Value, ToolError> {
        let task = args["task"].as_str().unwrap().to_owned();
        assert_eq!(
            ctx.working_dir.as_deref(),
            Some(std::path::Path::new(&format!("/wt/{task}"))),
            "the implementer works in the task's worktree"
        );
        let feedback = args["feedback"].as_str().unwrap_or("").to_owned();
        self.log.lock().unwrap().push((task.clone(), feedback));
        let mut repo = self.repo.0.lock().unwrap();
        if repo.vanish {
            repo.worktrees.retain(|t| *t != task);
        }
        repo.dirty.insert(task, true);
        Ok(json!({}))
    }
}

/// `exec` for the checks: passes unless the command is `fail`, which fails with output.
struct Checks;

#[async_trait]
impl Tool for Checks {
    fn info(&self) -> ToolInfo {
        info("exec")
    }
    async fn call(&self, args: Value, _ctx: ToolContext) -> Result<Value, ToolError> {
        let argv = args["argv"].as_array().unwrap();
        if argv[0] == "fail" {
            let result = json!({"exit_code": 1, "stdout": "", "stderr": "boom: expected 5\n"});
            return Err(ToolError::new("E_EXIT_STATUS", "exited 1").with_details(result));
        }
        Ok(json!({"exit_code": 0, "stdout": "ok\n", "stderr": ""}))
    }
}

fn info(name: &str) -> ToolInfo {
    ToolInfo {
        name: name.into(),
        description: String::new(),
        source: "test".into(),
        risk: plan_engine::Risk::Low,
        input_schema: json!({"type": "object"}),
    }
}

struct Lab {
    repo: FakeWorkspace,
    log: Arc<Mutex<Vec<(String, String)>>>,
    program: Program,
}

fn lab(plan: Value) -> Lab {
    let repo = FakeWorkspace::default();
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut registry = Registry::new();
    registry.register(Agent {
        repo: repo.clone(),
        log: log.clone(),
    });
    registry.register(Checks);
    let loaded = load(
        Source::new("p.json", plan.to_string()),
        Format::Json,
        &LoadOptions::default(),
    )
    .unwrap();
    let program = Program::compile(&loaded.plan, "p", &registry).unwrap_or_else(|issues| {
        panic!("{issues:?}");
    });
    Lab { repo, log, program }
}

fn task(id: &str, deps: &[&str], check: &str) -> Value {
    json!({"id": id, "depends_on": deps, "task": {
        "implement": {"tool": "agent", "args": {"task": "${task.id}", "feedback": "${task.feedback}"}},
        "verify": [{"argv": [check]}]
    }})
}

async fn go(lab: &Lab, checkpoints: BTreeMap<String, Value>) -> RunReport {
    let mut options = RunOptions::new("run");
    options.workspace = Some(Arc::new(lab.repo.clone()));
    if !checkpoints.is_empty() {
        options.restored = Some(plan_types::Restored {
            checkpoints,
            ..plan_types::Restored::default()
        });
    }
    run(&lab.program, options).await.unwrap()
}

fn state(status: TaskPhase, attempts: u32) -> TaskState {
    TaskState {
        status,
        attempts,
        ..TaskState::default()
    }
}

#[tokio::test]
async fn a_failed_check_feeds_the_next_attempt_until_the_task_is_abandoned() {
    let plan = json!({"workspace": {"repo": ".", "max_attempts": 2},
                      "steps": [task("T1", &[], "fail"), task("T2", &["T1"], "pass")]});
    let lab = lab(plan);
    let report = go(&lab, BTreeMap::new()).await;
    let log = lab.log.lock().unwrap().clone();
    assert_eq!(log.len(), 2, "two attempts, then abandoned: {log:?}");
    assert_eq!(log[0].1, "");
    assert!(log[1].1.contains("boom: expected 5"), "{log:?}");
    let t1 = report.records.iter().find(|r| r.step_id == "T1").unwrap();
    assert_eq!(
        t1.error.as_ref().unwrap().code.to_string(),
        "E_TASK_ABANDONED"
    );
    let t2 = report.records.iter().find(|r| r.step_id == "T2").unwrap();
    assert!(t2.skipped, "its dependent is skipped");
    assert!(lab.repo.0.lock().unwrap().merged.is_empty());
    assert_eq!(
        lab.repo.0.lock().unwrap().worktrees,
        ["T1"],
        "an abandoned task keeps its worktree"
    );
}

#[tokio::test]
async fn a_task_resumed_while_merging_is_not_merged_again() {
    let lab = lab(json!({"workspace": {"repo": "."}, "steps": [task("T1", &[], "pass")]}));
    {
        let mut repo = lab.repo.0.lock().unwrap();
        repo.worktrees.push("T1".into());
        repo.branches.insert("T1".into(), vec!["c1".into()]);
        // The merge happened; the kill came before its record.
        repo.merged.push("T1".into());
    }
    let checkpoint = serde_json::to_value(state(TaskPhase::Merging, 1)).unwrap();
    let report = go(&lab, BTreeMap::from([("T1".to_owned(), checkpoint)])).await;
    assert!(of(&report, "T1").ok, "{:?}", of(&report, "T1"));
    // The engine asks to merge again (it cannot know whether the kill came before the merge);
    // the workspace finds it merged (plan-workspace's own test checks git does).
    assert_eq!(lab.repo.0.lock().unwrap().merge_calls, 1);
    assert_eq!(lab.repo.0.lock().unwrap().merged, ["T1"], "merged once");
    assert!(
        lab.log.lock().unwrap().is_empty(),
        "nothing implemented again"
    );
    assert!(
        lab.repo.0.lock().unwrap().worktrees.is_empty(),
        "cleaned up"
    );
}

/// The task step's own record (its calls' records come before it).
fn of<'a>(report: &'a RunReport, id: &str) -> &'a plan_types::Record {
    report
        .records
        .iter()
        .find(|r| r.step_id == id)
        .unwrap_or_else(|| panic!("no record of {id}: {:#?}", report.records))
}

#[tokio::test]
async fn a_task_resumed_while_verifying_checks_again_without_implementing_again() {
    let lab = lab(json!({"workspace": {"repo": "."}, "steps": [task("T1", &[], "pass")]}));
    {
        let mut repo = lab.repo.0.lock().unwrap();
        repo.worktrees.push("T1".into());
        repo.branches.insert("T1".into(), vec!["c1".into()]);
    }
    let checkpoint = serde_json::to_value(state(TaskPhase::Verifying, 1)).unwrap();
    let report = go(&lab, BTreeMap::from([("T1".to_owned(), checkpoint)])).await;
    assert!(of(&report, "T1").ok);
    assert!(lab.log.lock().unwrap().is_empty());
    assert_eq!(lab.repo.0.lock().unwrap().merged, ["T1"]);
    assert_eq!(of(&report, "T1").result.as_ref().unwrap()["attempts"], 1);
}

/// A task resumed `in_progress` whose worktree is gone goes back to `pending` without counting
/// the attempt (as the execute-state document's resume does): that attempt runs again, in a
/// worktree made anew, with the feedback it was to get.
#[tokio::test]
async fn an_in_progress_task_whose_worktree_is_gone_on_resume_runs_that_attempt_again() {
    let lab = lab(json!({"workspace": {"repo": "."}, "steps": [task("T1", &[], "pass")]}));
    lab.repo
        .0
        .lock()
        .unwrap()
        .branches
        .insert("T1".into(), Vec::new());
    let interrupted = TaskState {
        retry_feedback: vec![plan_types::RetryFeedback {
            attempt: 2,
            feedback: "fix the sum".into(),
        }],
        ..state(TaskPhase::InProgress, 2)
    };
    let checkpoint = serde_json::to_value(interrupted).unwrap();
    let report = go(&lab, BTreeMap::from([("T1".to_owned(), checkpoint)])).await;
    assert!(of(&report, "T1").ok);
    assert_eq!(of(&report, "T1").result.as_ref().unwrap()["attempts"], 2);
    assert_eq!(
        *lab.log.lock().unwrap(),
        [("T1".to_owned(), "fix the sum".to_owned())],
        "attempt 2 runs once more, with its feedback"
    );
    assert_eq!(lab.repo.0.lock().unwrap().worktrees, Vec::<String>::new());
}

/// So does a task resumed `verifying` whose worktree is gone: its attempt was not verified,
/// and nothing it did failed, so the attempt runs again, not the next one.
#[tokio::test]
async fn a_verifying_task_whose_worktree_is_gone_on_resume_runs_that_attempt_again() {
    let lab = lab(json!({"workspace": {"repo": ".", "max_attempts": 2},
                         "steps": [task("T1", &[], "pass")]}));
    lab.repo
        .0
        .lock()
        .unwrap()
        .branches
        .insert("T1".into(), vec!["c1".into()]);
    let checkpoint = serde_json::to_value(state(TaskPhase::Verifying, 2)).unwrap();
    let report = go(&lab, BTreeMap::from([("T1".to_owned(), checkpoint)])).await;
    assert!(of(&report, "T1").ok, "{:?}", of(&report, "T1"));
    assert_eq!(of(&report, "T1").result.as_ref().unwrap()["attempts"], 2);
    assert_eq!(lab.log.lock().unwrap().len(), 1, "attempt 2 runs once more");
    assert_eq!(lab.repo.0.lock().unwrap().merged, ["T1"]);
}

/// A worktree that goes during an attempt (an implementer that deletes it) fails that
/// attempt, and the attempt counts: such an implementer cannot run forever at one attempt.
#[tokio::test]
async fn a_worktree_that_goes_during_an_attempt_fails_it_and_it_counts() {
    let lab = lab(json!({"workspace": {"repo": ".", "max_attempts": 2},
                         "steps": [task("T1", &[], "pass")]}));
    lab.repo.0.lock().unwrap().vanish = true;
    let report = go(&lab, BTreeMap::new()).await;
    let error = of(&report, "T1").error.as_ref().unwrap();
    assert_eq!(error.code.to_string(), "E_TASK_ABANDONED", "{error:?}");
    assert!(error.message.contains("is gone"), "{error:?}");
    assert_eq!(
        lab.log.lock().unwrap().len(),
        2,
        "two attempts, each counted"
    );
}

#[tokio::test]
async fn a_conflict_is_a_failed_attempt_whose_feedback_names_the_files() {
    let lab = lab(json!({"workspace": {"repo": "."}, "steps": [task("T1", &[], "pass")]}));
    lab.repo.0.lock().unwrap().conflicts.push("T1".into());
    let report = go(&lab, BTreeMap::new()).await;
    assert!(of(&report, "T1").ok, "{:?}", of(&report, "T1"));
    let log = lab.log.lock().unwrap().clone();
    assert_eq!(log.len(), 2);
    assert!(
        log[1].1.contains("shared.txt") && log[1].1.contains("git merge trunk"),
        "{log:?}"
    );
}

#[tokio::test]
async fn a_merge_git_refuses_halts_for_a_person_and_keeps_the_verified_work() {
    let lab = lab(json!({"workspace": {"repo": "."},
                         "steps": [task("T1", &[], "pass"), task("T2", &["T1"], "pass")]}));
    lab.repo.0.lock().unwrap().refusals.push("T1".into());
    let report = go(&lab, BTreeMap::new()).await;
    assert_eq!(report.task_status, TaskStatus::Waiting, "{report:?}");
    let pending = &report.pending_approvals[0];
    assert_eq!(pending.step_id, "T1/merge#1");
    let reason = pending.reason.as_deref().unwrap();
    assert!(
        reason.contains("calc.py") && reason.contains("then resume the run"),
        "{reason}"
    );
    assert_eq!(lab.log.lock().unwrap().len(), 1, "implemented once");
    assert!(lab.repo.0.lock().unwrap().merged.is_empty());
    assert_eq!(lab.repo.0.lock().unwrap().worktrees, ["T1"], "work kept");

    // Resumed where it waited: merged, not implemented again.
    let waiting = TaskState {
        conflict_waits: 1,
        ..state(TaskPhase::Verified, 1)
    };
    let checkpoint = serde_json::to_value(waiting).unwrap();
    let report = go(&lab, BTreeMap::from([("T1".to_owned(), checkpoint)])).await;
    assert_eq!(report.task_status, TaskStatus::Completed, "{report:?}");
    let log = lab.log.lock().unwrap().clone();
    assert_eq!(log.len(), 2, "only T2 implemented: {log:?}");
    assert_eq!(log[1].0, "T2");
    assert_eq!(lab.repo.0.lock().unwrap().merged, ["T1", "T2"]);
}

#[tokio::test]
async fn without_a_workspace_a_task_fails_and_says_why() {
    let lab = lab(json!({"workspace": {"repo": "."}, "steps": [task("T1", &[], "pass")]}));
    let report = run(&lab.program, RunOptions::new("run")).await.unwrap();
    let error = of(&report, "T1").error.as_ref().unwrap();
    assert!(error.message.contains("needs a git workspace"), "{error:?}");
}

/// An attempt counted and then interrupted while its worktree was being made has not
/// started: resumed, it runs as that attempt (with one attempt allowed, the task was
/// abandoned without ever running; found by a kill -9 test of guards).
#[tokio::test]
async fn an_attempt_interrupted_while_its_worktree_is_made_runs_on_resume() {
    let lab = lab(json!({"workspace": {"repo": ".", "max_attempts": 1},
                         "steps": [task("T1", &[], "pass")]}));
    let interrupted = TaskState {
        worktree_status: Some(plan_types::WorktreeStatus::Creating),
        ..state(TaskPhase::Pending, 1)
    };
    let checkpoint = serde_json::to_value(interrupted).unwrap();
    let report = go(&lab, BTreeMap::from([("T1".to_owned(), checkpoint)])).await;
    assert!(of(&report, "T1").ok, "{:?}", report.records);
    assert_eq!(of(&report, "T1").result.as_ref().unwrap()["attempts"], 1);
    assert_eq!(lab.log.lock().unwrap().len(), 1, "implemented once");
}
