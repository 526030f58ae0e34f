//! Task steps: a coding task implemented in a git worktree of its own, verified by checks,
//! tried again with feedback, and merged into the base branch one task at a time.
//!
//! The lifecycle is the task executor's (`execute-state.json`, schema 2.0): pending →
//! in_progress (attempt N, the worktree made at attempt 1 and reused after) → verifying →
//! verified → merging → completed; a failed attempt → failed → the next attempt while attempts
//! are left, else abandoned (worktree kept). Every change is reported as the step's checkpoint
//! (a [`TaskState`]) and, under `sync`, the task goes on only once it is durable: a resumed run
//! goes on from the last change, and a task is never merged twice (the workspace's merge sees
//! a branch already merged).
//!
//! git itself is behind the [`Workspace`] port (`plan-workspace` implements it); the
//! implement and feedback calls and the checks (the `exec` tool) are tool calls admitted and
//! made as every call is.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use plan_graph::{OnConflict, PlanPath, RetryPolicy, Risk, TaskSpec};
use plan_types::{
    Approvals, CallPath, MERGE, PendingApproval, QueueEntry, QueueStatus, Record, RetryFeedback,
    Segment, StepError, TaskCommit, TaskError, TaskErrorKind, TaskPhase, TaskState, Verdict,
    WorktreeStatus,
};
use plan_vars::{Scope, ValueTemplate};
use serde_json::{Value, json};

use crate::admit::Gate;
use crate::block::NodeDone;
use crate::call::{CallContext, Inner, Made};
use crate::overlay::Overlay;
use crate::schema::{compile_schema, resolve_checked};
use plan_ports::{Registry, Tool, Trial, codes};

pub use plan_ports::{MergeOutcome, Workspace, WorkspaceError, Worktree};

/// The id of the run's context update: its events', its approval's and its checkpoint's.
pub(crate) const CONTEXT_UPDATE: &str = plan_types::CONTEXT_UPDATE_ID;

/// The plan's `context_update` call, bound to its tool.
pub(crate) struct ContextUpdate {
    call: TaskTool,
    expressions: crate::expression::Expressions,
}

/// Compiles the plan's `context_update` call.
pub(crate) fn compile_context_update(
    call: &plan_graph::TaskCall,
    registry: &Registry,
) -> Result<Arc<ContextUpdate>, String> {
    let mut expressions = crate::expression::Expressions::default();
    let call = compile_call(&mut expressions, "context_update", call, registry)?;
    Ok(Arc::new(ContextUpdate { call, expressions }))
}

/// What the context update reads of the run.
pub(crate) struct ContextInputs<'a> {
    pub(crate) project_md: &'a Path,
    pub(crate) tasks: &'a [String],
    pub(crate) vars: &'a BTreeMap<String, Arc<Value>>,
    pub(crate) env: &'a BTreeMap<String, Value>,
    pub(crate) approvals: &'a Approvals,
}

