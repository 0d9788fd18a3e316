//! The binary's two listeners: KServe's TensorFlow runtime command line, a
//! SIGTERM drain with gRPC calls in flight, and access lines for both.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::drain::Tally;
use common::grpc::predict_x;
use common::process::{serve_model, start_local, start_with_env, try_start};
use common::repo_path;
use tfserve::proto::tensorflow::serving::prediction_service_client::PredictionServiceClient;

/// A port nothing listens on right now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("an ephemeral port")
}

#[test]
fn kserve_command_line_serves_grpc_and_rest() {
    let base_path = repo_path("models/half_plus_three");
    // Fixed ports are the point here; one picked free can be taken before the
    // server binds it, so a failed start is retried with new ones.
    let mut attempts = 0;
    let (server, grpc_port, rest_port) = loop {
        let (grpc_port, rest_port) = (free_port(), free_port());
        let started = try_start(&[
            "--model_name=half",
            &format!("--port={grpc_port}"),
            &format!("--rest_api_port={rest_port}"),
            &format!("--model_base_path={}", base_path.display()),
            "--rest_api_timeout_in_ms=60000",
            "--host=127.0.0.1",
        ]);
        attempts += 1;
        match started {
            Ok(server) => break (server, grpc_port, rest_port),
            Err(log) if attempts < 5 => eprintln!("start failed, retrying with other ports:\n{log}"),
            Err(log) => panic!("the server did not start in 5 attempts:\n{log}"),
        }
    };
    assert_eq!(server.url, format!("http://127.0.0.1:{rest_port}"));
    assert_eq!(server.grpc, format!("127.0.0.1:{grpc_port}"));
    let rest: serde_json::Value = reqwest::blocking::Client::new()
        .post(format!("{}/v1/models/half:predict", server.url))
        .body(r#"{"instances": [2.0]}"#)
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(rest, serde_json::json!({"predictions": [4.0]}));
    let answer = tokio::runtime::Runtime::new().unwrap().block_on(async {
        let mut client = PredictionServiceClient::connect(format!("http://127.0.0.1:{grpc_port}"))
            .await
            .unwrap();
        client.predict(predict_x("half", 2.0)).await
    });
    assert_eq!(answer.unwrap().into_inner().outputs["y"].float_val, vec![4.0]);
}

#[test]
fn sigterm_drains_grpc_calls_in_flight() {
    let base_path = repo_path("models/half_plus_three");
    let mut server = start_local(&[
        "--drain_timeout=1",
        &format!("--model_base_path={}", base_path.display()),
    ]);
    let target = format!("http://{}", server.grpc);
    let tally = Arc::new(Tally::default());
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let (target, tally) = (target.clone(), tally.clone());
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                runtime.block_on(async move {
                    let mut client = None;
                    while tally.running() {
                        if client.is_none() {
                            match PredictionServiceClient::connect(target.clone()).await {
                                Ok(c) => client = Some(c),
                                Err(_) => {
                                    tally.refused();
                                    tokio::time::sleep(Duration::from_millis(20)).await;
                                    continue;
                                }
                            }
                        }
                        let Some(c) = client.as_mut() else { continue };
                        match c.predict(predict_x("default", 2.0)).await {
                            Ok(answer) if answer.get_ref().outputs["y"].float_val == [4.0] => tally.answered(),
                            Ok(answer) => tally.lost(format!("wrong answer {:?}", answer.get_ref())),
                            // Refused before being accepted: the listener has closed
                            // (or said GOAWAY before the call started).
                            Err(status) if is_refused(&status) => {
                                tally.refused();
                                client = None;
                            }
                            Err(status) => tally.lost(status.to_string()),
                        }
                    }
                })
            })
        })
        .collect();
    // The calls are under way before the server is told to stop.
    common::wait_for("a hundred calls answered", || tally.answered_count() > 100);
    server.sigterm();
    let status = server.exit_within(Duration::from_secs(20));
    assert!(status.success(), "exit status {status}");
    tally.finish(clients);
}

