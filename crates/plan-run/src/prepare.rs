//! From a plan's text to a [`Prepared`] plan: loaded, validated, bound to the tools it names
//! (starting only the MCP servers it needs) and compiled, with the run's inputs typed by the
//! plan's defaults. Every front-end prepares plans here: `run`, `validate`, `mcp serve`, and
//! the check of a model's plan.

use std::collections::BTreeSet;

use plan_engine::Program;
use plan_graph::{Format, Issue, LoadOptions, Severity, Source, load};
use serde_json::{Map, Value};

use crate::toolbox::{Toolbox, ToolsError};
use crate::{Author, Policy, PolicyError, Prepared};

/// Why a plan could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    /// The plan does not load or compile: every problem found, with the source they point
    /// into (warnings included).
    #[error("{} is not a valid plan ({} error{})", .0.source.name(), .0.errors(), if .0.errors() == 1 { "" } else { "s" })]
    Invalid(Box<Problems>),
    /// Its tools could not be found.
    #[error(transparent)]
    Tools(#[from] ToolsError),
    /// A variable given as text must be JSON (the plan's default for it is not a string), and
    /// is not.
    #[error(
        "the plan's default for `{name}` is {kind} ({default}), so the value is read as JSON, and `{text}` is not JSON"
    )]
    NotJson {
        /// The variable.
        name: String,
        /// The text given.
        text: String,
        /// The kind of the plan's default (`a number`, `a list`, …).
        kind: &'static str,
        /// The plan's default, as JSON.
        default: String,
    },
}

/// The problems of a plan that does not prepare, with its source.
#[derive(Debug)]
pub struct Problems {
    /// The plan's text, which the issues point into.
    pub source: Source,
    /// Every problem found, errors and warnings.
    pub issues: Vec<Issue>,
}

impl Problems {
    /// How many of the issues are errors.
    pub fn errors(&self) -> usize {
        self.issues.iter().filter(|issue| issue.is_error()).count()
    }
}

/// The variables a run is given, before the plan says how text values are read.
#[derive(Debug, Default, Clone)]
pub struct Inputs {
    /// Typed values (a variables file, JSON given on a command line, a stored run's, an MCP
    /// client's).
    pub typed: Map<String, Value>,
    /// Values given as text (`NAME=TEXT`): a string, unless the plan's default for NAME is a
    /// number, a boolean, a list or an object; then TEXT is read as JSON.
    pub text: Vec<(String, String)>,
    /// Whether names the plan neither defines nor reads are looked for
    /// ([`Prepared::unused_inputs`]): for inputs a person typed, not for a stored run's.
    pub check_names: bool,
}

impl From<Map<String, Value>> for Inputs {
    fn from(typed: Map<String, Value>) -> Self {
        Inputs {
            typed,
            text: Vec::new(),
            check_names: false,
        }
    }
}

/// A variable given that the plan neither defines nor reads (a typo would otherwise go
/// unnoticed until a step reads the default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnusedInput {
    /// The name given.
    pub name: String,
    /// The plan's name closest to it, if one is close.
    pub near: Option<String>,
}

impl Inputs {
    fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.typed.keys().cloned().collect();
        names.extend(self.text.iter().map(|(name, _)| name.clone()));
        names
    }

    /// The names given that `plan` neither defines nor reads.
    fn unused(&self, plan: &plan_graph::Plan) -> Vec<UnusedInput> {
        // Reading every step's placeholders is only worth it when names were given.
        if !self.check_names || (self.typed.is_empty() && self.text.is_empty()) {
            return Vec::new();
        }
        let mut known: Vec<String> = plan.variables.keys().cloned().collect();
        known.extend(plan_graph::variables_read(plan));
        self.names()
            .into_iter()
            .filter(|name| !known.contains(name))
            .map(|name| UnusedInput {
                near: plan_graph::closest(&name, &known).map(str::to_owned),
                name,
            })
            .collect()
    }

    /// The values, typed by the plan's defaults.
    fn resolve(self, plan: &plan_graph::Plan) -> Result<Map<String, Value>, PrepareError> {
        let Inputs {
            mut typed, text, ..
        } = self;
        for (name, text) in text {
            let value = match plan.variables.get(&name) {
                Some(default) if !default.is_string() && !default.is_null() => {
                    serde_json::from_str(&text).map_err(|_| PrepareError::NotJson {
                        kind: plan_vars::kind(default),
                        default: default.to_string(),
                        name: name.clone(),
                        text: text.clone(),
                    })?
                }
                _ => Value::String(text),
            };
            typed.insert(name, value);
        }
        Ok(typed)
    }
}

