//! One client's session: its messages read, each request answered in a task of its own (so a
//! long `tools/call` never holds up `tasks/get`), and the stdio transport.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use crate::protocol::{self, Incoming, Peer, RELATED_TASK, RpcError, lock};
use crate::{Call, PlanServer, Served, Settings};

/// Why serving stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The client's messages could not be read.
    #[error("cannot read the MCP client's messages: {0}")]
    Read(String),
    /// `--http`'s address cannot be listened on.
    #[error("cannot listen on {address}: {message}")]
    Bind {
        /// The address.
        address: std::net::SocketAddr,
        /// Why not.
        message: String,
    },
    /// The token given is unusable, or none could be made.
    #[error("the server's token: {0}")]
    Token(String),
}

/// Serves plans on stdin and stdout until the client leaves (or a signal ends it): the
/// client's runs still going then are stopped, resumably. Nothing else may write to stdout
/// meanwhile: it is the protocol. Each message of `signals` is a Ctrl+C or SIGTERM: one that
/// `plan-cli cancel` sent for a run of this server stops that run alone; any other ends the
/// server.
pub async fn serve_stdio(
    settings: Settings,
    mut signals: mpsc::UnboundedReceiver<()>,
) -> Result<(), ServeError> {
    let server = Arc::new(PlanServer::new(settings));
    let (out, mut outgoing) = mpsc::unbounded_channel::<Value>();
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(message) = outgoing.recv().await {
            let mut line = serde_json::to_vec(&message).unwrap_or_default();
            line.push(b'\n');
            if stdout.write_all(&line).await.is_err() || stdout.flush().await.is_err() {
                break;
            }
        }
    });
    let peer = Arc::new(Peer::new(out, true));
    // Read on a task of its own, so that waiting for a signal never cuts a message in two.
    let limit = message_limit(&server.settings.policy);
    let (read, mut lines) = mpsc::channel(16);
    tokio::spawn(async move {
        let mut stdin = BufReader::new(tokio::io::stdin());
        loop {
            let message = next_message(&mut stdin, limit).await;
            let end = !matches!(message, Ok(Some(_)));
            if read.send(message).await.is_err() || end {
                break;
            }
        }
    });
    let ended = loop {
        tokio::select! {
            line = lines.recv() => match line {
                Some(Ok(Some(Ok(line)))) if line.trim().is_empty() => {}
                Some(Ok(Some(Ok(line)))) => server.receive(&peer, &line),
                Some(Ok(Some(Err(limit)))) => peer.send(protocol::answer(
                    Value::Null,
                    Err(RpcError {
                        code: -32600,
                        message: format!("a message may be at most {limit} bytes (a line of JSON)"),
                    }),
                )),
                Some(Ok(None)) | None => break Ok(()),
                Some(Err(error)) => break Err(ServeError::Read(error.to_string())),
            },
            Some(()) = signals.recv() => {
                let server = server.clone();
                let all = tokio::task::spawn_blocking(move || server.stop_asked())
                    .await
                    .unwrap_or(true);
                if all {
                    break Ok(());
                }
            }
        }
    };
    server.stop_all().await;
    drop(peer);
    writer.abort();
    ended
}

/// The longest message a client may send: room for the largest plan the policy takes, in a
/// JSON string (escaped), with its variables. Every input is bounded.
pub(crate) fn message_limit(policy: &plan_run::Policy) -> usize {
    policy.max_plan_bytes.saturating_mul(4).max(16 << 20)
}

/// One message: a line of at most `limit` bytes (`Err(limit)` for a longer one, read to its
/// end and dropped), or `None` at the end of the input.
async fn next_message<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    limit: usize,
) -> std::io::Result<Option<Result<String, usize>>> {
    let mut line = Vec::new();
    let mut too_long = false;
    loop {
        let buffer = reader.fill_buf().await?;
        if buffer.is_empty() {
            return Ok(match (too_long, line.is_empty()) {
                (true, _) => Some(Err(limit)),
                (false, true) => None,
                (false, false) => Some(Ok(String::from_utf8_lossy(&line).into_owned())),
            });
        }
        let newline = buffer.iter().position(|&b| b == b'\n');
        let chunk = &buffer[..newline.unwrap_or(buffer.len())];
        if !too_long && line.len() + chunk.len() > limit {
            too_long = true;
            line = Vec::new();
        } else if !too_long {
            line.extend_from_slice(chunk);
        }
        let used = newline.map_or(buffer.len(), |at| at + 1);
        reader.consume(used);
        if newline.is_some() {
            return Ok(Some(if too_long {
                Err(limit)
            } else {
                Ok(String::from_utf8_lossy(&line).into_owned())
            }));
        }
    }
}

