//! Tools of MCP servers: configuration ([`McpConfig`]), servers started on first use
//! ([`McpServers`]), and each remote tool as a [`plan_engine::Tool`] ([`McpTool`]).

mod client;
mod config;

pub use client::{McpError, McpServers, McpTool};
pub use config::{ConfigError, McpConfig, ServerConfig};