/// How strictly a plan is prepared.
#[derive(Debug, Clone, Copy)]
pub struct Strictness {
    /// What arguments that break their tool's schema before the run are (see
    /// `Program::check_arguments`): errors to validate a plan or start a run of it, warnings
    /// where a run is to go on (each such call then fails with `E_ARGS_INVALID`).
    pub arguments: Severity,
}

impl Strictness {
    /// A plan whose run goes on (`resume` of a stored run, whose tools may have changed since
    /// it started): arguments that break their schemas are warnings.
    pub const RUN: Strictness = Strictness {
        arguments: Severity::Warning,
    };
    /// A plan that is validated, or whose run starts: every problem is an error.
    pub const VALIDATE: Strictness = Strictness {
        arguments: Severity::Error,
    };
}

/// A plan's text to prepare: where it came from (its name and text), its format, and the id
/// it has when it names none.
#[derive(Debug, Clone)]
pub struct PlanText {
    /// Its name (a file's, `<stdin>`) and text.
    pub source: Source,
    /// JSON or YAML.
    pub format: Format,
    /// Its id when it names none.
    pub fallback_id: String,
}

impl PlanText {
    /// JSON `text` called `name`, whose id is `fallback_id` unless it names one.
    pub fn json(name: &str, text: impl Into<String>, fallback_id: &str) -> PlanText {
        PlanText {
            source: Source::new(name, text),
            format: Format::Json,
            fallback_id: fallback_id.to_owned(),
        }
    }
}

