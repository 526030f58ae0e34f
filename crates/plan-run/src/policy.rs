//! Who wrote a plan, and what the operator lets them do (`../shared/SPEC.md` §11).
//!
//! A plan has an [`Author`]: the operator, an MCP client, a model or a queue producer. Every
//! author but the operator runs under a [`Policy`] the operator sets; by default a client and
//! a model get the same: low-risk tools only (no `exec`, no `http`), no environment
//! variables, no workspace (task steps), approvals forced on. [`Policy::check`] judges a
//! compiled program by **every call it can make** ([`plan_engine::Program::call_sites`]:
//! steps, map items, block nodes, a task's `implement`, `feedback` and checks,
//! `context_update`) and by its workspace, never by its steps' tool names alone.
//!
//! The policy file (`mcp serve --policy`, `run --policy`, `plan create --policy`) is JSON:
//! `{"allow_tools", "allow_env", "allow_workspace", "workdir", "allow_client_approval",
//! "max_plan_bytes", "max_steps", "max_run_time"}`.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use plan_engine::{CallSite, Program, Risk};
use plan_graph::{Issue, Plan, PlanPath};

/// Who wrote a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Author {
    /// The person running plan-cli: a plan file, stdin, a stored plan they added.
    Operator,
    /// A client of `plan-cli mcp serve`.
    McpClient,
    /// A model: `plan create`, `run --replan`, `plan_create*`.
    Model,
    /// Whoever adds jobs to a worker's queue.
    QueueProducer,
}

impl Author {
    /// Its name in the ledger (`operator`, `mcp_client`, `model`, `queue_producer`).
    pub fn as_str(self) -> &'static str {
        match self {
            Author::Operator => "operator",
            Author::McpClient => "mcp_client",
            Author::Model => "model",
            Author::QueueProducer => "queue_producer",
        }
    }

    /// The author a ledger name stands for. A name this build does not know (a damaged or a
    /// newer ledger) is taken for a model's: the least trusted, never the operator.
    pub fn from_name(name: &str) -> Author {
        match name {
            "operator" => Author::Operator,
            "mcp_client" => Author::McpClient,
            "queue_producer" => Author::QueueProducer,
            _ => Author::Model,
        }
    }

    /// How messages name the authors of a kind (`this server's clients`).
    pub fn describe_plural(self) -> &'static str {
        match self {
            Author::Operator => "the operator",
            Author::McpClient => "this server's clients",
            Author::Model => "models",
            Author::QueueProducer => "queue producers",
        }
    }

    /// How messages name the author.
    pub fn describe(self) -> &'static str {
        match self {
            Author::Operator => "the operator",
            Author::McpClient => "an MCP client",
            Author::Model => "a model",
            Author::QueueProducer => "a queue producer",
        }
    }
}

/// What an author may do. [`Policy::operator`] allows everything; [`Policy::default`] is what
/// an MCP client and a model get unless the operator widens it.
///
/// A run started under a policy keeps it (serialized with its options): `resume`, from any
/// front-end, holds the run to it again (see [`crate::policy_of`]). A field a stored policy
/// lacks takes the restricted default.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Policy {
    /// Every tool (`--allow-tool '*'`).
    pub every_tool: bool,
    /// Tools allowed beyond the low-risk ones, as plans name them or as `SOURCE.NAME`.
    pub tools: BTreeSet<String>,
    /// Environment variables plans may list under `env:`.
    pub env: BTreeSet<String>,
    /// Whether plans may have a `workspace` (task steps: programs in git worktrees, merges
    /// into the base). Its repository must then lie inside [`Policy::workdir`].
    pub workspace: bool,
    /// Whether the author may approve its own plans' high-risk calls.
    pub self_approval: bool,
    /// Whether a plan's `approvals: false` is honoured, and a plan may set `risk: low` on a
    /// call of a tool that is not low-risk (so that it runs without an approval).
    pub lower_risk: bool,
    /// The largest plan text, in bytes.
    pub max_plan_bytes: usize,
    /// The most steps a plan may have.
    pub max_steps: usize,
    /// How long a run may go before it is stopped (resumable).
    pub max_run_time: Option<Duration>,
    /// The folder programs run in, and that a workspace's repository must lie in.
    pub workdir: PathBuf,
}

