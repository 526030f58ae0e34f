//! `plan-cli mcp serve`: plan-cli as an MCP server on stdio (the `plan-serve` crate), set up
//! from the command's flags and the environment. stdout is the protocol, so nothing else is
//! printed there.

use std::sync::Arc;

use plan_run::Policy;

use crate::cli::ServeArgs;
use crate::exit::Failure;
use crate::toolbox::Toolbox;
use plan_run::Ledger;

pub(crate) fn serve(policy: Policy, toolbox: &Toolbox, ledger: &Ledger) -> Result<i32, Failure> {
    // A client without sampling gets the operator's model, if one is configured whole.
    let model = match super::plans::endpoint(None) {
        Ok(model) => model,
        Err(_) => {
            say!(
                "warning: PLAN_LLM_URL is set but PLAN_LLM_MODEL is not: plans are written from goals only for clients that offer sampling"
            );
            None
        }
    };
    let settings = plan_serve::Settings {
        toolbox: toolbox.shared(),
        ledger: ledger.clone(),
        policy,
        model,
        env: Arc::new(|name| std::env::var(name).ok()),
        project_path: super::project_path(),
    };
    // Each Ctrl+C or SIGTERM (`plan-cli cancel` of a client's run sends one) is the server's
    // to handle: it stops that run alone, or all of them and ends.
    let (heard, signals) = tokio::sync::mpsc::unbounded_channel();
    toolbox.spawn(async move {
        let mut watched = crate::signals::Signals::new();
        while watched.next().await && heard.send(()).is_ok() {}
    });
    toolbox
        .block_on(plan_serve::serve_stdio(settings, signals))
        .map_err(|error| Failure::internal(error.to_string()))?;
    Ok(0)
}

/// The policy of `mcp serve` (docs/security.md): the restricted default a client gets, widened
/// by the operator's `--policy` file and flags (the flags add to its lists and win over its
/// values). A client is anyone who can write to the server's stdin: it gets none of the
/// operator's powers unless given them here.
pub(crate) fn policy_of(args: &ServeArgs) -> Result<Policy, Failure> {
    let mut file = crate::policy::file_of(&args.policy)?;
    file.allow_client_approval |= args.allow_client_approval;
    file.max_plan_bytes = args.max_plan_bytes.or(file.max_plan_bytes);
    file.max_steps = args.max_steps.or(file.max_steps);
    file.max_run_time = args.max_run_time.or(file.max_run_time);
    file.workdir = args.workdir.clone().or(file.workdir);
    let mut policy = file.into_policy();
    // From the root: a client's run keeps it as its working folder, and a workspace's
    // repository is found from it (`.` read as a plan's path would name no folder).
    policy.workdir = plan_run::resolve_folder(&policy.workdir)
        .map_err(|error| Failure::input(format!("--workdir {error}")))?;
    Ok(policy)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_help_names_every_served_tool() {
        use clap::CommandFactory;
        let mut cli = crate::cli::Cli::command();
        let serve = cli
            .find_subcommand_mut("mcp")
            .and_then(|mcp| mcp.find_subcommand_mut("serve"))
            .map(|serve| serve.render_long_help().to_string())
            .unwrap_or_default();
        let names = plan_serve::tool_names();
        assert_eq!(names.len(), 8);
        for name in names {
            assert!(serve.contains(name), "{name} is not in:\n{serve}");
        }
    }
}