impl PlanServer {
    pub(crate) fn new(settings: Settings) -> Self {
        PlanServer {
            settings,
            going_on: std::sync::Mutex::default(),
            tasks: std::sync::Mutex::default(),
            closing: tokio_util::sync::CancellationToken::new(),
        }
    }

    /// Takes one message of the client's.
    pub(crate) fn receive(self: &Arc<Self>, peer: &Arc<Peer>, text: &str) {
        match protocol::incoming(text) {
            Incoming::Request { id, method, params } => {
                let server = self.clone();
                let peer = peer.clone();
                tokio::spawn(async move {
                    let outcome = server.request(&peer, &method, params).await;
                    peer.send(protocol::answer(id, outcome));
                });
            }
            // `notifications/initialized`, `notifications/cancelled` of a plain call (a run
            // is stopped with `tasks/cancel`, or by the client leaving), and the rest.
            Incoming::Notification => {}
            Incoming::Response { id, outcome } => peer.answered(&id, outcome),
            Incoming::Invalid { id, error } => peer.send(protocol::answer(id, Err(error))),
        }
    }

    /// Answers one request.
    pub(crate) async fn request(
        self: &Arc<Self>,
        peer: &Arc<Peer>,
        method: &str,
        params: Value,
    ) -> Result<Value, RpcError> {
        let task_id = || {
            params["taskId"]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| RpcError::params("`taskId` is required"))
        };
        match method {
            "initialize" => {
                peer.set_capabilities(params["capabilities"].clone());
                Ok(json!({
                    "protocolVersion": protocol::negotiated(params["protocolVersion"].as_str()),
                    "capabilities": {
                        "tools": {"listChanged": false},
                        "tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}},
                    },
                    "serverInfo": {"name": "plan-cli", "version": env!("CARGO_PKG_VERSION")},
                    "instructions": "Run plans (graphs of tool calls) with plan-cli: validate, run, then status, approve and resume. plan_run, plan_execute and plan_create_and_execute may run as tasks.",
                }))
            }
            "ping" => Ok(json!({})),
            "tools/list" => Ok(json!({
                "tools": Served::ALL.into_iter().map(Served::listed).collect::<Vec<_>>(),
            })),
            "tools/call" => self.call_tool(peer, &params).await,
            "tasks/get" => {
                let id = task_id()?;
                self.blocking(move |server| server.task(&id).map(|task| task.to_json()))
                    .await
            }
            "tasks/result" => self.task_result(&task_id()?).await,
            "tasks/cancel" => {
                let id = task_id()?;
                self.blocking(move |server| server.cancel_task(&id).map(|task| task.to_json()))
                    .await
            }
            "tasks/list" => {
                let cursor = params["cursor"].as_str().map(str::to_owned);
                self.blocking(move |server| server.list_tasks(cursor.as_deref()))
                    .await
            }
            other => Err(RpcError::no_method(format!(
                "plan-cli's MCP server has no method `{other}`"
            ))),
        }
    }

    /// Runs `work` on a blocking thread (the ledger is read there).
    async fn blocking<T: Send + 'static>(
        self: &Arc<Self>,
        work: impl FnOnce(&Arc<Self>) -> Result<T, RpcError> + Send + 'static,
    ) -> Result<T, RpcError> {
        let server = self.clone();
        tokio::task::spawn_blocking(move || work(&server))
            .await
            .map_err(|error| RpcError::internal(error.to_string()))?
    }

    /// `tools/call`: answered when the call ends, or at once with a task when the client
    /// asks for one (`task` in its params).
    async fn call_tool(
        self: &Arc<Self>,
        peer: &Arc<Peer>,
        params: &Value,
    ) -> Result<Value, RpcError> {
        let name = params["name"].as_str().unwrap_or_default();
        let served =
            Served::named(name).ok_or_else(|| RpcError::params(format!("no tool `{name}`")))?;
        let args: Map<String, Value> = match &params["arguments"] {
            Value::Object(args) => args.clone(),
            Value::Null => Map::new(),
            _ => return Err(RpcError::params("`arguments` must be an object")),
        };
        let progress = params["_meta"]
            .get("progressToken")
            .filter(|token| token.is_string() || token.is_number())
            .cloned();
        if let Some(task) = params.get("task").filter(|task| !task.is_null()) {
            if !task.is_object() {
                return Err(RpcError::params(
                    "`task` is an object: `{\"ttl\": MILLISECONDS}`",
                ));
            }
            if !served.runs_as_task() {
                return Err(RpcError::no_method(format!(
                    "`{name}` does not run as a task (its execution.taskSupport is \"forbidden\")"
                )));
            }
            let ttl = task["ttl"].as_u64();
            let task = self.create_task(served, args, peer.clone(), progress, ttl);
            return Ok(json!({"task": task.to_json()}));
        }
        let call = Call {
            peer: peer.clone(),
            task: None,
            progress,
        };
        let server = self.clone();
        let answer = tokio::task::spawn_blocking(move || server.answer(served, &args, &call))
            .await
            .unwrap_or_else(|error| Err(format!("the call failed: {error}")));
        Ok(crate::call_result(&answer))
    }

    /// On a signal: stops the runs `plan-cli cancel` asked to stop; true if none was asked
    /// for (the signal is for the whole server).
    pub(crate) fn stop_asked(&self) -> bool {
        let going: Vec<(String, tokio_util::sync::CancellationToken)> = lock(&self.going_on)
            .iter()
            .map(|(id, cancel)| (id.clone(), cancel.clone()))
            .collect();
        let Ok(store) = self.settings.ledger.open_existing() else {
            return true;
        };
        let asked = plan_run::stops_asked(&store, going.iter().map(|(id, _)| id.as_str()));
        going
            .iter()
            .filter(|(id, _)| asked.contains(&id.as_str()))
            .for_each(|(_, cancel)| cancel.cancel());
        asked.is_empty()
    }

    /// Asks every run this server runs to stop, resumably, and every call waiting on a task to
    /// answer: what a closing server does first (an HTTP server's open requests end then).
    pub(crate) fn begin_stop(&self) {
        self.closing.cancel();
        for cancel in lock(&self.going_on).values() {
            cancel.cancel();
        }
    }

    /// Stops every run this server runs, resumably, and waits for them to be marked stopped.
    /// A run that waits for decisions is left waiting: nothing of it runs, and whoever asks
    /// for its task next follows it.
    pub(crate) async fn stop_all(&self) {
        self.begin_stop();
        // A run stops once its calls in flight end (each is cut off and recorded as such).
        for _ in 0..600 {
            let going = !lock(&self.going_on).is_empty()
                || lock(&self.tasks).values().any(|driven| !driven.ended);
            if !going {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// MCP progress notifications for a call whose client asked for them: one each time a
/// top-level step ends, out of the plan's steps, with the line a live view shows for it
/// (`plan_run::Progress`, as the CLI's lines and the dashboard say a run), tied to the call's
/// task if it runs as one. A task's is kept across its run's resumes, so its count goes on.
pub(crate) struct Progress {
    peer: Arc<Peer>,
    token: Value,
    task: Option<String>,
    /// What has been seen of the run (set once its plan is prepared).
    seen: std::sync::Mutex<Option<plan_run::Progress>>,
}

impl Progress {
    pub(crate) fn new(peer: Arc<Peer>, token: Value, task: Option<String>) -> Self {
        Progress {
            peer,
            token,
            task,
            seen: std::sync::Mutex::default(),
        }
    }

    /// Follows a run of `plan` (the first plan given: a resume goes on counting).
    pub(crate) fn of_plan(self: Arc<Self>, plan: &plan_graph::Plan) -> Arc<Self> {
        lock(&self.seen)
            .get_or_insert_with(|| plan_run::Progress::new(Arc::new(plan_run::Steps::of(plan))));
        self
    }
}

impl plan_types::EventSink for Progress {
    fn emit(&self, event: &plan_types::Event) {
        let mut seen = lock(&self.seen);
        let Some(progress) = seen.as_mut() else {
            return;
        };
        let before = progress.settled();
        let line = progress.say(event);
        // Only a step's end: MCP's progress must grow with each notification.
        let done = progress.settled();
        if done == before {
            return;
        }
        let mut params = json!({
            "progressToken": self.token,
            "progress": done,
            "total": progress.steps().len(),
            "message": line.unwrap_or_default(),
        });
        if let Some(task) = &self.task {
            params["_meta"] = json!({RELATED_TASK: {"taskId": task}});
        }
        self.peer.notify("notifications/progress", params);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_message_over_the_limit_is_dropped_whole_and_the_next_one_read() {
        let input = format!("{}\n{{\"a\":1}}\nlast", "x".repeat(100));
        let mut reader = BufReader::with_capacity(8, input.as_bytes());
        assert_eq!(next_message(&mut reader, 50).await.unwrap(), Some(Err(50)));
        assert_eq!(
            next_message(&mut reader, 50).await.unwrap(),
            Some(Ok("{\"a\":1}".to_owned()))
        );
        assert_eq!(
            next_message(&mut reader, 50).await.unwrap(),
            Some(Ok("last".to_owned()))
        );
        assert_eq!(next_message(&mut reader, 50).await.unwrap(), None);
    }
}
