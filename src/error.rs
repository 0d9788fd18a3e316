//! The request-level error: every layer's error under one type, each
//! carrying its kind, answered as `{"error": "..."}` with the status
//! [`crate::status`] maps its code to. Dialects refuse requests in their peer's
//! words through their own typed errors ([`RequestError`]), so this file names none.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};

use crate::batcher::BatchError;
use crate::codec::payload::ConvertError;
use crate::codec::CodecError;
use crate::python_handlers::HandlerError;
use crate::registry::RegistryError;
use crate::runtime::RuntimeError;
use crate::status::{http_status, Code, HasCode};

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error(transparent)]
    Codec(#[from] CodecError),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error(transparent)]
    Batch(#[from] BatchError),
    #[error("Serving signature name: \"{0}\" not found in signature def")]
    SignatureNotFound(String),
    /// gRPC Predict's wording and code for an unknown signature (FAILED_PRECONDITION).
    #[error("Serving signature key \"{0}\" not found.")]
    SignatureKeyNotFound(String),
    /// No route answers this method and path.
    #[error("Not found: {method} {path}")]
    RouteNotFound { method: String, path: String },
    /// A route answers this path, with other methods (`allow`, as the
    /// `Allow` header lists them).
    #[error("Method Not Allowed: {method} {path} (this path takes {allow})")]
    MethodNotAllowed {
        method: String,
        path: String,
        allow: &'static str,
    },
    /// The body is not JSON (TF Serving's and KServe's words).
    #[error("JSON Parse error: {0}")]
    JsonParse(serde_json::Error),
    /// A refusal in a dialect's own words; see [`RequestError`].
    #[error("{0}")]
    Request(Box<dyn RequestError>),
    /// A request the route or method cannot carry (`Malformed request: ...`).
    #[error("{0}")]
    BadRequest(String),
    #[error("request body{} exceeds the limit of {limit} bytes (max_request_bytes)", got.map(|g| format!(" of {g} bytes")).unwrap_or_default())]
    PayloadTooLarge { limit: usize, got: Option<usize> },
    #[error("request timed out after {0} ms (rest_api_timeout_in_ms)")]
    Timeout(u64),
    #[error("the request body did not arrive within {0} ms (client_body_timeout_ms)")]
    BodyTimeout(u64),
    #[error("the client closed the connection before the answer was ready")]
    ClientGone,
    #[error(transparent)]
    Convert(#[from] ConvertError),
    #[error(transparent)]
    Image(#[from] crate::imaging::ImageError),
    #[error(transparent)]
    Handler(#[from] HandlerError),
    #[error("authentication required: send valid HTTP basic credentials (enable_auth)")]
    Unauthorized,
    /// Readiness: some model is loading or has no available version.
    #[error("not ready: {0}")]
    NotReady(String),
    /// SageMaker's `/ping`: the default model is not available (502, as the container's nginx).
    #[error("model {0} is not available")]
    PingFailed(String),
    #[error("server busy: {0} requests are being handled, the limit (max_in_flight_requests); retry later")]
    Overloaded(usize),
    #[error("server busy: request bodies and their decoded tensors being handled would pass {0} bytes (max_in_flight_bytes); retry later")]
    BodiesOverBudget(usize),
    /// One request needs more than the whole budget: it would never fit.
    #[error("request needs {needs} bytes for its body and decoded tensors, more than the limit of {limit} bytes (max_in_flight_bytes)")]
    RequestOverBudget { needs: usize, limit: usize },
    /// The server's own failure, not the request's.
    #[error("{0}")]
    Internal(String),
}

/// A dialect's (or the service's) own refusal of a request: a typed error
/// with its peer's wording in `#[error]` and its code from [`HasCode`].
pub trait RequestError: std::error::Error + HasCode + Send + Sync + 'static {}

impl<E: std::error::Error + HasCode + Send + Sync + 'static> RequestError for E {}

impl crate::python_handlers::StepError for ApiError {
    fn status_code(&self) -> u16 {
        self.status().as_u16()
    }
}

impl ApiError {
    pub fn code(&self) -> Code {
        match self {
            ApiError::Request(e) => e.code(),
            ApiError::JsonParse(_) => Code::InvalidArgument,
            ApiError::RouteNotFound { .. } => Code::NotFound,
            ApiError::MethodNotAllowed { .. } => Code::MethodNotAllowed,
            ApiError::Codec(e) => e.code(),
            ApiError::Runtime(e) => e.code(),
            ApiError::Registry(e) => e.code(),
            ApiError::Batch(e) => e.code(),
            ApiError::Convert(e) => e.code(),
            ApiError::Handler(e) => e.code(),
            ApiError::Image(e) => e.code(),
            ApiError::BadRequest(_) => Code::InvalidArgument,
            // TF Serving's REST API: InvalidArgument (400), from GetInfoMap.
            ApiError::SignatureNotFound(_) => Code::InvalidArgument,
            ApiError::SignatureKeyNotFound(_) => Code::FailedPrecondition,
            ApiError::PayloadTooLarge { .. } | ApiError::RequestOverBudget { .. } => Code::PayloadTooLarge,
            ApiError::Timeout(_) => Code::DeadlineExceeded,
            ApiError::BodyTimeout(_) => Code::RequestTimeout,
            ApiError::ClientGone => Code::Cancelled,
            ApiError::Internal(_) => Code::Internal,
            ApiError::Overloaded(_) | ApiError::BodiesOverBudget(_) | ApiError::NotReady(_) => Code::Unavailable,
            ApiError::Unauthorized => Code::Unauthenticated,
            ApiError::PingFailed(_) => Code::BadGateway,
        }
    }

    pub fn status(&self) -> StatusCode {
        http_status(self.code())
    }
}

/// `{"error": message}`.
pub fn error_body(message: &str) -> Vec<u8> {
    let mut body = Vec::with_capacity(message.len() + 16);
    body.extend_from_slice(b"{\"error\":");
    crate::codec::encode::write_str(&mut body, message);
    body.push(b'}');
    body
}

/// The headers an error answer with this status carries beside its body:
/// when to retry an overloaded server, how to authenticate.
pub fn error_headers(status: StatusCode) -> &'static [(&'static str, &'static str)] {
    match status {
        StatusCode::SERVICE_UNAVAILABLE => &[("retry-after", "1")],
        StatusCode::UNAUTHORIZED => &[("www-authenticate", "Basic realm=\"tfserve\"")],
        _ => &[],
    }
}

/// `{"error": message}` with the given status.
pub fn error_response(status: StatusCode, message: &str) -> HttpResponse {
    let mut response = HttpResponse::build(status);
    response.content_type("application/json");
    for header in error_headers(status) {
        response.insert_header(*header);
    }
    response.body(error_body(message))
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.status()
    }

    fn error_response(&self) -> HttpResponse {
        error_response(self.status(), &self.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_follow_tf_serving() {
        let cases: Vec<(ApiError, u16)> = vec![
            (CodecError::NoInstances.into(), 400),
            (CodecError::Unimplemented("half".into()).into(), 501),
            (RegistryError::NotFound("Latest(m)".into()).into(), 404),
            (
                BatchError::QueueFull {
                    queue: "q".into(),
                    batches: 1,
                }
                .into(),
                503,
            ),
            (
                BatchError::TooLarge {
                    queue: "q".into(),
                    rows: 9,
                    max: 8,
                }
                .into(),
                400,
            ),
            (
                RuntimeError::Run {
                    code: Code::InvalidArgument,
                    message: "bad".into(),
                }
                .into(),
                400,
            ),
            (
                RuntimeError::Run {
                    code: Code::ResourceExhausted,
                    message: "OOM when allocating tensor with shape[128,64,112,112]".into(),
                }
                .into(),
                503,
            ),
            (ApiError::SignatureNotFound("s".into()), 400),
            (ApiError::SignatureKeyNotFound("s".into()), 400),
            (RegistryError::UnknownLabel("nope".into()).into(), 400),
            (ApiError::PayloadTooLarge { limit: 1, got: Some(2) }, 413),
            (ApiError::Timeout(5), 504),
            (ApiError::Internal("join".into()), 500),
            (ApiError::Overloaded(4096), 503),
            (ApiError::Unauthorized, 401),
            (
                ApiError::MethodNotAllowed {
                    method: "GET".into(),
                    path: "/invocations".into(),
                    allow: "POST",
                },
                405,
            ),
            (ApiError::NotReady("loading".into()), 503),
            (ApiError::PingFailed("m".into()), 502),
        ];
        for (error, status) in cases {
            assert_eq!(error.status().as_u16(), status, "{error}");
        }
    }
}
