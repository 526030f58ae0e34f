//! `plan-cli`: the thin binary over plan-graph, plan-engine, plan-tools and plan-store.
//!
//! It parses flags, reads files, renders diagnostics and output, and maps task status to the
//! exit code; the work itself is the libraries'.

/// `eprintln!` that does not panic when stderr is closed (`2>&1 | head`): a line nobody reads
/// is no reason to stop a command ([`output::say`]).
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::output::say(&format!($($arg)*))
    };
}

mod cli;
mod commands;
mod exit;
mod output;
mod plan_file;
mod policy;
mod signals;
mod toolbox;

use clap::Parser;

// glibc's malloc serialises the engine's threads on its arena locks (a third of a 100,000-step
// run went to lock waits and `malloc_consolidate`); mimalloc keeps a heap per thread.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use crate::cli::{Cli, Command, McpCommand, StateCommand};
use plan_run::{Ledger, Project};

fn main() {
    plan_file::install_diagnostic_hook();
    let mut cli = Cli::parse();
    // Commands that need neither a ledger nor tools.
    let early = match &cli.command {
        Command::Init(args) => Some(commands::init(args)),
        Command::Import(command) => Some(commands::import(command)),
        Command::Schema(args) if args.audience == cli::SchemaFor::Editors => {
            Some(commands::schema(args))
        }
        Command::Completions { shell } => Some(commands::completions(*shell)),
        _ => None,
    };
    if let Some(outcome) = early {
        exit_with(outcome);
    }
    let here = std::env::current_dir().ok();
    let project = here.as_deref().and_then(Project::find);
    for dir in here
        .as_deref()
        .map(Project::passed_over)
        .unwrap_or_default()
    {
        say!(
            "warning: {} is passed over (another user's, a link, or every user may write in it): its ledger and MCP configuration are not used",
            dir.display()
        );
    }
    let ledger = Ledger::new(cli.db.as_deref(), project.as_ref());
    // What the stored run a command goes on with kept: its folder, its tools and its queue.
    // `last` is read once: what was kept and what the command goes on with are one run's.
    let mut kept = plan_run::Kept::default();
    if let Some(run) = cli.command.run_going_on() {
        kept =
            plan_run::Kept::of(&ledger, run).unwrap_or_else(|error| exit_with(Err(error.into())));
        if let Some(id) = &kept.run_id {
            run.clone_from(id);
        }
    }
    // Tool options count before the command and after it (after wins for the file).
    let after = cli.command.tool_options();
    let passthrough = cli
        .tool_options
        .env_passthrough
        .iter()
        .chain(
            after
                .into_iter()
                .flat_map(|tools| tools.env_passthrough.iter()),
        )
        .cloned();
    let working_dir = match &cli.command {
        Command::Run(args) => args.plan.input().folder(args.execution.cwd.as_deref()),
        Command::Resume(args) => kept.folder(args.execution.cwd.as_deref()),
        Command::Retry(args) => kept.folder(args.execution.cwd.as_deref()),
        _ => Ok(None),
    };
    let working_dir = working_dir.unwrap_or_else(|error| exit_with(Err(error.into())));
    // Read before any server starts; its runs keep their programs in its work folder.
    let mut policy = None;
    if let Command::Mcp(McpCommand::Serve(args)) = &cli.command {
        policy = Some(commands::policy_of(args).unwrap_or_else(|failure| exit_with(Err(failure))));
    }
    let tools = plan_run::ToolSettings {
        mcp_config: (after.and_then(|tools| tools.mcp_config.clone()))
            .or_else(|| cli.tool_options.mcp_config.clone()),
        project_config: project.as_ref().and_then(Project::mcp_config),
        exec: plan_run::Exec::default().passing(passthrough),
    };
    let toolbox = toolbox::Toolbox::new(&tools, &kept, working_dir)
        .unwrap_or_else(|failure| exit_with(Err(failure)));
    let outcome = match &cli.command {
        Command::Run(args) => commands::run(args, &toolbox, &ledger),
        Command::Resume(args) => commands::resume(args, &kept.sources, &toolbox, &ledger),
        Command::Retry(args) => commands::retry(args, &kept.sources, &toolbox, &ledger),
        Command::Cancel(args) => commands::cancel(args, &ledger),
        Command::Approve(args) => commands::approve(args, &toolbox, &ledger),
        Command::Reject(args) => commands::reject(args, &toolbox, &ledger),
        Command::Validate(args) => commands::validate(args, &toolbox, &ledger),
        Command::Show(args) => commands::show(args, &toolbox, &ledger),
        Command::Tools(args) => commands::tools(args, &toolbox),
        Command::Runs(args) => commands::runs(args, &ledger),
        Command::Status(args) => commands::status(args, &ledger),
        Command::Events(args) => commands::events(args, &ledger),
        Command::Logs(args) => commands::logs(args, &ledger),
        Command::Gc(args) => commands::gc(args, &ledger),
        Command::Ui(args) => commands::ui(args, tools, &toolbox, &ledger),
        Command::Plan(command) => commands::plan(command, &toolbox, &ledger),
        Command::State(StateCommand::Export { run, format }) => {
            commands::state_export(run, *format, &ledger)
        }
        Command::Mcp(McpCommand::Serve(args)) => policy
            .take()
            .ok_or_else(|| exit::Failure::internal("the policy of `mcp serve` was not read"))
            .and_then(|policy| commands::serve(policy, args.http, &toolbox, &ledger)),
        Command::Worker(args) => commands::worker(args, &toolbox),
        Command::Schema(args) => commands::generation_schema(args, &toolbox),
        Command::Init(_) | Command::Import(_) | Command::Completions { .. } => Err(
            exit::Failure::internal("handled before the ledger is opened"),
        ),
    };
    // MCP servers that were started stop before the process ends.
    toolbox.block_on(toolbox.shutdown());
    exit_with(outcome);
}

/// Prints a failure (its diagnostics and message) and exits with the outcome's code.
fn exit_with(outcome: Result<i32, exit::Failure>) -> ! {
    let code = match outcome {
        Ok(code) => code,
        Err(failure) => {
            // Diagnostics are miette's, coloured on a terminal: left as they are.
            for diagnostic in &failure.diagnostics {
                say!("{diagnostic}");
            }
            if let Some(message) = failure.message {
                say!("Error: {}", output::terminal_safe(&message));
            }
            failure.code
        }
    };
    std::process::exit(code);
}
