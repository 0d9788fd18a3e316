//! A fault on disk only TensorFlow's restore sees: truncated variables fail
//! that version, not the model. The other faults: `mock/faults.rs`.

use crate::common;

use std::path::Path;

use common::{copy_dir, repo_path, spawn_server, temp_dir, wait_for};
use serde_json::{json, Value};

/// The adder's `version` answers x + version; served from `root`/adder, polled every second.
fn server(root: &Path) -> String {
    let mut settings = common::local_settings();
    settings.models.models_dir = root.to_path_buf();
    settings.models.file_system_poll_wait_seconds = 1;
    format!("http://{}", spawn_server(settings))
}

#[test]
fn truncated_variables_fail_the_version_not_the_model() {
    let root = temp_dir("faults-truncated");
    let base = root.join("cnn");
    copy_dir(&repo_path("models/mnist_cnn/1"), &base.join("1"));
    let url = server(&root);
    let image = vec![vec![vec![0.0f32; 1]; 28]; 28];
    let classify = || {
        common::client()
            .post(format!("{url}/v1/models/cnn:predict"))
            .json(&json!({"instances": [image]}))
            .send()
            .expect("request is answered")
            .status()
            .as_u16()
    };
    assert_eq!(classify(), 200);
    copy_dir(&repo_path("models/mnist_cnn/1"), &base.join("2"));
    let data = std::fs::read_dir(base.join("2/variables"))
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().contains(".data-"))
        .expect("a variables data file");
    let bytes = std::fs::read(&data).unwrap();
    std::fs::write(&data, &bytes[..bytes.len() / 2]).unwrap();
    let status = || -> Value {
        common::client()
            .get(format!("{url}/v1/models/cnn"))
            .send()
            .unwrap()
            .json()
            .unwrap()
    };
    wait_for("version 2 to fail", || {
        status()["model_version_status"].as_array().is_some_and(|all| {
            all.iter()
                .any(|s| s["version"] == "2" && s["state"] == "END" && s["status"]["error_message"] != "")
        })
    });
    assert_eq!(classify(), 200);
}
