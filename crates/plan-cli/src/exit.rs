//! Exit codes and the errors that end a command early.

use plan_run::ledger::StoreError;

/// Exit code for invalid input: a bad plan, bad flags, an unreadable file, an unknown run.
pub(crate) const INVALID_INPUT: i32 = 2;

/// Exit code when a model could not be asked: its endpoint unreachable, an HTTP error, no
/// answer in time, a request too large for its context.
pub(crate) const MODEL_FAILED: i32 = 6;

/// Exit code when a model answered, but none of its answers was a valid plan.
pub(crate) const NO_VALID_PLAN: i32 = 7;

/// Why a command stopped before doing its work.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) message: Option<String>,
    pub(crate) code: i32,
    /// Rendered diagnostics (a plan's errors with their source), printed before the message.
    pub(crate) diagnostics: Vec<String>,
    /// The same issues as data (`validate --json`).
    pub(crate) validation: Option<Box<plan_run::Validation>>,
}

impl Failure {
    /// A failure with exit code `code` and a message to print.
    fn new(code: i32, message: impl Into<String>) -> Self {
        Failure {
            message: Some(message.into()),
            code,
            diagnostics: Vec::new(),
            validation: None,
        }
    }

    /// Invalid input with a message to print.
    pub(crate) fn input(message: impl Into<String>) -> Self {
        Failure::new(INVALID_INPUT, message)
    }

    /// Something went wrong that is not the input's fault (exit 1).
    pub(crate) fn internal(message: impl Into<String>) -> Self {
        Failure::new(1, message)
    }

    /// An invalid plan, with its diagnostics.
    pub(crate) fn invalid_plan(name: &str, errors: usize, diagnostics: Vec<String>) -> Self {
        let errors = crate::output::count(errors, "error", "errors");
        let mut failure = Failure::input(format!("{name} is not a valid plan ({errors})"));
        failure.diagnostics = diagnostics;
        failure
    }

    /// An invalid plan: its issues, rendered and as data.
    pub(crate) fn plan_issues(source: &plan_graph::Source, issues: &[plan_graph::Issue]) -> Self {
        let errors = issues.iter().filter(|i| i.is_error()).count();
        let mut failure = Failure::invalid_plan(
            source.name(),
            errors,
            crate::plan_file::render(source, issues),
        );
        failure.validation = Some(Box::new(plan_run::Validation::invalid(source, issues)));
        failure
    }

    /// A lifecycle step that could not be taken: refused requests and invalid plans are the
    /// user's to fix (2), a failing ledger may be either, the rest is not (1).
    pub(crate) fn lifecycle(error: plan_run::LifecycleError) -> Self {
        use plan_run::LifecycleError;
        match error {
            LifecycleError::Ledger(error) => Failure::ledger(error),
            LifecycleError::Refused(message) => Failure::input(message),
            error @ LifecycleError::StillRunning { .. } => Failure::input(format!(
                "{error}; stop it first, or resume with --force if that process is not plan-cli"
            )),
            error @ LifecycleError::PlanDiffers { .. } => Failure::input(format!(
                "{error}; resume without --plan to use the stored plan, or with --force to use this one"
            )),
            LifecycleError::Policy(refused) => Failure::input(refused.to_string()),
            error @ LifecycleError::QueueNotKept { .. } => {
                Failure::input(format!("{error} with --queue URL"))
            }
            LifecycleError::StateFileUnusable {
                kept: false,
                source,
            } => Failure::input(format!("--state-file {source}")),
            LifecycleError::StateFileUnusable { kept: true, source } => Failure::input(format!(
                "the run's state file {source}; give it another with --state-file FILE"
            )),
            LifecycleError::Generate(error) => Failure::model(&error, ""),
            LifecycleError::Replan { run_id, source } => {
                Failure::model(&source, &format!("re-planning run {run_id}: "))
            }
            error @ LifecycleError::EventsFile { .. } => Failure::input(error.to_string()),
            LifecycleError::Prepare(error) => Failure::prepare(*error),
            LifecycleError::Tools(error) => Failure::tools(error),
            ref error @ LifecycleError::NotGated { ref id, .. } => {
                Failure::input(format!("--approve {id}: {error}"))
            }
            LifecycleError::InvalidPlan(invalid) => Failure::invalid_plan(
                invalid.plan_source.name(),
                invalid.error_count(),
                crate::plan_file::render(&invalid.plan_source, &invalid.issues),
            ),
            LifecycleError::Journal { ref run_id, .. } => {
                let resume = format!(": `plan-cli resume {run_id}`");
                Failure::internal(format!("{error}{resume}"))
            }
            // Including reasons a newer plan-run adds: not the input's fault until worded.
            error => Failure::internal(error.to_string()),
        }
    }

