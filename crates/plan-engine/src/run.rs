//! The scheduler: starts each step the moment its dependencies are done, at most
//! `max_concurrency` calls at once, and records outcomes in plan order.
//!
//! One loop owns all run state (variables, records, the ready queue, map steps' items), so
//! nothing is locked: tool calls run as tasks and report back through their join handles. A
//! step reads the variables when it starts; validation guarantees every variable it reads from
//! another step was bound by an ancestor, so what it reads never depends on timing.
//!
//! A map step (`expand_on`) expands when it becomes ready: its items (`ID-0`, … or `ID[KEY]`)
//! join the ready queue right behind it, run like steps, and the map step settles when the
//! last item does, with its binds collected as lists in item order.
//!
//! With a [`Journal`], everything that settles in one turn of the loop is one batch, handed to
//! the ledger writer (`writer.rs`), which commits on a thread of its own. Under
//! `Durability::Sync` a step whose dependencies settled in a batch not yet committed is held
//! back until it is, so a step's result and binds are durable before a dependent runs; a step
//! with nothing uncommitted upstream starts at once. The scheduler never waits for SQLite.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use plan_graph::{CallOf, Mode, RunIf};
use plan_types::{
    Approvals, Batch, Durability, ErrorCode, Event, EventKind, EventSink, Journal, PLAN_APPROVAL,
    PendingApproval, Position, Record, Restored, RunEnd, RunReport, StepError, TaskStatus, reasons,
};
use plan_vars::Scope;
use serde_json::{Map, Value};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::admit::{Admission, Gate, admit};
use crate::block::NodeDone;
use crate::call::{CallContext, Finished, Made, WorkEnd, executed_record, millis};
use crate::guard::Guard;
use crate::kind::{Started, StepStart};
use crate::program::{
    CompiledExpand, DEFAULT_MAX_CONCURRENCY, ExpandSource, ItemValues, Program, expand_items,
    item_ids, resolve_args,
};
use crate::redact::Redactor;
use crate::writer::{Durable, Writer};
use plan_ports::codes;

/// How to run a program.
pub struct RunOptions {
    /// The run's id (the CLI makes a ULID).
    pub run_id: String,
    /// Overrides the plan's `max_concurrency`; the default is 4.
    pub max_concurrency: Option<usize>,
    /// Variables given by the caller; they win over the plan's `variables`.
    pub inputs: Map<String, Value>,
    /// Values of the environment variables the plan lists under `env:` (the engine reads no
    /// environment itself). They are redacted from records, variables and events.
    pub env: BTreeMap<String, String>,
    /// Where events go, if anywhere.
    pub events: Option<Arc<dyn EventSink>>,
    /// Where settled records go, if anywhere (written on a thread of the engine's own).
    pub journal: Option<Box<dyn Journal>>,
    /// When settled records must be in the journal: by default before a dependent starts.
    pub durability: Durability,
    /// What an earlier, interrupted attempt at this run already settled (`resume`).
    pub restored: Option<Restored>,
    /// Cancelling it stops the run: no new step starts, running tools are cancelled, and the
    /// run ends `STOPPED` (only what succeeded is committed, so a resume runs the rest).
    pub cancel: CancellationToken,
    /// Decisions on approvals so far: `risk: high` calls without one wait, and the run ends
    /// `WAITING` once nothing else can run.
    pub approvals: Approvals,
    /// Overrides the plan's `mode`. `approval` runs nothing until the plan is approved;
    /// `preview` is refused (a preview calls nothing: see [`Program::preview`]).
    pub mode: Option<Mode>,
    /// Makes retry delays reproducible: the jitter of attempt k of a step then depends only
    /// on the seed, the step and k.
    pub jitter_seed: Option<u64>,
    /// Where tools send the lines they print as they come (`run -v`); none by default.
    pub output: Option<plan_ports::OutputSink>,
    /// The folder every call's programs must stay in (a run under an author's policy): each
    /// tool is told of it (`ToolContext::confined_to`).
    pub confined_to: Option<Arc<std::path::Path>>,
    /// The git repository task steps work in (the plan's `workspace`, opened by the caller);
    /// a task step fails without one.
    pub workspace: Option<Arc<dyn crate::task::Workspace>>,
    /// When the run first started (a resumed run's first attempt), in whole milliseconds: its
    /// last record then counts from there to the end the journal records, so the two agree.
    /// `None`: the last record gives this call's duration.
    pub started_at: Option<SystemTime>,
}

impl RunOptions {
    /// Options with this run id and everything else default.
    pub fn new(run_id: impl Into<String>) -> Self {
        RunOptions {
            run_id: run_id.into(),
            max_concurrency: None,
            inputs: Map::new(),
            env: BTreeMap::new(),
            events: None,
            journal: None,
            durability: Durability::Sync,
            restored: None,
            cancel: CancellationToken::new(),
            approvals: Approvals::new(),
            mode: None,
            jitter_seed: None,
            output: None,
            confined_to: None,
            workspace: None,
            started_at: None,
        }
    }
}

/// A run that could not go on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    /// The journal failed to commit: the run stopped, since it could no longer be recorded.
    /// What was committed before stays, and the run can be resumed.
    #[error("the ledger could not be written, so the run stopped: {0}")]
    Journal(String),
    /// `preview` mode runs nothing, so there is no run: preview with [`Program::preview`].
    #[error("a preview runs nothing: use Program::preview")]
    Preview,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Succeeded,
    Failed,
    Skipped,
    Blocked,
    /// `when` was false (or every dependency is off so): not a failure, the run can still be
    /// COMPLETED.
    ConditionFalse,
}

/// A unit of work in the ready queue: a step, or item `k` of a map step. Ordered by plan
/// position, then item, so that with one call at a time the order is the plan's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Work {
    step: usize,
    /// 0 for the step itself, `k + 1` for item `k`.
    slot: usize,
}

/// What the scheduler knows of one step (the one place a step's run state lives).
struct StepState {
    /// Dependencies not settled yet.
    remaining: usize,
    /// Its final record, once it settled.
    record: Option<Record>,
    outcome: Option<Outcome>,
    /// Whether it is (or was) in the ready queue, so it is queued once.
    queued: bool,
    /// The ledger batch its record went into (0: durable before the run started); a
    /// dependent waits for that batch under `Durability::Sync`.
    settled_in: u64,
    /// What its kind keeps while it runs (a map's items, a block's or task's calls), made
    /// when first needed: a plain tool step never has one.
    inner: Option<Box<Inner>>,
}

impl StepState {
    /// A map step's items, once it expanded.
    fn map(&self) -> Option<&MapRun> {
        self.inner.as_deref()?.map.as_ref()
    }

    fn map_mut(&mut self) -> Option<&mut MapRun> {
        self.inner.as_deref_mut()?.map.as_mut()
    }
}

/// A step's run state beyond its outcome, by its kind: a map step's items, the calls made
/// inside a block or task step, where a block waits, and what an earlier attempt at the run
/// left of it.
#[derive(Default)]
struct Inner {
    /// A map step between its expansion and its last item (kept to the run's end: its items'
    /// records are reported before the step's own).
    map: Option<MapRun>,
    /// The records of the calls made inside the step (a block's nodes, a task's calls), or of
    /// a map step's items when it finished before the run was resumed, in the ledger's order.
    calls: Vec<Record>,
    /// A block or task that stopped to wait: why, and where it stands.
    waiting: Option<(String, Value)>,
    /// Where a block or task stood when an earlier attempt at the run ended; taken when it
    /// starts again.
    checkpoint: Option<Value>,
    /// Records an earlier attempt made of the step's items or of the calls inside it while
    /// the step had not settled, by id, with their place in the ledger.
    restored: HashMap<String, (usize, Record)>,
}

/// A map step's list: shared with the variable it names when `expand_on` is `${name}`, so a
/// large list is not copied; otherwise its own.
enum Items {
    Shared(Arc<Value>),
    Owned(Vec<Value>),
}

impl Items {
    fn as_slice(&self) -> &[Value] {
        match self {
            Items::Shared(value) => value.as_array().map_or(&[], Vec::as_slice),
            Items::Owned(items) => items,
        }
    }
}

/// A map step between its expansion and its last item.
struct MapRun {
    items: Items,
    ids: Vec<Arc<str>>,
    keys: Option<Vec<Value>>,
    records: Vec<Option<Record>>,
    /// Per bind (in the step's bind order), the value selected from each item's result.
    collected: Vec<Vec<Value>>,
    remaining: usize,
    failed: Vec<usize>,
    started: Instant,
}

