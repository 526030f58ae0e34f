//! The tools a command can use: the built-ins, plus the tools of the MCP servers in the MCP
//! configuration, whose servers start only when a plan names one of their tools.
//!
//! One tokio runtime serves the whole process: MCP servers started while a plan is prepared
//! must still be connected when it runs.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use plan_engine::Registry;
use plan_tools::mcp::{McpConfig, McpServers};

use crate::exit::Failure;

/// Where the MCP configuration is when `--mcp-config` is not given (read only if it exists).
/// The MCP configuration's name in the project's `.plan/` folder.
pub(crate) const MCP_CONFIG_NAME: &str = "mcp.json";

pub(crate) struct Toolbox {
    builtins: Registry,
    /// The MCP configuration read, as an absolute path (kept with runs).
    config: Option<std::path::PathBuf>,
    servers: Option<McpServers>,
    runtime: tokio::runtime::Runtime,
    /// With `--queue`: every tool call goes to the workers through it.
    remote: std::sync::OnceLock<Arc<plan_queue::Dispatcher>>,
}

/// A plan's tools: the registry to compile it with, and the bare names that several servers
/// have (an error at the step that uses one).
pub(crate) struct PlanTools {
    pub(crate) registry: Registry,
    pub(crate) ambiguous: BTreeMap<String, Vec<String>>,
}

