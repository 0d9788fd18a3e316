//! What every gRPC call of a dialect shares: its request id (`x-request-id` metadata, given
//! or generated), the in-flight bound, the client's deadline, error statuses
//! with TF Serving's codes, and the request metrics.

use std::time::{Duration, Instant};

use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};

use crate::capture::Capture;
use crate::error::ApiError;
use crate::metrics::{RequestLabels, METRICS};
use crate::server::access_log::{self, Served};
use crate::server::{Admitted, RequestId, ServerState};
use crate::service::Trace;
use crate::status::{grpc_code, Code};

/// One gRPC call in progress.
pub struct Call<'a> {
    pub trace: Trace,
    api: &'static str,
    started: Instant,
    _admitted: Admitted<'a>,
    /// When the call gets an access line: its size and its peer.
    access: Option<(usize, Option<std::net::SocketAddr>)>,
    capture: &'a Capture,
}

impl<'a> Call<'a> {
    /// Admits a call under `--max_in_flight_requests`, as REST's POSTs are.
    pub fn begin<T: prost::Message>(
        state: &'a ServerState,
        request: &Request<T>,
        api: &'static str,
    ) -> Result<Call<'a>, Status> {
        let request_id = request_id(request.metadata());
        let admitted = state.in_flight.admit().map_err(|error| {
            let mut status = status_of(&error);
            set_request_id(status.metadata_mut(), &request_id);
            status
        })?;
        let access = state
            .access_log
            .sample()
            .then(|| (request.get_ref().encoded_len(), request.remote_addr()));
        let trace = Trace {
            request_id: Some(request_id.0),
            deadline: grpc_timeout(request.metadata()),
            access_logged: access.is_some(),
            ..Trace::default()
        };
        Ok(Call {
            trace,
            api,
            started: Instant::now(),
            _admitted: admitted,
            access,
            capture: &state.service.capture,
        })
    }

    /// The call's answer, its id on the response (or the error status)
    /// metadata, and its count in the metrics.
    pub fn finish<T: prost::Message>(
        mut self,
        result: Result<T, ApiError>,
        model: &str,
    ) -> Result<Response<T>, Status> {
        let id = self.trace.request_id.clone().unwrap_or_else(|| "".into());
        if let (Some(mut record), Ok(_)) = (self.trace.capture.take(), &result) {
            // No JSON body crossed the wire: the sinks write the run's tensors.
            record.protocol = "grpc";
            self.capture.submit(record);
        }
        let bytes_out = match (&self.access, &result) {
            (Some(_), Ok(message)) => Some(message.encoded_len() as u64),
            _ => None,
        };
        let answer = match result {
            Ok(message) => {
                let mut response = Response::new(message);
                set_request_id(response.metadata_mut(), &RequestId(id.clone()));
                Ok(response)
            }
            Err(error) => {
                if matches!(error.code(), Code::Internal | Code::Unavailable) {
                    log::warn!("[{id}] gRPC {} on model {model}: {error}", self.api);
                }
                let mut status = status_of(&error);
                set_request_id(status.metadata_mut(), &RequestId(id.clone()));
                Err(status)
            }
        };
        let trace = &self.trace;
        let mut digits = itoa::Buffer::new();
        let (model, version) = match trace.version {
            Some(v) => (trace.model.as_deref().unwrap_or(model), digits.format(v)),
            None => ("", ""),
        };
        let code = match &answer {
            Ok(_) => tonic::Code::Ok,
            Err(status) => status.code(),
        };
        METRICS.record_request(
            &RequestLabels {
                protocol: "grpc",
                model,
                version,
                signature: trace.signature.as_deref().unwrap_or(""),
                api: self.api,
                status: code_name(code),
            },
            self.started.elapsed().as_secs_f64(),
        );
        if let Some((bytes_in, client)) = self.access {
            let served = Served::of(self.api, trace);
            access_log::write(&access_log::Line {
                protocol: "grpc",
                request_id: &id,
                method: "gRPC",
                path: self.api,
                status: code_name(code),
                bytes_in: Some(bytes_in as u64),
                bytes_out,
                client,
                total: self.started.elapsed(),
                served: Some(&served),
            });
        }
        answer
    }
}

/// The client's id when usable, else a new one.
pub fn request_id(metadata: &MetadataMap) -> RequestId {
    RequestId::from_header(metadata.as_ref().get(&REQUEST_ID).and_then(|v| v.to_str().ok()))
}

// Looked up by name on every call: a name given as text is parsed each time.
// (actix-web's `REQUEST_ID` is the older `http` crate's type, not tonic's.)
const REQUEST_ID: http::HeaderName = http::HeaderName::from_static(crate::server::request_id::HEADER);
const GRPC_TIMEOUT: http::HeaderName = http::HeaderName::from_static("grpc-timeout");

fn set_request_id(metadata: &mut MetadataMap, id: &RequestId) {
    if let Ok(mut value) = http::HeaderValue::from_str(&id.0) {
        // Never indexed by HPACK: every id is new, so indexing one would only
        // evict useful entries, and each response would compare its id with
        // every id the connection's table still holds.
        value.set_sensitive(true);
        metadata.as_mut().insert(REQUEST_ID, value);
    }
}

/// `grpc-timeout` (an integer and a unit: H, M, S, m, u, n), as gRPC sends deadlines.
pub fn grpc_timeout(metadata: &MetadataMap) -> Option<Duration> {
    let text = metadata.as_ref().get(&GRPC_TIMEOUT)?.to_str().ok()?;
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
            grpc_timeout(&metadata)
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
