//! The ledger on real files: migrations, refusals, the journal, queries, the registry.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use plan_store::{EventBuffer, NewRun, RunJournal, RunState, Store, StoreError, StoredPlan};
use plan_types::{Batch, Journal, Position, Record, RunEnd, StepError, TaskStatus};
use serde_json::{Map, Value, json};

fn new_run<'a>(
    run_id: &'a str,
    inputs: &'a Map<String, Value>,
    options: &'a Value,
    started_at: &'a str,
) -> NewRun<'a> {
    NewRun {
        run_id,
        plan_id: "p",
        plan_name: "p.json",
        plan_format: "json",
        plan_source: r#"{"steps": [{"id": "a", "tool": "echo"}, {"id": "b", "tool": "echo", "depends_on": ["a"]}]}"#,
        inputs,
        options,
        owner_pid: 42,
        started_at,
    }
}

fn record(id: &str, ok: bool) -> Record {
    Record {
        step_id: id.to_owned(),
        ok,
        skipped: false,
        result: ok.then(|| Arc::new(json!({"id": id}))),
        reason: None,
        error: (!ok).then(|| {
            Box::new(StepError {
                code: "E_TOOL".into(),
                message: "boom".into(),
                details: None,
            })
        }),
        attempts: 1,
        duration_ms: 3,
        upstream: None,
    }
}

#[test]
fn a_new_file_gets_the_schema_and_opens_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/dir/state.db");
    let store = Store::open(&path).unwrap();
    assert!(store.runs().unwrap().is_empty());
    drop(store);
    Store::open(&path).unwrap();
}

#[test]
fn files_that_are_not_ledgers_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.db");
    std::fs::write(&garbage, b"this is not a database, it is text ......................................................").unwrap();
    let error = Store::open(&garbage).unwrap_err();
    assert!(matches!(error, StoreError::Foreign { .. }), "{error}");
    assert!(
        error.to_string().contains("is not a plan-cli ledger"),
        "{error}"
    );

    let other = dir.path().join("other.db");
    let conn = rusqlite::Connection::open(&other).unwrap();
    conn.execute_batch("CREATE TABLE customers (id INTEGER);")
        .unwrap();
    drop(conn);
    let error = Store::open(&other).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "{} is not a plan-cli ledger: it is an SQLite database with 1 tables of another program",
            other.display()
        )
    );
    // And it was left alone.
    let conn = rusqlite::Connection::open(&other).unwrap();
    let tables: i64 = conn
        .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
        .unwrap();
    assert_eq!(tables, 1);
}

#[test]
fn a_ledger_from_a_newer_plan_cli_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    drop(Store::open(&path).unwrap());
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.pragma_update(None, "user_version", 99).unwrap();
    drop(conn);
    let error = Store::open(&path).unwrap_err();
    assert!(
        matches!(
            error,
            StoreError::TooNew {
                found: 99,
                supported: 10,
                ..
            }
        ),
        "{error}"
    );
}

#[test]
fn an_unwritable_directory_is_a_clear_error() {
    let error = Store::open(std::path::Path::new(
        "/proc/plan-cli-cannot-be-here/state.db",
    ))
    .unwrap_err();
    assert!(error.to_string().starts_with("cannot open the ledger /proc/plan-cli-cannot-be-here/state.db: cannot create the directory"), "{error}");
}

#[test]
fn a_fifo_or_a_directory_is_refused_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo.db");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    // Opened on a thread of its own: a ledger that reads the FIFO blocks for good, and the
    // test fails after a while instead of waiting with it.
    let (sender, receiver) = std::sync::mpsc::channel();
    let path = fifo.clone();
    std::thread::spawn(move || {
        let errors = [
            Store::open(&path).map(drop).unwrap_err().to_string(),
            Store::open_read_only(&path)
                .map(drop)
                .unwrap_err()
                .to_string(),
        ];
        let _ = sender.send(errors);
    });
    let errors = receiver
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("opening a FIFO as the ledger blocked");
    for error in errors {
        assert!(
            error
                .to_string()
                .ends_with("it is a FIFO, not a ledger file"),
            "{error}"
        );
    }
    let error = Store::open(dir.path()).unwrap_err();
    assert!(
        error
            .to_string()
            .ends_with("it is a directory, not a ledger file"),
        "{error}"
    );
    // A FIFO where SQLite looks for the ledger's journal (anyone who can write the ledger's
    // folder can plant one) is refused too, naming it, not waited on.
    let ledger = dir.path().join("state.db");
    Store::open(&ledger).unwrap();
    for beside in ["state.db-journal", "state.db-wal"] {
        let planted = dir.path().join(beside);
        let _ = std::fs::remove_file(&planted);
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&planted)
                .status()
                .unwrap()
                .success()
        );
        let (sender, receiver) = std::sync::mpsc::channel();
        let path = ledger.clone();
        std::thread::spawn(move || {
            let _ = sender.send(
                Store::open_read_only(&path)
                    .map(drop)
                    .unwrap_err()
                    .to_string(),
            );
        });
        let error = receiver
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("a FIFO beside the ledger blocked it");
        assert!(error.contains(beside), "{error}");
        assert!(
            error.ends_with("it is a FIFO, not a ledger file"),
            "{error}"
        );
        std::fs::remove_file(&planted).unwrap();
    }
}

