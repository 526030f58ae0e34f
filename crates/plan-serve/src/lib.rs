//! plan-cli as an MCP server (`plan-cli mcp serve`): an MCP client or an LLM agent hands
//! whole plans to it (mcp-cli's plan-as-a-tool), and has plans written from goals.
//!
//! Its tools ([`tool_names`]) are the commands: `plan_validate`, `plan_run`, `plan_status`,
//! `plan_resume`, `plan_approve`, and mcp-cli's `plan_create`, `plan_execute` and
//! `plan_create_and_execute`. Each answers with the same JSON the command prints with
//! `--json`, as the result's structured content and as its text. Everything goes through
//! `plan-run` (the same preparation, runs, approvals and model checks as the CLI's), under the
//! operator's [`Policy`] for MCP clients: a client is anyone who can write to the server's
//! stdin, and gets none of the operator's powers unless the policy gives them.
#![deny(missing_docs)]

mod http;
mod protocol;
mod session;
mod tasks;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use plan_graph::{Format, Severity, Source};
use plan_run::ledger::Store;
use plan_run::{Author, LifecycleError, Policy, PrepareError, Prepared};
use plan_types::RunReport;
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use protocol::{Peer, lock};

pub use http::HttpServer;
pub use plan_run::Env;
pub use session::{ServeError, serve_stdio};

/// What the server serves with, as its operator set it up.
pub struct Settings {
    /// Where plans find their tools (the operator's MCP configuration included).
    pub toolbox: Arc<plan_run::Toolbox>,
    /// The ledger runs and stored plans are kept in.
    pub ledger: plan_run::Ledger,
    /// What clients may do.
    pub policy: Policy,
    /// The model that writes plans for clients that offer no sampling, if the operator
    /// configured one.
    pub model: Option<plan_run::model::Endpoint>,
    /// The values of the environment variables a plan's `env:` names (and the policy lets a
    /// client read).
    pub env: Env,
    /// The folder a breakdown plan's state file names as the project's (`project_path`).
    pub project_path: Option<String>,
}

/// The names of the tools the server offers, in the order it lists them.
pub fn tool_names() -> Vec<&'static str> {
    Served::ALL.into_iter().map(Served::name).collect()
}

/// The most runs one server runs at once (each holds a thread while it runs): past it, a call
/// that would run a plan is refused, so no client can take every thread of the server.
pub(crate) const MAX_RUNS: usize = 64;

/// The most waiting runs one server follows at once (each a timer and a look at the ledger
/// every half second); past it a waiting run is followed once it is asked for again.
pub(crate) const MAX_FOLLOWED: usize = 1024;

/// How a served call went: a JSON answer (sent as structured content and as its text), or a
/// failure's text (sent as an error result, its text also as structured content).
type Answer = Result<Value, Refusal>;

struct PlanServer {
    settings: Settings,
    /// Runs this server is running or going on with now, each with what stops it. The
    /// ledger cannot tell: their owner is this process, which is alive, so a second
    /// `plan_resume` of one would run its steps again.
    going_on: Mutex<HashMap<String, CancellationToken>>,
    /// The tasks this process drives (started here, or waiting runs it follows), by id.
    tasks: Mutex<HashMap<String, Driven>>,
    /// Cancelled when the server ends: a waiting run is left waiting then (a later session
    /// follows it), where a task's own cancel stops it.
    closing: CancellationToken,
}

/// A task this process drives.
#[derive(Clone)]
struct Driven {
    /// What stops it.
    cancel: CancellationToken,
    /// Whether its driver has ended.
    ended: bool,
    /// Why it was refused before its run was recorded (then there is no run to read).
    refused: Option<Refusal>,
    /// When it was made (RFC 3339).
    created_at: String,
    /// The time to live the client asked for.
    ttl: Option<u64>,
}

/// A run this server goes on with, until dropped.
struct GoingOn<'a> {
    server: &'a PlanServer,
    run_id: String,
}

impl Drop for GoingOn<'_> {
    fn drop(&mut self) {
        lock(&self.server.going_on).remove(&self.run_id);
    }
}

/// Who a call came from, and the task it runs as, if it does.
#[derive(Clone)]
struct Call {
    peer: Arc<Peer>,
    task: Option<TaskRun>,
    /// The client's `progressToken`, if it asked for progress.
    progress: Option<Value>,
}

