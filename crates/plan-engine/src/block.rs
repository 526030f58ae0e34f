//! Composite blocks: a graph of nodes run one at a time from an entry point, each
//! followed by its transition, until a node has none; loops are bounded by `max_steps`.
//!
//! The loop is the composite-block reference algorithm: count the step (fail with `max_steps_exceeded`
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

use plan_graph::{Block, Issue, OnFailure, PlanPath, RetryPolicy, Risk, Transition};
use plan_types::{
    Approvals, BlockPhase, BlockState, CallPath, ErrorCode, Event, EventKind, PendingApproval,
    Record, Segment, StepError, Verdict,
};
use plan_vars::{Scope, ValueTemplate};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::admit::Gate;
use crate::call::{CallContext, Inner, Made};
use crate::condition::{NodeScope, evaluate};
use crate::overlay::Overlay;
use crate::schema::{argument_issues, compile_schema, resolve_checked};
use plan_ports::{Registry, Tool, codes};

/// A block bound to tools, its conditions compiled.
pub(crate) struct CompiledBlock {
    names: Vec<String>,
    nodes: Vec<CompiledNode>,
    entry: usize,
    transitions: Vec<Option<CompiledTransition>>,
    max_steps: u32,
    /// Set when the graph does not validate (reachable only without `plan_graph::load`, which
    /// refuses such plans): running the block fails with this reason.
    invalid: Option<StepError>,
    /// The data expressions in its nodes' arguments, compiled.
    expressions: crate::expression::Expressions,
}

impl CompiledBlock {
    /// The tool of the node at `path` inside this block (`check#2`, or `inner#1/deploy#1` in a
    /// nested block), if it is a tool call.
    pub(crate) fn tool_at(&self, path: &[Segment]) -> Option<&str> {
        let (first, rest) = path.split_first()?;
        let at = self.names.iter().position(|n| **n == *first.name)?;
        match (&self.nodes[at], rest) {
            (CompiledNode::Call { tool_name, .. }, []) => Some(tool_name),
            (CompiledNode::Block(inner), [_, ..]) => inner.tool_at(rest),
            _ => None,
        }
    }
}

enum CompiledNode {
    Call {
        tool: Arc<dyn Tool>,
        tool_name: Arc<str>,
        args: ValueTemplate,
        retry: RetryPolicy,
        timeout: Option<Duration>,
        schema: Option<Arc<jsonschema::Validator>>,
        /// `risk: high` (the node's, else its tool's): waits for an approval.
        gated: bool,
        on_failure: OnFailure,
    },
    Block(Arc<CompiledBlock>),
}

impl CompiledBlock {
    /// The approval keys of its high-risk nodes (`review/deploy`), nested blocks' included.
    pub(crate) fn gated_nodes(&self, path: &CallPath) -> Vec<String> {
        let mut keys = Vec::new();
        for (name, node) in self.names.iter().zip(&self.nodes) {
            let node_path = path.then(name, 1);
            match node {
                CompiledNode::Call { gated: true, .. } => keys.push(node_path.key()),
                CompiledNode::Call { .. } => {}
                CompiledNode::Block(nested) => keys.extend(nested.gated_nodes(&node_path)),
            }
        }
        keys
    }
}

impl CompiledBlock {
    /// The schema violations of its nodes' arguments (nested blocks' included) that hold
    /// whatever the run brings; see [`crate::Program::check_arguments`].
    pub(crate) fn check_arguments(
        &self,
        scope: &Scope<'_>,
        path: PlanPath,
        issues: &mut Vec<Issue>,
    ) {
        for (name, node) in self.names.iter().zip(&self.nodes) {
            let at = path.clone().key("nodes").key(name);
            match node {
                CompiledNode::Call {
                    tool,
                    tool_name,
                    args,
                    schema: Some(schema),
                    ..
                } => argument_issues(
                    &**tool,
                    tool_name,
                    schema,
                    args,
                    scope,
                    at.key("args"),
                    issues,
                ),
                CompiledNode::Call { schema: None, .. } => {}
                CompiledNode::Block(block) => block.check_arguments(scope, at.key("block"), issues),
            }
        }
    }
}

