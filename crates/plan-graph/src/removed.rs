//! The removed `$STEP` reference: the map-style executor read a step's result as
//! `$step-01.field`; plan-cli reads variables (`binds` / `result_variable`, then `$var.NAME`).
//!
//! To the placeholder parser a `$` followed by a word it does not know is text (`$HOME`,
//! `$5`), so the removed form would reach the tool as its own text. Only the plan knows its
//! steps, so the check is here: a literal `$` followed by the id of one of the plan's steps
//! (or of an item of a map step, `$fetch-0`; or, in a block's nodes, the name of one of the
//! block's nodes) is an error, whatever follows it (`$step-01`, `see $step-01 now`,
//! `$step-01.v`, `$step-01[0]`). An id must start with a letter or `_` to count: `$1` and `$5`
//! are never references. `$step-NN.field` where no step is `step-NN` is a warning: it has
//! the removed form's exact shape, but may be text. `$$` writes the text in either case.

use std::collections::{HashMap, HashSet};

use plan_vars::Template;
use serde_json::Value;

use crate::issue::Issue;
use crate::model::{Block, Plan, Step};
use crate::source::PlanPath;

/// What a literal `$WORD` can refer to.
struct Names<'p> {
    /// Step ids that can be read as a word, with their step's index.
    steps: HashMap<&'p str, usize>,
    /// The map steps among them (whose items are `ID-N`).
    maps: HashSet<usize>,
    /// The names of the nodes of the blocks around the strings being checked.
    nodes: Vec<&'p str>,
    /// Every step id, for "did you mean".
    all: Vec<String>,
    /// The step whose strings are being checked (none: the workspace's).
    current: Option<usize>,
}

/// What a `$WORD` refers to.
enum Target<'p> {
    Step(usize),
    /// An item of the map step, by its position as written (`0`).
    Item(usize, String),
    Node(&'p str),
}

/// Reports every literal `$STEP…` in the strings plan-cli resolves: arguments (of steps,
/// block nodes, task calls, the workspace's `context_update`), `expand_key`, and checks'
/// `argv`.
pub(crate) fn check(plan: &Plan, issues: &mut Vec<Issue>) {
    let mut names = Names {
        steps: plan
            .steps
            .iter()
            .enumerate()
            .filter(|(_, step)| can_be_a_word(&step.id.0))
            .map(|(i, step)| (step.id.0.as_str(), i))
            .collect(),
        maps: (plan.steps.iter().enumerate())
            .filter(|(_, step)| step.expand.is_some())
            .map(|(i, _)| i)
            .collect(),
        nodes: Vec::new(),
        all: plan.steps.iter().map(|step| step.id.0.clone()).collect(),
        current: None,
    };
    for (i, step) in plan.steps.iter().enumerate() {
        names.current = Some(i);
        let at = PlanPath::step(i);
        check_object(&step.args, at.clone().key("args"), plan, &names, issues);
        if let Some(key) = step.expand.as_ref().and_then(|e| e.key.as_ref()) {
            check_text(key, at.clone().key("expand_key"), plan, &names, issues);
        }
        if let Some(task) = &step.task {
            let at = at.clone().key("task");
            check_object(
                &task.implement.args,
                at.clone().key("implement").key("args"),
                plan,
                &names,
                issues,
            );
            if let Some(feedback) = &task.feedback {
                let path = at.clone().key("feedback").key("args");
                check_object(&feedback.args, path, plan, &names, issues);
            }
            for (k, check) in task.verify.iter().enumerate() {
                let path = at.clone().key("verify").index(k).key("argv");
                check_argv(&check.argv, path, plan, &names, issues);
            }
        }
        if let Some(block) = &step.block {
            check_block(block, at.key("block"), plan, &mut names, issues);
        }
    }
    names.current = None;
    if let Some(workspace) = &plan.workspace {
        let at = PlanPath::root().key("workspace");
        if let Some(call) = &workspace.context_update {
            let path = at.clone().key("context_update").key("args");
            check_object(&call.args, path, plan, &names, issues);
        }
        for (k, check) in workspace.verify_after_merge.iter().enumerate() {
            let path = at.clone().key("verify_after_merge").index(k).key("argv");
            check_argv(&check.argv, path, plan, &names, issues);
        }
    }
}

