//! Whole-plan checks: ids, dependencies, cycles, placeholders and who binds what.

use std::collections::{BTreeMap, HashMap, HashSet};

use plan_vars::{Placeholder, Root, Template, ValueTemplate};

use crate::dag::Dependencies;
use crate::issue::Issue;
use crate::load::LoadOptions;
use crate::model::Plan;
use crate::source::PlanPath;

pub(crate) fn validate(plan: &Plan, options: &LoadOptions) -> Vec<Issue> {
    // The tools the plan declares are known as the given ones are.
    let with_declared;
    let options = match &options.known_tools {
        Some(known) if !plan.tools.is_empty() => {
            let mut known = known.clone();
            known.extend(plan.tools.iter().map(|tool| tool.name.clone()));
            with_declared = LoadOptions {
                known_tools: Some(known),
                ..options.clone()
            };
            &with_declared
        }
        _ => options,
    };
    let mut issues = Vec::new();
    let mut first_at: HashMap<&str, usize> = HashMap::new();
    for (i, step) in plan.steps.iter().enumerate() {
        if let Some(&first) = first_at.get(step.id.0.as_str()) {
            issues.push(
                Issue::error(
                    "plan::duplicate_id",
                    PlanPath::step(i).key("id"),
                    format!("two steps have the id `{}`", step.id),
                )
                .label("second use")
                .related(PlanPath::step(first).key("id"), "first use")
                .help("step ids must be unique"),
            );
        } else {
            first_at.insert(&step.id.0, i);
        }
    }
    issues.extend(check_call_ids(plan, &first_at));

    if let Some(known) = &options.known_tools {
        for (i, step) in plan.steps.iter().enumerate() {
            if let Some(candidates) = options.ambiguous_tools.get(&step.tool) {
                issues.push(ambiguous_tool(
                    PlanPath::step(i).key("tool"),
                    &step.tool,
                    candidates,
                ));
            } else if !step.tool.is_empty() && !known.contains(&step.tool) {
                issues.push(unknown_tool(i, &step.tool, known));
            }
        }
        // A budget for a tool nothing can call is most likely a misspelt name.
        for tool in plan.guards.iter().flat_map(|g| g.per_tool.keys()) {
            if !known.contains(tool) {
                let path = PlanPath::root().key("guards").key("per_tool").key(tool);
                let mut issue = unknown_tool_at(path, tool, known).at_key();
                issue.severity = crate::Severity::Warning;
                issue.message = format!("`guards.per_tool` limits `{tool}`, which is not a tool");
                issues.push(issue);
            }
        }
    }

    let deps = Dependencies::new(plan);
    for (i, step) in plan.steps.iter().enumerate() {
        for (j, dep) in step.depends_on.iter().enumerate() {
            if deps.unknown[i].contains(dep) {
                let known: Vec<String> = plan.steps.iter().map(|s| s.id.0.clone()).collect();
                let mut issue = Issue::warning(
                    "plan::unknown_dependency",
                    PlanPath::step(i).key("depends_on").index(j),
                    format!(
                        "step `{}` depends on `{dep}`, which is not a step of this plan",
                        step.id
                    ),
                )
                .label("no such step")
                .help("the step will not run and the run will end BLOCKED");
                if let Some(near) = crate::load::closest(&dep.0, &known) {
                    issue.help = Some(format!(
                        "did you mean `{near}`? As written, the step will not run and the run will end BLOCKED"
                    ));
                }
                issues.push(issue);
            }
        }
    }

    let cycles = deps.cycles();
    // A long cycle is named by its first steps: a message and labels for thousands of steps
    // would bury the point.
    const SHOWN: usize = 8;
    for cycle in &cycles {
        let mut names: Vec<String> = cycle
            .iter()
            .take(SHOWN)
            .map(|&i| format!("`{}`", plan.steps[i].id))
            .collect();
        if cycle.len() > SHOWN {
            names.push(format!("… ({} more)", cycle.len() - SHOWN));
        }
        names.push(format!("`{}`", plan.steps[cycle[0]].id));
        let first = cycle[0];
        let next = cycle.get(1).copied().unwrap_or(first);
        let at = plan.steps[first]
            .depends_on
            .iter()
            .position(|d| d.0 == plan.steps[next].id.0)
            .unwrap_or(0);
        let mut issue = Issue::error(
            "plan::cycle",
            PlanPath::step(first).key("depends_on").index(at),
            format!("dependency cycle: {}", names.join(" → ")),
        )
        .label("this dependency closes the cycle")
        .help("each step waits for the next, so none can start; remove one of these dependencies");
        for j in 1..cycle.len().min(SHOWN) {
            let (from, to) = (cycle[j], cycle[(j + 1) % cycle.len()]);
            if let Some(k) = plan.steps[from]
                .depends_on
                .iter()
                .position(|d| d.0 == plan.steps[to].id.0)
            {
                issue = issue.related(
                    PlanPath::step(from).key("depends_on").index(k),
                    format!(
                        "`{}` waits for `{}`",
                        plan.steps[from].id, plan.steps[to].id
                    ),
                );
            }
        }
        issues.push(issue);
    }

    check_item_ids(plan, &mut issues);
    for (i, step) in plan.steps.iter().enumerate() {
        if let Some(block) = &step.block {
            check_block(block, &PlanPath::step(i).key("block"), options, &mut issues);
        }
        if let Some(task) = &step.task {
            if let Some(problem) = plan_types::task_id_problem(&step.id.0) {
                issues.push(
                    Issue::error(
                        "plan::task_id",
                        PlanPath::step(i).key("id"),
                        format!("`{}` cannot be a task's id: {problem}", step.id),
                    )
                    .label("not a task id")
                    .help("a task's id names its branch `worktree-<ID>` and its folder `<worktree_dir>/<ID>`: use letters, digits, `-`, `_` and `.` (for example `L1-001`)"),
                );
            }
            let at = PlanPath::step(i).key("task");
            for (name, call) in task_calls(task) {
                check_tool_known(
                    &call.tool,
                    at.clone().key(name).key("tool"),
                    options,
                    &mut issues,
                );
            }
        }
    }
    if let Some(call) = plan
        .workspace
        .as_ref()
        .and_then(|w| w.context_update.as_ref())
    {
        let at = PlanPath::root()
            .key("workspace")
            .key("context_update")
            .key("tool");
        check_tool_known(&call.tool, at, options, &mut issues);
    }
    check_variables(plan, &deps, cycles.is_empty(), options, &mut issues);
    crate::removed::check(plan, &mut issues);
    issues
}

