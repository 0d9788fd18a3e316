//! Signatures the fuzz targets decode against: every dtype JSON carries, in
//! the layouts the server meets (one input, several inputs, scalars, images).

use tfserve::signature::{SignatureSpec, TensorSpec, PREDICT_METHOD};
use tfserve::tensor::DType;

fn spec(key: &str, dtype: DType, shape: Option<Vec<i64>>) -> TensorSpec {
    TensorSpec {
        key: key.into(),
        tensor_name: format!("{key}:0"),
        dtype,
        shape,
    }
}

fn signature(inputs: Vec<TensorSpec>) -> SignatureSpec {
    let mut signature = SignatureSpec {
        name: "serving_default".into(),
        method_name: PREDICT_METHOD.into(),
        inputs,
        outputs: vec![spec("y", DType::Float, None)],
        base64_inputs: vec![],
    };
    signature.sort();
    signature
}

/// One signature per shape of problem; a target decodes its input against each.
pub fn signatures() -> Vec<SignatureSpec> {
    let every_dtype = [
        DType::Float,
        DType::Double,
        DType::Int8,
        DType::Int16,
        DType::Int32,
        DType::Int64,
        DType::UInt8,
        DType::UInt16,
        DType::UInt32,
        DType::UInt64,
        DType::Bool,
        DType::String,
        DType::Half,
    ];
    let mut all: Vec<SignatureSpec> = every_dtype
        .iter()
        .map(|dtype| signature(vec![spec("x", *dtype, Some(vec![-1]))]))
        .collect();
    all.push(signature(vec![spec("x", DType::Float, None)]));
    all.push(signature(vec![
        spec("features", DType::Float, Some(vec![-1, 3])),
        spec("count", DType::Int64, Some(vec![-1])),
        spec("label", DType::String, Some(vec![-1])),
        spec("flag", DType::Bool, Some(vec![-1])),
    ]));
    let mut b64 = signature(vec![spec("image_bytes", DType::String, Some(vec![-1]))]);
    b64.base64_inputs = vec!["image_bytes".into()];
    all.push(b64);
    all
}

/// Image signatures: encoded bytes, uint8 pixels of any size, float pixels of a fixed size.
pub fn image_signatures() -> Vec<SignatureSpec> {
    vec![
        signature(vec![spec("images", DType::String, Some(vec![-1]))]),
        signature(vec![spec("images", DType::UInt8, Some(vec![-1, -1, -1, 3]))]),
        signature(vec![spec("images", DType::Float, Some(vec![-1, 8, 8, 1]))]),
    ]
}