/// A block's node arguments, where the block's node names count too (nested blocks: theirs
/// and those around them).
fn check_block<'p>(
    block: &'p Block,
    at: PlanPath,
    plan: &'p Plan,
    names: &mut Names<'p>,
    issues: &mut Vec<Issue>,
) {
    let outer = names.nodes.len();
    names.nodes.extend(
        block
            .nodes
            .keys()
            .map(String::as_str)
            .filter(|n| can_be_a_word(n)),
    );
    for (name, node) in &block.nodes {
        let path = at.clone().key("nodes").key(name);
        check_object(&node.args, path.clone().key("args"), plan, names, issues);
        if let Some(nested) = &node.block {
            check_block(nested, path.key("block"), plan, names, issues);
        }
    }
    names.nodes.truncate(outer);
}

fn check_object(
    args: &serde_json::Map<String, Value>,
    at: PlanPath,
    plan: &Plan,
    names: &Names<'_>,
    issues: &mut Vec<Issue>,
) {
    for (key, value) in args {
        check_value(value, at.clone().key(key), plan, names, issues);
    }
}

fn check_argv(
    argv: &[String],
    at: PlanPath,
    plan: &Plan,
    names: &Names<'_>,
    issues: &mut Vec<Issue>,
) {
    for (k, text) in argv.iter().enumerate() {
        check_text(text, at.clone().index(k), plan, names, issues);
    }
}

/// Every string in a JSON value (keys are taken literally, as placeholders are not parsed in
/// them).
fn check_value(
    value: &Value,
    at: PlanPath,
    plan: &Plan,
    names: &Names<'_>,
    issues: &mut Vec<Issue>,
) {
    match value {
        Value::String(text) => check_text(text, at, plan, names, issues),
        Value::Array(items) => {
            for (k, item) in items.iter().enumerate() {
                check_value(item, at.clone().index(k), plan, names, issues);
            }
        }
        Value::Object(map) => check_object(map, at, plan, names, issues),
        _ => {}
    }
}

/// One string: each removed reference it holds, once.
fn check_text(text: &str, at: PlanPath, plan: &Plan, names: &Names<'_>, issues: &mut Vec<Issue>) {
    if !text.contains('$') {
        return;
    }
    // A malformed placeholder is reported where placeholders are checked.
    let Ok(dollars) = Template::literal_dollars(text) else {
        return;
    };
    let mut said: HashSet<&str> = HashSet::new();
    for at_dollar in dollars {
        let after = &text[at_dollar + 1..];
        if let Some((target, word_len)) = refers_to(after, names) {
            let written = &text[at_dollar..at_dollar + 1 + word_len + path_len(&after[word_len..])];
            if said.insert(written) {
                let own = matches!(target, Target::Step(i) if Some(i) == names.current);
                let word = &after[..word_len];
                issues.push(reference(plan, &target, own, word, written, at.clone()));
            }
        } else if let Some(len) = step_shaped(after) {
            let written = &text[at_dollar..at_dollar + 1 + len];
            if said.insert(written) {
                issues.push(shaped_like_a_reference(written, names, at.clone()));
            }
        }
    }
}

/// Whether `name` can follow a `$` as a word: it starts with a letter or `_` (`$1`, `$5` are
/// text), and holds only what a word can (`-` and `.` inside).
fn can_be_a_word(name: &str) -> bool {
    name.starts_with(|c: char| c.is_alphabetic() || c == '_')
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.'))
        && !name.ends_with('.')
}

/// What the word after a `$` refers to, and its length: the longest of the word (letters,
/// digits, `_`, `-`, `.`) and its parts before a `.` that is a step's id, an item of a map
/// step (`fetch-0`) or a node's name; `-` and `.` that end the word end no name
/// (`$fetch-$each`, `see $fetch.`). A word that goes on (`$step-by-step` beside a step `step`)
/// refers to nothing.
fn refers_to<'p>(after: &str, names: &Names<'p>) -> Option<(Target<'p>, usize)> {
    let word = after
        .char_indices()
        .find(|&(_, c)| !(c.is_alphanumeric() || matches!(c, '_' | '-' | '.')))
        .map_or(after, |(end, _)| &after[..end]);
    let word = word.trim_end_matches(['-', '.']);
    let mut ends: Vec<usize> = word.match_indices('.').map(|(i, _)| i).collect();
    ends.push(word.len());
    ends.into_iter().rev().find_map(|end| {
        let candidate = &word[..end];
        if let Some(&i) = names.steps.get(candidate) {
            return Some((Target::Step(i), end));
        }
        if let Some(&node) = names.nodes.iter().find(|node| **node == candidate) {
            return Some((Target::Node(node), end));
        }
        let (step, item) = candidate.rsplit_once('-')?;
        let &i = names.steps.get(step)?;
        let an_item =
            names.maps.contains(&i) && !item.is_empty() && item.bytes().all(|b| b.is_ascii_digit());
        an_item.then(|| (Target::Item(i, item.to_owned()), end))
    })
}

