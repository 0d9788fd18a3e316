//! Graceful drain on SIGTERM: readiness (`/v1/health/ready`, `/v2/health/ready`,
//! `/ping`) turns 503 at once, every response asks its client to close the
//! connection, new connections are still served for `--drain_timeout`; then
//! accepting stops, the connections already accepted are answered, the
//! listener closes and in-flight requests finish. So a load
//! balancer has time to notice, and no request written to a kept-alive
//! connection is cut off by the close. SIGINT (or a second signal) skips the wait.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use actix_web::dev::{ServerHandle, ServiceResponse};
use actix_web::http::ConnectionType;
use actix_web::web;

use super::AppState;

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

/// Marks a response to close its connection once sent (while draining).
pub fn close_after<B>(response: &mut ServiceResponse<B>) {
    response
        .response_mut()
        .head_mut()
        .set_connection_type(ConnectionType::Close);
}

/// Waits for SIGTERM or SIGINT and stops the server: after a drain of
/// `drain_timeout` for SIGTERM, at once for SIGINT.
pub async fn stop_on_signal(
    server: ServerHandle,
    listeners: Vec<std::net::TcpListener>,
    state: web::Data<AppState>,
    drain_timeout: Duration,
) {
    use tokio::signal::unix::{signal, SignalKind};
    let (mut terminate, mut interrupt) = match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
        (Ok(terminate), Ok(interrupt)) => (terminate, interrupt),
        (Err(error), _) | (_, Err(error)) => {
            log::error!("cannot watch for SIGTERM/SIGINT ({error}); stop the server with SIGKILL");
            return;
        }
    };
    tokio::select! {
        _ = terminate.recv() => {
            state.drain.start();
            log::info!(
                "SIGTERM: draining for {:.1} s (readiness answers 503, responses close their connections)",
                drain_timeout.as_secs_f64()
            );
            tokio::select! {
                _ = tokio::time::sleep(drain_timeout) => {}
                _ = terminate.recv() => log::info!("second SIGTERM: ending the drain"),
                _ = interrupt.recv() => log::info!("SIGINT: ending the drain"),
            }
        }
        _ = interrupt.recv() => state.drain.start(),
    }
    // Stop accepting, then refuse new connections at once, and let every
    // connection already accepted get its answer: actix's stop drops
    // connections accepted but not yet picked up by a worker, whose requests
    // would be lost. (A handshake the kernel completes between the pause and
    // the refusal sits in its accept queue and is reset: TCP has no way to
    // refuse it. Refusing first is worse: actix lags behind the queue.)
    server.pause().await;
    state.drain.close();
    refuse_connections(&listeners);
    settle(&state).await;
    log::info!("closing the listener; requests in flight finish");
    server.stop(true).await;
}

/// Stops the listening sockets: new connections are refused (RST) instead of
/// waiting in the kernel's accept queue for a server that will not accept them.
fn refuse_connections(listeners: &[std::net::TcpListener]) {
    use std::os::fd::AsRawFd;
    for listener in listeners {
        // SAFETY: shutdown(2) on a descriptor this process owns; it changes
        // the socket's state only, and the descriptor stays valid.
        let result = unsafe { libc::shutdown(listener.as_raw_fd(), libc::SHUT_RD) };
        if result != 0 {
            log::warn!(
                "cannot stop listening on {:?}: {}",
                listener.local_addr().ok(),
                std::io::Error::last_os_error()
            );
        }
    }
}

/// Waits until no request has been in flight for a moment (at most 5 s), so
/// that connections handed to workers just before the pause are answered.
async fn settle(state: &AppState) {
    const QUIET: Duration = Duration::from_millis(100);
    const STEP: Duration = Duration::from_millis(10);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let mut quiet_since = tokio::time::Instant::now();
    while tokio::time::Instant::now() < deadline {
        if state.in_flight.current() > 0 {
            quiet_since = tokio::time::Instant::now();
        } else if quiet_since.elapsed() >= QUIET {
            return;
        }
        tokio::time::sleep(STEP).await;
    }
}
