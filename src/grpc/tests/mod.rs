//! Every gRPC service through the listener's connection code and tonic's generated clients over
//! an in-memory pipe, on the mock runtime: no socket, no TensorFlow. The
//! mock model `m` serves `y = x + version` (versions 1 and 2).

mod connections;

use std::sync::Arc;

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};
use tonic::Code;

use super::channel_args::ChannelArguments;
use crate::codec::tensor_proto::{to_proto, to_tensor};
use crate::proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use crate::proto::inference::model_infer_request::InferInputTensor;
use crate::proto::inference::{
    InferTensorContents, ModelInferRequest, ModelReadyRequest, ServerLiveRequest, ServerReadyRequest,
};
use crate::proto::tensorflow::serving::model_service_client::ModelServiceClient;
use crate::proto::tensorflow::serving::model_spec::VersionChoice;
use crate::proto::tensorflow::serving::prediction_service_client::PredictionServiceClient;
use crate::proto::tensorflow::serving::{GetModelMetadataRequest, GetModelStatusRequest, ModelSpec, PredictRequest};
use crate::server::testing::mock_state;
use crate::server::ServerState;
use crate::tensor::{Tensor, TensorData};

/// A client channel to the real services (auth, limits, gzip, dispatch by
/// name) served over one in-memory connection by the listener's own code.
async fn connect(state: Arc<ServerState>) -> Channel {
    let health = super::health::HealthService::new();
    let services = super::services(&state, &health, 4 << 20, &ChannelArguments::default()).unwrap();
    let options = Arc::new(super::connection::ConnectionOptions::new(None, None, None));
    let (client, server) = tokio::io::duplex(1 << 20);
    let (_open, shutdown) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let _open = _open;
        super::connection::serve(server, services, None, options, shutdown, None).await
    });
    channel_over(client).await
}

/// A channel whose one connection is the in-memory pipe's client end.
async fn channel_over(client: tokio::io::DuplexStream) -> Channel {
    let mut client = Some(client);
    Endpoint::try_from("http://in-process")
        .unwrap()
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let client = client.take();
            async move {
                client
                    .map(TokioIo::new)
                    .ok_or_else(|| std::io::Error::other("one connection only"))
            }
        }))
        .await
        .unwrap()
}

fn spec(model: &str, version: Option<i64>) -> Option<ModelSpec> {
    Some(ModelSpec {
        name: model.into(),
        version_choice: version.map(VersionChoice::Version),
        ..Default::default()
    })
}