impl crate::kind::RunShares for Scheduler<'_> {
    fn variables(&self) -> BTreeMap<String, Arc<Value>> {
        self.vars.clone()
    }

    fn environment(&self) -> BTreeMap<String, Value> {
        self.env.clone()
    }

    fn approvals(&self) -> Arc<Approvals> {
        self.approvals.clone()
    }

    fn workspace(&self) -> Option<Arc<dyn crate::task::Workspace>> {
        self.workspace.clone()
    }

    fn merges(&self) -> Arc<tokio::sync::Mutex<()>> {
        self.merges.clone()
    }

    fn progress(&self) -> Option<tokio::sync::mpsc::UnboundedSender<NodeDone>> {
        self.block_progress.clone()
    }

    fn earlier_attempts(&self, id: &str) -> u32 {
        self.earlier_attempts.get(id).copied().unwrap_or(0)
    }

    /// Where a block or task step stood when an earlier attempt at the run stopped, if it had
    /// started: then the records of the calls it made before are taken back, in the ledger's
    /// order, and the records of its next calls follow them.
    fn take_checkpoint(&mut self, step_index: usize) -> Option<Value> {
        let inner = self.steps[step_index].inner.as_deref_mut()?;
        let checkpoint = inner.checkpoint.take()?;
        let mut prior: Vec<(usize, Record)> = inner.restored.drain().map(|(_, r)| r).collect();
        prior.sort_by_key(|(place, _)| *place);
        inner.calls = prior.into_iter().map(|(_, record)| record).collect();
        Some(checkpoint)
    }
}

struct Scheduler<'p> {
    program: &'p Program,
    run_id: Arc<str>,
    events: Option<Arc<dyn EventSink>>,
    redactor: Arc<Redactor>,
    vars: BTreeMap<String, Arc<Value>>,
    env: BTreeMap<String, Value>,
    /// Each step's state, in plan order.
    steps: Vec<StepState>,
    ready: BinaryHeap<Reverse<Work>>,
    /// The ledger writer, with a journal.
    writer: Option<Writer>,
    /// Every batch up to this one is durable (`u64::MAX` when nothing needs to wait for it:
    /// no journal, or a durability other than `sync`).
    durable: u64,
    /// Ready work whose dependencies' records are not durable yet.
    held: Vec<Work>,
    /// Settled since the last batch was sent.
    pending: Vec<Position>,
    pending_vars: Vec<String>,
    /// Set when the caller cancels: from then on only successes are committed.
    stopping: CancellationToken,
    approvals: Arc<Approvals>,
    /// Calls waiting for an approval, in the order they became ready.
    awaiting: Vec<PendingApproval>,
    /// Where running blocks stand after their last finished node, to be committed.
    pending_checkpoints: BTreeMap<String, Value>,
    /// Whether an earlier attempt at the run completed its context update.
    context_update_done: bool,
    /// Running blocks report finished node runs here, when there is a journal.
    block_progress: Option<tokio::sync::mpsc::UnboundedSender<NodeDone>>,
    /// The git repository of task steps, and its merge queue.
    workspace: Option<Arc<dyn crate::task::Workspace>>,
    merges: Arc<tokio::sync::Mutex<()>>,
    /// Blocks waiting for a reported node to be durable, with the batch that holds it.
    node_waiters: Vec<(u64, tokio::sync::oneshot::Sender<()>)>,
    guard: Option<Arc<Guard>>,
    jitter_seed: Option<u64>,
    output: Option<plan_ports::OutputSink>,
    confined_to: Option<Arc<std::path::Path>>,
    /// With `fail_fast`: the first step (or item) that failed. Nothing starts after it.
    first_failure: Option<Arc<str>>,
    /// The context update after the last task failed: the run fails, and says why.
    context_update_failed: Option<StepError>,
    /// Attempts of calls before they were run again, by id (`Restored::earlier_attempts`).
    earlier_attempts: Arc<BTreeMap<String, u32>>,
}

