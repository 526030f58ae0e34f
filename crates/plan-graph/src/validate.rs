//! Whole-plan checks: ids, dependencies, cycles, placeholders and who binds what.

use std::collections::{BTreeMap, HashMap, HashSet};

use plan_vars::{Root, ValueTemplate};

use crate::dag::Dependencies;
use crate::issue::Issue;
use crate::load::LoadOptions;
use crate::model::Plan;
use crate::source::{PathSegment, PlanPath};

pub(crate) fn validate(plan: &Plan, options: &LoadOptions) -> Vec<Issue> {
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

    if let Some(known) = &options.known_tools {
        for (i, step) in plan.steps.iter().enumerate() {
            if !step.tool.is_empty() && !known.contains(&step.tool) {
                issues.push(unknown_tool(i, &step.tool, known));
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
    for cycle in &cycles {
        let names: Vec<String> = cycle
            .iter()
            .chain(cycle.first())
            .map(|&i| format!("`{}`", plan.steps[i].id))
            .collect();
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
        for j in 1..cycle.len() {
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

    check_variables(plan, &deps, cycles.is_empty(), options, &mut issues);
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
        let args_path = PlanPath::step(i).key("args");
        let template = match ValueTemplate::compile(&serde_json::Value::Object(step.args.clone())) {
            Ok(template) => template,
            Err(error) => {
                issues.push(
                    Issue::error("plan::placeholder", pointer_path(args_path, &error.pointer), format!("malformed placeholder: {error}"))
                        .help("placeholders are `${name}`, `${name.path}`, `$var.name`; write `$$` for a literal `$`"),
                );
                continue;
            }
        };
        for placeholder in template.placeholders() {
            let name = match &placeholder.root {
                Root::Var(name) => name,
                Root::Each | Root::Index | Root::Key => {
                    issues.push(
                        Issue::error("plan::placeholder", args_path.clone(), format!("`{placeholder}` is only defined inside a map step (one with `expand_on`)"))
                            .label("used here"),
                    );
                    continue;
                }
                Root::Env(_) => {
                    issues.push(
                        Issue::error("plan::placeholder", args_path.clone(), format!("`{placeholder}` reads the environment, which needs the plan-level `env:` list that this version does not support yet"))
                            .label("used here"),
                    );
                    continue;
                }
            };
            match binders.get(name.as_str()) {
                Some(bound_by) if acyclic => {
                    for &b in bound_by {
                        if b != i && !ordered(b, i) {
                            issues.push(
                                Issue::error("plan::unordered_read", args_path.clone(), format!("step `{}` reads `{name}`, which step `{}` binds, but does not depend on it", step.id, plan.steps[b].id))
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
                            Issue::warning("plan::undefined_variable", args_path.clone(), format!("no step binds `{name}` and the plan's `variables` do not define it"))
                                .label(format!("reads `{name}`"))
                                .help(format!("give it with `--var {name}=VALUE`, or the step will fail with E_ARGS_UNRESOLVED")),
                        );
                    }
                }
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
    let help = match crate::load::closest(tool, known) {
        Some(name) => format!("did you mean `{name}`? `plan-cli tools` lists every tool"),
        None => "`plan-cli tools` lists every tool".to_owned(),
    };
    Issue::error(
        "plan::unknown_tool",
        PlanPath::step(step).key("tool"),
        format!("unknown tool `{tool}`"),
    )
    .label("no tool has this name")
    .help(help)
}

fn acyclic_ancestors<'a>(
    memo: &'a mut HashMap<usize, HashSet<usize>>,
    deps: &Dependencies,
    step: usize,
) -> &'a HashSet<usize> {
    memo.entry(step).or_insert_with(|| deps.ancestors(step))
}

/// `/a/0/b` under `base` as a plan path (a numeric segment is taken as a list index).
fn pointer_path(base: PlanPath, pointer: &str) -> PlanPath {
    let mut path = base;
    for raw in pointer.split('/').skip(1) {
        let segment = raw.replace("~1", "/").replace("~0", "~");
        path.0.push(match segment.parse::<usize>() {
            Ok(index) => PathSegment::Index(index),
            Err(_) => PathSegment::Key(segment),
        });
    }
    path
}
