//! The tools a command can use: the built-ins, plus the tools of the MCP servers in the MCP
//! configuration, whose servers start only when a plan names one of their tools.
//!
//! One tokio runtime serves the whole process: MCP servers started while a plan is prepared
//! must still be connected when it runs.

use crate::exit::Failure;

pub(crate) struct Toolbox {
    tools: std::sync::Arc<plan_run::Toolbox>,
    runtime: tokio::runtime::Runtime,
}

/// The library's toolbox is this one's: `toolbox.for_plan(…)` and the rest are its futures,
/// run with [`Toolbox::block_on`].
impl std::ops::Deref for Toolbox {
    type Target = plan_run::Toolbox;

    fn deref(&self) -> &plan_run::Toolbox {
        &self.tools
    }
}

impl Toolbox {
    /// The tools `settings` give a command going on with `kept` (nothing kept for a new run),
    /// with `exec`'s programs in `folder` ([`plan_run::ToolSettings::toolbox`]).
    pub(crate) fn new(
        settings: &plan_run::ToolSettings,
        kept: &plan_run::Kept,
        folder: Option<std::path::PathBuf>,
    ) -> Result<Self, Failure> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .thread_stack_size(plan_types::json::VALUE_THREAD_STACK)
            .build()
            .map_err(|error| {
                Failure::internal(format!("cannot start the async runtime: {error}"))
            })?;
        // `${env.NAME}` in a server's `env` and `headers` reads the environment here.
        let tools = settings.toolbox(kept, folder, &|name| std::env::var(name).ok())?;
        Ok(Toolbox {
            tools: std::sync::Arc::new(tools),
            runtime,
        })
    }

    /// Sends every tool call of later plans to the workers of the queue; fails at once (exit
    /// 2, `E_QUEUE_UNAVAILABLE`) if Redis does not answer. What the queue has to say while the
    /// run goes (a call waiting for a worker) is printed on stderr.
    pub(crate) fn use_queue(&self, settings: &crate::cli::QueueSettings) -> Result<(), Failure> {
        if self.tools.queue().is_some() {
            return Ok(());
        }
        let (notices, mut heard) = tokio::sync::mpsc::unbounded_channel();
        let options = plan_run::queue::DispatchOptions {
            outage: settings.outage,
            queue_timeout: settings.timeout,
            notices: Some(notices),
            secret: queue_secret(),
        };
        self.block_on(
            self.tools
                .connect_queue(&settings.url, &settings.name, options),
        )?;
        if settings.from_redis_url {
            crate::output::say(&format!(
                "tool calls go to BullMQ queue `{}` at REDIS_URL",
                settings.name
            ));
        }
        self.runtime.spawn(async move {
            while let Some(notice) = heard.recv().await {
                crate::output::say(&notice.to_string());
            }
        });
        Ok(())
    }

    /// Whether tool calls go to a queue's workers.
    pub(crate) fn has_queue(&self) -> bool {
        self.tools.queue().is_some()
    }

    /// The library's toolbox, for a front-end that outlives this borrow (`mcp serve`).
    pub(crate) fn shared(&self) -> std::sync::Arc<plan_run::Toolbox> {
        self.tools.clone()
    }

    /// Runs `future` on the process's runtime, in the background.
    pub(crate) fn spawn(&self, future: impl std::future::Future<Output = ()> + Send + 'static) {
        self.runtime.spawn(future);
    }

    /// Runs `future` to its end on the process's runtime, from anywhere: also from code that
    /// a future on the runtime calls synchronously, where a plain `block_on` panics ("Cannot
    /// start a runtime from within a runtime").
    pub(crate) fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        if tokio::runtime::Handle::try_current().is_ok() {
            tokio::task::block_in_place(|| self.runtime.block_on(future))
        } else {
            self.runtime.block_on(future)
        }
    }
}

/// `PLAN_QUEUE_SECRET`: coordinators sign their jobs with it, and workers run only jobs signed
/// with it (docs/security.md).
pub(crate) fn queue_secret() -> Option<plan_run::queue::QueueSecret> {
    std::env::var_os("PLAN_QUEUE_SECRET")
        .and_then(|secret| plan_run::queue::QueueSecret::new(secret.into_encoded_bytes()))
}
