//! A run's plan as a graph the page draws: each step a node (a map step one node, whatever its
//! items; a block or a task one node too), laid out in layers (Sugiyama's method: each step in
//! the column of its longest chain of dependencies, the order within each column chosen by
//! barycenter sweeps to cut crossings), with each node's status from the run's report.

use plan_graph::{Dependencies, Plan};
use plan_types::RunReport;
use serde::Serialize;

/// Node sizes and gaps, in SVG units.
pub(crate) const WIDTH: f64 = 170.0;
pub(crate) const HEIGHT: f64 = 44.0;
pub(crate) const COLUMN: f64 = 230.0;
pub(crate) const ROW: f64 = 64.0;
pub(crate) const MARGIN: f64 = 16.0;

/// The graph of a run's plan.
#[derive(Debug, Serialize)]
pub(crate) struct Graph {
    pub(crate) nodes: Vec<Node>,
    pub(crate) edges: Vec<Edge>,
    pub(crate) width: f64,
    pub(crate) height: f64,
}

/// A step, where it is drawn, and how it stands.
#[derive(Debug, Serialize)]
pub(crate) struct Node {
    pub(crate) id: String,
    /// Its tool, or `block`, `task`.
    pub(crate) kind: String,
    /// `pending`, `running`, `ok`, `failed`, `skipped`, `waiting` or `blocked` (SPEC §12).
    pub(crate) status: &'static str,
    /// A map step's items: how many have a record, and how many of those succeeded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) items: Option<Items>,
    pub(crate) x: f64,
    pub(crate) y: f64,
    pub(crate) width: f64,
    pub(crate) height: f64,
}

/// A map step's progress.
#[derive(Debug, Serialize)]
pub(crate) struct Items {
    pub(crate) done: usize,
    pub(crate) ok: usize,
}

/// A dependency: `from` must finish before `to` (in a block: a transition, with its condition
/// and whether the run took it).
#[derive(Debug, Serialize)]
pub(crate) struct Edge {
    pub(crate) from: String,
    pub(crate) to: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) label: Option<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) taken: bool,
}

/// Lays out `plan` and gives each step its status in `report` (without a run, every step is
/// `pending`).
pub(crate) fn graph(plan: &Plan, report: Option<&RunReport>) -> Graph {
    let (records, pending, run) = match report {
        Some(report) => (
            &report.records[..],
            &report.pending_approvals[..],
            report.task_status,
        ),
        None => (&[][..], &[][..], plan_types::TaskStatus::Running),
    };
    let deps = Dependencies::new(plan);
    let columns = order(&deps, plan.steps.len());
    let mut at = vec![(0.0, 0.0); plan.steps.len()];
    let mut tallest = 0;
    for (c, column) in columns.iter().enumerate() {
        tallest = tallest.max(column.len());
        for (r, &step) in column.iter().enumerate() {
            at[step] = (MARGIN + c as f64 * COLUMN, MARGIN + r as f64 * ROW);
        }
    }
    // Each record to its step, once: its own, or one of its items or inner calls.
    let index = plan_graph::StepIndex::new(plan.steps.iter().map(|s| s.id.0.as_str()));
    let mut seen = vec![Seen::default(); plan.steps.len()];
    for record in records {
        match index.call_of(&record.step_id) {
            Some(plan_graph::CallOf::Step(i)) => seen[i].own = Some(record),
            Some(plan_graph::CallOf::Item(i) | plan_graph::CallOf::Inside(i, _)) => {
                seen[i].inside += 1;
                seen[i].inside_ok += usize::from(record.ok);
            }
            None => {}
        }
    }
    for pending in pending {
        if let Some(call) = index.call_of(&pending.step_id) {
            seen[call.step()].waits = true;
        }
    }
    let nodes = plan
        .steps
        .iter()
        .enumerate()
        .map(|(i, step)| {
            let seen = &seen[i];
            let items = step.expand.is_some().then_some(Items {
                done: seen.inside,
                ok: seen.inside_ok,
            });
            Node {
                id: step.id.0.clone(),
                kind: step.kind().to_owned(),
                status: status_of(seen, run),
                items,
                x: at[i].0,
                y: at[i].1,
                width: WIDTH,
                height: HEIGHT,
            }
        })
        .collect();
    let edges = (0..plan.steps.len())
        .flat_map(|i| {
            deps.deps[i].iter().map(move |&d| Edge {
                from: plan.steps[d].id.0.clone(),
                to: plan.steps[i].id.0.clone(),
                label: None,
                taken: false,
            })
        })
        .collect();
    Graph {
        nodes,
        edges,
        width: 2.0 * MARGIN + columns.len().saturating_sub(1) as f64 * COLUMN + WIDTH,
        height: 2.0 * MARGIN + tallest.saturating_sub(1) as f64 * ROW + HEIGHT,
    }
}

