//! MCP servers as tools, over the official SDK (`rmcp`), which stays inside this file.
//!
//! A server starts when a tool of it is first needed (listing its tools, or a call), is
//! initialised once, and is shared by every call of the run. A server that crashes or whose
//! transport fails makes the call fail with a retryable `E_TRANSPORT`; the next call starts it
//! again, once. [`McpServers::shutdown`] stops every server that was started.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use plan_ports::{Progress, Registry, Risk, Tool, ToolContext, ToolError, ToolInfo, codes};
use plan_types::ProgressReport;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotificationParam,
    ClientCapabilities, ClientRequest, ContentBlock, ErrorCode, Implementation,
    InitializeRequestParams, NumberOrString, ProgressNotificationParam, ProgressToken,
    ServerResult,
};
use rmcp::service::{
    NotificationContext, PeerRequestOptions, RoleClient, RunningService, ServiceError,
};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, ServiceExt};
use serde_json::Value;
use tokio::io::AsyncBufReadExt;

use super::config::{McpConfig, ServerConfig};

/// An MCP server could not be started or asked for its tools.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("MCP server `{server}`: {message}")]
pub struct McpError {
    /// The server.
    pub server: String,
    /// What went wrong.
    pub message: String,
}

/// What a server started as a program gets of plan-cli's environment, besides its
/// `mcpServers` entry's own `env`: what programs need to start and find their files (as
/// `exec`'s programs get [`crate::Exec::BASE_ENV`]), plus where Node and Python keep their
/// caches and certificates. Nothing else: a secret in plan-cli's environment never reaches a
/// server (and through a tool such as `get-env`, a plan) unless the operator's configuration
/// names it.
pub const SERVER_BASE_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
    "TERM",
    "SHELL",
    "XDG_CACHE_HOME",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_RUNTIME_DIR",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
];

/// The configured servers of a run; each starts when first needed.
pub struct McpServers {
    servers: BTreeMap<String, Arc<Server>>,
}

impl McpServers {
    /// The servers of `config`, none started.
    pub fn new(config: McpConfig) -> Self {
        let McpConfig { servers, limits } = config;
        McpServers {
            servers: servers
                .into_iter()
                .map(|(name, config)| {
                    let limits = limits.get(&name).cloned().unwrap_or_default();
                    let turns = |n: std::num::NonZeroU32| {
                        Arc::new(tokio::sync::Semaphore::new(n.get() as usize))
                    };
                    let server = Server {
                        turns: limits.server.map(turns),
                        tool_turns: (limits.tools.into_iter())
                            .map(|(tool, n)| (tool, turns(n)))
                            .collect(),
                        name: name.clone(),
                        config,
                        state: tokio::sync::Mutex::new(State::default()),
                        progress: Arc::default(),
                        asking: Arc::default(),
                        stderr: Arc::default(),
                        task_only: Mutex::default(),
                        plain_only: Mutex::default(),
                    };
                    (name, Arc::new(server))
                })
                .collect(),
        }
    }

    /// The configured servers' names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.servers.keys().cloned().collect()
    }

    /// The tools of server `name` (starting it if needed), each named `NAME.tool`.
    pub async fn tools(&self, name: &str) -> Result<Vec<McpTool>, McpError> {
        let Some(server) = self.servers.get(name) else {
            return Err(McpError {
                server: name.to_owned(),
                message: format!(
                    "no such server in the MCP configuration (it has: {})",
                    self.names().join(", ")
                ),
            });
        };
        let service = server.connect().await.map_err(|message| McpError {
            server: name.to_owned(),
            message,
        })?;
        let tools = service.list_all_tools().await.map_err(|error| McpError {
            server: name.to_owned(),
            message: format!("cannot list its tools: {error}"),
        })?;
        Ok(tools
            .into_iter()
            .map(|tool| McpTool::new(server.clone(), tool))
            .collect())
    }

    /// Adds the tools of the servers `names` (starting them) to `registry`: each as
    /// `SERVER.tool`, and by its bare name when exactly one of these servers has it and
    /// `registry` had no tool of that name before. Returns the bare names several servers
    /// have, each with its qualified names, so that a plan using one can be told to choose.
    pub async fn register(
        &self,
        names: &[String],
        registry: &mut Registry,
    ) -> Result<BTreeMap<String, Vec<String>>, McpError> {
        let before = registry.clone();
        let mut by_bare: BTreeMap<String, Vec<Arc<dyn Tool>>> = BTreeMap::new();
        for name in names {
            for tool in self.tools(name).await? {
                let bare = tool.remote.clone();
                let tool: Arc<dyn Tool> = Arc::new(tool);
                registry.register_as(tool.info().name, tool.clone());
                by_bare.entry(bare).or_default().push(tool);
            }
        }
        let mut ambiguous = BTreeMap::new();
        for (bare, tools) in by_bare {
            if before.get(&bare).is_some() {
                continue;
            }
            match tools.as_slice() {
                [only] => {
                    registry.register_as(bare, only.clone());
                }
                several => {
                    let names = several.iter().map(|t| t.info().name).collect();
                    ambiguous.insert(bare, names);
                }
            }
        }
        Ok(ambiguous)
    }

    /// Stops every server that was started (a stdio server's process is ended).
    pub async fn shutdown(&self) {
        for server in self.servers.values() {
            server.stop().await;
        }
    }
}

