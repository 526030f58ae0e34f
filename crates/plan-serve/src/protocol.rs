//! MCP's messages (protocol revision 2025-11-25) over JSON-RPC, spoken here rather than through
//! rmcp: rmcp 3.9 speaks the later tasks extension (SEP-2663: `tasks/update`, no
//! `tasks/result` or `tasks/list`, and a `tools/call` whose `task` field it drops), while the
//! clients and servers plan-cli meets speak 2025-11-25's tasks. What is spoken is small: the
//! handshake, `ping`, `tools/list`, `tools/call` (plain or as a task), `tasks/*`, and the
//! server's own requests to the client (sampling). The transports (stdio, Streamable HTTP)
//! only carry these messages.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

/// The revision served when the client asks for one plan-cli does not know.
pub(crate) const PROTOCOL: &str = "2025-11-25";

/// The revisions whose messages these are (each later one a superset, as far as served).
const KNOWN: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", PROTOCOL];

/// The `_meta` key that ties a message to a task.
pub(crate) const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// The revision to speak with a client that asked for `asked`: its own if known, else the
/// latest (the client then decides whether it can go on).
pub(crate) fn negotiated(asked: Option<&str>) -> &'static str {
    KNOWN
        .into_iter()
        .find(|known| Some(*known) == asked)
        .unwrap_or(PROTOCOL)
}

/// A JSON-RPC error answer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RpcError {
    pub(crate) code: i64,
    pub(crate) message: String,
}

impl RpcError {
    /// -32601: no such method (or a tool asked to run in a way it does not).
    pub(crate) fn no_method(message: impl Into<String>) -> Self {
        RpcError {
            code: -32601,
            message: message.into(),
        }
    }

    /// -32602: the params are wrong (an unknown task, a missing field).
    pub(crate) fn params(message: impl Into<String>) -> Self {
        RpcError {
            code: -32602,
            message: message.into(),
        }
    }

    /// -32603: the server could not do it.
    pub(crate) fn internal(message: impl Into<String>) -> Self {
        RpcError {
            code: -32603,
            message: message.into(),
        }
    }
}

/// What a message from the client is.
pub(crate) enum Incoming {
    /// A request, to be answered with its id.
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    /// A notification: nothing is answered.
    Notification,
    /// The client's answer to a request of the server's.
    Response {
        id: Value,
        outcome: Result<Value, Value>,
    },
    /// Not a JSON-RPC message: answered with this error (its id, if it had one).
    Invalid { id: Value, error: RpcError },
}

/// Reads one message.
pub(crate) fn incoming(text: &str) -> Incoming {
    let message: Value = match serde_json::from_str(text) {
        Ok(message) => message,
        Err(error) => {
            return Incoming::Invalid {
                id: Value::Null,
                error: RpcError {
                    code: -32700,
                    message: format!("not JSON: {error}"),
                },
            };
        }
    };
    let id = message.get("id").cloned();
    let params = message.get("params").cloned().unwrap_or(Value::Null);
    // JSON-RPC's ids are strings and integers; anything else could not be matched by the
    // client (a huge number comes back as a float).
    if let Some(id) = &id
        && !(id.is_string() || id.is_i64() || id.is_u64() || id.is_null())
    {
        return Incoming::Invalid {
            id: Value::Null,
            error: RpcError {
                code: -32600,
                message: "a request's id is a string or an integer".to_owned(),
            },
        };
    }
    match (message.get("method").and_then(Value::as_str), id) {
        (Some(method), Some(id)) if !id.is_null() => Incoming::Request {
            id,
            method: method.to_owned(),
            params,
        },
        (Some(_), _) => Incoming::Notification,
        (None, Some(id)) if message.get("result").is_some() || message.get("error").is_some() => {
            Incoming::Response {
                id,
                outcome: match message.get("error") {
                    Some(error) => Err(error.clone()),
                    None => Ok(message["result"].clone()),
                },
            }
        }
        (None, id) => Incoming::Invalid {
            id: id.unwrap_or(Value::Null),
            error: RpcError {
                code: -32600,
                message: "not a JSON-RPC request: it has no `method`".to_owned(),
            },
        },
    }
}

/// The answer to request `id`.
pub(crate) fn answer(id: Value, outcome: Result<Value, RpcError>) -> Value {
    match outcome {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(error) => json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": {"code": error.code, "message": error.message},
        }),
    }
}

/// How long the server waits for a client to answer its request (its model, through sampling).
const ASK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

/// The server's requests a client has not answered yet, by id.
type Waiting = HashMap<i64, oneshot::Sender<Result<Value, Value>>>;

/// The connected client: what it said it can do, and the way back to it.
pub(crate) struct Peer {
    out: mpsc::UnboundedSender<Value>,
    /// The `capabilities` of its `initialize`.
    capabilities: Arc<Mutex<Value>>,
    /// The server's requests it has not answered yet, by id (shared with the streams of its
    /// HTTP requests, [`Peer::streaming`], whose answers come in later POSTs).
    waiting: Arc<Mutex<Waiting>>,
    next_id: Arc<AtomicI64>,
    /// Whether the server may send it requests: over stdio, and on an HTTP request's event
    /// stream ([`Peer::streaming`]); not on an HTTP session itself, which has no stream back.
    can_be_asked: bool,
}

