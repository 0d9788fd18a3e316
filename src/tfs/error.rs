//! TF Serving's refusals, in its words, for its REST and gRPC dialects
//! alike: malformed routes, inputs that do not match a signature, and the
//! checks classify, regress and MultiInference make on a signature.

use crate::error::ApiError;
use crate::status::{Code, HasCode};

#[derive(Debug, thiserror::Error)]
pub enum TfsError {
    #[error("Malformed request: {method} {path}")]
    MalformedRequest { method: String, path: String },
    #[error("Missing model name in request.")]
    MissingModelName,
    #[error("Missing ModelSpec")]
    MissingModelSpec,
    #[error("ModelSpec has no name specified.")]
    EmptyModelName,
    #[error("Tasks is empty")]
    NoTasks,
    #[error("Found ModelSpec with an empty model name.")]
    TaskWithoutModel,
    #[error("All ModelSpecs in a MultiInferenceRequest must access the same model name.")]
    TasksOnManyModels,
    #[error("Input is empty.")]
    NoExamples,
    /// Classify's and Regress's wording for an unknown signature (`GetClassificationSignatureDef`).
    #[error("No signature was found with the name: {0}")]
    NoSignatureNamed(String),
    #[error("Requested signature not found in model graph: {0}")]
    SignatureNotInGraph(String),
    #[error("Duplicate evaluation of signature: {0}")]
    DuplicateSignature(String),
    #[error("Unsupported signature method_name: {0}")]
    UnsupportedMethod(String),
    #[error("Expected {kind} signature method_name to be {method}. Was: {was}")]
    MethodName {
        kind: &'static str,
        method: String,
        was: String,
    },
    #[error("Expected one input Tensor. Signature '{signature}' of the {kind} request has inputs: {inputs}")]
    NotOneInput {
        signature: String,
        kind: &'static str,
        inputs: String,
    },
    #[error(
        "No {kind} inputs found in SignatureDef '{signature}': classify and regress feed serialized tf.Examples \
         to one string input keyed 'inputs', and its input is '{input}' ({dtype})"
    )]
    NoExamplesInput {
        kind: &'static str,
        signature: String,
        input: String,
        dtype: String,
    },
    #[error(
        "Expected classification signature outputs to contain at least one of \"classes\" or \"scores\". \
         Signature '{signature}' has outputs: {outputs}"
    )]
    NoClassifyOutputs { signature: String, outputs: String },
    #[error("Expected classes Tensor of DT_STRING. Got: {0}")]
    ClassesDtype(String),
    #[error("Expected scores Tensor of DT_FLOAT. Got: {0}")]
    ScoresDtype(String),
    #[error("No regression outputs found in SignatureDef '{signature}': expected an output named 'outputs', found: {outputs}")]
    NoRegressOutputs { signature: String, outputs: String },
    #[error("Expected output Tensor of DT_FLOAT. Got: {0}")]
    RegressDtype(String),
    #[error("Expected output Tensor shape to be either [batch_size] or [batch_size, 1] but got {0:?}")]
    RegressShape(Vec<usize>),
    #[error(
        "input size does not match signature: {sent}!={expected} len({{{sent_names}}}) != len({{{expected_names}}}). \
         Sent extra: {{{extra}}}. Missing but required: {{{missing}}}."
    )]
    InputsMismatch {
        sent: usize,
        expected: usize,
        sent_names: String,
        expected_names: String,
        extra: String,
        missing: String,
    },
    /// TensorFlow's own words for a feed of the wrong type, as TF Serving passes them on.
    #[error("Expects arg[{index}] to be {want} but {got} is provided")]
    ArgDtype { index: usize, want: String, got: String },
    #[error("output tensor alias not found in signature: {alias} Outputs expected to be in the set {{{known}}}.")]
    UnknownOutputAlias { alias: String, known: String },
    #[error("duplicate output tensor alias: {0}")]
    DuplicateOutputAlias(String),
    #[error("Metadata field {0} is not supported")]
    MetadataField(String),
    #[error("model {model}: model_platform {platform} is not served (only tensorflow)")]
    ModelPlatform { model: String, platform: String },
}

impl HasCode for TfsError {
    fn code(&self) -> Code {
        match self {
            TfsError::UnsupportedMethod(_) => Code::Unimplemented,
            _ => Code::InvalidArgument,
        }
    }
}

impl From<TfsError> for ApiError {
    fn from(error: TfsError) -> ApiError {
        ApiError::Request(Box::new(error))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_answer_tf_servings_statuses() {
        let cases: Vec<(ApiError, u16)> = vec![
            (TfsError::UnsupportedMethod("s".into()).into(), 501),
            (TfsError::NoTasks.into(), 400),
        ];
        for (error, status) in cases {
            assert_eq!(error.status().as_u16(), status, "{error}");
        }
    }
}
