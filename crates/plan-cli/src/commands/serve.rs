//! `plan-cli mcp serve`: plan-cli as an MCP server on stdio, so that an MCP client or an LLM
//! agent can hand whole plans to it (mcp-cli's plan-as-a-tool, without an LLM inside).
//!
//! Its tools are the commands: `plan_validate`, `plan_run`, `plan_status`, `plan_resume`,
//! `plan_approve`. Each answers with the same JSON the command prints with `--json`, as the
//! result's structured content and as its text. stdout is the protocol, so nothing else is
//! printed there; diagnostics go into the answers.

use plan_graph::Severity;
use std::sync::Arc;

use plan_graph::{Format, Plan, Source};
use plan_tools::mcp::server::{Answer, Client, ServedTool, ServerInfo, Service, serve_stdio};
use serde_json::{Map, Value, json};

use plan_run::{Author, Policy};

use super::approvals::{approve_calls, reject_calls};
use super::execute::{Frontend, continue_run, start_run};
use super::ledger::stored_report;
use crate::cli::ServeArgs;
use crate::exit::Failure;
use crate::ledger::Ledger;
use crate::plan_file::prepare_source;
use crate::toolbox::Toolbox;

pub(crate) fn serve(
    policy: Policy,
    toolbox: Arc<Toolbox>,
    ledger: &Ledger,
) -> Result<i32, Failure> {
    let server = Arc::new(PlanServer {
        toolbox: toolbox.clone(),
        ledger: ledger.clone(),
        policy,
    });
    let info = ServerInfo {
        name: "plan-cli",
        version: env!("CARGO_PKG_VERSION"),
        instructions: "Run plans (graphs of tool calls) with plan-cli: validate, run, then status, approve and resume.",
    };
    toolbox
        .block_on(serve_stdio(info, server))
        .map_err(|error| Failure::internal(error.to_string()))?;
    Ok(0)
}

struct PlanServer {
    toolbox: Arc<Toolbox>,
    ledger: Ledger,
    policy: Policy,
}

/// The policy of `mcp serve` (docs/security.md): the restricted default a client gets, widened
/// by the operator's `--policy` file and flags (the flags add to its lists and win over its
/// values). A client is anyone who can write to the server's stdin: it gets none of the
/// operator's powers unless given them here.
pub(crate) fn policy_of(args: &ServeArgs) -> Result<Policy, Failure> {
    let mut policy = crate::policy::of(&args.policy)?;
    policy.self_approval |= args.allow_client_approval;
    if let Some(bytes) = args.max_plan_bytes {
        policy.max_plan_bytes = bytes;
    }
    if let Some(steps) = args.max_steps {
        policy.max_steps = steps;
    }
    if let Some(time) = args.max_run_time {
        policy.max_run_time = Some(time);
    }
    if let Some(dir) = &args.workdir {
        policy.workdir = dir.clone();
    }
    Ok(policy)
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
    client: Arc<dyn Client>,
}

impl plan_llm::Model for Sampling {
    fn answer<'a>(
        &'a mut self,
        messages: &'a [Value],
        schema: &'a Value,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<String, plan_llm::LlmError>> + Send + 'a>,
    > {
        Box::pin(async move {
            let mut system = String::new();
            let mut turns: Vec<(bool, String)> = Vec::new();
            for message in messages {
                let text = message["content"].as_str().unwrap_or("").to_owned();
                match message["role"].as_str() {
                    Some("system") => system.push_str(&text),
                    Some("assistant") => turns.push((true, text)),
                    _ => turns.push((false, text)),
                }
            }
            system.push_str(&format!(
                "\nThe answer is one JSON object that follows this JSON Schema:\n{schema}\n"
            ));
            self.client
                .sample(&system, &turns, 8192)
                .await
                .map_err(|message| plan_llm::LlmError::Endpoint {
                    url: "MCP sampling".to_owned(),
                    message,
                })
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
            Served::Create => {
                json!({"type": "object", "properties": {"goal": goal}, "required": ["goal"]})
            }
            Served::Execute => {
                json!({"type": "object", "properties": {"plan_id": {"type": "string", "description": "The id plan_create returned"}}, "required": ["plan_id"]})
            }
            Served::CreateAndExecute => {
                json!({"type": "object", "properties": {"goal": goal}, "required": ["goal"]})
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
                "all": {"type": "boolean", "description": "Everything the run waits for"},
                "plan": {"type": "boolean", "description": "The plan itself (a run in approval mode)"},
                "reject": {"type": "boolean"},
                "reason": {"type": "string"}
            }, "required": ["run_id"]}),
        }
    }
}

