//! Base paths in object storage, against real store APIs on loopback, started
//! and filled by `scripts/object_stores.py` with each cloud's own Python
//! client: moto (S3), fake-gcs-server (GCS) and Azurite (Azure Blob). The
//! server reads only the clouds' standard variables.

#![cfg(feature = "tensorflow")]

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::process::{start_with_env, Server};
use common::{repo_path, stores_python, temp_dir};
use serde_json::{json, Value};

/// A store emulator, stopped when dropped.
struct Emulator {
    child: Child,
    port: u16,
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn emulator(kind: &str) -> Emulator {
    let port = free_port();
    let child = Command::new(stores_python())
        .arg(repo_path("scripts/object_stores.py"))
        .args(["serve", kind, "--port", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the emulator starts");
    let deadline = Instant::now() + Duration::from_secs(60);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{kind} emulator never listened on {port}");
        std::thread::sleep(Duration::from_millis(100));
    }
    Emulator { child, port }
}

/// Uploads a folder's files under `bucket/prefix` with the cloud's own client.
fn put(kind: &str, port: u16, bucket: &str, prefix: &str, folder: &Path) {
    let output = Command::new(stores_python())
        .arg(repo_path("scripts/object_stores.py"))
        .args(["put", kind, "--port", &port.to_string(), bucket, prefix])
        .arg(folder)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
}

fn s3_env(port: u16) -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ACCESS_KEY_ID", "test".into()),
        ("AWS_SECRET_ACCESS_KEY", "test".into()),
        ("AWS_REGION", "us-east-1".into()),
        ("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{port}")),
    ]
}

fn serve(base_path: &str, cache: &Path, env: &[(&str, String)]) -> Result<Server, String> {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let args = [
        "--rest_api_port=0",
        "--port=0",
        "--host=127.0.0.1",
        "--model_name=m",
        "--file_system_poll_wait_seconds=1",
        &format!("--model_base_path={base_path}"),
        &format!("--model_cache_dir={}", cache.display()),
    ];
    std::panic::catch_unwind(|| start_with_env(&args, &env)).map_err(|panic| {
        panic
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_else(|| "the server did not start".into())
    })
}

