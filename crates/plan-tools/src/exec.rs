//! `exec`: run a program with an argv, never through a shell.

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;
use plan_ports::{Tool, ToolContext, ToolError, ToolInfo, codes};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use crate::args::{SOURCE, parse};

/// Runs `argv[0]` with the other items as its arguments. Each item is passed to the program
/// as it is: no shell parses it, so a value from a placeholder can never start a command.
///
/// The program does not inherit plan-cli's environment: it gets [`Exec::BASE_ENV`], the names
/// the operator passes through ([`Exec::passing`]), and the step's own `env`. Programs run in
/// the call's folder (a task's worktree), else the base folder ([`Exec::in_dir`], e.g. the
/// plan file's folder), unless `cwd` says otherwise; a relative `cwd` is resolved against it.
/// A run under an author's policy keeps its programs in its work folder
/// (`ToolContext::confined_to`): without a base they start there, and a folder outside it is
/// refused, links followed.
#[derive(Debug, Clone, Default)]
pub struct Exec {
    passthrough: Vec<String>,
    base: Option<PathBuf>,
}

impl Exec {
    /// What every program gets from plan-cli's environment, when set: enough to find programs
    /// and to run in the user's locale, nothing that is usually a credential.
    pub const BASE_ENV: &[&str] = &[
        "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "TERM",
    ];

    /// Also passes these variables of plan-cli's environment to every program.
    #[must_use]
    pub fn passing(mut self, names: impl IntoIterator<Item = String>) -> Self {
        self.passthrough.extend(names);
        self
    }

    /// Runs programs in `base` unless a step's `cwd` says otherwise; a relative `cwd` is
    /// resolved against it (without a base: against plan-cli's current directory, or the
    /// run's work folder).
    #[must_use]
    pub fn in_dir(mut self, base: PathBuf) -> Self {
        self.base = Some(base);
        self
    }

