//! A plan bound to tools: every tool looked up, every template parsed and every argument
//! schema compiled, once per plan.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use plan_graph::{
    Dependencies, Guards, Issue, Mode, Plan, PlanPath, RetryPolicy, Risk, RunIf, unknown_tool,
};
use plan_vars::{Item, Placeholder, Root, Scope, Selector, Template, ValueTemplate, kind};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::block::{block_states, compile_block};
use crate::condition::Condition;
use crate::expression::{Place, check_references};
use crate::redact::Redactor;
use crate::schema::{compile_schema, resolve_checked};
use crate::task::{TaskSettings, compile_task};
use plan_ports::{Registry, codes};
use plan_types::BlockState;
use plan_types::{CallPath, MapItem, Record, StepError};

/// Most steps running at once when neither the plan nor the caller says.
pub const DEFAULT_MAX_CONCURRENCY: usize = 4;

/// Most steps running at once in a plan with a `workspace` (task steps) that does not say.
pub const DEFAULT_MAX_PARALLEL_TASKS: usize = 3;

pub(crate) use crate::kind::Action;

pub(crate) struct CompiledStep {
    pub(crate) id: Arc<str>,
    /// Empty for a block step.
    pub(crate) tool_name: Arc<str>,
    pub(crate) action: Action,
    pub(crate) args: ValueTemplate,
    pub(crate) binds: Vec<(String, Bind)>,
    pub(crate) retry: RetryPolicy,
    pub(crate) timeout: Option<Duration>,
    pub(crate) expand: Option<Box<CompiledExpand>>,
    pub(crate) schema: Option<Arc<jsonschema::Validator>>,
    pub(crate) when: Option<Box<Condition>>,
    /// `risk: high` (the step's own, else its tool's): runs only once approved.
    pub(crate) gated: bool,
    pub(crate) run_if: RunIf,
}

impl CompiledStep {
    /// What the step's kind is asked with (`Action`'s questions).
    pub(crate) fn view(&self) -> crate::kind::StepView<'_> {
        crate::kind::StepView {
            id: &self.id,
            tool_name: &self.tool_name,
            gated: self.gated,
            is_map: self.expand.is_some(),
            args: &self.args,
            schema: self.schema.as_deref(),
            retry: &self.retry,
            timeout: self.timeout,
        }
    }
}

/// What a bind takes from a step's result: a selector (`$.stdout`), or a data expression
/// (`${{ result.stdout.trim() }}`) over `result` and `vars`.
pub(crate) enum Bind {
    Select(Selector),
    Expression(String),
}

impl Bind {
    /// The whole result (`$`): shared with the variable rather than copied.
    pub(crate) fn is_whole(&self) -> bool {
        matches!(self, Bind::Select(selector) if selector.text() == "$")
    }
}

/// What a map step runs over.
pub(crate) struct CompiledExpand {
    pub(crate) on: ExpandSource,
    /// `expand_on` as written, for messages.
    pub(crate) on_text: String,
    pub(crate) key: Option<Template>,
}

pub(crate) enum ExpandSource {
    Literal(Vec<Value>),
    Placeholder(Template),
}

/// A validated plan ready to run: tools resolved, placeholders and selectors parsed.
pub struct Program {
    pub(crate) plan_id: Arc<str>,
    pub(crate) steps: Vec<CompiledStep>,
    /// The steps' ids, which ids read back from the ledger are read through: one per plan,
    /// made when first needed (a run that restores nothing and waits for nothing needs none).
    index: std::sync::OnceLock<plan_graph::StepIndex>,
    pub(crate) deps: Dependencies,
    /// The plan's variables, shared with every run (a run copies none of them).
    pub(crate) variables: BTreeMap<String, Arc<Value>>,
    pub(crate) max_concurrency: Option<usize>,
    /// The environment variables `${env.NAME}` may read.
    pub(crate) env: Vec<String>,
    pub(crate) guards: Option<Guards>,
    /// The plan's mode (`auto` unless it says otherwise).
    pub(crate) mode: Mode,
    pub(crate) fail_fast: bool,
    /// Each bound variable and the first step that binds it (previews show its value as
    /// `<result of STEP>`).
    binders: BTreeMap<String, Arc<str>>,
    /// Every variable name the plan can define (its variables, its binds), sorted: what a
    /// missing variable's message may suggest, whatever is bound when it is missed.
    pub(crate) variable_names: Arc<[String]>,
    /// The data expressions (`${{ EXPR }}`) of every step, compiled.
    pub(crate) expressions: crate::expression::Expressions,
    /// The workspace's `context_update` call, run after the last task.
    pub(crate) context_update: Option<Arc<crate::task::ContextUpdate>>,
    /// The workspace's `verify_after_merge` checks (each task holds them too).
    pub(crate) merge_checks: Option<Arc<crate::task::MergeChecks>>,
    /// The calls whose text is the run's answer (`chat.respond`), if it makes any.
    pub(crate) answers: Option<Arc<plan_graph::Answers>>,
}