fn tools() -> Vec<ServedTool> {
    Served::ALL
        .into_iter()
        .map(|served| ServedTool {
            name: served.name(),
            description: served.description(),
            input_schema: served.input_schema(),
        })
        .collect()
}

impl Service for PlanServer {
    fn tools(&self) -> Vec<ServedTool> {
        tools()
    }

    fn call(&self, name: &str, args: &Map<String, Value>, client: Arc<dyn Client>) -> Answer {
        self.answer(name, args, client).map_err(|failure| {
            let mut text = failure.diagnostics.join("\n");
            if let Some(message) = failure.message {
                if !text.is_empty() {
                    text.push('\n');
                }
                text.push_str(&message);
            }
            text
        })
    }

    fn text(&self, value: &Value) -> String {
        crate::json_out::to_string(value).unwrap_or_default()
    }
}

impl PlanServer {
    /// Where a client's run finds its tools, kept with it: the server's MCP configuration (a
    /// later `plan-cli resume` finds the same tools).
    fn sources(&self) -> plan_run::RunSources {
        plan_run::RunSources {
            mcp_config: self.toolbox.config().map(std::path::Path::to_path_buf),
            ..plan_run::RunSources::default()
        }
    }

    fn answer(
        &self,
        tool: &str,
        args: &Map<String, Value>,
        client: Arc<dyn Client>,
    ) -> Result<Value, Failure> {
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
        let run_id = || string("run_id").ok_or_else(|| Failure::input("`run_id` is required"));
        let Some(served) = Served::named(tool) else {
            return Err(Failure::input(format!("no tool `{tool}`")));
        };
        match served {
            Served::Validate => {
                let ready = self.prepare(args, Severity::Error)?;
                Ok(json!({
                    "valid": true,
                    "plan_id": ready.program.plan_id(),
                    "steps": ready.program.len(),
                    "needs_approval": ready.program.gated_steps(),
                    "warnings": crate::plan_file::render(&ready.loaded.source, &ready.loaded.warnings),
                }))
            }
            Served::Run => {
                if !strings("approve").is_empty() {
                    self.check_approval()?;
                }
                let ready = self.prepare(args, Severity::Warning)?;
                let frontend = Frontend {
                    json: true,
                    time_limit: self.policy.max_run_time,
                    max_concurrency: args
                        .get("max_concurrency")
                        .and_then(Value::as_u64)
                        .and_then(|n| u32::try_from(n).ok()),
                    ..Frontend::default()
                };
                let start = plan_run::Start {
                    approve: strings("approve"),
                    mode: ready.program.mode(),
                    author: Author::McpClient,
                    working_dir: Some(self.policy.workdir.display().to_string()),
                    // plan_run::start checks the plan again and keeps approvals on.
                    policy: Some(self.policy.clone()),
                    sources: self.sources(),
                    ..plan_run::Start::new()
                };
                let (report, _) = start_run(ready, start, &frontend, &self.toolbox, &self.ledger)?;
                to_json(&report)
            }
            Served::Status => {
                let mut store = self.ledger.open_existing()?;
                let row = self.client_run(&mut store, &run_id()?)?;
                to_json(&stored_report(&store, &row)?)
            }
            Served::Resume => {
                // A run is resumed with its stored plan: it meets the same policy as a new one
                // (and only runs clients started can be resumed here).
                let run_id = {
                    let mut store = self.ledger.open_existing()?;
                    let row = self.client_run(&mut store, &run_id()?)?;
                    let plan = plan_run::plan_of(&row).map_err(Failure::lifecycle)?;
                    self.check_plan(&plan)?;
                    row.run_id
                };
                let options = plan_run::ResumeOptions {
                    retry_failed: flag("retry_failed"),
                    ..plan_run::ResumeOptions::default()
                };
                let frontend = Frontend {
                    json: true,
                    time_limit: self.policy.max_run_time,
                    // A client's plan cannot turn approvals off: the operator's gate holds.
                    approvals: Some(true),
                    ..Frontend::default()
                };
                let (report, _) = continue_run(
                    &run_id,
                    &options,
                    None,
                    &frontend,
                    &self.toolbox,
                    &self.ledger,
                )?;
                to_json(&report)
            }
            Served::Approve => {
                let steps = strings("steps");
                // Only runs clients started: the operator's waiting steps are the operator's.
                let run_id = {
                    let mut store = self.ledger.open_existing()?;
                    let id = self.client_run(&mut store, &run_id()?)?.run_id;
                    move || Ok::<String, Failure>(id.clone())
                };
                let decided = if flag("reject") {
                    let reason = string("reason");
                    reject_calls(
                        &run_id()?,
                        &steps,
                        reason.as_deref(),
                        &self.toolbox,
                        &self.ledger,
                    )?
                } else {
                    self.check_approval()?;
                    let decisions = plan_run::Decisions {
                        steps,
                        all: flag("all"),
                        plan: flag("plan"),
                    };
                    approve_calls(&run_id()?, &decisions, &self.toolbox, &self.ledger)?
                };
                to_json(&decided)
            }
            Served::Create => {
                let goal = string("goal").ok_or_else(|| Failure::input("`goal` is required"))?;
                let (plan_id, plan) = self.create(&goal, client)?;
                Ok(created(&plan_id, &plan))
            }
            Served::Execute => {
                let plan_id =
                    string("plan_id").ok_or_else(|| Failure::input("`plan_id` is required"))?;
                let stored = super::plans::find(&plan_id, &self.ledger)?;
                if Author::from_name(&stored.author) != Author::McpClient {
                    return Err(Failure::input(format!(
                        "no plan `{plan_id}` among the plans this server's clients stored"
                    )));
                }
                self.execute(&plan_id, Value::String(stored.source))
            }
            Served::CreateAndExecute => {
                let goal = string("goal").ok_or_else(|| Failure::input("`goal` is required"))?;
                let (plan_id, plan) = self.create(&goal, client)?;
                self.execute(&plan_id, plan)
            }
        }
    }

