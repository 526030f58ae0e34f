//! Composite blocks (seed 002): a graph of nodes run one at a time from an entry point, each
//! followed by its transition, until a node has none; loops are bounded by `max_steps`.
//!
//! The loop is seed 002's reference algorithm: count the step (fail with `max_steps_exceeded`
//! past the limit), run the node (a failed node fails the block), stop with the node's result if
//! it has no transition, else take the first branch whose condition holds (`default` always
//! does) or fail with `no_transition`. Conditions are CEL over `result`, `vars`, `input` and
//! `attempt` (how many times the node has run), compiled once; one that cannot be evaluated fails
//! the block with `condition_resolution_error`. Each node run is a record and events of its own,
//! named by its path: `review/check#3` is the third run of node `check` of step `review`.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use plan_graph::{Block, RetryPolicy, Risk, Transition};
use plan_vars::{Scope, ValueTemplate, Variables};
use serde_json::{Map, Value, json};

use crate::event::{Event, EventKind};
use crate::journal::Attempt;
use crate::program::{CelJson, cel_context, check_schema, compile_schema};
use crate::report::{Record, StepError};
use crate::run::{CallContext, ToolCall, call_tool};
use crate::tool::{Registry, Tool, codes};

/// A block bound to tools, its conditions compiled.
pub(crate) struct CompiledBlock {
    names: Vec<String>,
    nodes: Vec<CompiledNode>,
    entry: usize,
    transitions: Vec<Option<CompiledTransition>>,
    max_steps: u32,
    /// The highest risk of its nodes' tools: a block with a high-risk node waits for an
    /// approval as a whole, before its first node runs.
    pub(crate) risk: Risk,
    /// Set when the graph does not validate (reachable only without `plan_graph::load`, which
    /// refuses such plans): running the block fails with this reason.
    invalid: Option<StepError>,
}

enum CompiledNode {
    Call {
        tool: Arc<dyn Tool>,
        tool_name: Arc<str>,
        args: ValueTemplate,
        retry: RetryPolicy,
        timeout: Option<Duration>,
        schema: Option<Arc<jsonschema::Validator>>,
    },
    Block(Arc<CompiledBlock>),
}

enum CompiledTransition {
    Linear(usize),
    Branching(Vec<CompiledBranch>),
}

struct CompiledBranch {
    /// The condition's name (`default` for the branch that always holds).
    name: String,
    /// None for `default`.
    condition: Option<(cel::Program, String)>,
    target: usize,
}

fn reason(code: &str, message: String, details: Value) -> StepError {
    StepError {
        code: code.to_owned(),
        message,
        details: Some(details),
    }
}