/// The length of the path written after a reference: `.name` and `[N]`, as they would follow
/// a placeholder in text.
fn path_len(text: &str) -> usize {
    let bytes = text.as_bytes();
    let mut pos = 0;
    loop {
        match bytes.get(pos) {
            Some(b'.') => {
                let name = text[pos + 1..]
                    .char_indices()
                    .find(|&(_, c)| !(c.is_alphanumeric() || c == '_'))
                    .map_or(text.len() - pos - 1, |(i, _)| i);
                if name == 0 {
                    return pos;
                }
                pos += 1 + name;
            }
            Some(b'[') => {
                let digits = bytes[pos + 1..]
                    .iter()
                    .take_while(|b| b.is_ascii_digit())
                    .count();
                if digits == 0 || bytes.get(pos + 1 + digits) != Some(&b']') {
                    return pos;
                }
                pos += digits + 2;
            }
            _ => return pos,
        }
    }
}

/// The removed form's exact shape, `step-NN.field` or `step-NN[N]` (two digits or more), and
/// its length: what the map-style executor's plans wrote, even when no step has that id. Not
/// text that merely starts so (`$step-by-step`, `cp $step-1.tar`, `$step-2.50`).
fn step_shaped(after: &str) -> Option<usize> {
    let rest = after.strip_prefix("step-")?;
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let next = rest[digits..].chars().take(2).collect::<Vec<char>>();
    let shaped = digits >= 2
        && match next.as_slice() {
            ['.', c, ..] => c.is_ascii_alphabetic() || *c == '_',
            ['[', c, ..] => c.is_ascii_digit(),
            _ => false,
        };
    shaped.then(|| 5 + digits + path_len(&rest[digits..]))
}

/// The error for a `$WORD` that refers to a step, an item or a node of this plan.
/// `own`: the step's own id, in its own strings.
fn reference(
    plan: &Plan,
    target: &Target<'_>,
    own: bool,
    word: &str,
    written: &str,
    at: PlanPath,
) -> Issue {
    let path = &written[1 + word.len()..];
    let text = format!("for the text, write `${written}`");
    let (message, help) = match target {
        Target::Step(i) if own => {
            let step = &plan.steps[*i];
            let task = if step.task.is_some() {
                " (or `${task.id}`, the task's id)"
            } else {
                ""
            };
            (
                format!(
                    "`{written}` reads step `{}`, its own, in the removed `$STEP…` form: the tool would get that text",
                    step.id
                ),
                format!("a step does not read its own result; {text}{task}"),
            )
        }
        Target::Step(i) => {
            let step = &plan.steps[*i];
            (
                format!(
                    "`{written}` reads step `{}` in the removed `$STEP…` form: the tool would get that text, not the step's result",
                    step.id
                ),
                format!("{}; {text}", read_instead(step, "", path)),
            )
        }
        Target::Item(i, n) => {
            let step = &plan.steps[*i];
            (
                format!(
                    "`{written}` reads item {n} of map step `{}` in the removed `$STEP…` form: the tool would get that text, not the item's result",
                    step.id
                ),
                format!(
                    "{} (a map step's variables hold a list, one value per item); {text}",
                    read_instead(step, &format!("[{n}]"), path)
                ),
            )
        }
        Target::Node(name) => (
            format!(
                "`{written}` reads node `{name}` with a bare `$`, as the removed `$STEP…` form did: the tool would get that text, not the node's result"
            ),
            format!("read `${{nodes.{name}{path}}}` (the node's latest result); {text}"),
        ),
    };
    Issue::error("plan::placeholder", at, message)
        .label("a removed reference")
        .help(help)
}

