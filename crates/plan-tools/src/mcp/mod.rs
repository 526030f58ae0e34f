//! Tools of MCP servers: configuration ([`McpConfig`]), servers started on first use
//! ([`McpServers`]), and each remote tool as a [`plan_ports::Tool`] ([`McpTool`]). Serving
//! plans to MCP clients is `plan-serve`'s.

mod ask;
mod client;
mod config;

pub use client::{McpError, McpServers, McpTool, SERVER_BASE_ENV};
pub use config::{ConfigError, Limits, McpConfig, ServerConfig};
