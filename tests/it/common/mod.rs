//! Test support: one in-process server on an ephemeral port over the committed
//! models, and small HTTP and float helpers.
#![allow(dead_code)]

pub mod capture;
pub mod drain;
pub mod grpc;
pub mod h2raw;
pub mod handlers;
#[cfg(feature = "mock")]
pub mod mock;
pub mod precision;
pub mod process;
pub mod raw_http;
pub mod rest_and_grpc;
pub mod sagemaker;
pub mod stores;

use std::path::PathBuf;
use std::sync::OnceLock;

use serde_json::Value;
use tfserve::settings::Settings;

pub fn repo_path(relative: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// An empty directory of its own, `tfserve-<name>-<pid>-<n>` under the temp
/// dir: tests running at once that ask for the same name must not share
/// (and delete) each other's files.
pub fn temp_dir(name: &str) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("tfserve-{name}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Waits until `done` holds, checking every 100 ms, for a minute at most: a
/// test waits for the event it needs, never for a time it guessed.
pub fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Copies a directory tree.
pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// A server's settings on the loopback with an ephemeral REST port: what
/// every in-process test server starts from.
pub fn local_settings() -> Settings {
    let mut settings = Settings::default();
    settings.http.host = "127.0.0.1".into();
    settings.http.rest_api_port = Some(0);
    settings
}

/// `local_settings` serving one model, `name` from `base_path`.
pub fn model_settings(name: &str, base_path: PathBuf) -> Settings {
    let mut settings = local_settings();
    settings.models.model_name = name.into();
    settings.models.model_base_path = Some(base_path);
    settings
}

/// `local_settings` serving the models of a JSON model config, written into `dir`.
pub fn config_settings(config: &Value, dir: &std::path::Path) -> Settings {
    let path = dir.join("models.json");
    std::fs::write(&path, config.to_string()).unwrap();
    let mut settings = local_settings();
    settings.models.model_config_file = Some(path);
    settings
}

/// Body limit of the shared server, small enough for tests to exceed cheaply.
pub const MAX_REQUEST_BYTES: usize = 1 << 20;

/// Base URL of a server that serves every model under `models/`, started once per test binary.
pub fn base_url() -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| {
        let mut settings = local_settings();
        settings.models.models_dir = repo_path("models");
        settings.http.max_request_bytes = MAX_REQUEST_BYTES;
        format!("http://{}", spawn_server(settings))
    })
}

/// Starts the server on TensorFlow; built without it (`--no-default-features
/// --features mock`), on the mock runtime of `mock.rs`: the committed models'
/// signatures, and their answers where their graphs are arithmetic.
pub fn start_server(settings: &Settings) -> tfserve::Running {
    start_server_result(settings).expect("server starts")
}

/// The runtime the tests' servers load models with: TensorFlow, or without
/// it the mock of `mock.rs`.
pub fn loader() -> std::sync::Arc<dyn tfserve::runtime::Loader> {
    #[cfg(feature = "tensorflow")]
    return std::sync::Arc::new(tfserve::runtime::TensorFlowLoader {
        sees_gpu: false,
        custom_ops: Vec::new(),
    });
    #[cfg(not(feature = "tensorflow"))]
    return std::sync::Arc::new(mock::CommittedModels);
}

/// `start_server`, for tests of start-up errors.
pub fn start_server_result(settings: &Settings) -> Result<tfserve::Running, tfserve::StartError> {
    #[cfg(feature = "tensorflow")]
    return tfserve::start(settings);
    #[cfg(not(feature = "tensorflow"))]
    return tfserve::start_with(settings, loader());
}

/// Starts a server on its own thread and runtime; returns its address.
pub fn spawn_server(settings: Settings) -> std::net::SocketAddr {
    spawn_started(settings, start_server)
}

/// `spawn_server` on a runtime of the test's choosing.
pub fn spawn_server_on(
    settings: Settings,
    loader: std::sync::Arc<dyn tfserve::runtime::Loader>,
) -> std::net::SocketAddr {
    spawn_started(settings, move |settings| {
        tfserve::start_with(settings, loader).expect("server starts")
    })
}

fn spawn_started(
    settings: Settings,
    start: impl FnOnce(&Settings) -> tfserve::Running + Send + 'static,
) -> std::net::SocketAddr {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        actix_web::rt::System::new().block_on(async move {
            let running = start(&settings);
            sender.send(running.addrs[0]).expect("address is received");
            let _ = running.server.await;
        })
    });
    receiver.recv().expect("server reports its address")
}

/// Starts a server on its own thread; returns its REST and gRPC addresses.
pub fn spawn_with_grpc(settings: Settings) -> (std::net::SocketAddr, std::net::SocketAddr) {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        actix_web::rt::System::new().block_on(async move {
            let running = start_server(&settings);
            let grpc = running.grpc_addr().expect("gRPC listens");
            sender.send((running.addrs[0], grpc)).expect("addresses are received");
            let _ = running.server.await;
        })
    });
    receiver.recv().expect("server reports its addresses")
}

