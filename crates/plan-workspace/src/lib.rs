//! The git repository plan-cli's task steps work in ([`GitWorkspace`], the engine's
//! [`Workspace`] port): each task has a worktree at `<worktree_dir>/<ID>` on branch
//! `worktree-<ID>`, made from the base branch; a verified task's branch is merged into the base
//! with `git merge --no-ff`, in the worktree where the base is checked out (the repository
//! itself when it is on the base, else one plan-cli makes at `<worktree_dir>/.base-<BASE>`).
//!
//! Everything is the `git` program, run without a shell. Operations on the repository as a
//! whole (adding and removing worktrees, merging) run one at a time; commits in different
//! worktrees run side by side. A merge is idempotent: a branch already in the base is reported
//! merged, not merged again, and a merge left half done by a killed process is aborted first.

#[cfg(feature = "breakdown")]
pub mod breakdown;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;
use plan_engine::{MergeOutcome, Workspace, WorkspaceError, Worktree};
use tokio::process::Command;

/// Where a workspace's repository and worktrees are, from the plan's settings and the plan
/// file's folder, without touching git.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The repository, as the plan names it (relative paths taken from the plan's folder).
    pub repo: PathBuf,
    /// Where worktrees go.
    pub worktree_dir: PathBuf,
}

impl Layout {
    /// The layout of `settings` for a plan in `plan_dir`.
    pub fn of(settings: &plan_graph::Workspace, plan_dir: &Path) -> Layout {
        let repo = normalize(&plan_dir.join(&settings.repo));
        let worktree_dir = normalize(
            &repo.join(
                settings
                    .worktree_dir
                    .as_deref()
                    .unwrap_or(DEFAULT_WORKTREE_DIR),
            ),
        );
        Layout { repo, worktree_dir }
    }
}

/// Where worktrees go unless the plan says: beside the repository.
pub const DEFAULT_WORKTREE_DIR: &str = "../.worktrees";

/// `a/./b/../c` → `a/c`, without touching the file system (the worktree folder may not exist
/// yet).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other),
        }
    }
    out
}

/// A task's branch.
pub fn branch_of(task: &str) -> String {
    format!("worktree-{task}")
}

/// A git repository opened for task steps.
pub struct GitWorkspace {
    repo: PathBuf,
    worktree_dir: PathBuf,
    base: String,
    /// Set when git has no identity configured: commits are then made as plan-cli.
    identity: bool,
    /// Held by operations on the repository as a whole.
    lock: tokio::sync::Mutex<()>,
    /// Where the base is checked out, once found.
    base_dir: std::sync::Mutex<Option<PathBuf>>,
}

impl std::fmt::Debug for GitWorkspace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GitWorkspace")
            .field("repo", &self.repo)
            .field("worktree_dir", &self.worktree_dir)
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

/// What a git command printed, and whether it succeeded.
struct Ran {
    ok: bool,
    stdout: String,
    stderr: String,
}

impl GitWorkspace {
    /// Opens the repository of `settings` for a plan in `plan_dir`: it must be a git repository
    /// with at least one commit; the base is `settings.base` (which must exist) or the branch
    /// checked out now.
    pub async fn open(
        settings: &plan_graph::Workspace,
        plan_dir: &Path,
    ) -> Result<GitWorkspace, WorkspaceError> {
        let layout = Layout::of(settings, plan_dir);
        let shown = layout.repo.display().to_string();
        if !layout.repo.is_dir() {
            return Err(WorkspaceError(format!(
                "the workspace repository {shown} is not a folder"
            )));
        }
        let top = probe(&layout.repo, &["rev-parse", "--show-toplevel"]).await?;
        if !top.ok {
            return Err(WorkspaceError(format!(
                "the workspace repository {shown} is not a git repository ({})",
                top.stderr.trim()
            )));
        }
        let repo = PathBuf::from(top.stdout.trim());
        let head = probe(&repo, &["rev-parse", "--verify", "-q", "HEAD"]).await?;
        if !head.ok {
            return Err(WorkspaceError(format!(
                "the workspace repository {shown} has no commit yet: tasks start from the base branch's last commit"
            )));
        }
        let base = match &settings.base {
            Some(base) => {
                let branch = format!("refs/heads/{base}");
                let exists = probe(&repo, &["rev-parse", "--verify", "-q", &branch]).await?;
                if !exists.ok {
                    return Err(WorkspaceError(format!(
                        "the workspace's base branch `{base}` does not exist in {shown}"
                    )));
                }
                base.clone()
            }
            None => {
                let current = probe(&repo, &["symbolic-ref", "-q", "--short", "HEAD"]).await?;
                if !current.ok {
                    return Err(WorkspaceError(format!(
                        "{shown} is on no branch (a detached HEAD): name the base with `workspace.base`"
                    )));
                }
                current.stdout.trim().to_owned()
            }
        };
        let email = probe(&repo, &["config", "user.email"]).await?;
        Ok(GitWorkspace {
            repo,
            worktree_dir: layout.worktree_dir,
            base,
            identity: !email.ok,
            lock: tokio::sync::Mutex::new(()),
            base_dir: std::sync::Mutex::new(None),
        })
    }