/// Reading a variable that another step binds must be ordered by `depends_on`; otherwise the
/// value read would depend on timing, and runs would not be reproducible.
fn check_variables(
    plan: &Plan,
    deps: &Dependencies,
    acyclic: bool,
    options: &LoadOptions,
    issues: &mut Vec<Issue>,
) {
    let mut binders: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, step) in plan.steps.iter().enumerate() {
        for name in step.binds.keys() {
            binders.entry(name).or_default().push(i);
        }
    }
    let mut ancestry: HashMap<usize, HashSet<usize>> = HashMap::new();
    let mut ordered = |a: usize, b: usize| {
        acyclic_ancestors(&mut ancestry, deps, b).contains(&a)
            || acyclic_ancestors(&mut ancestry, deps, a).contains(&b)
    };
    if acyclic {
        for (name, steps) in &binders {
            for (k, &b) in steps.iter().enumerate() {
                if let Some(&a) = steps[..k].iter().find(|&&a| !ordered(a, b)) {
                    issues.push(
                        Issue::error("plan::bind_conflict", bind_path(plan, b, name), format!("steps `{}` and `{}` both bind `{name}` and neither depends on the other", plan.steps[a].id, plan.steps[b].id))
                            .at_key()
                            .related(bind_path(plan, a, name), "also bound here")
                            .help("which value wins would depend on timing: order them with `depends_on`, or use two names"),
                    );
                }
            }
        }
    }

    let mut warned: HashSet<String> = HashSet::new();
    for (i, step) in plan.steps.iter().enumerate() {
        let Some(reads) = placeholders_of(step, i, issues) else {
            continue;
        };
        for (placeholder, place, path) in &reads {
            let name = match &placeholder.root {
                Root::Var(name) => name,
                // Turned into the variables they read by `placeholders_of`.
                Root::Expr(_) => continue,
                Root::Each | Root::Index => {
                    let allowed = match place {
                        Place::Args => step.expand.is_some(),
                        Place::ExpandKey => true,
                        Place::ExpandOn | Place::When | Place::Block | Place::Bind => false,
                    };
                    if !allowed {
                        let why = if *place == Place::ExpandOn {
                            "names an item, but `expand_on` is what makes the items"
                        } else {
                            "is only defined inside a map step (one with `expand_on`)"
                        };
                        issues.push(
                            Issue::error(
                                "plan::placeholder",
                                path.clone(),
                                format!("`{placeholder}` {why}"),
                            )
                            .label("used here"),
                        );
                    }
                    continue;
                }
                Root::Key => {
                    let allowed = *place == Place::Args
                        && step.expand.as_ref().is_some_and(|e| e.key.is_some());
                    if !allowed {
                        issues.push(
                            Issue::error("plan::placeholder", path.clone(), format!("`{placeholder}` is only defined inside a map step that sets `expand_key`"))
                                .label("used here"),
                        );
                    }
                    continue;
                }
                Root::Env(name) => {
                    if !plan.env.contains(name) {
                        issues.push(
                            Issue::error("plan::placeholder", path.clone(), format!("`{placeholder}` reads the environment variable `{name}`, which the plan does not list under `env:`"))
                                .label("used here")
                                .help(format!("add `env: [{name}]` to the plan; only listed variables are read, and their values are redacted from every output")),
                        );
                    }
                    continue;
                }
            };
            match binders.get(name.as_str()) {
                Some(bound_by) if acyclic => {
                    for &b in bound_by {
                        if b != i && !ordered(b, i) {
                            issues.push(
                                Issue::error("plan::unordered_read", path.clone(), format!("step `{}` reads `{name}`, which step `{}` binds, but does not depend on it", step.id, plan.steps[b].id))
                                    .label(format!("reads `{name}`"))
                                    .related(bind_path(plan, b, name), "bound here")
                                    .help(format!("add \"{}\" to the `depends_on` of step `{}` so the value is there before it starts", plan.steps[b].id, step.id)),
                            );
                        }
                    }
                }
                Some(_) => {}
                None => {
                    let known = plan.variables.contains_key(name)
                        || options.provided_variables.iter().any(|p| p == name);
                    if !known && warned.insert(name.clone()) {
                        issues.push(
                            Issue::warning("plan::undefined_variable", path.clone(), format!("no step binds `{name}` and the plan's `variables` do not define it"))
                                .label(format!("reads `{name}`"))
                                .help(undefined_help(plan, name)),
                        );
                    }
                }
            }
        }
    }
}