/// A tool's risk from its annotations (`readOnlyHint`, `destructiveHint`): one that says it
/// may destroy is gated whatever else it says (a server cannot talk its way out of the gate
/// with a second hint); one that only says it reads is low; the rest are medium.
fn risk_of(hints: Option<(Option<bool>, Option<bool>)>) -> Risk {
    match hints {
        Some((_, Some(true))) => Risk::High,
        Some((Some(true), _)) => Risk::Low,
        _ => Risk::Medium,
    }
}

/// One tool of an MCP server, callable from plans as `SERVER.tool`.
#[derive(Clone)]
pub struct McpTool {
    server: Arc<Server>,
    /// The tool's name on its server.
    remote: String,
    info: ToolInfo,
}

impl McpTool {
    fn new(server: Arc<Server>, tool: rmcp::model::Tool) -> Self {
        let risk = risk_of(
            tool.annotations
                .as_ref()
                .map(|a| (a.read_only_hint, a.destructive_hint)),
        );
        let info = ToolInfo {
            name: format!("{}.{}", server.name, tool.name),
            description: tool
                .description
                .as_deref()
                .map(|d| d.lines().next().unwrap_or("").to_owned())
                .unwrap_or_default(),
            source: server.name.clone(),
            risk,
            input_schema: Value::Object((*tool.input_schema).clone()),
        };
        McpTool {
            server,
            remote: tool.name.into_owned(),
            info,
        }
    }
}

#[async_trait]
impl Tool for McpTool {
    fn info(&self) -> ToolInfo {
        self.info.clone()
    }

    async fn call(&self, args: Value, ctx: ToolContext) -> Result<Value, ToolError> {
        let arguments = match args {
            Value::Object(map) => map,
            other => {
                return Err(ToolError::invalid_args(format!(
                    "MCP tools take an object of arguments, not {other}"
                )));
            }
        };
        // The tool's turn, then the server's (always in that order: no two calls each hold
        // one and wait for the other's). Held until the call ends; the semaphores are never
        // closed, so acquiring cannot fail.
        let _tool_turn = match self.server.tool_turns.get(&self.remote) {
            Some(turns) => turns.clone().acquire_owned().await.ok(),
            None => None,
        };
        let _server_turn = match &self.server.turns {
            Some(turns) => turns.clone().acquire_owned().await.ok(),
            None => None,
        };
        let service = self.server.connect().await.map_err(|message| {
            let message = format!("MCP server `{}`: {message}", self.server.name);
            ToolError::retryable(codes::E_TRANSPORT, message)
        })?;
        // In flight from here: a question the server asks meanwhile is this call's.
        let in_call = self.server.asking.enter(ctx.answers.clone());
        // Kept for a question's details (an answer is for a call with these arguments); an
        // MCP call costs a round trip, beside which the copy is nothing.
        let asked_with = Value::Object(arguments.clone());
        let outcome = self.call_in_flight(&service, arguments, &ctx).await;
        match in_call.outcome(&self.server.name, &asked_with) {
            Some(error) => Err(error),
            None => outcome,
        }
    }
}

