//! Mixed precision and the session options a model may not set alone: a
//! mode this host cannot run fast, and an intra-op pool size that differs
//! from the server's, fail that model's load with the reason while the other
//! models serve; `mixed_precision: auto` serves at once, runs its trials in
//! the background on real requests (warm-up or captured), switches each
//! model where a mode is surely faster, shows it in the dashboard's state and
//! `/metrics`, and keeps it for the next start. What needs TensorFlow's
//! answers: `tensorflow/precision.rs`.

use crate::common;

use std::sync::Arc;

use common::precision::{decided, faster_with_xla, mode_of, status};
use common::{repo_path, spawn_server, spawn_server_on, temp_dir, wait_for};
use reqwest::Method;
use serde_json::json;
use tfserve::batcher::ParamsOverride;
use tfserve::runtime::mock::MockLoader;
use tfserve::runtime::precision::PrecisionChoice;

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

/// Settings for models under `dir` choosing their modes, batched to fixed
/// sizes (XLA is a candidate on a CPU only then), managed under `dir`.
fn auto_settings(config: &serde_json::Value, dir: &std::path::Path, names: &[&str]) -> tfserve::settings::Settings {
    let mut settings = common::config_settings(config, dir);
    settings.tensorflow.mixed_precision = Some(PrecisionChoice::Auto);
    settings.models.model_cache_dir = Some(dir.join("cache"));
    settings.models.model_roots = vec![dir.to_path_buf()];
    settings.batching.enable_batching = true;
    for name in names {
        let padded = ParamsOverride {
            allowed_batch_sizes: Some(vec![1, 4]),
            max_batch_size: Some(4),
            batch_timeout_micros: Some(1000),
            ..ParamsOverride::default()
        };
        settings.batching.model_batching.insert(name.to_string(), padded);
    }
    settings
}

fn predict(url: &str, model: &str) -> (u16, serde_json::Value) {
    let answer = reqwest::blocking::Client::new()
        .post(format!("{url}/v1/models/{model}:predict"))
        .json(&json!({"instances": [1.0]}))
        .send()
        .unwrap();
    (answer.status().as_u16(), answer.json().unwrap_or_default())
}

