//! The fuzz harness of the plan loader, on the stable toolchain.
//!
//! [`Generator`] makes input number `i` of a seeded sequence from the fixtures: byte-level
//! mutations, mutations of the parsed document tree, and documents built to reach the
//! loader's limits (deep nesting, long conditions, long lines, large cycles, byte-order marks
//! and multibyte characters where errors point). Input `i` depends only on the seed and `i`,
//! so a crash is reproduced from its number alone.
//!
//! [`check`] runs one input through everything a user's plan meets before any tool runs:
//! loading and validation (JSON and YAML), each issue rendered as the CLI renders it,
//! compiling against the built-in tools, the graph drawing, and the dry run with a secret in
//! the environment. A panic, a stack overflow, a slow input or a dry run that shows the
//! secret is a failure; `main.rs` runs inputs in worker processes so that an overflow, which
//! aborts, is caught and named too.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use plan_engine::{Program, Registry};
use plan_graph::{Format, LoadOptions, Source};
use serde_json::{Map, Value};

/// The value of the environment variable `S` in the dry run: no output may contain it.
pub const SECRET: &str = "Hunter2 \"é\"";

/// How long one input may take through [`check`] before it counts as a failure (a debug
/// build, as the tests run it, is about ten times slower).
pub const TIME_LIMIT: Duration = Duration::from_secs(if cfg!(debug_assertions) { 20 } else { 2 });

/// Fixtures, as (file name, text).
pub type Corpus = Vec<(String, String)>;

/// Reads every `.json` and `.yaml` file of a folder.
pub fn read_corpus(dir: &std::path::Path) -> std::io::Result<Corpus> {
    let mut corpus = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        let is_plan = matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("json" | "yaml")
        );
        if let (Some(name), true) = (name, is_plan) {
            corpus.push((name, std::fs::read_to_string(&path)?));
        }
    }
    corpus.sort();
    Ok(corpus)
}

/// Runs one input; `Err` says what went wrong (panics are left to the caller to catch).
pub fn check(text: &str, format: Format, registry: &Registry) -> Result<(), String> {
    let started = Instant::now();
    let source = Source::new("fuzz", text.to_owned());
    let options = LoadOptions {
        known_tools: Some(registry.names()),
        ..LoadOptions::default()
    };
    let mut rendered = String::new();
    let render = |issues: &[plan_graph::Issue], source: &Source, out: &mut String| {
        let handler =
            miette::GraphicalReportHandler::new_themed(miette::GraphicalTheme::unicode_nocolor())
                .with_width(100);
        for issue in issues {
            let diagnostic = source.diagnostic(issue);
            let _ = diagnostic.position();
            handler
                .render_report(out, &diagnostic)
                .map_err(|e| format!("rendering an issue failed: {e}"))?;
        }
        Ok::<(), String>(())
    };
    match plan_graph::load(source, format, &options) {
        Err(invalid) => render(&invalid.issues, &invalid.plan_source, &mut rendered)?,
        Ok(loaded) => {
            render(&loaded.warnings, &loaded.source, &mut rendered)?;
            let _ = plan_graph::render::ascii(&loaded.plan, &|_| plan_graph::render::Mark::Pending);
            let id = loaded.plan.id.clone().unwrap_or_else(|| "fuzz".to_owned());
            // A task's id names a folder and a branch: one that is a path must never load.
            for step in loaded.plan.steps.iter().filter(|s| s.task.is_some()) {
                if let Some(problem) = plan_graph::task_id_problem(&step.id.0) {
                    return Err(format!(
                        "the task id {:?} passed validation ({problem})",
                        step.id.0
                    ));
                }
            }
            match Program::compile(&loaded.plan, &id, registry) {
                Err(issues) => render(&issues, &loaded.source, &mut rendered)?,
                Ok(program) => {
                    // Every tool the plan names is among the calls a policy is checked
                    // against: no kind of call is left out.
                    let sites = program.call_sites();
                    for tool in loaded.plan.tool_names() {
                        if !sites.iter().any(|site| &*site.tool == tool) {
                            return Err(format!(
                                "`{tool}` is called by the plan but is no call site"
                            ));
                        }
                    }
                    let env: BTreeMap<String, String> = program
                        .env_names()
                        .iter()
                        .map(|name| (name.clone(), SECRET.to_owned()))
                        .collect();
                    let calls = program.preview(&Map::new(), &env);
                    let _ = program.gated_steps();
                    let json = serde_json::to_string(&calls)
                        .map_err(|e| format!("the dry run does not serialize: {e}"))?;
                    if !env.is_empty() && leaks(&json) {
                        return Err(format!("the dry run shows the secret: {json}"));
                    }
                }
            }
        }
    }
    let _ = plan_graph::load_variables(Source::new("vars", text.to_owned()), format);
    let elapsed = started.elapsed();
    if elapsed > TIME_LIMIT {
        return Err(format!("took {elapsed:?} (limit {TIME_LIMIT:?})"));
    }
    Ok(())
}

