//! Mixed precision and the session options a model may not set alone: a
//! mode this host cannot run fast, and an intra-op pool size that differs
//! from the server's, fail that model's load with the reason while the other
//! models serve; `mixed_precision: auto` shows its trial's decision in the
//! dashboard's state and `/metrics` and keeps it for the next start (on the
//! mock runtime too). What needs TensorFlow's answers: `tensorflow/precision.rs`.

use crate::common;

use common::precision::{mode_of, start_auto, status};
use common::{repo_path, spawn_server, temp_dir};
use serde_json::json;

#[test]
fn a_mode_the_host_lacks_and_a_pool_size_of_its_own_fail_that_model_only() {
    let dir = temp_dir("precision-refused");
    let half = repo_path("models/half_plus_three");
    let config = json!({"model_config_list": [
        {"name": "plain", "base_path": half},
        {"name": "fp16", "base_path": half, "session_config": {"mixed_precision": "float16"}},
        {"name": "pinned", "base_path": half, "session_config": {"intra_op_parallelism_threads": 7}},
    ]});
    let mut settings = common::config_settings(&config, &dir);
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

#[test]
fn auto_shows_its_decision_and_the_next_start_reuses_it() {
    let dir = temp_dir("precision-auto");
    let config = json!({"model_config_list": [{"name": "adder", "base_path": repo_path("models/adder")}]});
    let url = start_auto(&config, &dir);
    assert_eq!(status(&url, "adder").0, "AVAILABLE");
    let first = mode_of(&url, "adder");
    let chosen = first["chosen"].as_str().unwrap().to_string();
    assert_eq!(first["reused"], false);
    let tried = first["tried"].as_array().unwrap();
    assert_eq!(
        (&tried[0]["mode"], &tried[0]["verdict"]),
        (&json!("float32"), &json!("the reference"))
    );
    assert_eq!(tried[1]["mode"], "float32+xla");
    assert!(tried.iter().any(|t| t["mode"] == chosen.as_str()), "{first}");
    let metrics = reqwest::blocking::get(format!("{url}/metrics"))
        .unwrap()
        .text()
        .unwrap();
    let series = format!("tfserve_model_mode_speedup{{mode=\"{chosen}\",model=\"adder\",version=\"2\"}}");
    assert!(metrics.contains(&series), "no {series} in {metrics}");
    let kept: Vec<_> = std::fs::read_dir(dir.join("cache/modes")).unwrap().collect();
    assert_eq!(kept.len(), 1);
    let inspected = tfserve::inspect::modes_report(&repo_path("models/adder/2"), &dir.join("cache")).unwrap();
    assert!(inspected.starts_with("Mode chosen on "), "{inspected}");
    assert!(inspected.contains(&format!("runs with {chosen}: ")), "{inspected}");
    assert!(inspected.contains("  float32+xla "), "{inspected}");

    let restarted = start_auto(&config, &dir);
    assert_eq!(status(&restarted, "adder").0, "AVAILABLE");
    let again = mode_of(&restarted, "adder");
    assert_eq!((&again["reused"], &again["chosen"]), (&json!(true), &json!(chosen)));
    let _ = std::fs::remove_dir_all(&dir);
}
