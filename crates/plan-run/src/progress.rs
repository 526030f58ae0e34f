//! A run's progress as its events tell it, for the views that follow a run live (the CLI's
//! progress bar and lines, a dashboard's graph): which of the plan's steps each event is
//! about, which steps run (and the node a block or the call a task is at), how far the map items are.

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::Arc;

use plan_graph::{CallOf, Plan, StepIndex};
use plan_types::{Event, EventKind, RunReport};

use serde_json::Value;

use crate::StepState;
use crate::words::{approval, count, duration, one_line};

/// The plan's top-level steps, as a view of its runs tells what a record or an event is about.
/// Kept instead of the plan, which a run lets go of once it is compiled.
#[derive(Debug, Default)]
pub struct Steps {
    /// The steps' ids in plan order.
    ids: Vec<String>,
    /// How a line names each step: its id and its kind (its tool's name, `block` or
    /// `task`), `build [exec]`, in plan order.
    labels: Vec<String>,
    /// What the calls inside each step are, in plan order.
    shapes: Vec<Shape>,
    index: StepIndex,
}

/// What the calls made for a step are, besides its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// A tool call, made once.
    Call,
    /// A map step: its items.
    Map,
    /// A block: its nodes.
    Block,
    /// A coding task: its implement, feedback and check calls.
    Task,
}

/// What a record's or an event's `step_id` names among a plan's [`Steps`]. More parts may
/// come (a match keeps an arm for those).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Part<'a> {
    /// A top-level step (its position).
    Step(usize),
    /// An item of a map step (the step's position).
    Item(usize),
    /// A node of a block step (the step's position, and the node's path in it).
    Node(usize, &'a str),
    /// A call of a coding task: its implement, feedback, a check or its merge (the step's
    /// position, and the call's path in it: `implement#2`, `check-1#2`, `merge#1`).
    TaskCall(usize, &'a str),
    /// None of the plan's: a step of an earlier revision (`run --replan`), the run itself, or
    /// a call the run makes besides the plan's steps (a task plan's `context_update`).
    Other,
}

impl Steps {
    /// The steps of the plan run `run_id` runs now (its latest revision), as the ledger keeps
    /// it: for a view of a run that only its records are at hand for.
    pub fn of_run(store: &plan_store::Store, run_id: &str) -> Result<Self, crate::LifecycleError> {
        Ok(Steps::of(&crate::plan_of(&store.run(run_id)?)?))
    }

    /// The steps of `plan`.
    pub fn of(plan: &Plan) -> Self {
        Steps {
            ids: plan.steps.iter().map(|step| step.id.0.clone()).collect(),
            labels: plan
                .steps
                .iter()
                .map(|step| format!("{} [{}]", step.id.0, one_line(step.kind())))
                .collect(),
            shapes: plan
                .steps
                .iter()
                .map(|step| {
                    if step.expand.is_some() {
                        Shape::Map
                    } else if step.block.is_some() {
                        Shape::Block
                    } else if step.task.is_some() {
                        Shape::Task
                    } else {
                        Shape::Call
                    }
                })
                .collect(),
            index: StepIndex::new(plan.steps.iter().map(|step| step.id.0.as_str())),
        }
    }

    /// What `id` names.
    pub fn part<'a>(&self, id: &'a str) -> Part<'a> {
        match self.index.call_of(id) {
            Some(CallOf::Step(i)) => Part::Step(i),
            Some(CallOf::Item(i)) if self.shapes[i] == Shape::Map => Part::Item(i),
            Some(CallOf::Inside(i, call)) if self.shapes[i] == Shape::Task => {
                Part::TaskCall(i, call)
            }
            Some(CallOf::Inside(i, node)) => Part::Node(i, node),
            Some(CallOf::Item(_)) | None => Part::Other,
        }
    }

    /// The id of the step at `i`.
    pub fn id(&self, i: usize) -> &str {
        &self.ids[i]
    }

    /// How a line names the step at `i`: `build [exec]`.
    pub fn label(&self, i: usize) -> &str {
        &self.labels[i]
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

/// What a run is doing, folded from its events ([`Progress::see`]), for a run of a plan with
/// [`Steps`].
#[derive(Debug)]
pub struct Progress {
    steps: Arc<Steps>,
    /// Top-level steps running, in start order, with the node a block or the call a task is
    /// at.
    running: Vec<(usize, Option<String>)>,
    /// Map items whose failed attempt is tried again: their next call starts nothing (a
    /// re-run of an item, `retry`, whatever its attempt, starts it again). Only these are
    /// kept, not every item in flight: a map of 100,000 items is 100,000 events.
    items_retrying: HashSet<Arc<str>>,
    items_started: u64,
    items_done: u64,
    retries: u64,
    settled: u64,
}

/// What one event was about, and what it changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen<'a> {
    /// The part of the plan it is about.
    pub part: Part<'a>,
    /// It started a top-level step that was not running: a call or a block's entry (a re-run's
    /// too, whatever its attempt number), a task's attempt, or a map's first item (for which
    /// `part` is the item's).
    pub started: bool,
}

