//! The ledger writer: the scheduler hands it batches and goes on instead of waiting for SQLite.
//!
//! Batches are numbered in the order the scheduler sends them and queued. A thread of the
//! writer's own commits every queued batch together (group commit), then publishes the number
//! of the last one on a watch channel: everything up to that number is durable. Under
//! [`Durability::Sync`] the scheduler holds back a step whose dependencies settled in a batch
//! not yet durable; when it has nothing else to do (a chain), it makes the queue durable itself
//! ([`Writer::make_durable`]) rather than wait for the thread to wake up, take the queue and
//! wake it back: it appends the batches to the journal's log if the journal has one (a write,
//! where a commit is a transaction), else it commits them. The thread folds logged batches
//! into the ledger as it does the others, in groups: it is woken for them only once
//! [`FOLD_EVERY`] wait, and otherwise finds them when it looks, every [`FOLD_AFTER`]. Under
//! `async` nothing waits; under `exit` the writer keeps every batch and commits them once, when
//! the run ends.
//!
//! Whoever commits takes the journal's lock before it takes the queue, so batches are committed
//! in the order they were sent, and sending never waits for a commit. The log is appended to
//! with the queue locked, so the thread never takes a batch half-logged; a batch the thread
//! took before it was logged is durable only once its commit returns.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use plan_types::{Batch, BatchLog, Durability, Journal, JournalError, RunEnd};
use tokio::sync::watch;

/// How long the writer goes without a commit before it writes the journal's events alone.
const EVENTS_EVERY: Duration = Duration::from_millis(500);

/// How often the writer thread looks for batches nobody woke it for: logged batches, which
/// are durable already and wait to be folded into the ledger (so `status` trails a chain by at
/// most this much).
const FOLD_AFTER: Duration = Duration::from_millis(50);

/// Logged batches the scheduler leaves to the thread's next look before it wakes the thread:
/// folding them in groups costs the ledger one commit per group, not one per step of a chain.
const FOLD_EVERY: usize = 64;

/// Records waiting for the writer beyond which the scheduler helps it commit.
const BACKLOG: usize = 8192;

/// What the scheduler knows of the ledger: the last durable batch, or why writing stopped.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Durable {
    /// Every batch up to this number is durable: committed, or in the journal's log (0: none
    /// yet).
    Upto(u64),
    /// A commit or an append to the log failed: nothing after the last durable batch will be
    /// written.
    Failed(JournalError),
}

struct Ledger {
    journal: Box<dyn Journal>,
    failed: Option<JournalError>,
    /// Under `exit`, everything waits here for the end of the run.
    kept: Batch,
    kept_upto: u64,
}

/// Batches not yet taken by a commit.
#[derive(Default)]
struct Queue {
    batches: Vec<(u64, Batch)>,
    /// How many records they hold.
    records: usize,
    /// The number of the last batch a commit took.
    taken: u64,
}

struct Shared {
    ledger: Mutex<Ledger>,
    queue: Mutex<Queue>,
    durable: watch::Sender<Durable>,
    durability: Durability,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while committing leaves nothing half-done that a lock could protect: SQLite
    // rolls the transaction back.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    /// Lets the journal write what it holds besides batches (its events), unless writing
    /// stopped or waits for the end.
    fn commit_idle(&self) {
        let mut ledger = lock(&self.ledger);
        if ledger.failed.is_some() || self.durability == Durability::Exit {
            return;
        }
        if let Err(error) = ledger.journal.flush() {
            self.durable.send_replace(Durable::Failed(error.clone()));
            ledger.failed = Some(error);
        }
    }

