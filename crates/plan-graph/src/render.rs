//! Pictures of a plan's DAG: mcp-cli's ASCII, Mermaid and Graphviz DOT.

use std::fmt::Write as _;

use plan_types::one_line;

use crate::dag::Dependencies;
use crate::model::{Block, Plan, Transition};

/// The mark before a step in the ASCII picture (mcp-cli's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// `○`
    Pending,
    /// `◉`
    Running,
    /// `●`
    Completed,
    /// `✗`
    Failed,
}

impl Mark {
    fn glyph(self) -> char {
        match self {
            Mark::Pending => '○',
            Mark::Running => '◉',
            Mark::Completed => '●',
            Mark::Failed => '✗',
        }
    }
}

/// [`ascii`] of a plan not yet run, under its id and title (`show`, `plan show`, `plan create`);
/// a plan without steps says so.
pub fn titled(plan: &Plan, plan_id: &str) -> String {
    let title = (plan.title.as_deref()).map_or(String::new(), |t| format!(" — {}", one_line(t)));
    let picture = if plan.steps.is_empty() {
        "no steps: a run of this plan calls nothing and completes at once\n".to_owned()
    } else {
        ascii(plan, &|_| Mark::Pending)
    };
    format!("{plan_id}{title}\n\n{picture}")
}

/// mcp-cli's picture: one block per topological level, `∥` on steps that run beside an
/// earlier one of their level, `← after:` naming dependencies.
pub fn ascii(plan: &Plan, mark: &dyn Fn(usize) -> Mark) -> String {
    let deps = Dependencies::new(plan);
    let label = |i: usize| {
        let step = &plan.steps[i];
        format!(
            "{}. {}",
            step.id,
            step.title.as_deref().unwrap_or(kind(step))
        )
    };
    let label_width = (0..plan.steps.len())
        .map(|i| label(i).chars().count())
        .max()
        .unwrap_or(0)
        + 2;
    let tool_width = plan
        .steps
        .iter()
        .map(|s| kind(s).chars().count() + 2)
        .max()
        .unwrap_or(0)
        + 2;
    let mut out = String::new();
    for (level_index, level) in deps.levels().iter().enumerate() {
        if level_index > 0 {
            out.push('\n');
        }
        for (k, &i) in level.iter().enumerate() {
            let step = &plan.steps[i];
            let mut line = format!(
                "{} {:<label_width$}{:<tool_width$}",
                mark(i).glyph(),
                label(i),
                format!("[{}]", kind(step))
            );
            if k > 0 {
                line.push('∥');
            }
            if !step.depends_on.is_empty() {
                if k > 0 {
                    line.push(' ');
                }
                let after: Vec<String> = step
                    .depends_on
                    .iter()
                    .map(|d| {
                        if deps.unknown[i].contains(d) {
                            format!("{d} (unknown)")
                        } else {
                            d.to_string()
                        }
                    })
                    .collect();
                let _ = write!(line, "← after: {}", after.join(", "));
            }
            // A title, a tool's name or a condition a model wrote cannot draw lines of its own in
            // the picture a person reads before running its plan (`plan create --run`).
            out.push_str(&one_line(line.trim_end()));
            out.push('\n');
            if let Some(block) = &step.block {
                ascii_block(block, 1, &mut out);
            }
        }
    }
    out
}

/// A block's nodes under its step: `name [tool]` then where it goes (`→ next`, or
/// `→ target if condition`).
fn ascii_block(block: &Block, depth: usize, out: &mut String) {
    let indent = "    ".repeat(depth);
    for (name, node) in &block.nodes {
        let start = if *name == block.entry_point {
            "▶"
        } else {
            "·"
        };
        let kind = node
            .tool
            .as_deref()
            .map_or_else(|| "[block]".to_owned(), |t| format!("[{t}]"));
        let next = match block.transitions.get(name) {
            None => String::new(),
            Some(Transition::Linear(to)) => format!("  → {to}"),
            Some(Transition::Branching(branches)) => {
                let arms: Vec<String> = branches
                    .iter()
                    .map(|b| format!("{} if {}", b.target, b.condition))
                    .collect();
                format!("  → {}", arms.join(", "))
            }
        };
        let line = format!("{indent}{start} {name} {kind}{next}");
        let _ = writeln!(out, "{}", one_line(&line));
        if let Some(nested) = &node.block {
            ascii_block(nested, depth + 1, out);
        }
    }
}

/// A block as a Mermaid subgraph with id `id`; node ids are `id_K`, K the node's position
/// (names differ where a sanitised form would not: `a-b` and `a_b`).
fn mermaid_block(block: &Block, id: &str, title: &str, depth: usize, out: &mut String) {
    let indent = "    ".repeat(depth);
    let _ = writeln!(out, "{indent}subgraph {id}[\"{}\"]", mermaid_text(title));
    let node_ids: std::collections::HashMap<&str, String> = (block.nodes.keys())
        .enumerate()
        .map(|(k, name)| (name.as_str(), format!("{id}_{k}")))
        .collect();
    let node_id = |name: &str| {
        node_ids
            .get(name)
            .cloned()
            .unwrap_or_else(|| format!("{id}_{}", sanitize(name)))
    };
    for (name, node) in &block.nodes {
        match (&node.tool, &node.block) {
            (Some(tool), _) => {
                let _ = writeln!(
                    out,
                    "{indent}    {}[\"{}<br/>[{}]\"]",
                    node_id(name),
                    mermaid_text(name),
                    mermaid_text(tool)
                );
            }
            (None, Some(nested)) => mermaid_block(nested, &node_id(name), name, depth + 1, out),
            (None, None) => {}
        }
    }
    for (from, transition) in &block.transitions {
        let from_id = node_id(from);
        match transition {
            Transition::Linear(to) => {
                let _ = writeln!(out, "{indent}    {from_id} --> {}", node_id(to));
            }
            Transition::Branching(branches) => {
                for b in branches {
                    let _ = writeln!(
                        out,
                        "{indent}    {from_id} -->|\"{}\"| {}",
                        mermaid_text(&b.condition),
                        node_id(&b.target)
                    );
                }
            }
        }
    }
    let _ = writeln!(out, "{indent}end");
}

