//! Pictures of a plan's DAG: the ASCII of seed 003, Mermaid and Graphviz DOT.

use std::fmt::Write as _;

use crate::dag::Dependencies;
use crate::model::Plan;

/// The mark before a step in the ASCII picture (seed 003).
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

/// Seed 003's picture: one block per topological level, `∥` on steps that run beside an
/// earlier one of their level, `← after:` naming dependencies.
pub fn ascii(plan: &Plan, mark: &dyn Fn(usize) -> Mark) -> String {
    let deps = Dependencies::new(plan);
    let label = |i: usize| {
        let step = &plan.steps[i];
        format!(
            "{}. {}",
            step.id,
            step.title.as_deref().unwrap_or(&step.tool)
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
        .map(|s| s.tool.chars().count() + 2)
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
                format!("[{}]", step.tool)
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
            out.push_str(line.trim_end());
            out.push('\n');
        }
    }
    out
}

/// A Mermaid flowchart, top to bottom; edges point from a dependency to its dependent.
pub fn mermaid(plan: &Plan) -> String {
    let deps = Dependencies::new(plan);
    let mut out = String::from("flowchart TD\n");
    for (i, step) in plan.steps.iter().enumerate() {
        let title = step.title.as_deref().unwrap_or("");
        let text = if title.is_empty() {
            format!("{}<br/>[{}]", step.id, step.tool)
        } else {
            format!("{}. {}<br/>[{}]", step.id, title, step.tool)
        };
        let _ = writeln!(out, "    s{i}[\"{}\"]", text.replace('"', "#quot;"));
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
    for step in &plan.steps {
        let label = match &step.title {
            Some(title) => format!("{}. {}\n[{}]", step.id, title, step.tool),
            None => format!("{}\n[{}]", step.id, step.tool),
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
