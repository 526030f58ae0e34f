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
