//! Handlers that fail (tests/handlers/faulty): one that crashes, hangs or
//! leaks costs only its own worker process, and a server without Python
//! serves plain models and says what handlers need.

use crate::common;

use serde_json::json;
use tfserve::settings::Settings;

use common::handlers::{archive, invoke, Answer};
use common::{spawn_server, temp_dir};

/// A server of its own over `faulty` (tests/handlers/faulty), whose body names what goes wrong.
fn faulty_server(configure: impl FnOnce(&mut Settings)) -> String {
    let root = temp_dir("handlers-faulty");
    archive(&root, "faulty", "half_plus_three", Some("faulty"));
    let mut settings = common::local_settings();
    settings.models.models_dir = root;
    settings.handlers.python_workers = 2;
    configure(&mut settings);
    format!("http://{}", spawn_server(settings))
}

fn faulty_call(base: &str, body: &str) -> Answer {
    invoke(
        base,
        "/invocations",
        "faulty",
        "text/plain",
        None,
        body.as_bytes().to_vec(),
    )
}

fn restarts(base: &str, reason: &str) -> f64 {
    common::metric(
        base,
        &format!("tfserve_python_worker_restarts_total{{reason=\"{reason}\"}}"),
    )
}

fn assert_echoes(base: &str) {
    let answer = faulty_call(base, "1.0");
    assert_eq!(
        (answer.status, answer.json()),
        (200, json!({"predictions": [3.5]})),
        "{}",
        answer.body
    );
}

#[test]
fn a_handler_that_kills_its_process_fails_only_its_own_call() {
    let base = faulty_server(|_| {});
    assert_echoes(&base);
    for _ in 0..3 {
        let answer = faulty_call(&base, "crash");
        assert_eq!(answer.status, 500, "{}", answer.body);
        assert!(
            answer.error().contains("worker running this call exited"),
            "{}",
            answer.body
        );
        assert!(answer.error().contains("exit status: 3"), "{}", answer.body);
        // The replacement loads the model's handlers again and answers.
        assert_echoes(&base);
    }
    assert_eq!(restarts(&base, "crash"), 3.0);
}

#[test]
fn a_hanging_handler_times_out_and_its_worker_is_replaced() {
    let base = faulty_server(|settings| settings.http.rest_api_timeout_in_ms = 1000);
    // Both workers hang at once: each call gets its 504 at the deadline...
    let hangs: Vec<_> = (0..2)
        .map(|_| {
            let base = base.clone();
            std::thread::spawn(move || faulty_call(&base, "hang"))
        })
        .collect();
    for hang in hangs {
        let answer = hang.join().unwrap();
        assert_eq!(answer.status, 504, "{}", answer.body);
        assert!(answer.error().contains("rest_api_timeout_in_ms"), "{}", answer.body);
    }
    // ...and both workers come back rather than staying stuck in sleep().
    let started = std::time::Instant::now();
    for _ in 0..4 {
        assert_echoes(&base);
    }
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    assert_eq!(restarts(&base, "timeout"), 2.0);
}

#[test]
fn a_leaking_handler_is_bounded_by_the_worker_memory_limit() {
    let base = faulty_server(|settings| {
        settings.handlers.python_workers = 1;
        settings.handlers.python_worker_max_rss_mb = 200;
    });
    // Each call keeps 64 MiB alive in the worker; without the bound it would grow to 1.3 GB.
    for _ in 0..20 {
        let answer = faulty_call(&base, "leak");
        assert_eq!(answer.status, 200, "{}", answer.body);
        assert!(answer.json()["held_mib"].as_u64().unwrap() <= 256, "{}", answer.body);
    }
    assert!(restarts(&base, "memory") >= 5.0, "{}", restarts(&base, "memory"));
    assert_echoes(&base);
}

#[test]
fn a_server_without_python_serves_plain_models_and_says_what_handlers_need() {
    let root = temp_dir("handlers-no-python");
    archive(&root, "pair", "half_plus_three", Some("pair"));
    archive(&root, "plain", "half_plus_three", None);
    let mut settings = common::local_settings();
    settings.models.models_dir = root.clone();
    settings.models.model_roots = vec![root.clone()];
    settings.models.multi_model = true;
    settings.handlers.python_executable = "/nonexistent/python3".into();
    let base = format!("http://{}", spawn_server(settings));
    let client = reqwest::blocking::Client::new();
    let load = |name: &str| {
        client
            .post(format!("{base}/models"))
            .json(&json!({"model_name": name, "url": root.join(name)}))
            .send()
            .unwrap()
    };
    let refused = load("pair");
    let status = refused.status().as_u16();
    let text = refused.text().unwrap();
    assert_eq!(status, 500, "{text}");
    assert!(
        text.contains("/nonexistent/python3") && text.contains("--python_executable"),
        "{text}"
    );
    assert_eq!(load("plain").status().as_u16(), 200);
    let answer = invoke(
        &base,
        "/models/plain/invoke",
        "plain",
        "application/json",
        None,
        br#"{"instances": [1.0]}"#.to_vec(),
    );
    assert_eq!((answer.status, answer.json()), (200, json!({"predictions": [3.5]})));
}
