//! The Open Inference Protocol's refusals, each in the words KServe's and
//! Triton's servers answer with, and each with its code.

use crate::error::ApiError;
use crate::status::{Code, HasCode};

#[derive(Debug, thiserror::Error)]
pub enum OipError {
    #[error("model version '{0}' is not a version number")]
    NotAVersion(String),
    #[error("Model with name {0} does not exist.")]
    UnknownModel(String),
    #[error("input '{input}': shape {shape:?} has a negative dimension")]
    NegativeDimension { input: String, shape: Vec<i64> },
    #[error("input '{input}': shape {shape:?} has too many elements")]
    TooManyElements { input: String, shape: Vec<i64> },
    #[error("input '{input}': shape {shape:?} needs {want} elements, got {got}")]
    ElementCount {
        input: String,
        shape: Vec<i64>,
        want: usize,
        got: usize,
    },
    #[error("input '{input}': invalid datatype '{datatype}'")]
    InvalidDatatype { input: String, datatype: String },
    #[error("input '{input}': datatype {datatype} is not supported")]
    UnsupportedDatatype { input: String, datatype: &'static str },
    #[error("input '{input}': {value} is out of range for {datatype}")]
    OutOfRange {
        input: String,
        value: String,
        datatype: String,
    },
    #[error("input '{input}' has no data")]
    NoData { input: String },
    #[error("unexpected inference input '{input}' for model '{model}'; its inputs are: {known}")]
    UnknownInput {
        input: String,
        model: String,
        known: String,
    },
    #[error("input '{input}': datatype {got} does not match the model's {want}")]
    DatatypeMismatch {
        input: String,
        got: &'static str,
        want: &'static str,
    },
    #[error("input '{0}' is given twice")]
    DuplicateInput(String),
    #[error("expected {expected} inputs for model '{model}' but got fewer: input '{missing}' is missing")]
    MissingInput {
        expected: usize,
        model: String,
        missing: String,
    },
    /// Triton's core (`InferenceRequest::AddOriginalRequestedOutput`).
    #[error("output '{0}' already exists in request")]
    DuplicateOutput(String),
    #[error("unexpected inference output '{output}' for model '{model}'")]
    UnknownOutput { output: String, model: String },
    #[error("{header} must be a byte count")]
    HeaderNotByteCount { header: &'static str },
    #[error("{header} is {length}, more than the {body} bytes of the body")]
    HeaderPastBody {
        header: &'static str,
        length: usize,
        body: usize,
    },
    #[error("input '{input}': binary_data_size must be a byte count")]
    BinarySizeNotByteCount { input: String },
    #[error("input '{input}': binary_data_size {size} is more than the {left} binary bytes left")]
    BinarySizePastBody { input: String, size: usize, left: usize },
    #[error("Raw request must only have 1 input (found 1) to be deduced but got {inputs} inputs in '{model}' model configuration")]
    RawInputCount { inputs: usize, model: String },
    #[error("raw input '{input}': {bytes} bytes is not a whole number of {datatype} elements")]
    RawByteCount {
        input: String,
        bytes: usize,
        datatype: &'static str,
    },
    #[error("The shape of the raw input '{input}' can not be deduced because there are more than one variable-sized dimension")]
    RawShapeAmbiguous { input: String },
    #[error("expected {inputs} raw_input_contents, one per input, got {got}")]
    RawContentsCount { inputs: usize, got: usize },
    /// Triton's words (`infer_handler.cc`); KServe refuses the same request.
    #[error("contents field must not be specified when using raw_input_contents for '{input}' for model '{model}'")]
    ContentsBesideRaw { input: String, model: String },
    #[error("invalid model name '{0}'")]
    InvalidModelName(String),
    #[error("failed to load '{0}': no directory named so in the model repository")]
    NotInRepository(String),
    #[error("failed to unload '{0}': the model is not loaded")]
    NotLoaded(String),
}

impl HasCode for OipError {
    fn code(&self) -> Code {
        match self {
            OipError::UnknownModel(_) | OipError::NotInRepository(_) | OipError::NotLoaded(_) => Code::NotFound,
            _ => Code::InvalidArgument,
        }
    }
}

impl From<OipError> for ApiError {
    fn from(error: OipError) -> ApiError {
        ApiError::Request(Box::new(error))
    }
}