impl CompiledNode {
    fn waits_on_failure(&self) -> bool {
        matches!(
            self,
            CompiledNode::Call {
                on_failure: OnFailure::Wait,
                ..
            }
        )
    }
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

fn reason(code: ErrorCode, message: String, details: Value) -> StepError {
    StepError {
        code,
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
    let mut expressions = crate::expression::Expressions::default();
    for (name, node) in &block.nodes {
        nodes.push(match (&node.tool, &node.block) {
            (Some(tool_name), None) => {
                let tool = registry
                    .get(tool_name)
                    .ok_or_else(|| format!("node `{name}`: unknown tool `{tool_name}`"))?;
                let args = ValueTemplate::compile(&Value::Object(node.args.clone()))
                    .map_err(|e| format!("node `{name}`: malformed placeholder: {e}"))?;
                for placeholder in args.placeholders() {
                    if let plan_vars::Root::Expr(text) = &placeholder.root {
                        expressions
                            .add(text, &crate::expression::Place::DATA)
                            .map_err(|e| format!("node `{name}`: `{placeholder}`: {e}"))?;
                    }
                }
                let tool_risk = tool.info().risk;
                CompiledNode::Call {
                    tool: tool.clone(),
                    tool_name: Arc::from(tool_name.as_str()),
                    args,
                    retry: node.retry.clone().unwrap_or_else(|| retry.clone()),
                    timeout: node.timeout_ms.map(Duration::from_millis).or(timeout),
                    schema: compile_schema(&tool.info().input_schema)
                        .map_err(|e| format!("tool `{tool_name}`: {e}"))?,
                    gated: node.risk.unwrap_or(tool_risk) == Risk::High,
                    on_failure: node.on_failure.unwrap_or(block.on_failure),
                }
            }
            (None, Some(nested)) => {
                // A nested block's nodes take their own `on_failure` or the nested block's.
                let nested = compile_block(nested, registry, retry, timeout)?;
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
                        let checked = plan_graph::compile_condition(text)
                            .map_err(|error| error.to_string())
                            .and_then(|program| {
                                crate::expression::check_references(
                                    &program,
                                    &crate::expression::Place::BRANCH,
                                )?;
                                Ok(program)
                            });
                        match checked {
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
        invalid,
        expressions,
    })
}

/// Where a block stopped to wait (for an approval, or for a decision after a node failed under
/// `on_failure: wait`), so that `resume` goes on from that node rather than from the entry
/// point. Kept in the ledger as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Checkpoint {
    /// The node that waits; it runs when the block goes on.
    node: String,
    /// Node runs before it.
    steps: u32,
    /// Runs of each node before it.
    visits: BTreeMap<String, u32>,
    /// Each node's latest result.
    results: Map<String, Value>,
    /// Recoveries of this node run approved so far.
    #[serde(default)]
    recoveries: u32,
    /// The failure that waits for a decision (`on_failure: wait`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    failure: Option<StepError>,
    /// The attempts the failed node run made: run again, it counts on from them.
    #[serde(default, skip_serializing_if = "is_zero")]
    failed_attempts: u32,
    /// When the node is a nested block: where that block stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    inner: Option<Box<Checkpoint>>,
}

/// The state of each of the block steps `blocks` (in plan order), from a run's records (as
/// `run` reports them or the ledger keeps them, in plan order) and the checkpoints of the
/// blocks that wait. Records are told apart by `plan_graph::StepIndex::call_of`, one pass
/// over them, and none without blocks. (Validation keeps every other step's and item's id from
/// looking like a call inside a block: `plan::call_id`.)
pub fn block_states<'a>(
    blocks: impl IntoIterator<Item = &'a str>,
    records: &[Record],
    checkpoints: &BTreeMap<String, Value>,
) -> Vec<BlockState> {
    let blocks: Vec<&str> = blocks.into_iter().collect();
    if blocks.is_empty() {
        return Vec::new();
    }
    let index = plan_graph::StepIndex::new(blocks.iter().copied());
    let mut own: Vec<Option<&Record>> = vec![None; blocks.len()];
    let mut nodes: Vec<Vec<&Record>> = vec![Vec::new(); blocks.len()];
    for record in records {
        match index.call_of(&record.step_id) {
            Some(plan_graph::CallOf::Step(i)) => own[i] = own[i].or(Some(record)),
            Some(plan_graph::CallOf::Inside(i, _)) => nodes[i].push(record),
            _ => {}
        }
    }
    blocks
        .iter()
        .enumerate()
        .map(|(i, id)| block_state(id, own[i], &nodes[i], checkpoints.get(*id)))
        .collect()
}

/// The state of block `step_id` from its records (its own and its nodes', in order) and the
/// checkpoint it waits at, if any.
fn block_state(
    step_id: &str,
    own: Option<&Record>,
    nodes: &[&Record],
    checkpoint: Option<&Value>,
) -> BlockState {
    // A node record's id is `STEP/…`: the block's nodes, read without their runs.
    let last_node = || {
        nodes.last().map(|r| {
            let inside = r.step_id.get(step_id.len() + 1..).unwrap_or_default();
            let names: Vec<Arc<str>> = CallPath::segments_of(inside)
                .into_iter()
                .map(|segment| segment.name)
                .collect();
            names.join("/")
        })
    };
    let waiting_at = || {
        let mut path = Vec::new();
        let mut at = checkpoint;
        while let Some(value) = at {
            path.extend(value.get("node").and_then(Value::as_str).map(str::to_owned));
            at = value.get("inner").filter(|inner| !inner.is_null());
        }
        (!path.is_empty()).then(|| path.join("/"))
    };
    let (state, node) = match own {
        Some(record) if record.ok && !record.skipped => (BlockPhase::Done, last_node()),
        Some(record) if record.error.is_some() => (BlockPhase::Failed, last_node()),
        _ if checkpoint.is_some() => (BlockPhase::Waiting, waiting_at()),
        Some(record) if record.skipped && (record.upstream.is_some() || record.ok) => {
            (BlockPhase::Skipped, None)
        }
        _ => (BlockPhase::Ready, None),
    };
    BlockState {
        step_id: step_id.to_owned(),
        state,
        node,
    }
}

/// Where the block stands before the run of node `at.0`, after `at.1` node runs: what a wait
/// keeps.
fn checkpoint(
    block: &CompiledBlock,
    at: (usize, u32),
    visits: &[u32],
    results: &Map<String, Value>,
    recoveries: u32,
    failure: Option<(StepError, u32)>,
    inner: Option<Box<Checkpoint>>,
) -> Box<Checkpoint> {
    let (failure, failed_attempts) = failure.map_or((None, 0), |(error, n)| (Some(error), n));
    Box::new(Checkpoint {
        node: block.names[at.0].clone(),
        steps: at.1,
        visits: block
            .names
            .iter()
            .cloned()
            .zip(visits.iter().copied())
            .collect(),
        results: results.clone(),
        recoveries,
        failure,
        failed_attempts,
        inner,
    })
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Where a node run goes on from: a nested block's checkpoint, or the attempts a failed call
/// made before someone approved running it again.
struct NodeFrom {
    inner: Option<Box<Checkpoint>>,
    earlier: u32,
}

/// How a block run ended: with a result, or waiting.
pub(crate) enum BlockEnd {
    Done(Result<Value, StepError>),
    Waiting(Box<Checkpoint>, PendingApproval),
}

/// How a node run ended.
enum NodeEnd {
    Ran(Result<Value, StepError>, u32),
    Waiting(Option<Box<Checkpoint>>, PendingApproval),
}

/// The key of the decision on a failed node run (`review/check#2@1` for its first failure).
fn recovery_key(node_path: &CallPath, recoveries: u32) -> String {
    format!("{node_path}@{}", recoveries + 1)
}

/// A top-level node run of a block that finished and was followed by a transition: its
/// records (the node's, and a nested block's nodes'), and where the block now stands. The
/// scheduler commits both, so a block interrupted later goes on from there, and then says so
/// on `committed`: the next node depends on this one, so it starts only once this one is
/// durable (a node is never run again after its result was seen).
pub(crate) struct NodeDone {
    pub(crate) step: usize,
    pub(crate) records: Vec<Record>,
    pub(crate) checkpoint: Value,
    pub(crate) committed: tokio::sync::oneshot::Sender<()>,
}

impl NodeDone {
    /// Hands step `step`'s records and checkpoint to the scheduler and waits until they are
    /// durable. False when they may not be: the ledger failed, or the run is stopping (what
    /// follows must not happen on a state that could be lost).
    pub(crate) async fn commit(
        progress: &tokio::sync::mpsc::UnboundedSender<NodeDone>,
        step: usize,
        records: Vec<Record>,
        checkpoint: Value,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> bool {
        let (committed, durable) = tokio::sync::oneshot::channel();
        let done = NodeDone {
            step,
            records,
            checkpoint,
            committed,
        };
        if progress.send(done).is_err() {
            return false;
        }
        tokio::select! {
            answer = durable => answer.is_ok(),
            () = cancel.cancelled() => false,
        }
    }
}

/// One run of a block step: what it reads, and the node records it makes.
pub(crate) struct BlockRun {
    pub(crate) context: CallContext,
    pub(crate) vars: BTreeMap<String, Arc<Value>>,
    pub(crate) env: BTreeMap<String, Value>,
    pub(crate) approvals: Arc<Approvals>,
    pub(crate) records: Vec<Record>,
    /// Where finished node runs are reported as they happen (only with a ledger); their
    /// records go with the report and leave `records`.
    pub(crate) progress: Option<(usize, tokio::sync::mpsc::UnboundedSender<NodeDone>)>,
    /// 0 in the block step itself, more inside nested blocks (which report through their
    /// node of the top-level block).
    pub(crate) depth: u32,
}

type BlockFuture<'a> = Pin<Box<dyn Future<Output = BlockEnd> + Send + 'a>>;

impl BlockRun {
    /// Runs `block` as `path` with `input`, from its entry point or from where it stopped;
    /// its result is the last node's.
    pub(crate) fn run<'a>(
        &'a mut self,
        block: &'a CompiledBlock,
        path: &'a CallPath,
        input: &'a Value,
        from: Option<Box<Checkpoint>>,
    ) -> BlockFuture<'a> {
        Box::pin(async move {
            match self.run_from(block, path, input, from).await {
                Ok(end) => end,
                Err(error) => BlockEnd::Done(Err(error)),
            }
        })
    }

    async fn run_from(
        &mut self,
        block: &CompiledBlock,
        path: &CallPath,
        input: &Value,
        from: Option<Box<Checkpoint>>,
    ) -> Result<BlockEnd, StepError> {
        if let Some(invalid) = &block.invalid {
            return Err(invalid.clone());
        }
        self.emit(EventKind::BlockEntered, path, |_| {});
        let mut results: Map<String, Value> = Map::new();
        let mut visits: Vec<u32> = vec![0; block.names.len()];
        let mut current = block.entry;
        let mut steps: u32 = 0;
        let mut recoveries = 0;
        let mut failure = None;
        let mut inner = None;
        if let Some(checkpoint) = from {
            let Some(at) = block.names.iter().position(|n| *n == checkpoint.node) else {
                return Err(reason(
                    codes::INVALID_GRAPH,
                    format!(
                        "the block stopped at node `{}`, which it no longer has",
                        checkpoint.node
                    ),
                    json!({"node": checkpoint.node}),
                ));
            };
            current = at;
            steps = checkpoint.steps;
            for (i, name) in block.names.iter().enumerate() {
                visits[i] = checkpoint.visits.get(name).copied().unwrap_or(0);
            }
            results = checkpoint.results;
            recoveries = checkpoint.recoveries;
            failure = checkpoint.failure.map(|e| (e, checkpoint.failed_attempts));
            inner = checkpoint.inner;
        }
        loop {
            let name = &block.names[current];
            let node_path = path.then(name, visits[current] + 1);
            // Attempts of this node run before a failure someone decided to run it again.
            let mut earlier = 0;
            // A failed node run waiting for a decision: run it again only once approved.
            if let Some((error, attempts)) = failure.take() {
                earlier = attempts;
                let key = recovery_key(&node_path, recoveries);
                match self.approvals.decision(&key, None) {
                    Verdict::Approved(_) => recoveries += 1,
                    Verdict::Rejected(why) => {
                        return Err(StepError {
                            code: codes::E_REJECTED,
                            message: format!(
                                "node `{node_path}` failed and running it again was refused ({why}): {}",
                                error.message
                            ),
                            details: Some(
                                json!({"node": name, "path": node_path.to_string(), "error": error}),
                            ),
                        });
                    }
                    // Running a failed node again is a decision, not an approval of a risk:
                    // it waits even with approvals off.
                    Verdict::Undecided | Verdict::Off => {
                        let pending = self.recovery_request(&key, &error);
                        let at = (current, steps);
                        let checkpoint = checkpoint(
                            block,
                            at,
                            &visits,
                            &results,
                            recoveries,
                            Some((error, attempts)),
                            None,
                        );
                        return Ok(BlockEnd::Waiting(checkpoint, pending));
                    }
                }
            }
            steps += 1;
            if steps > block.max_steps {
                return Err(reason(
                    codes::MAX_STEPS_EXCEEDED,
                    format!("the block ran {} nodes without finishing", block.max_steps),
                    json!({"max_steps": block.max_steps}),
                ));
            }
            let started = Instant::now();
            let nodes_value = Value::Object(results.clone());
            let node = &block.nodes[current];
            let (outcome, attempts) = match self
                .run_node(
                    &block.expressions,
                    node,
                    &node_path,
                    input,
                    &nodes_value,
                    NodeFrom {
                        inner: inner.take(),
                        earlier,
                    },
                )
                .await
            {
                NodeEnd::Ran(outcome, attempts) => (outcome, attempts),
                NodeEnd::Waiting(inner, pending) => {
                    let at = (current, steps - 1);
                    let checkpoint =
                        checkpoint(block, at, &visits, &results, recoveries, None, inner);
                    return Ok(BlockEnd::Waiting(checkpoint, pending));
                }
            };
            if let Err(error) = &outcome
                && node.waits_on_failure()
                && error.code != codes::E_REJECTED
                && error.code != codes::E_GUARD
            {
                // `on_failure: wait`: the run halts here until someone decides.
                let key = recovery_key(&node_path, recoveries);
                let pending = self.recovery_request(&key, error);
                let at = (current, steps - 1);
                // A run again refused before its call keeps the attempts made before.
                let failure = Some((error.clone(), attempts.max(earlier)));
                let checkpoint =
                    checkpoint(block, at, &visits, &results, recoveries, failure, None);
                return Ok(BlockEnd::Waiting(checkpoint, pending));
            }
            recoveries = 0;
            visits[current] += 1;
            let record = self.context.record(
                &node_path.to_string(),
                outcome.clone().map(Arc::new),
                attempts,
                started.elapsed(),
            );
            self.records.push(record);
            let result = match outcome {
                Ok(result) => result,
                // A failed node fails the block, naming the node and keeping its error.
                Err(error) => {
                    return Err(StepError {
                        code: error.code.clone(),
                        message: format!("node `{node_path}` failed: {}", error.message),
                        details: Some(
                            json!({"node": name, "path": node_path.to_string(), "error": error}),
                        ),
                    });
                }
            };
            // What later nodes read of this one (`nodes.NAME`) is redacted: an expression over
            // it (`${{ nodes.a.t.substring(1) }}`) could otherwise carry a piece of a secret
            // past the redactor, which finds only whole secrets.
            results.insert(name.clone(), self.context.redactor.visible(&result));
            let Some(transition) = &block.transitions[current] else {
                return Ok(BlockEnd::Done(Ok(result)));
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
            if self.depth == 0
                && let Some((step, progress)) = &self.progress
            {
                let at = checkpoint(block, (current, steps), &visits, &results, 0, None, None);
                // The records move to the scheduler, which keeps them from now on.
                let durable = NodeDone::commit(
                    progress,
                    *step,
                    std::mem::take(&mut self.records),
                    serde_json::to_value(&*at).unwrap_or(Value::Null),
                    &self.context.cancel,
                )
                .await;
                if !durable {
                    // The ledger failed or the run is stopping: the next node must not start
                    // on a result that may not be kept.
                    return Err(reason(
                        codes::E_CANCELLED,
                        format!("the run stopped after node `{name}`"),
                        json!({"node": name}),
                    ));
                }
            }
        }
    }

    /// The request that a failed node run be decided on.
    fn recovery_request(&self, key: &str, error: &StepError) -> PendingApproval {
        let mut reason = format!(
            "failed with {}: {}; approve to run it again, reject to fail the block",
            error.code, error.message
        );
        self.context.redactor.string(&mut reason);
        PendingApproval {
            step_id: key.to_owned(),
            tool: None,
            args: None,
            reason: Some(reason),
            input_schema: None,
        }
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
        let scope = NodeScope {
            result,
            input,
            attempt,
        };
        evaluate(program, &self.vars, Some(scope)).map_err(|message| {
            reason(
                codes::CONDITION_RESOLUTION_ERROR,
                format!("condition `{name}` (`{text}`): {message}"),
                json!({"condition": name, "expression": text}),
            )
        })
    }

    async fn run_node(
        &mut self,
        expressions: &crate::expression::Expressions,
        node: &CompiledNode,
        path: &CallPath,
        input: &Value,
        nodes: &Value,
        from: NodeFrom,
    ) -> NodeEnd {
        let NodeFrom { inner, earlier } = from;
        match node {
            CompiledNode::Block(nested) => {
                self.depth += 1;
                let end = self.run(nested, path, input, inner).await;
                self.depth -= 1;
                match end {
                    BlockEnd::Done(outcome) => NodeEnd::Ran(outcome, 0),
                    BlockEnd::Waiting(inner, pending) => NodeEnd::Waiting(Some(inner), pending),
                }
            }
            CompiledNode::Call {
                tool,
                tool_name,
                args,
                retry,
                timeout,
                schema,
                gated,
                on_failure: _,
            } => {
                // Resolved before the call: the scope (not `Send`) must not live across it.
                let resolved = {
                    let variables = Overlay {
                        vars: &self.vars,
                        own: [("input", input), ("nodes", nodes)],
                    };
                    let evaluate =
                        |text: &str, scope: &Scope<'_>| expressions.evaluate(text, scope);
                    let scope = Scope {
                        vars: Some(&variables),
                        env: Some(&self.env),
                        evaluate: Some(&evaluate),
                        names: Some(&self.context.variable_names),
                        ..Scope::default()
                    };
                    resolve_checked(args, &scope, schema.as_deref(), tool_name)
                };
                let key = path.key();
                let gate = Gate {
                    tool: Some(tool_name),
                    approval: gated.then_some((key.as_str(), None)),
                    waits_as: &key,
                    schema: schema.as_deref(),
                    answerable: true,
                };
                let id = path.to_string();
                let call = Inner {
                    id: &id,
                    tool_name,
                    tool,
                    retry: retry.clone(),
                    timeout: *timeout,
                    working_dir: None,
                    // A block run again from its entry point counts on from its earlier
                    // run's attempts; a failed node run again, from its own.
                    earlier: earlier.max(self.context.earlier(&id)),
                };
                match self
                    .context
                    .make(call, resolved, &gate, &self.approvals)
                    .await
                {
                    Made::Done {
                        outcome, attempts, ..
                    } => NodeEnd::Ran(outcome, attempts),
                    Made::Waiting(pending) => NodeEnd::Waiting(None, pending),
                }
            }
        }
    }

    fn emit(&self, kind: EventKind, path: &CallPath, fill: impl FnOnce(&mut Event)) {
        if let Some(sink) = &self.context.events {
            let id: Arc<str> = Arc::from(path.to_string());
            let mut event = Event::new(kind, &self.context.run_id).step(&id, 0);
            fill(&mut event);
            self.context.redactor.event(&mut event);
            sink.emit(&event);
        }
    }
}

impl CompiledBlock {
    /// Its nodes' calls, nested blocks' included, for [`crate::Program::call_sites`].
    pub(crate) fn call_sites(
        &self,
        path: PlanPath,
        step: &Arc<str>,
        sites: &mut crate::sites::Sites,
    ) {
        for (name, node) in self.names.iter().zip(&self.nodes) {
            let at = path.clone().key("nodes").key(name);
            match node {
                CompiledNode::Call {
                    tool,
                    tool_name,
                    gated,
                    ..
                } => sites.push(
                    at,
                    step,
                    crate::sites::CallKind::BlockNode,
                    (tool_name, &**tool),
                    *gated,
                ),
                CompiledNode::Block(inner) => inner.call_sites(at.key("block"), step, sites),
            }
        }
    }
}

/// A block step as the scheduler starts it.
pub(crate) struct BlockCall {
    pub(crate) step: usize,
    pub(crate) context: CallContext,
    pub(crate) step_id: Arc<str>,
    pub(crate) block: Arc<CompiledBlock>,
    pub(crate) input: Value,
    pub(crate) vars: BTreeMap<String, Arc<Value>>,
    pub(crate) env: BTreeMap<String, Value>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) approvals: Arc<Approvals>,
    /// Where the block stood when an earlier attempt at the run ended (it waited, or was
    /// interrupted): it goes on from there.
    pub(crate) from: Option<Box<Checkpoint>>,
    /// Where finished node runs go to be committed as they happen (only with a journal).
    pub(crate) progress: Option<tokio::sync::mpsc::UnboundedSender<NodeDone>>,
}

impl BlockCall {
    /// Runs the block step; its `timeout_ms` bounds the whole block.
    pub(crate) async fn execute(self) -> crate::call::Finished {
        let started = Instant::now();
        let from = self.from;
        let mut run = BlockRun {
            context: self.context,
            vars: self.vars,
            env: self.env,
            approvals: self.approvals,
            // The scheduler holds the records of earlier attempts already.
            records: Vec::new(),
            progress: self.progress.map(|sender| (self.step, sender)),
            depth: 0,
        };
        let path = CallPath::step(self.step_id.clone());
        let block = &self.block;
        let input = &self.input;
        let end = match self.timeout {
            None => run.run(block, &path, input, from).await,
            Some(limit) => tokio::time::timeout(limit, run.run(block, &path, input, from))
                .await
                .unwrap_or_else(|_| {
                    BlockEnd::Done(Err(StepError {
                        code: codes::E_TIMEOUT,
                        message: format!(
                            "the block took longer than {} ms and was cancelled",
                            limit.as_millis()
                        ),
                        details: None,
                    }))
                }),
        };
        let end = match end {
            BlockEnd::Done(outcome) => crate::call::WorkEnd::Call(Made::Done {
                outcome,
                attempts: 1,
                took: started.elapsed(),
            }),
            BlockEnd::Waiting(checkpoint, pending) => {
                let checkpoint = serde_json::to_value(&*checkpoint).unwrap_or(Value::Null);
                crate::call::WorkEnd::Stopped(checkpoint, pending)
            }
        };
        crate::call::Finished {
            step: self.step,
            item: None,
            nested: run.records,
            end,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, ok: bool, skipped: bool) -> Record {
        Record {
            step_id: id.to_owned(),
            ok,
            skipped,
            result: None,
            reason: None,
            error: (!ok && !skipped).then(|| {
                Box::new(StepError {
                    code: "E_TOOL".into(),
                    message: "x".into(),
                    details: None,
                })
            }),
            attempts: 1,
            duration_ms: 0,
            upstream: None,
        }
    }

    #[test]
    fn approval_keys_drop_run_numbers_and_recovery_keys_count_failures() {
        let deploy = CallPath::step("review").then("deploy", 3);
        assert_eq!(deploy.key(), "review/deploy");
        let nested = CallPath::step("outer").then("inner", 2).then("deploy", 1);
        assert_eq!(nested.key(), "outer/inner/deploy");
        let check = CallPath::step("review").then("check", 2);
        assert_eq!(recovery_key(&check, 0), "review/check#2@1");
        assert_eq!(recovery_key(&check, 1), "review/check#2@2");
    }

    #[test]
    fn block_states_follow_records_and_checkpoints() {
        let records = [
            record("a/x#1", true, false),
            record("a/inner#1/y#1", true, false),
            record("a/inner#1", true, false),
            record("a", true, false),
            record("b/x#1", false, false),
            record("b", false, false),
            record("c/x#1", true, false),
            record("d", false, true),
        ];
        let checkpoints = BTreeMap::from([(
            "c".to_owned(),
            json!({"node": "inner", "steps": 1, "visits": {}, "results": {},
                   "inner": {"node": "deploy", "steps": 0, "visits": {}, "results": {}}}),
        )]);
        let states = block_states(["a", "b", "c", "d", "e"], &records, &checkpoints);
        let summary: Vec<(BlockPhase, Option<&str>)> = states
            .iter()
            .map(|s| (s.state, s.node.as_deref()))
            .collect();
        assert_eq!(
            summary,
            [
                (BlockPhase::Done, Some("inner")),
                (BlockPhase::Failed, Some("x")),
                (BlockPhase::Waiting, Some("inner/deploy")),
                // Skipped without `upstream`: a step the run has not started yet.
                (BlockPhase::Ready, None),
                (BlockPhase::Ready, None),
            ]
        );
    }
}
