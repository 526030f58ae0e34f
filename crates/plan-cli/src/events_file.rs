//! `--events FILE`: every event appended as one JSON line, flushed as it happens so that
//! `tail -f` follows the run.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::Mutex;

use plan_engine::{Event, EventSink};

pub(crate) struct EventsFile {
    writer: Mutex<BufWriter<File>>,
}

impl EventsFile {
    pub(crate) fn open(path: &Path) -> std::io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(EventsFile {
            writer: Mutex::new(BufWriter::new(file)),
        })
    }
}

impl EventSink for EventsFile {
    fn emit(&self, event: &Event) {
        let Ok(mut line) = serde_json::to_vec(event) else {
            return;
        };
        line.push(b'\n');
        // A poisoned lock means another thread panicked mid-write; keep writing lines anyway.
        let mut writer = self
            .writer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // The run must not fail because its log cannot be written; the CLI checks the file
        // opened, and a full disk shows up as missing lines, not as a failed plan.
        let _ = writer.write_all(&line).and_then(|()| writer.flush());
    }
}
