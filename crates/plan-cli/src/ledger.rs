//! Where the ledger is, and opening it.

use std::path::{Path, PathBuf};

use plan_store::Store;

use crate::exit::Failure;

/// The ledger file: `--db`, else `PLAN_DB`, else `.plan/state.db` (clap reads the first two).
#[derive(Debug, Clone)]
pub(crate) struct Ledger {
    path: PathBuf,
}

impl Ledger {
    pub(crate) fn new(db: Option<&Path>) -> Self {
        Ledger {
            path: db.map_or_else(
                || PathBuf::from(plan_store::DEFAULT_PATH),
                Path::to_path_buf,
            ),
        }
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
