//! Questions an MCP server asks a person while a call of it runs (elicitation): plan-cli
//! answers with what a person answered to the same question before (`approve RUN ID@input#N
//! --input JSON`), and otherwise makes the call wait for an answer (`E_INPUT_REQUIRED`),
//! as an approval waits, instead of letting the server go on without one. (The engine redacts
//! what was asked, then cuts it to a size a person can read and a ledger should keep.)
//!
//! A request names no call over stdio, so a question is the call's only when it is the one
//! call to the server in flight; with several, none can be told, and each is refused (give
//! the server `max_concurrency: 1`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use plan_ports::{Answer, ToolError, codes};
use serde_json::{Value, json};

/// The calls in flight to one server, and what each was asked.
#[derive(Default)]
pub(super) struct Asking {
    calls: Mutex<BTreeMap<u64, Arc<Asked>>>,
    next: AtomicU64,
}

/// What one call was asked, and the answers it has.
struct Asked {
    answers: Option<Arc<[Answer]>>,
    /// Which of `answers` were given.
    used: Mutex<Vec<bool>>,
    /// The first question it had no answer to.
    question: Mutex<Option<(String, Value)>>,
    /// A question came while other calls were in flight too.
    ambiguous: AtomicBool,
}

/// How plan-cli replies to a question.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Reply {
    /// With this answer.
    Accept(Value),
    /// Without one: the call waits for a person (or cannot be told, and is refused).
    Cancel,
}

/// One call in flight; dropped, it leaves.
pub(super) struct InCall {
    asking: Arc<Asking>,
    id: u64,
    asked: Arc<Asked>,
}

impl Asking {
    /// A call starts, with the answers a person gave to the questions it asked before.
    pub(super) fn enter(self: &Arc<Self>, answers: Option<Arc<[Answer]>>) -> InCall {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let given = answers.as_deref().map_or(0, <[Answer]>::len);
        let asked = Arc::new(Asked {
            answers,
            used: Mutex::new(vec![false; given]),
            question: Mutex::new(None),
            ambiguous: AtomicBool::new(false),
        });
        lock(&self.calls).insert(id, asked.clone());
        InCall {
            asking: self.clone(),
            id,
            asked,
        }
    }

    /// The server asks `message`, wanting an answer of `schema`: the one call in flight's
    /// first answer not given yet to this same question, or none.
    pub(super) fn reply(&self, message: &str, schema: Value) -> Reply {
        let calls = lock(&self.calls);
        let mut each = calls.values();
        let (Some(asked), None) = (each.next(), each.next()) else {
            for asked in calls.values() {
                asked.ambiguous.store(true, Ordering::Relaxed);
            }
            return Reply::Cancel;
        };
        let mut used = lock(&asked.used);
        let answers = asked.answers.as_deref().unwrap_or_default();
        let next = (answers.iter().zip(used.iter())).position(|(answer, used)| {
            !used && plan_types::same_question(&answer.question, message)
        });
        if let Some(k) = next {
            used[k] = true;
            return Reply::Accept(answers[k].answer.clone());
        }
        lock(&asked.question).get_or_insert((message.to_owned(), schema));
        Reply::Cancel
    }
}

impl InCall {
    /// Once the call's answer came: the error it ends with instead, when it was asked
    /// something plan-cli could not answer (whatever the server then answered). Its details
    /// carry what was asked and the call's `arguments`: an answer is for this call, with these.
    pub(super) fn outcome(&self, server: &str, arguments: &Value) -> Option<ToolError> {
        if self.asked.ambiguous.load(Ordering::Relaxed) {
            return Some(ToolError::new(
                codes::E_TOOL,
                format!(
                    "MCP server `{server}` asked for input while several calls to it were in flight, so plan-cli could not tell which call asked and answered none: give the server `\"max_concurrency\": 1` in its mcpServers entry"
                ),
            ));
        }
        let (message, schema) = lock(&self.asked.question).clone()?;
        Some(
            ToolError::new(
                codes::E_INPUT_REQUIRED,
                format!("MCP server `{server}` asks: {message}"),
            )
            .with_details(
                json!({"message": message, "requested_schema": schema, "arguments": arguments}),
            ),
        )
    }
}

impl Drop for InCall {
    fn drop(&mut self) {
        lock(&self.asking.calls).remove(&self.id);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answers(given: &[(&str, Value)]) -> Option<Arc<[Answer]>> {
        Some(
            given
                .iter()
                .map(|(question, answer)| Answer {
                    question: (*question).to_owned(),
                    answer: answer.clone(),
                })
                .collect(),
        )
    }

    #[test]
    fn a_call_is_given_its_answers_in_order_then_waits_for_the_next() {
        let asking = Arc::new(Asking::default());
        let call = asking.enter(answers(&[("name?", json!({"name": "Ada"}))]));
        let schema = json!({"type": "object"});
        assert_eq!(
            asking.reply("name?", schema.clone()),
            Reply::Accept(json!({"name": "Ada"}))
        );
        assert!(
            call.outcome("s", &json!({})).is_none(),
            "answered: it ends as the server says"
        );
        assert_eq!(asking.reply("age?", schema.clone()), Reply::Cancel);
        assert_eq!(asking.reply("and?", schema.clone()), Reply::Cancel);
        let error = call.outcome("s", &json!({})).unwrap();
        assert_eq!(error.code, codes::E_INPUT_REQUIRED);
        assert_eq!(error.message, "MCP server `s` asks: age?");
        assert_eq!(
            error.details,
            Some(Box::new(
                json!({"message": "age?", "requested_schema": schema, "arguments": {}})
            ))
        );
        drop(call);
        // Nobody in flight: nothing to answer for.
        assert_eq!(asking.reply("who?", json!({})), Reply::Cancel);
    }

    #[test]
    fn a_question_no_call_can_be_told_by_is_refused_for_all_in_flight() {
        let asking = Arc::new(Asking::default());
        let one = asking.enter(answers(&[("name?", json!({}))]));
        let two = asking.enter(None);
        assert_eq!(asking.reply("name?", json!({})), Reply::Cancel);
        for call in [&one, &two] {
            let error = call.outcome("s", &json!({})).unwrap();
            assert_eq!(error.code, codes::E_TOOL);
            assert!(
                error.message.contains("max_concurrency"),
                "{}",
                error.message
            );
        }
        drop(two);
        let three = asking.enter(None);
        drop(one);
        assert_eq!(asking.reply("name?", json!({})), Reply::Cancel);
        assert_eq!(
            three.outcome("s", &json!({})).unwrap().code,
            codes::E_INPUT_REQUIRED
        );
    }

    #[test]
    fn an_answer_goes_only_to_the_question_it_answered() {
        let asking = Arc::new(Asking::default());
        let call = asking.enter(answers(&[("colour?", json!({"colour": "blue"}))]));
        // Asked something else, the call is not given the colour: it waits for a person.
        assert_eq!(asking.reply("your PIN?", json!({})), Reply::Cancel);
        assert_eq!(
            asking.reply("colour?", json!({})),
            Reply::Accept(json!({"colour": "blue"}))
        );
        let error = call.outcome("s", &json!({})).unwrap();
        assert_eq!(error.details.unwrap()["message"], "your PIN?");
    }
}
