//! Preparing the plan a command names (read by `plan_run::PlanInput`), and reporting its
//! problems as diagnostics.

use std::io::IsTerminal;

use plan_graph::{Issue, Severity, Source};
use plan_run::{Inputs, Ledger, PlanText, Prepared};

use crate::cli::PlanArgs;
use crate::exit::Failure;
use crate::toolbox::Toolbox;

/// Loads, validates and compiles the plan `args` names; prints warnings; every error becomes
/// a diagnostic and exit code 2.
pub(crate) fn prepare(
    args: &PlanArgs,
    toolbox: &Toolbox,
    ledger: &Ledger,
    arguments: Severity,
) -> Result<Prepared, Failure> {
    let (text, inputs) = read(args, ledger)?;
    prepare_text(text, inputs, toolbox, arguments)
}

/// The plan `args` names, and the variables they give.
fn read(args: &PlanArgs, ledger: &Ledger) -> Result<(PlanText, Inputs), Failure> {
    let inputs = args.variables().read()?;
    Ok((args.input().read(ledger, &mut std::io::stdin())?, inputs))
}

/// Loads, validates and compiles plan text (`plan_run::prepare`) and prints its warnings.
/// Arguments that break their tool's schema before the run (see `Program::check_arguments`)
/// are `arguments`: errors for `validate` and `run`, warnings where nothing is to run (`show`,
/// `plan add`).
pub(crate) fn prepare_text(
    text: PlanText,
    inputs: Inputs,
    toolbox: &Toolbox,
    arguments: Severity,
) -> Result<Prepared, Failure> {
    let ready = prepare_silently(text, inputs, toolbox, arguments)?;
    warn_unused(&ready);
    report(&ready.loaded.source, &ready.loaded.warnings);
    Ok(ready)
}

/// Says which variables given the plan neither defines nor reads (a typo would otherwise go
/// unnoticed until a step reads the default).
fn warn_unused(ready: &Prepared) {
    for unused in &ready.unused_inputs {
        let hint = unused
            .near
            .as_ref()
            .map(|near| format!(" (did you mean `{near}`?)"))
            .unwrap_or_default();
        say!(
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
) -> Result<Prepared, Failure> {
    let (text, inputs) = read(args, ledger)?;
    let ready = prepare_silently(text, inputs, toolbox, Severity::Error)?;
    // On stderr, as ever: not an issue of the plan's text.
    warn_unused(&ready);
    Ok(ready)
}

/// `plan_run::prepare`, with the values of the plan's `env:` variables read from this
/// process's environment.
fn prepare_silently(
    text: PlanText,
    inputs: Inputs,
    toolbox: &Toolbox,
    arguments: Severity,
) -> Result<Prepared, Failure> {
    let strictness = plan_run::Strictness { arguments };
    let env = |name: &str| std::env::var(name).ok();
    toolbox
        .block_on(plan_run::prepare(text, inputs, toolbox, strictness, &env))
        .map_err(Failure::prepare)
}

/// Prints each issue to stderr as a miette diagnostic with the plan's source.
pub(crate) fn report(source: &Source, issues: &[Issue]) {
    for diagnostic in render(source, issues) {
        say!("{diagnostic}");
    }
}

/// Each issue as a miette diagnostic with the plan's source, as text.
pub(crate) fn render(source: &Source, issues: &[Issue]) -> Vec<String> {
    issues
        .iter()
        .map(|issue| {
            let mut issue = issue.clone();
            issue.help = help_here(issue.code, issue.help.as_deref());
            format!("{:?}", miette::Report::new(source.diagnostic(&issue)))
        })
        .collect()
}

/// An issue's help as the CLI gives it: the library's help says what to do, and the CLI adds
/// the command or the flags that do it here (an MCP client or a model reads the library's
/// words).
pub(crate) fn help_here(code: &str, help: Option<&str>) -> Option<String> {
    let how = match code {
        "plan::unknown_tool" | "plan::missing_tool" => "`plan-cli tools` lists every tool",
        "policy::not_allowed" => {
            "`run` and `validate` widen the author's policy with --allow-tool, --allow-env, --allow-workspace or --policy"
        }
        "plan::undefined_variable"
            if help.is_some_and(|help| help.contains("give the run a value")) =>
        {
            "give values with `--var NAME=VALUE`, `--var-json NAME=JSON` or `--vars FILE`"
        }
        _ => return help.map(str::to_owned),
    };
    Some(match help {
        Some(help) if help.ends_with('?') => format!("{help} {how}"),
        Some(help) => format!("{help}; {how}"),
        None => how.to_owned(),
    })
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
