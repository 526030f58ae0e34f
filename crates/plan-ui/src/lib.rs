//! The dashboard's server (`plan-cli ui`): a local HTTP server on a ledger.
//!
//! It is a local tool's server, and guards itself as one (Jupyter's model):
//! - it binds 127.0.0.1 unless told otherwise;
//! - every `/api/` request carries the token the printed URL holds, as
//!   `Authorization: Bearer TOKEN` (401 without it; never a cookie, so another site's page
//!   cannot act through the browser: no cross-site request can set that header);
//! - every request's `Host` must name this server (`127.0.0.1:PORT`, `localhost:PORT`, or the
//!   host it was bound to), else 403, so a DNS-rebinding page reaches nothing;
//! - pages and answers are never cached and send no referrer, so the token in the URL does not
//!   leave the page.
//!
//! What it serves comes from `plan-run` as the CLI's commands read it: `GET /api/runs` is
//! `runs --json`'s array, `GET /api/runs/RUN` `status RUN --json`'s object, and
//! `GET /api/runs/RUN/events` the lines of `events RUN --follow` as server-sent events. The
//! ledger keeps secrets redacted, and nothing here reads anything else.
//!
//! ```no_run
//! let toolbox = std::sync::Arc::new(plan_run::Toolbox::new(plan_tools::builtin_registry()));
//! let settings = plan_ui::Settings::local(plan_run::Ledger::new(None, None), 0, toolbox);
//! let server = plan_ui::Server::bind(settings).unwrap();
//! let url = server.url().to_owned(); // the front-end shows it
//! // Each message is a Ctrl+C or SIGTERM the front-end heard.
//! let (_signals, heard) = tokio::sync::mpsc::unbounded_channel();
//! server.serve(heard).unwrap();
//! ```

use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

mod block;
mod graph;
mod timeline;

/// Why the server could not start or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UiError {
    /// The address could not be bound (in use, not this machine's).
    #[error("cannot listen on {address}: {source}")]
    Bind {
        /// The address.
        address: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// No random token could be made.
    #[error("cannot make a token: {0}")]
    Token(String),
    /// The server failed while serving.
    #[error("the dashboard's server failed: {0}")]
    Serve(std::io::Error),
}

pub use plan_run::Env;

/// How to serve.
#[derive(Clone)]
pub struct Settings {
    /// The ledger it shows.
    pub ledger: plan_run::Ledger,
    /// The address to bind (127.0.0.1 by default).
    pub host: IpAddr,
    /// The port (0: any free one).
    pub port: u16,
    /// The token every API call must carry (none, or empty: a random one).
    pub token: Option<String>,
    /// The tools runs' plans name: a decision checks what it names against the run's
    /// high-risk steps, as `plan-cli approve` does.
    pub toolbox: Arc<plan_run::Toolbox>,
    /// The tools a run the dashboard resumes or retries goes on with (each run its own, as
    /// `plan-cli resume RUN` would give it).
    pub tools: plan_run::ToolSettings,
    /// The project's folder a resumed run's state document names (`project_path`).
    pub project_path: Option<String>,
    /// The environment, as the front-end gives it (the library reads none): the values of the
    /// variables a plan lists under `env:` when it is prepared (validated, resumed), and what
    /// [`plan_run::ToolSettings::toolbox_for`] reads.
    pub env: Env,
    /// Where what happens out of any request's sight is told (a run going on in the background
    /// that stops on an error); the front-end words it.
    pub notices: Option<std::sync::mpsc::Sender<Notice>>,
}

/// What happened in the background, for the front-end to tell.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Notice {
    /// A run the dashboard went on with stopped on an error (the ledger has what it did).
    #[error("run {run_id} could not go on: {error}")]
    RunStopped {
        /// The run.
        run_id: String,
        /// Why.
        error: plan_run::LifecycleError,
    },
}

impl Settings {
    /// 127.0.0.1 on `port`, a random token.
    pub fn local(ledger: plan_run::Ledger, port: u16, toolbox: Arc<plan_run::Toolbox>) -> Settings {
        Settings {
            ledger,
            host: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port,
            token: None,
            toolbox,
            tools: plan_run::ToolSettings::default(),
            project_path: None,
            env: Arc::new(|_| None),
            notices: None,
        }
    }
}

/// A bound server, not serving yet: its URL is known.
pub struct Server {
    listener: std::net::TcpListener,
    shared: Arc<Shared>,
}

struct Shared {
    ledger: plan_run::Ledger,
    toolbox: Arc<plan_run::Toolbox>,
    tools: plan_run::ToolSettings,
    project_path: Option<String>,
    env: Env,
    notices: Option<std::sync::mpsc::Sender<Notice>>,
    /// The runs this process goes on with (resumed or retried here), each with what stops it:
    /// a cancel of one of them stops it here (`plan_run::cancel` takes a run whose owner is
    /// this very process for one whose owner died, and would mark it stopped while it runs).
    going: std::sync::Mutex<std::collections::HashMap<String, tokio_util::sync::CancellationToken>>,
    /// Its token and the `Host` names a request may use (shared with `mcp serve --http`).
    access: plan_run::Access,
    url: String,
}