/// Runs a program to the end and returns its records.
pub async fn run(program: &Program, mut options: RunOptions) -> Result<RunReport, RunError> {
    let started = Instant::now();
    let run_id: Arc<str> = Arc::from(options.run_id.as_str());
    let limit = options
        .max_concurrency
        .or(program.max_concurrency)
        .unwrap_or(DEFAULT_MAX_CONCURRENCY)
        .max(1);
    let n = program.steps.len();
    let env = program.env_values(&options.env);
    // A journal failure stops the calls too, without touching the caller's token.
    let halt = options.cancel.child_token();
    let mut scheduler = Scheduler {
        program,
        run_id: run_id.clone(),
        events: options.events.clone(),
        redactor: Arc::new(Redactor::new(env.values().filter_map(Value::as_str))),
        vars: program.initial_variables(&options.inputs),
        env,
        steps: program
            .deps
            .deps
            .iter()
            .map(|deps| StepState {
                remaining: deps.len(),
                record: None,
                outcome: None,
                queued: false,
                settled_in: 0,
                inner: None,
            })
            .collect(),
        ready: BinaryHeap::new(),
        writer: None,
        durable: u64::MAX,
        held: Vec::new(),
        pending: Vec::new(),
        pending_vars: Vec::new(),
        stopping: options.cancel.clone(),
        approvals: Arc::new(std::mem::take(&mut options.approvals)),
        awaiting: Vec::new(),
        pending_checkpoints: BTreeMap::new(),
        context_update_done: false,
        block_progress: None,
        node_waiters: Vec::new(),
        workspace: options.workspace.take(),
        merges: Arc::new(tokio::sync::Mutex::new(())),
        guard: program
            .guards
            .clone()
            .map(|limits| Arc::new(Guard::new(limits))),
        jitter_seed: options.jitter_seed,
        output: options.output.clone(),
        confined_to: options.confined_to.clone(),
        first_failure: None,
        context_update_failed: None,
        earlier_attempts: Arc::default(),
    };
    let mode = options.mode.unwrap_or(program.mode);
    if mode == Mode::Preview {
        return Err(RunError::Preview);
    }
    // With a journal, blocks report each finished node so that it is committed at once.
    let (progress_sender, mut progress) = tokio::sync::mpsc::unbounded_channel::<NodeDone>();
    let mut durable = None;
    if let Some(journal) = options.journal.take() {
        let (writer, receiver) =
            Writer::start(journal, options.durability).map_err(|e| RunError::Journal(e.0))?;
        scheduler.writer = Some(writer);
        if options.durability == Durability::Sync {
            scheduler.durable = 0;
        }
        durable = Some(receiver);
        scheduler.block_progress = Some(progress_sender);
    } else {
        drop(progress_sender);
    }
    scheduler.emit(|| {
        let mut event = Event::new(EventKind::RunStarted, &run_id);
        event.plan_id = Some(program.plan_id.clone());
        event
    });
    if let Some(restored) = options.restored.take() {
        scheduler.restore(restored);
    }
    if mode == Mode::Approval && !scheduler.approvals.plan_approved() {
        // Nothing starts before the plan is approved.
        scheduler.awaiting.push(PendingApproval {
            step_id: PLAN_APPROVAL.to_owned(),
            tool: None,
            args: None,
            reason: None,
            input_schema: None,
        });
        return scheduler
            .finalize(&options.run_id, started, options.started_at)
            .await;
    }
    for i in 0..n {
        if scheduler.steps[i].record.is_some() {
            continue;
        }
        if !program.deps.unknown[i].is_empty() {
            let unknown: Vec<&str> = program.deps.unknown[i]
                .iter()
                .map(|d| d.0.as_str())
                .collect();
            let reason = format!("{}: {}", reasons::UNKNOWN_DEPENDENCY, json_list(&unknown));
            scheduler.record_not_run(i, false, false, reason);
            scheduler.settle(i, Outcome::Blocked);
        } else if scheduler.steps[i].remaining == 0 {
            scheduler.enqueue(i);
        }
    }

    let mut failure: Option<String> = None;
    let mut running: JoinSet<Finished> = JoinSet::new();
    // Task id → work, to fail the right step or item if a tool panics.
    let mut tasks: HashMap<tokio::task::Id, (usize, Option<usize>)> = HashMap::new();
    loop {
        while running.len() < limit && !halt.is_cancelled() && scheduler.first_failure.is_none() {
            let Some(Reverse(work)) = scheduler.ready.pop() else {
                break;
            };
            let item = work.slot.checked_sub(1);
            if scheduler.is_settled(work.step, item) {
                continue;
            }
            if scheduler.needs(work.step) > scheduler.durable && limit == 1 {
                // One call at a time keeps plan order (the README promises it): rather than let
                // a later independent step pass, what this one depends on is made durable here
                // (a log append, or a commit), as a chain's is.
                if let Some(error) = scheduler.durable_here() {
                    failure.get_or_insert(error.0);
                    halt.cancel();
                }
            }
            if scheduler.needs(work.step) > scheduler.durable {
                // What it depends on is not durable yet: it starts when it is.
                scheduler.held.push(work);
                continue;
            }
            if item.is_none() && !scheduler.condition_holds(work.step) {
                continue;
            }
            if item.is_none() && program.steps[work.step].expand.is_some() {
                // Expanding calls nothing: it only queues the items.
                scheduler.expand(work.step);
                continue;
            }
            let Some(task) = scheduler.prepare(work.step, item, &halt) else {
                continue;
            };
            let handle = task.spawn(&mut running);
            tasks.insert(handle.id(), (work.step, item));
        }
        // What settled while starting calls (skips, argument errors) goes to the writer too.
        scheduler.flush();
        let stalled = halt.is_cancelled() || scheduler.first_failure.is_some();
        if running.is_empty() && (scheduler.held.is_empty() || stalled) {
            break;
        }
        if running.is_empty() && scheduler.ready.is_empty() && scheduler.writer.is_some() {
            // Nothing to do but wait for the ledger (a chain): make the queue durable here (an
            // append to the journal's log, or a commit) rather than wait for the writer thread
            // to wake up and wake us back.
            if let Some(error) = scheduler.durable_here() {
                failure.get_or_insert(error.0);
                halt.cancel();
            }
            if scheduler.ready.is_empty() {
                // Everything sent is committed and still nothing can start: nothing will.
                break;
            }
            continue;
        }
        if let Some(writer) = &scheduler.writer {
            // The scheduler is about to wait: what it sent is the thread's to commit.
            writer.wake();
        }
        let joined = tokio::select! {
            biased;
            Some(joined) = running.join_next_with_id(), if !running.is_empty() => joined,
            changed = async { durable.as_mut()?.changed().await.ok() }, if durable.is_some() => {
                let now = durable.as_mut().map(|d| d.borrow_and_update().clone());
                match (changed, now) {
                    (Some(()), Some(Durable::Upto(upto))) => scheduler.release(upto),
                    (_, Some(Durable::Failed(error))) => {
                        failure.get_or_insert(error.0);
                        halt.cancel();
                        durable = None;
                        scheduler.node_waiters.clear();
                    }
                    _ => {
                        failure.get_or_insert_with(|| "the ledger writer stopped".to_owned());
                        halt.cancel();
                        durable = None;
                        scheduler.node_waiters.clear();
                    }
                }
                continue;
            }
            Some(done) = progress.recv() => {
                scheduler.node_done(done);
                while let Ok(done) = progress.try_recv() {
                    scheduler.node_done(done);
                }
                // Each reporting block waits for this commit before its next node.
                scheduler.flush_block_progress();
                continue;
            }
            else => break,
        };
        // Node reports sent before a block finished are taken first, so that they are in
        // place before the block's own records.
        while let Ok(done) = progress.try_recv() {
            scheduler.node_done(done);
        }
        let mut joined = Some(joined);
        // Everything else that finished meanwhile joins this turn's commit.
        while let Some(result) = joined.take().or_else(|| running.try_join_next_with_id()) {
            match result {
                Ok((id, finished)) => {
                    tasks.remove(&id);
                    scheduler.finish(finished);
                }
                // A tool that panics fails its step (or item); the run goes on.
                Err(join_error) => {
                    if let Some((step, item)) = tasks.remove(&join_error.id()) {
                        let message = if join_error.is_panic() {
                            "the tool panicked"
                        } else {
                            "the tool's task was aborted"
                        };
                        let error = StepError {
                            code: codes::E_TOOL,
                            message: message.into(),
                            details: None,
                        };
                        scheduler.finish(Finished {
                            step,
                            item,
                            nested: Vec::new(),
                            end: WorkEnd::Call(Made::Done {
                                outcome: Err(error),
                                attempts: 1,
                                took: Duration::ZERO,
                            }),
                        });
                    }
                }
            }
        }
        scheduler.flush();
    }

    if let Some(message) = failure {
        return Err(RunError::Journal(message));
    }
    if !halt.is_cancelled() {
        scheduler.context_update(&halt).await;
    }
    scheduler
        .finalize(&options.run_id, started, options.started_at)
        .await
}