fn predict(model: &str, version: Option<i64>, values: Vec<f32>) -> PredictRequest {
    let x = Tensor::new(vec![values.len()], TensorData::Float(values));
    PredictRequest {
        model_spec: spec(model, version),
        inputs: [("x".to_string(), to_proto(&x))].into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn tf_serving_predicts_and_reports_status_and_metadata() {
    let (state, root) = mock_state("grpc-tfs");
    let channel = connect(state).await;
    let mut prediction = PredictionServiceClient::new(channel.clone());
    let response = prediction
        .predict(predict("m", None, vec![1.0, 2.0]))
        .await
        .unwrap()
        .into_inner();
    let y = to_tensor(&response.outputs["y"], "y").unwrap();
    assert_eq!(y.data, TensorData::Float(vec![3.0, 4.0]));
    assert_eq!(
        response.model_spec.and_then(|s| s.version_choice),
        Some(VersionChoice::Version(2))
    );
    let response = prediction
        .predict(predict("m", Some(1), vec![1.0]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        to_tensor(&response.outputs["y"], "y").unwrap().data,
        TensorData::Float(vec![2.0])
    );

    let mut models = ModelServiceClient::new(channel.clone());
    let status = models
        .get_model_status(GetModelStatusRequest {
            model_spec: spec("m", None),
        })
        .await
        .unwrap()
        .into_inner();
    let versions: Vec<i64> = status.model_version_status.iter().map(|s| s.version).collect();
    assert_eq!(versions, [1, 2]);
    let metadata = prediction
        .get_model_metadata(GetModelMetadataRequest {
            model_spec: spec("m", None),
            metadata_field: vec!["signature_def".into()],
        })
        .await
        .unwrap()
        .into_inner();
    assert!(metadata.metadata.contains_key("signature_def"));
    std::fs::remove_dir_all(root).unwrap();
}

#[tokio::test]
async fn tf_serving_refuses_in_its_codes_and_words() {
    let (state, root) = mock_state("grpc-tfs-errors");
    let mut prediction = PredictionServiceClient::new(connect(state).await);
    let status = prediction.predict(predict("", None, vec![1.0])).await.unwrap_err();
    assert_eq!(
        (status.code(), status.message()),
        (Code::InvalidArgument, "ModelSpec has no name specified.")
    );
    let status = prediction.predict(predict("nope", None, vec![1.0])).await.unwrap_err();
    assert_eq!(status.code(), Code::NotFound, "{status:?}");
    let status = prediction.predict(predict("m", Some(9), vec![1.0])).await.unwrap_err();
    assert_eq!(status.code(), Code::NotFound, "{status:?}");
    let mut request = predict("m", None, vec![1.0]);
    request.model_spec.as_mut().unwrap().signature_name = "s".into();
    let status = prediction.predict(request).await.unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    assert_eq!(status.message(), "Serving signature key \"s\" not found.");
    let mut request = predict("m", None, vec![1.0]);
    request.inputs.insert("z".into(), request.inputs["x"].clone());
    let status = prediction.predict(request).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(
        status.message().starts_with("input size does not match signature"),
        "{status:?}"
    );
    let mut request = predict("m", None, vec![1.0]);
    request.inputs.insert(
        "x".into(),
        to_proto(&Tensor::new(vec![1], TensorData::Bool(vec![true]))),
    );
    let status = prediction.predict(request).await.unwrap_err();
    assert_eq!(status.message(), "Expects arg[0] to be float but bool is provided");
    // The server kept serving through every refusal.
    assert!(prediction.predict(predict("m", None, vec![0.0])).await.is_ok());
    std::fs::remove_dir_all(root).unwrap();
}

fn infer(model: &str, version: &str, shape: Vec<i64>, values: Vec<f32>) -> ModelInferRequest {
    ModelInferRequest {
        model_name: model.into(),
        model_version: version.into(),
        inputs: vec![InferInputTensor {
            name: "x".into(),
            datatype: "FP32".into(),
            shape,
            contents: Some(InferTensorContents {
                fp32_contents: values,
                ..Default::default()
            }),
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn floats(raw: &[u8]) -> Vec<f32> {
    raw.chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

#[tokio::test]
async fn open_inference_protocol_infers_answers_health_and_refuses() {
    let (state, root) = mock_state("grpc-oip");
    let mut client = GrpcInferenceServiceClient::new(connect(state).await);
    assert!(
        client
            .server_live(ServerLiveRequest {})
            .await
            .unwrap()
            .into_inner()
            .live
    );
    assert!(
        client
            .server_ready(ServerReadyRequest {})
            .await
            .unwrap()
            .into_inner()
            .ready
    );
    let ready = ModelReadyRequest {
        name: "m".into(),
        version: String::new(),
    };
    assert!(client.model_ready(ready).await.unwrap().into_inner().ready);

    let response = client
        .model_infer(infer("m", "", vec![2], vec![1.0, 2.0]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (response.model_name.as_str(), response.model_version.as_str()),
        ("m", "2")
    );
    assert_eq!(response.outputs[0].name, "y");
    assert_eq!(floats(&response.raw_output_contents[0]), [3.0, 4.0]);
    let response = client
        .model_infer(infer("m", "1", vec![1], vec![1.0]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(floats(&response.raw_output_contents[0]), [2.0]);

    let status = client
        .model_infer(infer("m", "", vec![3], vec![1.0]))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert_eq!(status.message(), "input 'x': shape [3] needs 3 elements, got 1");
    let status = client
        .model_infer(infer("nope", "", vec![1], vec![1.0]))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound, "{status:?}");
    let status = client
        .model_infer(infer("m", "x", vec![1], vec![1.0]))
        .await
        .unwrap_err();
    assert_eq!(
        (status.code(), status.message()),
        (Code::InvalidArgument, "model version 'x' is not a version number")
    );
    let mut request = infer("m", "", vec![1], vec![1.0]);
    request.inputs[0].name = "z".into();
    let status = client.model_infer(request).await.unwrap_err();
    assert_eq!(
        status.message(),
        "unexpected inference input 'z' for model 'm'; its inputs are: x"
    );
    std::fs::remove_dir_all(root).unwrap();
}

/// Predict is answered from its decoded message unless it is compressed,
/// when the tonic service answers it: both give the same answers.
#[tokio::test]
async fn predict_answers_alike_whether_decoded_here_or_by_tonic() {
    let (state, root) = mock_state("grpc-paths");
    let channel = connect(state).await;
    let direct = PredictionServiceClient::new(channel.clone());
    let relayed = PredictionServiceClient::new(channel).send_compressed(tonic::codec::CompressionEncoding::Gzip);
    let mut wrong_type = predict("m", None, vec![1.0]);
    wrong_type.inputs.insert(
        "x".into(),
        to_proto(&Tensor::new(vec![1], TensorData::Bool(vec![true]))),
    );
    let mut no_signature = predict("m", None, vec![1.0]);
    no_signature.model_spec.as_mut().unwrap().signature_name = "s".into();
    let requests = [
        predict("m", None, vec![1.0, 2.0]),
        predict("m", Some(1), vec![0.5]),
        predict("nope", None, vec![1.0]),
        predict("", None, vec![1.0]),
        no_signature,
        wrong_type,
    ];
    for request in requests {
        let mut answers = Vec::new();
        for mut client in [direct.clone(), relayed.clone()] {
            let mut call = tonic::Request::new(request.clone());
            call.metadata_mut().insert("x-request-id", "same-id".parse().unwrap());
            answers.push(match client.predict(call).await {
                Ok(response) => {
                    let id = response.metadata().get("x-request-id").cloned();
                    (Ok(response.into_inner()), id)
                }
                Err(status) => {
                    let id = status.metadata().get("x-request-id").cloned();
                    (Err((status.code(), status.message().to_string())), id)
                }
            });
        }
        assert_eq!(answers[0], answers[1], "{request:?}");
        assert_eq!(answers[0].1.as_ref().map(|id| id.to_str().unwrap()), Some("same-id"));
    }
    std::fs::remove_dir_all(root).unwrap();
}

/// Messages of megabytes cross the stream and connection windows both ways.
#[tokio::test]
async fn large_messages_cross_the_windows_both_ways() {
    let (state, root) = mock_state("grpc-large");
    let mut prediction = PredictionServiceClient::new(connect(state).await);
    let values: Vec<f32> = (0..600_000).map(|i| i as f32).collect();
    let response = prediction
        .predict(predict("m", None, values.clone()))
        .await
        .unwrap()
        .into_inner();
    let expected: Vec<f32> = values.iter().map(|v| v + 2.0).collect();
    assert_eq!(
        to_tensor(&response.outputs["y"], "y").unwrap().data,
        TensorData::Float(expected)
    );
    std::fs::remove_dir_all(root).unwrap();
}

/// More calls at once than the connection's stream limit, on one connection.
#[tokio::test]
async fn many_calls_at_once_share_one_connection() {
    let (state, root) = mock_state("grpc-many");
    let prediction = PredictionServiceClient::new(connect(state).await);
    let calls: Vec<_> = (0..300)
        .map(|i| {
            let mut client = prediction.clone();
            tokio::spawn(async move { client.predict(predict("m", None, vec![i as f32])).await })
        })
        .collect();
    for (i, call) in calls.into_iter().enumerate() {
        let response = call.await.unwrap().unwrap().into_inner();
        let y = to_tensor(&response.outputs["y"], "y").unwrap();
        assert_eq!(y.data, TensorData::Float(vec![i as f32 + 2.0]));
    }
    std::fs::remove_dir_all(root).unwrap();
}