#[test]
fn a_journal_writes_batches_that_read_back_in_plan_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let mut store = Store::open(&path).unwrap();
    let inputs: Map<String, Value> = [("who".to_owned(), json!("ada"))].into_iter().collect();
    let options = json!({"max_concurrency": 2});
    store
        .begin_run(&new_run(
            "r1",
            &inputs,
            &options,
            "2026-01-01T00:00:00.000Z",
        ))
        .unwrap();
    let events = Arc::new(EventBuffer::default());
    let mut journal = RunJournal::new(store, "r1", events.clone()).unwrap();

    let (a, m0, m1, m) = (
        record("a", true),
        record("m-0", true),
        record("m-1", false),
        record("m", false),
    );
    let list = json!([1, 2]);
    // Attempts are the tool events: a failed first try of `a`, then a success.
    use plan_types::EventSink;
    let tool_event = |kind: &str, attempt: u32, more: Value| {
        let mut fields = json!({"type": kind, "run_id": "r1", "step_id": "a", "attempt": attempt,
            "ts": "2026-01-01T00:00:01.250Z", "tool": "echo"});
        if let (Some(fields), Some(more)) = (fields.as_object_mut(), more.as_object()) {
            fields.extend(more.clone());
        }
        serde_json::from_value::<plan_types::Event>(fields).unwrap()
    };
    events.emit(&tool_event("tool.called", 1, json!({})));
    events.emit(&tool_event(
        "tool.failed",
        1,
        json!({"duration_ms": 7, "error": {"code": "E_IO", "message": "flaky"}}),
    ));
    events.emit(&tool_event("tool.called", 2, json!({})));
    events.emit(&tool_event("tool.succeeded", 2, json!({"duration_ms": 3})));
    // Committed out of order, across two batches: items of step 1, then step 0.
    journal
        .commit(
            &Batch {
                records: vec![
                    (
                        Position {
                            step: 1,
                            item: None,
                        },
                        m.clone(),
                    ),
                    (
                        Position {
                            step: 1,
                            item: Some(1),
                        },
                        m1.clone(),
                    ),
                    (
                        Position {
                            step: 1,
                            item: Some(0),
                        },
                        m0.clone(),
                    ),
                ],
                variables: vec![("list".to_owned(), std::sync::Arc::new(list.clone()))],
                checkpoints: Vec::new(),
            },
            1,
        )
        .unwrap();
    journal
        .commit(
            &Batch {
                records: vec![(
                    Position {
                        step: 0,
                        item: None,
                    },
                    a.clone(),
                )],
                variables: vec![],
                checkpoints: Vec::new(),
            },
            2,
        )
        .unwrap();
    journal
        .finish(RunEnd::Finished(TaskStatus::Failed), SystemTime::now())
        .unwrap();
    let store = journal.into_store();

    let ids: Vec<String> = store
        .records("r1")
        .unwrap()
        .into_iter()
        .map(|r| r.step_id)
        .collect();
    assert_eq!(ids, ["a", "m-0", "m-1", "m"]);
    let records = store.records("r1").unwrap();
    assert_eq!(records[2], m1, "records read back unchanged");
    let variables: BTreeMap<String, Value> = store
        .variables("r1")
        .unwrap()
        .into_iter()
        .map(|(k, v)| (k, (*v).clone()))
        .collect();
    assert_eq!(
        variables,
        [("list".to_owned(), list.clone())].into_iter().collect()
    );
    let row = store.run("r1").unwrap();
    assert_eq!(
        (row.state, row.task_status),
        (RunState::Finished, Some(TaskStatus::Failed))
    );
    assert_eq!(row.inputs, inputs);
    assert_eq!(row.options, options);
    assert!(row.finished_at.is_some());
    let attempts = store.attempts("r1").unwrap();
    let brief: Vec<_> = attempts
        .iter()
        .map(|a| {
            (
                a.step_id.as_str(),
                a.attempt,
                a.ok,
                a.duration_ms,
                a.error_code.as_deref(),
                a.error_message.as_deref(),
                a.started_at.as_str(),
            )
        })
        .collect();
    assert_eq!(
        brief,
        [
            (
                "a",
                1,
                false,
                7,
                Some("E_IO"),
                Some("flaky"),
                "2026-01-01T00:00:01.250Z"
            ),
            ("a", 2, true, 3, None, None, "2026-01-01T00:00:01.250Z")
        ]
    );
}

