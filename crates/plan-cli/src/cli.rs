//! The command line, as clap sees it.

use clap::builder::TypedValueParser as _;
use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

/// Run plans: graphs of tool calls with dependencies, variables and retries.
#[derive(Debug, Parser)]
#[command(name = "plan-cli", version, about, long_about = None)]
pub(crate) struct Cli {
    /// The ledger file (default: state.db in the nearest .plan/ folder here or above, as git
    /// finds .git; else ./.plan/state.db)
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        env = "PLAN_DB",
        hide_env_values = true,
        value_name = "PATH"
    )]
    pub(crate) db: Option<PathBuf>,
    // Also taken before the command name (`plan-cli --mcp-config F run …`).
    #[command(flatten)]
    pub(crate) tool_options: ToolOptions,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run a plan (a file, or the id of a stored plan) and print its records
    ///
    /// The plan is checked as `validate` checks it before any step runs, arguments that break
    /// their tool's schema included. Exit codes: 0 COMPLETED (steps skipped by a condition
    /// included), 1 FAILED, 2 invalid plan or flags (nothing ran), 3 PARTIAL (nothing failed,
    /// but a step was skipped that could have run: part of what it needs ran), 4 BLOCKED, 5
    /// WAITING, 130 STOPPED.
    Run(RunArgs),
    /// Continue a run that was stopped, interrupted, killed or waiting for approvals
    Resume(ResumeArgs),
    /// Run steps of a run again, with every step that depends on them (finished runs too)
    Retry(RetryArgs),
    /// Stop a run: its process stops it as Ctrl+C would; a run whose process is gone, or one
    /// waiting for approvals, is marked stopped. Either way `resume` can continue it
    Cancel(CancelArgs),
    /// Approve high-risk steps (or the plan) of a run, then `resume` it
    Approve(ApproveArgs),
    /// Refuse a high-risk step (it fails with E_REJECTED, its dependents skip) or a task's
    /// waiting merge (the task is abandoned)
    Reject(RejectArgs),
    /// Check a plan without running it
    Validate(ValidateArgs),
    /// Draw a plan's dependency graph
    Show(ShowArgs),
    /// List the tools plans can call
    Tools(ToolsArgs),
    /// List the runs in the ledger, newest first
    Runs(RunsArgs),
    /// Print a run's records as `run` does
    Status(RunIdArgs),
    /// Print what a run's steps put out: exec's stdout and stderr, http's body, MCP text
    Logs(LogsArgs),
    /// Print a run's events as NDJSON
    Events(EventsArgs),
    /// Delete finished runs older than a given age, overwriting what they recorded
    Gc(GcArgs),
    /// Serve the dashboard on this machine: the ledger's runs in a browser
    Ui(UiArgs),
    /// Store, list, show and remove plans in the ledger
    #[command(subcommand)]
    Plan(PlanCommand),
    /// Export a run's state
    #[command(subcommand)]
    State(StateCommand),
    /// plan-cli as an MCP server
    #[command(subcommand)]
    Mcp(McpCommand),
    /// Serve tool calls from a BullMQ queue (`run --queue`'s, or any producer's) until Ctrl+C
    ///
    /// The worker publishes the tools it serves, so coordinators validate plans against them and
    /// send each call only to a queue whose workers all have its tool. SIGTERM drains it too.
    Worker(WorkerArgs),
    /// Start a project here: a `.plan/` folder (its ledger) and a commented starter plan
    Init(InitArgs),
    /// Make a plan from work described elsewhere
    #[command(subcommand)]
    Import(ImportCommand),
    /// Print the plan format's JSON Schema (for editors; --for generation: what `plan create`
    /// sends a model)
    Schema(SchemaArgs),
    /// Print a shell completion script (`plan-cli completions bash > /etc/bash_completion.d/plan-cli`)
    Completions {
        /// The shell
        shell: clap_complete::Shell,
    },
}

/// Where tools come from and what programs get: for the commands that use tools (given before
/// the command, they apply too).
#[derive(Debug, Default, clap::Args)]
pub(crate) struct ToolOptions {
    /// MCP servers whose tools plans may call, as every MCP client writes them
    /// (`{"mcpServers": {...}}`; default: mcp.json in the nearest .plan/ folder, when there)
    #[arg(
        long,
        env = "PLAN_MCP_CONFIG",
        hide_env_values = true,
        value_name = "FILE"
    )]
    pub(crate) mcp_config: Option<PathBuf>,
    /// Environment variables `exec`'s programs get besides PATH, HOME, USER, LOGNAME, LANG,
    /// LC_ALL, LC_CTYPE, TZ, TMPDIR and TERM (comma-separated); plan-cli's other variables
    /// never reach them
    #[arg(
        long,
        env = "PLAN_ENV_PASSTHROUGH",
        hide_env_values = true,
        value_delimiter = ',',
        value_name = "NAMES"
    )]
    pub(crate) env_passthrough: Vec<String>,
}