/// One call a preview shows: what would be called, with what.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlannedCall {
    /// The step, or the map item (`ID-N`, `ID[KEY]`) when its list is known.
    pub step_id: String,
    /// The tool.
    pub tool: String,
    /// The arguments, resolved as far as the inputs allow: what only a step's result could
    /// give reads `<result of STEP>`; an unknown map item's values read `<… of each item>`.
    pub args: Value,
    /// The step's dependencies.
    pub depends_on: Vec<String>,
    /// For a map step whose list only a step's result gives: the `expand_on` it will run over.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expand_on: Option<String>,
    /// Why this call would fail before its tool is called (`E_ARGS_UNRESOLVED`, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<StepError>,
    /// The step's `when`, decided at run time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    /// Why the step would not run at all: it depends (itself, or through the steps it waits
    /// for) on a step the plan does not have, so the run ends `BLOCKED` without calling it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_run: Option<String>,
}

/// The values a run reads besides its variables: the map item being run and the listed
/// environment.
pub(crate) struct ItemValues<'a> {
    pub(crate) value: &'a Value,
    pub(crate) index: Value,
    pub(crate) key: Option<&'a Value>,
}

impl Program {
    /// The plan's steps' ids (see the `index` field).
    pub(crate) fn index(&self) -> &plan_graph::StepIndex {
        self.index
            .get_or_init(|| plan_graph::StepIndex::new(self.steps.iter().map(|s| &*s.id)))
    }

    /// Binds a loaded plan to the registry's tools. Every unknown tool is an [`Issue`] at the
    /// step's `tool`, with the closest known name as help; a tool whose published schema does
    /// not compile is an issue too.
    pub fn compile(plan: &Plan, plan_id: &str, registry: &Registry) -> Result<Program, Vec<Issue>> {
        let mut issues = Vec::new();
        let mut steps = Vec::with_capacity(plan.steps.len());
        let names = registry.names();
        let default_retry = plan.retry.clone().unwrap_or_default();
        // A tool's risk and compiled schema, worked out once per tool, not once per step.
        let mut facts: ToolFacts<'_> = HashMap::new();
        let workspace = plan.workspace.as_ref();
        let merge_checks = workspace_part(
            &mut issues,
            "verify_after_merge",
            workspace.map_or(Ok(None), |w| {
                crate::task::compile_merge_checks(&w.verify_after_merge, registry)
            }),
        );
        // One name per tool, shared by its steps, not one per step.
        let mut tool_names: HashMap<&str, Arc<str>> = HashMap::new();
        let mut binders = BTreeMap::new();
        let mut expressions = crate::expression::Expressions::default();
        for (i, step) in plan.steps.iter().enumerate() {
            let step_timeout = step
                .timeout_ms
                .or(plan.timeout_ms)
                .map(Duration::from_millis);
            let step_retry = step
                .retry
                .as_deref()
                .cloned()
                .unwrap_or_else(|| default_retry.clone());
            let Some((action, schema, default_risk)) = compile_action(
                Site {
                    plan,
                    i,
                    registry,
                    issues: &mut issues,
                },
                &step_retry,
                &merge_checks,
                &mut facts,
                &names,
            ) else {
                continue;
            };
            let args = match ValueTemplate::compile_shared(&step.args) {
                Ok(args) => args,
                Err(error) => {
                    // At its string, where validation reports it too (and so said once).
                    issues.push(Issue::error(
                        "plan::placeholder",
                        PlanPath::step(i).key("args").pointer(&error.pointer),
                        format!("malformed placeholder: {error}"),
                    ));
                    continue;
                }
            };
            let binds = compile_binds(
                Site {
                    plan,
                    i,
                    registry,
                    issues: &mut issues,
                },
                &mut expressions,
                &mut binders,
            );
            let Ok(when) = compile_when(Site {
                plan,
                i,
                registry,
                issues: &mut issues,
            }) else {
                continue;
            };
            let expand = match step.expand.as_deref().map(compile_expand) {
                None => None,
                Some(Ok(expand)) => Some(expand),
                Some(Err(message)) => {
                    issues.push(Issue::error(
                        "plan::expand",
                        PlanPath::step(i).key("expand_on"),
                        message,
                    ));
                    continue;
                }
            };
            check_expressions(
                Site {
                    plan,
                    i,
                    registry,
                    issues: &mut issues,
                },
                &args,
                expand.as_ref(),
                &mut expressions,
            );
            steps.push(CompiledStep {
                id: Arc::from(step.id.0.as_str()),
                tool_name: tool_names
                    .entry(step.tool.as_str())
                    .or_insert_with(|| Arc::from(step.tool.as_str()))
                    .clone(),
                action,
                args,
                binds,
                retry: step_retry,
                timeout: step_timeout,
                expand: expand.map(Box::new),
                schema,
                when: when.map(Box::new),
                gated: step.risk.unwrap_or(default_risk) == Risk::High,
                run_if: step.run_if,
            });
        }
        let context_update = workspace_part(
            &mut issues,
            "context_update",
            workspace
                .and_then(|w| w.context_update.as_ref())
                .map(|call| crate::task::compile_context_update(call, registry))
                .transpose(),
        );
        if !issues.is_empty() {
            return Err(issues);
        }
        Ok(Program {
            plan_id: Arc::from(plan_id),
            index: std::sync::OnceLock::new(),
            steps,
            deps: Dependencies::new(plan),
            variables: plan
                .variables
                .iter()
                .map(|(k, v)| (k.clone(), Arc::new(v.clone())))
                .collect(),
            // Task plans run 3 at a time unless they say (coding agents are heavy).
            max_concurrency: plan.max_concurrency.or_else(|| {
                plan.workspace
                    .as_ref()
                    .map(|w| w.max_parallel.unwrap_or(DEFAULT_MAX_PARALLEL_TASKS))
            }),
            env: plan.env.clone(),
            guards: plan.guards.clone(),
            answers: plan_graph::Answers::of(plan).map(Arc::new),
            mode: plan.mode.unwrap_or_default(),
            fail_fast: plan.fail_fast,
            variable_names: {
                let mut names: Vec<String> = plan
                    .variables
                    .keys()
                    .chain(binders.keys())
                    .cloned()
                    .collect();
                names.sort();
                names.dedup();
                names.into()
            },
            binders,
            expressions,
            context_update,
            merge_checks,
        })
    }