impl McpTool {
    /// The call, its server connected: plain, or as a task.
    async fn call_in_flight(
        &self,
        service: &Arc<Service>,
        arguments: rmcp::model::JsonObject,
        ctx: &ToolContext,
    ) -> Result<Value, ToolError> {
        if self.server.needs_task(&self.remote) {
            return self.call_as_task(service, arguments, ctx).await;
        }
        // A long call (a `timeout_ms` of a minute or more) is made as a task where the tool
        // takes one (`taskSupport: "optional"`; rmcp keeps no tool's `execution`, so it is
        // tried): a server that knows no tasks answers it at once, and one that refuses a task
        // for the tool (-32601) is called plainly, now and from then on.
        let long = ctx.deadline.is_some_and(|deadline| {
            deadline
                .duration_since(std::time::SystemTime::now())
                .is_ok_and(|left| left >= LONG_CALL)
        });
        if long && !self.server.is_plain_only(&self.remote) {
            match self.try_as_task(service, arguments.clone(), ctx).await {
                Some(outcome) => return outcome,
                None => self.server.set_plain_only(&self.remote),
            }
        }
        let mut params = CallToolRequestParams::new(self.remote.clone());
        params.arguments = Some(arguments.clone());
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let peer = service.peer().clone();
        let handle = match peer
            .send_request_with_option(request, PeerRequestOptions::no_options())
            .await
        {
            Ok(handle) => handle,
            Err(error) => return Err(self.server.failed(service, error).await),
        };
        // rmcp puts a progress token of its own on every request (replacing any the caller
        // set), so progress for this call comes back with the handle's token: watched from
        // before the server can have answered anything.
        let token = handle.progress_token.clone();
        let watching = ctx
            .progress
            .clone()
            .and_then(|progress| self.server.watch_progress(&token, progress));
        let mut abandoned = Abandoned {
            peer: peer.clone(),
            id: Some(InFlight::Request(handle.id.clone())),
        };
        let outcome = handle.await_response().await;
        abandoned.id = None;
        if let Some(watching) = &watching {
            watching.settle(ctx.deadline).await;
        }
        drop(watching);
        match outcome {
            // The TypeScript SDK's servers answer that refusal as the tool's error instead.
            Ok(ServerResult::CallToolResult(result))
                if refused_without_task(&result, &self.remote) =>
            {
                self.call_as_task(service, arguments, ctx).await
            }
            Ok(ServerResult::CallToolResult(result)) => result_value(result),
            Ok(ServerResult::InputRequiredResult(_)) => Err(ToolError::new(
                codes::E_TOOL,
                format!(
                    "MCP server `{}`: the tool asked for input, which a plan cannot give",
                    self.server.name
                ),
            )),
            Ok(_) => Err(ToolError::retryable(
                codes::E_TRANSPORT,
                format!(
                    "MCP server `{}` answered the call with something other than a result",
                    self.server.name
                ),
            )),
            // MCP 2025-11-25's answer to a call made without the task a tool's
            // `taskSupport: "required"` asks for (rmcp does not keep a tool's `execution`, so
            // this is where it shows): the call did not run; it is made again as a task, and
            // so are the tool's later calls.
            Err(ServiceError::McpError(error)) if error.code == ErrorCode::METHOD_NOT_FOUND => {
                self.call_as_task(service, arguments, ctx).await
            }
            Err(error) => Err(self.server.failed(service, error).await),
        }
    }
}

impl McpTool {
    /// Calls the tool as an MCP task (protocol 2025-11-25): the server answers a task at once;
    /// it is polled with `tasks/get` at the server's `pollInterval` until it ends or needs
    /// input (which the server asks for while `tasks/result` is awaited), then its result is
    /// read with `tasks/result`. A call abandoned on the way (its timeout, the run stopped)
    /// cancels the task (`tasks/cancel`).
    async fn call_as_task(
        &self,
        service: &Arc<Service>,
        arguments: rmcp::model::JsonObject,
        ctx: &ToolContext,
    ) -> Result<Value, ToolError> {
        match self.task_call(service, arguments, ctx).await {
            Ok(value) => Ok(value),
            Err(TaskError::Failed(error)) => Err(error),
            Err(TaskError::Refused) => Err(ToolError::new(
                codes::E_TOOL,
                format!(
                    "MCP server `{}` refused a task for `{}`, which needs one",
                    self.server.name, self.remote
                ),
            )),
        }
    }

    /// [`McpTool::call_as_task`] for a tool that may take no task: `None` when the server
    /// refuses a task for it (-32601; nothing ran).
    async fn try_as_task(
        &self,
        service: &Arc<Service>,
        arguments: rmcp::model::JsonObject,
        ctx: &ToolContext,
    ) -> Option<Result<Value, ToolError>> {
        match self.task_call(service, arguments, ctx).await {
            Ok(value) => Some(Ok(value)),
            Err(TaskError::Failed(error)) => Some(Err(error)),
            Err(TaskError::Refused) => None,
        }
    }

    async fn task_call(
        &self,
        service: &Arc<Service>,
        arguments: rmcp::model::JsonObject,
        ctx: &ToolContext,
    ) -> Result<Value, TaskError> {
        let mut task = serde_json::json!({});
        if let Some(deadline) = ctx.deadline {
            let left = deadline
                .duration_since(std::time::SystemTime::now())
                .unwrap_or_default();
            task["ttl"] = Value::from(u64::try_from(left.as_millis()).unwrap_or(u64::MAX));
        }
        let params = serde_json::json!({"name": self.remote, "arguments": arguments, "task": task});
        let created = match send_raw(service, "tools/call", params).await {
            Ok(created) => created,
            // MCP 2025-11-25: a tool whose `taskSupport` is `forbidden` refuses a task; the
            // call did not run.
            Err(RawError::Service(ServiceError::McpError(error)))
                if error.code == ErrorCode::METHOD_NOT_FOUND =>
            {
                return Err(TaskError::Refused);
            }
            Err(error) => return Err(self.raw_failed(service, error).await.into()),
        };
        Ok(self.follow_task(service, created, ctx).await?)
    }

