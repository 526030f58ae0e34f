//! `plan-cli`: the thin binary over plan-graph, plan-engine and plan-tools.
//!
//! It parses flags, reads files, renders diagnostics and output, and maps task status to the
//! exit code; the work itself is the libraries'.

mod cli;
mod commands;
mod events_file;
mod exit;
mod output;
mod plan_file;

use clap::Parser;

use crate::cli::{Cli, Command};

fn main() {
    plan_file::install_diagnostic_hook();
    let cli = Cli::parse();
    let registry = plan_tools::builtin_registry();
    let outcome = match &cli.command {
        Command::Run(args) => commands::run(args, &registry),
        Command::Validate(args) => commands::validate(args, &registry),
        Command::Show(args) => commands::show(args, &registry),
        Command::Tools(args) => commands::tools(args, &registry),
    };
    let code = match outcome {
        Ok(code) => code,
        Err(failure) => {
            if let Some(message) = failure.message {
                eprintln!("Error: {message}");
            }
            failure.code
        }
    };
    std::process::exit(code);
}
