//! Raw plan → [`Plan`]: the accepted formats folded into one, with an issue for each thing that
//! cannot be folded.

use std::collections::BTreeMap;
use std::sync::Arc;

use plan_vars::{Selector, Template};
use serde_json::{Map, Value};

use crate::issue::Issue;
use crate::model::{
    Expand, Guards, Plan, RawPlan, RawStep, RawToolCall, RetryPolicy, Step, StepId,
};
use crate::source::PlanPath;

/// Names a placeholder reads as something other than a variable.
pub(crate) const RESERVED_NAMES: &[&str] = &["each", "index", "key", "var", "env"];

/// The id of the summary record; no step may take it.
pub const META_STEP_ID: &str = plan_types::META_STEP_ID;

/// The id under which a whole plan's approval is kept (`--mode approval`); no step may take it.
pub const PLAN_APPROVAL_ID: &str = plan_types::PLAN_APPROVAL;

pub(crate) fn normalize(raw: RawPlan) -> (Plan, Vec<Issue>) {
    let mut issues = Vec::new();
    let root = PlanPath::root();
    if let Some(guards) = &raw.guards {
        check_guards(guards, &root, &mut issues);
    }
    if raw.max_concurrency == Some(0) {
        issues.push(
            Issue::error(
                "plan::invalid_value",
                root.clone().key("max_concurrency"),
                "`max_concurrency` must be at least 1",
            )
            .label("zero would run nothing"),
        );
    }
    check_retry(raw.retry.as_ref(), &root, &mut issues);
    check_timeout(raw.timeout_ms, &root, &mut issues);
    let env = raw.env.unwrap_or_default();
    for (i, name) in env.iter().enumerate() {
        let valid = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            issues.push(
                Issue::error(
                    "plan::env",
                    root.clone().key("env").index(i),
                    format!("`{name}` is not an environment variable name"),
                )
                .help("use letters, digits and `_`"),
            );
        } else if env[..i].contains(name) {
            issues.push(Issue::error(
                "plan::env",
                root.clone().key("env").index(i),
                format!("`{name}` is listed twice"),
            ));
        }
    }

    // Into a list of its own, sized exactly: collecting in place would keep the written
    // steps' list, which is larger (a written step is larger, and the list grew by doubling
    // as it was read), for as long as the plan lives.
    let mut steps = Vec::with_capacity(raw.steps.len());
    for (index, step) in raw.steps.into_iter().enumerate() {
        steps.push(normalize_step(index, step, &mut issues));
    }
    check_workspace(raw.workspace.as_ref(), &steps, &root, &mut issues);
    check_declared_tools(&raw.tools, &root, &mut issues);
    if raw
        .id
        .as_deref()
        .is_some_and(|id| id.chars().any(plan_types::is_unprintable))
    {
        // Shown on one line where a person decides (`plan create --run` asks by it), and
        // never passing for another plan's id.
        issues.push(
            Issue::error(
                "plan::invalid_id",
                root.clone().key("id"),
                "a plan id cannot hold control or invisible characters (a newline, a tab, an escape, a zero-width space, a direction mark)",
            )
            .help("choose an id of printable characters"),
        );
    }
    let plan = Plan {
        id: raw.id,
        title: raw.title,
        description: raw.description,
        variables: raw.variables,
        max_concurrency: raw.max_concurrency,
        retry: raw.retry,
        timeout_ms: raw.timeout_ms,
        env,
        guards: raw.guards,
        mode: raw.mode,
        fail_fast: raw.fail_fast,
        approvals: raw.approvals,
        workspace: raw.workspace,
        tools: raw.tools,
        steps,
    };
    (plan, issues)
}

