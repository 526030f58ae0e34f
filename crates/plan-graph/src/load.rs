//! Text → [`Plan`]: parse, normalise the formats' aliases and forms, validate.

use std::path::Path;

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::issue::{Issue, Location, Source};
use crate::model::{Plan, RawPlan};
use crate::source::PlanPath;
use crate::{normalize, validate};

/// The syntax of a plan document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// JSON.
    Json,
    /// YAML 1.2.
    Yaml,
}

impl Format {
    /// YAML for `.yaml` and `.yml`, JSON otherwise.
    pub fn from_path(path: &Path) -> Format {
        match path.extension().and_then(|e| e.to_str()) {
            Some(ext) if ext.eq_ignore_ascii_case("yaml") || ext.eq_ignore_ascii_case("yml") => {
                Format::Yaml
            }
            _ => Format::Json,
        }
    }
}

/// What the caller will supply beyond the plan's own `variables`.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// Names of variables given on the command line (`--var`), so that reading them is fine.
    pub provided_variables: Vec<String>,
    /// The tools that exist, when known: a step naming another is an error, reported with
    /// every other problem of the plan.
    pub known_tools: Option<Vec<String>>,
    /// Bare tool names that several MCP servers have, with their qualified names: a step
    /// naming one is told to choose.
    pub ambiguous_tools: std::collections::BTreeMap<String, Vec<String>>,
    /// The largest document read, in bytes ([`MAX_PLAN_BYTES`] when `None`).
    pub max_bytes: Option<usize>,
}

/// A valid plan with the source it came from and any warnings.
#[derive(Debug, Clone)]
pub struct LoadedPlan {
    /// The normalised plan.
    pub plan: Plan,
    /// Its text, for diagnostics found later (unknown tools, say).
    pub source: Source,
    /// Problems that do not stop the plan from running.
    pub warnings: Vec<Issue>,
}

/// A plan that cannot run, with every problem found.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{} is not a valid plan ({} error{})", .plan_source.name(), self.error_count(), if self.error_count() == 1 { "" } else { "s" })]
pub struct InvalidPlan {
    /// Its text.
    pub plan_source: Source,
    /// Errors and warnings, in document order.
    pub issues: Vec<Issue>,
}

impl InvalidPlan {
    /// How many of the issues are errors.
    pub fn error_count(&self) -> usize {
        self.issues.iter().filter(|i| i.is_error()).count()
    }
}

/// The largest plan document read, in bytes: ten times a 100,000-step plan. JSON and YAML
/// also bound nesting (128 levels), and conditions have their own limits
/// ([`crate::MAX_CONDITION_BYTES`]).
pub const MAX_PLAN_BYTES: usize = 128 * 1024 * 1024;

/// Parses, normalises and validates a plan.
pub fn load(
    source: Source,
    format: Format,
    options: &LoadOptions,
) -> Result<LoadedPlan, InvalidPlan> {
    let limit = options.max_bytes.unwrap_or(MAX_PLAN_BYTES);
    if source.text().len() > limit {
        let issue = Issue {
            location: Location::Nowhere,
            ..Issue::error(
                "plan::too_large",
                PlanPath::root(),
                format!(
                    "the plan is {} bytes; at most {limit} are read",
                    source.text().len()
                ),
            )
        };
        return Err(InvalidPlan {
            plan_source: source,
            issues: vec![issue],
        });
    }
    let raw = match parse::<RawPlan>(&source, format) {
        Ok(raw) => raw,
        Err(issue) => {
            return Err(InvalidPlan {
                plan_source: source,
                issues: vec![*issue],
            });
        }
    };
    let (plan, mut issues) = normalize::normalize(raw);
    issues.extend(validate::validate(&plan, options));
    if issues.iter().any(Issue::is_error) {
        return Err(InvalidPlan {
            plan_source: source,
            issues,
        });
    }
    Ok(LoadedPlan {
        plan,
        source,
        warnings: issues,
    })
}

