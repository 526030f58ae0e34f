//! `echo`, `sleep`, `fail`: the tools tests and examples are made of.

use std::time::Duration;

use async_trait::async_trait;
use plan_ports::{Tool, ToolContext, ToolError, ToolInfo, codes};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::args::{SOURCE, parse};

/// Returns its arguments unchanged.
#[derive(Debug, Clone, Copy, Default)]
pub struct Echo;

#[async_trait]
impl Tool for Echo {
    fn info(&self) -> ToolInfo {
        ToolInfo {
            name: "echo".into(),
            description: "Return the arguments unchanged".into(),
            source: SOURCE.into(),
            risk: plan_ports::Risk::Low,
            input_schema: json!({"type": "object"}),
        }
    }

    async fn call(&self, args: Value, _ctx: ToolContext) -> Result<Value, ToolError> {
        Ok(args)
    }
}

/// Waits `ms` milliseconds (cancellable), then returns `{"slept_ms": ms}`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sleep;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SleepArgs {
    ms: u64,
}

#[async_trait]
impl Tool for Sleep {
    fn info(&self) -> ToolInfo {
        ToolInfo {
            name: "sleep".into(),
            description: "Wait the given number of milliseconds".into(),
            source: SOURCE.into(),
            risk: plan_ports::Risk::Low,
            input_schema: json!({
                "type": "object",
                "properties": {"ms": {"type": "integer", "minimum": 0}},
                "required": ["ms"],
                "additionalProperties": false
            }),
        }
    }

    async fn call(&self, args: Value, ctx: ToolContext) -> Result<Value, ToolError> {
        let SleepArgs { ms } = parse("sleep", args)?;
        tokio::select! {
            () = sleep_precisely(Duration::from_millis(ms)) => Ok(json!({"slept_ms": ms})),
            () = ctx.cancel.cancelled() => Err(ToolError::new(codes::E_CANCELLED, "sleep was cancelled")),
        }
    }
}

/// Sleeps `duration`, not a millisecond more: tokio's timer rounds every sleep up to its next
/// 1 ms tick, so a chain of short sleeps drifts a millisecond a step. The last 2 ms are slept
/// on a blocking thread, with the operating system's finer timer.
async fn sleep_precisely(duration: Duration) {
    let deadline = std::time::Instant::now() + duration;
    let coarse = duration.saturating_sub(Duration::from_millis(2));
    if !coarse.is_zero() {
        tokio::time::sleep(coarse).await;
    }
    let rest = deadline.saturating_duration_since(std::time::Instant::now());
    if !rest.is_zero() {
        // A blocking thread that cannot be had (a runtime shutting down) just ends the wait.
        let _ = tokio::task::spawn_blocking(move || std::thread::sleep(rest)).await;
    }
}

/// Fails on purpose: always, or for the first `times` attempts and then returns
/// `{"attempt": k}`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Fail;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FailArgs {
    #[serde(default = "default_message")]
    message: String,
    #[serde(default)]
    retryable: bool,
    #[serde(default)]
    times: Option<u32>,
    #[serde(default = "default_code")]
    code: String,
}

fn default_message() -> String {
    "failed on purpose".to_owned()
}

fn default_code() -> String {
    codes::E_TOOL.to_string()
}

#[async_trait]
impl Tool for Fail {
    fn info(&self) -> ToolInfo {
        ToolInfo {
            name: "fail".into(),
            description: "Fail with the given message: always, or only the first `times` attempts"
                .into(),
            source: SOURCE.into(),
            risk: plan_ports::Risk::Low,
            input_schema: json!({
                "type": "object",
                "properties": {
                    "message": {"type": "string"},
                    "retryable": {"type": "boolean", "default": false},
                    "times": {"type": "integer", "minimum": 0},
                    "code": {"type": "string", "default": "E_TOOL"}
                },
                "additionalProperties": false
            }),
        }
    }

    async fn call(&self, args: Value, ctx: ToolContext) -> Result<Value, ToolError> {
        let args: FailArgs = parse("fail", args)?;
        match args.times {
            Some(times) if ctx.attempt > times => Ok(json!({"attempt": ctx.attempt})),
            _ => {
                let mut error = ToolError::new(args.code, args.message);
                error.retryable = args.retryable;
                Err(error)
            }
        }
    }
}