/// The steps in columns (each at its longest chain of dependencies), each column ordered by
/// barycenter sweeps: down (by the rows of a step's dependencies), then up (by its
/// dependents'), twice.
fn order(deps: &Dependencies, n: usize) -> Vec<Vec<usize>> {
    // Kahn's levels: each step one column after its last dependency (its longest chain).
    let mut columns = deps.levels();
    let mut row = vec![0.0f64; n];
    let place = |columns: &Vec<Vec<usize>>, row: &mut Vec<f64>| {
        for column in columns {
            for (r, &i) in column.iter().enumerate() {
                row[i] = r as f64;
            }
        }
    };
    place(&columns, &mut row);
    for _ in 0..2 {
        for c in 1..columns.len() {
            sort_by_barycenter(&mut columns[c], &row, |i| &deps.deps[i]);
            place(&columns, &mut row);
        }
        for c in (0..columns.len().saturating_sub(1)).rev() {
            sort_by_barycenter(&mut columns[c], &row, |i| &deps.dependents[i]);
            place(&columns, &mut row);
        }
    }
    columns
}

/// Orders `column` by the mean row of each step's neighbours (a step without any keeps its
/// row); ties keep plan order.
fn sort_by_barycenter<'a>(
    column: &mut [usize],
    row: &[f64],
    neighbours: impl Fn(usize) -> &'a Vec<usize>,
) {
    let key = |i: usize| {
        let near = neighbours(i);
        if near.is_empty() {
            row[i]
        } else {
            near.iter().map(|&j| row[j]).sum::<f64>() / near.len() as f64
        }
    };
    column.sort_by(|&a, &b| key(a).total_cmp(&key(b)).then(a.cmp(&b)));
}

/// What the report holds of one step.
#[derive(Default, Clone, Copy)]
struct Seen<'a> {
    own: Option<&'a plan_types::Record>,
    /// Records of its items or inner calls, and how many succeeded.
    inside: usize,
    inside_ok: usize,
    /// A call of it waits for an approval.
    waits: bool,
}

/// A step's status: its record's, else waiting (a call of it waits for an approval), else
/// running (the run runs and its items or inner calls have records), else pending.
fn status_of(seen: &Seen<'_>, run: plan_types::TaskStatus) -> &'static str {
    if seen.waits {
        return "waiting";
    }
    match seen.own {
        Some(record) => shown(plan_run::StepState::of(record, run)),
        None if run == plan_types::TaskStatus::Running && seen.inside > 0 => "running",
        None => "pending",
    }
}

/// How the page names a record's state (`plan-cli status`'s), in SPEC §12's words: what is
/// still to run (on resume, or after the decision the run waits for) is `pending`; `waiting`
/// is kept for the call a decision is waited for.
pub(crate) fn shown(state: plan_run::StepState) -> &'static str {
    use plan_run::StepState;
    match state {
        StepState::Ok => "ok",
        StepState::Failed => "failed",
        StepState::Skipped => "skipped",
        StepState::Blocked => "blocked",
        StepState::Running => "running",
        StepState::NotStarted | StepState::Interrupted | StepState::Waiting => "pending",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(json: serde_json::Value) -> Plan {
        let source = plan_graph::Source::new("plan.json", json.to_string());
        plan_graph::load(source, plan_graph::Format::Json, &Default::default())
            .unwrap()
            .plan
    }

    #[test]
    fn steps_sit_in_the_column_of_their_longest_chain_and_crossings_are_cut() {
        // c depends on a, d on b: in column 1, d must not sit above c when b sits below a.
        let plan = plan(serde_json::json!({"steps": [
            {"id": "b", "tool": "echo"}, {"id": "a", "tool": "echo"},
            {"id": "d", "tool": "echo", "depends_on": ["a"]},
            {"id": "c", "tool": "echo", "depends_on": ["b"]},
            {"id": "e", "tool": "echo", "depends_on": ["c", "d", "a"]}
        ]}));
        let deps = Dependencies::new(&plan);
        let columns = order(&deps, plan.steps.len());
        let ids = |c: &Vec<usize>| {
            c.iter()
                .map(|&i| plan.steps[i].id.0.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(columns.len(), 3, "e waits for a chain of two");
        assert_eq!(ids(&columns[2]), ["e"]);
        // Whatever the order of column 0, column 1 follows it: no crossing.
        let first = ids(&columns[0]);
        let second = ids(&columns[1]);
        let position = |list: &Vec<String>, id: &str| list.iter().position(|x| x == id).unwrap();
        assert_eq!(
            position(&first, "b") < position(&first, "a"),
            position(&second, "c") < position(&second, "d"),
            "{first:?} {second:?}"
        );
    }
}