#[derive(Debug, clap::Args)]
pub(crate) struct ValidateArgs {
    #[command(flatten)]
    pub(crate) plan: PlanArgs,
    /// Print one JSON object: {"valid", "plan_id", "steps", "needs_approval", "errors",
    /// "warnings"}, each issue {"severity", "code", "message", "line", "column", "label", "help"}
    #[arg(long)]
    pub(crate) json: bool,
    /// The policy `run` holds the plan to: a stored plan a model or an MCP client wrote, or
    /// any plan under --policy
    #[command(flatten)]
    pub(crate) policy: PolicyArgs,
    #[command(flatten)]
    pub(crate) tool_options: ToolOptions,
}

#[derive(Debug, clap::Args)]
pub(crate) struct UiArgs {
    /// The port (0: any free one)
    #[arg(long, default_value_t = 7878)]
    pub(crate) port: u16,
    /// Do not open the dashboard in a browser
    #[arg(long)]
    pub(crate) no_open: bool,
    /// The address to listen on (other than 127.0.0.1: reachable from other machines)
    #[arg(long, default_value = "127.0.0.1")]
    pub(crate) host: std::net::IpAddr,
}

#[derive(Debug, clap::Args)]
pub(crate) struct RunsArgs {
    /// Print JSON
    #[arg(long)]
    pub(crate) json: bool,
    /// Only runs with this status (COMPLETED, FAILED, PARTIAL, BLOCKED, WAITING, STOPPED,
    /// RUNNING, INTERRUPTED; any case)
    #[arg(long, value_name = "STATUS")]
    pub(crate) status: Option<String>,
    /// Only runs of this plan id
    #[arg(long, value_name = "PLAN_ID")]
    pub(crate) plan: Option<String>,
    /// At most this many (the newest)
    #[arg(long, value_name = "N")]
    pub(crate) limit: Option<usize>,
}

#[derive(Debug, clap::Args)]
pub(crate) struct RetryArgs {
    /// The run: its id, a unique prefix of it, or `last` for the newest run
    pub(crate) run: String,
    /// The steps to run again (their map items and block nodes too)
    #[arg(required = true)]
    pub(crate) steps: Vec<String>,
    #[command(flatten)]
    pub(crate) execution: ExecutionArgs,
    #[command(flatten)]
    pub(crate) tool_options: ToolOptions,
}

#[derive(Debug, clap::Args)]
pub(crate) struct CancelArgs {
    /// The run: its id, a unique prefix of it, or `last` for the newest run
    pub(crate) run: String,
}

#[derive(Debug, clap::Args)]
pub(crate) struct LogsArgs {
    /// The run: its id, a unique prefix of it, or `last` for the newest run
    pub(crate) run: String,
    /// Only this step (a map step's items and a block's nodes included), or one item or node
    pub(crate) step: Option<String>,
}

#[derive(Debug, clap::Args)]
pub(crate) struct InitArgs {
    /// Where to write the starter plan
    #[arg(default_value = "plan.yaml")]
    pub(crate) plan: PathBuf,
    /// Overwrite the plan file if it exists
    #[arg(long)]
    pub(crate) force: bool,
}

/// Where a run's calls go, with `--queue`.
#[derive(Debug, Clone)]
pub(crate) struct QueueSettings {
    pub(crate) url: String,
    /// Whether the address came from REDIS_URL (said on stderr: nobody asked on the command
    /// line).
    pub(crate) from_redis_url: bool,
    pub(crate) name: String,
    pub(crate) outage: std::time::Duration,
    pub(crate) timeout: Option<std::time::Duration>,
}

impl QueueSettings {
    /// The queue at `url` called `name`, as a run kept it (`approve` and `reject` reach it
    /// for its tools alone).
    pub(crate) fn kept(url: String, name: String) -> Self {
        QueueSettings {
            url,
            from_redis_url: false,
            name,
            outage: std::time::Duration::from_secs(30),
            timeout: None,
        }
    }
}

/// REDIS_URL: the name BullMQ deployments give their Redis.
fn redis_url() -> Option<String> {
    std::env::var("REDIS_URL")
        .ok()
        .filter(|url| !url.is_empty())
}

impl ExecutionArgs {
    /// Refuses a `--state-file` that cannot be written, before the ledger is opened.
    pub(crate) fn check_state_file(&self) -> Result<(), plan_run::LifecycleError> {
        (self.state_file.as_deref()).map_or(Ok(()), plan_run::check_state_file)
    }

