//! The git side against real git: a task's worktree, its commits, and a merge that is never
//! made twice, nor left half done.
#![expect(clippy::unwrap_used, reason = "test helpers fail loudly on purpose")]

use std::path::Path;
use std::process::Command;

use plan_ports::{MergeOutcome, Workspace};
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
    let settings = plan_workspace::Settings {
        repo: "repo".to_owned(),
        ..plan_workspace::Settings::default()
    };
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
    assert_eq!(made[0].subject, "[T1] add b");
    assert_eq!(made[0].body, "");
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

    // A merge a person started (and is resolving by hand) is never aborted: the merge fails
    // with a message naming it, and the person's merge is as it was.
    let _ = Command::new("git")
        .args(["merge", "--no-ff", "worktree-T1"])
        .current_dir(&repo)
        .output()
        .unwrap();
    assert!(
        repo.join(".git/MERGE_HEAD").exists(),
        "the conflict is left in the base"
    );
    let refused = ws.merge("T1", "Merge task T1").await.unwrap_err();
    assert!(
        refused.0.contains("a merge plan-cli did not start"),
        "{refused}"
    );
    assert!(
        repo.join(".git/MERGE_HEAD").exists(),
        "the person's merge is kept"
    );
    git(&repo, &["merge", "--abort"]);

    // A merge a killed plan-cli left half done (its note says so) is aborted before the next.
    let _ = Command::new("git")
        .args(["merge", "--no-ff", "worktree-T1"])
        .current_dir(&repo)
        .output()
        .unwrap();
    std::fs::write(repo.join(".git/plan-cli-MERGE"), "worktree-T1\n").unwrap();
    let outcome = ws.merge("T1", "Merge task T1").await.unwrap();
    assert_eq!(outcome, MergeOutcome::Conflict(vec!["a.txt".to_owned()]));
    assert!(!repo.join(".git/MERGE_HEAD").exists());
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
}

fn repo_with_commit(dir: &Path) -> std::path::PathBuf {
    let repo = dir.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "trunk"]);
    std::fs::write(repo.join("a.txt"), "a\n").unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "start"]);
    repo
}

async fn open_with(dir: &Path, settings: &str) -> Result<GitWorkspace, String> {
    let settings: plan_graph::Workspace = serde_json::from_str(settings).unwrap();
    let settings = plan_workspace::Settings {
        repo: settings.repo,
        worktree_dir: settings.worktree_dir,
        base: settings.base,
    };
    GitWorkspace::open(&settings, dir).await.map_err(|e| e.0)
}

/// A task id is never a path: whatever a plan says, nothing outside the worktree folder is
/// cleared, made or removed.
#[tokio::test]
async fn a_task_id_that_is_a_path_touches_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let ws = workspace(dir.path()).await;
    let victim = dir.path().join("victim");
    std::fs::create_dir_all(&victim).unwrap();
    std::fs::write(victim.join("precious.txt"), "keep\n").unwrap();
    for id in [
        victim.display().to_string(),
        "../victim".to_owned(),
        "../../victim".to_owned(),
        "x/.git".to_owned(),
        "a/.lock/b".to_owned(),
        "..".to_owned(),
    ] {
        let made = ws.create(&id).await;
        assert!(made.is_err(), "{id}: {made:?}");
        assert!(ws.remove(&id).await.is_err(), "{id}");
        assert!(ws.worktree(&id).is_none(), "{id}");
        assert!(ws.commit_all(&id, "x").await.is_err(), "{id}");
    }
    assert_eq!(
        std::fs::read_to_string(victim.join("precious.txt")).unwrap(),
        "keep\n"
    );
}