impl Scheduler<'_> {
    fn emit(&self, make: impl FnOnce() -> Event) {
        if let Some(sink) = &self.events {
            let mut event = make();
            self.redactor.event(&mut event);
            sink.emit(&event);
        }
    }

    fn enqueue(&mut self, step: usize) {
        if !std::mem::replace(&mut self.steps[step].queued, true) {
            self.ready.push(Reverse(Work { step, slot: 0 }));
        }
    }

    fn is_settled(&self, step: usize, item: Option<usize>) -> bool {
        match item {
            None => self.steps[step].record.is_some(),
            Some(k) => self.steps[step]
                .map()
                .is_some_and(|map| map.records[k].is_some()),
        }
    }

    /// Decides a ready step's `when`: if false, the step is recorded as skipped by its
    /// condition; if it cannot be decided, the step fails with `E_CONDITION`.
    fn condition_holds(&mut self, step: usize) -> bool {
        let Some(condition) = &self.program.steps[step].when else {
            return true;
        };
        match condition.holds(&self.vars) {
            Ok(true) => true,
            Ok(false) => {
                self.record_not_run(step, true, true, reasons::CONDITION_FALSE.to_owned());
                self.settle(step, Outcome::ConditionFalse);
                false
            }
            Err(error) => {
                self.record_executed(step, Err(error), 0, Duration::ZERO);
                false
            }
        }
    }

    /// Takes back what an earlier attempt settled: successes, and failures the caller kept.
    /// Skips and blocks are worked out again, and so is anything of a step the plan lost.
    fn restore(&mut self, restored: Restored) {
        let program = self.program;
        self.vars.extend(restored.variables);
        let index = program.index();
        for (id, checkpoint) in restored.checkpoints {
            if id == crate::task::CONTEXT_UPDATE {
                self.context_update_done = checkpoint["status"] == "completed";
            } else if let Some(i) = index.position(&id) {
                self.inner(i).checkpoint = Some(checkpoint);
            }
        }
        self.earlier_attempts = Arc::new(restored.earlier_attempts);
        if let Some(guard) = &self.guard {
            restore_guard(program, guard, &restored.records);
        }
        let mut others = Vec::new();
        for (place, record) in restored.records.into_iter().enumerate() {
            if record.skipped || !(record.ok || record.error.is_some()) {
                continue;
            }
            let own = index.position(&record.step_id);
            match own {
                Some(i) if self.steps[i].record.is_none() => {
                    let outcome = if record.ok {
                        Outcome::Succeeded
                    } else {
                        Outcome::Failed
                    };
                    if program.fail_fast && !record.ok {
                        self.first_failure
                            .get_or_insert_with(|| program.steps[i].id.clone());
                    }
                    self.steps[i].record = Some(record);
                    self.settle(i, outcome);
                }
                Some(_) => {}
                None => others.push((place, record)),
            }
        }
        // The records of calls inside a step (its map items, a block's nodes, a task's
        // calls): a step that finished before reports them with it, as `status` does (they
        // run no more); one that did not takes them back when it runs again.
        for (place, record) in others {
            let Some(i) = index.step_of(&record.step_id) else {
                continue;
            };
            let finished = self.steps[i].record.is_some();
            let inner = self.inner(i);
            if finished {
                inner.calls.push(record);
            } else {
                inner
                    .restored
                    .insert(record.step_id.clone(), (place, record));
            }
        }
    }

    /// Step `i`'s state beyond its outcome, made when first needed.
    fn inner(&mut self, i: usize) -> &mut Inner {
        self.steps[i].inner.get_or_insert_with(Box::default)
    }

    /// The batch a dependent of `step` must see durable before it starts: the latest one
    /// any of `step`'s dependencies settled in.
    fn needs(&self, step: usize) -> u64 {
        self.program.deps.deps[step]
            .iter()
            .map(|&dep| self.steps[dep].settled_in)
            .max()
            .unwrap_or(0)
    }

    /// Batches up to `upto` are durable: work held for them becomes ready.
    fn release(&mut self, upto: u64) {
        if upto <= self.durable {
            return;
        }
        self.durable = upto;
        let (durable, waiting) = std::mem::take(&mut self.node_waiters)
            .into_iter()
            .partition(|(batch, _)| *batch <= upto);
        self.node_waiters = waiting;
        for (_, block) in durable {
            let _ = block.send(());
        }
        let held = std::mem::take(&mut self.held);
        for work in held {
            if self.needs(work.step) <= upto {
                self.ready.push(Reverse(work));
            } else {
                self.held.push(work);
            }
        }
    }

    /// Puts a settled record in the next batch; a dependent of a step waits for that batch
    /// to be durable. (Items and block nodes go straight to `pending`: nothing outside their
    /// step depends on them.)
    fn keep(&mut self, position: Position) {
        if let Some(writer) = &self.writer {
            if position.item.is_none() {
                self.steps[position.step].settled_in = writer.next_batch();
            }
            self.pending.push(position);
        }
    }

    /// Sends what running blocks reported, and under `Durability::Sync` commits it at once:
    /// each of those blocks waits for the commit before it starts its next node.
    fn flush_block_progress(&mut self) {
        self.flush();
        if self.durable != u64::MAX && self.writer.is_some() {
            // A failure reaches the run loop through the watch channel.
            let _ = self.durable_here();
        }
    }

    /// Makes what is queued for the ledger durable on this thread and releases the work it
    /// held; gives the ledger's failure, if it failed.
    fn durable_here(&mut self) -> Option<plan_types::JournalError> {
        let now = self.writer.as_mut()?.make_durable();
        self.released(now)
    }

    /// Commits what is queued for the ledger on this thread and releases the work it held;
    /// gives the ledger's failure, if it failed.
    fn commit_here(&mut self) -> Option<plan_types::JournalError> {
        let now = self.writer.as_ref()?.commit_now();
        self.released(now)
    }

    /// Releases the work held for what is durable `now`; gives the ledger's failure, if it
    /// failed.
    fn released(&mut self, now: Durable) -> Option<plan_types::JournalError> {
        match now {
            Durable::Upto(upto) => {
                self.release(upto);
                None
            }
            Durable::Failed(error) => Some(error),
        }
    }

    /// Hands what settled since the last batch to the ledger writer, if there is a journal.
    /// Once the caller has cancelled, only successes are written: what was cancelled, and what
    /// it skipped, must run again on resume.
    fn flush(&mut self) {
        let Some(writer) = self.writer.as_mut() else {
            self.pending.clear();
            self.pending_vars.clear();
            self.pending_checkpoints.clear();
            return;
        };
        if self.pending.is_empty()
            && self.pending_vars.is_empty()
            && self.pending_checkpoints.is_empty()
        {
            return;
        }
        let stopping = self.stopping.is_cancelled();
        let records: Vec<(Position, Record)> = self
            .pending
            .drain(..)
            .filter_map(|position| {
                let state = &self.steps[position.step];
                let record = match (position.item, state.inner.as_deref()) {
                    (None, _) => state.record.as_ref(),
                    (Some(k), Some(inner)) => match &inner.map {
                        Some(map) => map.records[k].as_ref(),
                        None => inner.calls.get(k),
                    },
                    (Some(_), None) => None,
                };
                record
                    .filter(|r| !stopping || r.ok)
                    .map(|r| (position, r.clone()))
            })
            .collect();
        // Secrets never reach the ledger: variables and attempt errors are redacted copies
        // (records already are). A resumed run reads `[redacted]` where a secret was bound.
        let variables: Vec<(String, Arc<Value>)> = self
            .pending_vars
            .drain(..)
            .filter_map(|name| {
                let value = self.vars.get(&name)?;
                if self.redactor.is_empty() {
                    return Some((name, value.clone()));
                }
                let mut copy = (**value).clone();
                self.redactor.value(&mut copy);
                Some((name, Arc::new(copy)))
            })
            .collect();
        let checkpoints = std::mem::take(&mut self.pending_checkpoints)
            .into_iter()
            .collect();
        let behind = writer.send(Batch {
            records,
            variables,
            checkpoints,
        });
        if behind {
            // The ledger is the bottleneck: help it rather than queue more copies. A failure
            // reaches the run loop through the watch channel.
            let _ = self.commit_here();
        }
    }

    /// Resolves the arguments of a ready step or item and checks them against the tool's
    /// schema; if either fails, the step or item fails here without calling its tool.
    fn prepare(
        &mut self,
        step_index: usize,
        item: Option<usize>,
        halt: &CancellationToken,
    ) -> Option<Started> {
        let program = self.program;
        let step = &program.steps[step_index];
        let evaluate = |text: &str, scope: &Scope<'_>| program.expressions.evaluate(text, scope);
        let base = Scope {
            vars: Some(&self.vars),
            env: Some(&self.env),
            evaluate: Some(&evaluate),
            names: Some(&program.variable_names),
            ..Scope::default()
        };
        let (step_id, resolved) = match item {
            None => (step.id.clone(), resolve_args(step, &base)),
            Some(k) => {
                let map = self.steps[step_index].map()?;
                let values = ItemValues {
                    value: &map.items.as_slice()[k],
                    index: Value::from(k),
                    key: map.keys.as_ref().map(|keys| &keys[k]),
                };
                (map.ids[k].clone(), resolve_args(step, &values.scope(base)))
            }
        };
        let item_id = item.map(|_| &*step_id);
        let gate = Gate {
            tool: step.action.tool().is_some().then_some(&*step.tool_name),
            approval: step.gated.then_some((&*step.id, item_id)),
            waits_as: &step_id,
            schema: step.schema.as_deref(),
            answerable: true,
        };
        let (args, approvals_off, asked) = match admit(
            resolved,
            &gate,
            &self.approvals,
            self.guard.as_deref(),
            &self.redactor,
        ) {
            Admission::Call {
                args,
                approvals_off,
                asked,
            } => (args, approvals_off, asked),
            Admission::Fail(error) => {
                self.finish_work(step_index, item, Err(error), 0, Duration::ZERO);
                return None;
            }
            Admission::Wait(pending) => {
                // Waits, unsettled, so nothing that depends on it starts; the run halts
                // `WAITING` once nothing else can run.
                self.awaiting.push(pending);
                return None;
            }
        };
        let start = StepStart {
            step: step_index,
            item,
            id: step_id,
            args,
            approvals_off,
            asked,
            context: self.call_context(halt),
        };
        Some(step.action.start(&step.view(), start, self))
    }

    /// Turns a ready map step into items, or settles it at once when its list is empty or
    /// cannot be had. Items an earlier attempt settled are taken back, not queued.
    fn expand(&mut self, i: usize) {
        let program = self.program;
        let step = &program.steps[i];
        let Some(expand) = &step.expand else { return };
        let evaluate = |text: &str, scope: &Scope<'_>| program.expressions.evaluate(text, scope);
        let scope = Scope {
            vars: Some(&self.vars),
            env: Some(&self.env),
            evaluate: Some(&evaluate),
            names: Some(&program.variable_names),
            ..Scope::default()
        };
        let expanded = self.shared_list(expand).map_or_else(
            || expand_items(expand, &scope).map(Items::Owned),
            |shared| Ok(Items::Shared(shared)),
        );
        let expanded = expanded.and_then(|items| {
            let names = item_ids(step, expand, items.as_slice(), &scope, &self.redactor)?;
            Ok((items, names.ids, names.keys))
        });
        let (items, ids, keys) = match expanded {
            Ok(expanded) => expanded,
            Err(error) => {
                self.record_executed(i, Err(error), 0, Duration::ZERO);
                return;
            }
        };
        let count = items.as_slice().len();
        if count == 0 {
            // Zero items: the step succeeds, and each bind collects an empty list.
            for (name, _) in &step.binds {
                self.vars
                    .insert(name.clone(), Arc::new(Value::Array(Vec::new())));
                self.pending_vars.push(name.clone());
            }
            let empty = Arc::new(serde_json::json!({"items": 0}));
            self.record_executed(i, Ok(empty), 0, Duration::ZERO);
            return;
        }
        let mut map = MapRun {
            items,
            ids,
            keys,
            records: (0..count).map(|_| None).collect(),
            // Items finish in any order; each fills its own slot, so lists keep item order.
            collected: step
                .binds
                .iter()
                .map(|_| vec![Value::Null; count])
                .collect(),
            remaining: count,
            failed: Vec::new(),
            started: Instant::now(),
        };
        for k in 0..count {
            let restored = self.steps[i]
                .inner
                .as_deref_mut()
                .and_then(|inner| inner.restored.remove(&*map.ids[k]));
            match restored {
                Some((_, record)) => {
                    let selected = match &record.result {
                        Some(result) if record.ok => self.select_binds(i, result).ok(),
                        _ => None,
                    };
                    match selected {
                        Some(selected) => {
                            for (list, value) in map.collected.iter_mut().zip(selected) {
                                list[k] = value;
                            }
                        }
                        None => map.failed.push(k),
                    }
                    map.records[k] = Some(record);
                    map.remaining -= 1;
                }
                None => self.ready.push(Reverse(Work {
                    step: i,
                    slot: k + 1,
                })),
            }
        }
        let done = map.remaining == 0;
        self.inner(i).map = Some(map);
        if done {
            self.finish_map(i);
        }
    }

    /// The variable a map step runs over, shared, when `expand_on` is exactly `${name}` (or
    /// `$var.name`) and names a list.
    fn shared_list(&self, expand: &CompiledExpand) -> Option<Arc<Value>> {
        let ExpandSource::Placeholder(template) = &expand.on else {
            return None;
        };
        let placeholder = template.as_placeholder()?;
        if !placeholder.path.is_empty() {
            return None;
        }
        let value = self.vars.get(placeholder.variable()?)?;
        value.is_array().then(|| value.clone())
    }

    /// A running block finished a node: its records and the block's new position are
    /// committed with the next batch.
    fn node_done(&mut self, done: NodeDone) {
        let NodeDone {
            step,
            records,
            checkpoint,
            committed,
        } = done;
        if self.steps[step].record.is_some() {
            return;
        }
        match &self.writer {
            // Durable once the batch now being gathered is committed.
            Some(writer) if self.durable != u64::MAX => {
                self.node_waiters.push((writer.next_batch(), committed));
            }
            // Nothing to wait for: no journal, or a durability that does not wait.
            _ => {
                let _ = committed.send(());
            }
        }
        let has_writer = self.writer.is_some();
        let inner = self.steps[step].inner.get_or_insert_with(Box::default);
        let nested = &mut inner.calls;
        for record in records {
            if has_writer {
                self.pending.push(Position {
                    step,
                    item: Some(nested.len()),
                });
            }
            nested.push(record);
        }
        self.pending_checkpoints
            .insert(self.program.steps[step].id.to_string(), checkpoint);
    }

    fn finish(&mut self, finished: Finished) {
        let Finished {
            step,
            item,
            nested,
            end,
        } = finished;
        // A block's node records come before the block's own, like a map's items; they follow
        // those it reported while it ran (and those of an earlier attempt).
        if !nested.is_empty() {
            let has_writer = self.writer.is_some();
            let list = &mut self.steps[step]
                .inner
                .get_or_insert_with(Box::default)
                .calls;
            for record in nested {
                if has_writer {
                    self.pending.push(Position {
                        step,
                        item: Some(list.len()),
                    });
                }
                list.push(record);
            }
        }
        match end {
            WorkEnd::Call(Made::Waiting(pending)) => {
                // The call asked a person for input: it waits, unsettled (a map item too: its
                // step does not end), and is made again once the question is answered.
                self.awaiting.push(pending);
            }
            WorkEnd::Stopped(value, pending) => {
                // The block or task waits, unsettled: its dependents wait with it, and the run
                // halts `WAITING` once nothing else can run. What it did so far is committed.
                let why = format!("waiting for a decision on `{}`", pending.step_id);
                self.inner(step).waiting = Some((why, value));
                self.awaiting.push(pending);
            }
            WorkEnd::Call(Made::Done {
                outcome,
                attempts,
                took,
            }) => self.finish_work(step, item, outcome, attempts, took),
        }
    }

    fn finish_work(
        &mut self,
        step: usize,
        item: Option<usize>,
        outcome: Result<Value, StepError>,
        attempts: u32,
        elapsed: Duration,
    ) {
        match item {
            None => {
                let outcome = outcome.and_then(|value| self.bind(step, Arc::new(value)));
                self.record_executed(step, outcome, attempts, elapsed);
            }
            Some(k) => self.finish_item(step, k, outcome, attempts, elapsed),
        }
    }

    /// Stores the step's binds, all or none: a selector that does not match the result fails
    /// the step.
    fn bind(&mut self, index: usize, value: Arc<Value>) -> Result<Arc<Value>, StepError> {
        let step = &self.program.steps[index];
        if step.binds.is_empty() {
            return Ok(value);
        }
        // Binds see the result redacted (`Redactor::visible`): no variable holds a secret, so
        // no data expression can cut one into pieces the redactor would not find. Without
        // secrets the whole result is shared with its variable, not copied (a deep result
        // would be copied once per step that binds it).
        let seen = if self.redactor.is_empty() {
            value.clone()
        } else {
            Arc::new(self.redactor.visible(&value))
        };
        let selected: Vec<Arc<Value>> = step
            .binds
            .iter()
            .map(|(name, bind)| {
                if bind.is_whole() {
                    Ok(seen.clone())
                } else {
                    select_bind(name, bind, &seen, &self.vars, &self.program.expressions)
                        .map(Arc::new)
                }
            })
            .collect::<Result<_, _>>()?;
        for ((name, _), value) in step.binds.iter().zip(selected) {
            self.vars.insert(name.clone(), value);
            self.pending_vars.push(name.clone());
        }
        Ok(value)
    }

    fn select_binds(&self, index: usize, value: &Value) -> Result<Vec<Value>, StepError> {
        let step = &self.program.steps[index];
        if step.binds.is_empty() {
            return Ok(Vec::new());
        }
        // As in `bind`: binds see the result redacted.
        let redacted;
        let value = if self.redactor.is_empty() {
            value
        } else {
            redacted = self.redactor.visible(value);
            &redacted
        };
        step.binds
            .iter()
            .map(|(name, bind)| {
                select_bind(name, bind, value, &self.vars, &self.program.expressions)
            })
            .collect()
    }

    fn finish_item(
        &mut self,
        step: usize,
        k: usize,
        outcome: Result<Value, StepError>,
        attempts: u32,
        elapsed: Duration,
    ) {
        let outcome = outcome.and_then(|value| {
            self.select_binds(step, &value)
                .map(|selected| (value, selected))
        });
        let Some(map) = self.steps[step].map_mut() else {
            return;
        };
        let item_id = map.ids[k].clone();
        let (ok, result, error) = match outcome {
            Ok((value, selected)) => {
                for (list, value) in map.collected.iter_mut().zip(selected) {
                    list[k] = value;
                }
                (true, Some(Arc::new(value)), None)
            }
            Err(error) => {
                map.failed.push(k);
                (false, None, Some(error))
            }
        };
        map.remaining -= 1;
        if let Some(error) = &error {
            note_failure(
                self.guard.as_deref(),
                self.program.fail_fast.then_some(&mut self.first_failure),
                &item_id,
                &error.code,
            );
        }
        let last = map.remaining == 0;
        let event_error = error.as_ref().and_then(|e| serde_json::to_value(e).ok());
        // Records leave the engine (and reach the ledger) redacted; binds were selected from
        // the real result above.
        let outcome = match error {
            Some(error) => Err(error),
            None => Ok(result.unwrap_or_default()),
        };
        map.records[k] = Some(executed_record(
            &item_id,
            outcome,
            attempts,
            elapsed,
            &self.redactor,
        ));
        self.keep(Position {
            step,
            item: Some(k),
        });
        self.emit(|| {
            let mut event =
                Event::new(EventKind::StepExecuted, &self.run_id).step(&item_id, attempts);
            event.ok = Some(ok);
            event.duration_ms = Some(millis(elapsed));
            event.error = event_error;
            event
        });
        if last {
            self.finish_map(step);
        }
    }

    /// The last item is done: the map step succeeds (its binds becoming lists in item order)
    /// if every item succeeded, and fails naming the failed items if not.
    fn finish_map(&mut self, step: usize) {
        let program = self.program;
        let Some(map) = self.steps[step].map_mut() else {
            return;
        };
        let elapsed = map.started.elapsed();
        let outcome = if map.failed.is_empty() {
            let collected = std::mem::take(&mut map.collected);
            for ((name, _), list) in program.steps[step].binds.iter().zip(collected) {
                self.vars.insert(name.clone(), Arc::new(Value::Array(list)));
                self.pending_vars.push(name.clone());
            }
            // The items' records hold their results, and binds collect them as lists: the
            // step's own record only counts them (a copy of every result would double a
            // large map's memory and output).
            Ok(Arc::new(serde_json::json!({"items": map.records.len()})))
        } else {
            map.failed.sort_unstable();
            let total = map.records.len();
            let shown: Vec<String> = map
                .failed
                .iter()
                .take(10)
                .map(|&k| format!("`{}`", map.ids[k]))
                .collect();
            let more = map.failed.len().saturating_sub(shown.len());
            let mut message = format!(
                "{} of {total} items failed: {}",
                map.failed.len(),
                shown.join(", ")
            );
            if more > 0 {
                message.push_str(&format!(" and {more} more"));
            }
            Err(StepError {
                code: codes::E_MAP_ITEMS_FAILED,
                message,
                details: None,
            })
        };
        self.record_executed(step, outcome, 0, elapsed);
    }

    /// Records a step that ran (or tried to), then settles it.
    fn record_executed(
        &mut self,
        index: usize,
        outcome: Result<Arc<Value>, StepError>,
        attempts: u32,
        elapsed: Duration,
    ) {
        let step_id = &self.program.steps[index].id;
        self.emit(|| {
            let mut event =
                Event::new(EventKind::StepExecuted, &self.run_id).step(step_id, attempts);
            event.ok = Some(outcome.is_ok());
            event.duration_ms = Some(millis(elapsed));
            event.error = outcome
                .as_ref()
                .err()
                .and_then(|e| serde_json::to_value(e).ok());
            event
        });
        let ok = outcome.is_ok();
        if let Err(error) = &outcome
            && error.code != codes::E_MAP_ITEMS_FAILED
        {
            // A map step's items counted their own failures.
            note_failure(
                self.guard.as_deref(),
                self.program.fail_fast.then_some(&mut self.first_failure),
                step_id,
                &error.code,
            );
        }
        let record = executed_record(step_id, outcome, attempts, elapsed, &self.redactor);
        self.steps[index].record = Some(record);
        self.keep(Position {
            step: index,
            item: None,
        });
        self.settle(
            index,
            if ok {
                Outcome::Succeeded
            } else {
                Outcome::Failed
            },
        );
    }

    /// Records a step that will not run (blocked, or skipped), without settling it.
    fn record_not_run(&mut self, index: usize, ok: bool, skipped: bool, reason: String) {
        let step_id = &self.program.steps[index].id;
        self.emit(|| {
            let mut event = Event::new(EventKind::StepSkipped, &self.run_id).step(step_id, 0);
            event.reason = Some(reason.clone());
            event
        });
        let mut record = not_run_record(step_id, skipped, reason);
        record.ok = ok;
        self.steps[index].record = Some(record);
        self.keep(Position {
            step: index,
            item: None,
        });
    }

    /// How a settled step ended, in a word, for a dependent's `upstream`.
    fn ended(&self, step: usize) -> &'static str {
        match self.steps[step].outcome {
            Some(Outcome::Succeeded) => "succeeded",
            Some(Outcome::Failed) => {
                let rejected = self.steps[step]
                    .record
                    .as_ref()
                    .and_then(|r| r.error.as_ref())
                    .is_some_and(|e| e.code == codes::E_REJECTED);
                if rejected { "rejected" } else { "failed" }
            }
            Some(Outcome::Skipped) => "skipped",
            Some(Outcome::Blocked) => "blocked",
            Some(Outcome::ConditionFalse) => "condition false",
            None => "not run",
        }
    }

    /// Marks a step done and releases its dependents: each whose dependencies are now all
    /// done either becomes ready or, if one of them did not succeed, is skipped (which in
    /// turn releases its own dependents).
    fn settle(&mut self, index: usize, outcome: Outcome) {
        let program = self.program;
        self.steps[index].outcome = Some(outcome);
        let mut done = vec![index];
        while let Some(i) = done.pop() {
            for &d in &program.deps.dependents[i] {
                self.steps[d].remaining -= 1;
                if self.steps[d].remaining != 0 || self.steps[d].record.is_some() {
                    continue;
                }
                let deps = &program.deps.deps[d];
                let succeeded = |dep: &usize| self.steps[*dep].outcome == Some(Outcome::Succeeded);
                let ended = deps.iter().map(|&dep| self.steps[dep].outcome);
                match release(program.steps[d].run_if, ended) {
                    Release::Run => self.enqueue(d),
                    Release::ConditionFalse => {
                        // Off with the conditions upstream: skipped by condition too.
                        self.record_not_run(d, true, true, reasons::CONDITION_FALSE.to_owned());
                        self.steps[d].outcome = Some(Outcome::ConditionFalse);
                        done.push(d);
                    }
                    Release::NotSatisfied => {
                        let unsatisfied: Vec<usize> =
                            deps.iter().copied().filter(|dep| !succeeded(dep)).collect();
                        let ids: Vec<&str> =
                            unsatisfied.iter().map(|&u| &*program.steps[u].id).collect();
                        let reason = format!("dependency not satisfied: {}", json_list(&ids));
                        let upstream = unsatisfied
                            .iter()
                            .map(|&u| (program.steps[u].id.to_string(), self.ended(u).to_owned()))
                            .collect();
                        self.record_not_run(d, false, true, reason);
                        if let Some(record) = &mut self.steps[d].record {
                            record.upstream = Some(Box::new(upstream));
                        }
                        self.steps[d].outcome = Some(Outcome::Skipped);
                        done.push(d);
                    }
                }
            }
        }
    }

    /// Ends the run: fills in what never started (if stopped), works out the status, commits
    /// the last batch and tells the journal how the run ended, then builds the report.
    /// After the last task, when every step succeeded and the project has a PROJECT.md: the
    /// workspace's `context_update` call, once per run (its state is a checkpoint, so a
    /// resumed run that did it does not again).
    async fn context_update(&mut self, halt: &CancellationToken) {
        let program = self.program;
        let (Some(call), Some(workspace)) = (&program.context_update, self.workspace.clone())
        else {
            return;
        };
        let Some(project_md) = workspace.project_md() else {
            return;
        };
        let done = self.context_update_done;
        let all_done = self.awaiting.is_empty()
            && self.steps.iter().all(|s| {
                matches!(
                    s.outcome,
                    Some(Outcome::Succeeded | Outcome::ConditionFalse)
                )
            });
        if done || !all_done {
            return;
        }
        let tasks: Vec<String> = self
            .program
            .steps
            .iter()
            .filter(|s| s.action.is_task())
            .map(|s| s.id.to_string())
            .collect();
        let shown = project_md.display().to_string();
        let checkpoint = |status: &str| {
            serde_json::json!({"status": status, "project_md_path": shown, "features_added": [],
                "endpoints_added": [], "models_added": [], "commit_hash": null})
        };
        self.pending_checkpoints.insert(
            crate::task::CONTEXT_UPDATE.to_owned(),
            checkpoint("in_progress"),
        );
        self.flush();
        let context = self.call_context(halt);
        let inputs = crate::task::ContextInputs {
            project_md: &project_md,
            tasks: &tasks,
            vars: &self.vars,
            env: &self.env,
            approvals: &self.approvals,
        };
        let outcome = crate::task::run_context_update(call, &context, &*workspace, inputs).await;
        let value = match outcome {
            Ok(value) => value,
            Err(mut error) => {
                self.redactor.error(&mut error);
                let mut value = checkpoint("pending");
                value["error"] = serde_json::to_value(&error).unwrap_or(Value::Null);
                self.context_update_failed = Some(error);
                value
            }
        };
        self.pending_checkpoints
            .insert(crate::task::CONTEXT_UPDATE.to_owned(), value);
        self.flush();
    }

    /// What every call the run makes shares; cancelled with `halt`.
    fn call_context(&self, halt: &CancellationToken) -> CallContext {
        CallContext {
            run_id: self.run_id.clone(),
            events: self.events.clone(),
            redactor: self.redactor.clone(),
            // `halt` itself, not a child: nothing cancels one call's context alone (each
            // attempt has a child token of its own), and a child per step cost a node of the
            // token's tree and two locks of its parent.
            cancel: halt.clone(),
            guard: self.guard.clone(),
            jitter_seed: self.jitter_seed,
            output: self.output.clone(),
            confined_to: self.confined_to.clone(),
            earlier: self.earlier_attempts.clone(),
            variable_names: self.program.variable_names.clone(),
            chat: self.program.answers.is_some(),
        }
    }

    async fn finalize(
        mut self,
        run_id: &str,
        started: Instant,
        first_started: Option<SystemTime>,
    ) -> Result<RunReport, RunError> {
        let stopped = self.stopping.is_cancelled();
        let waiting = !stopped && !self.awaiting.is_empty();
        self.record_what_never_started(stopped, waiting);
        let status = self.final_status(stopped, waiting);
        let elapsed = started.elapsed();
        let pending_approvals = if waiting {
            let mut pending = std::mem::take(&mut self.awaiting);
            self.program.index().sort_pending(&mut pending);
            pending
        } else {
            Vec::new()
        };
        if waiting {
            self.emit(|| {
                let mut event = Event::new(EventKind::ApprovalAwaiting, &self.run_id);
                event.pending = Some(pending_approvals.clone());
                event.reason = Some(reasons::HALT_AWAITING_APPROVAL.to_owned());
                event
            });
        }
        self.emit(|| {
            let mut event = Event::new(EventKind::RunFinished, &self.run_id);
            event.task_status = Some(status);
            event.duration_ms = Some(millis(elapsed));
            event
        });
        self.flush();
        // Where the blocks that wait stand: kept by the ledger for `resume`, and their states
        // in the report.
        let waiting_at: BTreeMap<String, Value> = self
            .steps
            .iter()
            .enumerate()
            .filter_map(|(i, state)| {
                let (_, checkpoint) = state.inner.as_deref()?.waiting.as_ref()?;
                Some((self.program.steps[i].id.to_string(), checkpoint.clone()))
            })
            .collect();
        let ended = if let Some(writer) = self.writer.take() {
            let end = if stopped {
                RunEnd::Stopped
            } else if waiting {
                RunEnd::Waiting {
                    pending: pending_approvals.clone(),
                    checkpoints: waiting_at
                        .iter()
                        .map(|(id, at)| (id.clone(), at.clone()))
                        .collect(),
                }
            } else {
                RunEnd::Finished(status)
            };
            writer.finish(end).map_err(|e| RunError::Journal(e.0))?
        } else {
            crate::writer::whole_millis(SystemTime::now())
        };
        let took = first_started.map_or(elapsed, |first| {
            ended.duration_since(first).unwrap_or(Duration::ZERO)
        });
        let mut meta = Record::meta(status, millis(took));
        if let Some(error) = self.context_update_failed.take() {
            meta.reason = Some(format!(
                "the context update after the last task failed: {}; task_status={status}",
                error.message
            ));
            meta.error = Some(Box::new(error));
        }
        let mut records = records_of(self.steps);
        records.push(meta);
        // Records were redacted as they were made, and so were variables bound from results;
        // the inputs are redacted here.
        let mut variables = self.vars;
        if !self.redactor.is_empty() {
            variables
                .values_mut()
                .for_each(|value| self.redactor.value(Arc::make_mut(value)));
        }
        let blocks = self.program.block_states(&records, &waiting_at);
        let answer = self
            .program
            .answers
            .as_ref()
            .and_then(|a| a.answer(&records));
        Ok(RunReport {
            run_id: run_id.to_owned(),
            plan_id: self.program.plan_id.to_string(),
            task_status: status,
            records,
            variables,
            pending_approvals,
            blocks,
            replanned: false,
            revisions: 0,
            answer,
        })
    }

    /// Records what never started, and why: a stopped or waiting run starts it when it is
    /// resumed; only a `fail_fast` skip is final, and committed.
    fn record_what_never_started(&mut self, stopped: bool, waiting: bool) {
        // Why what never started did not. Only a `fail_fast` skip is final, and committed: a
        // stopped or waiting run starts the rest when it is resumed.
        let (reason, committed) = if stopped {
            (reasons::STOPPED.to_owned(), false)
        } else if waiting {
            (reasons::WAITING_FOR_APPROVAL.to_owned(), false)
        } else if let Some(first) = &self.first_failure {
            (
                format!("not started: `{first}` failed and the plan has `fail_fast: true`"),
                true,
            )
        } else {
            (
                "internal error: the step was never settled".to_owned(),
                false,
            )
        };
        let awaiting: std::collections::HashSet<&str> =
            self.awaiting.iter().map(|p| p.step_id.as_str()).collect();
        // Calls that asked a person for input (`ID@input#N`).
        let asking: std::collections::HashSet<&str> = self
            .awaiting
            .iter()
            .filter_map(|p| plan_types::question_of(&p.step_id).map(|(call, _)| call))
            .collect();
        let reason_for = |id: &str| {
            if awaiting.contains(id) {
                reasons::AWAITING_APPROVAL.to_owned()
            } else if asking.contains(id) {
                reasons::AWAITING_INPUT.to_owned()
            } else {
                reason.clone()
            }
        };
        for i in 0..self.steps.len() {
            if self.steps[i].record.is_none() {
                let id = &self.program.steps[i].id;
                let waiting = self.steps[i]
                    .inner
                    .as_deref()
                    .and_then(|i| i.waiting.as_ref());
                let reason = match waiting {
                    Some((why, _)) => why.clone(),
                    None => reason_for(id),
                };
                self.steps[i].record = Some(not_run_record(id, true, reason));
                self.steps[i].outcome = Some(Outcome::Skipped);
                if committed && self.writer.is_some() {
                    self.pending.push(Position {
                        step: i,
                        item: None,
                    });
                }
            }
        }
        let has_writer = self.writer.is_some();
        for (step, state) in self.steps.iter_mut().enumerate() {
            let Some(map) = state.map_mut() else {
                continue;
            };
            for (k, record) in map.records.iter_mut().enumerate() {
                if record.is_none() {
                    *record = Some(not_run_record(&map.ids[k], true, reason_for(&map.ids[k])));
                    if committed && has_writer {
                        self.pending.push(Position {
                            step,
                            item: Some(k),
                        });
                    }
                }
            }
        }
    }

    /// How the run ended: stopped, waiting, or as its steps settled (failed, if the context
    /// update after its last task failed).
    fn final_status(&self, stopped: bool, waiting: bool) -> TaskStatus {
        if stopped {
            TaskStatus::Stopped
        } else if waiting {
            TaskStatus::Waiting
        } else {
            let settled = settled_status(self.steps.iter().map(|s| s.outcome));
            if self.context_update_failed.is_some() {
                settled.max(TaskStatus::Failed)
            } else {
                settled
            }
        }
    }
}

