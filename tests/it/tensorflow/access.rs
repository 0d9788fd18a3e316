//! Confinement on TensorFlow: the `tests/access` models allowed to run (the
//! audit lets them load) can reach only what Landlock leaves the process,
//! whatever their ops. The audit's refusals: `mock/access.rs`.

use crate::common;

use common::process::serve_model;
use common::{repo_path, temp_dir};
use serde_json::{json, Value};

fn predict(url: &str, model: &str, inputs: Value) -> (u16, Value) {
    common::call(
        reqwest::Method::POST,
        &format!("{url}/v1/models/{model}:predict"),
        Some(json!({"inputs": inputs})),
    )
}

/// Whether this kernel enforces Landlock: the server says so at start.
fn confined(server: &common::process::Server) -> bool {
    let log = server.log.lock().unwrap();
    assert!(
        log.iter()
            .any(|l| l.contains("confined by Landlock") || l.contains("not confined")),
        "the start log says whether the process is confined:\n{}",
        log.join("\n")
    );
    log.iter().any(|l| l.contains("confined by Landlock"))
}

#[test]
fn a_model_allowed_to_read_files_reads_only_what_the_server_may() {
    let base = repo_path("tests/access/models/read_file");
    let server = serve_model("reader", &base, &["--allow_model_access=files_read"]);
    // Its own folder is the server's to read.
    let own = base.join("1/saved_model.pb");
    let (status, answer) = predict(&server.url, "reader", json!({"path": own.display().to_string()}));
    assert_eq!(status, 200, "{answer}");
    if !confined(&server) {
        eprintln!("this kernel has no Landlock: only the allowed read was checked");
        return;
    }
    let (status, answer) = predict(&server.url, "reader", json!({"path": "/etc/hostname"}));
    assert!((400..600).contains(&status), "{status} {answer}");
    assert!(answer.to_string().contains("Permission denied"), "{answer}");
    // The server goes on serving.
    let (status, _) = predict(&server.url, "reader", json!({"path": own.display().to_string()}));
    assert_eq!(status, 200);

    // Unconfined, the same request reads the file: the refusal above is the confinement's.
    let open = serve_model("reader", &base, &["--allow_model_access=files_read", "--confine=false"]);
    let (status, answer) = predict(&open.url, "reader", json!({"path": "/etc/hostname"}));
    assert_eq!(status, 200, "{answer}");
}

#[test]
fn a_model_allowed_to_write_writes_only_where_the_server_may() {
    let base = repo_path("tests/access/models/write_file");
    let capture = temp_dir("access-capture");
    let capture_flag = format!("--capture_jsonl_dir={}", capture.display());
    let server = serve_model("writer", &base, &["--allow_model_access=files_write", &capture_flag]);
    let write = |path: &std::path::Path| {
        predict(
            &server.url,
            "writer",
            json!({"path": path.display().to_string(), "contents": "written by a model"}),
        )
    };
    // A folder the server writes (its capture folder) takes the write.
    let inside = capture.join("from-the-model.txt");
    let (status, answer) = write(&inside);
    assert_eq!(status, 200, "{answer}");
    assert!(inside.is_file());
    if !confined(&server) {
        return;
    }
    let outside = std::env::temp_dir().join(format!("tfserve-access-outside-{}.txt", std::process::id()));
    let (status, answer) = write(&outside);
    assert!((400..600).contains(&status), "{status} {answer}");
    assert!(answer.to_string().contains("Permission denied"), "{answer}");
    assert!(!outside.exists(), "the model wrote outside the allowed folders");
}

#[test]
fn inference_py_handlers_run_confined() {
    use common::handlers::{invoke, models_dir};
    let dir = format!("--models_dir={}", models_dir().display());
    let server = common::process::start_local(&[&dir, "--python_workers=1"]);
    let cases = [
        ("pair", "text/csv", "1.0,2.0", json!({"predictions": [3.5, 4.0]})),
        ("rest", "text/csv", "1.0,2.0", json!({"predictions": [3.5, 4.0]})),
        // Its code/lib and a requirements.txt pip installs into the handlers' cache.
        (
            "withlib",
            "application/json",
            r#"{"values": [1.0, 2.0]}"#,
            json!({"scaled_by": 10.0, "predictions": [8.0, 13.0]}),
        ),
        (
            "withreqs",
            "application/json",
            r#"{"instances": [4.0]}"#,
            json!({"modelOutput": [5.0]}),
        ),
    ];
    for (model, content_type, body, expected) in cases {
        let answer = invoke(
            &server.url,
            "/invocations",
            model,
            content_type,
            None,
            body.as_bytes().to_vec(),
        );
        assert_eq!(answer.status, 200, "{model}: {}", answer.body);
        let answer = answer.json();
        for (key, value) in expected.as_object().unwrap() {
            assert_eq!(&answer[key], value, "{model}: {answer}");
        }
    }
    if confined(&server) {
        // The worker is the server's child: the same rules hold for it.
        let log = server.log.lock().unwrap().join("\n");
        assert!(!log.contains("Permission denied"), "{log}");
    }
}

#[test]
fn a_jax_export_loads_under_the_default_policy_and_answers_confined() {
    // Every signature an `XlaCallModule`: a StableHLO module, which reaches nothing outside.
    let server = serve_model("jax", &repo_path("tests/access/models/jax_export"), &[]);
    let (status, answer) = predict(&server.url, "jax", json!({"x": [1.0, 2.5]}));
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["outputs"], json!([3.0, 6.0]));
    // What let it load: the linked TensorFlow's kernel registry has XLA's
    // CPU kernel of XlaCallModule (and names no kernel for an unknown op).
    let loader = common::loader();
    let devices = loader.kernel_devices("XlaCallModule").unwrap_or_default();
    assert!(devices.iter().any(|d| d == "CPU"), "{devices:?}");
    assert_eq!(loader.kernel_devices("NoSuchOpAnywhere"), Some(Vec::new()));
}
