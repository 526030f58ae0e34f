//! `http`: one HTTP request; JSON in and out when asked for or offered.

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::Duration;

use async_trait::async_trait;
use plan_ports::{Tool, ToolContext, ToolError, ToolInfo, codes};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::args::{SOURCE, parse};

/// Makes one HTTP request. Fails on a 4xx or 5xx status unless `check` is false; 429 and 5xx
/// failures are retryable and honour `Retry-After`.
///
/// Bounded by default: a request (body included) takes at most [`Http::DEFAULT_TIMEOUT`]
/// unless `timeout_ms` says otherwise, and a response body is read up to
/// [`Http::DEFAULT_MAX_BYTES`] (`max_bytes`) and refused past it, without holding more.
/// Redirects are followed up to 10 times; to another origin only [`Http::SAFE_HEADERS`] go along,
/// and a body is never sent there again.
#[derive(Debug)]
pub struct Http {
    client: OnceLock<reqwest::Client>,
    timeout: Duration,
    max_bytes: u64,
}

impl Default for Http {
    fn default() -> Self {
        Http {
            client: OnceLock::new(),
            timeout: Http::DEFAULT_TIMEOUT,
            max_bytes: Http::DEFAULT_MAX_BYTES,
        }
    }
}

impl Http {
    /// How long a request may take when its step does not say.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
    /// The largest response body read when its step does not say.
    pub const DEFAULT_MAX_BYTES: u64 = 16 * 1024 * 1024;

    /// The request headers that follow a redirect to another origin: they describe what is
    /// asked for, never who asks. Everything else (`Authorization`, cookies, `X-Api-Key`, …) stays
    /// with the origin it was written for.
    pub const SAFE_HEADERS: &[&str] = &[
        "accept",
        "accept-language",
        "accept-encoding",
        "user-agent",
        "cache-control",
        "idempotency-key",
    ];

    /// With other defaults for `timeout_ms` and `max_bytes`.
    pub fn with_defaults(timeout: Duration, max_bytes: u64) -> Self {
        Http {
            timeout,
            max_bytes,
            ..Http::default()
        }
    }
}

const MAX_REDIRECTS: usize = 10;

