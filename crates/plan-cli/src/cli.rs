//! The command line, as clap sees it.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

/// Run plans: graphs of tool calls with dependencies, variables and retries.
#[derive(Debug, Parser)]
#[command(name = "plan-cli", version, about, long_about = None)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run a plan and print its records
    Run(RunArgs),
    /// Check a plan without running it
    Validate(PlanArgs),
    /// Draw a plan's dependency graph
    Show(ShowArgs),
    /// List the tools plans can call
    Tools(ToolsArgs),
}

#[derive(Debug, clap::Args)]
pub(crate) struct PlanArgs {
    /// The plan file (.json, .yaml or .yml); `-` reads JSON from stdin
    pub(crate) plan: PathBuf,
    /// Set a variable (the value is parsed as JSON when it parses, else taken as a string)
    #[arg(long = "var", value_name = "NAME=VALUE", value_parser = parse_var)]
    pub(crate) vars: Vec<(String, serde_json::Value)>,
    /// Read variables from a JSON or YAML object; `--var` wins over it, it wins over the plan
    #[arg(long = "vars", value_name = "FILE")]
    pub(crate) vars_file: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    pub(crate) plan: PlanArgs,
    /// Print one JSON object with every record instead of a summary
    #[arg(long)]
    pub(crate) json: bool,
    /// Most steps running at once (overrides the plan's `max_concurrency`; default 4)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_concurrency: Option<u32>,
    /// Resolve and print what would be called, calling nothing
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Append events to FILE as NDJSON while the run goes
    #[arg(long, value_name = "FILE")]
    pub(crate) events: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum GraphFormat {
    /// Seed 003's terminal picture
    Ascii,
    /// A Mermaid flowchart
    Mermaid,
    /// Graphviz DOT
    Dot,
}

#[derive(Debug, clap::Args)]
pub(crate) struct ShowArgs {
    #[command(flatten)]
    pub(crate) plan: PlanArgs,
    /// How to draw it
    #[arg(long, value_enum, default_value = "ascii")]
    pub(crate) format: GraphFormat,
}

#[derive(Debug, clap::Args)]
pub(crate) struct ToolsArgs {
    /// Print a JSON list with each tool's input schema
    #[arg(long)]
    pub(crate) json: bool,
}

fn parse_var(text: &str) -> Result<(String, serde_json::Value), String> {
    let Some((name, value)) = text.split_once('=') else {
        return Err(format!("expected NAME=VALUE, got `{text}`"));
    };
    if name.is_empty() {
        return Err("the variable name is empty".to_owned());
    }
    let value =
        serde_json::from_str(value).unwrap_or_else(|_| serde_json::Value::String(value.to_owned()));
    Ok((name.to_owned(), value))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn var_values_are_json_when_they_parse() {
        assert_eq!(super::parse_var("n=3"), Ok(("n".into(), json!(3))));
        assert_eq!(
            super::parse_var("o={\"a\":[1]}"),
            Ok(("o".into(), json!({"a": [1]})))
        );
        assert_eq!(
            super::parse_var("s=hello world"),
            Ok(("s".into(), json!("hello world")))
        );
        assert_eq!(super::parse_var("e="), Ok(("e".into(), json!(""))));
        assert_eq!(super::parse_var("eq=a=b"), Ok(("eq".into(), json!("a=b"))));
        assert!(super::parse_var("novalue").is_err());
        assert!(super::parse_var("=3").is_err());
    }

    #[test]
    fn the_cli_definition_is_consistent() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
