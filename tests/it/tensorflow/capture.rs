//! Request/response capture end to end: the `tfserve` binary captures REST
//! requests of three dialects and a gRPC call into all three sinks, and what
//! reads each sink in production reads them (pandas for the JSON Lines, tf.data
//! and tensorflow-serving-api for the TFRecords, the `cloudevents` SDK for the
//! events); SIGTERM writes out what is still queued. TF Serving's request
//! logs and warm-up from them: `capture_logs.rs`; failing sinks and
//! retention: `capture_limits.rs`.

use crate::common;

use std::path::Path;

use serde_json::{json, Value};
use tfserve::proto::tensorflow::serving::prediction_service_client::PredictionServiceClient;

use common::capture::{consumers, post, sigterm_and_wait, sink};
use common::grpc::predict_x;
use common::process::{serve_model, start_local};
use common::{repo_path, temp_dir};

fn grpc_predict(grpc: &str, x: f32) {
    let request = predict_x("half", x);
    let mut grpc_request = tonic::Request::new(request);
    grpc_request
        .metadata_mut()
        .insert("x-request-id", "grpc-1".parse().unwrap());
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let mut client = PredictionServiceClient::connect(format!("http://{grpc}"))
            .await
            .unwrap();
        client.predict(grpc_request).await.unwrap();
    });
}

fn config_file(dir: &Path, prefix: &Path) -> std::path::PathBuf {
    let config = dir.join("models.config");
    let text = format!(
        "model_config_list {{ config {{ name: 'half' base_path: '{}' model_platform: 'tensorflow'\n\
         logging_config {{ log_collector_config {{ type: '' filename_prefix: '{}' }}\n\
         sampling_config {{ sampling_rate: 1.0 }} }} }} }}",
        repo_path("models/half_plus_three").display(),
        prefix.display()
    );
    std::fs::write(&config, text).unwrap();
    config
}