#[test]
fn auto_serves_at_once_and_switches_each_model_in_the_background() {
    let dir = temp_dir("precision-auto");
    let names = ["a", "b", "c"];
    let models: Vec<_> = names
        .iter()
        .map(|name| json!({"name": name, "base_path": faster_with_xla(&dir, name, 8)}))
        .collect();
    let settings = auto_settings(&json!({ "model_config_list": models }), &dir, &names);
    let url = format!(
        "http://{}",
        spawn_server_on(settings.clone(), Arc::new(MockLoader::default()))
    );

    // Every model serves, in float32, while the trials wait their turn.
    for name in names {
        assert_eq!(predict(&url, name), (200, json!({"predictions": [2.0]})));
    }
    let last = mode_of(&url, "c");
    assert_eq!(
        (&last["state"], &last["chosen"]),
        (&json!("waiting"), &json!("float32")),
        "{last}"
    );
    let (_, listed) = common::call(Method::GET, &format!("{url}/tfserve/models"), None);
    let listed_c = listed["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "c")
        .unwrap();
    let summary = listed_c["versions"][0]["mode"].as_str().unwrap();
    assert!(summary.starts_with("float32; "), "{listed}");
    let ready = reqwest::blocking::get(format!("{url}/v2/health/ready")).unwrap();
    assert_eq!(ready.status().as_u16(), 200);
    // A model added over the management API loads without waiting for them;
    // without warm-up requests it serves float32 and says what to provide.
    let plain = faster_with_xla(&dir, "plain", 0);
    let body = json!({"name": "plain", "base_path": plain.display().to_string()});
    let (code, answer) = common::call(Method::POST, &format!("{url}/tfserve/models"), Some(body));
    assert_eq!(code, 201, "{answer}");
    assert_ne!(mode_of(&url, "c")["state"], "decided", "the load waited for a trial");
    let bare = mode_of(&url, "plain");
    assert_eq!(
        (&bare["state"], &bare["chosen"]),
        (&json!("decided"), &json!("float32")),
        "{bare}"
    );
    assert!(
        bare["reason"].as_str().unwrap().contains("tf_serving_warmup_requests"),
        "{bare}"
    );

    // Each trial switches its model to XLA, 10× faster here, readiness up throughout.
    for name in names {
        let mode = decided(&url, name);
        assert_eq!(
            (&mode["chosen"], &mode["reused"]),
            (&json!("float32+xla"), &json!(false)),
            "{mode}"
        );
        let tried = mode["tried"].as_array().unwrap();
        assert_eq!(
            (&tried[0]["mode"], &tried[0]["verdict"]),
            (&json!("float32"), &json!("the reference"))
        );
        assert!(
            mode["probes"][0]
                .as_str()
                .unwrap()
                .starts_with("its warm-up requests (8 rows"),
            "{mode}"
        );
        assert_eq!(predict(&url, name), (200, json!({"predictions": [2.0]})));
    }
    let metrics = reqwest::blocking::get(format!("{url}/metrics"))
        .unwrap()
        .text()
        .unwrap();
    for name in names {
        let switched =
            format!("tfserve_model_mode_switches_total{{mode=\"float32+xla\",model=\"{name}\",version=\"1\"}} 1");
        assert!(metrics.contains(&switched), "no {switched} in {metrics}");
        assert!(!metrics.contains(&format!(
            "tfserve_model_mode_speedup{{mode=\"float32\",model=\"{name}\""
        )));
    }
    let inspected = tfserve::inspect::modes_report(&dir.join("a/1"), &dir.join("cache")).unwrap();
    assert!(inspected.contains("runs with float32+xla: "), "{inspected}");

    // The next start loads each model straight in its kept mode.
    let restarted = format!("http://{}", spawn_server_on(settings, Arc::new(MockLoader::default())));
    let again = mode_of(&restarted, "a");
    assert_eq!(
        (&again["state"], &again["reused"], &again["chosen"]),
        (&json!("decided"), &json!(true), &json!("float32+xla"))
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn auto_tries_modes_on_captured_requests_where_a_model_ships_none() {
    let dir = temp_dir("precision-captured");
    let base = faster_with_xla(&dir, "m", 0);
    let config = json!({"model_config_list": [{"name": "m", "base_path": base}]});
    let mut settings = auto_settings(&config, &dir, &["m"]);
    let prefix = dir.join("captured/log");
    settings.capture.capture_tfrecord_prefix = Some(prefix.display().to_string());
    settings.capture.capture_flush_seconds = 0.1;
    let url = format!(
        "http://{}",
        spawn_server_on(settings.clone(), Arc::new(MockLoader::default()))
    );
    assert!(mode_of(&url, "m")["reason"]
        .as_str()
        .unwrap()
        .contains("--capture_tfrecord_prefix"));
    for _ in 0..8 {
        assert_eq!(predict(&url, "m").0, 200);
    }
    wait_for("8 captured requests", || {
        tfserve::warmup::records::capture_files(&prefix.display().to_string())
            .iter()
            .filter_map(|f| std::fs::read(f).ok())
            .filter_map(|d| tfserve::warmup::records::parse(&d).ok())
            .map(|records| records.len())
            .sum::<usize>()
            >= 8
    });
    let restarted = format!("http://{}", spawn_server_on(settings, Arc::new(MockLoader::default())));
    let mode = decided(&restarted, "m");
    assert_eq!(mode["chosen"], "float32+xla", "{mode}");
    let probes = mode["probes"][0].as_str().unwrap();
    assert!(
        probes.starts_with(&format!("its requests captured under {}", prefix.display())),
        "{probes}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
