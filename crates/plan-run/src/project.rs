//! Where a project keeps its ledger and its MCP configuration, found as every front-end finds
//! them (the CLI, `mcp serve`, a dashboard): the nearest `.plan/` folder upward, the way git
//! finds `.git`.

use std::path::{Path, PathBuf};

use plan_store::{Store, StoreError};

/// The plan [`Project::init`] writes: commented, and it runs as it is.
const STARTER_PLAN: &str = include_str!("starter.yaml");

/// Why a project could not be started ([`Project::init`]).
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// The starter plan's file is there already.
    #[error("{} exists", .0.display())]
    Exists(PathBuf),
    /// The `.plan/` folder cannot be made, or is not this user's.
    #[error("cannot make .plan/: {0}")]
    Project(std::io::Error),
    /// A file cannot be written.
    #[error("cannot write {}: {source}", .path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why not.
        source: std::io::Error,
    },
}

/// The MCP configuration's name in a project's `.plan/` folder.
pub const MCP_CONFIG_NAME: &str = "mcp.json";

/// A project's `.plan/` folder: the nearest one in a folder or above it. A `.plan` file
/// (finger's, in a home folder) is not one, and neither is a folder another user owns: anyone
/// who can write in `/tmp` could make one, with an MCP configuration whose servers every
/// command run below it would start (git refuses such a `.git` for the same reason).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Project {
    dir: PathBuf,
}

impl Project {
    /// The project `start` is in, if any.
    pub fn find(start: &Path) -> Option<Project> {
        start
            .ancestors()
            .map(|dir| dir.join(".plan"))
            .find(|candidate| candidate.is_dir() && owned_here(candidate))
            .map(|dir| Project { dir })
    }

    /// The `.plan/` folders nearer to `start` than its project (or than the root) that are
    /// passed over for their owner, a link or their permissions: a front-end says so, so that
    /// a configuration nobody uses is not a mystery.
    pub fn passed_over(start: &Path) -> Vec<PathBuf> {
        start
            .ancestors()
            .map(|dir| dir.join(".plan"))
            .filter(|candidate| candidate.is_dir())
            .take_while(|candidate| !owned_here(candidate))
            .collect()
    }

    /// Makes the project of `here`: its `.plan/` folder, which only this user may write in
    /// whatever the umask (one every user could write in would not be found again), or the one
    /// that is there if it is this user's.
    pub fn create(here: &Path) -> std::io::Result<Project> {
        let dir = here.join(".plan");
        let mut builder = std::fs::DirBuilder::new();
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o755);
        match builder.create(&dir) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(error) => return Err(error),
        }
        if !owned_here(&dir) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!(
                    "{} is another user's, a link, or every user may write in it",
                    dir.display()
                ),
            ));
        }
        Ok(Project { dir })
    }

    /// Starts a project in `here` ([`Project::create`]), with the plan format's JSON Schema
    /// in it (`plan.schema.json`, which the starter plan's first line points editors at), and
    /// writes the starter plan to `plan` (a commented plan that runs as it is): not over a
    /// file that is there, unless `force`.
    pub fn init(here: &Path, plan: &Path, force: bool) -> Result<Project, InitError> {
        if plan.exists() && !force {
            return Err(InitError::Exists(plan.to_path_buf()));
        }
        let project = Project::create(here).map_err(InitError::Project)?;
        let write = |path: &Path, text: &str| {
            std::fs::write(path, text).map_err(|source| InitError::Write {
                path: path.to_path_buf(),
                source,
            })
        };
        let mut schema =
            serde_json::to_string_pretty(&plan_graph::plan_schema()).unwrap_or_default();
        schema.push('\n');
        write(&project.dir.join("plan.schema.json"), &schema)?;
        write(plan, STARTER_PLAN)?;
        Ok(project)
    }

    /// The `.plan/` folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The project's MCP configuration, if it has one.
    pub fn mcp_config(&self) -> Option<PathBuf> {
        Some(self.dir.join(MCP_CONFIG_NAME)).filter(|path| path.exists())
    }
}

