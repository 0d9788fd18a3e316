//! Base paths in object storage, against real store APIs on loopback, started
//! and filled by `scripts/object_stores.py` with each cloud's own Python
//! client: moto (S3), fake-gcs-server (GCS) and Azurite (Azure Blob). The
//! server reads only the clouds' standard variables.

use crate::common;

use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::process::start_with_env;
use common::stores::*;
use common::{repo_path, stores_python, temp_dir, wait_for};
use serde_json::{json, Value};

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
    wait_for("version 2 replaces version 1", || {
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
    drop(server);

    // A cached version changed on disk since its download is not the
    // store's: it is downloaded again, not loaded.
    let graph = folder.join("2/saved_model.pb");
    let mut changed = std::fs::read(&graph).unwrap();
    changed.extend_from_slice(b"planted");
    std::fs::write(&graph, changed).unwrap();
    let server = serve("s3://models/hp", &cache, &env).unwrap();
    assert_eq!(predict(&server), json!({"predictions": [3.5, 4.0]}));
    let listed = std::fs::metadata(repo_path("models/half_plus_three/1/saved_model.pb"))
        .unwrap()
        .len();
    let differs = format!(
        "is not what the store lists (saved_model.pb: {} bytes on disk, {listed} listed)",
        listed + 7
    );
    assert_eq!(logged(&server, &differs), 1);
    assert_eq!(logged(&server, "downloading version 2 from s3://models/hp"), 1);
    assert_eq!(
        std::fs::read(&graph).unwrap(),
        std::fs::read(repo_path("models/half_plus_three/1/saved_model.pb")).unwrap()
    );

    // The store goes away: the loaded version keeps serving, and it is said once.
    drop(store);
    wait_for("the outage is reported", || {
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
    // A key the store refuses: one line at start, naming the URL and the store's words.
    let account_key = connection.split(';').find(|p| p.starts_with("AccountKey=")).unwrap();
    let wrong = connection.replace(account_key, "AccountKey=d3Jvbmcga2V5IGZvciB0aGUgYWNjb3VudA==");
    let log = serve("az://models/hp", &cache, &[("AZURE_STORAGE_CONNECTION_STRING", wrong)])
        .err()
        .expect("the start fails");
    let last = log.lines().last().unwrap_or_default();
    assert!(
        last.contains("model base path az://models/hp: ") && last.contains("403") && last.len() < 400,
        "{last}"
    );
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
