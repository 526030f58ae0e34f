//! The configuration every MCP client reads: `{"mcpServers": {"NAME": {...}}}`.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::path::PathBuf;

use serde::Deserialize;

/// Where a server is and how to start it, by name.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct McpConfig {
    /// The servers, by the name plans use (`NAME.tool`).
    pub servers: BTreeMap<String, ServerConfig>,
    /// How many calls each server (and each of its tools) takes at once, by server name
    /// (servers without limits are not listed).
    pub limits: BTreeMap<String, Limits>,
}

/// How many calls a server takes at once, across every step, map item and block of a run:
/// `max_concurrency` in its `mcpServers` entry, and per tool in its `tools` (for a server
/// that is not safe to call in parallel, or one tool of it that is not). A call waits for
/// its turn within its own `timeout_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Limits {
    /// For all of the server's tools together.
    pub server: Option<NonZeroU32>,
    /// For each tool named, by its name on the server.
    pub tools: BTreeMap<String, NonZeroU32>,
}

/// One server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerConfig {
    /// A program that speaks MCP on its stdin and stdout.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Environment variables set for it (on top of plan-cli's own).
        env: BTreeMap<String, String>,
        /// Its working directory.
        cwd: Option<PathBuf>,
    },
    /// A streamable-HTTP endpoint.
    Http {
        /// The endpoint.
        url: String,
        /// Headers sent with every request.
        headers: BTreeMap<String, String>,
    },
}