    /// A task-augmented call's answer followed to the call's result: the result itself (the
    /// server ran the call at once), or its task polled to its end.
    async fn follow_task(
        &self,
        service: &Arc<Service>,
        created: Value,
        ctx: &ToolContext,
    ) -> Result<Value, ToolError> {
        // A server that runs the call at once, task or not, answered its result: the tool ran,
        // and must not run again.
        if created.get("task").is_none()
            && let Ok(result) = serde_json::from_value::<CallToolResult>(created.clone())
        {
            return result_value(result);
        }
        let Some(id) = created["task"]["taskId"].as_str().map(str::to_owned) else {
            return Err(ToolError::retryable(
                codes::E_TRANSPORT,
                format!(
                    "MCP server `{}` answered a task-augmented call without a task: {created}",
                    self.server.name
                ),
            ));
        };
        // A task exists: the tool's later calls are tasks from the start.
        self.server.set_needs_task(&self.remote);
        let mut abandoned = Abandoned {
            peer: service.peer().clone(),
            id: Some(InFlight::Task(id.clone())),
        };
        let mut poll = poll_interval(&created["task"]);
        // Each new `statusMessage` is the call's progress (`tool.progress`).
        let (mut said, mut changes) = (None::<String>, 0.0);
        loop {
            let task = self
                .raw(service, "tasks/get", serde_json::json!({"taskId": id}))
                .await?;
            // 2025-11-25 answers the task's fields; some servers wrap them in `task`.
            let task = if task.get("status").is_some() {
                task
            } else {
                task["task"].clone()
            };
            let message = task["statusMessage"].as_str().map(str::to_owned);
            if let (Some(progress), Some(text)) = (&ctx.progress, &message)
                && said.as_ref() != Some(text)
            {
                changes += 1.0;
                progress.report(plan_types::ProgressReport {
                    progress: changes,
                    total: None,
                    message: Some(text.clone()),
                });
            }
            said = message.or(said);
            match task["status"].as_str() {
                Some("working") | None => {}
                Some("cancelled") => {
                    abandoned.id = None;
                    return Err(ToolError::new(
                        codes::E_TOOL,
                        format!(
                            "MCP server `{}`: its task {id} was cancelled{}",
                            self.server.name,
                            task["statusMessage"]
                                .as_str()
                                .map(|m| format!(": {m}"))
                                .unwrap_or_default()
                        ),
                    ));
                }
                // Ended, or needs input: `tasks/result` carries the server's questions, and
                // then the result.
                Some(_) => break,
            }
            // The server may change its interval as the task goes.
            if task.get("pollInterval").is_some() {
                poll = poll_interval(&task);
            }
            tokio::time::sleep(poll).await;
        }
        let request = ClientRequest::CustomRequest(rmcp::model::CustomRequest::new(
            "tasks/result",
            Some(serde_json::json!({"taskId": id})),
        ));
        let outcome = service.peer().send_request(request).await;
        abandoned.id = None;
        match outcome {
            Ok(ServerResult::CallToolResult(result)) => result_value(result),
            Ok(other) => {
                let value = serde_json::to_value(other).unwrap_or_default();
                serde_json::from_value::<CallToolResult>(value.clone())
                    .map_err(|_| {
                        ToolError::retryable(
                            codes::E_TRANSPORT,
                            format!(
                                "MCP server `{}` answered task {id}'s result with something other than a tool's result: {value}",
                                self.server.name
                            ),
                        )
                    })
                    .and_then(result_value)
            }
            Err(error) => Err(self.server.failed(service, error).await),
        }
    }

    /// Sends a request rmcp has no type for (or whose type drops a field), and its answer as
    /// JSON.
    async fn raw(
        &self,
        service: &Arc<Service>,
        method: &str,
        params: Value,
    ) -> Result<Value, ToolError> {
        match send_raw(service, method, params).await {
            Ok(answer) => Ok(answer),
            Err(error) => Err(self.raw_failed(service, error).await),
        }
    }

    /// A raw request's failure as the call's error (a dead transport is dropped).
    async fn raw_failed(&self, service: &Arc<Service>, error: RawError) -> ToolError {
        match error {
            RawError::Service(error) => self.server.failed(service, error).await,
            RawError::Unreadable(method, error) => ToolError::new(
                codes::E_TOOL,
                format!("unreadable answer to {method}: {error}"),
            ),
        }
    }
}

/// Why a raw request gave no answer.
enum RawError {
    /// The request failed (the server's error, or the transport's).
    Service(ServiceError),
    /// Its answer could not be read as JSON.
    Unreadable(String, serde_json::Error),
}