/// Each declared tool has a name steps can call, once, and a queue (its schema is compiled
/// with the program, as every tool's is: `plan::tool_schema`).
fn check_declared_tools(
    tools: &[crate::model::DeclaredTool],
    root: &PlanPath,
    issues: &mut Vec<Issue>,
) {
    for (i, tool) in tools.iter().enumerate() {
        let at = root.clone().key("tools").index(i);
        let valid = !tool.name.is_empty()
            && tool
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid {
            issues.push(
                Issue::error(
                    "plan::declared_tool",
                    at.clone().key("name"),
                    format!("`{}` is not a name a declared tool can have", tool.name),
                )
                .help(
                    "use letters, digits, `_` and `-` (`SERVER.tool` names are MCP servers' tools)",
                ),
            );
        } else if tools[..i].iter().any(|earlier| earlier.name == tool.name) {
            issues.push(Issue::error(
                "plan::declared_tool",
                at.clone().key("name"),
                format!("the tool `{}` is declared twice", tool.name),
            ));
        }
        if tool.queue.trim().is_empty() || tool.queue.contains(':') {
            issues.push(
                Issue::error(
                    "plan::declared_tool",
                    at.clone().key("queue"),
                    format!("`{}` is not a BullMQ queue name", tool.queue),
                )
                .help("name the queue its workers take jobs from (without `:`)"),
            );
        }
    }
}

/// Task steps need a workspace, with sane limits; each check needs a program.
fn check_workspace(
    workspace: Option<&crate::model::Workspace>,
    steps: &[Step],
    root: &PlanPath,
    issues: &mut Vec<Issue>,
) {
    let path = root.clone().key("workspace");
    if let Some(workspace) = workspace {
        if workspace.max_attempts == 0 {
            issues.push(Issue::error(
                "plan::invalid_value",
                path.clone().key("max_attempts"),
                "`workspace.max_attempts` must be at least 1",
            ));
        }
        if workspace.max_parallel == Some(0) {
            issues.push(Issue::error(
                "plan::invalid_value",
                path.clone().key("max_parallel"),
                "`workspace.max_parallel` must be at least 1",
            ));
        }
        if let Some(base) = &workspace.base
            && !valid_branch(base)
        {
            issues.push(Issue::error(
                "plan::invalid_value",
                path.clone().key("base"),
                format!("`{base}` is not a branch name"),
            ));
        }
        if let Some(call) = &workspace.context_update
            && call.tool.trim().is_empty()
        {
            issues.push(Issue::error(
                "plan::tool",
                path.clone().key("context_update").key("tool"),
                "the tool name cannot be empty",
            ));
        }
    }
    for (i, step) in steps.iter().enumerate() {
        let Some(task) = &step.task else { continue };
        let at = PlanPath::step(i).key("task");
        if workspace.is_none() {
            issues.push(
                Issue::error(
                    "plan::task",
                    at.clone(),
                    format!("task step `{}` needs the plan's `workspace`", step.id),
                )
                .at_key()
                .help("add `workspace: { repo: . }` at the top of the plan: the git repository tasks work in"),
            );
        }
        if !valid_branch(&format!("worktree-{}", step.id)) {
            issues.push(
                Issue::error(
                    "plan::task",
                    PlanPath::step(i).key("id"),
                    format!(
                        "task id `{}` cannot name a git branch (`worktree-{}`)",
                        step.id, step.id
                    ),
                )
                .help("use letters, digits, `-`, `_` and `.`"),
            );
        }
        for (name, call) in [
            ("implement", Some(&task.implement)),
            ("feedback", task.feedback.as_ref()),
        ] {
            if let Some(call) = call
                && call.tool.trim().is_empty()
            {
                issues.push(Issue::error(
                    "plan::tool",
                    at.clone().key(name).key("tool"),
                    "the tool name cannot be empty",
                ));
            }
        }
        for (k, check) in task.verify.iter().enumerate() {
            if check.argv.first().is_none_or(|program| program.is_empty()) {
                issues.push(
                    Issue::error(
                        "plan::task",
                        at.clone().key("verify").index(k).key("argv"),
                        "a check needs a program: `argv: [PROGRAM, ARG…]`",
                    )
                    .help("checks run without a shell; write `argv: [sh, -c, \"…\"]` for one"),
                );
            }
            if check.timeout_ms == Some(0) {
                issues.push(Issue::error(
                    "plan::invalid_value",
                    at.clone().key("verify").index(k).key("timeout_ms"),
                    "a check's `timeout_ms` must be at least 1",
                ));
            }
        }
    }
}

