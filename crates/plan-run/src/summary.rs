//! The summary a run ends with, as a person reads it: a line per step (its id and tool, then
//! what happened), map items, block nodes and task calls shown and counted apart, then the
//! outcome. Every front-end that words a run's end says it so (the CLI's `run`, `status`); and
//! what a plan would call, before it runs (`preview`, `calls_of`), and a plan's verdict
//! (`verdict`).

use plan_engine::PlannedCall;
use plan_types::{Record, RunReport};

use crate::words::{count, duration, one_line};
use crate::{Part, StepState, Steps};

/// The widest an id column is padded to.
pub const ID_WIDTH: usize = 48;

/// One line per step (its id and tool, then what happened), then the outcome.
pub fn summary(report: &RunReport, plan: &Steps, show_results: bool) -> String {
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
        .min(ID_WIDTH);
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
    let tally = crate::Tally::of(report, plan);
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
    // The run's answer (`chat.respond`) comes last, as a chat's reply does.
    if let Some(answer) = &report.answer {
        out.push('\n');
        out.push_str(answer);
        if !answer.ends_with('\n') {
            out.push('\n');
        }
    }
    out
}

/// What a `WAITING` run waits for, one line each, as `run` and `resume` print it; what can be
/// done about it is [`next_of`], which each front-end words its own way.
pub fn waiting(report: &RunReport) -> String {
    let mut out = String::from("waiting for approval:\n");
    // The ids in one column, whatever their lengths.
    let width = report
        .pending_approvals
        .iter()
        .map(|pending| one_line(&pending.step_id).chars().count())
        .max()
        .unwrap_or(0)
        .min(ID_WIDTH);
    for pending in &report.pending_approvals {
        if pending.step_id == plan_types::PLAN_APPROVAL {
            out.push_str("  the plan (it runs in approval mode)\n");
            continue;
        }
        out.push_str(&format!(
            "  {:<width$}  {}\n",
            one_line(&pending.step_id),
            waiting_call(pending)
        ));
    }
    out
}

/// What a person can do next with a waiting run: a value, so that each front-end words it
/// (the CLI with its commands, `mcp serve` with its tools, the dashboard with its buttons)
/// and none reads another's words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Approve the plan itself (the run is in approval mode), then go on.
    ApprovePlan,
    /// Answer the question `id` (an object of the fields its input schema asks) or refuse it,
    /// then go on.
    Answer {
        /// The question's id, as the run's pending approvals name it (`ID@input#N`).
        id: String,
    },
    /// Approve or refuse the waiting calls, then go on.
    Decide,
}

/// What can be done next with `report`'s run: `None` unless it waits for a person.
pub fn next_of(report: &RunReport) -> Option<Next> {
    let pending = &report.pending_approvals;
    if pending.is_empty() {
        return None;
    }
    if pending
        .iter()
        .any(|p| p.step_id == plan_types::PLAN_APPROVAL)
    {
        return Some(Next::ApprovePlan);
    }
    Some(match pending.iter().find(|p| p.is_question()) {
        Some(asked) => Next::Answer {
            id: asked.step_id.clone(),
        },
        None => Next::Decide,
    })
}

/// Whether a step of `report`'s run failed because a tool the plan declares on a BullMQ queue
/// had no queue to go to: each front-end says how to give the run its queue. `has_queue`
/// says whether the run was given one (then `E_QUEUE_UNAVAILABLE` says the queue itself did
/// not answer, which no setting of the run mends).
pub fn lacks_queue(report: &RunReport, has_queue: bool) -> bool {
    !has_queue
        && report.records.iter().any(|record| {
            record
                .error
                .as_ref()
                .is_some_and(|error| error.code == plan_types::ErrorCode::QueueUnavailable)
        })
}