impl Default for Policy {
    /// What an MCP client and a model get by default.
    fn default() -> Self {
        Policy {
            every_tool: false,
            tools: BTreeSet::new(),
            env: BTreeSet::new(),
            workspace: false,
            self_approval: false,
            lower_risk: false,
            max_plan_bytes: 1024 * 1024,
            max_steps: 1000,
            max_run_time: Some(Duration::from_secs(600)),
            workdir: PathBuf::from("."),
        }
    }
}

/// The policy file: the same powers as the flags.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyFile {
    /// Tools allowed beyond the low-risk ones (`*` for all).
    #[serde(default)]
    pub allow_tools: Vec<String>,
    /// Environment variables plans may read.
    #[serde(default)]
    pub allow_env: Vec<String>,
    /// Task steps and their workspace.
    #[serde(default)]
    pub allow_workspace: bool,
    /// Where programs run.
    pub workdir: Option<PathBuf>,
    /// Clients (or the model's caller) may approve.
    #[serde(default)]
    pub allow_client_approval: bool,
    /// The largest plan, in bytes.
    pub max_plan_bytes: Option<usize>,
    /// The most steps.
    pub max_steps: Option<usize>,
    /// The longest run, as `10m`.
    #[serde(default, deserialize_with = "duration_text")]
    pub max_run_time: Option<Duration>,
}

fn duration_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let text: Option<String> = serde::Deserialize::deserialize(d)?;
    text.map(|t| humantime::parse_duration(&t).map_err(serde::de::Error::custom))
        .transpose()
}

/// A policy file that cannot be read as one.
#[derive(Debug, thiserror::Error)]
pub enum PolicyFileError {
    /// The text is not a policy.
    #[error("not a valid policy: {0}")]
    Invalid(String),
    /// The file could not be read.
    #[error("cannot read the policy {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file's text is not a policy.
    #[error("{}: not a valid policy: {message}", path.display())]
    InvalidFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
}

impl PolicyFile {
    /// Reads a policy file's text.
    pub fn parse(text: &str) -> Result<PolicyFile, PolicyFileError> {
        serde_json::from_str(text).map_err(|e| PolicyFileError::Invalid(e.to_string()))
    }

    /// Reads the policy file at `path`; none gives the default (which widens nothing).
    pub fn read(path: Option<&Path>) -> Result<PolicyFile, PolicyFileError> {
        let Some(path) = path else {
            return Ok(PolicyFile::default());
        };
        let text = std::fs::read_to_string(path).map_err(|source| PolicyFileError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        serde_json::from_str(&text).map_err(|error| PolicyFileError::InvalidFile {
            path: path.to_path_buf(),
            message: error.to_string(),
        })
    }

    /// The restricted policy ([`Policy::default`]) widened by this file.
    pub fn into_policy(self) -> Policy {
        let defaults = Policy::default();
        let tools: BTreeSet<String> = self.allow_tools.into_iter().collect();
        Policy {
            every_tool: tools.contains("*"),
            tools,
            env: self.allow_env.into_iter().collect(),
            workspace: self.allow_workspace,
            self_approval: self.allow_client_approval,
            lower_risk: false,
            max_plan_bytes: self.max_plan_bytes.unwrap_or(defaults.max_plan_bytes),
            max_steps: self.max_steps.unwrap_or(defaults.max_steps),
            max_run_time: self.max_run_time.or(defaults.max_run_time),
            workdir: self.workdir.unwrap_or(defaults.workdir),
        }
    }
}

/// One thing a plan does that its policy does not allow, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Where the plan says it (`steps[2].task.verify[0]`); the root for the plan as a whole.
    pub path: PlanPath,
    /// What is not allowed, in the author's terms (it never tells the author how to widen the
    /// policy: that is the operator's to decide).
    pub message: String,
}