#[test]
fn events_are_stored_with_each_commit_and_continue_after_a_resume() {
    let mut store = Store::in_memory().unwrap();
    let (inputs, options) = (Map::new(), json!({}));
    store
        .begin_run(&new_run("r", &inputs, &options, "2026-01-01T00:00:00.000Z"))
        .unwrap();
    let events = Arc::new(EventBuffer::default());
    assert_eq!(store.last_event_at("r").unwrap(), None);
    let mut journal = RunJournal::new(store, "r", events.clone()).unwrap();
    let event = |n: u32| {
        let mut e: plan_types::Event = serde_json::from_value(json!({
            "type": "run.started", "run_id": "r", "attempt": n,
            "ts": format!("2026-01-01T00:00:00.04{n}Z"), "plan_id": "p"
        }))
        .unwrap();
        e.attempt = n;
        e
    };
    use plan_types::EventSink;
    events.emit(&event(1));
    events.emit(&event(2));
    journal
        .commit(
            &Batch {
                records: vec![],
                variables: vec![],
                checkpoints: Vec::new(),
            },
            1,
        )
        .unwrap();
    let store = journal.into_store();
    let stored = store.events_after("r", 0).unwrap();
    assert_eq!(
        stored.iter().map(|(seq, _)| *seq).collect::<Vec<_>>(),
        [1, 2]
    );
    // An event reads back as it was emitted, field for field.
    assert_eq!(stored[1].1, event(2));
    assert_eq!(
        store.last_event_at("r").unwrap().as_deref(),
        Some("2026-01-01T00:00:00.042Z")
    );
    let mut journal = RunJournal::new(store, "r", events.clone()).unwrap();
    events.emit(&event(3));
    journal.finish(RunEnd::Stopped, SystemTime::now()).unwrap();
    let store = journal.into_store();
    assert_eq!(store.events_after("r", 2).unwrap().len(), 1);
    assert_eq!(store.run("r").unwrap().state, RunState::Stopped);
}

#[test]
fn runs_are_found_by_prefix_listed_newest_first_and_collected() {
    let mut store = Store::in_memory().unwrap();
    let (inputs, options) = (Map::new(), json!({}));
    store
        .begin_run(&new_run(
            "01AAA",
            &inputs,
            &options,
            "2026-01-01T00:00:00.000Z",
        ))
        .unwrap();
    store
        .begin_run(&new_run(
            "01AAB",
            &inputs,
            &options,
            "2026-01-02T00:00:00.000Z",
        ))
        .unwrap();
    store
        .begin_run(&new_run(
            "01BBB",
            &inputs,
            &options,
            "2026-01-03T00:00:00.000Z",
        ))
        .unwrap();
    assert_eq!(store.run("01B").unwrap().run_id, "01BBB");
    assert!(matches!(
        store.run("01AA").unwrap_err(),
        StoreError::Ambiguous { .. }
    ));
    assert!(matches!(
        store.run("zzz").unwrap_err(),
        StoreError::NotFound { .. }
    ));
    // Ids match by literal prefix: no wildcards, and an empty id matches nothing.
    for id in ["", "%", "_", "01_", "0%"] {
        assert!(
            matches!(store.run(id).unwrap_err(), StoreError::NotFound { .. }),
            "{id:?}"
        );
    }
    let order: Vec<String> = store
        .runs()
        .unwrap()
        .into_iter()
        .map(|r| r.run_id)
        .collect();
    assert_eq!(order, ["01BBB", "01AAB", "01AAA"]);
    // `last` names the newest run.
    assert_eq!(store.run(plan_store::LAST_RUN).unwrap().run_id, "01BBB");

    // A run ends when it is told it did, to the millisecond the ledger keeps.
    let ended = SystemTime::UNIX_EPOCH + Duration::from_micros(1_767_225_600_123_456);
    store
        .end_run(
            "01AAA",
            RunState::Finished,
            Some(TaskStatus::Completed),
            ended,
        )
        .unwrap();
    assert_eq!(
        store.run("01AAA").unwrap().finished_at.as_deref(),
        Some("2026-01-01T00:00:00.123Z")
    );
    store
        .end_run("01BBB", RunState::Stopped, None, SystemTime::now())
        .unwrap();
    // A cutoff in the future deletes both ended runs, never a running one.
    let future = plan_store::timestamp(SystemTime::now() + Duration::from_secs(60));
    assert_eq!(store.gc("2000-01-01T00:00:00.000Z", true).unwrap(), 0);
    // A stopped run could still be resumed: kept unless asked for.
    assert_eq!(store.gc(&future, false).unwrap(), 1);
    assert_eq!(store.gc(&future, true).unwrap(), 1);
    let left: Vec<String> = store
        .runs()
        .unwrap()
        .into_iter()
        .map(|r| r.run_id)
        .collect();
    assert_eq!(left, ["01AAB"]);
}