    /// Where run `run`'s calls go (`plan_run::RunSources::queue_going_on` of what it `kept`;
    /// nothing for a new run): `--queue` (or PLAN_QUEUE, which clap reads) when given, else
    /// the queue the run kept (which REDIS_URL does not override), else REDIS_URL;
    /// `--queue-name` when given, else the run's own, else `steps`.
    pub(crate) fn queue_of(
        &self,
        run: &str,
        kept: &plan_run::RunSources,
    ) -> Result<Option<QueueSettings>, crate::exit::Failure> {
        let (given, name) = (self.queue.as_deref(), self.queue_name.as_deref());
        let chosen = kept.queue_going_on(run, given, name, redis_url().as_deref())?;
        Ok(chosen.map(|(url, name)| QueueSettings {
            from_redis_url: self.queue.is_none() && kept.queue.is_none(),
            outage: self.queue_outage,
            timeout: self.queue_timeout,
            ..QueueSettings::kept(url, name)
        }))
    }
}

impl WorkerArgs {
    /// The Redis of the queue: `--queue` (or PLAN_QUEUE), else REDIS_URL.
    pub(crate) fn queue_url(&self) -> Option<String> {
        self.queue.clone().or_else(redis_url)
    }
}

#[derive(Debug, clap::Args)]
pub(crate) struct WorkerArgs {
    /// The Redis of the queue (`redis://HOST:PORT[/DB]`; also PLAN_QUEUE, or REDIS_URL)
    #[arg(long, env = "PLAN_QUEUE", hide_env_values = true, value_name = "URL")]
    pub(crate) queue: Option<String>,
    /// The BullMQ queue jobs come from; workers that serve fewer tools than others need a
    /// queue of their own
    #[arg(long, value_name = "NAME", default_value = plan_run::queue::DEFAULT_QUEUE)]
    pub(crate) queue_name: String,
    /// Most calls at once
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) concurrency: u32,
    /// Only these tools (comma-separated); default: every tool it has
    #[arg(long, value_name = "TOOLS", value_delimiter = ',')]
    pub(crate) tools: Vec<String>,
    /// How long a job stays locked to this worker without renewal: a worker that dies holds
    /// its jobs this long before another worker takes them over
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = humantime::parse_duration)]
    pub(crate) lock_duration: std::time::Duration,
    /// On Ctrl+C or SIGTERM, how long to finish the calls in hand before leaving them to
    /// other workers
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = humantime::parse_duration)]
    pub(crate) drain_timeout: std::time::Duration,
    #[command(flatten)]
    pub(crate) tool_options: ToolOptions,
}

#[derive(Debug, Subcommand)]
pub(crate) enum McpCommand {
    /// Serve plan_create, plan_execute, plan_create_and_execute, plan_validate, plan_run,
    /// plan_status, plan_resume and plan_approve over stdio. A client gets only what the
    /// operator allows: by default the low-risk tools, no environment variables, and no
    /// approvals
    Serve(ServeArgs),
}

/// What `mcp serve` lets its clients do (docs/security.md).
#[derive(Debug, clap::Args)]
pub(crate) struct ServeArgs {
    #[command(flatten)]
    pub(crate) policy: PolicyArgs,
    /// The folder `exec` runs programs in; a `cwd` outside it is refused (default: the current
    /// folder)
    #[arg(long, value_name = "DIR")]
    pub(crate) workdir: Option<PathBuf>,
    /// Let clients approve high-risk steps (by default only `plan-cli approve` can; clients
    /// may always reject)
    #[arg(long)]
    pub(crate) allow_client_approval: bool,
    /// The largest plan a client may send, in bytes [default: 1048576]
    #[arg(long, value_name = "BYTES")]
    pub(crate) max_plan_bytes: Option<usize>,
    /// The most steps a client's plan may have [default: 1000]
    #[arg(long, value_name = "N")]
    pub(crate) max_steps: Option<usize>,
    /// How long one call may run a plan; then the run stops (resumable) and the call answers
    /// [default: 10m]
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub(crate) max_run_time: Option<std::time::Duration>,
    /// Serve MCP's Streamable HTTP at this address (`127.0.0.1:8808`; port 0 picks one) instead
    /// of stdio; prints the URL and the token clients send (PLAN_MCP_TOKEN fixes it)
    #[arg(long, value_name = "ADDR")]
    pub(crate) http: Option<std::net::SocketAddr>,
    #[command(flatten)]
    pub(crate) tool_options: ToolOptions,
}

#[derive(Debug, clap::Args)]
pub(crate) struct PlanArgs {
    /// The plan file (.json, .yaml or .yml), the id of a stored plan, or `-` for JSON or YAML on stdin
    pub(crate) plan: PathBuf,
    /// Set a variable to a string (read as JSON only where the plan's default for NAME is a
    /// number, boolean, list or object)
    #[arg(long = "var", value_name = "NAME=VALUE", value_parser = parse_var)]
    pub(crate) vars: Vec<(String, String)>,
    /// Set a variable to a JSON value (`--var-json n=3`, `--var-json 'tags=["a","b"]'`)
    #[arg(long = "var-json", value_name = "NAME=JSON", value_parser = parse_json_var)]
    pub(crate) json_vars: Vec<(String, serde_json::Value)>,
    /// Read variables from a JSON or YAML object; `--var` wins over it, it wins over the plan
    #[arg(long = "vars", value_name = "FILE")]
    pub(crate) vars_file: Option<PathBuf>,
    /// `plan` is a stored plan's id, never a file (`plan create --run`: a model's id such as
    /// `deploy.json` must not run the operator's file of that name).
    #[arg(skip)]
    pub(crate) stored_only: bool,
}

