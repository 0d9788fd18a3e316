//! `inference.py` handlers over models whose answers TensorFlow computes: the
//! container's examples on a TF1 export, an image handler, and batch
//! transform through handlers. The rest: `mock/handlers.rs`.

use crate::common;

use common::handlers::{invocation, models_dir};
use common::{repo_path, temp_dir};
use serde_json::{json, Value};

#[test]
fn container_examples_answer_on_a_tf1_export() {
    for model in ["pair_tf1", "rest_tf1"] {
        for (content_type, body) in [
            ("application/json", r#"{"instances": [1.0, 2.0, 5.0]}"#),
            ("text/csv", "1.0,2.0,5.0"),
        ] {
            let answer = invocation(model, content_type, body);
            assert_eq!(answer.status, 200, "{model} {content_type}: {}", answer.body);
            assert_eq!(
                answer.json()["predictions"],
                json!([3.5, 4.0, 5.5]),
                "{model} {content_type}"
            );
        }
    }
}

#[test]
fn image_input_handler_base64_encodes_the_body() {
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(repo_path("tests/data/expected.json")).unwrap()).unwrap();
    let png = std::fs::read(repo_path("tests/data/gradient.png")).unwrap();
    let answer = invocation("image", "application/x-image", png);
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(
        answer.json()["predictions"][0]["classes"],
        expected["image_classifier"]["png"]["classes"][0]
    );
    let answer = invocation("image", "text/csv", "1,2");
    assert_eq!(answer.status, 415, "{}", answer.body);
    assert_eq!(answer.error(), "Unsupported content type \"text/csv\"");
}

#[test]
fn transform_runs_records_through_handlers() {
    let work = temp_dir("handlers-transform");
    let input = work.join("input");
    std::fs::create_dir_all(&input).unwrap();
    std::fs::write(input.join("a.csv"), "1.0,2.0\n").unwrap();
    std::fs::write(input.join("b.csv"), "5.0\n").unwrap();
    let output = work.join("output");
    for (model, expected) in [("pair", json!([3.5, 4.0])), ("rest", json!([3.5, 4.0]))] {
        let status = std::process::Command::new(env!("CARGO_BIN_EXE_tfserve"))
            .arg("transform")
            .arg("--models_dir")
            .arg(models_dir())
            .args(["--input", input.to_str().unwrap(), "--output", output.to_str().unwrap()])
            .args(["--content_type", "text/csv", "--custom_attributes"])
            .arg(format!("tfs-model-name={model}"))
            .env("TF_CPP_MIN_LOG_LEVEL", "2")
            .status()
            .unwrap();
        assert!(status.success(), "{model}");
        let answer: Value = serde_json::from_slice(&std::fs::read(output.join("a.csv.out")).unwrap()).unwrap();
        assert_eq!(answer["predictions"], expected, "{model}");
        let answer: Value = serde_json::from_slice(&std::fs::read(output.join("b.csv.out")).unwrap()).unwrap();
        assert_eq!(answer["predictions"], json!([5.5]), "{model}");
        std::fs::remove_dir_all(&output).unwrap();
    }
}
