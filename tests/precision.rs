//! Mixed precision and the session options a model may not set alone: a
//! mode this host cannot run fast, and an intra-op pool size that differs
//! from the server's, fail that model's load with the reason while the other
//! models serve (on the mock runtime too); with TensorFlow, bfloat16 answers
//! mnist_cnn within a classifier's tolerance of FP32, and not bit for bit
//! (the rewrite ran).

mod common;

use common::{repo_path, spawn_server, temp_dir};
use serde_json::{json, Value};
use tfserve::settings::Settings;

fn settings_for(config: &Value, dir: &std::path::Path) -> Settings {
    let path = dir.join("models.json");
    std::fs::write(&path, config.to_string()).unwrap();
    let mut settings = Settings::default();
    settings.http.host = "127.0.0.1".into();
    settings.http.rest_api_port = Some(0);
    settings.models.model_config_file = Some(path);
    settings
}

/// The model's status once its load ended: (state, error message).
fn status(url: &str, model: &str) -> (String, String) {
    for _ in 0..600 {
        let answer: Value = reqwest::blocking::get(format!("{url}/v1/models/{model}"))
            .and_then(|answer| answer.json())
            .unwrap_or(Value::Null);
        let version = &answer["model_version_status"][0];
        let state = version["state"].as_str().unwrap_or_default().to_string();
        if state == "AVAILABLE" || state == "END" {
            let message = version["status"]["error_message"].as_str().unwrap_or_default();
            return (state, message.to_string());
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("model {model} never finished loading");
}

#[test]
fn a_mode_the_host_lacks_and_a_pool_size_of_its_own_fail_that_model_only() {
    let dir = temp_dir("precision-refused");
    let half = repo_path("models/half_plus_three");
    let config = json!({"model_config_list": [
        {"name": "plain", "base_path": half},
        {"name": "fp16", "base_path": half, "session_config": {"mixed_precision": "float16"}},
        {"name": "pinned", "base_path": half, "session_config": {"intra_op_parallelism_threads": 7}},
    ]});
    let mut settings = settings_for(&config, &dir);
    settings.tensorflow.tensorflow_intra_op_parallelism = Some(1);
    let url = format!("http://{}", spawn_server(settings));

    let (state, message) = status(&url, "fp16");
    // A host whose TensorFlow sees an NVIDIA GPU may run float16.
    if state != "AVAILABLE" || !std::path::Path::new("/proc/driver/nvidia").exists() {
        assert_eq!(state, "END");
        assert!(message.contains("mixed_precision float16 needs a GPU"), "{message}");
    }
    let (state, message) = status(&url, "pinned");
    assert_eq!(state, "END");
    assert!(
        message.contains("intra_op_parallelism_threads 7 differs from the server's 1"),
        "{message}"
    );
    assert_eq!(status(&url, "plain").0, "AVAILABLE");
    let answer = reqwest::blocking::Client::new()
        .post(format!("{url}/v1/models/plain:predict"))
        .json(&json!({"instances": [1.0]}))
        .send()
        .unwrap();
    assert_eq!(answer.status().as_u16(), 200);
    let _ = std::fs::remove_dir_all(&dir);
}

#[cfg(feature = "tensorflow")]
#[test]
fn bfloat16_answers_within_a_classifiers_tolerance_of_fp32_where_the_cpu_has_it() {
    let dir = temp_dir("precision-bf16");
    let mnist = repo_path("models/mnist_cnn");
    let config = json!({"model_config_list": [
        {"name": "fp32", "base_path": mnist},
        {"name": "bf16", "base_path": mnist, "session_config": {"mixed_precision": "bfloat16"}},
    ]});
    let url = format!("http://{}", spawn_server(settings_for(&config, &dir)));
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
