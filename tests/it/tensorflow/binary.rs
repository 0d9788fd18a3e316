//! The `tfserve` binary end to end: flags, a TF Serving model config file with
//! version policy and labels, a model that fails to load, and SIGTERM
//! (the drain under load: `drain.rs`).

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::process::{start, start_with_env, Server};
use common::{repo_path, temp_dir};
use serde_json::{json, Value};

fn post(server: &Server, path: &str, body: Value) -> (u16, Value) {
    let response = reqwest::blocking::Client::new()
        .post(format!("{}{path}", server.url))
        .json(&body)
        .send()
        .expect("request is answered");
    (response.status().as_u16(), response.json().expect("JSON answer"))
}

fn get(server: &Server, path: &str) -> (u16, Value) {
    let response = reqwest::blocking::get(format!("{}{path}", server.url)).expect("request is answered");
    (response.status().as_u16(), response.json().expect("JSON answer"))
}

#[test]
fn model_config_file_policies_labels_and_failed_loads() {
    let dir = temp_dir("config");
    std::fs::create_dir_all(dir.join("broken/3")).unwrap();
    std::fs::write(dir.join("broken/3/saved_model.pb"), b"not a protobuf").unwrap();
    // A model whose shipped warm-up file is corrupt does not become available.
    let badwarm = dir.join("badwarm/1");
    std::fs::create_dir_all(badwarm.join("variables")).unwrap();
    std::fs::create_dir_all(badwarm.join("assets.extra")).unwrap();
    let half_v1 = repo_path("models/half_plus_three/1");
    for file in [
        "saved_model.pb",
        "variables/variables.index",
        "variables/variables.data-00000-of-00001",
    ] {
        std::fs::copy(half_v1.join(file), badwarm.join(file)).unwrap();
    }
    let mut warmup = std::fs::read(half_v1.join("assets.extra/tf_serving_warmup_requests")).unwrap();
    warmup[30] ^= 0xff;
    std::fs::write(badwarm.join("assets.extra/tf_serving_warmup_requests"), warmup).unwrap();
    let config = format!(
        r#"
        # TF Serving's text format
        model_config_list {{
          config {{
            name: "adder"
            base_path: "{adder}"
            model_platform: "tensorflow"
            model_version_policy {{ specific {{ versions: 1 versions: 2 }} }}
            version_labels {{ key: "stable" value: 1 }}
            version_labels {{ key: "canary" value: 2 }}
          }}
          config {{ name: "half" base_path: "{half}" }}
          config {{ name: "broken" base_path: "broken" }}
          config {{ name: "badwarm" base_path: "badwarm" }}
        }}"#,
        adder = repo_path("models/adder").display(),
        half = repo_path("models/half_plus_three").display(),
    );
    let config_path = dir.join("models.config");
    std::fs::write(&config_path, config).unwrap();
    let server = start(&[
        "--port=0",
        "--host",
        "127.0.0.1",
        "--model_config_file",
        config_path.to_str().unwrap(),
    ]);

    let one = json!({"instances": [1.0]});
    assert_eq!(
        post(&server, "/v1/models/adder/labels/stable:predict", one.clone()).1,
        json!({"predictions": [2.0]})
    );
    assert_eq!(
        post(&server, "/v1/models/adder/labels/canary:predict", one.clone()).1,
        json!({"predictions": [3.0]})
    );
    assert_eq!(
        post(&server, "/v1/models/half:predict", one.clone()).1,
        json!({"predictions": [3.5]})
    );
    let (status, body) = get(&server, "/v1/models/adder/labels/stable");
    assert_eq!(status, 200);
    assert_eq!(body["model_version_status"][0]["version"], "1");

    // The broken model is reported, and the others keep serving.
    let (status, body) = get(&server, "/v1/models/broken");
    assert_eq!(status, 200);
    let broken = &body["model_version_status"][0];
    assert_eq!(broken["version"], "3");
    assert_eq!(broken["state"], "END");
    assert_eq!(broken["status"]["error_code"], "UNKNOWN");
    assert!(!broken["status"]["error_message"].as_str().unwrap().is_empty());
    let (status, _) = post(&server, "/v1/models/broken:predict", one);
    assert_eq!(status, 404);

    // half_plus_three ships TF Serving's warm-up file (written with TF Serving's protos): replayed before serving.
    let log = server.log.lock().unwrap().join("\n");
    assert!(
        log.contains("model half version 1: 2 warm-up run(s)") && log.contains("from assets.extra"),
        "{log}"
    );
    let (_, body) = get(&server, "/v1/models/badwarm");
    let badwarm = &body["model_version_status"][0];
    assert_eq!(badwarm["state"], "END");
    assert!(
        badwarm["status"]["error_message"]
            .as_str()
            .unwrap()
            .contains("tf_serving_warmup_requests"),
        "{body}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn environment_settings_and_sigterm_shutdown() {
    // The model name comes from the environment, the rest from flags.
    let base_path = repo_path("models/half_plus_three");
    let server = start_with_env(
        &[
            "--rest_api_port",
            "0",
            "--host=127.0.0.1",
            "--model_base_path",
            base_path.to_str().unwrap(),
        ],
        &[("TFSERVE_MODEL_NAME", "half")],
    );
    assert_eq!(
        post(&server, "/v1/models/half:predict", json!({"inputs": [2.0]})).1,
        json!({"outputs": [4.0]})
    );
    let mut server = server;
    server.sigterm();
    let status = server.exit_within(Duration::from_secs(20));
    assert!(status.success(), "exit status {status}");
    server.wait_for_line("shut down cleanly");
    let log = server.log.lock().unwrap().join("\n");
    assert!(!log.contains(" ERROR "), "a clean SIGTERM logged errors:\n{log}");
    // Start-up printed the effective settings one group per line.
    for group in ["http: ", "grpc: ", "models: ", "batching: "] {
        assert!(
            log.lines().any(|l| l.trim_start().starts_with(group)),
            "no {group}line:\n{log}"
        );
    }
    assert!(log.contains("model_name=half"), "{log}");
}

#[test]
fn bad_settings_fail_at_start_naming_the_setting() {
    let dir = temp_dir("badconfig");
    let config_path = dir.join("models.config");
    std::fs::write(&config_path, "model_config_list { config { name: 'x' } }").unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_tfserve"))
        .args(["--port=0", "--model_config_file", config_path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("'x' has no base_path"), "{stderr}");

    let output = Command::new(env!("CARGO_BIN_EXE_tfserve"))
        .args(["--rest_api_num_threads=0"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("rest_api_num_threads"));

    // A GPU asked for and none seen: a refusal that says what was looked for.
    if !String::from_utf8_lossy(&version_report()).contains("(GPU") {
        let output = Command::new(env!("CARGO_BIN_EXE_tfserve"))
            .args([
                "--gpu",
                "--rest_api_port=0",
                "--model_base_path",
                "models/half_plus_three",
            ])
            .output()
            .unwrap();
        assert!(!output.status.success());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("--gpu: TensorFlow sees no GPU") && stderr.contains("CUDA"),
            "{stderr}"
        );
    }
    let output = Command::new(env!("CARGO_BIN_EXE_tfserve"))
        .args(["--gpu", "--cpu_only"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("contradicts cpu_only"));
    std::fs::remove_dir_all(&dir).unwrap();
}

fn version_report() -> Vec<u8> {
    Command::new(env!("CARGO_BIN_EXE_tfserve"))
        .arg("--version")
        .output()
        .unwrap()
        .stdout
}

fn post_raw(server: &Server, path: &str, content_type: &str, body: &str) -> (u16, Value) {
    let response = reqwest::blocking::Client::new()
        .post(format!("{}{path}", server.url))
        .header("Content-Type", content_type)
        .body(body.to_string())
        .send()
        .expect("request is answered");
    (response.status().as_u16(), response.json().unwrap_or(Value::Null))
}

#[test]
fn serve_speaks_the_sagemaker_container_contract() {
    // A model archive with version directories directly inside, as in /opt/ml/model.
    let dir = temp_dir("sagemaker").join("model");
    std::fs::create_dir_all(&dir).unwrap();
    let copied = Command::new("cp")
        .arg("-r")
        .arg(repo_path("models/half_plus_three/1"))
        .arg(&dir)
        .status()
        .unwrap();
    assert!(copied.success());
    let server = start_with_env(
        &["serve", "--host", "127.0.0.1", "--models_dir", dir.to_str().unwrap()],
        &[("SAGEMAKER_BIND_TO_PORT", "0")],
    );
    let ping = reqwest::blocking::get(format!("{}/ping", server.url)).unwrap();
    assert_eq!(ping.status().as_u16(), 200);
    let (status, body) = post_raw(&server, "/invocations", "text/csv", "1.0,2.0,5.0");
    assert_eq!((status, body), (200, json!({"predictions": [3.5, 4.0, 5.5]})));
    let (_, body) = get(&server, "/v1/models/model");
    assert_eq!(body["model_version_status"][0]["state"], "AVAILABLE");
}

#[test]
fn serve_in_multi_model_mode_starts_empty_and_loads_over_http() {
    let root = temp_dir("mme");
    let copied = Command::new("cp")
        .arg("-r")
        .arg(repo_path("models/adder"))
        .arg(&root)
        .status()
        .unwrap();
    assert!(copied.success());
    let server = start_with_env(
        &["serve", "--host", "127.0.0.1", "--model_roots", root.to_str().unwrap()],
        &[("SAGEMAKER_BIND_TO_PORT", "0"), ("SAGEMAKER_MULTI_MODEL", "true")],
    );
    assert_eq!(
        reqwest::blocking::get(format!("{}/ping", server.url))
            .unwrap()
            .status()
            .as_u16(),
        200
    );
    assert_eq!(get(&server, "/models").1, json!({"models": []}));
    let url = root.join("adder").display().to_string();
    let (status, body) = post(&server, "/models", json!({"model_name": "adder", "url": url}));
    assert_eq!(status, 200, "{body}");
    let (status, body) = post_raw(&server, "/models/adder/invoke", "text/csv", "1.0\n2.0");
    assert_eq!((status, body), (200, json!({"predictions": [3.0, 4.0]})));
}

#[test]
fn help_and_version_print_only_their_own_text() {
    for (flag, expected) in [("--version", "tfserve "), ("--help", "Usage: tfserve")] {
        let output = Command::new(env!("CARGO_BIN_EXE_tfserve"))
            .arg(flag)
            .env_remove("TF_CPP_MIN_LOG_LEVEL")
            .env_remove("RUST_LOG")
            .output()
            .unwrap();
        assert!(output.status.success(), "{flag}");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(stdout.contains(expected), "{flag}: {stdout}");
        assert_eq!(String::from_utf8_lossy(&output.stderr), "", "{flag}");
    }
}

#[test]
fn tensorflow_logs_at_the_server_level() {
    // Every line up to the one announcing the address, when the models have loaded.
    let start_up_log = |filter: &str| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tfserve"))
            .args(["--rest_api_port=0", "--model_base_path", "models/half_plus_two"])
            .env_remove("TF_CPP_MIN_LOG_LEVEL")
            .env("RUST_LOG", filter)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let mut log = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            log.push_str(&line);
            log.push('\n');
            if line.contains(" on http://") {
                break;
            }
        }
        child.kill().unwrap();
        child.wait().unwrap();
        log
    };
    let quiet = start_up_log("warn,tfserve=info");
    assert!(quiet.contains(" on http://"), "{quiet}");
    assert!(!quiet.contains("Reading SavedModel"), "{quiet}");
    assert!(!quiet.contains("oneDNN"), "{quiet}");
    let verbose = start_up_log("info");
    assert!(verbose.contains("Reading SavedModel"), "{verbose}");
    let chosen = start_up_log("info,tensorflow=error");
    assert!(!chosen.contains("Reading SavedModel"), "{chosen}");
}

/// The folder layouts a newcomer gets wrong, as the log tells them: a
/// SavedModel given as the base path (here through Vertex AI's
/// `AIP_STORAGE_URI`) serves as version 1, said once at INFO; a base path
/// with no version to load warns in TF Serving's words and is not counted
/// among the models serving.
#[test]
fn a_flat_saved_model_serves_as_version_1_and_an_empty_base_path_warns() {
    let flat = temp_dir("binary-flat").join("artifact");
    common::copy_dir(&repo_path("models/half_plus_three/1"), &flat);
    let empty = temp_dir("binary-empty").join("nothing");
    std::fs::create_dir_all(empty.join("not-a-version")).unwrap();
    let config = temp_dir("binary-flat-config").join("models.config");
    std::fs::write(
        &config,
        format!(
            "model_config_list {{ config {{ name: 'flat' base_path: '{}' }} config {{ name: 'empty' base_path: '{}' }} }}",
            flat.display(),
            empty.display()
        ),
    )
    .unwrap();
    let config_flag = format!("--model_config_file={}", config.display());
    let server = start(&["--rest_api_port=0", "--port=0", "--host=127.0.0.1", &config_flag]);
    let (status, body) = post(&server, "/v1/models/flat:predict", json!({"instances": [1.0]}));
    assert_eq!((status, &body["predictions"]), (200, &json!([3.5])), "{body}");
    server.wait_for_line("holds a SavedModel itself (no numeric version folder); serving it as version 1");
    server.wait_for_line(&format!(
        "No versions of servable empty found under base path {}. Did you forget to name your leaf directory as a number (eg. '/1/')?",
        empty.display()
    ));
    server.wait_for_line("serving 1 model(s) [flat] (no version serving yet: empty) on http://");
    // Vertex AI's variables naming the same folder: ready, and answering.
    let vertex = start_with_env(
        &["--port=0", "--host=127.0.0.1"],
        &[
            ("AIP_HTTP_PORT", "0"),
            ("AIP_STORAGE_URI", flat.to_str().unwrap()),
            ("AIP_HEALTH_ROUTE", "/health"),
            ("AIP_PREDICT_ROUTE", "/predict"),
        ],
    );
    assert_eq!(
        reqwest::blocking::get(format!("{}/health", vertex.url))
            .unwrap()
            .status()
            .as_u16(),
        200
    );
    let (status, body) = post(&vertex, "/predict", json!({"instances": [1.0]}));
    assert_eq!((status, &body["predictions"]), (200, &json!([3.5])), "{body}");
}
