//! Commands about plans rather than runs: `validate`, `show`, `tools`, and the plan registry.

use std::io::Write;
use std::path::Path;

use plan_graph::{Plan, Severity};

use super::{pretty, print};
use crate::cli::{GraphFormat, JsonArgs, PlanCommand, ShowArgs, ToolsArgs};
use crate::exit::Failure;
use crate::output::count;
use crate::plan_file::{prepare, prepare_text};
use crate::toolbox::Toolbox;
use plan_run::Ledger;

pub(crate) fn validate(
    args: &crate::cli::ValidateArgs,
    toolbox: &Toolbox,
    ledger: &Ledger,
) -> Result<i32, Failure> {
    // Judged as `run` would judge it: a stored plan a model or a client wrote under its
    // author's policy (widened by the same flags), the operator's own under `--policy`.
    let author = args.plan.input().author(ledger)?;
    let policy = crate::policy::judges(&args.policy, author)
        .then(|| {
            let folder = args.plan.input().folder(None)?;
            Ok::<_, Failure>(crate::policy::of(&args.policy)?.in_folder(folder.as_deref()))
        })
        .transpose()?;
    if args.json {
        // Diagnostics as data on stdout, not drawn on stderr.
        let mut validation = match crate::plan_file::prepare_quietly(&args.plan, toolbox, ledger) {
            Ok(ready) => plan_run::Validation::judged(&ready, author, policy.as_ref()),
            Err(Failure {
                validation: Some(validation),
                ..
            }) => *validation,
            Err(failure) => return Err(failure),
        };
        validation
            .reword(|report| crate::plan_file::help_here(report.code, report.help.as_deref()));
        print(&pretty(&validation))?;
        return Ok(if validation.valid {
            0
        } else {
            crate::exit::INVALID_INPUT
        });
    }
    let ready = prepare(&args.plan, toolbox, ledger, Severity::Error)?;
    if let Some(policy) = &policy
        && let Err(refused) = policy.judge(author, &ready)
    {
        return Err(Failure::plan_issues(
            &ready.loaded.source,
            &refused.issues(),
        ));
    }
    print(&format!("{}\n", plan_run::summary::verdict(&ready)))?;
    Ok(0)
}

pub(crate) fn show(args: &ShowArgs, toolbox: &Toolbox, ledger: &Ledger) -> Result<i32, Failure> {
    let ready = prepare(&args.plan, toolbox, ledger, Severity::Warning)?;
    print(&draw(
        &ready.loaded.plan,
        ready.program.plan_id(),
        args.format,
    ))?;
    Ok(0)
}

fn draw(plan: &Plan, plan_id: &str, format: GraphFormat) -> String {
    match format {
        GraphFormat::Ascii => plan_graph::render::titled(plan, plan_id),
        GraphFormat::Mermaid => plan_graph::render::mermaid(plan),
        GraphFormat::Dot => plan_graph::render::dot(plan),
    }
}

pub(crate) fn tools(args: &ToolsArgs, toolbox: &Toolbox) -> Result<i32, Failure> {
    // Not REDIS_URL, as `run` does: listing tools should not fail on a Redis nobody named.
    let catalog =
        toolbox.block_on(toolbox.catalog(args.server.as_deref(), args.queue.as_deref()))?;
    let (infos, broken) = (catalog.tools, catalog.broken);
    let text = if args.json {
        pretty(&infos)
    } else {
        let rows: Vec<Vec<String>> = (infos.iter())
            .map(|info| {
                let risk = serde_json::to_value(info.risk).unwrap_or_default();
                let risk = risk.as_str().unwrap_or("");
                let about = plan_run::words::first_sentence(&info.description);
                [&*info.name, &info.source, risk, about]
                    .map(str::to_owned)
                    .to_vec()
            })
            .collect();
        crate::output::columns(&rows, &[])
    };
    print(&text)?;
    for (server, error) in &broken {
        say!(
            "MCP server `{server}` is not listed: {}",
            crate::output::terminal_safe(error)
        );
    }
    Ok(i32::from(!broken.is_empty()))
}