impl Server {
    /// Binds the address; the token is `settings.token` or 32 random bytes in hex.
    pub fn bind(settings: Settings) -> Result<Server, UiError> {
        let address = SocketAddr::new(settings.host, settings.port);
        let listener = std::net::TcpListener::bind(address)
            .map_err(|source| UiError::Bind { address, source })?;
        let port = listener
            .local_addr()
            .map_err(|source| UiError::Bind { address, source })?
            .port();
        // The names a request may use for this server: its loopback names, and the address
        // it was bound to. Bound to every address (0.0.0.0, ::), the machine's other names
        // are not known: any Host is taken then, and the token is the guard (`--host` warns).
        let access = plan_run::Access::new(SocketAddr::new(settings.host, port), settings.token)
            .map_err(|e| UiError::Token(e.to_string()))?;
        let token = access.token().to_owned();
        let url = format!("http://{}/?token={token}", access.reachable());
        Ok(Server {
            listener,
            shared: Arc::new(Shared {
                ledger: settings.ledger,
                toolbox: settings.toolbox,
                tools: settings.tools,
                project_path: settings.project_path,
                // The dashboard's own token is no run's to read, whatever holds it.
                env: {
                    let (env, own) = (settings.env, token.clone());
                    Arc::new(move |name: &str| env(name).filter(|value| *value != own))
                },
                notices: settings.notices,
                going: std::sync::Mutex::default(),
                access,
                url,
            }),
        })
    }

    /// The URL to open: the server's, with the token.
    pub fn url(&self) -> &str {
        &self.shared.url
    }

    /// Asks the desktop to open [`Server::url`] (`xdg-open`, `open` on macOS), through a
    /// page only this user can read that sends the browser on (Jupyter's way): the token never
    /// shows in a process's arguments, which other users can list. Nothing happens where
    /// there is no desktop. The page goes in a folder of this process's own made in `temp`
    /// (the front-end's temporary folder).
    pub fn open_in_browser(&self, temp: &std::path::Path) {
        let Ok(page) = self.opening_page(temp) else {
            return;
        };
        let opener = if cfg!(target_os = "macos") {
            "open"
        } else {
            "xdg-open"
        };
        let _ = std::process::Command::new(opener)
            .arg(&page)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
    }

    /// `plan-ui-PORT.html`, readable by this user only, in a folder of this process's own,
    /// which sends the browser to the URL.
    fn opening_page(&self, temp: &std::path::Path) -> std::io::Result<std::path::PathBuf> {
        use std::io::Write as _;
        let dir = temp.join(format!("plan-ui-{}", std::process::id()));
        let mut builder = std::fs::DirBuilder::new();
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(&dir)?;
        let page = dir.join("open.html");
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options.open(&page)?;
        let url = self.url();
        write!(
            file,
            "<!doctype html><meta charset=\"utf-8\"><meta name=\"referrer\" content=\"no-referrer\"><meta http-equiv=\"refresh\" content=\"0;url={url}\"><p><a href=\"{url}\">Open the dashboard</a></p>"
        )?;
        Ok(page)
    }

    /// Serves until the front-end's Ctrl+C or SIGTERM (each one a message of `signals`) that
    /// asks no run of this process to stop: then the runs it goes on with are stopped as
    /// Ctrl+C stops a terminal's (what finished is committed, each is marked stopped and can
    /// be resumed), 30 s at most, and it returns. A signal `plan-cli cancel RUN` sent for a
    /// run it goes on with (`plan_run::stop_asked`) stops that run alone.
    pub fn serve(
        self,
        mut signals: tokio::sync::mpsc::UnboundedReceiver<()>,
    ) -> Result<(), UiError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            // Run values are read at any depth (resumed runs, reports made into JSON).
            .thread_stack_size(plan_types::json::VALUE_THREAD_STACK)
            .enable_all()
            .build()
            .map_err(UiError::Serve)?;
        let shared = self.shared.clone();
        runtime.block_on(async move {
            self.listener
                .set_nonblocking(true)
                .map_err(UiError::Serve)?;
            let listener =
                tokio::net::TcpListener::from_std(self.listener).map_err(UiError::Serve)?;
            let stop = async move {
                while signals.recv().await.is_some() {
                    if !shared.stop_asked_runs().await {
                        break;
                    }
                }
                shared.stop_runs(Duration::from_secs(30)).await;
            };
            tokio::select! {
                served = axum::serve(listener, router(self.shared)) => served.map_err(UiError::Serve),
                () = stop => Ok(()),
            }
        })
    }
}

impl Shared {
    /// The ledger to read.
    fn reader(&self) -> Result<plan_run::ledger::Store, plan_run::LifecycleError> {
        Ok(self.ledger.open_reader()?)
    }

