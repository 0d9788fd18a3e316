//! The dynamic batcher end to end: many concurrent clients get exactly their
//! own rows back through merging, padding and splitting; the batch timeout,
//! the queue limit, abandoned requests and the metrics behave as specified.

use crate::common;

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::{assert_close, repo_path, spawn_server};
use serde_json::{json, Value};
use tfserve::batcher::ParamsOverride;

/// One server; each model name is a differently configured alias of a committed model.
fn base_url() -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| {
        let aliases = [
            ("split", "half_plus_three"),
            ("strict", "half_plus_three"),
            ("lone", "half_plus_three"),
            ("full", "half_plus_three"),
            ("drop", "half_plus_three"),
            ("strings", "multi_io"),
            ("tokens", "first_token"),
            ("tokens_nopad", "first_token"),
            ("steered", "half_plus_three"),
        ];
        let configs: String = aliases
            .iter()
            .map(|(name, model)| {
                format!(
                    "config {{ name: '{name}' base_path: '{}' }}\n",
                    repo_path(&format!("models/{model}")).display()
                )
            })
            .collect();
        let dir = std::env::temp_dir().join(format!("tfserve-batching-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let config_path = dir.join("models.config");
        std::fs::write(&config_path, format!("model_config_list {{\n{configs}}}")).unwrap();

        let mut overrides = BTreeMap::new();
        let timeout = |micros: u64, max: usize| ParamsOverride {
            batch_timeout_micros: Some(micros),
            max_batch_size: Some(max),
            ..ParamsOverride::default()
        };
        overrides.insert(
            "split".to_string(),
            ParamsOverride {
                allowed_batch_sizes: Some(vec![2, 4, 8]),
                enable_large_batch_splitting: Some(true),
                max_enqueued_batches: Some(1000),
                ..timeout(2_000, 8)
            },
        );
        overrides.insert("strict".to_string(), timeout(0, 4));
        overrides.insert("lone".to_string(), timeout(150_000, 8));
        overrides.insert(
            "full".to_string(),
            ParamsOverride {
                max_enqueued_batches: Some(1),
                ..timeout(3_000_000, 2)
            },
        );
        overrides.insert("drop".to_string(), timeout(1_500_000, 8));
        overrides.insert(
            "strings".to_string(),
            ParamsOverride {
                max_enqueued_batches: Some(1000),
                ..timeout(2_000, 16)
            },
        );
        overrides.insert(
            "tokens".to_string(),
            ParamsOverride {
                pad_variable_length_inputs: Some(true),
                ..timeout(400_000, 8)
            },
        );
        overrides.insert("tokens_nopad".to_string(), timeout(400_000, 8));
        overrides.insert(
            "steered".to_string(),
            ParamsOverride {
                target_latency_micros: Some(1_000_000),
                max_enqueued_batches: Some(1000),
                ..timeout(0, 8)
            },
        );
        let mut settings = common::local_settings();
        settings.models.model_config_file = Some(config_path);
        settings.batching.enable_batching = true;
        settings.batching.model_batching = overrides;
        format!("http://{}", spawn_server(settings))
    })
}

fn post(model: &str, body: Value) -> (u16, Value, reqwest::header::HeaderMap) {
    let response = reqwest::blocking::Client::new()
        .post(format!("{}/v1/models/{model}:predict", base_url()))
        .json(&body)
        .send()
        .expect("request is answered");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, response.json().expect("JSON answer"), headers)
}

