//! Reading a plan (a file, stdin, or a stored plan), and reporting its problems as
//! diagnostics.

use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};

use plan_engine::Program;
use plan_graph::{Format, Issue, LoadOptions, Severity, Source, load, load_variables};
use serde_json::{Map, Value};

use crate::cli::PlanArgs;
use crate::exit::Failure;
use crate::ledger::Ledger;
use crate::toolbox::Toolbox;

/// A plan that loaded and bound to the registry's tools, with the run's inputs.
pub(crate) type Ready = plan_run::Prepared;

/// Who wrote the plan `run PLAN` would run: the author kept with a stored plan (a model's,
/// an MCP client's), the operator for a file or stdin.
pub(crate) fn author_of(
    args: &crate::cli::PlanArgs,
    ledger: &Ledger,
) -> Result<plan_run::Author, Failure> {
    let path = &args.plan;
    if !args.stored_only && (path == Path::new("-") || path.exists()) {
        return Ok(plan_run::Author::Operator);
    }
    if !ledger.exists() {
        return Ok(plan_run::Author::Operator);
    }
    Ok(ledger
        .open()?
        .find_plan(&path.to_string_lossy())
        .map_err(Failure::ledger)?
        .map_or(plan_run::Author::Operator, |stored| {
            plan_run::Author::from_name(&stored.author)
        }))
}

/// The stored plan `id`, from the ledger alone.
fn read_stored(id: &str, ledger: &Ledger) -> Result<(Source, Format), Failure> {
    if ledger.exists()
        && let Some(stored) = ledger.open()?.find_plan(id).map_err(Failure::ledger)?
    {
        let format = if stored.format == "yaml" {
            Format::Yaml
        } else {
            Format::Json
        };
        return Ok((Source::new(stored.name, stored.source), format));
    }
    Err(Failure::input(format!("no stored plan has the id `{id}`")))
}

/// The plan's text: from a file, from stdin (`-`, JSON or YAML), or else the stored plan with
/// that id.
pub(crate) fn read_source(path: &Path, ledger: &Ledger) -> Result<(Source, Format), Failure> {
    if path == Path::new("-") {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|error| Failure::input(format!("cannot read the plan from stdin: {error}")))?;
        // JSON when it looks like JSON (an object), else YAML.
        let format = if text.trim_start().starts_with('{') {
            Format::Json
        } else {
            Format::Yaml
        };
        return Ok((Source::new("<stdin>", text), format));
    }
    match std::fs::read_to_string(path) {
        Ok(text) => Ok((
            Source::new(path.display().to_string(), text),
            Format::from_path(path),
        )),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            let id = path.to_string_lossy();
            if !ledger.exists()
                || ledger
                    .open()?
                    .find_plan(&id)
                    .map_err(Failure::ledger)?
                    .is_none()
            {
                return Err(Failure::input(format!(
                    "cannot read plan `{id}`: no such file, and no stored plan has that id"
                )));
            }
            read_stored(&id, ledger)
        }
        Err(error) => Err(Failure::input(format!(
            "cannot read plan `{}`: {error}",
            path.display()
        ))),
    }
}

/// The variables a run is given, before the plan says how `--var` text is read.
#[derive(Debug, Default)]
pub(crate) struct Inputs {
    /// Typed values: `--vars FILE` overlaid with `--var-json`, a stored run's, or an MCP
    /// client's.
    pub(crate) typed: Map<String, Value>,
    /// `--var NAME=TEXT`: a string, unless the plan's default for NAME is a number, a
    /// boolean, a list or an object; then TEXT is read as JSON.
    pub(crate) text: Vec<(String, String)>,
    /// Given on the command line: names the plan neither defines nor reads are warned of
    /// (a stored run's or an MCP client's are not: they were checked before, or are the
    /// client's business).
    pub(crate) check_names: bool,
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

impl Inputs {
    /// Every name given.
    fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.typed.keys().cloned().collect();
        names.extend(self.text.iter().map(|(name, _)| name.clone()));
        names
    }

