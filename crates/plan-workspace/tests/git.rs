//! The git side against real git: a task's worktree, its commits, and a merge that is never
//! made twice, nor left half done.
#![expect(clippy::unwrap_used, reason = "test helpers fail loudly on purpose")]

use std::path::Path;
use std::process::Command;

use plan_engine::{MergeOutcome, Workspace};
use plan_workspace::GitWorkspace;

fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@localhost")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@localhost")
        .output()
        .expect("git must be installed for these tests");
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

async fn workspace(dir: &Path) -> GitWorkspace {
    let repo = dir.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "trunk"]);
    std::fs::write(repo.join("a.txt"), "a\n").unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "start"]);
    let settings: plan_graph::Workspace = serde_json::from_str(r#"{"repo": "repo"}"#).unwrap();
    GitWorkspace::open(&settings, dir).await.unwrap()
}

#[tokio::test]
async fn a_branch_merged_before_is_found_merged_not_merged_again() {
    let dir = tempfile::tempdir().unwrap();
    let ws = workspace(dir.path()).await;
    assert_eq!(ws.base(), "trunk");
    let tree = ws.create("T1").await.unwrap();
    assert_eq!(tree.path, dir.path().join(".worktrees/T1"));
    let before = ws.head("T1").await.unwrap();
    std::fs::write(tree.path.join("b.txt"), "b\n").unwrap();
    ws.commit_all("T1", "[T1] add b").await.unwrap();
    let made = ws.commits_since("T1", &before).await.unwrap();
    assert_eq!(made.len(), 1);
    assert_eq!(made[0].1, "[T1] add b");
    // Nothing changed: no commit.
    ws.commit_all("T1", "[T1] again").await.unwrap();
    assert_eq!(ws.commits_since("T1", &before).await.unwrap().len(), 1);

    let MergeOutcome::Merged(first) = ws.merge("T1", "Merge task T1").await.unwrap() else {
        panic!("the first merge merges");
    };
    // A resumed run merges again: the branch is found in the base, nothing new is made.
    let again = ws.merge("T1", "Merge task T1").await.unwrap();
    assert_eq!(again, MergeOutcome::AlreadyMerged(first.clone()));
    let repo = dir.path().join("repo");
    assert_eq!(
        git(&repo, &["log", "--merges", "--format=%H"]).trim(),
        first
    );
    ws.remove("T1").await.unwrap();
    assert!(ws.worktree("T1").is_none());
    assert_eq!(git(&repo, &["branch", "--list", "worktree-T1"]).trim(), "");
}

#[tokio::test]
async fn a_merge_left_half_done_is_aborted_and_a_conflict_leaves_the_base_clean() {
    let dir = tempfile::tempdir().unwrap();
    let ws = workspace(dir.path()).await;
    let repo = dir.path().join("repo");
    let tree = ws.create("T1").await.unwrap();
    std::fs::write(tree.path.join("a.txt"), "from the task\n").unwrap();
    ws.commit_all("T1", "[T1] change a").await.unwrap();
    // The base moves on in the same line: the merge conflicts.
    std::fs::write(repo.join("a.txt"), "from the base\n").unwrap();
    git(&repo, &["commit", "-qam", "base changes a"]);
    let outcome = ws.merge("T1", "Merge task T1").await.unwrap();
    assert_eq!(outcome, MergeOutcome::Conflict(vec!["a.txt".to_owned()]));
    assert!(!repo.join(".git/MERGE_HEAD").exists());
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");

    // A merge a killed process left half done is aborted before the next one.
    let _ = Command::new("git")
        .args(["merge", "--no-ff", "worktree-T1"])
        .current_dir(&repo)
        .output()
        .unwrap();
    assert!(
        repo.join(".git/MERGE_HEAD").exists(),
        "the conflict is left in the base"
    );
    let outcome = ws.merge("T1", "Merge task T1").await.unwrap();
    assert_eq!(outcome, MergeOutcome::Conflict(vec!["a.txt".to_owned()]));
    assert!(!repo.join(".git/MERGE_HEAD").exists());
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
}
