//! Graceful drain on SIGTERM: readiness (`/v1/health/ready`, `/v2/health/ready`,
//! `/ping`) turns 503 at once, every response asks its client to close the
//! connection, new connections are still served for `--drain_timeout`; then
//! accepting stops, the connections already accepted are answered, the
//! listener closes and in-flight requests finish. So a load
//! balancer has time to notice, and no request written to a kept-alive
//! connection is cut off by the close. SIGINT (or a second signal) skips the wait.
//! The state and the wait live here; `crate::serve` runs the sequence over
//! both transports.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::InFlight;

/// Where a shutdown stands; the gRPC listener follows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Serving,
    /// Readiness fails; requests are still served.
    Draining,
    /// Listeners close; calls in flight finish.
    Closing,
}

/// Whether the server is draining, and a channel for listeners that follow it.
pub struct Drain {
    draining: AtomicBool,
    phase: tokio::sync::watch::Sender<Phase>,
}

impl Default for Drain {
    fn default() -> Self {
        Drain {
            draining: AtomicBool::new(false),
            phase: tokio::sync::watch::Sender::new(Phase::Serving),
        }
    }
}

impl Drain {
    pub fn start(&self) {
        self.draining.store(true, Ordering::SeqCst);
        self.phase.send_if_modified(|phase| {
            let changed = *phase == Phase::Serving;
            if changed {
                *phase = Phase::Draining;
            }
            changed
        });
    }

    /// Closes the listeners that follow the drain (gRPC).
    pub fn close(&self) {
        self.draining.store(true, Ordering::SeqCst);
        self.phase.send_replace(Phase::Closing);
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<Phase> {
        self.phase.subscribe()
    }
}

/// What ended the wait for a signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// SIGTERM, after the drain's wait (or a second signal cut it short).
    Drained,
    /// SIGINT: no wait.
    Interrupted,
    /// Signals cannot be watched; only SIGKILL stops the server.
    Unwatchable,
}

/// Waits for SIGTERM or SIGINT; on SIGTERM starts the drain and waits
/// `drain_timeout` (a second signal ends the wait). The listeners are the
/// caller's to close after.
pub async fn wait_for_signal(drain: &Drain, drain_timeout: Duration) -> Stop {
    use tokio::signal::unix::{signal, SignalKind};
    let (mut terminate, mut interrupt) = match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
        (Ok(terminate), Ok(interrupt)) => (terminate, interrupt),
        (Err(error), _) | (_, Err(error)) => {
            log::error!("cannot watch for SIGTERM/SIGINT ({error}); stop the server with SIGKILL");
            return Stop::Unwatchable;
        }
    };
    tokio::select! {
        _ = terminate.recv() => {
            drain.start();
            log::info!(
                "SIGTERM: draining for {:.1} s (readiness answers 503, responses close their connections)",
                drain_timeout.as_secs_f64()
            );
            tokio::select! {
                _ = tokio::time::sleep(drain_timeout) => {}
                _ = terminate.recv() => log::info!("second SIGTERM: ending the drain"),
                _ = interrupt.recv() => log::info!("SIGINT: ending the drain"),
            }
            Stop::Drained
        }
        _ = interrupt.recv() => {
            drain.start();
            Stop::Interrupted
        }
    }
}

/// Waits until no request has been in flight for a moment (at most 5 s), so
/// that connections handed to workers just before the pause are answered.
pub async fn settle(in_flight: &InFlight) {
    const QUIET: Duration = Duration::from_millis(100);
    const STEP: Duration = Duration::from_millis(10);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let mut quiet_since = tokio::time::Instant::now();
    while tokio::time::Instant::now() < deadline {
        if in_flight.current() > 0 {
            quiet_since = tokio::time::Instant::now();
        } else if quiet_since.elapsed() >= QUIET {
            return;
        }
        tokio::time::sleep(STEP).await;
    }
}
