//! A run's progress as its events tell it, for the views that follow a run live (the CLI's
//! progress bar and lines, a dashboard's graph): which of the plan's steps each event is
//! about, which steps run (and the node a block is at), how far the map items are.

use plan_graph::{CallOf, Plan, StepIndex};
use plan_types::{Event, EventKind, RunReport};

use crate::StepState;

/// The plan's top-level steps, as a view of its runs tells what a record or an event is about.
/// Kept instead of the plan, which a run lets go of once it is compiled.
#[derive(Debug, Default)]
pub struct Steps {
    /// The steps' ids in plan order.
    ids: Vec<String>,
    /// Each step's kind (`exec`, `map`, `block`, …), in plan order.
    kinds: Vec<String>,
    /// Whether each step is a map step.
    maps: Vec<bool>,
    index: StepIndex,
}

/// What a record's or an event's `step_id` names among a plan's [`Steps`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part<'a> {
    /// A top-level step (its position).
    Step(usize),
    /// An item of a map step (the step's position).
    Item(usize),
    /// A node of a block step (the step's position, and the node's path in it).
    Node(usize, &'a str),
    /// None of the plan's: a step of an earlier revision (`run --replan`), or the run itself.
    Other,
}

impl Steps {
    /// The steps of `plan`.
    pub fn of(plan: &Plan) -> Self {
        Steps {
            ids: plan.steps.iter().map(|step| step.id.0.clone()).collect(),
            kinds: plan
                .steps
                .iter()
                .map(|step| step.kind().to_string())
                .collect(),
            maps: plan
                .steps
                .iter()
                .map(|step| step.expand.is_some())
                .collect(),
            index: StepIndex::new(plan.steps.iter().map(|step| step.id.0.as_str())),
        }
    }

    /// What `id` names.
    pub fn part<'a>(&self, id: &'a str) -> Part<'a> {
        match self.index.call_of(id) {
            Some(CallOf::Step(i)) => Part::Step(i),
            Some(CallOf::Item(i)) if self.maps[i] => Part::Item(i),
            Some(CallOf::Inside(i, node)) => Part::Node(i, node),
            Some(CallOf::Item(_)) | None => Part::Other,
        }
    }

    /// The id of the step at `i`.
    pub fn id(&self, i: usize) -> &str {
        &self.ids[i]
    }

    /// The kind of the step at `i`.
    pub fn kind(&self, i: usize) -> &str {
        &self.kinds[i]
    }

    /// How many steps the plan has.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether the plan has none.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

/// What a run is doing, folded from its events ([`Progress::see`]).
#[derive(Debug, Default)]
pub struct Progress {
    /// Top-level steps running, in start order, with the node a block is at.
    running: Vec<(usize, Option<String>)>,
    /// Map items that started (a call of any item, once).
    pub items_started: u64,
    /// Map items (and block nodes) that ended.
    pub items_done: u64,
    /// Attempts that failed and are tried again.
    pub retries: u64,
    /// Top-level steps that ended or were skipped.
    pub settled: u64,
}

/// What one event was about, and what it changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen<'a> {
    /// The part of the plan it is about.
    pub part: Part<'a>,
    /// It started a top-level step: its first call, a block's entry, a task's first attempt,
    /// or a map's first item (for which the map step is `Item`'s).
    pub started: bool,
}

impl Progress {
    /// Takes `event` (of a run of a plan with `steps`) into account.
    pub fn see<'a>(&mut self, steps: &Steps, event: &'a Event) -> Seen<'a> {
        let id = event.step_id.as_deref().unwrap_or("");
        let part = steps.part(id);
        let mut started = false;
        let first_call = matches!(event.kind, EventKind::ToolCalled | EventKind::BlockEntered)
            && event.attempt <= 1;
        match (event.kind, part) {
            (_, Part::Step(i)) if first_call => started = self.start(i),
            (_, Part::Node(i, node)) if first_call => {
                if let Some(entry) = self.running.iter_mut().find(|(r, _)| *r == i) {
                    entry.1 = Some(node.to_owned());
                }
            }
            (_, Part::Item(i)) if first_call => {
                self.items_started += 1;
                started = self.start(i);
            }
            (_, Part::Other) if first_call => self.items_started += 1,
            (EventKind::TaskChanged, Part::Step(i))
                if event.reason.as_deref() == Some("in_progress") =>
            {
                started = self.start(i);
            }
            (EventKind::StepRetrying, _) => self.retries += 1,
            (EventKind::StepExecuted, Part::Step(i)) => {
                self.running.retain(|(r, _)| *r != i);
                self.settled += 1;
            }
            (EventKind::StepExecuted, _) => self.items_done += 1,
            (EventKind::StepSkipped, Part::Step(_)) => self.settled += 1,
            _ => {}
        }
        Seen { part, started }
    }

    /// Marks step `i` running; false if it already was.
    fn start(&mut self, i: usize) -> bool {
        if self.running.iter().any(|(r, _)| *r == i) {
            return false;
        }
        self.running.push((i, None));
        true
    }

    /// The top-level steps running (their positions), in start order, with the node a block
    /// is at.
    pub fn running(&self) -> impl Iterator<Item = (usize, Option<&str>)> {
        self.running
            .iter()
            .map(|(step, node)| (*step, node.as_deref()))
    }
}

/// A run's records counted as a view of the run counts them: the plan's steps by their
/// [`StepState`], and the map items, block nodes and steps of earlier revisions of the plan
/// (`run --replan`) apart. `__meta__` is none of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    /// How many of the plan's steps are in each state (states no step is in are left out).
    pub steps: Vec<(StepState, usize)>,
    /// Map items.
    pub items: usize,
    /// Block nodes.
    pub nodes: usize,
    /// Steps of earlier revisions.
    pub earlier: usize,
}