fn predict(server: &Server) -> Value {
    let answer = common::client()
        .post(format!("{}/v1/models/m:predict", server.url))
        .body(r#"{"instances": [1.0, 2.0]}"#)
        .send()
        .unwrap();
    answer.json().unwrap()
}

fn versions(server: &Server) -> Value {
    let status: Value = common::client()
        .get(format!("{}/v1/models/m", server.url))
        .send()
        .unwrap()
        .json()
        .unwrap();
    status["model_version_status"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| json!([v["version"], v["state"]]))
        .collect()
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn cached_versions(folder: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(folder)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn logged(server: &Server, needle: &str) -> usize {
    server.log.lock().unwrap().iter().filter(|l| l.contains(needle)).count()
}

#[test]
fn s3_versions_come_and_go_a_restart_reuses_the_cache_and_an_outage_keeps_serving() {
    let store = emulator("s3");
    let cache = temp_dir("s3-cache");
    let env = s3_env(store.port);
    put(
        "s3",
        store.port,
        "models",
        "hp/1",
        &repo_path("models/half_plus_two/00000123"),
    );
    let server = serve("s3://models/hp", &cache, &env).unwrap();
    assert_eq!(predict(&server), json!({"predictions": [2.5, 3.0]}));
    let folder = cache.join("s3/models/hp");
    assert_eq!(cached_versions(&folder), ["1"]);

    // A new version is downloaded whole, served, and the old one leaves the cache.
    put(
        "s3",
        store.port,
        "models",
        "hp/2",
        &repo_path("models/half_plus_three/1"),
    );
    wait_until("version 2 replaces version 1", || {
        versions(&server) == json!([["2", "AVAILABLE"]]) && cached_versions(&folder) == ["2"]
    });
    assert_eq!(predict(&server), json!({"predictions": [3.5, 4.0]}));
    assert_eq!(logged(&server, "downloading version 2 from s3://models/hp"), 1);
    drop(server);

    // A restart reuses the complete cached version instead of downloading it.
    let server = serve("s3://models/hp", &cache, &env).unwrap();
    assert_eq!(predict(&server), json!({"predictions": [3.5, 4.0]}));
    assert_eq!(logged(&server, "version 2 reused from the cache"), 1);
    assert_eq!(logged(&server, "downloading"), 0);

    // The store goes away: the loaded version keeps serving, and it is said once.
    drop(store);
    wait_until("the outage is reported", || {
        logged(&server, "cannot read its versions") == 1
    });
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        logged(&server, "cannot read its versions"),
        1,
        "reported at most once a minute"
    );
    assert_eq!(predict(&server), json!({"predictions": [3.5, 4.0]}));
    assert_eq!(versions(&server), json!([["2", "AVAILABLE"]]));
    let _ = std::fs::remove_dir_all(&cache);
}

#[test]
fn start_up_errors_name_the_url_and_the_cause_in_one_line() {
    let store = emulator("s3");
    let cache = temp_dir("s3-errors");
    let env = s3_env(store.port);
    put(
        "s3",
        store.port,
        "models",
        "other/1/assets",
        &repo_path("models/half_plus_two/00000123/assets"),
    );
    let cases = [
        (
            "s3://missing/hp",
            "model base path s3://missing/hp: the store answered 404 Not Found: NoSuchBucket: The specified bucket does not exist",
        ),
        (
            "s3://models/none",
            "model base path s3://models/none: no version folders (numeric names) and no saved_model.pb under it",
        ),
        (
            "hdfs://namenode/models",
            "model base path hdfs://namenode/models: unsupported scheme: base paths are local folders, s3://, gs:// or az:// URLs",
        ),
    ];
    for (url, message) in cases {
        let log = serve(url, &cache, &env).err().expect("the start fails");
        let last = log.lines().last().unwrap_or_default().to_string();
        assert!(last.ends_with(message), "{url}: {last}");
    }
    // The outage at start is an error too, after the client's few retries.
    let unreachable = s3_env(free_port());
    let log = serve("s3://models/hp", &cache, &unreachable)
        .err()
        .expect("the start fails");
    assert!(
        log.ends_with("model base path s3://models/hp: cannot reach the store: connection refused"),
        "{log}"
    );
    let _ = std::fs::remove_dir_all(&cache);
}

/// A proxy to `upstream` that cuts the first `cuts` connections whose answers
/// pass `after` bytes, mid-transfer.
fn cutting_proxy(upstream: u16, cuts: usize, after: usize) -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let left = Arc::new(AtomicUsize::new(cuts));
    let budget = left.clone();
    std::thread::spawn(move || {
        for client in listener.incoming().map_while(Result::ok) {
            let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                continue;
            };
            let (mut client_in, mut server_out) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            std::thread::spawn(move || std::io::copy(&mut client_in, &mut server_out));
            let budget = budget.clone();
            std::thread::spawn(move || pump_answers(server, client, &budget, after));
        }
    });
    (port, left)
}

fn pump_answers(mut server: TcpStream, mut client: TcpStream, budget: &AtomicUsize, after: usize) {
    let mut buffer = [0u8; 16 * 1024];
    let mut sent = 0;
    while let Ok(n) = server.read(&mut buffer) {
        if n == 0 {
            break;
        }
        let cut = sent + n > after
            && budget
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |b| b.checked_sub(1))
                .is_ok();
        if cut {
            let _ = client.write_all(&buffer[..after.saturating_sub(sent).min(n)]);
            break;
        }
        if client.write_all(&buffer[..n]).is_err() {
            break;
        }
        sent += n;
    }
    let _ = client.shutdown(std::net::Shutdown::Both);
    let _ = server.shutdown(std::net::Shutdown::Both);
}

