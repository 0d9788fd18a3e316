//! Signature descriptions (inputs, outputs, dtypes, shapes) as read from a
//! SavedModel's MetaGraphDef, independent of TensorFlow types.

use crate::tensor::DType;

/// The signature TF Serving uses when a request names none.
pub const DEFAULT_SIGNATURE: &str = "serving_default";
/// TF2 SavedModels carry this signature_def; it initialises the model and is not servable.
pub const INIT_OP_SIGNATURE: &str = "__saved_model_init_op";

pub const PREDICT_METHOD: &str = "tensorflow/serving/predict";
pub const CLASSIFY_METHOD: &str = "tensorflow/serving/classify";
pub const REGRESS_METHOD: &str = "tensorflow/serving/regress";

/// One named input or output of a signature.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorSpec {
    /// The key in the signature's input or output map (what clients use).
    pub key: String,
    /// The graph tensor, `op_name:index`.
    pub tensor_name: String,
    pub dtype: DType,
    /// `None` when the rank is unknown; `-1` marks an unknown dimension.
    pub shape: Option<Vec<i64>>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct SignatureSpec {
    pub name: String,
    pub method_name: String,
    /// Sorted by key, so that error messages and outputs are deterministic.
    pub inputs: Vec<TensorSpec>,
    pub outputs: Vec<TensorSpec>,
    /// String inputs whose values the graph runs through `DecodeBase64`, so
    /// they take URL-safe base64 text rather than raw bytes.
    pub base64_inputs: Vec<String>,
}

impl SignatureSpec {
    /// A predict signature `serving_default` of these inputs (shapes
    /// unknown, sorted by key) and no outputs, for tests.
    #[cfg(test)]
    pub fn of_inputs(inputs: &[(&str, DType)]) -> SignatureSpec {
        let mut signature = SignatureSpec {
            name: DEFAULT_SIGNATURE.into(),
            method_name: PREDICT_METHOD.into(),
            inputs: inputs
                .iter()
                .map(|(key, dtype)| TensorSpec {
                    key: key.to_string(),
                    tensor_name: format!("{key}:0"),
                    dtype: *dtype,
                    shape: None,
                })
                .collect(),
            outputs: Vec::new(),
            base64_inputs: Vec::new(),
        };
        signature.sort();
        signature
    }

    pub fn input(&self, key: &str) -> Option<&TensorSpec> {
        self.inputs.iter().find(|spec| spec.key == key)
    }

    pub fn input_index(&self, key: &str) -> Option<usize> {
        self.inputs.iter().position(|spec| spec.key == key)
    }

    /// The input keys joined with commas, for error messages.
    pub fn input_names(&self) -> String {
        self.inputs.iter().map(|s| s.key.as_str()).collect::<Vec<_>>().join(",")
    }

    pub fn output_names(&self) -> String {
        self.outputs
            .iter()
            .map(|s| s.key.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn sort(&mut self) {
        self.inputs.sort_by(|a, b| a.key.cmp(&b.key));
        self.outputs.sort_by(|a, b| a.key.cmp(&b.key));
    }
}

/// Splits a graph tensor name `op:1` into the operation name and output index
/// (`op` alone means index 0).
pub fn split_tensor_name(tensor_name: &str) -> (&str, i32) {
    match tensor_name.rsplit_once(':') {
        Some((op, index)) => match index.parse() {
            Ok(index) => (op, index),
            Err(_) => (tensor_name, 0),
        },
        None => (tensor_name, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_tensor_names() {
        assert_eq!(split_tensor_name("serving_default_x:0"), ("serving_default_x", 0));
        assert_eq!(
            split_tensor_name("StatefulPartitionedCall:2"),
            ("StatefulPartitionedCall", 2)
        );
        assert_eq!(split_tensor_name("plain"), ("plain", 0));
        assert_eq!(split_tensor_name("scope/op:x"), ("scope/op:x", 0));
    }
}
