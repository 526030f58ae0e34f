//! A plan bound to tools: every tool looked up, every template parsed, once per plan.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use plan_graph::{Dependencies, Issue, Plan, PlanPath, RetryPolicy, unknown_tool};
use plan_vars::{Scope, Selector, ValueTemplate};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::tool::{Registry, Tool};

/// Most steps running at once when neither the plan nor the caller says.
pub const DEFAULT_MAX_CONCURRENCY: usize = 4;

pub(crate) struct CompiledStep {
    pub(crate) id: Arc<str>,
    pub(crate) tool_name: Arc<str>,
    pub(crate) tool: Arc<dyn Tool>,
    pub(crate) args: ValueTemplate,
    pub(crate) binds: Vec<(String, Selector)>,
    pub(crate) retry: RetryPolicy,
    pub(crate) timeout: Option<Duration>,
}

/// A validated plan ready to run: tools resolved, placeholders and selectors parsed.
pub struct Program {
    pub(crate) plan_id: Arc<str>,
    pub(crate) steps: Vec<CompiledStep>,
    pub(crate) deps: Dependencies,
    pub(crate) variables: Map<String, Value>,
    pub(crate) max_concurrency: Option<usize>,
}

/// One call a preview shows: what would be called, with what.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlannedCall {
    /// The step.
    pub step_id: String,
    /// The tool.
    pub tool: String,
    /// The arguments, resolved as far as the inputs allow; what only a step's result could
    /// give is left as its placeholder text.
    pub args: Value,
    /// The step's dependencies.
    pub depends_on: Vec<String>,
}

impl Program {
    /// Binds a loaded plan to the registry's tools. Every unknown tool is an [`Issue`] at the
    /// step's `tool`, with the closest known name as help.
    pub fn compile(plan: &Plan, plan_id: &str, registry: &Registry) -> Result<Program, Vec<Issue>> {
        let mut issues = Vec::new();
        let mut steps = Vec::with_capacity(plan.steps.len());
        let names = registry.names();
        let default_retry = plan.retry.clone().unwrap_or_default();
        for (i, step) in plan.steps.iter().enumerate() {
            let Some(tool) = registry.get(&step.tool) else {
                issues.push(unknown_tool(i, &step.tool, &names));
                continue;
            };
            let args = match ValueTemplate::compile(&Value::Object(step.args.clone())) {
                Ok(args) => args,
                Err(error) => {
                    issues.push(Issue::error(
                        "plan::placeholder",
                        PlanPath::step(i).key("args"),
                        format!("malformed placeholder: {error}"),
                    ));
                    continue;
                }
            };
            let mut binds = Vec::with_capacity(step.binds.len());
            for (name, selector) in &step.binds {
                match selector.parse::<Selector>() {
                    Ok(selector) => binds.push((name.clone(), selector)),
                    Err(error) => issues.push(Issue::error(
                        "plan::bind_selector",
                        PlanPath::step(i).key("binds").key(name),
                        format!("bad bind selector `{selector}`: {error}"),
                    )),
                }
            }
            steps.push(CompiledStep {
                id: Arc::from(step.id.0.as_str()),
                tool_name: Arc::from(step.tool.as_str()),
                tool: tool.clone(),
                args,
                binds,
                retry: step.retry.clone().unwrap_or_else(|| default_retry.clone()),
                timeout: step
                    .timeout_ms
                    .or(plan.timeout_ms)
                    .map(Duration::from_millis),
            });
        }
        if !issues.is_empty() {
            return Err(issues);
        }
        Ok(Program {
            plan_id: Arc::from(plan_id),
            steps,
            deps: Dependencies::new(plan),
            variables: plan.variables.clone(),
            max_concurrency: plan.max_concurrency,
        })
    }

    /// The plan's id.
    pub fn plan_id(&self) -> &str {
        &self.plan_id
    }

    /// How many steps the plan has.
    pub fn len(&self) -> usize {
        self.steps.len()
    }

    /// True for a plan without steps.
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// The plan's variables overlaid with `inputs` (inputs win).
    pub(crate) fn initial_variables(&self, inputs: &Map<String, Value>) -> BTreeMap<String, Value> {
        let mut vars: BTreeMap<String, Value> = self
            .variables
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        vars.extend(inputs.iter().map(|(k, v)| (k.clone(), v.clone())));
        vars
    }

    /// What a run would call, in plan order, without calling anything (`--dry-run`).
    pub fn preview(&self, inputs: &Map<String, Value>) -> Vec<PlannedCall> {
        let vars = self.initial_variables(inputs);
        let scope = Scope {
            keep_unresolved: true,
            ..Scope::with_vars(&vars)
        };
        self.steps
            .iter()
            .enumerate()
            .map(|(i, step)| PlannedCall {
                step_id: step.id.to_string(),
                tool: step.tool_name.to_string(),
                args: step.args.resolve(&scope).unwrap_or(Value::Null),
                depends_on: self.deps.deps[i]
                    .iter()
                    .map(|&d| self.steps[d].id.to_string())
                    .chain(self.deps.unknown[i].iter().map(|d| d.0.clone()))
                    .collect(),
            })
            .collect()
    }
}
