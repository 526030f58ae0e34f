//! The tools a plan can use: the built-ins, plus the tools of the MCP servers of an MCP
//! configuration, whose servers start only when a plan names one of their tools; with a queue,
//! every call goes to its workers instead.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use plan_engine::Registry;
use plan_tools::mcp::{McpConfig, McpServers};

/// Why the tools could not be found.
#[derive(Debug, thiserror::Error)]
pub enum ToolsError {
    /// The MCP configuration file cannot be read.
    #[error("cannot read the MCP configuration {}: {source}", .path.display())]
    ReadConfig {
        /// The file.
        path: PathBuf,
        /// Why not.
        source: std::io::Error,
    },
    /// The MCP configuration does not say what a configuration must.
    #[error("{}: {message}", .path.display())]
    Config {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A server was asked for by name, but there is no MCP configuration.
    #[error("{server}: there is no MCP configuration")]
    NoConfig {
        /// The server asked for.
        server: String,
    },
    /// A server could not be started or asked for its tools.
    #[error(transparent)]
    Server(#[from] plan_tools::mcp::McpError),
    /// Tools were named that there are none of.
    #[error("there is no tool `{0}`")]
    Unknown(String),
    /// A plan declares a tool plan-cli already has.
    #[error(
        "the plan declares the tool `{name}`, which plan-cli already has ({owner}): a plan cannot redefine a tool; give the declared one another name"
    )]
    Declared {
        /// The tool.
        name: String,
        /// Whose it is.
        owner: ToolOwner,
    },
    /// The queue's Redis could not be asked for its workers' tools. (Feature `queue`.)
    #[cfg(feature = "queue")]
    #[error(transparent)]
    Queue(#[from] plan_queue::QueueError),
}

/// Whose a tool is that a plan declares again ([`ToolsError::Declared`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolOwner {
    /// One of plan-cli's built-in tools (`echo`, `exec`, …).
    BuiltIn,
    /// A tool of this MCP server of the configuration.
    Server(String),
    /// A tool a worker of the queue publishes.
    Worker,
}

impl std::fmt::Display for ToolOwner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ToolOwner::BuiltIn => f.write_str("it is built in"),
            ToolOwner::Server(server) => write!(f, "a tool of the MCP server `{server}`"),
            ToolOwner::Worker => f.write_str("published by a worker"),
        }
    }
}

/// Every tool a front-end lists (`plan-cli tools`), and the servers that could not be asked.
pub struct Catalog {
    /// Each tool once (an MCP tool under its qualified name), sorted by name.
    pub tools: Vec<plan_engine::ToolInfo>,
    /// Servers left out, each with why.
    pub broken: Vec<(String, String)>,
}

/// Where a plan's tools come from, for the whole process: MCP servers started while a plan is
/// prepared stay connected while it runs, and are stopped by [`Toolbox::shutdown`].
pub struct Toolbox {
    builtins: Registry,
    /// The MCP configuration read, as an absolute path (kept with runs).
    config: Option<PathBuf>,
    servers: Option<McpServers>,
    /// With a queue: every tool call goes to the workers through it.
    #[cfg(feature = "queue")]
    queue: std::sync::OnceLock<std::sync::Arc<plan_queue::Dispatcher>>,
}

/// The tools a front-end that goes on with stored runs by itself (the dashboard) gives each
/// one: what `plan-cli resume RUN` would give it with the front-end's own settings — the
/// built-ins with `exec` in the run's folder, the servers of the run's MCP configuration, and
/// its queue's workers for a run whose calls went to a queue.
#[derive(Debug, Clone, Default)]
pub struct ToolSettings {
    /// An MCP configuration the operator gave (`--mcp-config`): it wins over a run's own.
    pub mcp_config: Option<PathBuf>,
    /// The project's (`.plan/mcp.json`), for a run that kept none.
    pub project_config: Option<PathBuf>,
    /// The built-in `exec` as the operator configured it (the variables it passes through);
    /// each run's programs run in the run's own folder.
    pub exec: plan_tools::Exec,
}