/// Sends `method` with `params` as rmcp's `CustomRequest`: the answer as JSON.
async fn send_raw(service: &Arc<Service>, method: &str, params: Value) -> Result<Value, RawError> {
    let request =
        ClientRequest::CustomRequest(rmcp::model::CustomRequest::new(method, Some(params)));
    let answer = service
        .peer()
        .send_request(request)
        .await
        .map_err(RawError::Service)?;
    serde_json::to_value(answer).map_err(|error| RawError::Unreadable(method.to_owned(), error))
}

/// Calls whose limit is at least this long are made as tasks where their tools take them.
const LONG_CALL: std::time::Duration = std::time::Duration::from_secs(60);

/// Why a call made as a task did not give a result.
enum TaskError {
    /// The server refuses a task for the tool (nothing ran).
    Refused,
    /// The call failed.
    Failed(ToolError),
}

impl From<ToolError> for TaskError {
    fn from(error: ToolError) -> Self {
        TaskError::Failed(error)
    }
}

/// Whether a call's error result is the refusal of a `taskSupport: "required"` tool called
/// without a task, as the TypeScript SDK's servers word it: the whole text, one block, from its
/// start (`MCP error -32601: Tool NAME requires task augmentation (taskSupport: 'required')`).
/// Matched whole, so that a tool's own error output (a web page a fetch tool read) cannot pass
/// for it and make plan-cli call the tool again.
fn refused_without_task(result: &CallToolResult, remote: &str) -> bool {
    let refusal = format!(
        "MCP error -32601: Tool {remote} requires task augmentation (taskSupport: 'required')"
    );
    result.is_error == Some(true)
        && matches!(result.content.as_slice(), [block]
            if block.as_text().is_some_and(|text| text.text.trim() == refusal))
}

/// A task's `pollInterval`, within reason (a server cannot make plan-cli spin or sleep an hour).
fn poll_interval(task: &Value) -> std::time::Duration {
    std::time::Duration::from_millis(
        task["pollInterval"]
            .as_u64()
            .unwrap_or(1000)
            .clamp(100, 10_000),
    )
}

/// mcp-cli's reading of a result: `structuredContent`, else a single text item (parsed when
/// it is a JSON object or array), else the content list. `isError` fails the call.
fn result_value(result: CallToolResult) -> Result<Value, ToolError> {
    let text_of = |content: &[ContentBlock]| -> Vec<String> {
        content
            .iter()
            .filter_map(|block| match block {
                ContentBlock::Text(text) => Some(text.text.clone()),
                _ => None,
            })
            .collect()
    };
    if result.is_error == Some(true) {
        let texts = text_of(&result.content);
        let message = if texts.is_empty() {
            "the tool reported an error".to_owned()
        } else {
            texts.join("\n")
        };
        return Err(ToolError::new(codes::E_TOOL, message));
    }
    if let Some(structured) = result.structured_content {
        return Ok(structured);
    }
    if let [ContentBlock::Text(text)] = result.content.as_slice() {
        return Ok(match serde_json::from_str::<Value>(&text.text) {
            Ok(value @ (Value::Object(_) | Value::Array(_))) => value,
            _ => Value::String(text.text.clone()),
        });
    }
    serde_json::to_value(&result.content)
        .map_err(|error| ToolError::new(codes::E_TOOL, format!("unreadable result: {error}")))
}

type Service = RunningService<RoleClient, Handler>;

/// One configured server and, once started, its connection.
struct Server {
    name: String,
    config: ServerConfig,
    state: tokio::sync::Mutex<State>,
    /// Progress reporters of calls in flight, by progress token.
    progress: Arc<Mutex<HashMap<i64, Arc<Watch>>>>,
    /// The calls in flight, for the questions the server asks (elicitation).
    asking: Arc<super::ask::Asking>,
    /// The last lines the server wrote to stderr, for error messages.
    stderr: Arc<Mutex<VecDeque<String>>>,
    /// Its tools that are called as tasks (their `taskSupport` is `required`).
    task_only: Mutex<std::collections::BTreeSet<String>>,
    /// Its tools that refused a task (`taskSupport: "forbidden"`): long calls of them are plain.
    plain_only: Mutex<std::collections::BTreeSet<String>>,
    /// The calls it takes at once (`max_concurrency`), if limited.
    turns: Option<Arc<tokio::sync::Semaphore>>,
    /// The calls each tool takes at once, for the tools limited.
    tool_turns: HashMap<String, Arc<tokio::sync::Semaphore>>,
}

#[derive(Default)]
struct State {
    service: Option<Arc<Service>>,
    /// How many times it was started.
    starts: u32,
}