impl Toolbox {
    /// The built-ins, and the servers of `config` (`--mcp-config`, else the project's
    /// `.plan/mcp.json` when it exists).
    /// `exec` is the built-in `exec` as the operator configured it.
    pub(crate) fn new(config: Option<&Path>, exec: plan_tools::Exec) -> Result<Self, Failure> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .thread_stack_size(plan_types::json::VALUE_THREAD_STACK)
            .build()
            .map_err(|error| {
                Failure::internal(format!("cannot start the async runtime: {error}"))
            })?;
        let path = config.map(Path::to_path_buf);
        let servers = match path {
            None => None,
            Some(path) => {
                let text = std::fs::read_to_string(&path).map_err(|error| {
                    Failure::input(format!(
                        "cannot read the MCP configuration {}: {error}",
                        path.display()
                    ))
                })?;
                // `${env.NAME}` in a server's `env` and `headers` reads the environment here.
                let config = McpConfig::parse(&text, &|name| std::env::var(name).ok())
                    .map_err(|error| Failure::input(format!("{}: {error}", path.display())))?;
                Some(McpServers::new(config))
            }
        };
        Ok(Toolbox {
            config: config.map(|path| std::fs::canonicalize(path).unwrap_or(path.to_path_buf())),
            builtins: {
                let mut builtins = plan_tools::builtin_registry();
                builtins.register(exec);
                builtins
            },
            servers,
            runtime,
            remote: std::sync::OnceLock::new(),
        })
    }

    /// Sends every tool call of later plans to the workers of the queue; fails at once (exit
    /// 2, `E_QUEUE_UNAVAILABLE`) if Redis does not answer. What the queue has to say while the
    /// run goes (a call waiting for a worker) is printed on stderr.
    pub(crate) fn use_queue(&self, settings: &crate::cli::QueueSettings) -> Result<(), Failure> {
        if self.remote.get().is_some() {
            return Ok(());
        }
        let (notices, mut heard) = tokio::sync::mpsc::unbounded_channel();
        let options = plan_queue::DispatchOptions {
            outage: settings.outage,
            queue_timeout: settings.timeout,
            notices: Some(notices),
            secret: queue_secret(),
        };
        let dispatcher = self
            .block_on(async {
                let queue = plan_queue::Queue::connect(&settings.url, &settings.name).await?;
                plan_queue::Dispatcher::new(queue, options).await
            })
            .map_err(|error| Failure::input(error.to_string()))?;
        if settings.from_redis_url {
            say(&format!(
                "tool calls go to BullMQ queue `{}` at REDIS_URL",
                settings.name
            ));
        }
        self.runtime.spawn(async move {
            while let Some(notice) = heard.recv().await {
                say(&notice.to_string());
            }
        });
        let _ = self.remote.set(dispatcher);
        Ok(())
    }

    /// The MCP configuration the tools come from, if any (absolute).
    pub(crate) fn config(&self) -> Option<&Path> {
        self.config.as_deref()
    }

    /// The queue's dispatcher, with `--queue`.
    pub(crate) fn remote(&self) -> Option<&Arc<plan_queue::Dispatcher>> {
        self.remote.get()
    }

    /// The tools the live workers on the Redis at `url` publish, by name.
    pub(crate) fn published_tools(
        &self,
        url: &str,
    ) -> Result<BTreeMap<String, plan_engine::ToolInfo>, Failure> {
        self.block_on(async {
            let queue = plan_queue::Queue::connect(url, plan_queue::DEFAULT_QUEUE).await?;
            queue.published_tools().await
        })
        .map_err(|error| Failure::input(error.to_string()))
    }

    /// Connects to a queue for a worker.
    pub(crate) fn queue(&self, url: &str, name: &str) -> Result<plan_queue::Queue, Failure> {
        self.block_on(plan_queue::Queue::connect(url, name))
            .map_err(|error| Failure::input(error.to_string()))
    }

    /// Whether an MCP configuration was found.
    pub(crate) fn has_servers(&self) -> bool {
        self.servers.is_some()
    }

    /// Runs `future` to its end on the process's runtime, from anywhere: also from code that
    /// a future on the runtime calls synchronously (the check of a model's plan runs inside
    /// the model's conversation, and starts the MCP servers the plan names), where a plain
    /// `block_on` panics ("Cannot start a runtime from within a runtime").
    pub(crate) fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        if tokio::runtime::Handle::try_current().is_ok() {
            tokio::task::block_in_place(|| self.runtime.block_on(future))
        } else {
            self.runtime.block_on(future)
        }
    }

    /// The tools a plan naming `tools` can use: the built-ins, and every tool of each server
    /// the plan needs: a server named in `SERVER.tool`, or every server when the plan names
    /// a tool that is neither built in nor qualified.
    pub(crate) fn for_plan<'a>(
        &self,
        tools: impl IntoIterator<Item = &'a str>,
    ) -> Result<PlanTools, Failure> {
        let Some(servers) = &self.servers else {
            return self.with_servers(&[]);
        };
        let configured = servers.names();
        let mut needed = std::collections::BTreeSet::new();
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
        self.with_servers(&needed)
    }

    /// Every tool, the tools of `only` (or of every server) included.
    pub(crate) fn all(&self, only: Option<&str>) -> Result<PlanTools, Failure> {
        let names = match (&self.servers, only) {
            (None, Some(name)) => {
                return Err(Failure::input(format!(
                    "--server {name}: there is no MCP configuration (give --mcp-config FILE, or write .plan/{MCP_CONFIG_NAME})"
                )));
            }
            (None, None) => Vec::new(),
            (Some(_), Some(name)) => vec![name.to_owned()],
            (Some(servers), None) => servers.names(),
        };
        self.with_servers(&names)
    }

    /// Every tool that can be listed: as [`Toolbox::all`], but a server that cannot start or
    /// answer is left out and named with its error, rather than failing the whole list.
    pub(crate) fn listable(&self) -> (PlanTools, Vec<(String, String)>) {
        let Some(servers) = &self.servers else {
            return (
                PlanTools {
                    registry: self.builtins.clone(),
                    ambiguous: BTreeMap::new(),
                },
                Vec::new(),
            );
        };
        let mut working = Vec::new();
        let mut broken = Vec::new();
        for name in servers.names() {
            let mut scratch = self.builtins.clone();
            match self.block_on(servers.register(std::slice::from_ref(&name), &mut scratch)) {
                Ok(_) => working.push(name),
                Err(error) => broken.push((name, error.to_string())),
            }
        }
        match self.with_servers(&working) {
            Ok(tools) => (tools, broken),
            Err(failure) => {
                // Answered alone, not together: name them all.
                broken.extend(
                    working
                        .into_iter()
                        .map(|name| (name, failure.message.clone().unwrap_or_default())),
                );
                (
                    PlanTools {
                        registry: self.builtins.clone(),
                        ambiguous: BTreeMap::new(),
                    },
                    broken,
                )
            }
        }
    }

    fn with_servers(&self, names: &[String]) -> Result<PlanTools, Failure> {
        let mut registry = self.builtins.clone();
        let ambiguous = match &self.servers {
            Some(servers) => self
                .block_on(servers.register(names, &mut registry))
                .map_err(|error| Failure::input(error.to_string()))?,
            None => BTreeMap::new(),
        };
        // With a queue, the same names, schemas and risks, but every call made by a worker.
        let registry = match self.remote.get() {
            Some(dispatcher) => dispatcher.remote(&registry),
            None => registry,
        };
        Ok(PlanTools {
            registry,
            ambiguous,
        })
    }

    /// Stops the MCP servers that were started.
    pub(crate) fn shutdown(&self) {
        if let Some(servers) = &self.servers {
            self.block_on(servers.shutdown());
        }
    }
}

/// A line on stderr; a stderr that cannot be written (closed) is not worth stopping for.
fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// `PLAN_QUEUE_SECRET`: coordinators sign their jobs with it, and workers run only jobs signed
/// with it (docs/security.md).
pub(crate) fn queue_secret() -> Option<plan_queue::QueueSecret> {
    std::env::var_os("PLAN_QUEUE_SECRET")
        .and_then(|secret| plan_queue::QueueSecret::new(secret.into_encoded_bytes()))
}