/// A configuration that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// Not JSON of the expected shape.
    #[error("{0}")]
    Invalid(String),
    /// `${env.NAME}` names an environment variable that is not set.
    #[error("server `{server}`: `${{env.{name}}}` is not set in the environment")]
    MissingEnv {
        /// The server.
        server: String,
        /// The variable.
        name: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawConfig {
    mcp_servers: BTreeMap<String, RawServer>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    #[serde(default)]
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    cwd: Option<PathBuf>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    max_concurrency: Option<NonZeroU32>,
    #[serde(default)]
    tools: BTreeMap<String, RawTool>,
    // Fields other clients write and plan-cli has no use for.
    #[serde(default, rename = "type")]
    _kind: Option<serde::de::IgnoredAny>,
    #[serde(default, rename = "disabled")]
    _disabled: Option<serde::de::IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTool {
    max_concurrency: NonZeroU32,
}

impl McpConfig {
    /// Parses a configuration. `${env.NAME}` in `env` values and `headers` is replaced by
    /// `lookup(NAME)` (the caller reads the environment; this crate does not).
    pub fn parse(
        text: &str,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<McpConfig, ConfigError> {
        let raw: RawConfig = serde_json::from_str(text).map_err(|error| {
            ConfigError::Invalid(format!(
                "not an MCP configuration ({{\"mcpServers\": {{...}}}}): {error}"
            ))
        })?;
        let mut servers = BTreeMap::new();
        let mut limits = BTreeMap::new();
        for (name, server) in raw.mcp_servers {
            if name.is_empty() || name.contains('.') {
                return Err(ConfigError::Invalid(format!(
                    "server name `{name}`: it must be non-empty and without `.` (tools are `NAME.tool`)"
                )));
            }
            let limit = Limits {
                server: server.max_concurrency,
                tools: (server.tools.iter())
                    .map(|(tool, raw)| (tool.clone(), raw.max_concurrency))
                    .collect(),
            };
            if limit != Limits::default() {
                limits.insert(name.clone(), limit);
            }
            let expand = |text: &str| expand_env(text, &name, lookup);
            let config = match (server.command, server.url) {
                (Some(command), None) => ServerConfig::Stdio {
                    command,
                    args: server.args,
                    env: server
                        .env
                        .iter()
                        .map(|(k, v)| Ok((k.clone(), expand(v)?)))
                        .collect::<Result<_, ConfigError>>()?,
                    cwd: server.cwd,
                },
                (None, Some(url)) => ServerConfig::Http {
                    url,
                    headers: server
                        .headers
                        .iter()
                        .map(|(k, v)| Ok((k.clone(), expand(v)?)))
                        .collect::<Result<_, ConfigError>>()?,
                },
                _ => {
                    return Err(ConfigError::Invalid(format!(
                        "server `{name}` needs either `command` (stdio) or `url` (streamable HTTP)"
                    )));
                }
            };
            servers.insert(name, config);
        }
        Ok(McpConfig { servers, limits })
    }
}

/// Replaces each `${env.NAME}` in `text`.
fn expand_env(
    text: &str,
    server: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<String, ConfigError> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${env.") {
        out.push_str(&rest[..start]);
        let after = &rest[start + "${env.".len()..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            return Ok(out);
        };
        let name = &after[..end];
        let value = lookup(name).ok_or_else(|| ConfigError::MissingEnv {
            server: server.to_owned(),
            name: name.to_owned(),
        })?;
        out.push_str(&value);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        (name == "TOKEN").then(|| "s3cret".to_owned())
    }

    #[test]
    fn reads_stdio_and_http_servers_with_env_expanded() {
        let config = McpConfig::parse(
            r#"{"mcpServers": {
                "fs": {"command": "npx", "args": ["-y", "server"], "env": {"KEY": "k-${env.TOKEN}"}, "cwd": "/tmp"},
                "remote": {"type": "http", "url": "https://x/mcp", "headers": {"Authorization": "Bearer ${env.TOKEN}"}}
            }}"#,
            &env,
        )
        .expect("valid");
        assert_eq!(
            config.servers["fs"],
            ServerConfig::Stdio {
                command: "npx".into(),
                args: vec!["-y".into(), "server".into()],
                env: BTreeMap::from([("KEY".into(), "k-s3cret".into())]),
                cwd: Some("/tmp".into()),
            }
        );
        assert_eq!(
            config.servers["remote"],
            ServerConfig::Http {
                url: "https://x/mcp".into(),
                headers: BTreeMap::from([("Authorization".into(), "Bearer s3cret".into())]),
            }
        );
    }

    #[test]
    fn reads_how_many_calls_a_server_and_its_tools_take_at_once() {
        let config = McpConfig::parse(
            r#"{"mcpServers": {
                "memory": {"command": "m", "max_concurrency": 4, "tools": {"create_entities": {"max_concurrency": 1}}},
                "free": {"command": "f"}
            }}"#,
            &env,
        )
        .expect("valid");
        let one = NonZeroU32::new(1).expect("1");
        assert_eq!(
            config.limits,
            BTreeMap::from([(
                "memory".to_owned(),
                Limits {
                    server: NonZeroU32::new(4),
                    tools: BTreeMap::from([("create_entities".to_owned(), one)]),
                }
            )])
        );
    }

    #[test]
    fn refuses_what_it_cannot_use() {
        let bad = |text: &str| {
            McpConfig::parse(text, &env)
                .expect_err("invalid")
                .to_string()
        };
        assert!(bad(r#"{"servers": {}}"#).contains("not an MCP configuration"));
        assert!(bad(r#"{"mcpServers": {"a": {"args": []}}}"#).contains("needs either `command`"));
        assert!(bad(r#"{"mcpServers": {"a.b": {"command": "x"}}}"#).contains("without `.`"));
        assert!(
            bad(r#"{"mcpServers": {"a": {"command": "x", "max_concurrency": 0}}}"#)
                .contains("nonzero")
        );
        assert!(
            bad(r#"{"mcpServers": {"a": {"command": "x", "tools": {"t": {"max": 1}}}}}"#)
                .contains("unknown field `max`")
        );
        assert_eq!(
            bad(r#"{"mcpServers": {"a": {"command": "x", "env": {"K": "${env.NOPE}"}}}}"#),
            "server `a`: `${env.NOPE}` is not set in the environment"
        );
    }
}