/// Whether text holds the secret, as is or JSON-escaped.
fn leaks(text: &str) -> bool {
    let escaped = serde_json::to_string(SECRET).unwrap_or_default();
    text.contains(SECRET) || text.contains(escaped.trim_matches('"'))
}

/// Makes the inputs of one seeded sequence.
pub struct Generator {
    corpus: Corpus,
    trees: Vec<Value>,
    seed: u64,
}

/// Tokens inserted by the byte-level mutations: the syntax of both formats, the plan's own
/// words, and characters that are more than one byte.
const TOKENS: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    "\"",
    "'",
    ":",
    ",",
    "\n",
    "\n  ",
    "- ",
    "\t",
    "\\",
    "\\u12",
    "\\ud800",
    "\u{feff}",
    "é",
    "日本",
    "🦀",
    "\u{0}",
    "\r\n",
    "${",
    "}",
    "${env.S}",
    "${each}",
    "${steps.a.result}",
    "depends_on",
    "when",
    "expand_on",
    "block",
    "args",
    "tool",
    "id",
    "steps",
    "env",
    "S",
    "true",
    "null",
    "1e999",
    "-0",
    "99999999999999999999",
    "&a",
    "*a",
    "<<: *a",
    "!!binary",
    "---",
    "...",
    "#",
    "? ",
    "|",
    ">",
    "&&",
    "||",
    "(",
    ")",
    "size(",
    "'\\q'",
    "\"\\z\"",
];

/// Field names the tree mutations use as keys.
const KEYS: &[&str] = &[
    "id",
    "tool",
    "args",
    "depends_on",
    "dependsOn",
    "when",
    "expand_on",
    "expand_key",
    "block",
    "steps",
    "env",
    "variables",
    "result_variable",
    "retry",
    "timeout",
    "risk",
    "approval",
    "on_failure",
    "guards",
    "mode",
    "branches",
    "entry",
    "max_steps",
    "next",
    "run_if",
    "tool_calls",
    "index",
    "step_id",
    "binds",
    "schema",
    "input_schema",
    "output_schema",
];

impl Generator {
    /// A generator over the corpus; `seed` picks the sequence.
    pub fn new(corpus: Corpus, seed: u64) -> Generator {
        let trees = corpus
            .iter()
            .filter_map(|(name, text)| {
                if name.ends_with(".json") {
                    serde_json::from_str(text).ok()
                } else {
                    serde_saphyr::from_str(text).ok()
                }
            })
            .collect();
        Generator {
            corpus,
            trees,
            seed,
        }
    }