/// How many times a server is started in a run: once, and once more after a crash.
const MAX_STARTS: u32 = 2;

/// How many of a server's stderr lines are kept for error messages.
const STDERR_LINES: usize = 20;

impl Server {
    /// Whether tool `remote` is called as a task.
    fn needs_task(&self, remote: &str) -> bool {
        self.task_only
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(remote)
    }

    /// Whether tool `remote` refused a task (its `taskSupport` is `forbidden`).
    fn is_plain_only(&self, remote: &str) -> bool {
        self.plain_only
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(remote)
    }

    fn set_plain_only(&self, remote: &str) {
        self.plain_only
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(remote.to_owned());
    }

    fn set_needs_task(&self, remote: &str) {
        self.task_only
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(remote.to_owned());
    }

    /// The running connection, started (and initialised) if there is none.
    async fn connect(&self) -> Result<Arc<Service>, String> {
        let mut state = self.state.lock().await;
        if let Some(service) = &state.service {
            if !service.is_closed() {
                return Ok(service.clone());
            }
            state.service = None;
        }
        if state.starts >= MAX_STARTS {
            return Err(format!(
                "it stopped and was already restarted once{}",
                self.stderr_tail()
            ));
        }
        state.starts += 1;
        let service = Arc::new(self.start().await?);
        state.service = Some(service.clone());
        Ok(service)
    }

    async fn start(&self) -> Result<Service, String> {
        let handler = Handler {
            progress: self.progress.clone(),
            asking: self.asking.clone(),
        };
        match &self.config {
            ServerConfig::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                let mut process = tokio::process::Command::new(command);
                process.args(args).env_clear();
                for name in SERVER_BASE_ENV {
                    if let Some(value) = std::env::var_os(name) {
                        process.env(name, value);
                    }
                }
                process.envs(env);
                if let Some(cwd) = cwd {
                    process.current_dir(cwd);
                }
                let (transport, stderr) = TokioChildProcess::builder(process)
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(|error| format!("cannot start `{command}`: {error}"))?;
                // The server's stderr is kept (not mixed into ours) for error messages.
                if let Some(stderr) = stderr {
                    let tail = self.stderr.clone();
                    tokio::spawn(async move {
                        let mut lines = tokio::io::BufReader::new(stderr).lines();
                        while let Ok(Some(line)) = lines.next_line().await {
                            let mut tail = tail.lock().unwrap_or_else(|e| e.into_inner());
                            if tail.len() == STDERR_LINES {
                                tail.pop_front();
                            }
                            tail.push_back(line);
                        }
                    });
                }
                handler.serve(transport).await.map_err(|error| {
                    format!("it did not initialise: {error}{}", self.stderr_tail())
                })
            }
            ServerConfig::Http { url, headers } => {
                let mut custom = HashMap::new();
                for (name, value) in headers {
                    let name = http::HeaderName::try_from(name.as_str())
                        .map_err(|error| format!("header `{name}`: {error}"))?;
                    let value = http::HeaderValue::try_from(value.as_str())
                        .map_err(|error| format!("header `{name}`: {error}"))?;
                    custom.insert(name, value);
                }
                let config = rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(url.as_str())
                    .custom_headers(custom);
                let transport = StreamableHttpClientTransport::from_config(config);
                handler
                    .serve(transport)
                    .await
                    .map_err(|error| format!("{url} did not initialise: {error}"))
            }
        }
    }

    /// Turns a failed call into a tool error; a dead transport is dropped, so the next call
    /// starts the server again.
    async fn failed(&self, service: &Arc<Service>, error: ServiceError) -> ToolError {
        match error {
            ServiceError::McpError(error) => ToolError::new(
                codes::E_TOOL,
                format!("MCP server `{}`: {}", self.name, error.message),
            ),
            ServiceError::Timeout { .. } => ToolError::retryable(
                codes::E_TIMEOUT,
                format!("MCP server `{}`: {error}", self.name),
            ),
            other => {
                let mut state = self.state.lock().await;
                if state
                    .service
                    .as_ref()
                    .is_some_and(|current| Arc::ptr_eq(current, service))
                {
                    state.service = None;
                }
                ToolError::retryable(
                    codes::E_TRANSPORT,
                    format!("MCP server `{}`: {other}{}", self.name, self.stderr_tail()),
                )
            }
        }
    }

    async fn stop(&self) {
        let service = self.state.lock().await.service.take();
        if let Some(service) = service {
            // Closing the service ends the transport, and a stdio server's process with it.
            match Arc::try_unwrap(service) {
                Ok(service) => {
                    let _ = service.cancel().await;
                }
                Err(shared) => shared.cancellation_token().cancel(),
            }
        }
    }

    /// Reports the progress notifications that come with `token` to `progress` until the
    /// returned guard is dropped (also when the call's future is: nothing is left behind).
    fn watch_progress(&self, token: &ProgressToken, progress: Progress) -> Option<Watching> {
        let NumberOrString::Number(n) = token.0 else {
            return None;
        };
        let watch = Arc::new(Watch::new(progress));
        self.progress
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(n, watch.clone());
        Some(Watching {
            map: self.progress.clone(),
            token: n,
            watch,
        })
    }

    fn stderr_tail(&self) -> String {
        let tail = self.stderr.lock().unwrap_or_else(|e| e.into_inner());
        if tail.is_empty() {
            String::new()
        } else {
            let lines: Vec<&str> = tail.iter().map(String::as_str).collect();
            format!("; its stderr ends with:\n{}", lines.join("\n"))
        }
    }
}