/// A plan its policy refuses: every violation, in plan order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", describe(.author, .violations))]
pub struct PolicyError {
    /// Who wrote the plan.
    pub author: Author,
    /// What the plan may not do.
    pub violations: Vec<Violation>,
}

impl PolicyError {
    /// Each violation as a problem of the plan at the place it makes it (`policy::not_allowed`),
    /// to be shown with its other problems when it is validated.
    pub fn issues(&self) -> Vec<Issue> {
        self.violations
            .iter()
            .map(|violation| {
                let mut issue = Issue::error(
                    "policy::not_allowed",
                    violation.path.clone(),
                    violation.message.clone(),
                );
                issue.label = "not allowed here".to_owned();
                issue.help = Some(format!(
                    "a plan {} wrote may not do this here",
                    self.author.describe()
                ));
                issue
            })
            .collect()
    }
}

fn describe(author: &Author, violations: &[Violation]) -> String {
    let mut text = format!(
        "this plan needs more than {} may use here:",
        author.describe()
    );
    for violation in violations {
        text.push_str("\n- ");
        if !violation.path.to_string().is_empty() {
            text.push_str(&format!("{}: ", violation.path));
        }
        text.push_str(&violation.message);
    }
    text
}

impl Policy {
    /// Everything: the operator's own plans.
    pub fn operator() -> Policy {
        Policy {
            every_tool: true,
            tools: BTreeSet::new(),
            env: BTreeSet::new(),
            workspace: true,
            self_approval: true,
            lower_risk: true,
            max_plan_bytes: plan_graph::MAX_PLAN_BYTES,
            max_steps: usize::MAX,
            max_run_time: None,
            workdir: PathBuf::from("."),
        }
    }

    /// Whether everything is allowed (no check needed).
    pub fn is_operator(&self) -> bool {
        *self == Policy::operator()
    }

    /// Whether the call at `site` may be made.
    fn allows(&self, site: &CallSite) -> bool {
        self.allows_named(&site.tool, site.risk, &site.qualified())
    }

    /// Whether a tool, as `info` describes it, may be offered to the author (a model is told
    /// only of the tools it may use).
    pub fn allows_tool(&self, info: &plan_engine::ToolInfo) -> bool {
        self.allows_named(
            &info.name,
            info.risk,
            &plan_engine::qualified(&info.source, &info.name),
        )
    }

    /// The one rule: every tool, a low-risk one, or one allowed by the name a plan uses or by
    /// `SOURCE.NAME`.
    fn allows_named(&self, name: &str, risk: Risk, qualified: &str) -> bool {
        self.every_tool
            || risk == Risk::Low
            || self.tools.contains(name)
            || self.tools.contains(qualified)
    }

    /// Checks the size of a plan's text (`max_plan_bytes`).
    pub fn check_size(&self, author: Author, bytes: usize) -> Result<(), PolicyError> {
        if bytes <= self.max_plan_bytes {
            return Ok(());
        }
        finish(
            author,
            vec![Violation {
                path: PlanPath::root(),
                message: format!(
                    "the plan is {bytes} bytes; plans of at most {} are allowed",
                    self.max_plan_bytes
                ),
            }],
        )
    }

    /// A plan of `steps` steps, when that is more than `max_steps`.
    pub fn too_many_steps(&self, steps: usize) -> Option<Violation> {
        (steps > self.max_steps).then(|| Violation {
            path: PlanPath::root().key("steps"),
            message: format!(
                "the plan has {steps} steps; at most {} are allowed",
                self.max_steps
            ),
        })
    }

    /// Checks a prepared plan `author` wrote as a run of it is checked: its text's size, then
    /// [`Policy::check`].
    pub fn judge(&self, author: Author, prepared: &crate::Prepared) -> Result<(), PolicyError> {
        self.check_size(author, prepared.loaded.source.text().len())?;
        self.check(author, &prepared.loaded.plan, &prepared.program)
    }

    /// Checks `program` (compiled from `plan`, written by `author`) against this policy:
    /// its size, the environment it reads, every call it can make, and its workspace.
    pub fn check(&self, author: Author, plan: &Plan, program: &Program) -> Result<(), PolicyError> {
        self.check_in(author, plan, program, None)
    }