    /// Input number `i`: its text and the format to read it as.
    pub fn input(&self, i: u64) -> (String, Format) {
        let mut rng = fastrand::Rng::with_seed(
            self.seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17),
        );
        let format = if rng.bool() {
            Format::Json
        } else {
            Format::Yaml
        };
        // Documents at the limits are slow to make and to load: one input in twenty.
        let text = match rng.u8(0..20) {
            0..=9 => self.mutate_bytes(&mut rng),
            10..=18 => self.mutate_tree(&mut rng),
            _ => extreme(&mut rng),
        };
        (text, format)
    }

    fn pick_text(&self, rng: &mut fastrand::Rng) -> String {
        if self.corpus.is_empty() {
            return "{\"steps\": []}".to_owned();
        }
        self.corpus[rng.usize(..self.corpus.len())].1.clone()
    }

    fn mutate_bytes(&self, rng: &mut fastrand::Rng) -> String {
        let mut text: Vec<char> = self.pick_text(rng).chars().collect();
        for _ in 0..rng.usize(1..8) {
            let at = rng.usize(..=text.len());
            match rng.u8(0..6) {
                0 | 1 => {
                    let token = TOKENS[rng.usize(..TOKENS.len())];
                    text.splice(at..at, token.chars());
                }
                2 if at < text.len() => {
                    let end = (at + rng.usize(1..16)).min(text.len());
                    text.drain(at..end);
                }
                3 if at < text.len() => {
                    let end = (at + rng.usize(1..64)).min(text.len());
                    let chunk: Vec<char> = text[at..end].to_vec();
                    text.splice(at..at, chunk);
                }
                4 if at < text.len() => {
                    text[at] = char::from_u32(rng.u32(0..0x3000)).unwrap_or('?');
                }
                _ => text.truncate(at),
            }
        }
        text.into_iter().collect()
    }

    fn mutate_tree(&self, rng: &mut fastrand::Rng) -> String {
        let mut tree = if self.trees.is_empty() {
            Value::Object(Map::new())
        } else {
            self.trees[rng.usize(..self.trees.len())].clone()
        };
        for _ in 0..rng.usize(1..5) {
            let replacement = random_value(rng, 3);
            replace_random(&mut tree, rng, replacement);
        }
        if rng.bool() {
            serde_json::to_string(&tree).unwrap_or_default()
        } else {
            serde_json::to_string_pretty(&tree).unwrap_or_default()
        }
    }
}

fn random_string(rng: &mut fastrand::Rng) -> String {
    match rng.u8(0..8) {
        0 => KEYS[rng.usize(..KEYS.len())].to_owned(),
        1 => format!(
            "${{{}}}",
            [
                "env.S",
                "each",
                "index",
                "steps.x.result",
                "a.b[0]",
                "",
                "x"
            ][rng.usize(..7)]
        ),
        2 => (0..rng.usize(0..40))
            .map(|_| TOKENS[rng.usize(..TOKENS.len())])
            .collect(),
        3 => [
            "1 + ",
            "size(x) > 0 && ",
            "'a' == ",
            "!",
            "((",
            "x.y",
            "has(x.y)",
        ][rng.usize(..7)]
        .repeat(rng.usize(1..30)),
        4 => [
            "echo",
            "exec",
            "http",
            "sleep",
            "write_file",
            "read_file",
            "fail",
            "nope",
        ][rng.usize(..8)]
        .to_owned(),
        _ => format!("s{}", rng.u16(0..50)),
    }
}

fn random_value(rng: &mut fastrand::Rng, depth: u32) -> Value {
    match rng.u8(0..9) {
        0 => Value::Null,
        1 => Value::Bool(rng.bool()),
        2 => Value::from(rng.i64(-5..100)),
        3 => Value::from([0.5, -1e300, 1e-300, 3.0][rng.usize(..4)]),
        4..=5 => Value::String(random_string(rng)),
        6 if depth > 0 => Value::Array(
            (0..rng.usize(0..4))
                .map(|_| random_value(rng, depth - 1))
                .collect(),
        ),
        _ if depth > 0 => Value::Object(
            (0..rng.usize(0..5))
                .map(|_| {
                    (
                        KEYS[rng.usize(..KEYS.len())].to_owned(),
                        random_value(rng, depth - 1),
                    )
                })
                .collect(),
        ),
        _ => Value::String(random_string(rng)),
    }
}

/// Replaces a node reached by a random walk from the root.
fn replace_random(tree: &mut Value, rng: &mut fastrand::Rng, replacement: Value) {
    let mut node = tree;
    loop {
        let descend = rng.u8(0..4) != 0;
        let next_index = match &*node {
            Value::Array(items) if descend && !items.is_empty() => Some(rng.usize(..items.len())),
            Value::Object(fields) if descend && !fields.is_empty() => {
                Some(rng.usize(..fields.len()))
            }
            _ => None,
        };
        match (next_index, node) {
            (Some(i), Value::Array(items)) => node = &mut items[i],
            (Some(i), Value::Object(fields)) => match fields.values_mut().nth(i) {
                Some(value) => node = value,
                None => return,
            },
            (_, node) => {
                if let (Value::Object(fields), true) = (&mut *node, rng.bool()) {
                    fields.insert(KEYS[rng.usize(..KEYS.len())].to_owned(), replacement);
                } else {
                    *node = replacement;
                }
                return;
            }
        }
    }
}

