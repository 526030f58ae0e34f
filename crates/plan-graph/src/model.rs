//! The plan as written: serde types with every alias of the formats it accepts, unknown fields refused.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::de::{self, IgnoredAny, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

/// A step identifier. Plans may write it as a string or (YAML `id: 1`, as mcp-cli plans do) a number.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct StepId(pub String);

impl fmt::Display for StepId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A string, or a whole number (read as its digits).
impl schemars::JsonSchema for StepId {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "StepId".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A step id: a string, or a whole number",
            "type": ["string", "integer"]
        })
    }
}

impl<'de> Deserialize<'de> for StepId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct IdVisitor;
        impl Visitor<'_> for IdVisitor {
            type Value = StepId;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a step id (a string or a whole number)")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<StepId, E> {
                Ok(StepId(v.to_owned()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<StepId, E> {
                Ok(StepId(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<StepId, E> {
                Ok(StepId(v.to_string()))
            }
        }
        deserializer.deserialize_any(IdVisitor)
    }
}

/// How the delay between retries is randomised.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Jitter {
    /// A uniformly random delay between zero and the computed backoff (the default).
    #[default]
    Full,
    /// Half the backoff plus a random part up to the other half.
    Equal,
    /// Exactly the computed backoff.
    None,
}

/// When and how a failed step is tried again. Only retryable errors are retried.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RetryPolicy {
    /// Attempts in total, the first try included.
    pub attempts: u32,
    /// Delay before the second attempt.
    pub backoff_ms: u64,
    /// Upper bound of any delay.
    pub max_backoff_ms: u64,
    /// Growth of the delay from one attempt to the next.
    pub multiplier: f64,
    /// Randomisation of the delay.
    pub jitter: Jitter,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            attempts: 3,
            backoff_ms: 500,
            max_backoff_ms: 60_000,
            multiplier: 2.0,
            jitter: Jitter::Full,
        }
    }
}

/// mcp-cli's saved form of a call: `tool_calls: [{"name", "args"}]`.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "ToolCall")]
pub(crate) struct RawToolCall {
    pub(crate) name: String,
    #[serde(default, alias = "arguments")]
    pub(crate) args: Map<String, Value>,
    #[serde(default, rename = "id")]
    #[schemars(with = "Option<Value>")]
    _id: Option<IgnoredAny>,
}

/// A step as written, before normalisation (aliases resolved by serde, the rest by `normalize`).
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Step")]
pub(crate) struct RawStep {
    #[serde(alias = "index", alias = "step_id")]
    pub(crate) id: StepId,
    #[serde(default)]
    pub(crate) title: Option<String>,
    #[serde(default)]
    pub(crate) description: Option<String>,
    #[serde(default)]
    pub(crate) tool: Option<String>,
    #[serde(default)]
    pub(crate) args: Option<Map<String, Value>>,
    #[serde(default)]
    pub(crate) tool_calls: Option<Vec<RawToolCall>>,
    #[serde(default, alias = "dependsOn")]
    pub(crate) depends_on: Option<Vec<StepId>>,
    #[serde(default, alias = "resultVariable")]
    pub(crate) result_variable: Option<String>,
    #[serde(default)]
    pub(crate) binds: BTreeMap<String, String>,
    #[serde(default)]
    pub(crate) retry: Option<Box<RetryPolicy>>,
    #[serde(default, alias = "timeoutMs")]
    pub(crate) timeout_ms: Option<u64>,
    #[serde(default)]
    pub(crate) layer: Option<String>,
    #[serde(default)]
    pub(crate) when: Option<String>,
    #[serde(default)]
    #[schemars(with = "Option<RiskSchema>")]
    pub(crate) risk: Option<Risk>,
    #[serde(default, alias = "expandOn")]
    pub(crate) expand_on: Option<Box<Value>>,
    #[serde(default, alias = "expandKey")]
    pub(crate) expand_key: Option<String>,
    #[serde(default)]
    pub(crate) block: Option<Box<Block>>,
    #[serde(default)]
    pub(crate) task: Option<Box<TaskSpec>>,
    #[serde(default, alias = "runIf")]
    pub(crate) run_if: Option<RunIf>,
}