    /// Checks only the steps of `program` named in `steps` (a re-plan's new steps, written by
    /// a model into the operator's plan): every call they can make, the environment variables
    /// they read (the plan's `env:` is the operator's), and whether they are task steps.
    pub fn check_steps(
        &self,
        author: Author,
        plan: &Plan,
        program: &Program,
        steps: &BTreeSet<String>,
    ) -> Result<(), PolicyError> {
        self.check_in(author, plan, program, Some(steps))
    }

    fn check_in(
        &self,
        author: Author,
        plan: &Plan,
        program: &Program,
        only: Option<&BTreeSet<String>>,
    ) -> Result<(), PolicyError> {
        if self.is_operator() {
            return Ok(());
        }
        let mut violations = Vec::new();
        if let Some(only) = only {
            for (i, step) in plan.steps.iter().enumerate() {
                if !only.contains(&step.id.0) {
                    continue;
                }
                for name in plan_graph::env_read(plan, i) {
                    if !self.every_env() && !self.env.contains(&name) {
                        violations.push(Violation {
                            path: PlanPath::step(i),
                            message: format!(
                                "the step reads the environment variable `{name}`, which is not allowed"
                            ),
                        });
                    }
                }
                if step.task.is_some() && !self.workspace {
                    violations.push(Violation {
                        path: PlanPath::step(i).key("task"),
                        message: "task steps (programs in git worktrees, merges into a branch) are not allowed".to_owned(),
                    });
                }
            }
            for site in program.call_sites() {
                if only.contains(&*site.step) {
                    self.check_site(&site, &mut violations);
                }
            }
            return finish(author, violations);
        }
        violations.extend(self.too_many_steps(plan.steps.len()));
        for (k, name) in plan.env.iter().enumerate() {
            if !self.every_env() && !self.env.contains(name) {
                violations.push(Violation {
                    path: PlanPath::root().key("env").index(k),
                    message: format!("reading the environment variable `{name}` is not allowed"),
                });
            }
        }
        for site in program.call_sites() {
            self.check_site(&site, &mut violations);
        }
        // A declared tool's risk and schema are its author's word, and its jobs reach the
        // operator's workers: only the operator declares tools.
        for (k, tool) in plan.tools.iter().enumerate() {
            violations.push(Violation {
                path: PlanPath::root().key("tools").index(k),
                message: format!(
                    "declaring tools (`{}` on queue `{}`) is the operator's: the plan may call the tools it is given",
                    tool.name, tool.queue
                ),
            });
        }
        if let Some(workspace) = &plan.workspace {
            let at = PlanPath::root().key("workspace");
            if !self.workspace {
                violations.push(Violation {
                    path: at.clone(),
                    message: "task steps and their `workspace` (programs in git worktrees, merges into a branch) are not allowed".to_owned(),
                });
            } else if let Some(tasks) = &workspace.tasks {
                violations.push(Violation {
                    path: at.clone().key("tasks"),
                    message: format!(
                        "`tasks: {tasks}` (where the state file is written) is not allowed"
                    ),
                });
            }
            if self.workspace && !stays_inside(Path::new(&workspace.repo)) {
                // Allowed: the repository must lie in the work folder (plan-workspace keeps
                // the worktrees in the folder that holds it).
                violations.push(Violation {
                    path: at.key("repo"),
                    message: format!(
                        "the repository `{}` is outside the work folder: it must be a folder inside it",
                        workspace.repo
                    ),
                });
            }
        }
        finish(author, violations)
    }