/// The task a call runs as: its run's id (the task's), and what stops it.
#[derive(Clone)]
struct TaskRun {
    run_id: String,
    ttl: Option<u64>,
    cancel: CancellationToken,
    tool: Served,
    /// Its progress notifications, if the client asked for them.
    progress: Option<Arc<session::Progress>>,
}

/// Why a call is refused or failed, as the client reads it.
type Refusal = String;

/// Each issue as a diagnostic drawn with the lines of the plan it points at.
fn rendered(source: &Source, issues: &[plan_graph::Issue]) -> Vec<String> {
    issues
        .iter()
        .map(|issue| format!("{:?}", miette::Report::new(source.diagnostic(issue))))
        .collect()
}

/// A plan that does not prepare: its diagnostics, then what is wrong. Why an MCP server of
/// the operator's configuration fails (its address, its error output) is the operator's: it
/// may hold their credentials, so the client hears only which server.
fn prepare_refusal(error: PrepareError) -> Refusal {
    match error {
        PrepareError::Tools(plan_run::ToolsError::Server(error)) => format!(
            "the MCP server `{}` of this server's configuration cannot be used now",
            error.server
        ),
        // What is wrong with the plan itself is the client's to hear (a name it redeclares,
        // a tool there is none of): nothing of the configuration is in it.
        PrepareError::Tools(
            error @ (plan_run::ToolsError::Declared { .. } | plan_run::ToolsError::Unknown(_)),
        ) => error.to_string(),
        PrepareError::Tools(_) => "this server's MCP configuration cannot be used now".to_owned(),
        PrepareError::Invalid(problems) => {
            let mut text = rendered(&problems.source, &problems.issues);
            text.push(PrepareError::Invalid(problems).to_string());
            text.join("\n")
        }
        error => error.to_string(),
    }
}

fn lifecycle_refusal(error: LifecycleError) -> Refusal {
    match error {
        LifecycleError::Prepare(error) => prepare_refusal(*error),
        LifecycleError::InvalidPlan(invalid) => {
            let mut text = rendered(&invalid.plan_source, &invalid.issues);
            text.push(LifecycleError::InvalidPlan(invalid).to_string());
            text.join("\n")
        }
        error => error.to_string(),
    }
}

fn ledger_refusal(error: plan_run::ledger::StoreError) -> Refusal {
    error.to_string()
}

/// mcp-cli's answer to `plan_create`: the plan's id, title and steps.
fn created(plan_id: &str, plan: &Value) -> Value {
    let steps: Vec<Value> = plan["steps"]
        .as_array()
        .map(|steps| {
            steps
                .iter()
                .enumerate()
                .map(|(k, s)| json!({"index": k + 1, "id": s["id"], "title": s["title"].as_str().unwrap_or(""), "tool": s["tool"].as_str().unwrap_or("")}))
                .collect()
        })
        .unwrap_or_default();
    json!({
        "success": true,
        "plan_id": plan_id,
        "title": plan["title"].as_str().unwrap_or("Untitled"),
        "steps": steps,
    })
}

/// The client's own model, through MCP sampling. Sampling has no response format, so the
/// plan schema goes in the system prompt.
struct Sampling {
    peer: Arc<Peer>,
    /// The server closing: a question to the client is given up.
    closing: tokio_util::sync::CancellationToken,
}

impl plan_run::model::Model for Sampling {
    fn name(&self) -> String {
        "the client's model".to_owned()
    }

    fn answer<'a>(
        &'a mut self,
        messages: &'a [Value],
        schema: &'a plan_run::model::Schema,
        max_tokens: u32,
    ) -> plan_run::model::Pending<'a, Result<plan_run::model::Answer, plan_run::model::LlmError>>
    {
        Box::pin(async move {
            let mut system = String::new();
            let mut turns: Vec<Value> = Vec::new();
            for message in messages {
                let text = message["content"].as_str().unwrap_or("").to_owned();
                let role = match message["role"].as_str() {
                    Some("system") => {
                        system.push_str(&text);
                        continue;
                    }
                    Some("assistant") => "assistant",
                    _ => "user",
                };
                turns.push(json!({"role": role, "content": {"type": "text", "text": text}}));
            }
            system.push_str(&format!(
                "\nThe answer is one JSON object that follows this JSON Schema:\n{}\n",
                schema.full
            ));
            let params =
                json!({"messages": turns, "systemPrompt": system, "maxTokens": max_tokens});
            let failed = |message: String| plan_run::model::LlmError::Endpoint {
                url: "MCP sampling".to_owned(),
                message,
            };
            let result = self
                .peer
                .request("sampling/createMessage", params, &self.closing)
                .await
                .map_err(|error| failed(format!("the client's model did not answer: {error}")))?;
            // One content block, or (later revisions) a list of them.
            let blocks = match &result["content"] {
                Value::Array(blocks) => blocks.clone(),
                block => vec![block.clone()],
            };
            let text: String = blocks
                .iter()
                .filter(|block| block["type"] == "text")
                .filter_map(|block| block["text"].as_str())
                .collect();
            if text.is_empty() {
                return Err(failed(
                    "the client's model answered without text".to_owned(),
                ));
            }
            Ok(plan_run::model::Answer::text(text))
        })
    }
}