/// The Python of the environment with the real gRPC and KServe clients
/// (`scripts/client_venv.py`, which the test script runs first).
pub fn client_python() -> PathBuf {
    environment_python("client", "TFSERVE_CLIENT_PYTHON")
}

/// The Python of the object store emulators and their clients (`scripts/client_venv.py stores`).
pub fn stores_python() -> PathBuf {
    environment_python("stores", "TFSERVE_STORES_PYTHON")
}

/// The Python of the SageMaker SDK's environment (`scripts/client_venv.py sagemaker`).
pub fn sagemaker_python() -> PathBuf {
    environment_python("sagemaker", "TFSERVE_SAGEMAKER_PYTHON")
}

fn environment_python(name: &str, variable: &str) -> PathBuf {
    if let Some(python) = std::env::var_os(variable) {
        return PathBuf::from(python);
    }
    let output = std::process::Command::new("python3")
        .arg(repo_path("scripts/client_venv.py"))
        .arg(name)
        .output()
        .expect("python3 runs scripts/client_venv.py");
    assert!(
        output.status.success(),
        "scripts/client_venv.py failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&output.stdout).trim())
}

pub fn client() -> reqwest::blocking::Client {
    static CLIENT: OnceLock<reqwest::blocking::Client> = OnceLock::new();
    CLIENT.get_or_init(reqwest::blocking::Client::new).clone()
}

/// POSTs a body; returns the status and the parsed JSON answer.
pub fn post(path: &str, body: impl Into<reqwest::blocking::Body>) -> (u16, Value) {
    let response = client()
        .post(format!("{}{path}", base_url()))
        .header("Content-Type", "application/json")
        .body(body)
        .send()
        .expect("request is answered");
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap_or_default().to_string())
        .unwrap_or_default();
    assert_eq!(content_type, "application/json", "{path}");
    let text = response.text().expect("body is read");
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}: {text}")),
    )
}

pub fn post_json(path: &str, body: &Value) -> (u16, Value) {
    post(path, body.to_string())
}

pub fn get(path: &str) -> (u16, Value) {
    let response = client()
        .get(format!("{}{path}", base_url()))
        .send()
        .expect("request is answered");
    let status = response.status().as_u16();
    let text = response.text().expect("body is read");
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}: {text}")),
    )
}

/// The `error` message of an error answer, checking the status on the way.
pub fn error_of(answer: (u16, Value), status: u16) -> String {
    assert_eq!(answer.0, status, "{}", answer.1);
    answer.1["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error field: {}", answer.1))
        .to_string()
}

/// Flattens nested JSON number lists.
pub fn floats(value: &Value) -> Vec<f64> {
    match value {
        Value::Array(items) => items.iter().flat_map(floats).collect(),
        Value::Number(n) => vec![n.as_f64().unwrap_or(f64::NAN)],
        other => panic!("not a number: {other}"),
    }
}

pub fn assert_close(actual: &Value, expected: &[f64], tolerance: f64) {
    let actual = floats(actual);
    assert_eq!(actual.len(), expected.len(), "{actual:?} vs {expected:?}");
    for (a, e) in actual.iter().zip(expected) {
        assert!((a - e).abs() <= tolerance, "{actual:?} vs {expected:?}");
    }
}

/// The value of one series (name and labels, as `/metrics` prints them) on
/// the server at `base`; 0 while it has not been counted yet.
pub fn metric(base: &str, series: &str) -> f64 {
    let text = client().get(format!("{base}/metrics")).send().unwrap().text().unwrap();
    let prefix = format!("{series} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or(0.0)
}

/// The sum of the `/metrics` series at `base` whose lines start with `prefix`
/// and hold every one of `labels` (`reason="full"`, say).
pub fn metric_sum(base: &str, prefix: &str, labels: &[&str]) -> f64 {
    let text = client().get(format!("{base}/metrics")).send().unwrap().text().unwrap();
    text.lines()
        .filter(|line| line.starts_with(prefix) && labels.iter().all(|label| line.contains(label)))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The JSON answer of a GET to a full URL.
pub fn get_json(url: &str) -> Value {
    client().get(url).send().unwrap().json().unwrap()
}

/// A client that waits up to five minutes for an answer: large bodies
/// through a debug build. It drops a pooled connection idle for two seconds,
/// before the server's 5 s keep-alive could close it under a request.
pub fn patient_client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(std::time::Duration::from_secs(300))
        .pool_idle_timeout(std::time::Duration::from_secs(2))
        .build()
        .unwrap()
}

/// One request with an optional JSON body: its status and JSON answer (null if none).
pub fn call(method: reqwest::Method, url: &str, body: Option<Value>) -> (u16, Value) {
    let client = reqwest::blocking::Client::new();
    let mut request = client.request(method, url);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().expect("request is answered");
    let status = response.status().as_u16();
    (status, response.json().unwrap_or(Value::Null))
}

/// A server with `settings` on 127.0.0.1 and an ephemeral REST port: its base URL.
pub fn rest_server(settings: Settings) -> String {
    format!(
        "http://{}",
        spawn_server({
            let mut settings = settings;
            settings.http.host = "127.0.0.1".into();
            settings.http.rest_api_port = Some(0);
            settings
        })
    )
}
