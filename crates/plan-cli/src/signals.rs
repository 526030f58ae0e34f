//! The signals that stop a run or a worker: the process's own, so the binary's (a library
//! that took them would take Ctrl+C away from the program using it).

/// Ctrl+C (SIGINT) and SIGTERM, on Unix watched from the moment this is made so that none is
/// missed (elsewhere, Ctrl+C while [`Signals::next`] waits).
pub(crate) struct Signals {
    #[cfg(unix)]
    streams: Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>,
}

impl Signals {
    /// Watches both signals (on a tokio runtime with signals enabled); if they cannot be
    /// watched, [`Signals::next`] says so.
    pub(crate) fn new() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Signals {
                streams: signal(SignalKind::interrupt())
                    .and_then(|i| Ok((i, signal(SignalKind::terminate())?)))
                    .ok(),
            }
        }
        #[cfg(not(unix))]
        Signals {}
    }

    /// Waits for the next signal; false if signals cannot be watched.
    pub(crate) async fn next(&mut self) -> bool {
        #[cfg(unix)]
        {
            let Some((interrupt, terminate)) = &mut self.streams else {
                return false;
            };
            tokio::select! {
                received = interrupt.recv() => received.is_some(),
                received = terminate.recv() => received.is_some(),
            }
        }
        #[cfg(not(unix))]
        {
            tokio::signal::ctrl_c().await.is_ok()
        }
    }
}

/// Each Ctrl+C or SIGTERM from now on, as a message: for a server that decides what each one
/// stops (`plan-cli cancel` of one of its runs sends one).
pub(crate) fn forwarded(
    toolbox: &crate::toolbox::Toolbox,
) -> tokio::sync::mpsc::UnboundedReceiver<()> {
    let (heard, signals) = tokio::sync::mpsc::unbounded_channel();
    toolbox.spawn(async move {
        let mut watched = Signals::new();
        while watched.next().await && heard.send(()).is_ok() {}
    });
    signals
}

#[cfg(all(test, unix))]
mod tests {
    #[tokio::test]
    async fn a_sigterm_is_heard_and_does_not_end_the_process() {
        let mut signals = super::Signals::new();
        nix::sys::signal::raise(nix::sys::signal::Signal::SIGTERM).expect("raised");
        assert!(signals.next().await);
    }
}