    /// The repository's top folder.
    pub fn repo(&self) -> &Path {
        &self.repo
    }

    /// Where the worktrees are.
    pub fn worktree_dir(&self) -> &Path {
        &self.worktree_dir
    }

    fn path_of(&self, task: &str) -> PathBuf {
        self.worktree_dir.join(task)
    }

    async fn git(&self, dir: &Path, args: &[&str]) -> Result<Ran, WorkspaceError> {
        run_git(dir, args, self.identity)
            .await
            .map_err(|e| WorkspaceError(format!("cannot run git: {e}")))
    }

    /// Runs git and fails with what it printed when it fails.
    async fn must(&self, dir: &Path, args: &[&str]) -> Result<String, WorkspaceError> {
        let ran = self.git(dir, args).await?;
        if ran.ok {
            Ok(ran.stdout)
        } else {
            Err(WorkspaceError(format!(
                "`git {}` failed: {}",
                args.join(" "),
                first_lines(&ran.stderr, &ran.stdout)
            )))
        }
    }

    /// The folder where the base branch is checked out: the repository or another worktree
    /// of it, else a worktree made for merging. Found once, then checked by reading its HEAD.
    async fn base_checkout(&self) -> Result<PathBuf, WorkspaceError> {
        let wanted = format!("ref: refs/heads/{}", self.base);
        let on_base = |dir: &Path| {
            git_dir(dir)
                .and_then(|g| std::fs::read_to_string(g.join("HEAD")).ok())
                .is_some_and(|head| head.trim() == wanted)
        };
        if let Some(dir) = self.base_dir.lock().ok().and_then(|d| d.clone())
            && on_base(&dir)
        {
            return Ok(dir);
        }
        let list = self
            .must(&self.repo, &["worktree", "list", "--porcelain"])
            .await?;
        let branch_line = format!("branch refs/heads/{}", self.base);
        let mut path: Option<&str> = None;
        let mut found = None;
        for line in list.lines() {
            if let Some(p) = line.strip_prefix("worktree ") {
                path = Some(p);
            } else if line == branch_line
                && let Some(p) = path
                && Path::new(p).is_dir()
            {
                found = Some(PathBuf::from(p));
                break;
            }
        }
        let dir = match found {
            Some(dir) => dir,
            None => {
                let dir = self
                    .worktree_dir
                    .join(format!(".base-{}", self.base.replace('/', "-")));
                self.must(&self.repo, &["worktree", "prune"]).await?;
                let shown = dir.display().to_string();
                self.must(&self.repo, &["worktree", "add", &shown, &self.base])
                    .await?;
                dir
            }
        };
        if let Ok(mut cached) = self.base_dir.lock() {
            *cached = Some(dir.clone());
        }
        Ok(dir)
    }