#[test]
fn a_transfer_cut_midway_is_retried_and_the_version_arrives_whole() {
    let store = emulator("s3");
    let cache = temp_dir("s3-cut");
    let model = temp_dir("s3-cut-model");
    common::copy_dir(&repo_path("models/half_plus_two/00000123"), &model);
    let weights: Vec<u8> = (0..4_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    std::fs::write(model.join("assets/weights.bin"), &weights).unwrap();
    put("s3", store.port, "models", "cut/5", &model);
    // More cuts than the client's own retries of one request: the object is fetched again whole.
    let (proxy, cuts_left) = cutting_proxy(store.port, 10, 1_000_000);
    let server = serve("s3://models/cut", &cache, &s3_env(proxy)).unwrap();
    assert_eq!(predict(&server), json!({"predictions": [2.5, 3.0]}));
    assert_eq!(cuts_left.load(Ordering::SeqCst), 0, "both cuts happened");
    assert!(
        logged(&server, "assets/weights.bin") >= 1,
        "{}",
        server.log.lock().unwrap().join("\n")
    );
    assert!(logged(&server, "trying again in") >= 1);
    let cached = std::fs::read(cache.join("s3/models/cut/5/assets/weights.bin")).unwrap();
    assert!(cached == weights, "the cached file is the uploaded one");
    assert_eq!(
        cached_versions(&cache.join("s3/models/cut")),
        ["5"],
        "no partial folder is left"
    );
    let _ = std::fs::remove_dir_all(&cache);
    let _ = std::fs::remove_dir_all(&model);
}

/// Vertex AI as it starts a custom container: no flags but the log format,
/// the model a SavedModel itself in a `gs://` folder, the port and routes
/// in `AIP_*` variables.
#[test]
fn vertex_ai_serves_a_saved_model_from_gcs_with_only_its_variables() {
    let store = emulator("gcs");
    let cache = temp_dir("gcs-cache");
    put(
        "gcs",
        store.port,
        "vertex-models",
        "model",
        &repo_path("models/half_plus_two/00000123"),
    );
    let port = free_port().to_string();
    let health = "/v1/endpoints/31/deployedModels/7";
    let predict = "/v1/endpoints/31/deployedModels/7:predict";
    let env = [
        ("STORAGE_EMULATOR_HOST", format!("127.0.0.1:{}", store.port)),
        ("AIP_HTTP_PORT", port.clone()),
        ("AIP_HEALTH_ROUTE", health.to_string()),
        ("AIP_PREDICT_ROUTE", predict.to_string()),
        ("AIP_STORAGE_URI", "gs://vertex-models/model".to_string()),
        ("TFSERVE_MODEL_CACHE_DIR", cache.display().to_string()),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let server = start_with_env(&["--log_format=json", "--host=127.0.0.1", "--port=0"], &env);
    assert!(server.url.ends_with(&format!(":{port}")), "{}", server.url);
    let ready = common::client().get(format!("{}{health}", server.url)).send().unwrap();
    assert_eq!(ready.status().as_u16(), 200);
    let answer: Value = common::client()
        .post(format!("{}{predict}", server.url))
        .body(r#"{"instances": [1.0, 2.0], "parameters": {}}"#)
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(answer, json!({"predictions": [2.5, 3.0]}));
    let status: Value = common::client()
        .get(format!("{}/v1/models/default", server.url))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(
        status["model_version_status"][0]["version"], "1",
        "the SavedModel itself is version 1"
    );
    let lines = server.log.lock().unwrap().clone();
    let downloaded = lines
        .iter()
        .find(|l| l.contains("downloading version 1 from gs://vertex-models/model"));
    let record: Value = serde_json::from_str(downloaded.expect("the download is logged")).unwrap();
    assert_eq!(record["severity"], "INFO", "Cloud Logging's field");
    let _ = std::fs::remove_dir_all(&cache);
}

#[test]
fn azure_blob_through_a_connection_string() {
    let store = emulator("azure");
    let cache = temp_dir("azure-cache");
    put(
        "azure",
        store.port,
        "models",
        "hp/3",
        &repo_path("models/half_plus_three/1"),
    );
    let connection = Command::new(stores_python())
        .arg("-c")
        .arg(format!(
            "import sys; sys.path.insert(0, {:?}); import object_stores; print(object_stores.azurite_connection_string({}))",
            repo_path("scripts").display().to_string(),
            store.port
        ))
        .output()
        .unwrap();
    let connection = String::from_utf8(connection.stdout).unwrap().trim().to_string();
    let server = serve(
        "az://models/hp",
        &cache,
        &[("AZURE_STORAGE_CONNECTION_STRING", connection)],
    )
    .unwrap();
    assert_eq!(predict(&server), json!({"predictions": [3.5, 4.0]}));
    assert_eq!(versions(&server), json!([["3", "AVAILABLE"]]));
    let _ = std::fs::remove_dir_all(&cache);
}
