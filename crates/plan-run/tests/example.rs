//! The library example runs as documented: start, wait for an approval, approve, resume.

#[path = "../../../examples/library/approve_and_resume.rs"]
mod example;

#[test]
fn the_example_starts_approves_and_resumes_a_run() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("state.db");
    let status = example::run(&ledger).unwrap();
    assert_eq!(status, plan_types::TaskStatus::Completed);
    // The ledger saw one run, with `build` run once.
    let store = plan_store::Store::open(&ledger).unwrap();
    let runs = store.runs().unwrap();
    assert_eq!(runs.len(), 1);
    let attempts = store.attempts(&runs[0].run_id).unwrap();
    let builds = attempts.iter().filter(|a| a.step_id == "build").count();
    assert_eq!(builds, 1, "build is not run again on resume");
    let records = store.records(&runs[0].run_id).unwrap();
    let ids: Vec<&str> = records.iter().map(|r| r.step_id.as_str()).collect();
    assert_eq!(ids, ["build", "deploy", "notify"]);
}