/// What git accepts as a branch name, conservatively: letters, digits, `-`, `_`, `.`, `/`,
/// no `..`, no leading `-`, `.` or `/`, no trailing `/`, `.` or `.lock`.
fn valid_branch(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
        && !name.contains("..")
        && !name.contains("//")
        && !name.starts_with(['-', '.', '/'])
        && !name.ends_with(['/', '.'])
        && !name.ends_with(".lock")
}

/// A budget of zero would stop every call: almost surely a mistake, so it is refused.
fn check_guards(guards: &Guards, at: &PlanPath, issues: &mut Vec<Issue>) {
    let path = at.clone().key("guards");
    let zero = |field: &str, path: PlanPath| {
        Issue::error(
            "plan::invalid_value",
            path,
            format!("`guards.{field}` must be at least 1"),
        )
        .label("zero would stop every call")
    };
    for (field, value) in [
        ("max_tool_calls", guards.max_tool_calls),
        ("max_duration_ms", guards.max_duration_ms),
        ("max_failures", guards.max_failures),
        ("max_repeats", guards.max_repeats),
    ] {
        if value == Some(0) {
            issues.push(zero(field, path.clone().key(field)));
        }
    }
    for (tool, &limit) in &guards.per_tool {
        if limit == 0 {
            issues.push(zero(
                &format!("per_tool.{tool}"),
                path.clone().key("per_tool").key(tool),
            ));
        }
    }
}

fn check_retry(retry: Option<&RetryPolicy>, at: &PlanPath, issues: &mut Vec<Issue>) {
    let Some(retry) = retry else { return };
    let path = at.clone().key("retry");
    if retry.attempts == 0 {
        issues.push(Issue::error(
            "plan::invalid_value",
            path.clone().key("attempts"),
            "`retry.attempts` counts the first try too, so it must be at least 1",
        ));
    }
    if !(retry.multiplier.is_finite() && retry.multiplier >= 1.0) {
        issues.push(Issue::error(
            "plan::invalid_value",
            path.key("multiplier"),
            "`retry.multiplier` must be a number of at least 1",
        ));
    }
}

fn check_timeout(timeout_ms: Option<u64>, at: &PlanPath, issues: &mut Vec<Issue>) {
    if timeout_ms == Some(0) {
        issues.push(Issue::error(
            "plan::invalid_value",
            at.clone().key("timeout_ms"),
            "`timeout_ms` must be at least 1",
        ));
    }
}

/// Always returns a step, so that step positions stay those of the document; a step with
/// errors is never run because `load` fails on any error.
fn normalize_step(index: usize, raw: RawStep, issues: &mut Vec<Issue>) -> Step {
    let at = PlanPath::step(index);
    let id = raw.id;
    check_id(&id, &at, issues);
    check_retry(raw.retry.as_deref(), &at, issues);
    check_timeout(raw.timeout_ms, &at, issues);
    let expand = normalize_expand(raw.expand_on.map(|on| *on), raw.expand_key, &at, issues);

    let block = raw.block;
    let task = raw.task;
    // A step is one kind of work: a tool call, a block, or a task (and only a tool call maps).
    let has_tool = raw.tool.is_some() || raw.tool_calls.is_some();
    check_one_kind(
        &id,
        has_tool,
        block.is_some(),
        task.is_some(),
        expand.is_some(),
        &at,
        issues,
    );
    let (tool, args) = tool_and_args(
        (raw.tool, raw.tool_calls, raw.args),
        block.is_some() || task.is_some(),
        &id,
        &at,
        issues,
    );

    // A dependency listed twice is harmless (mcp-cli's planner writes such plans): a warning,
    // and the step depends on it once (`Dependencies` counts it once). The list stays as
    // written, so that later problems point at the right entry.
    let depends_on = raw.depends_on.unwrap_or_default();
    check_duplicate_dependencies(&depends_on, &id, &at, issues);

    let result_variable = raw.result_variable;
    let binds = normalize_binds(result_variable.clone(), raw.binds, &id, &at, issues);

    Step {
        id,
        title: raw.title.or(raw.description),
        tool: tool.unwrap_or_default(),
        // Compact: a large plan's arguments are held for the whole run (serde_json's maps
        // reserve room for three entries as soon as they hold one).
        args: Arc::new(
            args.as_ref()
                .map(plan_vars::compact_map)
                .unwrap_or_default(),
        ),
        depends_on,
        binds,
        result_variable,
        retry: raw.retry,
        timeout_ms: raw.timeout_ms,
        expand: expand.map(Box::new),
        when: normalize_when(raw.when, &at, issues),
        block,
        task,
        layer: raw.layer,
        risk: raw.risk,
        run_if: raw.run_if.unwrap_or_default(),
    }
}

