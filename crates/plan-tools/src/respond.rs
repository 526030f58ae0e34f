//! `chat.respond` (also `respond`): the run's answer, as the map-style executor's chat tool
//! gives it. Its arguments are read leniently: nothing in them is refused.

use async_trait::async_trait;
use plan_ports::{Tool, ToolContext, ToolError, ToolInfo};
use serde_json::{Value, json};

use crate::args::SOURCE;

/// The fields read as the answer when `text` is not given, in this order.
const ALSO_READ: [&str; 5] = ["message", "content", "answer", "response", "reply"];

/// Gives the run's answer: `{"text": TEXT}`, the text read from its arguments as best it can
/// be (`text`, else `message`, `content`, `answer`, `response` or `reply`, else every argument
/// as JSON). Never `E_ARGS_INVALID`: extra fields are ignored, missing ones make an empty text.
#[derive(Debug, Clone, Copy, Default)]
pub struct ChatRespond;

#[async_trait]
impl Tool for ChatRespond {
    fn info(&self) -> ToolInfo {
        ToolInfo {
            name: plan_types::CHAT_RESPOND.into(),
            description: "Give the run's answer, `text` (also named `respond`): printed last by `run`, `answer` in --json; read leniently, nothing is refused".into(),
            source: SOURCE.into(),
            risk: plan_ports::Risk::Low,
            // No types and nothing required: best effort, as the executor's lenient parse.
            input_schema: json!({
                "type": "object",
                "properties": {"text": {"description": "The answer (a string; another value is shown as JSON)"}}
            }),
        }
    }

    async fn call(&self, args: Value, _ctx: ToolContext) -> Result<Value, ToolError> {
        Ok(json!({ "text": text_of(&args) }))
    }
}

/// The answer's text in `args`, read as leniently as it can be.
fn text_of(args: &Value) -> String {
    let Value::Object(fields) = args else {
        return match args {
            Value::String(text) => text.clone(),
            Value::Null => String::new(),
            other => other.to_string(),
        };
    };
    match fields.get("text") {
        Some(Value::String(text)) => return text.clone(),
        Some(Value::Null) | None => {}
        Some(other) => return other.to_string(),
    }
    if let Some(text) = ALSO_READ
        .iter()
        .find_map(|name| fields.get(*name).and_then(Value::as_str))
    {
        return text.to_owned();
    }
    if fields.is_empty() {
        String::new()
    } else {
        args.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_is_read_as_best_it_can_be() {
        assert_eq!(text_of(&json!({"text": "hi", "extra": 1})), "hi");
        assert_eq!(text_of(&json!({"text": 42})), "42");
        assert_eq!(text_of(&json!({"message": "m", "content": "c"})), "m");
        assert_eq!(text_of(&json!({"reply": "r"})), "r");
        assert_eq!(text_of(&json!({})), "");
        assert_eq!(text_of(&json!({"other": [1]})), r#"{"other":[1]}"#);
        assert_eq!(text_of(&json!("plain")), "plain");
    }
}