    /// The plan's id.
    pub fn plan_id(&self) -> &str {
        &self.plan_id
    }

    /// How the plan asks to be run (`mode:`; `auto` when it does not say).
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The state of each block step, in plan order, from a run's records (as `run` reports
    /// them or the ledger keeps them) and the checkpoints of blocks that wait.
    pub fn block_states(
        &self,
        records: &[Record],
        checkpoints: &BTreeMap<String, Value>,
    ) -> Vec<BlockState> {
        let blocks = self
            .steps
            .iter()
            .filter(|step| step.action.is_block())
            .map(|step| &*step.id);
        block_states(blocks, records, checkpoints)
    }

    /// What waits for an approval (`risk: high`, the step's or its tool's), in plan order:
    /// step ids, and the keys of block nodes (`review/deploy`).
    pub fn gated_steps(&self) -> Vec<String> {
        let mut gated = Vec::new();
        for step in &self.steps {
            if step.gated {
                gated.push(step.id.to_string());
            }
            gated.extend(step.action.gated_inside(&step.id));
        }
        gated
    }

    /// Its steps' ids, in plan order.
    pub fn step_ids(&self) -> impl Iterator<Item = &str> {
        self.steps.iter().map(|step| &*step.id)
    }

    /// How many steps the plan has (a map step counts once).
    pub fn len(&self) -> usize {
        self.steps.len()
    }

    /// True for a plan without steps.
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// The environment variables the plan reads (`env:`); the caller supplies their values.
    pub fn env_names(&self) -> &[String] {
        &self.env
    }

    /// The plan's variables overlaid with `inputs` (inputs win).
    pub(crate) fn initial_variables(
        &self,
        inputs: &Map<String, Value>,
    ) -> BTreeMap<String, Arc<Value>> {
        let mut vars = self.variables.clone();
        vars.extend(inputs.iter().map(|(k, v)| (k.clone(), Arc::new(v.clone()))));
        vars
    }

    /// The listed environment variables that the caller gave values for, as placeholder values.
    pub(crate) fn env_values(&self, env: &BTreeMap<String, String>) -> BTreeMap<String, Value> {
        self.env
            .iter()
            .filter_map(|name| {
                env.get(name)
                    .map(|value| (name.clone(), Value::String(value.clone())))
            })
            .collect()
    }

