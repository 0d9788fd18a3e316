//! `--custom_op_paths`: a custom op built here from tests/custom_op/scale_add.cc
//! against the C API headers set up with libtensorflow, and a model that calls it.

use crate::common;

use std::path::PathBuf;
use std::process::Command;

use common::{repo_path, spawn_server};
use serde_json::{json, Value};

/// Builds the op library into its own directory under target/.
fn build_op() -> PathBuf {
    let dir = repo_path("target/custom-op");
    std::fs::create_dir_all(&dir).unwrap();
    let library = dir.join("scale_add.so");
    let tf = repo_path(".libtensorflow");
    let output = Command::new(std::env::var("CXX").unwrap_or_else(|_| "c++".into()))
        .args(["-shared", "-fPIC", "-O2"])
        .arg(repo_path("tests/custom_op/scale_add.cc"))
        .arg(format!("-I{}", tf.join("include").display()))
        .arg(format!("-L{}", tf.join("lib").display()))
        .arg("-ltensorflow_framework")
        .arg("-o")
        .arg(&library)
        .output()
        .expect("a C++ compiler (c++) is installed");
    assert!(
        output.status.success(),
        "building the custom op failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    dir
}

#[test]
fn a_model_using_a_custom_op_serves_once_the_library_is_loaded_and_its_class_allowed() {
    let ops = build_op();
    let mut settings = common::model_settings("scale_add", repo_path("tests/custom_op/scale_add_model"));
    settings.tensorflow.custom_op_paths = Some(format!(" {} ,", ops.display()));
    // The library's ops are native code the audit cannot read: refused by default.
    let refused = spawn_server(settings.clone());
    let status: Value = reqwest::blocking::get(format!("http://{refused}/v1/models/scale_add"))
        .unwrap()
        .json()
        .unwrap();
    let version = &status["model_version_status"][0];
    assert_eq!(version["state"], "END", "{status}");
    let message = version["status"]["error_message"].as_str().unwrap_or_default();
    assert!(
        message.contains("reaches TfserveScaleAdd") && message.contains("class custom_ops"),
        "{message}"
    );
    settings.security.allow_model_access = "custom_ops".into();
    let addr = spawn_server(settings);
    let response = reqwest::blocking::Client::new()
        .post(format!("http://{addr}/v1/models/scale_add:predict"))
        .json(&json!({"instances": [1.0, 2.0, -1.0]}))
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let body: Value = response.json().unwrap();
    assert_eq!(body, json!({"predictions": [4.0, 7.0, -2.0]}));
}

#[test]
fn libraries_that_cannot_load_stop_start_up_by_name() {
    let error = tfserve::server::start::load_custom_ops("/nonexistent/ops.so")
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("/nonexistent/ops.so") && error.contains("no such file"),
        "{error}"
    );
    let dir = repo_path("target/custom-op-bad");
    std::fs::create_dir_all(&dir).unwrap();
    let bogus = dir.join("bogus.so");
    std::fs::write(&bogus, "not a shared object").unwrap();
    let error = tfserve::server::start::load_custom_ops(&dir.display().to_string())
        .unwrap_err()
        .to_string();
    assert!(
        error.starts_with(&format!("custom op library {}", bogus.display())),
        "{error}"
    );
}
