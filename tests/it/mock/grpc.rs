//! The gRPC listener with tonic clients built from the same protos: every
//! bundled model answers Predict as it answers REST, TF Serving's error codes,
//! gzip, request ids, health, a 100 MB `tensor_content`, auth and TLS.

use crate::common;

use std::net::SocketAddr;
use std::sync::OnceLock;

use tfserve::proto::tensorflow::serving::{GetModelMetadataRequest, PredictRequest};
use tfserve::proto::tensorflow::TensorProto;
use tonic::codec::CompressionEncoding;
use tonic::transport::Channel;

use common::grpc::{block_on, half_plus_three, prediction, shape, spec};
use common::{repo_path, spawn_with_grpc};

fn servers() -> (SocketAddr, SocketAddr) {
    static ADDRS: OnceLock<(SocketAddr, SocketAddr)> = OnceLock::new();
    *ADDRS.get_or_init(|| {
        let mut settings = common::local_settings();
        settings.models.models_dir = repo_path("models");
        spawn_with_grpc(settings)
    })
}

#[test]
fn every_bundled_model_answers_predict_as_rest_does() {
    let (rest, grpc) = servers();
    let models = [
        "adder",
        "first_token",
        "half_plus_three",
        "half_plus_two",
        "multi_io",
        "tf1_half_plus_two",
    ];
    common::rest_and_grpc::assert_predict_answers_as_rest(rest, grpc, &models);
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
