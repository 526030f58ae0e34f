//! Plans from goals: a goal, the tools that can be used (with their input schemas) and a plan
//! schema made for generation go to an OpenAI-compatible Chat Completions endpoint (OpenAI,
//! Ollama, vLLM, llama.cpp's `llama-server`, llama-cpp-python's server, LM Studio); the answer
//! is checked by the caller's validation, and what is wrong goes back **in the same
//! conversation**, so the model keeps the goal and sees its own answer, until the plan is
//! valid or the tries are spent.
//!
//! Local servers differ in what they take, so [`Http`] negotiates: it asks with the strictest
//! response format first ([`ResponseFormat`]: `json_schema` strict, then not strict, then
//! `json_object` with the schema beside it, then plain `json_object`, then none) and steps
//! down only when an answer refuses the format (an HTTP error whose body names
//! `response_format`, the schema or a grammar), saying so ([`Http::on_notice`]). The caller
//! keeps the format that worked ([`Http::format_taken`]) and starts there next time
//! ([`Settings::start`]).
//!
//! The conversation never outgrows the model's context: it is the rules, the tools and the
//! goal, then only the last answer (shortened) and what is wrong with it. An answer cut off at
//! the token limit is reported as cut off, not fed back whole.
//!
//! The crate does the conversation only: the caller reads the environment for the
//! [`Endpoint`] and validates (plan-cli runs its full validation: tools, cycles, arguments
//! against each tool's schema, placeholders).

use std::sync::Arc;
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

impl ToolDescription {
    /// Its required arguments, as a line: `argv`, `url, method`, or `none`.
    pub fn required(&self) -> String {
        let names: Vec<&str> = (self.input_schema["required"].as_array().into_iter())
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        if names.is_empty() {
            "none".to_owned()
        } else {
            names.join(", ")
        }
    }
}

/// The plan schema a model is asked to follow: the whole, and its strict variant where there
/// is one (plan-graph's `generation_schema` makes both).
#[derive(Debug, Clone)]
pub struct Schema {
    /// Every tool with all its arguments.
    pub full: Value,
    /// Within OpenAI's strict mode, leaving out what cannot be said strictly; none when
    /// nothing can.
    pub strict: Option<Value>,
    /// What the strict variant leaves out, a line each.
    pub left_out: Vec<String>,
}

/// What to ask for.
#[derive(Debug, Clone)]
pub struct Ask<'a> {
    /// The goal, in the user's words.
    pub goal: &'a str,
    /// The tools the plan may use.
    pub tools: &'a [ToolDescription],
    /// The plan schema (sent as the response format).
    pub schema: &'a Schema,
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

/// How much of a wrong answer goes back to the model with its problems (more is cut from
/// the middle), when its context leaves room for it.
const ANSWER_SHOWN_BYTES: usize = 6000;

/// The least room an answer is given when the context is short: about a plan of five steps.
/// A request that leaves less is refused ([`LlmError::Context`]) rather than cut off.
pub const MIN_ANSWER_TOKENS: u32 = 512;

/// Why no valid plan came back.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LlmError {
    /// The model could not be reached, or answered with an error.
    #[error("the model {url}: {message}")]
    Endpoint {
        /// The URL asked (or which model).
        url: String,
        /// What went wrong, with its cause.
        message: String,
    },
    /// Every answer was wrong; the problems with the last one.
    #[error("the model gave no valid plan in {tries} {}; the problems with the last one:\n{problems}", if *tries == 1 { "answer" } else { "answers" })]
    Invalid {
        /// Answers received.
        tries: u32,
        /// What was wrong with the last one.
        problems: String,
        /// The last answer, as the model wrote it.
        last_answer: String,
    },
    /// The model gave no answer in the time a request may take.
    #[error("the model {url}: no answer within {}", humantime::format_duration(*after))]
    Timeout {
        /// The URL asked.
        url: String,
        /// How long it was given.
        after: Duration,
    },
    /// The request does not fit the model's context, however short the conversation is made.
    #[error(
        "the request needs about {needed} tokens with room for the answer, and the model's context holds {context}: allow fewer tools, or use a model with a larger context"
    )]
    Context {
        /// Tokens the request and the answer's room need (an estimate).
        needed: u32,
        /// The model's context.
        context: u32,
    },
}