/// What to do about a variable nothing defines. A step's id is most likely meant as its
/// result (as in workflow tools where `${step.output}` reads it). A name in capitals is most
/// likely meant for a shell or the environment (`sh -c "echo ${HOME}"`): plan-cli reads `${...}`
/// first.
fn undefined_help(plan: &Plan, name: &str) -> String {
    if plan.steps.iter().any(|step| step.id.0 == name) {
        return format!(
            "`{name}` is a step, and a step's result is a variable only when the step names it: add `result_variable: {name}` to step `{name}` for its whole result, or `binds: {{NAME: $.field}}` for a part"
        );
    }
    let give = format!("give the run a value for `{name}`, or the steps that read it will fail");
    let shell_like = name.chars().any(|c| c.is_ascii_uppercase())
        && name
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
    if shell_like {
        format!(
            "for a literal `${{{name}}}` (for a shell or program to expand), write `$${{{name}}}`; to read the environment variable, list it under `env:` and write `${{env.{name}}}`; else {give}"
        )
    } else {
        give
    }
}

/// Where a placeholder is written in a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Args,
    ExpandOn,
    ExpandKey,
    When,
    Block,
    /// A bind's expression.
    Bind,
}

/// Every placeholder a step reads, with where it is; `None` (and an issue) if `args` holds
/// a malformed one.
fn placeholders_of(
    step: &crate::model::Step,
    i: usize,
    issues: &mut Vec<Issue>,
) -> Option<Vec<(Placeholder, Place, PlanPath)>> {
    let args_path = PlanPath::step(i).key("args");
    let template = match ValueTemplate::compile_shared(&step.args) {
        Ok(template) => template,
        Err(error) => {
            issues.push(
                Issue::error("plan::placeholder", args_path.pointer(&error.pointer), format!("malformed placeholder: {error}"))
                    .help("placeholders are `${name}`, `${name.path}`, `$var.name`; write `$$` for a literal `$`"),
            );
            return None;
        }
    };
    // Each at the string it is written in, so a diagnostic underlines that string.
    let mut reads: Vec<(Placeholder, Place, PlanPath)> = template
        .placeholders_at()
        .into_iter()
        .map(|(pointer, p)| (p.clone(), Place::Args, args_path.clone().pointer(&pointer)))
        .collect();
    if let Some(expand) = &step.expand {
        // Malformed ones were reported by normalisation.
        if let serde_json::Value::String(text) = &expand.on
            && let Ok(template) = Template::parse(text)
        {
            let path = PlanPath::step(i).key("expand_on");
            reads.extend(
                template
                    .placeholders()
                    .map(|p| (p.clone(), Place::ExpandOn, path.clone())),
            );
        }
        if let Some(text) = &expand.key
            && let Ok(template) = Template::parse(text)
        {
            let path = PlanPath::step(i).key("expand_key");
            reads.extend(
                template
                    .placeholders()
                    .map(|p| (p.clone(), Place::ExpandKey, path.clone())),
            );
        }
    }
    if let Some(task) = &step.task {
        // A task's calls and checks read the run's variables too (`task` and `failure` are
        // the task's own).
        let at = PlanPath::step(i).key("task");
        let mut parts: Vec<(PlanPath, serde_json::Value)> = task_calls(task)
            .map(|(name, call)| {
                (
                    at.clone().key(name).key("args"),
                    serde_json::Value::Object(call.args.clone()),
                )
            })
            .collect();
        for (k, check) in task.verify.iter().enumerate() {
            parts.push((
                at.clone().key("verify").index(k).key("argv"),
                serde_json::json!(check.argv),
            ));
        }
        for (path, value) in parts {
            match ValueTemplate::compile(&value) {
                Ok(template) => reads.extend(
                    template
                        .placeholders_at()
                        .into_iter()
                        .filter(|(_, p)| !matches!(p.variable(), Some("task" | "failure")))
                        .map(|(pointer, p)| (p.clone(), Place::Block, path.clone().pointer(&pointer))),
                ),
                Err(error) => issues.push(
                    Issue::error("plan::placeholder", path.pointer(&error.pointer), format!("malformed placeholder: {error}"))
                        .help("placeholders are `${task.id}`, `${name}`, `${name.path}`; write `$$` for a literal `$`"),
                ),
            }
        }
    }
    if let Some(block) = &step.block {
        // Node arguments read the run's variables too (`input` and `nodes` are the block's own).
        let path = PlanPath::step(i).key("block");
        node_reads(block, &path, &mut reads);
    }
    for (name, selector) in &step.binds {
        // A bind's expression reads `vars.NAME` too (and `result`, its own step's).
        // (One that does not compile was reported when the plan was read.)
        if let Ok(template) = Template::parse(selector.trim())
            && let Some(placeholder) = template.as_placeholder()
            && let Root::Expr(text) = &placeholder.root
            && crate::condition::compile_condition(text).is_ok()
        {
            let path = PlanPath::step(i).key("binds").key(name);
            reads.push((placeholder.clone(), Place::Bind, path));
        }
    }
    if let Some(condition) = &step.when {
        // A condition reads `vars.NAME`: the same ordering rules apply as for placeholders.
        let path = PlanPath::step(i).key("when");
        for name in condition_reads(condition) {
            if let Ok(template) = Template::parse(&format!("${{{name}}}"))
                && let Some(placeholder) = template.as_placeholder()
            {
                reads.push((placeholder.clone(), Place::When, path.clone()));
            }
        }
    }
    Some(expressions_as_reads(reads, issues))
}

