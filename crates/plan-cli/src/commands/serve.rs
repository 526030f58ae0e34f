//! `plan-cli mcp serve`: plan-cli as an MCP server on stdio, or Streamable HTTP with `--http`
//! (the `plan-serve` crate), set up from the command's flags and the environment. On stdio,
//! stdout is the protocol, so nothing else is printed there.

use std::{net::SocketAddr, sync::Arc};

use super::print;
use crate::{cli::ServeArgs, exit::Failure, toolbox::Toolbox};
use plan_run::{Ledger, Policy};

pub(crate) fn serve(
    policy: Policy,
    http: Option<SocketAddr>,
    toolbox: &Toolbox,
    ledger: &Ledger,
) -> Result<i32, Failure> {
    // A client without sampling gets the operator's model, if one is configured whole.
    let model = super::plans::endpoint(None).unwrap_or_else(|_| {
        say!("warning: PLAN_LLM_URL is set but PLAN_LLM_MODEL is not: plans are written from goals only for clients that offer sampling");
        None
    });
    let settings = plan_serve::Settings {
        toolbox: toolbox.shared(),
        ledger: ledger.clone(),
        policy,
        model,
        // The server's own token is no plan's to read.
        env: Arc::new(|name| {
            std::env::var(name)
                .ok()
                .filter(|_| name != "PLAN_MCP_TOKEN")
        }),
        project_path: super::project_path(),
    };
    let signals = crate::signals::forwarded(toolbox);
    let served = match http {
        None => toolbox.block_on(plan_serve::serve_stdio(settings, signals)),
        Some(address) => {
            let token = std::env::var("PLAN_MCP_TOKEN").ok();
            let server = plan_serve::HttpServer::bind(address, token)
                .map_err(|e| Failure::input(e.to_string()))?;
            let (url, token) = (server.url(), server.token());
            print(&format!("mcp: {url}\ntoken: {token}\n"))?;
            toolbox.block_on(server.serve(settings, signals))
        }
    };
    served.map_err(|error| Failure::internal(error.to_string()))?;
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
