//! Plans from goals: a goal, the tools that can be used (with their input schemas) and the
//! plan format's JSON Schema go to an OpenAI-compatible Chat Completions endpoint (OpenAI,
//! Ollama, vLLM, llama.cpp's server, LM Studio); the answer is checked by the caller's
//! validation, and what is wrong goes back **in the same conversation**, so the model keeps
//! the goal and sees its own answer, until the plan is valid or the tries are spent.
//!
//! The crate does the conversation only: the caller reads the environment for the
//! [`Endpoint`] and validates (plan-cli runs its full validation: tools, cycles, arguments
//! against each tool's schema, placeholders).

use std::time::Duration;

use serde_json::{Value, json};

/// Where the model is.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// The API's base URL, ending in `/v1` (`http://localhost:11434/v1` for Ollama).
    pub base_url: String,
    /// Sent as `Authorization: Bearer …` when set.
    pub api_key: Option<String>,
    /// The model's name.
    pub model: String,
}

impl Endpoint {
    /// The endpoint the environment names: `PLAN_LLM_URL` (else `OPENAI_BASE_URL`) and
    /// `OPENAI_API_KEY`, with `model` (else `PLAN_LLM_MODEL`); none without a URL. `env` reads
    /// the environment (the library reads none itself).
    pub fn from_env(
        model: Option<&str>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<Endpoint>, NoModel> {
        let Some(base_url) = env("PLAN_LLM_URL").or_else(|| env("OPENAI_BASE_URL")) else {
            return Ok(None);
        };
        let model = model
            .map(str::to_owned)
            .or_else(|| env("PLAN_LLM_MODEL"))
            .filter(|model| !model.is_empty())
            .ok_or(NoModel)?;
        Ok(Some(Endpoint {
            base_url,
            api_key: env("OPENAI_API_KEY").filter(|key| !key.is_empty()),
            model,
        }))
    }
}

/// A model URL is set, but no model is named.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a model endpoint is set but no model is named (PLAN_LLM_MODEL)")]
pub struct NoModel;

/// A tool the plan may call, as the model is told of it.
#[derive(Debug, Clone)]
pub struct ToolDescription {
    /// Its name, as a step's `tool`.
    pub name: String,
    /// What it does.
    pub description: String,
    /// Its arguments' JSON Schema.
    pub input_schema: Value,
}

/// What to ask for.
#[derive(Debug, Clone)]
pub struct Ask<'a> {
    /// The goal, in the user's words.
    pub goal: &'a str,
    /// The tools the plan may use.
    pub tools: &'a [ToolDescription],
    /// The plan format's JSON Schema (sent as the response format).
    pub schema: &'a Value,
    /// Tries after the first when the answer is not a valid plan.
    pub max_retries: u32,
}

/// A plan the caller's validation accepted.
#[derive(Debug, Clone)]
pub struct Created {
    /// The plan.
    pub plan: Value,
    /// How many answers it took (1 when the first was valid).
    pub tries: u32,
}

/// The largest answer read from a model (the whole HTTP body, or a sampled message): past it
/// the answer is refused with [`LlmError::Endpoint`], and nothing more is read.
pub const MAX_ANSWER_BYTES: usize = 4 << 20;

/// Why no valid plan came back.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    /// The model could not be reached, or answered with an error.
    #[error("the model {url}: {message}")]
    Endpoint {
        /// The URL asked (or which model).
        url: String,
        /// What went wrong.
        message: String,
    },
    /// Every answer was wrong; the problems with the last one.
    #[error("the model gave no valid plan in {tries} {}; the last answer: {problems}", if *tries == 1 { "answer" } else { "answers" })]
    Invalid {
        /// Answers received.
        tries: u32,
        /// What was wrong with the last one.
        problems: String,
        /// The last answer, as the model wrote it.
        last_answer: String,
    },
}

/// The rules the model is given with the tools.
fn system_prompt(tools: &[ToolDescription]) -> String {
    let mut text = String::from(
        "You write plans for plan-cli: a JSON object whose `steps` are tool calls run in dependency order.\n\
         Rules:\n\
         - Use only the tools listed below, by their exact names, with exactly the argument names their input schemas give.\n\
         - Give every step a unique `id`; `depends_on` lists the ids of steps that must finish first.\n\
         - To use a step's result later, bind it (`result_variable: NAME` or `binds: {NAME: \"$.field\"}`) and read it as `${NAME}` or `${NAME.field}` in a later step's `args`; that later step must depend on the binding step.\n\
         - Write `$$` for a literal `$`.\n\
         - Answer with the plan's JSON only, no prose.\n\nTools:\n",
    );
    for tool in tools {
        text.push_str(&format!(
            "- {}: {}\n  input schema: {}\n",
            tool.name, tool.description, tool.input_schema
        ));
    }
    text
}

