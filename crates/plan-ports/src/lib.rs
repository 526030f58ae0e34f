//! The ports plan-cli's engine is driven through, in a crate of their own so that their
//! implementers need not depend on the engine: [`Tool`] (with its [`Registry`]: the built-ins,
//! MCP servers' and queue workers' tools implement it) and [`Workspace`], the git repository
//! task steps work in (`plan-workspace` implements it with the `git` program).
#![deny(missing_docs)]

#[cfg(feature = "schema")]
pub mod schema;
mod tool;

pub use plan_types::Risk;
pub use tool::{
    Answer, Output, OutputSink, Progress, Registry, Tool, ToolContext, ToolError, ToolInfo, codes,
};

use std::path::PathBuf;

use async_trait::async_trait;

/// A task's worktree: where it is, and its branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Worktree {
    /// The worktree's folder.
    pub path: PathBuf,
    /// Its branch (`worktree-<ID>`).
    pub branch: String,
}

/// One commit of a task's branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    /// Its hash.
    pub hash: String,
    /// Its message's first line.
    pub subject: String,
    /// The rest of its message, trimmed (empty when there is none).
    pub body: String,
}

/// A trial merge: how it went, and the folder it is checked out in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trial {
    /// How merging went there.
    pub outcome: MergeOutcome,
    /// The trial checkout.
    pub folder: PathBuf,
}

/// How merging a task's branch into the base went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MergeOutcome {
    /// Merged: the merge commit.
    Merged(String),
    /// The branch was in the base already (an earlier attempt at the run merged it before it
    /// could say so): the merge commit that holds it.
    AlreadyMerged(String),
    /// The merge conflicted in these files; it was aborted and the base is as it was.
    Conflict(Vec<String>),
}

/// A git operation that failed (not a conflict: git itself, or the repository's state).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct WorkspaceError(pub String);

/// The git repository task steps work in. Each task has a worktree on branch
/// `worktree-<ID>`, made from the base branch; a verified task's branch is merged into the base
/// with `--no-ff`. Implementations serialise what must not run at once in one repository.
#[async_trait]
pub trait Workspace: Send + Sync {
    /// The branch tasks start from and merge into.
    fn base(&self) -> &str;

    /// The task's worktree, if it exists.
    fn worktree(&self, task: &str) -> Option<Worktree>;

    /// Makes the task's worktree: a new branch from the base, or the task's branch as it was
    /// if it is there already (its worktree was removed).
    async fn create(&self, task: &str) -> Result<Worktree, WorkspaceError>;

    /// The commit the task's branch points at.
    async fn head(&self, task: &str) -> Result<String, WorkspaceError>;

    /// Commits everything that changed in the worktree (new files included); nothing when
    /// nothing changed.
    async fn commit_all(&self, task: &str, message: &str) -> Result<(), WorkspaceError>;

    /// The branch's commits after `since`, oldest first.
    async fn commits_since(&self, task: &str, since: &str) -> Result<Vec<Commit>, WorkspaceError>;

    /// Merges the task's branch into the base (`git merge --no-ff`), or finds it merged. A
    /// conflict is aborted, leaving the base clean.
    async fn merge(&self, task: &str, message: &str) -> Result<MergeOutcome, WorkspaceError>;

    /// Makes the merge of the task's branch into the base in a trial checkout, leaving the
    /// base where it is: in [`Trial::outcome`], `Merged` holds the trial's merge commit, which
    /// [`Workspace::land`] moves the base to once the combination's checks pass (in
    /// [`Trial::folder`]); `AlreadyMerged` when the base has the branch already; a conflict
    /// is aborted.
    async fn merge_trial(&self, task: &str, message: &str) -> Result<Trial, WorkspaceError> {
        let _ = (task, message);
        Err(WorkspaceError(
            "this workspace cannot make a trial merge".into(),
        ))
    }

    /// Moves the base to `commit` (a trial merge commit whose checks passed), fast-forward
    /// only: never anything the checks did not see.
    async fn land(&self, commit: &str) -> Result<(), WorkspaceError> {
        let _ = commit;
        Err(WorkspaceError(
            "this workspace cannot land a trial merge".into(),
        ))
    }

    /// Removes the task's worktree and deletes its branch (after its merge).
    async fn remove(&self, task: &str) -> Result<(), WorkspaceError>;

    /// Puts the task's worktree back to `commit` (its last recorded commit; `None`: where the
    /// branch left the base) with nothing else in it: an attempt a kill interrupted starts
    /// again from there, not from what it had half written.
    async fn reset(&self, task: &str, commit: Option<&str>) -> Result<(), WorkspaceError>;

    /// The project's PROJECT.md, when it has one: then the plan's `context_update` call runs
    /// after the last task.
    fn project_md(&self) -> Option<PathBuf> {
        None
    }

    /// The folder where the base is checked out (where the context update runs).
    async fn base_folder(&self) -> Result<PathBuf, WorkspaceError> {
        Err(WorkspaceError("this workspace has no base folder".into()))
    }

    /// The paths that differ from the base's last commit in its folder (changed, new).
    async fn changed(&self) -> Result<Vec<String>, WorkspaceError> {
        Err(WorkspaceError("this workspace cannot list changes".into()))
    }

    /// Commits `paths` on the base; the commit's hash (none when they hold no change).
    async fn commit_base(
        &self,
        paths: &[String],
        message: &str,
    ) -> Result<Option<String>, WorkspaceError> {
        let _ = (paths, message);
        Err(WorkspaceError(
            "this workspace cannot commit on its base".into(),
        ))
    }
}
