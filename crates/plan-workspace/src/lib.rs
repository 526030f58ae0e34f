//! The git repository plan-cli's task steps work in ([`GitWorkspace`], plan-ports'
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
use plan_ports::{Commit, MergeOutcome, Trial, Workspace, WorkspaceError, Worktree};
use tokio::process::Command;

/// What this crate reads of a plan's `workspace:` (the plan model's `Workspace` has more; the
/// caller hands these over, so that this crate needs no plan parser).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settings {
    /// The repository, relative to the plan file's folder.
    pub repo: String,
    /// Where worktrees go, relative to the repository (default [`DEFAULT_WORKTREE_DIR`]).
    pub worktree_dir: Option<String>,
    /// The branch tasks start from and merge into (default: the branch checked out now).
    pub base: Option<String>,
}

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
    pub fn of(settings: &Settings, plan_dir: &Path) -> Layout {
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
                // A `..` goes back over a name, never over another `..` (`../../x` stays).
                if matches!(
                    out.components().next_back(),
                    Some(std::path::Component::Normal(_))
                ) {
                    out.pop();
                } else if !matches!(
                    out.components().next_back(),
                    Some(std::path::Component::RootDir)
                ) {
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
    /// `<git common dir>/plan-cli.lock`, locked for as long as this workspace is open: one
    /// run at a time works in a repository (two would share worktrees and merge twice).
    _run_lock: std::fs::File,
    /// The repository's git folder (shared by its worktrees).
    common: PathBuf,
}

/// Where plan-cli notes the worktrees it made, in the worktree folder: `.plan-cli/<ID>`. A
/// task id never starts with `.`, so this never names a task's folder. plan-cli removes or
/// clears a task's folder, and reuses its branch, only when its note is there.
const NOTES_DIR: &str = ".plan-cli";

/// The note, in the base checkout's git folder, that a merge in progress there is plan-cli's
/// (it holds the branch being merged): only such a merge, left half done by a killed
/// plan-cli, is ever aborted.
const MERGE_NOTE: &str = "plan-cli-MERGE";

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
        settings: &Settings,
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
        let worktree_dir = confine(&repo, &layout.worktree_dir)?;
        let common = probe(&repo, &["rev-parse", "--git-common-dir"]).await?;
        if !common.ok {
            return Err(WorkspaceError(format!(
                "cannot find the git folder of {shown}: {}",
                common.stderr.trim()
            )));
        }
        let common = repo.join(common.stdout.trim());
        let run_lock = lock_repository(&common, &shown)?;
        let email = probe(&repo, &["config", "user.email"]).await?;
        Ok(GitWorkspace {
            repo,
            worktree_dir,
            base,
            identity: !email.ok,
            lock: tokio::sync::Mutex::new(()),
            base_dir: std::sync::Mutex::new(None),
            _run_lock: run_lock,
            common,
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

    /// A task's folder. The id is checked again here (validation refuses such plans): a path
    /// must never reach the file system as a task id.
    fn path_of(&self, task: &str) -> Result<PathBuf, WorkspaceError> {
        match plan_types::task_id_problem(task) {
            None => Ok(self.worktree_dir.join(task)),
            Some(problem) => Err(WorkspaceError(format!(
                "`{task}` cannot be a task's id: {problem}"
            ))),
        }
    }

    /// The note that plan-cli made the worktree and branch of `task`.
    fn note_of(&self, task: &str) -> PathBuf {
        self.worktree_dir.join(NOTES_DIR).join(task)
    }

    /// Whether plan-cli made `task`'s worktree: its note is a plain file (not a link).
    fn noted(&self, task: &str) -> bool {
        std::fs::symlink_metadata(self.note_of(task)).is_ok_and(|m| m.is_file())
    }

    fn write_note(&self, task: &str, path: &Path) -> Result<(), WorkspaceError> {
        let notes = self.worktree_dir.join(NOTES_DIR);
        std::fs::create_dir_all(&notes)
            .map_err(|e| WorkspaceError(format!("cannot make {}: {e}", notes.display())))?;
        let note = self.note_of(task);
        std::fs::write(
            &note,
            format!(
                "made by plan-cli for task {task}: {} on {}\n",
                path.display(),
                branch_of(task)
            ),
        )
        .map_err(|e| WorkspaceError(format!("cannot write {}: {e}", note.display())))
    }

    /// Whether `path` is a worktree a plan-cli made before it kept notes (a run started then
    /// and resumed now): a linked worktree of this repository, on the task's branch. Only git
    /// makes such a folder, and a plan cannot run git without `exec`.
    fn made_before_notes(&self, task: &str, path: &Path) -> bool {
        let (Some(git), Ok(worktrees)) = (
            git_dir(path).and_then(|g| std::fs::canonicalize(g).ok()),
            std::fs::canonicalize(self.common.join("worktrees")),
        ) else {
            return false;
        };
        git.starts_with(&worktrees)
            && std::fs::read_to_string(git.join("HEAD"))
                .is_ok_and(|head| head.trim() == format!("ref: refs/heads/{}", branch_of(task)))
    }

    /// The worktree of `task`, checked: its folder holds a linked worktree (`.git` a file) of
    /// this repository, on the task's branch. An implementer that deleted `.git` or switched
    /// branches fails here, before plan-cli commits anything: with the worktree folder inside
    /// the repository, git would otherwise find the repository itself and commit the
    /// operator's files on the base.
    async fn intact(&self, task: &str) -> Result<PathBuf, WorkspaceError> {
        let path = self.path_of(task)?;
        let shown = path.display().to_string();
        let linked = std::fs::symlink_metadata(path.join(".git")).is_ok_and(|m| m.is_file());
        if !linked || !self.noted(task) {
            return Err(WorkspaceError(format!(
                "{shown} is no longer the worktree of task `{task}`: its `.git` is gone"
            )));
        }
        let top = self.git(&path, &["rev-parse", "--show-toplevel"]).await?;
        let same = top.ok
            && std::fs::canonicalize(top.stdout.trim()).ok() == std::fs::canonicalize(&path).ok();
        if !same {
            return Err(WorkspaceError(format!(
                "{shown} is no longer the worktree of task `{task}`: git finds {} there",
                top.stdout.trim()
            )));
        }
        let head = self.git(&path, &["symbolic-ref", "-q", "HEAD"]).await?;
        let branch = format!("refs/heads/{}", branch_of(task));
        if !head.ok || head.stdout.trim() != branch {
            return Err(WorkspaceError(format!(
                "the worktree of task `{task}` left its branch `{}` (HEAD is {}): commits go on the task's branch only",
                branch_of(task),
                if head.ok {
                    head.stdout.trim()
                } else {
                    "detached"
                }
            )));
        }
        Ok(path)
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

    /// The commit that brought `branch` into what `dir` has checked out: the first merge on
    /// it after the branch, else its HEAD (a fast-forward).
    async fn merge_of(&self, dir: &Path, branch: &str) -> Result<String, WorkspaceError> {
        let range = format!("{branch}..HEAD");
        let merges = self
            .must(
                dir,
                &[
                    "rev-list",
                    "--merges",
                    "--ancestry-path",
                    "--reverse",
                    &range,
                ],
            )
            .await?;
        Ok(match merges.lines().next() {
            Some(commit) => commit.to_owned(),
            None => self
                .must(dir, &["rev-parse", "HEAD"])
                .await?
                .trim()
                .to_owned(),
        })
    }

    /// The trial checkout (`<worktree_dir>/.trial-<BASE>`, detached), made the first time
    /// and noted as plan-cli's (`.plan-cli/.trial-<BASE>`, which no task id can name). Only a
    /// noted folder that is a real directory (not a link) and a linked worktree of this
    /// repository is used; anything else there is not plan-cli's, and is refused.
    async fn trial_checkout(&self) -> Result<PathBuf, WorkspaceError> {
        let name = format!(".trial-{}", self.base.replace('/', "-"));
        let dir = self.worktree_dir.join(&name);
        let note = self.worktree_dir.join(NOTES_DIR).join(&name);
        let refused = || {
            WorkspaceError(format!(
                "{} is there and is not plan-cli's trial checkout: move it away, then resume",
                dir.display()
            ))
        };
        match std::fs::symlink_metadata(&dir) {
            Ok(meta) => {
                let noted = std::fs::symlink_metadata(&note).is_ok_and(|m| m.is_file());
                let linked = git_dir(&dir)
                    .and_then(|g| std::fs::canonicalize(g).ok())
                    .zip(std::fs::canonicalize(self.common.join("worktrees")).ok())
                    .is_some_and(|(git, worktrees)| git.starts_with(worktrees));
                if !meta.is_dir() || !noted || !linked {
                    return Err(refused());
                }
            }
            Err(_) => {
                let notes = self.worktree_dir.join(NOTES_DIR);
                std::fs::create_dir_all(&notes)
                    .map_err(|e| WorkspaceError(format!("cannot make {}: {e}", notes.display())))?;
                std::fs::write(
                    &note,
                    format!("made by plan-cli: the trial checkout of {}\n", self.base),
                )
                .map_err(|e| WorkspaceError(format!("cannot write {}: {e}", note.display())))?;
                self.must(&self.repo, &["worktree", "prune"]).await?;
                let shown = dir.display().to_string();
                self.must(
                    &self.repo,
                    &["worktree", "add", "--detach", &shown, &self.base],
                )
                .await?;
            }
        }
        Ok(dir)
    }

    /// `git merge --no-ff BRANCH` in `dir`: merged (its commit), found merged already, or a
    /// conflict (aborted, so `dir` is clean again); git's refusal otherwise.
    async fn merge_in(
        &self,
        dir: &Path,
        branch: &str,
        message: &str,
    ) -> Result<MergeOutcome, WorkspaceError> {
        let merged = self
            .git(
                dir,
                &["merge", "--no-ff", "--no-edit", "-m", message, branch],
            )
            .await?;
        if merged.ok {
            if merged.stdout.contains("Already up") {
                // Merged before (by an earlier attempt at the run that was stopped before it
                // could say so).
                return Ok(MergeOutcome::AlreadyMerged(
                    self.merge_of(dir, branch).await?,
                ));
            }
            let commit = self.must(dir, &["rev-parse", "HEAD"]).await?;
            return Ok(MergeOutcome::Merged(commit.trim().to_owned()));
        }
        let conflicted = self
            .must(dir, &["diff", "--name-only", "--diff-filter=U"])
            .await
            .unwrap_or_default();
        let files: Vec<String> = conflicted.lines().map(str::to_owned).collect();
        if git_dir(dir).is_some_and(|git| git.join("MERGE_HEAD").exists()) {
            self.must(dir, &["merge", "--abort"]).await?;
        }
        if files.is_empty() {
            return Err(WorkspaceError(format!(
                "`git merge {branch}` failed: {}",
                first_lines(&merged.stderr, &merged.stdout)
            )));
        }
        Ok(MergeOutcome::Conflict(files))
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
        // Still there: removed only when no live process holds it open (git keeps its lock
        // file open while it works). Where that cannot be known, it is left for a person.
        match holder_of(&lock) {
            Holder::None => {}
            Holder::Process(pid) => {
                return Err(WorkspaceError(format!(
                    "{} is held by a running process (pid {pid}): another git is working in this repository",
                    lock.display()
                )));
            }
            Holder::Unknown => {
                return Err(WorkspaceError(format!(
                    "{} has been there for 10 s and plan-cli cannot tell whether a live process holds it: remove it if no git is running",
                    lock.display()
                )));
            }
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

/// The worktree folder, checked to lie in the folder that holds the repository (its parent):
/// never an absolute path elsewhere, never a way up and out through `..` or a link, never the
/// repository itself or its git folder. Links in the part that exists are resolved first.
fn confine(repo: &Path, worktree_dir: &Path) -> Result<PathBuf, WorkspaceError> {
    let repo = std::fs::canonicalize(repo)
        .map_err(|e| WorkspaceError(format!("cannot read {}: {e}", repo.display())))?;
    let resolved = resolve_existing(worktree_dir);
    let allowed = repo.parent().unwrap_or(&repo);
    let shown = worktree_dir.display();
    if !resolved.starts_with(allowed) || resolved == allowed {
        return Err(WorkspaceError(format!(
            "the worktree folder {shown} is outside {}, the folder that holds the repository: `workspace.worktree_dir` must stay in it",
            allowed.display()
        )));
    }
    if resolved == repo || resolved.starts_with(repo.join(".git")) {
        return Err(WorkspaceError(format!(
            "the worktree folder {shown} is the repository or its git folder: give `workspace.worktree_dir` a folder of its own"
        )));
    }
    Ok(resolved)
}

/// `path` with its longest existing part resolved (links followed), the rest appended as
/// written (it has no `..`: the path was normalised).
fn resolve_existing(path: &Path) -> PathBuf {
    let mut existing = path.to_path_buf();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = std::fs::canonicalize(&existing) {
            let mut out = real;
            for part in rest.iter().rev() {
                out.push(part);
            }
            return out;
        }
        match (existing.file_name(), existing.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name.to_owned());
                existing = parent.to_path_buf();
            }
            _ => return path.to_path_buf(),
        }
    }
}

/// Locks `<git common dir>/plan-cli.lock` for one run: a second run on the repository (from
/// any process) is refused while the first holds it. The lock goes with the file, so a killed
/// run leaves none.
fn lock_repository(common: &Path, shown: &str) -> Result<std::fs::File, WorkspaceError> {
    let path = common.join("plan-cli.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| WorkspaceError(format!("cannot open {}: {e}", path.display())))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(WorkspaceError(format!(
            "another plan-cli run is working in the repository {shown} (it holds {}): one run at a time works in a repository; wait for it to end, or cancel it",
            path.display()
        ))),
        Err(std::fs::TryLockError::Error(e)) => Err(WorkspaceError(format!(
            "cannot lock {}: {e}",
            path.display()
        ))),
    }
}