    /// Stops the runs this process goes on with that `plan-cli cancel` asked to stop; whether
    /// there were any (else the signal was for the dashboard itself).
    async fn stop_asked_runs(self: &Arc<Self>) -> bool {
        let shared = self.clone();
        let asked = tokio::task::spawn_blocking(move || {
            let ids: Vec<String> = shared.going().keys().cloned().collect();
            let Ok(store) = shared.writer() else {
                return Vec::new();
            };
            plan_run::stops_asked(&store, ids.iter().map(String::as_str))
                .into_iter()
                .map(str::to_owned)
                .collect::<Vec<String>>()
        })
        .await
        .unwrap_or_default();
        let going = self.going();
        for id in &asked {
            if let Some(stop) = going.get(id) {
                stop.cancel();
            }
        }
        !asked.is_empty()
    }

    /// Stops every run this process goes on with, and waits (at most `patience`) until each
    /// has committed what finished and is marked stopped.
    async fn stop_runs(&self, patience: Duration) {
        for stop in self.going().values() {
            stop.cancel();
        }
        let deadline = tokio::time::Instant::now() + patience;
        while !self.going().is_empty() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Tells the front-end `notice`, if it listens.
    fn tell(&self, notice: Notice) {
        if let Some(notices) = &self.notices {
            let _ = notices.send(notice);
        }
    }

    /// The runs this process goes on with (a poisoned lock is still a map).
    fn going(
        &self,
    ) -> std::sync::MutexGuard<
        '_,
        std::collections::HashMap<String, tokio_util::sync::CancellationToken>,
    > {
        self.going
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The ledger to decide in: it must be there.
    fn writer(&self) -> Result<plan_run::ledger::Store, plan_run::LifecycleError> {
        Ok(self.ledger.open_existing()?)
    }
}

fn router(shared: Arc<Shared>) -> Router {
    let api = Router::new()
        .route("/api/runs", get(runs))
        .route("/api/runs/{run}", get(run))
        .route("/api/runs/{run}/events", get(events))
        .route("/api/runs/{run}/graph", get(run_graph))
        .route("/api/runs/{run}/timeline", get(run_timeline))
        .route("/api/runs/{run}/steps/{step}", get(step))
        .route("/api/runs/{run}/tasks", get(tasks))
        .route("/api/plans", get(plans))
        .route("/api/plans/{plan}", get(plan))
        .route(
            "/api/runs/{run}/approve",
            post(|state, run, Json(decision)| decide(state, run, true, decision)),
        )
        .route(
            "/api/runs/{run}/reject",
            post(|state, run, Json(decision)| decide(state, run, false, decision)),
        )
        .route("/api/runs/{run}/cancel", post(cancel))
        .route("/api/runs/{run}/resume", post(resume))
        .route("/api/runs/{run}/retry", post(retry))
        .route_layer(axum::middleware::from_fn_with_state(shared.clone(), bearer));
    Router::new()
        .route("/", get(|| async { Html(INDEX) }))
        .route("/runs/{run}", get(|| async { Html(RUN) }))
        .route("/plans", get(|| async { Html(PLANS) }))
        .route("/assets/{file}", get(file))
        .merge(api)
        .layer(axum::middleware::from_fn_with_state(
            shared.clone(),
            host_and_headers,
        ))
        .with_state(shared)
}

/// The runs page, built into the binary.
const INDEX: &str = include_str!("../assets/index.html");

/// A run's page (its data comes from the API, with the token).
const RUN: &str = include_str!("../assets/run.html");

/// The plans registry's page.
const PLANS: &str = include_str!("../assets/plans.html");

/// What the pages share: helpers, the graph's drawing, the look.
const COMMON_JS: &str = include_str!("../assets/common.js");
const COMMON_CSS: &str = include_str!("../assets/common.css");

/// Each page's own script (none is inline: the content security policy allows only the
/// server's own scripts).
const INDEX_JS: &str = include_str!("../assets/index.js");
const RUN_JS: &str = include_str!("../assets/run.js");
const PLANS_JS: &str = include_str!("../assets/plans.js");

/// `GET /assets/FILE`: a file the pages load, built into the binary.
async fn file(Path(name): Path<String>) -> Response {
    let (kind, text) = match name.as_str() {
        "common.js" => ("text/javascript", COMMON_JS),
        "common.css" => ("text/css", COMMON_CSS),
        "index.js" => ("text/javascript", INDEX_JS),
        "run.js" => ("text/javascript", RUN_JS),
        "plans.js" => ("text/javascript", PLANS_JS),
        _ => return refuse(StatusCode::NOT_FOUND, "no such file"),
    };
    ([(header::CONTENT_TYPE, kind)], text).into_response()
}

/// Every request: its `Host` must be this server's (403 otherwise); every answer is kept out
/// of caches and sends no referrer.
async fn host_and_headers(
    State(shared): State<Arc<Shared>>,
    request: Request,
    next: Next,
) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    if !shared.access.allows_host(host) {
        return refuse(
            StatusCode::FORBIDDEN,
            "this server answers only requests for itself (the Host header)",
        );
    }
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'self'; style-src 'self' 'unsafe-inline'; script-src 'self'; frame-ancestors 'none'"),
    );
    response
}

