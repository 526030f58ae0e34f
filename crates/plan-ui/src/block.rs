//! A block step as a graph of its own, for the step panel: its nodes, its transitions (each
//! with its condition), and the path the run took through them, read from the calls it made
//! (`STEP/NODE#N`, in the order they were called). A nested block is one node here.

use plan_graph::{Block, CallOf, StepIndex, Transition};
use plan_types::{BlockPhase, CallPath, Event, EventKind, Record, Segment};

use crate::graph::{COLUMN, Edge, Graph, HEIGHT, MARGIN, Node, ROW, WIDTH};

/// What the run did inside the block step at `position`: its calls' events and records (ids
/// `STEP/NODE#N`, nested ones `STEP/NODE#N/…`), and where the block stands (its state and node).
pub(crate) struct Inside<'a> {
    /// The plan's steps, which call ids are read back through.
    pub(crate) index: &'a StepIndex,
    /// The block step's position.
    pub(crate) position: usize,
    pub(crate) events: &'a [Event],
    pub(crate) records: &'a [&'a Record],
    pub(crate) state: Option<(BlockPhase, Option<&'a str>)>,
    /// The run's status (a record's state depends on it).
    pub(crate) run: plan_types::TaskStatus,
}

/// The visit of a node a call inside the block is of, read back as every id is
/// (`StepIndex::call_of`, `CallPath::segments_of`): `check#2` for `STEP/check#2`, `inner#1` for
/// `STEP/inner#1/x#1`.
fn visit_of(inside: &Inside<'_>, call: &str) -> Option<Segment> {
    match inside.index.call_of(call)? {
        CallOf::Inside(step, rest) if step == inside.position => {
            CallPath::segments_of(rest).into_iter().next()
        }
        _ => None,
    }
}

/// The block laid out (each node in the column of its distance from the entry point; nodes
/// it cannot reach after them), each node with its status, each transition an edge.
pub(crate) fn graph(block: &Block, inside: &Inside<'_>) -> (Graph, Vec<String>) {
    // The path: each visit of a node once (`NODE#N`: its retries and the calls of a nested
    // block are the same visit), in the order its first call was made.
    let mut path: Vec<String> = Vec::new();
    let mut visits: Vec<Segment> = Vec::new();
    for event in inside.events {
        let call = match (&event.kind, event.step_id.as_deref()) {
            (EventKind::ToolCalled, Some(call)) => call,
            _ => continue,
        };
        let Some(visit) = visit_of(inside, call) else {
            continue;
        };
        if !visits.contains(&visit) {
            path.push(visit.name.to_string());
            visits.push(visit);
        }
    }
    // Columns: breadth-first from the entry point over the transitions.
    let names: Vec<&str> = block.nodes.keys().map(String::as_str).collect();
    let targets = |name: &str| -> Vec<(String, Option<String>)> {
        match block.transitions.get(name) {
            Some(Transition::Linear(to)) => vec![(to.clone(), None)],
            Some(Transition::Branching(branches)) => (branches.iter())
                .map(|b| (b.target.clone(), Some(b.condition.clone())))
                .collect(),
            None => Vec::new(),
        }
    };
    let mut depth: std::collections::BTreeMap<&str, usize> = Default::default();
    let mut queue = std::collections::VecDeque::from([(block.entry_point.as_str(), 0)]);
    while let Some((name, d)) = queue.pop_front() {
        if depth.contains_key(name) || !block.nodes.contains_key(name) {
            continue;
        }
        depth.insert(name, d);
        for (to, _) in targets(name) {
            if let Some(known) = names.iter().find(|n| **n == to) {
                queue.push_back((known, d + 1));
            }
        }
    }
    let deepest = depth.values().max().map_or(0, |d| d + 1);
    let mut columns: Vec<Vec<&str>> = vec![Vec::new(); deepest + 1];
    for name in &names {
        columns[depth.get(name).copied().unwrap_or(deepest)].push(name);
    }
    columns.retain(|column| !column.is_empty());
    let tallest = columns.iter().map(Vec::len).max().unwrap_or(0);
    let mut nodes = Vec::new();
    for (c, column) in columns.iter().enumerate() {
        for (r, name) in column.iter().enumerate() {
            let node = &block.nodes[*name];
            let kind = match (&node.block, &node.tool) {
                (Some(_), _) => "block".to_owned(),
                (None, Some(tool)) => tool.clone(),
                (None, None) => String::new(),
            };
            nodes.push(Node {
                id: (*name).to_owned(),
                kind,
                status: status(name, inside),
                items: None,
                x: MARGIN + c as f64 * COLUMN,
                y: MARGIN + r as f64 * ROW,
                width: WIDTH,
                height: HEIGHT,
            });
        }
    }
    let taken: std::collections::BTreeSet<(&str, &str)> = (path.windows(2))
        .map(|pair| (pair[0].as_str(), pair[1].as_str()))
        .collect();
    let mut edges = Vec::new();
    for name in &names {
        for (to, label) in targets(name) {
            if block.nodes.contains_key(&to) {
                edges.push(Edge {
                    taken: taken.contains(&(*name, to.as_str())),
                    from: (*name).to_owned(),
                    to,
                    label,
                });
            }
        }
    }
    let graph = Graph {
        nodes,
        edges,
        width: 2.0 * MARGIN + columns.len().saturating_sub(1) as f64 * COLUMN + WIDTH,
        height: 2.0 * MARGIN + tallest.saturating_sub(1) as f64 * ROW + HEIGHT,
    };
    (graph, path)
}