/// The tools `mcp serve` offers, in the order it lists them: the one list its tool list, its
/// dispatch (an exhaustive `match`) and `mcp serve --help` (checked by a test) come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Served {
    Create,
    Execute,
    CreateAndExecute,
    Validate,
    Run,
    Status,
    Resume,
    Approve,
}

impl Served {
    const ALL: [Served; 8] = [
        Served::Create,
        Served::Execute,
        Served::CreateAndExecute,
        Served::Validate,
        Served::Run,
        Served::Status,
        Served::Resume,
        Served::Approve,
    ];

    fn name(self) -> &'static str {
        match self {
            Served::Create => "plan_create",
            Served::Execute => "plan_execute",
            Served::CreateAndExecute => "plan_create_and_execute",
            Served::Validate => "plan_validate",
            Served::Run => "plan_run",
            Served::Status => "plan_status",
            Served::Resume => "plan_resume",
            Served::Approve => "plan_approve",
        }
    }

    fn named(name: &str) -> Option<Served> {
        Served::ALL.into_iter().find(|served| served.name() == name)
    }

    fn description(self) -> &'static str {
        match self {
            Served::Create => {
                "Generate a multi-step plan from a goal without running it (written by your model through MCP sampling, else by the server's configured model, and checked before it is stored). Returns the plan id and its steps; run it with plan_execute."
            }
            Served::Execute => {
                "Run a stored plan by its id; returns every step's outcome and the plan's variables (results)."
            }
            Served::CreateAndExecute => {
                "Generate a plan from a goal and run it in one call; returns every step's outcome and the results."
            }
            Served::Validate => {
                "Check a plan without running it: every error with its line and column."
            }
            Served::Run => {
                "Run a plan and return its records, variables and task_status (as `plan-cli run --json`). High-risk steps wait unless listed in `approve`."
            }
            Served::Status => "A run's records and status, as `plan-cli status RUN --json`.",
            Served::Resume => {
                "Continue a stopped, interrupted or waiting run; completed steps are not run again."
            }
            Served::Approve => {
                "Approve (or with reject: true, refuse) a waiting run's high-risk steps; then plan_resume."
            }
        }
    }

    /// Its arguments' JSON Schema.
    fn input_schema(self) -> Value {
        let plan = json!({
            "description": "The plan: a JSON object, or its text (JSON or YAML)",
            "type": ["object", "string"]
        });
        let run_id = json!({"type": "string", "description": "The run's id (or a unique prefix)"});
        let goal = json!({"type": "string", "description": "What to accomplish, in natural language: be specific about the end result"});
        match self {
            Served::Create | Served::CreateAndExecute => {
                json!({"type": "object", "properties": {"goal": goal}, "required": ["goal"]})
            }
            Served::Execute => {
                json!({"type": "object", "properties": {"plan_id": {"type": "string", "description": "The id plan_create returned"}}, "required": ["plan_id"]})
            }
            Served::Validate => {
                json!({"type": "object", "properties": {"plan": plan, "variables": {"type": "object"}}, "required": ["plan"]})
            }
            Served::Run => json!({"type": "object", "properties": {
                "plan": plan,
                "variables": {"type": "object", "description": "Inputs; they win over the plan's variables"},
                "approve": {"type": "array", "items": {"type": "string"}, "description": "High-risk steps approved in advance"},
                "max_concurrency": {"type": "integer", "minimum": 1}
            }, "required": ["plan"]}),
            Served::Status => {
                json!({"type": "object", "properties": {"run_id": run_id}, "required": ["run_id"]})
            }
            Served::Resume => {
                json!({"type": "object", "properties": {"run_id": run_id, "retry_failed": {"type": "boolean"}}, "required": ["run_id"]})
            }
            Served::Approve => json!({"type": "object", "properties": {
                "run_id": run_id,
                "steps": {"type": "array", "items": {"type": "string"}},
                "all": {"type": "boolean", "description": "Everything the run waits for; questions (`ID@input#N`) stay waiting for answers"},
                "plan": {"type": "boolean", "description": "The plan itself (a run in approval mode)"},
                "reject": {"type": "boolean"},
                "reason": {"type": "string"},
                "input": {"type": "object", "description": "An answer for the one waiting call named in `steps`: its fields replace the call's arguments of the same names; for a question (`ID@input#N`) it is the answer itself, checked against the question's input_schema"}
            }, "required": ["run_id"]}),
        }
    }
}