    fn check_site(&self, site: &CallSite, violations: &mut Vec<Violation>) {
        if !self.allows(site) {
            violations.push(Violation {
                path: site.path.clone(),
                message: format!(
                    "the {} calls `{}` ({} risk), which is not allowed: only low-risk tools are{}",
                    site.kind.describe(),
                    site.tool,
                    risk_name(site.risk),
                    if self.tools.is_empty() {
                        String::new()
                    } else {
                        format!(
                            ", and {}",
                            self.tools
                                .iter()
                                .map(|t| format!("`{t}`"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    }
                ),
            });
        } else if !self.lower_risk && site.risk == Risk::High && !site.gated {
            violations.push(Violation {
                path: site.path.clone(),
                message: format!(
                "the {} lowers the risk of `{}`, a high-risk tool, so that it would run unapproved; that is not allowed",
                site.kind.describe(),
                site.tool
                ),
            });
        }
    }

    fn every_env(&self) -> bool {
        self.env.contains("*")
    }

    /// Whether a plan's `approvals: false` (or a run's) may turn approvals off.
    pub fn forces_approvals(&self) -> bool {
        !self.lower_risk
    }

    /// Whether a run held to this policy keeps approvals on though its plan (`plan_says`) or
    /// its front-end (`given`) turns them off, as [`crate::start`] does: for a front-end to
    /// say so before the run.
    pub fn keeps_approvals_on(&self, plan_says: Option<bool>, given: Option<bool>) -> bool {
        self.forces_approvals() && (plan_says == Some(false) || given == Some(false))
    }

    /// This policy, its programs kept in `folder` (the run's: the plan file's, or the one it
    /// is given) unless it names a work folder of its own.
    #[must_use]
    pub fn in_folder(mut self, folder: Option<&Path>) -> Policy {
        if let Some(folder) = folder.filter(|_| self.workdir == Path::new(".")) {
            self.workdir = folder.to_path_buf();
        }
        self
    }
}

fn finish(author: Author, violations: Vec<Violation>) -> Result<(), PolicyError> {
    if violations.is_empty() {
        Ok(())
    } else {
        Err(PolicyError { author, violations })
    }
}

fn risk_name(risk: Risk) -> &'static str {
    match risk {
        Risk::Low => "low",
        Risk::Medium => "medium",
        Risk::High => "high",
    }
}

/// A relative path with no `..` that climbs out: it names a folder inside the one it is
/// resolved against.
fn stays_inside(path: &Path) -> bool {
    let mut depth = 0usize;
    for part in path.components() {
        match part {
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::ParentDir => match depth.checked_sub(1) {
                Some(d) => depth = d,
                None => return false,
            },
            Component::RootDir | Component::Prefix(_) => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_inside_and_out() {
        assert!(stays_inside(Path::new(".")));
        assert!(stays_inside(Path::new("repo")));
        assert!(stays_inside(Path::new("a/../b")));
        assert!(!stays_inside(Path::new("..")));
        assert!(!stays_inside(Path::new("a/../../b")));
        assert!(!stays_inside(Path::new("/etc")));
    }

    #[test]
    fn a_policy_file_that_is_missing_or_wrong_is_named_with_what_is_wrong() {
        assert!(matches!(PolicyFile::read(None), Ok(file) if file.allow_tools.is_empty()));
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.json");
        let error = PolicyFile::read(Some(&missing)).unwrap_err();
        assert!(
            error.to_string().starts_with("cannot read the policy ")
                && error.to_string().contains("nope.json"),
            "{error}"
        );
        let wrong = dir.path().join("wrong.json");
        std::fs::write(&wrong, r#"{"allow_tool": ["exec"]}"#).unwrap();
        let error = PolicyFile::read(Some(&wrong)).unwrap_err().to_string();
        assert!(
            error.contains("wrong.json: not a valid policy: unknown field `allow_tool`"),
            "{error}"
        );
    }

    #[test]
    fn a_policy_file_widens_the_default() {
        let policy = PolicyFile::parse(
            r#"{"allow_tools": ["exec"], "allow_env": ["TOKEN"], "max_run_time": "2m"}"#,
        )
        .unwrap()
        .into_policy();
        assert!(policy.tools.contains("exec"));
        assert!(!policy.every_tool);
        assert_eq!(policy.max_run_time, Some(Duration::from_secs(120)));
        assert!(PolicyFile::parse(r#"{"allow_everything": true}"#).is_err());
        assert!(!Policy::default().is_operator());
        assert!(Policy::operator().is_operator());
    }
}
