//! The gRPC listener with tonic clients built from the same protos: every
//! bundled model answers Predict as it answers REST, TF Serving's error codes,
//! gzip, request ids, health, a 100 MB `tensor_content`, auth and TLS.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::OnceLock;

use serde_json::{json, Map, Value};
use tfserve::proto::tensorflow::serving::model_spec::VersionChoice;
use tfserve::proto::tensorflow::serving::{GetModelMetadataRequest, PredictRequest};
use tfserve::proto::tensorflow::TensorProto;
use tfserve::tensor::{Tensor, TensorData};
use tonic::codec::CompressionEncoding;
use tonic::transport::Channel;

use common::grpc::{block_on, half_plus_three, prediction, shape, spec, tensor_proto};
use common::{repo_path, spawn_with_grpc};

fn servers() -> (SocketAddr, SocketAddr) {
    static ADDRS: OnceLock<(SocketAddr, SocketAddr)> = OnceLock::new();
    *ADDRS.get_or_init(|| {
        let mut settings = common::local_settings();
        settings.models.models_dir = repo_path("models");
        spawn_with_grpc(settings)
    })
}

/// The same tensor as REST's columnar JSON.
fn tensor_json(tensor: &Tensor) -> Value {
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
fn answer_values(proto: &TensorProto) -> Vec<Value> {
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
fn flatten(value: &Value) -> Vec<Value> {
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

fn close(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => (x - y).abs() <= 1e-5 * y.abs().max(1.0),
        _ => a == b,
    }
}

#[test]
fn every_bundled_model_answers_predict_as_rest_does() {
    let (rest, grpc) = servers();
    let models = [
        "adder",
        "first_token",
        "half_plus_three",
        "half_plus_two",
        #[cfg(feature = "tensorflow")]
        "mnist_cnn",
        "multi_io",
        "tf1_half_plus_two",
    ];
    for model in models {
        let version = tfserve::registry::discover_versions(&repo_path(&format!("models/{model}"))).unwrap();
        let loaded = common::loader()
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
        let answer: Value = common::client()
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

#[test]
fn errors_carry_tf_serving_codes_and_messages() {
    let (_, grpc) = servers();
    let code = |request: PredictRequest| {
        block_on(async { prediction(grpc).await.predict(request).await })
            .map(|_| ())
            .unwrap_err()
    };
    let mut unknown = half_plus_three(&[1.0]);
    unknown.model_spec = spec("nope");
    let status = code(unknown);
    assert_eq!(status.code(), tonic::Code::NotFound);
    assert!(status.message().contains("nope"), "{}", status.message());
    let mut missing = half_plus_three(&[1.0]);
    missing.inputs.clear();
    let status = code(missing);
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(
        status.message().contains("Missing but required: {x}"),
        "{}",
        status.message()
    );
    let mut filter = half_plus_three(&[1.0]);
    filter.output_filter = vec!["z".into()];
    let status = code(filter);
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().contains("alias not found"), "{}", status.message());
    let mut short = half_plus_three(&[1.0, 2.0]);
    if let Some(x) = short.inputs.get_mut("x") {
        x.tensor_content = x.tensor_content.slice(..7);
    }
    let status = code(short);
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().contains("7 bytes"), "{}", status.message());
    let mut signature = half_plus_three(&[1.0]);
    if let Some(spec) = signature.model_spec.as_mut() {
        spec.signature_name = "nope".into();
    }
    // predict_util.cc: FailedPrecondition, in its own words.
    let status = code(signature);
    assert_eq!(status.code(), tonic::Code::FailedPrecondition);
    assert_eq!(status.message(), "Serving signature key \"nope\" not found.");
    let mut missing_spec = half_plus_three(&[1.0]);
    missing_spec.model_spec = None;
    assert_eq!(code(missing_spec).code(), tonic::Code::InvalidArgument);
    let metadata = block_on(async {
        prediction(grpc)
            .await
            .get_model_metadata(GetModelMetadataRequest {
                model_spec: spec("half_plus_three"),
                metadata_field: vec!["graph".into()],
            })
            .await
    });
    assert_eq!(metadata.unwrap_err().code(), tonic::Code::InvalidArgument);
}

#[test]
fn gzip_request_ids_and_typed_fields_work() {
    let (_, grpc) = servers();
    let response = block_on(async {
        let client = prediction(grpc)
            .await
            .send_compressed(CompressionEncoding::Gzip)
            .accept_compressed(CompressionEncoding::Gzip);
        let mut request = tonic::Request::new(PredictRequest {
            model_spec: spec("half_plus_three"),
            // The typed field, one value repeated over the shape.
            inputs: [(
                "x".to_string(),
                TensorProto {
                    dtype: 1,
                    tensor_shape: shape(&[3]),
                    float_val: vec![2.0],
                    ..TensorProto::default()
                },
            )]
            .into_iter()
            .collect(),
            output_filter: vec!["y".into()],
        });
        request
            .metadata_mut()
            .insert("x-request-id", "grpc-test-1".parse().unwrap());
        let mut client = client;
        client.predict(request).await
    })
    .unwrap();
    assert_eq!(
        response.metadata().get("x-request-id").and_then(|v| v.to_str().ok()),
        Some("grpc-test-1")
    );
    assert_eq!(response.into_inner().outputs["y"].float_val, vec![4.0, 4.0, 4.0]);
}

#[test]
fn a_100_megabyte_tensor_content_is_accepted() {
    let (_, grpc) = servers();
    let values: Vec<f32> = (0..25 * 1024 * 1024).map(|i| (i % 1000) as f32).collect();
    let request = half_plus_three(&values);
    assert!(request.inputs["x"].tensor_content.len() >= 100 << 20);
    let response = block_on(async { prediction(grpc).await.predict(request).await }).unwrap();
    let y = &response.into_inner().outputs["y"].float_val;
    assert_eq!(y.len(), values.len());
    assert_eq!((y[0], y[1001]), (3.0, 3.5));
}

#[test]
fn health_follows_readiness_per_service() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::{health_client::HealthClient, HealthCheckRequest};
    let (_, grpc) = servers();
    let statuses = block_on(async {
        let channel = Channel::from_shared(format!("http://{grpc}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut health = HealthClient::new(channel);
        let mut statuses = Vec::new();
        for service in [
            "",
            "tensorflow.serving.PredictionService",
            "inference.GRPCInferenceService",
            "nope",
        ] {
            let answer = health
                .check(HealthCheckRequest {
                    service: service.into(),
                })
                .await;
            statuses.push(answer.map(|r| r.into_inner().status).map_err(|s| s.code()));
        }
        statuses
    });
    let serving = ServingStatus::Serving as i32;
    assert_eq!(statuses[..3], [Ok(serving), Ok(serving), Ok(serving)]);
    assert_eq!(statuses[3], Err(tonic::Code::NotFound));
}

#[test]
fn half_precision_goes_in_half_val() {
    let (_, grpc) = servers();
    let response = block_on(async {
        prediction(grpc)
            .await
            .predict(PredictRequest {
                model_spec: spec("half_precision"),
                inputs: [(
                    "x".to_string(),
                    TensorProto {
                        dtype: 19,
                        tensor_shape: shape(&[2]),
                        // 1.5 and -2.0 as IEEE half bits.
                        half_val: vec![0x3e00, 0xc000],
                        ..TensorProto::default()
                    },
                )]
                .into_iter()
                .collect(),
                output_filter: Vec::new(),
            })
            .await
    })
    .unwrap();
    assert_eq!(response.into_inner().outputs["y"].float_val, vec![3.0, -4.0]);
}
