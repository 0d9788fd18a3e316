//! TF Serving's request logs: each API's call logged as its own
//! `PredictionLog` kind, read back with TensorFlow and
//! tensorflow-serving-api, and the file warming a model up.

use crate::common;

use serde_json::json;
use tfserve::proto::tensorflow::serving::prediction_service_client::PredictionServiceClient;

use common::capture::{consumers, post, sigterm_and_wait};
use common::process::{serve_model, start_local};
use common::{repo_path, temp_dir};

/// A MultiInference call classifying and regressing one example, x = 2.
/// The server on free ports, serving what the model config file lists.
fn start_with_config(config: &std::path::Path) -> common::process::Server {
    start_local(&[&format!("--model_config_file={}", config.display())])
}

fn grpc_multi_inference(grpc: &str) {
    use std::collections::BTreeMap;
    use tfserve::proto::tensorflow::serving::{
        input::Kind, ExampleList, InferenceTask, Input, ModelSpec, MultiInferenceRequest,
    };
    use tfserve::proto::tensorflow::{feature, Example, Feature, Features, FloatList};
    let feature = Feature {
        kind: Some(feature::Kind::FloatList(FloatList { value: vec![2.0] })),
    };
    let example = Example {
        features: Some(Features {
            feature: BTreeMap::from([("x".to_string(), feature)]),
        }),
    };
    let task = |signature: &str, method: &str| InferenceTask {
        model_spec: Some(ModelSpec {
            name: "half".into(),
            signature_name: signature.into(),
            version_choice: None,
        }),
        method_name: method.into(),
    };
    let request = MultiInferenceRequest {
        tasks: vec![
            task("classify_x_to_y", "tensorflow/serving/classify"),
            task("regress_x_to_y", "tensorflow/serving/regress"),
        ],
        input: Some(Input {
            kind: Some(Kind::ExampleList(ExampleList {
                examples: vec![example],
            })),
        }),
    };
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let mut client = PredictionServiceClient::connect(format!("http://{grpc}"))
            .await
            .unwrap();
        let response = client.multi_inference(request).await.unwrap().into_inner();
        assert_eq!(response.results.len(), 2);
    });
}

#[test]
fn each_api_is_logged_as_its_own_prediction_log_and_the_file_warms_a_model_up() {
    let dir = temp_dir("capture-log-kinds");
    let prefix = dir.join("logs/two");
    // A TF1 model with predict, classify and regress signatures: y = x / 2 + 2.
    let config = dir.join("models.config");
    std::fs::write(
        &config,
        format!(
            "model_config_list {{ config {{ name: 'half' base_path: '{}' model_platform: 'tensorflow'\n\
             logging_config {{ log_collector_config {{ type: '' filename_prefix: '{}' }}\n\
             sampling_config {{ sampling_rate: 1.0 }} }} }} }}",
            repo_path("models/tf1_half_plus_two").display(),
            prefix.display()
        ),
    )
    .unwrap();
    let mut server = start_with_config(&config);
    post(
        &server,
        "/v1/models/half:predict",
        "application/json",
        "p",
        r#"{"instances": [1.0]}"#,
    );
    let examples =
        |signature: &str, x: f32| format!(r#"{{"signature_name": "{signature}", "examples": [{{"x": {x:.1}}}]}}"#);
    post(
        &server,
        "/v1/models/half:classify",
        "application/json",
        "c",
        &examples("classify_x_to_y", 4.0),
    );
    post(
        &server,
        "/v1/models/half:regress",
        "application/json",
        "r",
        &examples("regress_x_to_y", 6.0),
    );
    grpc_multi_inference(&server.grpc);
    sigterm_and_wait(&mut server);

    let read = consumers(&["logs", &prefix.display().to_string()]);
    let logs = read["logs"].as_array().unwrap();
    let kinds: Vec<&str> = logs.iter().map(|l| l["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["predict_log", "classify_log", "regress_log", "multi_inference_log"],
        "{logs:?}"
    );
    // y = x / 2 + 2, whichever API asked.
    for log in &logs[..3] {
        let (x, y) = (common::floats(&log["x"]), common::floats(&log["y"]));
        assert_eq!(x.len(), 1, "{log}");
        assert!((x[0] / 2.0 + 2.0 - y[0]).abs() < 1e-6, "{log}");
    }
    assert_eq!(logs[1]["signature"], "classify_x_to_y");
    assert_eq!(logs[2]["signature"], "regress_x_to_y");
    let multi = &logs[3];
    assert_eq!(multi["tasks"], json!(["classify_x_to_y", "regress_x_to_y"]));
    assert_eq!(multi["results"], json!(["classification_result", "regression_result"]));
    assert_eq!(common::floats(&multi["x"]), [2.0]);

    // Every kind replays as warm-up: one run per predict, classify and
    // regress log, and one per MultiInference task.
    let model = dir.join("warm/half");
    common::copy_dir(&repo_path("models/tf1_half_plus_two"), &model);
    let assets = model.join("1/assets.extra");
    std::fs::create_dir_all(&assets).unwrap();
    let captured = read["files"][0].as_str().unwrap();
    std::fs::copy(captured, assets.join("tf_serving_warmup_requests")).unwrap();
    let warm = serve_model("half", &model, &[]);
    let log = warm.log.lock().unwrap().join("\n");
    assert!(log.contains("5 warm-up run(s)"), "{log}");
    drop(warm);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two models naming one `filename_prefix`: TF Serving's config is accepted
/// with its warning, in its words, and both models log into the same files,
/// each record naming its model.
#[test]
fn models_sharing_a_filename_prefix_are_warned_about_and_share_its_files() {
    let dir = temp_dir("capture-shared-prefix");
    let prefix = dir.join("logs/shared");
    let model = |name: &str| {
        format!(
            "config {{ name: '{name}' base_path: '{}' model_platform: 'tensorflow'\n\
             logging_config {{ log_collector_config {{ filename_prefix: '{}' }}\n\
             sampling_config {{ sampling_rate: 1.0 }} }} }}",
            repo_path("models/half_plus_three").display(),
            prefix.display()
        )
    };
    let config = dir.join("models.config");
    std::fs::write(
        &config,
        format!("model_config_list {{ {} {} }}", model("a"), model("b")),
    )
    .unwrap();
    let mut server = start_with_config(&config);
    server.wait_for_line(&format!(
        "Duplicate LogCollectorConfig::filename_prefix(): {}. Possibly a misconfiguration.",
        prefix.display()
    ));
    for (model, x) in [("a", 1.0), ("b", 2.0), ("a", 3.0)] {
        let answer = post(
            &server,
            &format!("/v1/models/{model}:predict"),
            "application/json",
            model,
            &format!(r#"{{"instances": [{x:.1}]}}"#),
        );
        assert!(answer.contains("predictions"), "{answer}");
    }
    sigterm_and_wait(&mut server);

    let read = consumers(&["logs", &prefix.display().to_string()]);
    assert_eq!(read["files"].as_array().unwrap().len(), 1, "{read}");
    let logs = read["logs"].as_array().unwrap();
    let mut seen: Vec<(String, f64)> = logs
        .iter()
        .map(|l| (l["model"].as_str().unwrap().to_string(), common::floats(&l["x"])[0]))
        .collect();
    seen.sort_by(|a, b| a.partial_cmp(b).unwrap());
    assert_eq!(
        seen,
        [("a".to_string(), 1.0), ("a".to_string(), 3.0), ("b".to_string(), 2.0)],
        "{logs:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