    /// What a run would call, in plan order, without calling anything (`--dry-run`). A map
    /// step whose list the inputs already give shows one call per item. Values of listed
    /// environment variables are redacted.
    pub fn preview(
        &self,
        inputs: &Map<String, Value>,
        env: &BTreeMap<String, String>,
    ) -> Vec<PlannedCall> {
        let vars = self.initial_variables(inputs);
        let env_values = self.env_values(env);
        let redactor = Redactor::new(env.values().map(String::as_str));
        let binders = &self.binders;
        let stand_in = |placeholder: &Placeholder| -> Option<String> {
            match &placeholder.root {
                Root::Var(name) if !vars.contains_key(name) => {
                    binders.get(name).map(|step| format!("<result of {step}>"))
                }
                Root::Each | Root::Index | Root::Key => {
                    Some(format!("<{} of each item>", placeholder.text()))
                }
                // An expression over what only the run gives (it failed here).
                Root::Expr(_) => Some(format!("<value of {}>", placeholder.text())),
                _ => None,
            }
        };
        // The same stand-ins, for checking arguments: a value the run gives is never blamed.
        let unknown = |placeholder: &Placeholder| {
            stand_in(placeholder).map(|_| crate::schema::UNKNOWN.to_owned())
        };
        // Steps that never run: an unknown dependency, or a dependency that never runs.
        let mut blocked: Vec<Option<String>> = self
            .deps
            .unknown
            .iter()
            .map(|unknown| {
                let names: Vec<String> = unknown.iter().map(|d| format!("`{}`", d.0)).collect();
                (!names.is_empty()).then(|| {
                    format!(
                        "it depends on {}, which is not a step of the plan",
                        names.join(", ")
                    )
                })
            })
            .collect();
        // In dependency order, as the scheduler decides it: a step whose dependency never
        // runs is skipped too, unless its `run_if` lets it run after that (`all_done`), or
        // another dependency may still succeed (`any_success`).
        for i in self.deps.levels().into_iter().flatten() {
            let deps = &self.deps.deps[i];
            let never = |d: &usize| blocked[*d].is_some();
            let first = deps.iter().find(|d| never(d)).copied();
            let skipped = match self.steps[i].run_if {
                RunIf::AllSuccess => first.is_some(),
                RunIf::AllDone => false,
                RunIf::AnySuccess => !deps.is_empty() && deps.iter().all(never),
            };
            if blocked[i].is_none()
                && skipped
                && let Some(d) = first
            {
                blocked[i] = Some(format!(
                    "it waits for `{}`, which does not run",
                    self.steps[d].id
                ));
            }
        }
        let mut calls = Vec::new();
        for (i, step) in self.steps.iter().enumerate() {
            let depends_on: Vec<String> = self.deps.deps[i]
                .iter()
                .map(|&d| self.steps[d].id.to_string())
                .chain(self.deps.unknown[i].iter().map(|d| d.0.clone()))
                .collect();
            if let Some(why) = &blocked[i] {
                calls.push(PlannedCall {
                    step_id: step.id.to_string(),
                    tool: step.tool_name.to_string(),
                    args: Value::Null,
                    depends_on,
                    expand_on: None,
                    error: None,
                    when: None,
                    not_run: Some(why.clone()),
                });
                continue;
            }
            let planned =
                |step_id: String, resolved: Result<Value, StepError>, expand_on: Option<String>| {
                    let (mut args, mut error) = match resolved {
                        Ok(args) => (args, None),
                        Err(error) => (Value::Null, Some(error)),
                    };
                    redactor.value(&mut args);
                    if let Some(error) = &mut error {
                        redactor.error(error);
                    }
                    PlannedCall {
                        step_id,
                        tool: step.tool_name.to_string(),
                        args,
                        depends_on: depends_on.clone(),
                        expand_on,
                        error,
                        when: step.when.as_ref().map(|c| c.text.clone()),
                        not_run: None,
                    }
                };
            let evaluate = |text: &str, scope: &Scope<'_>| self.expressions.evaluate(text, scope);
            let plain = Scope {
                vars: Some(&vars),
                env: Some(&env_values),
                evaluate: Some(&evaluate),
                ..Scope::default()
            };
            // The step as one call, its items' values standing in (for a map step whose list
            // only a step's result gives, `expand_on` says what it will run over).
            let whole_step = |expand_on: Option<String>| {
                if let Action::Task(task) = &step.action {
                    // Its calls read `${task.*}`, known only as it runs: shown as written.
                    let mut call = planned(step.id.to_string(), Ok(task.written.clone()), None);
                    call.tool = "task".to_owned();
                    return call;
                }
                planned(
                    step.id.to_string(),
                    preview_args(step, plain, &stand_in, &unknown),
                    expand_on,
                )
            };
            let Some(expand) = &step.expand else {
                calls.push(whole_step(None));
                continue;
            };
            match expand_items(expand, &plain) {
                Ok(items) => match item_ids(step, expand, &items, &plain, &redactor) {
                    Ok(ItemNames { ids, keys }) => {
                        for (k, (id, item)) in ids.iter().zip(&items).enumerate() {
                            let values = ItemValues {
                                value: item,
                                index: Value::from(k),
                                key: keys.as_ref().map(|keys| &keys[k]),
                            };
                            let scope = values.scope(plain);
                            let args = preview_args(step, scope, &stand_in, &unknown);
                            calls.push(planned(id.to_string(), args, None));
                        }
                    }
                    Err(error) => calls.push(planned(step.id.to_string(), Err(error), None)),
                },
                Err(_) if self.expand_source_is_pending(expand, &vars) => {
                    calls.push(whole_step(Some(expand.on_text.clone())))
                }
                Err(error) => calls.push(planned(step.id.to_string(), Err(error), None)),
            }
        }
        calls
    }

    /// Every problem compiling `plan` finds, and every argument that breaks its tool's schema
    /// with what is known before the run (see [`Program::check_arguments`]), at once, besides
    /// those `reported` already (validation's): the arguments of steps that compile are
    /// checked even when other steps do not (those are set aside for it). Empty when the plan
    /// compiles and its arguments fit.
    pub fn problems(
        plan: &Plan,
        plan_id: &str,
        registry: &Registry,
        inputs: &Map<String, Value>,
        reported: &[Issue],
    ) -> Vec<Issue> {
        let mut found = Self::all_problems(plan, plan_id, registry, inputs);
        found.retain(|issue| !already_reported(reported, issue));
        found
    }

    fn all_problems(
        plan: &Plan,
        plan_id: &str,
        registry: &Registry,
        inputs: &Map<String, Value>,
    ) -> Vec<Issue> {
        let mut issues = match Program::compile(plan, plan_id, registry) {
            Ok(program) => return program.check_arguments(inputs),
            Err(issues) => issues,
        };
        let broken: std::collections::BTreeSet<usize> = issues.iter().filter_map(step_of).collect();
        let Some(stand_in) = registry.names().into_iter().next() else {
            return issues;
        };
        let mut rest = plan.clone();
        for &i in &broken {
            let step = &mut rest.steps[i];
            // A call of any tool with nothing to resolve: compiles, and its arguments are not
            // reported (its problems are).
            step.tool.clone_from(&stand_in);
            step.args = Arc::default();
            step.binds.clear();
            step.when = None;
            step.expand = None;
            step.block = None;
            step.task = None;
        }
        if let Ok(program) = Program::compile(&rest, plan_id, registry) {
            issues.extend(
                program
                    .check_arguments(inputs)
                    .into_iter()
                    .filter(|issue| step_of(issue).is_none_or(|i| !broken.contains(&i))),
            );
        }
        issues
    }