/// A call whose future is dropped (its timeout passed, the run was cancelled) is cancelled on
/// the server too: a plain call as rmcp's own `call_tool` does, a task with `tasks/cancel`.
/// Settled (`id` taken) once its answer came.
struct Abandoned {
    peer: rmcp::service::Peer<RoleClient>,
    id: Option<InFlight>,
}

/// What a call in flight is on the server.
enum InFlight {
    Request(rmcp::model::RequestId),
    Task(String),
}

impl Drop for Abandoned {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let peer = self.peer.clone();
            runtime.spawn(async move {
                let _ = match id {
                    InFlight::Request(id) => {
                        let why = "the call was abandoned by plan-cli".to_owned();
                        peer.notify_cancelled(CancelledNotificationParam::new(Some(id), Some(why)))
                            .await
                    }
                    InFlight::Task(id) => {
                        let params = serde_json::json!({"taskId": id});
                        let cancel = rmcp::model::CustomRequest::new("tasks/cancel", Some(params));
                        peer.send_request(ClientRequest::CustomRequest(cancel))
                            .await
                            .map(|_| ())
                    }
                };
            });
        }
    }
}

/// How long a call's answer waits for the progress notifications sent before it.
const LATE_PROGRESS: std::time::Duration = std::time::Duration::from_millis(250);

/// A call's progress being watched; dropped, it stops (its entry leaves the map).
struct Watching {
    map: Arc<Mutex<HashMap<i64, Arc<Watch>>>>,
    token: i64,
    watch: Arc<Watch>,
}

impl Watching {
    /// Once the call's answer came: rmcp hands each notification to a task of its own, so the
    /// last ones (sent right before the answer) may still be on their way. A call whose
    /// progress names its total waits for the notification that reaches it, at most
    /// `LATE_PROGRESS` and never past the attempt's `deadline` (the answer must not turn into
    /// a timeout); one without a total lets the tasks already started run first.
    async fn settle(&self, deadline: Option<std::time::SystemTime>) {
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
        let mut wait = LATE_PROGRESS;
        if let Some(deadline) = deadline {
            let left = deadline
                .duration_since(std::time::SystemTime::now())
                .unwrap_or_default();
            wait = wait.min(left.saturating_sub(std::time::Duration::from_millis(50)));
        }
        let until = tokio::time::Instant::now() + wait;
        loop {
            let notified = self.watch.changed.notified();
            if self.watch.complete() {
                break;
            }
            if tokio::time::timeout_at(until, notified).await.is_err() {
                break;
            }
        }
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        self.map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.token);
    }
}

/// A call's progress reporter, with how far its server said it got.
struct Watch {
    reporter: Progress,
    /// The highest progress reported, and the total when the server gave one.
    seen: Mutex<(f64, Option<f64>)>,
    changed: tokio::sync::Notify,
}

impl Watch {
    fn new(reporter: Progress) -> Self {
        Watch {
            reporter,
            // Nothing seen and no total: nothing to wait for until a notification says more.
            seen: Mutex::new((0.0, None)),
            changed: tokio::sync::Notify::new(),
        }
    }

    /// Whether nothing more is worth waiting for: the progress reached its total, or the
    /// server gave none, or it is more than one step short of it (a server that announces a
    /// total it never reaches must not slow every call down).
    fn complete(&self) -> bool {
        let (seen, total) = *self.seen.lock().unwrap_or_else(|e| e.into_inner());
        total.is_none_or(|total| seen >= total || total - seen > 1.0)
    }

    fn report(&self, report: ProgressReport) {
        let (progress, total) = (report.progress, report.total);
        // Reported before it counts as seen: a call's answer that finds its progress complete
        // ends the call (`tool.succeeded`) at once, and the event of the notification that
        // completed it must already be out (it came after the answer now and then).
        self.reporter.report(report);
        {
            let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            seen.0 = seen.0.max(progress);
            if total.is_some() {
                seen.1 = total;
            }
        }
        self.changed.notify_waiters();
    }
}