#[test]
fn forgotten_records_are_gone() {
    let mut store = Store::in_memory().unwrap();
    let (inputs, options) = (Map::new(), json!({}));
    store
        .begin_run(&new_run("r", &inputs, &options, "2026-01-01T00:00:00.000Z"))
        .unwrap();
    let mut journal = RunJournal::new(store, "r", Arc::default()).unwrap();
    let (a, b) = (record("a", true), record("b", false));
    journal
        .commit(
            &Batch {
                records: vec![
                    (
                        Position {
                            step: 0,
                            item: None,
                        },
                        a.clone(),
                    ),
                    (
                        Position {
                            step: 1,
                            item: None,
                        },
                        b.clone(),
                    ),
                ],
                variables: vec![],
                checkpoints: Vec::new(),
            },
            1,
        )
        .unwrap();
    let mut store = journal.into_store();
    store.forget_records("r", &["b".to_owned()]).unwrap();
    assert_eq!(store.records("r").unwrap(), [a]);
}

#[test]
fn plans_are_stored_listed_and_removed() {
    let mut store = Store::in_memory().unwrap();
    let plan = StoredPlan {
        plan_id: "deploy".into(),
        title: Some("Deploy".into()),
        name: "deploy.yaml".into(),
        format: "yaml".into(),
        source: "steps: []\n".into(),
        hash: plan_store::plan_hash("steps: []\n"),
        added_at: "2026-01-01T00:00:00.000Z".into(),
        author: "model".into(),
    };
    store.add_plan(&plan, false).unwrap();
    assert!(matches!(
        store.add_plan(&plan, false).unwrap_err(),
        StoreError::PlanExists(_)
    ));
    store.add_plan(&plan, true).unwrap();
    assert_eq!(store.plans().unwrap(), std::slice::from_ref(&plan));
    assert_eq!(store.find_plan("deploy").unwrap(), Some(plan));
    store.remove_plan("deploy").unwrap();
    assert!(matches!(
        store.remove_plan("deploy").unwrap_err(),
        StoreError::NotFound { .. }
    ));
}

/// A plan stored apart never replaces another author's: it takes the first free `ID-N`, with
/// its text renamed, in the write's own transaction.
#[test]
fn a_plan_stored_apart_never_replaces_another_authors() {
    let mut store = Store::in_memory().unwrap();
    let plan = |author: &str, source: &str| StoredPlan {
        plan_id: "deploy".into(),
        title: None,
        name: "deploy.json".into(),
        format: "json".into(),
        source: source.into(),
        hash: plan_store::plan_hash(source),
        added_at: "2026-01-01T00:00:00.000Z".into(),
        author: author.into(),
    };
    let renamed = |id: &str| format!("{{\"id\": \"{id}\"}}");
    store.add_plan(&plan("operator", "op"), false).unwrap();
    store
        .add_plan(
            &StoredPlan {
                plan_id: "deploy-2".into(),
                ..plan("mcp_client", "client")
            },
            false,
        )
        .unwrap();
    // The operator's `deploy` and a client's `deploy-2` are passed over; so, then, is the
    // model's own `deploy-3`, which only `replace` writes over.
    let id = store
        .add_plan_apart(plan("model", "model"), false, renamed)
        .unwrap();
    assert_eq!(id, "deploy-3");
    let stored = store.find_plan("deploy-3").unwrap().unwrap();
    assert_eq!(stored.source, "{\"id\": \"deploy-3\"}");
    assert_eq!(stored.hash, plan_store::plan_hash(&stored.source));
    assert!(matches!(
        store.add_plan_apart(plan("model", "again"), false, renamed),
        Err(StoreError::PlanExists(id)) if id == "deploy-3"
    ));
    store
        .add_plan_apart(plan("model", "again"), true, renamed)
        .unwrap();
    assert_eq!(store.find_plan("deploy").unwrap().unwrap().source, "op");
    assert_eq!(store.plans().unwrap().len(), 3);
    // Its own id, when free, keeps its text as it is.
    let id = store
        .add_plan_apart(
            StoredPlan {
                plan_id: "other".into(),
                ..plan("model", "mine")
            },
            false,
            renamed,
        )
        .unwrap();
    assert_eq!(id, "other");
    assert_eq!(store.find_plan("other").unwrap().unwrap().source, "mine");
}

/// Another writer's plan cannot slip in between the choice of a free id and the write: the
/// operator's write of the id the model is being stored under waits for the model's
/// transaction, then finds the id taken.
#[test]
fn no_write_comes_between_the_choice_of_an_id_and_its_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let plan = |id: &str, author: &str| StoredPlan {
        plan_id: id.into(),
        title: None,
        name: "deploy.json".into(),
        format: "json".into(),
        source: author.into(),
        hash: plan_store::plan_hash(author),
        added_at: "2026-01-01T00:00:00.000Z".into(),
        author: author.into(),
    };
    let mut store = Store::open(&path).unwrap();
    store.add_plan(&plan("deploy", "operator"), false).unwrap();
    let (started, started_here) = std::sync::mpsc::channel();
    let mut operator = None;
    let id = store
        .add_plan_apart(plan("deploy", "model"), true, |id| {
            // The free id is chosen: now the operator stores a plan under it.
            let path = path.clone();
            let started = started.clone();
            let writer = std::thread::spawn(move || {
                let mut other = Store::open(&path).unwrap();
                started.send(()).unwrap();
                other.add_plan(&plan("deploy-2", "operator"), false)
            });
            started_here.recv().unwrap();
            std::thread::sleep(std::time::Duration::from_millis(300));
            assert!(!writer.is_finished(), "the write waits for the transaction");
            operator = Some(writer);
            id.to_owned()
        })
        .unwrap();
    assert_eq!(id, "deploy-2");
    let operator = operator.unwrap().join().unwrap();
    assert!(
        matches!(operator, Err(StoreError::PlanExists(ref id)) if id == "deploy-2"),
        "{operator:?}"
    );
    let stored = store.find_plan("deploy-2").unwrap().unwrap();
    assert_eq!(stored.author, "model");
}

