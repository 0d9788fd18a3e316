//! Simple TensorFlow Serving's `POST /` on every committed model, images
//! included, and `gen_json`'s examples posted back. Its errors and generated
//! clients: `mock/stfs.rs`.

use crate::common;

use common::*;
use serde_json::{json, Value};

#[test]
fn post_root_runs_every_model() {
    let png = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        std::fs::read(repo_path("tests/data/gradient.png")).unwrap(),
    );
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(repo_path("tests/data/expected.json")).unwrap()).unwrap();
    let cases = [
        (
            json!({"model_name": "half_plus_three", "data": {"x": [1.0, 2.0, 5.0]}}),
            json!({"y": [3.5, 4.0, 5.5]}),
        ),
        (
            json!({"model_name": "adder", "model_version": 2, "data": {"x": [1.0]}}),
            json!({"y": [3.0]}),
        ),
        (
            json!({"model_name": "adder", "model_version": "2", "data": {"x": [1.0]}}),
            json!({"y": [3.0]}),
        ),
        (
            json!({"model_name": "adder", "data": {"x": [1.0]}}),
            json!({"y": [3.0]}),
        ),
        // TF Serving's tutorial model: its signature declares [-1,1], the graph takes [N].
        (
            json!({"model_name": "half_plus_two", "data": {"x": [1.0, 2.0, 5.0]}}),
            json!({"y": [2.5, 3.0, 4.5]}),
        ),
        (
            json!({"model_name": "tf1_half_plus_two", "data": {"x": [2.0]}}),
            json!({"y": [3.0]}),
        ),
        (
            json!({"model_name": "first_token", "data": {"tokens": [[7, 8]]}}),
            json!({"first": [7], "width": [2]}),
        ),
        // STFS feeds JSON through numpy: floats truncate into integer inputs.
        (
            json!({"model_name": "first_token", "data": {"tokens": [[7.9, 8.0], [-2.5, 1.0]]}}),
            json!({"first": [7, -2], "width": [2, 2]}),
        ),
        (
            json!({"model_name": "multi_io", "data": {"features": [[1, 2, 3]], "count": [4], "label": ["z"], "flag": [true]}}),
            json!({"count_plus_one": [5], "flag_not": [false], "greeting": ["hello z"], "label_bytes": [{"b64": "eg=="}],
                   "scaled": [[4.0, 8.0, 12.0]], "total": [6.0]}),
        ),
    ];
    for (request, answer) in cases {
        let (status, body) = post_json("/", &request);
        assert_eq!((status, &body), (200, &answer), "{request}");
    }
    let (status, body) = post_json(
        "/",
        &json!({"model_name": "image_classifier", "data": {"image_bytes": [{"b64": png}]}}),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["classes"][0], expected["image_classifier"]["png"]["classes"][0]);
    // STFS's own form for its image models: URL-safe base64 text, decoded in-graph.
    let text = base64::Engine::encode(
        &base64::engine::general_purpose::URL_SAFE,
        std::fs::read(repo_path("tests/data/gradient.jpg")).unwrap(),
    );
    let (status, body) = post_json(
        "/",
        &json!({"model_name": "b64_image_classifier", "data": {"images": [text]}}),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["classes"][0], expected["image_classifier"]["jpg"]["classes"][0]);
    let cnn = &expected["mnist_cnn"];
    let (status, body) = post_json(
        "/",
        &json!({"model_name": "mnist_cnn", "data": {"image": cnn["input"]}}),
    );
    assert_eq!(status, 200, "{body}");
    assert_close(&body["probabilities"], &floats(&cnn["probabilities"]), 1e-5);
    let (status, body) = post_json("/", &json!({"model_name": "half_precision", "data": {"x": [1.0]}}));
    assert_eq!(status, 200, "{body}");
}

#[test]
fn gen_json_examples_post_back() {
    for model in ["half_plus_three", "multi_io", "mnist_cnn", "first_token"] {
        let (status, mut example) = get(&format!("/v1/models/{model}/gen_json"));
        assert_eq!(status, 200, "{model}: {example}");
        let keys: Vec<&String> = example.as_object().unwrap().keys().collect();
        assert_eq!(keys, vec!["data"], "STFS's gen_json answers the data object only");
        example["model_name"] = model.into();
        let (status, body) = post_json("/", &example);
        assert_eq!(status, 200, "{model}: {body}");
    }
    assert_eq!(get("/v1/models/nope/gen_json").0, 404);
    // Unknown dimensions are filled with 2, as STFS fills them (x: [-1]).
    assert_eq!(
        get("/v1/models/half_plus_three/gen_json").1,
        serde_json::json!({"data": {"x": [1.0, 1.0]}})
    );
    // TF Serving's status route on the same prefix still answers.
    assert_eq!(
        get("/v1/models/half_plus_three").1["model_version_status"][0]["state"],
        "AVAILABLE"
    );
    let health = client().get(format!("{}/health", base_url())).send().unwrap();
    assert_eq!(
        (health.status().as_u16(), health.text().unwrap()),
        (200, "healthy".to_string())
    );
}
