//! Approvals: a `risk: high` step or map item runs only once approved. Without a decision it
//! waits, the run goes on with everything that does not depend on it, and then halts
//! `WAITING`; the caller collects decisions and resumes.

use std::collections::HashMap;

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
    /// `on_failure: wait` (approve to run it again, reject to fail the block), or a tool that
    /// asked for input (`input required: MESSAGE`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When a tool asked a person for input (an MCP server's elicitation): the JSON Schema of
    /// the answer it asked for. The person answers with `approve RUN ID --input JSON`, or
    /// refuses with `reject`; the call is then made again and given the answer when it asks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<Value>,
}

/// The id under which the `n`th question (from 1) call `id` asked a person is kept:
/// `ID@input#N` (`deploy@input#1`, `each-0@input#1`, `review/draft#1@input#2`). `@` is in no
/// node name, and validation refuses a step id holding `@input#`, so no call has such an id.
pub fn question_key(id: &str, n: usize) -> String {
    format!("{id}{QUESTION_MARK}{n}")
}

/// Reads a question's id ([`question_key`]): the call that asked, and the question's number.
pub fn question_of(id: &str) -> Option<(&str, usize)> {
    let (call, n) = id.rsplit_once(QUESTION_MARK)?;
    let n = n.parse().ok().filter(|n| *n > 0 && !call.is_empty())?;
    Some((call, n))
}

/// What separates a question's number from the call that asked it ([`question_key`]).
pub const QUESTION_MARK: &str = "@input#";

impl PendingApproval {
    /// A question call `id` asked a person (its `n`th), with tool `tool` and the arguments
    /// `args` it was called with: what it asked (`message`) and the schema of the answer.
    pub fn question(
        id: &str,
        n: usize,
        tool: &str,
        args: Option<Value>,
        message: &str,
        schema: Value,
    ) -> Self {
        PendingApproval {
            step_id: question_key(id, n),
            tool: Some(tool.to_owned()),
            args,
            reason: Some(format!("{QUESTION_REASON}{message}")),
            input_schema: Some(schema),
        }
    }

    /// Whether it is a question a call asked a person (answered with `approve --input`,
    /// never approved), rather than a call, a block node's re-run or the plan waiting.
    pub fn is_question(&self) -> bool {
        self.input_schema.is_some()
    }

    /// What a question asked (its `reason` after [`QUESTION_REASON`]), redacted as it is kept.
    pub fn question_text(&self) -> Option<&str> {
        self.reason.as_deref()?.strip_prefix(QUESTION_REASON)
    }
}

/// How a question's `reason` starts, before what it asked.
pub const QUESTION_REASON: &str = "input required: ";

/// What replaces a secret, wherever a run shows or keeps something.
pub const REDACTED: &str = "[redacted]";

/// The most bytes of a question's message kept; the rest is cut, with `…`.
pub const MOST_QUESTION: usize = 4096;

/// A question's message as it is kept, its secrets already taken out: cut at
/// [`MOST_QUESTION`] bytes (on a character's boundary, and never inside a [`REDACTED`]), with
/// `…`.
pub fn kept_question_text(redacted: &str) -> String {
    if redacted.len() <= MOST_QUESTION {
        return redacted.to_owned();
    }
    let mut end = MOST_QUESTION;
    while !redacted.is_char_boundary(end) {
        end -= 1;
    }
    // A cut inside a `[redacted]` keeps all of it: what is kept still reads as redacted.
    if let Some(at) = redacted[..end].rfind('[')
        && redacted[at..].starts_with(REDACTED)
        && at + REDACTED.len() > end
    {
        end = at + REDACTED.len();
    }
    format!("{}…", &redacted[..end])
}