    /// Commits every queued batch as one, in order, and publishes what is durable. Returns
    /// whether there was anything to commit.
    fn commit_queued(&self) -> bool {
        let mut ledger = lock(&self.ledger);
        let batches = {
            let mut queue = lock(&self.queue);
            queue.records = 0;
            if let Some((last, _)) = queue.batches.last() {
                queue.taken = *last;
            }
            std::mem::take(&mut queue.batches)
        };
        let Some(upto) = batches.last().map(|(number, _)| *number) else {
            return false;
        };
        let mut group = Batch::default();
        for (_, batch) in batches {
            group.append(batch);
        }
        if ledger.failed.is_some() {
            // After a failure nothing more is written: later batches may depend on what was
            // lost.
            return true;
        }
        if self.durability == Durability::Exit {
            ledger.kept.append(group);
            ledger.kept_upto = upto;
            return true;
        }
        match ledger.journal.commit(&group, upto) {
            Ok(()) => {
                self.durable.send_replace(Durable::Upto(upto));
            }
            Err(error) => {
                self.durable.send_replace(Durable::Failed(error.clone()));
                ledger.failed = Some(error);
            }
        }
        true
    }
}

/// The scheduler's end of the writer.
pub(crate) struct Writer {
    shared: Arc<Shared>,
    /// The journal's log, and the number of the last batch appended to it.
    log: Option<(Box<dyn BatchLog>, u64)>,
    wake: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    /// The number the next batch gets.
    next: u64,
}

impl Writer {
    /// Starts the writer thread; returns it with the channel on which it publishes what is
    /// durable.
    pub(crate) fn start(
        mut journal: Box<dyn Journal>,
        durability: Durability,
    ) -> Result<(Writer, watch::Receiver<Durable>), JournalError> {
        // Only a scheduler that waits for durability has a use for the log.
        let log = if durability == Durability::Sync {
            journal.log().map(|log| (log, 0))
        } else {
            None
        };
        let (durable, receiver) = watch::channel(Durable::Upto(0));
        let shared = Arc::new(Shared {
            ledger: Mutex::new(Ledger {
                journal,
                failed: None,
                kept: Batch::default(),
                kept_upto: 0,
            }),
            queue: Mutex::new(Queue::default()),
            durable,
            durability,
        });
        let (wake, woken) = mpsc::channel::<()>();
        let on_thread = shared.clone();
        let thread = std::thread::Builder::new()
            .name("plan-ledger".to_owned())
            .stack_size(plan_types::json::VALUE_THREAD_STACK)
            .spawn(move || {
                let mut last_commit = std::time::Instant::now();
                loop {
                    match woken.recv_timeout(FOLD_AFTER) {
                        Ok(()) => {
                            // Wake-ups that came meanwhile are served by this one commit.
                            while woken.try_recv().is_ok() {}
                            on_thread.commit_queued();
                            last_commit = std::time::Instant::now();
                        }
                        Err(mpsc::RecvTimeoutError::Timeout) => {
                            if on_thread.commit_queued() {
                                last_commit = std::time::Instant::now();
                            } else if last_commit.elapsed() >= EVENTS_EVERY {
                                // Nothing settled for a while (a long step): what the journal
                                // holds besides batches (events such as `tool.called`) is
                                // written, so that `status` and `events` show the run as it
                                // goes.
                                on_thread.commit_idle();
                                last_commit = std::time::Instant::now();
                            }
                        }
                        Err(mpsc::RecvTimeoutError::Disconnected) => break,
                    }
                }
            })
            .map_err(|error| JournalError(format!("cannot start the ledger writer: {error}")))?;
        Ok((
            Writer {
                shared,
                log,
                wake: Some(wake),
                thread: Some(thread),
                next: 1,
            },
            receiver,
        ))
    }

    /// The number the batch now being gathered will get when it is sent.
    pub(crate) fn next_batch(&self) -> u64 {
        self.next
    }

    /// Queues a batch for the writer. An empty batch is not sent (its number is not used).
    /// The thread is not woken yet: the scheduler either makes the queue durable itself
    /// ([`Writer::make_durable`]) or wakes the thread ([`Writer::wake`]) before it waits for
    /// anything, so a chain's steps do not each cost the thread a wake-up and a turn at the
    /// lock. Returns whether the writer has fallen behind (more than [`BACKLOG`] records
    /// wait): the caller should then help with [`Writer::commit_now`], so that a run whose
    /// steps outpace the ledger does not pile up copies of its records in memory.
    pub(crate) fn send(&mut self, batch: Batch) -> bool {
        if batch.is_empty() {
            return false;
        }
        let number = self.next;
        self.next += 1;
        let waiting = {
            let mut queue = lock(&self.shared.queue);
            queue.records += batch.records.len();
            queue.batches.push((number, batch));
            queue.records
        };
        waiting > BACKLOG
    }