/// Each data expression (`${{ EXPR }}`) checked as CEL (the same limits as a condition), and
/// replaced by the variables it reads (`vars.NAME`), so that the ordering rules apply to them
/// as to placeholders.
fn expressions_as_reads(
    reads: Vec<(Placeholder, Place, PlanPath)>,
    issues: &mut Vec<Issue>,
) -> Vec<(Placeholder, Place, PlanPath)> {
    let mut out = Vec::with_capacity(reads.len());
    for (placeholder, place, path) in reads {
        let Root::Expr(expression) = &placeholder.root else {
            out.push((placeholder, place, path));
            continue;
        };
        if let Err(error) = crate::condition::compile_condition(expression) {
            issues.push(
                Issue::error(
                    "plan::expression",
                    path.clone(),
                    format!("`{placeholder}` is not a valid expression: {error}"),
                )
                .label("this expression")
                .help("expressions are CEL over `vars`, `each`, `index` and `key`: `${{ vars.files.stdout.trim().split('\\n') }}`"),
            );
            continue;
        }
        let mut names: Vec<String> = condition_reads(expression)
            .into_iter()
            // In a block node, `vars.input` and `vars.nodes` are the block's own.
            .filter(|name| place != Place::Block || !matches!(name.as_str(), "input" | "nodes"))
            .map(|name| format!("${{{name}}}"))
            .collect();
        // The map item, read by name: held to the same rules as `$each`, `$index`, `$key`.
        let used = expression_identifiers(expression);
        for item in ["each", "index", "key"] {
            if used.contains(&item) {
                names.push(format!("${item}"));
            }
        }
        for text in names {
            if let Ok(template) = Template::parse(&text)
                && let Some(read) = template.as_placeholder()
            {
                out.push((read.clone(), place, path.clone()));
            }
        }
    }
    out
}

