//! `kill -9` at random points of a real `plan-cli` process, then `resume`, again and again:
//! every step must run to completion and the final records must equal those of a run that was
//! never interrupted. Under `--durability sync` a step runs at most once more per kill (the
//! one in flight); under `async` a kill may also repeat steps whose records had not reached
//! the ledger yet, but loses none.
#![expect(clippy::unwrap_used, reason = "test helpers fail loudly on purpose")]

mod common;

use common::outcomes;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

const STEPS: usize = 30;
const KILL_POINTS_SYNC: usize = 50;
const KILL_POINTS_ASYNC: usize = 25;

/// A chain of 30 steps; each appends its id to the log (its side effect, counted below), takes
/// 30 ms, and prints its id. Some bind their output; the last reads a bound variable, so
/// restored variables are checked too.
fn plan(log: &Path) -> Value {
    let steps: Vec<Value> = (0..STEPS)
        .map(|i| {
            let id = format!("s{i:02}");
            let mut step = json!({
                "id": id,
                "tool": "exec",
                "args": {"argv": ["sh", "-c", "echo \"$1\" >> \"$2\"; sleep 0.03; printf %s \"$1\"", "sh", id, log]},
            });
            if i > 0 {
                step["depends_on"] = json!([format!("s{:02}", i - 1)]);
            }
            if i % 10 == 0 {
                step["binds"] = json!({format!("out{i}"): "$.stdout"});
            }
            if i == STEPS - 1 {
                step["args"]["argv"][3] = json!("last-${out10}");
            }
            step
        })
        .collect();
    json!({"id": "crash", "max_concurrency": 1, "steps": steps})
}

struct Lab {
    dir: tempfile::TempDir,
}

impl Lab {
    fn db(&self) -> PathBuf {
        self.dir.path().join("state.db")
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_plan-cli"));
        command
            .args(args)
            .env("PLAN_DB", self.db())
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        command
    }

    fn json(&self, args: &[&str]) -> Value {
        let output = self.command(args).stdout(Stdio::piped()).output().unwrap();
        serde_json::from_slice(&output.stdout).unwrap_or(Value::Null)
    }

    fn newest_run(&self) -> Option<String> {
        let runs = self.json(&["runs", "--json"]);
        runs.get(0)
            .and_then(|r| r["run_id"].as_str())
            .map(str::to_owned)
    }
}

/// Kills the child after `delay` if it is still running; says whether the kill landed.
fn kill_after(mut child: Child, delay: Duration) -> bool {
    std::thread::sleep(delay);
    match child.try_wait().unwrap() {
        Some(_) => false,
        None => {
            child.kill().unwrap(); // SIGKILL
            child.wait().unwrap();
            true
        }
    }
}

fn executions(log: &Path) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for line in std::fs::read_to_string(log).unwrap_or_default().lines() {
        *counts.entry(line.to_owned()).or_default() += 1;
    }
    counts
}

#[test]
fn kill_9_then_resume_loses_nothing_and_repeats_at_most_the_step_in_flight() {
    let repeated = kill_and_resume("sync", KILL_POINTS_SYNC);
    assert!(
        repeated.iter().all(|&(extra, kills)| extra <= kills),
        "under sync, a kill repeats at most the step in flight: {repeated:?}"
    );
}

#[test]
fn kill_9_then_resume_under_async_durability_loses_nothing() {
    let repeated = kill_and_resume("async", KILL_POINTS_ASYNC);
    let (extra, kills) = repeated
        .iter()
        .fold((0, 0), |(e, k), &(extra, kills)| (e + extra, k + kills));
    eprintln!("async: {extra} steps repeated over {kills} kills");
}