#[test]
fn every_sink_is_read_by_its_consumer_and_sigterm_writes_out_the_queue() {
    let dir = temp_dir("capture-sinks");
    let (jsonl, prefix, events) = (dir.join("jsonl"), dir.join("logs/half"), dir.join("events.jsonl"));
    // Each event waits 0.2 s at the receiver: at SIGTERM most are still queued.
    let sink = sink(&events, 0.2);
    let config = config_file(&dir, &prefix);
    let mut server = start_local(&[
        // No drain: SIGTERM finds the events still queued.
        "--drain_timeout=0",
        &format!("--model_config_file={}", config.display()),
        &format!("--capture_jsonl_dir={}", jsonl.display()),
        &format!("--capture_cloudevents_url={}", sink.url),
    ]);
    let tfs = post(
        &server,
        "/v1/models/half:predict",
        "application/json",
        "tfs-1",
        r#"{"instances": [1.0, 2.0]}"#,
    );
    let sagemaker = post(&server, "/invocations", "text/csv", "sagemaker-1", "1.0\n5.0");
    let v2 = r#"{"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [4.0]}]}"#;
    let kserve = post(&server, "/v2/models/half/infer", "application/json", "kserve-1", v2);
    grpc_predict(&server.grpc, 6.0);
    sigterm_and_wait(&mut server);
    let log = server.log.lock().unwrap().join("\n");
    assert!(!log.contains("not written"), "{log}");

    let read = consumers(&[
        "read",
        &jsonl.display().to_string(),
        &prefix.display().to_string(),
        &events.display().to_string(),
    ]);

    // SageMaker Data Capture's JSON Lines, one per exchange, bodies as sent.
    let records = read["jsonl"]["records"].as_array().unwrap();
    let by_id = |id: &str| {
        records
            .iter()
            .find(|r| r["id"] == id)
            .unwrap_or_else(|| panic!("{id}: {records:?}"))
    };
    assert_eq!(records.len(), 4, "{records:?}");
    // SageMaker's layout: the endpoint (here the model), then the variant.
    assert!(read["jsonl"]["files"][0]
        .as_str()
        .unwrap()
        .starts_with("half/AllTraffic/"));
    let tfs_record = by_id("tfs-1");
    assert_eq!(tfs_record["endpointInput"]["encoding"], "JSON");
    assert_eq!(tfs_record["endpointInput"]["data"], r#"{"instances": [1.0, 2.0]}"#);
    assert_eq!(tfs_record["endpointOutput"]["data"], tfs);
    assert_eq!(tfs_record["endpointOutput"]["type"], "application/json");
    let csv = by_id("sagemaker-1");
    assert_eq!(csv["endpointInput"]["encoding"], "CSV");
    assert_eq!(csv["endpointInput"]["data"], "1.0\n5.0");
    assert_eq!(csv["endpointInput"]["type"], "text/csv");
    assert_eq!(csv["endpointOutput"]["data"], sagemaker);
    assert_eq!(by_id("kserve-1")["endpointOutput"]["data"], kserve);
    // gRPC carries no JSON: its tensors are written as TF Serving's columnar JSON.
    let grpc = by_id("grpc-1");
    assert_eq!(grpc["endpointInput"]["data"], r#"{"inputs":[6.0]}"#);
    assert_eq!(grpc["endpointOutput"]["data"], r#"{"outputs":[6.0]}"#);
    assert!(
        !read.to_string().contains("secret-token"),
        "a header reached the capture"
    );

    // TF Serving's PredictionLog records, from the model's logging_config.
    let logs = read["tfrecord"]["logs"].as_array().unwrap();
    assert_eq!(logs.len(), 4, "{logs:?}");
    for log in logs {
        assert_eq!(
            (log["model"].as_str(), log["version"].as_i64()),
            (Some("half"), Some(1))
        );
        assert_eq!(
            (log["kind"].as_str(), log["signature"].as_str()),
            (Some("predict_log"), Some("serving_default"))
        );
        assert_eq!(log["sampling_rate"], 1.0);
        let (x, y) = (common::floats(&log["x"]), common::floats(&log["y"]));
        assert!(x.iter().zip(&y).all(|(x, y)| (x / 2.0 + 3.0 - y).abs() < 1e-6), "{log}");
    }

    // KServe's logger events: a request and a response per exchange, sharing
    // the request's id, every one posted although SIGTERM came first.
    let events = read["events"].as_array().unwrap();
    assert_eq!(events.len(), 8, "{events:?}");
    for event in events {
        assert_eq!(event["specversion"], "1.0");
        assert_eq!(event["inferenceservicename"], "half");
        assert_eq!(event["component"], "predictor");
    }
    let kinds = |id: &str| {
        let mut kinds: Vec<_> = events
            .iter()
            .filter(|e| e["id"] == id)
            .map(|e| e["type"].as_str().unwrap().to_string())
            .collect();
        kinds.sort();
        kinds
    };
    assert_eq!(
        kinds("kserve-1"),
        [
            "org.kubeflow.serving.inference.request",
            "org.kubeflow.serving.inference.response"
        ]
    );
    let request_event = events
        .iter()
        .find(|e| e["id"] == "kserve-1" && e["type"] == "org.kubeflow.serving.inference.request")
        .unwrap();
    assert_eq!(request_event["data"], v2);
    assert_eq!(request_event["datacontenttype"], "application/json");

    // The captured file, dropped into a model as its warm-up, warms it up.
    let model = dir.join("warm/half");
    common::copy_dir(&repo_path("models/half_plus_three"), &model);
    let assets = model.join("1/assets.extra");
    std::fs::create_dir_all(&assets).unwrap();
    let captured = read["tfrecord"]["files"][0].as_str().unwrap();
    std::fs::copy(captured, assets.join("tf_serving_warmup_requests")).unwrap();
    let warm = serve_model("half", &model, &[]);
    let log = warm.log.lock().unwrap().join("\n");
    assert!(
        log.contains("4 warm-up run(s)") && log.contains("from assets.extra"),
        "{log}"
    );
    drop(warm);
    drop(sink);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn data_capture_files_lie_under_endpoint_and_variant_with_the_inference_id_and_custom_attributes() {
    let dir = temp_dir("capture-sagemaker-layout");
    let jsonl = dir.join("capture");
    let mut server = serve_model(
        "half",
        &repo_path("models/half_plus_three"),
        &[
            &format!("--capture_jsonl_dir={}", jsonl.display()),
            "--capture_endpoint_name=flowers-prod",
            "--capture_variant_name=blue",
        ],
    );
    let invoke = |inference_id: Option<&str>, custom_attributes: Option<&str>| {
        let mut request = common::client()
            .post(format!("{}/invocations", server.url))
            .header("content-type", "text/csv")
            .body("1.0");
        if let Some(id) = inference_id {
            request = request.header("X-Amzn-SageMaker-Inference-Id", id);
        }
        if let Some(attributes) = custom_attributes {
            request = request.header("X-Amzn-SageMaker-Custom-Attributes", attributes);
        }
        assert_eq!(request.send().unwrap().status(), 200);
    };
    invoke(Some("inf-42"), Some("trace_id=7f3a, tenant=blue"));
    invoke(None, None);
    sigterm_and_wait(&mut server);
    let read = consumers(&["jsonl", &jsonl.display().to_string()]);
    let files = read["files"].as_array().unwrap();
    assert!(
        files
            .iter()
            .all(|f| f.as_str().unwrap().starts_with("flowers-prod/blue/")),
        "{files:?}"
    );
    let ids: Vec<&Value> = read["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["inferenceId"])
        .collect();
    assert_eq!(ids, [&json!("inf-42"), &Value::Null]);
    let attributes: Vec<&Value> = read["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["customAttributes"])
        .collect();
    assert_eq!(attributes, [&json!("trace_id=7f3a, tenant=blue"), &Value::Null]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn events_carry_every_header_kserves_logger_sets_and_keep_an_incoming_ce_id() {
    let dir = temp_dir("capture-kserve-headers");
    let events = dir.join("events.jsonl");
    let sink = sink(&events, 0.0);
    let mut server = serve_model(
        "half",
        &repo_path("models/half_plus_three"),
        &[
            &format!("--capture_cloudevents_url={}", sink.url),
            "--capture_cloudevents_source=http://flowers-predictor.ml/",
            "--capture_cloudevents_endpoint=canary",
            "--capture_metadata_headers=X-Team,x-tenant",
        ],
    );
    let v2 = r#"{"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [4.0]}]}"#;
    let sent = |path: &str, ce_id: Option<&str>| {
        let mut request = common::client()
            .post(format!("{}{path}", server.url))
            .header("content-type", "application/json")
            .header("x-request-id", "req-1")
            .header("x-team", "vision")
            .header("x-tenant", "a")
            .body(v2.to_string());
        if let Some(id) = ce_id {
            request = request.header("ce-id", id);
        }
        assert_eq!(request.send().unwrap().status(), 200);
    };
    sent("/v2/models/half/infer", Some("ce-77"));
    sent("/v2/models/half/infer", None);
    sigterm_and_wait(&mut server);
    let read = consumers(&["events", &events.display().to_string()]);
    let read = read.as_array().unwrap();
    assert_eq!(read.len(), 4, "{read:?}");
    // KServe's logger keeps an incoming Ce-Id; without one the request's id names both events.
    let ids: Vec<&str> = read.iter().map(|e| e["id"].as_str().unwrap()).collect();
    assert_eq!(ids.iter().filter(|id| **id == "ce-77").count(), 2, "{ids:?}");
    assert_eq!(ids.iter().filter(|id| **id == "req-1").count(), 2, "{ids:?}");
    for event in read {
        // Every attribute KServe's logger (pkg/logger) sets, header by header.
        assert_eq!(
            event["ce_headers"],
            json!([
                "ce-component",
                "ce-endpoint",
                "ce-id",
                "ce-inferenceservicename",
                "ce-metadata",
                "ce-namespace",
                "ce-source",
                "ce-specversion",
                "ce-time",
                "ce-type"
            ]),
            "{event}"
        );
        assert_eq!(event["source"], "http://flowers-predictor.ml/");
        assert_eq!(event["endpoint"], "canary");
        assert_eq!(event["inferenceservicename"], "half");
        assert_eq!(event["component"], "predictor");
        let metadata: Value = serde_json::from_str(event["metadata"].as_str().unwrap()).unwrap();
        assert_eq!(metadata, json!({"X-Team": ["vision"], "X-Tenant": ["a"]}));
    }
    drop(sink);
    let _ = std::fs::remove_dir_all(&dir);
}