    /// The values, typed by the plan's defaults; warns of names the plan neither defines nor
    /// reads (a typo would otherwise go unnoticed until a step reads the default).
    fn resolve(self, plan: &plan_graph::Plan) -> Result<Map<String, Value>, Failure> {
        let Inputs {
            mut typed,
            text,
            check_names,
        } = self;
        // Reading every step's placeholders is only worth it when names were given.
        if check_names && (!typed.is_empty() || !text.is_empty()) {
            let mut known: Vec<String> = plan.variables.keys().cloned().collect();
            known.extend(plan_graph::variables_read(plan));
            let given = typed.keys().chain(text.iter().map(|(name, _)| name));
            for name in given {
                if known.contains(name) {
                    continue;
                }
                let hint = plan_graph::closest(name, &known)
                    .map(|near| format!(" (did you mean `{near}`?)"))
                    .unwrap_or_default();
                eprintln!(
                    "warning: variable `{name}` is given, but the plan neither defines nor reads it{hint}"
                );
            }
        }
        for (name, text) in text {
            let value = match plan.variables.get(&name) {
                Some(default) if !default.is_string() && !default.is_null() => {
                    serde_json::from_str(&text).map_err(|_| {
                        Failure::input(format!(
                            "--var {name}={text}: the plan's default for `{name}` is {} ({default}), so the value is read as JSON, and `{text}` is not JSON; \
                             quote a string as --var-json '{name}=\"{text}\"'",
                            plan_vars::kind(default),
                        ))
                    })?
                }
                _ => Value::String(text),
            };
            typed.insert(name, value);
        }
        Ok(typed)
    }
}

/// `--vars FILE`, then `--var` and `--var-json` over it.
pub(crate) fn read_inputs(args: &PlanArgs) -> Result<Inputs, Failure> {
    let mut typed = Map::new();
    if let Some(path) = &args.vars_file {
        let text = std::fs::read_to_string(path).map_err(|error| {
            Failure::input(format!(
                "cannot read variables file `{}`: {error}",
                path.display()
            ))
        })?;
        let source = Source::new(path.display().to_string(), text);
        match load_variables(source, Format::from_path(path)) {
            Ok(variables) => typed = variables,
            Err(invalid) => {
                report(&invalid.plan_source, &invalid.issues);
                return Err(Failure::input(format!(
                    "{} is not a valid variables file: it must hold one object of NAME: VALUE",
                    path.display()
                )));
            }
        }
    }
    for (name, _) in &args.vars {
        if args.json_vars.iter().any(|(other, _)| other == name) {
            return Err(Failure::input(format!(
                "variable `{name}` is given by both --var and --var-json; give it once"
            )));
        }
        typed.remove(name);
    }
    typed.extend(args.json_vars.iter().cloned());
    Ok(Inputs {
        typed,
        text: args.vars.clone(),
        check_names: true,
    })
}

/// Loads, validates and compiles the plan `args` names; prints warnings; every error becomes
/// a diagnostic and exit code 2.
pub(crate) fn prepare(
    args: &PlanArgs,
    toolbox: &Toolbox,
    ledger: &Ledger,
    arguments: Severity,
) -> Result<Ready, Failure> {
    let inputs = read_inputs(args)?;
    let (source, format) = if args.stored_only {
        read_stored(&args.plan.to_string_lossy(), ledger)?
    } else {
        read_source(&args.plan, ledger)?
    };
    prepare_source(
        source,
        format,
        default_plan_id(&args.plan),
        inputs,
        toolbox,
        arguments,
    )
}

/// The plan id used when a plan has none: the file name without extension (`stdin` for `-`).
pub(crate) fn default_plan_id(path: &Path) -> String {
    if path == Path::new("-") {
        return "stdin".to_owned();
    }
    path.file_stem().map_or_else(
        || "plan".to_owned(),
        |stem| stem.to_string_lossy().into_owned(),
    )
}

/// Loads, validates and compiles plan text. Arguments that break their tool's schema before
/// the run (see `Program::check_arguments`) are `arguments`: errors for `validate`, warnings
/// where the run is to go on (each such call then fails with E_ARGS_INVALID).
pub(crate) fn prepare_source(
    source: Source,
    format: Format,
    fallback_id: String,
    inputs: Inputs,
    toolbox: &Toolbox,
    arguments: Severity,
) -> Result<Ready, Failure> {
    prepare_source_with(
        source,
        format,
        fallback_id,
        inputs,
        toolbox,
        arguments,
        true,
    )
}