impl PlanArgs {
    /// The plan these flags name.
    pub(crate) fn input(&self) -> plan_run::PlanInput {
        plan_run::PlanInput {
            path: self.plan.clone(),
            stored_only: self.stored_only,
        }
    }

    /// The variables these flags give.
    pub(crate) fn variables(&self) -> plan_run::Variables {
        plan_run::Variables {
            file: self.vars_file.clone(),
            text: self.vars.clone(),
            json: self.json_vars.clone(),
        }
    }
}

/// What plans others write may do (an MCP client's with `mcp serve`; a model's with `plan
/// create` and `run --replan`), and with `run --policy` what the run's own plan may do: by
/// default the low-risk tools, no environment variables, no task steps, approvals on; widened
/// by these.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct PolicyArgs {
    /// Also let plans others write (a model's; `mcp serve`: its clients') use this tool
    /// (repeatable; `SERVER.tool` or the plan's name; `*` for every tool). By default they may
    /// use the low-risk tools only: echo, sleep, fail, and the tools an MCP server marks
    /// read-only; not exec or http
    #[arg(long = "allow-tool", value_name = "TOOL")]
    pub(crate) allow_tools: Vec<String>,
    /// Let plans others write read this environment variable with `env:` (repeatable; by
    /// default none)
    #[arg(long = "allow-env", value_name = "NAME")]
    pub(crate) allow_env: Vec<String>,
    /// Let plans others write have task steps and their `workspace` (a git repository and
    /// worktree folder inside the work folder; by default none)
    #[arg(long)]
    pub(crate) allow_workspace: bool,
    /// The operator's policy as a JSON file: {"allow_tools", "allow_env", "allow_workspace",
    /// "workdir", "allow_client_approval", "max_plan_bytes", "max_steps", "max_run_time"};
    /// flags add to its lists and win over its values. On `run`, the run's own plan is checked
    /// against it too
    #[arg(long, value_name = "FILE")]
    pub(crate) policy: Option<PathBuf>,
}

/// How a run goes, for `run` and `resume`.
#[derive(Debug, clap::Args)]
pub(crate) struct ExecutionArgs {
    /// Print one JSON object with every record instead of a summary
    #[arg(long)]
    pub(crate) json: bool,
    /// Show each step's output (as `logs` prints it) under its line in the summary
    #[arg(long, conflicts_with = "json")]
    pub(crate) show_results: bool,
    /// Stream what programs print, line by line as it comes, each line after its step's id
    #[arg(short, long, conflicts_with = "json")]
    pub(crate) verbose: bool,
    /// Where `exec` runs programs and a relative `cwd` resolves (default: the plan file's
    /// folder, or the current directory for a plan from stdin or the ledger; a resumed run
    /// keeps its own)
    #[arg(long, value_name = "DIR")]
    pub(crate) cwd: Option<PathBuf>,
    /// Most steps running at once (overrides the plan's `max_concurrency`; default 4)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_concurrency: Option<u32>,
    /// Append events to FILE as NDJSON while the run goes
    #[arg(long, value_name = "FILE")]
    pub(crate) events: Option<PathBuf>,
    /// Keep the execute-state.json document (schema 2.0) current in FILE while the run goes
    /// (kept with the run: `resume` and `retry` keep the same file current; one given to them is
    /// kept from then on)
    #[arg(long, value_name = "FILE")]
    pub(crate) state_file: Option<PathBuf>,
    /// Run every tool call as a job on a BullMQ queue at this Redis (`redis://HOST:PORT[/DB]`;
    /// also PLAN_QUEUE, or REDIS_URL); workers run them (see `worker`). A run keeps its queue:
    /// `resume`, `retry` and `approve` use it again unless given another (an address holding a
    /// password is not kept; give it again)
    #[arg(long, env = "PLAN_QUEUE", hide_env_values = true, value_name = "URL")]
    pub(crate) queue: Option<String>,
    /// The BullMQ queue calls go to (keys `bull:NAME:*`; default: `steps`, or the queue a
    /// resumed run kept)
    #[arg(long, value_name = "NAME")]
    pub(crate) queue_name: Option<String>,
    /// How long the queue may stay unreachable before the run stops (it can be resumed);
    /// meanwhile plan-cli reconnects
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = humantime::parse_duration)]
    pub(crate) queue_outage: std::time::Duration,
    /// `off`: high-risk steps run without waiting for an approval, each recorded (in its
    /// `tool.called` event) as having run so; a plan's `approvals: false` does the same.
    /// Default: on
    #[arg(long, value_name = "on|off", env = "AGENT_APPROVALS_ENABLED", value_parser = parse_switch)]
    pub(crate) approvals: Option<bool>,
    /// How long a call may wait for a worker to take it before it fails with E_QUEUE_TIMEOUT
    /// (default: as long as it takes; the run says when no worker serves a tool)
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub(crate) queue_timeout: Option<std::time::Duration>,
    /// When results reach the ledger: `sync` (a step starts once what it depends on is
    /// durable, committed or written to the run's log beside the ledger; a completed step never
    /// runs again after a crash), `async` (commits trail the run; a crash may run recently
    /// completed steps again), `exit` (written when the run ends or stops: the ledger is
    /// untouched meanwhile, but the writing no longer overlaps the steps, so a run usually
    /// takes longer than with `async`)
    #[arg(long, value_name = "MODE", default_value = "sync", value_parser = clap::builder::PossibleValuesParser::new(["sync", "async", "exit"]).try_map(|mode| mode.parse::<plan_types::Durability>()))]
    pub(crate) durability: plan_types::Durability,
}