/// Whether `dir` is this process's user's own folder: the entry itself (not a link another
/// user made to a folder of ours) and the folder it names owned by this user, and the folder
/// not writable by every user (who could put an MCP configuration in it). Elsewhere than on Unix,
/// any folder.
fn owned_here(dir: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let me = nix::unistd::geteuid().as_raw();
        let (Ok(entry), Ok(folder)) = (std::fs::symlink_metadata(dir), std::fs::metadata(dir))
        else {
            return false;
        };
        entry.uid() == me && folder.is_dir() && folder.uid() == me && folder.mode() & 0o002 == 0
    }
    #[cfg(not(unix))]
    {
        std::fs::metadata(dir).is_ok_and(|folder| folder.is_dir())
    }
}

/// The ledger file a front-end records runs in and reads them from.
#[derive(Debug, Clone)]
pub struct Ledger {
    path: PathBuf,
    /// Its folder is a `.plan/` another user owns: it is neither read nor written.
    foreign: bool,
    /// Its folder is the `.plan/` of the current folder, made by the first run
    /// ([`Project::create`]).
    in_new_project: bool,
}

impl Ledger {
    /// `given` (a front-end's own setting), else `state.db` in `project`'s `.plan/`, else
    /// [`plan_store::DEFAULT_PATH`] here (the first run then makes `./.plan/`).
    pub fn new(given: Option<&Path>, project: Option<&Project>) -> Self {
        let in_new_project = given.is_none() && project.is_none();
        let (path, foreign) = match (given, project) {
            (Some(path), _) => (path.to_path_buf(), false),
            (None, Some(project)) => (project.dir.join("state.db"), false),
            // The first run makes `./.plan/`; one that is there and not this user's (passed
            // over as a project) is not written into either.
            (None, None) => {
                let path = PathBuf::from(plan_store::DEFAULT_PATH);
                let dir = path.parent().unwrap_or(Path::new("."));
                let foreign = std::fs::symlink_metadata(dir).is_ok() && !owned_here(dir);
                (path, foreign)
            }
        };
        Ledger {
            path,
            foreign,
            in_new_project,
        }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the file is there (commands that only read do not create it).
    pub fn exists(&self) -> bool {
        self.path.exists()
    }

    /// Opens the ledger, creating it if it is not there.
    pub fn open(&self) -> Result<Store, StoreError> {
        self.refuse_foreign()?;
        if self.in_new_project
            && let Some(here) = self.path.parent().and_then(Path::parent)
        {
            Project::create(here).map_err(|error| StoreError::Open {
                path: self.path.clone(),
                message: error.to_string(),
            })?;
        }
        Store::open(&self.path)
    }

    fn refuse_foreign(&self) -> Result<(), StoreError> {
        if !self.foreign {
            return Ok(());
        }
        Err(StoreError::Open {
            path: self.path.clone(),
            message: "its folder is another user's (or others may write in it), so it is not used"
                .to_owned(),
        })
    }

    /// Opens the ledger, refusing to create one ([`StoreError::Missing`]).
    pub fn open_existing(&self) -> Result<Store, StoreError> {
        if !self.exists() {
            return Err(StoreError::Missing {
                path: self.path.clone(),
            });
        }
        self.open()
    }

    /// Opens an existing ledger to read it: read-only when this process may not write it (a
    /// ledger in a read-only folder can still be listed and inspected).
    pub fn open_reader(&self) -> Result<Store, StoreError> {
        self.refuse_foreign()?;
        if !self.exists() {
            return self.open_existing();
        }
        let dir = self
            .path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        // Anything but a regular file is refused by the store; opening a FIFO to try it would
        // block for good.
        if !std::fs::metadata(&self.path).is_ok_and(|file| file.is_file()) {
            return self.open();
        }
        // SQLite writes beside the file (its log), so the folder must be writable too.
        let writable = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.path)
            .is_ok()
            && tempfile::NamedTempFile::new_in(dir).is_ok();
        if writable {
            self.open()
        } else {
            Store::open_read_only(&self.path)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Ledger, Project};

    #[test]
    fn init_writes_the_schema_and_a_starter_plan_and_overwrites_only_when_told() {
        let root = tempfile::tempdir().unwrap();
        let plan = root.path().join("plan.yaml");
        let project = Project::init(root.path(), &plan, false).unwrap();
        assert!(project.dir().join("plan.schema.json").is_file());
        let starter = std::fs::read_to_string(&plan).unwrap();
        assert!(starter.starts_with("# yaml-language-server: $schema=.plan/plan.schema.json"));
        std::fs::write(&plan, "mine").unwrap();
        let refused = Project::init(root.path(), &plan, false).unwrap_err();
        assert!(matches!(refused, super::InitError::Exists(_)), "{refused}");
        assert_eq!(std::fs::read_to_string(&plan).unwrap(), "mine");
        Project::init(root.path(), &plan, true).unwrap();
        assert_eq!(std::fs::read_to_string(&plan).unwrap(), starter);
    }

    #[test]
    fn the_nearest_plan_folder_upward_wins_and_plan_files_do_not_count() {
        let root = tempfile::tempdir().unwrap();
        let project = root.path().join("project");
        let deep = project.join("src/module");
        std::fs::create_dir_all(&deep).unwrap();
        let found = |start| Project::find(start).map(|p| p.dir().to_path_buf());
        assert_eq!(found(&deep), None);
        std::fs::create_dir_all(project.join(".plan")).unwrap();
        assert_eq!(found(&deep), Some(project.join(".plan")));
        // A nearer `.plan` file is not a project folder.
        std::fs::write(deep.join(".plan"), "finger plan").unwrap();
        assert_eq!(found(&deep), Some(project.join(".plan")));
        std::fs::create_dir_all(project.join("src/.plan")).unwrap();
        assert_eq!(found(&deep), Some(project.join("src/.plan")));
    }

    #[cfg(unix)]
    #[test]
    fn a_plan_folder_another_user_owns_is_not_a_project() {
        let root = tempfile::tempdir().unwrap();
        let deep = root.path().join("work");
        std::fs::create_dir_all(deep.join("../.plan")).unwrap();
        assert!(Project::find(&deep).is_some());
        if nix::unistd::geteuid().is_root() {
            // Root can give it away, as another user's `/tmp/.plan` would be.
            nix::unistd::chown(
                &root.path().join(".plan"),
                Some(nix::unistd::Uid::from_raw(65534)),
                None,
            )
            .unwrap();
            assert_eq!(Project::find(&deep), None);
            // A link another user made, to a private folder of ours, is not one either.
            let ours = root.path().join("ours");
            std::fs::create_dir_all(&ours).unwrap();
            let linked = root.path().join("linked");
            std::fs::create_dir_all(&linked).unwrap();
            std::os::unix::fs::symlink(&ours, linked.join(".plan")).unwrap();
            assert!(Project::find(&linked).is_some(), "our own link is ours");
            nix::unistd::fchownat(
                nix::fcntl::AT_FDCWD,
                &linked.join(".plan"),
                Some(nix::unistd::Uid::from_raw(65534)),
                None,
                nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
            )
            .unwrap();
            assert_eq!(Project::find(&linked), None);
        } else {
            // Any other user: the root folder is root's.
            assert!(!super::owned_here(std::path::Path::new("/")));
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_linked_or_world_writable_plan_folder_is_not_a_project() {
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::tempdir().unwrap();
        // A folder anyone may write in (as `/tmp` is), and a `.plan` linking to it.
        let open = root.path().join("open");
        std::fs::create_dir_all(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let work = root.path().join("work");
        std::fs::create_dir_all(work.join("deep")).unwrap();
        std::os::unix::fs::symlink(&open, work.join(".plan")).unwrap();
        assert_eq!(Project::find(&work.join("deep")), None);
        // Its own `.plan`, world-writable, is not one either; made private, it is.
        let mine = root.path().join("mine");
        std::fs::create_dir_all(mine.join(".plan")).unwrap();
        std::fs::set_permissions(mine.join(".plan"), std::fs::Permissions::from_mode(0o777))
            .unwrap();
        assert_eq!(Project::find(&mine), None);
        assert_eq!(Project::passed_over(&mine), vec![mine.join(".plan")]);
        std::fs::set_permissions(mine.join(".plan"), std::fs::Permissions::from_mode(0o775))
            .unwrap();
        assert!(
            Project::find(&mine).is_some(),
            "a group may write in its own"
        );
    }

    #[test]
    fn a_ledger_that_is_not_there_is_created_only_when_asked() {
        let root = tempfile::tempdir().unwrap();
        let ledger = Ledger::new(Some(&root.path().join("state.db")), None);
        assert!(matches!(
            ledger.open_reader(),
            Err(plan_store::StoreError::Missing { .. })
        ));
        assert!(!ledger.exists());
        ledger.open().unwrap();
        assert!(ledger.exists());
        ledger.open_reader().unwrap();
    }
}