    /// Arguments that break their tool's schema whatever the run brings, found before it
    /// starts (`validate`, and a warning from `run`): steps' and block nodes' arguments are
    /// resolved with what is known — literals, the plan's variables overlaid with `inputs` —
    /// and a value only the run gives (a step's result, a map item, a block's input or node
    /// results, the environment) is never blamed. Each issue is at the offending argument.
    pub fn check_arguments(&self, inputs: &Map<String, Value>) -> Vec<Issue> {
        let mut vars = self.initial_variables(inputs);
        // A variable a step binds has its value only once that step ran.
        vars.retain(|name, _| !self.binders.contains_key(name));
        let unknown = |_: &Placeholder| Some(crate::schema::UNKNOWN.to_owned());
        let scope = Scope {
            vars: Some(&vars),
            stand_in: Some(&unknown),
            ..Scope::default()
        };
        let mut issues = Vec::new();
        for (i, step) in self.steps.iter().enumerate() {
            let path = PlanPath::step(i);
            step.action
                .check_arguments(&step.view(), &scope, path, &mut issues);
        }
        issues
    }

    fn expand_source_is_pending(
        &self,
        expand: &CompiledExpand,
        vars: &BTreeMap<String, Arc<Value>>,
    ) -> bool {
        match &expand.on {
            ExpandSource::Literal(_) => false,
            ExpandSource::Placeholder(template) => {
                template.as_placeholder().is_some_and(|placeholder| {
                    match &placeholder.root {
                        Root::Var(name) => {
                            !vars.contains_key(name) && self.binders.contains_key(name)
                        }
                        // An expression that could not be had yet reads what a step gives.
                        Root::Expr(_) => true,
                        _ => false,
                    }
                })
            }
        }
    }
}

impl<'a> ItemValues<'a> {
    /// `base` with this item added.
    pub(crate) fn scope(&'a self, base: Scope<'a>) -> Scope<'a> {
        Scope {
            item: Some(Item {
                value: self.value,
                index: &self.index,
                key: self.key,
            }),
            ..base
        }
    }
}

/// A step's arguments as a preview shows them (`shown` standing in for what the run gives),
/// failing as the call would: unresolved, or against its tool's schema where the known
/// values already break it (checked with `unknown` standing in).
fn preview_args(
    step: &CompiledStep,
    scope: Scope<'_>,
    shown: &plan_vars::StandIn<'_>,
    unknown: &plan_vars::StandIn<'_>,
) -> Result<Value, StepError> {
    let unresolved = |error: plan_vars::ResolveError| StepError {
        code: codes::E_ARGS_UNRESOLVED,
        message: error.to_string(),
        details: None,
    };
    let args = step
        .args
        .resolve(&Scope {
            stand_in: Some(shown),
            ..scope
        })
        .map_err(unresolved)?;
    if let Some(schema) = &step.schema {
        let checked = step
            .args
            .resolve(&Scope {
                stand_in: Some(unknown),
                ..scope
            })
            .map_err(unresolved)?;
        let violations = crate::schema::known_violations(schema, &step.args, &checked);
        if !violations.is_empty() {
            let listed = violations.into_iter().map(|v| (v.pointer, v.message));
            return Err(crate::schema::invalid_args(
                &step.tool_name,
                listed.collect(),
            ));
        }
    }
    Ok(args)
}

/// Resolves a step's arguments and checks them against its tool's schema.
pub(crate) fn resolve_args(step: &CompiledStep, scope: &Scope<'_>) -> Result<Value, StepError> {
    resolve_checked(&step.args, scope, step.schema.as_deref(), &step.tool_name)
}

/// The list a map step runs over.
pub(crate) fn expand_items(
    expand: &CompiledExpand,
    scope: &Scope<'_>,
) -> Result<Vec<Value>, StepError> {
    match &expand.on {
        ExpandSource::Literal(items) => Ok(items.clone()),
        ExpandSource::Placeholder(template) => match template.resolve(scope) {
            Ok(Value::Array(items)) => Ok(items),
            Ok(other) => Err(StepError {
                code: codes::E_EXPAND_NOT_LIST,
                message: format!(
                    "`expand_on` `{}` is {}, not a list",
                    expand.on_text,
                    kind(&other)
                ),
                details: None,
            }),
            Err(error) => Err(StepError {
                code: codes::E_ARGS_UNRESOLVED,
                message: error.to_string(),
                details: None,
            }),
        },
    }
}

