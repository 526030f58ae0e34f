//! Tools of MCP servers: configuration ([`McpConfig`]), servers started on first use
//! ([`McpServers`]), and each remote tool as a [`plan_ports::Tool`] ([`McpTool`]). With the
//! `mcp-server` feature, `server` serves tools to MCP clients over stdio.

mod client;
mod config;
#[cfg(feature = "mcp-server")]
pub mod server;

pub use client::{McpError, McpServers, McpTool, SERVER_BASE_ENV};
pub use config::{ConfigError, McpConfig, ServerConfig};
