//! The TensorFlow runtime boundary: loading SavedModels and running signatures.
//! TensorFlow types never leave this module; callers see `Tensor` and
//! `SignatureSpec`.

mod bytes;
mod graph_trace;
mod session_config;
mod tf;

pub use session_config::SessionConfig;
pub use tf::{load_op_library, LoadedModel};

/// TensorFlow's status codes, as far as callers need to tell them apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusCode {
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
    Unavailable,
    Unauthenticated,
    Internal,
}

#[derive(Clone, Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("failed to load SavedModel from {path}: {message}")]
    Load { path: String, message: String },
    #[error("{message}")]
    Run { code: StatusCode, message: String },
    #[error("signature '{0}' is not loaded")]
    UnknownSignature(String),
}
