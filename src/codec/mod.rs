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

/// A request body that cannot become tensors, or outputs that cannot become
/// JSON. Each kind is its own variant; the texts are TF Serving's where it
/// answers the same request.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CodecError {
    /// The body is not valid JSON.
    #[error("JSON Parse error: {0}")]
    JsonParse(String),

    // The request's layout.
    #[error("Not both of 'instances' and 'inputs' can be specified in the request body")]
    BothLayouts,
    #[error("Missing 'inputs' or 'instances' key in the request body")]
    NoLayout,
    #[error("No values in 'instances' array")]
    NoInstances,
    #[error("Missing named input: {0} in 'inputs' object")]
    MissingInput(String),
    #[error("signature '{0}' has no inputs")]
    NoSignatureInputs(String),
    #[error(
        "instances is a plain list, but expecting list of objects as multiple input tensors required as per tensorinfo_map (inputs: {0})"
    )]
    PlainListForInputs(String),
    #[error("Expecting object but got list at item {0} of input list")]
    ListForObject(usize),
    #[error("Expecting value/list but got object at item {0} of input list")]
    ObjectForList(usize),
    /// An element of `instances` that failed, with why.
    #[error("Failed to process element: {index} of 'instances' list. Error: {inner}")]
    Element { index: usize, inner: Box<CodecError> },
    /// Nested lists whose lengths disagree.
    #[error("ragged nested lists: dimension {depth} has length {len} here but {expected} elsewhere")]
    Ragged { depth: usize, len: usize, expected: usize },
    #[error("a list appears at nesting depth {depth} where other elements have scalars (rank {rank})")]
    ListPastRank { depth: usize, rank: usize },
    #[error("a scalar appears at nesting depth {0} where other elements are lists")]
    ScalarAmongLists(usize),
    #[error("mismatched nesting: a scalar at depth {depth} where others are at depth {rank}")]
    ScalarDepth { depth: usize, rank: usize },
    /// A value of one input that its tensor cannot hold (its type, its range,
    /// its nesting), in the decoder's words.
    #[error("input '{input}': {detail}")]
    InputValue { input: String, detail: String },

    // `TensorProto`s.
    #[error("input '{input}': shape {shape:?} has too many elements")]
    TooManyElements { input: String, shape: Vec<usize> },
    #[error("input '{0}': a request tensor must have a known shape")]
    UnknownRank(String),
    #[error("input '{input}': dimension size {size} is negative")]
    NegativeDimension { input: String, size: i64 },
    #[error("input '{0}': string tensors cannot use tensor_content; send string_val")]
    StringContent(String),
    #[error("input '{input}': tensor_content holds {got} bytes, but {elements} {dtype} elements take {needed}")]
    ContentLength {
        input: String,
        got: usize,
        elements: usize,
        dtype: crate::tensor::DType,
        needed: usize,
    },
    #[error("input '{input}': {field} holds {got} values, more than the {elements} its shape has")]
    TooManyValues {
        input: String,
        field: &'static str,
        got: usize,
        elements: usize,
    },
    #[error("input '{input}': int_val {value} is out of range for {dtype}")]
    IntOutOfRange {
        input: String,
        value: i32,
        dtype: crate::tensor::DType,
    },

    // CSV bodies.
    #[error("CSV line {line}: {detail}")]
    CsvRecord { line: usize, detail: String },
    #[error(
        "CSV line {line}: instances must all have the same shape, but this line has {this} and earlier ones {earlier}"
    )]
    CsvRagged { line: usize, this: String, earlier: String },
    #[error("the CSV body has no lines")]
    CsvEmpty,

    // `tf.Example`s for classify and regress.
    #[error("Missing 'examples' key in the request body")]
    MissingExamples,
    #[error("'examples' array is empty")]
    NoExamples,
    #[error("'examples' must be an array of objects")]
    ExamplesNotArray,
    #[error("'context' must be an object of features")]
    ContextNotObject,
    #[error("element {0} of 'examples' must be an object of features")]
    ExampleNotObject(usize),
    #[error("feature '{feature}' appears in both 'context' and examples[{index}]")]
    FeatureTwice { feature: String, index: usize },
    #[error("feature {0}: integer out of int64 range")]
    FeatureOutOfRange(String),
    #[error("feature {place}: values must be all numbers, or all strings / {{\"b64\": ...}} objects, got {value}")]
    FeatureMixed { place: String, value: String },

    // Outputs that cannot become an answer.
    #[error("Tensor name: {0} has no shape information")]
    OutputNoShape(String),
    #[error("Tensor name: {name} has inconsistent batch size: {size} expecting: {expected}")]
    OutputBatch { name: String, size: usize, expected: usize },
    #[error("classification outputs must have shape [batch_size, num_classes], got {0:?}")]
    ClassificationShape(Vec<usize>),
    #[error("classification outputs disagree: classes {classes:?} vs scores {scores:?}")]
    ClassificationMismatch { classes: Vec<usize>, scores: Vec<usize> },
    #[error("classification output '{key}' must be {expected} tensor, got {got}")]
    ClassificationType {
        key: String,
        expected: &'static str,
        got: crate::tensor::DType,
    },
    #[error("regression output 'outputs' must be a float tensor, got {0}")]
    RegressionType(crate::tensor::DType),
    #[error("Expected output Tensor shape to be either [batch_size] or [batch_size, 1] but got {0:?}")]
    RegressionShape(Vec<usize>),

    /// A dtype JSON cannot carry (half, bfloat16, complex, ...).
    #[error("{0}")]
    Unimplemented(String),
}

impl HasCode for CodecError {
    fn code(&self) -> Code {
        match self {
            CodecError::Unimplemented(_) => Code::Unimplemented,
            _ => Code::InvalidArgument,
        }
    }
}

impl CodecError {
    pub fn json_parse(err: &serde_json::Error) -> Self {
        CodecError::JsonParse(err.to_string())
    }
}