/// The run's records in plan order, each map step's items and each block's or task's calls
/// right before the step's own, taken from the steps' states.
fn records_of(steps: Vec<StepState>) -> Vec<Record> {
    if steps.iter().all(|s| s.inner.is_none()) {
        // Collected in place: the records take the steps' list (a record is smaller than
        // a step's state; std reuses the allocation), so a large run does not hold two
        // lists at its end, when it holds the most. The list then has room for more
        // records than steps, `__meta__` among them, for any run of four steps or more.
        steps
            .into_iter()
            .map(|step| step.record.unwrap_or_else(unreachable_record))
            .collect()
    } else {
        // A map step's items come right before the step's own record.
        let items: usize = steps
            .iter()
            .filter_map(|s| s.inner.as_deref())
            .map(|inner| inner.map.as_ref().map_or(0, |m| m.records.len()) + inner.calls.len())
            .sum();
        let mut records = Vec::with_capacity(steps.len() + items + 1);
        for state in steps {
            if let Some(inner) = state.inner {
                let Inner { map, calls, .. } = *inner;
                if let Some(map) = map {
                    records.extend(
                        map.records
                            .into_iter()
                            .map(|r| r.unwrap_or_else(unreachable_record)),
                    );
                }
                records.extend(calls);
            }
            records.push(state.record.unwrap_or_else(unreachable_record));
        }
        records
    }
}