/// The ids of a map step's items (`ID-N`, or `ID[KEY]` with `expand_key`) and their keys.
/// A key that is not a string or a number, or that two items share, is an error.
pub(crate) fn item_ids(
    step: &CompiledStep,
    expand: &CompiledExpand,
    items: &[Value],
    scope: &Scope<'_>,
    redactor: &Redactor,
) -> Result<ItemNames, StepError> {
    let Some(key_template) = &expand.key else {
        let ids = (0..items.len())
            .map(|k| Arc::from(CallPath::item(step.id.clone(), MapItem::Index(k)).to_string()))
            .collect();
        return Ok(ItemNames { ids, keys: None });
    };
    let mut keys = Vec::with_capacity(items.len());
    let mut seen: HashMap<String, usize> = HashMap::with_capacity(items.len());
    let mut ids = Vec::with_capacity(items.len());
    for (k, item) in items.iter().enumerate() {
        let values = ItemValues {
            value: item,
            index: Value::from(k),
            key: None,
        };
        let key = key_template
            .resolve(&values.scope(*scope))
            .map_err(|error| StepError {
                code: codes::E_ARGS_UNRESOLVED,
                message: format!("`expand_key` for item {k}: {error}"),
                details: None,
            })?;
        // An item's id is shown everywhere (records, events, the ledger, status): it is made
        // without secrets. Two keys that differ only in a secret then collide, and say so.
        let text = match &key {
            Value::String(text) => redactor.redacted(text),
            Value::Number(n) => n.to_string(),
            other => {
                return Err(StepError {
                    code: codes::E_EXPAND_KEY,
                    message: format!(
                        "`expand_key` must give a string or a number; for item {k} it gives {}",
                        kind(other)
                    ),
                    details: None,
                });
            }
        };
        if let Some(first) = seen.insert(text.clone(), k) {
            return Err(StepError {
                code: codes::E_EXPAND_DUPLICATE_KEY,
                message: format!(
                    "`expand_key` gives `{text}` for items {first} and {k}; keys must be unique"
                ),
                details: None,
            });
        }
        ids.push(Arc::from(
            CallPath::item(step.id.clone(), MapItem::Key(text.clone())).to_string(),
        ));
        keys.push(Value::String(text));
    }
    Ok(ItemNames {
        ids,
        keys: Some(keys),
    })
}

/// Whether validation already reported what compiling found as `issue`: the same issue, or
/// an error at the very same place (a `when` that does not parse is reported by both), or
/// one inside the place that says what it says (a block's or a task's problem, which
/// compiling names at the block or the task: `node `n`: unknown tool `x``), or the
/// "unknown tool ``" of a step whose tool validation found missing.
fn already_reported(reported: &[Issue], issue: &Issue) -> bool {
    use plan_graph::Location;
    let same_place = |known: &Issue| known.is_error() && known.location == issue.location;
    let inside = |known: &Issue| match (&known.location, &issue.location) {
        (Location::Path { path: inner, .. }, Location::Path { path: outer, .. }) => {
            known.is_error()
                && inner.0.starts_with(&outer.0)
                && issue.message.ends_with(&format!(": {}", known.message))
        }
        _ => false,
    };
    let no_tool = issue.code == "plan::unknown_tool" && issue.message == "unknown tool ``";
    reported
        .iter()
        .any(|known| known == issue || same_place(known) || inside(known))
        || no_tool
}

/// The step an issue is about, when it is located in one (`steps[3]…`).
fn step_of(issue: &Issue) -> Option<usize> {
    use plan_graph::{Location, PathSegment};
    let Location::Path { path, .. } = &issue.location else {
        return None;
    };
    match path.0.as_slice() {
        [PathSegment::Key(steps), PathSegment::Index(i), ..] if steps == "steps" => Some(*i),
        _ => None,
    }
}

/// A map step's item ids, and their keys when it has `expand_key`.
pub(crate) struct ItemNames {
    pub(crate) ids: Vec<Arc<str>>,
    pub(crate) keys: Option<Vec<Value>>,
}

fn compile_expand(expand: &plan_graph::Expand) -> Result<CompiledExpand, String> {
    let (on, on_text) = match &expand.on {
        Value::Array(items) => (
            ExpandSource::Literal(items.clone()),
            Value::Array(items.clone()).to_string(),
        ),
        Value::String(text) => (
            ExpandSource::Placeholder(
                Template::parse(text)
                    .map_err(|e| format!("malformed placeholder in `expand_on`: {e}"))?,
            ),
            text.clone(),
        ),
        _ => return Err("`expand_on` must be a placeholder naming a list, or a list".to_owned()),
    };
    let key = match &expand.key {
        Some(text) => Some(
            Template::parse(text)
                .map_err(|e| format!("malformed placeholder in `expand_key`: {e}"))?,
        ),
        None => None,
    };
    Ok(CompiledExpand { on, on_text, key })
}

/// A part of the workspace compiled, or `None` with an issue at `workspace.KEY`.
fn workspace_part<T>(
    issues: &mut Vec<Issue>,
    key: &str,
    compiled: Result<Option<T>, String>,
) -> Option<T> {
    compiled.unwrap_or_else(|message| {
        let at = PlanPath::root().key("workspace").key(key);
        issues.push(Issue::error("plan::task", at, message));
        None
    })
}