/// A document built to reach a limit.
fn extreme(rng: &mut fastrand::Rng) -> String {
    let n = [10, 100, 1_000, 5_000, 30_000][rng.usize(..5)];
    let step = |id: String, extra: String| {
        format!("{{\"id\":\"{id}\",\"tool\":\"echo\",\"args\":{{\"v\":1}}{extra}}}")
    };
    let plan = |steps: Vec<String>| format!("{{\"env\":[\"S\"],\"steps\":[{}]}}", steps.join(","));
    match rng.u8(0..13) {
        // A long condition: a sum, nested parentheses, or a long string with a bad escape.
        0 => plan(vec![step("a".into(), format!(",\"when\":\"{}1\"", "1+".repeat(n)))]),
        1 => plan(vec![step(
            "a".into(),
            format!(",\"when\":\"{}1{}\"", "(".repeat(n), ")".repeat(n)),
        )]),
        2 => plan(vec![step(
            "a".into(),
            format!(",\"when\":\"'{}\\\\q' == 'x'\"", "é".repeat(n * 10)),
        )]),
        // Deep nesting of arguments, in both syntaxes.
        3 => format!(
            "{{\"steps\":[{{\"id\":\"a\",\"tool\":\"echo\",\"args\":{{\"v\":{}1{}}}}}]}}",
            "[".repeat(n),
            "]".repeat(n)
        ),
        4 => {
            let mut text = String::from("steps:\n- id: a\n  tool: echo\n  args:\n");
            for depth in 0..n.min(5_000) {
                text.push_str(&" ".repeat(4 + depth));
                text.push_str("- \n");
            }
            text
        }
        // Many steps in a cycle or a chain.
        5 => plan(
            (0..n)
                .map(|i| step(format!("s{i}"), format!(",\"depends_on\":[\"s{}\"]", (i + 1) % n)))
                .collect(),
        ),
        6 => plan(
            (0..n)
                .map(|i| {
                    let deps = if i == 0 {
                        String::new()
                    } else {
                        format!(",\"depends_on\":[\"s{}\"]", i - 1)
                    };
                    step(format!("s{i}"), deps)
                })
                .collect(),
        ),
        // A minified plan with its error far to the right.
        7 => {
            let mut steps: Vec<String> = (0..n).map(|i| step(format!("s{i}"), String::new())).collect();
            steps.push("{\"id\":\"bad\",\"tool\":\"echo\",\"nope\":1}".into());
            plan(steps)
        }
        // A byte-order mark, and multibyte characters where errors point.
        8 => "\u{feff}{\"steps\":[{\"id\":\"é日\",\"tool\":\"日本\",\"x🦀\":1}]}".to_owned(),
        9 => format!(
            "\u{feff}steps:\n- id: 日本\n  tool: echo\n  depends_on: [🦀]\n  when: \"{}\"\n",
            "é".repeat(rng.usize(0..50))
        ),
        // Secrets where ids and errors are made.
        10 => "{\"env\":[\"S\"],\"steps\":[{\"id\":\"m\",\"tool\":\"echo\",\"expand_on\":[1,2],\"expand_key\":\"${env.S}\",\"args\":{\"v\":\"${each}\"}},{\"id\":\"h\",\"tool\":\"http\",\"args\":{\"url\":\"http://${env.S}.invalid/\"}},{\"id\":\"x\",\"tool\":\"echo\",\"args\":{\"v\":\"${nope.${env.S}}\"}}]}".to_owned(),
        // A task whose id tries to be a path (or a name git refuses), with checks.
        11 => {
            let id = [
                "/etc",
                "../up",
                "a/b",
                "x/.git",
                "a/.lock/b",
                ".git",
                "x.lock",
                "a..b",
                "a b",
                "..",
                "~",
                "L1-001",
            ][rng.usize(..12)]
            .to_owned();
            let id = if rng.bool() { id } else { random_string(rng) };
            serde_json::json!({"workspace": {"repo": ".", "worktree_dir": id.clone()}, "steps": [
                {"id": id, "task": {"implement": {"tool": "echo", "args": {"t": "${task.id}"}},
                 "verify": [{"argv": ["true", "${task.worktree}"]}]}},
                {"id": "after", "tool": "echo", "depends_on": [id]}
            ]})
            .to_string()
        }
        // A very long line of one string.
        _ => format!("{{\"steps\":[{{\"id\":\"{}\",\"tool\":\"echo\"}}]", "x".repeat(n * 20)),
    }
}