/// Who holds a lock file open.
#[derive(Debug, PartialEq, Eq)]
enum Holder {
    None,
    Process(u32),
    /// The system does not say (no `/proc`).
    Unknown,
}

/// Looks through `/proc/*/fd` for a process with `lock` open.
fn holder_of(lock: &Path) -> Holder {
    let Ok(processes) = std::fs::read_dir("/proc") else {
        return Holder::Unknown;
    };
    let wanted = std::fs::canonicalize(lock).unwrap_or_else(|_| lock.to_path_buf());
    for process in processes.flatten() {
        let Some(pid) = process
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(process.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|target| target == wanted) {
                return Holder::Process(pid);
            }
        }
    }
    Holder::None
}

#[async_trait]
impl Workspace for GitWorkspace {
    fn base(&self) -> &str {
        &self.base
    }

    fn worktree(&self, task: &str) -> Option<Worktree> {
        let path = self.path_of(task).ok()?;
        let linked = std::fs::symlink_metadata(path.join(".git")).is_ok_and(|m| m.is_file());
        if linked && !self.noted(task) && self.made_before_notes(task, &path) {
            // A run an earlier plan-cli started goes on with the worktree it made.
            let _ = self.write_note(task, &path);
        }
        (linked && self.noted(task)).then(|| Worktree {
            path,
            branch: branch_of(task),
        })
    }