/// `worktree_dir` stays in the folder that holds the repository: an absolute path elsewhere,
/// a way out through `..` and a link out are each refused before anything is made.
#[tokio::test]
async fn a_worktree_folder_outside_the_repositorys_folder_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    repo_with_commit(dir.path());
    let outside = elsewhere.path().join("wt").display().to_string();
    for worktree_dir in [outside.as_str(), "../../x", "/", ".", ".git/wt", ".."] {
        let settings =
            serde_json::json!({"repo": "repo", "worktree_dir": worktree_dir}).to_string();
        let refused = open_with(dir.path(), &settings).await;
        assert!(refused.is_err(), "{worktree_dir} was accepted");
    }
    std::os::unix::fs::symlink(elsewhere.path(), dir.path().join("link")).unwrap();
    let refused = open_with(
        dir.path(),
        r#"{"repo": "repo", "worktree_dir": "../link/wt"}"#,
    )
    .await;
    assert!(refused.unwrap_err().contains("outside"));
    assert!(!elsewhere.path().join("wt").exists());
    // Inside the repository's folder, or inside the repository, is fine.
    drop(
        open_with(dir.path(), r#"{"repo": "repo", "worktree_dir": "wt"}"#)
            .await
            .unwrap(),
    );
    drop(
        open_with(
            dir.path(),
            r#"{"repo": "repo", "worktree_dir": "../trees"}"#,
        )
        .await
        .unwrap(),
    );
}

/// A folder or a branch plan-cli did not make is never cleared, reused or removed.
#[tokio::test]
async fn folders_and_branches_plan_cli_did_not_make_are_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let ws = workspace(dir.path()).await;
    let repo = dir.path().join("repo");
    let mine = dir.path().join(".worktrees/T1");
    std::fs::create_dir_all(&mine).unwrap();
    std::fs::write(mine.join("notes.txt"), "mine\n").unwrap();
    let refused = ws.create("T1").await.unwrap_err();
    assert!(refused.0.contains("plan-cli did not make it"), "{refused}");
    assert!(ws.remove("T1").await.is_err());
    assert_eq!(
        std::fs::read_to_string(mine.join("notes.txt")).unwrap(),
        "mine\n"
    );

    git(&repo, &["branch", "worktree-T2"]);
    let refused = ws.create("T2").await.unwrap_err();
    assert!(
        refused.0.contains("the branch `worktree-T2` exists"),
        "{refused}"
    );
    assert!(ws.remove("T2").await.is_err());
    assert_eq!(
        git(&repo, &["branch", "--list", "worktree-T2"]).trim(),
        "worktree-T2"
    );

    // plan-cli's own branch (an earlier attempt's worktree removed by hand) is reused.
    let tree = ws.create("T3").await.unwrap();
    std::fs::write(tree.path.join("c.txt"), "c\n").unwrap();
    ws.commit_all("T3", "[T3] add c").await.unwrap();
    git(
        &repo,
        &[
            "worktree",
            "remove",
            "--force",
            &tree.path.display().to_string(),
        ],
    );
    let again = ws.create("T3").await.unwrap();
    assert!(
        again.path.join("c.txt").exists(),
        "the branch's commit is kept"
    );
}

/// An implementer that deletes its worktree's `.git` (the worktree folder inside the
/// repository, so git would find the repository above it) makes plan-cli commit nothing: the
/// operator's uncommitted files stay uncommitted, and the base does not move.
#[tokio::test]
async fn a_broken_worktree_commits_nothing_outside_it() {
    let dir = tempfile::tempdir().unwrap();
    let repo = repo_with_commit(dir.path());
    let ws = open_with(dir.path(), r#"{"repo": "repo", "worktree_dir": "wt"}"#)
        .await
        .unwrap();
    let tree = ws.create("T1").await.unwrap();
    assert_eq!(tree.path, repo.join("wt/T1"));
    let head = git(&repo, &["rev-parse", "HEAD"]);
    std::fs::write(repo.join("operator.txt"), "work in progress\n").unwrap();
    std::fs::remove_file(tree.path.join(".git")).unwrap();
    std::fs::write(tree.path.join("b.txt"), "b\n").unwrap();
    assert!(ws.worktree("T1").is_none());
    let refused = ws.commit_all("T1", "[T1] add b").await.unwrap_err();
    assert!(refused.0.contains("is no longer the worktree"), "{refused}");
    assert!(ws.head("T1").await.is_err());
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]), head);
    assert!(git(&repo, &["status", "--porcelain"]).contains("?? operator.txt"));

    // A worktree switched to another branch commits nothing either.
    let other = ws.create("T2").await.unwrap();
    git(&other.path, &["checkout", "-q", "-b", "elsewhere"]);
    std::fs::write(other.path.join("c.txt"), "c\n").unwrap();
    let refused = ws.commit_all("T2", "[T2] add c").await.unwrap_err();
    assert!(refused.0.contains("left its branch"), "{refused}");
}

