//! The one admission path of every call, whether a step's, a map item's or a block node's:
//! its arguments resolved and checked against the tool's schema (by the caller, which knows the
//! scope), then its approval, then the plan's guards. And the one way a call that ran, or was
//! refused, becomes a record.

use std::sync::Arc;

use plan_types::{Approvals, PendingApproval, Questions, StepError, Verdict};
use serde_json::Value;

use crate::guard::Guard;
use crate::redact::Redactor;
use plan_ports::codes;

/// What admission decided about a call.
pub(crate) enum Admission {
    /// Make the call with these arguments. `approvals_off`: it is a high-risk call that
    /// runs only because approvals are off (its `tool.called` event says so). `asked`: the
    /// questions it asked a person before.
    Call {
        args: Value,
        approvals_off: bool,
        asked: Asked,
    },
    /// Do not make it: it fails with this error (its arguments, a rejection, a guard).
    Fail(StepError),
    /// Do not make it yet: it waits for a decision.
    Wait(PendingApproval),
}

/// What a call carries of the questions it asked a person before.
#[derive(Clone)]
pub(crate) struct Asked {
    /// The answers given (`ToolContext::answers`), none for most calls.
    pub(crate) answers: Option<Arc<[plan_ports::Answer]>>,
    /// The number its next question takes (`ID@input#N`): one after every question of it kept,
    /// so a refused or outdated one is never asked over.
    pub(crate) next: usize,
}

impl Asked {
    /// A call that asked nothing before.
    pub(crate) fn nothing() -> Self {
        Asked {
            answers: None,
            next: 1,
        }
    }
}

/// What admission needs to know of a call besides its arguments.
pub(crate) struct Gate<'a> {
    /// The tool (none for a block step, which is not a call).
    pub(crate) tool: Option<&'a str>,
    /// For a `risk: high` call: the key its decision is kept under, and the map item's id
    /// when it is one (an item's own decision wins over its step's).
    pub(crate) approval: Option<(&'a str, Option<&'a str>)>,
    /// The id a pending approval is listed under.
    pub(crate) waits_as: &'a str,
    /// The tool's argument schema: arguments a person's answer changed are checked again.
    pub(crate) schema: Option<&'a jsonschema::Validator>,
    /// Whether a person's answer may change its arguments (not a task check's program).
    pub(crate) answerable: bool,
}

/// Admits a call whose arguments resolved to `resolved`.
pub(crate) fn admit(
    resolved: Result<Value, StepError>,
    gate: &Gate<'_>,
    approvals: &Approvals,
    guard: Option<&Guard>,
    redactor: &Redactor,
) -> Admission {
    let mut args = match resolved {
        Ok(args) => args,
        Err(error) => return Admission::Fail(error),
    };
    let mut approvals_off = false;
    if let Some((key, item)) = gate.approval {
        // As a person saw them when asked: an approval is of these arguments.
        let mut shown = args.clone();
        redactor.value(&mut shown);
        match approvals.decision_on(key, item, Some(&shown)) {
            Verdict::Approved(None) => {}
            Verdict::Approved(Some(input)) => {
                // An answer that does not fit is asked again, not a failure: the person gives
                // another (or approves without one), and nothing was called.
                if let Err(error) = overlay(&mut args, input, gate) {
                    let mut reason = format!(
                        "the answer given with the approval does not fit: {}; approve it again with another answer, or without one",
                        error.message
                    );
                    redactor.string(&mut reason);
                    return Admission::Wait(PendingApproval {
                        step_id: gate.waits_as.to_owned(),
                        tool: gate.tool.filter(|t| !t.is_empty()).map(str::to_owned),
                        args: Some(shown),
                        reason: Some(reason),
                        input_schema: None,
                    });
                }
            }
            Verdict::Off => approvals_off = true,
            Verdict::Rejected(reason) => {
                return Admission::Fail(StepError::new(
                    codes::E_REJECTED,
                    format!("the call was not approved: {reason}"),
                ));
            }
            Verdict::Undecided => {
                // The caller keeps it unsettled, so nothing that depends on it starts.
                return Admission::Wait(PendingApproval {
                    step_id: gate.waits_as.to_owned(),
                    tool: gate.tool.filter(|t| !t.is_empty()).map(str::to_owned),
                    args: Some(shown),
                    reason: None,
                    input_schema: None,
                });
            }
        }
    }
    // Questions the call asked a person before (an MCP server's elicitation): it is made
    // again only once each is answered, and given the answers. A question asked of another
    // tool (the plan changed since: `resume --plan`) is not this call's: it asks anew.
    let mut asked = Asked::nothing();
    if approvals.has_questions() {
        asked.next = approvals.next_question(gate.waits_as);
        // As the call is now, as a question keeps it: an answer is for the same tool called
        // with the same arguments (as an approval is), else the call asks anew.
        let mut shown = args.clone();
        redactor.value(&mut shown);
        let ours = |question: &PendingApproval| {
            question.tool.as_deref() == gate.tool
                && question.args.as_ref().is_none_or(|asked| *asked == shown)
        };
        let mut given = Vec::new();
        for (question, stands) in approvals.questions_of(gate.waits_as) {
            if !ours(question) {
                continue;
            }
            match stands {
                Questions::Answered(answer) => given.push(plan_ports::Answer {
                    question: question.question_text().unwrap_or_default().to_owned(),
                    answer: answer.clone(),
                }),
                Questions::Waiting => return Admission::Wait(question.clone()),
                Questions::Refused(reason) => {
                    return Admission::Fail(StepError::new(
                        codes::E_REJECTED,
                        format!("the input the call asked for was refused: {reason}"),
                    ));
                }
            }
        }
        asked.answers = (!given.is_empty()).then(|| Arc::from(given));
    }
    if let (Some(guard), Some(tool)) = (guard, gate.tool)
        && let Err(error) = guard.admit(tool, &args)
    {
        return Admission::Fail(error);
    }
    Admission::Call {
        args,
        approvals_off,
        asked,
    }
}