impl Program {
    /// Every call this program can make, in plan order: each step's (a map step's once, for
    /// all its items), each block node's, each task's `implement`, `feedback` and `verify`
    /// checks, and the workspace's `context_update`. A policy is checked against this list,
    /// never against the steps' tool names alone.
    pub fn call_sites(&self) -> Vec<crate::sites::CallSite> {
        let mut sites = crate::sites::Sites { sites: Vec::new() };
        for (i, step) in self.steps.iter().enumerate() {
            let at = PlanPath::step(i);
            step.action.call_sites(&step.view(), at, &mut sites);
        }
        if let Some(update) = &self.context_update {
            let at = PlanPath::root().key("workspace").key("context_update");
            update.call_sites(at, &mut sites);
        }
        if let Some(checks) = &self.merge_checks {
            let at = PlanPath::root().key("workspace").key("verify_after_merge");
            checks.call_sites(at, &mut sites);
        }
        sites.sites
    }
}

/// Where in the plan a step is compiled, and where its issues go.
struct Site<'p, 'i> {
    plan: &'p Plan,
    i: usize,
    registry: &'p Registry,
    issues: &'i mut Vec<Issue>,
}

/// The schema a tool's arguments are checked against, and its risk, worked out once per tool.
type ToolFacts<'p> = HashMap<&'p str, (Risk, Option<Arc<jsonschema::Validator>>)>;

/// What step `site.i` does (a tool's call, a block, a task), its tool's argument schema and
/// the risk it has unless it says; `None` (the issue said) when it cannot be compiled.
fn compile_action<'p>(
    site: Site<'p, '_>,
    step_retry: &RetryPolicy,
    merge_checks: &Option<Arc<crate::task::MergeChecks>>,
    facts: &mut ToolFacts<'p>,
    names: &[String],
) -> Option<(Action, Option<Arc<jsonschema::Validator>>, Risk)> {
    let Site {
        plan, i, registry, ..
    } = site;
    let step = &plan.steps[i];
    let task = step.task.as_ref().map(|task| {
        let settings = plan.workspace.as_ref().map_or(
            TaskSettings {
                max_attempts: plan_graph::DEFAULT_MAX_ATTEMPTS,
                on_conflict: plan_graph::OnConflict::Retry,
                commit_prefix: String::new(),
                no_commits: false,
                after_merge: None,
            },
            |workspace| TaskSettings::of(workspace, merge_checks.clone()),
        );
        compile_task(
            &step.id.0,
            step.title.as_deref(),
            step.layer.as_deref(),
            task,
            settings,
            registry,
        )
    });
    match (&step.block, task) {
        // Its calls are admitted one by one as it makes them.
        (_, Some(Ok(task))) => Some((Action::Task(Arc::new(task)), None, Risk::Low)),
        (_, Some(Err(message))) => {
            site.issues.push(Issue::error(
                "plan::task",
                PlanPath::step(i).key("task"),
                message,
            ));
            None
        }
        (Some(block), None) => match compile_block(block, registry, step_retry, None) {
            // Its nodes wait for their own approvals, each when the block reaches it.
            Ok(block) => Some((Action::Block(Arc::new(block)), None, Risk::Low)),
            Err(message) => {
                site.issues.push(Issue::error(
                    "plan::block",
                    PlanPath::step(i).key("block"),
                    message,
                ));
                None
            }
        },
        (None, None) => match registry.get(&step.tool) {
            Some(tool) => {
                let (risk, schema) = facts.entry(step.tool.as_str()).or_insert_with(|| {
                    let info = tool.info();
                    let schema = match compile_schema(&info.input_schema) {
                        Ok(schema) => schema,
                        Err(message) => {
                            // Said once: where the plan declares the tool, else at
                            // the first step that calls it.
                            let declared = plan.tools.iter().position(|t| t.name == step.tool);
                            let (path, message) = match declared {
                                Some(k) => (
                                    PlanPath::root().key("tools").index(k).key("input_schema"),
                                    format!("the declared tool's `input_schema` is not a JSON Schema: {message}"),
                                ),
                                None => (
                                    PlanPath::step(i).key("tool"),
                                    format!("tool `{}` publishes an input schema that does not compile: {message}", step.tool),
                                ),
                            };
                            site.issues.push(Issue::error("plan::tool_schema", path, message));
                            None
                        }
                    };
                    (info.risk, schema)
                });
                Some((Action::Tool(tool.clone()), schema.clone(), *risk))
            }
            None => {
                site.issues.push(unknown_tool(i, &step.tool, names));
                None
            }
        },
    }
}

/// Step `site.i`'s binds, each a selector or a data expression (compiled into `expressions`);
/// `binders` keeps the first step that binds each name.
fn compile_binds(
    site: Site<'_, '_>,
    expressions: &mut crate::expression::Expressions,
    binders: &mut BTreeMap<String, Arc<str>>,
) -> Vec<(String, Bind)> {
    let step = &site.plan.steps[site.i];
    let i = site.i;
    let mut binds = Vec::with_capacity(step.binds.len());
    for (name, selector) in &step.binds {
        match plan_vars::whole_expression(selector) {
            Some(text) => match expressions.add(&text, &Place::BIND) {
                Ok(()) => binds.push((name.clone(), Bind::Expression(text))),
                Err(error) => site.issues.push(Issue::error(
                    "plan::bind_selector",
                    PlanPath::step(i).key("binds").key(name),
                    format!("bind `{name}`: `{selector}` is not a valid expression: {error}"),
                )),
            },
            None => match selector.parse::<Selector>() {
                Ok(selector) => binds.push((name.clone(), Bind::Select(selector))),
                Err(error) => site.issues.push(Issue::error(
                    "plan::bind_selector",
                    PlanPath::step(i).key("binds").key(name),
                    format!("bad bind selector `{selector}`: {error}"),
                )),
            },
        }
        binders
            .entry(name.clone())
            .or_insert_with(|| Arc::from(step.id.0.as_str()));
    }
    binds
}