#[derive(Debug, clap::Args)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    pub(crate) plan: PlanArgs,
    #[command(flatten)]
    pub(crate) execution: ExecutionArgs,
    /// Resolve and print what would be called, calling nothing (and recording nothing)
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// How to run: `auto` runs (high-risk steps wait for approval), `preview` shows what would
    /// run and runs nothing, `approval` waits for `plan-cli approve RUN --plan` first
    #[arg(long, value_enum, value_name = "MODE")]
    pub(crate) mode: Option<RunMode>,
    /// Approve a high-risk step or map item in advance (repeatable)
    #[arg(long = "approve", value_name = "STEP")]
    pub(crate) approve: Vec<String>,
    /// Run only the steps of this layer (their dependencies outside it are taken as done)
    #[arg(long, value_name = "LAYER")]
    pub(crate) layer: Option<String>,
    /// Run only this step (its dependencies are taken as done)
    #[arg(long, value_name = "ID")]
    pub(crate) task: Option<String>,
    /// When a step fails for good, ask a model (PLAN_LLM_URL, PLAN_LLM_MODEL) for steps that
    /// finish the work another way, and run them; at most N times
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub(crate) replan: u32,
    /// Boxed: few runs give a policy, and `Command` stays small.
    #[command(flatten)]
    pub(crate) policy: Box<PolicyArgs>,
    #[command(flatten)]
    pub(crate) tool_options: ToolOptions,
}