/// A plan as written.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPlan {
    #[serde(default)]
    pub(crate) id: Option<String>,
    #[serde(default)]
    pub(crate) title: Option<String>,
    #[serde(default)]
    pub(crate) description: Option<String>,
    #[serde(default)]
    pub(crate) variables: Map<String, Value>,
    #[serde(default, alias = "maxConcurrency")]
    pub(crate) max_concurrency: Option<usize>,
    #[serde(default)]
    pub(crate) retry: Option<RetryPolicy>,
    #[serde(default, alias = "timeoutMs")]
    pub(crate) timeout_ms: Option<u64>,
    pub(crate) steps: Vec<RawStep>,
    #[serde(default)]
    pub(crate) guards: Option<Guards>,
    #[serde(default)]
    pub(crate) env: Option<Vec<String>>,
    #[serde(default)]
    pub(crate) mode: Option<Mode>,
    #[serde(default, alias = "failFast")]
    pub(crate) fail_fast: bool,
    #[serde(default, alias = "approvalsEnabled")]
    pub(crate) approvals: Option<bool>,
    #[serde(default)]
    pub(crate) workspace: Option<Workspace>,
    #[serde(default)]
    pub(crate) tools: Vec<DeclaredTool>,
}

/// A tool the plan declares because plan-cli does not know it: its calls are BullMQ jobs on
/// `queue` (job name: the tool's name; data: `{tool, args, run_id, step_id, attempt,
/// deadline}`), for workers written with nothing but BullMQ. Only the operator's plans may
/// declare tools (a tool's risk would be its author's word).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeclaredTool {
    /// The name steps call it by (letters, digits, `_` and `-`; no `.`, which names MCP
    /// servers' tools).
    pub name: String,
    /// What it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The BullMQ queue its workers take jobs from.
    pub queue: String,
    /// How dangerous a call is (default `medium`); `high` calls wait for an approval.
    #[serde(default = "medium")]
    #[schemars(with = "RiskSchema")]
    pub risk: Risk,
    /// Its arguments' JSON Schema (default: any object), checked before each call as any
    /// tool's is.
    #[serde(default = "any_object")]
    pub input_schema: Value,
}

fn medium() -> Risk {
    Risk::Medium
}

fn any_object() -> Value {
    serde_json::json!({"type": "object"})
}

/// One tool call in a plan, normalised: aliases resolved, `tool_calls` unwrapped,
/// `result_variable` folded into `binds`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Step {
    /// Unique within the plan.
    pub id: StepId,
    /// Human-readable description.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The tool to call.
    pub tool: String,
    /// The tool's arguments; strings may hold placeholders. Shared: a compiled program holds
    /// arguments without placeholders as they are here instead of a copy.
    pub args: Arc<Map<String, Value>>,
    /// Steps that must succeed before this one starts, in the order written.
    pub depends_on: Vec<StepId>,
    /// Variables set from the result: name → selector (`$`, `$.path`, `$var.path`).
    /// Includes `result_variable` as `name → "$"`.
    pub binds: BTreeMap<String, String>,
    /// The `result_variable` as written (it is in `binds` too), for locating diagnostics.
    #[serde(skip)]
    pub result_variable: Option<String>,
    /// Retry policy, when the step sets one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry: Option<Box<RetryPolicy>>,
    /// Time limit of one attempt, when the step sets one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Makes this a map step: one call per item of a list.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expand: Option<Box<Expand>>,
    /// A CEL condition over `vars`: when it is false the step is skipped (`condition false`)
    /// and so are the steps that depend on it only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    /// Makes this a composite step: a graph of nodes run from an entry point along
    /// transitions. Its `tool` is empty and its `args` are the block's `input`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block: Option<Box<Block>>,
    /// Makes this a task step: a coding task implemented in its own git worktree of the plan's
    /// `workspace`, verified, retried with feedback and merged. Its `tool` is empty.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task: Option<Box<TaskSpec>>,
    /// The layer the step belongs to in the execute-state.json state file (by default its topological
    /// level).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layer: Option<String>,
    /// How dangerous the call is; `high` waits for an approval. When absent, the tool's own
    /// default risk applies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub risk: Option<Risk>,
    /// When the step runs, given how its dependencies ended.
    #[serde(skip_serializing_if = "RunIf::is_default")]
    pub run_if: RunIf,
}

impl Step {
    /// What the step does, in a word for listings: `block`, `task`, or its tool's name.
    pub fn kind(&self) -> &str {
        if self.block.is_some() {
            "block"
        } else if self.task.is_some() {
            "task"
        } else {
            &self.tool
        }
    }
}

pub use plan_types::Risk;