/// [`prepare`] for `validate --json`: arguments checked as errors, and nothing printed (the
/// caller prints the issues as data).
pub(crate) fn prepare_quietly(
    args: &PlanArgs,
    toolbox: &Toolbox,
    ledger: &Ledger,
) -> Result<Ready, Failure> {
    let inputs = read_inputs(args)?;
    let (source, format) = if args.stored_only {
        read_stored(&args.plan.to_string_lossy(), ledger)?
    } else {
        read_source(&args.plan, ledger)?
    };
    let id = default_plan_id(&args.plan);
    prepare_source_with(source, format, id, inputs, toolbox, Severity::Error, false)
}

/// plan-cli's whole validation of a model's plan, as `validate --json` judges it, and then
/// `policy`'s judgement of every call it can make (of the steps in `only`, for a re-plan's new
/// steps): the problems as lines for the model to read, or `Ok`. Nothing in them tells the
/// model how to widen its policy (no "add `env:`" for a variable it may not read).
pub(crate) fn check_for_model(
    plan: &Value,
    fallback_id: &str,
    toolbox: &Toolbox,
    policy: &plan_run::Policy,
    only: Option<&std::collections::BTreeSet<String>>,
) -> Result<(), String> {
    let text = plan.to_string();
    let listed = |error: plan_run::PolicyError| {
        error
            .violations
            .iter()
            .map(|v| format!("- {}: {}", v.path, v.message))
            .collect::<Vec<_>>()
            .join("\n")
    };
    policy
        .check_size(plan_run::Author::Model, text.len())
        .map_err(listed)?;
    let source = Source::new("plan.json", text);
    let prepared = prepare_source_with(
        source,
        Format::Json,
        fallback_id.to_owned(),
        Inputs::default(),
        toolbox,
        Severity::Error,
        false,
    );
    let failure = match prepared {
        Ok(ready) => {
            let judged = match only {
                None => policy.check(plan_run::Author::Model, &ready.loaded.plan, &ready.program),
                Some(steps) => policy.check_steps(
                    plan_run::Author::Model,
                    &ready.loaded.plan,
                    &ready.program,
                    steps,
                ),
            };
            return judged.map_err(listed);
        }
        Err(failure) => failure,
    };
    let lines: Vec<String> = failure
        .issues
        .iter()
        .filter(|issue| issue["severity"] == "error")
        .map(|issue| {
            let mut line = format!("- {}", issue["message"].as_str().unwrap_or(""));
            if let Some(help) = issue["help"].as_str()
                && (policy.is_operator() || !help.starts_with("add `env:"))
            {
                line.push_str(&format!(" ({help})"));
            }
            line
        })
        .chain(failure.message.map(|message| format!("- {message}")))
        .collect();
    Err(lines.join("\n"))
}

