//! What a person sees: a live progress line on a terminal, then one line per step.

use std::io::{IsTerminal, Write as _};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use plan_engine::PlannedCall;
pub(crate) use plan_run::words::{count, duration, one_line};
use plan_run::{Part, Progress, StepState, Steps};
use plan_types::{Event, EventSink, Record, RunReport};

/// What a run shows while it runs, on stderr, fed by events: the run id first, then a line
/// when a step starts and when it ends (block nodes too; map items only when they fail),
/// printed as it happens. On a terminal a progress bar stays below the lines, naming the
/// running steps and counting map items apart from steps; elsewhere (a CI log) each line
/// starts with its time.
pub(crate) struct Live {
    bar: Option<ProgressBar>,
    progress: Mutex<Progress>,
}

impl Live {
    /// For a run of a plan with these steps: a bar when stderr is a terminal.
    pub(crate) fn new(steps: Arc<Steps>) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::with_draw_target(
                Some(steps.len() as u64),
                ProgressDrawTarget::stderr(),
            );
            let style = ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:20} {pos}/{len} steps  {wide_msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar());
            bar.set_style(style);
            bar.enable_steady_tick(Duration::from_millis(100));
            bar
        });
        Live {
            bar,
            progress: Mutex::new(Progress::new(steps)),
        }
    }

    /// Prints a line above the bar, or with the time (`ts`, RFC 3339) in front of it where
    /// there is no bar.
    pub(crate) fn say(&self, line: &str, ts: Option<&str>) {
        let line = terminal_safe(line);
        match &self.bar {
            Some(bar) => bar.println(line),
            None => {
                let now;
                let ts = match ts {
                    Some(ts) => ts,
                    None => {
                        now = humantime::format_rfc3339_millis(std::time::SystemTime::now())
                            .to_string();
                        &now
                    }
                };
                // `2026-11-23T01:45:06.123Z` → `01:45:06.123`
                let time = ts.get(11..23).unwrap_or(ts);
                say(&format!("{time} {line}"));
            }
        }
    }

    /// A line a step's program printed (`run -v`): after the step's id, `!` for stderr.
    pub(crate) fn output(&self, step: &str, stream: &str, line: &str) {
        let mark = if stream == "stderr" { "!" } else { "│" };
        self.say(&format!("  {step} {mark} {line}"), None);
    }

    /// Clears the bar (before the summary is printed).
    pub(crate) fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Progress> {
        self.progress
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The bar: the steps that ended, what runs, and how far the map items are.
    fn show(&self, progress: &Progress) {
        let Some(bar) = &self.bar else {
            return;
        };
        bar.set_position(progress.settled());
        let mut parts = Vec::new();
        // The first few, each cut short: the bar is one line, redrawn on every event.
        let mut names: Vec<String> = progress
            .running()
            .take(RUNNING_SHOWN)
            .map(|(id, node)| {
                let id = short(id);
                node.map_or_else(|| id.clone(), |node| format!("{id} at {}", short(node)))
            })
            .collect();
        let more = progress.running().count().saturating_sub(RUNNING_SHOWN);
        if more > 0 {
            names.push(format!("{more} more"));
        }
        if !names.is_empty() {
            parts.push(format!("running: {}", names.join(", ")));
        }
        if progress.items_started() > 0 {
            parts.push(format!(
                "items: {}/{} done",
                progress.items_done(),
                progress.items_started()
            ));
        }
        match progress.retries() {
            0 => {}
            1 => parts.push("1 retry".to_owned()),
            n => parts.push(format!("{n} retries")),
        }
        bar.set_message(parts.join(" · "));
    }
}

impl EventSink for Live {
    fn emit(&self, event: &Event) {
        let mut progress = self.lock();
        if let Some(line) = progress.say(event) {
            self.say(&line, Some(&event.ts));
        }
        self.show(&progress);
    }
}

