//! What plan-run's integration tests share: a runtime as the CLI makes it, and a ledger in a
//! folder of its own.

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
