//! SageMaker's `/invocations` with images, decoded into a string input and
//! into a float input. The rest of the contract: `mock/sagemaker.rs`.

use crate::common;

use std::sync::OnceLock;

use common::{repo_path, spawn_server};
use serde_json::Value;

fn base_url() -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| {
        let mut settings = common::local_settings();
        settings.models.models_dir = repo_path("models");
        // SAGEMAKER_TFS_DEFAULT_MODEL_NAME's setting.
        settings.models.default_model_name = Some("half_plus_three".into());
        // What `tfserve serve` sets: the container serves every version it finds.
        settings.models.model_version_policy = tfserve::model_config::DefaultVersionPolicy::All;
        format!("http://{}", spawn_server(settings))
    })
}

fn invoke(
    content_type: Option<&str>,
    attributes: Option<&str>,
    accept: Option<&str>,
    body: impl Into<reqwest::blocking::Body>,
) -> (u16, String, Value) {
    let mut request = reqwest::blocking::Client::new()
        .post(format!("{}/invocations", base_url()))
        .body(body);
    if let Some(content_type) = content_type {
        request = request.header("Content-Type", content_type);
    }
    if let Some(attributes) = attributes {
        request = request.header("X-Amzn-SageMaker-Custom-Attributes", attributes);
    }
    if let Some(accept) = accept {
        request = request.header("Accept", accept);
    }
    let response = request.send().expect("request is answered");
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (status, content_type, response.json().unwrap_or(Value::Null))
}

#[test]
fn images_go_to_string_and_float_inputs() {
    let png = std::fs::read(repo_path("tests/data/gradient.png")).unwrap();
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(repo_path("tests/data/expected.json")).unwrap()).unwrap();
    let (status, _, answer) = invoke(
        Some("application/x-image"),
        Some("tfs-model-name=image_classifier"),
        None,
        png.clone(),
    );
    assert_eq!(status, 200, "{answer}");
    let want = &expected["image_classifier"]["png"];
    assert_eq!(answer["predictions"][0]["classes"], want["classes"][0]);
    common::assert_close(
        &answer["predictions"][0]["probabilities"],
        &common::floats(&want["probabilities"]),
        1e-5,
    );
    // A float image input: decoded, resized to 28x28 grayscale, scaled to [0, 1].
    let (status, _, answer) = invoke(Some("image/png"), Some("tfs-model-name=mnist_cnn"), None, png);
    assert_eq!(status, 200, "{answer}");
    let probabilities = common::floats(&answer["predictions"][0]);
    assert_eq!(probabilities.len(), 10);
    assert!((probabilities.iter().sum::<f64>() - 1.0).abs() < 1e-4);
    let (status, _, answer) = invoke(
        Some("image/jpeg"),
        Some("tfs-model-name=mnist_cnn"),
        None,
        b"not an image".to_vec(),
    );
    assert_eq!(status, 400);
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .starts_with("image 'request body': not a decodable"),
        "{answer}"
    );
}