/// Counts what an earlier attempt at the run used of the guards, as the calls themselves
/// counted it: every call whose record was committed (a step's, a map item's, a block node's;
/// a call in flight when the run stopped runs again and counts then), and every failed step
/// or item (not the guards' own stops, not a map step failed by its items).
fn restore_guard(program: &Program, guard: &Guard, records: &[Record]) {
    let index = program.index();
    let failed = |record: &Record| {
        record.error.as_ref().is_some_and(|error| {
            error.code != codes::E_GUARD && error.code != codes::E_MAP_ITEMS_FAILED
        })
    };
    for record in records {
        let (tool, counts_failure) = match index.call_of(&record.step_id) {
            Some(CallOf::Step(i)) => {
                let step = &program.steps[i];
                let calls = step.action.tool().is_some() && step.expand.is_none();
                (calls.then(|| &*step.tool_name), true)
            }
            // A call inside a block or task: its failure is its step's, counted with the
            // step's record.
            Some(CallOf::Inside(i, inside)) => {
                let inside = plan_types::CallPath::segments_of(inside);
                (program.steps[i].action.tool_at(&inside), false)
            }
            Some(CallOf::Item(i)) if program.steps[i].expand.is_some() => {
                (Some(&*program.steps[i].tool_name), true)
            }
            Some(CallOf::Item(_)) | None => continue,
        };
        if let Some(tool) = tool
            && record.attempts > 0
        {
            guard.restore_call(tool);
        }
        if counts_failure && failed(record) {
            guard.failed();
        }
    }
}

