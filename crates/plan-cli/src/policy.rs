//! The operator's policies for the plans others write (`plan_run::Policy`), read from flags
//! and policy files: `mcp serve`'s for its clients, and `plan create`'s and `run`'s for a
//! model (`--allow-tool`, `--allow-env`, `--allow-workspace`, `--policy FILE`).

use plan_run::{Policy, PolicyFile};

use crate::cli::PolicyArgs;
use crate::exit::Failure;

/// The restricted default, widened by `args`' policy file and flags (the flags add to the
/// file's lists).
pub(crate) fn of(args: &PolicyArgs) -> Result<Policy, Failure> {
    let file = match &args.policy {
        None => PolicyFile::default(),
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|error| {
                Failure::input(format!(
                    "cannot read the policy {}: {error}",
                    path.display()
                ))
            })?;
            PolicyFile::parse(&text)
                .map_err(|error| Failure::input(format!("{}: {error}", path.display())))?
        }
    };
    let mut policy = file.into_policy();
    policy.tools.extend(args.allow_tools.iter().cloned());
    policy.every_tool |= policy.tools.contains("*");
    policy.env.extend(args.allow_env.iter().cloned());
    policy.workspace |= args.allow_workspace;
    Ok(policy)
}