impl Progress {
    /// Nothing seen yet of a run of a plan with `steps`.
    pub fn new(steps: Arc<Steps>) -> Self {
        Progress {
            steps,
            running: Vec::new(),
            items_retrying: HashSet::new(),
            items_started: 0,
            items_done: 0,
            retries: 0,
            settled: 0,
        }
    }

    /// The plan's steps.
    pub fn steps(&self) -> &Steps {
        &self.steps
    }

    /// Takes `event` into account.
    pub fn see<'a>(&mut self, event: &'a Event) -> Seen<'a> {
        let id = event.step_id.as_ref();
        let part = self.steps.part(id.map_or("", |id| id));
        let mut started = false;
        let call = matches!(event.kind, EventKind::ToolCalled | EventKind::BlockEntered);
        match (event.kind, part) {
            (_, Part::Step(i)) if call => started = self.start(i),
            (_, Part::Node(i, node) | Part::TaskCall(i, node)) if call => {
                if let Some(entry) = self.running.iter_mut().find(|(r, _)| *r == i) {
                    entry.1 = Some(node.to_owned());
                }
            }
            (_, Part::Item(i)) if call => {
                if !id.is_some_and(|id| self.items_retrying.remove(id)) {
                    self.items_started += 1;
                }
                started = self.start(i);
            }
            (EventKind::TaskChanged, Part::Step(i))
                if event.reason.as_deref() == Some("in_progress") =>
            {
                started = self.start(i);
            }
            (EventKind::StepRetrying, part) => {
                self.retries += 1;
                if let (Part::Item(_), Some(id)) = (part, id) {
                    self.items_retrying.insert(id.clone());
                }
            }
            (EventKind::StepExecuted, Part::Step(i)) => {
                self.running.retain(|(r, _)| *r != i);
                self.settled += 1;
            }
            (EventKind::StepExecuted, Part::Item(_)) => {
                self.items_done += 1;
                // An item that ends without a call (its arguments did not resolve) started
                // too: never fewer started than done.
                self.items_started = self.items_started.max(self.items_done);
            }
            (EventKind::StepSkipped, Part::Step(_)) => self.settled += 1,
            _ => {}
        }
        Seen { part, started }
    }

    /// Takes `event` into account ([`Progress::see`]) and gives the line a live view of the
    /// run shows for it ([`Progress::line`]).
    pub fn say(&mut self, event: &Event) -> Option<String> {
        let seen = self.see(event);
        self.line(event, seen)
    }

    /// The line a live view of the run shows for `event`, as [`Progress::see`] saw it (`seen`
    /// must be what `see` gave for this event: [`Progress::say`] does both): the
    /// run's start, a step's start and end (its label, `build [exec]`), a block node's and a
    /// task call's, a retry, a task's progress, what waits for approval. Nothing for the rest
    /// (a map item's call or success, or an event of none of the plan's steps that did not
    /// fail). Whatever comes from the plan or a tool (ids, tool names, errors, reasons) is
    /// on one line ([`one_line`]): a line is one event's.
    pub fn line(&self, event: &Event, seen: Seen<'_>) -> Option<String> {
        let id = one_line(event.step_id.as_deref().unwrap_or(""));
        let label = match seen.part {
            Part::Step(i) => Some(self.steps.label(i)),
            _ => None,
        };
        let took = || duration(event.duration_ms.unwrap_or(0));
        let inside = matches!(seen.part, Part::Node(..) | Part::TaskCall(..));
        match event.kind {
            EventKind::RunStarted => {
                let plan = one_line(event.plan_id.as_deref().unwrap_or(""));
                let steps = count(self.steps.len(), "step", "steps");
                Some(format!("run {} · plan `{plan}` · {steps}", event.run_id))
            }
            EventKind::ToolCalled | EventKind::BlockEntered => match seen.part {
                Part::Step(_) if seen.started => Some(format!("▶ {}", label.unwrap_or(&id))),
                _ if inside && event.kind == EventKind::ToolCalled && event.attempt <= 1 => {
                    let tool = one_line(event.tool.as_deref().unwrap_or(""));
                    Some(format!("▶ {id} [{tool}]"))
                }
                // The first item of a map step starts the step.
                Part::Item(map) if seen.started => {
                    Some(format!("▶ {}  (map)", self.steps.label(map)))
                }
                _ => None,
            },
            EventKind::ToolSucceeded if inside => Some(format!("✓ {id}  {}", took())),
            EventKind::ToolFailed if inside => {
                Some(format!("✗ {id}  {}  {}", took(), error_text(event)))
            }
            EventKind::StepRetrying => Some(format!(
                "↻ {id} failed ({}); attempt {} in {}",
                error_text(event),
                event.attempt,
                duration(event.delay_ms.unwrap_or(0))
            )),
            EventKind::StepExecuted => {
                let ok = event.ok.unwrap_or(false);
                let code = event.error.as_ref().and_then(|e| e.get("code"));
                let cancelled = code.and_then(Value::as_str) == Some("E_CANCELLED");
                match label {
                    Some(label) if ok => Some(format!("✓ {label}  {}", took())),
                    Some(label) if cancelled => Some(format!(
                        "■ {label}  {}  interrupted; it runs again on resume",
                        took()
                    )),
                    Some(label) => Some(format!("✗ {label}  {}  {}", took(), error_text(event))),
                    None if !ok && !cancelled => {
                        Some(format!("✗ {id}  {}  {}", took(), error_text(event)))
                    }
                    None => None,
                }
            }
            EventKind::StepSkipped => {
                let reason = one_line(event.reason.as_deref().unwrap_or(""));
                // As the summary words it: a step that can never run is not a skip.
                label.map(|label| {
                    if reason.starts_with(plan_types::reasons::UNKNOWN_DEPENDENCY) {
                        format!("! {label}  not run: {reason}")
                    } else {
                        format!("- {label}  skipped: {reason}")
                    }
                })
            }
            EventKind::TaskChanged => {
                // A coding task's progress: attempts, verification, the merge queue; the
                // step's own line says how it ended.
                let attempt = event.attempt;
                match event.reason.as_deref().unwrap_or("") {
                    "in_progress" => Some(format!("▶ {}  attempt {attempt}", label.unwrap_or(&id))),
                    "verifying" => Some(format!("… {id}  attempt {attempt}: verifying")),
                    "verified" => Some(format!("… {id}  verified; waits for its turn to merge")),
                    "merging" => Some(format!("… {id}  merging")),
                    "failed" => {
                        let message = event.error.as_ref().and_then(|e| e.get("message"));
                        let why = one_line(message.and_then(Value::as_str).unwrap_or(""));
                        Some(format!("↻ {id}  attempt {attempt} failed: {why}"))
                    }
                    _ => None,
                }
            }
            EventKind::ApprovalAwaiting => {
                let waiting: Vec<Cow<'_, str>> = (event.pending.iter().flatten())
                    .map(|pending| approval(&pending.step_id))
                    .collect();
                Some(format!("… waiting for approval: {}", waiting.join(", ")))
            }
            _ => None,
        }
    }

    /// Marks step `i` running; false if it already was.
    fn start(&mut self, i: usize) -> bool {
        if self.running.iter().any(|(r, _)| *r == i) {
            return false;
        }
        self.running.push((i, None));
        true
    }

    /// The top-level steps running (their ids), in start order, with the node a block or the call a task
    /// is at.
    pub fn running(&self) -> impl Iterator<Item = (&str, Option<&str>)> {
        self.running
            .iter()
            .map(|(step, node)| (self.steps.id(*step), node.as_deref()))
    }

    /// Map items that started (each once, however many attempts it takes).
    pub fn items_started(&self) -> u64 {
        self.items_started
    }

    /// Map items that ended.
    pub fn items_done(&self) -> u64 {
        self.items_done
    }

    /// Failed attempts that are tried again.
    pub fn retries(&self) -> u64 {
        self.retries
    }

    /// Top-level steps that ended or were skipped.
    pub fn settled(&self) -> u64 {
        self.settled
    }
}

