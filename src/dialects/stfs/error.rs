//! Simple TensorFlow Serving's refusals, in its words where it has them,
//! each with its code.

use crate::error::ApiError;
use crate::status::{Code, HasCode};

#[derive(Debug, thiserror::Error)]
pub enum StfsError {
    #[error("Invalid json data: {0}")]
    InvalidJson(serde_json::Error),
    #[error("Inference with empty data: the body has no 'data' object")]
    NoData,
    #[error("Invalid model name: {model}, available models: [{available}]")]
    UnknownModel { model: String, available: String },
    #[error("model_version must be a version number, got {0}")]
    NotAVersion(String),
    #[error(
        "base64_decode: signature '{signature}' has {strings} string inputs and none is {tensor}; \
         send bytes as {{\"b64\": ...}} objects instead"
    )]
    Base64Input {
        signature: String,
        strings: usize,
        tensor: &'static str,
    },
    #[error("base64_decode: element {element} of input '{input}' is not base64 text ({bytes} bytes)")]
    NotBase64 {
        element: usize,
        input: String,
        bytes: usize,
    },
    #[error("invalid multipart/form-data body: {0}")]
    Multipart(String),
    #[error("failed to read form field '{field}': {reason}")]
    FormField { field: String, reason: String },
    #[error("form field '{0}' carries a file; send image files as 'image' or 'images'")]
    FileField(String),
    #[error("form field '{0}' is not UTF-8 text")]
    NotText(String),
    #[error("language '{language}' is not supported; use one of: {supported}")]
    ClientLanguage { language: String, supported: String },
}

impl HasCode for StfsError {
    fn code(&self) -> Code {
        match self {
            StfsError::UnknownModel { .. } => Code::NotFound,
            _ => Code::InvalidArgument,
        }
    }
}

impl From<StfsError> for ApiError {
    fn from(error: StfsError) -> ApiError {
        ApiError::Request(Box::new(error))
    }
}
