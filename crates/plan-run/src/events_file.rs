//! A run's events file ([`crate::Execution::events_file`], `run --events FILE`): every event
//! appended as one JSON line by a writer thread of its own, so a step never waits for the file. The writer flushes whenever it has caught up with the run,
//! so `tail -f` follows the run; `close` waits until every line is written.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::mpsc;
use std::thread::JoinHandle;

use plan_types::{Event, EventSink};

enum Line {
    Event(Vec<u8>),
    /// Write everything before this, then answer.
    Close(mpsc::Sender<()>),
}

pub(crate) struct EventsFile {
    lines: mpsc::Sender<Line>,
}

impl EventsFile {
    pub(crate) fn open(path: &Path) -> std::io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        let (lines, receiver) = mpsc::channel();
        let _: JoinHandle<()> = std::thread::Builder::new()
            .name("plan-events".to_owned())
            .spawn(move || write_lines(BufWriter::new(file), &receiver))?;
        Ok(EventsFile { lines })
    }

    /// Waits until every event emitted so far is in the file.
    pub(crate) fn close(&self) {
        let (done, answer) = mpsc::channel();
        if self.lines.send(Line::Close(done)).is_ok() {
            let _ = answer.recv();
        }
    }
}

impl EventSink for EventsFile {
    fn emit(&self, event: &Event) {
        let Ok(mut line) = serde_json::to_vec(event) else {
            return;
        };
        line.push(b'\n');
        // A writer that is gone (it cannot have panicked: it only writes) drops the line.
        let _ = self.lines.send(Line::Event(line));
    }
}

/// The run must not fail because its log cannot be written: the file must open before the
/// run is recorded, and a full disk shows up as missing lines, not as a failed plan.
fn write_lines(mut file: BufWriter<File>, lines: &mpsc::Receiver<Line>) {
    let mut next = lines.recv().ok();
    while let Some(line) = next.take() {
        match line {
            Line::Event(bytes) => {
                let _ = file.write_all(&bytes);
            }
            Line::Close(done) => {
                let _ = file.flush();
                let _ = done.send(());
            }
        }
        next = match lines.try_recv() {
            Ok(line) => Some(line),
            Err(mpsc::TryRecvError::Empty) => {
                // Caught up with the run: what is written so far becomes visible.
                let _ = file.flush();
                lines.recv().ok()
            }
            Err(mpsc::TryRecvError::Disconnected) => None,
        };
    }
    let _ = file.flush();
}