impl LlmError {
    /// The failure as data, as `plan create --json` prints it: `{"error": {"kind", "message"}}`,
    /// with `tries`, `problems` and `last_answer` when the model answered.
    pub fn to_json(&self) -> Value {
        let mut object = json!({"kind": self.kind(), "message": self.to_string()});
        if let LlmError::Invalid {
            tries,
            problems,
            last_answer,
        } = self
        {
            object["tries"] = (*tries).into();
            object["problems"] = problems.as_str().into();
            object["last_answer"] = last_answer.as_str().into();
        }
        json!({ "error": object })
    }

    /// What kind of failure it is, in a word: `endpoint`, `timeout`, `context` or
    /// `no_valid_plan` (a front-end's exit code and `--json` object go by it).
    pub fn kind(&self) -> &'static str {
        match self {
            LlmError::Endpoint { .. } => "endpoint",
            LlmError::Timeout { .. } => "timeout",
            LlmError::Context { .. } => "context",
            LlmError::Invalid { .. } => "no_valid_plan",
        }
    }
}

/// What a model answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// Its text.
    pub text: String,
    /// Whether it stopped at the token limit (`finish_reason: length`) rather than ending.
    pub cut_off: bool,
}

impl Answer {
    /// A whole answer.
    pub fn text(text: impl Into<String>) -> Self {
        Answer {
            text: text.into(),
            cut_off: false,
        }
    }
}

/// What a model can take: how the conversation is laid out and kept small.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Its context, in tokens, when known.
    pub context_tokens: Option<u32>,
    /// The most tokens an answer may have.
    pub max_tokens: u32,
    /// Whether the rules go in a system message (else in the first user message: some chat
    /// templates drop system messages).
    pub system: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            context_tokens: None,
            max_tokens: Settings::default().max_tokens,
            system: true,
        }
    }
}

/// A boxed future of a [`Model`]'s.
pub type Pending<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// Something that answers a conversation: a Chat Completions endpoint ([`Http`]), or (in
/// `mcp serve`) the client's own model through MCP sampling.
pub trait Model: Send {
    /// The next answer to `messages` (`{"role", "content"}` objects), of at most `max_tokens`
    /// tokens; `schema` is the JSON Schema the answer must follow.
    fn answer<'a>(
        &'a mut self,
        messages: &'a [Value],
        schema: &'a Schema,
        max_tokens: u32,
    ) -> Pending<'a, Result<Answer, LlmError>>;

    /// Who writes the answers, as the registry's entry of a plan it wrote says (`created from
    /// a goal by …`).
    fn name(&self) -> String {
        "a model".to_owned()
    }

    /// What the model can take (asked once, before the first answer).
    fn limits(&mut self) -> Pending<'_, Limits> {
        Box::pin(async { Limits::default() })
    }
}

/// How the conversation is laid out: the rules, then the tools (each with its required
/// arguments and input schema).
fn rules(tools: &[ToolDescription]) -> String {
    let mut text = String::from(
        "You write plans for plan-cli: a JSON object {\"id\", \"title\", \"steps\"} whose `steps` are tool calls run in dependency order.\n\
         Rules:\n\
         - Each step is {\"id\", \"tool\", \"args\", \"depends_on\", \"result_variable\"}. Write the field names exactly so.\n\
         - Use only the tools listed below, by their exact names, with exactly the argument names their input schemas give.\n\
         - Give every step a unique `id` (letters, digits, `-`, `_`); `depends_on` lists the ids of steps that must finish first.\n\
         - To use a step's result later, set its `result_variable` to a NAME and write `${NAME}` or `${NAME.field}` in a later step's `args`; that later step must list the first in `depends_on`.\n\
         - Write `$$` for a literal `$`.\n\
         - Write each step once: never repeat a step.\n\
         - Answer with the plan's JSON only, no prose.\n\nTools:\n",
    );
    for tool in tools {
        text.push_str(&format!(
            "- {}: {}\n  required arguments: {}\n  input schema: {}\n",
            tool.name,
            tool.description,
            tool.required(),
            tool.input_schema
        ));
    }
    text
}

/// The plan schema in the form each response format sends, strictest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResponseFormat {
    /// `{"type": "json_schema", "json_schema": {"strict": true, …}}` with the strict variant
    /// (OpenAI's structured outputs; llama.cpp's `llama-server`). Asked first only when the
    /// strict variant leaves nothing out ([`Schema::left_out`]); else only when given.
    StrictSchema,
    /// The same without `strict`, with the whole schema.
    Schema,
    /// `{"type": "json_object", "schema": …}` (llama-cpp-python's server, `llama-server`).
    ObjectSchema,
    /// `{"type": "json_object"}`: JSON, any (the rules name the fields; validation does the
    /// rest).
    Object,
    /// No response format.
    None,
}

