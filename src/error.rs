//! The request-level error type and the one table that maps every layer's
//! errors to HTTP status codes and `{"error": "..."}` bodies.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};

use crate::batcher::BatchError;
use crate::codec::payload::ConvertError;
use crate::codec::CodecError;
use crate::python_handlers::HandlerError;
use crate::registry::RegistryError;
use crate::runtime::{RuntimeError, StatusCode as TfCode};

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
    #[error("{0}")]
    Unimplemented(String),
    /// A request the route or method cannot carry (`Malformed request: ...`).
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    NotFound(String),
    #[error("request body{} exceeds the limit of {limit} bytes (max_request_bytes)", got.map(|g| format!(" of {g} bytes")).unwrap_or_default())]
    PayloadTooLarge { limit: usize, got: Option<usize> },
    #[error("request timed out after {0} ms (rest_api_timeout_in_ms)")]
    Timeout(u64),
    #[error("the request body did not arrive within {0} ms (client_body_timeout_ms)")]
    BodyTimeout(u64),
    #[error("the client closed the connection before the answer was ready")]
    ClientGone,
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    InsufficientStorage(String),
    #[error(transparent)]
    Convert(#[from] crate::codec::payload::ConvertError),
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
    #[error("server busy: request bodies being handled would pass {0} bytes (max_in_flight_bytes); retry later")]
    BodiesOverBudget(usize),
    /// The server's own failure, not the request's.
    #[error("{0}")]
    Internal(String),
}

/// What went wrong, in TF Serving's (gRPC's) canonical codes plus the few
/// answers only HTTP has. Every layer's error names its code; [`http_status`]
/// is the one place codes become statuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    Cancelled,
    InvalidArgument,
    DeadlineExceeded,
    NotFound,
    AlreadyExists,
    PermissionDenied,
    ResourceExhausted,
    FailedPrecondition,
    Aborted,
    OutOfRange,
    Unimplemented,
    Internal,
    Unavailable,
    Unauthenticated,
    /// The body is over `max_request_bytes`.
    PayloadTooLarge,
    /// A SageMaker body of a content type the container does not take.
    UnsupportedMediaType,
    /// SageMaker's `/ping` with its default model unavailable (the container's nginx answers 502).
    BadGateway,
    /// `--max_models` reached.
    InsufficientStorage,
    /// The client took too long to send its request.
    RequestTimeout,
    /// A status an `inference.py` handler chose itself.
    Handler(u16),
    /// A session run out of memory (a GPU's, usually): RESOURCE_EXHAUSTED
    /// over gRPC as TF Serving answers, but 503 with Retry-After over HTTP
    /// rather than TF Serving's 429, since the server, not the client, is
    /// short and a retry (here or on another replica) can succeed.
    OutOfMemory,
}

/// TF Serving's `ToHTTPStatusCode`, extended with the HTTP-only codes.
pub fn http_status(code: Code) -> StatusCode {
    let custom = |status: u16, fallback: StatusCode| StatusCode::from_u16(status).unwrap_or(fallback);
    match code {
        Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => StatusCode::BAD_REQUEST,
        // nginx's "client closed request"; nobody reads it, but logs and metrics do.
        Code::Cancelled => custom(499, StatusCode::BAD_REQUEST),
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::AlreadyExists | Code::Aborted => StatusCode::CONFLICT,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        Code::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        Code::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        Code::BadGateway => StatusCode::BAD_GATEWAY,
        Code::InsufficientStorage => StatusCode::INSUFFICIENT_STORAGE,
        Code::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
        Code::Handler(status) => custom(status, StatusCode::INTERNAL_SERVER_ERROR),
        Code::OutOfMemory => StatusCode::SERVICE_UNAVAILABLE,
    }
}

impl From<TfCode> for Code {
    fn from(code: TfCode) -> Code {
        match code {
            TfCode::Cancelled => Code::Cancelled,
            TfCode::InvalidArgument => Code::InvalidArgument,
            TfCode::DeadlineExceeded => Code::DeadlineExceeded,
            TfCode::NotFound => Code::NotFound,
            TfCode::AlreadyExists => Code::AlreadyExists,
            TfCode::PermissionDenied => Code::PermissionDenied,
            TfCode::ResourceExhausted => Code::ResourceExhausted,
            TfCode::FailedPrecondition => Code::FailedPrecondition,
            TfCode::Aborted => Code::Aborted,
            TfCode::OutOfRange => Code::OutOfRange,
            TfCode::Unimplemented => Code::Unimplemented,
            TfCode::Unavailable => Code::Unavailable,
            TfCode::Unauthenticated => Code::Unauthenticated,
            TfCode::Internal => Code::Internal,
        }
    }
}

/// TF Serving's gRPC code for each; the HTTP-only codes take the nearest.
pub fn grpc_code(code: Code) -> tonic::Code {
    use tonic::Code as G;
    match code {
        Code::Cancelled => G::Cancelled,
        Code::RequestTimeout => G::DeadlineExceeded,
        Code::InvalidArgument | Code::UnsupportedMediaType => G::InvalidArgument,
        Code::DeadlineExceeded => G::DeadlineExceeded,
        Code::NotFound => G::NotFound,
        Code::AlreadyExists => G::AlreadyExists,
        Code::PermissionDenied => G::PermissionDenied,
        Code::ResourceExhausted | Code::PayloadTooLarge | Code::InsufficientStorage | Code::OutOfMemory => {
            G::ResourceExhausted
        }
        Code::FailedPrecondition => G::FailedPrecondition,
        Code::Aborted => G::Aborted,
        Code::OutOfRange => G::OutOfRange,
        Code::Unimplemented => G::Unimplemented,
        Code::Internal | Code::Handler(_) => G::Internal,
        Code::Unavailable | Code::BadGateway => G::Unavailable,
        Code::Unauthenticated => G::Unauthenticated,
    }
}

