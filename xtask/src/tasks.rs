//! `bench tasks`: 50 task steps in 5 layers (max_parallel 3) through the release binary, in a
//! fresh git repository, each implemented by a script that writes one file; where each task's
//! time goes: git (every git process, timed by a wrapper first in PATH), the implementer (its
//! calls' durations from the events), and plan-cli itself (the CPU time of the plan-cli
//! process alone, read from /proc when it has exited and before it is reaped, so no child's
//! time is in it). Run twice: as is, and with `verify_after_merge` (one cheap check of the
//! whole project, `cat *.txt`), which merges each task in a trial checkout, checks it there
//! and fast-forwards the base: the difference per task is what checking the combination adds.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

const TASKS: usize = 50;
const LAYERS: usize = 5;

/// Runs the workload without and with `verify_after_merge`; their figures.
pub(crate) fn bench(binary: &Path, out_dir: &Path) -> Result<Vec<Value>> {
    let plain = run_once(binary, out_dir, None)?;
    let check = json!([{"argv": ["sh", "-c", "cat *.txt > /dev/null"]}]);
    let mut checked = run_once(binary, out_dir, Some(check))?;
    for key in [
        "wall_ms_per_task",
        "git_ms_per_task",
        "plan_cli_cpu_ms_per_task",
    ] {
        let added = checked[key].as_f64().unwrap_or(0.0) - plain[key].as_f64().unwrap_or(0.0);
        checked[format!("added_{key}")] = json!(added);
    }
    Ok(vec![plain, checked])
}