/// The names an expression uses on their own (not after a `.`, not called), outside strings.
fn expression_identifiers(expression: &str) -> Vec<&str> {
    let mut names = Vec::new();
    let mut previous = ' ';
    let mut start: Option<usize> = None;
    let end = std::iter::once((expression.len(), ' '));
    for (i, c) in plan_vars::outside_strings(expression).chain(end) {
        let word = c.is_alphanumeric() || c == '_';
        match (start, word) {
            (None, true) if previous != '.' && !previous.is_alphanumeric() => start = Some(i),
            (Some(from), false) => {
                let called = expression[i..].trim_start().starts_with('(');
                if !called {
                    names.push(&expression[from..i]);
                }
                start = None;
            }
            _ => {}
        }
        if !c.is_whitespace() {
            previous = c;
        }
    }
    names
}

/// A task's tool calls with their field names: `implement`, and `feedback` when it has one.
fn task_calls(
    task: &crate::model::TaskSpec,
) -> impl Iterator<Item = (&'static str, &crate::model::TaskCall)> {
    [
        ("implement", Some(&task.implement)),
        ("feedback", task.feedback.as_ref()),
    ]
    .into_iter()
    .filter_map(|(name, call)| Some((name, call?)))
}

/// An unknown or ambiguous tool name, at `path`.
fn check_tool_known(tool: &str, path: PlanPath, options: &LoadOptions, issues: &mut Vec<Issue>) {
    if let Some(candidates) = options.ambiguous_tools.get(tool) {
        issues.push(ambiguous_tool(path, tool, candidates));
    } else if let Some(known) = &options.known_tools
        && !known.iter().any(|k| k == tool)
    {
        issues.push(unknown_tool_at(path, tool, known));
    }
}

fn node_reads(
    block: &crate::model::Block,
    path: &PlanPath,
    reads: &mut Vec<(Placeholder, Place, PlanPath)>,
) {
    for node in block.nodes.values() {
        if let Some(nested) = &node.block {
            node_reads(nested, path, reads);
        } else if let Ok(template) =
            ValueTemplate::compile(&serde_json::Value::Object(node.args.clone()))
        {
            reads.extend(
                template
                    .placeholders()
                    .into_iter()
                    .filter(|p| !matches!(p.variable(), Some("input" | "nodes")))
                    .map(|p| (p.clone(), Place::Block, path.clone())),
            );
        }
    }
}

