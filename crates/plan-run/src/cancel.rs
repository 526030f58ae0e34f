//! Stopping a run from outside its process (`plan-cli cancel`): a live run's process is asked
//! to stop (SIGTERM: it commits what finished and marks the run stopped); a run no process
//! runs (waiting for approvals, or its process died) is marked stopped here.

use std::time::{Duration, Instant, SystemTime};

use plan_store::{RunState, Store};
use plan_types::TaskStatus;

use crate::LifecycleError;

/// The option of a run that `cancel` sets before it signals the run's process: the run it
/// asks to stop ([`stop_asked`]). A resume clears it.
pub(crate) const STOP_ASKED: &str = "$.stop_asked";

/// Whether `cancel` asked for run `row` to stop since it was last resumed: a process that
/// runs several runs (the dashboard) stops that one when it gets the signal.
pub fn stop_asked(row: &plan_store::RunRow) -> bool {
    row.options
        .get("stop_asked")
        .and_then(serde_json::Value::as_bool)
        == Some(true)
}

/// What cancelling a run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cancelled {
    /// It was stopped already.
    AlreadyStopped,
    /// It waited for approvals; it is stopped now.
    WasWaiting,
    /// Its process stopped it, ending with this status.
    Stopped(TaskStatus),
    /// Its process was asked to stop and has not yet (it is still finishing what it runs).
    Asked(u32),
    /// Its process had died; it is marked stopped.
    OwnerDied,
}

/// Stops run `run` (its id or a unique prefix) and says how; a live run's process gets
/// `patience` to stop. A finished run is refused: there is nothing to stop.
pub fn cancel(
    store: &mut Store,
    run: &str,
    patience: Duration,
) -> Result<(String, Cancelled), LifecycleError> {
    let row = store.run(run)?;
    // A dead run's log is folded first, so the end it is marked with is its last event.
    crate::recover_interrupted(store, &row)?;
    let run_id = row.run_id.clone();
    let mark_stopped = |store: &mut Store| -> Result<(), LifecycleError> {
        let at = crate::ended_at(store, &row)?.unwrap_or_else(SystemTime::now);
        store.end_run(&run_id, RunState::Stopped, None, at)?;
        Ok(())
    };
    let cancelled = match row.state {
        RunState::Finished => {
            return Err(LifecycleError::Refused(format!(
                "run {run_id} has finished ({}): there is nothing to cancel",
                crate::status_of(&row)
            )));
        }
        RunState::Stopped => Cancelled::AlreadyStopped,
        RunState::Waiting => {
            mark_stopped(store)?;
            Cancelled::WasWaiting
        }
        RunState::Running => match crate::owner_alive(&row) {
            Some(pid) => {
                // Which of its runs is to stop, for a process that runs several (the
                // dashboard); a process that runs one stops it whatever this says.
                store.set_option(&run_id, STOP_ASKED, &serde_json::json!(true))?;
                ask_to_stop(pid)?;
                // Its process commits what finished and marks the run stopped.
                match wait_stopped(store, &run_id, patience)? {
                    Some(status) => Cancelled::Stopped(status),
                    None => Cancelled::Asked(pid),
                }
            }
            None => {
                mark_stopped(store)?;
                Cancelled::OwnerDied
            }
        },
    };
    Ok((run_id, cancelled))
}

/// Which of `runs` (the runs a process goes on with: the dashboard's, `mcp serve`'s) a
/// [`cancel`] asked to stop: that process stops them when it gets the signal, and only them.
/// A run it cannot read is not asked.
pub fn stops_asked<'a, I>(store: &Store, runs: I) -> Vec<&'a str>
where
    I: IntoIterator<Item = &'a str>,
{
    runs.into_iter()
        .filter(|id| store.run(id).is_ok_and(|row| stop_asked(&row)))
        .collect()
}

/// Waits until run `run_id`, asked to stop, is no longer running, for at most `patience`:
/// how it stands then (`None`: still running).
pub fn wait_stopped(
    store: &Store,
    run_id: &str,
    patience: Duration,
) -> Result<Option<TaskStatus>, LifecycleError> {
    let deadline = Instant::now() + patience;
    loop {
        let now = store.run(run_id)?;
        if now.state != RunState::Running {
            return Ok(Some(crate::status_of(&now)));
        }
        if Instant::now() > deadline {
            return Ok(None);
        }
        std::thread::sleep(STOP_POLL);
    }
}

/// How often [`wait_stopped`] reads the run (`cancel` read it every 100 ms before it shared
/// the dashboard's wait, which read it every 50 ms: a row read, for at most its patience).
const STOP_POLL: Duration = Duration::from_millis(50);

/// Sends SIGTERM to the process that owns a run.
fn ask_to_stop(pid: u32) -> Result<(), LifecycleError> {
    #[cfg(unix)]
    {
        let raw = i32::try_from(pid)
            .map_err(|_| LifecycleError::Refused(format!("process id {pid} is out of range")))?;
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(raw),
            nix::sys::signal::Signal::SIGTERM,
        )
        .map_err(|error| LifecycleError::Refused(format!("cannot signal process {pid}: {error}")))
    }
    #[cfg(not(unix))]
    Err(LifecycleError::Refused(format!(
        "cannot signal process {pid} on this system: stop it there"
    )))
}
