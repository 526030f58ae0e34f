//! `http`: one HTTP request; JSON in and out when asked for or offered.

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::Duration;

use async_trait::async_trait;
use plan_engine::{Tool, ToolContext, ToolError, ToolInfo, codes};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::args::{SOURCE, parse};

/// Makes one HTTP request. Fails on a 4xx or 5xx status unless `check` is false; 429 and 5xx
/// failures are retryable and honour `Retry-After`.
#[derive(Debug, Default)]
pub struct Http {
    client: OnceLock<reqwest::Client>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpArgs {
    #[serde(default = "get")]
    method: String,
    url: String,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    json: Option<Value>,
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    timeout_ms: Option<u64>,
    #[serde(default = "yes")]
    check: bool,
}

fn get() -> String {
    "GET".to_owned()
}

fn yes() -> bool {
    true
}

#[async_trait]
impl Tool for Http {
    fn info(&self) -> ToolInfo {
        ToolInfo {
            name: "http".into(),
            description: "Make an HTTP request; fails on a 4xx/5xx status unless check is false"
                .into(),
            source: SOURCE.into(),
            risk: plan_engine::Risk::Medium,
            input_schema: json!({
                "type": "object",
                "properties": {
                    "method": {"type": "string", "default": "GET"},
                    "url": {"type": "string"},
                    "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                    "json": {},
                    "body": {"type": "string"},
                    "timeout_ms": {"type": "integer", "minimum": 1},
                    "check": {"type": "boolean", "default": true}
                },
                "required": ["url"],
                "additionalProperties": false
            }),
        }
    }

    async fn call(&self, args: Value, ctx: ToolContext) -> Result<Value, ToolError> {
        let args: HttpArgs = parse("http", args)?;
        if args.json.is_some() && args.body.is_some() {
            return Err(ToolError::invalid_args(
                "`http` arguments: give `json` or `body`, not both",
            ));
        }
        let method = reqwest::Method::from_bytes(args.method.to_ascii_uppercase().as_bytes())
            .map_err(|_| {
                ToolError::invalid_args(format!(
                    "`http` arguments: `{}` is not an HTTP method",
                    args.method
                ))
            })?;
        let url = reqwest::Url::parse(&args.url).map_err(|error| {
            ToolError::invalid_args(format!("`http` arguments: bad url `{}`: {error}", args.url))
        })?;
        let client = self.client.get_or_init(reqwest::Client::new);
        let mut request = client.request(method, url);
        for (name, value) in &args.headers {
            request = request.header(name, value);
        }
        if let Some(body) = &args.json {
            request = request.json(body);
        } else if let Some(body) = args.body {
            request = request.body(body);
        }
        if let Some(ms) = args.timeout_ms {
            request = request.timeout(Duration::from_millis(ms));
        }
        request = request.header("Idempotency-Key", ctx.idempotency_key());
        let response = tokio::select! {
            response = request.send() => response.map_err(|error| transport_error(&args.url, &error))?,
            () = ctx.cancel.cancelled() => return Err(ToolError::new(codes::E_CANCELLED, "the request was cancelled")),
        };
        let status = response.status();
        let mut headers = Map::new();
        for (name, value) in response.headers() {
            let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
            match headers.get_mut(name.as_str()) {
                Some(Value::String(existing)) => {
                    existing.push_str(", ");
                    existing.push_str(&value);
                }
                _ => {
                    headers.insert(name.as_str().to_owned(), Value::String(value));
                }
            }
        }
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let is_json = headers
            .get("content-type")
            .and_then(Value::as_str)
            .is_some_and(|ct| ct.contains("json"));
        let text = response
            .text()
            .await
            .map_err(|error| transport_error(&args.url, &error))?;
        let mut result = json!({"status": status.as_u16(), "headers": headers});
        match is_json
            .then(|| serde_json::from_str::<Value>(&text).ok())
            .flatten()
        {
            Some(body) => result["json"] = body,
            None => result["body"] = Value::String(text),
        }
        if args.check && (status.is_client_error() || status.is_server_error()) {
            let retryable = status.as_u16() == 429 || status.is_server_error();
            let mut error = ToolError::new(
                "E_HTTP_STATUS",
                format!(
                    "{} {} answered {status}",
                    args.method.to_ascii_uppercase(),
                    args.url
                ),
            )
            .with_details(result);
            error.retryable = retryable;
            error.retry_after = retry_after;
            return Err(error);
        }
        Ok(result)
    }
}

fn transport_error(url: &str, error: &reqwest::Error) -> ToolError {
    if error.is_timeout() {
        return ToolError::retryable(codes::E_TIMEOUT, format!("{url}: the request timed out"));
    }
    // reqwest's Display stops at the outermost cause; the innermost says what really failed.
    let mut cause: &dyn std::error::Error = error;
    while let Some(inner) = cause.source() {
        cause = inner;
    }
    ToolError::retryable(codes::E_TRANSPORT, format!("{url}: {error} ({cause})"))
}
