//! The request path on the mock runtime: decode, batch, run, encode, and the
//! errors on the way, without TensorFlow.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::batcher::{BatchParams, Batcher};
use crate::error::ApiError;
use crate::model_config::{ModelSource, VersionPolicy};
use crate::python_handlers::{HandlerSet, HandlerSettings};
use crate::registry::Registry;
use crate::registry::{BatchingPolicy, LoadOptions, SwapPolicy};
use crate::runtime::mock::MockLoader;
use crate::runtime::SessionConfig;
use crate::service::*;

/// A service over `model/1` and `model/2` (y = x + version), the second
/// taking `run_ms` per run, with `batching` on or off.
fn service(name: &str, batching: bool, run_ms: u64, timeout: Duration) -> (Service, PathBuf) {
    service_with(name, batching, timeout, &[("run_ms", &run_ms.to_string())])
}

/// `service`, with `files` (the mock loader's instructions) in `model/2`.
fn service_with(name: &str, batching: bool, timeout: Duration, files: &[(&str, &str)]) -> (Service, PathBuf) {
    let root = std::env::temp_dir().join(format!("tfserve-service-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    for version in ["1", "2"] {
        std::fs::create_dir_all(root.join("model").join(version)).unwrap();
        std::fs::write(root.join("model").join(version).join("saved_model.pb"), b"").unwrap();
    }
    for (file, text) in files {
        std::fs::write(root.join("model/2").join(file), text).unwrap();
    }
    let options = LoadOptions {
        loader: Arc::new(MockLoader::default()),
        tags: vec!["serve".into()],
        session: SessionConfig::default(),
        batcher: Batcher::new(2).unwrap(),
        batching: BatchingPolicy {
            enabled: batching,
            params: BatchParams {
                max_batch_size: 8,
                batch_timeout_micros: 1000,
                ..BatchParams::default()
            },
            overrides: Default::default(),
            unbatched_queue: 16,
            gpu_batches_in_flight: 2,
        },
        swap: SwapPolicy::AvailabilityPreserving,
        load_timeout: None,
        storage: Default::default(),
        allow_access: Default::default(),
        activity: Default::default(),
        capture_prefix: None,
    };
    let registry = Registry::new(options).unwrap();
    registry.sync(&[ModelSource::with_policy(
        "model",
        root.join("model"),
        VersionPolicy::All,
    )]);
    let handlers = Arc::new(HandlerSet::new(HandlerSettings {
        handler_path: None,
        shared_code_dir: None,
        deps_dir: root.join("deps"),
        workers: crate::python_handlers::WorkerSettings {
            python: "python3".into(),
            workers: 1,
            queue: 1,
            max_rss_bytes: 0,
            max_calls: 0,
        },
    }));
    (Service::new(registry, handlers, timeout), root)
}

fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
        .block_on(future)
}

fn predict(service: &Service, selector: VersionSelector, body: &str) -> Result<Value, ApiError> {
    let bytes = block_on(crate::tfs::json::predict(
        service,
        "model",
        &selector,
        body.as_bytes(),
        &mut Trace::default(),
    ))?;
    Ok(serde_json::from_slice(&bytes).unwrap())
}

