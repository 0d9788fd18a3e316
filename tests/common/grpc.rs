//! gRPC requests the tests share.

use tfserve::proto::tensorflow::serving::{ModelSpec, PredictRequest};
use tfserve::proto::tensorflow::{tensor_shape_proto, TensorProto, TensorShapeProto};

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