#[test]
fn several_writers_share_one_file_without_lock_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    drop(Store::open(&path).unwrap());
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let path = path.clone();
            std::thread::spawn(move || {
                let mut store = Store::open(&path).unwrap();
                let (inputs, options) = (Map::new(), json!({}));
                let run_id = format!("run-{w}");
                store
                    .begin_run(&new_run(
                        &run_id,
                        &inputs,
                        &options,
                        "2026-01-01T00:00:00.000Z",
                    ))
                    .unwrap();
                let mut journal = RunJournal::new(store, &run_id, Arc::default()).unwrap();
                for i in 0..200 {
                    let r = record(&format!("s{i}"), true);
                    journal
                        .commit(
                            &Batch {
                                records: vec![(
                                    Position {
                                        step: i,
                                        item: None,
                                    },
                                    r.clone(),
                                )],
                                variables: vec![],
                                checkpoints: Vec::new(),
                            },
                            i as u64 + 1,
                        )
                        .unwrap();
                }
            })
        })
        .collect();
    for writer in writers {
        writer.join().unwrap();
    }
    let store = Store::open(&path).unwrap();
    for w in 0..4 {
        assert_eq!(store.records(&format!("run-{w}")).unwrap().len(), 200);
    }
}

/// `state.db` in `dir`, as the plan-cli of schema 3 left it (`tests/data/ledger-v3.sql`), with
/// a connection to it.
fn schema_3_ledger(dir: &tempfile::TempDir) -> (std::path::PathBuf, rusqlite::Connection) {
    let path = dir.path().join("state.db");
    let conn = rusqlite::Connection::open(&path).expect("a new SQLite file");
    conn.execute_batch(include_str!("data/ledger-v3.sql"))
        .expect("the schema-3 ledger's SQL runs");
    (path, conn)
}

/// A ledger written by plan-cli before the compact layout (schema 3, by the release of that
/// time: `tests/data/ledger-v3.sql`) is migrated in place, and reads back as that plan-cli
/// read it: the same records, the same events (`plan-cli events`), the same attempts.
#[test]
fn a_ledger_of_the_previous_layout_migrates_and_reads_back_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let (path, conn) = schema_3_ledger(&dir);
    drop(conn);
    let store = Store::open(&path).unwrap();
    let run = store.runs().unwrap().remove(0);

    let records: Vec<Value> = store
        .records(&run.run_id)
        .unwrap()
        .iter()
        .map(|r| serde_json::to_value(r).unwrap())
        .collect();
    let want: Vec<Value> =
        serde_json::from_str(include_str!("data/ledger-v3-records.json")).unwrap();
    assert_eq!(records, want);

    let events: Vec<String> = store
        .events_after(&run.run_id, 0)
        .unwrap()
        .iter()
        .map(|(_, e)| serde_json::to_string(e).unwrap())
        .collect();
    let want: Vec<&str> = include_str!("data/ledger-v3-events.ndjson")
        .lines()
        .collect();
    assert_eq!(events, want);

    let attempts: Vec<Value> = store
        .attempts(&run.run_id)
        .unwrap()
        .iter()
        .map(|a| {
            json!({"step_id": a.step_id, "attempt": a.attempt, "started_at": a.started_at,
                "duration_ms": a.duration_ms, "ok": u8::from(a.ok),
                "error_code": a.error_code, "error_message": a.error_message})
        })
        .collect();
    let mut want: Vec<Value> =
        serde_json::from_str(include_str!("data/ledger-v3-attempts.json")).unwrap();
    // The old table listed attempts as they ended; they now come as they started.
    let by_start = |a: &Value| {
        (
            a["started_at"].to_string(),
            a["step_id"].to_string(),
            a["attempt"].as_u64(),
        )
    };
    let mut got = attempts.clone();
    got.sort_by_key(by_start);
    want.sort_by_key(by_start);
    assert_eq!(got, want);
}

/// An upgrade is one transaction: when a later migration fails, the earlier ones are not
/// kept either, and the ledger stays as the older plan-cli wrote it.
#[test]
fn an_upgrade_that_fails_leaves_the_ledger_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let (path, conn) = schema_3_ledger(&dir);
    // Migration 5 creates this table: with it already there, 4 succeeds and 5 fails.
    conn.execute_batch("CREATE TABLE plan_revisions (x)")
        .unwrap();
    drop(conn);
    let refused = Store::open(&path);
    assert!(refused.is_err(), "{refused:?}");
    let conn = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .unwrap();
    assert_eq!(version, 3);
    let table = |name: &str| -> i64 {
        conn.query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1",
            [name],
            |row| row.get(0),
        )
        .unwrap()
    };
    assert_eq!(table("records"), 1, "migration 4 was rolled back");
    assert_eq!(table("step_records"), 0, "migration 4 was rolled back");
}

