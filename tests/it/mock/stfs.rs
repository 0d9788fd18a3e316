//! Simple TensorFlow Serving's `POST /` contract and `gen_json`, on the
//! committed models.

use crate::common;

use common::*;
use serde_json::{json, Value};

#[test]
fn post_root_errors() {
    let message = error_of(post_json("/", &json!({"data": {"x": [1.0]}})), 404);
    assert!(
        message.starts_with("Invalid model name: default, available models: [adder,"),
        "{message}"
    );
    let message = error_of(post_json("/", &json!({"model_name": "half_plus_three"})), 400);
    assert!(message.contains("'data'"), "{message}");
    let message = error_of(post("/", "not json"), 400);
    assert!(message.starts_with("Invalid json data"), "{message}");
    let message = error_of(
        post_json("/", &json!({"model_name": "half_plus_three", "data": {"z": [1.0]}})),
        400,
    );
    assert!(message.contains("'z'"), "{message}");
    let message = error_of(
        post_json(
            "/",
            &json!({"model_name": "adder", "model_version": "x", "data": {"x": [1]}}),
        ),
        400,
    );
    assert!(message.contains("model_version"), "{message}");
    let response = client()
        .post(format!("{}/", base_url()))
        .header("Content-Type", "text/plain")
        .body("1")
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 400);
}

fn client_source(model: &str, language: &str) -> (u16, String) {
    let response = client()
        .get(format!(
            "{}/v1/models/{model}/gen_client?language={language}",
            base_url()
        ))
        .send()
        .unwrap();
    (response.status().as_u16(), response.text().unwrap())
}

#[test]
fn generated_python_and_bash_clients_run() {
    let dir = std::env::temp_dir().join(format!("tfserve-clients-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (language, interpreter, file) in [("python", "python3", "client.py"), ("bash", "bash", "client.sh")] {
        for model in ["half_plus_three", "multi_io"] {
            let (status, source) = client_source(model, language);
            assert_eq!(status, 200, "{source}");
            let path = dir.join(format!("{model}-{file}"));
            std::fs::write(&path, source).unwrap();
            let run = std::process::Command::new(interpreter).arg(&path).output().unwrap();
            assert!(
                run.status.success(),
                "{language}: {}",
                String::from_utf8_lossy(&run.stderr)
            );
            let answer: Value = serde_json::from_slice(&run.stdout).unwrap();
            let mut example = get(&format!("/v1/models/{model}/gen_json")).1;
            example["model_name"] = model.into();
            let expected = post_json("/", &example).1;
            assert_eq!(answer, expected, "{language} client for {model}");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
    for language in ["golang", "javascript", "rust"] {
        let (status, source) = client_source("half_plus_three", language);
        assert_eq!(status, 200);
        assert!(
            source.contains(&format!("{}/", base_url())) || source.contains(base_url().trim_start_matches("http://")),
            "{source}"
        );
    }
    let (status, body) = client_source("half_plus_three", "cobol");
    assert_eq!(status, 400);
    assert!(body.contains("bash, python, golang, javascript, rust"), "{body}");
    assert_eq!(client_source("nope", "python").0, 404);
}
