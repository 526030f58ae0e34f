//! `mcp serve --http`: the same server over MCP's Streamable HTTP transport, for agents that
//! connect over HTTP. One endpoint, `/mcp`: a POST carries one JSON-RPC message, a request is
//! answered with its JSON response, a notification or a response with 202. A `tools/call`
//! from a client that accepts `text/event-stream` is answered with an event stream instead:
//! the call's progress notifications and the server's requests to the client (sampling, for
//! `plan_create`) as they come, then its response, and the stream ends; the client answers a
//! request in a later POST. There is no standing stream (GET is 405), so a task's progress
//! after its `CreateTaskResult` is not sent. Guarded as the dashboard is: loopback by default,
//! every request's `Host` must name the server, an `Origin` must be its own, and every request
//! carries the bearer token.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tokio::sync::mpsc;

use crate::protocol::{self, Incoming, Peer, lock};
use crate::session::ServeError;
use crate::{PlanServer, Settings};

/// The header that names a client's session.
const SESSION: &str = "mcp-session-id";

/// The most sessions kept at once.
const MAX_SESSIONS: usize = 1024;

/// `mcp serve --http`, bound and not yet serving.
pub struct HttpServer {
    listener: std::net::TcpListener,
    /// Its token and the `Host` names a request may use (the dashboard's guard).
    access: plan_run::Access,
    url: String,
}

impl HttpServer {
    /// Binds `address`; the token is `token` (as the dashboard's: at least 16 characters of
    /// letters, digits, `-`, `_`, `.` or `~`) or 32 random bytes in hex.
    pub fn bind(address: SocketAddr, token: Option<String>) -> Result<Self, ServeError> {
        let bind = |error: std::io::Error| ServeError::Bind {
            address,
            message: error.to_string(),
        };
        let listener = std::net::TcpListener::bind(address).map_err(bind)?;
        let port = listener.local_addr().map_err(bind)?.port();
        let access = plan_run::Access::new(SocketAddr::new(address.ip(), port), token)
            .map_err(|e| ServeError::Token(e.to_string()))?;
        let url = format!("http://{}/mcp", access.reachable());
        Ok(HttpServer {
            listener,
            access,
            url,
        })
    }

    /// The endpoint's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The token clients send as `Authorization: Bearer TOKEN`.
    pub fn token(&self) -> &str {
        self.access.token()
    }

    /// Serves until a signal ends it (as [`crate::serve_stdio`]: one that `plan-cli cancel`
    /// sent for a run of this server stops that run alone); the runs still going then are
    /// stopped, resumably.
    pub async fn serve(
        self,
        settings: Settings,
        mut signals: mpsc::UnboundedReceiver<()>,
    ) -> Result<(), ServeError> {
        let server = Arc::new(PlanServer::new(settings));
        let shared = Arc::new(Shared {
            server: server.clone(),
            access: self.access,
            sessions: Mutex::default(),
        });
        let app = axum::Router::new()
            .route(
                "/mcp",
                axum::routing::post(post).get(no_stream).delete(end_session),
            )
            // Every route, present and future, behind the guard.
            .layer(axum::middleware::from_fn_with_state(
                shared.clone(),
                guarded,
            ))
            .with_state(shared)
            .layer(axum::extract::DefaultBodyLimit::max(
                crate::session::message_limit(&server.settings.policy),
            ));
        self.listener
            .set_nonblocking(true)
            .map_err(|e| ServeError::Read(e.to_string()))?;
        let listener = tokio::net::TcpListener::from_std(self.listener)
            .map_err(|e| ServeError::Read(e.to_string()))?;
        let stopper = server.clone();
        let ended = axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                while signals.recv().await.is_some() {
                    let server = stopper.clone();
                    let all = tokio::task::spawn_blocking(move || server.stop_asked())
                        .await
                        .unwrap_or(true);
                    if all {
                        // Open requests end before the server does: runs stop, waits answer.
                        stopper.begin_stop();
                        return;
                    }
                }
            })
            .await
            .map_err(|e| ServeError::Read(e.to_string()));
        server.stop_all().await;
        ended
    }
}

struct Shared {
    server: Arc<PlanServer>,
    access: plan_run::Access,
    /// Each session's peer and when it began, by its id.
    sessions: Mutex<HashMap<String, (Arc<Peer>, std::time::Instant)>>,
}

fn refuse(status: StatusCode, message: &str) -> Response {
    (status, axum::Json(json!({"error": message}))).into_response()
}

/// Every request, whatever its route: refused unless [`guard`] lets it through.
async fn guarded(
    State(shared): State<Arc<Shared>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    match guard(&shared, request.headers()) {
        Some(refused) => refused,
        None => next.run(request).await,
    }
}

