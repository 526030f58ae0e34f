//! What a person sees: a live progress line on a terminal, then one line per step.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use plan_engine::PlannedCall;
use plan_types::{Event, EventKind, EventSink, Record, RunReport};

/// A progress bar on stderr, fed by events; absent when stderr is not a terminal.
pub(crate) struct Progress {
    bar: ProgressBar,
    running: AtomicU64,
    retries: AtomicU64,
}

impl Progress {
    pub(crate) fn for_terminal(total: usize) -> Option<Self> {
        if !std::io::stderr().is_terminal() {
            return None;
        }
        let bar = ProgressBar::with_draw_target(Some(total as u64), ProgressDrawTarget::stderr());
        let style = ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} steps  {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        bar.enable_steady_tick(Duration::from_millis(100));
        Some(Progress {
            bar,
            running: AtomicU64::new(0),
            retries: AtomicU64::new(0),
        })
    }

    pub(crate) fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

impl Progress {
    fn show_counts(&self, running: u64) {
        let retries = self.retries.load(Ordering::Relaxed);
        self.bar.set_message(match retries {
            0 => format!("{running} running"),
            1 => format!("{running} running, 1 retry"),
            n => format!("{running} running, {n} retries"),
        });
    }
}

impl EventSink for Progress {
    fn emit(&self, event: &Event) {
        match event.kind {
            EventKind::ToolCalled if event.attempt == 1 => {
                let running = self.running.fetch_add(1, Ordering::Relaxed) + 1;
                self.show_counts(running);
            }
            EventKind::StepRetrying => {
                self.retries.fetch_add(1, Ordering::Relaxed);
                self.show_counts(self.running.load(Ordering::Relaxed));
            }
            EventKind::StepExecuted => {
                let running = self
                    .running
                    .fetch_sub(1, Ordering::Relaxed)
                    .saturating_sub(1);
                self.show_counts(running);
                self.bar.inc(1);
            }
            EventKind::StepSkipped => self.bar.inc(1),
            _ => {}
        }
    }
}

/// One line per step (its id and tool, then what happened), then the outcome.
pub(crate) fn summary(report: &RunReport, plan: &plan_graph::Plan) -> String {
    let steps: Vec<&Record> = report
        .records
        .iter()
        .filter(|r| r.step_id != plan_graph::META_STEP_ID)
        .collect();
    let by_id: std::collections::HashMap<&str, &plan_graph::Step> =
        plan.steps.iter().map(|s| (s.id.0.as_str(), s)).collect();
    let label = |record: &Record| match by_id.get(record.step_id.as_str()) {
        Some(step) if step.block.is_some() => format!("{} [block]", record.step_id),
        Some(step) => format!("{} [{}]", record.step_id, step.tool),
        // A map item or a block's node.
        None => record.step_id.clone(),
    };
    let width = steps
        .iter()
        .map(|r| label(r).chars().count())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    let (mut ok, mut failed, mut skipped, mut blocked, mut waiting) = (0, 0, 0, 0, 0);
    let mut interrupted = 0;
    let waits = |record: &Record| {
        report.task_status == plan_types::TaskStatus::Waiting
            && record.skipped
            && !record.ok
            && record.upstream.is_none()
    };
    for record in &steps {
        let id = label(record);
        let line = if waits(record) {
            // Not started because the run halted for approvals: it runs on resume.
            waiting += 1;
            format!("… {id:<width$}  {}", record.reason.as_deref().unwrap_or(""))
        } else if record.ok && record.skipped {
            // Skipped by a `when` condition: not a failure.
            skipped += 1;
            format!(
                "- {id:<width$}  skipped: {}",
                record.reason.as_deref().unwrap_or("")
            )
        } else if record.ok {
            ok += 1;
            let retries = if record.attempts > 1 {
                format!("  ({} attempts)", record.attempts)
            } else {
                String::new()
            };
            format!("✓ {id:<width$}  {}{retries}", duration(record.duration_ms))
        } else if let Some(error) = record
            .error
            .as_ref()
            .filter(|error| error.code == plan_engine::codes::E_CANCELLED)
        {
            // Stopped with the run (Ctrl+C, SIGTERM, a time limit): not kept as a failure in
            // the ledger, so resume runs it again.
            interrupted += 1;
            format!(
                "■ {id:<width$}  {}  interrupted: {}; it runs again on resume",
                duration(record.duration_ms),
                error.message
            )
        } else if let Some(error) = &record.error {
            failed += 1;
            let attempts = if record.attempts > 1 {
                format!(" after {} attempts", record.attempts)
            } else {
                String::new()
            };
            format!(
                "✗ {id:<width$}  {}  {}: {}{attempts}",
                duration(record.duration_ms),
                error.code,
                error.message
            )
        } else if record.skipped {
            skipped += 1;
            format!(
                "- {id:<width$}  skipped: {}",
                record.reason.as_deref().unwrap_or("")
            )
        } else {
            blocked += 1;
            format!(
                "! {id:<width$}  not run: {}",
                record.reason.as_deref().unwrap_or("")
            )
        };
        out.push_str(&line);
        out.push('\n');
    }
    let mut counts = vec![format!("{ok} ok")];
    for (n, what) in [
        (failed, "failed"),
        (interrupted, "interrupted"),
        (skipped, "skipped"),
        (blocked, "blocked"),
        (waiting, "waiting"),
    ] {
        if n > 0 {
            counts.push(format!("{n} {what}"));
        }
    }
    let total = report.records.last().map_or(0, |meta| meta.duration_ms);
    out.push_str(&format!(
        "{}: {} step{} ({}) in {} · run {}\n",
        report.task_status,
        steps.len(),
        if steps.len() == 1 { "" } else { "s" },
        counts.join(", "),
        duration(total),
        report.run_id
    ));
    out
}

/// What a `WAITING` run waits for, and how to go on.
pub(crate) fn waiting(report: &RunReport) -> String {
    let run = &report.run_id;
    let mut out = String::from("waiting for approval:\n");
    let mut plan = false;
    for pending in &report.pending_approvals {
        if pending.step_id == plan_types::PLAN_APPROVAL {
            plan = true;
            out.push_str("  the plan (it runs in approval mode)\n");
            continue;
        }
        let what = match (&pending.reason, &pending.tool) {
            (Some(reason), _) => reason.clone(),
            (None, tool) => {
                let args = pending
                    .args
                    .as_ref()
                    .map_or(String::new(), |args| format!(" {args}"));
                format!("{}{args}", tool.as_deref().unwrap_or("block"))
            }
        };
        out.push_str(&format!("  {}  {what}\n", pending.step_id));
    }
    if plan {
        out.push_str(&format!(
            "approve with `plan-cli approve {run} --plan`, then `plan-cli resume {run}`\n"
        ));
    } else {
        out.push_str(&format!(
            "approve with `plan-cli approve {run} STEP...` (or --all), or refuse with `plan-cli reject {run} STEP --reason TEXT`; then `plan-cli resume {run}`\n"
        ));
    }
    out
}

/// What `--dry-run` prints without `--json`.
pub(crate) fn preview(plan_id: &str, calls: &[PlannedCall]) -> String {
    let plural = if calls.len() == 1 { "" } else { "s" };
    let failing = calls.iter().filter(|call| call.error.is_some()).count();
    let mut out = format!(
        "dry run of `{plan_id}`: {} call{plural}, none made{}\n",
        calls.len(),
        if failing == 0 {
            String::new()
        } else {
            format!("; {failing} would fail")
        }
    );
    for call in calls {
        let after = if call.depends_on.is_empty() {
            String::new()
        } else {
            format!("  ← after: {}", call.depends_on.join(", "))
        };
        let line = match (&call.error, &call.expand_on) {
            (Some(error), _) => format!(
                "{}  {} would fail: {}: {}{after}",
                call.step_id, call.tool, error.code, error.message
            ),
            (None, Some(on)) => format!(
                "{}  {} {} for each item of {on}{after}",
                call.step_id, call.tool, call.args
            ),
            (None, None) => format!("{}  {} {}{after}", call.step_id, call.tool, call.args),
        };
        let line = match &call.when {
            Some(condition) => format!("{line}  when: {condition}"),
            None => line,
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}

fn duration(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms}ms")
    } else {
        format!("{:.2}s", ms as f64 / 1000.0)
    }
}

/// Text for a terminal: control characters that came from a plan or a tool (an id with an
/// escape sequence in it, say) are shown as `\u{1b}`, never sent to the terminal to act on.
/// Newlines and tabs stay.
pub(crate) fn terminal_safe(text: &str) -> std::borrow::Cow<'_, str> {
    let unsafe_char = |c: char| c.is_control() && c != '\n' && c != '\t';
    if !text.chars().any(unsafe_char) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if unsafe_char(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}
