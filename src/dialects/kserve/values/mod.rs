//! Tensor elements in the Open Inference Protocol's forms: raw little-endian
//! bytes (BYTES as 4-byte-length-prefixed elements) in `raw`, and JSON `data`
//! arrays (nested or flat) read straight into typed buffers in `json`.

mod json;
mod raw;

pub use json::{from_json, write_json};
pub use raw::{from_le_bytes, to_le_bytes};

use crate::error::ApiError;
use crate::tensor::DType;

/// An input's elements that do not fit its datatype and shape.
#[derive(Debug, thiserror::Error)]
pub enum ValuesError {
    #[error(
        "input '{input}': {got} bytes of data, but its shape needs {elements} {datatype} elements ({needed} bytes)"
    )]
    RawLength {
        input: String,
        got: usize,
        elements: usize,
        datatype: &'static str,
        needed: usize,
    },
    #[error("input '{input}': {got} bytes of FP16 data, but its shape needs {elements} elements")]
    HalfLength { input: String, got: usize, elements: usize },
    #[error("input '{input}': {got} bytes of BOOL data, but its shape needs {elements}")]
    BoolLength { input: String, got: usize, elements: usize },
    #[error("input '{input}': BYTES data is truncated at element {index}")]
    BytesTruncated { input: String, index: usize },
    #[error("input '{input}': {got} BYTES elements, but its shape needs {elements}")]
    BytesCount { input: String, got: usize, elements: usize },
    #[error("input '{input}': datatype {datatype} is not supported")]
    Unsupported { input: String, datatype: &'static str },
    #[error("input '{input}': data: {detail}")]
    Data { input: String, detail: String },
}

impl From<ValuesError> for ApiError {
    fn from(error: ValuesError) -> ApiError {
        ApiError::BadRequest(error.to_string())
    }
}

fn unsupported(name: &str, dtype: DType) -> ApiError {
    ValuesError::Unsupported {
        input: name.to_string(),
        datatype: super::datatype(dtype),
    }
    .into()
}