impl ResponseFormat {
    /// Every format, strictest first: the order of the steps down.
    pub const ALL: [ResponseFormat; 5] = [
        ResponseFormat::StrictSchema,
        ResponseFormat::Schema,
        ResponseFormat::ObjectSchema,
        ResponseFormat::Object,
        ResponseFormat::None,
    ];

    /// Its name (`--response-format`, the ledger).
    pub fn name(self) -> &'static str {
        match self {
            ResponseFormat::StrictSchema => "json_schema_strict",
            ResponseFormat::Schema => "json_schema",
            ResponseFormat::ObjectSchema => "json_object_schema",
            ResponseFormat::Object => "json_object",
            ResponseFormat::None => "none",
        }
    }

    /// The format named `name`.
    pub fn named(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|format| format.name() == name)
    }

    /// The next less strict format.
    pub fn next(self) -> Option<Self> {
        let at = Self::ALL.iter().position(|f| *f == self)?;
        Self::ALL.get(at + 1).copied()
    }

    /// The `response_format` value it sends for `schema` (none for [`ResponseFormat::None`]).
    fn body(self, schema: &Schema) -> Option<Value> {
        match self {
            ResponseFormat::StrictSchema => Some(json!({
                "type": "json_schema",
                "json_schema": {"name": "plan", "strict": true, "schema": schema.strict.as_ref().unwrap_or(&schema.full)},
            })),
            ResponseFormat::Schema => Some(json!({
                "type": "json_schema",
                "json_schema": {"name": "plan", "strict": false, "schema": schema.full},
            })),
            ResponseFormat::ObjectSchema => {
                Some(json!({"type": "json_object", "schema": schema.full}))
            }
            ResponseFormat::Object => Some(json!({"type": "json_object"})),
            ResponseFormat::None => None,
        }
    }
}

impl std::fmt::Display for ResponseFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How [`Http`] asks.
#[derive(Debug, Clone)]
pub struct Settings {
    /// How long one request may take.
    pub timeout: Duration,
    /// The most tokens an answer may have (`max_tokens`); a plan of 40 steps fits in 4,096.
    pub max_tokens: u32,
    /// The sampling temperature: low, so a model keeps to the format.
    pub temperature: f64,
    /// The one response format to use, never stepping down (`--response-format`).
    pub format: Option<ResponseFormat>,
    /// Where to start stepping down from (the format that worked last time).
    pub start: Option<ResponseFormat>,
    /// The model's context in tokens, when the caller knows it (else asked of the server).
    pub context_tokens: Option<u32>,
    /// Whether the rules go in a system message; `None`: yes, unless the server's chat
    /// template has no place for one.
    pub system: Option<bool>,
    /// Whether every request and answer is kept ([`Http::transcript`]): up to 4 MiB an answer.
    pub transcript: bool,
}

/// How long one request may take by default: a small model on a CPU writes a plan in minutes.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// The most tokens an answer may have by default.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

impl Default for Settings {
    fn default() -> Self {
        Settings {
            timeout: DEFAULT_TIMEOUT,
            max_tokens: DEFAULT_MAX_TOKENS,
            temperature: 0.2,
            format: None,
            start: None,
            context_tokens: None,
            system: None,
            transcript: false,
        }
    }
}

/// What [`Http::on_notice`] is given.
type Notice = Arc<dyn Fn(&str) + Send + Sync>;

/// A Chat Completions endpoint, asked with the strictest response format it takes.
pub struct Http {
    endpoint: Endpoint,
    client: reqwest::Client,
    settings: Settings,
    format: ResponseFormat,
    taken: Option<ResponseFormat>,
    limits: Option<Limits>,
    transcript: Vec<Value>,
    notice: Option<Notice>,
}

impl Http {
    /// A client for `endpoint`, with the default [`Settings`].
    pub fn new(endpoint: Endpoint) -> Result<Http, LlmError> {
        Http::with(endpoint, Settings::default())
    }

    /// A client for `endpoint` that asks as `settings` say.
    pub fn with(endpoint: Endpoint, settings: Settings) -> Result<Http, LlmError> {
        let client = reqwest::Client::builder()
            .timeout(settings.timeout)
            .build()
            .map_err(|e| LlmError::Endpoint {
                url: endpoint.base_url.clone(),
                message: cause(&e),
            })?;
        let format = settings
            .format
            .or(settings.start)
            .unwrap_or(ResponseFormat::StrictSchema);
        Ok(Http {
            endpoint,
            client,
            settings,
            format,
            taken: None,
            limits: None,
            transcript: Vec::new(),
            notice: None,
        })
    }