/// Kills runs and their resumes at `kill_points` random points at least, checking each run's
/// final records; returns (steps repeated, kills) per run.
fn kill_and_resume(durability: &str, kill_points: usize) -> Vec<(usize, usize)> {
    let mut repeated = Vec::new();
    let lab = Lab {
        dir: tempfile::tempdir().unwrap(),
    };

    // The reference: one uninterrupted run.
    let reference_log = lab.dir.path().join("reference.log");
    let reference_plan = lab.dir.path().join("reference.json");
    std::fs::write(&reference_plan, plan(&reference_log).to_string()).unwrap();
    let reference = lab.json(&[
        "run",
        reference_plan.to_str().unwrap(),
        "--json",
        "--durability",
        durability,
    ]);
    assert_eq!(reference["task_status"], "COMPLETED");
    let reference_records = outcomes(&reference);

    // A seeded generator, so a failure can be replayed.
    let mut seed: u64 = 0x5eed_1234;
    // The range widens with each kill of the same run, so that however slow this machine
    // starts a process, every run gets to finish, while the early kills land anywhere, start-up
    // included.
    let mut next_delay = |kills_so_far: usize| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let spread = 45 + 15 * kills_so_far as u64;
        Duration::from_millis(5 + (seed >> 33) % spread)
    };

    let mut kills = 0;
    let mut attempt = 0;
    while kills < kill_points {
        attempt += 1;
        let log = lab.dir.path().join(format!("run{attempt}.log"));
        let plan_file = lab.dir.path().join(format!("run{attempt}.json"));
        let mut plan_doc = plan(&log);
        plan_doc["id"] = json!(format!("crash-{attempt}"));
        std::fs::write(&plan_file, plan_doc.to_string()).unwrap();
        let before = lab.newest_run();

        // Start it and kill it; until it has an id in the ledger, start it again.
        let mut run_kills = 0;
        let mut run_id = None;
        while run_id.is_none() {
            let child = lab
                .command(&[
                    "run",
                    plan_file.to_str().unwrap(),
                    "--durability",
                    durability,
                ])
                .spawn()
                .unwrap();
            let landed = kill_after(child, next_delay(run_kills));
            run_kills += usize::from(landed);
            run_id = lab.newest_run().filter(|id| Some(id) != before.as_ref());
            if !landed && run_id.is_none() {
                panic!("the run finished without being recorded");
            }
        }
        let run_id = run_id.unwrap();
        // Resume and kill until a resume finishes on its own.
        loop {
            let child = lab
                .command(&["resume", &run_id, "--durability", durability])
                .spawn()
                .unwrap();
            if kill_after(child, next_delay(run_kills)) {
                run_kills += 1;
            } else {
                break;
            }
        }
        let report = lab.json(&["status", &run_id, "--json"]);
        assert_eq!(
            report["task_status"], "COMPLETED",
            "run {run_id} after {run_kills} kills"
        );
        let mut got = outcomes(&report);
        let mut want = reference_records.clone();
        // The meta record's duration differs; its ok and reason must not.
        assert_eq!(
            got.pop().map(|r| (r.0, r.1)),
            want.pop().map(|r| (r.0, r.1))
        );
        assert_eq!(
            got, want,
            "records of run {run_id} differ from the uninterrupted run's"
        );
        assert_eq!(report["variables"]["out10"], json!("s10"));

        let counts = executions(&log);
        let mut extra = 0;
        for i in 0..STEPS {
            let id = format!("s{i:02}");
            let n = counts.get(&id).copied().unwrap_or(0);
            assert!(n >= 1, "{id} never ran in run {run_id}");
            extra += n - 1;
        }
        eprintln!("run {run_id} ({durability}): {run_kills} kill points, {extra} steps repeated");
        repeated.push((extra, run_kills));
        kills += run_kills;
    }
    assert!(kills >= kill_points);
    repeated
}

/// A plan whose `max_tool_calls` runs out partway: a step, a map step's items, a looping
/// block's nodes, then three steps of which the last two are stopped by the guard.
fn guarded_plan() -> Value {
    let slow = json!({"ms": 25});
    json!({
        "id": "guarded",
        "max_concurrency": 1,
        "variables": {"items": [1, 2, 3]},
        "guards": {"max_tool_calls": 12},
        "steps": [
            {"id": "a", "tool": "sleep", "args": slow},
            {"id": "m", "tool": "sleep", "expand_on": "${items}", "args": slow},
            {"id": "review", "args": {"rounds": 2}, "block": {
                "entry_point": "draft",
                "nodes": {
                    "draft": {"tool": "sleep", "args": slow},
                    "check": {"tool": "sleep", "args": slow},
                    "fix": {"tool": "sleep", "args": slow},
                    "done": {"tool": "sleep", "args": slow}
                },
                "transitions": {
                    "draft": "check",
                    "check": [{"condition": "passed", "target": "done"}, {"condition": "default", "target": "fix"}],
                    "fix": "check"
                },
                "conditions": {"passed": "attempt > input.rounds"}
            }},
            {"id": "c", "tool": "sleep", "args": slow},
            {"id": "d", "tool": "sleep", "args": slow},
            {"id": "e", "tool": "sleep", "args": slow}
        ]
    })
}