/// Parses a variables file (`--vars FILE`): one JSON or YAML object of name → value.
pub fn load_variables(source: Source, format: Format) -> Result<Map<String, Value>, InvalidPlan> {
    match parse::<Map<String, Value>>(&source, format) {
        Ok(variables) => Ok(variables),
        Err(issue) => Err(InvalidPlan {
            plan_source: source,
            issues: vec![*issue],
        }),
    }
}

/// The issue is boxed: it is large, and the happy path should not pay for its size.
fn parse<T: DeserializeOwned>(source: &Source, format: Format) -> Result<T, Box<Issue>> {
    let text = source.text();
    match format {
        Format::Json => {
            let mut deserializer = serde_json::Deserializer::from_str(text);
            match serde_path_to_error::deserialize(&mut deserializer) {
                Ok(plan) => deserializer
                    .end()
                    .map(|()| plan)
                    .map_err(|error| Box::new(json_issue(source, &error, PlanPath::root()))),
                Err(error) => {
                    let path = plan_path(error.path());
                    Err(Box::new(json_issue(source, error.inner(), path)))
                }
            }
        }
        Format::Yaml => {
            serde_saphyr::from_str_with_options(text, yaml_options()).map_err(|error| {
                let offset = error.location().map_or(0, |location| {
                    let line = usize::try_from(location.line()).unwrap_or(1);
                    let column = usize::try_from(location.column()).unwrap_or(1);
                    offset_of(text, line, column.saturating_sub(1))
                });
                let message = yaml_message(&error);
                let schema = [
                    "unknown field",
                    "duplicate field",
                    "missing field",
                    "invalid type",
                    "invalid value",
                    "invalid length",
                    "unknown variant",
                ]
                .iter()
                .any(|phrase| message.contains(phrase));
                Box::new(serde_issue(source, &message, offset, !schema))
            })
        }
    }
}

fn json_issue(source: &Source, error: &serde_json::Error, path: PlanPath) -> Issue {
    let text = source.text();
    // serde_json counts columns in bytes.
    let line_start = offset_of(text, error.line(), 0);
    let offset = (line_start + error.column().saturating_sub(1)).min(text.len());
    let message = error.to_string();
    let suffix = format!(" at line {} column {}", error.line(), error.column());
    let message = message.strip_suffix(&suffix).unwrap_or(&message);
    let syntax = error.is_syntax() || error.is_eof();
    let mut issue = serde_issue(source, message, offset, syntax);
    // serde_json reports a type error after the value; the path finds the value itself.
    if !syntax
        && issue.code == "plan::schema"
        && !path.0.is_empty()
        && let Some(range) = source.range(&Location::Path { path, key: false })
    {
        issue.location = Location::Span(range);
    }
    issue
}

/// YAML 1.2's core schema, not 1.1's: `yes`, `no`, `on`, `off`, `y` and `n` are strings, as
/// are `1_000` and numbers written with a leading zero (`012`, kept as written rather than
/// read as 12.0).
fn yaml_options() -> serde_saphyr::Options {
    let mut options = serde_saphyr::Options::default();
    options.strict_booleans = true;
    options.underscored_numbers_as_strings = true;
    options.leading_zero_numbers_as_strings = true;
    options
}

/// serde-saphyr's Display adds `error: line L column C:` and a snippet; diagnostics draw
/// their own, so keep only the message.
fn yaml_message(error: &serde_saphyr::Error) -> String {
    let text = error.to_string();
    let mut first = text.lines().next().unwrap_or("invalid YAML").trim();
    first = first.strip_prefix("error: ").unwrap_or(first);
    if first.starts_with("line ")
        && let Some(colon) = first.find(": ")
    {
        first = &first[colon + 2..];
    }
    first.to_owned()
}

fn plan_path(path: &serde_path_to_error::Path) -> PlanPath {
    let mut out = PlanPath::root();
    for segment in path.iter() {
        match segment {
            serde_path_to_error::Segment::Seq { index } => out = out.index(*index),
            serde_path_to_error::Segment::Map { key } => out = out.key(key),
            _ => {}
        }
    }
    out
}