    /// A plan from a goal: written by the client's model when it offers sampling, else by the
    /// endpoint the operator configured (PLAN_LLM_URL, PLAN_LLM_MODEL); checked as `plan_run`
    /// would check it, this server's policy included; stored.
    fn create(&self, goal: &str, client: Arc<dyn Client>) -> Result<(String, Value), Failure> {
        let (mut model, by): (Box<dyn plan_llm::Model>, String) = if client.offers_sampling() {
            (
                Box::new(Sampling { client }),
                "the client's model".to_owned(),
            )
        } else {
            match super::plans::endpoint(None)? {
                Some(endpoint) => {
                    let by = endpoint.model.clone();
                    let http =
                        plan_llm::Http::new(endpoint).map_err(|e| Failure::input(e.to_string()))?;
                    (Box::new(http), by)
                }
                None => {
                    return Err(Failure::input(
                        "no model to write the plan: this client offers no sampling, and the server's operator set no PLAN_LLM_URL",
                    ));
                }
            }
        };
        // The same judgement as a model's plan anywhere: plan-cli's validation, then this
        // server's policy; nothing in it tells the model how to widen the policy.
        let generated = self
            .toolbox
            .block_on(plan_run::generate_checked(
                &mut *model,
                goal,
                None,
                2,
                &self.toolbox,
                &self.policy,
            ))
            .map_err(|error| Failure::input(error.to_string()))?;
        // Never over a plan another author stored (it takes the next free id); over a plan
        // clients stored, yes.
        plan_run::store_generated(
            &mut self.ledger.open()?,
            generated,
            &by,
            true,
            Author::McpClient,
        )
        .map_err(Failure::lifecycle)
    }

    /// Runs a plan as `plan_run` does and answers as mcp-cli's `plan_execute` does.
    fn execute(&self, plan_id: &str, plan: Value) -> Result<Value, Failure> {
        let mut args = Map::new();
        args.insert("plan".into(), plan);
        let ready = self.prepare(&args, Severity::Warning)?;
        let title = ready.loaded.plan.title.clone();
        let steps: Vec<(String, String, String)> = ready
            .loaded
            .plan
            .steps
            .iter()
            .map(|s| {
                (
                    s.id.0.clone(),
                    s.title.clone().unwrap_or_default(),
                    s.kind().to_owned(),
                )
            })
            .collect();
        let frontend = Frontend {
            json: true,
            time_limit: self.policy.max_run_time,
            ..Frontend::default()
        };
        let start = plan_run::Start {
            mode: ready.program.mode(),
            author: Author::McpClient,
            working_dir: Some(self.policy.workdir.display().to_string()),
            policy: Some(self.policy.clone()),
            sources: self.sources(),
            ..plan_run::Start::new()
        };
        let (report, _) = start_run(ready, start, &frontend, &self.toolbox, &self.ledger)?;
        let record = |id: &str| report.records.iter().find(|r| r.step_id == id);
        let completed = steps
            .iter()
            .filter(|(id, _, _)| record(id).is_some_and(|r| r.ok))
            .count();
        let error = report.records.iter().find_map(|r| {
            r.error
                .as_ref()
                .map(|e| format!("step `{}`: {}", r.step_id, e.message))
        });
        let mut answer = json!({
            "success": report.task_status == plan_types::TaskStatus::Completed,
            "plan_id": plan_id,
            "title": title.unwrap_or_else(|| "Untitled".to_owned()),
            "run_id": report.run_id,
            "task_status": report.task_status,
            "steps_completed": completed,
            "steps_total": steps.len(),
            "results": report.variables,
            "steps": steps.iter().enumerate().map(|(k, (id, title, tool))| {
                let r = record(id);
                json!({
                    "index": k + 1,
                    "id": id,
                    "title": title,
                    "tool": tool,
                    "success": r.is_some_and(|r| r.ok),
                    "error": r.and_then(|r| r.error.as_ref()).map(|e| e.message.clone()),
                })
            }).collect::<Vec<_>>(),
        });
        if let Some(error) = error {
            answer["error"] = Value::String(error);
        }
        Ok(answer)
    }