/// Whether a server's question `message` is the one kept as `kept` (by
/// [`kept_question_text`], after redaction): each [`REDACTED`] in `kept` stands for any text,
/// and a cut one (its kept start as long as a cut leaves it) for the rest of `message` too. A
/// question whose text held a secret is still the same.
pub fn same_question(kept: &str, message: &str) -> bool {
    let (kept, cut) = match kept.strip_suffix('…') {
        // A character is at most 4 bytes: a cut start is within 3 of the most kept.
        Some(start) if start.len() + 3 >= MOST_QUESTION => (start, true),
        _ => (kept, false),
    };
    let mut parts = kept.split(REDACTED);
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = message.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    for (k, part) in parts.iter().enumerate() {
        if k + 1 == parts.len() && !cut {
            // The secret is at least a character; what follows it ends the message.
            return rest.len() > part.len() && rest.ends_with(part);
        }
        // A secret of one character at least, then the part.
        let Some(skip) = rest.chars().next().map(char::len_utf8) else {
            return false;
        };
        let Some(at) = rest[skip..].find(part) else {
            return false;
        };
        rest = &rest[skip + at + part.len()..];
    }
    cut || rest.is_empty()
}

/// Where one question a call asked stands ([`Approvals::questions_of`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Questions<'a> {
    /// Answered, with this answer.
    Answered(&'a Value),
    /// Waiting for its answer.
    Waiting,
    /// Refused, with the reason given.
    Refused(&'a str),
}

/// Decisions on approvals, keyed by step id or map item id (`deploy`, `deploy[prod]`). A
/// step's decision covers its items; an item's own decision wins over its step's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Approvals {
    /// Approved ids, each with what it was approved for.
    approved: HashMap<String, Approval>,
    rejected: HashMap<String, String>,
    /// Questions calls asked a person (`ID@input#N`): the answer given, the refusal, or the
    /// request while it waits for either.
    inputs: HashMap<String, Input>,
    /// High-risk calls nobody decided on run without waiting.
    off: bool,
}

#[derive(Debug, Clone, PartialEq)]
enum Input {
    Waiting(PendingApproval),
    Answered(PendingApproval, Value),
    Refused(PendingApproval, String),
}

// `Value` is `Eq`; `PendingApproval` derives only `PartialEq` (its fields are all `Eq` too).
impl Eq for Input {}

/// One approval.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Approval {
    /// The arguments (redacted) it was approved with when a person saw them (`None`: whatever
    /// its arguments, as `run --approve` does).
    args: Option<Value>,
    /// The answer the person gave with it (`approve --input`): an object whose fields replace
    /// the call's arguments of the same names.
    input: Option<Value>,
}

