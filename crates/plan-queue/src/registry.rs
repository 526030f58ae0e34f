//! Where workers say which tools they serve, and how a coordinator picks a queue for a call.
//!
//! The hash [`REGISTRY_KEY`] maps each worker's id to a [`WorkerEntry`] as JSON. A worker
//! writes its entry when it starts and again every few seconds (`seen_ms`), and deletes it when
//! it stops; an entry not refreshed for [`STALE_AFTER`] is a dead worker's. Any program can
//! take part: a Node or Python BullMQ worker publishes with one `HSET`.

use std::collections::BTreeMap;
use std::time::Duration;

use plan_ports::{Risk, ToolInfo};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The hash of live workers' entries.
pub const REGISTRY_KEY: &str = "plan:tools";

/// An entry older than this is a dead worker's: its tools are no longer offered.
pub const STALE_AFTER: Duration = Duration::from_secs(15);

/// How often a worker refreshes its entry.
pub(crate) const REFRESH_EVERY: Duration = Duration::from_secs(5);

/// What one worker serves, and where it takes jobs from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerEntry {
    /// The BullMQ queue it works on.
    pub queue: String,
    /// The tools it serves.
    pub tools: Vec<PublishedTool>,
    /// When it last said it is alive (milliseconds since the epoch).
    pub seen_ms: u64,
    /// Where it runs, for messages.
    #[serde(default)]
    pub host: String,
}

/// One tool a worker serves: what validation, schema checks and approvals need.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PublishedTool {
    /// The name plans use.
    pub name: String,
    /// One line on what it does.
    #[serde(default)]
    pub description: String,
    /// JSON Schema of its arguments (any object when absent).
    #[serde(default = "any_object")]
    pub input_schema: Value,
    /// `high` makes every call wait for an approval.
    #[serde(default = "low")]
    pub risk: Risk,
}

fn any_object() -> Value {
    serde_json::json!({"type": "object"})
}

fn low() -> Risk {
    Risk::Low
}

/// Whether an entry last seen at `seen_ms` is a live worker's at `now`: seen within
/// [`STALE_AFTER`]. An entry from further in the future than that (a clock far off, or an entry
/// written by hand) is not live: counting it live would make it live for good, and a tool's
/// routing could wait on a worker that does not exist.
fn is_live(seen_ms: u64, now: u64) -> bool {
    let window = STALE_AFTER.as_millis() as u64;
    if seen_ms > now {
        return seen_ms - now < window;
    }
    now - seen_ms < window
}

/// The live workers, by id. Entries that are unreadable or stale are left out (and stale ones
/// older than a day are deleted, so the hash does not grow with every worker ever started).
pub(crate) async fn live_workers(
    redis: &mut redis::aio::ConnectionManager,
) -> redis::RedisResult<BTreeMap<String, WorkerEntry>> {
    let all: BTreeMap<String, String> = redis::cmd("HGETALL")
        .arg(REGISTRY_KEY)
        .query_async(redis)
        .await?;
    let now = crate::now_ms();
    let mut live = BTreeMap::new();
    for (id, text) in all {
        let Ok(entry) = serde_json::from_str::<WorkerEntry>(&text) else {
            continue;
        };
        let age = now.saturating_sub(entry.seen_ms);
        if is_live(entry.seen_ms, now) {
            live.insert(id, entry);
        } else if age > 24 * 3600 * 1000 {
            let _: redis::RedisResult<i64> = redis::cmd("HDEL")
                .arg(REGISTRY_KEY)
                .arg(&id)
                .query_async(redis)
                .await;
        }
    }
    Ok(live)
}

/// The tools `workers` publish, by name: the first worker's description of each, with the
/// worker as its source.
pub(crate) fn tool_infos(workers: &BTreeMap<String, WorkerEntry>) -> BTreeMap<String, ToolInfo> {
    let mut tools = BTreeMap::new();
    for (id, entry) in workers {
        for tool in &entry.tools {
            tools.entry(tool.name.clone()).or_insert_with(|| ToolInfo {
                name: tool.name.clone(),
                description: tool.description.clone(),
                source: format!("worker {id}"),
                input_schema: tool.input_schema.clone(),
                risk: tool.risk,
            });
        }
    }
    tools
}

pub(crate) async fn publish(
    redis: &mut redis::aio::ConnectionManager,
    id: &str,
    entry: &WorkerEntry,
) -> redis::RedisResult<()> {
    let text = serde_json::to_string(entry).unwrap_or_default();
    redis::cmd("HSET")
        .arg(REGISTRY_KEY)
        .arg(id)
        .arg(text)
        .query_async(redis)
        .await
}

pub(crate) async fn withdraw(
    redis: &mut redis::aio::ConnectionManager,
    id: &str,
) -> redis::RedisResult<()> {
    redis::cmd("HDEL")
        .arg(REGISTRY_KEY)
        .arg(id)
        .query_async(redis)
        .await
}

