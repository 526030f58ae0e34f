//! Approvals: a `risk: high` step or map item runs only once approved. Without a decision it
//! waits, the run goes on with everything that does not depend on it, and then halts
//! `WAITING`; the caller collects decisions and resumes.

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The id under which the approval of a whole plan (`--mode approval`) is kept.
pub const PLAN_APPROVAL: &str = "__plan__";

/// A call that waits for an approval: a `risk: high` step or map item, with the arguments it
/// would be called with; or, with `step_id` [`PLAN_APPROVAL`], the whole plan (`--mode
/// approval`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingApproval {
    /// The step or map item (`deploy`, `deploy[prod]`), or [`PLAN_APPROVAL`].
    pub step_id: String,
    /// The tool it would call (none for the plan, or a block step).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The resolved arguments (redacted), or a block's input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Value>,
    /// Why it waits, when not for a `risk: high` call: a block node that failed under
    /// `on_failure: wait` (approve to run it again, reject to fail the block).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Decisions on approvals, keyed by step id or map item id (`deploy`, `deploy[prod]`). A
/// step's decision covers its items; an item's own decision wins over its step's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Approvals {
    approved: HashSet<String>,
    rejected: HashMap<String, String>,
    /// High-risk calls nobody decided on run without waiting.
    off: bool,
}

/// What was decided about one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict<'a> {
    /// It may run.
    Approved,
    /// Refused, with the reason given.
    Rejected(&'a str),
    /// Nobody decided yet: it waits.
    Undecided,
    /// Nobody decided, and approvals are off: it runs, recorded as having run so.
    Off,
}

impl Approvals {
    /// No decisions.
    pub fn new() -> Self {
        Approvals::default()
    }

    /// Approves a step, a map item, or with [`PLAN_APPROVAL`] the plan.
    pub fn approve(&mut self, id: impl Into<String>) {
        let id = id.into();
        self.rejected.remove(&id);
        self.approved.insert(id);
    }

    /// Rejects a step or map item: it fails with `E_REJECTED` and `reason`.
    pub fn reject(&mut self, id: impl Into<String>, reason: impl Into<String>) {
        let id = id.into();
        self.approved.remove(&id);
        self.rejected.insert(id, reason.into());
    }

    /// Turns approvals off: a high-risk call nobody decided on runs at once (a rejection still
    /// stops it).
    pub fn turn_off(&mut self) {
        self.off = true;
    }

    /// Whether approvals are off.
    pub fn are_off(&self) -> bool {
        self.off
    }

    /// Whether the plan itself is approved (`--mode approval`).
    pub fn plan_approved(&self) -> bool {
        self.approved.contains(PLAN_APPROVAL)
    }

    /// The decision on a step's call (`item` is the map item's id, if it is one).
    pub fn decision(&self, step: &str, item: Option<&str>) -> Verdict<'_> {
        for id in item.into_iter().chain([step]) {
            if self.approved.contains(id) {
                return Verdict::Approved;
            }
            if let Some(reason) = self.rejected.get(id) {
                return Verdict::Rejected(reason);
            }
        }
        if self.off {
            Verdict::Off
        } else {
            Verdict::Undecided
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_items_own_decision_wins_over_its_steps() {
        let mut approvals = Approvals::new();
        approvals.approve("deploy");
        approvals.reject("deploy[prod]", "not on a Friday");
        assert_eq!(
            approvals.decision("deploy", Some("deploy[dev]")),
            Verdict::Approved
        );
        assert_eq!(
            approvals.decision("deploy", Some("deploy[prod]")),
            Verdict::Rejected("not on a Friday")
        );
        assert_eq!(approvals.decision("other", None), Verdict::Undecided);
        approvals.turn_off();
        assert_eq!(approvals.decision("other", None), Verdict::Off);
        assert_eq!(
            approvals.decision("deploy", Some("deploy[prod]")),
            Verdict::Rejected("not on a Friday")
        );
    }

    #[test]
    fn the_latest_decision_on_an_id_counts() {
        let mut approvals = Approvals::new();
        approvals.reject("a", "no");
        approvals.approve("a");
        assert_eq!(approvals.decision("a", None), Verdict::Approved);
        assert!(!approvals.plan_approved());
        approvals.approve(PLAN_APPROVAL);
        assert!(approvals.plan_approved());
    }
}