/// The run's context update, after its last task: the `context_update` call in the base's
/// folder (reading `${task.tasks}`, the tasks merged as `A, B`, `${task.project_md}` and
/// `${task.prompt}`), then a commit
/// on the base of what it changed. Its result (or stdout) may be JSON naming
/// `features_added`, `endpoints_added` and `models_added`. The value is the state file's
/// `context_update` object.
pub(crate) async fn run_context_update(
    update: &ContextUpdate,
    context: &CallContext,
    workspace: &dyn Workspace,
    run: ContextInputs<'_>,
) -> Result<Value, StepError> {
    let ContextInputs {
        project_md,
        tasks,
        vars,
        env,
        approvals,
    } = run;
    let call = &update.call;
    let failed = |message: String| StepError::new(codes::E_TOOL, message);
    let dir = workspace
        .base_folder()
        .await
        .map_err(|e| failed(e.to_string()))?;
    let before = workspace
        .changed()
        .await
        .map_err(|e| failed(e.to_string()))?;
    let shown = project_md.display().to_string();
    let values = json!({
        "id": "context_update",
        "project_md": shown,
        // Text, as a program's argument needs it.
        "tasks": tasks.join(", "),
        "prompt": format!(
            "The tasks {} were merged into this project. Update {shown} (and the registries it keeps) to describe what they added.",
            tasks.join(", ")
        ),
    });
    let own = [("task", &values), ("failure", &Value::Null)];
    let resolved = call.resolve(vars, own, env, &update.expressions, &context.variable_names);
    let gate = Gate {
        tool: Some(&call.tool_name),
        approval: None,
        waits_as: CONTEXT_UPDATE,
        schema: None,
        answerable: true,
    };
    let inner = Inner {
        // An id no step can take (`plan::invalid_id`): `workspace/context_update` was a step's
        // to take, and its events were read as that step's.
        id: CONTEXT_UPDATE,
        tool_name: &call.tool_name,
        tool: &call.tool,
        retry: once(),
        timeout: call.timeout,
        working_dir: Some(Arc::from(dir.as_path())),
        earlier: 0,
    };
    let result = match context.make(inner, resolved, &gate, approvals).await {
        // Refused before it ran (its arguments, a guard): that error.
        Made::Done {
            outcome: Err(error),
            attempts: 0,
            ..
        } => return Err(error),
        Made::Done { outcome, .. } => outcome.map_err(|e| failed(e.message))?,
        Made::Waiting(pending) => {
            return Err(failed(format!("waits for `{}`", pending.step_id)));
        }
    };
    let after = workspace
        .changed()
        .await
        .map_err(|e| failed(e.to_string()))?;
    let made: Vec<String> = after.into_iter().filter(|p| !before.contains(p)).collect();
    let message = format!("Update project context after tasks {}", tasks.join(", "));
    let commit = if made.is_empty() {
        None
    } else {
        workspace
            .commit_base(&made, &message)
            .await
            .map_err(|e| failed(e.to_string()))?
    };
    // What it added, when it says: its result, or its stdout, as JSON.
    let said = match result.get("stdout").and_then(Value::as_str) {
        Some(stdout) => serde_json::from_str::<Value>(stdout.trim()).unwrap_or(Value::Null),
        None => result,
    };
    let list = |key: &str| {
        said.get(key)
            .and_then(Value::as_array)
            .map(|items| {
                items
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    Ok(json!({
        "status": "completed",
        "project_md_path": shown,
        "features_added": list("features_added"),
        "endpoints_added": list("endpoints_added"),
        "models_added": list("models_added"),
        "commit_hash": commit,
    }))
}

/// The plan's workspace settings the engine applies.
#[derive(Debug, Clone)]
pub(crate) struct TaskSettings {
    pub(crate) max_attempts: u32,
    pub(crate) on_conflict: OnConflict,
    pub(crate) commit_prefix: String,
    pub(crate) no_commits: bool,
    /// The workspace's `verify_after_merge` checks, shared by every task.
    pub(crate) after_merge: Option<Arc<MergeChecks>>,
}

impl TaskSettings {
    pub(crate) fn of(
        workspace: &plan_graph::Workspace,
        after_merge: Option<Arc<MergeChecks>>,
    ) -> Self {
        TaskSettings {
            max_attempts: workspace.max_attempts.max(1),
            on_conflict: workspace.on_conflict,
            commit_prefix: workspace.commit_prefix.clone(),
            no_commits: workspace.no_commits,
            after_merge,
        }
    }
}

/// The workspace's `verify_after_merge` checks: run on the combination of the base and each
/// verified task, in a trial checkout, before the base moves.
pub(crate) struct MergeChecks {
    checks: Vec<CompiledCheck>,
    exec: Arc<dyn Tool>,
    gated: bool,
}

impl std::fmt::Debug for MergeChecks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MergeChecks")
            .field("checks", &self.checks.len())
            .field("gated", &self.gated)
            .finish()
    }
}

impl MergeChecks {
    /// Its calls, for [`crate::Program::call_sites`].
    pub(crate) fn call_sites(&self, path: PlanPath, sites: &mut crate::sites::Sites) {
        for k in 0..self.checks.len() {
            sites.push(
                path.clone().index(k),
                &Arc::from(""),
                crate::sites::CallKind::MergeCheck,
                ("exec", &*self.exec),
                self.gated,
            );
        }
    }
}

/// Compiles the workspace's `verify_after_merge` checks (none: no trial merges).
pub(crate) fn compile_merge_checks(
    checks: &[plan_graph::Check],
    registry: &Registry,
) -> Result<Option<Arc<MergeChecks>>, String> {
    if checks.is_empty() {
        return Ok(None);
    }
    let exec = registry.get("exec").cloned().ok_or_else(|| {
        "`verify_after_merge` checks run with the `exec` tool, which is not available here"
            .to_owned()
    })?;
    Ok(Some(Arc::new(MergeChecks {
        checks: compile_checks(checks)?,
        gated: exec.info().risk == Risk::High,
        exec,
    })))
}

/// Checks as the plan writes them, their argv's placeholders compiled.
fn compile_checks(checks: &[plan_graph::Check]) -> Result<Vec<CompiledCheck>, String> {
    checks
        .iter()
        .enumerate()
        .map(|(k, check)| {
            Ok(CompiledCheck {
                argv: ValueTemplate::compile(&json!(check.argv))
                    .map_err(|e| format!("check {}: malformed placeholder: {e}", k + 1))?,
                text: check.argv.join(" "),
                contains: check.contains.clone(),
                not_contains: check.not_contains.clone(),
                timeout: Duration::from_millis(
                    check
                        .timeout_ms
                        .unwrap_or(plan_graph::DEFAULT_CHECK_TIMEOUT_MS),
                ),
            })
        })
        .collect()
}

/// A tool call of a task, bound to its tool.
pub(crate) struct TaskTool {
    tool: Arc<dyn Tool>,
    tool_name: Arc<str>,
    args: ValueTemplate,
    schema: Option<Arc<jsonschema::Validator>>,
    timeout: Option<Duration>,
    gated: bool,
}

impl TaskTool {
    /// Its arguments over the run's variables, `task` and `failure`, checked against its
    /// tool's schema.
    fn resolve(
        &self,
        vars: &BTreeMap<String, Arc<Value>>,
        own: [(&'static str, &Value); 2],
        env: &BTreeMap<String, Value>,
        expressions: &crate::expression::Expressions,
        names: &[String],
    ) -> Result<Value, StepError> {
        let variables = Overlay { vars, own };
        let evaluate = |text: &str, scope: &Scope<'_>| expressions.evaluate(text, scope);
        let scope = Scope {
            vars: Some(&variables),
            env: Some(env),
            evaluate: Some(&evaluate),
            names: Some(names),
            ..Scope::default()
        };
        resolve_checked(&self.args, &scope, self.schema.as_deref(), &self.tool_name)
    }
}

struct CompiledCheck {
    argv: ValueTemplate,
    /// The command as written, for errors (`pytest tests/test_calc.py`).
    text: String,
    contains: Option<String>,
    not_contains: Option<String>,
    timeout: Duration,
}

/// A task step bound to its tools.
pub(crate) struct CompiledTask {
    implement: TaskTool,
    feedback: Option<TaskTool>,
    checks: Vec<CompiledCheck>,
    /// The `exec` tool the checks run with (when there are checks).
    exec: Option<Arc<dyn Tool>>,
    /// The checks wait for an approval (`{ID}/verify`, once per attempt's checks) when the
    /// `exec` they run with is a high-risk tool, as an `exec` step would.
    checks_gated: bool,
    spec: String,
    title: String,
    layer: String,
    settings: TaskSettings,
    expressions: crate::expression::Expressions,
    /// The task as the plan writes it, for previews.
    pub(crate) written: Value,
}

impl CompiledTask {
    /// The keys approvals of its high-risk calls are kept under.
    pub(crate) fn gated_calls(&self, step: &CallPath) -> Vec<String> {
        let gated = [
            ("implement", self.implement.gated),
            ("feedback", self.feedback.as_ref().is_some_and(|f| f.gated)),
            ("verify", self.checks_gated),
            (
                "verify-after-merge",
                (self.settings.after_merge.as_ref()).is_some_and(|after| after.gated),
            ),
        ];
        gated
            .into_iter()
            .filter(|(_, gated)| *gated)
            .map(|(name, _)| step.then(name, 1).key())
            .collect()
    }

    /// The tool of a call inside the task (`implement#2`, `check-1#2`, `feedback#2`).
    pub(crate) fn tool_at(&self, path: &[Segment]) -> Option<&str> {
        let [call] = path else {
            return None;
        };
        let name = &*call.name;
        match name {
            "implement" => Some(&self.implement.tool_name),
            "feedback" => self.feedback.as_ref().map(|f| &*f.tool_name),
            "verify" | "verify-after-merge" => Some("exec"),
            _ if name.starts_with("check-") || name.starts_with("merge-check-") => Some("exec"),
            _ => None,
        }
    }
}

/// A task's tool call bound to its tool, its data expressions compiled into `expressions`.
fn compile_call(
    expressions: &mut crate::expression::Expressions,
    name: &str,
    call: &plan_graph::TaskCall,
    registry: &Registry,
) -> Result<TaskTool, String> {
    let tool = registry
        .get(&call.tool)
        .ok_or_else(|| format!("`{name}`: unknown tool `{}`", call.tool))?;
    let args = ValueTemplate::compile(&Value::Object(call.args.clone()))
        .map_err(|e| format!("`{name}`: malformed placeholder: {e}"))?;
    for placeholder in args.placeholders() {
        if let plan_vars::Root::Expr(text) = &placeholder.root {
            expressions
                .add(text, &crate::expression::Place::DATA)
                .map_err(|e| format!("`{name}`: `{placeholder}`: {e}"))?;
        }
    }
    let info = tool.info();
    Ok(TaskTool {
        schema: compile_schema(&info.input_schema)
            .map_err(|e| format!("`{name}`: tool `{}`'s schema: {e}", call.tool))?,
        tool: tool.clone(),
        tool_name: Arc::from(call.tool.as_str()),
        args,
        timeout: call.timeout_ms.map(Duration::from_millis),
        gated: call.risk.unwrap_or(info.risk) == Risk::High,
    })
}

/// Compiles a task step; `Err` says what is wrong.
pub(crate) fn compile_task(
    id: &str,
    title: Option<&str>,
    layer: Option<&str>,
    task: &TaskSpec,
    settings: TaskSettings,
    registry: &Registry,
) -> Result<CompiledTask, String> {
    let mut expressions = crate::expression::Expressions::default();
    let implement = compile_call(&mut expressions, "implement", &task.implement, registry)?;
    let feedback = task
        .feedback
        .as_ref()
        .map(|call| compile_call(&mut expressions, "feedback", call, registry))
        .transpose()?;
    let checks = compile_checks(&task.verify)?;
    let exec = if checks.is_empty() {
        None
    } else {
        Some(registry.get("exec").cloned().ok_or_else(|| {
            "checks run with the `exec` tool, which is not available here".to_owned()
        })?)
    };
    Ok(CompiledTask {
        implement,
        feedback,
        checks,
        checks_gated: exec.as_ref().is_some_and(|e| e.info().risk == Risk::High),
        exec,
        spec: task.spec.clone().unwrap_or_default(),
        title: title.unwrap_or(id).to_owned(),
        layer: layer.unwrap_or_default().to_owned(),
        settings,
        expressions,
        written: serde_json::to_value(task).unwrap_or(Value::Null),
    })
}

/// How a task step's run ended: settled, or halted for a person (a merge conflict under
/// `on_conflict: wait`) with its state.
pub(crate) enum TaskEnd {
    Done(Result<Value, StepError>),
    Waiting(Value, PendingApproval),
}

/// One run of a task step.
pub(crate) struct TaskRun {
    pub(crate) step: usize,
    pub(crate) step_id: Arc<str>,
    pub(crate) context: CallContext,
    pub(crate) task: Arc<CompiledTask>,
    pub(crate) vars: BTreeMap<String, Arc<Value>>,
    pub(crate) env: BTreeMap<String, Value>,
    pub(crate) approvals: Arc<Approvals>,
    pub(crate) workspace: Option<Arc<dyn Workspace>>,
    /// The merge queue: held while a task merges, taken in the order tasks ask (tokio's
    /// mutex is fair), which is the order they finished verification.
    pub(crate) merges: Arc<tokio::sync::Mutex<()>>,
    /// Where the task stood when an earlier attempt at the run ended.
    pub(crate) from: Option<Value>,
    /// Where each change goes to be committed (only with a ledger).
    pub(crate) progress: Option<tokio::sync::mpsc::UnboundedSender<NodeDone>>,
    /// The status and attempt last announced.
    pub(crate) shown: Option<(TaskPhase, u32)>,
    /// The records of the calls it made (`ID/implement#1`, `ID/check-1#1`, …) not yet handed
    /// to the scheduler: they go with the next committed state, or with the task's end. So a
    /// task's calls are in the ledger like a block's nodes, and the guards count them on
    /// resume.
    pub(crate) records: Vec<Record>,
}

/// What ends a task's run early: the run stopping, the ledger failing, or an error no attempt
/// can mend.
enum Stopped {
    /// The step ends with this error.
    Error(StepError),
    /// A high-risk call waits for a decision: the run halts `WAITING`, and `resume` runs the
    /// attempt again once it is decided.
    Waiting(PendingApproval),
}

/// Checks to run, and where: a task's own in its worktree, or the workspace's
/// `verify_after_merge` in the trial checkout.
struct Checks<'a> {
    checks: &'a [CompiledCheck],
    exec: &'a Arc<dyn Tool>,
    gated: bool,
    /// Their calls' name (`check`, `merge-check`).
    name: &'a str,
    dir: &'a Path,
}

/// A check that failed: which (its command), the attempt's error message, why in a few
/// words, and what it printed (none when it was refused or could not start: then there is
/// nothing to ask feedback about).
struct CheckFailed {
    check: String,
    message: String,
    reason: String,
    output: Option<String>,
}

impl CheckFailed {
    fn before_it_ran(check: &str, message: String) -> CheckFailed {
        CheckFailed {
            check: check.to_owned(),
            reason: message.clone(),
            message,
            output: None,
        }
    }
}

/// A failed attempt: why, what failed, the message, and the next attempt's feedback.
struct Failure {
    kind: TaskErrorKind,
    step: String,
    message: String,
    feedback: String,
}

fn now() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

/// What a fix commit says was fixed: the `Fix applied:` section of its body (the original's
/// fix commit format), else its subject after `Fix:` (any case); none when it says neither (a
/// body's other lines are often a tool's footer, not an account of the fix).
fn fixed_of(subject: &str, body: &str) -> Option<String> {
    let mut lines = body.lines();
    if lines.any(|line| line.trim().eq_ignore_ascii_case("fix applied:")) {
        let section: Vec<&str> = lines
            .take_while(|line| !line.trim().is_empty())
            .map(|line| line.trim().trim_start_matches("- ").trim())
            .collect();
        if !section.is_empty() {
            return Some(section.join("; "));
        }
    }
    let at = subject.to_ascii_lowercase().find("fix:")?;
    Some(subject[at + 4..].trim().to_owned()).filter(|s| !s.is_empty())
}

fn stopped(message: impl Into<String>) -> Stopped {
    Stopped::Error(StepError::new(codes::E_CANCELLED, message))
}

/// The last lines of `text`, at most `lines` lines and about `bytes` bytes.
fn tail(text: &str, lines: usize, bytes: usize) -> String {
    let kept: Vec<&str> = text.trim_end().lines().rev().take(lines).collect();
    let mut out = kept.into_iter().rev().collect::<Vec<_>>().join("\n");
    if out.len() > bytes {
        let mut cut = out.len() - bytes;
        while !out.is_char_boundary(cut) {
            cut += 1;
        }
        out = format!("…{}", &out[cut..]);
    }
    out
}

impl TaskRun {
    /// Runs the task step to its merge, its abandonment, or a wait.
    pub(crate) async fn execute(self: Box<Self>) -> crate::call::Finished {
        let started = std::time::Instant::now();
        let step = self.step;
        let (end, nested) = self.run().await;
        let end = match end {
            TaskEnd::Done(outcome) => crate::call::WorkEnd::Call(Made::Done {
                outcome,
                attempts: 1,
                took: started.elapsed(),
            }),
            TaskEnd::Waiting(checkpoint, pending) => {
                crate::call::WorkEnd::Stopped(checkpoint, pending)
            }
        };
        crate::call::Finished {
            step,
            item: None,
            nested,
            end,
        }
    }

    /// The task's own identity, which its calls (`implement`, `check-N`, `feedback`) are
    /// inside.
    fn path(&self) -> CallPath {
        CallPath::step(self.step_id.clone())
    }

    /// Runs the task from where it stands to its merge, its abandonment, or a wait.
    /// Runs the task, and gives the records of the calls it made that were not committed
    /// with one of its states.
    pub(crate) async fn run(mut self) -> (TaskEnd, Vec<Record>) {
        let end = self.run_here().await;
        (end, std::mem::take(&mut self.records))
    }

    async fn run_here(&mut self) -> TaskEnd {
        let Some(workspace) = self.workspace.clone() else {
            return TaskEnd::Done(Err(StepError::new(
                codes::E_TOOL,
                format!(
                    "task step `{}` needs a git workspace, and this run has none",
                    self.step_id
                ),
            )));
        };
        let mut state: TaskState = self
            .from
            .take()
            .and_then(|value| serde_json::from_value(value).ok())
            .unwrap_or_default();
        match self.drive(&*workspace, &mut state).await {
            Ok(end) => end,
            Err(Stopped::Error(error)) => TaskEnd::Done(Err(error)),
            Err(Stopped::Waiting(pending)) => {
                TaskEnd::Waiting(serde_json::to_value(&state).unwrap_or(Value::Null), pending)
            }
        }
    }

    async fn drive(
        &mut self,
        workspace: &dyn Workspace,
        state: &mut TaskState,
    ) -> Result<TaskEnd, Stopped> {
        let id = self.step_id.clone();
        let max = self.task.settings.max_attempts;
        // The first pass reads the state the task was resumed at (or a new task's `pending`);
        // later passes, states this run made.
        let mut resumed = true;
        loop {
            let first_pass = std::mem::replace(&mut resumed, false);
            match state.status {
                TaskPhase::Completed => return Ok(TaskEnd::Done(Ok(self.result(state)))),
                TaskPhase::Abandoned => return Ok(TaskEnd::Done(Err(self.abandoned(state)))),
                TaskPhase::Pending | TaskPhase::Failed | TaskPhase::InProgress => {
                    let existing = workspace.worktree(&id);
                    if state.status == TaskPhase::InProgress && existing.is_none() {
                        // (`first_pass` holds: see `lost_on_resume`.)
                        // Only a resumed task is `in_progress` here (a live attempt goes on to
                        // `verifying` or `failed`), and its worktree is gone (removed while the
                        // run was stopped, or broken: its `.git` removed). As a task
                        // executor's resume does, it goes back to `pending` without counting
                        // the attempt: that attempt runs again in a worktree made anew (of the
                        // task's branch, which keeps its commits). A worktree that goes during
                        // an attempt fails that attempt, which counts, when it is verified.
                        lost_on_resume(state);
                        self.report(state).await?;
                        continue;
                    }
                    // An attempt counted and interrupted while its worktree was being made
                    // (the state says `creating`) has not started: it goes on as that attempt,
                    // rather than counting another (with `max_attempts: 1` the task was
                    // abandoned without ever running).
                    let counted = state.worktree_status == Some(WorktreeStatus::Creating);
                    if state.status != TaskPhase::InProgress && !counted {
                        if state.attempts >= max {
                            return self.abandon(state).await;
                        }
                        state.attempts += 1;
                    }
                    let worktree = match existing {
                        Some(worktree) if state.status == TaskPhase::InProgress => {
                            // Resumed mid-attempt: the attempt starts again from the task's
                            // last recorded commit, with the killed attempt's half-written
                            // output gone.
                            let last = state.commits.last().map(|c| c.hash.clone());
                            if let Err(error) = workspace.reset(&id, last.as_deref()).await {
                                let failure = git_failure(format!(
                                    "cannot clean the worktree for the resumed attempt: {error}"
                                ));
                                if let Some(end) = self.fail(state, failure).await? {
                                    return Ok(end);
                                }
                                continue;
                            }
                            worktree
                        }
                        Some(worktree) => worktree,
                        None => {
                            state.worktree_status = Some(WorktreeStatus::Creating);
                            self.report(state).await?;
                            let worktree = match workspace.create(&id).await {
                                Ok(worktree) => worktree,
                                Err(error) => {
                                    // The attempt counted and failed: the task is `failed`
                                    // with the error (no worktree), and the step ends (no
                                    // later attempt of this run would fare better; a
                                    // resume with `--retry-failed` tries the next one).
                                    let message =
                                        format!("cannot make the worktree of task `{id}`: {error}");
                                    state.errors.push(TaskError {
                                        attempt: state.attempts,
                                        kind: TaskErrorKind::ImplementationError,
                                        step: "git worktree add".into(),
                                        message: message.clone(),
                                        timestamp: now(),
                                    });
                                    state.status = TaskPhase::Failed;
                                    state.worktree_status = None;
                                    self.report(state).await?;
                                    return Ok(TaskEnd::Done(Err(StepError::new(
                                        codes::E_TOOL,
                                        message,
                                    ))));
                                }
                            };
                            state.worktree_created_at = Some(now());
                            worktree
                        }
                    };
                    state.worktree_path = Some(worktree.path.display().to_string());
                    state.branch = Some(worktree.branch.clone());
                    state.worktree_status = Some(WorktreeStatus::Active);
                    state.started_at.get_or_insert_with(now);
                    state.status = TaskPhase::InProgress;
                    self.report(state).await?;
                    match self.implement(workspace, state, &worktree).await? {
                        Ok(()) => {
                            state.status = TaskPhase::Verifying;
                            self.report(state).await?;
                        }
                        Err(failure) => {
                            if let Some(end) = self.fail(state, failure).await? {
                                return Ok(end);
                            }
                        }
                    }
                }
                TaskPhase::Verifying => {
                    let Some(worktree) = workspace.worktree(&id) else {
                        if first_pass {
                            // Resumed `verifying` with its worktree gone (removed while the
                            // run was stopped): nothing the attempt did failed, so it does
                            // not count, as for a task resumed `in_progress`.
                            lost_on_resume(state);
                            self.report(state).await?;
                            continue;
                        }
                        // Gone while this run verified it: the attempt fails, and counts.
                        if let Some(end) = self.fail(state, worktree_gone(&id)).await? {
                            return Ok(end);
                        }
                        continue;
                    };
                    match self.verify(state, &worktree).await? {
                        Ok(()) => {
                            state.status = TaskPhase::Verified;
                            state.queue = Some(QueueEntry {
                                status: QueueStatus::Ready,
                                // To the nanosecond: tasks verified within one second keep
                                // the order they joined the queue in (the state file's
                                // priorities).
                                queued_at: humantime::format_rfc3339_nanos(SystemTime::now())
                                    .to_string(),
                            });
                            self.report(state).await?;
                        }
                        Err(failure) => {
                            if let Some(end) = self.fail(state, failure).await? {
                                return Ok(end);
                            }
                        }
                    }
                }
                TaskPhase::Verified | TaskPhase::Merging => {
                    if state.conflict_waits > 0 {
                        let key = self.path().then(MERGE, state.conflict_waits).to_string();
                        if let Verdict::Rejected(why) = self.approvals.decision(&key, None) {
                            state.errors.push(TaskError {
                                attempt: state.attempts,
                                kind: TaskErrorKind::MergeConflict,
                                step: "git merge".into(),
                                message: format!("merging again was refused: {why}"),
                                timestamp: now(),
                            });
                            return self.abandon(state).await;
                        }
                    }
                    if let Some(end) = self.merge(workspace, state).await? {
                        return Ok(end);
                    }
                }
            }
        }
    }

    /// Runs the implement call in the worktree and commits what it changed.
    async fn implement(
        &mut self,
        workspace: &dyn Workspace,
        state: &mut TaskState,
        worktree: &Worktree,
    ) -> Result<Result<(), Failure>, Stopped> {
        let id = self.step_id.clone();
        let attempt = state.attempts;
        let before = match workspace.head(&id).await {
            Ok(head) => head,
            Err(error) => return Ok(Err(git_failure(error.to_string()))),
        };
        let task = self.task.clone();
        let values = self.task_values(state, worktree);
        let call = &task.implement;
        let path = self.path().then("implement", attempt);
        let outcome = self
            .call(call, &path, &values, &Value::Null, Some(&worktree.path))
            .await?;
        if let Err(error) = outcome {
            let message = format!("`{}` failed: {}", call.tool_name, error.message);
            if hopeless(&error) {
                // No attempt can change this: the plan (or a person) must.
                return Err(Stopped::Error(StepError {
                    message: format!("task `{id}`: {message}"),
                    ..error
                }));
            }
            return Ok(Err(Failure {
                kind: TaskErrorKind::ImplementationError,
                step: call.tool_name.to_string(),
                feedback: message.clone(),
                message,
            }));
        }
        let title = self.commit_title(state);
        let own_message = format!(
            "{title}\n\nTask: {id}\nAttempt: {attempt}/{}\n",
            task.settings.max_attempts
        );
        if !task.settings.no_commits
            && let Err(error) = workspace.commit_all(&id, &own_message).await
        {
            return Ok(Err(git_failure(format!(
                "cannot commit the attempt: {error}"
            ))));
        }
        let made = match workspace.commits_since(&id, &before).await {
            Ok(made) => made,
            Err(error) => return Ok(Err(git_failure(error.to_string()))),
        };
        if made.is_empty() {
            let message = if task.settings.no_commits {
                format!(
                    "attempt {attempt} made no commit (`no_commits` is set: the implementer commits its own work)"
                )
            } else {
                format!("attempt {attempt} changed nothing in the worktree")
            };
            return Ok(Err(Failure {
                kind: TaskErrorKind::ImplementationError,
                step: call.tool_name.to_string(),
                feedback: format!(
                    "{message}: make the changes the task asks for in {}",
                    worktree.path.display()
                ),
                message,
            }));
        }
        for commit in made {
            // What was fixed is the implementer's own account, in a commit it made; plan-cli's
            // own commit (whose title only repeats the failure) says nothing of it.
            let own = commit.subject == title && commit.body.starts_with(&format!("Task: {id}"));
            let fixed = (attempt > 1 && !own)
                .then(|| fixed_of(&commit.subject, &commit.body))
                .flatten();
            state.commits.push(TaskCommit {
                hash: commit.hash,
                kind: if attempt == 1 {
                    "implementation"
                } else {
                    "fix"
                }
                .into(),
                attempt,
                message: commit.subject,
                fixed,
            });
        }
        Ok(Ok(()))
    }

    /// `[PREFIX][ID] title` on the first attempt, `[PREFIX][ID] Fix: …` after.
    fn commit_title(&self, state: &TaskState) -> String {
        let prefix = &self.task.settings.commit_prefix;
        let tag = if prefix.is_empty() {
            format!("[{}]", self.step_id)
        } else {
            format!("[{prefix}][{}]", self.step_id)
        };
        match state.errors.last() {
            Some(error) if state.attempts > 1 => {
                format!("{tag} Fix: {}", first_line(&error.message))
            }
            _ => format!("{tag} {}", self.task.title),
        }
    }

    /// Runs the task's checks in its worktree, in order; the first that fails fails the
    /// attempt.
    async fn verify(
        &mut self,
        state: &mut TaskState,
        worktree: &Worktree,
    ) -> Result<Result<(), Failure>, Stopped> {
        let task = self.task.clone();
        let Some(exec) = &task.exec else {
            return Ok(Ok(()));
        };
        let checks = Checks {
            checks: &task.checks,
            exec,
            gated: task.checks_gated,
            name: "check",
            dir: &worktree.path,
        };
        match self.run_checks(state, worktree, checks).await? {
            Ok(()) => Ok(Ok(())),
            Err(failed) => Ok(Err(self.failure_of(state, worktree, failed).await?)),
        }
    }

    /// The failed attempt a failed check makes, with the next attempt's feedback (the
    /// `feedback` call's, when the check ran and the plan names one).
    async fn failure_of(
        &mut self,
        state: &TaskState,
        worktree: &Worktree,
        failed: CheckFailed,
    ) -> Result<Failure, Stopped> {
        let feedback = match &failed.output {
            None => failed.message.clone(),
            Some(output) => {
                self.feedback(state, worktree, &failed.check, &failed.reason, output)
                    .await?
            }
        };
        Ok(Failure {
            kind: TaskErrorKind::VerificationFailed,
            step: failed.check,
            message: failed.message,
            feedback,
        })
    }

    /// Runs `checks` in `checks.dir`, in order, as calls `ID/<name>-K#<attempt>`; the first
    /// that fails is returned (its feedback is made by [`TaskRun::failure_of`]).
    async fn run_checks(
        &mut self,
        state: &mut TaskState,
        worktree: &Worktree,
        checks: Checks<'_>,
    ) -> Result<Result<(), CheckFailed>, Stopped> {
        let Checks {
            checks,
            exec,
            gated,
            name,
            dir,
        } = checks;
        let values = self.task_values(state, worktree);
        for (k, check) in checks.iter().enumerate() {
            let path = self
                .path()
                .then(&format!("{name}-{}", k + 1), state.attempts)
                .to_string();
            let argv = {
                let variables = Overlay {
                    vars: &self.vars,
                    own: [("task", &values), ("failure", &Value::Null)],
                };
                let scope = Scope {
                    vars: Some(&variables),
                    env: Some(&self.env),
                    names: Some(&self.context.variable_names),
                    ..Scope::default()
                };
                check.argv.resolve(&scope)
            };
            let argv = match argv {
                Ok(argv) => argv,
                Err(error) => {
                    let message = format!("check `{}`: {error}", check.text);
                    return Ok(Err(CheckFailed::before_it_ran(&check.text, message)));
                }
            };
            let args = json!({
                "argv": argv,
                "timeout_ms": u64::try_from(check.timeout.as_millis()).unwrap_or(u64::MAX),
            });
            // One decision covers every check of the list in the attempt (`ID/verify#N`,
            // `ID/verify-after-merge#N`).
            let gate_name = if name == "check" {
                "verify"
            } else {
                "verify-after-merge"
            };
            let key = self.path().then(gate_name, state.attempts).key();
            let gate = Gate {
                tool: Some("exec"),
                approval: gated.then_some((key.as_str(), None)),
                waits_as: &key,
                schema: None,
                // A check's program is the plan's own: no answer changes it.
                answerable: false,
            };
            let exec_name: Arc<str> = Arc::from("exec");
            let inner = Inner {
                id: &path,
                tool_name: &exec_name,
                tool: exec,
                retry: once(),
                timeout: Some(check.timeout + Duration::from_secs(5)),
                working_dir: Some(Arc::from(dir)),
                // A task's calls carry its attempt in their id (`ID/check-1#2`).
                earlier: 0,
            };
            // A high-risk `exec` waits: the run halts for a person, and `resume` verifies
            // again once it is decided.
            let (outcome, attempts) = self
                .make(inner, Ok(args), &gate, "was being verified")
                .await?;
            if attempts == 0
                && let Err(error) = outcome
            {
                // Refused before it ran (a rejection, a guard).
                return Ok(Err(CheckFailed::before_it_ran(&check.text, error.message)));
            }
            // A program that exits non-zero fails its `exec` call (so the run's output marks
            // the check failed); the error's details hold what it printed.
            let printed = |result: &Value| {
                let text = |key: &str| result.get(key).and_then(Value::as_str).unwrap_or("");
                format!("{}{}", text("stdout"), text("stderr"))
            };
            let (message, output) = match outcome {
                Err(error) if error.code == codes::E_TIMEOUT => (
                    format!("timed out after {} s", check.timeout.as_secs()),
                    String::new(),
                ),
                Err(error) => match error.details.as_ref() {
                    Some(result) if result.get("exit_code").is_some() => {
                        let message = match result.get("exit_code").and_then(Value::as_i64) {
                            Some(code) => format!("exited with status {code}"),
                            None => "was killed by a signal".to_owned(),
                        };
                        (message, printed(result))
                    }
                    _ => (error.message.clone(), String::new()),
                },
                Ok(result) => {
                    let output = printed(&result);
                    let message = if let Some(wanted) = check
                        .contains
                        .as_ref()
                        .filter(|w| !output.contains(w.as_str()))
                    {
                        format!("its output does not contain `{wanted}`")
                    } else if let Some(unwanted) = check
                        .not_contains
                        .as_ref()
                        .filter(|u| output.contains(u.as_str()))
                    {
                        format!("its output contains `{unwanted}`")
                    } else {
                        continue;
                    };
                    (message, output)
                }
            };
            let summary = match tail(&output, 3, 300) {
                last if last.is_empty() => format!("`{}` {message}", check.text),
                last => format!("`{}` {message}: {last}", check.text),
            };
            return Ok(Err(CheckFailed {
                check: check.text.clone(),
                message: summary,
                reason: message,
                output: Some(output),
            }));
        }
        Ok(Ok(()))
    }

    /// The next attempt's feedback on a failed check: the `feedback` call's answer, else the
    /// failing output's tail.
    async fn feedback(
        &mut self,
        state: &TaskState,
        worktree: &Worktree,
        check: &str,
        message: &str,
        output: &str,
    ) -> Result<String, Stopped> {
        let plain = match tail(output, 40, 4000) {
            last if last.is_empty() => format!("`{check}` {message}"),
            last => format!("`{check}` {message}:\n{last}"),
        };
        let task = self.task.clone();
        let Some(call) = &task.feedback else {
            return Ok(plain);
        };
        let values = self.task_values(state, worktree);
        let failure =
            json!({"step": check, "message": message, "output": tail(output, 200, 20_000)});
        let path = self.path().then("feedback", state.attempts);
        let outcome = self
            .call(call, &path, &values, &failure, Some(&worktree.path))
            .await?;
        Ok(match outcome {
            Ok(Value::String(text)) => text,
            Ok(result) => match result.get("stdout").and_then(Value::as_str) {
                Some(stdout) => stdout.trim().to_owned(),
                None => result.to_string(),
            },
            Err(error) => format!("{plain}\n(the feedback call failed: {})", error.message),
        })
    }

    /// A failed attempt: recorded, then either the next attempt's feedback or abandonment.
    async fn fail(
        &mut self,
        state: &mut TaskState,
        failure: Failure,
    ) -> Result<Option<TaskEnd>, Stopped> {
        state.errors.push(TaskError {
            attempt: state.attempts,
            kind: failure.kind,
            step: failure.step,
            message: failure.message,
            timestamp: now(),
        });
        if state.attempts >= self.task.settings.max_attempts {
            return self.abandon(state).await.map(Some);
        }
        state.status = TaskPhase::Failed;
        state.retry_feedback.push(RetryFeedback {
            attempt: state.attempts + 1,
            feedback: failure.feedback,
        });
        self.report(state).await?;
        Ok(None)
    }

    /// No attempts left: the task is abandoned, its worktree kept for a person.
    async fn abandon(&mut self, state: &mut TaskState) -> Result<TaskEnd, Stopped> {
        state.status = TaskPhase::Abandoned;
        if state.worktree_status.is_some() {
            state.worktree_status = Some(WorktreeStatus::Abandoned);
        }
        // Abandoned is not completed: the task has no `completed_at`, and no place in the
        // merge queue.
        state.completed_at = None;
        state.queue = None;
        self.report(state).await?;
        Ok(TaskEnd::Done(Err(self.abandoned(state))))
    }

    fn abandoned(&self, state: &TaskState) -> StepError {
        let last = state
            .errors
            .last()
            .map(|e| format!("; the last: {}", e.message))
            .unwrap_or_default();
        StepError {
            code: codes::E_TASK_ABANDONED,
            message: format!(
                "task `{}` was abandoned after {} attempt{}{last}",
                self.step_id,
                state.attempts,
                if state.attempts == 1 { "" } else { "s" }
            ),
            details: Some(json!({
                "attempts": state.attempts,
                "worktree": state.worktree_path,
                "branch": state.branch,
                "errors": state.errors,
            })),
        }
    }

    /// Waits for the task's turn in the merge queue and merges it. `None`: merged or failed
    /// an attempt (the loop goes on); `Some`: the step ends (or waits).
    async fn merge(
        &mut self,
        workspace: &dyn Workspace,
        state: &mut TaskState,
    ) -> Result<Option<TaskEnd>, Stopped> {
        let id = self.step_id.clone();
        let merges = self.merges.clone();
        let turn = tokio::select! {
            turn = merges.lock() => turn,
            () = self.context.cancel.cancelled() => {
                return Err(stopped(format!("the run stopped while task `{id}` waited to merge")));
            }
        };
        state.status = TaskPhase::Merging;
        state.worktree_status = Some(WorktreeStatus::Merging);
        if let Some(entry) = &mut state.queue {
            entry.status = QueueStatus::Merging;
        }
        self.report(state).await?;
        let message = format!(
            "Merge task {id}: {}\n\nTask: {id}\nLayer: {}\nAttempts: {}\n",
            self.task.title,
            if self.task.layer.is_empty() {
                "-"
            } else {
                &self.task.layer
            },
            state.attempts
        );
        let outcome = match self.task.settings.after_merge.clone() {
            None => workspace.merge(&id, &message).await,
            Some(after) => match workspace.merge_trial(&id, &message).await {
                // The combination is checked before the base moves, the queue held so the
                // base cannot move under the checks.
                Ok(Trial {
                    outcome: MergeOutcome::Merged(commit),
                    folder,
                }) => match self
                    .check_combination(workspace, state, &after, &folder)
                    .await?
                {
                    Err(failed) => {
                        // The queue goes on while the feedback is made (it may ask a model).
                        drop(turn);
                        if let Some(entry) = &mut state.queue {
                            entry.status = QueueStatus::Pending;
                        }
                        state.worktree_status = Some(WorktreeStatus::Active);
                        let worktree = Self::worktree_of(state);
                        let failure = self.failure_of(state, &worktree, failed).await?;
                        return self.fail(state, failure).await;
                    }
                    Ok(()) => {
                        // The checks' records are made durable before the base moves: a
                        // process killed once it has moved would find the task merged on
                        // resume and not check it again, and its checks' records would be lost.
                        self.report(state).await?;
                        workspace
                            .land(&commit)
                            .await
                            .map(|()| MergeOutcome::Merged(commit))
                    }
                },
                Ok(Trial { outcome, .. }) => Ok(outcome),
                Err(error) => Err(error),
            },
        };
        drop(turn);
        match outcome {
            Ok(MergeOutcome::Merged(commit) | MergeOutcome::AlreadyMerged(commit)) => {
                state.merge_commit = Some(commit);
                state.merged_at = Some(now());
                state.completed_at = state.merged_at.clone();
                state.status = TaskPhase::Completed;
                if let Some(entry) = &mut state.queue {
                    entry.status = QueueStatus::Merged;
                }
                self.report(state).await?;
                // Its work is in the base: the worktree and branch go. A failure here loses
                // nothing, so it does not fail the task; the worktree stays for a person.
                if workspace.remove(&id).await.is_ok() {
                    state.worktree_status = Some(WorktreeStatus::Cleaned);
                    state.worktree_path = None;
                    state.branch = None;
                    self.report(state).await?;
                }
                Ok(Some(TaskEnd::Done(Ok(self.result(state)))))
            }
            Ok(MergeOutcome::Conflict(files)) => {
                let base = workspace.base().to_owned();
                let list = files.join(", ");
                let message = format!("merging into `{base}` conflicted in {list}");
                if let Some(entry) = &mut state.queue {
                    entry.status = QueueStatus::Pending;
                }
                state.worktree_status = Some(WorktreeStatus::Active);
                if self.task.settings.on_conflict == OnConflict::Wait {
                    state.errors.push(TaskError {
                        attempt: state.attempts,
                        kind: TaskErrorKind::MergeConflict,
                        step: "git merge".into(),
                        message: message.clone(),
                        timestamp: now(),
                    });
                    let worktree = state.worktree_path.clone().unwrap_or_default();
                    let args = json!({"files": files, "worktree": worktree, "base": base});
                    return Ok(Some(self.wait_at_merge(state, args, |key| {
                        format!(
                            "{message}: resolve it in {worktree} (`git merge {base}`, fix the files, commit), then resume the run; or reject `{key}` to abandon the task"
                        )
                    })));
                }
                let feedback = format!(
                    "{message}: the base moved on while this task ran. Merge it into your branch (`git merge {base}` in the worktree), resolve the conflicts in {list} keeping both changes' intent, and commit"
                );
                self.fail(
                    state,
                    Failure {
                        kind: TaskErrorKind::MergeConflict,
                        step: "git merge".into(),
                        message,
                        feedback,
                    },
                )
                .await
            }
            Err(error) => {
                // Not the task's doing (git refused: uncommitted changes in the base's checkout
                // that the merge would overwrite, a hook, a lock). Failing the task would lose
                // its verified work to `--retry-failed`, so the run halts for a person, as for
                // a conflict under `on_conflict: wait`, and `resume` merges it again.
                let base = workspace.base().to_owned();
                let folder = match workspace.base_folder().await {
                    Ok(folder) => format!(" in {}", folder.display()),
                    Err(_) => String::new(),
                };
                if let Some(entry) = &mut state.queue {
                    entry.status = QueueStatus::Pending;
                }
                state.worktree_status = Some(WorktreeStatus::Active);
                let worktree = state.worktree_path.clone().unwrap_or_default();
                let error = error.to_string();
                let error = error.trim_end_matches('.');
                let args = json!({"error": error, "worktree": worktree, "base": base});
                Ok(Some(self.wait_at_merge(state, args, |key| {
                    format!(
                        "merging task `{id}` into `{base}`{folder} failed: {error}. Its work is verified and kept: put that right (commit or stash changes there), then resume the run; or reject `{key}` to abandon the task"
                    )
                })))
            }
        }
    }

    /// Runs the workspace's `verify_after_merge` checks in `folder`, the trial merge of the
    /// task into the base; a failure is said as the combination's.
    async fn check_combination(
        &mut self,
        workspace: &dyn Workspace,
        state: &mut TaskState,
        after: &MergeChecks,
        folder: &Path,
    ) -> Result<Result<(), CheckFailed>, Stopped> {
        let worktree = Self::worktree_of(state);
        let checks = Checks {
            checks: &after.checks,
            exec: &after.exec,
            gated: after.gated,
            name: "merge-check",
            dir: folder,
        };
        let base = workspace.base().to_owned();
        Ok(self
            .run_checks(state, &worktree, checks)
            .await?
            .map_err(|failed| CheckFailed {
                message: format!("merged with `{base}`: {}", failed.message),
                reason: format!(
                    "{} when merged with `{base}` (your work passes its own checks, but `verify_after_merge` fails on the combination with `{base}` as it is now; the base was not changed: merge `{base}` into your branch with `git merge {base}` in the worktree, make the combination pass, and commit)",
                    failed.reason
                ),
                ..failed
            }))
    }

    /// The task's worktree as its state records it.
    fn worktree_of(state: &TaskState) -> Worktree {
        Worktree {
            path: state
                .worktree_path
                .clone()
                .map(Into::into)
                .unwrap_or_default(),
            branch: state.branch.clone().unwrap_or_default(),
        }
    }

    /// Halts the run for a person at the task's merge, listed as `<ID>/merge#N` with `args`
    /// and the reason `reason` gives for that key: the task stays verified, so `resume`
    /// merges it again, and rejecting the key abandons it.
    fn wait_at_merge(
        &self,
        state: &mut TaskState,
        args: Value,
        reason: impl FnOnce(&str) -> String,
    ) -> TaskEnd {
        state.status = TaskPhase::Verified;
        state.conflict_waits += 1;
        let key = self.path().then(MERGE, state.conflict_waits).to_string();
        let pending = PendingApproval {
            reason: Some(reason(&key)),
            input_schema: None,
            step_id: key,
            tool: None,
            args: Some(args),
        };
        let checkpoint = serde_json::to_value(&*state).unwrap_or(Value::Null);
        TaskEnd::Waiting(checkpoint, pending)
    }

    /// The step's result: what was merged.
    fn result(&self, state: &TaskState) -> Value {
        json!({
            "task": &*self.step_id,
            "status": "completed",
            "attempts": state.attempts,
            "commits": state.commits.iter().map(|c| c.hash.as_str()).collect::<Vec<_>>(),
            "merge_commit": state.merge_commit,
        })
    }

    /// `${task.*}`.
    fn task_values(&self, state: &TaskState, worktree: &Worktree) -> Value {
        let feedback = state
            .retry_feedback
            .iter()
            .rev()
            .find(|f| f.attempt == state.attempts)
            .map(|f| f.feedback.clone())
            .unwrap_or_default();
        let previous_error = if state.attempts > 1 {
            state
                .errors
                .last()
                .map(|e| e.message.clone())
                .unwrap_or_default()
        } else {
            String::new()
        };
        // What an agent that takes one prompt is given: the spec, and after a failure how
        // the last attempt failed.
        let spec = if self.task.spec.is_empty() {
            &self.task.title
        } else {
            &self.task.spec
        };
        let prompt = if feedback.is_empty() {
            spec.clone()
        } else {
            format!(
                "{spec}\n\nAttempt {} of {} failed:\n{feedback}\n\nFix the work in this folder so that it passes.",
                state.attempts - 1,
                self.task.settings.max_attempts
            )
        };
        json!({
            "id": &*self.step_id,
            "prompt": prompt,
            "title": self.task.title,
            "layer": self.task.layer,
            // Text, as a program's argument needs it (`exec`'s `argv` takes strings only).
            "attempt": state.attempts.to_string(),
            "max_attempts": self.task.settings.max_attempts.to_string(),
            "spec": self.task.spec,
            "worktree": worktree.path.display().to_string(),
            "branch": worktree.branch,
            "feedback": feedback,
            "previous_error": previous_error,
        })
    }

    /// One of the task's tool calls, admitted and made as every call is, in `dir`. The outer
    /// `Err` is the run stopping; the inner one the call's failure.
    async fn call(
        &mut self,
        call: &TaskTool,
        path: &CallPath,
        task: &Value,
        failure: &Value,
        dir: Option<&Path>,
    ) -> Result<Result<Value, StepError>, Stopped> {
        // Resolved before the call: the scope (not `Send`) must not live across it.
        let own = [("task", task), ("failure", failure)];
        let resolved = call.resolve(
            &self.vars,
            own,
            &self.env,
            &self.task.expressions,
            &self.context.variable_names,
        );
        let key = path.key();
        let gate = Gate {
            tool: Some(&call.tool_name),
            approval: call.gated.then_some((key.as_str(), None)),
            waits_as: &key,
            schema: call.schema.as_deref(),
            answerable: true,
        };
        let id = path.to_string();
        let inner = Inner {
            id: &id,
            tool_name: &call.tool_name,
            tool: &call.tool,
            retry: once(),
            timeout: call.timeout,
            working_dir: dir.map(Arc::from),
            // A task's calls carry its attempt in their id (`ID/implement#2`).
            earlier: 0,
        };
        let doing = format!("ran `{}`", call.tool_name);
        let (outcome, _) = self.make(inner, resolved, &gate, &doing).await?;
        Ok(outcome)
    }

    /// Makes one of the task's calls ([`CallContext::make`]) and keeps its record, to be
    /// committed with the task's next state: its outcome and attempts (0: refused before it
    /// ran). A call that waits for a decision, or that the run's stop cancelled (it is not
    /// kept: it runs again on resume), stops the task; `doing` says what it was doing.
    async fn make(
        &mut self,
        inner: Inner<'_>,
        resolved: Result<Value, StepError>,
        gate: &Gate<'_>,
        doing: &str,
    ) -> Result<(Result<Value, StepError>, u32), Stopped> {
        let id = inner.id.to_owned();
        let (outcome, attempts, took) = match self
            .context
            .make(inner, resolved, gate, &self.approvals)
            .await
        {
            Made::Done {
                outcome,
                attempts,
                took,
            } => (outcome, attempts, took),
            Made::Waiting(pending) => return Err(Stopped::Waiting(pending)),
        };
        if self.context.cancel.is_cancelled() {
            return Err(stopped(format!(
                "the run stopped while task `{}` {doing}",
                self.step_id
            )));
        }
        let record = self
            .context
            .record(&id, outcome.clone().map(Arc::new), attempts, took);
        self.records.push(record);
        Ok((outcome, attempts))
    }

    /// Hands the task's state to the scheduler to be committed, and waits until it is
    /// durable (under `sync`): what follows must not happen on a state that could be lost.
    async fn report(&mut self, state: &TaskState) -> Result<(), Stopped> {
        // What the task is doing now, for the run's output and events (once per status).
        if state.status != TaskPhase::Pending && self.shown != Some((state.status, state.attempts))
        {
            self.shown = Some((state.status, state.attempts));
            if let Some(sink) = &self.context.events {
                let mut event = plan_types::Event::new(
                    plan_types::EventKind::TaskChanged,
                    &self.context.run_id,
                )
                .step(&self.step_id, state.attempts);
                event.reason = Some(state.status.as_str().to_owned());
                if state.status == TaskPhase::Failed
                    && let Some(error) = state.errors.last()
                {
                    event.error = Some(json!({"code": error.kind, "message": error.message}));
                }
                self.context.redactor.event(&mut event);
                sink.emit(&event);
            }
        }
        let Some(progress) = &self.progress else {
            return Ok(());
        };
        let checkpoint = serde_json::to_value(state).unwrap_or(Value::Null);
        let records = std::mem::take(&mut self.records);
        let durable = NodeDone::commit(
            progress,
            self.step,
            records,
            checkpoint,
            &self.context.cancel,
        )
        .await;
        if !durable {
            return Err(stopped(format!(
                "the run stopped while task `{}` was {}",
                self.step_id,
                state.status.as_str().replace('_', " ")
            )));
        }
        Ok(())
    }
}

/// An attempt that failed in git (reading the worktree, committing): an implementation error.
fn git_failure(message: String) -> Failure {
    Failure {
        kind: TaskErrorKind::ImplementationError,
        step: "git".into(),
        feedback: message.clone(),
        message,
    }
}

/// A task resumed mid-attempt (`in_progress`, `verifying`) whose worktree is gone: back to
/// `pending` without counting the attempt, as a task executor's resume does; the attempt
/// runs again in a worktree made anew (of the task's branch, which keeps its commits).
fn lost_on_resume(state: &mut TaskState) {
    state.attempts = state.attempts.saturating_sub(1);
    state.status = TaskPhase::Pending;
    state.worktree_status = None;
    state.worktree_path = None;
}

/// An attempt whose worktree went away under it (removed, or its `.git` deleted).
fn worktree_gone(id: &str) -> Failure {
    git_failure(format!(
        "the worktree of task `{id}` is gone or is no longer a git worktree (was its `.git` removed?): the attempt is lost; the next one starts from a new worktree"
    ))
}

/// An error no later attempt can mend: arguments that do not fit, a refusal, a budget.
fn hopeless(error: &StepError) -> bool {
    [
        codes::E_ARGS_INVALID,
        codes::E_ARGS_UNRESOLVED,
        codes::E_REJECTED,
        codes::E_GUARD,
    ]
    .contains(&error.code)
}

/// A task's calls are tried once: a failure is the attempt's, and the next attempt has
/// feedback.
fn once() -> RetryPolicy {
    RetryPolicy {
        attempts: 1,
        ..RetryPolicy::default()
    }
}

fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or("").trim();
    if line.len() > 120 {
        let mut end = 117;
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}…", &line[..end])
    } else {
        line.to_owned()
    }
}