pub(crate) fn plan(
    command: &PlanCommand,
    toolbox: &Toolbox,
    ledger: &Ledger,
) -> Result<i32, Failure> {
    match command {
        PlanCommand::Add { file, force, .. } => add(file, *force, toolbox, ledger),
        PlanCommand::Create {
            goal,
            model,
            id,
            run,
            max_retries,
            force,
            json,
            yes,
            policy: policy_args,
            asking,
            ..
        } => {
            let policy = crate::policy::of(policy_args)?;
            let goal = plan_run::Goal {
                id: id.as_deref(),
                max_retries: *max_retries,
                force: *force,
                ..plan_run::Goal::new(goal, plan_run::Author::Model)
            };
            let endpoint = endpoint(model.as_deref())?.ok_or_else(|| {
                Failure::input(
                    "no model endpoint: set PLAN_LLM_URL (or OPENAI_BASE_URL) to an OpenAI-compatible API's base URL ending in /v1, e.g. http://localhost:11434/v1 for Ollama",
                )
            })?;
            // Opened before the model is asked: a path it cannot write fails now, not after.
            let transcript = (asking.transcript.as_ref())
                .map(|path| {
                    std::fs::File::create(path)
                        .map(|file| (path, file))
                        .map_err(|error| {
                            Failure::input(format!("--transcript {}: {error}", path.display()))
                        })
                })
                .transpose()?;
            let mut model = plan_run::http_model(ledger, endpoint, asking.settings())?;
            model.on_notice(|text| say!("{}", crate::output::one_line(text)));
            let created = toolbox.block_on(plan_run::plan_from_goal(
                &mut model, &goal, toolbox, &policy, ledger,
            ));
            if let Some((path, mut file)) = transcript {
                let text = pretty(&model.transcript());
                file.write_all(text.as_bytes()).map_err(|error| {
                    Failure::input(format!("--transcript {}: {error}", path.display()))
                })?;
            }
            // Only the next request's start is lost: not worth this one's outcome.
            if let Err(error) = plan_run::remember_format(ledger, &model) {
                say!("warning: the response format the model took is not kept: {error}");
            }
            let plan_run::NewPlan { plan_id, plan } = match created {
                Ok(created) => created,
                Err(plan_run::LifecycleError::Generate(error)) => {
                    if *json {
                        print(&pretty(&error.to_json()))?;
                    }
                    return Err(Failure::model(&error, ""));
                }
                Err(error) => return Err(error.into()),
            };
            let text = plan_run::PlanText::json(&plan_id, plan.to_string(), &plan_id);
            let ready = prepare_text(text, Default::default(), toolbox, Severity::Warning)?;
            if *json {
                print(&pretty(
                    &serde_json::json!({"plan_id": plan_id, "plan": plan}),
                ))?;
            } else {
                print(&draw(&ready.loaded.plan, &plan_id, GraphFormat::Ascii))?;
                if !*run {
                    print(&format!(
                        "stored plan `{plan_id}`; run it with `plan-cli run {plan_id}`\n"
                    ))?;
                }
            }
            if !*run {
                return Ok(0);
            }
            // A model's plan runs only once a person has seen every call it can make.
            let listing = crate::output::calls_of(&ready.program);
            let mut err = std::io::stderr();
            let _ = writeln!(err, "{listing}");
            if !*yes {
                use std::io::IsTerminal;
                if !std::io::stdin().is_terminal() || !std::io::stderr().is_terminal() {
                    return Err(Failure::input(
                        "a model's plan runs only when a person agrees: run `plan create --run` on a terminal to be asked, or add --yes",
                    ));
                }
                let shown = crate::output::one_line(&plan_id);
                let _ = write!(err, "Run plan `{shown}` with these calls? [y/N] ");
                let _ = err.flush();
                let mut answer = String::new();
                std::io::stdin()
                    .read_line(&mut answer)
                    .map_err(|e| Failure::input(format!("cannot read the answer: {e}")))?;
                if !matches!(answer.trim(), "y" | "Y" | "yes" | "Yes") {
                    let _ = writeln!(err, "not run; stored as `{plan_id}`");
                    return Ok(0);
                }
            }
            drop(ready);
            let mut args = crate::cli::RunArgs::stored(&plan_id)
                .ok_or_else(|| Failure::internal("cannot make the arguments of `run`"))?;
            *args.policy = policy_args.clone();
            args.plan.stored_only = true;
            args.execution.json = *json;
            super::run_as(&args, plan_run::Author::Model, toolbox, ledger)
        }
        PlanCommand::List(JsonArgs { json }) => list(*json, ledger),
        PlanCommand::Show { id, format, .. } => {
            let stored = plan_run::PlanInput {
                path: id.into(),
                stored_only: true,
            };
            let text = stored.read(ledger, &mut std::io::empty())?;
            let ready = prepare_text(text, Default::default(), toolbox, Severity::Warning)?;
            print(&draw(&ready.loaded.plan, ready.program.plan_id(), *format))?;
            Ok(0)
        }
        PlanCommand::Rm { id } => {
            plan_run::remove_plan(&mut ledger.open_existing()?, id)?;
            print(&format!("removed plan `{id}`\n"))?;
            Ok(0)
        }
    }
}