impl Tally {
    /// The records of `report`, a run of a plan with `steps`.
    pub fn of(report: &RunReport, steps: &Steps) -> Tally {
        let mut tally = Tally::default();
        for record in &report.records {
            if record.step_id == plan_graph::META_STEP_ID {
                continue;
            }
            match steps.part(&record.step_id) {
                Part::Step(_) => {
                    let state = StepState::of(record, report.task_status);
                    match tally.steps.iter_mut().find(|(s, _)| *s == state) {
                        Some((_, n)) => *n += 1,
                        None => tally.steps.push((state, 1)),
                    }
                }
                Part::Item(_) => tally.items += 1,
                Part::Node(..) => tally.nodes += 1,
                Part::Other => tally.earlier += 1,
            }
        }
        tally
    }

    /// How many of the plan's steps are in `state`.
    pub fn count(&self, state: StepState) -> usize {
        self.steps
            .iter()
            .find(|(s, _)| *s == state)
            .map_or(0, |(_, n)| *n)
    }

    /// How many of the plan's steps have records.
    pub fn step_count(&self) -> usize {
        self.steps.iter().map(|(_, n)| n).sum()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use plan_types::{Event, EventKind};

    use super::{Part, Progress, Steps};

    fn steps() -> Steps {
        let yaml = "steps:\n\
             - {id: build, tool: echo, args: {}}\n\
             - {id: build/each, tool: echo, expand_on: [1, 2], args: {n: $each}}\n\
             - {id: a/b, tool: echo, args: {}}\n";
        let source = plan_graph::Source::new("plan.yaml", yaml);
        let options = plan_graph::LoadOptions::default();
        let loaded = plan_graph::load(source, plan_graph::Format::Yaml, &options).expect("loads");
        Steps::of(&loaded.plan)
    }

    fn event(kind: EventKind, id: &str, attempt: u32) -> Event {
        Event::new(kind, &Arc::from("r")).step(&Arc::from(id), attempt)
    }

    #[test]
    fn an_id_is_told_apart_as_a_step_an_item_a_node_or_none_of_the_plans() {
        let steps = steps();
        assert_eq!(steps.part("build"), Part::Step(0));
        // A map step whose id begins with another step's has its own items.
        assert_eq!(steps.part("build/each-1"), Part::Item(1));
        // A node of step `a/b`, though the step's id holds a `/` too.
        assert_eq!(steps.part("a/b/check#1"), Part::Node(2, "check#1"));
        assert_eq!(steps.part("gone"), Part::Other);
        assert_eq!(steps.part("build-1"), Part::Other);
        assert_eq!((steps.kind(0), steps.len()), ("echo", 3));
    }

    #[test]
    fn the_running_steps_and_the_items_follow_the_events() {
        let steps = steps();
        let mut progress = Progress::default();
        let call = event(EventKind::ToolCalled, "build", 1);
        assert!(progress.see(&steps, &call).started);
        // A retry's call starts nothing again.
        let retry = event(EventKind::ToolCalled, "build", 2);
        assert!(!progress.see(&steps, &retry).started);
        let first = event(EventKind::ToolCalled, "build/each-0", 1);
        assert!(progress.see(&steps, &first).started);
        let second = event(EventKind::ToolCalled, "build/each-1", 1);
        assert!(!progress.see(&steps, &second).started);
        progress.see(&steps, &event(EventKind::BlockEntered, "a/b", 1));
        progress.see(&steps, &event(EventKind::ToolCalled, "a/b/check#1", 1));
        let running: Vec<_> = progress.running().collect();
        assert_eq!(running, [(0, None), (1, None), (2, Some("check#1"))]);
        progress.see(&steps, &event(EventKind::StepRetrying, "build", 2));
        progress.see(&steps, &event(EventKind::StepExecuted, "build", 2));
        progress.see(&steps, &event(EventKind::StepExecuted, "build/each-0", 1));
        assert_eq!(
            (
                progress.items_started,
                progress.items_done,
                progress.retries,
                progress.settled
            ),
            (2, 1, 1, 1)
        );
        assert_eq!(progress.running().count(), 2);
    }

    #[test]
    fn a_tally_counts_the_plans_steps_by_state_and_the_rest_apart() {
        let steps = steps();
        let record = |id: &str, ok: bool| {
            let error = (!ok).then(|| serde_json::json!({"code": "E_EXEC", "message": "exit 1"}));
            serde_json::json!({"step_id": id, "ok": ok, "skipped": false, "attempts": 1,
                               "duration_ms": 1, "error": error})
        };
        let report: plan_types::RunReport = serde_json::from_value(serde_json::json!({
            "run_id": "R", "plan_id": "p", "task_status": "FAILED", "variables": {},
            "records": [
                record("build", true), record("build/each-0", true), record("build/each-1", false),
                record("build/each", false), record("a/b/check#1", true), record("a/b", true),
                record("gone", true),
                {"step_id": "__meta__", "ok": false, "skipped": false, "attempts": 0, "duration_ms": 9}
            ]
        }))
        .expect("a report");
        let tally = super::Tally::of(&report, &steps);
        assert_eq!((tally.items, tally.nodes, tally.earlier), (2, 1, 1));
        assert_eq!(tally.count(crate::StepState::Ok), 2);
        assert_eq!(tally.count(crate::StepState::Failed), 1);
        assert_eq!(tally.count(crate::StepState::Skipped), 0);
        assert_eq!(tally.step_count(), 3);
    }
}