// [`Risk`]'s JSON Schema (plan-types, where `Risk` lives for tools and plans alike, does not
// depend on schemars): the same variants, named `Risk` in the schema, with Risk's own words.
/// How dangerous a call is. Only `high` is gated: it waits for an approval.
#[derive(schemars::JsonSchema)]
#[schemars(rename = "Risk", rename_all = "lowercase")]
#[expect(dead_code, reason = "only its schema is used")]
pub(crate) enum RiskSchema {
    /// Reads, or changes nothing that matters.
    Low,
    /// Changes things that can be undone.
    Medium,
    /// Changes things that cannot be undone: runs only once approved.
    High,
}

/// When a step runs, given how its dependencies ended (Airflow's trigger rules).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum RunIf {
    /// Every dependency succeeded (execute_plan's rule; the default).
    #[default]
    AllSuccess,
    /// Every dependency finished, however it ended: teardown and cleanup steps.
    AllDone,
    /// At least one dependency succeeded: fan-in over alternatives.
    AnySuccess,
}

impl RunIf {
    fn is_default(&self) -> bool {
        *self == RunIf::AllSuccess
    }
}

/// How a run starts (the map-style executor's modes). The CLI's `--mode` wins over the plan's.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Run, stopping only for `risk: high` steps.
    #[default]
    Auto,
    /// Validate, resolve and show; run nothing.
    Preview,
    /// Wait before the first step until the plan is approved.
    Approval,
}

/// Budgets a run may not exceed (mcp-cli's guards). A call a guard stops fails with `E_GUARD`
/// and is never made.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Guards {
    /// Most tool calls in the run (a call's retries are part of the call).
    #[serde(
        default,
        alias = "maxToolCalls",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_tool_calls: Option<u64>,
    /// Most calls per tool name.
    #[serde(default, alias = "perTool", skip_serializing_if = "BTreeMap::is_empty")]
    pub per_tool: BTreeMap<String, u64>,
    /// No call starts once the run has taken this long.
    #[serde(
        default,
        alias = "maxDurationMs",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_duration_ms: Option<u64>,
    /// No call starts once this many steps (or items, or nodes) have failed.
    #[serde(
        default,
        alias = "maxFailures",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_failures: Option<u64>,
    /// Runaway detection: one tool with identical arguments is called at most this often.
    #[serde(default, alias = "maxRepeats", skip_serializing_if = "Option::is_none")]
    pub max_repeats: Option<u64>,
}

/// What a map step runs over (the map-style executor's `expandOn` / `expandKey`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Expand {
    /// A placeholder naming a list (`$var.items`, `${items}`), or a literal list.
    pub on: Value,
    /// A template giving each item's key (`$each.id`): items are then `ID[KEY]`, not `ID-N`,
    /// and `$key` reads it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// A composite block: nodes run one at a time from `entry_point`, each followed by
/// its transition, until a node has none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Block {
    /// The first node.
    pub entry_point: String,
    /// Node name → a tool call or a nested block.
    pub nodes: BTreeMap<String, Node>,
    /// Node name → the next node, or branches tried in order.
    #[serde(default)]
    pub transitions: BTreeMap<String, Transition>,
    /// Condition name → CEL over `result`, `vars`, `input` and `attempt`.
    #[serde(default)]
    pub conditions: BTreeMap<String, String>,
    /// Most node runs before the block fails with `max_steps_exceeded`.
    #[serde(default = "default_max_steps")]
    pub max_steps: u32,
    /// What a node's failure (after its retries) does: fail the block, or make it wait.
    #[serde(
        default,
        alias = "onFailure",
        skip_serializing_if = "OnFailure::is_default"
    )]
    pub on_failure: OnFailure,
}

/// What a block node's failure, once its retries are spent, does.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum OnFailure {
    /// The block fails with the node's error.
    #[default]
    Fail,
    /// The block (and the run) waits `WAITING` until someone approves running the node again
    /// or rejects it (`plan-cli approve` / `reject`, then `resume`).
    Wait,
}

impl OnFailure {
    fn is_default(&self) -> bool {
        *self == OnFailure::Fail
    }
}

fn default_max_steps() -> u32 {
    128
}