impl Served {
    /// Whether it may run as an MCP task (SPEC §13): the calls that run a plan.
    fn runs_as_task(self) -> bool {
        matches!(
            self,
            Served::Run | Served::Execute | Served::CreateAndExecute
        )
    }

    /// Its hints for the client (MCP `ToolAnnotations`): reading ones are marked read-only;
    /// the ones that run tools may change anything those tools can.
    fn annotations(self) -> Value {
        let (read_only, destructive, idempotent, open_world) = match self {
            Served::Validate | Served::Status => (true, false, true, false),
            Served::Create => (false, false, false, true),
            Served::Approve => (false, false, true, false),
            Served::Run | Served::Execute | Served::CreateAndExecute | Served::Resume => {
                (false, true, false, true)
            }
        };
        json!({
            "title": self.name().replace('_', " "),
            "readOnlyHint": read_only,
            "destructiveHint": destructive,
            "idempotentHint": idempotent,
            "openWorldHint": open_world,
        })
    }

    /// The JSON Schema of its answer's structured content (as the command's `--json`). A
    /// failed call's structured content is `{"error": TEXT}` instead.
    fn output_schema(self) -> Value {
        let string = json!({"type": "string"});
        let report = json!({"type": "object", "properties": {
            "run_id": string,
            "plan_id": string,
            "task_status": string,
            "records": {"type": "array", "items": {"type": "object"}},
            "variables": {"type": "object"},
            "answer": {"type": "string", "description": "The run's answer: its `chat.respond` calls' texts"},
        }});
        match self {
            Served::Run | Served::Status | Served::Resume => report,
            Served::Validate => json!({"type": "object", "properties": {
                "valid": {"type": "boolean"},
                "errors": {"type": "array", "items": {"type": "object"}},
                "warnings": {"type": "array", "items": {"type": "object"}},
            }}),
            Served::Approve => json!({"type": "object", "properties": {
                "run_id": string,
                "decided": {"type": "array", "items": string},
                "still_waiting": {"type": "array", "items": string},
            }}),
            Served::Create => json!({"type": "object", "properties": {
                "success": {"type": "boolean"},
                "plan_id": string,
                "title": string,
                "steps": {"type": "array", "items": {"type": "object"}},
            }}),
            Served::Execute | Served::CreateAndExecute => json!({"type": "object", "properties": {
                "success": {"type": "boolean"},
                "plan_id": string,
                "run_id": string,
                "task_status": string,
                "steps_completed": {"type": "integer"},
                "steps_total": {"type": "integer"},
                "results": {"type": "object"},
                "steps": {"type": "array", "items": {"type": "object"}},
                "error": string,
            }}),
        }
    }

    /// As `tools/list` lists it.
    fn listed(self) -> Value {
        json!({
            "name": self.name(),
            "title": self.annotations()["title"],
            "description": self.description(),
            "inputSchema": self.input_schema(),
            "outputSchema": self.output_schema(),
            "annotations": self.annotations(),
            "execution": {"taskSupport": if self.runs_as_task() { "optional" } else { "forbidden" }},
        })
    }
}

/// A tool's answer as MCP's `CallToolResult`: as structured content and as text; a failure
/// as an error result, its text also as structured content (`{"error": TEXT}`).
fn call_result(answer: &Answer) -> Value {
    let text = text_of(answer);
    match answer {
        Ok(value) => json!({
            "content": [{"type": "text", "text": text}],
            "structuredContent": value,
            "isError": false,
        }),
        Err(refusal) => json!({
            "content": [{"type": "text", "text": text}],
            "structuredContent": {"error": refusal},
            "isError": true,
        }),
    }
}

/// An answer's text, for clients that read only text.
fn text_of(answer: &Answer) -> String {
    match answer {
        Ok(value) => plan_types::json_out::to_string(value).unwrap_or_default(),
        Err(refusal) => refusal.clone(),
    }
}