    async fn create(&self, task: &str) -> Result<Worktree, WorkspaceError> {
        let _repo = self.lock.lock().await;
        let path = self.path_of(task)?;
        let branch = branch_of(task);
        let shown = path.display().to_string();
        std::fs::create_dir_all(&self.worktree_dir).map_err(|e| {
            WorkspaceError(format!("cannot make {}: {e}", self.worktree_dir.display()))
        })?;
        let ours = self.noted(task);
        let branch_ref = format!("refs/heads/{branch}");
        let branch_exists = self
            .git(&self.repo, &["rev-parse", "--verify", "-q", &branch_ref])
            .await?
            .ok;
        if branch_exists && !ours {
            return Err(WorkspaceError(format!(
                "the branch `{branch}` exists and plan-cli did not make it: rename or delete it, or give the task another id"
            )));
        }
        if let Ok(meta) = std::fs::symlink_metadata(&path) {
            if !ours {
                return Err(WorkspaceError(format!(
                    "{shown} exists and plan-cli did not make it: move it away, or set `workspace.worktree_dir` to another folder"
                )));
            }
            if meta.is_dir() {
                // plan-cli's, left half made by a killed process or broken by its
                // implementer: a worktree of the branch is made anew (the branch keeps every
                // commit).
                std::fs::remove_dir_all(&path)
                    .map_err(|e| WorkspaceError(format!("cannot clear {shown}: {e}")))?;
            } else {
                std::fs::remove_file(&path)
                    .map_err(|e| WorkspaceError(format!("cannot clear {shown}: {e}")))?;
            }
        }
        // A worktree git still lists though its folder is gone is forgotten first.
        self.must(&self.repo, &["worktree", "prune"]).await?;
        if branch_exists {
            // An earlier attempt's branch (its worktree was removed): a worktree of it as it is.
            self.must(&self.repo, &["worktree", "add", &shown, &branch])
                .await?;
        } else {
            // The note first: a kill between the two leaves a branch plan-cli knows is its own.
            self.write_note(task, &path)?;
            self.must(
                &self.repo,
                &["worktree", "add", "-b", &branch, &shown, &self.base],
            )
            .await?;
        }
        Ok(Worktree { path, branch })
    }

