//! Raw image uploads to `POST /` (multipart `image`/`images` parts) and the
//! per-model image settings, against the committed image models.

use crate::common;

use std::sync::OnceLock;

use common::*;
use reqwest::blocking::multipart::{Form, Part};
use serde_json::{json, Value};

fn expected() -> Value {
    serde_json::from_str(&std::fs::read_to_string(repo_path("tests/data/expected.json")).unwrap()).unwrap()
}

fn file_part(path: &str) -> Part {
    let name = path.rsplit('/').next().unwrap().to_string();
    Part::bytes(std::fs::read(repo_path(path)).unwrap()).file_name(name)
}

fn upload(base: &str, form: Form) -> (u16, Value) {
    let response = client().post(format!("{base}/")).multipart(form).send().unwrap();
    let status = response.status().as_u16();
    (status, response.json().unwrap())
}

#[test]
fn one_and_several_images_to_string_input_models() {
    let expected = expected();
    for model in ["image_classifier", "b64_image_classifier"] {
        let form = Form::new()
            .text("model_name", model)
            .part("image", file_part("tests/data/gradient.png"));
        let (status, body) = upload(base_url(), form);
        assert_eq!(status, 200, "{model}: {body}");
        let png = &expected["image_classifier"]["png"];
        assert_eq!(body["classes"], png["classes"], "{model}");
        assert_close(&body["probabilities"], &floats(&png["probabilities"]), 1e-5);

        let form = Form::new()
            .text("model_name", model)
            .text("model_version", "1")
            .part("images", file_part("tests/data/gradient.png"))
            .part("images", file_part("tests/data/gradient.jpg"));
        let (status, body) = upload(base_url(), form);
        assert_eq!(status, 200, "{model}: {body}");
        let jpg = &expected["image_classifier"]["jpg"];
        let classes: Vec<Value> = [png, jpg].iter().map(|e| e["classes"][0].clone()).collect();
        assert_eq!(body["classes"], json!(classes), "{model}");
        let mut both = floats(&png["probabilities"]);
        both.extend(floats(&jpg["probabilities"]));
        assert_close(&body["probabilities"], &both, 1e-5);
    }
}

#[test]
fn images_are_decoded_for_a_float_input() {
    let expected = expected();
    let form = Form::new()
        .text("model_name", "mnist_cnn")
        .part("image", file_part("tests/data/gradient.png"));
    let (status, body) = upload(base_url(), form);
    assert_eq!(status, 200, "{body}");
    assert_close(&body["probabilities"], &floats(&expected["mnist_cnn_png"]), 1e-5);

    // A batch of two, the JPEG decoded as well; rows come back in upload order.
    let form = Form::new()
        .text("model_name", "mnist_cnn")
        .part("images", file_part("tests/data/gradient.jpg"))
        .part("images", file_part("tests/data/gradient.png"));
    let (status, body) = upload(base_url(), form);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["probabilities"].as_array().unwrap().len(), 2);
    assert_close(&body["probabilities"][1], &floats(&expected["mnist_cnn_png"][0]), 1e-5);
}

#[test]
fn bad_uploads_are_refused_by_name() {
    let not_image = Part::bytes(b"model_name,x\n".to_vec()).file_name("notes.csv");
    let form = Form::new().text("model_name", "mnist_cnn").part("image", not_image);
    let message = error_of(upload(base_url(), form), 400);
    assert!(message.starts_with("image 'notes.csv': not a decodable"), "{message}");

    let corrupt = std::fs::read(repo_path("tests/data/gradient.jpg")).unwrap()[..100].to_vec();
    let form = Form::new()
        .text("model_name", "mnist_cnn")
        .part("images", file_part("tests/data/gradient.png"))
        .part("images", Part::bytes(corrupt).file_name("cut.jpg"));
    let message = error_of(upload(base_url(), form), 400);
    assert!(message.starts_with("image 'cut.jpg'"), "{message}");

    let form = Form::new().text("model_name", "mnist_cnn");
    let message = error_of(upload(base_url(), form), 400);
    assert!(message.contains("'image' or 'images'"), "{message}");

    let form = Form::new()
        .text("model_name", "mnist_cnn")
        .part("photo", file_part("tests/data/gradient.png"));
    let message = error_of(upload(base_url(), form), 400);
    assert!(message.contains("'photo'"), "{message}");

    let form = Form::new()
        .text("model_name", "half_plus_three")
        .part("image", file_part("tests/data/gradient.png"));
    let message = error_of(upload(base_url(), form), 400);
    assert!(message.contains("input 'x'") && message.contains("image"), "{message}");

    // No model_name: the model called `default`, which this server lacks.
    let form = Form::new().part("image", file_part("tests/data/gradient.png"));
    let message = error_of(upload(base_url(), form), 404);
    assert!(message.starts_with("Invalid model name: default"), "{message}");

    // The server is still serving.
    let (status, _) = post_json("/", &json!({"model_name": "half_plus_three", "data": {"x": [1.0]}}));
    assert_eq!(status, 200);
}

/// A server whose JSON config names the image model `default`, turns resizing
/// off for the CNN, and forces raw bytes on the base64 model.
fn configured_server() -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("tfserve-images-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let models = repo_path("models");
        let config = json!({"model_config_list": [
            {"name": "default", "base_path": models.join("image_classifier")},
            {"name": "strict_cnn", "base_path": models.join("mnist_cnn"), "image_resize": false},
            {"name": "forced_raw", "base_path": models.join("b64_image_classifier"), "image_string_encoding": "raw"},
        ]});
        let settings = common::config_settings(&config, &dir);
        format!("http://{}", spawn_server(settings))
    })
}

#[test]
fn per_model_image_settings() {
    let base = configured_server();
    let form = Form::new().part("image", file_part("tests/data/gradient.png"));
    let (status, body) = upload(base, form);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["classes"], expected()["image_classifier"]["png"]["classes"]);

    // The 28x28 fixture fits; a 56x56 image is refused instead of resized.
    let form = Form::new()
        .text("model_name", "strict_cnn")
        .part("image", file_part("tests/data/gradient.png"));
    assert_eq!(upload(base, form).0, 200);
    let big = image::GrayImage::from_fn(56, 56, |x, y| image::Luma([(x + y) as u8]));
    let mut png = std::io::Cursor::new(Vec::new());
    big.write_to(&mut png, image::ImageFormat::Png).unwrap();
    let form = Form::new()
        .text("model_name", "strict_cnn")
        .part("image", Part::bytes(png.into_inner()).file_name("big.png"));
    let message = error_of(upload(base, form), 400);
    assert!(message.contains("'big.png'") && message.contains("56x56"), "{message}");

    // Raw PNG bytes into tf.io.decode_base64: the model itself refuses them.
    let form = Form::new()
        .text("model_name", "forced_raw")
        .part("image", file_part("tests/data/gradient.png"));
    let (status, body) = upload(base, form);
    assert_eq!(status, 400, "{body}");
}

#[test]
fn sagemaker_image_bodies_follow_the_same_rules() {
    let expected = expected();
    let response = client()
        .post(format!("{}/invocations", base_url()))
        .header("Content-Type", "image/png")
        .header(
            "X-Amzn-SageMaker-Custom-Attributes",
            "tfs-model-name=b64_image_classifier",
        )
        .body(std::fs::read(repo_path("tests/data/gradient.png")).unwrap())
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let body: Value = response.json().unwrap();
    assert_eq!(
        body["predictions"][0]["classes"], expected["image_classifier"]["png"]["classes"][0],
        "{body}"
    );
}