/// What plan-cli does with what a server sends unasked: progress becomes events, and a
/// question (elicitation) is answered from a person's answers or makes the call wait for one.
struct Handler {
    progress: Arc<Mutex<HashMap<i64, Arc<Watch>>>>,
    asking: Arc<super::ask::Asking>,
}

impl ClientHandler for Handler {
    /// plan-cli answers form elicitations (through approvals); it has no model to sample
    /// with and no roots to offer, so it declares neither.
    fn get_info(&self) -> InitializeRequestParams {
        let mut capabilities = ClientCapabilities::default();
        capabilities.elicitation = Some(
            rmcp::model::ElicitationCapability::default()
                .with_form(rmcp::model::FormElicitationCapability::new()),
        );
        InitializeRequestParams::new(
            capabilities,
            Implementation::new("plan-cli", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        use rmcp::model::{ElicitRequestParams, ElicitResult, ElicitationAction};
        let reply = match request {
            ElicitRequestParams::FormElicitationParams {
                message,
                requested_schema,
                ..
            } => {
                let schema = serde_json::to_value(&requested_schema)
                    .unwrap_or_else(|_| serde_json::json!({"type": "object"}));
                self.asking.reply(&message, schema)
            }
            // plan-cli declares forms only: a page to open is nothing a plan can do.
            _ => return Ok(ElicitResult::new(ElicitationAction::Decline)),
        };
        Ok(match reply {
            super::ask::Reply::Accept(answer) => {
                ElicitResult::new(ElicitationAction::Accept).with_content(answer)
            }
            super::ask::Reply::Cancel => ElicitResult::new(ElicitationAction::Cancel),
        })
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let NumberOrString::Number(token) = params.progress_token.0 else {
            return;
        };
        let reporter = self
            .progress
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&token)
            .cloned();
        if let Some(reporter) = reporter {
            reporter.report(ProgressReport {
                progress: params.progress,
                total: params.total,
                message: params.message,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::TextContent;
    use serde_json::json;

    use super::*;

    fn text(t: &str) -> ContentBlock {
        ContentBlock::Text(TextContent::new(t))
    }

    #[test]
    fn only_the_servers_own_refusal_makes_a_call_a_task() {
        let refusal =
            "MCP error -32601: Tool research requires task augmentation (taskSupport: 'required')";
        let error = |blocks: Vec<ContentBlock>| CallToolResult::error(blocks);
        assert!(refused_without_task(
            &error(vec![text(refusal)]),
            "research"
        ));
        // Another tool's name, a page that quotes it, more than the refusal, or no error.
        assert!(!refused_without_task(&error(vec![text(refusal)]), "fetch"));
        assert!(!refused_without_task(
            &error(vec![text(&format!("HTTP 404, body: {refusal}"))]),
            "research"
        ));
        assert!(!refused_without_task(
            &error(vec![text(refusal), text("and more")]),
            "research"
        ));
        assert!(!refused_without_task(
            &CallToolResult::success(vec![text(refusal)]),
            "research"
        ));
    }

    #[test]
    fn a_tool_that_says_it_may_destroy_is_high_risk_whatever_else_it_says() {
        assert_eq!(risk_of(Some((Some(true), Some(true)))), Risk::High);
        assert_eq!(risk_of(Some((None, Some(true)))), Risk::High);
        assert_eq!(risk_of(Some((Some(true), Some(false)))), Risk::Low);
        assert_eq!(risk_of(Some((Some(true), None))), Risk::Low);
        assert_eq!(risk_of(Some((None, None))), Risk::Medium);
        assert_eq!(risk_of(None), Risk::Medium);
    }

    fn result(
        content: Vec<ContentBlock>,
        structured: Option<Value>,
        error: bool,
    ) -> CallToolResult {
        let mut result = CallToolResult::success(content);
        result.structured_content = structured;
        result.is_error = Some(error);
        result
    }

    #[test]
    fn results_read_like_seed_003() {
        assert_eq!(
            result_value(result(vec![text("ignored")], Some(json!({"a": 1})), false)),
            Ok(json!({"a": 1}))
        );
        assert_eq!(
            result_value(result(vec![text("{\"b\": [2]}")], None, false)),
            Ok(json!({"b": [2]}))
        );
        assert_eq!(
            result_value(result(vec![text("42")], None, false)),
            Ok(json!("42")),
            "only objects and arrays are parsed"
        );
        let both =
            result_value(result(vec![text("x"), text("y")], None, false)).unwrap_or_default();
        assert_eq!(both.as_array().map(Vec::len), Some(2));
        let error = result_value(result(vec![text("no such file")], None, true)).unwrap_err();
        assert_eq!(
            (error.code.as_str(), error.message.as_str()),
            ("E_TOOL", "no such file")
        );
        assert!(!error.retryable);
    }
}
