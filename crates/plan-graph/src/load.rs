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
    /// The plan, when the document read as one and only its validation failed: a caller can
    /// go on to find the problems compiling it finds too, and report everything at once.
    pub plan: Option<Box<Plan>>,
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
    if let Some(issue) = too_large(&source, limit, "plan") {
        return Err(InvalidPlan {
            plan_source: source,
            issues: vec![issue],
            plan: None,
        });
    }
    let raw = match parse::<RawPlan>(&source, format) {
        Ok(raw) => raw,
        Err(issue) => {
            // serde stops at the first problem; when the document itself reads, every step is
            // read on its own so that each one's first problem is reported at once.
            // (A document that does not read at all gives nothing here: serde's one issue.)
            let mut issues = every_schema_issue(&source, format);
            if issues.is_empty() {
                issues.push(*issue);
                return Err(InvalidPlan {
                    plan_source: source,
                    issues,
                    plan: None,
                });
            }
            // Every problem at once: with the fields that do not read set aside, the rest of
            // the plan is read and validated too (and a caller may compile it), so a problem of
            // shape does not hide one of meaning elsewhere.
            let plan = set_aside(&source, format).map(|(raw, removed)| {
                let (plan, mut more) = normalize::normalize(raw);
                more.extend(validate::validate(&plan, options));
                issues.extend(
                    more.into_iter()
                        .filter(|issue| !about_set_aside(issue, &removed)),
                );
                Box::new(plan)
            });
            return Err(InvalidPlan {
                plan_source: source,
                issues,
                plan,
            });
        }
    };
    let (plan, mut issues) = normalize::normalize(raw);
    issues.extend(validate::validate(&plan, options));
    if issues.iter().any(Issue::is_error) {
        return Err(InvalidPlan {
            plan_source: source,
            issues,
            plan: Some(Box::new(plan)),
        });
    }
    Ok(LoadedPlan {
        plan,
        source,
        warnings: issues,
    })
}

