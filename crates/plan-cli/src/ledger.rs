//! Where the ledger is, and opening it.

use std::path::{Path, PathBuf};

use plan_store::Store;

use crate::exit::Failure;

/// The ledger file: `--db`, else `PLAN_DB` (clap reads those two), else `state.db` in the
/// project's `.plan/` folder (see [`project_dir`]).
#[derive(Debug, Clone)]
pub(crate) struct Ledger {
    path: PathBuf,
}

/// The project's `.plan/` folder: the nearest one in the current directory or above it, the
/// way git finds `.git`, so every command run anywhere inside a project uses its ledger and
/// MCP configuration. `None` outside any project (the first run then makes `./.plan/`).
pub(crate) fn project_dir() -> Option<PathBuf> {
    let here = std::env::current_dir().ok()?;
    nearest_plan_dir(&here)
}

fn nearest_plan_dir(start: &Path) -> Option<PathBuf> {
    start
        .ancestors()
        .map(|dir| dir.join(".plan"))
        // A `.plan` file (finger's, in a home folder) is not a project.
        .find(|candidate| candidate.is_dir())
}

impl Ledger {
    pub(crate) fn new(db: Option<&Path>, project: Option<&Path>) -> Self {
        let path = match (db, project) {
            (Some(db), _) => db.to_path_buf(),
            (None, Some(project)) => project.join("state.db"),
            (None, None) => PathBuf::from(plan_store::DEFAULT_PATH),
        };
        Ledger { path }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the file is there (commands that only read do not create it).
    pub(crate) fn exists(&self) -> bool {
        self.path.exists()
    }

    pub(crate) fn open(&self) -> Result<Store, Failure> {
        Store::open(&self.path).map_err(Failure::ledger)
    }

    /// Opens an existing ledger to read it: read-only when this process may not write it (a
    /// ledger in a read-only folder can still be listed and inspected).
    pub(crate) fn open_reader(&self) -> Result<Store, Failure> {
        if !self.exists() {
            return self.open_existing();
        }
        let dir = self
            .path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        // SQLite writes beside the file (its log), so the folder must be writable too.
        let writable = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.path)
            .is_ok()
            && tempfile::NamedTempFile::new_in(dir).is_ok();
        if writable {
            self.open()
        } else {
            Store::open_read_only(&self.path).map_err(Failure::ledger)
        }
    }

    /// Opens the ledger for reading, refusing to create one that is not there.
    pub(crate) fn open_existing(&self) -> Result<Store, Failure> {
        if !self.exists() {
            return Err(Failure::input(format!(
                "there is no ledger at {} (runs are recorded there; use --db or PLAN_DB to point elsewhere)",
                self.path.display()
            )));
        }
        self.open()
    }
}

#[cfg(test)]
mod tests {
    use super::nearest_plan_dir;

    #[test]
    fn the_nearest_plan_folder_upward_wins_and_plan_files_do_not_count() {
        let root = tempfile::tempdir().unwrap();
        let project = root.path().join("project");
        let deep = project.join("src/module");
        std::fs::create_dir_all(&deep).unwrap();
        assert_eq!(nearest_plan_dir(&deep), None);
        std::fs::create_dir_all(project.join(".plan")).unwrap();
        assert_eq!(nearest_plan_dir(&deep), Some(project.join(".plan")));
        // A nearer `.plan` file is not a project folder.
        std::fs::write(deep.join(".plan"), "finger plan").unwrap();
        assert_eq!(nearest_plan_dir(&deep), Some(project.join(".plan")));
        std::fs::create_dir_all(project.join("src/.plan")).unwrap();
        assert_eq!(nearest_plan_dir(&deep), Some(project.join("src/.plan")));
    }
}