/// Loads, validates and compiles `plan`, with the tools of `toolbox` it names and `inputs`.
/// `env` gives the values of the environment variables the plan lists under `env:` (the
/// library reads no environment itself).
pub async fn prepare(
    plan: PlanText,
    inputs: Inputs,
    toolbox: &Toolbox,
    strictness: Strictness,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Prepared, PrepareError> {
    let PlanText {
        source,
        format,
        fallback_id,
    } = plan;
    let fallback_id = fallback_id.as_str();
    let provided_variables = inputs.names();
    // With MCP servers configured, a first reading finds the tools the plan names, so that
    // only their servers start. If it fails, the full reading below reports why, without
    // checking tools.
    let first = toolbox.has_servers().then(|| {
        let options = LoadOptions {
            provided_variables: provided_variables.clone(),
            ..LoadOptions::default()
        };
        load(source.clone(), format, &options).ok()
    });
    let (mut tools, check_tools) = match &first {
        None => (toolbox.for_plan([]).await?, true),
        Some(Some(loaded)) => (
            toolbox
                .for_plan(crate::toolbox::undeclared(&loaded.plan))
                .await?,
            true,
        ),
        Some(None) => (toolbox.for_plan([]).await?, false),
    };
    let registry = &tools.registry;
    let options = LoadOptions {
        provided_variables,
        known_tools: check_tools.then(|| registry.names()),
        ambiguous_tools: tools.ambiguous.clone(),
        ..LoadOptions::default()
    };
    let mut loaded = match load(source, format, &options) {
        Ok(loaded) => loaded,
        Err(invalid) => {
            let mut issues = invalid.issues;
            // Every problem at once: what compiling the plan finds (expressions, blocks,
            // tasks) and the arguments that break their tools' schemas are reported with
            // what validation found, not in later rounds.
            if let Some(plan) = &invalid.plan {
                let id = plan.id.clone().unwrap_or_else(|| fallback_id.to_owned());
                let inputs = inputs.resolve(plan).unwrap_or_default();
                // Its declared tools count (a name it cannot declare is an issue already).
                let _ = toolbox.declare(&mut tools, plan);
                let fresh = Program::problems(plan, &id, &tools.registry, &inputs, &issues);
                issues.extend(fresh);
            }
            return Err(PrepareError::Invalid(Box::new(Problems {
                source: invalid.plan_source,
                issues,
            })));
        }
    };
    toolbox.check_declared(&loaded.plan).await?;
    toolbox.declare(&mut tools, &loaded.plan)?;
    let registry = &tools.registry;
    let unused_inputs = inputs.unused(&loaded.plan);
    let inputs = inputs.resolve(&loaded.plan)?;
    let id = loaded
        .plan
        .id
        .clone()
        .unwrap_or_else(|| fallback_id.to_owned());
    let compiled = Program::compile(&loaded.plan, &id, registry).and_then(|program| {
        // Arguments that break their tool's schema with what is known before the run.
        let mut problems = program.check_arguments(&inputs);
        match strictness.arguments {
            Severity::Error if !problems.is_empty() => Err(problems),
            _ => {
                for problem in &mut problems {
                    problem.severity = Severity::Warning;
                }
                loaded.warnings.extend(problems);
                Ok(program)
            }
        }
    });
    match compiled {
        Ok(program) => {
            // Only the variables the plan lists are read, and only here.
            let env = program
                .env_names()
                .iter()
                .filter_map(|name| env(name).map(|value| (name.clone(), value)))
                .collect();
            // The program holds its own copy of the variables; the plan's is not needed again
            // (a large list would otherwise be held twice for the whole run).
            loaded.plan.variables = Map::new();
            Ok(Prepared {
                loaded,
                program,
                format,
                inputs,
                env,
                unused_inputs,
            })
        }
        Err(issues) => {
            let mut all = loaded.warnings.clone();
            all.extend(issues);
            Err(PrepareError::Invalid(Box::new(Problems {
                source: loaded.source,
                issues: all,
            })))
        }
    }
}

/// The part of a prepared plan that `layer` and `task` select ([`Prepared::select`]), its
/// tools found in `toolbox` as the whole plan's were.
pub async fn select(
    prepared: Prepared,
    layer: Option<&str>,
    task: Option<&str>,
    toolbox: &Toolbox,
) -> Result<Prepared, crate::LifecycleError> {
    if layer.is_none() && task.is_none() {
        return Ok(prepared);
    }
    let tools = toolbox
        .for_plan_of(&prepared.loaded.plan)
        .await
        .map_err(|error| crate::LifecycleError::Prepare(Box::new(error.into())))?;
    prepared.select(layer, task, &tools.registry)
}

/// plan-cli's whole judgement of a model's plan: its validation, as a `validate` gives it,
/// and then `policy`'s judgement of every call it can make (of the steps in `only`, for a
/// re-plan's new steps). A plan of no steps is refused too. `Err` holds the problems as a
/// model can act on them ([`for_model`]): each at its path, grouped by step, the tools it may
/// call (`tools`) named where it named another. Nothing in them tells the model how to widen
/// its policy (no "add `env:`" for a variable it may not read).
pub async fn check_for_model(
    plan: &Value,
    fallback_id: &str,
    toolbox: &Toolbox,
    policy: &Policy,
    only: Option<&BTreeSet<String>>,
    tools: &[plan_llm::ToolDescription],
) -> Result<(), String> {
    let text = plan.to_string();
    let source = Source::new("the plan", text.clone());
    let refused = |error: PolicyError| {
        let found: Vec<Found> = (error.violations.iter())
            .map(|v| Found {
                path: Some(v.path.clone()),
                message: v.message.clone(),
                label: None,
                help: None,
                names_a_tool: false,
            })
            .collect();
        for_model(plan, &found, tools, only.is_none())
    };
    policy
        .check_size(Author::Model, text.len())
        .map_err(refused)?;
    // Before the plan is validated, whose cost grows faster than its steps.
    let steps = plan["steps"].as_array().map_or(0, Vec::len);
    if let Some(violation) = policy.too_many_steps(steps) {
        let found = Found {
            path: Some(violation.path),
            message: violation.message,
            label: None,
            help: None,
            names_a_tool: false,
        };
        return Err(for_model(plan, &[found], tools, only.is_none()));
    }
    if plan["steps"].as_array().is_none_or(Vec::is_empty) && only.is_none() {
        return Err(for_model(
            plan,
            &[Found {
                path: Some(plan_graph::PlanPath::root().key("steps")),
                message: "the plan has no steps".to_owned(),
                label: None,
                help: Some(
                    "write the steps that do the goal, each a call of one of the tools".to_owned(),
                ),
                names_a_tool: true,
            }],
            tools,
            true,
        ));
    }
    let prepared = prepare(
        PlanText::json(source.name(), text, fallback_id),
        Inputs::default(),
        toolbox,
        Strictness::VALIDATE,
        // A model's plan is judged, not run: no value is read.
        &|_| None,
    )
    .await;
    let problems = match prepared {
        Ok(prepared) => {
            // What is a warning in a person's plan (an unknown dependency, a variable nothing
            // binds: the run ends BLOCKED or the call cannot be made) is a mistake in a
            // model's: it goes back.
            let mistakes: Vec<Found> = (prepared.loaded.warnings.iter())
                .filter(|issue| MODEL_MISTAKES.contains(&issue.code))
                .map(|issue| found_of(issue, &prepared.loaded.source, policy))
                .collect();
            if !mistakes.is_empty() {
                return Err(for_model(plan, &mistakes, tools, only.is_none()));
            }
            let judged = match only {
                None => policy.check(Author::Model, &prepared.loaded.plan, &prepared.program),
                Some(steps) => policy.check_steps(
                    Author::Model,
                    &prepared.loaded.plan,
                    &prepared.program,
                    steps,
                ),
            };
            return judged.map_err(refused);
        }
        Err(PrepareError::Invalid(problems)) => problems,
        Err(other) => return Err(format!("- {other}")),
    };
    let found: Vec<Found> = (problems.issues.iter())
        .filter(|issue| issue.is_error() || MODEL_MISTAKES.contains(&issue.code))
        .map(|issue| found_of(issue, &problems.source, policy))
        .collect();
    Err(for_model(plan, &found, tools, only.is_none()))
}

/// The warnings that are mistakes in a model's plan.
const MODEL_MISTAKES: [&str; 2] = ["plan::unknown_dependency", "plan::undefined_variable"];

/// An issue of a model's plan, as [`for_model`] words it.
fn found_of(issue: &Issue, source: &Source, policy: &Policy) -> Found {
    Found {
        path: source.path_of(&issue.location),
        message: issue.message.clone(),
        label: Some(issue.label.clone())
            .filter(|label| label != "here" && !issue.message.contains(label.as_str())),
        help: issue
            .help
            .clone()
            .filter(|help| policy.is_operator() || !help.starts_with("add `env:")),
        names_a_tool: matches!(issue.code, "plan::unknown_tool" | "plan::missing_tool"),
    }
}

/// A problem with a model's plan, as [`for_model`] words it.
struct Found {
    path: Option<plan_graph::PlanPath>,
    message: String,
    /// What the place is, where it says more than "here" (`no tool has this name`).
    label: Option<String>,
    help: Option<String>,
    /// Whether the model should hear which tools there are.
    names_a_tool: bool,
}

/// Problems as a model can act on them: the plan's own first (at their paths, `env[0]`), then
/// each step's under the step (`- step `fetch` (steps[1]):`, without the position when it is
/// not the model's: `numbered` false for a re-plan, whose steps follow the ones that ran), each
/// line with its path in the step (`args.url`), message, label and help; after them the tools
/// and their required arguments when a problem is about a tool's name. Nothing names a file:
/// the model saw none.
fn for_model(
    plan: &Value,
    found: &[Found],
    tools: &[plan_llm::ToolDescription],
    numbered: bool,
) -> String {
    use plan_graph::{PathSegment, PlanPath};
    let mut own = Vec::new();
    let mut by_step: std::collections::BTreeMap<usize, Vec<String>> = Default::default();
    for problem in found {
        let segments = problem.path.as_ref().map_or(&[][..], |p| p.0.as_slice());
        let (step, within) = match segments {
            [PathSegment::Key(steps), PathSegment::Index(i), rest @ ..] if steps == "steps" => {
                (Some(*i), PlanPath(rest.to_vec()))
            }
            _ => (None, PlanPath(segments.to_vec())),
        };
        let mut line = if within.0.is_empty() {
            problem.message.clone()
        } else {
            format!("{within}: {}", problem.message)
        };
        if let Some(label) = &problem.label {
            line.push_str(&format!(": {label}"));
        }
        if let Some(help) = &problem.help {
            line.push_str(&format!(" ({help})"));
        }
        match step {
            Some(i) => by_step.entry(i).or_default().push(line),
            None => own.push(line),
        }
    }
    let mut text = String::new();
    for line in own {
        text.push_str(&format!("- {line}\n"));
    }
    for (i, lines) in by_step {
        let id = written_id(&plan["steps"][i]).map_or_else(String::new, |id| format!(" `{id}`"));
        let at = if numbered {
            format!(" (steps[{i}])")
        } else {
            String::new()
        };
        text.push_str(&format!("- step{id}{at}:\n"));
        for line in lines {
            text.push_str(&format!("  - {line}\n"));
        }
    }
    if found.iter().any(|f| f.names_a_tool) {
        text.push_str("The tools you may use (a step's `tool`), with their required arguments:\n");
        for tool in tools {
            text.push_str(&format!(
                "- {} (required: {})\n",
                tool.name,
                tool.required()
            ));
        }
    }
    text.trim_end().to_owned()
}

/// A step's id as a plan writes it (`id`, `index` or `step_id`; a number as its digits).
pub(crate) fn written_id(step: &Value) -> Option<String> {
    ["id", "index", "step_id"]
        .iter()
        .find_map(|key| step.get(*key).filter(|id| !id.is_null()))
        .map(|id| id.as_str().map_or_else(|| id.to_string(), str::to_owned))
}