    /// A lock file a killed git left in `dir`'s git folder: waited for a while (a git that
    /// outlived plan-cli may still be finishing), then removed.
    async fn clear_stale_lock(&self, dir: &Path) -> Result<(), WorkspaceError> {
        let git = match git_dir(dir) {
            Some(git) => git,
            None => PathBuf::from(
                self.must(dir, &["rev-parse", "--absolute-git-dir"])
                    .await?
                    .trim(),
            ),
        };
        let lock = git.join("index.lock");
        for _ in 0..100 {
            if !lock.exists() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        match std::fs::remove_file(&lock) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(WorkspaceError(format!(
                "cannot remove {}: {e}",
                lock.display()
            ))),
            _ => Ok(()),
        }
    }
}

/// The git folder of a checkout, read from its `.git` (a folder, or a file naming it in a
/// linked worktree) without running git.
fn git_dir(dir: &Path) -> Option<PathBuf> {
    let dot_git = dir.join(".git");
    if dot_git.is_dir() {
        return Some(dot_git);
    }
    let text = std::fs::read_to_string(&dot_git).ok()?;
    let named = text.trim().strip_prefix("gitdir:")?.trim();
    Some(dir.join(named))
}

#[async_trait]
impl Workspace for GitWorkspace {
    fn base(&self) -> &str {
        &self.base
    }

    fn worktree(&self, task: &str) -> Option<Worktree> {
        let path = self.path_of(task);
        path.join(".git").exists().then(|| Worktree {
            path,
            branch: branch_of(task),
        })
    }

    async fn create(&self, task: &str) -> Result<Worktree, WorkspaceError> {
        let _repo = self.lock.lock().await;
        let path = self.path_of(task);
        let branch = branch_of(task);
        std::fs::create_dir_all(&self.worktree_dir).map_err(|e| {
            WorkspaceError(format!("cannot make {}: {e}", self.worktree_dir.display()))
        })?;
        if path.exists() && !path.join(".git").exists() {
            // Left half made by a process that was killed: it holds nothing of the task's.
            std::fs::remove_dir_all(&path)
                .map_err(|e| WorkspaceError(format!("cannot clear {}: {e}", path.display())))?;
        }
        let shown = path.display().to_string();
        // A new branch from the base; if the branch is there already (an earlier attempt's
        // worktree was removed), a worktree of it as it is.
        let new = ["worktree", "add", "-b", &branch, &shown, &self.base];
        if self.git(&self.repo, &new).await?.ok {
            return Ok(Worktree { path, branch });
        }
        // A worktree git still lists though its folder is gone is forgotten first.
        self.must(&self.repo, &["worktree", "prune"]).await?;
        self.must(&self.repo, &["worktree", "add", &shown, &branch])
            .await?;
        Ok(Worktree { path, branch })
    }

    async fn head(&self, task: &str) -> Result<String, WorkspaceError> {
        let path = self.path_of(task);
        Ok(self
            .must(&path, &["rev-parse", "HEAD"])
            .await?
            .trim()
            .to_owned())
    }

    async fn commit_all(&self, task: &str, message: &str) -> Result<(), WorkspaceError> {
        let path = self.path_of(task);
        self.clear_stale_lock(&path).await?;
        self.must(&path, &["add", "-A"]).await?;
        let committed = self.git(&path, &["commit", "-q", "-m", message]).await?;
        // Nothing staged: nothing to commit, which the caller sees as no new commit.
        if committed.ok || committed.stdout.contains("nothing to commit") {
            return Ok(());
        }
        Err(WorkspaceError(format!(
            "`git commit` failed: {}",
            first_lines(&committed.stderr, &committed.stdout)
        )))
    }

    async fn commits_since(
        &self,
        task: &str,
        since: &str,
    ) -> Result<Vec<(String, String)>, WorkspaceError> {
        let path = self.path_of(task);
        let range = format!("{since}..HEAD");
        let log = self
            .must(
                &path,
                &[
                    "log",
                    "--reverse",
                    "--first-parent",
                    "--format=%H%x09%s",
                    &range,
                ],
            )
            .await?;
        Ok(log
            .lines()
            .filter_map(|line| line.split_once('\t'))
            .map(|(hash, subject)| (hash.to_owned(), subject.to_owned()))
            .collect())
    }