/// Runs the workload once (with `verify_after_merge` checks when given); its figures.
fn run_once(binary: &Path, out_dir: &Path, after_merge: Option<Value>) -> Result<Value> {
    let dir = out_dir.join(if after_merge.is_some() {
        "tasks-verify-after-merge"
    } else {
        "tasks"
    });
    let _ = std::fs::remove_dir_all(&dir);
    let repo = dir.join("repo");
    let bin = dir.join("bin");
    std::fs::create_dir_all(&repo)?;
    std::fs::create_dir_all(&bin)?;
    let real_git = which("git")?;
    let git_log = dir.join("git-times.txt");
    // Times each git process without a fork of its own (bash's clock).
    let wrapper = format!(
        "#!/bin/bash\nstart=$EPOCHREALTIME\n{} \"$@\"\ncode=$?\nend=$EPOCHREALTIME\necho \"$start $end\" >> {}\nexit $code\n",
        real_git.display(),
        git_log.display()
    );
    write_executable(&bin.join("git"), &wrapper)?;
    write_executable(
        &repo.join("writer.sh"),
        "#!/bin/sh\necho \"$1\" > \"$1.txt\"\n",
    )?;
    let setup = |args: &[&str]| -> Result<()> {
        let status = Command::new(&real_git)
            .args(args)
            .current_dir(&repo)
            .env("GIT_AUTHOR_NAME", "bench")
            .env("GIT_AUTHOR_EMAIL", "bench@localhost")
            .env("GIT_COMMITTER_NAME", "bench")
            .env("GIT_COMMITTER_EMAIL", "bench@localhost")
            .status()?;
        if !status.success() {
            bail!("git {args:?} failed");
        }
        Ok(())
    };
    setup(&["init", "-q", "-b", "main"])?;
    setup(&["config", "user.name", "bench"])?;
    setup(&["config", "user.email", "bench@localhost"])?;
    setup(&["add", "-A"])?;
    setup(&["commit", "-qm", "start"])?;

    let per_layer = TASKS / LAYERS;
    let mut steps = Vec::with_capacity(TASKS);
    for layer in 0..LAYERS {
        for k in 0..per_layer {
            let id = format!("L{layer}-{k:03}");
            let depends_on: Vec<String> = if layer == 0 {
                Vec::new()
            } else {
                vec![format!("L{}-{k:03}", layer - 1)]
            };
            steps.push(json!({"id": id, "layer": format!("{layer}-layer"), "depends_on": depends_on,
                "task": {"implement": {"tool": "exec", "args": {"argv": ["${task.worktree}/writer.sh", "${task.id}"]}}}}));
        }
    }
    let plan = repo.join("plan.json");
    let mut workspace = json!({"repo": ".", "max_parallel": 3});
    let checked = after_merge.is_some();
    if let Some(checks) = after_merge {
        workspace["verify_after_merge"] = checks;
    }
    std::fs::write(
        &plan,
        serde_json::to_string_pretty(
            &json!({"id": "tasks-bench", "workspace": workspace, "steps": steps}),
        )?,
    )?;
    let events = dir.join("events.ndjson");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let started = Instant::now();
    let child = Command::new(binary)
        .args(["run", "--json", "--events"])
        .arg(&events)
        .arg(&plan)
        .env("PLAN_DB", dir.join("ledger.db"))
        .env("PATH", &path)
        .current_dir(&repo)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let own_cpu_s = own_cpu_after_exit(child.id())?;
    let output = child.wait_with_output()?;
    let wall = started.elapsed();
    let report: Value = serde_json::from_slice(&output.stdout).context("the run's --json")?;
    if report["task_status"] != "COMPLETED" {
        bail!("the task bench did not complete: {report}");
    }

    let git_s: f64 = std::fs::read_to_string(&git_log)?
        .lines()
        .filter_map(|line| {
            let (a, b) = line.split_once(' ')?;
            Some(b.parse::<f64>().ok()? - a.parse::<f64>().ok()?)
        })
        .sum();
    let git_calls = std::fs::read_to_string(&git_log)?.lines().count();
    let mut implementer_ms = 0u64;
    for line in std::fs::read_to_string(&events)?.lines() {
        let event: Value = serde_json::from_str(line)?;
        let step = event["step_id"].as_str().unwrap_or("");
        if event["type"] == "tool.succeeded" && step.contains("/implement#") {
            implementer_ms += event["duration_ms"].as_u64().unwrap_or(0);
        }
    }
    let per_task = |total_ms: f64| total_ms / TASKS as f64;
    Ok(json!({
        "workload": if checked {
            "50 task steps in 5 layers, max_parallel 3, verify_after_merge (cat *.txt) on each combination before the base moves (whole process, real git)"
        } else {
            "50 task steps in 5 layers, max_parallel 3, an implementer writing one file (whole process, real git)"
        },
        "tasks": TASKS,
        "steps": TASKS,
        "median_ms": wall.as_secs_f64() * 1e3,
        "steps_per_sec": TASKS as f64 / wall.as_secs_f64(),
        "wall_ms": wall.as_secs_f64() * 1e3,
        "wall_ms_per_task": per_task(wall.as_secs_f64() * 1e3),
        "git_calls": git_calls,
        "git_ms_per_task": per_task(git_s * 1e3),
        "implementer_ms_per_task": per_task(implementer_ms as f64),
        "plan_cli_cpu_ms_per_task": per_task(own_cpu_s * 1e3),
    }))
}

/// The CPU time (user + system) of process `pid` alone, once it has exited: waits without
/// reaping it (`WNOWAIT`), so /proc still has its final figures, which do not include its
/// children's.
fn own_cpu_after_exit(pid: u32) -> Result<f64> {
    let id = libc::id_t::try_from(pid)?;
    // SAFETY: siginfo is plain data waitid fills in; the pid is our own child, not reaped yet
    // (WNOWAIT leaves it for `wait_with_output`).
    #[expect(
        unsafe_code,
        reason = "waitid with WNOWAIT is the only way to read an exited child's own CPU time"
    )]
    let waited = unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        libc::waitid(libc::P_PID, id, &mut info, libc::WEXITED | libc::WNOWAIT)
    };
    if waited != 0 {
        bail!("waitid failed: {}", std::io::Error::last_os_error());
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which may hold spaces) start at `state`: utime and
    // stime are the 12th and 13th of those.
    let after = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |k: usize| {
        fields
            .get(k)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // SAFETY: sysconf only reads a constant.
    #[expect(
        unsafe_code,
        reason = "the clock tick rate is only known through sysconf"
    )]
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Ok((ticks(11) + ticks(12)) / per_second)
}

fn which(program: &str) -> Result<std::path::PathBuf> {
    for dir in std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()) {
        let candidate = dir.join(program);
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    bail!("`{program}` is not on PATH")
}

fn write_executable(path: &Path, text: &str) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))?;
    Ok(())
}
