//! Reading a plan from a file or stdin, and reporting its problems as diagnostics.

use std::io::{IsTerminal, Read};
use std::path::Path;

use plan_engine::{Program, Registry};
use std::collections::BTreeMap;

use plan_graph::{Format, Issue, LoadOptions, LoadedPlan, Source, load, load_variables};
use serde_json::{Map, Value};

use crate::cli::PlanArgs;
use crate::exit::Failure;

/// A plan that loaded and bound to the registry's tools, with the run's inputs.
pub(crate) struct Ready {
    pub(crate) loaded: LoadedPlan,
    pub(crate) program: Program,
    /// `--vars FILE` overlaid with `--var`.
    pub(crate) inputs: Map<String, Value>,
    /// Values of the environment variables the plan lists under `env:` (unset ones left out).
    pub(crate) env: BTreeMap<String, String>,
}

pub(crate) fn read_source(path: &Path) -> Result<(Source, Format), Failure> {
    if path == Path::new("-") {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|error| Failure::input(format!("cannot read the plan from stdin: {error}")))?;
        return Ok((Source::new("<stdin>", text), Format::Json));
    }
    let text = std::fs::read_to_string(path).map_err(|error| {
        Failure::input(format!("cannot read plan `{}`: {error}", path.display()))
    })?;
    Ok((
        Source::new(path.display().to_string(), text),
        Format::from_path(path),
    ))
}

/// The plan's id: its `id`, else the file name without extension (`stdin` for `-`).
fn plan_id(loaded: &LoadedPlan, path: &Path) -> String {
    if let Some(id) = &loaded.plan.id {
        return id.clone();
    }
    if path == Path::new("-") {
        return "stdin".to_owned();
    }
    path.file_stem().map_or_else(
        || "plan".to_owned(),
        |stem| stem.to_string_lossy().into_owned(),
    )
}

/// `--vars FILE`, then `--var` over it.
fn read_inputs(args: &PlanArgs) -> Result<Map<String, Value>, Failure> {
    let mut inputs = Map::new();
    if let Some(path) = &args.vars_file {
        let text = std::fs::read_to_string(path).map_err(|error| {
            Failure::input(format!(
                "cannot read variables file `{}`: {error}",
                path.display()
            ))
        })?;
        let source = Source::new(path.display().to_string(), text);
        match load_variables(source, Format::from_path(path)) {
            Ok(variables) => inputs = variables,
            Err(invalid) => {
                report(&invalid.plan_source, &invalid.issues);
                return Err(Failure::input(format!(
                    "{} is not a valid variables file: it must hold one object of NAME: VALUE",
                    path.display()
                )));
            }
        }
    }
    inputs.extend(args.vars.iter().cloned());
    Ok(inputs)
}

/// Loads, validates and compiles a plan; prints warnings; every error becomes a diagnostic
/// and exit code 2.
pub(crate) fn prepare(args: &PlanArgs, registry: &Registry) -> Result<Ready, Failure> {
    let inputs = read_inputs(args)?;
    let (source, format) = read_source(&args.plan)?;
    let options = LoadOptions {
        provided_variables: inputs.keys().cloned().collect(),
        known_tools: Some(registry.names()),
    };
    let loaded = match load(source, format, &options) {
        Ok(loaded) => loaded,
        Err(invalid) => {
            report(&invalid.plan_source, &invalid.issues);
            return Err(Failure::invalid_plan(
                invalid.plan_source.name(),
                invalid.error_count(),
            ));
        }
    };
    let id = plan_id(&loaded, &args.plan);
    match Program::compile(&loaded.plan, &id, registry) {
        Ok(program) => {
            report(&loaded.source, &loaded.warnings);
            // Only the variables the plan lists are read, and only here: the engine reads no
            // environment.
            let env = program
                .env_names()
                .iter()
                .filter_map(|name| std::env::var(name).ok().map(|value| (name.clone(), value)))
                .collect();
            Ok(Ready {
                loaded,
                program,
                inputs,
                env,
            })
        }
        Err(issues) => {
            let mut all = loaded.warnings.clone();
            all.extend(issues);
            report(&loaded.source, &all);
            let errors = all.iter().filter(|i| i.is_error()).count();
            Err(Failure::invalid_plan(loaded.source.name(), errors))
        }
    }
}

/// Prints each issue to stderr as a miette diagnostic with the plan's source.
pub(crate) fn report(source: &Source, issues: &[Issue]) {
    for issue in issues {
        let diagnostic = source.diagnostic(issue);
        eprintln!("{:?}", miette::Report::new(diagnostic));
    }
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