/// One waiting call in words, on one line: why it waits (a question, a block node's failure),
/// or the tool it would call and with what (`echo {"text":"shipped"}`).
pub fn waiting_call(pending: &plan_types::PendingApproval) -> String {
    match (&pending.reason, &pending.tool) {
        (Some(reason), _) => one_line(reason).into_owned(),
        (None, tool) => {
            let args = pending
                .args
                .as_ref()
                .map_or(String::new(), |args| format!(" {args}"));
            format!("{}{args}", one_line(tool.as_deref().unwrap_or("block")))
        }
    }
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

/// What a step put out (`crate::output_of`), safe for a terminal.
pub fn step_output(record: &Record) -> String {
    plan_types::terminal_safe(&crate::output_of(record)).into_owned()
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

/// What a dry run would call, a line per call (`--dry-run` without `--json`).
pub fn preview(plan_id: &str, calls: &[PlannedCall]) -> String {
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

/// Every call a program can make, one per line with where the plan makes it, for a person to
/// read before a model's plan runs.
pub fn calls_of(program: &plan_engine::Program) -> String {
    let sites = program.call_sites();
    let mut text = format!("The plan can make {}:", count(sites.len(), "call", "calls"));
    for site in &sites {
        text.push_str(&format!(
            "\n  {:<32} {} `{}`{}",
            one_line(&site.path.to_string()),
            site.kind.describe(),
            one_line(&site.tool),
            if site.gated {
                " (waits for approval)"
            } else {
                ""
            }
        ));
    }
    text
}

/// A valid plan's verdict in a line: its file, id and steps, its warnings, and the calls that
/// will wait for an approval (`validate`).
pub fn verdict(ready: &crate::Prepared) -> String {
    let mut line = format!(
        "✓ {} is a valid plan: `{}`, {}",
        ready.loaded.source.name(),
        ready.program.plan_id(),
        count(ready.program.len(), "step", "steps")
    );
    let warnings = ready.loaded.warnings.len();
    if warnings > 0 {
        line.push_str(&format!(", {}", count(warnings, "warning", "warnings")));
    }
    let gated = ready.program.gated_steps();
    if !gated.is_empty() {
        line.push_str(&format!("; waits for approval of: {}", gated.join(", ")));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What can be done next follows from what the run waits for, whatever words say it.
    #[test]
    fn a_queue_tool_without_a_queue_is_told_from_a_queue_that_did_not_answer() {
        let failed = |code: &str| -> RunReport {
            serde_json::from_value(serde_json::json!({
                "run_id": "r", "plan_id": "p", "task_status": "FAILED", "variables": {},
                "records": [{"step_id": "a", "ok": false, "skipped": false, "attempts": 1,
                    "duration_ms": 0, "error": {"code": code, "message": "m"}}],
            }))
            .unwrap()
        };
        assert!(lacks_queue(&failed("E_QUEUE_UNAVAILABLE"), false));
        // Given a queue, the queue did not answer: no setting of the run mends that.
        assert!(!lacks_queue(&failed("E_QUEUE_UNAVAILABLE"), true));
        assert!(!lacks_queue(&failed("E_TOOL"), false));
    }

    #[test]
    fn next_is_what_the_waiting_calls_ask_for() {
        let waiting = |pending: serde_json::Value| -> RunReport {
            serde_json::from_value(serde_json::json!({
                "run_id": "r", "plan_id": "p", "task_status": "WAITING", "records": [],
                "variables": {}, "pending_approvals": pending,
            }))
            .expect("a report")
        };
        assert_eq!(next_of(&waiting(serde_json::json!([]))), None);
        let call = serde_json::json!({"step_id": "deploy", "tool": "exec"});
        let question = serde_json::json!({"step_id": "ask@input#1", "input_schema": {}});
        let plan = serde_json::json!({"step_id": plan_types::PLAN_APPROVAL});
        assert_eq!(
            next_of(&waiting(serde_json::json!([call]))),
            Some(Next::Decide)
        );
        assert_eq!(
            next_of(&waiting(serde_json::json!([call, question]))),
            Some(Next::Answer {
                id: "ask@input#1".to_owned()
            })
        );
        assert_eq!(
            next_of(&waiting(serde_json::json!([question, plan]))),
            Some(Next::ApprovePlan)
        );
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