/// A call the server never took: the connection was refused or sent GOAWAY
/// before the call started, or the client dropped the call unsent when the
/// connection closed (hyper's `Canceled`: "never processed").
fn is_refused(status: &tonic::Status) -> bool {
    let message = status.message();
    let unsent = status.code() == tonic::Code::Cancelled && format!("{status:?}").contains("hyper::Error(Canceled");
    unsent
        || status.code() == tonic::Code::Unavailable
            && (message.contains("tcp connect error") || message.contains("GOAWAY") || message.contains("refused"))
}

/// Waits for `count` access lines (JSON objects of target `access`) in the log.
fn access_lines(log: &Mutex<Vec<String>>, count: usize) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let lines: Vec<serde_json::Value> = log
            .lock()
            .unwrap()
            .iter()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter(|line| line["target"] == "access")
            .collect();
        if lines.len() >= count || Instant::now() > deadline {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn json_logs_and_an_access_line_per_rest_and_grpc_request() {
    let base_path = repo_path("models/half_plus_three");
    let server = serve_model(
        "half",
        &base_path,
        &["--log_format=json", "--access_log_sampling_rate=1"],
    );
    let body = r#"{"instances": [1.0, 2.0]}"#;
    let response = reqwest::blocking::Client::new()
        .post(format!("{}/v1/models/half:predict", server.url))
        .header("x-request-id", "rest-1")
        .body(body)
        .send()
        .unwrap();
    assert_eq!(response.status(), 200);
    let answer = response.text().unwrap();
    let grpc = format!("http://{}", server.grpc);
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let mut client = PredictionServiceClient::connect(grpc).await.unwrap();
        client.predict(predict_x("half", 2.0)).await.unwrap();
        assert_eq!(
            client.predict(predict_x("nope", 2.0)).await.unwrap_err().code(),
            tonic::Code::NotFound
        );
    });

    let lines = access_lines(&server.log, 3);
    let rest = lines
        .iter()
        .find(|l| l["protocol"] == "rest")
        .expect("a REST access line");
    assert_eq!(rest["request_id"], "rest-1", "{rest}");
    assert_eq!(rest["method"], "POST");
    assert_eq!(rest["path"], "/v1/models/half:predict");
    assert_eq!(rest["route"], "predict");
    assert_eq!(rest["model"], "half");
    assert_eq!(rest["version"], 1);
    assert_eq!(rest["signature"], "serving_default");
    assert_eq!(rest["status"], 200);
    assert_eq!(rest["grpc_code"], serde_json::Value::Null);
    assert_eq!(rest["bytes_in"], body.len());
    assert_eq!(rest["bytes_out"], answer.len());
    assert_eq!(rest["level"], "INFO");
    assert!(rest["run_ms"].as_f64().is_some_and(|ms| ms >= 0.0), "{rest}");
    assert!(rest["total_ms"].as_f64().is_some_and(|ms| ms > 0.0), "{rest}");
    // The answer's wait for its connection, once its batch ran: part of the whole.
    let answer_wait = rest["answer_wait_ms"].as_f64().unwrap_or(-1.0);
    assert!(
        (0.0..=rest["total_ms"].as_f64().unwrap_or(0.0)).contains(&answer_wait),
        "{rest}"
    );
    assert!(
        rest["client"].as_str().is_some_and(|c| c.starts_with("127.0.0.1:")),
        "{rest}"
    );
    assert!(rest["time"].as_str().is_some_and(|t| t.ends_with('Z')), "{rest}");

    let grpc: Vec<&serde_json::Value> = lines.iter().filter(|l| l["protocol"] == "grpc").collect();
    assert_eq!(grpc.len(), 2, "{lines:?}");
    let ok = grpc.iter().find(|l| l["grpc_code"] == "OK").expect("a gRPC OK line");
    assert_eq!(ok["status"], 0);
    assert_eq!(
        (&ok["method"], &ok["path"], &ok["model"]),
        (&"gRPC".into(), &"predict".into(), &"half".into())
    );
    assert_eq!(ok["version"], 1);
    assert!(ok["bytes_in"].as_u64().is_some_and(|n| n > 0) && ok["bytes_out"].as_u64().is_some_and(|n| n > 0));
    assert!(ok["answer_wait_ms"].as_f64().is_some_and(|ms| ms >= 0.0), "{ok}");
    let refused = grpc
        .iter()
        .find(|l| l["grpc_code"] == "NOT_FOUND")
        .expect("a gRPC NOT_FOUND line");
    assert_eq!(refused["status"], 5);
    // Refused before it resolved a model, the line still names the one asked for.
    assert_eq!(refused["model"], "nope", "{refused}");
    assert_eq!(refused["answer_wait_ms"], serde_json::Value::Null, "{refused}");

    // Every line on stderr is JSON, TensorFlow's own C++ lines included.
    let log = server.log.lock().unwrap().clone();
    assert!(!log.is_empty());
    for line in &log {
        let parsed: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        for key in ["time", "level", "target", "message"] {
            assert!(parsed.get(key).is_some(), "no {key}: {line}");
        }
    }
}

