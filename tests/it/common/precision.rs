//! Mixed precision as its tests look at it: a model's load ending, the mode
//! the dashboard gives it, and a server choosing every model's mode.

use serde_json::Value;
use tfserve::runtime::precision::PrecisionChoice;

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

/// A server choosing every model's mode, its decisions kept under `dir`.
pub fn start_auto(config: &Value, dir: &std::path::Path) -> String {
    let mut settings = super::config_settings(config, dir);
    settings.tensorflow.mixed_precision = Some(PrecisionChoice::Auto);
    settings.models.model_cache_dir = Some(dir.join("cache"));
    format!("http://{}", spawn_server(settings))
}