/// Step `site.i`'s `when` condition, compiled; `Err` (the issue said) when it is not valid.
fn compile_when(site: Site<'_, '_>) -> Result<Option<Condition>, ()> {
    let step = &site.plan.steps[site.i];
    let i = site.i;
    let when = match &step.when {
        None => None,
        Some(text) => match plan_graph::compile_condition(text)
            .map_err(|error| error.to_string())
            .and_then(|program| {
                check_references(&program, &Place::WHEN)?;
                Ok(program)
            }) {
            Ok(program) => Some(Condition {
                program,
                text: text.clone(),
            }),
            Err(error) => {
                site.issues.push(Issue::error(
                    "plan::condition",
                    PlanPath::step(i).key("when"),
                    format!("`when` is not a valid CEL expression: {error}"),
                ));
                return Err(());
            }
        },
    };
    Ok(when)
}

/// Compiles the data expressions (`${{ EXPR }}`) of step `site.i`'s arguments, `expand_on`
/// and `expand_key` into `expressions`, each checked against what its place gives.
fn check_expressions(
    site: Site<'_, '_>,
    args: &ValueTemplate,
    expand: Option<&CompiledExpand>,
    expressions: &mut crate::expression::Expressions,
) {
    let i = site.i;
    // The data expressions in its arguments, `expand_on` and `expand_key`, compiled
    // once, each checked against what its place gives (a map step's arguments and
    // key read the item).
    let in_args = if expand.is_some() {
        &Place::ITEM
    } else {
        &Place::DATA
    };
    let mut written: Vec<(&str, &Place<'_>, &Placeholder)> = args
        .placeholders()
        .into_iter()
        .map(|p| ("args", in_args, p))
        .collect();
    if let Some(expand) = &expand {
        if let ExpandSource::Placeholder(template) = &expand.on {
            written.extend(
                template
                    .placeholders()
                    .map(|p| ("expand_on", &Place::DATA, p)),
            );
        }
        if let Some(key) = &expand.key {
            written.extend(key.placeholders().map(|p| ("expand_key", &Place::ITEM, p)));
        }
    }
    for (field, place, placeholder) in written {
        if let Root::Expr(text) = &placeholder.root
            && let Err(message) = expressions.add(text, place)
        {
            site.issues.push(Issue::error(
                "plan::expression",
                PlanPath::step(i).key(field),
                format!("`{placeholder}` is not a valid expression: {message}"),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use plan_ports::{Tool, ToolContext, ToolError, ToolInfo};

    /// A program holds one per step: what few steps have (a map, a condition) is boxed.
    #[test]
    fn compiled_steps_stay_small() {
        let size = std::mem::size_of::<CompiledStep>();
        assert!(size <= 192, "{size}");
    }

    /// Publishes a schema that does not compile, and counts how often it is asked.
    struct Broken(std::sync::atomic::AtomicUsize);

    #[async_trait::async_trait]
    impl Tool for Broken {
        fn info(&self) -> ToolInfo {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            ToolInfo {
                name: "broken".into(),
                description: String::new(),
                source: "test".into(),
                input_schema: serde_json::json!({"type": "no such type"}),
                risk: Risk::High,
            }
        }

        async fn call(&self, args: Value, _ctx: ToolContext) -> Result<Value, ToolError> {
            Ok(args)
        }
    }

    #[test]
    fn a_tool_is_asked_once_and_its_broken_schema_reported_once() {
        let text = r#"{"steps": [
            {"id": "a", "tool": "broken", "args": {}},
            {"id": "b", "tool": "broken", "args": {}},
            {"id": "c", "tool": "broken", "args": {}}
        ]}"#;
        let loaded = plan_graph::load(
            plan_graph::Source::new("plan.json", text),
            plan_graph::Format::Json,
            &plan_graph::LoadOptions::default(),
        )
        .expect("the plan loads");
        let broken = Arc::new(Broken(std::sync::atomic::AtomicUsize::new(0)));
        let mut registry = Registry::new();
        registry.register_as("broken", broken.clone());
        let issues = Program::compile(&loaded.plan, "plan", &registry)
            .err()
            .expect("the schema does not compile");
        let codes: Vec<&str> = issues.iter().map(|issue| issue.code).collect();
        assert_eq!(codes, ["plan::tool_schema"], "{issues:#?}");
        assert!(issues[0].message.contains("tool `broken`"), "{issues:#?}");
        assert_eq!(broken.0.load(std::sync::atomic::Ordering::Relaxed), 1);
    }
}