/// Compiles a block. Unknown tools and malformed placeholders are errors (the plan cannot run);
/// a graph that does not validate compiles to a block that fails with its reason when run.
pub(crate) fn compile_block(
    block: &Block,
    registry: &Registry,
    retry: &RetryPolicy,
    timeout: Option<Duration>,
) -> Result<CompiledBlock, String> {
    let names: Vec<String> = block.nodes.keys().cloned().collect();
    let index: HashMap<&str, usize> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), i))
        .collect();
    let mut nodes = Vec::with_capacity(names.len());
    let mut risk = Risk::Low;
    for (name, node) in &block.nodes {
        nodes.push(match (&node.tool, &node.block) {
            (Some(tool_name), None) => {
                let tool = registry
                    .get(tool_name)
                    .ok_or_else(|| format!("node `{name}`: unknown tool `{tool_name}`"))?;
                let args = ValueTemplate::compile(&Value::Object(node.args.clone()))
                    .map_err(|e| format!("node `{name}`: malformed placeholder: {e}"))?;
                risk = risk.max(tool.info().risk);
                CompiledNode::Call {
                    tool: tool.clone(),
                    tool_name: Arc::from(tool_name.as_str()),
                    args,
                    retry: node.retry.clone().unwrap_or_else(|| retry.clone()),
                    timeout: node.timeout_ms.map(Duration::from_millis).or(timeout),
                    schema: compile_schema(&tool.info().input_schema)
                        .map_err(|e| format!("tool `{tool_name}`: {e}"))?,
                }
            }
            (None, Some(nested)) => {
                let nested = compile_block(nested, registry, retry, timeout)?;
                risk = risk.max(nested.risk);
                CompiledNode::Block(Arc::new(nested))
            }
            _ => {
                return Err(format!(
                    "node `{name}` needs exactly one of `tool` and `block`"
                ));
            }
        });
    }
    let mut invalid = None;
    let entry = match index.get(block.entry_point.as_str()) {
        Some(&entry) => entry,
        None => {
            invalid = Some(reason(
                codes::INVALID_GRAPH,
                format!("the entry point `{}` is not a node", block.entry_point),
                json!({"entry_point": block.entry_point}),
            ));
            0
        }
    };
    let mut transitions: Vec<Option<CompiledTransition>> = (0..names.len()).map(|_| None).collect();
    for (source, transition) in &block.transitions {
        let Some(&from) = index.get(source.as_str()) else {
            invalid.get_or_insert_with(|| {
                reason(
                    codes::UNKNOWN_NODE,
                    format!("a transition leaves `{source}`, which is not a node"),
                    json!({"node": source}),
                )
            });
            continue;
        };
        let target = |name: &str| index.get(name).copied();
        transitions[from] = match transition {
            Transition::Linear(to) => match target(to) {
                Some(to) => Some(CompiledTransition::Linear(to)),
                None => {
                    invalid.get_or_insert_with(|| {
                        reason(
                            codes::UNKNOWN_NODE,
                            format!("`{source}` goes to `{to}`, which is not a node"),
                            json!({"node": to}),
                        )
                    });
                    None
                }
            },
            Transition::Branching(branches) => {
                let mut compiled = Vec::with_capacity(branches.len());
                for branch in branches {
                    let Some(to) = target(&branch.target) else {
                        invalid.get_or_insert_with(|| {
                            reason(
                                codes::UNKNOWN_NODE,
                                format!(
                                    "`{source}` goes to `{}`, which is not a node",
                                    branch.target
                                ),
                                json!({"node": branch.target}),
                            )
                        });
                        continue;
                    };
                    let condition = if branch.condition == "default" {
                        None
                    } else {
                        let Some(text) = block.conditions.get(&branch.condition) else {
                            invalid.get_or_insert_with(|| {
                                reason(
                                    codes::CONDITION_RESOLUTION_ERROR,
                                    format!("condition `{}` is not defined", branch.condition),
                                    json!({"condition": branch.condition}),
                                )
                            });
                            continue;
                        };
                        match cel::Program::compile(text) {
                            Ok(program) => Some((program, text.clone())),
                            Err(error) => {
                                invalid.get_or_insert_with(|| {
                                    reason(
                                        codes::CONDITION_RESOLUTION_ERROR,
                                        format!(
                                            "condition `{}` does not compile: {error}",
                                            branch.condition
                                        ),
                                        json!({"condition": branch.condition, "expression": text}),
                                    )
                                });
                                continue;
                            }
                        }
                    };
                    compiled.push(CompiledBranch {
                        name: branch.condition.clone(),
                        condition,
                        target: to,
                    });
                }
                Some(CompiledTransition::Branching(compiled))
            }
        };
    }
    if names.is_empty() {
        invalid.get_or_insert_with(|| {
            reason(
                codes::INVALID_GRAPH,
                "a block needs at least one node".to_owned(),
                json!({}),
            )
        });
    }
    Ok(CompiledBlock {
        names,
        nodes,
        entry,
        transitions,
        max_steps: block.max_steps,
        risk,
        invalid,
    })
}