/// How to read a step's result instead: through its `result_variable` when it has one, else
/// by giving it one. `item` is the map item's index (`[0]`), `path` the path written after.
fn read_instead(step: &Step, item: &str, path: &str) -> String {
    let whole = step.result_variable.as_deref().or_else(|| {
        step.binds
            .iter()
            .find(|(_, selector)| selector.trim() == "$")
            .map(|(name, _)| name.as_str())
    });
    match whole {
        Some(name) => format!(
            "step `{}`'s result is the variable `{name}`: read `${{{name}{item}{path}}}`",
            step.id
        ),
        None => format!(
            "give step `{}` `result_variable: NAME` (or `binds: {{NAME: $.field}}` for a part) and read `${{NAME{item}{path}}}`",
            step.id
        ),
    }
}

/// The warning for the removed form's shape where no step has the id.
fn shaped_like_a_reference(written: &str, names: &Names<'_>, at: PlanPath) -> Issue {
    let word_len = 5 + written[6..].bytes().take_while(u8::is_ascii_digit).count();
    let id = &written[1..1 + word_len];
    let path = &written[1 + word_len..];
    let near = crate::load::closest(id, &names.all)
        .map(|near| format!("did you mean step `{near}`? "))
        .unwrap_or_default();
    let read = if near.is_empty() {
        "to read"
    } else {
        "To read"
    };
    Issue::warning(
        "plan::placeholder",
        at,
        format!("`{written}` has the form of the removed `$step-XX.…` reference, but no step is `{id}`: it reaches the tool as that text"),
    )
    .label("a removed reference?")
    .help(format!(
        "{near}{read} a step's result, give the step `result_variable: NAME` and read `${{NAME{path}}}`; for the text, write `${written}`"
    ))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::{Format, LoadOptions, Source, load};

    /// The removed-reference issues of a plan (errors and warnings, in order): severity,
    /// message, line and column.
    fn found(text: &str, format: Format) -> Vec<(&'static str, String, usize, usize)> {
        let (source, issues) = match load(Source::new("p", text), format, &LoadOptions::default()) {
            Ok(loaded) => (loaded.source, loaded.warnings),
            Err(invalid) => (invalid.plan_source, invalid.issues),
        };
        issues
            .iter()
            .filter(|issue| issue.label.starts_with("a removed reference"))
            .map(|issue| {
                let (line, column) = source.diagnostic(issue).position().unwrap_or((0, 0));
                let severity = if issue.is_error() { "error" } else { "warning" };
                (severity, issue.message.clone(), line, column)
            })
            .collect()
    }

    fn found_json(plan: &Value) -> Vec<(&'static str, String)> {
        found(&plan.to_string(), Format::Json)
            .into_iter()
            .map(|(severity, message, _, _)| (severity, message))
            .collect()
    }

    /// The texts the issues of `plan` name (`$step-01.v`), errors first marked `E:`.
    fn written(plan: &Value) -> Vec<String> {
        found_json(plan)
            .into_iter()
            .map(|(severity, message)| {
                let text = message.split('`').nth(1).unwrap_or_default().to_owned();
                format!("{}:{text}", if severity == "error" { "E" } else { "W" })
            })
            .collect()
    }

    const STEP: &str = "the tool would get that text, not the step's result";

    /// Every form of the removed reference to a step of the plan is an error at its string,
    /// each said once: bare, inside text, with a field, with an index.
    #[test]
    fn every_form_of_a_steps_reference_is_refused_once_at_its_place() {
        let text = r#"steps:
  - id: step-01
    tool: echo
  - id: step-02
    tool: echo
    depends_on: [step-01]
    args:
      bare: "$step-01"
      embedded: see $step-01 now
      dotted: "$step-01.v"
      indexed: ["$step-01[0].name"]
      twice: "$step-01.v and $step-01.v, then $step-01"
"#;
        let said = |written: &str| {
            format!("`{written}` reads step `step-01` in the removed `$STEP…` form: {STEP}")
        };
        assert_eq!(
            found(text, Format::Yaml),
            [
                ("error", said("$step-01"), 8, 13),
                ("error", said("$step-01"), 9, 17),
                ("error", said("$step-01.v"), 10, 15),
                ("error", said("$step-01[0].name"), 11, 17),
                ("error", said("$step-01.v"), 12, 14),
                ("error", said("$step-01"), 12, 14),
            ]
        );
    }

    /// The help says how to read the result instead: through the variable the step already
    /// has, or by giving it one; the same path after it; and how to write the text.
    #[test]
    fn the_help_reads_the_result_through_a_variable() {
        let help = |plan: Value| {
            let text = plan.to_string();
            let invalid = load(
                Source::new("p.json", text),
                Format::Json,
                &LoadOptions::default(),
            )
            .expect_err("refused");
            invalid
                .issues
                .iter()
                .filter_map(|i| i.help.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            help(json!({"steps": [
                {"id": "fetch", "tool": "echo", "result_variable": "page"},
                {"id": "use", "tool": "echo", "depends_on": ["fetch"], "args": {"a": "$fetch.body[0]"}},
            ]})),
            [
                "step `fetch`'s result is the variable `page`: read `${page.body[0]}`; for the text, write `$$fetch.body[0]`"
            ]
        );
        assert_eq!(
            help(json!({"steps": [
                {"id": "fetch", "tool": "echo"},
                {"id": "use", "tool": "echo", "args": {"a": "$fetch.body"}},
            ]})),
            [
                "give step `fetch` `result_variable: NAME` (or `binds: {NAME: $.field}` for a part) and read `${NAME.body}`; for the text, write `$$fetch.body`"
            ]
        );
        assert_eq!(
            help(json!({"steps": [{"id": "note", "tool": "echo", "args": {"a": "I am $note"}}]})),
            ["a step does not read its own result; for the text, write `$$note`"]
        );
    }

    /// Text that is not a reference to this plan's steps stays text: shell variables, prices,
    /// escapes, words that go on past an id, ids that start with a digit, placeholders and
    /// expressions.
    #[test]
    fn text_that_names_no_step_is_left_alone() {
        let plan = json!({"variables": {"step-01": 1}, "steps": [
            {"id": "step", "tool": "echo"},
            {"id": "1", "tool": "echo"},
            {"id": "step-01", "tool": "exec", "depends_on": ["step", "1"], "args": {"argv": [
                "sh", "-c",
                "echo $HOME $PATH costs $5 or $1, pid $$, $$step-01 $$step-01.v, $step-by-step $steps $step_x ${step-01} $${step}",
                "${{ '$step-01' + \"$step\" }}",
                "awk '{print $1}'",
            ]}},
        ]});
        assert_eq!(written(&plan), Vec::<String>::new());
    }

    /// The exact shape of the removed form (`$step-NN.field`) naming no step is a warning,
    /// with the step it may have meant; `cp $step-1.tar` is not that shape.
    #[test]
    fn the_removed_shape_without_its_step_is_a_warning() {
        let plan = json!({"steps": [
            {"id": "step-1", "tool": "echo"},
            {"id": "b", "tool": "echo", "args": {"a": "$step-01.v", "b": "$step-02[0]", "c": "$step-3.tar $step-04 $step-05.", "d": "$$step-01.v"}},
        ]});
        assert_eq!(written(&plan), ["W:$step-01.v", "W:$step-02[0]"]);
        let found = found_json(&plan);
        assert_eq!(
            found[0].1,
            "`$step-01.v` has the form of the removed `$step-XX.…` reference, but no step is `step-01`: it reaches the tool as that text"
        );
        let loaded = load(
            Source::new("p.json", plan.to_string()),
            Format::Json,
            &LoadOptions::default(),
        )
        .expect("warnings only");
        assert!(
            loaded.warnings[0]
                .help
                .as_deref()
                .unwrap_or_default()
                .starts_with("did you mean step `step-1`? ")
        );
    }

    /// Wherever plan-cli resolves strings: a map step's items, a block's nodes (by their
    /// names, in the block), a task's calls and checks, `expand_key`, the workspace's calls.
    #[test]
    fn references_are_found_wherever_strings_are_resolved() {
        let plan = json!({
            "variables": {"items": [1, 2]},
            "workspace": {"repo": ".", "context_update": {"tool": "echo", "args": {"t": "$fetch-0"}},
                          "verify_after_merge": [{"argv": ["echo", "$fetch"]}]},
            "steps": [
                {"id": "fetch", "tool": "echo", "expand_on": "${items}", "expand_key": "$fetch-$each", "args": {"n": "$each"}},
                {"id": "review", "depends_on": ["fetch"], "args": {"topic": "$fetch-1"}, "block": {
                    "entry_point": "draft",
                    "nodes": {
                        "draft": {"tool": "echo", "args": {"t": "${input.topic}"}},
                        "check": {"tool": "echo", "args": {"t": "$draft.text", "u": "${nodes.draft.text}", "v": "$check"}},
                        "inner": {"block": {"entry_point": "x", "nodes": {"x": {"tool": "echo", "args": {"a": "$draft $x"}}}}}
                    },
                    "transitions": {"draft": "check"}
                }},
                {"id": "L1-001", "depends_on": ["review"], "task": {
                    "implement": {"tool": "exec", "args": {"argv": ["./agent.sh", "$review"]}},
                    "feedback": {"tool": "echo", "args": {"f": "$L1-001"}},
                    "verify": [{"argv": ["test", "$review.ok"]}]
                }},
            ]
        });
        assert_eq!(
            written(&plan),
            [
                "E:$fetch",
                "E:$fetch-1",
                "E:$draft.text",
                "E:$check",
                "E:$draft",
                "E:$x",
                "E:$review",
                "E:$L1-001",
                "E:$review.ok",
                "E:$fetch-0",
                "E:$fetch",
            ]
        );
        let messages: Vec<String> = found_json(&plan).into_iter().map(|(_, m)| m).collect();
        assert_eq!(
            messages[1],
            "`$fetch-1` reads item 1 of map step `fetch` in the removed `$STEP…` form: the tool would get that text, not the item's result"
        );
        assert_eq!(
            messages[2],
            "`$draft.text` reads node `draft` with a bare `$`, as the removed `$STEP…` form did: the tool would get that text, not the node's result"
        );
        // A node's name counts only inside its block; an item only of a map step.
        let outside = json!({"steps": [
            {"id": "b", "tool": "echo", "args": {"t": "$draft $b-0 $r"}},
            {"id": "r", "block": {"entry_point": "draft", "nodes": {"draft": {"tool": "echo"}}}},
        ]});
        assert_eq!(written(&outside), ["E:$r"]);
    }

    #[test]
    fn paths_after_a_reference_are_fields_and_indexes() {
        assert_eq!(path_len(".v rest"), 2);
        assert_eq!(path_len("[0].a[12]!"), 9);
        assert_eq!(path_len(". x"), 0);
        assert_eq!(path_len("[x]"), 0);
        assert_eq!(path_len(""), 0);
    }

    #[test]
    fn only_the_executors_shape_is_step_shaped() {
        assert_eq!(step_shaped("step-01.v now"), Some(9));
        assert_eq!(step_shaped("step-01[0].a"), Some(12));
        for text in [
            "step-by-step",
            "step-1.tar",
            "step-2.50",
            "step-01",
            "steps",
            "step-01.",
            "step-01-0",
        ] {
            assert_eq!(step_shaped(text), None, "{text}");
        }
    }

    #[test]
    fn words_are_ids_that_start_with_a_letter() {
        for id in ["step-01", "fetch", "_x", "a.b", "L1-001", "é"] {
            assert!(can_be_a_word(id), "{id}");
        }
        for id in ["1", "5", "01-a", "a b", "a/b", "", "a."] {
            assert!(!can_be_a_word(id), "{id}");
        }
    }

    proptest! {
        /// Escaped, any text is left alone, whatever the plan's ids; a `$ID` put anywhere in
        /// it (and ended by a space) is one error.
        #[test]
        fn escaped_text_is_text_and_a_reference_anywhere_is_one_error(
            text in "[$${}\\[\\].a-z0-9_\\- ]{0,30}",
            id in "[a-z_][a-z0-9_]{0,6}(-[0-9]{2})?",
            cut in 0usize..31,
        ) {
            prop_assume!(!["each", "index", "key", "var", "env"].contains(&id.as_str()));
            let escaped = text.replace('$', "$$");
            let plan = |arg: &str| json!({"steps": [
                {"id": id, "tool": "echo"},
                {"id": "Z9", "tool": "echo", "args": {"a": arg}},
            ]});
            prop_assert_eq!(written(&plan(&escaped)), Vec::<String>::new());
            let mut cut = cut.min(escaped.len());
            while !escaped.is_char_boundary(cut) || escaped[..cut].ends_with('$') && escaped[..cut].matches('$').count() % 2 == 1 {
                cut -= 1;
            }
            let with = format!("{} ${id} {}", &escaped[..cut], &escaped[cut..]);
            let found = written(&plan(&with));
            prop_assert_eq!(found, vec![format!("E:${id}")], "{}", with);
        }
    }
}
