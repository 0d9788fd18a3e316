//! What every gRPC call of a dialect shares: its request id (`x-request-id` metadata, given
//! or generated), the in-flight bound, the client's deadline, error statuses
//! with TF Serving's codes, and the request metrics.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};

use crate::error::ApiError;
use crate::metrics::{RequestLabels, METRICS};
use crate::server::access_log::Served;
use crate::server::lifecycle::{self, Ending, Lifecycle};
use crate::server::{Admitted, ServerState};
use crate::service::Trace;
use crate::status::{grpc_code, Code};

/// One gRPC call in progress.
pub struct Call<'a> {
    pub trace: Trace,
    api: &'static str,
    started: Instant,
    _admitted: Admitted<'a>,
    lifecycle: Lifecycle,
    service: &'a crate::service::Service,
}

/// What admitting a call reads from its request, however its transport
/// decoded it: two metadata values and the peer.
#[derive(Default)]
pub struct CallHead<'r> {
    /// `x-request-id`.
    pub request_id: Option<&'r str>,
    /// `grpc-timeout`.
    pub timeout: Option<&'r str>,
    pub peer: Option<std::net::SocketAddr>,
    /// How long its bytes waited unread in the socket ([`Unread`]).
    pub unread: Duration,
}

/// How long a call's bytes waited unread in its connection's socket before
/// the call was read, where the transport measured it (under a latency
/// objective): a request extension, so relayed calls carry it too.
#[derive(Clone, Copy, Debug)]
pub struct Unread(pub Duration);

impl Unread {
    /// The wait a request's extensions carry; zero where none was measured.
    pub fn of(extensions: &tonic::Extensions) -> Duration {
        extensions.get::<Unread>().map_or(Duration::ZERO, |unread| unread.0)
    }
}

impl<'r> CallHead<'r> {
    pub fn of<T>(request: &'r Request<T>) -> CallHead<'r> {
        let metadata = request.metadata().as_ref();
        CallHead {
            request_id: metadata.get(&REQUEST_ID).and_then(|v| v.to_str().ok()),
            timeout: metadata.get(&GRPC_TIMEOUT).and_then(|v| v.to_str().ok()),
            peer: request.remote_addr(),
            unread: Unread::of(request.extensions()),
        }
    }
}

impl<'a> Call<'a> {
    /// Admits a call under `--max_in_flight_requests`, as REST's POSTs are.
    pub fn begin<T: prost::Message>(
        state: &'a ServerState,
        request: &Request<T>,
        api: &'static str,
    ) -> Result<Call<'a>, Status> {
        Call::admit(state, CallHead::of(request), || request.get_ref().encoded_len(), api)
    }

    /// [`Call::begin`] from a head the transport read itself; `size` is the
    /// message's encoded size, asked for only when the call is access-logged.
    pub fn admit(
        state: &'a ServerState,
        head: CallHead<'_>,
        size: impl FnOnce() -> usize,
        api: &'static str,
    ) -> Result<Call<'a>, Status> {
        let lifecycle = Lifecycle::begin(Some(&state.access_log), head.request_id, || {
            (Some(size() as u64), head.peer)
        });
        let admitted = lifecycle::admit(state).map_err(|error| {
            let mut status = status_of(&error);
            set_request_id(status.metadata_mut(), &lifecycle.id.0);
            status
        })?;
        let trace = Trace {
            request_id: Some(lifecycle.id.0.clone()),
            deadline: head.timeout.and_then(parse_timeout),
            arrived: (!head.unread.is_zero())
                .then(|| std::time::Instant::now().checked_sub(head.unread))
                .flatten(),
            access_logged: lifecycle.access_logged(),
            ..Trace::default()
        };
        Ok(Call {
            trace,
            api,
            started: Instant::now(),
            _admitted: admitted,
            lifecycle,
            service: &state.service,
        })
    }

    /// The call's answer, its id on the response (or the error status)
    /// metadata, and its count in the metrics.
    pub fn finish<T: prost::Message>(self, result: Result<T, ApiError>, model: &str) -> Result<Response<T>, Status> {
        let (answer, id) = self.conclude(result, |message| message.encoded_len(), model);
        answer.map(|message| {
            let mut response = Response::new(message);
            set_request_id(response.metadata_mut(), &id);
            response
        })
    }

    /// [`Call::finish`] for a transport that sends the answer itself: the
    /// answer (an error already carries the id in its metadata) and the id
    /// to send with it. `size` gives an answer's encoded size, asked for
    /// only when the call is access-logged.
    pub fn conclude<T>(
        mut self,
        result: Result<T, ApiError>,
        size: impl FnOnce(&T) -> usize,
        model: &str,
    ) -> (Result<T, Status>, Arc<str>) {
        let id = self.trace.request_id.clone().unwrap_or_else(|| "".into());
        if let (Some(mut record), Ok(_)) = (self.trace.capture.take(), &result) {
            // No JSON body crossed the wire: the sinks write the run's tensors.
            record.protocol = "grpc";
            self.service.capture().submit(record);
        }
        let bytes_out = match (self.lifecycle.access_logged(), &result) {
            (true, Ok(message)) => Some(size(message) as u64),
            _ => None,
        };
        let answer = result.map_err(|error| {
            if matches!(error.code(), Code::Internal | Code::Unavailable) {
                log::warn!("[{id}] gRPC {} on model {model}: {error}", self.api);
            }
            let mut status = status_of(&error);
            set_request_id(status.metadata_mut(), &id);
            status
        });
        let trace = &self.trace;
        let requested = model;
        let mut digits = itoa::Buffer::new();
        let configured = |name: &str| self.service.is_served(name);
        let (model, version) = super::metric_labels(trace, requested, configured, &mut digits);
        let code = match &answer {
            Ok(_) => tonic::Code::Ok,
            Err(status) => status.code(),
        };
        METRICS.record_request(
            &RequestLabels {
                protocol: "grpc",
                model,
                version,
                signature: trace.signature_name().unwrap_or(""),
                api: self.api,
                status: code_name(code),
            },
            self.started.elapsed().as_secs_f64(),
        );
        if self.lifecycle.access_logged() {
            let served = Served::of(self.api, trace);
            self.lifecycle.end(Ending {
                protocol: "grpc",
                method: "gRPC",
                path: self.api,
                status: code as u16,
                grpc_code: Some(code_name(code)),
                named_model: Some(requested).filter(|m| !m.is_empty()),
                bytes_out,
                served: Some(&served),
            });
        }
        (answer, id)
    }
}