/// A block's node: a tool call (`tool`, `args`, …) or a nested `block`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Node {
    /// The tool to call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Its arguments; placeholders may read `${input…}` and `${nodes.NAME…}` (the latest result
    /// of another node) besides the run's variables.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub args: Map<String, Value>,
    /// A nested block instead of a tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block: Option<Box<Block>>,
    /// Retry policy of the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicy>,
    /// Time limit of one attempt of the call.
    #[serde(default, alias = "timeoutMs", skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// The call's risk; `high` waits for an approval before the node runs. Default: the tool's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<RiskSchema>")]
    pub risk: Option<Risk>,
    /// Overrides the block's `on_failure` for this node.
    #[serde(default, alias = "onFailure", skip_serializing_if = "Option::is_none")]
    pub on_failure: Option<OnFailure>,
}

/// Where a node goes next.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum Transition {
    /// Always this node.
    Linear(String),
    /// The target of the first branch whose condition holds (`default` always does).
    Branching(Vec<Branch>),
}

impl<'de> Deserialize<'de> for Transition {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TransitionVisitor;
        impl<'de> Visitor<'de> for TransitionVisitor {
            type Value = Transition;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a node name, or a list of {condition, target}")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Transition, E> {
                Ok(Transition::Linear(v.to_owned()))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Transition, A::Error> {
                let mut branches = Vec::new();
                while let Some(branch) = seq.next_element::<Branch>()? {
                    branches.push(branch);
                }
                Ok(Transition::Branching(branches))
            }
        }
        deserializer.deserialize_any(TransitionVisitor)
    }
}

/// One branch of a branching transition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Branch {
    /// A name from the block's `conditions`, or `default`.
    pub condition: String,
    /// The node to go to.
    pub target: String,
}

/// The git repository a plan's task steps work in: each task gets a worktree of its own on
/// branch `worktree-<ID>`, made from `base`, and is merged back into `base` when verified.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Workspace {
    /// The repository, relative to the plan file's folder.
    #[serde(default = "default_repo")]
    pub repo: String,
    /// Where worktrees go, relative to the repository (default `../.worktrees`, beside it).
    #[serde(
        default,
        alias = "worktreeDir",
        skip_serializing_if = "Option::is_none"
    )]
    pub worktree_dir: Option<String>,
    /// The branch tasks start from and merge into (default: the repository's current branch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    /// Put in front of every commit message plan-cli writes: `[PREFIX][ID] …`.
    #[serde(
        default,
        alias = "commitPrefix",
        skip_serializing_if = "String::is_empty"
    )]
    pub commit_prefix: String,
    /// plan-cli makes no commits: the implementer commits its own work.
    #[serde(
        default,
        alias = "noCommits",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub no_commits: bool,
    /// Attempts per task before it is abandoned.
    #[serde(default = "default_max_attempts", alias = "maxAttempts")]
    pub max_attempts: u32,
    /// Most tasks (and steps) running at once (default 3).
    #[serde(
        default,
        alias = "maxParallel",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_parallel: Option<usize>,
    /// What a merge conflict does: count as a failed attempt (`retry`), or halt the run for a
    /// person (`wait`).
    #[serde(
        default,
        alias = "onConflict",
        skip_serializing_if = "OnConflict::is_default"
    )]
    pub on_conflict: OnConflict,
    /// The task breakdown folder the plan was made from (`plan-cli import tasks`), relative to
    /// the plan's folder: the state file goes there by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<String>,
    /// A tool call run in the repository after the last task when it has a PROJECT.md.
    #[serde(
        default,
        alias = "contextUpdate",
        skip_serializing_if = "Option::is_none"
    )]
    pub context_update: Option<TaskCall>,
    /// Checks run on the combination of the base and each verified task before the base
    /// moves (a merge queue that tests what it lands): the merge is made in a trial checkout
    /// first, and only a combination whose checks pass is fast-forwarded onto the base.
    #[serde(
        default,
        alias = "verifyAfterMerge",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub verify_after_merge: Vec<Check>,
}

fn default_repo() -> String {
    ".".to_owned()
}

/// Attempts per task when the workspace does not say.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 5;

fn default_max_attempts() -> u32 {
    DEFAULT_MAX_ATTEMPTS
}

/// What a merge conflict does to a task.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum OnConflict {
    /// The merge is aborted and the attempt counts as failed; its feedback names the
    /// conflicting files, so the next attempt can merge the base in and resolve them.
    #[default]
    Retry,
    /// The merge is aborted and the run halts `WAITING` until a person has resolved it in the
    /// worktree and approved the task (`plan-cli approve`, then `resume`).
    Wait,
}

impl OnConflict {
    fn is_default(&self) -> bool {
        *self == OnConflict::Retry
    }
}

