//! The tool port: what a tool is to the engine (a name, a schema, a risk, and an async call
//! that may fail), and the registry of the tools a plan can call.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use plan_types::Risk;
use plan_types::{ErrorCode, ProgressReport};
use serde::Serialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// The error codes the engine itself produces, as constants of [`ErrorCode`]; tools may use
/// their own as well ([`ErrorCode::Other`]).
pub mod codes {
    use plan_types::ErrorCode;

    /// A tool reported a failure.
    pub const E_TOOL: ErrorCode = ErrorCode::Tool;
    /// An attempt ran past its `timeout_ms` and was cancelled.
    pub const E_TIMEOUT: ErrorCode = ErrorCode::Timeout;
    /// The resolved arguments do not fit the tool.
    pub const E_ARGS_INVALID: ErrorCode = ErrorCode::ArgsInvalid;
    /// A placeholder in the arguments does not resolve.
    pub const E_ARGS_UNRESOLVED: ErrorCode = ErrorCode::ArgsUnresolved;
    /// A bind selector does not match the step's result.
    pub const E_BIND_UNRESOLVED: ErrorCode = ErrorCode::BindUnresolved;
    /// The run was cancelled while the step ran.
    pub const E_CANCELLED: ErrorCode = ErrorCode::Cancelled;
    /// The connection to a remote tool failed.
    pub const E_TRANSPORT: ErrorCode = ErrorCode::Transport;
    /// Reading or writing a file or a pipe failed.
    pub const E_IO: ErrorCode = ErrorCode::Io;
    /// A step's `when` is not true or false, or cannot be evaluated.
    pub const E_CONDITION: ErrorCode = ErrorCode::Condition;
    /// A map step's `expand_on` is not a list.
    pub const E_EXPAND_NOT_LIST: ErrorCode = ErrorCode::ExpandNotList;
    /// A map item's key (from `expand_key`) is not a string or a number.
    pub const E_EXPAND_KEY: ErrorCode = ErrorCode::ExpandKey;
    /// Two map items have the same key.
    pub const E_EXPAND_DUPLICATE_KEY: ErrorCode = ErrorCode::ExpandDuplicateKey;
    /// Some items of a map step failed.
    pub const E_MAP_ITEMS_FAILED: ErrorCode = ErrorCode::MapItemsFailed;
    /// A block's graph does not validate.
    pub const INVALID_GRAPH: ErrorCode = ErrorCode::InvalidGraph;
    /// A block's transition names a node that does not exist.
    pub const UNKNOWN_NODE: ErrorCode = ErrorCode::UnknownNode;
    /// No branch of a block's transition matched.
    pub const NO_TRANSITION: ErrorCode = ErrorCode::NoTransition;
    /// A block ran more than `max_steps` nodes.
    pub const MAX_STEPS_EXCEEDED: ErrorCode = ErrorCode::MaxStepsExceeded;
    /// A block's condition is undefined, does not compile, or cannot be evaluated.
    pub const CONDITION_RESOLUTION_ERROR: ErrorCode = ErrorCode::ConditionResolutionError;
    /// A high-risk step's approval was refused (`plan-cli reject`).
    pub const E_REJECTED: ErrorCode = ErrorCode::Rejected;
    /// A guard (a budget of the plan's `guards`) stopped the call before it was made.
    pub const E_GUARD: ErrorCode = ErrorCode::Guard;
    /// The named queue does not answer.
    pub const E_QUEUE_UNAVAILABLE: ErrorCode = ErrorCode::QueueUnavailable;
    /// No queue worker took the call in time.
    pub const E_QUEUE_TIMEOUT: ErrorCode = ErrorCode::QueueTimeout;
    /// The queue workers running the call died more than BullMQ allows.
    pub const E_WORKER_LOST: ErrorCode = ErrorCode::WorkerLost;
    /// A task step used its last attempt without passing its checks.
    pub const E_TASK_ABANDONED: ErrorCode = ErrorCode::TaskAbandoned;
    /// The tool asked a person for input it was not given (`details`: `message` and
    /// `requested_schema`): the call waits for the answer (`approve RUN ID@input#N --input`).
    pub const E_INPUT_REQUIRED: ErrorCode = ErrorCode::InputRequired;
}

/// How a tool call failed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolError {
    /// A stable code such as `E_TIMEOUT`.
    pub code: ErrorCode,
    /// What happened.
    pub message: String,
    /// Whether trying again may succeed (timeouts, I/O, transport, the tool says so).
    #[serde(skip)]
    pub retryable: bool,
    /// The least delay before trying again, when the tool knows it (HTTP `Retry-After`).
    #[serde(skip)]
    pub retry_after: Option<Duration>,
    /// Structured context (e.g. the failed command's output). Boxed: errors travel in every
    /// `Result` of a tool call, and most have no details.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<Box<Value>>,
}

impl ToolError {
    /// A failure that trying again will not fix.
    pub fn new(code: impl Into<ErrorCode>, message: impl Into<String>) -> Self {
        ToolError {
            code: code.into(),
            message: message.into(),
            retryable: false,
            retry_after: None,
            details: None,
        }
    }

    /// A failure that may pass if tried again.
    pub fn retryable(code: impl Into<ErrorCode>, message: impl Into<String>) -> Self {
        ToolError {
            retryable: true,
            ..ToolError::new(code, message)
        }
    }

    /// Arguments that do not fit the tool: never retried.
    pub fn invalid_args(message: impl Into<String>) -> Self {
        ToolError::new(codes::E_ARGS_INVALID, message)
    }