/// A step id must be non-empty, printable, and not one plan-cli keeps for its own records.
fn check_id(id: &StepId, at: &PlanPath, issues: &mut Vec<Issue>) {
    if id.0.trim().is_empty() {
        issues.push(Issue::error(
            "plan::invalid_id",
            at.clone().key("id"),
            "a step id cannot be empty",
        ));
    } else if id.0.chars().any(plan_types::is_unprintable) {
        // An id is shown on one line wherever a person reads it: one with a newline or an
        // escape sequence in it could draw lines (a step that succeeded) of its own.
        issues.push(
            Issue::error(
                "plan::invalid_id",
                at.clone().key("id"),
                "a step id cannot hold control or invisible characters (a newline, a tab, an escape, a zero-width space, a direction mark)",
            )
            .help("choose an id of printable characters"),
        );
    } else if plan_types::is_reserved_id(&id.0) {
        let what = match id.0.as_str() {
            META_STEP_ID => "is the summary record's",
            PLAN_APPROVAL_ID => "is the plan's approval's",
            plan_types::CONTEXT_UPDATE_ID => "is the workspace's `context_update` call's",
            _ => "has the form plan-cli keeps for its own records",
        };
        issues.push(
            Issue::error(
                "plan::invalid_id",
                at.clone().key("id"),
                format!(
                    "the id `{}` {what}: ids of the form `__NAME__` are reserved",
                    id.0
                ),
            )
            .help("choose another id"),
        );
    }
}

/// A step is one kind of work: a tool call, a block, or a task (and only a tool call maps).
fn check_one_kind(
    id: &StepId,
    has_tool: bool,
    block: bool,
    task: bool,
    expand: bool,
    at: &PlanPath,
    issues: &mut Vec<Issue>,
) {
    let mut conflict = |when: bool, code: &'static str, key: &str, message: String| {
        if when {
            issues.push(Issue::error(code, at.clone().key(key), message).at_key());
        }
    };
    conflict(
        task && (has_tool || block),
        "plan::tool",
        "task",
        format!(
            "step `{id}` has a `task` and a tool or block: a task step's work is its `implement` call"
        ),
    );
    conflict(
        task && expand,
        "plan::task",
        "expand_on",
        "a task step cannot also be a map step".to_owned(),
    );
    conflict(
        block && has_tool,
        "plan::tool",
        "block",
        format!("step `{id}` has a `block` and a tool: a block step's work is its nodes"),
    );
    conflict(
        block && expand,
        "plan::block",
        "expand_on",
        "a block step cannot also be a map step (yet)".to_owned(),
    );
}

/// A raw step's `tool`, `tool_calls` and `args`.
type RawCall = (
    Option<String>,
    Option<Vec<RawToolCall>>,
    Option<Map<String, Value>>,
);