    /// Where a program runs: `cwd` resolved against the call's folder (a task's worktree),
    /// else the base folder, else the run's work folder `root`; inside `root` when there is
    /// one.
    fn working_directory(
        &self,
        cwd: Option<&str>,
        call_dir: Option<&std::path::Path>,
        root: Option<&std::path::Path>,
    ) -> Result<Option<PathBuf>, ToolError> {
        let from = call_dir
            .map(PathBuf::from)
            .or_else(|| self.base.clone())
            .or_else(|| root.map(PathBuf::from));
        let wanted = match (from, cwd) {
            (None, None) => return Ok(None),
            (Some(from), None) => from,
            (Some(from), Some(cwd)) => from.join(cwd),
            (None, Some(cwd)) => PathBuf::from(cwd),
        };
        let resolved = std::fs::canonicalize(&wanted).map_err(|error| {
            ToolError::new(
                codes::E_ARGS_INVALID,
                format!("`exec` cannot use `cwd` {}: {error}", wanted.display()),
            )
        })?;
        if !resolved.is_dir() {
            return Err(ToolError::new(
                codes::E_ARGS_INVALID,
                format!("`exec`'s `cwd` {} is not a folder", wanted.display()),
            ));
        }
        if let Some(root) = root {
            // A work folder that cannot be read keeps every program out.
            let inside = std::fs::canonicalize(root).is_ok_and(|root| resolved.starts_with(root));
            if !inside {
                return Err(ToolError::new(
                    codes::E_ARGS_INVALID,
                    format!(
                        "`exec`'s `cwd` {} is outside the folder programs may run in ({})",
                        wanted.display(),
                        root.display()
                    ),
                ));
            }
        }
        Ok(Some(resolved))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExecArgs {
    argv: Vec<String>,
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    stdin: Option<String>,
    #[serde(default)]
    timeout_ms: Option<u64>,
    /// Fail the step when the program exits with a non-zero status (the default).
    #[serde(default = "yes")]
    check: bool,
    /// Most bytes of stdout, and of stderr, kept in the result (and so in the ledger); the
    /// rest is read and dropped, and `stdout_truncated`/`stderr_truncated` say so.
    #[serde(default = "default_max_output")]
    max_output_bytes: usize,
}

/// What `max_output_bytes` is unless a step says otherwise: 1 MiB per stream.
const DEFAULT_MAX_OUTPUT: usize = 1 << 20;

fn default_max_output() -> usize {
    DEFAULT_MAX_OUTPUT
}

fn yes() -> bool {
    true
}

#[async_trait]
impl Tool for Exec {
    fn info(&self) -> ToolInfo {
        ToolInfo {
            name: "exec".into(),
            description: "Run a program with arguments (argv, never a shell); fails on a non-zero exit unless check is false".into(),
            source: SOURCE.into(),
            risk: plan_ports::Risk::Medium,
            input_schema: json!({
                "type": "object",
                "properties": {
                    "argv": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                    "cwd": {"type": "string"},
                    "env": {"type": "object", "additionalProperties": {"type": "string"}},
                    "stdin": {"type": "string"},
                    "timeout_ms": {"type": "integer", "minimum": 1},
                    "check": {"type": "boolean", "default": true},
                    "max_output_bytes": {"type": "integer", "minimum": 0, "default": DEFAULT_MAX_OUTPUT}
                },
                "required": ["argv"],
                "additionalProperties": false
            }),
        }
    }

    async fn call(&self, args: Value, ctx: ToolContext) -> Result<Value, ToolError> {
        let args: ExecArgs = parse("exec", args)?;
        let Some((program, rest)) = args.argv.split_first() else {
            return Err(ToolError::invalid_args(
                "`exec` arguments: `argv` needs at least the program",
            ));
        };
        let has_nul = |text: &String| text.contains('\0');
        if args.argv.iter().any(has_nul) || args.env.iter().any(|(k, v)| has_nul(k) || has_nul(v)) {
            return Err(ToolError::invalid_args(
                "`exec` arguments: a program's arguments and environment cannot hold a NUL character",
            ));
        }
        let cwd = self.working_directory(
            args.cwd.as_deref(),
            ctx.working_dir.as_deref(),
            ctx.confined_to.as_deref(),
        )?;
        let wrapper = death_wrapper();
        let mut command = match wrapper {
            // `setpriv --pdeathsig KILL -- PROGRAM ARGS...` sets the signal, then execs the
            // program in place: same pid, group, pipes and folder.
            Some(setpriv) => {
                let mut command = Command::new(setpriv);
                command.args(["--pdeathsig", "KILL", "--", program]);
                command
            }
            None => Command::new(program),
        };
        command.args(rest).env_clear();
        for name in Exec::BASE_ENV
            .iter()
            .copied()
            .chain(self.passthrough.iter().map(String::as_str))
        {
            if let Some(value) = std::env::var_os(name) {
                command.env(name, value);
            }
        }
        command
            .envs(&args.env)
            .stdin(if args.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Dropping the future kills the process (the group is stopped below first).
            .kill_on_drop(true);
        // Its own process group: Ctrl+C on a terminal reaches plan-cli alone, which cancels
        // the run and stops the group (children of the program included) itself, so a step
        // stopped that way is never recorded as failed by a signal.
        #[cfg(unix)]
        command.process_group(0);
        if let Some(cwd) = &cwd {
            command.current_dir(cwd);
        }
        let mut child = command.spawn().map_err(|error| match error.kind() {
            ErrorKind::NotFound => ToolError::new(
                "E_EXEC_SPAWN",
                format!("cannot run `{program}`: program not found"),
            ),
            ErrorKind::PermissionDenied => ToolError::new(
                "E_EXEC_SPAWN",
                format!("cannot run `{program}`: permission denied"),
            ),
            _ => ToolError::retryable(codes::E_IO, format!("cannot run `{program}`: {error}")),
        })?;
        if let (Some(input), Some(mut pipe)) = (args.stdin, child.stdin.take()) {
            // A program that exits without reading its input closes the pipe: not an error.
            tokio::spawn(async move {
                let _ = pipe.write_all(input.as_bytes()).await;
            });
        }
        // The program leads its own process group: the group's id is its pid, which stays
        // valid for the group after the program itself exited.
        let group = child.id();
        let cap = args.max_output_bytes;
        let stdout = tokio::spawn(read_all(child.stdout.take(), cap, lines_of(&ctx, "stdout")));
        let stderr = tokio::spawn(read_all(child.stderr.take(), cap, lines_of(&ctx, "stderr")));
        // Done when the program has exited and its pipes are closed (a background child of it
        // may hold them open longer); until then, cancellation and the timeout stop it.
        let finished = {
            let done = async {
                let status = child.wait().await;
                let (stdout, stderr) = (stdout.await, stderr.await);
                (
                    status,
                    stdout.unwrap_or_default(),
                    stderr.unwrap_or_default(),
                )
            };
            tokio::select! {
                done = done => Some(done),
                () = ctx.cancel.cancelled() => None,
                () = sleep_opt(args.timeout_ms) => None,
            }
        };
        let Some((status, stdout, stderr)) = finished else {
            stop_group(&mut child, group).await;
            return Err(if ctx.cancel.is_cancelled() {
                ToolError::new(
                    codes::E_CANCELLED,
                    format!("`{program}` was stopped: the run was cancelled"),
                )
            } else {
                ToolError::retryable(
                    codes::E_TIMEOUT,
                    format!(
                        "`{program}` ran longer than {} ms and was killed",
                        args.timeout_ms.unwrap_or_default()
                    ),
                )
            });
        };
        let status = status.map_err(|error| {
            ToolError::retryable(codes::E_IO, format!("waiting for `{program}`: {error}"))
        })?;
        let ((stdout, stdout_truncated), (stderr, stderr_truncated)) = (stdout, stderr);
        let stdout = String::from_utf8_lossy(&stdout).into_owned();
        let stderr = String::from_utf8_lossy(&stderr).into_owned();
        let mut result = json!({"exit_code": status.code(), "stdout": stdout, "stderr": stderr});
        if stdout_truncated {
            result["stdout_truncated"] = json!(true);
        }
        if stderr_truncated {
            result["stderr_truncated"] = json!(true);
        }
        #[cfg(unix)]
        if let Some(signal) = std::os::unix::process::ExitStatusExt::signal(&status) {
            result["signal"] = json!(signal);
        }
        // The wrapper could not exec the program: the same errors as a direct spawn.
        if wrapper.is_some()
            && let Some(code @ (126 | 127)) = status.code()
            && stderr.starts_with("setpriv: failed to execute")
        {
            let why = if code == 127 {
                "program not found"
            } else {
                "permission denied"
            };
            return Err(ToolError::new(
                "E_EXEC_SPAWN",
                format!("cannot run `{program}`: {why}"),
            ));
        }
        if args.check && !status.success() {
            let status = match status.code() {
                Some(code) => format!("exited with status {code}"),
                None => "was killed by a signal".to_owned(),
            };
            let last_line = stderr
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("")
                .trim();
            let message = if last_line.is_empty() {
                format!("`{program}` {status}")
            } else {
                format!("`{program}` {status}: {last_line}")
            };
            return Err(ToolError::new("E_EXIT_STATUS", message).with_details(result));
        }
        Ok(result)
    }
}

/// `setpriv`, when this Linux system has one that knows `--pdeathsig`: programs are started
/// through it so that they get SIGKILL when plan-cli dies, even by SIGKILL (a killed run's
/// programs would otherwise run on, and run again on resume). Setting a parent-death signal
/// must happen in the child between fork and exec, which needs unsafe code here; setpriv
/// (util-linux) does it and then execs the program in place. Found once per process.
fn death_wrapper() -> Option<&'static std::path::Path> {
    static WRAPPER: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    WRAPPER
        .get_or_init(|| {
            if !cfg!(target_os = "linux") {
                return None;
            }
            let path = std::env::var_os("PATH")?;
            let setpriv = std::env::split_paths(&path)
                .map(|dir| dir.join("setpriv"))
                .find(|candidate| candidate.is_file())?;
            // An old setpriv without `--pdeathsig` would fail every call: checked once.
            let works = std::process::Command::new(&setpriv)
                .args(["--pdeathsig", "KILL", "--", "true"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|status| status.success());
            works.then_some(setpriv)
        })
        .as_deref()
}

/// Lines printed on `stream`, handed to the run's output as they come (`run -v`), if it has one.
struct Lines {
    output: plan_ports::Output,
    stream: &'static str,
    /// The start of a line whose newline has not come yet.
    partial: Vec<u8>,
}

impl Lines {
    fn feed(&mut self, bytes: &[u8]) {
        self.partial.extend_from_slice(bytes);
        while let Some(end) = self.partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            let text = String::from_utf8_lossy(&line[..end]);
            self.output.line(self.stream, text.trim_end_matches('\r'));
        }
    }

    fn finish(&mut self) {
        if !self.partial.is_empty() {
            let text = String::from_utf8_lossy(&self.partial).into_owned();
            self.output.line(self.stream, &text);
            self.partial.clear();
        }
    }
}

fn lines_of(ctx: &ToolContext, stream: &'static str) -> Option<Lines> {
    ctx.output.clone().map(|output| Lines {
        output,
        stream,
        partial: Vec::new(),
    })
}

/// What a pipe gives until it closes, the first `cap` bytes of it kept (nothing for no pipe),
/// and whether more came. The rest is read and dropped, so the program never blocks on a full
/// pipe. With `lines`, every line also goes to the run's output as it comes.
async fn read_all(
    pipe: Option<impl tokio::io::AsyncRead + Unpin>,
    cap: usize,
    mut lines: Option<Lines>,
) -> (Vec<u8>, bool) {
    use tokio::io::AsyncReadExt;
    let mut kept = Vec::new();
    let mut truncated = false;
    let Some(mut pipe) = pipe else {
        return (kept, truncated);
    };
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        match pipe.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if let Some(lines) = &mut lines {
                    lines.feed(&chunk[..n]);
                }
                let room = cap.saturating_sub(kept.len());
                kept.extend_from_slice(&chunk[..n.min(room)]);
                truncated |= n > room;
            }
        }
    }
    if let Some(lines) = &mut lines {
        lines.finish();
    }
    (kept, truncated)
}

/// How long a stopped program's process group has to exit after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// Stops a program and every process of its group: SIGTERM, then SIGKILL for what is left
/// after [`STOP_GRACE`] (and for whatever the program started that outlived it).
async fn stop_group(child: &mut tokio::process::Child, group: Option<u32>) {
    #[cfg(unix)]
    if let Some(pid) = group.and_then(|pid| i32::try_from(pid).ok()) {
        use nix::sys::signal::{Signal, killpg};
        let group = nix::unistd::Pid::from_raw(pid);
        let _ = killpg(group, Signal::SIGTERM);
        let _ = tokio::time::timeout(STOP_GRACE, child.wait()).await;
        // ESRCH once every process of the group is gone: nothing to do.
        let _ = killpg(group, Signal::SIGKILL);
    }
    let _ = child.kill().await;
}

async fn sleep_opt(ms: Option<u64>) {
    match ms {
        Some(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
        None => std::future::pending().await,
    }
}