/// [`prepare_source`], printing the warnings only when `print_warnings`.
fn prepare_source_with(
    source: Source,
    format: Format,
    fallback_id: String,
    inputs: Inputs,
    toolbox: &Toolbox,
    arguments: Severity,
    print_warnings: bool,
) -> Result<Ready, Failure> {
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
    let (tools, check_tools) = match &first {
        None => (toolbox.for_plan([])?, true),
        Some(Some(loaded)) => (toolbox.for_plan(loaded.plan.tool_names())?, true),
        Some(None) => (toolbox.for_plan([])?, false),
    };
    let registry = &tools.registry;
    let options = LoadOptions {
        provided_variables,
        known_tools: check_tools.then(|| registry.names()),
        ambiguous_tools: tools.ambiguous.clone(),
        ..LoadOptions::default()
    };
    let loaded = match load(source, format, &options) {
        Ok(loaded) => loaded,
        Err(invalid) => {
            let mut issues = invalid.issues;
            // Every problem at once: what compiling the plan finds (expressions, blocks,
            // tasks) and the arguments that break their tools' schemas are reported with
            // what validation found, not in later rounds.
            if let Some(plan) = &invalid.plan {
                let id = plan.id.clone().unwrap_or(fallback_id);
                let inputs = inputs.resolve(plan).unwrap_or_default();
                let fresh = Program::problems(plan, &id, registry, &inputs, &issues);
                issues.extend(fresh);
            }
            return Err(Failure::plan_issues(&invalid.plan_source, &issues));
        }
    };
    let inputs = inputs.resolve(&loaded.plan)?;
    let id = loaded.plan.id.clone().unwrap_or(fallback_id);
    let mut loaded = loaded;
    let compiled = Program::compile(&loaded.plan, &id, registry).and_then(|program| {
        // Arguments that break their tool's schema with what is known before the run.
        let mut problems = program.check_arguments(&inputs);
        match arguments {
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
            if print_warnings {
                report(&loaded.source, &loaded.warnings);
            }
            // Only the variables the plan lists are read, and only here: the engine reads no
            // environment.
            let env = program
                .env_names()
                .iter()
                .filter_map(|name| std::env::var(name).ok().map(|value| (name.clone(), value)))
                .collect();
            // The program holds its own copy of the variables; the plan's is not needed again
            // (a large list would otherwise be held twice for the whole run).
            loaded.plan.variables = Map::new();
            Ok(Ready {
                loaded,
                program,
                format,
                inputs,
                env,
            })
        }
        Err(issues) => {
            let mut all = loaded.warnings.clone();
            all.extend(issues);
            Err(Failure::plan_issues(&loaded.source, &all))
        }
    }
}

/// Prints each issue to stderr as a miette diagnostic with the plan's source.
pub(crate) fn report(source: &Source, issues: &[Issue]) {
    for diagnostic in render(source, issues) {
        eprintln!("{diagnostic}");
    }
}

/// Each issue as a miette diagnostic with the plan's source, as text.
pub(crate) fn render(source: &Source, issues: &[Issue]) -> Vec<String> {
    issues
        .iter()
        .map(|issue| format!("{:?}", miette::Report::new(source.diagnostic(issue))))
        .collect()
}

/// Each issue as data: `{"severity", "code", "message", "line", "column", "label", "help"}`
/// (`line` and `column` 1-based, null when the issue has no place in the text).
pub(crate) fn issues_json(source: &Source, issues: &[Issue]) -> Vec<Value> {
    issues
        .iter()
        .map(|issue| {
            let position = source.diagnostic(issue).position();
            serde_json::json!({
                "severity": if issue.is_error() { "error" } else { "warning" },
                "code": issue.code,
                "message": issue.message,
                "line": position.map(|(line, _)| line),
                "column": position.map(|(_, column)| column),
                "label": issue.label,
                "help": issue.help,
            })
        })
        .collect()
}

/// Colours and links only on a terminal, and never with NO_COLOR; a fixed width elsewhere so
/// output is the same on every machine.
pub(crate) fn install_diagnostic_hook() {
    let terminal = std::io::stderr().is_terminal();
    let color = terminal && std::env::var_os("NO_COLOR").is_none();
    let _ = miette::set_hook(Box::new(move |_| {
        let mut options = miette::MietteHandlerOpts::new()
            .terminal_links(false)
            .color(color)
            .unicode(true);
        if !terminal {
            options = options.width(100);
        }
        Box::new(options.build())
    }));
}

/// Where a run's programs run: `--cwd`, else the folder of the plan file (so that a plan's
/// relative paths mean the same from any directory), else none (the current directory: a
/// plan from stdin or the ledger). Absolute, so that `resume` finds it again.
pub(crate) fn working_dir(cwd: Option<&Path>, plan: &Path) -> Result<Option<PathBuf>, Failure> {
    let dir = match cwd {
        Some(dir) => dir.to_path_buf(),
        None if plan != Path::new("-") && plan.is_file() => match plan.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
            _ => PathBuf::from("."),
        },
        None => return Ok(None),
    };
    let absolute = std::fs::canonicalize(&dir)
        .map_err(|error| Failure::input(format!("--cwd {}: {error}", dir.display())))?;
    if !absolute.is_dir() {
        return Err(Failure::input(format!(
            "--cwd {}: not a folder",
            dir.display()
        )));
    }
    Ok(Some(absolute))
}