    /// Calls `notice` with each thing a person should hear of as it happens (a step down of
    /// the response format, a context asked of the server).
    pub fn on_notice(&mut self, notice: impl Fn(&str) + Send + Sync + 'static) {
        self.notice = Some(Arc::new(notice));
    }

    /// The response format the server answered to, once it has: where the next request to
    /// this endpoint and model may start.
    pub fn format_taken(&self) -> Option<ResponseFormat> {
        // A format the caller fixed says nothing of what the server takes best.
        self.taken.filter(|_| self.settings.format.is_none())
    }

    /// The endpoint.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Every request and what came back, in order, when [`Settings::transcript`] asks for it: `{"format", "request", "answer",
    /// "finish_reason", "usage"}` (`request` the whole body sent: messages, limits, response
    /// format with its schema; `usage` as the server counted the tokens, when it did) or
    /// `{"format", "request", "error"}`.
    pub fn transcript(&self) -> &[Value] {
        &self.transcript
    }

    fn keep(&mut self, entry: Value) {
        if self.settings.transcript {
            self.transcript.push(entry);
        }
    }

    fn say(&self, text: &str) {
        if let Some(notice) = &self.notice {
            notice(text);
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}/{path}", self.endpoint.base_url.trim_end_matches('/'))
    }

    /// The server's root: its base URL without the `/v1` the Chat Completions API is under.
    fn root(&self) -> &str {
        let base = self.endpoint.base_url.trim_end_matches('/');
        base.strip_suffix("/v1").unwrap_or(base)
    }

    /// A page the server keeps about itself (see [`page`]), asked with the endpoint's key.
    async fn page(&self, url: String) -> Option<Value> {
        let mut request = self
            .client
            .get(url)
            .timeout(self.settings.timeout.min(Duration::from_secs(10)));
        if let Some(key) = &self.endpoint.api_key {
            request = request.bearer_auth(key);
        }
        page(request).await
    }

    /// What llama.cpp's `llama-server` says of itself at `/props` (next to `/v1`): its
    /// context and chat template. Other servers have no such page: nothing is known then.
    async fn props(&self) -> Option<Value> {
        self.page(format!("{}/props", self.root())).await
    }

    /// The context the server says its model is served with, where it says it:
    /// - vLLM: `max_model_len` of the model in `/v1/models`;
    /// - LM Studio: `loaded_context_length` at `/api/v0/models/{model}`, once loaded (a model
    ///   not loaded yet gets the context it is loaded with, which the page cannot know);
    /// - Ollama: `context_length` of the model in `/api/ps`, once loaded (its `num_ctx`, not
    ///   the model's largest context, which Ollama does not use unless told).
    async fn served_context(&self) -> Option<u32> {
        let model = self.endpoint.model.as_str();
        let size = |n: &Value| {
            u32::try_from(n.as_u64()?)
                .ok()
                .filter(|n| *n >= MIN_ANSWER_TOKENS)
        };
        if let Some(models) = self.page(self.url("models")).await
            && let Some(n) = (models["data"].as_array().into_iter().flatten())
                .find(|m| m["id"].as_str() == Some(model))
                .and_then(|m| size(&m["max_model_len"]))
        {
            return Some(n);
        }
        let root = self.root();
        if model
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.:@/".contains(c))
            && !model.contains("..")
            && let Some(info) = self.page(format!("{root}/api/v0/models/{model}")).await
            && info["state"] == "loaded"
            && let Some(n) = size(&info["loaded_context_length"])
        {
            return Some(n);
        }
        let loaded = self.page(format!("{root}/api/ps")).await?;
        let tagged = format!("{model}:latest");
        (loaded["models"].as_array().into_iter().flatten())
            .find(|m| {
                [m["name"].as_str(), m["model"].as_str()].contains(&Some(model))
                    || m["name"].as_str() == Some(&tagged)
            })
            .and_then(|m| size(&m["context_length"]))
    }
}