/// Processes that open a new ledger at the same moment all get it, each migration made once.
#[test]
fn many_first_users_of_a_new_ledger_all_open_it() {
    for round in 0..10 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(format!("state-{round}.db"));
        let barrier = Arc::new(std::sync::Barrier::new(8));
        let openers: Vec<_> = (0..8)
            .map(|_| {
                let (path, barrier) = (path.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    Store::open(&path).map(|_| ()).map_err(|e| e.to_string())
                })
            })
            .collect();
        for opener in openers {
            assert_eq!(opener.join().unwrap(), Ok(()), "round {round}");
        }
    }
}

#[test]
fn deciding_several_approvals_is_all_or_nothing() {
    use plan_store::Decision;
    use plan_types::PendingApproval;
    let mut store = Store::in_memory().unwrap();
    let (inputs, options) = (Map::new(), json!({}));
    store
        .begin_run(&new_run("r", &inputs, &options, "2026-01-01T00:00:00.000Z"))
        .unwrap();
    let pending = |id: &str| PendingApproval {
        step_id: id.to_owned(),
        tool: Some("echo".to_owned()),
        args: None,
        reason: None,
        input_schema: None,
    };
    store
        .halt_for_approvals(
            "r",
            &[pending("a"), pending("b"), pending("c")],
            &[],
            SystemTime::now(),
        )
        .unwrap();
    store
        .decide("r", "b", Decision::Rejected, Some("no"))
        .unwrap();
    let ids = ["a", "b", "c"].map(str::to_owned);
    let refused = store.decide_all("r", &ids, Decision::Approved, None);
    assert!(
        matches!(refused, Err(StoreError::Decided { .. })),
        "{refused:?}"
    );
    let decisions: Vec<(String, Decision)> = store
        .approvals("r")
        .unwrap()
        .into_iter()
        .map(|row| (row.step_id, row.decision))
        .collect();
    // `a` was approved before `b` was found rejected: rolled back with the rest.
    assert!(
        decisions.contains(&("a".to_owned(), Decision::Pending)),
        "{decisions:?}"
    );
    assert!(
        decisions.contains(&("c".to_owned(), Decision::Pending)),
        "{decisions:?}"
    );
    store
        .decide_all(
            "r",
            &["a".to_owned(), "c".to_owned()],
            Decision::Approved,
            None,
        )
        .unwrap();
}

/// A ledger file in `dir` with run `r` begun: its path, the run's journal (storing what is
/// emitted to `events`) and the journal's log.
fn journal_with_log(
    dir: &tempfile::TempDir,
    events: Arc<EventBuffer>,
) -> (
    std::path::PathBuf,
    RunJournal,
    Box<dyn plan_types::BatchLog>,
) {
    let path = dir.path().join("state.db");
    let mut store = Store::open(&path).expect("the ledger opens");
    let (inputs, options) = (Map::new(), json!({}));
    store
        .begin_run(&new_run("r", &inputs, &options, "2026-01-01T00:00:00.000Z"))
        .expect("the run begins");
    let mut journal = RunJournal::new(store, "r", events).expect("a journal");
    let log = journal.log().expect("a ledger file has a log");
    (path, journal, log)
}

/// A batch of step records (at positions 0, 1, …) and variables.
fn batch_of(records: &[&Record], variables: &[(&str, Value)]) -> Batch {
    Batch {
        records: records
            .iter()
            .enumerate()
            .map(|(step, record)| (Position { step, item: None }, (*record).clone()))
            .collect(),
        variables: variables
            .iter()
            .map(|(name, value)| ((*name).to_owned(), Arc::new(value.clone())))
            .collect(),
        checkpoints: Vec::new(),
    }
}

/// The run's log files left beside the ledger.
fn logs_beside(dir: &tempfile::TempDir) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .expect("the folder reads")
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".log"))
        .collect();
    names.sort();
    names
}

fn step_event(kind: &str, step_id: &str) -> plan_types::Event {
    serde_json::from_value(json!({"type": kind, "run_id": "r", "step_id": step_id,
        "attempt": 1, "ts": "2026-01-01T00:00:01.250Z", "tool": "echo"}))
    .expect("an event")
}