/// The variable names a CEL condition reads as `vars.NAME` or `vars["NAME"]`.
fn condition_reads(condition: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = condition;
    while let Some(found) = rest.find("vars") {
        let before = rest[..found].chars().next_back();
        let after = &rest[found + 4..];
        rest = after;
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.') {
            continue;
        }
        let name: String = if let Some(dotted) = after.strip_prefix('.') {
            dotted
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect()
        } else if let Some(quoted) = after
            .strip_prefix("[\"")
            .or_else(|| after.strip_prefix("['"))
        {
            quoted
                .chars()
                .take_while(|c| *c != '"' && *c != '\'')
                .collect()
        } else {
            continue;
        };
        if !name.is_empty() && !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

/// The composite-block validation, before anything runs: the entry point and every transition's source
/// and target are nodes, every branch's condition exists and compiles, every node is one call
/// or one nested block. Messages start with the specification's reason (`invalid_graph`, …).
fn check_block(
    block: &crate::model::Block,
    at: &PlanPath,
    options: &LoadOptions,
    issues: &mut Vec<Issue>,
) {
    if block.nodes.is_empty() {
        issues.push(Issue::error(
            "plan::block",
            at.clone().key("nodes"),
            "invalid_graph: a block needs at least one node",
        ));
    }
    if !block.nodes.contains_key(&block.entry_point) {
        issues.push(
            Issue::error(
                "plan::block",
                at.clone().key("entry_point"),
                format!(
                    "invalid_graph: the entry point `{}` is not a node",
                    block.entry_point
                ),
            )
            .help(format!("the nodes are {}", names(block.nodes.keys()))),
        );
    }
    if block.max_steps == 0 {
        issues.push(Issue::error(
            "plan::block",
            at.clone().key("max_steps"),
            "invalid_graph: `max_steps` must be at least 1",
        ));
    }
    // A node's runs are named `STEP/NODE#N` (nested: `STEP/NODE#N/INNER#M`), its approvals
    // `STEP/NODE`, a decision on a failed run `STEP/NODE#N@K`: a name holding one of those
    // marks could name another node's run, and take its approval or its record.
    for name in block.nodes.keys() {
        if name.is_empty() || name.contains(['/', '#', '@']) {
            issues.push(
                Issue::error(
                    "plan::block",
                    at.clone().key("nodes").key(name),
                    format!(
                        "invalid_graph: the node name `{name}` is empty or holds `/`, `#` or `@`"
                    ),
                )
                .help("node names are plain names: their runs are named `STEP/NODE#N`"),
            );
        }
    }
    for (name, text) in &block.conditions {
        if let Err(first) = crate::compile_condition(text) {
            issues.push(Issue::error(
                "plan::block",
                at.clone().key("conditions").key(name),
                format!("condition_resolution_error: condition `{name}` is not valid CEL: {first}"),
            ));
        }
    }
    for (source, transition) in &block.transitions {
        let path = at.clone().key("transitions").key(source);
        if !block.nodes.contains_key(source) {
            issues.push(
                Issue::error(
                    "plan::block",
                    path.clone(),
                    format!(
                        "unknown_node: there is a transition from `{source}`, which is not a node"
                    ),
                )
                .at_key(),
            );
        }
        let branches: Vec<(Option<&str>, &str, PlanPath)> = match transition {
            crate::model::Transition::Linear(target) => vec![(None, target.as_str(), path.clone())],
            crate::model::Transition::Branching(list) => list
                .iter()
                .enumerate()
                .map(|(k, b)| {
                    (
                        Some(b.condition.as_str()),
                        b.target.as_str(),
                        path.clone().index(k),
                    )
                })
                .collect(),
        };
        for (condition, target, branch_path) in &branches {
            if !block.nodes.contains_key(*target) {
                issues.push(Issue::error(
                    "plan::block",
                    branch_path.clone(),
                    format!("unknown_node: `{source}` goes to `{target}`, which is not a node"),
                ));
            }
            if let Some(condition) = condition
                && *condition != "default"
                && !block.conditions.contains_key(*condition)
            {
                issues.push(
                    Issue::error(
                        "plan::block",
                        branch_path.clone(),
                        format!(
                            "condition_resolution_error: condition `{condition}` is not defined"
                        ),
                    )
                    .help("define it under the block's `conditions`, or use `default`"),
                );
            }
        }
        if let crate::model::Transition::Branching(list) = transition
            && !list.iter().any(|b| b.condition == "default")
        {
            issues.push(
                Issue::warning("plan::block", path.clone(), format!("the branches after `{source}` have no `default`: if none matches, the block fails with `no_transition`"))
                    .at_key(),
            );
        }
    }
    for (name, node) in &block.nodes {
        let path = at.clone().key("nodes").key(name);
        match (&node.tool, &node.block) {
            (Some(tool), None) => {
                check_tool_known(tool, path.clone().key("tool"), options, issues);
                if let Err(error) =
                    ValueTemplate::compile(&serde_json::Value::Object(node.args.clone()))
                {
                    issues.push(Issue::error(
                        "plan::placeholder",
                        path.clone().key("args").pointer(&error.pointer),
                        format!("malformed placeholder: {error}"),
                    ));
                }
            }
            (None, Some(nested)) => {
                check_block(nested, &path.clone().key("block"), options, issues)
            }
            _ => issues.push(Issue::error(
                "plan::block",
                path,
                format!("invalid_graph: node `{name}` needs exactly one of `tool` and `block`"),
            )),
        }
    }
}

fn names<'a>(names: impl Iterator<Item = &'a String>) -> String {
    names
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The names of the variables a plan reads anywhere (placeholders in arguments, `expand_on`,
/// `expand_key`, block nodes, and `vars.NAME` in conditions), whether or not it defines them.
pub fn variables_read(plan: &Plan) -> std::collections::BTreeSet<String> {
    let mut ignored = Vec::new();
    plan.steps
        .iter()
        .enumerate()
        .filter_map(|(i, step)| placeholders_of(step, i, &mut ignored))
        .flatten()
        .filter_map(|(placeholder, _, _)| match placeholder.root {
            Root::Var(name) => Some(name),
            _ => None,
        })
        .collect()
}

/// The environment variables step `i` reads (`${env.NAME}`), wherever in it (its arguments,
/// map settings, block nodes, task calls and checks): what a policy judges of a re-planned
/// step, whose plan lists the operator's `env:`.
pub fn env_read(plan: &Plan, i: usize) -> std::collections::BTreeSet<String> {
    let mut ignored = Vec::new();
    plan.steps
        .get(i)
        .and_then(|step| placeholders_of(step, i, &mut ignored))
        .into_iter()
        .flatten()
        .filter_map(|(placeholder, _, _)| match placeholder.root {
            Root::Env(name) => Some(name),
            _ => None,
        })
        .collect()
}

/// Whether `id` has the shape of an item of map step `step`: `STEP-N` or `STEP[KEY]`.
pub fn is_item_of(id: &str, step: &str) -> bool {
    id.strip_prefix(step).is_some_and(|rest| {
        rest.strip_prefix('-')
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            || (rest.starts_with('[') && rest.ends_with(']'))
    })
}

/// A map step's items are `ID-N` or `ID[KEY]`: no other step may have an id of that shape.
fn check_item_ids(plan: &Plan, issues: &mut Vec<Issue>) {
    for (m, map_step) in plan
        .steps
        .iter()
        .enumerate()
        .filter(|(_, s)| s.expand.is_some())
    {
        // `M[` starts every keyed item of `M`: a step whose id starts so (`m[a`) could make
        // calls whose ids are `M`'s items' (`m[a` + `[x]` is `m[a[x]]`, item `a[x]` of `m`).
        let keyed = format!("{}[", map_step.id.0);
        for (i, step) in plan.steps.iter().enumerate() {
            let id = &step.id.0;
            if i != m && (is_item_of(id, &map_step.id.0) || id.starts_with(&keyed)) {
                issues.push(
                    Issue::error(
                        "plan::item_id",
                        PlanPath::step(i).key("id"),
                        format!(
                            "the id `{id}` looks like an item of map step `{}`",
                            map_step.id
                        ),
                    )
                    .related(
                        PlanPath::step(m).key("expand_on"),
                        "items of this map step are named `ID-N` or `ID[KEY]`",
                    )
                    .help("rename one of the two steps"),
                );
            }
        }
    }
}

/// Where step `i` binds `name`: its `result_variable` or its `binds` entry.
fn bind_path(plan: &Plan, i: usize, name: &str) -> PlanPath {
    if plan.steps[i].result_variable.as_deref() == Some(name) {
        PlanPath::step(i).key("result_variable")
    } else {
        PlanPath::step(i).key("binds").key(name)
    }
}

/// A step naming a tool that does not exist, with the closest name as help.
pub fn unknown_tool(step: usize, tool: &str, known: &[String]) -> Issue {
    unknown_tool_at(PlanPath::step(step).key("tool"), tool, known)
}

fn ambiguous_tool(path: PlanPath, tool: &str, candidates: &[String]) -> Issue {
    let listed: Vec<String> = candidates.iter().map(|c| format!("`{c}`")).collect();
    Issue::error(
        "plan::ambiguous_tool",
        path,
        format!(
            "`{tool}` is a tool of several MCP servers: {}",
            listed.join(", ")
        ),
    )
    .label("which one?")
    .help(format!(
        "name the server: `{}`",
        candidates.first().map_or(tool, String::as_str)
    ))
}

fn unknown_tool_at(path: PlanPath, tool: &str, known: &[String]) -> Issue {
    let issue = Issue::error("plan::unknown_tool", path, format!("unknown tool `{tool}`"))
        .label("no tool has this name");
    match crate::load::closest(tool, known) {
        Some(name) => issue.help(format!("did you mean `{name}`?")),
        // A worker's tool: known once a plan-cli worker publishes it, or declared by the plan.
        None if !tool.contains('.') => issue.help(
            "a tool of BullMQ workers is known once a `plan-cli worker` publishes it, or when the plan declares it under `tools:` (name, queue, input_schema, risk)",
        ),
        None => issue,
    }
}

fn acyclic_ancestors<'a>(
    memo: &'a mut HashMap<usize, HashSet<usize>>,
    deps: &Dependencies,
    step: usize,
) -> &'a HashSet<usize> {
    memo.entry(step).or_insert_with(|| deps.ancestors(step))
}

