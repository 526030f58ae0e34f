//! The operator's policies for the plans others write (`plan_run::Policy`), read from flags
//! and policy files: `mcp serve`'s for its clients, and `plan create`'s and `run`'s for a
//! model (`--allow-tool`, `--allow-env`, `--allow-workspace`, `--policy FILE`).

use std::path::Path;

use plan_run::{Policy, PolicyFile};

use crate::cli::PolicyArgs;
use crate::exit::Failure;

/// The policy file at `path`, or the empty one.
pub(crate) fn read_file(path: Option<&Path>) -> Result<PolicyFile, Failure> {
    let Some(path) = path else {
        return Ok(PolicyFile::default());
    };
    let text = std::fs::read_to_string(path).map_err(|error| {
        Failure::input(format!(
            "cannot read the policy {}: {error}",
            path.display()
        ))
    })?;
    PolicyFile::parse(&text).map_err(|error| Failure::input(format!("{}: {error}", path.display())))
}

/// The restricted default, widened by `args`' file and flags.
pub(crate) fn of(args: &PolicyArgs) -> Result<Policy, Failure> {
    let mut policy = read_file(args.policy.as_deref())?.into_policy();
    widen(
        &mut policy,
        &args.allow_tools,
        &args.allow_env,
        args.allow_workspace,
    );
    Ok(policy)
}

/// Adds the flags' tools, variables and workspace to `policy`.
pub(crate) fn widen(policy: &mut Policy, tools: &[String], env: &[String], workspace: bool) {
    policy.tools.extend(tools.iter().cloned());
    policy.every_tool |= policy.tools.contains("*");
    policy.env.extend(env.iter().cloned());
    policy.workspace |= workspace;
}