    /// Adds structured details.
    #[must_use]
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(Box::new(details));
        self
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for ToolError {}

/// What a tool is told about the call it serves.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The run.
    pub run_id: Arc<str>,
    /// The step.
    pub step_id: Arc<str>,
    /// 1 for the first try, 2 for the first retry, …
    pub attempt: u32,
    /// Cancelled when the run stops or the attempt times out: long tools should watch it.
    pub cancel: CancellationToken,
    /// Where a long tool reports how far it got (`tool.progress` events), if anywhere.
    pub progress: Option<Progress>,
    /// When the attempt times out (`timeout_ms`), if it can: a tool that hands the call on
    /// (to a worker, a server) can pass the limit along.
    pub deadline: Option<std::time::SystemTime>,
    /// Where a tool that prints (a program's stdout and stderr) sends its lines as they come,
    /// if anywhere (`run -v`). Secrets are redacted on the way.
    pub output: Option<Output>,
    /// The folder the call works in, when the engine gives one (a task's worktree): a tool
    /// that runs programs runs them there.
    pub working_dir: Option<Arc<std::path::Path>>,
    /// The folder the call's programs may not leave, when its run is under an author's policy
    /// (an MCP client's, a model's): a tool that runs programs runs them inside it and refuses
    /// a `cwd` outside it. It holds wherever the run goes on (`resume` from the CLI too).
    pub confined_to: Option<Arc<std::path::Path>>,
    /// The answers a person gave to the questions this call asked before (an MCP server's
    /// elicitations), in the order asked (none for most calls): asked a question, the tool
    /// gives the first answer not given yet to that same question
    /// (`plan_types::same_question`), and fails with [`codes::E_INPUT_REQUIRED`] when there is
    /// none.
    pub answers: Option<Arc<[Answer]>>,
}

/// An answer a person gave to a question a call asked (`approve RUN ID@input#N --input`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Answer {
    /// What was asked (the server's message, as kept): another question is not given it.
    pub question: String,
    /// The answer: an object of the fields asked.
    pub answer: serde_json::Value,
}

/// Where a run's output lines go as tools print them: `(step_id, stream, line)`, with
/// `stream` `stdout` or `stderr`.
pub type OutputSink = Arc<dyn Fn(&str, &str, &str) + Send + Sync>;

/// Takes one printed line: `(stream, line)`.
type LineSink = dyn Fn(&str, &str) + Send + Sync;

/// One call's end of an [`OutputSink`].
#[derive(Clone)]
pub struct Output(Arc<LineSink>);

impl Output {
    /// Hands each `(stream, line)` to `line`.
    pub fn new(line: impl Fn(&str, &str) + Send + Sync + 'static) -> Self {
        Output(Arc::new(line))
    }

    /// One line the tool printed on `stream` (`stdout`, `stderr`), without its newline.
    pub fn line(&self, stream: &str, line: &str) {
        (self.0)(stream, line);
    }
}

impl std::fmt::Debug for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Output")
    }
}

/// Reports a running tool's progress; each report becomes a `tool.progress` event.
#[derive(Clone)]
pub struct Progress(Arc<dyn Fn(ProgressReport) + Send + Sync>);

impl Progress {
    /// A reporter that hands each report to `report`.
    pub fn new(report: impl Fn(ProgressReport) + Send + Sync + 'static) -> Self {
        Progress(Arc::new(report))
    }

    /// Reports progress.
    pub fn report(&self, report: ProgressReport) {
        (self.0)(report);
    }
}

impl fmt::Debug for Progress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Progress")
    }
}

impl ToolContext {
    /// `RUN/STEP`: the same for every attempt of a step, so a tool can make its effect once.
    pub fn idempotency_key(&self) -> String {
        format!("{}/{}", self.run_id, self.step_id)
    }
}

/// How a tool describes itself to `plan-cli tools` and to validation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolInfo {
    /// The name plans use.
    pub name: String,
    /// One line on what it does.
    pub description: String,
    /// Where it comes from: `builtin`, or an MCP server's name.
    pub source: String,
    /// JSON Schema of its arguments.
    pub input_schema: Value,
    /// Its risk when a step does not set one: `high` makes every call wait for an approval.
    pub risk: Risk,
}

/// A callable tool.
#[async_trait]
pub trait Tool: Send + Sync + 'static {
    /// Name, description and schema.
    fn info(&self) -> ToolInfo;

    /// Calls the tool with resolved arguments.
    async fn call(&self, args: Value, ctx: ToolContext) -> Result<Value, ToolError>;
}

/// The tools a run may call, by name.
#[derive(Clone, Default)]
pub struct Registry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Registry::default()
    }

    /// Adds a tool under the name its [`ToolInfo`] gives; a later tool of the same name
    /// replaces the earlier one.
    pub fn register(&mut self, tool: impl Tool) -> &mut Self {
        let name = tool.info().name;
        self.tools.insert(name, Arc::new(tool));
        self
    }

    /// Adds a tool under `name`, which may differ from its own (an MCP tool's bare name).
    pub fn register_as(&mut self, name: impl Into<String>, tool: Arc<dyn Tool>) -> &mut Self {
        self.tools.insert(name.into(), tool);
        self
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name)
    }

    /// Every tool's name, sorted.
    pub fn names(&self) -> Vec<String> {
        self.tools.keys().cloned().collect()
    }

    /// Every tool's description, sorted by name.
    pub fn infos(&self) -> Vec<ToolInfo> {
        self.tools.values().map(|tool| tool.info()).collect()
    }
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.tools.keys()).finish()
    }
}

/// A tool's failure as its record keeps it.
impl From<ToolError> for plan_types::StepError {
    fn from(error: ToolError) -> Self {
        plan_types::StepError {
            code: error.code,
            message: error.message,
            details: error.details.map(|details| *details),
        }
    }
}
