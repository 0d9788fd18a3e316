//! SageMaker's `/invocations` with images, decoded into a string input and
//! into a float input. The rest of the contract: `mock/sagemaker.rs`.

use crate::common;

use common::repo_path;
use common::sagemaker::invoke;
use serde_json::Value;

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