/// The variables a node's arguments read: the run's, plus the block's `input` and `nodes`
/// (each node's latest result), which shadow run variables of those names.
struct NodeVariables<'a> {
    vars: &'a BTreeMap<String, Arc<Value>>,
    input: &'a Value,
    nodes: &'a Value,
}

impl Variables for NodeVariables<'_> {
    fn get(&self, name: &str) -> Option<&Value> {
        match name {
            "input" => Some(self.input),
            "nodes" => Some(self.nodes),
            _ => self.vars.get(name).map(|v| &**v),
        }
    }

    fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.vars.keys().map(String::as_str).collect();
        names.extend(["input", "nodes"]);
        names
    }
}

/// One run of a block step: what it reads, and the node records and attempts it makes.
pub(crate) struct BlockRun {
    pub(crate) context: CallContext,
    pub(crate) vars: BTreeMap<String, Arc<Value>>,
    pub(crate) env: BTreeMap<String, Value>,
    pub(crate) records: Vec<Record>,
    pub(crate) attempts: Vec<Attempt>,
}

type BlockFuture<'a> = Pin<Box<dyn Future<Output = Result<Value, StepError>> + Send + 'a>>;

impl BlockRun {
    /// Runs `block` as `path` with `input`; its result is the last node's.
    pub(crate) fn run<'a>(
        &'a mut self,
        block: &'a CompiledBlock,
        path: &'a str,
        input: &'a Value,
    ) -> BlockFuture<'a> {
        Box::pin(async move {
            if let Some(invalid) = &block.invalid {
                return Err(invalid.clone());
            }
            self.emit(EventKind::BlockEntered, path, |_| {});
            let mut results: Map<String, Value> = Map::new();
            let mut visits: Vec<u32> = vec![0; block.names.len()];
            let mut current = block.entry;
            let mut steps: u32 = 0;
            loop {
                steps += 1;
                if steps > block.max_steps {
                    return Err(reason(
                        codes::MAX_STEPS_EXCEEDED,
                        format!("the block ran {} nodes without finishing", block.max_steps),
                        json!({"max_steps": block.max_steps}),
                    ));
                }
                let name = &block.names[current];
                visits[current] += 1;
                let node_path = format!("{path}/{name}#{}", visits[current]);
                let started = Instant::now();
                let nodes_value = Value::Object(results.clone());
                let (outcome, attempts) = self
                    .run_node(&block.nodes[current], &node_path, input, &nodes_value)
                    .await;
                let mut record = Record {
                    step_id: node_path.clone(),
                    ok: outcome.is_ok(),
                    skipped: false,
                    result: outcome.as_ref().ok().cloned(),
                    reason: None,
                    error: outcome.as_ref().err().cloned().map(Box::new),
                    attempts,
                    duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                    upstream: None,
                };
                self.context.redactor.record(&mut record);
                self.records.push(record);
                let result = match outcome {
                    Ok(result) => result,
                    // A failed node fails the block, naming the node and keeping its error.
                    Err(error) => {
                        return Err(StepError {
                            code: error.code.clone(),
                            message: format!("node `{node_path}` failed: {}", error.message),
                            details: Some(json!({"node": name, "path": node_path, "error": error})),
                        });
                    }
                };
                results.insert(name.clone(), result.clone());
                let Some(transition) = &block.transitions[current] else {
                    return Ok(result);
                };
                let (next, condition) = match transition {
                    CompiledTransition::Linear(next) => (*next, None),
                    CompiledTransition::Branching(branches) => {
                        let mut chosen = None;
                        for branch in branches {
                            let holds = match &branch.condition {
                                None => true,
                                Some((program, text)) => self.decide(
                                    program,
                                    text,
                                    &branch.name,
                                    &result,
                                    input,
                                    visits[current],
                                )?,
                            };
                            if holds {
                                chosen = Some((branch.target, Some(branch.name.clone())));
                                break;
                            }
                        }
                        chosen.ok_or_else(|| {
                            reason(
                                codes::NO_TRANSITION,
                                format!("no branch after node `{name}` matched"),
                                json!({"node": name}),
                            )
                        })?
                    }
                };
                let to = block.names[next].clone();
                self.emit(EventKind::BlockTransition, path, |event| {
                    event.from = Some(name.clone());
                    event.to = Some(to);
                    event.condition = condition;
                });
                current = next;
            }
        })
    }

    /// A branch condition: true or false, or `condition_resolution_error`.
    fn decide(
        &self,
        program: &cel::Program,
        text: &str,
        name: &str,
        result: &Value,
        input: &Value,
        attempt: u32,
    ) -> Result<bool, StepError> {
        let failure = |message: String| {
            reason(
                codes::CONDITION_RESOLUTION_ERROR,
                format!("condition `{name}` (`{text}`): {message}"),
                json!({"condition": name, "expression": text}),
            )
        };
        let vars: BTreeMap<&str, CelJson<'_>> = self
            .vars
            .iter()
            .map(|(k, v)| (k.as_str(), CelJson(v)))
            .collect();
        let mut context = cel_context();
        context
            .add_variable("result", CelJson(result))
            .map_err(|e| failure(e.to_string()))?;
        context
            .add_variable("vars", vars)
            .map_err(|e| failure(e.to_string()))?;
        context
            .add_variable("input", CelJson(input))
            .map_err(|e| failure(e.to_string()))?;
        context
            .add_variable("attempt", i64::from(attempt))
            .map_err(|e| failure(e.to_string()))?;
        match program.execute(&context) {
            Ok(cel::Value::Bool(holds)) => Ok(holds),
            Ok(other) => Err(failure(format!(
                "a condition must be true or false, not {other:?}"
            ))),
            Err(error) => Err(failure(error.to_string())),
        }
    }

    async fn run_node(
        &mut self,
        node: &CompiledNode,
        path: &str,
        input: &Value,
        nodes: &Value,
    ) -> (Result<Value, StepError>, u32) {
        match node {
            CompiledNode::Block(nested) => (self.run(nested, path, input).await, 0),
            CompiledNode::Call {
                tool,
                tool_name,
                args,
                retry,
                timeout,
                schema,
            } => {
                // Resolved before the call: the scope (not `Send`) must not live across it.
                let resolved = {
                    let variables = NodeVariables {
                        vars: &self.vars,
                        input,
                        nodes,
                    };
                    let scope = Scope {
                        vars: Some(&variables),
                        env: Some(&self.env),
                        ..Scope::default()
                    };
                    args.resolve(&scope)
                        .map_err(|error| StepError {
                            code: codes::E_ARGS_UNRESOLVED.into(),
                            message: error.to_string(),
                            details: None,
                        })
                        .and_then(|args| check_schema(schema.as_deref(), tool_name, args))
                };
                let args = match resolved {
                    Ok(args) => args,
                    Err(error) => return (Err(error), 0),
                };
                if let Some(guard) = &self.context.guard
                    && let Err(error) = guard.admit(tool_name, &args)
                {
                    return (Err(error), 0);
                }
                let call = ToolCall {
                    step_id: Arc::from(path),
                    tool_name: tool_name.clone(),
                    tool: tool.clone(),
                    args,
                    retry: retry.clone(),
                    timeout: *timeout,
                };
                let finished = call_tool(&self.context, call).await;
                self.attempts.extend(finished.log);
                (finished.result.map_err(StepError::from), finished.attempts)
            }
        }
    }

    fn emit(&self, kind: EventKind, path: &str, fill: impl FnOnce(&mut Event)) {
        if let Some(sink) = &self.context.events {
            let mut event = Event::new(kind, &self.context.run_id).step(&Arc::from(path), 0);
            fill(&mut event);
            self.context.redactor.event(&mut event);
            sink.emit(&event);
        }
    }
}