/// The value of a metric line with all the given label fragments.
fn metric(name: &str, labels: &[&str]) -> f64 {
    let text = reqwest::blocking::get(format!("{}/metrics", base_url()))
        .unwrap()
        .text()
        .unwrap();
    text.lines()
        .filter(|line| line.starts_with(name) && line[name.len()..].starts_with(['{', ' ']))
        .filter(|line| labels.iter().all(|l| line.contains(l)))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn concurrent_clients_get_exactly_their_own_rows() {
    let clients: Vec<_> = (0..64)
        .map(|client| {
            std::thread::spawn(move || {
                for request in 0..3 {
                    // 1 to 12 rows: some fit a batch, some are split across batches.
                    let rows = (client * 3 + request) % 12 + 1;
                    let xs: Vec<f64> = (0..rows).map(|j| (client * 1000 + request * 100 + j) as f64).collect();
                    let (status, body, _) = post("split", json!({"instances": xs}));
                    assert_eq!(status, 200, "{body}");
                    let want: Vec<f64> = xs.iter().map(|x| 0.5 * x + 3.0).collect();
                    assert_close(&body["predictions"], &want, 1e-3);

                    let labels: Vec<String> = (0..rows % 4 + 1).map(|j| format!("c{client}-{request}-{j}")).collect();
                    let instances: Vec<Value> = labels
                        .iter()
                        .enumerate()
                        .map(|(j, label)| {
                            json!({"features": [client as f64, j as f64, 1.0], "count": client * 10 + j,
                                   "label": label, "flag": j % 2 == 0})
                        })
                        .collect();
                    let (status, body, _) = post("strings", json!({"instances": instances}));
                    assert_eq!(status, 200, "{body}");
                    for (j, row) in body["predictions"].as_array().unwrap().iter().enumerate() {
                        assert_eq!(row["greeting"], json!(format!("hello {}", labels[j])));
                        assert_eq!(row["count_plus_one"], json!(client * 10 + j + 1));
                        assert_eq!(row["flag_not"], json!(j % 2 != 0));
                        assert_close(&row["total"], &[(client + j) as f64 + 1.0], 1e-3);
                    }
                }
            })
        })
        .collect();
    for client in clients {
        client.join().unwrap();
    }
    // Requests were really merged: batches averaged more than one row.
    let rows = metric("tfserve_batch_size_sum", &["model=\"split\""]);
    let batches = metric("tfserve_batch_size_count", &["model=\"split\""]);
    assert!(batches > 0.0 && rows / batches > 1.0, "mean batch {rows}/{batches}");
    assert!(metric("tfserve_batch_padding_rows_total", &["model=\"split\""]) >= 0.0);
    let ok = metric(
        "tfserve_requests_total",
        &["model=\"split\"", "status=\"200\"", "api=\"predict\""],
    );
    assert!(ok >= 192.0, "{ok}");
}

#[test]
fn variable_lengths_are_padded_only_when_allowed() {
    let send = |model: &'static str, delay_ms: u64, tokens: Value| {
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(delay_ms));
            post(model, json!({"instances": tokens})).1
        })
    };
    let short = send("tokens", 0, json!([[1, 2], [3, 4]]));
    let long = send("tokens", 50, json!([[5, 6, 7, 8, 9]]));
    let (short, long) = (short.join().unwrap(), long.join().unwrap());
    assert_eq!(
        short["predictions"],
        json!([{"first": 1, "width": 5}, {"first": 3, "width": 5}])
    );
    assert_eq!(long["predictions"], json!([{"first": 5, "width": 5}]));

    let short = send("tokens_nopad", 0, json!([[1, 2]]));
    let long = send("tokens_nopad", 50, json!([[5, 6, 7]]));
    assert_eq!(short.join().unwrap()["predictions"], json!([{"first": 1, "width": 2}]));
    assert_eq!(long.join().unwrap()["predictions"], json!([{"first": 5, "width": 3}]));
}

#[test]
fn a_lone_request_runs_when_the_timeout_fires() {
    let started = Instant::now();
    let (status, body, headers) = post("lone", json!({"instances": [2.0]}));
    assert_eq!(status, 200);
    assert_eq!(body, json!({"predictions": [4.0]}));
    assert!(started.elapsed() >= Duration::from_millis(150));
    let queued: f64 = headers["x-queue-time-ms"].to_str().unwrap().parse().unwrap();
    assert!(queued >= 145.0, "queued {queued} ms");
    assert_eq!(headers["x-batch-size"], "1");
    assert!(headers.contains_key("x-inference-time-ms"));
}