enum Body {
    Json(Value),
    Text(String),
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
    #[serde(default)]
    max_bytes: Option<u64>,
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
            risk: plan_ports::Risk::Medium,
            input_schema: json!({
                "type": "object",
                "properties": {
                    "method": {"type": "string", "default": "GET"},
                    "url": {"type": "string"},
                    "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                    "json": {},
                    "body": {"type": "string"},
                    "timeout_ms": {"type": "integer", "minimum": 1, "default": 30000},
                    "max_bytes": {"type": "integer", "minimum": 1, "default": 16777216},
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
        let mut url = reqwest::Url::parse(&args.url).map_err(|error| {
            ToolError::invalid_args(format!("`http` arguments: bad url `{}`: {error}", args.url))
        })?;
        check_scheme(&url)?;
        let client = self.client.get_or_init(|| {
            reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap_or_else(|_| reqwest::Client::new())
        });
        let timeout = args.timeout_ms.map_or(self.timeout, Duration::from_millis);
        let deadline = tokio::time::Instant::now() + timeout;
        let mut method = method;
        let mut headers = args.headers.clone();
        let mut body = match (args.json, args.body) {
            (Some(json), _) => Some(Body::Json(json)),
            (None, Some(text)) => Some(Body::Text(text)),
            (None, None) => None,
        };
        let mut redirects = 0;
        let mut response = loop {
            let mut request = client.request(method.clone(), url.clone());
            for (name, value) in &headers {
                request = request.header(name, value);
            }
            request = match &body {
                Some(Body::Json(json)) => request.json(json),
                Some(Body::Text(text)) => request.body(text.clone()),
                None => request,
            };
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            request = request
                .timeout(left)
                .header("Idempotency-Key", ctx.idempotency_key());
            let response = tokio::select! {
                response = request.send() => response.map_err(|error| transport_error(&args.url, error))?,
                () = ctx.cancel.cancelled() => return Err(ToolError::new(codes::E_CANCELLED, "the request was cancelled")),
            };
            let status = response.status().as_u16();
            let location = response
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|v| v.to_str().ok());
            let (true, Some(location)) = (matches!(status, 301 | 302 | 303 | 307 | 308), location)
            else {
                break response;
            };
            redirects += 1;
            if redirects > MAX_REDIRECTS {
                return Err(ToolError::new(
                    "E_HTTP_REDIRECT",
                    format!("{}: more than {MAX_REDIRECTS} redirects", args.url),
                ));
            }
            let next = url.join(location).map_err(|error| {
                ToolError::new(
                    "E_HTTP_REDIRECT",
                    format!(
                        "{}: redirected to a bad url `{location}`: {error}",
                        args.url
                    ),
                )
            })?;
            check_scheme(&next)?;
            let other_origin = next.origin() != url.origin();
            if matches!(status, 301..=303)
                && !(method == reqwest::Method::GET || method == reqwest::Method::HEAD)
            {
                // As browsers do: the redirect is followed with a GET, without the body.
                method = reqwest::Method::GET;
                body = None;
                headers.retain(|name, _| !name.eq_ignore_ascii_case("content-type"));
            }
            if other_origin {
                if body.is_some() {
                    return Err(ToolError::new(
                        "E_HTTP_REDIRECT",
                        format!(
                            "{} redirected a request with a body to another origin ({}); the body is not sent there",
                            args.url,
                            next.origin().ascii_serialization()
                        ),
                    ));
                }
                headers.retain(|name, _| {
                    Http::SAFE_HEADERS.contains(&name.to_ascii_lowercase().as_str())
                });
            }
            url = next;
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
        let limit = args.max_bytes.unwrap_or(self.max_bytes);
        let too_large = || {
            ToolError::new(
                "E_HTTP_TOO_LARGE",
                format!(
                    "{}: the response body is larger than {limit} bytes (`max_bytes`)",
                    args.url
                ),
            )
        };
        if response
            .content_length()
            .is_some_and(|length| length > limit)
        {
            return Err(too_large());
        }
        // Read as it comes, so that no more than the limit is ever held.
        let mut bytes = Vec::new();
        loop {
            let chunk = tokio::select! {
                chunk = response.chunk() => chunk.map_err(|error| transport_error(&args.url, error))?,
                () = ctx.cancel.cancelled() => return Err(ToolError::new(codes::E_CANCELLED, "the request was cancelled")),
            };
            let Some(chunk) = chunk else { break };
            if (bytes.len() + chunk.len()) as u64 > limit {
                return Err(too_large());
            }
            bytes.extend_from_slice(&chunk);
        }
        let text = String::from_utf8_lossy(&bytes).into_owned();
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

/// Only http and https: anything else is the plan's error, never worth a retry.
fn check_scheme(url: &reqwest::Url) -> Result<(), ToolError> {
    match url.scheme() {
        "http" | "https" => Ok(()),
        other => Err(ToolError::invalid_args(format!(
            "`http` arguments: the url scheme `{other}` is not allowed (http or https)"
        ))),
    }
}

/// The error of a request to `url`, named by the url as the plan wrote it: reqwest's own copy
/// is normalised (a lowercased host, in punycode; a percent-encoded path), which a user would
/// not recognise and which hides a secret from all but the redactor's widest search.
fn transport_error(url: &str, error: reqwest::Error) -> ToolError {
    let error = error.without_url();
    if error.is_builder() {
        // The request could not even be built (a bad header, say): retrying cannot help.
        return ToolError::invalid_args(format!("{url}: {error}"));
    }
    if error.is_timeout() {
        return ToolError::retryable(codes::E_TIMEOUT, format!("{url}: the request timed out"));
    }
    // reqwest's Display stops at the outermost cause; the innermost says what really failed.
    let mut cause: &dyn std::error::Error = &error;
    while let Some(inner) = cause.source() {
        cause = inner;
    }
    ToolError::retryable(codes::E_TRANSPORT, format!("{url}: {error} ({cause})"))
}
