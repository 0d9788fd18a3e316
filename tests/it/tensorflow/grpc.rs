//! The gRPC listener on a model whose answers only TensorFlow computes: the
//! MNIST CNN answers Predict over gRPC as it answers over REST.

use crate::common;

use common::{repo_path, spawn_with_grpc};

#[test]
fn a_cnn_answers_predict_over_grpc_as_over_rest() {
    let mut settings = common::local_settings();
    settings.models.model_name = "mnist_cnn".into();
    settings.models.model_base_path = Some(repo_path("models/mnist_cnn"));
    let (rest, grpc) = spawn_with_grpc(settings);
    common::rest_and_grpc::assert_predict_answers_as_rest(rest, grpc, &["mnist_cnn"]);
}