#[test]
fn a_full_queue_answers_503() {
    // One row opens a batch that waits 3 s; two more rows need a second batch,
    // but the queue holds one.
    base_url();
    let waiting = std::thread::spawn(|| post("full", json!({"instances": [1.0]})));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while metric("tfserve_queue_depth", &["model=\"full\""]) < 1.0 {
        assert!(std::time::Instant::now() < deadline, "the first request never queued");
        std::thread::sleep(Duration::from_millis(10));
    }
    let (status, body, headers) = post("full", json!({"instances": [1.0, 2.0]}));
    assert_eq!(status, 503, "{body}");
    assert_eq!(headers["retry-after"], "1");
    let message = body["error"].as_str().unwrap();
    assert!(
        message.contains("max_enqueued_batches") && message.contains("model full"),
        "{message}"
    );
    let (status, body, _) = waiting.join().unwrap();
    assert_eq!((status, body), (200, json!({"predictions": [3.5]})));
    assert!(metric("tfserve_rejected_total", &["model=\"full\"", "reason=\"queue_full\""]) >= 1.0);
}

#[test]
fn requests_over_max_batch_size_need_splitting() {
    let (status, body, _) = post("strict", json!({"instances": [1.0, 2.0, 3.0, 4.0, 5.0]}));
    assert_eq!(status, 400);
    let message = body["error"].as_str().unwrap();
    assert!(
        message.contains("5 rows") && message.contains("max_batch_size 4"),
        "{message}"
    );
    let (status, body, _) = post(
        "split",
        json!({"instances": (0..20).map(f64::from).collect::<Vec<_>>()}),
    );
    assert_eq!(status, 200);
    assert_close(
        &body["predictions"],
        &(0..20).map(|x| 0.5 * x as f64 + 3.0).collect::<Vec<_>>(),
        1e-4,
    );
}

#[test]
fn abandoned_requests_are_dropped_before_running() {
    let before_runs = metric("tfserve_batch_size_count", &["model=\"drop\""]);
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let result = client
        .post(format!("{}/v1/models/drop:predict", base_url()))
        .json(&json!({"instances": [1.0]}))
        .send();
    assert!(result.is_err(), "the client gives up before the 1.5 s batch timeout");
    // Its batch is taken when the timeout ends, and dropped then.
    common::wait_for("the abandoned request to be dropped", || {
        metric("tfserve_dropped_total", &["model=\"drop\""]) == 1.0
    });
    assert_eq!(
        metric("tfserve_batch_size_count", &["model=\"drop\""]),
        before_runs,
        "nothing ran"
    );
}

#[test]
fn a_latency_objective_steers_a_models_queue_and_shows_what_it_chose() {
    let refused_before = metric("tfserve_rejected_total", &["model=\"steered\"", "late"]);
    let clients: Vec<_> = (0..16)
        .map(|client| {
            std::thread::spawn(move || {
                let mut refused = 0.0;
                for request in 0..10 {
                    let x = (client * 100 + request) as f64;
                    let (status, body, _) = post("steered", json!({"instances": [x, x + 1.0]}));
                    // A loaded machine can stall runs past the objective; the refusal it then
                    // earns must name the objective, and be counted.
                    if status == 503 {
                        let message = body["error"].as_str().unwrap_or_default();
                        assert!(message.contains("latency objective of 1000.0 ms"), "{body}");
                        refused += 1.0;
                        continue;
                    }
                    assert_eq!(status, 200, "{body}");
                    assert_close(&body["predictions"], &[0.5 * x + 3.0, 0.5 * (x + 1.0) + 3.0], 1e-3);
                }
                refused
            })
        })
        .collect();
    let refused: f64 = clients.into_iter().map(|client| client.join().unwrap()).sum();
    assert!(refused < 160.0, "some requests are answered");
    // An objective of a second for runs of microseconds: batches up to max_batch_size.
    let cap = metric("tfserve_batch_cap", &["model=\"steered\""]);
    assert!((1.0..=8.0).contains(&cap), "{cap}");
    assert_eq!(
        metric("tfserve_batch_cap", &["model=\"strict\""]),
        0.0,
        "no objective, no series"
    );
    let margin = metric("tfserve_batch_objective_margin_seconds", &["model=\"steered\""]);
    assert!(
        (0.0..=0.25).contains(&margin),
        "at most a quarter of the objective: {margin}"
    );
    assert_eq!(
        metric("tfserve_rejected_total", &["model=\"steered\"", "late"]) - refused_before,
        refused
    );
}