#[test]
fn predicts_in_both_layouts_through_the_batcher() {
    for batching in [false, true] {
        let (service, root) = service(&format!("layouts-{batching}"), batching, 0, Duration::from_secs(5));
        let rows = predict(&service, VersionSelector::Specific(1), r#"{"instances": [1.0, 2.5]}"#).unwrap();
        assert_eq!(rows, json!({"predictions": [2.0, 3.5]}));
        let columns = predict(
            &service,
            VersionSelector::Latest,
            r#"{"inputs": {"x": [[1.0], [2.0]]}}"#,
        )
        .unwrap();
        assert_eq!(columns, json!({"outputs": [[3.0], [4.0]]}));
        let scalar = predict(&service, VersionSelector::Latest, r#"{"inputs": 1.5}"#).unwrap();
        assert_eq!(scalar, json!({"outputs": 3.5}));
        std::fs::remove_dir_all(root).unwrap();
    }
}

#[test]
fn running_out_of_memory_answers_503_and_the_next_request_runs() {
    let (service, root) = service_with("oom", true, Duration::from_secs(5), &[("oom_rows", "4")]);
    let error = predict(
        &service,
        VersionSelector::Latest,
        r#"{"instances": [1, 2, 3, 4, 5, 6]}"#,
    )
    .unwrap_err();
    assert_eq!(error.status().as_u16(), 503, "{error}");
    assert_eq!(crate::status::grpc_code(error.code()), tonic::Code::ResourceExhausted);
    assert!(error.to_string().contains("OOM"), "{error}");
    let rows = predict(&service, VersionSelector::Latest, r#"{"instances": [1.0, 2.0]}"#).unwrap();
    assert_eq!(rows, json!({"predictions": [3.0, 4.0]}));
    std::fs::remove_dir_all(root).unwrap();
}

#[test]
fn the_trace_records_what_a_request_resolved_to() {
    let (service, root) = service("trace", true, 0, Duration::from_secs(5));
    let mut trace = Trace::default();
    let body: &[u8] = br#"{"instances": [1.0, 2.0, 3.0]}"#;
    block_on(crate::tfs::json::predict(
        &service,
        "model",
        &VersionSelector::Latest,
        body,
        &mut trace,
    ))
    .unwrap();
    assert_eq!(trace.model.as_deref(), Some("model"));
    assert_eq!(trace.version, Some(2));
    assert_eq!(trace.signature_name(), Some("serving_default"));
    assert_eq!(trace.batch_rows, Some(3));
    std::fs::remove_dir_all(root).unwrap();
}

#[test]
fn errors_carry_tf_serving_statuses() {
    let (service, root) = service("errors", false, 0, Duration::from_secs(5));
    let status = |result: Result<Value, ApiError>| result.unwrap_err().status().as_u16();
    let latest = || VersionSelector::Latest;
    assert_eq!(status(predict(&service, latest(), r#"{"instances": [1.0],"#)), 400);
    assert_eq!(status(predict(&service, latest(), r#"{"instances": ["a"]}"#)), 400);
    let unknown_signature = r#"{"signature_name": "nope", "instances": [1.0]}"#;
    // TF Serving's REST API: InvalidArgument from GetInfoMap.
    assert_eq!(status(predict(&service, latest(), unknown_signature)), 400);
    assert_eq!(
        status(predict(
            &service,
            VersionSelector::Specific(9),
            r#"{"instances": [1.0]}"#
        )),
        404
    );
    assert_eq!(
        status(predict(
            &service,
            VersionSelector::Label("x".into()),
            r#"{"instances": [1.0]}"#
        )),
        400
    );
    std::fs::remove_dir_all(root).unwrap();
}

#[test]
fn a_run_past_the_deadline_answers_504() {
    let (service, root) = service("timeout", false, 300, Duration::from_millis(50));
    let error = predict(&service, VersionSelector::Specific(2), r#"{"instances": [1.0]}"#).unwrap_err();
    assert!(matches!(error, ApiError::Timeout(50)), "{error}");
    assert_eq!(error.status().as_u16(), 504);
    std::fs::remove_dir_all(root).unwrap();
}

#[test]
fn a_client_that_went_away_stops_the_wait() {
    let (service, root) = service("gone", false, 300, Duration::from_secs(5));
    let mut trace = Trace {
        client_gone: Some(Box::new(|| true)),
        ..Trace::default()
    };
    let body: &[u8] = br#"{"instances": [1.0]}"#;
    let error = block_on(crate::tfs::json::predict(
        &service,
        "model",
        &VersionSelector::Specific(2),
        body,
        &mut trace,
    ))
    .unwrap_err();
    assert!(matches!(error, ApiError::ClientGone), "{error}");
    std::fs::remove_dir_all(root).unwrap();
}

#[test]
fn the_default_model_is_the_configured_one_or_the_first() {
    let (service, root) = service("default-model", false, 0, Duration::from_secs(5));
    assert_eq!(service.default_model().as_deref(), Some("model"));
    let named = service.with_default_model(Some("other".into()));
    assert_eq!(named.default_model().as_deref(), Some("other"));
    std::fs::remove_dir_all(root).unwrap();
}

#[test]
fn status_and_metadata_follow_tf_serving() {
    let (service, root) = service("status", false, 0, Duration::from_secs(5));
    let status = crate::tfs::json::model_status(&service, "model", &VersionSelector::Latest).unwrap();
    assert_eq!(status["model_version_status"].as_array().unwrap().len(), 2);
    assert_eq!(status["model_version_status"][1]["state"], "AVAILABLE");
    let metadata = crate::tfs::json::model_metadata(&service, "model", &VersionSelector::Specific(1)).unwrap();
    assert_eq!(metadata["model_spec"]["version"], "1");
    let def = &metadata["metadata"]["signature_def"]["signature_def"]["serving_default"];
    assert_eq!(def["inputs"]["x"]["dtype"], "DT_FLOAT");
    assert_eq!(def["method_name"], "tensorflow/serving/predict");
    std::fs::remove_dir_all(root).unwrap();
}

#[test]
fn classify_needs_an_examples_input() {
    let (service, root) = service("classify", false, 0, Duration::from_secs(5));
    let body = br#"{"examples": [{"x": 1.0}]}"#;
    let error = block_on(crate::tfs::json::classify_or_regress(
        &service,
        "model",
        &VersionSelector::Latest,
        body,
        crate::signature::CLASSIFY_METHOD,
        &mut Trace::default(),
    ))
    .unwrap_err();
    assert!(
        error.to_string().starts_with("No classification inputs found"),
        "{error}"
    );
    let strict = service.with_method_name_check(true);
    let error = block_on(crate::tfs::json::classify_or_regress(
        &strict,
        "model",
        &VersionSelector::Latest,
        body,
        crate::signature::REGRESS_METHOD,
        &mut Trace::default(),
    ))
    .unwrap_err();
    assert_eq!(
        error.to_string(),
        "Expected regression signature method_name to be tensorflow/serving/regress. Was: tensorflow/serving/predict"
    );
    std::fs::remove_dir_all(root).unwrap();
}

#[test]
fn large_bodies_leave_the_worker_without_a_copy_when_shared() {
    use crate::service::RequestBody;
    let read = bytes::Bytes::from(vec![7u8; 1 << 20]);
    assert_eq!(
        read.shared().as_ptr(),
        read.as_ptr(),
        "the connection's bytes are shared"
    );
    let made: &[u8] = &read[..16];
    assert_ne!(made.shared().as_ptr(), made.as_ptr(), "a borrowed slice is copied");
    let decoded = block_on(crate::service::decode_body(&read, |body: &[u8]| Ok(body.len())));
    assert_eq!(decoded.unwrap(), 1 << 20);
}
