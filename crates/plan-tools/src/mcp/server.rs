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

/// What the server serves. Calls are made on a blocking thread: `call` may block.
pub trait Service: Send + Sync + 'static {
    /// The tools offered.
    fn tools(&self) -> Vec<ServedTool>;

    /// Answers a call of tool `name` with `args`.
    fn call(&self, name: &str, args: &Map<String, Value>) -> Answer;

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
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        let args = request.arguments.unwrap_or_default();
        let service = self.service.clone();
        let answer = tokio::task::spawn_blocking(move || {
            let answer = service.call(&name, &args);
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
