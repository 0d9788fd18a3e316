//! Hot reload under load: 20 version swaps on disk and 20 config-file
//! reloads while 4 clients per dialect (TF Serving REST, SageMaker, Simple
//! TensorFlow Serving, KServe v2, TF Serving gRPC) loop on the model. Every
//! request must be answered 200 with one of the versions' answers.

use crate::common;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::grpc::predict_x;
use common::{copy_dir, repo_path, spawn_with_grpc, temp_dir};
use serde_json::{json, Value};
use tfserve::proto::tensorflow::serving::prediction_service_client::PredictionServiceClient;

const SWAPS: u32 = 20;
const CLIENTS_PER_DIALECT: usize = 4;

/// For x = 1 the adder's versions answer 2.0 (its version 1) or 3.0 (its version 2).
fn right(y: Option<f64>) -> bool {
    matches!(y, Some(v) if v == 2.0 || v == 3.0)
}

fn publish(from: &Path, base: &Path, version: u32) {
    let staging = base.join(format!(".staging-{version}"));
    copy_dir(from, &staging);
    std::fs::rename(&staging, base.join(version.to_string())).unwrap();
}

fn write_config(path: &Path, adder: &Path, text_format: bool) {
    let half = repo_path("models/half_plus_three");
    let text = if text_format {
        format!(
            "model_config_list {{ config {{ name: 'adder' base_path: '{}' }} config {{ name: 'half' base_path: '{}' }} }}",
            adder.display(),
            half.display()
        )
    } else {
        json!({"model_config_list": {"config": [
            {"name": "adder", "base_path": adder},
            {"name": "half", "base_path": half}
        ]}})
        .to_string()
    };
    // Written aside and renamed, as a config management tool would.
    let staging = path.with_extension("new");
    std::fs::write(&staging, text).unwrap();
    std::fs::rename(&staging, path).unwrap();
}

/// One REST request of a dialect; the answer's y, or what went wrong.
fn rest_call(client: &reqwest::blocking::Client, url: &str, dialect: usize) -> Result<f64, String> {
    let (path, body, headers): (&str, Value, Vec<(&str, &str)>) = match dialect {
        0 => ("/v1/models/adder:predict", json!({"instances": [1.0]}), vec![]),
        1 => (
            "/invocations",
            json!({"instances": [1.0]}),
            vec![("X-Amzn-SageMaker-Custom-Attributes", "tfs-model-name=adder")],
        ),
        2 => ("/", json!({"model_name": "adder", "data": {"x": [1.0]}}), vec![]),
        _ => (
            "/v2/models/adder/infer",
            json!({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1.0]}]}),
            vec![],
        ),
    };
    let mut request = client.post(format!("{url}{path}")).json(&body);
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let response = request.send().map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let answer: Value = response.json().map_err(|e| e.to_string())?;
    let y = match dialect {
        0 | 1 => answer["predictions"][0].as_f64(),
        2 => answer["y"][0].as_f64(),
        _ => answer["outputs"][0]["data"][0].as_f64(),
    };
    match (status, y) {
        (200, y) if right(y) => Ok(y.unwrap_or_default()),
        _ => Err(format!("dialect {dialect}: {status} {answer}")),
    }
}

struct Tally {
    answered: usize,
    failures: Vec<String>,
}

fn clients(
    rest: SocketAddr,
    grpc: SocketAddr,
    stop: &Arc<AtomicBool>,
    tally: &Arc<Mutex<Tally>>,
) -> Vec<std::thread::JoinHandle<()>> {
    let mut threads = Vec::new();
    for dialect in 0..5 {
        for _ in 0..CLIENTS_PER_DIALECT {
            let (stop, tally) = (stop.clone(), tally.clone());
            threads.push(std::thread::spawn(move || {
                let record = |result: Result<f64, String>| {
                    let mut tally = tally.lock().unwrap();
                    match result {
                        Ok(_) => tally.answered += 1,
                        Err(failure) => tally.failures.push(failure),
                    }
                };
                if dialect == 4 {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .unwrap();
                    runtime.block_on(async {
                        let mut client = PredictionServiceClient::connect(format!("http://{grpc}"))
                            .await
                            .unwrap();
                        while !stop.load(Ordering::Relaxed) {
                            let answer = client.predict(predict_x("adder", 1.0)).await;
                            record(match answer {
                                Ok(r) => {
                                    let y = r
                                        .into_inner()
                                        .outputs
                                        .get("y")
                                        .and_then(|t| t.float_val.first().copied());
                                    let y = y.map(f64::from);
                                    if right(y) {
                                        Ok(y.unwrap_or_default())
                                    } else {
                                        Err(format!("gRPC: wrong answer {y:?}"))
                                    }
                                }
                                Err(status) => Err(format!("gRPC: {status}")),
                            });
                        }
                    });
                } else {
                    let client = reqwest::blocking::Client::new();
                    let url = format!("http://{rest}");
                    while !stop.load(Ordering::Relaxed) {
                        record(rest_call(&client, &url, dialect));
                    }
                }
            }));
        }
    }
    threads
}

fn serving(rest: SocketAddr, version: u32) -> bool {
    let status: Value = reqwest::blocking::get(format!("http://{rest}/v1/models/adder"))
        .and_then(|r| r.json())
        .unwrap_or(Value::Null);
    status["model_version_status"].as_array().is_some_and(|all| {
        all.iter()
            .any(|s| s["version"].as_str().and_then(|v| v.parse().ok()) == Some(version) && s["state"] == "AVAILABLE")
    })
}

#[test]
fn swaps_and_reloads_under_load_lose_nothing() {
    let dir = temp_dir("reload-load");
    let base = dir.join("adder");
    publish(&repo_path("models/adder/1"), &base, 1);
    let config = dir.join("models.config");
    write_config(&config, &base, true);
    let mut settings = common::local_settings();
    settings.models.model_config_file = Some(config.clone());
    settings.models.file_system_poll_wait_seconds = 1;
    let (rest, grpc) = spawn_with_grpc(settings);

    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Mutex::new(Tally {
        answered: 0,
        failures: Vec::new(),
    }));
    let threads = clients(rest, grpc, &stop, &tally);
    let reload = reqwest::blocking::Client::new();
    for swap in 0..SWAPS {
        let version = swap + 2;
        // Alternate the two adders' contents, so every swap changes the answer.
        let from = if version % 2 == 0 {
            "models/adder/2"
        } else {
            "models/adder/1"
        };
        publish(&repo_path(from), &base, version);
        let deadline = Instant::now() + Duration::from_secs(60);
        while !serving(rest, version) {
            assert!(Instant::now() < deadline, "version {version} never served");
            std::thread::sleep(Duration::from_millis(50));
        }
        write_config(&config, &base, swap % 2 == 1);
        let answer = reload
            .post(format!("http://{rest}/tfserve/config:reload"))
            .send()
            .unwrap();
        assert_eq!(answer.status(), 200, "reload {swap}");
    }
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        thread.join().unwrap();
    }
    let tally = tally.lock().unwrap();
    assert!(
        tally.failures.is_empty(),
        "{} of {} requests failed: {:?}",
        tally.failures.len(),
        tally.answered + tally.failures.len(),
        &tally.failures[..tally.failures.len().min(5)]
    );
    assert!(tally.answered > 200, "only {} answered", tally.answered);
    eprintln!(
        "{SWAPS} swaps and {SWAPS} reloads: {} requests answered, 0 failed",
        tally.answered
    );
}