#[test]
fn what_a_killed_run_logged_and_did_not_commit_is_folded_in_by_recover() {
    use plan_types::EventSink;
    let dir = tempfile::tempdir().unwrap();
    let events = Arc::new(EventBuffer::default());
    let (path, mut journal, mut log) = journal_with_log(&dir, events.clone());
    let (a, b) = (record("a", true), record("b", true));

    events.emit(&step_event("tool.succeeded", "a"));
    let first = batch_of(&[&a], &[("x", json!(1))]);
    log.append(1, &first).unwrap();
    journal.commit(&first, 1).unwrap();
    events.emit(&step_event("tool.succeeded", "b"));
    log.append(2, &batch_of(&[&a, &b], &[("x", json!(2))]))
        .unwrap();
    // The process dies here: batch 2 is in the log only.
    drop(log);
    let store = journal.into_store();
    assert_eq!(store.records("r").unwrap(), std::slice::from_ref(&a));
    assert_eq!(logs_beside(&dir).len(), 1);
    drop(store);

    let mut store = Store::open(&path).unwrap();
    store.recover("r").unwrap();
    assert_eq!(store.records("r").unwrap(), [a, b]);
    assert_eq!(store.variables("r").unwrap()["x"].as_ref(), &json!(2));
    let kinds: Vec<(i64, Option<String>)> = store
        .events_after("r", 0)
        .unwrap()
        .into_iter()
        .map(|(seq, event)| (seq, event.step_id.map(|id| id.to_string())))
        .collect();
    assert_eq!(
        kinds,
        [(1, Some("a".to_owned())), (2, Some("b".to_owned()))],
        "each event once, in order"
    );
    assert!(logs_beside(&dir).is_empty(), "{:?}", logs_beside(&dir));
    // Nothing is left to fold the second time.
    store.recover("r").unwrap();
    assert_eq!(store.records("r").unwrap().len(), 2);
}

/// Batch 1 is logged, then committed together with batch 2 (which rebinds `x`), then batch 3
/// is logged and the process dies: the replay must not bring back batch 1's `x`.
#[test]
fn a_resumed_journal_replays_only_what_was_not_committed() {
    let dir = tempfile::tempdir().unwrap();
    let (_, mut journal, mut log) = journal_with_log(&dir, Arc::default());
    let (a, b, c) = (record("a", true), record("b", true), record("c", true));
    let first = batch_of(&[&a], &[("x", json!("old"))]);
    log.append(1, &first).unwrap();
    let mut group = first;
    group.append(batch_of(&[], &[("x", json!("new"))]));
    journal.commit(&group, 2).unwrap();
    log.append(3, &batch_of(&[&a, &b, &c], &[])).unwrap();
    drop(log);
    let mut store = journal.into_store();
    // The log's last line was cut short when the process died inside its write.
    let logs = logs_beside(&dir);
    assert_eq!(logs.len(), 1);
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.path().join(&logs[0]))
        .unwrap();
    std::io::Write::write_all(&mut file, br#"{"n":4,"records":[["d",3,nu"#).unwrap();
    drop(file);
    // Its process (42) died: this one takes the run over.
    assert!(store.resume_run("r", 43, Some(42)).unwrap());

    let mut journal = RunJournal::new(store, "r", Arc::default()).unwrap();
    journal
        .finish(RunEnd::Finished(TaskStatus::Completed), SystemTime::now())
        .unwrap();
    let store = journal.into_store();
    assert_eq!(store.records("r").unwrap(), [a, b, c]);
    assert_eq!(store.variables("r").unwrap()["x"].as_ref(), &json!("new"));
    assert!(logs_beside(&dir).is_empty(), "{:?}", logs_beside(&dir));
}

#[test]
fn a_run_that_ends_leaves_no_log_and_an_in_memory_ledger_has_none() {
    let dir = tempfile::tempdir().unwrap();
    let (_, mut journal, mut log) = journal_with_log(&dir, Arc::default());
    let a = record("a", true);
    let batch = batch_of(&[&a], &[]);
    log.append(1, &batch).unwrap();
    assert_eq!(logs_beside(&dir).len(), 1);
    journal.commit(&batch, 1).unwrap();
    journal
        .finish(RunEnd::Finished(TaskStatus::Completed), SystemTime::now())
        .unwrap();
    assert!(logs_beside(&dir).is_empty());
    assert_eq!(journal.into_store().records("r").unwrap(), [a]);

    let mut memory = Store::in_memory().unwrap();
    let (inputs, options) = (Map::new(), json!({}));
    memory
        .begin_run(&new_run("r", &inputs, &options, "2026-01-01T00:00:00.000Z"))
        .unwrap();
    let mut journal = RunJournal::new(memory, "r", Arc::default()).unwrap();
    assert!(journal.log().is_none());
}