/// One line per step (its id and tool, then what happened), then the outcome.
pub(crate) fn summary(report: &RunReport, plan: &Steps, show_results: bool) -> String {
    let steps: Vec<&Record> = report
        .records
        .iter()
        .filter(|r| r.step_id != plan_graph::META_STEP_ID)
        .collect();
    let label = |record: &Record| match plan.part(&record.step_id) {
        Part::Step(i) => plan.label(i).to_owned(),
        // A map item, a block's node, a task's call.
        _ => one_line(&record.step_id).into_owned(),
    };
    // One long id (a map key from a tool's data) does not pad every line.
    let width = steps
        .iter()
        .map(|r| label(r).chars().count())
        .max()
        .unwrap_or(0)
        .min(MAX_WIDTH);
    let mut out = String::new();
    for record in &steps {
        let id = label(record);
        // A map item, a block's node, or a step of an earlier revision of the plan (`run
        // --replan`): shown as it ended, and counted apart.
        let part = plan.part(&record.step_id);
        if !matches!(part, Part::Step(_)) {
            out.push_str(&part_line(record, &id, width));
            continue;
        }
        // Reasons and messages come from tools and plans: each stays on its line.
        let reason = one_line(record.reason.as_deref().unwrap_or(""));
        let took = duration(record.duration_ms);
        let line = match StepState::of(record, report.task_status) {
            StepState::Running => {
                format!("▶ {id:<width$}  running")
            }
            StepState::Interrupted => match &record.error {
                Some(error) => format!(
                    "■ {id:<width$}  {took}  interrupted: {}; it runs again on resume",
                    one_line(&error.message)
                ),
                None => format!("■ {id:<width$}  {reason}; it runs again on resume"),
            },
            StepState::NotStarted => {
                format!("· {id:<width$}  not started: {reason}")
            }
            StepState::Waiting => {
                format!("… {id:<width$}  {reason}")
            }
            StepState::Skipped => {
                format!("- {id:<width$}  skipped: {reason}")
            }
            StepState::Ok => {
                let retries = if record.attempts > 1 {
                    format!("  ({} attempts)", record.attempts)
                } else {
                    String::new()
                };
                format!("✓ {id:<width$}  {took}{retries}")
            }
            StepState::Failed => {
                let error = (record.error.as_ref()).map_or(String::new(), |e| {
                    format!("{}: {}", e.code, one_line(&e.message))
                });
                let attempts = if record.attempts > 1 {
                    format!(" after {} attempts", record.attempts)
                } else {
                    String::new()
                };
                // The end of what it put out, where the failure usually is (`logs` has it all).
                format!(
                    "✗ {id:<width$}  {took}  {error}{attempts}\n{}",
                    output_tail(record, 5)
                )
                .trim_end()
                .to_owned()
            }
            StepState::Blocked => {
                format!("! {id:<width$}  not run: {reason}")
            }
        };
        out.push_str(&line);
        out.push('\n');
        if show_results && record.ok && !record.skipped {
            for text in step_output(record).lines() {
                out.push_str(&format!("    │ {text}\n"));
            }
        }
    }
    // Counts are of the plan's steps; map items, block nodes and task calls are shown, and
    // counted apart.
    let tally = plan_run::Tally::of(report, plan);
    let mut counts = vec![format!("{} ok", tally.count(StepState::Ok))];
    for (state, what) in [
        (StepState::Failed, "failed"),
        (StepState::Interrupted, "interrupted"),
        (StepState::Running, "running"),
        (StepState::NotStarted, "not started"),
        (StepState::Skipped, "skipped"),
        (StepState::Blocked, "blocked"),
        (StepState::Waiting, "waiting"),
    ] {
        let n = tally.count(state);
        if n > 0 {
            counts.push(format!("{n} {what}"));
        }
    }
    // A failure of the run itself, after its steps (a task plan's context update).
    if let Some(meta) = report.records.last().filter(|m| m.error.is_some())
        && let Some(reason) = &meta.reason
    {
        let reason = reason.split("; task_status=").next().unwrap_or(reason);
        out.push_str(&format!("✗ {}\n", one_line(reason)));
    }
    let total = report.records.last().map_or(0, |meta| meta.duration_ms);
    let mut parts = String::new();
    for (n, what) in [
        (tally.items, "map item"),
        (tally.nodes, "block node"),
        (tally.task_calls, "task call"),
        (tally.earlier, "replaced step"),
    ] {
        if n > 0 {
            parts.push_str(&format!(", {}", count(n, what, &format!("{what}s"))));
        }
    }
    match report.revisions {
        0 => {}
        1 => parts.push_str(", re-planned once"),
        n => parts.push_str(&format!(", re-planned {n} times")),
    }
    out.push_str(&format!(
        "{}: {} ({}){parts} in {} · run {}\n",
        report.task_status,
        count(tally.step_count(), "step", "steps"),
        counts.join(", "),
        duration(total),
        report.run_id
    ));
    out
}

