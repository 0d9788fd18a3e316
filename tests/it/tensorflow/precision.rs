//! Mixed precision on TensorFlow: bfloat16 answers mnist_cnn within a
//! classifier's tolerance of FP32, and not bit for bit (the rewrite ran), and
//! `auto`'s trial refuses bfloat16 for a model whose answers it breaks. The
//! rest: `mock/precision.rs`.

use crate::common;

use common::precision::{decided, start_auto, status, write_warmup};
use common::{repo_path, spawn_server, temp_dir};
use serde_json::{json, Value};

#[test]
fn auto_refuses_bfloat16_where_it_breaks_the_answers() {
    let dir = temp_dir("precision-auto-lossy");
    // Each with warm-up requests: 320 rows, enough to judge mnist's top class.
    for (name, key, shape) in [
        ("lossy_in_bfloat16", "x", vec![32, 2]),
        ("mnist_cnn", "image", vec![32, 28, 28, 1]),
    ] {
        common::copy_dir(&repo_path(&format!("models/{name}")), &dir.join(name));
        write_warmup(&dir.join(name).join("1"), name, key, &shape, 10);
    }
    let config = json!({"model_config_list": [
        {"name": "lossy", "base_path": dir.join("lossy_in_bfloat16")},
        {"name": "mnist", "base_path": dir.join("mnist_cnn")},
    ]});
    let url = start_auto(&config, &dir);
    assert_eq!(status(&url, "lossy").0, "AVAILABLE");
    assert_eq!(status(&url, "mnist").0, "AVAILABLE");
    let lossy = decided(&url, "lossy");
    assert!(!lossy["chosen"].as_str().unwrap().starts_with("bfloat16"), "{lossy}");
    let tried = lossy["tried"].as_array().unwrap();
    let bf16 = tried
        .iter()
        .filter(|t| t["mode"].as_str().unwrap().starts_with("bfloat16"));
    let lacks = tfserve::runtime::precision::host_lacks(tfserve::runtime::precision::MixedPrecision::Bfloat16, false);
    // Not batched to fixed sizes, so without XLA: bfloat16 alone beside FP32.
    assert_eq!(bf16.clone().count(), if lacks.is_none() { 1 } else { 0 }, "{lossy}");
    for refused in bf16 {
        let verdict = refused["verdict"].as_str().unwrap();
        assert!(verdict.starts_with("refused: output 'y' strays"), "{verdict}");
    }
    // Whatever mnist_cnn runs with, its answers stay a classifier's.
    let mnist = decided(&url, "mnist");
    assert!(mnist["chosen"].is_string(), "{mnist}");
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(repo_path("tests/data/expected.json")).unwrap()).unwrap();
    let answer: Value = reqwest::blocking::Client::new()
        .post(format!("{url}/v1/models/mnist:predict"))
        .json(&json!({"instances": [expected["mnist_cnn"]["input"][0]]}))
        .send()
        .and_then(|answer| answer.json())
        .unwrap();
    let got = common::floats(&answer["predictions"][0]);
    let want = common::floats(&expected["mnist_cnn"]["probabilities"][0]);
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() < 0.05, "{got:?} against {want:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bfloat16_answers_within_a_classifiers_tolerance_of_fp32_where_the_cpu_has_it() {
    let dir = temp_dir("precision-bf16");
    let mnist = repo_path("models/mnist_cnn");
    let config = json!({"model_config_list": [
        {"name": "fp32", "base_path": mnist},
        {"name": "bf16", "base_path": mnist, "session_config": {"mixed_precision": "bfloat16"}},
    ]});
    let url = format!("http://{}", spawn_server(common::config_settings(&config, &dir)));
    let lacks = tfserve::runtime::precision::host_lacks(tfserve::runtime::precision::MixedPrecision::Bfloat16, false);
    let (state, message) = status(&url, "bf16");
    if let Some(lacks) = lacks {
        assert_eq!(state, "END");
        assert!(message.contains(&lacks), "{message}");
        return;
    }
    assert_eq!(state, "AVAILABLE", "{message}");
    // Eight different images, so that a rewrite cannot hide in one answer.
    let images: Vec<Vec<Vec<Vec<f64>>>> = (0..8)
        .map(|image| {
            (0..28)
                .map(|row| {
                    (0..28)
                        .map(|col| vec![f64::from((row * 28 + col + image * 5) % 17) / 16.0])
                        .collect()
                })
                .collect()
        })
        .collect();
    let answer = |model: &str| -> Vec<Vec<f64>> {
        let answer = reqwest::blocking::Client::new()
            .post(format!("{url}/v1/models/{model}:predict"))
            .json(&json!({ "instances": images }))
            .send()
            .unwrap();
        assert_eq!(answer.status().as_u16(), 200);
        let body: Value = answer.json().unwrap();
        body["predictions"]
            .as_array()
            .unwrap()
            .iter()
            .map(common::floats)
            .collect()
    };
    let (full, reduced) = (answer("fp32"), answer("bf16"));
    let argmax = |row: &[f64]| (0..row.len()).max_by(|&a, &b| row[a].total_cmp(&row[b]));
    let mut largest = 0f64;
    for (a, b) in full.iter().zip(&reduced) {
        assert_eq!(argmax(a), argmax(b), "{a:?} against {b:?}");
        for (x, y) in a.iter().zip(b) {
            largest = largest.max((x - y).abs());
        }
    }
    eprintln!("bfloat16's largest difference from FP32's class scores: {largest}");
    assert!(largest < 0.05, "bfloat16 strays {largest} from FP32");
    assert!(
        largest > 0.0,
        "bfloat16 answered as FP32 bit for bit: the rewrite did not run"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