impl RunArgs {
    /// `run PLAN` with every other flag at its default (`plan create --run`).
    pub(crate) fn stored(plan: &str) -> Option<RunArgs> {
        match Cli::try_parse_from(["plan-cli", "run", plan]) {
            Ok(Cli {
                command: Command::Run(args),
                ..
            }) => Some(args),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum RunMode {
    /// Run; high-risk steps wait for an approval
    Auto,
    /// Validate, resolve and draw the plan; run nothing
    Preview,
    /// Wait for the plan's approval before the first step
    Approval,
}

impl From<RunMode> for plan_graph::Mode {
    fn from(mode: RunMode) -> Self {
        match mode {
            RunMode::Auto => plan_graph::Mode::Auto,
            RunMode::Preview => plan_graph::Mode::Preview,
            RunMode::Approval => plan_graph::Mode::Approval,
        }
    }
}

#[derive(Debug, clap::Args)]
pub(crate) struct ApproveArgs {
    /// The run: its id, a unique prefix of it, or `last` for the newest run
    pub(crate) run: String,
    /// The steps or map items to approve (`deploy`, `deploy[prod]`); a step covers its items.
    /// A server's question (`ask@input#1`) is answered with `--input`
    #[arg(value_name = "STEP", required_unless_present_any = ["all", "plan"])]
    pub(crate) steps: Vec<String>,
    /// Approve everything the run waits for (the plan too); questions stay waiting for answers
    #[arg(long, conflicts_with = "steps")]
    pub(crate) all: bool,
    /// Approve the plan itself (a run started with `--mode approval`)
    #[arg(long)]
    pub(crate) plan: bool,
    /// An answer for the one waiting call named: a JSON object whose fields replace the
    /// call's arguments of the same names (checked against its tool's schema when it is
    /// made); for a question (`ID@input#N`), the answer itself, checked against its schema now
    #[arg(long, value_name = "JSON", conflicts_with_all = ["all", "plan"])]
    pub(crate) input: Option<String>,
    #[command(flatten)]
    pub(crate) tool_options: ToolOptions,
}

#[derive(Debug, clap::Args)]
pub(crate) struct RejectArgs {
    /// The run: its id, a unique prefix of it, or `last` for the newest run
    pub(crate) run: String,
    /// The steps or map items to refuse, a task's waiting merge (`T1/merge#1`), or a server's
    /// question (`ask@input#1`: the call fails)
    #[arg(value_name = "STEP", required = true)]
    pub(crate) steps: Vec<String>,
    /// Why; it becomes the step's error message
    #[arg(long, value_name = "TEXT")]
    pub(crate) reason: Option<String>,
    #[command(flatten)]
    pub(crate) tool_options: ToolOptions,
}

#[derive(Debug, clap::Args)]
pub(crate) struct ResumeArgs {
    /// The run: its id, a unique prefix of it, or `last` for the newest run
    pub(crate) run: String,
    #[command(flatten)]
    pub(crate) execution: ExecutionArgs,
    /// Run failed steps again (by default they keep their failure)
    #[arg(long)]
    pub(crate) retry_failed: bool,
    /// Check that this plan file is the run's plan (refused if its steps differ)
    #[arg(long, value_name = "FILE")]
    pub(crate) plan: Option<PathBuf>,
    /// Resume even with a different `--plan`, or while the run's process seems alive
    #[arg(long)]
    pub(crate) force: bool,
    #[command(flatten)]
    pub(crate) tool_options: ToolOptions,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum GraphFormat {
    /// mcp-cli's terminal picture
    Ascii,
    /// A Mermaid flowchart
    Mermaid,
    /// Graphviz DOT
    Dot,
}

#[derive(Debug, clap::Args)]
pub(crate) struct ShowArgs {
    #[command(flatten)]
    pub(crate) plan: PlanArgs,
    /// How to draw it
    #[arg(long, value_enum, default_value = "ascii")]
    pub(crate) format: GraphFormat,
    #[command(flatten)]
    pub(crate) tool_options: ToolOptions,
}

#[derive(Debug, clap::Args)]
pub(crate) struct ToolsArgs {
    /// Print a JSON list with each tool's input schema
    #[arg(long)]
    pub(crate) json: bool,
    /// Only the tools of this MCP server
    #[arg(long, value_name = "NAME")]
    pub(crate) server: Option<String>,
    /// Also the tools the live workers on this Redis publish (also PLAN_QUEUE)
    #[arg(long, env = "PLAN_QUEUE", hide_env_values = true, value_name = "URL")]
    pub(crate) queue: Option<String>,
    #[command(flatten)]
    pub(crate) tool_options: ToolOptions,
}

#[derive(Debug, clap::Args)]
pub(crate) struct JsonArgs {
    /// Print JSON
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, clap::Args)]
pub(crate) struct RunIdArgs {
    /// The run: its id, a unique prefix of it, or `last` for the newest run
    pub(crate) run: String,
    /// Print the same JSON object as `run --json`
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, clap::Args)]
pub(crate) struct EventsArgs {
    /// The run: its id, a unique prefix of it, or `last` for the newest run
    pub(crate) run: String,
    /// Keep printing new events until the run ends (or its process dies: resume it to go on)
    #[arg(long)]
    pub(crate) follow: bool,
}

#[derive(Debug, clap::Args)]
pub(crate) struct GcArgs {
    /// Age of the runs to delete, e.g. `30d`, `12h`
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    pub(crate) older_than: std::time::Duration,
    /// Also delete runs that stopped or wait for an approval (they could still be resumed)
    #[arg(long)]
    pub(crate) include_unfinished: bool,
    /// List the runs that would be deleted, and delete nothing
    #[arg(long)]
    pub(crate) dry_run: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum PlanCommand {
    /// Validate a plan file and store it under its id
    Add {
        /// The plan file
        file: PathBuf,
        /// Replace a stored plan with the same id
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        tool_options: ToolOptions,
    },
    /// Ask a model for a plan that reaches GOAL (an OpenAI-compatible Chat Completions
    /// endpoint: PLAN_LLM_URL or OPENAI_BASE_URL, ending in /v1; OPENAI_API_KEY), correct it
    /// until it validates, and store it
    Create {
        /// What the plan is to do, in your words
        goal: String,
        /// The model (default: PLAN_LLM_MODEL)
        #[arg(long, env = "PLAN_LLM_MODEL")]
        model: Option<String>,
        /// The plan's id (default: the model's, else one made from the goal)
        #[arg(long)]
        id: Option<String>,
        /// Run it once stored
        #[arg(long)]
        run: bool,
        /// Answers to send back for correction when one is not a valid plan
        #[arg(long, default_value_t = 2, value_name = "N")]
        max_retries: u32,
        /// Replace a stored plan with the same id
        #[arg(long)]
        force: bool,
        /// Print `{"plan_id", "plan"}` instead of drawing it
        #[arg(long)]
        json: bool,
        /// With --run: run the model's plan without asking (it is listed first, every call it
        /// can make; without a terminal to ask on, --run needs --yes)
        #[arg(long, short = 'y')]
        yes: bool,
        #[command(flatten)]
        policy: PolicyArgs,
        #[command(flatten)]
        asking: ModelArgs,
        #[command(flatten)]
        tool_options: ToolOptions,
    },
    /// List the stored plans
    List(JsonArgs),
    /// Draw a stored plan
    Show {
        /// The plan's id
        id: String,
        /// How to draw it
        #[arg(long, value_enum, default_value = "ascii")]
        format: GraphFormat,
        #[command(flatten)]
        tool_options: ToolOptions,
    },
    /// Remove a stored plan (its runs keep their own copy)
    Rm {
        /// The plan's id
        id: String,
    },
}

#[derive(Debug, clap::Args)]
pub(crate) struct SchemaArgs {
    /// Whose schema: `editors` (every form and alias a plan may take), or `generation` (the
    /// subset a model writes, a step per tool the model's policy allows, canonical names only,
    /// no defaults: what `plan create` sends)
    #[arg(
        long = "for",
        value_enum,
        value_name = "WHOM",
        default_value = "editors"
    )]
    pub(crate) audience: SchemaFor,
    /// With --for generation: its strict variant (OpenAI's strict mode), which leaves out what
    /// cannot be said strictly (listed on stderr)
    #[arg(long)]
    pub(crate) strict: bool,
    /// With --for generation: the policy that chooses the tools (as `plan create`'s)
    #[command(flatten)]
    pub(crate) policy: PolicyArgs,
    #[command(flatten)]
    pub(crate) tool_options: ToolOptions,
}

/// Whom `schema` is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum SchemaFor {
    /// Editors and people: every form a plan may take
    Editors,
    /// A model writing a plan for a goal
    Generation,
}