/// Where a call of one tool goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    /// To this queue: every live worker on it serves the tool.
    Queue(String),
    /// No worker has published anything: to the default queue, for workers that do not
    /// publish (BullMQ workers written before plan-cli, say).
    Unpublished(String),
    /// No queue has the tool in every one of its workers: the call waits. Says why.
    Nobody(String),
}

/// The queue a call of `tool` goes to: one whose live workers all serve it (a job on a BullMQ
/// queue goes to whichever of its workers asks first), `base` when it qualifies.
pub(crate) fn route(workers: &BTreeMap<String, WorkerEntry>, tool: &str, base: &str) -> Route {
    if workers.is_empty() {
        return Route::Unpublished(base.to_owned());
    }
    // Per queue: how many of its workers serve the tool, of how many.
    let mut queues: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for entry in workers.values() {
        let (serving, all) = queues.entry(entry.queue.as_str()).or_insert((0, 0));
        *all += 1;
        if entry.tools.iter().any(|t| t.name == tool) {
            *serving += 1;
        }
    }
    let whole = |(serving, all): &(usize, usize)| serving == all;
    if queues.get(base).is_some_and(whole) {
        return Route::Queue(base.to_owned());
    }
    if let Some((queue, _)) = queues.iter().find(|(_, counts)| whole(counts)) {
        return Route::Queue((*queue).to_owned());
    }
    let partly: Vec<String> = queues
        .iter()
        .filter(|(_, (serving, _))| *serving > 0)
        .map(|(queue, _)| format!("`{queue}`"))
        .collect();
    if partly.is_empty() {
        Route::Nobody(format!("no live worker serves `{tool}`"))
    } else {
        Route::Nobody(format!(
            "on queue {}, some workers serve `{tool}` and some do not, and a job goes to \
             whichever worker asks first: give workers of fewer tools a queue of their own \
             (`--queue-name`)",
            partly.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_from_the_future_are_not_live_for_good() {
        let now = 1_000_000_000;
        assert!(is_live(now, now));
        assert!(is_live(now - 14_000, now));
        assert!(!is_live(now - 16_000, now));
        // A little skew is a live worker's; a day ahead is no worker's.
        assert!(is_live(now + 5_000, now));
        assert!(!is_live(now + 24 * 3600 * 1000, now));
        assert!(!is_live(u64::MAX, now));
    }

    fn worker(queue: &str, tools: &[&str]) -> WorkerEntry {
        WorkerEntry {
            queue: queue.to_owned(),
            tools: tools
                .iter()
                .map(|name| PublishedTool {
                    name: (*name).to_owned(),
                    description: String::new(),
                    input_schema: any_object(),
                    risk: Risk::Low,
                })
                .collect(),
            seen_ms: 0,
            host: String::new(),
        }
    }

    fn workers(list: &[(&str, &str, &[&str])]) -> BTreeMap<String, WorkerEntry> {
        list.iter()
            .map(|(id, queue, tools)| ((*id).to_owned(), worker(queue, tools)))
            .collect()
    }

    #[test]
    fn a_call_goes_to_a_queue_whose_workers_all_serve_its_tool() {
        let none = BTreeMap::new();
        assert_eq!(
            route(&none, "echo", "steps"),
            Route::Unpublished("steps".into())
        );
        let set = workers(&[
            ("a", "steps", &["echo", "exec"]),
            ("b", "steps", &["echo", "exec"]),
            ("c", "node", &["greet", "echo"]),
        ]);
        assert_eq!(route(&set, "echo", "steps"), Route::Queue("steps".into()));
        assert_eq!(route(&set, "greet", "steps"), Route::Queue("node".into()));
        assert!(
            matches!(route(&set, "nope", "steps"), Route::Nobody(why) if why.contains("no live worker serves `nope`"))
        );
        // A worker of fewer tools on the same queue would take jobs it cannot run.
        let mixed = workers(&[("a", "steps", &["echo", "exec"]), ("b", "steps", &["echo"])]);
        assert_eq!(route(&mixed, "echo", "steps"), Route::Queue("steps".into()));
        assert!(
            matches!(route(&mixed, "exec", "steps"), Route::Nobody(why) if why.contains("queue of their own"))
        );
    }

    #[test]
    fn entries_written_by_other_programs_are_read() {
        let entry: WorkerEntry = serde_json::from_str(
            r#"{"queue": "steps", "seen_ms": 5, "tools": [{"name": "greet"}, {"name": "rm", "risk": "high", "input_schema": {"type": "object", "required": ["path"]}}]}"#,
        )
        .unwrap();
        assert_eq!(entry.tools[0].input_schema, any_object());
        assert_eq!(entry.tools[1].risk, Risk::High);
    }
}