/// `text` for a quoted Mermaid label: on one line, its `#`, quotes and bars as Mermaid's entity
/// codes (a bar would end an edge's label, a quote the label, and a `#` begin an entity).
fn mermaid_text(text: &str) -> String {
    one_line(text)
        .replace('#', "#35;")
        .replace('"', "#quot;")
        .replace('|', "#124;")
}

/// A block as a Graphviz cluster; node names are `PATH/NAME`.
fn dot_block(block: &Block, path: &str, depth: usize, counter: &mut usize, out: &mut String) {
    let quote = |text: &str| serde_json::Value::String(text.to_owned()).to_string();
    let indent = "    ".repeat(depth);
    *counter += 1;
    let _ = writeln!(out, "{indent}subgraph cluster_{counter} {{");
    let _ = writeln!(out, "{indent}    label={};", quote(path));
    for (name, node) in &block.nodes {
        let node_path = format!("{path}/{name}");
        match (&node.tool, &node.block) {
            (Some(tool), _) => {
                let _ = writeln!(
                    out,
                    "{indent}    {} [label={}];",
                    quote(&node_path),
                    quote(&format!("{name}\n[{tool}]"))
                );
            }
            (None, Some(nested)) => {
                let _ = writeln!(
                    out,
                    "{indent}    {} [label={}, shape=box3d];",
                    quote(&node_path),
                    quote(name)
                );
                dot_block(nested, &node_path, depth + 1, counter, out);
            }
            (None, None) => {}
        }
    }
    for (from, transition) in &block.transitions {
        let from_path = quote(&format!("{path}/{from}"));
        match transition {
            Transition::Linear(to) => {
                let _ = writeln!(
                    out,
                    "{indent}    {from_path} -> {};",
                    quote(&format!("{path}/{to}"))
                );
            }
            Transition::Branching(branches) => {
                for b in branches {
                    let _ = writeln!(
                        out,
                        "{indent}    {from_path} -> {} [label={}];",
                        quote(&format!("{path}/{}", b.target)),
                        quote(&b.condition)
                    );
                }
            }
        }
    }
    let _ = writeln!(out, "{indent}}}");
}

/// What a step runs, for pictures: its tool, `block` or `task`.
fn kind(step: &crate::model::Step) -> &str {
    step.kind()
}

fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// A Mermaid flowchart, top to bottom; edges point from a dependency to its dependent.
pub fn mermaid(plan: &Plan) -> String {
    let deps = Dependencies::new(plan);
    let mut out = String::from("flowchart TD\n");
    for (i, step) in plan.steps.iter().enumerate() {
        if let Some(block) = &step.block {
            mermaid_block(
                block,
                &format!("s{i}"),
                &format!("{} [block]", step.id),
                1,
                &mut out,
            );
            continue;
        }
        let title = step.title.as_deref().unwrap_or("");
        let text = if title.is_empty() {
            format!("{}<br/>[{}]", step.id, step.kind())
        } else {
            format!("{}. {}<br/>[{}]", step.id, title, step.kind())
        };
        // On one line: a newline in a title would end the node's line in the middle.
        let _ = writeln!(out, "    s{i}[\"{}\"]", mermaid_text(&text));
    }
    for (i, list) in deps.deps.iter().enumerate() {
        for &d in list {
            let _ = writeln!(out, "    s{d} --> s{i}");
        }
    }
    out
}

/// A Graphviz digraph; edges point from a dependency to its dependent.
pub fn dot(plan: &Plan) -> String {
    let deps = Dependencies::new(plan);
    let quote = |text: &str| serde_json::Value::String(text.to_owned()).to_string();
    let mut out = String::from("digraph plan {\n    rankdir=TB;\n    node [shape=box];\n");
    let mut clusters = 0;
    for step in &plan.steps {
        if let Some(block) = &step.block {
            let _ = writeln!(
                out,
                "    {} [label={}, shape=box3d];",
                quote(&step.id.0),
                quote(&format!("{}\n[block]", step.id))
            );
            dot_block(block, &step.id.0, 1, &mut clusters, &mut out);
            let _ = writeln!(
                out,
                "    {} -> {} [style=dashed];",
                quote(&step.id.0),
                quote(&format!("{}/{}", step.id, block.entry_point))
            );
            continue;
        }
        let label = match &step.title {
            Some(title) => format!("{}. {}\n[{}]", step.id, title, step.kind()),
            None => format!("{}\n[{}]", step.id, step.kind()),
        };
        let _ = writeln!(out, "    {} [label={}];", quote(&step.id.0), quote(&label));
    }
    for (i, list) in deps.deps.iter().enumerate() {
        for &d in list {
            let _ = writeln!(
                out,
                "    {} -> {};",
                quote(&plan.steps[d].id.0),
                quote(&plan.steps[i].id.0)
            );
        }
    }
    out.push_str("}\n");
    out
}