/// The JSON a server's page about itself answers (`/props`, `/v1/models`), read up to 1 MiB:
/// none when it answers otherwise, or more.
async fn page(request: reqwest::RequestBuilder) -> Option<Value> {
    const MAX_PAGE_BYTES: usize = 1 << 20;
    let mut response = request.send().await.ok()?;
    if !response.status().is_success() {
        return None;
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.ok()? {
        if body.len() + chunk.len() > MAX_PAGE_BYTES {
            return None;
        }
        body.extend_from_slice(&chunk);
    }
    serde_json::from_slice(&body).ok()
}

impl Model for Http {
    fn name(&self) -> String {
        self.endpoint.model.clone()
    }

    fn limits(&mut self) -> Pending<'_, Limits> {
        Box::pin(async move {
            if let Some(limits) = self.limits {
                return limits;
            }
            let props = if self.settings.context_tokens.is_none() || self.settings.system.is_none()
            {
                self.props().await
            } else {
                None
            };
            let mut served_context = props.as_ref().and_then(|props| {
                let n = props["default_generation_settings"]["n_ctx"]
                    .as_u64()
                    .or_else(|| props["n_ctx"].as_u64())?;
                u32::try_from(n).ok()
            });
            // (0 is llama-server's "the model's own": not a size.)
            served_context = served_context.filter(|n| *n >= MIN_ANSWER_TOKENS);
            if served_context.is_none() && self.settings.context_tokens.is_none() {
                served_context = self.served_context().await;
            }
            let context_tokens = self.settings.context_tokens.or(served_context);
            // A chat template that never mentions a system role drops the system message,
            // and Gemma 2's refuses it ("System role not supported"): the rules then go in the
            // first user message.
            let template_drops_system = props
                .as_ref()
                .and_then(|props| props["chat_template"].as_str())
                .is_some_and(|template| {
                    !template.contains("system") || template.contains("System role not supported")
                });
            let system = self.settings.system.unwrap_or(!template_drops_system);
            if self.settings.system.is_none() && template_drops_system {
                self.say("the server's chat template has no system message: the rules go in the first user message");
            }
            // Room for the request too: at most half the context for the answer.
            let max_tokens = match context_tokens {
                Some(context) => self.settings.max_tokens.min((context / 2).max(256)),
                None => self.settings.max_tokens,
            };
            let limits = Limits {
                context_tokens,
                max_tokens,
                system,
            };
            self.limits = Some(limits);
            limits
        })
    }

    fn answer<'a>(
        &'a mut self,
        messages: &'a [Value],
        schema: &'a Schema,
        max_tokens: u32,
    ) -> Pending<'a, Result<Answer, LlmError>> {
        Box::pin(async move {
            loop {
                // Strict mode only where it leaves nothing out (a strict variant without
                // `echo`, or without `http`'s `json`, would keep the model from them), unless
                // the caller asks for it.
                if self.format == ResponseFormat::StrictSchema
                    && (schema.strict.is_none() || !schema.left_out.is_empty())
                    && self.settings.format.is_none()
                {
                    self.format = ResponseFormat::Schema;
                }
                let format = self.format;
                let mut body = json!({
                    "model": self.endpoint.model,
                    "messages": messages,
                    "max_tokens": max_tokens,
                    "temperature": self.settings.temperature,
                });
                if let Some(response_format) = format.body(schema) {
                    body["response_format"] = response_format;
                }
                let answered = complete(
                    &self.client,
                    &self.endpoint,
                    &self.url("chat/completions"),
                    &body,
                )
                .await;
                // The whole request (its response format with the schema, the limits), and
                // what came back.
                let mut entry = json!({"format": format.name(), "request": body});
                match answered {
                    Ok((answer, said)) => {
                        entry["answer"] = json!(answer.text);
                        entry["finish_reason"] = said["finish_reason"].clone();
                        if !said["usage"].is_null() {
                            entry["usage"] = said["usage"].clone();
                        }
                        self.keep(entry);
                        self.taken = Some(format);
                        return Ok(answer);
                    }
                    Err(Refused::Format(message)) if self.settings.format.is_none() => {
                        entry["error"] = json!(message);
                        self.keep(entry);
                        let Some(next) = format.next() else {
                            return Err(LlmError::Endpoint {
                                url: self.url("chat/completions"),
                                message,
                            });
                        };
                        self.say(&format!(
                            "the model's server refused the response format {format} ({message}); asking with {next}"
                        ));
                        self.format = next;
                    }
                    Err(Refused::Format(message) | Refused::Error(message)) => {
                        entry["error"] = json!(message);
                        self.keep(entry);
                        return Err(LlmError::Endpoint {
                            url: self.url("chat/completions"),
                            message,
                        });
                    }
                    Err(Refused::Timeout) => {
                        let error = LlmError::Timeout {
                            url: self.url("chat/completions"),
                            after: self.settings.timeout,
                        };
                        entry["error"] = json!(error.to_string());
                        self.keep(entry);
                        return Err(error);
                    }
                }
            }
        })
    }
}

