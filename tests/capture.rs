//! Request/response capture end to end: the `tfserve` binary captures REST
//! requests of three dialects and a gRPC call into all three sinks, and what
//! reads each sink in production reads them (pandas for the JSON Lines, tf.data
//! and tensorflow-serving-api for the TFRecords, the `cloudevents` SDK for the
//! events); a captured TFRecord file then warms a model up; SIGTERM writes out
//! what is still queued; and a sink too slow to keep up loses records, not requests.

mod common;

use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tfserve::proto::tensorflow::serving::prediction_service_client::PredictionServiceClient;

use common::grpc::predict_x;
use common::process::{start, Server};
use common::{client_python, repo_path, temp_dir};

const CONSUMERS: &str = "tests/capture/consumers.py";

/// The CloudEvents receiver, answering each event after `delay` seconds.
struct Sink {
    child: Child,
    url: String,
}

impl Drop for Sink {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn sink(events: &Path, delay: f64) -> Sink {
    let mut child = Command::new(client_python())
        .arg(repo_path(CONSUMERS))
        .args(["sink", &events.display().to_string(), &delay.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .expect("the CloudEvents receiver starts");
    let mut port = String::new();
    let stdout = child.stdout.take().expect("stdout is piped");
    std::io::BufReader::new(stdout).read_line(&mut port).unwrap();
    let url = format!("http://127.0.0.1:{}/", port.trim());
    Sink { child, url }
}

fn sigterm_and_wait(server: &mut Server) {
    let pid = server.child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let deadline = Instant::now() + Duration::from_secs(60);
    while server.child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "no exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
}

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

fn post(server: &Server, path: &str, content_type: &str, id: &str, body: &str) -> String {
    let response = common::client()
        .post(format!("{}{path}", server.url))
        .header("content-type", content_type)
        .header("x-request-id", id)
        .header("authorization", "Bearer secret-token")
        .body(body.to_string())
        .send()
        .unwrap();
    assert_eq!(response.status(), 200, "{path}");
    response.text().unwrap()
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
    let mut server = start(&[
        "--rest_api_port=0",
        "--port=0",
        "--host=127.0.0.1",
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

    let output = Command::new(client_python())
        .arg(repo_path(CONSUMERS))
        .args([
            "read",
            &jsonl.display().to_string(),
            &prefix.display().to_string(),
            &events.display().to_string(),
        ])
        .env("TF_CPP_MIN_LOG_LEVEL", "3")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let read: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();

    // SageMaker Data Capture's JSON Lines, one per exchange, bodies as sent.
    let records = read["jsonl"]["records"].as_array().unwrap();
    let by_id = |id: &str| {
        records
            .iter()
            .find(|r| r["id"] == id)
            .unwrap_or_else(|| panic!("{id}: {records:?}"))
    };
    assert_eq!(records.len(), 4, "{records:?}");
    assert!(read["jsonl"]["files"][0].as_str().unwrap().starts_with("half/"));
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
    assert!(!stdout.contains("secret-token"), "a header reached the capture");

    // TF Serving's PredictionLog records, from the model's logging_config.
    let logs = read["tfrecord"]["logs"].as_array().unwrap();
    assert_eq!(logs.len(), 4, "{logs:?}");
    for log in logs {
        assert_eq!(
            (log["model"].as_str(), log["version"].as_i64()),
            (Some("half"), Some(1))
        );
        assert_eq!(log["signature"], "serving_default");
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
    let warm = start(&[
        "--rest_api_port=0",
        "--port=0",
        "--host=127.0.0.1",
        "--model_name=half",
        &format!("--model_base_path={}", model.display()),
    ]);
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
fn a_slow_sink_loses_records_and_counts_them_but_never_a_request() {
    let dir = temp_dir("capture-slow");
    // A receiver that takes 2 s per event, behind a queue of two.
    let sink = sink(&dir.join("events.jsonl"), 2.0);
    let server = start(&[
        "--rest_api_port=0",
        "--port=0",
        "--host=127.0.0.1",
        "--model_name=half",
        &format!("--model_base_path={}", repo_path("models/half_plus_three").display()),
        &format!("--capture_cloudevents_url={}", sink.url),
        "--capture_queue_size=2",
    ]);
    let client = common::client();
    for i in 0..40 {
        let answer: Value = client
            .post(format!("{}/v1/models/half:predict", server.url))
            .body(format!(r#"{{"instances": [{i}.0]}}"#))
            .send()
            .unwrap()
            .json()
            .unwrap();
        assert_eq!(answer, json!({"predictions": [f64::from(i) / 2.0 + 3.0]}));
    }
    let metrics = client
        .get(format!("{}/metrics", server.url))
        .send()
        .unwrap()
        .text()
        .unwrap();
    let dropped: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("tfserve_capture_dropped_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    // 80 events: the receiver takes one every 2 s and the queues hold a few,
    // so at least 70 are lost, counted once per event or (dropped before the
    // writer) once per record of two events.
    assert!(dropped >= 35.0, "{metrics}");
    drop(server);
    drop(sink);
    let _ = std::fs::remove_dir_all(&dir);
}