#[test]
fn every_line_of_a_json_log_parses_from_start_through_errors_to_sigterm() {
    // A TF1 model with classify and regress signatures: TensorFlow logs
    // while it loads, and its graph's signatures take serialized Examples.
    // TensorFlow's own level left at its default, whatever the test run set.
    let mut server = start_with_env(
        &[
            "--rest_api_port=0",
            "--port=0",
            "--host=127.0.0.1",
            "--model_name=two",
            &format!("--model_base_path={}", repo_path("models/tf1_half_plus_two").display()),
            "--log_format=json",
            "--access_log_sampling_rate=1",
        ],
        &[("TF_CPP_MIN_LOG_LEVEL", "0")],
    );
    let client = reqwest::blocking::Client::new();
    for i in 0..30 {
        let (path, body) = match i % 3 {
            0 => ("/v1/models/two:predict", r#"{"instances": [1.0]}"#),
            1 => ("/v1/models/two:predict", r#"{"instances": ["#),
            _ => ("/v1/models/nope:predict", r#"{"instances": [1.0]}"#),
        };
        let status = client
            .post(format!("{}{path}", server.url))
            .body(body)
            .send()
            .unwrap()
            .status();
        assert_eq!(status.is_success(), i % 3 == 0, "{path} {body}");
    }
    // An example without the feature the graph parses: TensorFlow logs its
    // own OP_REQUIRES line on stderr.
    let classify = r#"{"signature_name": "classify_x_to_y", "examples": [{"y": 1.0}]}"#;
    let answer = client
        .post(format!("{}/v1/models/two:classify", server.url))
        .body(classify)
        .send()
        .unwrap();
    assert!(answer.status().is_client_error(), "{:?}", answer.text());
    server.sigterm();
    assert!(server.child.wait().unwrap().success());
    server.wait_for_line("shut down cleanly");
    let log = server.log.lock().unwrap().clone();
    let parsed: Vec<serde_json::Value> = log
        .iter()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}\n{}", log.join("\n"))))
        .collect();
    let targets: std::collections::BTreeSet<&str> = parsed.iter().filter_map(|l| l["target"].as_str()).collect();
    assert!(targets.contains("tensorflow"), "{targets:?}");
    assert!(targets.contains("access"), "{targets:?}");
    // The access lines' statuses are numbers, and a request for a model not
    // served names the model it asked for.
    let access: Vec<&serde_json::Value> = parsed.iter().filter(|l| l["target"] == "access").collect();
    assert!(access.iter().all(|l| l["status"].is_u64()), "{access:?}");
    let refused = access
        .iter()
        .find(|l| l["path"] == "/v1/models/nope:predict")
        .expect("an access line for the unknown model");
    assert_eq!(
        (refused["status"].as_u64(), refused["model"].as_str()),
        (Some(404), Some("nope"))
    );
    let op_requires = parsed
        .iter()
        .find(|l| l["target"] == "tensorflow" && l["message"].as_str().is_some_and(|m| m.contains("OP_REQUIRES")));
    assert!(op_requires.is_some_and(|l| l["source"].as_str().is_some()), "{log:?}");
}