impl CodecError {
    pub fn code(&self) -> Code {
        match self {
            CodecError::JsonParse(_) | CodecError::Invalid(_) => Code::InvalidArgument,
            CodecError::Unimplemented(_) => Code::Unimplemented,
        }
    }
}

impl RuntimeError {
    pub fn code(&self) -> Code {
        match self {
            RuntimeError::Run {
                code: TfCode::ResourceExhausted,
                ..
            } => Code::OutOfMemory,
            RuntimeError::Run { code, .. } => (*code).into(),
            RuntimeError::UnknownSignature(_) => Code::NotFound,
            RuntimeError::Load { .. } => Code::Internal,
        }
    }
}

impl RegistryError {
    pub fn code(&self) -> Code {
        match self {
            RegistryError::NotFound(_) | RegistryError::UnknownModel(_) => Code::NotFound,
            // TF Serving's InvalidArgument: a label is checked like the rest of the request.
            RegistryError::UnknownLabel(_) | RegistryError::LoadFailed { .. } => Code::InvalidArgument,
            RegistryError::BadBasePath { .. } | RegistryError::LabelTarget { .. } => Code::Internal,
            RegistryError::AlreadyLoaded(_) => Code::AlreadyExists,
        }
    }
}

impl BatchError {
    pub fn code(&self) -> Code {
        match self {
            BatchError::QueueFull { .. } | BatchError::ShuttingDown => Code::Unavailable,
            BatchError::TooLarge { .. } | BatchError::Inputs(_) => Code::InvalidArgument,
            BatchError::Run(error) => error.code(),
            BatchError::Split(_) => Code::Internal,
        }
    }
}

impl ConvertError {
    pub fn code(&self) -> Code {
        match self {
            ConvertError::UnsupportedMediaType(_) => Code::UnsupportedMediaType,
            ConvertError::Invalid(_) => Code::InvalidArgument,
        }
    }
}

impl HandlerError {
    pub fn code(&self) -> Code {
        match self {
            HandlerError::Raised { status, .. } => Code::Handler(*status),
            HandlerError::Load { .. } => Code::Internal,
            HandlerError::QueueFull(_) | HandlerError::Stopped => Code::Unavailable,
            HandlerError::Timeout(_) => Code::DeadlineExceeded,
        }
    }
}

impl crate::python_handlers::StepError for ApiError {
    fn status_code(&self) -> u16 {
        self.status().as_u16()
    }
}

impl ApiError {
    pub fn code(&self) -> Code {
        match self {
            ApiError::Codec(e) => e.code(),
            ApiError::Runtime(e) => e.code(),
            ApiError::Registry(e) => e.code(),
            ApiError::Batch(e) => e.code(),
            ApiError::Convert(e) => e.code(),
            ApiError::Handler(e) => e.code(),
            ApiError::Image(_) | ApiError::BadRequest(_) => Code::InvalidArgument,
            // TF Serving's REST API: InvalidArgument (400), from GetInfoMap.
            ApiError::SignatureNotFound(_) => Code::InvalidArgument,
            ApiError::SignatureKeyNotFound(_) => Code::FailedPrecondition,
            ApiError::Unimplemented(_) => Code::Unimplemented,
            ApiError::NotFound(_) => Code::NotFound,
            ApiError::Forbidden(_) => Code::PermissionDenied,
            ApiError::Conflict(_) => Code::AlreadyExists,
            ApiError::InsufficientStorage(_) => Code::InsufficientStorage,
            ApiError::PayloadTooLarge { .. } => Code::PayloadTooLarge,
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

/// The text a panic was raised with, when it is one (`panic!` with a
/// literal or a formatted message).
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_its_status() {
        let table = [
            (Code::Cancelled, 499),
            (Code::InvalidArgument, 400),
            (Code::DeadlineExceeded, 504),
            (Code::NotFound, 404),
            (Code::AlreadyExists, 409),
            (Code::PermissionDenied, 403),
            (Code::ResourceExhausted, 429),
            (Code::FailedPrecondition, 400),
            (Code::Aborted, 409),
            (Code::OutOfRange, 400),
            (Code::Unimplemented, 501),
            (Code::Internal, 500),
            (Code::Unavailable, 503),
            (Code::Unauthenticated, 401),
            (Code::PayloadTooLarge, 413),
            (Code::UnsupportedMediaType, 415),
            (Code::BadGateway, 502),
            (Code::InsufficientStorage, 507),
            (Code::RequestTimeout, 408),
            (Code::Handler(418), 418),
            (Code::Handler(99), 500),
            (Code::OutOfMemory, 503),
        ];
        for (code, status) in table {
            assert_eq!(http_status(code).as_u16(), status, "{code:?}");
        }
    }

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
                    message: "OOM when allocating tensor with shape[128,64,112,112]".into(),
                }
                .into(),
                503,
            ),
            (ApiError::SignatureNotFound("s".into()), 400),
            (ApiError::SignatureKeyNotFound("s".into()), 400),
            (ApiError::Unimplemented("s".into()), 501),
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
