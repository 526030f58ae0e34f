//! A run's calls in time, for the page's Gantt chart: each attempt of each call (a step, a map
//! item, a block's node), from its `tool.called` event to its `tool.succeeded` or
//! `tool.failed`, in milliseconds from the run's first event; and its critical path: the step
//! that finished last, the dependency of it that finished last, and so on back — the chain
//! that made the run as long as it was.

use plan_graph::{Dependencies, Plan, StepIndex};
use plan_types::{Event, EventKind};
use serde::Serialize;

/// The run's calls and its critical path.
#[derive(Debug, Serialize)]
pub(crate) struct Timeline {
    /// Each attempt of each call, in the order they started.
    pub(crate) bars: Vec<Bar>,
    /// The steps of the critical path, first to last.
    pub(crate) critical: Vec<String>,
    /// How many bars there are (`bars` may hold only the first).
    pub(crate) total: usize,
    /// From the first event to the last, in milliseconds.
    pub(crate) span_ms: u64,
}

/// One attempt of one call.
#[derive(Debug, Serialize)]
pub(crate) struct Bar {
    /// The call (`fetch`, `fetch[3]`, `deploy/check#1`).
    pub(crate) call: String,
    /// The plan's step it is of.
    pub(crate) step: String,
    pub(crate) attempt: u32,
    pub(crate) start_ms: u64,
    /// Absent while it runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) end_ms: Option<u64>,
    /// Absent while it runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) ok: Option<bool>,
}

/// The timeline of a run of `plan` from its events (in the order the ledger keeps them).
pub(crate) fn timeline(plan: &Plan, events: &[Event]) -> Timeline {
    let index = StepIndex::new(plan.steps.iter().map(|step| step.id.0.as_str()));
    let at = |event: &Event| {
        humantime::parse_rfc3339(&event.ts)
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    };
    let first = events.iter().map(at).min().unwrap_or(0);
    let last = events.iter().map(at).max().unwrap_or(0);
    let mut bars: Vec<Bar> = Vec::new();
    // The bar of each call's attempt still open: (call, attempt) → its place in `bars`.
    let mut open: std::collections::HashMap<(String, u32), usize> = Default::default();
    for event in events {
        let Some(call) = event.step_id.as_deref() else {
            continue;
        };
        let key = (call.to_owned(), event.attempt);
        match event.kind {
            EventKind::ToolCalled => {
                let Some(step) = index.step_of(call) else {
                    continue;
                };
                open.insert(key, bars.len());
                bars.push(Bar {
                    call: call.to_owned(),
                    step: plan.steps[step].id.0.clone(),
                    attempt: event.attempt,
                    start_ms: at(event).saturating_sub(first),
                    end_ms: None,
                    ok: None,
                });
            }
            EventKind::ToolSucceeded | EventKind::ToolFailed => {
                if let Some(bar) = open.remove(&key).and_then(|i| bars.get_mut(i)) {
                    bar.end_ms = Some(at(event).saturating_sub(first));
                    bar.ok = Some(event.kind == EventKind::ToolSucceeded);
                }
            }
            _ => {}
        }
    }
    let span_ms = last.saturating_sub(first);
    let critical = critical_path(plan, &bars, span_ms);
    Timeline {
        total: bars.len(),
        bars,
        critical,
        span_ms,
    }
}

/// The steps that made the run as long as it was: the step that ended last, then, back from
/// each, the dependency that ended last (a call still running ends at `now`; of two that
/// ended together, the one that started later).
fn critical_path(plan: &Plan, bars: &[Bar], now: u64) -> Vec<String> {
    // Each step's (end, start): its last call's end, its first call's start.
    let mut spans: Vec<Option<(u64, u64)>> = vec![None; plan.steps.len()];
    for bar in bars {
        if let Some(i) = plan.position(&bar.step) {
            let end = bar.end_ms.unwrap_or(now);
            spans[i] = Some(match spans[i] {
                None => (end, bar.start_ms),
                Some((e, s)) => (e.max(end), s.min(bar.start_ms)),
            });
        }
    }
    let latest = |candidates: &mut dyn Iterator<Item = usize>| {
        candidates
            .filter_map(|i| spans[i].map(|span| (span, std::cmp::Reverse(i))))
            .max()
            .map(|(_, std::cmp::Reverse(i))| i)
    };
    let deps = Dependencies::new(plan);
    let mut path = Vec::new();
    let mut at = latest(&mut (0..plan.steps.len()));
    while let Some(i) = at {
        path.push(plan.steps[i].id.0.clone());
        at = latest(&mut deps.deps[i].iter().copied());
    }
    path.reverse();
    path
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn plan() -> Plan {
        let text = json!({"id": "t", "steps": [
            {"id": "a", "tool": "echo", "args": {"text": "a"}},
            {"id": "quick", "tool": "echo", "args": {"text": "q"}},
            {"id": "slow", "tool": "echo", "args": {"text": "s"}, "depends_on": ["a"]},
            {"id": "last", "tool": "echo", "args": {"text": "l"}, "depends_on": ["quick", "slow"]},
            {"id": "m", "tool": "echo", "expand_on": [1, 2], "args": {"text": "$each"}}
        ]});
        let source = plan_graph::Source::new("t.json", text.to_string());
        plan_graph::load(source, plan_graph::Format::Json, &Default::default())
            .unwrap()
            .plan
    }

    fn event(kind: &str, step: &str, attempt: u32, ms: u64) -> Event {
        serde_json::from_value(json!({
            "type": kind, "run_id": "r", "step_id": step, "attempt": attempt,
            "ts": format!("2026-11-27T08:00:{:02}.{:03}Z", ms / 1000, ms % 1000), "tool": "echo"
        }))
        .unwrap()
    }

    #[test]
    fn each_attempt_is_a_bar_and_the_critical_path_follows_what_ended_last() {
        let events = vec![
            event("tool.called", "a", 1, 0),
            event("tool.called", "quick", 1, 0),
            event("tool.succeeded", "quick", 1, 100),
            event("tool.succeeded", "a", 1, 200),
            event("tool.called", "slow", 1, 200),
            event("tool.failed", "slow", 1, 300),
            event("tool.called", "slow", 2, 400),
            event("tool.succeeded", "slow", 2, 900),
            event("tool.called", "m-0", 1, 0),
            event("tool.succeeded", "m-0", 1, 50),
            event("tool.called", "last", 1, 900),
        ];
        let timeline = timeline(&plan(), &events);
        let bars: Vec<_> = (timeline.bars.iter())
            .map(|b| {
                (
                    b.call.as_str(),
                    b.step.as_str(),
                    b.attempt,
                    b.start_ms,
                    b.end_ms,
                    b.ok,
                )
            })
            .collect();
        assert_eq!(
            bars,
            [
                ("a", "a", 1, 0, Some(200), Some(true)),
                ("quick", "quick", 1, 0, Some(100), Some(true)),
                ("slow", "slow", 1, 200, Some(300), Some(false)),
                ("slow", "slow", 2, 400, Some(900), Some(true)),
                ("m-0", "m", 1, 0, Some(50), Some(true)),
                ("last", "last", 1, 900, None, None),
            ]
        );
        // `last` still runs: it ends now (900); before it, `slow` ended after `quick`.
        assert_eq!(timeline.critical, ["a", "slow", "last"]);
        assert_eq!(timeline.span_ms, 900);
    }

    #[test]
    fn a_run_without_calls_has_an_empty_timeline() {
        let timeline = timeline(&plan(), &[]);
        assert!(timeline.bars.is_empty() && timeline.critical.is_empty());
    }
}