/// The step's tool and arguments, from `tool` and `args` or a single `tool_calls` entry (a
/// block or task step, `other_work`, has no tool).
fn tool_and_args(
    (tool, tool_calls, args): RawCall,
    other_work: bool,
    id: &StepId,
    at: &PlanPath,
    issues: &mut Vec<Issue>,
) -> (Option<String>, Option<Map<String, Value>>) {
    let (tool, args) = match (tool, tool_calls) {
        (None, None) if other_work => (Some(String::new()), args),
        (Some(_), Some(_)) => {
            issues.push(
                Issue::error(
                    "plan::tool",
                    at.clone().key("tool_calls"),
                    format!("step `{id}` has both `tool` and `tool_calls`"),
                )
                .at_key()
                .help("keep one: `tool` with `args`, or a single entry in `tool_calls`"),
            );
            (None, args)
        }
        (Some(tool), None) => (Some(tool), args),
        (None, Some(mut calls)) => {
            if calls.len() > 1 {
                issues.push(
                    Issue::error(
                        "plan::tool",
                        at.clone().key("tool_calls").index(1),
                        format!("step `{id}` has {} calls in `tool_calls`; a step makes exactly one call", calls.len()),
                    )
                    .label("a second call")
                    .help("split them into steps, one call each, with `depends_on` to keep their order"),
                );
                (None, args)
            } else if let Some(call) = calls.pop() {
                if args.is_some() {
                    issues.push(
                        Issue::error(
                            "plan::tool",
                            at.clone().key("args"),
                            format!("step `{id}` has `args` and also `tool_calls[0].args`"),
                        )
                        .at_key()
                        .help("give the arguments in one place"),
                    );
                }
                (Some(call.name), Some(call.args))
            } else {
                issues.push(Issue::error(
                    "plan::tool",
                    at.clone().key("tool_calls"),
                    format!("step `{id}` has an empty `tool_calls`"),
                ));
                (None, args)
            }
        }
        (None, None) => {
            issues.push(
                Issue::error(
                    "plan::missing_tool",
                    at.clone(),
                    format!("step `{id}` has no `tool`"),
                )
                .label("this step needs a `tool`")
                .help("add `tool: NAME`"),
            );
            (None, args)
        }
    };
    if !other_work && tool.as_deref().is_some_and(|t| t.trim().is_empty()) {
        issues.push(Issue::error(
            "plan::tool",
            at.clone().key("tool"),
            "the tool name cannot be empty",
        ));
    }
    (tool, args)
}

/// A dependency listed twice is harmless (mcp-cli's planner writes such plans): a warning,
/// and the step depends on it once (`Dependencies` counts it once). The list stays as
/// written, so that later problems point at the right entry.
fn check_duplicate_dependencies(
    depends_on: &[StepId],
    id: &StepId,
    at: &PlanPath,
    issues: &mut Vec<Issue>,
) {
    for (i, dep) in depends_on.iter().enumerate() {
        if depends_on[..i].contains(dep) {
            issues.push(
                Issue::warning(
                    "plan::duplicate_dependency",
                    at.clone().key("depends_on").index(i),
                    format!(
                        "step `{id}` lists `{dep}` twice in `depends_on`; it depends on it once"
                    ),
                )
                .label("again"),
            );
        }
    }
}

/// The step's binds: `result_variable` (the whole result) and `binds`, each name checked and
/// each selector or expression compiled.
fn normalize_binds(
    result_variable: Option<String>,
    raw_binds: BTreeMap<String, String>,
    id: &StepId,
    at: &PlanPath,
    issues: &mut Vec<Issue>,
) -> BTreeMap<String, String> {
    let mut binds: BTreeMap<String, String> = BTreeMap::new();
    if let Some(name) = result_variable {
        check_bind_name(&name, at.clone().key("result_variable"), issues);
        if raw_binds.contains_key(&name) {
            issues.push(
                Issue::error(
                    "plan::duplicate_bind",
                    at.clone().key("binds").key(&name),
                    format!(
                        "step `{id}` binds `{name}` twice: in `result_variable` and in `binds`"
                    ),
                )
                .at_key(),
            );
        }
        binds.insert(name, "$".to_owned());
    }
    for (name, selector) in raw_binds {
        let path = at.clone().key("binds").key(&name);
        check_bind_name(&name, path.clone(), issues);
        match plan_vars::whole_expression(&selector) {
            // A data expression over `result` and `vars`.
            Some(text) => {
                if let Err(error) = crate::condition::compile_condition(&text) {
                    issues.push(
                        Issue::error("plan::bind_selector", path, format!("bind `{name}`: `{selector}` is not a valid expression: {error}"))
                            .help("a bind expression is CEL over `result` (the step's result) and `vars`: `${{ result.stdout.trim() }}`"),
                    );
                }
            }
            None => {
                if let Err(error) = selector.parse::<Selector>() {
                    issues.push(
                        Issue::error("plan::bind_selector", path, format!("bad bind selector `{selector}`: {error}"))
                            .help("a selector is `$` (the whole result), `$.path` (part of it), `$var.name.path`, or an expression `${{ result.stdout.trim() }}`"),
                    );
                }
            }
        }
        binds.entry(name).or_insert(selector);
    }
    binds
}

