//! What plan-run's integration tests share: a runtime as the CLI makes it, a ledger in a
//! folder of its own, a JSON plan prepared with the built-ins, and a scripted model.

/// A multi-threaded runtime with the stack run values need.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(plan_types::json::VALUE_THREAD_STACK)
        .build()
        .expect("a runtime")
}

/// A fresh folder (removed when dropped) and the ledger path inside it.
pub(crate) fn ledger() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let ledger = dir.path().join("state.db");
    (dir, ledger)
}

/// Asserts that the ledger holds no run (a refusal left nothing behind).
#[allow(
    dead_code,
    reason = "each test binary compiles this module; not all of them refuse runs"
)]
pub(crate) fn assert_no_runs(ledger: &std::path::Path) {
    let mut store = plan_store::Store::open(ledger).expect("the ledger opens");
    let runs =
        plan_run::runs(&mut store, &plan_run::RunFilter::default()).expect("runs are listed");
    assert!(runs.is_empty(), "no run is left behind: {runs:?}");
}

/// JSON plan `text` (id `p` unless it names one) prepared with the built-in tools to run.
#[allow(dead_code, reason = "each test binary uses what it needs")]
pub(crate) fn prepare_json(
    runtime: &tokio::runtime::Runtime,
    text: &str,
) -> Result<plan_run::Prepared, plan_run::PrepareError> {
    let toolbox = plan_run::Toolbox::new(plan_tools::builtin_registry());
    runtime.block_on(plan_run::prepare(
        plan_run::PlanText::json("p.json", text, "p"),
        Default::default(),
        &toolbox,
        plan_run::Strictness::RUN,
        &|_| None,
    ))
}

/// A model that answers with the plans it was given, in turn, under a name.
#[allow(dead_code, reason = "each test binary uses what it needs")]
pub(crate) struct Scripted {
    pub(crate) answers: Vec<serde_json::Value>,
    pub(crate) name: &'static str,
}

impl plan_llm::Model for Scripted {
    fn answer<'a>(
        &'a mut self,
        _messages: &'a [serde_json::Value],
        _schema: &'a plan_llm::Schema,
        _max_tokens: u32,
    ) -> plan_llm::Pending<'a, Result<plan_llm::Answer, plan_llm::LlmError>> {
        let answer = self.answers.remove(0).to_string();
        Box::pin(async move { Ok(plan_llm::Answer::text(answer)) })
    }

    fn name(&self) -> String {
        self.name.to_owned()
    }
}