/// `CODE: message` of an event's error.
fn error_text(event: &Event) -> String {
    let field = |name: &str| {
        let value = event.error.as_ref().and_then(|error| error.get(name));
        value.and_then(Value::as_str).unwrap_or("").to_owned()
    };
    one_line(&format!("{}: {}", field("code"), field("message"))).into_owned()
}

/// A run's records counted as a view of the run counts them: the plan's steps by their
/// [`StepState`], and the map items, block nodes, task calls and steps of earlier revisions of the plan
/// (`run --replan`) apart. `__meta__` is none of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    /// How many of the plan's steps are in each state (states no step is in are left out).
    steps: Vec<(StepState, usize)>,
    /// Map items.
    pub items: usize,
    /// Block nodes.
    pub nodes: usize,
    /// Calls of coding tasks (implement, feedback, checks).
    pub task_calls: usize,
    /// Records of none of the plan's steps ([`Part::Other`]): steps of earlier revisions of
    /// the plan (`run --replan`).
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
                Part::TaskCall(..) => tally.task_calls += 1,
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
             - {id: a/b, tool: echo, args: {}}\n\
             - {id: t, task: {implement: {tool: echo, args: {}}}}\n\
             workspace: {repo: .}\n";
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
        // A task's calls are its own, not a block's nodes.
        assert_eq!(steps.part("t/check-1#2"), Part::TaskCall(3, "check-1#2"));
        assert_eq!(steps.part("gone"), Part::Other);
        assert_eq!(steps.part("build-1"), Part::Other);
        assert_eq!(
            (steps.label(0), steps.label(3)),
            ("build [echo]", "t [task]")
        );
        assert_eq!(steps.len(), 4);
    }

    #[test]
    fn the_running_steps_and_the_items_follow_the_events() {
        let mut progress = Progress::new(Arc::new(steps()));
        let call = event(EventKind::ToolCalled, "build", 1);
        assert!(progress.see(&call).started);
        // A retry's call starts nothing again.
        let retry = event(EventKind::ToolCalled, "build", 2);
        assert!(!progress.see(&retry).started);
        let first = event(EventKind::ToolCalled, "build/each-0", 1);
        let seen = progress.see(&first);
        assert_eq!((seen.part, seen.started), (Part::Item(1), true));
        progress.see(&event(EventKind::StepRetrying, "build/each-0", 2));
        let again = event(EventKind::ToolCalled, "build/each-0", 2);
        assert!(!progress.see(&again).started, "an item's next attempt");
        let second = event(EventKind::ToolCalled, "build/each-1", 1);
        assert!(!progress.see(&second).started);
        progress.see(&event(EventKind::BlockEntered, "a/b", 1));
        let node = event(EventKind::ToolCalled, "a/b/check#1", 1);
        assert_eq!(progress.see(&node).part, Part::Node(2, "check#1"));
        let running: Vec<_> = progress.running().collect();
        assert_eq!(
            running,
            [
                ("build", None),
                ("build/each", None),
                ("a/b", Some("check#1"))
            ]
        );
        progress.see(&event(EventKind::StepRetrying, "build", 2));
        progress.see(&event(EventKind::StepExecuted, "build", 2));
        progress.see(&event(EventKind::StepExecuted, "build/each-0", 2));
        // A call of none of the plan's steps (a task plan's context update) is no item.
        let update = plan_types::CONTEXT_UPDATE_ID;
        progress.see(&event(EventKind::ToolCalled, update, 1));
        progress.see(&event(EventKind::StepExecuted, update, 1));
        let counts = |p: &Progress| (p.items_started(), p.items_done(), p.retries(), p.settled());
        assert_eq!(counts(&progress), (2, 1, 2, 1));
        assert_eq!(progress.running().count(), 2);
        // Run again (`retry`): its call starts it again whatever its attempt, and so does the
        // item's; a skip settles a step.
        assert!(
            progress
                .see(&event(EventKind::ToolCalled, "build", 3))
                .started
        );
        progress.see(&event(EventKind::ToolCalled, "build/each-0", 3));
        assert_eq!(progress.items_started(), 3);
        progress.see(&event(EventKind::StepSkipped, "a/b", 0));
        assert_eq!(progress.settled(), 2);
        // An item that ends without a call (its arguments did not resolve) started too.
        let mut unresolved = Progress::new(Arc::new(steps()));
        unresolved.see(&event(EventKind::StepExecuted, "build/each-7", 1));
        assert_eq!(
            (unresolved.items_started(), unresolved.items_done()),
            (1, 1)
        );
    }

    #[test]
    fn a_task_attempt_starts_its_step() {
        let mut progress = Progress::new(Arc::new(steps()));
        let mut changed = event(EventKind::TaskChanged, "build", 1);
        changed.reason = Some("verifying".to_owned());
        assert!(!progress.see(&changed).started);
        changed.reason = Some("in_progress".to_owned());
        assert!(progress.see(&changed).started);
        assert_eq!(progress.running().next(), Some(("build", None)));
    }

    /// The lines a live view shows, event by event: one for what a person follows, none for
    /// what would flood it (an item's success), ids kept on their line.
    #[test]
    fn each_event_is_said_in_the_line_a_live_view_shows() {
        let mut progress = Progress::new(Arc::new(steps()));
        let mut said = |event: Event| progress.say(&event);
        let with = |mut event: Event, edit: &dyn Fn(&mut Event)| {
            edit(&mut event);
            event
        };
        let error = serde_json::json!({"code": "E_EXEC", "message": "exit 1"});
        let started = with(Event::new(EventKind::RunStarted, &Arc::from("R")), &|e| {
            e.plan_id = Some(Arc::from("p"));
        });
        assert_eq!(said(started).unwrap(), "run R · plan `p` · 4 steps");
        let call = event(EventKind::ToolCalled, "build", 1);
        assert_eq!(said(call).unwrap(), "▶ build [echo]");
        let retrying = with(event(EventKind::StepRetrying, "build", 2), &|e| {
            e.error = Some(error.clone());
            e.delay_ms = Some(1_500);
        });
        let line = said(retrying).unwrap();
        assert_eq!(line, "↻ build failed (E_EXEC: exit 1); attempt 2 in 1.50s");
        let done = with(event(EventKind::StepExecuted, "build", 2), &|e| {
            e.ok = Some(true);
            e.duration_ms = Some(12);
        });
        assert_eq!(said(done).unwrap(), "✓ build [echo]  12ms");
        // A map's first item starts the step; an item's success says nothing; a key from a
        // tool's data stays on its line when it fails.
        let first = event(EventKind::ToolCalled, "build/each-0", 1);
        assert_eq!(said(first).unwrap(), "▶ build/each [echo]  (map)");
        let item = with(event(EventKind::StepExecuted, "build/each-0", 1), &|e| {
            e.ok = Some(true);
        });
        assert_eq!(said(item), None);
        let odd = with(
            event(EventKind::StepExecuted, "build/each[a\n✓ b]", 1),
            &|e| {
                e.ok = Some(false);
                e.error = Some(error.clone());
            },
        );
        assert_eq!(
            said(odd).unwrap(),
            "✗ build/each[a\\n✓ b]  0ms  E_EXEC: exit 1"
        );
        // Nor can a tool's error message draw a line of its own.
        let forged = with(event(EventKind::StepExecuted, "build/each", 1), &|e| {
            e.ok = Some(false);
            e.error = Some(serde_json::json!({"code": "E_MCP", "message": "boom\n✓ deploy"}));
        });
        let line = said(forged).unwrap();
        assert_eq!(line, "✗ build/each [echo]  0ms  E_MCP: boom\\n✓ deploy");
        // A task's call is said as a block node's is.
        let check = with(event(EventKind::ToolCalled, "t/check-1#1", 1), &|e| {
            e.tool = Some(Arc::from("exec"));
        });
        assert_eq!(said(check).unwrap(), "▶ t/check-1#1 [exec]");
        let stopped = with(event(EventKind::StepExecuted, "a/b", 1), &|e| {
            e.ok = Some(false);
            e.error = Some(serde_json::json!({"code": "E_CANCELLED", "message": "stopped"}));
        });
        let line = said(stopped).unwrap();
        assert_eq!(
            line,
            "■ a/b [echo]  0ms  interrupted; it runs again on resume"
        );
        let skipped = with(event(EventKind::StepSkipped, "t", 0), &|e| {
            e.reason = Some(format!("{}: `zz`", plan_types::reasons::UNKNOWN_DEPENDENCY));
        });
        assert!(said(skipped).unwrap().starts_with("! t [task]  not run: "));
        let waiting = with(
            Event::new(EventKind::ApprovalAwaiting, &Arc::from("R")),
            &|e| {
                let pending = |id: &str| {
                    serde_json::from_value(serde_json::json!({"step_id": id})).expect("a request")
                };
                e.pending = Some(vec![pending(plan_types::PLAN_APPROVAL), pending("deploy")]);
            },
        );
        let line = said(waiting).unwrap();
        assert_eq!(line, "… waiting for approval: the plan, deploy");
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
                record("t/implement#1", true), record("t/check-1#1", false),
                record("t/implement#2", true), record("t", true), record("gone", true),
                {"step_id": "__meta__", "ok": false, "skipped": false, "attempts": 0, "duration_ms": 9}
            ]
        }))
        .expect("a report");
        let tally = super::Tally::of(&report, &steps);
        let apart = (tally.items, tally.nodes, tally.task_calls, tally.earlier);
        assert_eq!(apart, (2, 1, 3, 1));
        assert_eq!(tally.count(crate::StepState::Ok), 3);
        assert_eq!(tally.count(crate::StepState::Failed), 1);
        assert_eq!(tally.count(crate::StepState::Skipped), 0);
        assert_eq!(tally.step_count(), 4);
    }
}
