//! The other side of MCP: serving tools to an MCP client over stdio (`plan-cli mcp serve`),
//! with rmcp kept in this module. A [`Service`] says which tools there are and answers calls;
//! the server speaks the protocol.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    InitializeResult, ListToolsResult, PaginatedRequestParams, ServerCapabilities, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use serde_json::{Map, Value};

/// A tool the server offers.
#[derive(Debug, Clone)]
pub struct ServedTool {
    /// Its name (`plan_run`).
    pub name: &'static str,
    /// What it does, for the client (and its LLM).
    pub description: &'static str,
    /// Its arguments' JSON Schema (an object schema).
    pub input_schema: Value,
}

/// How a served call went: a JSON answer (sent as structured content and as its text), or a
/// failure's text (sent as an error result the client can show).
pub type Answer = Result<Value, String>;

/// The client a call came from, as the call can use it.
pub trait Client: Send + Sync {
    /// Whether the client lets the server ask its model (MCP sampling).
    fn offers_sampling(&self) -> bool;

    /// Asks the client's model (MCP `sampling/createMessage`): `system` first, then `messages`
    /// as `(from_assistant, text)`; the answer's text.
    fn sample<'a>(
        &'a self,
        system: &'a str,
        messages: &'a [(bool, String)],
        max_tokens: u32,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<String, String>> + Send + 'a>>;
}

/// What the server serves. Calls are made on a blocking thread: `call` may block.
pub trait Service: Send + Sync + 'static {
    /// The tools offered.
    fn tools(&self) -> Vec<ServedTool>;

    /// Answers a call of tool `name` with `args`, from `client`.
    fn call(&self, name: &str, args: &Map<String, Value>, client: Arc<dyn Client>) -> Answer;

    /// An answer as text, for clients that read only text.
    fn text(&self, value: &Value) -> String {
        serde_json::to_string_pretty(value).unwrap_or_default()
    }
}

/// Who the server is, as the client is told.
#[derive(Debug, Clone)]
pub struct ServerInfo {
    /// Its name.
    pub name: &'static str,
    /// Its version.
    pub version: &'static str,
    /// How to use it, for the client.
    pub instructions: &'static str,
}

/// Why serving stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The client never completed the handshake.
    #[error("cannot serve MCP on stdio: {0}")]
    Start(String),
    /// The connection ended abnormally.
    #[error("the MCP server stopped: {0}")]
    Stopped(String),
}

/// Serves `service` on stdin and stdout until the client leaves. Nothing else may write to
/// stdout meanwhile: it is the protocol.
pub async fn serve_stdio(info: ServerInfo, service: Arc<dyn Service>) -> Result<(), ServeError> {
    let running = Handler { info, service }
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|error| ServeError::Start(error.to_string()))?;
    running
        .waiting()
        .await
        .map_err(|error| ServeError::Stopped(error.to_string()))?;
    Ok(())
}

#[derive(Clone)]
struct Handler {
    info: ServerInfo,
    service: Arc<dyn Service>,
}

impl ServerHandler for Handler {
    fn get_info(&self) -> InitializeResult {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(self.info.name, self.info.version))
            .with_instructions(self.info.instructions)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self
            .service
            .tools()
            .into_iter()
            .map(|tool| {
                let schema = match tool.input_schema {
                    Value::Object(schema) => schema,
                    _ => Map::new(),
                };
                Tool::new(tool.name, tool.description, Arc::new(schema))
            })
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        let args = request.arguments.unwrap_or_default();
        let service = self.service.clone();
        let client: Arc<dyn Client> = Arc::new(PeerClient(context.peer.clone()));
        let answer = tokio::task::spawn_blocking(move || {
            let answer = service.call(&name, &args, client);
            answer.map(|value| (service.text(&value), value))
        })
        .await
        .unwrap_or_else(|error| Err(format!("the call failed: {error}")));
        let result = match answer {
            Ok((text, value)) => {
                let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
                result.structured_content = Some(value);
                result
            }
            Err(text) => CallToolResult::error(vec![ContentBlock::text(text)]),
        };
        Ok(result.into())
    }
}

/// The connected client, through rmcp's peer.
struct PeerClient(rmcp::Peer<RoleServer>);

impl Client for PeerClient {
    fn offers_sampling(&self) -> bool {
        self.0
            .peer_info()
            .is_some_and(|info| info.capabilities.sampling.is_some())
    }

    // Sampling is deprecated by a later protocol revision (SEP-2577) that clients do not
    // speak yet; it is how a client's own model answers a server today.
    #[allow(deprecated)]
    fn sample<'a>(
        &'a self,
        system: &'a str,
        messages: &'a [(bool, String)],
        max_tokens: u32,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<String, String>> + Send + 'a>>
    {
        use rmcp::model::{CreateMessageRequestParams, SamplingMessage};
        Box::pin(async move {
            let messages = messages
                .iter()
                .map(|(assistant, text)| {
                    if *assistant {
                        SamplingMessage::assistant_text(text.clone())
                    } else {
                        SamplingMessage::user_text(text.clone())
                    }
                })
                .collect();
            let mut params = CreateMessageRequestParams::new(messages, max_tokens);
            params.system_prompt = Some(system.to_owned());
            let result = self
                .0
                .create_message(params)
                .await
                .map_err(|error| format!("the client's model did not answer: {error}"))?;
            let text: Vec<String> = result
                .message
                .content
                .into_vec()
                .into_iter()
                .filter_map(|block| block.as_text().map(|t| t.text.clone()))
                .collect();
            if text.is_empty() {
                return Err("the client's model answered without text".into());
            }
            Ok(text.join(""))
        })
    }
}