    /// Wakes the thread to commit what is queued, if anything is; batches the log holds are
    /// left to the thread's next look unless [`FOLD_EVERY`] wait.
    pub(crate) fn wake(&self) {
        {
            let queue = lock(&self.shared.queue);
            let Some((last, _)) = queue.batches.last() else {
                return;
            };
            let all_logged = self.log.as_ref().is_some_and(|(_, logged)| last <= logged);
            if all_logged && queue.batches.len() < FOLD_EVERY {
                return;
            }
        }
        if let Some(wake) = &self.wake {
            // A thread that is gone has published why on the watch channel.
            let _ = wake.send(());
        }
    }

    /// Commits what is queued on the caller's thread, for a scheduler whose steps outpace the
    /// ledger; returns what is durable then.
    pub(crate) fn commit_now(&self) -> Durable {
        let _ = self.shared.commit_queued();
        self.shared.durable.borrow().clone()
    }

    /// Makes what is queued durable on the caller's thread, for a scheduler that has nothing
    /// to do but wait for it: appends it to the journal's log, or commits it if there is no
    /// log or the thread has taken a batch the log lacks. Returns what is durable then.
    pub(crate) fn make_durable(&mut self) -> Durable {
        if let Some((log, logged)) = self.log.as_mut() {
            let committed = match &*self.shared.durable.borrow() {
                Durable::Upto(upto) => *upto,
                Durable::Failed(error) => return Durable::Failed(error.clone()),
            };
            let queue = lock(&self.shared.queue);
            // A batch the thread took unlogged is durable once its commit returns: then the
            // commit below waits for it.
            if queue.taken <= (*logged).max(committed) {
                for (number, batch) in &queue.batches {
                    if *number <= *logged {
                        continue;
                    }
                    if let Err(error) = log.append(*number, batch) {
                        drop(queue);
                        self.shared
                            .durable
                            .send_replace(Durable::Failed(error.clone()));
                        lock(&self.shared.ledger).failed = Some(error.clone());
                        return Durable::Failed(error);
                    }
                    *logged = *number;
                }
                return Durable::Upto((*logged).max(committed));
            }
        }
        self.commit_now()
    }

    /// Writes what is left and tells the journal how the run ended; returns when it ended
    /// (after the writing, which `--durability exit` leaves to the end).
    pub(crate) fn finish(mut self, end: RunEnd) -> Result<SystemTime, JournalError> {
        self.stop_thread();
        self.shared.commit_queued();
        let mut ledger = lock(&self.shared.ledger);
        if let Some(error) = ledger.failed.take() {
            return Err(error);
        }
        let kept = std::mem::take(&mut ledger.kept);
        if !kept.is_empty() {
            let upto = ledger.kept_upto;
            ledger.journal.commit(&kept, upto)?;
            self.shared.durable.send_replace(Durable::Upto(upto));
        }
        let at = whole_millis(SystemTime::now());
        ledger.journal.finish(end, at)?;
        Ok(at)
    }

    fn stop_thread(&mut self) {
        self.wake = None;
        if let Some(thread) = self.thread.take() {
            // The thread ends once its channel is closed and its commit is done.
            let _ = thread.join();
        }
    }
}

impl Drop for Writer {
    /// A run that ends early (a ledger failure) still waits for the thread, so nothing
    /// writes to the ledger after `run` returns.
    fn drop(&mut self) {
        self.stop_thread();
    }
}

/// `at` without its part below a millisecond, as the ledger's timestamps keep it: a duration
/// counted to it equals one counted between the stored timestamps.
pub(crate) fn whole_millis(at: SystemTime) -> SystemTime {
    let since = at.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    UNIX_EPOCH + Duration::from_millis(u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
}
