//! What a person sees: a live progress line on a terminal, then one line per step.

use std::io::{IsTerminal, Write as _};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
pub(crate) use plan_run::summary::{calls_of, preview, step_output, summary};
pub(crate) use plan_run::words::{count, duration, one_line};
use plan_run::{Progress, Steps};
pub(crate) use plan_types::terminal_safe;
use plan_types::{Event, EventSink};

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

/// What can be done next with waiting run `run`, in the CLI's commands, on one line.
pub(crate) fn next(run: &str, next: &plan_run::summary::Next) -> String {
    use plan_run::summary::Next;
    match next {
        Next::ApprovePlan => {
            format!("approve with `plan-cli approve {run} --plan`, then `plan-cli resume {run}`\n")
        }
        Next::Answer { id } => format!(
            "answer with `plan-cli approve {run} {} --input JSON` (an object of the fields asked), or refuse with `plan-cli reject {run} ID`; see `status {run} --json` for the fields; then `plan-cli resume {run}`\n",
            plan_run::words::one_line(id)
        ),
        Next::Decide => format!(
            "approve with `plan-cli approve {run} STEP...` (or --all), or refuse with `plan-cli reject {run} STEP --reason TEXT`; then `plan-cli resume {run}`\n"
        ),
    }
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
}