impl CompiledTask {
    /// Its calls (`implement`, `feedback`, each check), for [`crate::Program::call_sites`].
    pub(crate) fn call_sites(
        &self,
        path: PlanPath,
        step: &Arc<str>,
        sites: &mut crate::sites::Sites,
    ) {
        use crate::sites::CallKind;
        let implement = &self.implement;
        sites.push(
            path.clone().key("implement"),
            step,
            CallKind::Implement,
            (&implement.tool_name, &*implement.tool),
            implement.gated,
        );
        if let Some(feedback) = &self.feedback {
            sites.push(
                path.clone().key("feedback"),
                step,
                CallKind::Feedback,
                (&feedback.tool_name, &*feedback.tool),
                feedback.gated,
            );
        }
        if let Some(exec) = &self.exec {
            for k in 0..self.checks.len() {
                sites.push(
                    path.clone().key("verify").index(k),
                    step,
                    CallKind::Check,
                    ("exec", &**exec),
                    self.checks_gated,
                );
            }
        }
    }
}

impl ContextUpdate {
    /// Its call, for [`crate::Program::call_sites`].
    pub(crate) fn call_sites(&self, path: PlanPath, sites: &mut crate::sites::Sites) {
        sites.push(
            path,
            &Arc::from(""),
            crate::sites::CallKind::ContextUpdate,
            (&self.call.tool_name, &*self.call.tool),
            self.call.gated,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tails_keep_the_last_lines_within_the_byte_limit() {
        assert_eq!(tail("a\nb\nc\nd\n", 2, 100), "c\nd");
        assert_eq!(tail("", 3, 100), "");
        let long = "x".repeat(50);
        assert_eq!(tail(&long, 3, 10), format!("…{}", "x".repeat(10)));
        // A cut inside a character moves to its end.
        assert_eq!(tail("ééééé", 1, 3), "…é");
    }

    #[test]
    fn first_lines_are_short() {
        assert_eq!(first_line("one\ntwo"), "one");
        assert_eq!(first_line(&"y".repeat(200)).chars().count(), 118);
    }

    #[test]
    fn what_was_fixed_is_the_implementers_own_account() {
        let body = "Previous failure:\n- test failed\n\nFix applied:\n- check empty input\n- return None\n\nAttempt: 2/5";
        assert_eq!(
            fixed_of("[L1-001] Fix: Handle empty string", body).as_deref(),
            Some("check empty input; return None")
        );
        assert_eq!(
            fixed_of("[L1-001] Fix: Handle empty string", "").as_deref(),
            Some("Handle empty string")
        );
        assert_eq!(
            fixed_of("fix: handle empty input", "").as_deref(),
            Some("handle empty input")
        );
        // A footer is not an account of the fix.
        assert_eq!(
            fixed_of("tidy", "Generated with a tool\n\nCo-Authored-By: a tool"),
            None
        );
        assert_eq!(fixed_of("tidy", ""), None);
    }
}
