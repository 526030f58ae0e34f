//! Reading a plan from a file or stdin, and reporting its problems as diagnostics.

use std::io::{IsTerminal, Read};
use std::path::Path;

use plan_engine::{Program, Registry};
use plan_graph::{Format, Issue, LoadOptions, LoadedPlan, Source, load};

use crate::cli::PlanArgs;
use crate::exit::Failure;

/// A plan that loaded and bound to the registry's tools.
pub(crate) struct Ready {
    pub(crate) loaded: LoadedPlan,
    pub(crate) program: Program,
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

/// Loads, validates and compiles a plan; prints warnings; every error becomes a diagnostic
/// and exit code 2.
pub(crate) fn prepare(args: &PlanArgs, registry: &Registry) -> Result<Ready, Failure> {
    let (source, format) = read_source(&args.plan)?;
    let options = LoadOptions {
        provided_variables: args.vars.iter().map(|(name, _)| name.clone()).collect(),
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
            Ok(Ready { loaded, program })
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