/// `/api/` requests carry `Authorization: Bearer TOKEN` (401 otherwise), compared in constant
/// time. A cookie is never read.
async fn bearer(State(shared): State<Arc<Shared>>, request: Request, next: Next) -> Response {
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok());
    if !shared.access.allows_bearer(given) {
        let mut response = refuse(
            StatusCode::UNAUTHORIZED,
            "send the token of the dashboard's URL as `Authorization: Bearer TOKEN`",
        );
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return response;
    }
    next.run(request).await
}

fn refuse(status: StatusCode, message: &str) -> Response {
    (status, axum::Json(json!({"error": message}))).into_response()
}

/// A lifecycle error as an answer: a run that is not there is 404, a prefix of several 400.
fn failed(error: &plan_run::LifecycleError) -> Response {
    use plan_run::LifecycleError as E;
    use plan_run::ledger::StoreError::{Ambiguous, Decided, NotFound};
    let status = match error {
        E::Ledger(NotFound { .. }) => StatusCode::NOT_FOUND,
        // Decided already, run by another process, or not the run's plan: the run's state
        // stands in the way.
        E::Ledger(Decided { .. }) | E::StillRunning { .. } | E::PlanDiffers { .. } => {
            StatusCode::CONFLICT
        }
        E::Ledger(Ambiguous { .. })
        | E::Refused(_)
        | E::NotGated { .. }
        | E::Policy(_)
        | E::Prepare(_)
        | E::InvalidPlan(_)
        | E::QueueNotKept { .. } => StatusCode::BAD_REQUEST,
        // An MCP server or a queue the run needs did not answer.
        E::Tools(_) => StatusCode::BAD_GATEWAY,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    refuse(status, &error.to_string())
}

/// `value` as JSON for an answer (what cannot be made JSON is the server's error).
fn json_of(value: impl serde::Serialize) -> Result<Value, plan_run::LifecycleError> {
    serde_json::to_value(value)
        .map_err(|error| plan_run::LifecycleError::Internal(error.to_string()))
}

#[derive(serde::Deserialize)]
struct RunsQuery {
    status: Option<String>,
    plan: Option<String>,
    limit: Option<usize>,
}

/// `GET /api/runs[?status=S&plan=P&limit=N]`: `runs --json`'s array.
async fn runs(State(shared): State<Arc<Shared>>, Query(query): Query<RunsQuery>) -> Response {
    let status = match query.status.as_deref().map(plan_types::TaskStatus::named) {
        None => None,
        Some(Ok(status)) => Some(status),
        Some(Err(problem)) => return refuse(StatusCode::BAD_REQUEST, &problem),
    };
    let filter = plan_run::RunFilter {
        status,
        plan: query.plan,
        limit: query.limit,
    };
    let shared = shared.clone();
    blocking(move || {
        if !shared.ledger.exists() {
            return Ok(json!([]));
        }
        let mut store = shared.reader()?;
        let rows = plan_run::runs(&mut store, &filter)?;
        json_of(rows)
    })
    .await
}

/// `GET /api/runs/RUN`: `status RUN --json`'s object.
async fn run(State(shared): State<Arc<Shared>>, Path(run): Path<String>) -> Response {
    with_run(shared, run, |store, row| {
        json_of(plan_run::report(store, row)?)
    })
    .await
}

/// `GET /api/runs/RUN/graph`: the run's plan laid out, each step with its status.
async fn run_graph(State(shared): State<Arc<Shared>>, Path(run): Path<String>) -> Response {
    with_run(shared, run, |store, row| {
        let report = plan_run::report(store, row)?;
        let plan = plan_run::plan_of(row)?;
        json_of(graph::graph(&plan, Some(&report)))
    })
    .await
}

/// `GET /api/runs/RUN/timeline[?limit=N]`: each attempt of each call in time (the first `N`),
/// how many there are, and the critical path.
async fn run_timeline(
    State(shared): State<Arc<Shared>>,
    Path(run): Path<String>,
    Query(query): Query<TimelineQuery>,
) -> Response {
    with_run(shared, run, move |store, row| {
        let plan = plan_run::plan_of(row)?;
        let events = events_of(store, &row.run_id)?;
        let mut timeline = timeline::timeline(&plan, &events);
        if let Some(limit) = query.limit {
            timeline.bars.truncate(limit);
        }
        json_of(timeline)
    })
    .await
}

#[derive(serde::Deserialize)]
struct TimelineQuery {
    /// At most this many bars (the first calls); `total` counts them all.
    limit: Option<usize>,
}

/// `GET /api/runs/RUN/steps/STEP`: what the step panel shows of a step: its definition in the
/// plan (its arguments as written), its records (its items' and nodes' too: `logs RUN STEP`'s),
/// the calls of it waiting for a decision with the arguments they would be called with, and
/// its events.
async fn step(
    State(shared): State<Arc<Shared>>,
    Path((run, step)): Path<(String, String)>,
) -> Response {
    with_run(shared, run, move |store, row| {
        let plan = plan_run::plan_of(row)?;
        let Some(position) = plan.position(&step) else {
            let ids: Vec<String> = plan.steps.iter().map(|s| s.id.0.clone()).collect();
            let hint = plan_graph::closest(&step, &ids)
                .map(|near| format!(" (did you mean `{near}`?)"))
                .unwrap_or_default();
            return Err(plan_run::LifecycleError::Refused(format!(
                "run {} has no step `{step}`{hint}",
                row.run_id
            )));
        };
        let report = plan_run::report(store, row)?;
        let index = plan_graph::StepIndex::new(plan.steps.iter().map(|s| s.id.0.as_str()));
        let of_step = |id: &str| index.step_of(id) == Some(position);
        let records = plan_run::records_of(&report, &plan, Some(&step));
        let waiting: Vec<_> = (report.pending_approvals.iter())
            .filter(|pending| of_step(&pending.step_id))
            .collect();
        let events: Vec<_> = (events_of(store, &row.run_id)?.into_iter())
            .filter(|event| event.step_id.as_deref().is_some_and(of_step))
            .collect();
        // A block: its nodes and transitions, and the path the run took.
        let block = plan.steps[position].block.as_deref().map(|definition| {
            let state = (report.blocks.iter())
                .find(|state| state.step_id == step)
                .map(|state| (state.state, state.node.as_deref()));
            let inside = block::Inside {
                index: &index,
                position,
                events: &events,
                records: &records,
                state,
                run: report.task_status,
            };
            let (graph, path) = block::graph(definition, &inside);
            json!({"graph": graph, "path": path})
        });
        // A map of 100,000 items is not sent whole: its first records and its last events,
        // with how many there are.
        let (records_total, events_total) = (records.len(), events.len());
        Ok(json!({
            "step": plan.steps[position],
            "records": &records[..records.len().min(STEP_RECORDS)],
            "records_total": records_total,
            "waiting": waiting,
            "events": &events[events.len().saturating_sub(STEP_EVENTS)..],
            "events_total": events_total,
            "block": block,
        }))
    })
    .await
}

/// `GET /api/runs/RUN/tasks`: a task breakdown's board: its layers in plan order, each with
/// its tasks (id and title), the attempts a task has (`max_attempts`), and the run's
/// execute-state document (`plan-cli state export RUN`), which says how each task stands.
async fn tasks(State(shared): State<Arc<Shared>>, Path(run): Path<String>) -> Response {
    let project_path = shared.project_path.clone();
    with_run(shared, run, move |store, row| {
        let plan = plan_run::plan_of(row)?;
        let Some(workspace) = &plan.workspace else {
            return Err(plan_run::LifecycleError::Refused(format!(
                "run {} has no tasks (its plan has no `workspace:`)",
                row.run_id
            )));
        };
        let mut layers: Vec<(String, Vec<Value>)> = Vec::new();
        for step in plan.steps.iter().filter(|step| step.task.is_some()) {
            let layer = step.layer.clone().unwrap_or_default();
            let card = json!({"id": step.id.0, "title": step.title});
            match layers.iter_mut().find(|(name, _)| *name == layer) {
                Some((_, tasks)) => tasks.push(card),
                None => layers.push((layer, vec![card])),
            }
        }
        let state = plan_run::execute_state_of(store, row, &plan, project_path.as_deref())?;
        let layers: Vec<Value> = (layers.into_iter())
            .map(|(name, tasks)| json!({"name": name, "tasks": tasks}))
            .collect();
        Ok(json!({
            "layers": layers,
            "max_attempts": workspace.max_attempts,
            "state": state,
        }))
    })
    .await
}

/// `GET /api/plans`: the plan registry, as `plan-cli plan list --json` prints it.
async fn plans(State(shared): State<Arc<Shared>>) -> Response {
    blocking(move || {
        if !shared.ledger.exists() {
            return Ok(json!([]));
        }
        let plans = plan_run::stored_plans(&shared.reader()?)?;
        json_of(plans)
    })
    .await
}

/// `GET /api/plans/PLAN`: a stored plan (as `plan list --json` shows it), its text (`source`),
/// what validating it finds (as
/// `plan-cli validate PLAN --json` judges it: a plan a model or a client wrote under the
/// restricted policy its runs get), and, when it is valid, its graph laid out.
async fn plan(State(shared): State<Arc<Shared>>, Path(plan_id): Path<String>) -> Response {
    blocking(move || {
        let stored = (plan_run::stored_plans(&shared.reader()?)?.into_iter())
            .find(|stored| stored.plan_id == plan_id)
            .ok_or_else(|| {
                plan_run::LifecycleError::Refused(format!("there is no stored plan `{plan_id}`"))
            })?;
        let input = plan_run::PlanInput {
            path: plan_id.clone().into(),
            stored_only: true,
        };
        let text = input
            .read(&shared.ledger, &mut std::io::empty())
            .map_err(|error| plan_run::LifecycleError::Refused(error.to_string()))?;
        let author = plan_run::Author::from_name(&stored.author);
        let policy = (author != plan_run::Author::Operator).then(plan_run::Policy::default);
        let strictness = plan_run::Strictness {
            arguments: plan_graph::Severity::Error,
        };
        let env = |name: &str| (shared.env)(name);
        let prepared = tokio::runtime::Handle::current().block_on(plan_run::prepare(
            text,
            plan_run::Inputs::default(),
            &shared.toolbox,
            strictness,
            &env,
        ));
        let (validation, graph) = match prepared {
            Ok(ready) => (
                plan_run::Validation::judged(&ready, author, policy.as_ref()),
                Some(graph::graph(&ready.loaded.plan, None)),
            ),
            Err(plan_run::PrepareError::Invalid(problems)) => (
                plan_run::Validation::invalid(&problems.source, &problems.issues),
                None,
            ),
            Err(error) => return Err(plan_run::LifecycleError::Prepare(Box::new(error))),
        };
        Ok(json!({
            "plan": stored,
            "source": stored.source,
            "validation": validation,
            "graph": graph,
        }))
    })
    .await
}

/// The most records (the first) and events (the last) of a step its panel gets.
const STEP_RECORDS: usize = 200;
const STEP_EVENTS: usize = 500;

/// Every event of a run the ledger holds now (as `plan-cli events RUN` reads them).
fn events_of(
    store: &mut plan_run::ledger::Store,
    run_id: &str,
) -> Result<Vec<plan_types::Event>, plan_run::LifecycleError> {
    let mut feed = plan_run::EventFeed::new(run_id);
    let mut events = Vec::new();
    loop {
        let batch = feed.next(store)?;
        if batch.events.is_empty() {
            return Ok(events);
        }
        events.extend(batch.events);
    }
}

/// Reads run `run` (an id or a unique prefix) off the async threads; what `answer` makes of
/// it, or the error as an answer.
async fn with_run(
    shared: Arc<Shared>,
    run: String,
    answer: impl FnOnce(
        &mut plan_run::ledger::Store,
        &plan_run::ledger::RunRow,
    ) -> Result<Value, plan_run::LifecycleError>
    + Send
    + 'static,
) -> Response {
    blocking(move || {
        let mut store = shared.reader()?;
        let row = plan_run::read_run(&mut store, &run)?;
        answer(&mut store, &row)
    })
    .await
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Decision {
    steps: Vec<String>,
    #[serde(default)]
    reason: Option<String>,
    /// An answer for the one waiting call approved (as `approve RUN STEP --input JSON`).
    #[serde(default)]
    input: Option<serde_json::Value>,
}

/// `POST /api/runs/RUN/approve {"steps": [ID, …]}` (as `plan-cli approve RUN ID…`) and
/// `…/reject {"steps": […], "reason": "…"}` (as `plan-cli reject`): through `plan_run::approve`
/// or `plan_run::reject`, the steps checked against the run's high-risk steps (its plan
/// compiled against the tools it names).
async fn decide(
    State(shared): State<Arc<Shared>>,
    Path(run): Path<String>,
    approve: bool,
    decision: Decision,
) -> Response {
    if decision.steps.is_empty() {
        return refuse(StatusCode::BAD_REQUEST, "`steps` names no step");
    }
    blocking(move || {
        let mut store = shared.writer()?;
        let gated = |row: &plan_run::ledger::RunRow| {
            tokio::runtime::Handle::current()
                .block_on(plan_run::gated_steps_in(row, &shared.toolbox))
        };
        let decided = if approve {
            let request = plan_run::Decisions {
                steps: decision.steps,
                input: decision.input,
                ..plan_run::Decisions::default()
            };
            plan_run::approve(&mut store, &run, &request, gated)?
        } else {
            let reason = decision.reason.as_deref();
            plan_run::reject(&mut store, &run, &decision.steps, reason, gated)?
        };
        json_of(decided)
    })
    .await
}

/// `POST /api/runs/RUN/cancel`: as `plan-cli cancel RUN` (a live run's process is asked to
/// stop, and given 30 s; a waiting one is marked stopped). A run this process goes on with is
/// stopped here, as Ctrl+C stops a terminal's run.
async fn cancel(State(shared): State<Arc<Shared>>, Path(run): Path<String>) -> Response {
    blocking(move || {
        let mut store = shared.writer()?;
        let row = plan_run::read_run(&mut store, &run)?;
        let ours = shared.going().get(&row.run_id).cloned();
        if let Some(stop) = ours {
            stop.cancel();
            let how = match plan_run::wait_stopped(&store, &row.run_id, Duration::from_secs(30))? {
                Some(_) => "stopped",
                None => "asked",
            };
            return Ok(json!({"run_id": row.run_id, "cancelled": how}));
        }
        let (run_id, cancelled) = plan_run::cancel(&mut store, &run, Duration::from_secs(30))?;
        let how = match cancelled {
            plan_run::Cancelled::AlreadyStopped => "already_stopped",
            plan_run::Cancelled::WasWaiting => "was_waiting",
            plan_run::Cancelled::Asked(_) => "asked",
            plan_run::Cancelled::OwnerDied => "owner_died",
            _ => "stopped",
        };
        Ok(json!({"run_id": run_id, "cancelled": how}))
    })
    .await
}

#[derive(Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Resume {
    /// Run the failed steps (and what follows them) again (`resume --retry-failed`).
    #[serde(default)]
    retry_failed: bool,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Retry {
    steps: Vec<String>,
}

/// `POST /api/runs/RUN/resume {}` (or `{"retry_failed": true}`): the run goes on as
/// `plan-cli resume RUN [--retry-failed]` would, in this process, in the background.
async fn resume(
    State(shared): State<Arc<Shared>>,
    Path(run): Path<String>,
    body: Option<Json<Resume>>,
) -> Response {
    let Json(body) = body.unwrap_or_default();
    let options = plan_run::ResumeOptions {
        retry_failed: body.retry_failed,
        ..plan_run::ResumeOptions::default()
    };
    go_on(shared, run, options).await
}

/// `POST /api/runs/RUN/retry {"steps": [ID, …]}`: those steps and every step after them run
/// again, as `plan-cli retry RUN ID…` would, in the background.
async fn retry(
    State(shared): State<Arc<Shared>>,
    Path(run): Path<String>,
    Json(body): Json<Retry>,
) -> Response {
    if body.steps.is_empty() {
        return refuse(StatusCode::BAD_REQUEST, "`steps` names no step");
    }
    let options = plan_run::ResumeOptions {
        retry_steps: body.steps,
        ..plan_run::ResumeOptions::default()
    };
    go_on(shared, run, options).await
}

/// Goes on with a stored run in this process: checked (`plan_run::prepare_resume`: its owner
/// gone, the steps named its own) and its plan prepared with the run's own tools before the
/// answer, so that what refuses it is the answer (4xx); then run in the background. The answer
/// is 202 `{"run_id", "going_on": true}`, or, for a finished run with nothing to run again,
/// 200 with `going_on: false` and its status.
async fn go_on(shared: Arc<Shared>, run: String, options: plan_run::ResumeOptions) -> Response {
    let checked = {
        let shared = shared.clone();
        tokio::task::spawn_blocking(move || {
            let store = shared.writer()?;
            let from = match plan_run::prepare_resume(&store, &run, &options)? {
                plan_run::Resumable::Finished(outcome) => return Ok(Err(outcome.report)),
                plan_run::Resumable::Continue(from) => from,
            };
            let kept = plan_run::Kept::of(&shared.ledger, &from.row.run_id)?;
            Ok::<_, plan_run::LifecycleError>(Ok((store, from, kept)))
        })
        .await
    };
    let (store, from, kept) = match checked {
        Ok(Ok(Ok(ready))) => ready,
        Ok(Ok(Err(report))) => {
            let answer = json!({"run_id": report.run_id, "going_on": false, "task_status": report.task_status});
            return axum::Json(answer).into_response();
        }
        Ok(Err(error)) => return failed(&error),
        Err(error) => return refuse(StatusCode::INTERNAL_SERVER_ERROR, &error.to_string()),
    };
    // The run's future holds the engine's state, which is not `Send`: it runs on a blocking
    // thread of its own, which says first whether it could start.
    let (started, answer) = tokio::sync::oneshot::channel();
    let handle = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        handle.block_on(go_on_here(shared, store, from, kept, started));
    });
    match answer.await {
        Ok(Ok(run_id)) => (
            StatusCode::ACCEPTED,
            axum::Json(json!({"run_id": run_id, "going_on": true})),
        )
            .into_response(),
        Ok(Err(refused)) => refused,
        Err(_) => refuse(StatusCode::INTERNAL_SERVER_ERROR, "the run's thread ended"),
    }
}

