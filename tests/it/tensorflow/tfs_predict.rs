//! TF Serving REST predict on the image models: encoded images in a string
//! input, and a float image model's answers. The rest: `mock/tfs_predict.rs`.

use crate::common;

use base64::Engine;
use common::*;
use serde_json::{json, Value};

#[test]
fn encoded_images_in_a_string_input() {
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(repo_path("tests/data/expected.json")).unwrap()).unwrap();
    for (file, key) in [("gradient.png", "png"), ("gradient.jpg", "jpg")] {
        let bytes = std::fs::read(repo_path(&format!("tests/data/{file}"))).unwrap();
        let b64 = base64::engine::general_purpose::STANDARD.encode(bytes);
        let (status, body) = post_json(
            "/v1/models/image_classifier:predict",
            &json!({"instances": [{"b64": b64}, {"b64": b64}]}),
        );
        assert_eq!(status, 200, "{body}");
        let want = &expected["image_classifier"][key];
        for row in body["predictions"].as_array().unwrap() {
            assert_eq!(row["classes"], want["classes"][0]);
            assert_close(&row["probabilities"], &floats(&want["probabilities"]), 1e-5);
        }
    }
}

#[test]
fn float_image_model_matches_tensorflow() {
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(repo_path("tests/data/expected.json")).unwrap()).unwrap();
    let cnn = &expected["mnist_cnn"];
    let (status, body) = post_json("/v1/models/mnist_cnn:predict", &json!({"instances": cnn["input"]}));
    assert_eq!(status, 200, "{body}");
    assert_close(&body["predictions"], &floats(&cnn["probabilities"]), 1e-5);
}