/// Turns a serde message into an issue, pointing at the key it is about where it names one.
fn serde_issue(source: &Source, message: &str, offset: usize, syntax: bool) -> Issue {
    let at_offset = || Location::Span(offset..(offset + 1).min(source.text().len()).max(offset));
    let mut issue = Issue {
        location: at_offset(),
        ..Issue::error("plan::syntax", PlanPath::root(), message)
    };
    if syntax {
        issue.label = "here".to_owned();
        return issue;
    }
    issue.code = "plan::schema";
    if let Some(field) = backticked_after(message, "unknown field `") {
        issue.code = "plan::unknown_field";
        issue.message = format!("unknown field `{field}`");
        issue.label = "not a field here".to_owned();
        let expected = expected_names(message);
        issue.help = Some(match closest(&field, &expected) {
            Some(name) => format!("did you mean `{name}`?"),
            None if expected.is_empty() => "remove it".to_owned(),
            None => format!(
                "the fields here are {}",
                expected
                    .iter()
                    .map(|n| format!("`{n}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        });
        if let Some(range) = source.key_near(&field, offset) {
            issue.location = Location::Span(range);
        }
    } else if let Some(field) = backticked_after(message, "duplicate field `") {
        issue.code = "plan::duplicate_field";
        issue.label = "written twice (an alias counts as the same field)".to_owned();
        if let Some(range) = source.key_near(&field, offset) {
            issue.location = Location::Span(range);
        }
    } else if let Some(field) = backticked_after(message, "missing field `") {
        issue.code = "plan::missing_field";
        issue.message = format!("missing field `{field}`");
        issue.label = format!("this needs `{field}`");
    }
    issue
}

fn backticked_after(message: &str, prefix: &str) -> Option<String> {
    let start = message.find(prefix)? + prefix.len();
    let len = message[start..].find('`')?;
    Some(message[start..start + len].to_owned())
}

/// The field names serde lists after "expected one of" (backticked by serde_json, bare by
/// serde-saphyr).
fn expected_names(message: &str) -> Vec<String> {
    let Some(start) = message.find("expected one of ") else {
        return match backticked_after(message, "expected `") {
            Some(name) => vec![name],
            None => Vec::new(),
        };
    };
    let list = &message[start + "expected one of ".len()..];
    list.split(',')
        .map(|name| name.trim().trim_matches('`').to_owned())
        .filter(|name| !name.is_empty())
        .collect()
}

/// The candidate nearest to `name`, if it is near enough to be a typo (for "did you mean").
pub fn closest<'c>(name: &str, candidates: &'c [String]) -> Option<&'c str> {
    candidates
        .iter()
        .map(|c| (strsim::levenshtein(name, c), c.as_str()))
        .filter(|(distance, c)| *distance <= 2.max(c.len() / 3))
        .min()
        .map(|(_, c)| c)
}

/// Byte offset of a 1-based line and a 0-based column counted in characters.
fn offset_of(text: &str, line: usize, column: usize) -> usize {
    let line_start: usize = text
        .split_inclusive('\n')
        .take(line.saturating_sub(1))
        .map(str::len)
        .sum();
    let rest = &text[line_start.min(text.len())..];
    line_start
        + rest
            .char_indices()
            .nth(column)
            .map_or(rest.len(), |(i, _)| i)
}

#[cfg(test)]
mod tests {
    #[test]
    fn offsets_count_characters_within_the_line() {
        assert_eq!(super::offset_of("ab\ncdé f", 2, 4), 8);
        assert_eq!(super::offset_of("ab\ncd", 1, 0), 0);
        assert_eq!(super::offset_of("ab", 5, 5), 2);
    }

    #[test]
    fn closest_finds_typos_only() {
        let names = vec!["depends_on".to_owned(), "tool".to_owned()];
        assert_eq!(super::closest("depend_on", &names), Some("depends_on"));
        assert_eq!(super::closest("tol", &names), Some("tool"));
        assert_eq!(super::closest("completely_else", &names), None);
    }
}