/// A task step's work.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskSpec {
    /// The call that does the work, run in the task's worktree; its arguments may read
    /// `${task.id}`, `${task.attempt}`, `${task.spec}`, `${task.worktree}`, `${task.branch}`,
    /// `${task.feedback}` and `${task.previous_error}`.
    pub implement: TaskCall,
    /// Checks run in the worktree after each attempt, in order; the first that fails fails the
    /// attempt.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verify: Vec<Check>,
    /// A call that turns a failed check into advice for the next attempt; it may read
    /// `${task.*}` and `${failure.step}`, `${failure.output}`. Without it the feedback is the
    /// failing output's tail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feedback: Option<TaskCall>,
    /// What the task is to do (`${task.spec}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<String>,
}

/// A tool call inside a task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskCall {
    /// The tool.
    pub tool: String,
    /// Its arguments; strings may hold placeholders.
    #[serde(default)]
    pub args: Map<String, Value>,
    /// Time limit of the call.
    #[serde(default, alias = "timeoutMs", skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// The call's risk; `high` waits for an approval of `ID/implement` (or `ID/feedback`)
    /// before it runs. Default: the tool's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<RiskSchema>")]
    pub risk: Option<Risk>,
}

/// A verification check: a program run in the task's worktree (no shell), which must exit 0
/// and may have to print (or not print) some text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Check {
    /// The program and its arguments. Placeholders may read `${task.*}`.
    pub argv: Vec<String>,
    /// Text its output (stdout and stderr) must contain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contains: Option<String>,
    /// Text its output must not contain.
    #[serde(
        default,
        alias = "notContains",
        skip_serializing_if = "Option::is_none"
    )]
    pub not_contains: Option<String>,
    /// Time limit (default 5 minutes).
    #[serde(default, alias = "timeoutMs", skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// A check's time limit when it sets none.
pub const DEFAULT_CHECK_TIMEOUT_MS: u64 = 5 * 60 * 1000;

/// A normalised plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    /// The plan's id: as written, else derived from the file name by the loader's caller.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Human-readable title.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What the plan is for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Initial variables.
    pub variables: Map<String, Value>,
    /// Most steps running at once, when the plan sets it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_concurrency: Option<usize>,
    /// Default retry policy for steps that set none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicy>,
    /// Default time limit of one attempt for steps that set none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Environment variables placeholders may read as `${env.NAME}`; their values are
    /// redacted from every output.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// The run's budgets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guards: Option<Guards>,
    /// How a run of the plan starts, when the plan says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
    /// Start nothing new after the first failure; running steps finish.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub fail_fast: bool,
    /// `false`: high-risk calls run without waiting for an approval (each is recorded as
    /// having run with approvals off). Default: on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approvals: Option<bool>,
    /// The git repository task steps work in, and how.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workspace: Option<Workspace>,
    /// The tools the plan declares (see [`DeclaredTool`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<DeclaredTool>,
    /// The steps, in plan order.
    pub steps: Vec<Step>,
}

impl Plan {
    /// The part of the plan a run of one layer (`layer`) or one step (`step`) runs: the
    /// matching steps, their dependencies on steps left out dropped (those are taken as done,
    /// as a task executor's layer and task filters take them). `Err` when nothing matches,
    /// naming what there is.
    pub fn select(&self, layer: Option<&str>, step: Option<&str>) -> Result<Plan, String> {
        let keep = |s: &Step| {
            layer.is_none_or(|l| s.layer.as_deref() == Some(l))
                && step.is_none_or(|id| s.id.0 == id)
        };
        if !self.steps.iter().any(keep) {
            let layers: Vec<&str> = {
                let mut seen = Vec::new();
                for name in self.steps.iter().filter_map(|s| s.layer.as_deref()) {
                    if !seen.contains(&name) {
                        seen.push(name);
                    }
                }
                seen
            };
            if let Some(l) = layer
                && !layers.contains(&l)
            {
                return Err(if layers.is_empty() {
                    format!("no step is in layer `{l}`: the plan's steps name no `layer`")
                } else {
                    format!(
                        "no step is in layer `{l}`; the layers are {}",
                        layers.join(", ")
                    )
                });
            }
            return Err(
                match (
                    step,
                    self.steps.iter().find(|s| Some(s.id.0.as_str()) == step),
                ) {
                    (Some(id), Some(found)) => format!(
                        "step `{id}` is in layer `{}`, not `{}`",
                        found.layer.as_deref().unwrap_or("-"),
                        layer.unwrap_or("-")
                    ),
                    (Some(id), None) => {
                        let ids: Vec<String> = self.steps.iter().map(|s| s.id.0.clone()).collect();
                        let hint = crate::closest(id, &ids)
                            .map(|near| format!(" (did you mean `{near}`?)"))
                            .unwrap_or_default();
                        format!("the plan has no step `{id}`{hint}")
                    }
                    (None, _) => "the plan has no steps".to_owned(),
                },
            );
        }
        let kept: std::collections::HashSet<&str> = self
            .steps
            .iter()
            .filter(|s| keep(s))
            .map(|s| s.id.0.as_str())
            .collect();
        let mut plan = self.clone();
        plan.steps.retain(|s| kept.contains(s.id.0.as_str()));
        for step in &mut plan.steps {
            step.depends_on.retain(|d| kept.contains(d.0.as_str()));
        }
        Ok(plan)
    }