impl ToolSettings {
    /// The tools of a run with `exec`'s programs in `folder`: `kept` is what the run kept of
    /// its tools (nothing for a new run). `env` gives `${env.NAME}` in the MCP configuration.
    pub fn toolbox(
        &self,
        kept: &crate::Kept,
        folder: Option<PathBuf>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Toolbox, ToolsError> {
        let mut builtins = plan_tools::builtin_registry();
        builtins.register(match folder {
            Some(dir) => self.exec.clone().in_dir(dir),
            None => self.exec.clone(),
        });
        // The operator's, else the run's own, else the project's.
        let config = kept.mcp_config(self.mcp_config.clone(), None);
        match config.or_else(|| self.project_config.clone()) {
            Some(path) => Toolbox::with_mcp_config(builtins, &path, env),
            None => Ok(Toolbox::new(builtins)),
        }
    }

    /// The tools run `kept` goes on with, in its own folder, as `plan-cli resume RUN` would
    /// give them. `env` reads the environment: `${env.NAME}` in the MCP configuration,
    /// `PLAN_QUEUE` and `REDIS_URL` for the run's queue (as `resume` reads them without
    /// `--queue`), and `PLAN_QUEUE_SECRET`, which signs its jobs.
    pub async fn toolbox_for(
        &self,
        kept: &crate::Kept,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Toolbox, crate::LifecycleError> {
        let folder = kept.folder(None);
        let folder = folder.map_err(|error| crate::LifecycleError::Refused(error.to_string()))?;
        let toolbox = self.toolbox(kept, folder, env)?;
        #[cfg(feature = "queue")]
        if let Some(run_id) = &kept.run_id {
            // As `plan-cli resume RUN` reads them: PLAN_QUEUE (its `--queue`), REDIS_URL; an
            // empty one is none.
            let set = |name: &str| env(name).filter(|value| !value.is_empty());
            let (given, redis) = (set("PLAN_QUEUE"), set("REDIS_URL"));
            let chosen =
                (kept.sources).queue_going_on(run_id, given.as_deref(), None, redis.as_deref())?;
            if let Some((url, name)) = chosen {
                let options = plan_queue::DispatchOptions {
                    secret: env("PLAN_QUEUE_SECRET").and_then(plan_queue::QueueSecret::new),
                    ..plan_queue::DispatchOptions::default()
                };
                toolbox.connect_queue(&url, &name, options).await?;
            }
        }
        Ok(toolbox)
    }
}

/// A plan's tools: the registry to compile it with, and the bare names that several servers
/// have (an error at the step that uses one).
pub struct PlanTools {
    /// Every tool, by every name a plan may call it by.
    pub registry: Registry,
    /// Bare names several servers have, each with its qualified names.
    pub ambiguous: BTreeMap<String, Vec<String>>,
}

impl Toolbox {
    /// The tools of `builtins` alone.
    pub fn new(builtins: Registry) -> Toolbox {
        Toolbox {
            builtins,
            config: None,
            servers: None,
            #[cfg(feature = "queue")]
            queue: std::sync::OnceLock::new(),
        }
    }

    /// `builtins` and the servers of the MCP configuration at `path`; `env` gives the values
    /// of `${env.NAME}` in a server's `env` and `headers` (the library reads no environment).
    pub fn with_mcp_config(
        builtins: Registry,
        path: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Toolbox, ToolsError> {
        let text = std::fs::read_to_string(path).map_err(|source| ToolsError::ReadConfig {
            path: path.to_path_buf(),
            source,
        })?;
        let config = McpConfig::parse(&text, env).map_err(|error| ToolsError::Config {
            path: path.to_path_buf(),
            message: error.to_string(),
        })?;
        let mut toolbox = Toolbox::new(builtins);
        toolbox.config = Some(std::fs::canonicalize(path).unwrap_or(path.to_path_buf()));
        toolbox.servers = Some(McpServers::new(config));
        Ok(toolbox)
    }

    /// The MCP configuration the tools come from, if any (absolute).
    pub fn config(&self) -> Option<&Path> {
        self.config.as_deref()
    }

    /// Whether there is an MCP configuration.
    pub fn has_servers(&self) -> bool {
        self.servers.is_some()
    }

    /// Whether calls go to a queue's workers (never without the `queue` feature).
    pub fn has_queue(&self) -> bool {
        #[cfg(feature = "queue")]
        return self.queue.get().is_some();
        #[cfg(not(feature = "queue"))]
        false
    }

    /// Sends every tool call of the plans prepared from now on to the workers of a queue (a
    /// second queue is ignored: a process runs on one).
    #[cfg(feature = "queue")]
    pub fn use_queue(&self, dispatcher: std::sync::Arc<plan_queue::Dispatcher>) {
        let _ = self.queue.set(dispatcher);
    }

    /// Connects to queue `name` at Redis `url` and sends every tool call of the plans
    /// prepared from now on to its workers ([`Toolbox::use_queue`]); nothing if a queue is
    /// in use already. Fails at once if Redis does not answer.
    #[cfg(feature = "queue")]
    pub async fn connect_queue(
        &self,
        url: &str,
        name: &str,
        options: plan_queue::DispatchOptions,
    ) -> Result<(), ToolsError> {
        if self.queue.get().is_some() {
            return Ok(());
        }
        let queue = plan_queue::Queue::connect(url, name).await?;
        self.use_queue(plan_queue::Dispatcher::new(queue, options).await?);
        Ok(())
    }

    /// The queue calls go to, once [`Toolbox::use_queue`] has set one.
    #[cfg(feature = "queue")]
    pub fn queue(&self) -> Option<&std::sync::Arc<plan_queue::Dispatcher>> {
        self.queue.get()
    }

    /// The tools a plan naming `tools` can use: the built-ins, and every tool of each server
    /// the plan needs: a server named in `SERVER.tool`, or every server when the plan names
    /// a tool that is neither built in nor qualified.
    pub async fn for_plan<'a>(
        &self,
        tools: impl IntoIterator<Item = &'a str>,
    ) -> Result<PlanTools, ToolsError> {
        let Some(servers) = &self.servers else {
            return self.with_servers(&[]).await;
        };
        let configured = servers.names();
        let mut needed = BTreeSet::new();
        for tool in tools {
            if self.builtins.get(tool).is_some() {
                continue;
            }
            match tool.split_once('.') {
                Some((server, _)) if configured.iter().any(|c| c == server) => {
                    needed.insert(server.to_owned());
                }
                // Neither built in nor `SERVER.tool`: any server may have it.
                _ => needed.extend(configured.iter().cloned()),
            }
        }
        let needed: Vec<String> = needed.into_iter().collect();
        self.with_servers(&needed).await
    }

    /// The tools plan `plan` can use: [`Toolbox::for_plan`] of the tools it names, with the
    /// tools it declares ([`Toolbox::declare`]).
    pub async fn for_plan_of(&self, plan: &plan_graph::Plan) -> Result<PlanTools, ToolsError> {
        let mut tools = self.for_plan(undeclared(plan)).await?;
        self.check_declared(plan).await?;
        self.declare(&mut tools, plan)?;
        Ok(tools)
    }

    /// Refuses a plan that declares a tool an MCP server of the configuration has by the same
    /// bare name: the servers a plan's other calls need may not include that one, so each
    /// server is asked (only for a plan that declares tools). A server that cannot start
    /// cannot be asked, and is left out.
    pub(crate) async fn check_declared(&self, plan: &plan_graph::Plan) -> Result<(), ToolsError> {
        if plan.tools.is_empty() || self.servers.is_none() {
            return Ok(());
        }
        let (every, _) = self.listable().await;
        for infos in every.registry.infos() {
            if let Some(tool) = plan.tools.iter().find(|tool| {
                infos.name == tool.name
                    || infos
                        .name
                        .split_once('.')
                        .is_some_and(|(_, bare)| bare == tool.name)
            }) {
                return Err(ToolsError::Declared {
                    name: tool.name.clone(),
                    owner: ToolOwner::Server(infos.source.clone()),
                });
            }
        }
        Ok(())
    }

    /// Adds the tools plan `plan` declares (`tools:`) to `tools`: each a BullMQ job on its
    /// queue when the run has a queue, else a tool whose calls fail saying so. A declared tool
    /// plan-cli already has is an error: a plan cannot redefine a tool.
    pub(crate) fn declare(
        &self,
        tools: &mut PlanTools,
        plan: &plan_graph::Plan,
    ) -> Result<(), ToolsError> {
        for tool in &plan.tools {
            if let Some(had) = tools.registry.get(&tool.name) {
                let source = had.info().source;
                let owner = if self.builtins.get(&tool.name).is_some() {
                    ToolOwner::BuiltIn
                } else if source.starts_with("worker ") {
                    ToolOwner::Worker
                } else {
                    ToolOwner::Server(source)
                };
                return Err(ToolsError::Declared {
                    name: tool.name.clone(),
                    owner,
                });
            }
            let info = plan_engine::ToolInfo {
                name: tool.name.clone(),
                description: tool.description.clone().unwrap_or_default(),
                source: format!("queue {}", tool.queue),
                risk: tool.risk,
                input_schema: tool.input_schema.clone(),
            };
            #[cfg(feature = "queue")]
            let declared: std::sync::Arc<dyn plan_engine::Tool> = match self.queue.get() {
                Some(dispatcher) => dispatcher.declared(info, &tool.queue),
                None => std::sync::Arc::new(Undelivered(info)),
            };
            #[cfg(not(feature = "queue"))]
            let declared: std::sync::Arc<dyn plan_engine::Tool> =
                std::sync::Arc::new(Undelivered(info));
            tools.registry.register_as(tool.name.clone(), declared);
        }
        Ok(())
    }

    /// Every tool: the tools of server `only`, or of every server.
    pub async fn all(&self, only: Option<&str>) -> Result<PlanTools, ToolsError> {
        let names = match (&self.servers, only) {
            (None, Some(name)) => {
                return Err(ToolsError::NoConfig {
                    server: name.to_owned(),
                });
            }
            (None, None) => Vec::new(),
            (Some(_), Some(name)) => vec![name.to_owned()],
            (Some(servers), None) => servers.names(),
        };
        self.with_servers(&names).await
    }

    /// Every tool that can be listed: as [`Toolbox::all`], but a server that cannot start or
    /// answer is left out and named with its error, rather than failing the whole list.
    pub async fn listable(&self) -> (PlanTools, Vec<(String, String)>) {
        let alone = || PlanTools {
            registry: self.builtins.clone(),
            ambiguous: BTreeMap::new(),
        };
        let Some(servers) = &self.servers else {
            return (alone(), Vec::new());
        };
        let mut working = Vec::new();
        let mut broken = Vec::new();
        for name in servers.names() {
            let mut scratch = self.builtins.clone();
            match servers
                .register(std::slice::from_ref(&name), &mut scratch)
                .await
            {
                Ok(_) => working.push(name),
                Err(error) => broken.push((name, error.to_string())),
            }
        }
        match self.with_servers(&working).await {
            Ok(tools) => (tools, broken),
            Err(error) => {
                // Answered alone, not together: name them all.
                let message = error.to_string();
                broken.extend(working.into_iter().map(|name| (name, message.clone())));
                (alone(), broken)
            }
        }
    }

    /// Every tool, each once and sorted: server `only`'s (which must answer), else every
    /// server's (one that does not start is named in `broken`, not hiding the others), and with
    /// a queue at `queue_url` the tools its live workers publish that this toolbox lacks.
    pub async fn catalog(
        &self,
        only: Option<&str>,
        #[cfg_attr(not(feature = "queue"), allow(unused_variables))] queue_url: Option<&str>,
    ) -> Result<Catalog, ToolsError> {
        let (tools, broken) = match only {
            Some(_) => (self.all(only).await?, Vec::new()),
            None => self.listable().await,
        };
        // Bare aliases of MCP tools are listed once, under their qualified names.
        let mut infos: Vec<plan_engine::ToolInfo> = Vec::new();
        for info in tools.registry.infos() {
            if only.is_none_or(|server| info.source == server) && !infos.contains(&info) {
                infos.push(info);
            }
        }
        #[cfg(feature = "queue")]
        if let Some(url) = queue_url
            && only.is_none()
        {
            let queue = plan_queue::Queue::connect(url, plan_queue::DEFAULT_QUEUE).await?;
            for (name, info) in queue.published_tools().await? {
                if !infos.iter().any(|i| i.name == name) {
                    infos.push(info);
                }
            }
        }
        infos.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Catalog {
            tools: infos,
            broken,
        })
    }

    /// The tools `names` (every tool when empty), as a worker serves them (`plan-cli worker
    /// --tools`); a name there is no tool of is an error.
    pub async fn selected(&self, names: &[String]) -> Result<Registry, ToolsError> {
        let all = self.all(None).await?.registry;
        if let Some(missing) = names.iter().find(|name| all.get(name).is_none()) {
            return Err(ToolsError::Unknown(missing.clone()));
        }
        let mut tools = Registry::new();
        for name in all.names() {
            if (names.is_empty() || names.contains(&name))
                && let Some(tool) = all.get(&name)
            {
                tools.register_as(name, tool.clone());
            }
        }
        Ok(tools)
    }

    /// Every tool plans can call that `allowed` keeps, each once (the bare aliases of MCP
    /// tools left out), as a model is told of them.
    pub async fn described(
        &self,
        allowed: impl Fn(&plan_engine::ToolInfo) -> bool,
    ) -> Vec<plan_llm::ToolDescription> {
        let (tools, _) = self.listable().await;
        let mut described: Vec<plan_llm::ToolDescription> = Vec::new();
        for info in tools.registry.infos() {
            if allowed(&info) && !described.iter().any(|d| d.name == info.name) {
                described.push(plan_llm::ToolDescription {
                    name: info.name,
                    description: info.description,
                    input_schema: info.input_schema,
                });
            }
        }
        described
    }

    async fn with_servers(&self, names: &[String]) -> Result<PlanTools, ToolsError> {
        let mut registry = self.builtins.clone();
        let ambiguous = match &self.servers {
            Some(servers) => servers.register(names, &mut registry).await?,
            None => BTreeMap::new(),
        };
        // With a queue, the same names, schemas and risks, but every call made by a worker.
        #[cfg(feature = "queue")]
        let registry = match self.queue.get() {
            Some(dispatcher) => dispatcher.remote(&registry),
            None => registry,
        };
        Ok(PlanTools {
            registry,
            ambiguous,
        })
    }

    /// Stops the MCP servers that were started.
    pub async fn shutdown(&self) {
        if let Some(servers) = &self.servers {
            servers.shutdown().await;
        }
    }
}

/// The tools plan `plan` names that it does not declare.
pub(crate) fn undeclared(plan: &plan_graph::Plan) -> Vec<&str> {
    let declared: BTreeSet<&str> = plan.tools.iter().map(|t| t.name.as_str()).collect();
    (plan.tool_names().into_iter())
        .filter(|name| !declared.contains(name))
        .collect()
}

/// A tool a plan declares, in a run without a queue: its calls cannot be delivered.
struct Undelivered(plan_engine::ToolInfo);

#[async_trait::async_trait]
impl plan_engine::Tool for Undelivered {
    fn info(&self) -> plan_engine::ToolInfo {
        self.0.clone()
    }

    async fn call(
        &self,
        _args: serde_json::Value,
        _ctx: plan_engine::ToolContext,
    ) -> Result<serde_json::Value, plan_engine::ToolError> {
        Err(plan_engine::ToolError::new(
            plan_engine::codes::E_QUEUE_UNAVAILABLE,
            format!(
                "`{}` is declared by the plan on BullMQ {}, and this run has no queue: it runs only in a run given that queue's Redis",
                self.0.name, self.0.source
            ),
        ))
    }
}