// Looked up by name on every call: a name given as text is parsed each time.
// (actix-web's `REQUEST_ID` is the older `http` crate's type, not tonic's.)
pub const REQUEST_ID: http::HeaderName = http::HeaderName::from_static(crate::server::request_id::HEADER);
pub const GRPC_TIMEOUT: http::HeaderName = http::HeaderName::from_static("grpc-timeout");

pub fn set_request_id(metadata: &mut MetadataMap, id: &str) {
    if let Ok(mut value) = http::HeaderValue::from_str(id) {
        // Never indexed by HPACK: every id is new, so indexing one would only
        // evict useful entries, and each response would compare its id with
        // every id the connection's table still holds.
        value.set_sensitive(true);
        metadata.as_mut().insert(REQUEST_ID, value);
    }
}

/// `grpc-timeout` (an integer and a unit: H, M, S, m, u, n), as gRPC sends deadlines.
pub fn parse_timeout(text: &str) -> Option<Duration> {
    let (digits, unit) = text.split_at(text.len().checked_sub(1)?);
    let value: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(value.saturating_mul(3600)),
        "M" => Duration::from_secs(value.saturating_mul(60)),
        "S" => Duration::from_secs(value),
        "m" => Duration::from_millis(value),
        "u" => Duration::from_micros(value),
        "n" => Duration::from_nanos(value),
        _ => return None,
    })
}

/// The gRPC status for an error: TF Serving's canonical code and message.
/// The HTTP-only codes take the nearest gRPC code.
pub fn status_of(error: &ApiError) -> Status {
    Status::new(grpc_code(error.code()), error.to_string())
}

/// The code's name as gRPC spells it (`INVALID_ARGUMENT`), for metric labels.
pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code as G;
    match code {
        G::Ok => "OK",
        G::Cancelled => "CANCELLED",
        G::Unknown => "UNKNOWN",
        G::InvalidArgument => "INVALID_ARGUMENT",
        G::DeadlineExceeded => "DEADLINE_EXCEEDED",
        G::NotFound => "NOT_FOUND",
        G::AlreadyExists => "ALREADY_EXISTS",
        G::PermissionDenied => "PERMISSION_DENIED",
        G::ResourceExhausted => "RESOURCE_EXHAUSTED",
        G::FailedPrecondition => "FAILED_PRECONDITION",
        G::Aborted => "ABORTED",
        G::OutOfRange => "OUT_OF_RANGE",
        G::Unimplemented => "UNIMPLEMENTED",
        G::Internal => "INTERNAL",
        G::Unavailable => "UNAVAILABLE",
        G::DataLoss => "DATA_LOSS",
        G::Unauthenticated => "UNAUTHENTICATED",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_parse_every_unit() {
        let parse = |text: &str| {
            let mut metadata = MetadataMap::new();
            metadata.insert("grpc-timeout", text.parse().unwrap());
            let request = Request::from_parts(metadata, Default::default(), ());
            CallHead::of(&request).timeout.and_then(parse_timeout)
        };
        assert_eq!(parse("5S"), Some(Duration::from_secs(5)));
        assert_eq!(parse("250m"), Some(Duration::from_millis(250)));
        assert_eq!(parse("7u"), Some(Duration::from_micros(7)));
        assert_eq!(parse("2M"), Some(Duration::from_secs(120)));
        assert_eq!(parse("x"), None);
        assert_eq!(parse("5"), None);
    }

    #[test]
    fn codes_follow_tf_serving() {
        let full = crate::batcher::BatchError::QueueFull {
            queue: "q".into(),
            batches: 1,
        };
        assert_eq!(status_of(&full.into()).code(), tonic::Code::Unavailable);
        assert_eq!(
            status_of(&ApiError::SignatureNotFound("s".into())).code(),
            tonic::Code::InvalidArgument
        );
        assert_eq!(
            status_of(&ApiError::SignatureKeyNotFound("s".into())).code(),
            tonic::Code::FailedPrecondition
        );
        assert_eq!(status_of(&ApiError::Timeout(5)).code(), tonic::Code::DeadlineExceeded);
        assert_eq!(
            status_of(&ApiError::PayloadTooLarge { limit: 1, got: None }).code(),
            tonic::Code::ResourceExhausted
        );
    }
}
