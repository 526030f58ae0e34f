//! The ledger writer: a thread of its own that owns the [`Journal`], so the scheduler hands
//! it batches and goes on instead of waiting for SQLite.
//!
//! Batches are numbered in the order the scheduler sends them. The writer takes every batch
//! waiting in its channel and commits them together (group commit), then publishes the number
//! of the last one on a watch channel: everything up to that number is durable. Under
//! [`Durability::Sync`] the scheduler holds back a step whose dependencies settled in a batch
//! not yet durable; under `async` nothing waits; under `exit` the writer keeps every batch
//! and commits them once, when the run ends.

use std::sync::mpsc;
use std::thread::JoinHandle;

use plan_types::{Batch, Durability, Journal, JournalError, RunEnd};
use tokio::sync::{oneshot, watch};

/// What the scheduler knows of the ledger: the last durable batch, or why writing stopped.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Durable {
    /// Every batch up to this number is committed (0: none yet).
    Upto(u64),
    /// A commit failed: nothing after the last durable batch will be written.
    Failed(JournalError),
}

enum Message {
    Batch(u64, Batch),
    Finish(RunEnd, oneshot::Sender<Result<(), JournalError>>),
}

/// The scheduler's end of the writer thread.
pub(crate) struct Writer {
    sender: Option<mpsc::Sender<Message>>,
    thread: Option<JoinHandle<()>>,
    /// The number the next batch gets.
    next: u64,
}

impl Writer {
    /// Starts the writer thread; returns it with the channel on which it publishes what is
    /// durable.
    pub(crate) fn start(
        journal: Box<dyn Journal>,
        durability: Durability,
    ) -> Result<(Writer, watch::Receiver<Durable>), JournalError> {
        let (sender, receiver) = mpsc::channel();
        let (durable_sender, durable) = watch::channel(Durable::Upto(0));
        let thread = std::thread::Builder::new()
            .name("plan-ledger".to_owned())
            .spawn(move || write_loop(journal, durability, &receiver, &durable_sender))
            .map_err(|error| JournalError(format!("cannot start the ledger writer: {error}")))?;
        Ok((
            Writer {
                sender: Some(sender),
                thread: Some(thread),
                next: 1,
            },
            durable,
        ))
    }

    /// The number the batch now being gathered will get when it is sent.
    pub(crate) fn next_batch(&self) -> u64 {
        self.next
    }

    /// Hands a batch to the writer. An empty batch is not sent (its number is not used).
    pub(crate) fn send(&mut self, batch: Batch) {
        if batch.is_empty() {
            return;
        }
        let number = self.next;
        self.next += 1;
        if let Some(sender) = &self.sender {
            // A writer that is gone has published why on the watch channel.
            let _ = sender.send(Message::Batch(number, batch));
        }
    }

    /// Tells the writer how the run ended and waits until that, and every batch before it,
    /// is written.
    pub(crate) async fn finish(mut self, end: RunEnd) -> Result<(), JournalError> {
        let (reply, answer) = oneshot::channel();
        let sent = self
            .sender
            .take()
            .is_some_and(|sender| sender.send(Message::Finish(end, reply)).is_ok());
        let result = if sent {
            answer
                .await
                .unwrap_or_else(|_| Err(JournalError("the ledger writer stopped".to_owned())))
        } else {
            Err(JournalError("the ledger writer stopped".to_owned()))
        };
        self.join();
        result
    }

    fn join(&mut self) {
        self.sender = None;
        if let Some(thread) = self.thread.take() {
            // The writer ends once its channel is closed; a panic there was already reported
            // as a closed watch channel.
            let _ = thread.join();
        }
    }
}

impl Drop for Writer {
    /// A run that ends early (a ledger failure) still waits for the writer, so nothing
    /// writes to the ledger after `run` returns.
    fn drop(&mut self) {
        self.join();
    }
}

fn write_loop(
    mut journal: Box<dyn Journal>,
    durability: Durability,
    receiver: &mpsc::Receiver<Message>,
    durable: &watch::Sender<Durable>,
) {
    let mut failed: Option<JournalError> = None;
    // Under `exit`, everything waits here for the end of the run.
    let mut kept = Batch::default();
    let mut kept_upto = 0;
    let mut waiting = receiver.recv().ok();
    while let Some(message) = waiting.take() {
        match message {
            Message::Batch(number, batch) => {
                let mut group = batch;
                let mut upto = number;
                // Everything already queued joins this commit.
                loop {
                    match receiver.try_recv() {
                        Ok(Message::Batch(number, batch)) => {
                            group.append(batch);
                            upto = number;
                        }
                        Ok(finish) => {
                            waiting = Some(finish);
                            break;
                        }
                        Err(_) => break,
                    }
                }
                if failed.is_some() {
                    // After a failure nothing more is written: later batches may depend on
                    // what was lost.
                } else if durability == Durability::Exit {
                    kept.append(group);
                    kept_upto = upto;
                } else {
                    match journal.commit(&group) {
                        Ok(()) => {
                            durable.send_replace(Durable::Upto(upto));
                        }
                        Err(error) => {
                            durable.send_replace(Durable::Failed(error.clone()));
                            failed = Some(error);
                        }
                    }
                }
            }
            Message::Finish(end, reply) => {
                let result = match failed.take() {
                    Some(error) => Err(error),
                    None => {
                        let kept = std::mem::take(&mut kept);
                        let committed = if kept.is_empty() {
                            Ok(())
                        } else {
                            journal.commit(&kept).map(|()| {
                                durable.send_replace(Durable::Upto(kept_upto));
                            })
                        };
                        committed.and_then(|()| journal.finish(end))
                    }
                };
                let _ = reply.send(result);
                return;
            }
        }
        if waiting.is_none() {
            waiting = receiver.recv().ok();
        }
    }
}
