//! gRPC requests the tests share.

use std::net::SocketAddr;

use tfserve::proto::tensorflow::serving::prediction_service_client::PredictionServiceClient;
use tfserve::proto::tensorflow::serving::{ModelSpec, PredictRequest};
use tfserve::proto::tensorflow::{tensor_shape_proto, TensorProto, TensorShapeProto};
use tfserve::tensor::{Tensor, TensorData};
use tonic::transport::Channel;

/// A Predict of one float, `x` = `value`: what half_plus_two/three and adder take.
pub fn predict_x(model: &str, value: f32) -> PredictRequest {
    PredictRequest {
        model_spec: Some(ModelSpec {
            name: model.into(),
            ..ModelSpec::default()
        }),
        inputs: [(
            "x".to_string(),
            TensorProto {
                dtype: 1,
                tensor_shape: Some(TensorShapeProto {
                    dim: vec![tensor_shape_proto::Dim {
                        size: 1,
                        name: String::new(),
                    }],
                    unknown_rank: false,
                }),
                float_val: vec![value],
                ..TensorProto::default()
            },
        )]
        .into(),
        output_filter: Vec::new(),
    }
}

pub fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

pub async fn prediction(addr: SocketAddr) -> PredictionServiceClient<Channel> {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .expect("gRPC connects");
    PredictionServiceClient::new(channel)
        .max_decoding_message_size(usize::MAX)
        .max_encoding_message_size(usize::MAX)
}

pub fn spec(model: &str) -> Option<ModelSpec> {
    Some(ModelSpec {
        name: model.into(),
        ..ModelSpec::default()
    })
}

pub fn shape(dims: &[usize]) -> Option<TensorShapeProto> {
    Some(TensorShapeProto {
        dim: dims
            .iter()
            .map(|&size| tensor_shape_proto::Dim {
                size: size as i64,
                name: String::new(),
            })
            .collect(),
        unknown_rank: false,
    })
}

/// A tensor as `tf.make_tensor_proto` writes it: numbers in `tensor_content`.
pub fn tensor_proto(tensor: &Tensor) -> TensorProto {
    let mut proto = TensorProto {
        dtype: tensor.dtype().to_proto(),
        tensor_shape: shape(&tensor.shape),
        ..TensorProto::default()
    };
    match &tensor.data {
        TensorData::String(values) => proto.string_val = values.clone(),
        TensorData::Bool(values) => proto.bool_val = values.clone(),
        TensorData::Float(v) => {
            proto.tensor_content = v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>().into()
        }
        TensorData::Double(v) => {
            proto.tensor_content = v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>().into()
        }
        TensorData::Int32(v) => {
            proto.tensor_content = v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>().into()
        }
        TensorData::Int64(v) => {
            proto.tensor_content = v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>().into()
        }
        TensorData::UInt8(v) => proto.tensor_content = v.clone().into(),
        other => panic!("no test input of type {}", other.dtype()),
    }
    proto
}

/// A Predict of half_plus_three on `values`, as `tensor_content`.
pub fn half_plus_three(values: &[f32]) -> PredictRequest {
    let tensor = Tensor::new(vec![values.len()], TensorData::Float(values.to_vec()));
    PredictRequest {
        model_spec: spec("half_plus_three"),
        inputs: [("x".to_string(), tensor_proto(&tensor))].into_iter().collect(),
        output_filter: Vec::new(),
    }
}
