//! The operator's policies for the plans others write (`plan_run::Policy`), read from flags
//! and policy files: `mcp serve`'s for its clients, and `plan create`'s and `run`'s for a
//! model (`--allow-tool`, `--allow-env`, `--allow-workspace`, `--policy FILE`).

use plan_run::{Policy, PolicyFile};

use crate::cli::PolicyArgs;
use crate::exit::Failure;

/// The restricted default, widened by `args`' policy file and flags (the flags add to the
/// file's lists).
pub(crate) fn of(args: &PolicyArgs) -> Result<Policy, Failure> {
    Ok(file_of(args)?.into_policy())
}

/// Whether a run of `author`'s plan is held to `args`' policy, as `run` and `validate` both
/// judge it: another author's plan always, the operator's own only under `--policy FILE`.
pub(crate) fn judges(args: &PolicyArgs, author: plan_run::Author) -> bool {
    author != plan_run::Author::Operator || args.policy.is_some()
}

/// `args`' policy file, with the flags added to its lists.
pub(crate) fn file_of(args: &PolicyArgs) -> Result<PolicyFile, Failure> {
    let mut file = PolicyFile::read(args.policy.as_deref())
        .map_err(|error| Failure::input(error.to_string()))?;
    file.allow_tools.extend(args.allow_tools.iter().cloned());
    file.allow_env.extend(args.allow_env.iter().cloned());
    file.allow_workspace |= args.allow_workspace;
    Ok(file)
}