/// [`go_on`]'s run: its tools, its plan prepared, then the run to its end; `started` hears
/// the run's id once it goes on, or the answer that refuses it.
async fn go_on_here(
    shared: Arc<Shared>,
    store: plan_run::ledger::Store,
    from: Box<plan_run::ResumeFrom>,
    kept: plan_run::Kept,
    started: tokio::sync::oneshot::Sender<Result<String, Response>>,
) {
    let run_id = from.row.run_id.clone();
    // Taken first, so that a cancel while its tools start and its plan is prepared stops it.
    let stop = tokio_util::sync::CancellationToken::new();
    let taken = {
        let mut going = shared.going();
        let free = !going.contains_key(&run_id);
        if free {
            going.insert(run_id.clone(), stop.clone());
        }
        free
    };
    if !taken {
        let message = format!("run {run_id} is going on in this dashboard already");
        let _ = started.send(Err(refuse(StatusCode::CONFLICT, &message)));
        return;
    }
    let env = |name: &str| (shared.env)(name);
    let toolbox = match shared.tools.toolbox_for(&kept, &env).await {
        Ok(toolbox) => toolbox,
        Err(error) => return refused(&shared, &run_id, started, failed(&error)),
    };
    let prepared = match from.prepare(&toolbox, &env).await {
        Ok(prepared) => prepared,
        Err(error) => {
            toolbox.shutdown().await;
            return refused(&shared, &run_id, started, failed(&error));
        }
    };
    if stop.is_cancelled() {
        toolbox.shutdown().await;
        let message = format!("run {run_id} was cancelled before it went on");
        return refused(
            &shared,
            &run_id,
            started,
            refuse(StatusCode::CONFLICT, &message),
        );
    }
    let mut execution = plan_run::Execution::new();
    execution.cancel = stop;
    execution.project_path = shared.project_path.clone();
    // Calls go to the run's queue, and losing it stops the run, as in `plan-cli resume`.
    execution.use_queue_of(&toolbox);
    // The answer waits until the run has gone on (its first event): what refuses it before
    // (its author's policy, its state file, another process that took it) is the answer.
    let started = Arc::new(Started(
        std::sync::Mutex::new(Some(started)),
        run_id.clone(),
    ));
    execution.events.push(started.clone());
    let ended = plan_run::resume(store, from, prepared, execution).await;
    toolbox.shutdown().await;
    shared.going().remove(&run_id);
    if let Err(error) = ended {
        match started.take() {
            Some(answer) => {
                let _ = answer.send(Err(failed(&error)));
            }
            // The ledger has what happened; what stopped the run is told the front-end.
            None => shared.tell(Notice::RunStopped { run_id, error }),
        }
    }
}

