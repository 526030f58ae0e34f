//! What kind of step a compiled step is, and the one place that asks each kind what it does:
//! its calls' approvals, its call sites, the tool of a call inside it, its arguments' checks,
//! and its work once the scheduler starts it ([`Action::start`], [`Started::spawn`]).
//! A new kind of step is a variant here, its own module (as `block.rs` and `task.rs` are:
//! its compiled form, its run and its `execute`), and its case in `Program::compile`; the
//! scheduler asks [`Action`] and never matches on kinds itself.

use std::collections::BTreeMap;
use std::sync::Arc;

use plan_graph::{Issue, PlanPath};
use plan_ports::Tool;
use plan_types::Approvals;
use plan_vars::{Scope, ValueTemplate};
use serde_json::Value;
use tokio::task::JoinSet;

use crate::block::{BlockCall, Checkpoint, CompiledBlock, NodeDone};
use crate::call::{CallContext, Finished, StepCall, ToolCall};
use crate::sites::{CallKind, Sites};
use crate::task::{CompiledTask, TaskRun};

/// What a step does: call a tool, run a block, or carry out a coding task in a worktree.
pub(crate) enum Action {
    Tool(Arc<dyn Tool>),
    Block(Arc<CompiledBlock>),
    Task(Arc<CompiledTask>),
}

/// The parts of a compiled step a kind's questions need.
pub(crate) struct StepView<'a> {
    pub(crate) id: &'a Arc<str>,
    pub(crate) tool_name: &'a Arc<str>,
    pub(crate) gated: bool,
    pub(crate) is_map: bool,
    pub(crate) args: &'a ValueTemplate,
    pub(crate) schema: Option<&'a jsonschema::Validator>,
    pub(crate) retry: &'a plan_graph::RetryPolicy,
    pub(crate) timeout: Option<std::time::Duration>,
}

impl Action {
    /// The tool a plain step calls (a block or a task calls tools inside itself).
    pub(crate) fn tool(&self) -> Option<&Arc<dyn Tool>> {
        match self {
            Action::Tool(tool) => Some(tool),
            Action::Block(_) | Action::Task(_) => None,
        }
    }

    pub(crate) fn is_block(&self) -> bool {
        matches!(self, Action::Block(_))
    }

    pub(crate) fn is_task(&self) -> bool {
        matches!(self, Action::Task(_))
    }

    /// The calls inside the step that wait for an approval: block nodes' keys
    /// (`review/deploy`), a task's gated calls.
    pub(crate) fn gated_inside(&self, step_id: &str) -> Vec<String> {
        let step = plan_types::CallPath::step(step_id);
        match self {
            Action::Tool(_) => Vec::new(),
            Action::Block(block) => block.gated_nodes(&step),
            Action::Task(task) => task.gated_calls(&step),
        }
    }

    /// The tool of the call at `inside` (a node's path, a task's call), for a call inside
    /// the step.
    pub(crate) fn tool_at(&self, inside: &[plan_types::Segment]) -> Option<&str> {
        match self {
            Action::Tool(_) => None,
            Action::Block(block) => block.tool_at(inside),
            Action::Task(task) => task.tool_at(inside),
        }
    }

    /// Every call the step can make, with where the plan makes it.
    pub(crate) fn call_sites(&self, step: &StepView<'_>, at: PlanPath, sites: &mut Sites) {
        match self {
            Action::Tool(tool) => {
                let kind = if step.is_map {
                    CallKind::MapItem
                } else {
                    CallKind::Step
                };
                sites.push(at, step.id, kind, (step.tool_name, &**tool), step.gated);
            }
            Action::Block(block) => block.call_sites(at.key("block"), step.id, sites),
            Action::Task(task) => task.call_sites(at.key("task"), step.id, sites),
        }
    }

    /// Arguments that break their tool's schema with what `scope` knows before the run.
    pub(crate) fn check_arguments(
        &self,
        step: &StepView<'_>,
        scope: &Scope<'_>,
        at: PlanPath,
        issues: &mut Vec<Issue>,
    ) {
        match self {
            Action::Tool(tool) => {
                if let Some(schema) = step.schema {
                    crate::schema::argument_issues(
                        &**tool,
                        step.tool_name,
                        schema,
                        step.args,
                        scope,
                        at.key("args"),
                        issues,
                    );
                }
            }
            Action::Block(block) => block.check_arguments(scope, at.key("block"), issues),
            // Its arguments read `${task.*}`, known only as it runs.
            Action::Task(_) => {}
        }
    }
}