/// Something that answers a conversation: a Chat Completions endpoint ([`Http`]), or (in
/// `mcp serve`) the client's own model through MCP sampling.
pub trait Model: Send {
    /// The next answer to `messages` (`{"role", "content"}` objects, the system prompt
    /// first); `schema` is the JSON Schema the answer must follow.
    fn answer<'a>(
        &'a mut self,
        messages: &'a [Value],
        schema: &'a Value,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<String, LlmError>> + Send + 'a>>;

    /// Who writes the answers, as the registry's entry of a plan it wrote says (`created from
    /// a goal by …`).
    fn name(&self) -> String {
        "a model".to_owned()
    }
}

/// A Chat Completions endpoint, with the plan schema as a strict response format (sent again
/// without `strict` when the endpoint refuses strict schemas, as OpenAI does for schemas with
/// optional fields).
pub struct Http {
    endpoint: Endpoint,
    client: reqwest::Client,
    strict: bool,
}

impl Http {
    /// A client for `endpoint`.
    pub fn new(endpoint: Endpoint) -> Result<Http, LlmError> {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(600))
            .build()
            .map_err(|e| LlmError::Endpoint {
                url: endpoint.base_url.clone(),
                message: e.to_string(),
            })?;
        Ok(Http {
            endpoint,
            client,
            strict: true,
        })
    }
}

impl Model for Http {
    fn name(&self) -> String {
        self.endpoint.model.clone()
    }

    fn answer<'a>(
        &'a mut self,
        messages: &'a [Value],
        schema: &'a Value,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<String, LlmError>> + Send + 'a>>
    {
        Box::pin(async move {
            loop {
                match complete(&self.client, &self.endpoint, messages, schema, self.strict).await {
                    Ok(answer) => return Ok(answer),
                    // (`complete` says so only of a strict request, so this happens once.)
                    Err(Refused::Strict) => self.strict = false,
                    Err(Refused::Error(error)) => return Err(error),
                }
            }
        })
    }
}

/// Asks `model` for a plan for `ask.goal`; `check` validates an answer (`Err`: what is wrong,
/// as the model should read it). Each wrong answer and its problems are added to the
/// conversation.
pub async fn create_plan(
    model: &mut dyn Model,
    ask: &Ask<'_>,
    mut check: impl AsyncFnMut(&Value) -> Result<(), String>,
) -> Result<Created, LlmError> {
    let mut messages = vec![
        json!({"role": "system", "content": system_prompt(ask.tools)}),
        json!({"role": "user", "content": format!("Goal: {}\n\nWrite the plan.", ask.goal)}),
    ];
    let mut tries = 0;
    loop {
        let answer = model.answer(&messages, ask.schema).await?;
        // Whatever the model's transport (MCP sampling has no cap of its own).
        if answer.len() > MAX_ANSWER_BYTES {
            return Err(LlmError::Endpoint {
                url: "the model".to_owned(),
                message: format!(
                    "an answer of {} bytes: plan-cli reads at most {} MiB",
                    answer.len(),
                    MAX_ANSWER_BYTES >> 20
                ),
            });
        }
        tries += 1;
        let problems = match parse_answer(&answer) {
            Ok(plan) => match check(&plan).await {
                Ok(()) => return Ok(Created { plan, tries }),
                Err(problems) => problems,
            },
            Err(problem) => problem,
        };
        if tries > ask.max_retries {
            return Err(LlmError::Invalid {
                tries,
                problems,
                last_answer: answer,
            });
        }
        messages.push(json!({"role": "assistant", "content": answer}));
        messages.push(json!({"role": "user", "content": format!(
            "That plan is not valid:\n{problems}\n\nAnswer with the whole corrected plan, for the same goal."
        )}));
    }
}

enum Refused {
    Strict,
    Error(LlmError),
}