/// Each record's id, whether it succeeded, and its error code.
fn verdicts(report: &Value) -> Vec<(String, bool, Value)> {
    report["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["step_id"] != "__meta__")
        .map(|r| {
            (
                r["step_id"].as_str().unwrap().to_owned(),
                r["ok"].as_bool().unwrap(),
                r["error"]["code"].clone(),
            )
        })
        .collect()
}

/// `max_tool_calls` counts the same whether a run is killed with -9 and resumed, at any point
/// (in a map step's items, inside a block, between steps), or runs through: the same calls are
/// stopped by the guard.
#[test]
fn guards_count_the_same_across_kill_9_and_resume() {
    let lab = Lab {
        dir: tempfile::tempdir().unwrap(),
    };
    let plan_file = lab.dir.path().join("guarded.json");
    std::fs::write(&plan_file, guarded_plan().to_string()).unwrap();
    let reference = lab.json(&["run", plan_file.to_str().unwrap(), "--json"]);
    assert_eq!(reference["task_status"], "FAILED", "{reference}");
    let want = verdicts(&reference);
    let stopped: Vec<&str> = want
        .iter()
        .filter(|(_, _, code)| code == "E_GUARD")
        .map(|(id, _, _)| id.as_str())
        .collect();
    assert_eq!(
        stopped,
        ["d", "e"],
        "the guard stops the 13th and 14th calls"
    );

    let mut seed: u64 = 0x9a4d_7e11;
    let mut kills = 0;
    let mut runs = 0;
    while kills < 20 {
        runs += 1;
        let before = lab.newest_run();
        let mut run_id = None;
        let mut run_kills = 0;
        let mut delay = || {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            Duration::from_millis(20 + (seed >> 33) % 400)
        };
        while run_id.is_none() {
            let child = lab
                .command(&["run", plan_file.to_str().unwrap()])
                .spawn()
                .unwrap();
            run_kills += usize::from(kill_after(child, delay()));
            run_id = lab.newest_run().filter(|id| Some(id) != before.as_ref());
        }
        let run_id = run_id.unwrap();
        loop {
            let child = lab.command(&["resume", &run_id]).spawn().unwrap();
            if kill_after(child, delay()) {
                run_kills += 1;
            } else {
                break;
            }
        }
        let report = lab.json(&["status", &run_id, "--json"]);
        assert_eq!(
            verdicts(&report),
            want,
            "run {run_id} after {run_kills} kills counted its calls differently"
        );
        kills += run_kills;
        assert!(runs < 200, "kills never landed");
    }
}

/// Starts a chain of 20 `exec` steps and kills it with -9 once 8 have started; returns the
/// run's id. Each step appends its id to `ran.log` when it starts.
fn kill_a_chain_midway(lab: &Lab) -> String {
    let ran = lab.dir.path().join("ran.log");
    let steps: Vec<Value> = (0..20)
        .map(|i| {
            let id = format!("s{i:02}");
            let mut step = json!({"id": id, "tool": "exec", "args": {"argv": ["sh", "-c",
                "echo \"$1\" >> \"$2\"; sleep 0.02", "sh", id, ran]}});
            if i > 0 {
                step["depends_on"] = json!([format!("s{:02}", i - 1)]);
            }
            step
        })
        .collect();
    let plan_file = lab.dir.path().join("chain.json");
    std::fs::write(
        &plan_file,
        json!({"id": "chain", "steps": steps}).to_string(),
    )
    .unwrap();
    let mut child = lab
        .command(&["run", plan_file.to_str().unwrap()])
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::fs::read_to_string(&ran)
        .unwrap_or_default()
        .lines()
        .count()
        < 8
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the run never got to s07"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    // Asked while the run's process lives: `runs` would fold a dead run's log in.
    let run_id = lab.newest_run().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    run_id
}

/// The run logs left beside the ledger.
fn run_logs(lab: &Lab) -> Vec<String> {
    std::fs::read_dir(lab.dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("state.db-run") && name.ends_with(".log"))
        .collect()
}

/// Checks that `report` has a success for every step of `kill_a_chain_midway` that started,
/// but perhaps the last, cut off by the kill.
fn assert_every_started_step_completed(lab: &Lab, report: &Value) {
    let started = std::fs::read_to_string(lab.dir.path().join("ran.log")).unwrap();
    let started: Vec<&str> = started.lines().collect();
    let completed: Vec<&str> = report["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["ok"] == json!(true))
        .map(|r| r["step_id"].as_str().unwrap())
        .collect();
    let (in_flight, done) = started.split_last().unwrap();
    assert!(
        completed.len() == done.len() || completed.len() == started.len(),
        "completed {completed:?}, started {started:?}"
    );
    assert_eq!(&completed[..done.len()], done);
    assert!(completed.len() == done.len() || completed.last() == Some(in_flight));
}

/// After `kill -9`, `status` shows every step that completed: what the run had appended to its
/// log and not yet folded into the ledger is folded in first, and the log is gone after.
#[test]
fn status_after_kill_9_shows_every_completed_step() {
    let lab = Lab {
        dir: tempfile::tempdir().unwrap(),
    };
    let run_id = kill_a_chain_midway(&lab);
    assert_eq!(
        run_logs(&lab).len(),
        1,
        "the killed run's log is left: {:?}",
        run_logs(&lab)
    );
    let report = lab.json(&["status", &run_id, "--json"]);
    assert_eq!(report["task_status"], "INTERRUPTED", "{report}");
    assert_every_started_step_completed(&lab, &report);
    assert!(
        run_logs(&lab).is_empty(),
        "status folded the log in: {:?}",
        run_logs(&lab)
    );
}

/// The same when the killed run was cancelled first (marked stopped, its process gone).
#[test]
fn status_after_kill_9_and_cancel_shows_every_completed_step() {
    let lab = Lab {
        dir: tempfile::tempdir().unwrap(),
    };
    let run_id = kill_a_chain_midway(&lab);
    let cancelled = lab.command(&["cancel", &run_id]).status().unwrap();
    assert!(cancelled.success());
    // `cancel` folded the log first: the end it marked is the run's last event.
    assert!(run_logs(&lab).is_empty(), "{:?}", run_logs(&lab));
    let report = lab.json(&["status", &run_id, "--json"]);
    assert_eq!(report["task_status"], "STOPPED", "{report}");
    assert_every_started_step_completed(&lab, &report);
    assert!(run_logs(&lab).is_empty(), "{:?}", run_logs(&lab));
}

/// After `kill -9`, `runs` says how long the run took as `status` does: until its last event,
/// with what its process left in its log folded in first (not 0 ms, where the run's row was
/// last written); `cancel` later keeps that end.
#[test]
fn runs_after_kill_9_says_the_duration_status_says() {
    let lab = Lab {
        dir: tempfile::tempdir().unwrap(),
    };
    let run_id = kill_a_chain_midway(&lab);
    let runs = lab.json(&["runs", "--json"]);
    assert_eq!(runs[0]["run_id"], json!(run_id), "{runs}");
    assert_eq!(runs[0]["task_status"], "INTERRUPTED", "{runs}");
    assert!(run_logs(&lab).is_empty(), "{:?}", run_logs(&lab));
    let listed = runs[0]["duration_ms"].as_u64().unwrap();
    // Seven steps of 20 ms each had completed before the kill.
    assert!(listed >= 7 * 20, "{runs}");
    let report = lab.json(&["status", &run_id, "--json"]);
    let meta = report["records"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["step_id"] == "__meta__")
        .unwrap();
    assert_eq!(meta["duration_ms"].as_u64(), Some(listed), "{report}");
    // Marking it stopped later does not make it longer.
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(
        lab.command(&["cancel", &run_id])
            .status()
            .unwrap()
            .success()
    );
    let runs = lab.json(&["runs", "--json"]);
    assert_eq!(runs[0]["task_status"], "STOPPED", "{runs}");
    assert_eq!(runs[0]["duration_ms"].as_u64(), Some(listed), "{runs}");
}

/// A run keeps its `--state-file`: after `kill -9`, a plain `resume` (from another folder,
/// the file given relative to the first) brings the file to the run's end rather than leaving
/// it `in_progress`.
#[test]
fn resume_after_kill_9_keeps_the_run_s_state_file_current() {
    let lab = Lab {
        dir: tempfile::tempdir().unwrap(),
    };
    let marker = lab.dir.path().join("started");
    let plan = lab.dir.path().join("p.json");
    std::fs::write(
        &plan,
        json!({"steps": [
            {"id": "a", "tool": "exec", "args": {"argv": ["sh", "-c", "touch \"$1\"; sleep 2", "sh", marker]}},
            {"id": "b", "tool": "echo", "depends_on": ["a"]},
        ]})
        .to_string(),
    )
    .unwrap();
    let state = lab.dir.path().join("state.json");
    let mut child = lab
        .command(&["run", plan.to_str().unwrap(), "--state-file", "state.json"])
        .current_dir(lab.dir.path())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !(marker.exists() && state.exists()) {
        assert!(
            std::time::Instant::now() < deadline,
            "the run never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let document = |path: &Path| -> Value {
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    };
    assert_ne!(document(&state)["status"], "completed");
    let run = lab.newest_run().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let output = lab
        .command(&["resume", &run])
        .current_dir(elsewhere.path())
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(document(&state)["status"], "completed");
    assert!(!elsewhere.path().join("state.json").exists());
}