    async fn merge(&self, task: &str, message: &str) -> Result<MergeOutcome, WorkspaceError> {
        let _repo = self.lock.lock().await;
        let branch = branch_of(task);
        let dir = self.base_checkout().await?;
        self.clear_stale_lock(&dir).await?;
        if git_dir(&dir).is_some_and(|g| g.join("MERGE_HEAD").exists()) {
            // A merge a killed process left half done: the base goes back to clean first.
            self.must(&dir, &["merge", "--abort"]).await?;
        }
        let merged = self
            .git(
                &dir,
                &["merge", "--no-ff", "--no-edit", "-m", message, &branch],
            )
            .await?;
        if merged.ok {
            if merged.stdout.contains("Already up") {
                // Merged before (by an earlier attempt at the run that was stopped before it
                // could say so): the merge commit is the first on the base after the branch.
                let range = format!("{branch}..HEAD");
                let merges = self
                    .must(
                        &dir,
                        &[
                            "rev-list",
                            "--merges",
                            "--ancestry-path",
                            "--reverse",
                            &range,
                        ],
                    )
                    .await?;
                let commit = match merges.lines().next() {
                    Some(commit) => commit.to_owned(),
                    None => self
                        .must(&dir, &["rev-parse", "HEAD"])
                        .await?
                        .trim()
                        .to_owned(),
                };
                return Ok(MergeOutcome::AlreadyMerged(commit));
            }
            let commit = self.must(&dir, &["rev-parse", "HEAD"]).await?;
            return Ok(MergeOutcome::Merged(commit.trim().to_owned()));
        }
        let conflicted = self
            .must(&dir, &["diff", "--name-only", "--diff-filter=U"])
            .await
            .unwrap_or_default();
        let files: Vec<String> = conflicted.lines().map(str::to_owned).collect();
        if git_dir(&dir).is_some_and(|g| g.join("MERGE_HEAD").exists()) {
            self.must(&dir, &["merge", "--abort"]).await?;
        }
        if files.is_empty() {
            return Err(WorkspaceError(format!(
                "`git merge {branch}` failed: {}",
                first_lines(&merged.stderr, &merged.stdout)
            )));
        }
        Ok(MergeOutcome::Conflict(files))
    }

    fn project_md(&self) -> Option<PathBuf> {
        Some(self.repo.join("PROJECT.md")).filter(|path| path.is_file())
    }

    async fn base_folder(&self) -> Result<PathBuf, WorkspaceError> {
        let _repo = self.lock.lock().await;
        self.base_checkout().await
    }

    async fn changed(&self) -> Result<Vec<String>, WorkspaceError> {
        let dir = self.base_folder().await?;
        let status = self
            .must(
                &dir,
                &["status", "--porcelain=v1", "-z", "--untracked-files=all"],
            )
            .await?;
        // `XY PATH\0`, and for a rename `XY NEW\0OLD\0`: the old path is not a change here.
        let mut paths = Vec::new();
        let mut entries = status.split('\0').filter(|e| !e.is_empty());
        while let Some(entry) = entries.next() {
            let Some(path) = entry.get(3..) else { continue };
            if entry.starts_with('R') || entry.starts_with('C') {
                entries.next();
            }
            paths.push(path.to_owned());
        }
        Ok(paths)
    }

    async fn commit_base(
        &self,
        paths: &[String],
        message: &str,
    ) -> Result<Option<String>, WorkspaceError> {
        let _repo = self.lock.lock().await;
        let dir = self.base_checkout().await?;
        let mut add = vec!["add", "-A", "--"];
        add.extend(paths.iter().map(String::as_str));
        self.must(&dir, &add).await?;
        let mut commit = vec!["commit", "-q", "-m", message, "--"];
        commit.extend(paths.iter().map(String::as_str));
        let committed = self.git(&dir, &commit).await?;
        if !committed.ok {
            if committed.stdout.contains("nothing to commit") {
                return Ok(None);
            }
            return Err(WorkspaceError(format!(
                "`git commit` on `{}` failed: {}",
                self.base,
                first_lines(&committed.stderr, &committed.stdout)
            )));
        }
        let head = self.must(&dir, &["rev-parse", "HEAD"]).await?;
        Ok(Some(head.trim().to_owned()))
    }

