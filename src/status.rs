//! What went wrong, as one code: the [`Code`] every layer's error names
//! through [`HasCode`], and the one table from codes to HTTP statuses and
//! gRPC codes. It imports no other module of the crate, so every layer can
//! use it.

use actix_web::http::StatusCode;

/// What went wrong, in TF Serving's (gRPC's) canonical codes plus the few
/// answers only HTTP has. TensorFlow's own status codes map onto the first
/// fourteen one to one.
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
    /// A known path asked with a method it does not take.
    MethodNotAllowed,
    /// A status an `inference.py` handler chose itself.
    Handler(u16),
    /// A session run out of memory (a GPU's, usually): RESOURCE_EXHAUSTED
    /// over gRPC as TF Serving answers, but 503 with Retry-After over HTTP
    /// rather than TF Serving's 429, since the server, not the client, is
    /// short and a retry (here or on another replica) can succeed.
    OutOfMemory,
}

/// An error that knows its code; each layer implements it beside its error type.
pub trait HasCode {
    fn code(&self) -> Code;
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
        Code::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
        Code::Handler(status) => custom(status, StatusCode::INTERNAL_SERVER_ERROR),
        Code::OutOfMemory => StatusCode::SERVICE_UNAVAILABLE,
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
        Code::Unimplemented | Code::MethodNotAllowed => G::Unimplemented,
        Code::Internal | Code::Handler(_) => G::Internal,
        Code::Unavailable | Code::BadGateway => G::Unavailable,
        Code::Unauthenticated => G::Unauthenticated,
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
            (Code::MethodNotAllowed, 405),
            (Code::Handler(418), 418),
            (Code::Handler(99), 500),
            (Code::OutOfMemory, 503),
        ];
        for (code, status) in table {
            assert_eq!(http_status(code).as_u16(), status, "{code:?}");
        }
    }
}
