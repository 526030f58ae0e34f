//! The plan's `guards` (as mcp-cli has them): budgets checked before every call. A call a guard stops
//! fails with `E_GUARD` naming the guard, and its tool is never called.
//!
//! Steps and map items are admitted by the scheduler, one at a time in its loop, so which call
//! a count-based guard stops does not depend on timing; block nodes are admitted by their
//! block as they run. A call's retries are part of the call, not calls of their own.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use plan_graph::Guards;
use serde_json::{Value, json};
// Tokio's clock, so that paused-time tests see `max_duration_ms` pass.
use tokio::time::Instant;

use plan_ports::codes;
use plan_types::StepError;

/// The guards of one run and what it has used of them.
pub(crate) struct Guard {
    limits: Guards,
    started: Instant,
    used: Mutex<Used>,
}

#[derive(Default)]
struct Used {
    calls: u64,
    per_tool: HashMap<String, u64>,
    failures: u64,
    /// Calls per tool and canonical arguments, for `max_repeats`.
    repeats: HashMap<(String, String), u64>,
}

impl Guard {
    pub(crate) fn new(limits: Guards) -> Self {
        Guard {
            limits,
            started: Instant::now(),
            used: Mutex::new(Used::default()),
        }
    }

    /// Counts a call an earlier attempt at this run made (`resume`): budgets are per run.
    pub(crate) fn restore_call(&self, tool: &str) {
        let mut used = self.lock();
        used.calls += 1;
        *used.per_tool.entry(tool.to_owned()).or_default() += 1;
    }

    /// Admits a call of `tool` with `args` and counts it, or says which guard stops it.
    pub(crate) fn admit(&self, tool: &str, args: &Value) -> Result<(), StepError> {
        let limits = &self.limits;
        if let Some(limit) = limits.max_duration_ms {
            let elapsed = self.started.elapsed();
            if elapsed >= Duration::from_millis(limit) {
                return Err(stopped(
                    "max_duration_ms",
                    limit,
                    format!("the run has taken {} ms", elapsed.as_millis()),
                ));
            }
        }
        let mut used = self.lock();
        if let Some(limit) = limits.max_failures
            && used.failures >= limit
        {
            let failures = used.failures;
            return Err(stopped(
                "max_failures",
                limit,
                format!("failures so far: {failures}"),
            ));
        }
        if let Some(limit) = limits.max_tool_calls
            && used.calls >= limit
        {
            return Err(stopped(
                "max_tool_calls",
                limit,
                format!("the run has made {limit} tool calls"),
            ));
        }
        let tool_calls = used.per_tool.get(tool).copied().unwrap_or(0);
        if let Some(&limit) = limits.per_tool.get(tool)
            && tool_calls >= limit
        {
            return Err(stopped(
                &format!("per_tool.{tool}"),
                limit,
                format!("the run has called `{tool}` {}", times(limit)),
            ));
        }
        let repeat_key = limits
            .max_repeats
            .map(|_| (tool.to_owned(), args.to_string()));
        if let (Some(limit), Some(key)) = (limits.max_repeats, &repeat_key)
            && used.repeats.get(key).copied().unwrap_or(0) >= limit
        {
            return Err(stopped(
                "max_repeats",
                limit,
                format!(
                    "`{tool}` was already called {} with these same arguments",
                    times(limit)
                ),
            ));
        }
        used.calls += 1;
        *used.per_tool.entry(tool.to_owned()).or_default() += 1;
        if let Some(key) = repeat_key {
            *used.repeats.entry(key).or_default() += 1;
        }
        Ok(())
    }

    /// Counts a failed step, item or block, for `max_failures`.
    pub(crate) fn failed(&self) {
        self.lock().failures += 1;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Used> {
        // A panic while holding the lock leaves only counters behind: still usable.
        self.used
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

fn times(n: u64) -> String {
    match n {
        1 => "once".to_owned(),
        2 => "twice".to_owned(),
        n => format!("{n} times"),
    }
}

fn stopped(guard: &str, limit: u64, why: String) -> StepError {
    StepError {
        code: codes::E_GUARD,
        message: format!("guard `{guard}` ({limit}) stopped the call: {why}"),
        details: Some(json!({"guard": guard, "limit": limit})),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn guard(limits: Guards) -> Guard {
        Guard::new(limits)
    }

    #[test]
    fn max_tool_calls_stops_the_call_past_the_budget() {
        let g = guard(Guards {
            max_tool_calls: Some(2),
            ..Guards::default()
        });
        assert!(g.admit("echo", &json!({"a": 1})).is_ok());
        assert!(g.admit("sleep", &json!({})).is_ok());
        let error = g.admit("echo", &json!({"a": 2})).unwrap_err();
        assert_eq!(error.code, "E_GUARD");
        assert_eq!(
            error.message,
            "guard `max_tool_calls` (2) stopped the call: the run has made 2 tool calls"
        );
        assert_eq!(
            error.details,
            Some(json!({"guard": "max_tool_calls", "limit": 2}))
        );
    }

    #[test]
    fn per_tool_counts_each_tool_apart() {
        let g = guard(Guards {
            per_tool: BTreeMap::from([("exec".to_owned(), 1)]),
            ..Guards::default()
        });
        assert!(g.admit("exec", &json!({})).is_ok());
        assert!(g.admit("echo", &json!({})).is_ok());
        let error = g.admit("exec", &json!({"other": true})).unwrap_err();
        assert!(
            error.message.starts_with("guard `per_tool.exec` (1)"),
            "{}",
            error.message
        );
    }

    #[test]
    fn max_repeats_compares_arguments() {
        let g = guard(Guards {
            max_repeats: Some(2),
            ..Guards::default()
        });
        let same = json!({"path": "/tmp/x", "n": 1});
        assert!(g.admit("read", &same).is_ok());
        assert!(g.admit("read", &same).is_ok());
        assert!(g.admit("read", &json!({"path": "/tmp/y"})).is_ok());
        assert!(g.admit("write", &same).is_ok());
        let error = g.admit("read", &same).unwrap_err();
        assert!(
            error.message.contains("`max_repeats` (2)"),
            "{}",
            error.message
        );
    }

    #[test]
    fn max_failures_stops_calls_once_reached() {
        let g = guard(Guards {
            max_failures: Some(1),
            ..Guards::default()
        });
        assert!(g.admit("echo", &json!({})).is_ok());
        g.failed();
        let error = g.admit("echo", &json!({})).unwrap_err();
        assert!(
            error.message.contains("failures so far: 1"),
            "{}",
            error.message
        );
    }

    #[test]
    fn restored_calls_count_against_the_budget() {
        let g = guard(Guards {
            max_tool_calls: Some(1),
            ..Guards::default()
        });
        g.restore_call("echo");
        assert!(g.admit("echo", &json!({})).is_err());
    }

    #[test]
    fn a_stopped_call_is_not_counted() {
        let g = guard(Guards {
            per_tool: BTreeMap::from([("a".to_owned(), 1)]),
            max_tool_calls: Some(2),
            ..Guards::default()
        });
        assert!(g.admit("a", &json!({})).is_ok());
        assert!(g.admit("a", &json!({})).is_err());
        assert!(g.admit("b", &json!({})).is_ok());
    }
}