/// One run at a time works in a repository; the lock goes with the workspace.
#[tokio::test]
async fn a_second_workspace_on_one_repository_is_refused_while_the_first_is_open() {
    let dir = tempfile::tempdir().unwrap();
    let first = workspace(dir.path()).await;
    let refused = open_with(dir.path(), r#"{"repo": "repo"}"#)
        .await
        .unwrap_err();
    assert!(refused.contains("another plan-cli run"), "{refused}");
    drop(first);
    drop(open_with(dir.path(), r#"{"repo": "repo"}"#).await.unwrap());
}

/// A git lock file a live process holds is never removed; one nobody holds is.
#[tokio::test]
async fn a_lock_file_a_live_process_holds_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let ws = workspace(dir.path()).await;
    let tree = ws.create("T1").await.unwrap();
    std::fs::write(tree.path.join("b.txt"), "b\n").unwrap();
    ws.commit_all("T1", "[T1] add b").await.unwrap();
    let lock = dir.path().join("repo/.git/index.lock");
    std::fs::write(&lock, "").unwrap();
    let mut holder = Command::new("sleep")
        .arg("60")
        .stdin(std::fs::File::open(&lock).unwrap())
        .spawn()
        .unwrap();
    let refused = ws.merge("T1", "Merge task T1").await.unwrap_err();
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert!(refused.0.contains("held by a running process"), "{refused}");
    assert!(lock.exists());
    // Nobody holds it now: removed after the wait, and the merge goes on.
    assert!(matches!(
        ws.merge("T1", "Merge task T1").await.unwrap(),
        MergeOutcome::Merged(_)
    ));
}

/// `reset` puts a worktree back to a commit, with nothing else in it.
#[tokio::test]
async fn reset_leaves_the_worktree_at_the_commit_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let ws = workspace(dir.path()).await;
    let tree = ws.create("T1").await.unwrap();
    let start = ws.head("T1").await.unwrap();
    std::fs::write(tree.path.join("b.txt"), "b\n").unwrap();
    ws.commit_all("T1", "[T1] add b").await.unwrap();
    let first = ws.head("T1").await.unwrap();
    std::fs::write(tree.path.join("half.txt"), "half\n").unwrap();
    std::fs::write(tree.path.join("a.txt"), "edited\n").unwrap();
    std::fs::create_dir_all(tree.path.join("new/dir")).unwrap();
    std::fs::write(tree.path.join("new/dir/x"), "x").unwrap();
    ws.reset("T1", Some(&first)).await.unwrap();
    assert!(!tree.path.join("half.txt").exists());
    assert!(!tree.path.join("new").exists());
    assert_eq!(
        std::fs::read_to_string(tree.path.join("a.txt")).unwrap(),
        "a\n"
    );
    assert!(tree.path.join("b.txt").exists());
    // Without a commit: where the branch left the base.
    ws.reset("T1", None).await.unwrap();
    assert_eq!(ws.head("T1").await.unwrap(), start);
    assert!(!tree.path.join("b.txt").exists());
}

/// A worktree an earlier plan-cli made (before it kept notes) is its own: a run started then
/// goes on with it. Another repository's folder of that name is not.
#[tokio::test]
async fn a_worktree_made_before_notes_is_taken_up() {
    let dir = tempfile::tempdir().unwrap();
    let ws = workspace(dir.path()).await;
    let repo = dir.path().join("repo");
    let path = dir.path().join(".worktrees/T1");
    git(
        &repo,
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            "worktree-T1",
            &path.display().to_string(),
        ],
    );
    let tree = ws.worktree("T1").expect("taken up");
    assert_eq!(tree.path, path);
    std::fs::write(path.join("b.txt"), "b\n").unwrap();
    ws.commit_all("T1", "[T1] add b").await.unwrap();
    // On another branch it is not the task's.
    let other = dir.path().join(".worktrees/T2");
    git(
        &repo,
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            "feature",
            &other.display().to_string(),
        ],
    );
    assert!(ws.worktree("T2").is_none());
}
