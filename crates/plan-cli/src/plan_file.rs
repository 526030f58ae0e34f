//! Reading a plan (a file, stdin, or a stored plan), and reporting its problems as
//! diagnostics.

use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};

use plan_graph::{Format, Issue, Severity, Source, load_variables};
use plan_run::Inputs;
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
    Ok(stored(&path.to_string_lossy(), ledger)?
        .map_or(plan_run::Author::Operator, |stored| stored.author))
}

/// The stored plan `id`, if there is a ledger and it has one.
fn stored(id: &str, ledger: &Ledger) -> Result<Option<plan_run::StoredSource>, Failure> {
    if !ledger.exists() {
        return Ok(None);
    }
    plan_run::stored_source(&ledger.open()?, id).map_err(Failure::lifecycle)
}

/// The stored plan `id`, from the ledger alone.
fn read_stored(id: &str, ledger: &Ledger) -> Result<(Source, Format), Failure> {
    match stored(id, ledger)? {
        Some(stored) => Ok((stored.source, stored.format)),
        None => Err(Failure::input(format!("no stored plan has the id `{id}`"))),
    }
}

/// The plan's text: from a file, from stdin (`-`, JSON or YAML), or else the stored plan with
/// that id.
pub(crate) fn read_source(path: &Path, ledger: &Ledger) -> Result<(Source, Format), Failure> {
    if path == Path::new("-") {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|error| Failure::input(format!("cannot read the plan from stdin: {error}")))?;
        let format = plan_run::format_of_text(&text);
        return Ok((Source::new("<stdin>", text), format));
    }
    match std::fs::read_to_string(path) {
        Ok(text) => Ok((
            Source::new(path.display().to_string(), text),
            Format::from_path(path),
        )),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            let id = path.to_string_lossy();
            match stored(&id, ledger)? {
                Some(stored) => Ok((stored.source, stored.format)),
                None => Err(Failure::input(format!(
                    "cannot read plan `{id}`: no such file, and no stored plan has that id"
                ))),
            }
        }
        Err(error) => Err(Failure::input(format!(
            "cannot read plan `{}`: {error}",
            path.display()
        ))),
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
    Ok(plan_run::Inputs {
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

/// Loads, validates and compiles plan text (`plan_run::prepare`) and prints its warnings.
/// Arguments that break their tool's schema before the run (see `Program::check_arguments`)
/// are `arguments`: errors for `validate`, warnings where the run is to go on (each such call
/// then fails with E_ARGS_INVALID).
pub(crate) fn prepare_source(
    source: Source,
    format: Format,
    fallback_id: String,
    inputs: Inputs,
    toolbox: &Toolbox,
    arguments: Severity,
) -> Result<Ready, Failure> {
    let ready = prepare_silently(source, format, &fallback_id, inputs, toolbox, arguments)?;
    warn_unused(&ready);
    report(&ready.loaded.source, &ready.loaded.warnings);
    Ok(ready)
}

/// Says which variables given the plan neither defines nor reads (a typo would otherwise go
/// unnoticed until a step reads the default).
fn warn_unused(ready: &Ready) {
    for unused in &ready.unused_inputs {
        let hint = unused
            .near
            .as_ref()
            .map(|near| format!(" (did you mean `{near}`?)"))
            .unwrap_or_default();
        eprintln!(
            "warning: variable `{}` is given, but the plan neither defines nor reads it{hint}",
            unused.name
        );
    }
}

/// [`prepare`] for `validate --json`: arguments checked as errors, and the plan's issues not
/// printed (the caller prints them as data).
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
    let ready = prepare_silently(source, format, &id, inputs, toolbox, Severity::Error)?;
    // On stderr, as ever: not an issue of the plan's text.
    warn_unused(&ready);
    Ok(ready)
}

/// `plan_run::prepare`, with the values of the plan's `env:` variables read from this
/// process's environment.
fn prepare_silently(
    source: Source,
    format: Format,
    fallback_id: &str,
    inputs: Inputs,
    toolbox: &Toolbox,
    arguments: Severity,
) -> Result<Ready, Failure> {
    let strictness = plan_run::Strictness { arguments };
    let env = |name: &str| std::env::var(name).ok();
    toolbox
        .block_on(plan_run::prepare(
            source,
            format,
            fallback_id,
            inputs,
            toolbox,
            strictness,
            &env,
        ))
        .map_err(Failure::prepare)
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
        .map(|issue| {
            let issue = worded(issue);
            format!("{:?}", miette::Report::new(source.diagnostic(&issue)))
        })
        .collect()
}

/// An issue as the CLI shows it: the library's help says what to do, and the CLI adds the
/// command or the flags that do it here (an MCP client or a model reads the library's words).
fn worded(issue: &Issue) -> std::borrow::Cow<'_, Issue> {
    let how = match issue.code {
        "plan::unknown_tool" | "plan::missing_tool" => "`plan-cli tools` lists every tool",
        "plan::undefined_variable"
            if issue
                .help
                .as_deref()
                .is_some_and(|help| help.contains("give the run a value")) =>
        {
            "give values with `--var NAME=VALUE`, `--var-json NAME=JSON` or `--vars FILE`"
        }
        _ => return std::borrow::Cow::Borrowed(issue),
    };
    let mut issue = issue.clone();
    issue.help = Some(match issue.help.take() {
        Some(help) if help.ends_with('?') => format!("{help} {how}"),
        Some(help) => format!("{help}; {how}"),
        None => how.to_owned(),
    });
    std::borrow::Cow::Owned(issue)
}

/// Each issue as data: `{"severity", "code", "message", "line", "column", "label", "help"}`
/// (`line` and `column` 1-based, null when the issue has no place in the text).
pub(crate) fn issues_json(source: &Source, issues: &[Issue]) -> Vec<Value> {
    issues
        .iter()
        .map(|issue| {
            let issue = worded(issue);
            let position = source.diagnostic(&issue).position();
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