/// A step's work as the scheduler starts it: its call admitted (for a block, its input).
pub(crate) struct StepStart {
    pub(crate) step: usize,
    pub(crate) item: Option<usize>,
    /// The call's id (the step's, or a map item's).
    pub(crate) id: Arc<str>,
    pub(crate) args: Value,
    /// A high-risk call made only because approvals are off.
    pub(crate) approvals_off: bool,
    /// The questions the call asked a person before.
    pub(crate) asked: crate::admit::Asked,
    pub(crate) context: CallContext,
}

/// What a started step takes from its run (the scheduler's, asked only by the kinds that need
/// it: a plain call takes none of the run's variables).
pub(crate) trait RunShares {
    /// The run's variables as they are now (a block or task reads them when it starts).
    fn variables(&self) -> BTreeMap<String, Arc<Value>>;
    /// The plan's `env:` values.
    fn environment(&self) -> BTreeMap<String, Value>;
    /// The decisions on approvals so far.
    fn approvals(&self) -> Arc<Approvals>;
    /// The git repository of task steps, if the plan has one.
    fn workspace(&self) -> Option<Arc<dyn crate::task::Workspace>>;
    /// Held while a task merges: one merge at a time.
    fn merges(&self) -> Arc<tokio::sync::Mutex<()>>;
    /// Where finished node runs and task calls go to be committed as they happen (only with
    /// a journal).
    fn progress(&self) -> Option<tokio::sync::mpsc::UnboundedSender<NodeDone>>;
    /// The attempts call `id` made before it was run again.
    fn earlier_attempts(&self, id: &str) -> u32;
    /// Where step `step` stood when an earlier attempt at the run stopped, if it had started
    /// (the records of the calls it made then are taken back first).
    fn take_checkpoint(&mut self, step: usize) -> Option<Value>;
}

impl Action {
    /// The work of `step`, started as `start` says, with what it takes from `run`.
    pub(crate) fn start(
        &self,
        step: &StepView<'_>,
        start: StepStart,
        run: &mut impl RunShares,
    ) -> Started {
        let StepStart {
            step: at,
            item,
            id,
            args,
            approvals_off,
            asked,
            context,
        } = start;
        match self {
            Action::Tool(tool) => Started::Call(StepCall {
                step: at,
                item,
                context,
                call: ToolCall {
                    tool_name: step.tool_name.clone(),
                    tool: tool.clone(),
                    args,
                    retry: step.retry.clone(),
                    timeout: step.timeout,
                    working_dir: None,
                    approvals_off,
                    answers: asked.answers,
                    next_question: asked.next,
                    earlier: run.earlier_attempts(&id),
                    step_id: id,
                },
            }),
            // A task reads the variables as they are when it starts, as a block does.
            Action::Task(task) => Started::Task(Box::new(TaskRun {
                step: at,
                step_id: id,
                context,
                task: task.clone(),
                vars: run.variables(),
                env: run.environment(),
                approvals: run.approvals(),
                workspace: run.workspace(),
                merges: run.merges(),
                // The records of the calls it made before it stopped come first.
                from: run.take_checkpoint(at),
                progress: run.progress(),
                shown: None,
                records: Vec::new(),
            })),
            // A block reads the variables as they are when it starts (its ancestors' binds).
            Action::Block(block) => Started::Block(BlockCall {
                step: at,
                context,
                step_id: id,
                block: block.clone(),
                input: args,
                vars: run.variables(),
                env: run.environment(),
                timeout: step.timeout,
                approvals: run.approvals(),
                progress: run.progress(),
                // A checkpoint this build cannot read runs its block from the entry point.
                from: run
                    .take_checkpoint(at)
                    .and_then(|value| serde_json::from_value::<Checkpoint>(value).ok())
                    .map(Box::new),
            }),
        }
    }
}

/// Work the scheduler started: one tool call, a whole block, or a whole task.
pub(crate) enum Started {
    Call(StepCall),
    Block(BlockCall),
    Task(Box<TaskRun>),
}

impl Started {
    /// Runs the work to its end (a block or task may end waiting) as a task of `running`.
    /// Each kind spawns its own future: one future for all three would be as large as a
    /// task's, for every plain call (a 10,000-step run was 9% slower and 3 MiB larger so).
    pub(crate) fn spawn(self, running: &mut JoinSet<Finished>) -> tokio::task::AbortHandle {
        match self {
            Started::Call(call) => running.spawn(call.execute()),
            Started::Block(block) => running.spawn(block.execute()),
            Started::Task(task) => running.spawn(task.execute()),
        }
    }
}
