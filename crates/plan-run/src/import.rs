//! `import tasks`: a task breakdown folder as a plan of task steps, with the checks a shell
//! will read said before anything runs them.

use std::path::Path;

use plan_workspace::breakdown::{Breakdown, ImportOptions};
pub use plan_workspace::breakdown::{BreakdownError, ShellCheck};
use serde_json::Value;

/// How a breakdown becomes a plan (the flags of `import tasks`).
#[derive(Debug, Clone)]
pub struct ImportTasks {
    /// The tool that implements each task (a coding agent).
    pub implement: String,
    /// The repository the tasks change; by default the manifest's project, else the folder
    /// the import runs in.
    pub repo: Option<std::path::PathBuf>,
    /// Each layer waits for the one before it.
    pub layer_barrier: bool,
    /// Commands run after each merge.
    pub verify_after_merge: Vec<String>,
}

/// A breakdown made a plan.
#[derive(Debug, Clone)]
pub struct Imported {
    /// The plan, as JSON.
    pub plan: Value,
    /// The checks the plan runs with `sh -c`, for the operator to read first.
    pub shell_checks: Vec<ShellCheck>,
}

/// Reads breakdown folder `dir` and makes it a plan as `options` say.
pub fn import_tasks(dir: &Path, options: &ImportTasks) -> Result<Imported, BreakdownError> {
    let breakdown = Breakdown::read(dir)?;
    let (repo, tasks) = breakdown.places(dir, options.repo.as_deref())?;
    let options = ImportOptions {
        implement: options.implement.clone(),
        repo,
        tasks,
        layer_barrier: options.layer_barrier,
        verify_after_merge: options.verify_after_merge.clone(),
    };
    Ok(Imported {
        plan: breakdown.plan(&options)?,
        shell_checks: breakdown.shell_checks(&options),
    })
}