/// A node's status: where the block stands, if it stands at this node; else its last call's
/// record's state, as `plan-cli status` says it; else `pending`.
fn status(name: &str, inside: &Inside<'_>) -> &'static str {
    // The block's node is `check`, or `inner/deploy` inside a nested block.
    if let Some((phase, Some(at))) = inside.state
        && CallPath::segments_of(at)
            .first()
            .is_some_and(|node| &*node.name == name)
    {
        match phase {
            BlockPhase::Waiting => return "waiting",
            BlockPhase::Busy => return "running",
            _ => {}
        }
    }
    let last = (inside.records.iter())
        .rev()
        .find(|record| visit_of(inside, &record.step_id).is_some_and(|v| &*v.name == name));
    last.map_or("pending", |record| {
        crate::graph::shown(plan_run::StepState::of(record, inside.run))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn block() -> Block {
        serde_json::from_value(json!({
            "entry_point": "check",
            "nodes": {
                "check": {"tool": "echo"},
                "fix": {"tool": "echo"},
                "inner": {"block": {"entry_point": "a", "nodes": {"a": {"tool": "echo"}}}},
                "orphan": {"tool": "echo"}
            },
            "transitions": {
                "check": [{"condition": "passed", "target": "inner"}, {"condition": "default", "target": "fix"}],
                "fix": "check"
            },
            "conditions": {"passed": "true"}
        }))
        .unwrap()
    }

    fn called(call: &str, attempt: u32) -> Event {
        serde_json::from_value(json!({
            "type": "tool.called", "run_id": "r", "step_id": call, "attempt": attempt,
            "ts": "2026-11-27T08:00:00.000Z", "tool": "echo"
        }))
        .unwrap()
    }

    fn record(id: &str, ok: bool) -> Record {
        serde_json::from_value(
            json!({"step_id": id, "ok": ok, "skipped": false, "attempts": 1, "duration_ms": 0}),
        )
        .unwrap()
    }

    #[test]
    fn the_path_is_each_visit_once_and_a_nested_block_is_one_node() {
        // check fails once (a retry of the same visit), goes to fix, back to check, then into
        // the nested block, which waits at its node.
        let events = [
            called("b/check#1", 1),
            called("b/check#1", 2),
            called("b/fix#1", 1),
            called("b/check#2", 1),
            called("b/inner#1/a#1", 1),
        ];
        let records = [
            record("b/check#1", true),
            record("b/fix#1", true),
            record("b/check#2", true),
        ];
        let records: Vec<&Record> = records.iter().collect();
        let index = StepIndex::new(["b"]);
        let inside = Inside {
            index: &index,
            position: 0,
            events: &events,
            records: &records,
            state: Some((BlockPhase::Waiting, Some("inner/a"))),
            run: plan_types::TaskStatus::Waiting,
        };
        let (graph, path) = graph(&block(), &inside);
        assert_eq!(path, ["check", "fix", "check", "inner"]);
        let status: Vec<(&str, &str, f64)> = (graph.nodes.iter())
            .map(|n| (n.id.as_str(), n.status, n.x))
            .collect();
        // Columns by distance from the entry point; the node nothing reaches comes last.
        assert_eq!(
            status,
            [
                ("check", "ok", MARGIN),
                ("fix", "ok", MARGIN + COLUMN),
                ("inner", "waiting", MARGIN + COLUMN),
                ("orphan", "pending", MARGIN + 2.0 * COLUMN),
            ]
        );
        let edges: Vec<(&str, &str, Option<&str>, bool)> = (graph.edges.iter())
            .map(|e| (e.from.as_str(), e.to.as_str(), e.label.as_deref(), e.taken))
            .collect();
        assert_eq!(
            edges,
            [
                ("check", "inner", Some("passed"), true),
                ("check", "fix", Some("default"), true),
                ("fix", "check", None, true),
            ]
        );
    }
}
