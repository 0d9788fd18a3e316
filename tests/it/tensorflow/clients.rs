//! Real, unmodified clients from PyPI against tfserve, through the examples a
//! user would copy: TF Serving's gRPC flow (`tensorflow-serving-api`),
//! `tritonclient` over HTTP and gRPC, and grpcio's health and reflection clients.

use crate::common;

use std::net::SocketAddr;
use std::process::Command;

use serde_json::Value;

use common::{client_python, repo_path, spawn_with_grpc};

fn server() -> (SocketAddr, SocketAddr) {
    let mut settings = common::local_settings();
    settings.models.models_dir = repo_path("models");
    spawn_with_grpc(settings)
}

/// Runs a Python script with the client environment; its last stdout line as JSON.
fn run(script: &str, args: &[String]) -> Value {
    let output = Command::new(client_python())
        .arg(repo_path(script))
        .args(args)
        .env("TF_CPP_MIN_LOG_LEVEL", "3")
        .output()
        .expect("the client runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{script} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{script}: {e}: {stdout}"))
}

#[test]
fn tf_serving_grpc_client_flow_works_unchanged() {
    let (rest, grpc) = server();
    let got = run("examples/tfs_grpc_client.py", &[format!("--server={grpc}")]);
    assert_eq!(got["uses_tensor_content"], true);
    let probabilities = common::floats(&got["predict"]["probabilities"]);
    assert_eq!(probabilities.len(), 10);
    // The same image over REST gives the same probabilities.
    let image: Vec<f64> = (0..28 * 28).map(|i| f64::from(i % 255) / 255.0).collect();
    let rest_answer: Value = common::client()
        .post(format!("http://{rest}/v1/models/mnist_cnn:predict"))
        .json(&serde_json::json!({"inputs": {"image": [image.chunks(28).map(|row| row.iter().map(|v| vec![*v as f32]).collect::<Vec<_>>()).collect::<Vec<_>>()]}}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    common::assert_close(&rest_answer["outputs"], &probabilities, 1e-5);
    assert_eq!(
        got["predict_model_spec"],
        serde_json::json!({"name": "mnist_cnn", "version": 1, "signature_name": "serving_default"})
    );
    assert_eq!(got["signatures"]["serving_default"], serde_json::json!(["image"]));
    assert_eq!(got["status"], serde_json::json!([[1, "AVAILABLE"]]));
    assert_eq!(got["classify"], serde_json::json!([["", 4.0]]));
    assert_eq!(got["regress"], serde_json::json!([2.5, 3.0]));
}

#[test]
fn tritonclient_http_and_grpc_work_unchanged() {
    let (rest, grpc) = server();
    let got = run(
        "examples/triton_client.py",
        &[format!("--http={rest}"), format!("--grpc={grpc}")],
    );
    for protocol in ["http", "grpc"] {
        let answer = &got[protocol];
        for key in ["live", "ready", "model_ready", "after_load"] {
            assert_eq!(answer[key], true, "{protocol} {key}: {answer}");
        }
        assert_eq!(answer["after_unload"], false, "{protocol}");
        assert_eq!(answer["server"], "tfserve");
        assert_eq!(answer["y"], serde_json::json!([3.5, 4.0, 5.5]), "{protocol}");
        assert_eq!(answer["first"], serde_json::json!([7, 9]), "{protocol}");
        let inputs: Vec<&str> = answer["inputs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["name"].as_str().unwrap())
            .collect();
        assert_eq!(inputs, ["count", "features", "flag", "label"], "{protocol}");
        assert!(answer["repository"].as_array().unwrap().len() >= 10, "{protocol}");
    }
}

#[test]
fn grpcio_health_and_reflection_clients_see_every_service() {
    let (_, grpc) = server();
    let got = run("tests/clients/health_reflection.py", &[format!("{grpc}")]);
    assert_eq!(
        got["health"],
        serde_json::json!({"": "SERVING", "tensorflow.serving.PredictionService": "SERVING", "tensorflow.serving.ModelService": "SERVING", "inference.GRPCInferenceService": "SERVING"})
    );
    for service in [
        "grpc.health.v1.Health",
        "inference.GRPCInferenceService",
        "tensorflow.serving.ModelService",
        "tensorflow.serving.PredictionService",
    ] {
        assert!(
            got["services"].as_array().unwrap().iter().any(|s| s == service),
            "{service}: {got}"
        );
    }
    assert_eq!(
        got["predict_methods"],
        serde_json::json!(["Classify", "Regress", "Predict", "MultiInference", "GetModelMetadata"])
    );
    assert_eq!(got["tensor_content_field"], 4);
}