/// A resume refused before the run went on: it is no longer this process's, and `answer` is
/// the request's.
fn refused(
    shared: &Shared,
    run_id: &str,
    started: tokio::sync::oneshot::Sender<Result<String, Response>>,
    answer: Response,
) {
    shared.going().remove(run_id);
    let _ = started.send(Err(answer));
}

/// Hears a resumed run's first event, and answers the request that resumed it then.
struct Started(
    std::sync::Mutex<Option<tokio::sync::oneshot::Sender<Result<String, Response>>>>,
    String,
);

impl Started {
    fn take(&self) -> Option<tokio::sync::oneshot::Sender<Result<String, Response>>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }
}

impl plan_types::EventSink for Started {
    fn emit(&self, _: &plan_types::Event) {
        if let Some(answer) = self.take() {
            let _ = answer.send(Ok(self.1.clone()));
        }
    }
}

/// Runs a read of the ledger off the async threads; its JSON, or its error as an answer.
async fn blocking(
    read: impl FnOnce() -> Result<Value, plan_run::LifecycleError> + Send + 'static,
) -> Response {
    match tokio::task::spawn_blocking(read).await {
        Ok(Ok(value)) => axum::Json(value).into_response(),
        Ok(Err(error)) => failed(&error),
        Err(error) => refuse(StatusCode::INTERNAL_SERVER_ERROR, &error.to_string()),
    }
}

