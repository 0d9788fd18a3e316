//! One request's life, whichever transport carried it: its id (the
//! client's or a new one), its admission ([`admit`]), a panic while
//! handling it contained into an internal error that names the id (logged
//! and counted in `tfserve_panics_total`), its access line, and whether its
//! connection closes after the answer (the drain). The actix middleware, the
//! REST front and the gRPC calls each begin a [`Lifecycle`] and end it; only
//! how they read a head and write an answer is their own.

use std::future::Future;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::time::Instant;

use futures_util::FutureExt;

pub use super::access_log::Ending;
use super::access_log::{self, AccessLog};
use super::{Admitted, RequestId, ServerState};
use crate::error::ApiError;
use crate::metrics::METRICS;
use crate::status::panic_message;

/// A request from its head to its answer.
pub struct Lifecycle {
    pub id: RequestId,
    /// Set when the request gets an access line: what the line reports of its arrival.
    access: Option<Arrived>,
}

struct Arrived {
    at: Instant,
    bytes_in: Option<u64>,
    client: Option<SocketAddr>,
}

/// A request whose handling panicked: what its answer says.
#[derive(Debug, thiserror::Error)]
#[error("internal error while handling request {id}; the server logged it as a panic: {message}")]
pub struct Panicked {
    pub id: String,
    pub message: String,
}

impl Lifecycle {
    /// Begins a request given its `x-request-id` (header or metadata).
    /// `arrival` (its body's size and its peer) is asked for only when the
    /// request is sampled for an access line; without an access log
    /// (`None`), no request gets one.
    pub fn begin(
        access_log: Option<&AccessLog>,
        request_id: Option<&str>,
        arrival: impl FnOnce() -> (Option<u64>, Option<SocketAddr>),
    ) -> Lifecycle {
        let id = RequestId::from_header(request_id);
        let access = access_log.is_some_and(AccessLog::sample).then(|| {
            let (bytes_in, client) = arrival();
            Arrived {
                at: Instant::now(),
                bytes_in,
                client,
            }
        });
        Lifecycle { id, access }
    }

    /// Whether the request gets an access line (the service then records
    /// what it ran for it).
    pub fn access_logged(&self) -> bool {
        self.access.is_some()
    }

    /// Runs the handling of the request, a panic in it contained. `path`
    /// is read only for a panic's log line.
    /// Not an `async fn`: that would be one more state machine around
    /// `handling`, moved whole (a request's future is kilobytes) on each call.
    pub fn contain<'l, F: Future + 'l, P: AsRef<str>>(
        &'l self,
        method: &'l str,
        path: impl FnOnce() -> P + 'l,
        handling: F,
    ) -> impl Future<Output = Result<F::Output, Panicked>> + 'l {
        AssertUnwindSafe(handling)
            .catch_unwind()
            .map(move |handled| handled.map_err(|panic| contained(&self.id.0, method, path().as_ref(), panic.as_ref())))
    }

    /// Ends the request: its access line, when it gets one.
    pub fn end(&self, ending: Ending<'_>) {
        let Some(arrived) = &self.access else { return };
        access_log::write(&access_log::Line {
            ending,
            request_id: &self.id.0,
            bytes_in: arrived.bytes_in,
            client: arrived.client,
            total: arrived.at.elapsed(),
        });
    }
}

/// Admits a request's work under `--max_in_flight_requests` (REST's POSTs,
/// every gRPC call); the slot frees when dropped.
pub fn admit(state: &ServerState) -> Result<Admitted<'_>, ApiError> {
    state.in_flight.admit()
}

/// Whether a connection closes after the answer it is writing: while the
/// server drains, clients are sent to another replica.
pub fn closes_connection(state: &ServerState) -> bool {
    state.drain.is_draining()
}

/// Logs and counts a panic while handling request `id` (a request whose
/// id was never read, as a gRPC call that panicked before its head was
/// decoded, names a new one), and gives what its answer says.
pub fn contained(id: &str, method: &str, path: &str, panic: &(dyn std::any::Any + Send)) -> Panicked {
    let message = panic_message(panic);
    log::error!("[{id}] {method} {path} panicked: {message}");
    METRICS.panics.with_label_values(&["request"]).inc();
    Panicked {
        id: id.to_string(),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block_on<F: Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(future)
    }

    #[test]
    fn a_panic_is_contained_named_by_the_request_id_and_counted() {
        let lifecycle = Lifecycle::begin(None, Some("req-7"), || unreachable!("no access log"));
        let before = METRICS.panics.with_label_values(&["request"]).get();
        let panicked = block_on(lifecycle.contain("POST", || "/p", async {
            if lifecycle.id.0.len() == 5 {
                panic!("boom");
            }
        }))
        .unwrap_err();
        assert_eq!(panicked.id, "req-7");
        assert_eq!(panicked.message, "boom");
        assert!(panicked.to_string().contains("req-7"), "{panicked}");
        // Other tests' panics count in the same process-wide counter.
        assert!(METRICS.panics.with_label_values(&["request"]).get() > before);
        assert_eq!(block_on(lifecycle.contain("POST", || "/p", async { 3 })).ok(), Some(3));
    }

    #[test]
    fn arrival_is_read_only_for_a_sampled_request() {
        let off = AccessLog::new(0.0);
        let lifecycle = Lifecycle::begin(Some(&off), None, || unreachable!("not sampled"));
        assert!(!lifecycle.access_logged());
        assert_eq!(lifecycle.id.0.len(), 16, "a generated id");
        let all = AccessLog::new(1.0);
        let lifecycle = Lifecycle::begin(Some(&all), Some("given"), || (Some(3), None));
        assert!(lifecycle.access_logged());
        assert_eq!(&*lifecycle.id.0, "given");
    }
}
