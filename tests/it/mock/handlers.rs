//! Models shipping `code/inference.py` (tests/handlers/*): the documented
//! handler forms run unchanged, over HTTP and in `tfserve transform`; a
//! model without handlers is untouched. Handlers that
//! fail: `handler_faults.rs`; in multi-model mode: `handler_models.rs`.

use crate::common;

use std::path::Path;

use common::handlers::{archive, base_url, invocation, invoke};
use common::{repo_path, spawn_server, temp_dir};
use serde_json::{json, Value};

#[test]
fn json_and_csv_input_output_pair() {
    let answer = invocation("pair", "application/json", r#"{"instances": [1.0, 2.0, 5.0]}"#);
    assert_eq!(
        (answer.status, answer.json()),
        (200, json!({"predictions": [3.5, 4.0, 5.5]}))
    );
    let answer = invocation("pair", "text/csv", "1.0,2.0,5.0");
    assert_eq!(
        (answer.status, answer.json()),
        (200, json!({"predictions": [3.5, 4.0, 5.5]}))
    );
    // output_handler answers with the Accept type.
    let answer = invoke(
        base_url(),
        "/invocations",
        "pair",
        "text/csv",
        Some("application/jsonlines"),
        b"1.0".to_vec(),
    );
    assert_eq!(answer.content_type, "application/jsonlines");
    // The model's own error reaches output_handler, which raises it: 500, as the container.
    let answer = invocation("pair", "application/json", r#"{"instances": [[1.0, 2.0], [3.0]]}"#);
    assert_eq!(answer.status, 500, "{}", answer.body);
    assert!(answer.error().contains("ragged"), "{}", answer.body);
    let answer = invocation("pair", "text/plain", "1.0");
    assert_eq!(answer.status, 500);
    assert!(
        answer.error().contains("unsupported content type text/plain"),
        "{}",
        answer.body
    );
}

#[test]
fn handler_calls_the_model_through_rest_uri() {
    let answer = invoke(
        base_url(),
        "/invocations",
        "rest",
        "text/csv",
        Some("application/json"),
        b"1.0,2.0".to_vec(),
    );
    assert_eq!(answer.status, 200, "{}", answer.body);
    let body = answer.json();
    assert_eq!(body["predictions"], json!([3.5, 4.0]));
    let context = &body["context"];
    let port = base_url().rsplit(':').next().unwrap();
    assert_eq!(
        context["rest_uri"],
        format!("http://127.0.0.1:{port}/v1/models/rest:predict")
    );
    assert_eq!(context["model_name"], "rest");
    assert_eq!(context["method"], "predict");
    assert_eq!(context["model_version"], Value::Null);
    assert_eq!(context["custom_attributes"], "tfs-model-name=rest");
    assert_eq!(context["request_content_type"], "text/csv");
    assert_eq!(context["accept_header"], "application/json");
    assert_eq!(context["content_length"], 7);
}

#[test]
fn handler_exceptions_answer_with_their_status() {
    let cases = [
        ("documented", 415, "Unsupported content type \"application/json\""),
        ("status", 422, "field 'x' must hold numbers"),
        ("plain", 500, "the handler broke"),
    ];
    for (kind, status, message) in cases {
        let answer = invocation("raising", "application/json", json!({"fail": kind}).to_string());
        assert_eq!((answer.status, answer.error().as_str()), (status, message), "{kind}");
    }
    let answer = invocation("raising", "application/json", "{}");
    assert_eq!((answer.status, answer.json()), (200, json!({"ok": true})));
    // A handler past the request deadline: 504, and the worker is not waited for.
    let started = std::time::Instant::now();
    let answer = invocation("raising", "application/json", json!({"fail": "slow"}).to_string());
    assert_eq!(answer.status, 504, "{}", answer.body);
    assert!(started.elapsed() < std::time::Duration::from_millis(2400));
}

#[test]
fn rest_uri_works_under_tls_and_auth() {
    let root = temp_dir("handlers-secure");
    archive(&root, "rest", "half_plus_three", Some("rest"));
    let generated = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    std::fs::write(root.join("cert.pem"), generated.cert.pem()).unwrap();
    std::fs::write(root.join("key.pem"), generated.key_pair.serialize_pem()).unwrap();
    let mut settings = common::local_settings();
    settings.models.models_dir = root.clone();
    settings.security.enable_ssl = true;
    settings.security.secret_pem = Some(root.join("cert.pem"));
    settings.security.secret_key = Some(root.join("key.pem"));
    settings.security.enable_auth = true;
    settings.security.auth_username = Some("admin".into());
    settings.security.auth_password = Some(tfserve::settings::Secret("p@ss word".into()));
    settings.handlers.python_workers = 1;
    let addr = spawn_server(settings);
    let client = reqwest::blocking::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(generated.cert.pem().as_bytes()).unwrap())
        .build()
        .unwrap();
    let response = client
        .post(format!("https://localhost:{}/invocations", addr.port()))
        .basic_auth("admin", Some("p@ss word"))
        .header("Content-Type", "text/csv")
        .header("X-Amzn-SageMaker-Custom-Attributes", "tfs-model-name=rest")
        .body("2.0")
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let body: Value = response.json().unwrap();
    assert_eq!(body["predictions"], json!([4.0]));
    let uri = body["context"]["rest_uri"].as_str().unwrap();
    assert!(uri.starts_with("http://admin:p%40ss%20word@127.0.0.1:"), "{uri}");
    assert!(!uri.contains(&format!(":{}/", addr.port())), "{uri} is the TLS port");
}

#[test]
fn config_reloads_load_and_drop_handlers() {
    let root = temp_dir("handlers-reload");
    let plain = archive(&root, "plain", "half_plus_three", None);
    let pair = archive(&root, "pair", "half_plus_three", Some("pair"));
    let config = root.join("models.json");
    let write_config = |base: &Path| {
        let text = json!({"model_config_list": [{"name": "m", "base_path": base}]}).to_string();
        std::fs::write(&config, text).unwrap();
    };
    write_config(&plain);
    let mut settings = common::local_settings();
    settings.models.model_config_file = Some(config.clone());
    settings.handlers.python_workers = 1;
    let base = format!("http://{}", spawn_server(settings));
    let lines = || invoke(&base, "/invocations", "m", "text/csv", None, b"1.0\n2.0".to_vec());
    assert_eq!(lines().status, 200);
    let reload = || {
        let response = reqwest::blocking::Client::new()
            .post(format!("{base}/tfserve/config:reload"))
            .send()
            .unwrap();
        assert_eq!(response.status().as_u16(), 200, "{}", response.text().unwrap());
    };
    // Now "m" lives where code/inference.py reads CSV as one row: lines fail in it.
    write_config(&pair);
    reload();
    assert_eq!(lines().status, 500);
    write_config(&plain);
    reload();
    assert_eq!(lines().status, 200);
    // An inference.py that cannot load: the model answers 500 naming it, until the file is fixed.
    let bad = archive(&root, "bad", "half_plus_three", None);
    std::fs::create_dir_all(bad.join("code")).unwrap();
    std::fs::write(bad.join("code/inference.py"), "def handler(:\n").unwrap();
    write_config(&bad);
    reload();
    let answer = lines();
    assert_eq!(answer.status, 500, "{}", answer.body);
    assert!(answer.error().starts_with("model m: cannot load "), "{}", answer.body);
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::copy(
        repo_path("tests/handlers/pair/code/inference.py"),
        bad.join("code/inference.py"),
    )
    .unwrap();
    reload();
    let answer = invoke(&base, "/invocations", "m", "text/csv", None, b"1.0,2.0".to_vec());
    assert_eq!(
        (answer.status, answer.json()),
        (200, json!({"predictions": [3.5, 4.0]}))
    );
}

#[test]
fn handler_calls_the_model_over_grpc() {
    let answer = invocation("grpc", "application/json", r#"{"instances": [1.0, 5.0]}"#);
    assert_eq!(answer.status, 200, "{}", answer.body);
    let body = answer.json();
    assert_eq!(body["predictions"], json!([3.5, 5.5]));
    let port = body["grpc_port"].as_str().unwrap().to_string();
    assert!(port.parse::<u16>().is_ok_and(|p| p > 0), "{body}");
    assert_eq!(body["grpc_uri"], format!("localhost:{port}"));
}

#[test]
fn code_lib_wins_over_requirements() {
    let answer = invocation("withlib", "application/json", r#"{"values": [1.0, 2.0]}"#);
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.json(), json!({"scaled_by": 10.0, "predictions": [8.0, 13.0]}));
}

#[test]
fn requirements_are_installed_from_the_package_index() {
    let answer = invocation("withreqs", "application/json", r#"{"instances": [4.0]}"#);
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.json(), json!({"modelOutput": [5.0]}));
}

#[test]
fn models_without_handlers_keep_the_default_conversions() {
    let answer = invocation("plain", "text/csv", "1.0,2.0,5.0");
    assert_eq!(
        (answer.status, answer.json()),
        (200, json!({"predictions": [3.5, 4.0, 5.5]}))
    );
    // TF Serving's routes never go through handlers.
    let response = reqwest::blocking::Client::new()
        .post(format!("{}/v1/models/pair:predict", base_url()))
        .json(&json!({"instances": [1.0]}))
        .send()
        .unwrap();
    assert_eq!(response.json::<Value>().unwrap(), json!({"predictions": [3.5]}));
    // The dashboard tells the two kinds apart.
    let state: Value = reqwest::blocking::get(format!("{}/dashboard/state", base_url()))
        .unwrap()
        .json()
        .unwrap();
    let handlers = |name: &str| {
        state["models"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == name)
            .map(|m| m["handlers"].clone())
    };
    assert_eq!(handlers("pair"), Some(json!(true)));
    assert_eq!(handlers("plain"), Some(json!(false)));
}