/// Why a request is not for this server, if it is not: its `Host`, its `Origin` (a page of
/// another site, through the browser of someone on this machine), its token.
fn guard(shared: &Shared, headers: &HeaderMap) -> Option<Response> {
    let text = |name| {
        headers
            .get(name)
            .and_then(|h: &HeaderValue| h.to_str().ok())
    };
    if !shared.access.allows_host(text(header::HOST).unwrap_or("")) {
        return Some(refuse(
            StatusCode::FORBIDDEN,
            "this server answers only requests for itself (the Host header)",
        ));
    }
    if text(header::ORIGIN).is_some_and(|origin| !shared.access.allows_origin(origin)) {
        return Some(refuse(
            StatusCode::FORBIDDEN,
            "requests from web pages of other origins are refused",
        ));
    }
    if !shared.access.allows_bearer(text(header::AUTHORIZATION)) {
        let mut response = refuse(
            StatusCode::UNAUTHORIZED,
            "send the server's token as `Authorization: Bearer TOKEN`",
        );
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return Some(response);
    }
    None
}

async fn post(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let text = String::from_utf8_lossy(&body);
    let session = headers.get(SESSION).and_then(|h| h.to_str().ok());
    match protocol::incoming(&text) {
        Incoming::Request { id, method, params } if method == "initialize" => {
            let Ok(session) = plan_run::random_hex(16) else {
                return refuse(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "no randomness for a session id",
                );
            };
            // No stream back: what the server would send on its own is dropped.
            let peer = Arc::new(Peer::new(mpsc::unbounded_channel().0, false));
            {
                // Bounded: past the cap, the oldest session ends (its client initializes again).
                let mut sessions = lock(&shared.sessions);
                if sessions.len() >= MAX_SESSIONS
                    && let Some(oldest) = (sessions.iter())
                        .min_by_key(|(_, (_, at))| *at)
                        .map(|(id, _)| id.clone())
                {
                    sessions.remove(&oldest);
                }
                sessions.insert(session.clone(), (peer.clone(), std::time::Instant::now()));
            }
            let answer = shared.server.request(&peer, &method, params).await;
            let mut response = axum::Json(protocol::answer(id, answer)).into_response();
            if let Ok(value) = HeaderValue::from_str(&session) {
                response.headers_mut().insert(SESSION, value);
            }
            response
        }
        incoming => {
            let peer =
                session.and_then(|id| lock(&shared.sessions).get(id).map(|(p, _)| p.clone()));
            let Some(peer) = peer else {
                return match session {
                    Some(_) => refuse(StatusCode::NOT_FOUND, "no such session: initialize again"),
                    None => refuse(
                        StatusCode::BAD_REQUEST,
                        "a request after `initialize` carries its `Mcp-Session-Id`",
                    ),
                };
            };
            match incoming {
                Incoming::Request { id, method, params }
                    if method == "tools/call"
                        && params.get("task").is_none_or(serde_json::Value::is_null)
                        && accepts_events(&headers) =>
                {
                    streamed(shared.clone(), &peer, id, method, params)
                }
                Incoming::Request { id, method, params } => {
                    let answer = shared.server.request(&peer, &method, params).await;
                    axum::Json(protocol::answer(id, answer)).into_response()
                }
                Incoming::Invalid { id, error } => (
                    StatusCode::BAD_REQUEST,
                    axum::Json(protocol::answer(id, Err(error))),
                )
                    .into_response(),
                // The client's answer to what the server asked on a request's stream.
                Incoming::Response { id, outcome } => {
                    peer.answered(&id, outcome);
                    StatusCode::ACCEPTED.into_response()
                }
                Incoming::Notification => StatusCode::ACCEPTED.into_response(),
            }
        }
    }
}

/// Whether the client takes an event stream as a request's answer (its `Accept`).
fn accepts_events(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .any(|value| value.contains("text/event-stream"))
}

/// Answers a request with an event stream: what the server sends the client while it answers
/// (progress, its own requests), then the response, which ends the stream.
fn streamed(
    shared: Arc<Shared>,
    peer: &Arc<Peer>,
    id: serde_json::Value,
    method: String,
    params: serde_json::Value,
) -> Response {
    let (out, messages) = mpsc::unbounded_channel();
    let stream_peer = Arc::new(peer.streaming(out));
    let answer_id = id.clone();
    tokio::spawn(async move {
        let answer = shared.server.request(&stream_peer, &method, params).await;
        stream_peer.send(protocol::answer(id, answer));
    });
    let events = futures_util::stream::unfold(Some(messages), move |messages| {
        let answer_id = answer_id.clone();
        async move {
            let mut messages = messages?;
            let message = messages.recv().await?;
            let last = message.get("id") == Some(&answer_id)
                && (message.get("result").is_some() || message.get("error").is_some());
            let event = format!("event: message\ndata: {message}\n\n");
            let chunk = Ok::<_, std::convert::Infallible>(Bytes::from(event));
            Some((chunk, (!last).then_some(messages)))
        }
    });
    let mut response = axum::body::Body::from_stream(events).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

async fn no_stream() -> Response {
    let mut response = refuse(
        StatusCode::METHOD_NOT_ALLOWED,
        "this server opens no standing stream: a POST is answered with its JSON response, or a tools/call with an event stream of its own",
    );
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("POST, DELETE"));
    response
}

async fn end_session(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let session = headers.get(SESSION).and_then(|h| h.to_str().ok());
    match session.and_then(|id| lock(&shared.sessions).remove(id)) {
        Some(_) => StatusCode::NO_CONTENT.into_response(),
        None => refuse(StatusCode::NOT_FOUND, "no such session"),
    }
}