/// Runs `future` to its end: calls are answered on a blocking thread of the server's runtime.
fn block<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Handle::current().block_on(future)
}

impl PlanServer {
    /// The ledger, made if there is none yet.
    fn open(&self) -> Result<Store, Refusal> {
        self.settings.ledger.open().map_err(ledger_refusal)
    }

    /// The ledger, which must be there already.
    fn open_existing(&self) -> Result<Store, Refusal> {
        self.settings
            .ledger
            .open_existing()
            .map_err(|error| match error {
                plan_run::ledger::StoreError::Missing { .. } => {
                    format!("{error}: no run has been recorded there yet")
                }
                error => ledger_refusal(error),
            })
    }

    /// Marks run `run_id` as run or gone on with by this server, stopped by `cancel`, or
    /// refuses if it already is.
    fn going_on(&self, run_id: &str, cancel: CancellationToken) -> Result<GoingOn<'_>, Refusal> {
        let mut going_on = lock(&self.going_on);
        if going_on.contains_key(run_id) {
            return Err(format!(
                "run {run_id} is already going on in this server: ask plan_status for it"
            ));
        }
        if going_on.len() >= MAX_RUNS {
            return Err(format!(
                "this server runs at most {MAX_RUNS} plans at once: try again when one has ended"
            ));
        }
        going_on.insert(run_id.to_owned(), cancel);
        Ok(GoingOn {
            server: self,
            run_id: run_id.to_owned(),
        })
    }

    /// Where a client's run finds its tools, kept with it: the server's MCP configuration (a
    /// later `plan-cli resume` finds the same tools).
    fn sources(&self) -> plan_run::RunSources {
        plan_run::RunSources {
            mcp_config: self
                .settings
                .toolbox
                .config()
                .map(std::path::Path::to_path_buf),
            ..plan_run::RunSources::default()
        }
    }

    /// How a client's run goes: its state file is plan_run's (the run's own, or beside its
    /// breakdown), as are the policy's time limit and approvals.
    fn execution(&self, call: &Call, prepared: &Prepared) -> plan_run::Execution {
        let mut execution = plan_run::Execution::new();
        execution.project_path = self.settings.project_path.clone();
        let progress = match &call.task {
            Some(task) => task.progress.clone(),
            None => (call.progress.clone())
                .map(|token| Arc::new(session::Progress::new(call.peer.clone(), token, None))),
        };
        if let Some(progress) = progress {
            execution
                .events
                .push(progress.of_plan(&prepared.loaded.plan));
        }
        execution
    }

    /// Records a new run of a prepared plan and runs it: as `call`'s task if it is one (the
    /// run's id is the task's, and the run keeps which tool's task it is).
    fn start(
        &self,
        prepared: Prepared,
        mut start: plan_run::Start,
        max_concurrency: Option<u32>,
        call: &Call,
    ) -> Result<RunReport, Refusal> {
        let cancel = match &call.task {
            Some(task) => {
                start.run_id = task.run_id.clone();
                start.front_end = tasks::front_end(task.tool.name(), task.ttl);
                task.cancel.clone()
            }
            None => CancellationToken::new(),
        };
        let _going_on = self.going_on(&start.run_id, cancel.clone())?;
        let store = self.open()?;
        let mut execution = self.execution(call, &prepared);
        execution.cancel = cancel;
        execution.max_concurrency = max_concurrency;
        block(plan_run::start(store, prepared, start, execution))
            .map(|outcome| outcome.report)
            .map_err(lifecycle_refusal)
    }

    /// Goes on with a stored run (a finished one, unless failures are to be retried, only
    /// gives its report), held to the policy it was started under and to this server's as it
    /// is now.
    fn go_on(
        &self,
        run: &str,
        options: &plan_run::ResumeOptions,
        call: &Call,
    ) -> Result<RunReport, Refusal> {
        let cancel = call
            .task
            .as_ref()
            .map_or_else(CancellationToken::new, |task| task.cancel.clone());
        let _going_on = self.going_on(run, cancel.clone())?;
        let store = self.open_existing()?;
        let env = self.settings.env.clone();
        let env = |name: &str| env(name);
        let toolbox = &self.settings.toolbox;
        let going_on = plan_run::continue_run(store, run, options, toolbox, &env, |prepared| {
            let mut execution = self.execution(call, prepared);
            execution.cancel = cancel;
            execution
        });
        block(going_on)
            .map(|outcome| outcome.report)
            .map_err(lifecycle_refusal)
    }

    fn answer(&self, served: Served, args: &Map<String, Value>, call: &Call) -> Answer {
        let string = |key: &str| args.get(key).and_then(Value::as_str).map(str::to_owned);
        let flag = |key: &str| args.get(key).and_then(Value::as_bool).unwrap_or(false);
        let strings = |key: &str| -> Vec<String> {
            args.get(key)
                .and_then(Value::as_array)
                .map(|items| {
                    items
                        .iter()
                        .filter_map(|v| v.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default()
        };
        let run_id = || string("run_id").ok_or_else(|| "`run_id` is required".to_owned());
        match served {
            Served::Validate => {
                // Problems as data, as `validate --json` prints them: finding them is what the
                // call is for, not an error of the call.
                let validation = match self.prepare_plan(args, Severity::Error)? {
                    Ok(ready) => plan_run::Validation::judged(
                        &ready,
                        Author::McpClient,
                        Some(&self.settings.policy),
                    ),
                    Err(PrepareError::Invalid(problems)) => {
                        plan_run::Validation::invalid(&problems.source, &problems.issues)
                    }
                    Err(error) => return Err(prepare_refusal(error)),
                };
                Ok(serde_json::to_value(validation).map_err(|error| error.to_string())?)
            }
            Served::Run => {
                if !strings("approve").is_empty() {
                    self.check_approval()?;
                }
                let ready = self.prepare(args, Severity::Warning)?;
                let max_concurrency = args
                    .get("max_concurrency")
                    .and_then(Value::as_u64)
                    .and_then(|n| u32::try_from(n).ok());
                let start = plan_run::Start {
                    approve: strings("approve"),
                    mode: ready.program.mode(),
                    author: Author::McpClient,
                    working_dir: Some(self.settings.policy.workdir.display().to_string()),
                    // plan_run::start checks the plan again and keeps approvals on.
                    policy: Some(self.settings.policy.clone()),
                    sources: self.sources(),
                    ..plan_run::Start::new()
                };
                to_json(&self.start(ready, start, max_concurrency, call)?)
            }
            Served::Status => {
                let mut store = self.open_existing()?;
                let row = self.client_run(&mut store, &run_id()?)?;
                to_json(&plan_run::report(&store, &row).map_err(lifecycle_refusal)?)
            }
            Served::Resume => {
                // Only runs clients started can be resumed here, and a run's plan meets the
                // server's policy as a new one does, besides its own (plan_run::resume).
                let run_id = self
                    .client_run(&mut self.open_existing()?, &run_id()?)?
                    .run_id;
                let options = plan_run::ResumeOptions {
                    retry_failed: flag("retry_failed"),
                    also: Some(self.settings.policy.clone()),
                    ..plan_run::ResumeOptions::default()
                };
                to_json(&self.go_on(&run_id, &options, call)?)
            }
            Served::Approve => {
                let steps = strings("steps");
                // Only runs clients started: the operator's waiting steps are the operator's.
                let mut store = self.open_existing()?;
                let row = self.client_run(&mut store, &run_id()?)?;
                // A run started under a policy that lets no client approve stays so, whichever
                // server is asked (hostile review: a looser second server approved).
                let run_allows = plan_run::policy_of(&row).is_none_or(|run| run.self_approval);
                let run_id = row.run_id;
                let gated = |row: &plan_run::ledger::RunRow| {
                    block(plan_run::gated_steps_in(row, &self.settings.toolbox))
                };
                let decided = if flag("reject") {
                    let reason = string("reason");
                    plan_run::reject(&mut store, &run_id, &steps, reason.as_deref(), gated)
                } else {
                    self.check_approval()?;
                    if !run_allows {
                        return Err(format!(
                            "run {run_id} was started where clients may not approve its high-risk steps: its operator approves with `plan-cli approve {run_id} STEP`; clients may reject"
                        ));
                    }
                    let decisions = plan_run::Decisions {
                        steps,
                        all: flag("all"),
                        plan: flag("plan"),
                        input: args.get("input").cloned(),
                    };
                    plan_run::approve(&mut store, &run_id, &decisions, gated)
                };
                to_json(&decided.map_err(lifecycle_refusal)?)
            }
            Served::Create => {
                let goal = string("goal").ok_or_else(|| "`goal` is required".to_owned())?;
                let plan_run::NewPlan { plan_id, plan } = self.create(&goal, &call.peer)?;
                Ok(created(&plan_id, &plan))
            }
            Served::Execute => {
                let plan_id =
                    string("plan_id").ok_or_else(|| "`plan_id` is required".to_owned())?;
                let stored = plan_run::stored_source(&self.open_existing()?, &plan_id)
                    .map_err(lifecycle_refusal)?
                    .filter(|stored| stored.author == Author::McpClient)
                    .ok_or_else(|| {
                        format!("no plan `{plan_id}` among the plans this server's clients stored")
                    })?;
                self.execute(
                    &plan_id,
                    Value::String(stored.source.text().to_owned()),
                    call,
                )
            }
            Served::CreateAndExecute => {
                let goal = string("goal").ok_or_else(|| "`goal` is required".to_owned())?;
                let plan_run::NewPlan { plan_id, plan } = self.create(&goal, &call.peer)?;
                self.execute(&plan_id, plan, call)
            }
        }
    }

    /// A plan from a goal: written by the client's model when it offers sampling, else by the
    /// endpoint the operator configured (PLAN_LLM_URL, PLAN_LLM_MODEL); checked as `plan_run`
    /// would check it, this server's policy included; stored.
    fn create(&self, goal: &str, peer: &Arc<Peer>) -> Result<plan_run::NewPlan, Refusal> {
        let mut model: Box<dyn plan_run::model::Model> = if peer.offers("sampling") {
            Box::new(Sampling {
                peer: peer.clone(),
                closing: self.closing.clone(),
            })
        } else {
            match self.settings.model.clone() {
                Some(endpoint) => {
                    Box::new(plan_run::model::Http::new(endpoint).map_err(|e| e.to_string())?)
                }
                None => {
                    return Err(
                        "no model to write the plan: this client offers no sampling, and the server's operator configured no model".to_owned(),
                    );
                }
            }
        };
        // The same judgement as a model's plan anywhere: plan-cli's validation, then this
        // server's policy; nothing in it tells the model how to widen the policy. Stored never
        // over a plan another author stored (it takes the next free id); over a plan clients
        // stored, yes.
        let goal = plan_run::Goal {
            force: true,
            ..plan_run::Goal::new(goal, Author::McpClient)
        };
        block(plan_run::plan_from_goal(
            &mut *model,
            &goal,
            &self.settings.toolbox,
            &self.settings.policy,
            &self.settings.ledger,
        ))
        .map_err(lifecycle_refusal)
    }

    /// Runs a plan as `plan_run` does and answers as mcp-cli's `plan_execute` does.
    fn execute(&self, plan_id: &str, plan: Value, call: &Call) -> Answer {
        let mut args = Map::new();
        args.insert("plan".into(), plan);
        let ready = self.prepare(&args, Severity::Warning)?;
        let start = plan_run::Start {
            mode: ready.program.mode(),
            author: Author::McpClient,
            working_dir: Some(self.settings.policy.workdir.display().to_string()),
            policy: Some(self.settings.policy.clone()),
            sources: self.sources(),
            ..plan_run::Start::new()
        };
        let plan = ready.loaded.plan.clone();
        let report = self.start(ready, start, None, call)?;
        Ok(executed(plan_id, &plan, &report))
    }

    /// The plan of a call (an object, or JSON or YAML text), prepared and within the policy.
    fn prepare(&self, args: &Map<String, Value>, arguments: Severity) -> Result<Prepared, Refusal> {
        let ready = self
            .prepare_plan(args, arguments)?
            .map_err(prepare_refusal)?;
        self.check_policy(&ready)?;
        Ok(ready)
    }

    /// Whether a prepared plan is within the policy for MCP clients.
    fn check_policy(&self, ready: &Prepared) -> Result<(), Refusal> {
        self.settings
            .policy
            .check(Author::McpClient, &ready.loaded.plan, &ready.program)
            .map_err(|error| error.to_string())
    }

    /// The plan of a call prepared: refused if its arguments are not a plan or it is too large,
    /// else what preparing it gave.
    fn prepare_plan(
        &self,
        args: &Map<String, Value>,
        arguments: Severity,
    ) -> Result<Result<Prepared, PrepareError>, Refusal> {
        let (text, format) = match args.get("plan") {
            Some(Value::String(text)) => (text.clone(), plan_run::format_of_text(text)),
            Some(plan @ Value::Object(_)) => (
                serde_json::to_string_pretty(plan).unwrap_or_default(),
                Format::Json,
            ),
            _ => return Err("`plan` must be a plan object or its text".to_owned()),
        };
        let name = match format {
            Format::Json => "plan.json",
            Format::Yaml => "plan.yaml",
        };
        let inputs = match args.get("variables") {
            Some(Value::Object(variables)) => variables.clone(),
            None | Some(Value::Null) => Map::new(),
            Some(_) => return Err("`variables` must be an object".to_owned()),
        };
        // The variables count with the plan: a small plan mapping over a large list given
        // beside it is as large as the list.
        let given = if inputs.is_empty() {
            0
        } else {
            serde_json::to_string(&inputs).map_or(0, |text| text.len())
        };
        // Refused before it is read: a problem of the plan, at its root.
        if let Err(refused) = self
            .settings
            .policy
            .check_size(Author::McpClient, text.len() + given)
        {
            // Nowhere in the text: placing it would read the text.
            let mut issues = refused.issues();
            for issue in &mut issues {
                issue.location = plan_graph::Location::Nowhere;
            }
            let source = Source::new(name, text);
            return Ok(Err(PrepareError::Invalid(Box::new(plan_run::Problems {
                source,
                issues,
            }))));
        }
        let env = self.settings.env.clone();
        let plan = plan_run::PlanText {
            source: Source::new(name, text),
            format,
            fallback_id: "mcp-plan".to_owned(),
        };
        Ok(block(plan_run::prepare(
            plan,
            inputs.into(),
            &self.settings.toolbox,
            plan_run::Strictness { arguments },
            &|name| env(name),
        )))
    }

    /// The run `id` names among the runs this server's clients started: the operator's own
    /// runs are neither shown nor decided nor resumed.
    fn client_run(
        &self,
        store: &mut plan_run::ledger::Store,
        id: &str,
    ) -> Result<plan_run::ledger::RunRow, Refusal> {
        plan_run::run_by(store, id, Author::McpClient).map_err(lifecycle_refusal)
    }

    /// Refuses approvals from a client unless the operator allows them.
    fn check_approval(&self) -> Result<(), Refusal> {
        if self.settings.policy.self_approval {
            return Ok(());
        }
        Err("this server does not let clients approve high-risk steps: its operator approves with `plan-cli approve RUN STEP` (or starts it with `--allow-client-approval`); clients may reject".to_owned())
    }
}

/// mcp-cli's answer to `plan_execute`: how each of the plan's steps went, and the results.
fn executed(plan_id: &str, plan: &plan_graph::Plan, report: &RunReport) -> Value {
    let record = |id: &str| report.records.iter().find(|r| r.step_id == id);
    let completed = (plan.steps.iter())
        .filter(|step| record(&step.id.0).is_some_and(|r| r.ok))
        .count();
    let error = report.records.iter().find_map(|r| {
        r.error
            .as_ref()
            .map(|e| format!("step `{}`: {}", r.step_id, e.message))
    });
    let steps: Vec<Value> = (plan.steps.iter().enumerate())
        .map(|(k, step)| {
            let r = record(&step.id.0);
            json!({
                "index": k + 1,
                "id": step.id.0,
                "title": step.title.clone().unwrap_or_default(),
                "tool": step.kind(),
                "success": r.is_some_and(|r| r.ok),
                "error": r.and_then(|r| r.error.as_ref()).map(|e| e.message.clone()),
            })
        })
        .collect();
    let mut answer = json!({
        "success": report.task_status == plan_types::TaskStatus::Completed,
        "plan_id": plan_id,
        "title": plan.title.clone().unwrap_or_else(|| "Untitled".to_owned()),
        "run_id": report.run_id,
        "task_status": report.task_status,
        "steps_completed": completed,
        "steps_total": plan.steps.len(),
        "results": report.variables,
        "steps": steps,
    });
    if let Some(error) = error {
        answer["error"] = Value::String(error);
    }
    answer
}

fn to_json(value: &impl serde::Serialize) -> Answer {
    serde_json::to_value(value).map_err(|error| error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_tool_is_found_by_its_name_and_asks_only_for_what_it_describes() {
        for served in Served::ALL {
            assert_eq!(Served::named(served.name()), Some(served));
            let schema = served.input_schema();
            assert_eq!(schema["type"], "object", "{}", served.name());
            let properties = schema["properties"].as_object().expect("properties");
            for required in schema["required"].as_array().into_iter().flatten() {
                let required = required.as_str().unwrap_or_default();
                assert!(
                    properties.contains_key(required),
                    "{} requires `{required}`, which it does not describe",
                    served.name()
                );
            }
            assert!(!served.description().is_empty());
        }
        let mut names = tool_names();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Served::ALL.len(), "names are unique");
    }
}