/// The line of a map item or a block node in the summary.
fn part_line(record: &Record, id: &str, width: usize) -> String {
    let line = if record.ok && !record.skipped {
        format!("✓ {id:<width$}  {}", duration(record.duration_ms))
    } else if let Some(error) = &record.error {
        format!(
            "✗ {id:<width$}  {}  {}: {}",
            duration(record.duration_ms),
            error.code,
            one_line(&error.message)
        )
    } else {
        format!(
            "- {id:<width$}  {}",
            one_line(record.reason.as_deref().unwrap_or("not run"))
        )
    };
    line + "\n"
}

/// What a `WAITING` run waits for, and how to go on.
pub(crate) fn waiting(report: &RunReport) -> String {
    let run = &report.run_id;
    let mut out = String::from("waiting for approval:\n");
    let mut plan = false;
    // The ids in one column, whatever their lengths.
    let width = report
        .pending_approvals
        .iter()
        .map(|pending| one_line(&pending.step_id).chars().count())
        .max()
        .unwrap_or(0)
        .min(MAX_WIDTH);
    for pending in &report.pending_approvals {
        if pending.step_id == plan_types::PLAN_APPROVAL {
            plan = true;
            out.push_str("  the plan (it runs in approval mode)\n");
            continue;
        }
        let what = match (&pending.reason, &pending.tool) {
            (Some(reason), _) => one_line(reason).into_owned(),
            (None, tool) => {
                let args = pending
                    .args
                    .as_ref()
                    .map_or(String::new(), |args| format!(" {args}"));
                format!("{}{args}", one_line(tool.as_deref().unwrap_or("block")))
            }
        };
        out.push_str(&format!(
            "  {:<width$}  {what}\n",
            one_line(&pending.step_id)
        ));
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
    let not_run = calls.iter().filter(|call| call.not_run.is_some()).count();
    let made = calls.len() - not_run;
    let failing = calls.iter().filter(|call| call.error.is_some()).count();
    let mut out = format!(
        "dry run of `{plan_id}`: {}, none made{}{}\n",
        count(made, "call", "calls"),
        if failing == 0 {
            String::new()
        } else {
            format!("; {failing} would fail")
        },
        if not_run == 0 {
            String::new()
        } else {
            format!("; {} would not run", count(not_run, "step", "steps"))
        }
    );
    for call in calls {
        if let Some(why) = &call.not_run {
            let (id, tool) = (one_line(&call.step_id), one_line(&call.tool));
            out.push_str(&format!("{id}  {tool} not run: {why}\n"));
            continue;
        }
        let after = if call.depends_on.is_empty() {
            String::new()
        } else {
            format!("  ← after: {}", call.depends_on.join(", "))
        };
        let line = match (&call.error, &call.expand_on) {
            (Some(error), _) => format!(
                "{}  {} would fail: {}: {}{after}",
                one_line(&call.step_id),
                one_line(&call.tool),
                error.code,
                one_line(&error.message)
            ),
            (None, Some(on)) => format!(
                "{}  {} {} for each item of {on}{after}",
                one_line(&call.step_id),
                one_line(&call.tool),
                call.args
            ),
            (None, None) => format!(
                "{}  {} {}{after}",
                one_line(&call.step_id),
                one_line(&call.tool),
                call.args
            ),
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

/// The widest an id column is padded to.
const MAX_WIDTH: usize = 48;

/// How many running steps the bar names.
const RUNNING_SHOWN: usize = 4;

/// An id for the bar: on one line, and cut short.
fn short(id: &str) -> String {
    let id = one_line(id);
    match id.char_indices().nth(40) {
        Some((at, _)) => format!("{}…", &id[..at]),
        None => id.into_owned(),
    }
}

/// Rows as columns two spaces apart, each as wide as its widest cell (in characters); a column
/// whose index is in `right` is aligned right. Rows may have fewer cells than others. No line
/// ends in spaces.
pub(crate) fn columns(rows: &[Vec<String>], right: &[usize]) -> String {
    // A cell (a plan's title, a tool's name) may come from a model, a client or a server: it
    // stays in its row.
    let rows: Vec<Vec<std::borrow::Cow<'_, str>>> = (rows.iter())
        .map(|row| row.iter().map(|cell| one_line(cell)).collect())
        .collect();
    let width = |c: usize| {
        (rows.iter().filter_map(|row| row.get(c)))
            .map(|cell| cell.chars().count())
            .max()
            .unwrap_or(0)
    };
    let most = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..most).map(width).collect();
    let mut text = String::new();
    for row in &rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            let pad = " ".repeat(widths[c].saturating_sub(cell.chars().count()));
            let (before, after) = if right.contains(&c) {
                (&*pad, "")
            } else {
                ("", &*pad)
            };
            line.push_str(&format!(
                "{}{before}{cell}{after}",
                if c > 0 { "  " } else { "" }
            ));
        }
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text
}

/// A line on stderr; a stderr that cannot be written (closed) is not worth stopping for.
pub(crate) fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Text for a terminal: control characters that came from a plan or a tool (an id with an
/// escape sequence in it, say) are shown as `\u{1b}`, never sent to the terminal to act on.
/// Newlines and tabs stay.
pub(crate) fn terminal_safe(text: &str) -> std::borrow::Cow<'_, str> {
    let unsafe_char = |c: char| plan_types::is_unprintable(c) && c != '\n' && c != '\t';
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

/// What a step put out (`plan_run::output_of`), safe for a terminal.
pub(crate) fn step_output(record: &Record) -> String {
    terminal_safe(&plan_run::output_of(record)).into_owned()
}

/// The last `lines` lines of what a failed step put out, indented, for the summary.
fn output_tail(record: &Record, lines: usize) -> String {
    let Some(details) = record
        .error
        .as_ref()
        .and_then(|error| error.details.as_ref())
        .filter(|details| details.get("stdout").is_some() || details.get("stderr").is_some())
    else {
        return String::new();
    };
    let mut copy = record.clone();
    copy.error = None;
    copy.result = Some(std::sync::Arc::new(details.clone()));
    let text = step_output(&copy);
    let all: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = &all[all.len().saturating_sub(lines)..];
    tail.iter().map(|line| format!("    │ {line}\n")).collect()
}

/// Whether stdout gets colour: a terminal, and NO_COLOR unset (<https://no-color.org>).
pub(crate) fn stdout_in_colour() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// The summary with colour: each line's mark (✓ green, ✗ red, ■ … yellow, ▶ cyan, - dim), the
/// output under a line dim, and the outcome's status bold in its colour.
pub(crate) fn in_colour(summary: &str) -> String {
    use anstyle::{AnsiColor, Style};
    let paint =
        |style: Style, text: &str| format!("{}{text}{}", style.render(), style.render_reset());
    let green = AnsiColor::Green.on_default();
    let red = AnsiColor::Red.on_default();
    let yellow = AnsiColor::Yellow.on_default();
    let cyan = AnsiColor::Cyan.on_default();
    let dim = Style::new().dimmed();
    let mut out = String::with_capacity(summary.len() + 64);
    for line in summary.split_inclusive('\n') {
        let (mark, rest) = match line.char_indices().nth(1) {
            Some((at, ' ')) => line.split_at(at),
            _ => ("", line),
        };
        let style = match mark {
            "✓" => Some(green),
            "✗" | "!" => Some(red),
            "■" | "…" => Some(yellow),
            "▶" => Some(cyan),
            "-" => Some(dim),
            _ => None,
        };
        if let Some(style) = style {
            out.push_str(&paint(style, mark));
            out.push_str(rest);
        } else if line.starts_with("    │") {
            out.push_str(&paint(dim, line.trim_end_matches('\n')));
            out.push('\n');
        } else if let Some((status, rest)) = line.split_once(": ")
            && !status.is_empty()
            && status.chars().all(|c| c.is_ascii_uppercase())
        {
            let colour = match status {
                "COMPLETED" => green,
                "FAILED" | "BLOCKED" => red,
                _ => yellow,
            };
            out.push_str(&paint(colour.bold(), status));
            out.push_str(": ");
            out.push_str(rest);
        } else {
            out.push_str(line);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_as_wide_as_their_widest_cell_whatever_the_rows() {
        let rows = [
            vec!["a".to_owned()],
            vec!["bbb".into(), "é".into(), "c".into()],
        ]
        .map(|row| row.to_vec());
        assert_eq!(columns(&rows, &[]), "a\nbbb  é  c\n");
        let right = [
            vec!["n".into(), "1".into()],
            vec!["nn".into(), "100".into()],
        ];
        assert_eq!(columns(&right, &[1]), "n     1\nnn  100\n");
        // A title a model wrote cannot draw a row of its own.
        let forged = [vec!["p".into(), "mine\ndeploy  (operator)".into()]];
        assert_eq!(columns(&forged, &[]), "p  mine\\ndeploy  (operator)\n");
    }

    #[test]
    fn the_bar_cuts_an_id_short() {
        assert_eq!(short(&"x".repeat(100)).chars().count(), 41);
    }

    fn labels_of(yaml: &str) -> Steps {
        let source = plan_graph::Source::new("plan.yaml", yaml);
        let loaded = plan_graph::load(
            source,
            plan_graph::Format::Yaml,
            &plan_graph::LoadOptions::default(),
        )
        .expect("the plan loads");
        Steps::of(&loaded.plan)
    }

    fn ok(step_id: &str) -> serde_json::Value {
        serde_json::json!({"step_id": step_id, "ok": true, "skipped": false, "attempts": 1, "duration_ms": 3})
    }

    #[test]
    fn a_map_step_whose_id_begins_with_another_step_s_has_its_own_items() {
        let steps = labels_of(
            "steps:\n\
             - {id: build, tool: echo, args: {}}\n\
             - {id: build/each, tool: echo, expand_on: [1, 2], args: {n: $each}}\n",
        );
        let report: RunReport = serde_json::from_value(serde_json::json!({
            "run_id": "R",
            "plan_id": "plan",
            "task_status": "COMPLETED",
            "records": [
                ok("build"), ok("build/each-0"), ok("build/each-1"), ok("build/each"),
                {"step_id": "__meta__", "ok": true, "skipped": false, "attempts": 0, "duration_ms": 9}
            ],
            "variables": {}
        }))
        .expect("a report");
        let text = summary(&report, &steps, false);
        assert!(
            text.ends_with("COMPLETED: 2 steps (2 ok), 2 map items in 9ms · run R\n"),
            "{text}"
        );
    }

    #[test]
    fn the_summary_tells_steps_from_items_nodes_and_replaced_steps_by_the_labels_alone() {
        let steps = labels_of(
            "steps:\n\
             - {id: build, tool: echo, args: {}}\n\
             - {id: a/b, tool: echo, args: {}}\n\
             - {id: notify, tool: echo, expand_on: [x, y], args: {to: $each}}\n",
        );
        let report: RunReport = serde_json::from_value(serde_json::json!({
            "run_id": "R",
            "plan_id": "plan",
            "task_status": "COMPLETED",
            "records": [
                ok("build"), ok("a/b"), ok("a/b/check#1"), ok("notify-0"), ok("notify-1"),
                ok("gone"),
                {"step_id": "__meta__", "ok": true, "skipped": false, "attempts": 0, "duration_ms": 9}
            ],
            "variables": {}
        }))
        .expect("a report");
        let text = summary(&report, &steps, false);
        assert!(text.contains("✓ build [echo]"), "{text}");
        assert!(text.contains("✓ a/b [echo]"), "{text}");
        // `a/b/check#1` is a node of step `a/b`, though the step's id holds a `/` too.
        assert!(
            text.ends_with(
                "COMPLETED: 2 steps (2 ok), 2 map items, 1 block node, 1 replaced step in 9ms · run R\n"
            ),
            "{text}"
        );
        // Without labels (not expected), steps are named by their ids and nothing panics.
        let bare = summary(&report, &Steps::default(), false);
        assert!(bare.contains("✓ build "), "{bare}");
    }
}
