//! The tools every plan-cli install has.
//!
//! | tool | arguments | result |
//! |---|---|---|
//! | `echo` | anything | the arguments, unchanged |
//! | `sleep` | `{"ms": N}` | `{"slept_ms": N}` |
//! | `fail` | `{"message", "retryable", "times", "code"}` | fails (the first `times` attempts only, when given; then `{"attempt": k}`) |
//! | `exec` | `{"argv", "cwd", "env", "stdin", "timeout_ms", "check"}` | `{"exit_code", "stdout", "stderr"}` |
//! | `http` | `{"method", "url", "headers", "json" \| "body", "timeout_ms", "check"}` | `{"status", "headers", "json" \| "body"}` |
//! | `chat.respond` (`respond`) | `{"text"}`, read leniently | `{"text"}`: the run's answer |
//!
//! `exec` never goes through a shell: `argv[0]` is the program and each other item is one
//! argument, so no value can become a second command. Its programs get only the environment
//! the operator allows ([`Exec::BASE_ENV`] and [`Exec::passing`]). [`builtin_registry`] has them all.
//!
//! `mcp` (the default feature `mcp`) makes the tools of MCP servers callable as `SERVER.tool`.
#![deny(missing_docs)]

mod args;
mod basic;
mod exec;
mod http;
#[cfg(feature = "mcp")]
pub mod mcp;
mod respond;

pub use basic::{Echo, Fail, Sleep};
pub use exec::Exec;
pub use http::Http;
pub use respond::ChatRespond;

/// A registry with every built-in tool.
pub fn builtin_registry() -> plan_ports::Registry {
    let mut registry = plan_ports::Registry::new();
    registry
        .register(Echo)
        .register(Sleep)
        .register(Fail)
        .register(Exec::default())
        .register(Http::default())
        .register(ChatRespond)
        .register_as(plan_types::RESPOND, std::sync::Arc::new(ChatRespond));
    registry
}
