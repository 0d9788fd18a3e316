//! The SageMaker TensorFlow Serving container's refusals, in its words
//! (its `tensorflowServing.js` and multi-model routes), each with its code.

use crate::error::ApiError;
use crate::status::{Code, HasCode};

#[derive(Debug, thiserror::Error)]
pub enum SageMakerError {
    /// A custom attribute that fails the container's check (`invalid tfs-model-name`, ...).
    #[error("invalid {0}")]
    InvalidAttribute(&'static str),
    #[error("tfs-model-version must be a version number, got '{0}'")]
    NotAVersion(String),
    #[error("tfs-method must be predict, classify or regress, got '{0}'")]
    UnknownMethod(String),
    #[error("image requests support tfs-method=predict only, got '{0}'")]
    ImageMethod(String),
    #[error("missing '{0}' in the body")]
    MissingField(&'static str),
    #[error(
        "model_name must be 1 to 255 letters, digits, '.', '_' or '-', starting with a letter or digit; got '{0}'"
    )]
    InvalidModelName(String),
    #[error("Model {0} is not loaded yet.")]
    NotLoaded(String),
    #[error("Model {0} is already loaded.")]
    AlreadyLoaded(String),
}

impl HasCode for SageMakerError {
    fn code(&self) -> Code {
        match self {
            SageMakerError::NotLoaded(_) => Code::NotFound,
            SageMakerError::AlreadyLoaded(_) => Code::AlreadyExists,
            _ => Code::InvalidArgument,
        }
    }
}

impl From<SageMakerError> for ApiError {
    fn from(error: SageMakerError) -> ApiError {
        ApiError::Request(Box::new(error))
    }
}