/// What bind `name` selects from a result; a selector that does not match fails the step.
fn select_bind(
    name: &str,
    bind: &crate::program::Bind,
    value: &Value,
    vars: &BTreeMap<String, Arc<Value>>,
    expressions: &crate::expression::Expressions,
) -> Result<Value, StepError> {
    let selected = match bind {
        crate::program::Bind::Select(selector) => selector
            .select(value, vars)
            .map_err(|error| error.to_string()),
        crate::program::Bind::Expression(text) => expressions
            .evaluate_bind(text, value, vars)
            .map_err(|error| format!("`${{{{ {text} }}}}`: {error}")),
    };
    selected.map_err(|message| StepError {
        code: codes::E_BIND_UNRESOLVED,
        message: format!("bind `{name}`: {message}"),
        details: None,
    })
}

fn not_run_record(step_id: &str, skipped: bool, reason: String) -> Record {
    Record {
        step_id: step_id.to_owned(),
        ok: false,
        skipped,
        result: None,
        reason: Some(reason),
        error: None,
        attempts: 0,
        duration_ms: 0,
        upstream: None,
    }
}

/// Counts a failure for the guards' `max_failures` (a guard's own stop does not count, or
/// one stop would cascade), and with `fail_fast` remembers the first.
fn note_failure(
    guard: Option<&Guard>,
    first_failure: Option<&mut Option<Arc<str>>>,
    id: &str,
    code: &ErrorCode,
) {
    if let Some(guard) = guard
        && *code != codes::E_GUARD
    {
        guard.failed();
    }
    if let Some(first) = first_failure {
        first.get_or_insert_with(|| Arc::from(id));
    }
}

