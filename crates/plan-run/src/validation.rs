//! What validating a plan found, as data: the object `validate --json` prints and
//! `mcp serve`'s `plan_validate` answers.

use plan_graph::{Issue, Source};
use serde::Serialize;

use crate::{Author, Policy, Prepared};

/// One problem of a plan, with its place in the text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IssueReport {
    /// `error` or `warning`.
    pub severity: &'static str,
    /// The stable code (`plan::cycle`).
    pub code: &'static str,
    /// What is wrong.
    pub message: String,
    /// 1-based; none when the issue has no place in the text.
    pub line: Option<usize>,
    /// 1-based; none when the issue has no place in the text.
    pub column: Option<usize>,
    /// The label at the place.
    pub label: String,
    /// How to fix it.
    pub help: Option<String>,
}

impl IssueReport {
    /// `issue` of the plan `source` holds.
    pub fn of(source: &Source, issue: &Issue) -> Self {
        let position = source.diagnostic(issue).position();
        IssueReport {
            severity: if issue.is_error() { "error" } else { "warning" },
            code: issue.code,
            message: issue.message.clone(),
            line: position.map(|(line, _)| line),
            column: position.map(|(_, column)| column),
            label: issue.label.clone(),
            help: issue.help.clone(),
        }
    }
}

/// Whether a plan is valid, and every problem found, errors apart from warnings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Validation {
    /// No errors.
    pub valid: bool,
    /// The plan's id (a valid plan's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan_id: Option<String>,
    /// How many steps it has (a valid plan's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steps: Option<usize>,
    /// Its calls that wait for an approval (a valid plan's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub needs_approval: Option<Vec<String>>,
    /// What makes it invalid.
    pub errors: Vec<IssueReport>,
    /// What may be a mistake.
    pub warnings: Vec<IssueReport>,
}

impl Validation {
    /// A plan that prepared, with its warnings.
    pub fn of(prepared: &Prepared) -> Self {
        let source = &prepared.loaded.source;
        Validation {
            valid: true,
            plan_id: Some(prepared.program.plan_id().to_owned()),
            steps: Some(prepared.program.len()),
            needs_approval: Some(prepared.program.gated_steps()),
            errors: Vec::new(),
            warnings: (prepared.loaded.warnings.iter())
                .map(|issue| IssueReport::of(source, issue))
                .collect(),
        }
    }

    /// A plan that prepared, as `author`'s plan would run: held to `policy` when a run of it
    /// is (another author's plan always; the operator's under a policy the operator gives),
    /// so that what the policy refuses is an error here too, at its place.
    pub fn judged(prepared: &Prepared, author: Author, policy: Option<&Policy>) -> Self {
        match policy.map(|policy| policy.judge(author, prepared)) {
            None | Some(Ok(())) => Validation::of(prepared),
            Some(Err(refused)) => {
                let mut issues = refused.issues();
                issues.extend(prepared.loaded.warnings.iter().cloned());
                Validation::invalid(&prepared.loaded.source, &issues)
            }
        }
    }

    /// A plan whose text has these issues (at least one error).
    pub fn invalid(source: &Source, issues: &[Issue]) -> Self {
        let (errors, warnings): (Vec<_>, Vec<_>) = issues
            .iter()
            .map(|issue| IssueReport::of(source, issue))
            .partition(|report| report.severity == "error");
        Validation {
            valid: false,
            plan_id: None,
            steps: None,
            needs_approval: None,
            errors,
            warnings,
        }
    }

    /// Every issue's help, as `help` rewrites it (a front-end adds its own way to fix it).
    pub fn reword(&mut self, help: impl Fn(&IssueReport) -> Option<String>) {
        for report in self.errors.iter_mut().chain(&mut self.warnings) {
            report.help = help(report);
        }
    }
}