/// How `plan create` asks its model.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ModelArgs {
    /// The one response format to ask with, never stepping down (default: the strictest the
    /// server takes, found by stepping down from json_schema_strict on a refusal, and kept in
    /// the ledger for the next time)
    #[arg(long, value_name = "FORMAT", value_parser = response_format())]
    pub(crate) response_format: Option<plan_run::model::ResponseFormat>,
    /// The most tokens an answer may have (at most half the model's context)
    #[arg(long, value_name = "N", default_value_t = plan_run::model::DEFAULT_MAX_TOKENS,
          value_parser = clap::value_parser!(u32).range(16..))]
    pub(crate) max_tokens: u32,
    /// The model's context, in tokens (default: what the server says, where it says it:
    /// llama.cpp's llama-server, vLLM)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(256..))]
    pub(crate) context_tokens: Option<u32>,
    /// How long one request to the model may take [default: 10m]
    #[arg(long, value_name = "DURATION", value_parser = some_time)]
    pub(crate) timeout: Option<std::time::Duration>,
    /// Put the rules and the tools in the first user message instead of a system message
    /// (some chat templates drop system messages; done by itself where the server's template
    /// has none)
    #[arg(long)]
    pub(crate) no_system: bool,
    /// Write every request to the model and its answer to FILE (JSON), also when no plan
    /// comes of them
    #[arg(long, value_name = "FILE")]
    pub(crate) transcript: Option<PathBuf>,
}

/// A duration of at least a second.
fn some_time(text: &str) -> Result<std::time::Duration, String> {
    let duration = humantime::parse_duration(text).map_err(|e| e.to_string())?;
    if duration < std::time::Duration::from_secs(1) {
        return Err("at least 1s".to_owned());
    }
    Ok(duration)
}

/// The response formats by name, strictest first (`plan_run::model::ResponseFormat::ALL`).
fn response_format() -> impl clap::builder::TypedValueParser<Value = plan_run::model::ResponseFormat>
{
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(plan_run::model::ResponseFormat::ALL.map(|f| f.name()))
        .try_map(|name| {
            plan_run::model::ResponseFormat::named(&name).ok_or("not a response format")
        })
}

