//! What kind of step a compiled step is, and the one place that asks each kind what it does:
//! its calls' approvals, its call sites, the tool of a call inside it, its arguments' checks.
//! A new kind of step is a variant here, its own module (as `block.rs` and `task.rs` are),
//! and its case in `Program::compile`; the scheduler asks [`Action`] and never matches on
//! kinds itself, except to start a step's work (`run.rs`, `Scheduler::prepare`).

use std::sync::Arc;

use plan_graph::{Issue, PlanPath};
use plan_ports::Tool;
use plan_vars::{Scope, ValueTemplate};

use crate::block::CompiledBlock;
use crate::sites::{CallKind, Sites};
use crate::task::CompiledTask;

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
