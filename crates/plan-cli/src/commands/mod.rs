//! One function per subcommand; each returns the process exit code.

mod approvals;
mod execute;
mod ledger;
mod plans;
mod serve;
mod worker;

use std::io::Write;

pub(crate) use approvals::{approve, reject};
pub(crate) use execute::{resume, retry, run, run_as};
pub(crate) use ledger::{cancel, events, gc, logs, runs, state_export, status, ui};
pub(crate) use plans::{
    completions, generation_schema, import, init, plan, schema, show, tools, validate,
};
pub(crate) use serve::{policy_of, serve};
pub(crate) use worker::worker;

use crate::exit::Failure;

fn pretty(value: &impl serde::Serialize) -> String {
    let mut text = plan_types::json_out::to_string(value)
        .unwrap_or_else(|error| format!("{{\"error\": \"{error}\"}}"));
    text.push('\n');
    text
}

/// Writes `value` as JSON to stdout (pretty at the top, compact below: `json_out`),
/// streaming (a large run's records are not built into one string first); a closed pipe is not
/// an error worth a message.
fn print_json(value: &impl serde::Serialize) -> Result<(), Failure> {
    let stdout = std::io::stdout().lock();
    let mut out = std::io::BufWriter::with_capacity(1 << 16, stdout);
    let written = plan_types::json_out::write(&mut out, value)
        .map_err(std::io::Error::from)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush());
    match written {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(error) => Err(Failure::internal(format!(
            "cannot write the output: {error}"
        ))),
    }
}

/// Writes to stdout; a closed pipe (`| head`) is not an error worth a message.
fn print(text: &str) -> Result<(), Failure> {
    write_out(&crate::output::terminal_safe(text))
}

/// A run's summary on stdout: made terminal-safe, then coloured where stdout is a terminal
/// that wants colour (the only escapes that reach it are the colours added here).
fn print_summary(summary: &str) -> Result<(), Failure> {
    let safe = crate::output::terminal_safe(summary);
    if crate::output::stdout_in_colour() {
        write_out(&crate::output::in_colour(&safe))
    } else {
        write_out(&safe)
    }
}

fn write_out(text: &str) -> Result<(), Failure> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(error) => Err(Failure::internal(format!(
            "cannot write the output: {error}"
        ))),
    }
}

/// The project's folder a run's state document names (`project_path`): the one the command
/// runs in.
fn project_path() -> Option<String> {
    std::env::current_dir()
        .ok()
        .map(|d| d.display().to_string())
}