    /// A model's conversation that gave no plan (`what` says which, before the reason): the
    /// problems with its last answer and the answer itself, shortened; how to see more.
    pub(crate) fn model(error: &plan_run::model::LlmError, what: &str) -> Self {
        use plan_run::model::LlmError;
        match error {
            LlmError::Invalid { last_answer, .. } => {
                // Each line marked as the answer's: what the model wrote cannot pass for
                // plan-cli's own lines.
                let shown: Vec<String> = (plan_run::model::shortened(last_answer, 2000).lines())
                    .map(|line| format!("  │ {}", crate::output::one_line(line)))
                    .collect();
                let shown = shown.join("\n");
                Failure::new(
                    NO_VALID_PLAN,
                    format!(
                        "{what}{error}\nits last answer:\n{shown}\n(--max-retries gives it more tries; --transcript FILE keeps every request and answer)"
                    ),
                )
            }
            LlmError::Timeout { .. } => Failure::new(
                MODEL_FAILED,
                format!("{what}{error} (--timeout gives it longer)"),
            ),
            LlmError::Context { .. } => Failure::new(
                MODEL_FAILED,
                format!(
                    "{what}{error} (--allow-tool narrows the tools; --context-tokens N if the model holds more)"
                ),
            ),
            error => Failure::new(MODEL_FAILED, format!("{what}{error}")),
        }
    }

    /// Tools that could not be found: a server that does not start or answer, an MCP
    /// configuration that cannot be read, or none where `--server` asks for one.
    pub(crate) fn tools(error: plan_run::ToolsError) -> Self {
        match error {
            plan_run::ToolsError::NoConfig { server } => Failure::input(format!(
                "--server {server}: there is no MCP configuration (give --mcp-config FILE, or write .plan/{})",
                plan_run::MCP_CONFIG_NAME
            )),
            error => Failure::input(error.to_string()),
        }
    }

    /// A plan that could not be prepared: its problems as diagnostics, or why its tools or
    /// inputs could not be had.
    pub(crate) fn prepare(error: plan_run::PrepareError) -> Self {
        match error {
            plan_run::PrepareError::Invalid(problems) => {
                Failure::plan_issues(&problems.source, &problems.issues)
            }
            plan_run::PrepareError::Tools(error) => Failure::tools(error),
            ref error @ plan_run::PrepareError::NotJson {
                ref name, ref text, ..
            } => Failure::input(format!(
                "--var {name}={text}: {error}; quote a string as --var-json '{name}=\"{text}\"'"
            )),
        }
    }

    /// A plan or variables that could not be read; the library's words, with the flags that
    /// gave them.
    pub(crate) fn plan_input(error: plan_run::InputError) -> Self {
        use plan_run::InputError;
        match error {
            InputError::Ledger(error) => Failure::lifecycle(error),
            InputError::GivenTwice(name) => Failure::input(format!(
                "variable `{name}` is given by both --var and --var-json; give it once"
            )),
            error @ InputError::NotStored(_) => {
                Failure::input(format!("{error} (see `plan-cli plan list`)"))
            }
            InputError::Folder { path, why } => {
                Failure::input(format!("--cwd {}: {why}", path.display()))
            }
            InputError::InvalidVariables(ref invalid) => {
                let mut failure = Failure::input(error.to_string());
                failure.diagnostics =
                    crate::plan_file::render(&invalid.plan_source, &invalid.issues);
                failure
            }
            error => Failure::input(error.to_string()),
        }
    }

    /// A ledger that cannot be opened or read: a wrong `--db`, a foreign or newer file, a
    /// read-only directory are the user's to fix (2); a failing disk is not (1).
    pub(crate) fn ledger(error: StoreError) -> Self {
        let code = match error {
            StoreError::Sqlite(_) | StoreError::Damaged { .. } => 1,
            _ => INVALID_INPUT,
        };
        let mut message = error.to_string();
        if matches!(error, StoreError::PlanExists(_)) {
            message.push_str(" (remove it first, or add with --force)");
        }
        if matches!(error, StoreError::Missing { .. }) {
            message.push_str(" (runs are recorded there; use --db or PLAN_DB to point elsewhere)");
        }
        if matches!(error, StoreError::Open { .. } | StoreError::Foreign { .. }) {
            message.push_str("\nrecord runs elsewhere with --db PATH or PLAN_DB=PATH");
        }
        Failure::new(code, message)
    }
}

/// Each library error becomes a failure as its `Failure::…` words it, so that `?` does.
macro_rules! failure_from {
    ($($error:ty => $word:path),* $(,)?) => {
        $(impl From<$error> for Failure {
            fn from(error: $error) -> Self {
                $word(error)
            }
        })*
    };
}

failure_from!(
    StoreError => Failure::ledger,
    plan_run::InputError => Failure::plan_input,
    plan_run::LifecycleError => Failure::lifecycle,
    plan_run::ToolsError => Failure::tools,
    plan_run::PrepareError => Failure::prepare,
);