#[test]
fn a_log_folded_whole_is_emptied_once_it_is_large_and_still_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let (_, mut journal, mut log) = journal_with_log(&dir, Arc::default());
    let big = |id: &str| {
        let mut record = record(id, true);
        record.result = Some(Arc::new(json!({"text": "x".repeat(700_000)})));
        record
    };
    let (a, b, c, d) = (big("a"), big("b"), record("c", true), record("d", true));
    let at = |step: usize, record: &Record| {
        let mut batch = batch_of(&[record], &[]);
        batch.records[0].0.step = step;
        batch
    };
    log.append(1, &at(0, &a)).unwrap();
    log.append(2, &at(1, &b)).unwrap();
    let file = dir.path().join(&logs_beside(&dir)[0]);
    let size = || std::fs::metadata(&file).unwrap().len();
    assert!(size() > 1_400_000, "{}", size());
    // Not folded yet: the next line goes after the others.
    log.append(3, &at(2, &c)).unwrap();
    assert!(size() > 1_400_000, "{}", size());
    let mut group = at(0, &a);
    group.append(at(1, &b));
    group.append(at(2, &c));
    journal.commit(&group, 3).unwrap();
    log.append(4, &at(3, &d)).unwrap();
    assert!(size() < 10_000, "emptied before batch 4: {}", size());
    // The process dies here.
    drop(log);
    let mut store = journal.into_store();
    store.recover("r").unwrap();
    assert_eq!(store.records("r").unwrap(), [a, b, c, d]);
}

#[test]
fn a_log_that_cannot_be_written_says_which_file_and_why() {
    let dir = tempfile::tempdir().unwrap();
    let (_, _journal, mut log) = journal_with_log(&dir, Arc::default());
    // Where the log would go, a folder.
    let path = dir.path().join("state.db-run1-1.log");
    std::fs::create_dir(&path).unwrap();
    let error = log
        .append(1, &batch_of(&[&record("a", true)], &[]))
        .unwrap_err();
    assert_eq!(
        error.0,
        format!(
            "the run's log {}: cannot create it: Is a directory (os error 21)",
            path.display()
        )
    );
}

#[test]
fn gc_removes_the_log_a_killed_and_cancelled_run_left() {
    let dir = tempfile::tempdir().unwrap();
    let (path, journal, mut log) = journal_with_log(&dir, Arc::default());
    log.append(1, &batch_of(&[&record("a", true)], &[]))
        .unwrap();
    // The process dies; `cancel` marks the run stopped.
    drop(log);
    drop(journal);
    let mut store = Store::open(&path).unwrap();
    store
        .end_run("r", RunState::Stopped, None, SystemTime::now())
        .unwrap();
    assert_eq!(logs_beside(&dir).len(), 1);
    assert_eq!(store.gc("9999-01-01T00:00:00.000Z", true).unwrap(), 1);
    assert!(logs_beside(&dir).is_empty(), "{:?}", logs_beside(&dir));
}

#[test]
fn one_option_is_set_and_the_others_kept() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&dir.path().join("state.db")).unwrap();
    let inputs = Map::new();
    let options = json!({"mode": "auto", "working_dir": "/w"});
    store
        .begin_run(&new_run("r1", &inputs, &options, "2026-01-01T00:00:00Z"))
        .unwrap();
    store
        .set_option("r1", "$.sources.state_file", &json!("/s.json"))
        .unwrap();
    let row = store.run("r1").unwrap();
    assert_eq!(
        row.options,
        json!({"mode": "auto", "working_dir": "/w", "sources": {"state_file": "/s.json"}})
    );
    assert!(matches!(
        store.set_option("nope", "$.a", &json!(1)),
        Err(StoreError::NotFound { .. })
    ));
}

#[test]
fn a_models_response_format_is_kept_per_endpoint_and_model() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&dir.path().join("state.db")).unwrap();
    assert_eq!(store.model_format("http://a/v1", "m").unwrap(), None);
    store
        .set_model_format("http://a/v1", "m", "json_object")
        .unwrap();
    store.set_model_format("http://a/v1", "n", "none").unwrap();
    store
        .set_model_format("http://a/v1", "m", "json_schema")
        .unwrap();
    assert_eq!(
        store.model_format("http://a/v1", "m").unwrap().as_deref(),
        Some("json_schema")
    );
    assert_eq!(
        store.model_format("http://a/v1", "n").unwrap().as_deref(),
        Some("none")
    );
    assert_eq!(store.model_format("http://b/v1", "m").unwrap(), None);
}

/// Two processes that go on with a stopped run at once (each read it stopped, or running with
/// a dead owner): the claim is one statement, so one gets it and the other is refused.
#[test]
fn a_run_is_claimed_by_one_process_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let mut first = Store::open(&path).unwrap();
    let mut second = Store::open(&path).unwrap();
    let (inputs, options) = (Map::new(), json!({}));
    first
        .begin_run(&new_run("r", &inputs, &options, "2026-01-01T00:00:00.000Z"))
        .unwrap();
    let at = std::time::SystemTime::now();
    first.end_run("r", RunState::Stopped, None, at).unwrap();
    // Both read it stopped; the first claims it, the second is refused.
    assert!(first.resume_run("r", 100, None).unwrap());
    assert!(!second.resume_run("r", 200, None).unwrap());
    assert_eq!(second.run("r").unwrap().owner_pid, Some(100));
    // Its process died (it is running, owner 100): a process that saw that owner takes it
    // over, once; one that read it before the takeover is refused.
    assert!(second.resume_run("r", 200, Some(100)).unwrap());
    assert!(!first.resume_run("r", 300, Some(100)).unwrap());
    // The owner itself may claim it again.
    assert!(second.resume_run("r", 200, Some(100)).unwrap());
}