/// One Chat Completions request; the answer's text.
async fn complete(
    client: &reqwest::Client,
    endpoint: &Endpoint,
    messages: &[Value],
    schema: &Value,
    strict: bool,
) -> Result<String, Refused> {
    let url = format!(
        "{}/chat/completions",
        endpoint.base_url.trim_end_matches('/')
    );
    let failed = |message: String| {
        Refused::Error(LlmError::Endpoint {
            url: url.clone(),
            message,
        })
    };
    let body = json!({
        "model": endpoint.model,
        "messages": messages,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "plan", "strict": strict, "schema": schema},
        },
    });
    let mut request = client.post(&url).json(&body);
    if let Some(key) = &endpoint.api_key {
        request = request.bearer_auth(key);
    }
    let mut response = request.send().await.map_err(|e| failed(e.to_string()))?;
    let status = response.status();
    // Read up to the cap, and no further: a 50 MB answer once took 488 MB of memory, and a
    // 20 MB error body was printed whole.
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| failed(e.to_string()))? {
        if body.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(failed(format!(
                "an answer of more than {} MiB (HTTP {status}): plan-cli reads at most that much",
                MAX_ANSWER_BYTES >> 20
            )));
        }
        body.extend_from_slice(&chunk);
    }
    let text = String::from_utf8_lossy(&body).into_owned();
    if !status.is_success() {
        if strict && status.as_u16() == 400 && text.contains("strict") {
            return Err(Refused::Strict);
        }
        let shown: String = text.chars().take(500).collect();
        return Err(failed(format!("HTTP {status}: {shown}")));
    }
    let value: Value = serde_json::from_str(&text)
        .map_err(|e| failed(format!("an answer that is not JSON: {e}")))?;
    value["choices"][0]["message"]["content"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| {
            let shown: String = value.to_string().chars().take(500).collect();
            failed(format!(
                "an answer without `choices[0].message.content`: {shown}"
            ))
        })
}

/// The plan in an answer: its JSON, also when fenced in ``` as models like to.
fn parse_answer(answer: &str) -> Result<Value, String> {
    let text = answer.trim();
    let text = text
        .strip_prefix("```json")
        .or_else(|| text.strip_prefix("```"))
        .map_or(text, |rest| rest.trim_end().trim_end_matches("```"))
        .trim();
    match serde_json::from_str::<Value>(text) {
        Ok(plan) if plan.is_object() => Ok(plan),
        Ok(_) => {
            Err("- the answer is JSON but not an object: a plan is an object with `steps`".into())
        }
        Err(error) => Err(format!("- the answer is not JSON: {error}")),
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_endpoint_comes_from_plan_llm_url_before_openai_base_url_and_needs_a_model() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                vars.iter()
                    .find(|(key, _)| *key == name)
                    .map(|(_, value)| (*value).to_owned())
            }
        };
        let none = super::Endpoint::from_env(None, &env(&[])).unwrap();
        assert!(none.is_none(), "no URL, no endpoint");
        let both = env(&[
            ("PLAN_LLM_URL", "http://a/v1"),
            ("OPENAI_BASE_URL", "http://b/v1"),
            ("PLAN_LLM_MODEL", "m"),
            ("OPENAI_API_KEY", ""),
        ]);
        let endpoint = super::Endpoint::from_env(None, &both).unwrap().unwrap();
        assert_eq!(
            (endpoint.base_url.as_str(), endpoint.model.as_str()),
            ("http://a/v1", "m")
        );
        assert_eq!(endpoint.api_key, None, "an empty key is none");
        let given = super::Endpoint::from_env(Some("other"), &both)
            .unwrap()
            .unwrap();
        assert_eq!(given.model, "other");
        let no_model = env(&[("OPENAI_BASE_URL", "http://b/v1"), ("PLAN_LLM_MODEL", "")]);
        assert_eq!(
            super::Endpoint::from_env(None, &no_model).unwrap_err(),
            super::NoModel
        );
    }

    use super::*;

    #[test]
    fn answers_are_read_with_or_without_a_fence() {
        assert_eq!(
            parse_answer("{\"steps\": []}").unwrap(),
            json!({"steps": []})
        );
        assert_eq!(
            parse_answer("```json\n{\"steps\": []}\n```").unwrap(),
            json!({"steps": []})
        );
        assert!(parse_answer("[1]").unwrap_err().contains("not an object"));
        assert!(parse_answer("sure! here").unwrap_err().contains("not JSON"));
    }
}