impl Peer {
    /// A client reached through `out` (every message sent is put there, in order).
    pub(crate) fn new(out: mpsc::UnboundedSender<Value>, can_be_asked: bool) -> Self {
        Peer {
            out,
            capabilities: Arc::new(Mutex::new(Value::Null)),
            waiting: Arc::default(),
            next_id: Arc::new(AtomicI64::new(1)),
            can_be_asked,
        }
    }

    /// The same client, reached through the event stream of one of its HTTP requests
    /// (`out`) while that request is answered: its progress goes there, and the server may ask
    /// it something there (its answer comes in a later POST, read by the session's peer).
    pub(crate) fn streaming(&self, out: mpsc::UnboundedSender<Value>) -> Self {
        Peer {
            out,
            capabilities: self.capabilities.clone(),
            waiting: self.waiting.clone(),
            next_id: self.next_id.clone(),
            can_be_asked: true,
        }
    }

    /// A client no connection reaches: what is sent to it is dropped (a waiting run followed
    /// for a client that left).
    pub(crate) fn detached() -> Self {
        Peer::new(mpsc::unbounded_channel().0, false)
    }

    /// Sends a message; a client that left is not an error (nothing waits for it).
    pub(crate) fn send(&self, message: Value) {
        let _ = self.out.send(message);
    }

    /// Sends a notification.
    pub(crate) fn notify(&self, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// Keeps what the client said it can do.
    pub(crate) fn set_capabilities(&self, capabilities: Value) {
        *lock(&self.capabilities) = capabilities;
    }

    /// Whether the client declared `capability` (`sampling`, `elicitation`).
    pub(crate) fn offers(&self, capability: &str) -> bool {
        self.can_be_asked
            && lock(&self.capabilities)
                .get(capability)
                .is_some_and(|value| !value.is_null())
    }

    /// Asks the client (`sampling/createMessage`) and waits for its answer: at most
    /// [`ASK_TIMEOUT`], and not past the connection's end (an HTTP request's stream the client
    /// closed) or `stop` (the server closing). A request given up is forgotten.
    pub(crate) async fn request(
        &self,
        method: &str,
        params: Value,
        stop: &tokio_util::sync::CancellationToken,
    ) -> Result<Value, String> {
        if !self.can_be_asked {
            return Err("this connection cannot carry the server's requests".to_owned());
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (answered, answer) = oneshot::channel();
        lock(&self.waiting).insert(id, answered);
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let given_up = |why: &str| {
            lock(&self.waiting).remove(&id);
            Err(why.to_owned())
        };
        let answer = tokio::select! {
            answer = answer => answer,
            () = self.out.closed() => return given_up("the client left before it answered"),
            () = stop.cancelled() => return given_up("the server is closing"),
            () = tokio::time::sleep(ASK_TIMEOUT) => {
                return given_up("the client did not answer within 10 minutes");
            }
        };
        match answer {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(error)) => Err(error["message"]
                .as_str()
                .unwrap_or("the client refused")
                .to_owned()),
            Err(_) => Err("the client left before it answered".to_owned()),
        }
    }

    /// The client's answer to a request of the server's.
    pub(crate) fn answered(&self, id: &Value, outcome: Result<Value, Value>) {
        let Some(id) = id.as_i64() else { return };
        if let Some(waiting) = lock(&self.waiting).remove(&id) {
            let _ = waiting.send(outcome);
        }
    }
}

/// A mutex's value, whatever a panicking holder left it as (each value here is replaced
/// whole, never left half made).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_told_apart_by_their_fields() {
        assert!(matches!(
            incoming(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#),
            Incoming::Request { method, .. } if method == "ping"
        ));
        assert!(matches!(
            incoming(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            Incoming::Notification
        ));
        assert!(matches!(
            incoming(r#"{"jsonrpc":"2.0","id":3,"result":{}}"#),
            Incoming::Response { outcome: Ok(_), .. }
        ));
        assert!(matches!(
            incoming(r#"{"jsonrpc":"2.0","id":3,"error":{"code":1,"message":"no"}}"#),
            Incoming::Response {
                outcome: Err(_),
                ..
            }
        ));
        assert!(matches!(
            incoming("{"),
            Incoming::Invalid {
                error: RpcError { code: -32700, .. },
                ..
            }
        ));
        assert!(matches!(
            incoming(r#"{"id":4}"#),
            Incoming::Invalid {
                error: RpcError { code: -32600, .. },
                ..
            }
        ));
    }

    #[test]
    fn a_known_revision_is_kept_and_an_unknown_one_gets_the_latest() {
        assert_eq!(negotiated(Some("2025-06-18")), "2025-06-18");
        assert_eq!(negotiated(Some("2099-01-01")), PROTOCOL);
        assert_eq!(negotiated(None), PROTOCOL);
    }
}