/// The model endpoint the environment names (`plan_run::model::Endpoint::from_env`), with `model`.
pub(crate) fn endpoint(model: Option<&str>) -> Result<Option<plan_run::model::Endpoint>, Failure> {
    plan_run::model::Endpoint::from_env(model, &|name| std::env::var(name).ok())
        .map_err(|_| Failure::input("no model: give --model NAME or set PLAN_LLM_MODEL"))
}

/// The model `--replan` asks; checked before the run, so a missing one is said at once.
pub(crate) fn replan_model(ledger: &Ledger) -> Result<plan_run::model::Http, Failure> {
    let endpoint = plan_run::model::Endpoint::from_env(None, &|name| std::env::var(name).ok())
        .ok()
        .flatten()
        .ok_or_else(|| {
            Failure::input(
                "--replan needs a model: set PLAN_LLM_URL (an OpenAI-compatible API's base URL ending in /v1) and PLAN_LLM_MODEL",
            )
        })?;
    let mut model = plan_run::http_model(ledger, endpoint, plan_run::model::Settings::default())?;
    model.on_notice(|text| say!("{}", crate::output::one_line(text)));
    Ok(model)
}

/// Validates the plan as `run` would, then stores its text under its id.
fn add(file: &Path, force: bool, toolbox: &Toolbox, ledger: &Ledger) -> Result<i32, Failure> {
    if !file.is_file() {
        return Err(Failure::input(format!(
            "cannot read plan `{}`: not a file",
            file.display()
        )));
    }
    let input = plan_run::PlanInput {
        path: file.to_path_buf(),
        stored_only: false,
    };
    let plan = input.read(ledger, &mut std::io::empty())?;
    let ready = prepare_text(plan, Default::default(), toolbox, Severity::Warning)?;
    plan_run::store_prepared(ledger, &ready, force)?;
    let plan_id = ready.program.plan_id();
    let steps = ready.program.len();
    let steps = count(steps, "step", "steps");
    print(&format!(
        "stored plan `{plan_id}` ({steps}); run it with `plan-cli run {plan_id}`\n"
    ))?;
    Ok(0)
}

fn list(json: bool, ledger: &Ledger) -> Result<i32, Failure> {
    let plans = if ledger.exists() {
        plan_run::stored_plans(&ledger.open()?)?
    } else {
        Vec::new()
    };
    let text = if json {
        pretty(&plans)
    } else if plans.is_empty() {
        "no stored plans (add one with `plan-cli plan add FILE`)\n".to_owned()
    } else {
        let rows: Vec<Vec<String>> = (plans.iter())
            .map(|p| {
                vec![
                    p.plan_id.clone(),
                    p.added_at.clone(),
                    p.title.clone().unwrap_or_default(),
                ]
            })
            .collect();
        crate::output::columns(&rows, &[])
    };
    print(&text)?;
    Ok(0)
}

/// `init`: makes `.plan/` here (the project's ledger and MCP configuration go there, and every
/// command run below this folder finds it) and writes a starter plan.
pub(crate) fn init(args: &crate::cli::InitArgs) -> Result<i32, Failure> {
    plan_run::Project::init(Path::new("."), &args.plan, args.force).map_err(
        |error| match error {
            plan_run::InitError::Exists(_) => Failure::input(format!(
                "{error}; give --force to overwrite it, or another file name"
            )),
            error => Failure::input(error.to_string()),
        },
    )?;
    let plan = args.plan.display();
    print(&format!(
        "created .plan/ (the ledger of this project) and {plan}\n\
         next: plan-cli validate {plan}; plan-cli run {plan}\n"
    ))?;
    Ok(0)
}

