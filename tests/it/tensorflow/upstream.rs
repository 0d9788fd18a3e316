//! The peers' own test suites, ported test by test under `tests/upstream/`
//! and run with their real clients against the `tfserve` binary. Each suite
//! prints a JSON summary; a failure names the upstream tests that failed, and
//! the skipped tests must be exactly the documented ones.

use crate::common;

use std::collections::BTreeSet;
use std::process::Command;

use serde_json::Value;

/// Runs one ported suite with the given Python; its summary line.
fn run_suite(python: std::path::PathBuf, script: &str) -> Value {
    let output = Command::new(python)
        .arg(common::repo_path(script))
        .env("TFSERVE_BIN", env!("CARGO_BIN_EXE_tfserve"))
        // The folder later configs load models from, as an operator whose
        // server reloads its config names it: the confined server reads
        // only beneath the folders it knows at start.
        .env("TFSERVE_MODEL_ROOTS", common::repo_path("tests/upstream/testdata"))
        .env("TF_CPP_MIN_LOG_LEVEL", "3")
        .output()
        .expect("the suite runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let summary: Value = stdout
        .lines()
        .last()
        .and_then(|line| serde_json::from_str(line).ok())
        .unwrap_or_else(|| panic!("{script} printed no summary:\n{stdout}\n{stderr}"));
    let failed = summary["failed"].as_array().map_or(0, Vec::len);
    assert_eq!(failed, 0, "{script}: {}\n{stderr}", summary["failed"]);
    assert!(
        output.status.success() || failed == 0,
        "{script} exited with {}",
        output.status
    );
    summary
}

fn skipped(summary: &Value) -> BTreeSet<String> {
    summary["skipped"]
        .as_object()
        .map(|skips| skips.keys().cloned().collect())
        .unwrap_or_default()
}

#[test]
fn tf_serving_model_server_test_passes() {
    let summary = run_suite(
        common::client_python(),
        "tests/upstream/tensorflow_model_server_test.py",
    );
    assert_eq!(
        skipped(&summary),
        [
            "testPredictOnTfLite",
            "testPredictWithSignatureDefOnTfLite",
            "test_profiler_service_with_valid_trace_request",
            "test_tf_text",
        ]
        .map(String::from)
        .into(),
    );
    assert!(summary["ran"].as_u64().unwrap_or(0) >= 33, "{summary}");
}

#[test]
fn tf_serving_error_answers_match() {
    let summary = run_suite(common::client_python(), "tests/upstream/tf_serving_errors_test.py");
    assert_eq!(skipped(&summary), BTreeSet::new());
    assert!(summary["ran"].as_u64().unwrap_or(0) >= 9, "{summary}");
}

#[test]
fn open_inference_protocol_with_tritonclient_and_requests() {
    let summary = run_suite(
        common::client_python(),
        "tests/upstream/open_inference_protocol_test.py",
    );
    assert_eq!(skipped(&summary), BTreeSet::new());
    assert!(summary["ran"].as_u64().unwrap_or(0) >= 7, "{summary}");
}

#[test]
fn kserve_sdk_clients_work_unchanged() {
    let summary = run_suite(common::client_python(), "tests/upstream/kserve_client_test.py");
    assert_eq!(skipped(&summary), BTreeSet::new());
    assert!(summary["ran"].as_u64().unwrap_or(0) >= 3, "{summary}");
}

#[test]
fn sagemaker_sdk_predictors_work_unchanged() {
    let summary = run_suite(common::sagemaker_python(), "tests/upstream/sagemaker_sdk_test.py");
    assert_eq!(skipped(&summary), BTreeSet::new());
    assert!(summary["ran"].as_u64().unwrap_or(0) >= 7, "{summary}");
}