/// `text` on one line, what would not show as itself escaped (a newline, an escape sequence):
/// what a server says goes to a person's terminal.
fn one_line(text: &str) -> String {
    plan_types::one_line(text).into_owned()
}

/// An error and its causes, in a line: `error sending request: client error (Connect): tcp
/// connect error: Connection refused (os error 111)`.
fn cause(error: &dyn std::error::Error) -> String {
    let mut text = one_line(&error.to_string());
    let mut source = error.source();
    while let Some(next) = source {
        let said = one_line(&next.to_string());
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = next.source();
    }
    text
}

/// `text` at most about `limit` bytes long, cut in the middle (both ends of a plan say the
/// most), saying how much is left out.
pub fn shortened(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_owned();
    }
    let mut head = limit * 2 / 3;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - (limit - head);
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    format!(
        "{}\n…({} bytes left out)…\n{}",
        &text[..head],
        tail - head,
        &text[tail..]
    )
}

/// The first lines of `text` that fit in about `limit` bytes, then how many more there are.
fn first_lines(text: &str, limit: usize) -> String {
    let mut kept = String::new();
    let mut lines = text.lines();
    for line in lines.by_ref() {
        if !kept.is_empty() && kept.len() + line.len() > limit {
            let more = lines.count() + 1;
            kept.push_str(&format!("- … and {more} more lines of problems\n"));
            return kept.trim_end().to_owned();
        }
        kept.push_str(line);
        kept.push('\n');
    }
    kept.trim_end().to_owned()
}

/// About how many tokens `messages` take: a token is about 3 bytes of JSON or prose (fewer
/// for English, more for code; the estimate errs on the large side), and each message a few.
fn tokens_of(messages: &[Value]) -> u32 {
    let bytes: usize = messages
        .iter()
        .map(|m| m["content"].as_str().map_or(0, str::len) + 16)
        .sum();
    u32::try_from(bytes / 3).unwrap_or(u32::MAX)
}

/// Asks `model` for a plan for `ask.goal`; `check` validates an answer (`Err`: what is wrong,
/// as the model should read it). The conversation is the rules and the goal, then the last
/// wrong answer (shortened to fit the model's context) and its problems.
pub async fn create_plan(
    model: &mut dyn Model,
    ask: &Ask<'_>,
    mut check: impl AsyncFnMut(&Value) -> Result<(), String>,
) -> Result<Created, LlmError> {
    let limits = model.limits().await;
    let goal = format!("Goal: {}\n\nWrite the plan.", ask.goal);
    let first = if limits.system {
        vec![
            json!({"role": "system", "content": rules(ask.tools)}),
            json!({"role": "user", "content": goal}),
        ]
    } else {
        vec![json!({"role": "user", "content": format!("{}\n{goal}", rules(ask.tools))})]
    };
    // The room an answer has after `messages`: `max_tokens`, or less (not under
    // MIN_ANSWER_TOKENS) where the context is short.
    let room = |messages: &[Value]| match limits.context_tokens {
        Some(context) => {
            let left = context.saturating_sub(tokens_of(messages));
            let least = MIN_ANSWER_TOKENS.min(limits.max_tokens);
            if left < least {
                Err(LlmError::Context {
                    needed: tokens_of(messages).saturating_add(least),
                    context,
                })
            } else {
                Ok(left.min(limits.max_tokens))
            }
        }
        None => Ok(limits.max_tokens),
    };
    let mut max_tokens = room(&first)?;
    // The most room any request of the conversation can give (the first is the shortest).
    let best = max_tokens;
    let mut messages = first.clone();
    let mut tries = 0;
    loop {
        let answer = model.answer(&messages, ask.schema, max_tokens).await?;
        // Whatever the model's transport (MCP sampling has no cap of its own).
        if answer.text.len() > MAX_ANSWER_BYTES {
            return Err(LlmError::Endpoint {
                url: "the model".to_owned(),
                message: format!(
                    "an answer of {} bytes: plan-cli reads at most {} MiB",
                    answer.text.len(),
                    MAX_ANSWER_BYTES >> 20
                ),
            });
        }
        tries += 1;
        let problems = if answer.cut_off {
            format!(
                "- the answer was cut off at the limit of {max_tokens} tokens before the plan ended: write a shorter plan (fewer steps, short ids and values, no step repeated)"
            )
        } else {
            match parse_answer(&answer.text) {
                Ok(plan) => match check(&plan).await {
                    Ok(()) => return Ok(Created { plan, tries }),
                    Err(problems) => problems,
                },
                Err(problem) => problem,
            }
        };
        if tries > ask.max_retries {
            return Err(LlmError::Invalid {
                tries,
                problems,
                last_answer: answer.text,
            });
        }
        // The last answer and its problems only, shortened until the answer has its whole
        // room again (or as much of it as the shortest feedback leaves).
        let mut limit = if answer.cut_off {
            1000
        } else {
            ANSWER_SHOWN_BYTES
        };
        loop {
            let feedback = json!({"role": "user", "content": format!(
                "That plan is not valid:\n{}\n\nAnswer with the whole corrected plan, for the same goal.",
                first_lines(&problems, limit)
            )});
            messages = first.clone();
            messages.push(json!({"role": "assistant", "content": shortened(&answer.text, limit)}));
            messages.push(feedback);
            match room(&messages) {
                Ok(room) if room >= best || limit <= 200 => {
                    max_tokens = room;
                    break;
                }
                Err(error) if limit <= 200 => return Err(error),
                Ok(_) | Err(_) => limit /= 2,
            }
        }
    }
}