/// Never produced: `finalize` fills every slot first. Kept total so that a bug shows as an
/// odd record rather than a panic.
fn unreachable_record() -> Record {
    not_run_record(
        "",
        true,
        "internal error: the step was never settled".to_owned(),
    )
}

/// What becomes of a step once every one of its dependencies has ended, by its `run_if` and
/// how they ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Release {
    /// Its trigger rule holds: it runs.
    Run,
    /// It does not run, and every dependency was skipped by a condition (or is off with
    /// one): the step is off with them, `condition false`, and the run can be COMPLETED.
    ConditionFalse,
    /// It does not run although not everything it depends on is off: a dependency failed,
    /// was blocked or skipped, or ran while another was off. `dependency not satisfied`; the
    /// run is PARTIAL at best.
    NotSatisfied,
}

fn release(run_if: RunIf, mut ended: impl Iterator<Item = Option<Outcome>> + Clone) -> Release {
    let succeeded = |outcome: Option<Outcome>| outcome == Some(Outcome::Succeeded);
    let runs = match run_if {
        RunIf::AllSuccess => ended.clone().all(succeeded),
        RunIf::AllDone => true,
        RunIf::AnySuccess => ended.clone().any(succeeded),
    };
    if runs {
        Release::Run
    } else if ended.all(|outcome| outcome == Some(Outcome::ConditionFalse)) {
        Release::ConditionFalse
    } else {
        Release::NotSatisfied
    }
}

/// How a run whose steps have all settled ended, by how they did: BLOCKED > FAILED > PARTIAL >
/// COMPLETED. Steps skipped by a condition (and those off with them) leave it COMPLETED; a
/// step skipped with nothing failed or blocked upstream (part of what it needs ran, part was
/// off) makes it PARTIAL.
fn settled_status(outcomes: impl Iterator<Item = Option<Outcome>>) -> TaskStatus {
    outcomes
        .map(|outcome| match outcome {
            Some(Outcome::Blocked) => TaskStatus::Blocked,
            Some(Outcome::Failed) => TaskStatus::Failed,
            Some(Outcome::Skipped) => TaskStatus::Partial,
            Some(Outcome::Succeeded | Outcome::ConditionFalse) | None => TaskStatus::Completed,
        })
        // `TaskStatus` is ordered by that precedence.
        .max()
        .unwrap_or(TaskStatus::Completed)
}

/// `["a","b"]`: execute_plan's form of a list of ids inside a reason.
fn json_list(ids: &[&str]) -> String {
    serde_json::to_string(ids).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::{Outcome, Release, RunIf, TaskStatus, release, settled_status};

    fn released(run_if: RunIf, ended: &[Outcome]) -> Release {
        release(run_if, ended.iter().copied().map(Some))
    }

    #[test]
    fn a_step_is_off_with_its_conditions_only_when_all_of_what_it_needs_is_off() {
        use Outcome::{ConditionFalse as Off, Failed, Skipped, Succeeded as Ok};
        for (run_if, ended, expected) in [
            (RunIf::AllSuccess, &[Ok, Ok][..], Release::Run),
            (RunIf::AllSuccess, &[Off], Release::ConditionFalse),
            (RunIf::AllSuccess, &[Off, Off], Release::ConditionFalse),
            (RunIf::AnySuccess, &[Off, Off], Release::ConditionFalse),
            // Part of what it needs ran: the step could have run, and did not.
            (RunIf::AllSuccess, &[Ok, Off], Release::NotSatisfied),
            (RunIf::AllSuccess, &[Off, Skipped], Release::NotSatisfied),
            (RunIf::AllSuccess, &[Off, Failed], Release::NotSatisfied),
            (RunIf::AnySuccess, &[Off, Failed], Release::NotSatisfied),
            (RunIf::AnySuccess, &[Off, Ok], Release::Run),
            (RunIf::AllDone, &[Failed, Off], Release::Run),
        ] {
            assert_eq!(
                released(run_if, ended),
                expected,
                "{run_if:?} over {ended:?}"
            );
        }
    }

    #[test]
    fn the_status_of_a_settled_run_takes_its_worst_step() {
        use Outcome::{Blocked, ConditionFalse as Off, Failed, Skipped, Succeeded as Ok};
        for (outcomes, expected) in [
            (&[][..], TaskStatus::Completed),
            (&[Ok, Ok], TaskStatus::Completed),
            (&[Ok, Off, Off], TaskStatus::Completed),
            (&[Ok, Off, Skipped], TaskStatus::Partial),
            (&[Skipped, Failed], TaskStatus::Failed),
            (&[Failed, Blocked, Skipped], TaskStatus::Blocked),
        ] {
            let status = settled_status(outcomes.iter().copied().map(Some));
            assert_eq!(status, expected, "{outcomes:?}");
        }
    }

    /// The end of a run turns the steps' states into records in place, which needs a record
    /// to be no larger than a state (and room for one more record).
    #[test]
    fn a_record_fits_in_a_step_state() {
        assert!(
            std::mem::size_of::<plan_types::Record>() < std::mem::size_of::<super::StepState>()
        );
        assert_eq!(
            std::mem::align_of::<plan_types::Record>(),
            std::mem::align_of::<super::StepState>()
        );
    }
}
