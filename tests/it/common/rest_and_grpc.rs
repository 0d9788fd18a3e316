//! One Predict sent over REST and over gRPC: the same tensors in each
//! protocol's form, and the answers compared value by value.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use serde_json::{json, Map, Value};
use tfserve::proto::tensorflow::serving::model_spec::VersionChoice;
use tfserve::proto::tensorflow::serving::PredictRequest;
use tfserve::proto::tensorflow::TensorProto;
use tfserve::tensor::{Tensor, TensorData};

use super::grpc::{block_on, prediction, spec, tensor_proto};
use super::repo_path;

/// Each model's `serving_default` answers the same made-up inputs (two rows)
/// over REST at `rest` and over gRPC at `grpc`.
pub fn assert_predict_answers_as_rest(rest: SocketAddr, grpc: SocketAddr, models: &[&str]) {
    for &model in models {
        let version = tfserve::registry::discover_versions(&repo_path(&format!("models/{model}"))).unwrap();
        let loaded = super::loader()
            .load(&version.last().unwrap().1, &["serve".to_string()], &Default::default())
            .unwrap();
        let signature = loaded.signature("serving_default").unwrap().clone();
        let inputs = tfserve::warmup::synthetic_inputs(&signature, 2).expect("inputs can be made up");
        let mut rest_inputs = Map::new();
        let mut grpc_inputs = BTreeMap::new();
        for (spec, tensor) in signature.inputs.iter().zip(&inputs) {
            rest_inputs.insert(spec.key.clone(), tensor_json(tensor));
            grpc_inputs.insert(spec.key.clone(), tensor_proto(tensor));
        }
        let answer: Value = super::client()
            .post(format!("http://{rest}/v1/models/{model}:predict"))
            .json(&json!({"inputs": rest_inputs}))
            .send()
            .unwrap()
            .json()
            .unwrap();
        let response = block_on(async {
            prediction(grpc)
                .await
                .predict(PredictRequest {
                    model_spec: spec(model),
                    inputs: grpc_inputs,
                    output_filter: Vec::new(),
                })
                .await
        })
        .unwrap_or_else(|status| panic!("{model}: {status}"))
        .into_inner();
        let outputs = &answer["outputs"];
        let by_key: Map<String, Value> = match outputs {
            Value::Object(map) => map.clone(),
            single => [(signature.outputs[0].key.clone(), single.clone())]
                .into_iter()
                .collect(),
        };
        assert_eq!(response.outputs.len(), by_key.len(), "{model}: {answer}");
        for (key, want) in by_key {
            let got = answer_values(&response.outputs[&key]);
            let want = flatten(&want);
            assert!(
                got.len() == want.len() && got.iter().zip(&want).all(|(g, w)| close(g, w)),
                "{model}.{key}: gRPC {got:?} vs REST {want:?}"
            );
        }
        let spec = response.model_spec.unwrap();
        assert_eq!(
            (spec.name.as_str(), spec.signature_name.as_str()),
            (model, "serving_default")
        );
        assert!(matches!(spec.version_choice, Some(VersionChoice::Version(_))));
    }
}

/// The same tensor as REST's columnar JSON.
pub fn tensor_json(tensor: &Tensor) -> Value {
    use base64::Engine;
    let flat: Vec<Value> = match &tensor.data {
        TensorData::Float(v) => v.iter().map(|x| json!(x)).collect(),
        TensorData::Double(v) => v.iter().map(|x| json!(x)).collect(),
        TensorData::Int32(v) => v.iter().map(|x| json!(x)).collect(),
        TensorData::Int64(v) => v.iter().map(|x| json!(x)).collect(),
        TensorData::UInt8(v) => v.iter().map(|x| json!(x)).collect(),
        TensorData::Bool(v) => v.iter().map(|x| json!(x)).collect(),
        TensorData::String(v) => v
            .iter()
            .map(|x| json!({"b64": base64::engine::general_purpose::STANDARD.encode(x)}))
            .collect(),
        other => panic!("no test input of type {}", other.dtype()),
    };
    nest(&flat, &tensor.shape)
}

fn nest(flat: &[Value], shape: &[usize]) -> Value {
    match shape {
        [] => flat[0].clone(),
        [_] => Value::Array(flat.to_vec()),
        [first, rest @ ..] => {
            let size = flat.len() / first.max(&1);
            Value::Array(
                (0..*first)
                    .map(|i| nest(&flat[i * size..(i + 1) * size], rest))
                    .collect(),
            )
        }
    }
}

/// Every number (or string) of a gRPC answer tensor, flattened, as JSON.
pub fn answer_values(proto: &TensorProto) -> Vec<Value> {
    let tensor = tfserve::codec::tensor_proto::to_tensor(proto, "answer").unwrap();
    match tensor.data {
        TensorData::Float(v) => v.into_iter().map(|x| json!(x)).collect(),
        TensorData::Double(v) => v.into_iter().map(|x| json!(x)).collect(),
        TensorData::Int32(v) => v.into_iter().map(|x| json!(x)).collect(),
        TensorData::Int64(v) => v.into_iter().map(|x| json!(x)).collect(),
        TensorData::Bool(v) => v.into_iter().map(|x| json!(x)).collect(),
        TensorData::String(v) => v.into_iter().map(|x| json!(String::from_utf8_lossy(&x))).collect(),
        other => panic!("unexpected answer type {}", other.dtype()),
    }
}

/// REST's values flattened; `{"b64": ...}` (outputs named `*_bytes`) decoded to text.
pub fn flatten(value: &Value) -> Vec<Value> {
    use base64::Engine;
    match value {
        Value::Array(items) => items.iter().flat_map(flatten).collect(),
        Value::Object(map) if map.contains_key("b64") => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(map["b64"].as_str().unwrap_or_default())
                .unwrap();
            vec![json!(String::from_utf8_lossy(&bytes))]
        }
        other => vec![other.clone()],
    }
}

pub fn close(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => (x - y).abs() <= 1e-5 * y.abs().max(1.0),
        _ => a == b,
    }
}