/// A block's nodes and a task's calls are `ID/…` (`review/check#2`, `T1/implement#1`): no
/// other step may have an id of that shape, or its record and the call's would be one. (Map
/// items' shapes are `check_item_ids`'.)
fn check_call_ids(plan: &Plan, at: &HashMap<&str, usize>) -> Vec<Issue> {
    let mut issues = Vec::new();
    for (i, step) in plan.steps.iter().enumerate() {
        let id = step.id.0.as_str();
        // `CALL@input#N` names the questions calls ask a person (kept beside approvals).
        if id.contains(plan_types::QUESTION_MARK) {
            issues.push(
                Issue::error(
                    "plan::call_id",
                    PlanPath::step(i).key("id"),
                    format!(
                        "the id `{id}` holds `{}`, which names the questions calls ask a person",
                        plan_types::QUESTION_MARK
                    ),
                )
                .help("rename the step"),
            );
            continue;
        }
        let makes_calls = |j: usize| plan.steps[j].block.is_some() || plan.steps[j].task.is_some();
        let clash = id
            .match_indices('/')
            .find_map(|(cut, _)| at.get(&id[..cut]).copied().filter(|&j| makes_calls(j)));
        if let Some(j) = clash {
            let kind = if plan.steps[j].block.is_some() {
                "block"
            } else {
                "task"
            };
            issues.push(
                Issue::error(
                    "plan::call_id",
                    PlanPath::step(i).key("id"),
                    format!(
                        "the id `{id}` looks like a call inside {kind} step `{}`",
                        plan.steps[j].id
                    ),
                )
                .related(
                    PlanPath::step(j).key("id"),
                    "calls inside this step are named `ID/NAME#N`",
                )
                .help("rename one of the two steps"),
            );
        }
    }
    issues
}

#[cfg(test)]
mod tests {
    #[test]
    fn item_ids_have_two_shapes() {
        use super::is_item_of;
        assert!(is_item_of("deploy-0", "deploy"));
        assert!(is_item_of("deploy-12", "deploy"));
        assert!(is_item_of("deploy[prod]", "deploy"));
        assert!(!is_item_of("deploy", "deploy"));
        assert!(!is_item_of("deploy-", "deploy"));
        assert!(!is_item_of("deploy-x", "deploy"));
        assert!(!is_item_of("deployer-1", "deploy"));
        assert!(!is_item_of("deploy[prod", "deploy"));
    }
}