/// The plan `source` holds with the fields that do not read set aside (each field of each step,
/// and of the plan, read on its own as `every_schema_issue` reads them), if the rest then
/// reads; `None` when a whole step does not (not an object, no id).
fn set_aside(source: &Source, format: Format) -> Option<(RawPlan, Vec<SetAside>)> {
    let document: Value = match format {
        Format::Json => serde_json::from_str(source.text()).ok()?,
        Format::Yaml => serde_saphyr::from_str_with_options(source.text(), yaml_options()).ok()?,
    };
    let Value::Object(mut top) = document else {
        return None;
    };
    let Some(Value::Array(steps)) = top.remove("steps") else {
        return None;
    };
    let reads = |object: &Map<String, Value>, step: bool| {
        let value = Value::Object(object.clone());
        if step {
            serde_json::from_value::<crate::model::RawStep>(value).is_ok()
        } else {
            serde_json::from_value::<RawPlan>(value).is_ok()
        }
    };
    let mut removed: Vec<SetAside> = Vec::new();
    // The fields that read alone (beside those the object cannot do without).
    let mut keep_readable =
        |object: Map<String, Value>, step: Option<usize>| -> Map<String, Value> {
            let is_step = step.is_some();
            let step_index = step;
            let step = is_step;
            let kept: &[&str] = if step {
                &["id", "index", "step_id"]
            } else {
                &["steps"]
            };
            let base: Map<String, Value> = object
                .iter()
                .filter(|(k, _)| kept.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let mut out = base.clone();
            for (key, value) in object {
                if kept.contains(&key.as_str()) {
                    continue;
                }
                let mut alone = base.clone();
                alone.insert(key.clone(), value.clone());
                if reads(&alone, step) {
                    out.insert(key, value);
                } else {
                    removed.push((step_index, key));
                }
            }
            out
        };
    let mut fixed = Vec::with_capacity(steps.len());
    for (i, step) in steps.into_iter().enumerate() {
        let Value::Object(object) = step else {
            return None;
        };
        let object = if reads(&object, true) {
            object
        } else {
            keep_readable(object, Some(i))
        };
        fixed.push(Value::Object(object));
    }
    top.insert("steps".to_owned(), Value::Array(Vec::new()));
    let mut top = if reads(&top, false) {
        top
    } else {
        keep_readable(top, None)
    };
    top.insert("steps".to_owned(), Value::Array(fixed));
    let raw = serde_json::from_value(Value::Object(top)).ok()?;
    Some((raw, removed))
}

/// A field set aside: its step (`None`: the plan's own) and its name.
type SetAside = (Option<usize>, String);

/// Whether `issue` is about a field that was set aside (or is the missing tool of a step that
/// had one set aside): its shape problem says it already.
fn about_set_aside(issue: &Issue, removed: &[SetAside]) -> bool {
    use crate::source::PathSegment;
    let Location::Path { path, .. } = &issue.location else {
        return false;
    };
    let (step, field) = match path.0.as_slice() {
        [
            PathSegment::Key(steps),
            PathSegment::Index(i),
            PathSegment::Key(field),
            ..,
        ] if steps == "steps" => (Some(*i), field.as_str()),
        // A step without a tool that had a field set aside: most likely the tool misspelt
        // (`tol: echo`), which its shape problem names.
        [PathSegment::Key(steps), PathSegment::Index(i)]
            if steps == "steps" && issue.code == "plan::missing_tool" =>
        {
            return removed.iter().any(|(s, _)| *s == Some(*i));
        }
        [PathSegment::Key(field), ..] => (None, field.as_str()),
        _ => return false,
    };
    let field = match field {
        "dependsOn" => "depends_on",
        other => other,
    };
    removed.iter().any(|(s, f)| *s == step && f == field)
}

/// The structural problems of a document that reads as JSON or YAML but not as a plan: the
/// first of each step (each read on its own), and the first of the rest. Empty when the
/// document is not an object with a list of steps (the caller keeps serde's one issue).
fn every_schema_issue(source: &Source, format: Format) -> Vec<Issue> {
    let document: Value = match format {
        Format::Json => match serde_json::from_str(source.text()) {
            Ok(value) => value,
            Err(_) => return Vec::new(),
        },
        Format::Yaml => match serde_saphyr::from_str_with_options(source.text(), yaml_options()) {
            Ok(value) => value,
            Err(_) => return Vec::new(),
        },
    };
    let Value::Object(mut top) = document else {
        return Vec::new();
    };
    let Some(Value::Array(steps)) = top.remove("steps") else {
        return Vec::new();
    };
    let mut issues = Vec::new();
    let read = |value: Value, base: PlanPath, step: bool| -> Option<Issue> {
        let result = if step {
            serde_path_to_error::deserialize::<_, crate::model::RawStep>(value).map(drop)
        } else {
            serde_path_to_error::deserialize::<_, RawPlan>(value).map(drop)
        };
        if let Err(error) = result {
            let mut path = base;
            path.0.extend(plan_path(error.path()).0);
            let field = path.0.iter().rev().find_map(|segment| match segment {
                crate::source::PathSegment::Key(key) => Some(key.clone()),
                crate::source::PathSegment::Index(_) => None,
            });
            let located = Location::Path {
                path: path.clone(),
                key: false,
            };
            // At the value the path names, or at the nearest part of it that is written.
            let mut at = path.clone();
            let offset = loop {
                let here = Location::Path {
                    path: at.clone(),
                    key: false,
                };
                if let Some(range) = source.range(&here) {
                    break range.start;
                }
                if at.0.pop().is_none() {
                    break 0;
                }
            };
            let mut issue = serde_issue(source, &error.inner().to_string(), offset, false, field);
            if source.range(&located).is_some() && issue.code == "plan::schema" {
                issue.location = located;
            }
            return Some(issue);
        }
        None
    };
    // Every field's own first problem: the object read once per field, with only that field
    // (and what the object cannot do without); the whole object's problem when none shows so.
    let each_field = |object: Map<String, Value>, base: PlanPath, step: bool| -> Vec<Issue> {
        let Some(whole) = read(Value::Object(object.clone()), base.clone(), step) else {
            return Vec::new();
        };
        let kept: Vec<&str> = if step {
            vec!["id", "index", "step_id"]
        } else {
            vec!["steps"]
        };
        let mut found = Vec::new();
        for (key, value) in &object {
            if kept.contains(&key.as_str()) {
                continue;
            }
            let mut alone: Map<String, Value> = object
                .iter()
                .filter(|(k, _)| kept.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            if !step {
                alone.insert("steps".to_owned(), Value::Array(Vec::new()));
            }
            alone.insert(key.clone(), value.clone());
            if let Some(issue) = read(Value::Object(alone), base.clone(), step) {
                found.push(issue);
            }
        }
        if found.is_empty() { vec![whole] } else { found }
    };
    for (i, step) in steps.into_iter().enumerate() {
        match step {
            Value::Object(object) => issues.extend(each_field(object, PlanPath::step(i), true)),
            other => {
                if let Some(issue) = read(other, PlanPath::step(i), true) {
                    issues.push(issue);
                }
            }
        }
    }
    top.insert("steps".to_owned(), Value::Array(Vec::new()));
    issues.extend(each_field(top, PlanPath::root(), false));
    // In document order.
    issues.sort_by_key(|issue| source.range(&issue.location).map_or(0, |range| range.start));
    issues
}

/// The issue of a `what` whose text is past `limit` bytes (none if it is not): it is not read.
fn too_large(source: &Source, limit: usize, what: &str) -> Option<Issue> {
    let bytes = source.text().len();
    (bytes > limit).then(|| Issue {
        location: Location::Nowhere,
        ..Issue::error(
            "plan::too_large",
            PlanPath::root(),
            format!("the {what} is {bytes} bytes; at most {limit} are read"),
        )
    })
}

/// Parses a variables file (`--vars FILE`): one JSON or YAML object of name → value.
pub fn load_variables(source: Source, format: Format) -> Result<Map<String, Value>, InvalidPlan> {
    if let Some(issue) = too_large(&source, MAX_PLAN_BYTES, "variables file") {
        return Err(InvalidPlan {
            plan_source: source,
            issues: vec![issue],
            plan: None,
        });
    }
    match parse::<Map<String, Value>>(&source, format) {
        Ok(variables) => Ok(variables),
        Err(issue) => Err(InvalidPlan {
            plan_source: source,
            issues: vec![*issue],
            plan: None,
        }),
    }
}

/// The issue is boxed: it is large, and the happy path should not pay for its size.
fn parse<T: DeserializeOwned>(source: &Source, format: Format) -> Result<T, Box<Issue>> {
    let text = source.text();
    match format {
        Format::Json => {
            // Tracking the path costs a third of the parse: read without it, and read again
            // with it only to say where a problem is.
            if let Ok(plan) = serde_json::from_str(text) {
                return Ok(plan);
            }
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
                let field = yaml_field(text, offset, &message);
                Box::new(serde_issue(source, &message, offset, !schema, field))
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
    let field = path.0.iter().rev().find_map(|segment| match segment {
        crate::source::PathSegment::Key(key) => Some(key.clone()),
        crate::source::PathSegment::Index(_) => None,
    });
    let mut issue = serde_issue(source, message, offset, syntax, field);
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
fn serde_issue(
    source: &Source,
    message: &str,
    offset: usize,
    syntax: bool,
    field: Option<String>,
) -> Issue {
    let at_offset = || Location::Span(offset..(offset + 1).min(source.text().len()).max(offset));
    let mut issue = Issue {
        location: at_offset(),
        ..Issue::error("plan::syntax", PlanPath::root(), message)
    };
    issue.message = plain_message(message, field.as_deref());
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
        issue.help = Some(
            match closest(&field, &expected).map(|name| canonical(name, &expected)) {
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
            },
        );
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

/// The field a YAML error at `offset` is about: the key just before the value on its line
/// (`timeout_ms: -5`, `{attempts: many}`); for a value that starts its own line (a list or an
/// object where the other was expected), the key above it that it belongs to.
fn yaml_field(text: &str, offset: usize, message: &str) -> Option<String> {
    let offset = offset.min(text.len());
    let start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    let before = text.get(start..offset)?;
    let key_before = |prefix: &str| -> Option<String> {
        let prefix = prefix.trim_end().strip_suffix(':')?;
        let key: String = prefix
            .chars()
            .rev()
            .take_while(|c| !matches!(c, ' ' | '{' | ',' | '[' | '-'))
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        let key = key.trim_matches('"').trim_matches('\'');
        (!key.is_empty()).then(|| key.to_owned())
    };
    if let Some(key) = key_before(before) {
        return Some(key);
    }
    let own_line = before.trim().is_empty() || before.trim() == "-";
    if own_line && (message.contains("sequence start") || message.contains("mapping start")) {
        // The nearest line above, less indented, that ends with `KEY:`.
        let indent = before.len() - before.trim_start().len();
        for line in text[..start].lines().rev() {
            let line_indent = line.len() - line.trim_start().len();
            if line.trim().is_empty() || line_indent >= indent {
                continue;
            }
            return key_before(line.trim_start().trim_start_matches("- "));
        }
        return None;
    }
    // Else the key of the line the value is on.
    let line_end = text[offset..].find('\n').map_or(text.len(), |i| offset + i);
    let line = text.get(start..line_end)?.trim_start();
    let line = line.strip_prefix("- ").unwrap_or(line);
    let (key, _) = line.split_once(':')?;
    let key = key.trim();
    (!key.is_empty() && !key.contains(' ')).then(|| key.to_owned())
}

/// A parser's message in the words of a plan's author: which field, what it must be.
fn plain_message(message: &str, field: Option<&str>) -> String {
    let named = |what: &str| match field {
        Some(field) => format!("`{field}` must be {what}"),
        None => format!("this must be {what}"),
    };
    // Serde's names for what it expected.
    let kind = |expected: &str| -> Option<&'static str> {
        Some(match expected.trim() {
            "u8" | "u16" | "u32" | "u64" | "usize" => "a whole number of 0 or more",
            "i8" | "i16" | "i32" | "i64" | "isize" => "a whole number",
            "f32" | "f64" => "a number",
            "a boolean" | "bool" => "true or false",
            "a string" | "string" => "a string",
            "a sequence" | "sequence" => "a list",
            "a map" | "map" | "struct" => "an object (`key: value` pairs)",
            _ => return None,
        })
    };
    if let Some(rest) = message.strip_prefix("invalid ")
        && let Some(what) = kind(rest)
    {
        return named(what);
    }
    // Serde's names for what it found.
    let found = |found: &str| -> String {
        match found {
            "sequence" => "a list".to_owned(),
            "map" => "an object".to_owned(),
            "unit value" | "null" => "null".to_owned(),
            other => other
                .strip_prefix("string ")
                .map(|text| format!("the string {text}"))
                .or_else(|| {
                    ["integer ", "floating point ", "boolean "]
                        .iter()
                        .find_map(|prefix| other.strip_prefix(prefix))
                        .map(|value| value.trim_matches('`').to_owned())
                })
                .unwrap_or_else(|| other.to_owned()),
        }
    };
    if let Some(rest) = message.strip_prefix("invalid type: ")
        && let Some((what_found, expected)) = rest.split_once(", expected ")
        && let Some(what) = kind(expected)
    {
        return format!("{}, not {}", named(what), found(what_found));
    }
    if let Some(rest) = message.strip_prefix("invalid value: ")
        && let Some((found_value, expected)) = rest.split_once(", expected ")
        && let Some(what) = kind(expected)
    {
        return format!("{}, not {}", named(what), found(found_value));
    }
    if message.starts_with("expected sequence start") {
        return named("a list (`- item` lines, or `[a, b]`)");
    }
    if message.starts_with("expected mapping start") {
        return named("an object (`key: value` lines)");
    }
    if let Some(rest) = message.strip_prefix("duplicate mapping key: ") {
        let key = rest.split(',').next().unwrap_or(rest).trim();
        return format!("`{key}` is written twice in the same object");
    }
    if let Some(what) = message.strip_prefix("EOF while parsing ") {
        let what = match what {
            "a list" => "a list (`[`) is not closed",
            "an object" => "an object (`{`) is not closed",
            "a string" => "a string (`\"`) is not closed",
            _ => "a value is missing",
        };
        return format!("the document ends too early: {what}");
    }
    message.to_owned()
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

/// The name the docs write for a field: `depends_on` for its alias `dependsOn`, when both are
/// accepted here.
fn canonical(name: &str, accepted: &[String]) -> String {
    let mut snake = String::with_capacity(name.len() + 2);
    for c in name.chars() {
        if c.is_ascii_uppercase() {
            snake.push('_');
            snake.push(c.to_ascii_lowercase());
        } else {
            snake.push(c);
        }
    }
    if snake != name && accepted.contains(&snake) {
        snake
    } else {
        name.to_owned()
    }
}

/// The candidate nearest to `name`, if it is near enough to be a typo (for "did you mean").
pub fn closest<'c>(name: &str, candidates: &'c [String]) -> Option<&'c str> {
    let length = name.chars().count();
    candidates
        .iter()
        .filter_map(|c| {
            let limit = 2.max(c.len() / 3);
            // Lengths further apart than the limit are further apart than it: no distance to
            // work out (a name of 200 KB asked for against 10,000 ids costs nothing).
            if length.abs_diff(c.chars().count()) > limit {
                return None;
            }
            let distance = strsim::levenshtein(name, c);
            (distance <= limit).then_some((distance, c.as_str()))
        })
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
    fn parser_messages_are_said_in_plan_words() {
        use super::{plain_message, yaml_field};
        assert_eq!(
            plain_message("invalid u64", Some("timeout_ms")),
            "`timeout_ms` must be a whole number of 0 or more"
        );
        assert_eq!(
            plain_message(
                "invalid type: string \"x\", expected a sequence",
                Some("depends_on")
            ),
            "`depends_on` must be a list, not the string \"x\""
        );
        assert_eq!(
            plain_message(
                "duplicate mapping key: tool, set DuplicateKeyPolicy in Options if acceptable",
                None
            ),
            "`tool` is written twice in the same object"
        );
        assert_eq!(
            plain_message("EOF while parsing a value", None),
            "the document ends too early: a value is missing"
        );
        assert_eq!(plain_message("something else", None), "something else");
        let yaml = "steps:\n  id: a\n  - x: {attempts: many}\n";
        assert_eq!(
            yaml_field(yaml, 9, "expected sequence start").as_deref(),
            Some("steps")
        );
        let at = yaml.find("many").unwrap();
        assert_eq!(
            yaml_field(yaml, at, "invalid u32").as_deref(),
            Some("attempts")
        );
    }

    #[test]
    fn closest_finds_typos_only() {
        let names = vec!["depends_on".to_owned(), "tool".to_owned()];
        assert_eq!(super::closest("depend_on", &names), Some("depends_on"));
        assert_eq!(super::closest("tol", &names), Some("tool"));
        assert_eq!(super::closest("completely_else", &names), None);
        // A name far longer than any candidate is none of them (and costs no distance).
        assert_eq!(super::closest(&"depends_on".repeat(20_000), &names), None);
    }
}
