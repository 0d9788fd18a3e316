//! Conversions between request payloads and typed tensors: TF Serving's JSON
//! request layouts in, JSON responses out, `tf.Example` building for
//! classify/regress and their results as protos, and `TensorProto`s both ways.

pub mod decode;
pub mod encode;
pub mod example;
pub mod nonfinite;
pub mod payload;
pub mod results;
#[cfg(test)]
mod roundtrip_tests;
mod shape;
pub mod tensor_proto;

pub use decode::{PredictEnvelope, RequestFormat};

use crate::status::{Code, HasCode};

/// A request body that cannot become tensors, or outputs that cannot become JSON.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CodecError {
    /// The body is not valid JSON.
    #[error("JSON Parse error: {0}")]
    JsonParse(String),
    /// Valid JSON whose content does not fit the signature.
    #[error("{0}")]
    Invalid(String),
    /// A dtype JSON cannot carry (half, bfloat16, complex, ...).
    #[error("{0}")]
    Unimplemented(String),
}

impl HasCode for CodecError {
    fn code(&self) -> Code {
        match self {
            CodecError::JsonParse(_) | CodecError::Invalid(_) => Code::InvalidArgument,
            CodecError::Unimplemented(_) => Code::Unimplemented,
        }
    }
}

impl CodecError {
    pub fn invalid(message: impl Into<String>) -> Self {
        CodecError::Invalid(message.into())
    }

    pub fn json_parse(err: &serde_json::Error) -> Self {
        CodecError::JsonParse(err.to_string())
    }
}