    async fn remove(&self, task: &str) -> Result<(), WorkspaceError> {
        let _repo = self.lock.lock().await;
        let path = self.path_of(task);
        if path.exists() {
            let shown = path.display().to_string();
            self.must(&self.repo, &["worktree", "remove", "--force", &shown])
                .await?;
        } else {
            self.must(&self.repo, &["worktree", "prune"]).await?;
        }
        let branch = branch_of(task);
        let deleted = self.git(&self.repo, &["branch", "-D", &branch]).await?;
        if !deleted.ok && !deleted.stderr.contains("not found") {
            return Err(WorkspaceError(format!(
                "`git branch -D {branch}` failed: {}",
                first_lines(&deleted.stderr, &deleted.stdout)
            )));
        }
        Ok(())
    }
}

/// Runs `git ARGS` in `dir`: no prompt, no automatic gc, messages in English; with
/// `identity`, commits are made as plan-cli (git has none configured).
/// A git query while opening the workspace: git that cannot run at all is the error.
async fn probe(dir: &Path, args: &[&str]) -> Result<Ran, WorkspaceError> {
    run_git(dir, args, false)
        .await
        .map_err(|e| WorkspaceError(format!("cannot run git: {e}")))
}

async fn run_git(dir: &Path, args: &[&str], identity: bool) -> std::io::Result<Ran> {
    let mut command = Command::new("git");
    command
        .args(["-c", "gc.auto=0", "-c", "core.quotepath=off"])
        .args(args)
        .current_dir(dir)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if identity {
        for (name, value) in [
            ("GIT_AUTHOR_NAME", "plan-cli"),
            ("GIT_AUTHOR_EMAIL", "plan-cli@localhost"),
            ("GIT_COMMITTER_NAME", "plan-cli"),
            ("GIT_COMMITTER_EMAIL", "plan-cli@localhost"),
        ] {
            command.env(name, value);
        }
    }
    let output = command.output().await?;
    Ok(Ran {
        ok: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    })
}

/// The first few lines of what git said, for an error, on one line: the files git lists
/// (indented) after a line ending in `:` are joined with commas.
fn first_lines(stderr: &str, stdout: &str) -> String {
    let text = if stderr.trim().is_empty() {
        stdout
    } else {
        stderr
    };
    let mut out = String::new();
    // Whether the last line was one of a list of files.
    let mut in_list = false;
    for raw in text.trim().lines().take(8) {
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        let listed = raw.starts_with(char::is_whitespace) && (in_list || out.ends_with(':'));
        let separator = if out.is_empty() {
            ""
        } else if listed && in_list {
            ", "
        } else if out.ends_with(':') || (!in_list && out.ends_with('.')) {
            " "
        } else {
            "; "
        };
        out.push_str(separator);
        out.push_str(line);
        in_list = listed;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_git_says_reads_as_one_line_with_its_files_listed() {
        let refused = "error: Your local changes to the following files would be overwritten by merge:\n\tcalc.py\n\tlib/a b.py\nPlease commit your changes or stash them before you merge.\nAborting\nMerge with strategy ort failed.\n";
        assert_eq!(
            first_lines(refused, ""),
            "error: Your local changes to the following files would be overwritten by merge: calc.py, lib/a b.py; Please commit your changes or stash them before you merge. Aborting; Merge with strategy ort failed."
        );
        assert_eq!(first_lines("", "one\ntwo\n"), "one; two");
    }

    #[test]
    fn layouts_resolve_against_the_plan_folder() {
        let settings: plan_graph::Workspace = serde_json::from_str(r#"{"repo": "."}"#).unwrap();
        let layout = Layout::of(&settings, Path::new("/home/me/app"));
        assert_eq!(layout.repo, PathBuf::from("/home/me/app"));
        assert_eq!(layout.worktree_dir, PathBuf::from("/home/me/.worktrees"));
    }
}