    async fn head(&self, task: &str) -> Result<String, WorkspaceError> {
        let path = self.intact(task).await?;
        Ok(self
            .must(&path, &["rev-parse", "HEAD"])
            .await?
            .trim()
            .to_owned())
    }

    async fn commit_all(&self, task: &str, message: &str) -> Result<(), WorkspaceError> {
        let path = self.intact(task).await?;
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

    async fn commits_since(&self, task: &str, since: &str) -> Result<Vec<Commit>, WorkspaceError> {
        let path = self.intact(task).await?;
        let range = format!("{since}..HEAD");
        // Fields apart by US (0x1f), commits by RS (0x1e): control characters a commit
        // message has no reason to hold (one that does is read wrong, not run).
        let log = self
            .must(
                &path,
                &[
                    "log",
                    "--reverse",
                    "--first-parent",
                    "--format=%H%x1f%s%x1f%b%x1e",
                    &range,
                ],
            )
            .await?;
        Ok(log
            .split('\x1e')
            .filter_map(|entry| {
                let mut fields = entry.trim_start_matches('\n').splitn(3, '\x1f');
                let hash = fields.next().filter(|h| !h.is_empty())?;
                Some(Commit {
                    hash: hash.to_owned(),
                    subject: fields.next().unwrap_or("").to_owned(),
                    body: fields.next().unwrap_or("").trim().to_owned(),
                })
            })
            .collect())
    }

    async fn merge(&self, task: &str, message: &str) -> Result<MergeOutcome, WorkspaceError> {
        let _repo = self.lock.lock().await;
        let branch = branch_of(task);
        let dir = self.base_checkout().await?;
        self.clear_stale_lock(&dir).await?;
        let git = match git_dir(&dir) {
            Some(git) => git,
            None => PathBuf::from(
                self.must(&dir, &["rev-parse", "--absolute-git-dir"])
                    .await?
                    .trim(),
            ),
        };
        let note = git.join(MERGE_NOTE);
        if git.join("MERGE_HEAD").exists() {
            if !std::fs::read_to_string(&note).is_ok_and(|n| !n.trim().is_empty()) {
                // Someone else's merge (a person resolving a conflict by hand): never
                // aborted. The task waits, as for a conflict, until it is finished.
                return Err(WorkspaceError(format!(
                    "a merge plan-cli did not start is in progress in {}: finish it (`git commit`) or abort it (`git merge --abort`) there, then resume",
                    dir.display()
                )));
            }
            // plan-cli's own merge, left half done by a killed process: the base goes back
            // to clean first.
            self.must(&dir, &["merge", "--abort"]).await?;
        }
        std::fs::write(&note, format!("{branch}\n"))
            .map_err(|e| WorkspaceError(format!("cannot write {}: {e}", note.display())))?;
        let merged = self.merge_in(&dir, &branch, message).await;
        // Done, aborted or refused: no merge of plan-cli's is in progress there now.
        let _ = std::fs::remove_file(&note);
        merged
    }

    async fn merge_trial(&self, task: &str, message: &str) -> Result<Trial, WorkspaceError> {
        let _repo = self.lock.lock().await;
        let branch = branch_of(task);
        let dir = self.trial_checkout().await?;
        self.clear_stale_lock(&dir).await?;
        // The trial is plan-cli's alone: whatever it holds (a merge a kill left half done,
        // files the last checks wrote) goes, and it starts again at the base's tip. Ignored
        // files stay, as in a task's worktree between attempts (build caches, environments).
        if git_dir(&dir).is_some_and(|git| git.join("MERGE_HEAD").exists()) {
            self.must(&dir, &["merge", "--abort"]).await?;
        }
        self.must(&dir, &["checkout", "--force", "--detach", &self.base])
            .await?;
        self.must(&dir, &["clean", "-ffdq"]).await?;
        let outcome = self.merge_in(&dir, &branch, message).await?;
        Ok(Trial {
            outcome,
            folder: dir,
        })
    }

    async fn land(&self, commit: &str) -> Result<(), WorkspaceError> {
        let _repo = self.lock.lock().await;
        let dir = self.base_checkout().await?;
        self.clear_stale_lock(&dir).await?;
        let moved = self.git(&dir, &["merge", "--ff-only", commit]).await?;
        if !moved.ok {
            return Err(WorkspaceError(format!(
                "cannot move `{}` to the checked combination {commit} (`git merge --ff-only`): {}",
                self.base,
                first_lines(&moved.stderr, &moved.stdout)
            )));
        }
        Ok(())
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

    async fn reset(&self, task: &str, commit: Option<&str>) -> Result<(), WorkspaceError> {
        let path = self.intact(task).await?;
        self.clear_stale_lock(&path).await?;
        let target = match commit {
            Some(commit) => commit.to_owned(),
            None => self
                .must(&path, &["merge-base", &self.base, "HEAD"])
                .await?
                .trim()
                .to_owned(),
        };
        self.must(&path, &["reset", "-q", "--hard", &target])
            .await?;
        self.must(&path, &["clean", "-q", "-fdx"]).await?;
        Ok(())
    }

    async fn remove(&self, task: &str) -> Result<(), WorkspaceError> {
        let _repo = self.lock.lock().await;
        let path = self.path_of(task)?;
        if !self.noted(task) {
            // Not plan-cli's: left alone, whatever it is.
            return Err(WorkspaceError(format!(
                "plan-cli did not make {}: it is left as it is",
                path.display()
            )));
        }
        if std::fs::symlink_metadata(&path).is_ok() {
            let shown = path.display().to_string();
            // git removes only a worktree of this repository; anything else it refuses.
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
        let _ = std::fs::remove_file(self.note_of(task));
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

    /// plan-graph's task id rules agree with git's own (`git check-ref-format`) on every id
    /// git would take or refuse as a branch suffix; they are stricter only where an id would
    /// be a path or a hidden folder (`/`, a leading `.`).
    #[test]
    fn task_ids_follow_gits_rules_for_branch_names() {
        for id in [
            "L1-001", "a.b", "@", "né", "-x", "a..b", "a.lock", "a.", "a b", "a~1", "a^", "a:b",
            "a?", "a*", "a[b", "a\\b", "a@{b", "a\tb",
        ] {
            let git = std::process::Command::new("git")
                .args(["check-ref-format", "--branch", &branch_of(id)])
                .output()
                .expect("git must be installed for this test");
            assert_eq!(
                git.status.success(),
                plan_types::task_id_problem(id).is_none(),
                "{id:?}: git says {}",
                String::from_utf8_lossy(&git.stderr)
            );
        }
    }

    #[test]
    fn normalising_keeps_every_way_up() {
        assert_eq!(normalize(Path::new("../../x")), PathBuf::from("../../x"));
        assert_eq!(normalize(Path::new("a/./b/../c")), PathBuf::from("a/c"));
        assert_eq!(normalize(Path::new("a/../../b")), PathBuf::from("../b"));
        assert_eq!(normalize(Path::new("/../a")), PathBuf::from("/a"));
    }

    #[test]
    fn layouts_resolve_against_the_plan_folder() {
        let settings = Settings {
            repo: ".".to_owned(),
            ..Settings::default()
        };
        let layout = Layout::of(&settings, Path::new("/home/me/app"));
        assert_eq!(layout.repo, PathBuf::from("/home/me/app"));
        assert_eq!(layout.worktree_dir, PathBuf::from("/home/me/.worktrees"));
    }
}