impl ModelArgs {
    /// The settings these flags give.
    pub(crate) fn settings(&self) -> plan_run::model::Settings {
        plan_run::model::Settings {
            timeout: self.timeout.unwrap_or(plan_run::model::DEFAULT_TIMEOUT),
            max_tokens: self.max_tokens,
            format: self.response_format,
            context_tokens: self.context_tokens,
            system: self.no_system.then_some(false),
            transcript: self.transcript.is_some(),
            ..plan_run::model::Settings::default()
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum StateFormat {
    /// The execute-state.json document, schema 2.0
    ExecuteState,
}

#[derive(Debug, Subcommand)]
pub(crate) enum ImportCommand {
    /// A task breakdown folder (manifest.json, layer_plan.json, a task XML file per task) as
    /// a plan of task steps, each implemented by a coding agent in its own git worktree
    Tasks {
        /// The breakdown folder (`docs/tasks/<slug>/`)
        dir: PathBuf,
        /// The coding agent's command, split into words without a shell (`"claude -p"`,
        /// `"./agent.sh"`); the task's prompt is its last argument unless it reads
        /// `${task.…}` itself
        #[arg(long, value_name = "CMD")]
        implement: String,
        /// The git repository the tasks change (default: the manifest's `prd.project_path`,
        /// else here)
        #[arg(long, value_name = "DIR")]
        repo: Option<PathBuf>,
        /// Let the dependencies alone order the tasks (by default each layer waits for the
        /// layer before it, as the breakdown's own executor runs them)
        #[arg(long)]
        no_layer_barrier: bool,
        /// A command run on each task merged with the base before the base moves (repeatable)
        #[arg(long, value_name = "CMD")]
        verify_after_merge: Vec<String>,
        /// Write the plan here instead of printing it
        #[arg(long, short, value_name = "FILE")]
        output: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum StateCommand {
    /// Print a run's state document
    Export {
        /// The run: its id, a unique prefix of it, or `last` for the newest run
        run: String,
        /// The document's format
        #[arg(long, value_enum, default_value = "execute-state")]
        format: StateFormat,
    },
}

/// `on`/`off` (and `true`/`false`, `1`/`0`, as AGENT_APPROVALS_ENABLED is often written).
fn parse_switch(text: &str) -> Result<bool, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "on" | "true" | "1" | "yes" => Ok(true),
        "off" | "false" | "0" | "no" => Ok(false),
        _ => Err(format!("`{text}`: say on or off")),
    }
}

fn parse_var(text: &str) -> Result<(String, String), String> {
    let Some((name, value)) = text.split_once('=') else {
        return Err(format!("expected NAME=VALUE, got `{text}`"));
    };
    if name.is_empty() {
        return Err("the variable name is empty".to_owned());
    }
    Ok((name.to_owned(), value.to_owned()))
}

fn parse_json_var(text: &str) -> Result<(String, serde_json::Value), String> {
    let (name, value) = parse_var(text)?;
    let value = plan_types::json::from_str(&value)
        .map_err(|error| format!("`{value}` is not JSON ({error}); for a string, use --var"))?;
    Ok((name, value))
}

fn parse_age(text: &str) -> Result<std::time::Duration, String> {
    humantime::parse_duration(text)
        .map_err(|error| format!("`{text}` is not an age like `30d` or `12h`: {error}"))
}

impl Command {
    /// The stored run the command goes on with or decides on (set to the run `last` named
    /// once it is read).
    pub(crate) fn run_going_on(&mut self) -> Option<&mut String> {
        match self {
            Command::Resume(ResumeArgs { run, .. })
            | Command::Retry(RetryArgs { run, .. })
            | Command::Approve(ApproveArgs { run, .. })
            | Command::Reject(RejectArgs { run, .. }) => Some(run),
            _ => None,
        }
    }

    /// The tool options given after the command, for the commands that use tools.
    pub(crate) fn tool_options(&self) -> Option<&ToolOptions> {
        Some(match self {
            Command::Run(args) => &args.tool_options,
            Command::Resume(args) => &args.tool_options,
            Command::Retry(args) => &args.tool_options,
            Command::Approve(args) => &args.tool_options,
            Command::Reject(args) => &args.tool_options,
            Command::Validate(args) => &args.tool_options,
            Command::Schema(args) => &args.tool_options,
            Command::Show(args) => &args.tool_options,
            Command::Tools(args) => &args.tool_options,
            Command::Worker(args) => &args.tool_options,
            Command::Mcp(McpCommand::Serve(args)) => &args.tool_options,
            Command::Plan(
                PlanCommand::Add { tool_options, .. }
                | PlanCommand::Show { tool_options, .. }
                | PlanCommand::Create { tool_options, .. },
            ) => tool_options,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn var_values_are_kept_as_text() {
        let var = |text| super::parse_var(text);
        assert_eq!(var("version=1.10"), Ok(("version".into(), "1.10".into())));
        assert_eq!(var("n=3"), Ok(("n".into(), "3".into())));
        assert_eq!(var("s=hello world"), Ok(("s".into(), "hello world".into())));
        assert_eq!(var("e="), Ok(("e".into(), String::new())));
        assert_eq!(var("eq=a=b"), Ok(("eq".into(), "a=b".into())));
        assert!(var("novalue").is_err());
        assert!(var("=3").is_err());
    }

    #[test]
    fn json_vars_must_be_json() {
        let var = |text| super::parse_json_var(text);
        assert_eq!(var("n=3"), Ok(("n".into(), json!(3))));
        assert_eq!(var("o={\"a\":[1]}"), Ok(("o".into(), json!({"a": [1]}))));
        assert_eq!(var("s=\"1.10\""), Ok(("s".into(), json!("1.10"))));
        let error = var("s=hello").unwrap_err();
        assert!(
            error.contains("not JSON") && error.contains("--var"),
            "{error}"
        );
    }

    #[test]
    fn ages_read_like_durations() {
        assert_eq!(
            super::parse_age("30d"),
            Ok(std::time::Duration::from_secs(30 * 86_400))
        );
        assert_eq!(
            super::parse_age("12h"),
            Ok(std::time::Duration::from_secs(12 * 3_600))
        );
        assert!(super::parse_age("soon").is_err());
    }

    #[test]
    fn the_cli_definition_is_consistent() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