#[derive(serde::Deserialize)]
struct EventsQuery {
    /// Only the events committed from now on.
    #[serde(default)]
    new_only: bool,
}

/// `GET /api/runs/RUN/events[?new_only=true]`: one server-sent event per ledger event (its
/// data the JSON line `events RUN` prints), following a live run until it ends. A read of the
/// ledger that fails ends the stream with an `error` event saying why.
async fn events(
    State(shared): State<Arc<Shared>>,
    Path(run): Path<String>,
    Query(query): Query<EventsQuery>,
) -> Response {
    let opened = {
        let shared = shared.clone();
        tokio::task::spawn_blocking(move || {
            let mut store = shared.writer()?;
            let row = plan_run::read_run(&mut store, &run)?;
            let mut feed = plan_run::EventFeed::new(&row.run_id);
            if query.new_only {
                // What is committed already is passed over (a page that has read the run).
                while !feed.next(&mut store)?.events.is_empty() {}
            }
            Ok::<_, plan_run::LifecycleError>((store, feed))
        })
        .await
    };
    let (store, feed) = match opened {
        Ok(Ok(opened)) => opened,
        Ok(Err(error)) => return failed(&error),
        Err(error) => return refuse(StatusCode::INTERNAL_SERVER_ERROR, &error.to_string()),
    };
    let (sender, receiver) = tokio::sync::mpsc::channel::<Result<Event, Infallible>>(64);
    tokio::spawn(follow(store, feed, sender));
    let stream = futures_util::stream::unfold(receiver, |mut receiver| async move {
        receiver.recv().await.map(|event| (event, receiver))
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

/// Sends the run's events as they are committed until it ends (or the client goes). Each
/// read of the ledger takes a blocking thread only while it reads; between reads, and while a
/// slow client is waited for, none is held.
async fn follow(
    store: plan_run::ledger::Store,
    feed: plan_run::EventFeed,
    sender: tokio::sync::mpsc::Sender<Result<Event, Infallible>>,
) {
    let mut held = (store, feed);
    loop {
        let read = tokio::task::spawn_blocking(move || {
            let (mut store, mut feed) = held;
            let batch = feed.next(&mut store);
            (store, feed, batch)
        })
        .await;
        let (store, feed, batch) = match read {
            Ok((store, feed, Ok(batch))) => (store, feed, batch),
            Ok((_, _, Err(error))) => {
                let said = Event::default().event("error").data(error.to_string());
                let _ = sender.send(Ok(said)).await;
                return;
            }
            Err(_) => return,
        };
        held = (store, feed);
        for event in &batch.events {
            // An event is plain data: it is always JSON.
            let line = serde_json::to_string(event).unwrap_or_default();
            if sender.send(Ok(Event::default().data(line))).await.is_err() {
                return;
            }
        }
        if batch.over && batch.events.is_empty() {
            return;
        }
        if batch.events.is_empty() {
            if sender.is_closed() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}