/// The question a call that asked a person for input waits on: its `n`th, kept as
/// `ID@input#N`, with what it asked and the schema of the answer. Only a tool's own question
/// (`E_INPUT_REQUIRED` whose `details` give `message` and `requested_schema`, as the MCP
/// client's do) is one: the code alone, which any tool can give (`fail`), is a failure.
pub(crate) fn input_request(
    id: &str,
    n: usize,
    tool: &str,
    error: &StepError,
) -> Option<PendingApproval> {
    if error.code != codes::E_INPUT_REQUIRED {
        return None;
    }
    let details = error.details.as_ref()?;
    let message = details.get("message")?.as_str()?;
    let schema = details.get("requested_schema").filter(|s| s.is_object())?;
    Some(PendingApproval::question(
        id,
        n,
        tool,
        details.get("arguments").cloned(),
        message,
        schema.clone(),
    ))
}

/// The most bytes of a question's schema (as JSON) kept; a larger one is kept as
/// `{"type": "object"}` (the server checks the answer anyway).
const MOST_SCHEMA: usize = 65_536;

/// A question as it is kept and shown: its secrets taken out first, then its message cut at
/// [`plan_types::MOST_QUESTION`] bytes and its schema bounded (a server may ask anything).
pub(crate) fn kept_question(mut question: PendingApproval, redactor: &Redactor) -> PendingApproval {
    if let Some(reason) = &mut question.reason {
        redactor.string(reason);
        if let Some(text) = reason.strip_prefix(plan_types::QUESTION_REASON) {
            *reason = format!(
                "{}{}",
                plan_types::QUESTION_REASON,
                plan_types::kept_question_text(text)
            );
        }
    }
    if let Some(args) = &mut question.args {
        redactor.value(args);
    }
    if let Some(schema) = &mut question.input_schema {
        redactor.value(schema);
        if schema.to_string().len() > MOST_SCHEMA {
            *schema = serde_json::json!({"type": "object"});
        }
    }
    question
}

/// Overlays the answer a person gave at the approval on a call's arguments, as the map-style
/// executor's confirm answers are: each of its fields replaces the argument of that name (or
/// adds it). What comes of it is checked against the tool's schema again.
fn overlay(args: &mut Value, input: &Value, gate: &Gate<'_>) -> Result<(), StepError> {
    let tool = gate.tool.unwrap_or("");
    if !gate.answerable {
        return Err(StepError::new(
            codes::E_ARGS_INVALID,
            "an answer was given at the approval of a check, whose program is the plan's own and takes none",
        ));
    }
    let (Value::Object(args), Value::Object(input)) = (&mut *args, input) else {
        return Err(StepError::new(
            codes::E_ARGS_INVALID,
            "the answer given at the approval is not an object of arguments, or the call's arguments are not an object",
        ));
    };
    for (name, value) in input {
        args.insert(name.clone(), value.clone());
    }
    let Some(schema) = gate.schema else {
        return Ok(());
    };
    plan_ports::schema::check(schema, tool, &Value::Object(args.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_question_is_redacted_before_it_is_cut() {
        let redactor = Redactor::new(["s3cr3tValueXYZ"]);
        // The secret straddles the cut: cut first, its first bytes would be kept.
        let message = format!("{}s3cr3tValueXYZ confirm?", "A".repeat(4086));
        let question = PendingApproval::question(
            "ask",
            1,
            "srv.ask",
            Some(serde_json::json!({"name": "s3cr3tValueXYZ"})),
            &message,
            serde_json::json!({"type": "object", "description": "x".repeat(70_000)}),
        );
        let kept = kept_question(question, &redactor);
        let reason = kept.reason.unwrap();
        assert!(
            !reason.contains("s3cr3"),
            "{}",
            &reason[reason.len() - 40..]
        );
        assert!(reason.ends_with('…') || reason.ends_with("confirm?"));
        assert!(reason.len() <= plan_types::QUESTION_REASON.len() + plan_types::MOST_QUESTION + 3);
        assert_eq!(kept.args, Some(serde_json::json!({"name": REDACTED_TEXT})));
        assert_eq!(
            kept.input_schema,
            Some(serde_json::json!({"type": "object"}))
        );
    }

    const REDACTED_TEXT: &str = plan_types::REDACTED;
}