/// `import tasks DIR`: a task breakdown as a plan of task steps, printed or written.
pub(crate) fn import(command: &crate::cli::ImportCommand) -> Result<i32, Failure> {
    let crate::cli::ImportCommand::Tasks {
        dir,
        implement,
        repo,
        no_layer_barrier,
        verify_after_merge,
        output,
    } = command;
    let options = plan_run::ImportTasks {
        implement: implement.clone(),
        repo: repo.clone(),
        layer_barrier: !no_layer_barrier,
        verify_after_merge: verify_after_merge.clone(),
    };
    let plan_run::Imported {
        plan,
        shell_checks: shelled,
    } = plan_run::import_tasks(dir, &options).map_err(|error| Failure::input(error.to_string()))?;
    // What a shell will read, shown before anything runs it (one line each, control
    // characters shown escaped: a command cannot hide itself or another on the terminal).
    if !shelled.is_empty() {
        say!(
            "{} with `sh -c` (a shell reads {}: look before you run the plan):",
            count(shelled.len(), "check runs", "checks run"),
            if shelled.len() == 1 { "it" } else { "them" }
        );
        for check in &shelled {
            let whose = match (&check.task, &check.source) {
                (Some(task), Some((file, line))) => {
                    format!("{task} ({}:{line})", file.display())
                }
                (Some(task), None) => task.clone(),
                (None, _) => "--verify-after-merge".to_owned(),
            };
            let command = crate::output::terminal_safe(&check.command).replace('\n', "\\n");
            say!("  {}: {command}", crate::output::terminal_safe(&whose));
        }
    }
    let text = format!("{:#}\n", plan);
    match output {
        None => print(&text)?,
        Some(path) => {
            std::fs::write(path, &text).map_err(|error| {
                Failure::input(format!("cannot write {}: {error}", path.display()))
            })?;
            let steps = plan["steps"].as_array().map_or(0, Vec::len);
            say!(
                "wrote {0} ({1}); next: plan-cli validate {0}; plan-cli run {0}",
                path.display(),
                count(steps, "task", "tasks")
            );
        }
    }
    Ok(0)
}

/// `schema`: the plan format's JSON Schema on stdout.
pub(crate) fn schema(args: &crate::cli::SchemaArgs) -> Result<i32, Failure> {
    if args.strict {
        return Err(Failure::input(
            "--strict is for --for generation: the editors' schema has no strict variant",
        ));
    }
    let mut text = serde_json::to_string_pretty(&plan_graph::plan_schema()).unwrap_or_default();
    text.push('\n');
    print(&text)?;
    Ok(0)
}

/// `schema --for generation`: the schema `plan create` sends, for the tools the model's policy
/// allows (`--strict`: its strict variant, with what it leaves out on stderr).
pub(crate) fn generation_schema(
    args: &crate::cli::SchemaArgs,
    toolbox: &Toolbox,
) -> Result<i32, Failure> {
    let policy = crate::policy::of(&args.policy)?;
    let tools = toolbox.block_on(toolbox.described(|info| policy.allows_tool(info)));
    let schema = plan_run::schema_for(&tools);
    let chosen = if args.strict {
        for line in &schema.left_out {
            say!("left out: {line}");
        }
        schema.strict.ok_or_else(|| {
            Failure::input(
                "no tool the policy allows can be said strictly: there is no strict variant",
            )
        })?
    } else {
        schema.full
    };
    let mut text = serde_json::to_string_pretty(&chosen).unwrap_or_default();
    text.push('\n');
    print(&text)?;
    Ok(0)
}

/// `completions SHELL`: the completion script on stdout.
pub(crate) fn completions(shell: clap_complete::Shell) -> Result<i32, Failure> {
    use clap::CommandFactory;
    let mut script = Vec::new();
    clap_complete::generate(
        shell,
        &mut crate::cli::Cli::command(),
        "plan-cli",
        &mut script,
    );
    print(&String::from_utf8_lossy(&script))?;
    Ok(0)
}