    /// The position of a step in plan order.
    pub fn position(&self, id: &str) -> Option<usize> {
        self.steps.iter().position(|step| step.id.0 == id)
    }

    /// Every tool the plan names, its blocks' nodes included, sorted.
    pub fn tool_names(&self) -> std::collections::BTreeSet<&str> {
        fn block_tools<'a>(block: &'a Block, names: &mut std::collections::BTreeSet<&'a str>) {
            for node in block.nodes.values() {
                if let Some(tool) = &node.tool {
                    names.insert(tool);
                }
                if let Some(nested) = &node.block {
                    block_tools(nested, names);
                }
            }
        }
        let mut names = std::collections::BTreeSet::new();
        for step in &self.steps {
            match (&step.block, &step.task) {
                (Some(block), _) => block_tools(block, &mut names),
                (None, Some(task)) => {
                    names.insert(task.implement.tool.as_str());
                    if let Some(feedback) = &task.feedback {
                        names.insert(feedback.tool.as_str());
                    }
                }
                (None, None) => {
                    names.insert(step.tool.as_str());
                }
            }
        }
        if let Some(call) = self
            .workspace
            .as_ref()
            .and_then(|w| w.context_update.as_ref())
        {
            names.insert(call.tool.as_str());
        }
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> Plan {
        let text = r#"{"steps": [
            {"id": "a", "tool": "echo", "layer": "1"},
            {"id": "b", "tool": "echo", "layer": "2", "depends_on": ["a"]},
            {"id": "c", "tool": "echo", "layer": "2", "depends_on": ["a", "b"]}
        ]}"#;
        crate::load(
            crate::Source::new("p.json", text),
            crate::Format::Json,
            &crate::LoadOptions::default(),
        )
        .unwrap()
        .plan
    }

    #[test]
    fn a_selection_keeps_its_steps_and_drops_dependencies_on_the_rest() {
        let part = plan().select(Some("2"), None).unwrap();
        let ids: Vec<&str> = part.steps.iter().map(|s| s.id.0.as_str()).collect();
        assert_eq!(ids, ["b", "c"]);
        assert!(part.steps[0].depends_on.is_empty());
        assert_eq!(part.steps[1].depends_on, [StepId("b".into())]);
        let one = plan().select(None, Some("c")).unwrap();
        assert_eq!(one.steps.len(), 1);
        assert!(one.steps[0].depends_on.is_empty());
    }

    #[test]
    fn a_selection_of_nothing_says_what_there_is() {
        assert_eq!(
            plan().select(Some("9"), None).unwrap_err(),
            "no step is in layer `9`; the layers are 1, 2"
        );
        assert_eq!(
            plan().select(Some("1"), Some("b")).unwrap_err(),
            "step `b` is in layer `2`, not `1`"
        );
        assert_eq!(
            plan().select(None, Some("bb")).unwrap_err(),
            "the plan has no step `bb` (did you mean `b`?)"
        );
    }

    /// A plan of 100,000 steps holds 100,000 of each: rare parts (blocks, tasks, map
    /// settings, retry policies) are boxed so that a plain tool call does not pay for them.
    #[test]
    fn steps_stay_small() {
        assert!(
            std::mem::size_of::<RawStep>() <= 400,
            "{}",
            std::mem::size_of::<RawStep>()
        );
        assert!(
            std::mem::size_of::<Step>() <= 256,
            "{}",
            std::mem::size_of::<Step>()
        );
    }
}