/// A `when` condition must compile as CEL; it is compiled again (once) by the engine.
fn normalize_when(when: Option<String>, at: &PlanPath, issues: &mut Vec<Issue>) -> Option<String> {
    let text = when?;
    if let Err(error) = crate::compile_condition(&text) {
        let message = match error {
            crate::ConditionError::Invalid(message) => {
                format!("is not a valid CEL expression: {message}")
            }
            limit => format!("is too large: {limit}"),
        };
        issues.push(
            Issue::error("plan::condition", at.clone().key("when"), format!("`when` {message}"))
                .help("a condition reads the variables as `vars.NAME`, e.g. `vars.count > 0 && vars.mode == 'full'`"),
        );
    }
    Some(text)
}

/// `expand_on` is one placeholder naming a list, or a literal list; `expand_key` needs it.
fn normalize_expand(
    on: Option<Value>,
    key: Option<String>,
    at: &PlanPath,
    issues: &mut Vec<Issue>,
) -> Option<Expand> {
    let Some(on) = on else {
        if key.is_some() {
            issues.push(
                Issue::error(
                    "plan::expand",
                    at.clone().key("expand_key"),
                    "`expand_key` needs `expand_on`",
                )
                .at_key()
                .help("`expand_on` names the list to map over; `expand_key` names each item"),
            );
        }
        return None;
    };
    match &on {
        Value::Array(_) => {}
        Value::String(text) => match Template::parse(text) {
            Ok(template) if template.as_placeholder().is_some() => {}
            Ok(_) => issues.push(
                Issue::error("plan::expand", at.clone().key("expand_on"), format!("`expand_on` must be exactly one placeholder naming a list, not `{text}`"))
                    .help("e.g. `expand_on: \"$var.items\"` or `expand_on: \"${items}\"`, or a literal list"),
            ),
            Err(error) => issues.push(Issue::error("plan::expand", at.clone().key("expand_on"), format!("malformed placeholder in `expand_on`: {error}"))),
        },
        _ => issues.push(
            Issue::error("plan::expand", at.clone().key("expand_on"), "`expand_on` must be a placeholder naming a list, or a list")
                .help("e.g. `expand_on: \"$var.items\"`"),
        ),
    }
    if let Some(text) = &key
        && let Err(error) = Template::parse(text)
    {
        issues.push(Issue::error(
            "plan::expand",
            at.clone().key("expand_key"),
            format!("malformed placeholder in `expand_key`: {error}"),
        ));
    }
    Some(Expand { on, key })
}

fn check_bind_name(name: &str, path: PlanPath, issues: &mut Vec<Issue>) {
    let valid = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '-')
        && !name.starts_with('-');
    if !valid {
        issues.push(
            Issue::error(
                "plan::bind_name",
                path,
                format!("`{name}` is not a variable name"),
            )
            .at_key()
            .help("use letters, digits, `_` and `-`"),
        );
    } else if RESERVED_NAMES.contains(&name) {
        issues.push(
            Issue::error(
                "plan::bind_name",
                path,
                format!("`{name}` is reserved: placeholders read `{name}` as something else"),
            )
            .at_key()
            .help(format!("reserved names: {}", RESERVED_NAMES.join(", "))),
        );
    }
}
