//! The request-level error type and the one table that maps every layer's
//! errors to HTTP status codes and `{"error": "..."}` bodies.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};

use crate::batcher::BatchError;
use crate::codec::CodecError;
use crate::handlers::HandlerError;
use crate::registry::RegistryError;
use crate::runtime::{RuntimeError, StatusCode as TfCode};
use crate::sagemaker::convert::ConvertError;

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
    /// A request the route or method cannot carry (`Malformed request: ...`).
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    NotFound(String),
    #[error("request body{} exceeds the limit of {limit} bytes (max_request_bytes)", got.map(|g| format!(" of {g} bytes")).unwrap_or_default())]
    PayloadTooLarge { limit: usize, got: Option<usize> },
    #[error("request timed out after {0} ms (rest_api_timeout_in_ms)")]
    Timeout(u64),
    #[error("the client closed the connection before the answer was ready")]
    ClientGone,
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    InsufficientStorage(String),
    #[error(transparent)]
    Convert(#[from] crate::sagemaker::convert::ConvertError),
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
    /// The server's own failure, not the request's.
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Codec(CodecError::JsonParse(_) | CodecError::Invalid(_)) => StatusCode::BAD_REQUEST,
            ApiError::Codec(CodecError::Unimplemented(_)) => StatusCode::NOT_IMPLEMENTED,
            ApiError::Runtime(RuntimeError::Run { code, .. }) => tf_status(*code),
            ApiError::Runtime(RuntimeError::UnknownSignature(_)) => StatusCode::NOT_FOUND,
            ApiError::Runtime(RuntimeError::Load { .. }) => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::Registry(RegistryError::BadBasePath { .. } | RegistryError::LabelTarget { .. }) => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
            ApiError::Registry(RegistryError::AlreadyLoaded(_)) => StatusCode::CONFLICT,
            // TF Serving's InvalidArgument: a label is checked like the rest of the request.
            ApiError::Registry(RegistryError::LoadFailed { .. } | RegistryError::UnknownLabel(_)) => {
                StatusCode::BAD_REQUEST
            }
            ApiError::Registry(_) => StatusCode::NOT_FOUND,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::InsufficientStorage(_) => StatusCode::INSUFFICIENT_STORAGE,
            ApiError::Convert(ConvertError::UnsupportedMediaType(_)) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::Convert(ConvertError::Invalid(_)) => StatusCode::BAD_REQUEST,
            ApiError::Batch(BatchError::QueueFull { .. } | BatchError::ShuttingDown) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Batch(BatchError::TooLarge { .. } | BatchError::Inputs(_)) => StatusCode::BAD_REQUEST,
            ApiError::Batch(BatchError::Run(RuntimeError::Run { code, .. })) => tf_status(*code),
            ApiError::Batch(BatchError::Run(_) | BatchError::Split(_)) => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::SignatureNotFound(_) | ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::BadRequest(_) | ApiError::Image(_) => StatusCode::BAD_REQUEST,
            ApiError::Handler(HandlerError::Raised { status, .. }) => {
                StatusCode::from_u16(*status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
            }
            ApiError::Handler(HandlerError::Load { .. }) => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::Handler(HandlerError::Unsupported { .. }) => StatusCode::NOT_IMPLEMENTED,
            ApiError::Handler(HandlerError::QueueFull(_) | HandlerError::Stopped) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
            // nginx's "client closed request"; nobody reads it, but logs and metrics do.
            ApiError::ClientGone => StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::Overloaded(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::NotReady(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::PingFailed(_) => StatusCode::BAD_GATEWAY,
        }
    }
}

/// TF Serving's `ToHTTPStatusCode`.
fn tf_status(code: TfCode) -> StatusCode {
    match code {
        TfCode::InvalidArgument | TfCode::FailedPrecondition | TfCode::OutOfRange => StatusCode::BAD_REQUEST,
        TfCode::Cancelled => StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
        TfCode::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        TfCode::NotFound => StatusCode::NOT_FOUND,
        TfCode::AlreadyExists | TfCode::Aborted => StatusCode::CONFLICT,
        TfCode::PermissionDenied => StatusCode::FORBIDDEN,
        TfCode::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        TfCode::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        TfCode::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        TfCode::Unauthenticated => StatusCode::UNAUTHORIZED,
        TfCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// `{"error": message}` with the given status.
pub fn error_response(status: StatusCode, message: &str) -> HttpResponse {
    let mut body = Vec::with_capacity(message.len() + 16);
    body.extend_from_slice(b"{\"error\":");
    crate::codec::encode::write_str(&mut body, message);
    body.push(b'}');
    let mut response = HttpResponse::build(status);
    response.content_type("application/json");
    if status == StatusCode::SERVICE_UNAVAILABLE {
        response.insert_header(("Retry-After", "1"));
    }
    if status == StatusCode::UNAUTHORIZED {
        response.insert_header(("WWW-Authenticate", "Basic realm=\"tfserve\""));
    }
    response.body(body)
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
            (CodecError::invalid("x").into(), 400),
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
                    code: TfCode::InvalidArgument,
                    message: "bad".into(),
                }
                .into(),
                400,
            ),
            (
                RuntimeError::Run {
                    code: TfCode::ResourceExhausted,
                    message: "oom".into(),
                }
                .into(),
                429,
            ),
            (ApiError::SignatureNotFound("s".into()), 404),
            (RegistryError::UnknownLabel("nope".into()).into(), 400),
            (ApiError::PayloadTooLarge { limit: 1, got: Some(2) }, 413),
            (ApiError::Timeout(5), 504),
            (ApiError::Internal("join".into()), 500),
            (ApiError::Overloaded(4096), 503),
            (ApiError::Unauthorized, 401),
            (ApiError::NotReady("loading".into()), 503),
            (ApiError::PingFailed("m".into()), 502),
        ];
        for (error, status) in cases {
            assert_eq!(error.status().as_u16(), status, "{error}");
        }
    }
}