enum Refused {
    /// The server refused the response format (or the schema in it).
    Format(String),
    Error(String),
    /// No answer in time.
    Timeout,
}

/// Whether an HTTP error's body says the response format (or its schema, or the grammar made
/// from it) is what it refuses.
fn refuses_format(body: &str) -> bool {
    let body = body.to_ascii_lowercase();
    ["response_format", "json_schema", "schema", "grammar"]
        .iter()
        .any(|word| body.contains(word))
}

/// One Chat Completions request (`body`) to `url`; the answer.
async fn complete(
    client: &reqwest::Client,
    endpoint: &Endpoint,
    url: &str,
    body: &Value,
) -> Result<(Answer, Value), Refused> {
    let mut request = client.post(url).json(body);
    if let Some(key) = &endpoint.api_key {
        request = request.bearer_auth(key);
    }
    let mut response = request.send().await.map_err(|e| {
        if e.is_timeout() {
            Refused::Timeout
        } else {
            Refused::Error(cause(&e))
        }
    })?;
    let status = response.status();
    // Read up to the cap, and no further: a 50 MB answer once took 488 MB of memory, and a
    // 20 MB error body was printed whole.
    let mut bytes = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| Refused::Error(cause(&e)))?
    {
        if bytes.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(Refused::Error(format!(
                "an answer of more than {} MiB (HTTP {status}): plan-cli reads at most that much",
                MAX_ANSWER_BYTES >> 20
            )));
        }
        bytes.extend_from_slice(&chunk);
    }
    let text = String::from_utf8_lossy(&bytes).into_owned();
    if !status.is_success() {
        let shown = one_line(&text.chars().take(500).collect::<String>());
        let mut message = format!("HTTP {status}: {shown}");
        if status.as_u16() == 404 && !endpoint.base_url.trim_end_matches('/').ends_with("/v1") {
            message.push_str(&format!(
                " (the base URL usually ends in /v1: {}/v1)",
                endpoint.base_url.trim_end_matches('/')
            ));
        }
        // 400 and 422 (a request refused), 500 (llama-cpp-python's refusal of the format): not
        // a rate limit, an authorisation or a server that is busy, whatever their words.
        if matches!(status.as_u16(), 400 | 422 | 500)
            && body.get("response_format").is_some()
            && refuses_format(&text)
        {
            return Err(Refused::Format(message));
        }
        return Err(Refused::Error(message));
    }
    let value: Value = serde_json::from_str(&text)
        .map_err(|e| Refused::Error(format!("an answer that is not JSON: {e}")))?;
    let choice = &value["choices"][0];
    let content = choice["message"]["content"].as_str().ok_or_else(|| {
        let shown = one_line(&value.to_string().chars().take(500).collect::<String>());
        Refused::Error(format!(
            "an answer without `choices[0].message.content`: {shown}"
        ))
    })?;
    let answer = Answer {
        text: content.to_owned(),
        cut_off: choice["finish_reason"] == "length",
    };
    let said = json!({"finish_reason": choice["finish_reason"], "usage": value["usage"]});
    Ok((answer, said))
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

    /// A server answering each request with the next reply, keeping the bodies.
    fn serve(replies: Vec<(u16, Value)>) -> (String, std::sync::Arc<std::sync::Mutex<Vec<Value>>>) {
        use std::io::{BufRead, BufReader, Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = seen.clone();
        std::thread::spawn(move || {
            let mut replies = replies.into_iter();
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let (mut first, mut length) = (String::new(), 0);
                reader.read_line(&mut first).unwrap();
                loop {
                    let mut line = String::new();
                    reader.read_line(&mut line).unwrap();
                    if line.trim().is_empty() {
                        break;
                    }
                    if let Some(n) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        length = n.trim().parse().unwrap();
                    }
                }
                let mut body = vec![0; length];
                reader.read_exact(&mut body).unwrap();
                let (status, reply) = if first.starts_with("GET") {
                    (404, json!({}))
                } else {
                    kept.lock()
                        .unwrap()
                        .push(serde_json::from_slice(&body).unwrap());
                    replies.next().unwrap_or((500, json!({"error": "no more"})))
                };
                let text = reply.to_string();
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                    text.len()
                );
            }
        });
        (url, seen)
    }

    #[tokio::test]
    async fn a_strict_schema_is_asked_strictly_first_and_without_strict_after_a_refusal() {
        let schema = Schema {
            full: json!({"type": "object", "properties": {}}),
            strict: Some(
                json!({"type": "object", "properties": {}, "required": [], "additionalProperties": false}),
            ),
            left_out: Vec::new(),
        };
        let (url, seen) = serve(vec![
            (
                400,
                json!({"error": {"message": "Invalid schema for response_format 'plan' (strict mode)"}}),
            ),
            (
                200,
                json!({"choices": [{"finish_reason": "stop", "message": {"content": "{}"}}]}),
            ),
        ]);
        let endpoint = Endpoint {
            base_url: url,
            api_key: None,
            model: "m".into(),
        };
        let settings = Settings {
            transcript: true,
            ..Settings::default()
        };
        let mut http = Http::with(endpoint, settings).unwrap();
        let said = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let heard = said.clone();
        http.on_notice(move |text| heard.lock().unwrap().push(text.to_owned()));
        let answer = http
            .answer(&[json!({"role": "user", "content": "x"})], &schema, 100)
            .await
            .unwrap();
        assert_eq!(answer, Answer::text("{}"));
        let bodies = seen.lock().unwrap().clone();
        assert_eq!(bodies[0]["response_format"]["json_schema"]["strict"], true);
        assert_eq!(
            bodies[0]["response_format"]["json_schema"]["schema"],
            schema.strict.clone().unwrap()
        );
        assert_eq!(bodies[1]["response_format"]["json_schema"]["strict"], false);
        assert_eq!(http.format_taken(), Some(ResponseFormat::Schema));
        assert_eq!(said.lock().unwrap().len(), 1, "the step down is said");
        assert_eq!(
            http.transcript().len(),
            2,
            "the refusal is in the transcript too"
        );
        // A strict variant that leaves something out is not asked for unless given.
        let leaving = Schema {
            left_out: vec!["echo: …".into()],
            ..schema
        };
        let (url, seen) = serve(vec![(
            200,
            json!({"choices": [{"message": {"content": "{}"}}]}),
        )]);
        let mut http = Http::new(Endpoint {
            base_url: url,
            api_key: None,
            model: "m".into(),
        })
        .unwrap();
        http.answer(&[], &leaving, 100).await.unwrap();
        assert_eq!(
            seen.lock().unwrap()[0]["response_format"]["json_schema"]["strict"],
            false
        );
    }

    #[test]
    fn long_answers_are_cut_in_the_middle_and_say_so() {
        let text: String = "é".repeat(5000);
        let short = shortened(&text, 1000);
        assert!(short.len() < 1100, "{}", short.len());
        assert!(short.contains("bytes left out"));
        assert_eq!(shortened("abc", 10), "abc");
    }

    #[test]
    fn only_an_error_about_the_format_is_a_refusal_of_it() {
        assert!(refuses_format(
            "JSON schema error at #/$defs/ToolCall/properties/id: schema must be an object"
        ));
        assert!(refuses_format(
            "response_format.type: Input should be 'text' or 'json_object'"
        ));
        assert!(refuses_format("failed to parse grammar"));
        assert!(!refuses_format("model is loading"));
        assert!(!refuses_format("context length exceeded"));
    }
}
