//! Mixed precision as its tests look at it: a model's load ending, the mode
//! the dashboard gives it, models whose speed depends on their mode, and a
//! server choosing every model's mode.

use serde_json::Value;
use tfserve::runtime::precision::PrecisionChoice;
use tfserve::tensor::{Tensor, TensorData};

use super::spawn_server;

/// The model's status once its load ended: (state, error message).
pub fn status(url: &str, model: &str) -> (String, String) {
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

/// The `mode` the dashboard's state gives a model's newest version.
pub fn mode_of(url: &str, model: &str) -> Value {
    let state: Value = reqwest::blocking::get(format!("{url}/dashboard/state"))
        .and_then(|answer| answer.json())
        .unwrap();
    let models = state["models"].as_array().unwrap();
    let entry = models.iter().find(|m| m["name"] == model).unwrap();
    entry["versions"][0]["mode"].clone()
}

/// The model's mode once its trial decided.
pub fn decided(url: &str, model: &str) -> Value {
    let mut mode = Value::Null;
    super::wait_for(&format!("model {model}'s mode trial"), || {
        mode = mode_of(url, model);
        mode["state"] == "decided"
    });
    mode
}

/// A server choosing every model's mode, its decisions kept under `dir`.
pub fn start_auto(config: &Value, dir: &std::path::Path) -> String {
    let mut settings = super::config_settings(config, dir);
    settings.tensorflow.mixed_precision = Some(PrecisionChoice::Auto);
    settings.models.model_cache_dir = Some(dir.join("cache"));
    format!("http://{}", spawn_server(settings))
}

/// A mock runtime's model folder (`runtime::mock::MockLoader`), version 1:
/// a run takes 20 ms in float32 and 2 ms with XLA; with `records` warm-up
/// requests of one row each (none: no warm-up file).
pub fn faster_with_xla(root: &std::path::Path, name: &str, records: usize) -> std::path::PathBuf {
    let version = root.join(name).join("1");
    std::fs::create_dir_all(&version).unwrap();
    // An empty SavedModel for the audit; its weights tell the models apart.
    std::fs::write(version.join("saved_model.pb"), b"").unwrap();
    std::fs::create_dir_all(version.join("variables")).unwrap();
    std::fs::write(version.join("variables/variables.index"), name.as_bytes()).unwrap();
    std::fs::write(version.join("run_ms"), "20").unwrap();
    std::fs::write(version.join("run_ms.float32+xla"), "2").unwrap();
    if records > 0 {
        write_warmup(&version, name, "x", &[1], records);
    }
    root.join(name)
}

/// Writes `records` warm-up requests of `model` into the version folder
/// `version`: input `key` shaped `shape` (its first dimension the rows),
/// values in [0, 1) from a fixed sequence that differs between records.
pub fn write_warmup(version: &std::path::Path, model: &str, key: &str, shape: &[usize], records: usize) {
    std::fs::create_dir_all(version.join("assets.extra")).unwrap();
    let elements: usize = shape.iter().product();
    let mut file = Vec::new();
    for record in 0..records {
        let values = (0..elements)
            .map(|i| ((i * 31 + record * 17) % 101) as f32 / 101.0)
            .collect();
        let inputs = vec![(key.to_string(), Tensor::new(shape.to_vec(), TensorData::Float(values)))];
        file.extend(tfserve::capture::tfrecord_record(&tfserve::capture::Exchange {
            model,
            version: 1,
            signature: "serving_default",
            sampling_rate: 1.0,
            inputs: Some(&inputs),
            outputs: None,
            kind: tfserve::capture::LogKind::Predict,
            multi_inference: None,
        }));
    }
    std::fs::write(version.join("assets.extra/tf_serving_warmup_requests"), file).unwrap();
}