    /// The plan of a call: an object, or JSON or YAML text.
    fn prepare(
        &self,
        args: &Map<String, Value>,
        arguments: Severity,
    ) -> Result<crate::plan_file::Ready, Failure> {
        let (text, format) = match args.get("plan") {
            Some(Value::String(text)) => {
                let format = if serde_json::from_str::<Value>(text).is_ok() {
                    Format::Json
                } else {
                    Format::Yaml
                };
                (text.clone(), format)
            }
            Some(plan @ Value::Object(_)) => (
                serde_json::to_string_pretty(plan).unwrap_or_default(),
                Format::Json,
            ),
            _ => return Err(Failure::input("`plan` must be a plan object or its text")),
        };
        self.policy
            .check_size(Author::McpClient, text.len())
            .map_err(|error| Failure::input(error.to_string()))?;
        let name = match format {
            Format::Json => "plan.json",
            Format::Yaml => "plan.yaml",
        };
        let inputs = match args.get("variables") {
            Some(Value::Object(variables)) => variables.clone(),
            None | Some(Value::Null) => Map::new(),
            Some(_) => return Err(Failure::input("`variables` must be an object")),
        };
        let ready = prepare_source(
            Source::new(name, text),
            format,
            "mcp-plan".to_owned(),
            inputs.into(),
            &self.toolbox,
            arguments,
        )?;
        self.policy
            .check(Author::McpClient, &ready.loaded.plan, &ready.program)
            .map_err(|error| Failure::input(error.to_string()))?;
        Ok(ready)
    }

    /// Refuses a stored plan (a run's, to resume it) that needs more than the operator allows:
    /// compiled against the tools it names, and checked by every call it can make.
    fn check_plan(&self, plan: &Plan) -> Result<(), Failure> {
        let tools = self.toolbox.plan_tools(plan.tool_names().iter().copied())?;
        let program =
            plan_engine::Program::compile(plan, "mcp-plan", &tools.registry).map_err(|_| {
                Failure::input("the run's plan no longer compiles with this server's tools")
            })?;
        self.policy
            .check(Author::McpClient, plan, &program)
            .map_err(|error| Failure::input(error.to_string()))
    }

    /// The run `id` names among the runs this server's clients started: the operator's own
    /// runs are neither shown nor decided nor resumed.
    fn client_run(
        &self,
        store: &mut plan_store::Store,
        id: &str,
    ) -> Result<plan_store::RunRow, Failure> {
        plan_run::run_by(store, id, Author::McpClient).map_err(Failure::lifecycle)
    }

    /// Refuses approvals from a client unless the operator allows them.
    fn check_approval(&self) -> Result<(), Failure> {
        if self.policy.self_approval {
            return Ok(());
        }
        Err(Failure::input(
            "this server does not let clients approve high-risk steps: its operator approves with `plan-cli approve RUN STEP` (or starts it with `--allow-client-approval`); clients may reject",
        ))
    }
}

fn to_json(value: &impl serde::Serialize) -> Result<Value, Failure> {
    serde_json::to_value(value).map_err(|error| Failure::internal(error.to_string()))
}

#[cfg(test)]
mod tests {
    use super::Served;

    /// `mcp serve --help` names every tool the server offers.
    #[test]
    fn the_help_names_every_served_tool() {
        use clap::CommandFactory;
        let mut cli = crate::cli::Cli::command();
        let serve = cli
            .find_subcommand_mut("mcp")
            .and_then(|mcp| mcp.find_subcommand_mut("serve"))
            .map(|serve| serve.render_long_help().to_string())
            .unwrap_or_default();
        for served in Served::ALL {
            assert!(
                serve.contains(served.name()),
                "{} is not in:\n{serve}",
                served.name()
            );
            assert_eq!(Served::named(served.name()), Some(served));
        }
    }
}
