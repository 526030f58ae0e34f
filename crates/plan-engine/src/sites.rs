//! Every call a compiled program can make, with where the plan writes it: what a policy is
//! checked against (`Program::call_sites`, in `program.rs`; this module imports none of the
//! step kinds' modules, which each add their own calls). Built from the compiled program, so no kind of
//! call (a map item, a block node, a task's checks, `context_update`) can be left out by a
//! caller that looks only at the steps' `tool`.

use std::sync::Arc;

use plan_graph::{PlanPath, Risk};

use plan_ports::Tool;

/// What kind of call a [`CallSite`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum CallKind {
    /// A step's call.
    Step,
    /// A map step's call, made once per item.
    MapItem,
    /// A node of a block step (nested blocks' included).
    BlockNode,
    /// A task's `implement` call, in its worktree.
    Implement,
    /// A task's `feedback` call.
    Feedback,
    /// One of a task's `verify` checks: an `exec` call in its worktree.
    Check,
    /// The workspace's `context_update` call, after the last task.
    ContextUpdate,
    /// One of the workspace's `verify_after_merge` checks: an `exec` call in the trial
    /// checkout of a task merged into the base.
    MergeCheck,
}

impl CallKind {
    /// How the plan format names this kind of call, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            CallKind::Step => "step",
            CallKind::MapItem => "map step (one call per item)",
            CallKind::BlockNode => "block node",
            CallKind::Implement => "task's `implement`",
            CallKind::Feedback => "task's `feedback`",
            CallKind::Check => "task's `verify` check",
            CallKind::ContextUpdate => "workspace's `context_update`",
            CallKind::MergeCheck => "workspace's `verify_after_merge` check",
        }
    }
}

/// One call a program can make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallSite {
    /// Where the plan writes it: `steps[2]`, `steps[1].block.nodes.deploy`,
    /// `steps[3].task.verify[0]`, `workspace.context_update`.
    pub path: PlanPath,
    /// The step it belongs to (empty for `context_update`).
    pub step: Arc<str>,
    /// What kind of call it is.
    pub kind: CallKind,
    /// The tool as the plan names it (`exec`, `fs.read_file`, or a bare MCP tool name).
    pub tool: Arc<str>,
    /// The tool's own name and where it comes from (`builtin`, an MCP server's name), so that
    /// `SOURCE.NAME` names it whatever the plan wrote.
    pub source: String,
    /// The tool's own name.
    pub name: String,
    /// The tool's own risk, whatever the plan says of the call (a plan can set `risk: low`
    /// on a call of a high-risk tool; a policy judges the tool).
    pub risk: Risk,
    /// Whether the call waits for an approval before it is made (`risk: high`, the plan's
    /// where it says, else the tool's).
    pub gated: bool,
}

impl CallSite {
    /// `SOURCE.NAME` (`builtin.exec`, `fs.read_file`): an MCP tool's name is already
    /// `SERVER.tool`, and is not qualified twice.
    pub fn qualified(&self) -> String {
        qualified(&self.source, &self.name)
    }
}

/// A tool's name qualified by where it comes from (`builtin.exec`); a name that already starts
/// with `SOURCE.` (an MCP tool's `fs.read_file`) as it is.
pub fn qualified(source: &str, name: &str) -> String {
    if name
        .strip_prefix(source)
        .is_some_and(|rest| rest.starts_with('.'))
    {
        name.to_owned()
    } else {
        format!("{source}.{name}")
    }
}

/// Collects call sites.
pub(crate) struct Sites {
    pub(crate) sites: Vec<CallSite>,
}

impl Sites {
    pub(crate) fn push(
        &mut self,
        path: PlanPath,
        step: &Arc<str>,
        kind: CallKind,
        (tool_name, tool): (&str, &dyn Tool),
        gated: bool,
    ) {
        let info = tool.info();
        self.sites.push(CallSite {
            path,
            step: step.clone(),
            kind,
            tool: Arc::from(tool_name),
            source: info.source,
            name: info.name,
            risk: info.risk,
            gated,
        });
    }
}