/// What was decided about one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict<'a> {
    /// It may run; with the answer given at the approval, if one was (overlaid on its
    /// arguments).
    Approved(Option<&'a Value>),
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
        self.approved.insert(id, Approval::default());
    }

    /// Approves a call as it asked to be called: with `args` (redacted, as its
    /// [`PendingApproval`] showed them). Called with other arguments (a retry after what they
    /// come from changed, a plan given again with `--force`), it waits for a new decision.
    pub fn approve_args(&mut self, id: impl Into<String>, args: Value) {
        self.approve_with(id, Some(args), None);
    }

    /// Approves a call as [`Approvals::approve_args`] does (or whatever its arguments, with
    /// `args` `None`), with the answer `input` a person gave: an object whose fields replace
    /// the call's arguments of the same names when it is made.
    pub fn approve_with(
        &mut self,
        id: impl Into<String>,
        args: Option<Value>,
        input: Option<Value>,
    ) {
        let id = id.into();
        self.rejected.remove(&id);
        self.approved.insert(id, Approval { args, input });
    }

    /// Rejects a step or map item: it fails with `E_REJECTED` and `reason`.
    pub fn reject(&mut self, id: impl Into<String>, reason: impl Into<String>) {
        let id = id.into();
        self.approved.remove(&id);
        self.rejected.insert(id, reason.into());
    }

    /// Keeps a question a call asked (`ID@input#N`, see [`question_key`]) as still waiting for
    /// its answer: the call waits again, without being made, until it is answered.
    pub fn await_answer(&mut self, request: PendingApproval) {
        self.inputs
            .insert(request.step_id.clone(), Input::Waiting(request));
    }

    /// Answers `question` (as it was asked, kept under its `ID@input#N`).
    pub fn answer_question(&mut self, question: PendingApproval, answer: Value) {
        self.inputs
            .insert(question.step_id.clone(), Input::Answered(question, answer));
    }

    /// Refuses `question`: the call that asked it fails with `E_REJECTED` and `reason`.
    pub fn refuse_question(&mut self, question: PendingApproval, reason: impl Into<String>) {
        self.inputs.insert(
            question.step_id.clone(),
            Input::Refused(question, reason.into()),
        );
    }

    /// Whether any call asked a question (most runs: none, and calls look nothing up).
    pub fn has_questions(&self) -> bool {
        !self.inputs.is_empty()
    }

    /// The number the next question call `id` asks takes: one after every question of it
    /// kept, answered, refused or asked of other arguments alike (a key is never used twice).
    pub fn next_question(&self, id: &str) -> usize {
        let mut n = 1;
        while self.inputs.contains_key(&question_key(id, n)) {
            n += 1;
        }
        n
    }

    /// Every question call `id` asked (`ID@input#1`, `#2`, …), as it was asked, and where
    /// each stands, in the order asked.
    pub fn questions_of(&self, id: &str) -> Vec<(&PendingApproval, Questions<'_>)> {
        (1..)
            .map_while(|n| self.inputs.get(&question_key(id, n)))
            .map(|input| match input {
                Input::Answered(question, answer) => (question, Questions::Answered(answer)),
                Input::Waiting(question) => (question, Questions::Waiting),
                Input::Refused(question, reason) => (question, Questions::Refused(reason)),
            })
            .collect()
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
        self.approved.contains_key(PLAN_APPROVAL)
    }

    /// The decision on a step's call (`item` is the map item's id, if it is one), whatever
    /// its arguments.
    pub fn decision(&self, step: &str, item: Option<&str>) -> Verdict<'_> {
        self.decision_on(step, item, None)
    }

    /// The decision on a step's call about to be made with `args` (redacted; `None`: whatever
    /// its arguments): an approval given for other arguments does not count.
    pub fn decision_on(&self, step: &str, item: Option<&str>, args: Option<&Value>) -> Verdict<'_> {
        for id in item.into_iter().chain([step]) {
            match (self.approved.get(id), args) {
                (
                    Some(Approval {
                        args: Some(approved),
                        ..
                    }),
                    Some(args),
                ) if approved != args => {}
                (Some(approval), _) => return Verdict::Approved(approval.input.as_ref()),
                (None, _) => {}
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
            Verdict::Approved(None)
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
    fn an_approval_counts_for_the_arguments_it_was_given_for() {
        let mut approvals = Approvals::new();
        let dev = serde_json::json!({"to": "dev"});
        let prod = serde_json::json!({"to": "prod"});
        approvals.approve_args("deploy", dev.clone());
        assert_eq!(
            approvals.decision_on("deploy", None, Some(&dev)),
            Verdict::Approved(None)
        );
        assert_eq!(
            approvals.decision_on("deploy", None, Some(&prod)),
            Verdict::Undecided
        );
        // An item approved for other arguments falls back on its step's decision.
        approvals.approve_args("each[0]", dev.clone());
        assert_eq!(
            approvals.decision_on("each", Some("each[0]"), Some(&prod)),
            Verdict::Undecided
        );
        approvals.approve("each");
        assert_eq!(
            approvals.decision_on("each", Some("each[0]"), Some(&prod)),
            Verdict::Approved(None)
        );
        approvals.turn_off();
        assert_eq!(
            approvals.decision_on("deploy", None, Some(&prod)),
            Verdict::Off
        );
    }

    #[test]
    fn the_latest_decision_on_an_id_counts() {
        let mut approvals = Approvals::new();
        approvals.reject("a", "no");
        approvals.approve("a");
        assert_eq!(approvals.decision("a", None), Verdict::Approved(None));
        assert!(!approvals.plan_approved());
        approvals.approve(PLAN_APPROVAL);
        assert!(approvals.plan_approved());
    }

    #[test]
    fn an_approval_carries_the_answer_given_with_it() {
        let mut approvals = Approvals::new();
        let args = serde_json::json!({"to": "dev"});
        let input = serde_json::json!({"to": "prod"});
        approvals.approve_with("deploy", Some(args.clone()), Some(input.clone()));
        assert_eq!(
            approvals.decision_on("deploy", None, Some(&args)),
            Verdict::Approved(Some(&input))
        );
        // Asked with other arguments, the answer is no longer for it either.
        assert_eq!(
            approvals.decision_on("deploy", None, Some(&input)),
            Verdict::Undecided
        );
    }

    #[test]
    fn a_calls_questions_are_kept_in_the_order_asked() {
        let mut approvals = Approvals::new();
        assert!(!approvals.has_questions());
        assert_eq!(approvals.questions_of("ask"), vec![]);
        let request = |n: usize| {
            let schema = serde_json::json!({"type": "object"});
            PendingApproval::question("ask", n, "srv.ask", None, "name?", schema)
        };
        assert_eq!(request(2).step_id, "ask@input#2");
        assert_eq!(request(2).question_text(), Some("name?"));
        let ada = serde_json::json!({"name": "Ada"});
        let ok = serde_json::json!({"ok": true});
        approvals.answer_question(request(1), ada.clone());
        approvals.await_answer(request(2));
        assert!(approvals.has_questions());
        assert_eq!(
            approvals.questions_of("ask"),
            vec![
                (&request(1), Questions::Answered(&ada)),
                (&request(2), Questions::Waiting)
            ]
        );
        approvals.answer_question(request(2), ok.clone());
        assert_eq!(
            approvals.questions_of("ask"),
            vec![
                (&request(1), Questions::Answered(&ada)),
                (&request(2), Questions::Answered(&ok))
            ]
        );
        approvals.refuse_question(request(1), "no");
        assert_eq!(
            approvals.questions_of("ask")[0],
            (&request(1), Questions::Refused("no"))
        );
        assert_eq!(approvals.next_question("ask"), 3);
        assert_eq!(approvals.next_question("other"), 1);
        assert_eq!(question_key("deploy[prod]", 3), "deploy[prod]@input#3");
        assert_eq!(
            question_of("deploy[prod]@input#3"),
            Some(("deploy[prod]", 3))
        );
        assert_eq!(question_of("r/draft#1@input#2"), Some(("r/draft#1", 2)));
        // An item whose key holds the mark is no question; nor is a number that is none.
        assert_eq!(question_of("m[a@input#1]"), None);
        assert_eq!(question_of("a@input#0"), None);
        assert_eq!(question_of("@input#1"), None);
    }

    #[test]
    fn a_question_is_the_same_whatever_secret_its_kept_text_took_out() {
        assert!(same_question("name?", "name?"));
        assert!(!same_question("name?", "your PIN?"));
        assert!(same_question("token for [redacted]?", "token for s3cr3t?"));
        assert!(same_question("[redacted] and [redacted]", "a and b"));
        assert!(!same_question("token for [redacted]?", "token for ?"));
        assert!(!same_question("token for [redacted]?", "token for s3cr3t!"));
        assert!(!same_question("name?", "name? and more"));
        let long = format!("{}tail", "a".repeat(MOST_QUESTION));
        let kept = kept_question_text(&long);
        assert!(kept.ends_with('…'));
        assert!(same_question(&kept, &long));
        assert!(!same_question(&kept, "short"));
        // Redaction can lengthen a message past the cut (a 3-byte secret): kept and matched.
        let near = format!("{}abc end", "a".repeat(MOST_QUESTION - 8));
        let kept = kept_question_text(&near.replace("abc", REDACTED));
        assert!(kept.ends_with('…'), "{}", kept.len());
        assert!(same_question(&kept, &near));
        // A message that ends so by itself is not read as cut.
        assert!(same_question("wait…", "wait…"));
        assert!(!same_question("wait…", "wait… and more"));
    }
}
