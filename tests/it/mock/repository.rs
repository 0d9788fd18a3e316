//! The model repository live: versions swapped under steady traffic with no
//! failed request, config reloads in all three dialects, readiness, and
//! memory given back on unload. The management and SageMaker multi-model
//! routes: `management.rs`.

use crate::common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{call, copy_dir, repo_path, rest_server as server, temp_dir, wait_for};
use serde_json::{json, Value};
use tfserve::model_config::DefaultVersionPolicy;
use tfserve::registry::SwapPolicy;
use tfserve::settings::Settings;

/// Copies a version in under a temporary name, then renames it into place,
/// so a poll never sees half a model.
fn publish_version(from: &Path, base: &Path, version: u32) {
    let staging = base.join(format!(".staging-{version}"));
    copy_dir(from, &staging);
    std::fs::rename(&staging, base.join(version.to_string())).unwrap();
}

#[test]
fn versions_swap_under_traffic_without_a_failed_request() {
    let base = temp_dir("repo-swap").join("adder");
    publish_version(&repo_path("models/adder/1"), &base, 1);
    let url = server({
        let mut settings = Settings::default();
        settings.models.model_name = "adder".into();
        settings.models.model_base_path = Some(base.clone());
        settings
    });

    let stop = Arc::new(AtomicBool::new(false));
    let client = {
        let (stop, url) = (stop.clone(), url.clone());
        std::thread::spawn(move || {
            let mut answers = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let (status, body) = call(
                    reqwest::Method::POST,
                    &format!("{url}/v1/models/adder:predict"),
                    Some(json!({"instances": [1.0]})),
                );
                answers.push((status, body["predictions"][0].as_f64()));
            }
            answers
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    publish_version(&repo_path("models/adder/2"), &base, 2);
    let status = |url: &str| call(reqwest::Method::GET, &format!("{url}/v1/models/adder"), None).1;
    wait_for("version 2 to serve", || {
        status(&url)["model_version_status"]
            .to_string()
            .contains(r#""version":"2""#)
    });
    std::thread::sleep(Duration::from_millis(300));
    std::fs::remove_dir_all(base.join("1")).unwrap();
    wait_for("version 1 to unload", || {
        let versions = status(&url)["model_version_status"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        versions.len() == 1 && versions[0]["version"] == "2"
    });
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let answers = client.join().unwrap();

    assert!(answers.len() > 20, "only {} requests", answers.len());
    assert!(
        answers.iter().all(|(status, _)| *status == 200),
        "a request failed: {:?}",
        answers.iter().find(|a| a.0 != 200)
    );
    // Every answer comes from the version that served it: v1 (2.0) until v2 (3.0) takes over, never back.
    let first_v2 = answers
        .iter()
        .position(|a| a.1 == Some(3.0))
        .expect("version 2 answered");
    assert!(answers[..first_v2].iter().all(|a| a.1 == Some(2.0)));
    assert!(answers[first_v2..].iter().all(|a| a.1 == Some(3.0)));
}

/// The versions a model reports as AVAILABLE.
fn available(url: &str, model: &str) -> Vec<String> {
    let (_, body) = call(reqwest::Method::GET, &format!("{url}/v1/models/{model}"), None);
    body["model_version_status"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter(|v| v["state"] == "AVAILABLE")
        .filter_map(|v| v["version"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn a_new_version_retires_the_old_one_unless_every_version_is_asked_for() {
    for (policy, expected) in [
        (DefaultVersionPolicy::Latest, vec!["2"]),
        (DefaultVersionPolicy::All, vec!["1", "2"]),
    ] {
        let base = temp_dir(&format!("repo-policy-{policy:?}")).join("adder");
        publish_version(&repo_path("models/adder/1"), &base, 1);
        let url = server({
            let mut settings = Settings::default();
            settings.models.model_name = "adder".into();
            settings.models.model_base_path = Some(base.clone());
            settings.models.model_version_policy = policy;
            settings.models.swap_policy = SwapPolicy::ResourcePreserving;
            settings
        });
        assert_eq!(available(&url, "adder"), vec!["1"]);
        publish_version(&repo_path("models/adder/2"), &base, 2);
        wait_for("version 2 to serve", || {
            available(&url, "adder").contains(&"2".to_string())
        });
        wait_for("the policy to settle", || available(&url, "adder") == expected);
        let (status, _) = call(
            reqwest::Method::POST,
            &format!("{url}/v1/models/adder/versions/1:predict"),
            Some(json!({"instances": [1.0]})),
        );
        assert_eq!(status, if expected.len() == 2 { 200 } else { 404 }, "{policy:?}");
    }
}

#[test]
fn config_reloads_in_every_dialect() {
    let dir = temp_dir("repo-dialects");
    let config = dir.join("models.config");
    let adder = repo_path("models/adder");
    std::fs::write(
        &config,
        format!(
            "model_config_list {{ config {{ name: 'adder' base_path: '{}' model_version_policy {{ specific {{ versions: 1 }} }} version_labels {{ key: 'stable' value: 1 }} }} }}",
            adder.display()
        ),
    )
    .unwrap();
    let url = server({
        let mut settings = Settings::default();
        settings.models.model_config_file = Some(config.clone());
        settings
    });
    let predict = |path: &str| {
        call(
            reqwest::Method::POST,
            &format!("{url}{path}"),
            Some(json!({"instances": [1.0]})),
        )
    };
    assert_eq!(
        predict("/v1/models/adder/labels/stable:predict").1,
        json!({"predictions": [2.0]})
    );
    assert_eq!(
        predict("/v1/models/adder/versions/2:predict").0,
        404,
        "policy serves version 1 only"
    );

    // TF Serving's JSON mapping: all versions, the label moved to version 2.
    let tfs_json = json!({"model_config_list": {"config": [{"name": "adder", "base_path": adder,
        "model_version_policy": {"all": {}}, "version_labels": {"stable": 2}}]}});
    std::fs::write(&config, tfs_json.to_string()).unwrap();
    let (status, body) = call(reqwest::Method::POST, &format!("{url}/tfserve/config:reload"), None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        predict("/v1/models/adder/labels/stable:predict").1,
        json!({"predictions": [3.0]})
    );
    assert_eq!(
        predict("/v1/models/adder/versions/1:predict").1,
        json!({"predictions": [2.0]})
    );

    // Simple TensorFlow Serving's list: a full replacement, so `adder` goes away.
    let stfs = json!({"model_config_list": [{"name": "half", "base_path": repo_path("models/half_plus_three"), "platform": "tensorflow"}]});
    std::fs::write(&config, stfs.to_string()).unwrap();
    assert_eq!(
        call(reqwest::Method::POST, &format!("{url}/tfserve/config:reload"), None).0,
        200
    );
    assert_eq!(predict("/v1/models/half:predict").1, json!({"predictions": [3.5]}));
    assert_eq!(predict("/v1/models/adder:predict").0, 404);

    std::fs::write(&config, "model_config_list { config { name: 'x' } }").unwrap();
    let (status, body) = call(reqwest::Method::POST, &format!("{url}/tfserve/config:reload"), None);
    assert_eq!(status, 400);
    assert!(body["error"].as_str().unwrap().contains("base_path"), "{body}");
    assert_eq!(
        predict("/v1/models/half:predict").0,
        200,
        "a bad config changes nothing"
    );
}

#[test]
fn readiness_follows_the_configured_models() {
    let base = temp_dir("repo-ready").join("broken");
    std::fs::create_dir_all(base.join("1")).unwrap();
    std::fs::write(base.join("1/saved_model.pb"), b"garbage").unwrap();
    let url = server({
        let mut settings = Settings::default();
        settings.models.model_name = "broken".into();
        settings.models.model_base_path = Some(base.clone());
        settings
    });
    assert_eq!(
        call(reqwest::Method::GET, &format!("{url}/v1/health/live"), None).0,
        200
    );
    let (status, body) = call(reqwest::Method::GET, &format!("{url}/v1/health/ready"), None);
    assert_eq!(status, 503);
    assert!(body["error"].as_str().unwrap().contains("broken"), "{body}");

    // A good version appears: the model becomes ready without a restart.
    publish_version(&repo_path("models/half_plus_three/1"), &base, 2);
    wait_for("readiness", || {
        call(reqwest::Method::GET, &format!("{url}/v2/health/ready"), None).0 == 200
    });
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn unloading_gives_memory_back() {
    let root = temp_dir("repo-rss");
    copy_dir(&repo_path("models/mnist_cnn"), &root.join("cnn"));
    let url = server({
        let mut settings = Settings::default();
        settings.models.models_dir = temp_dir("repo-rss-empty");
        settings.models.model_roots = vec![root.clone()];
        settings
    });
    let api = |method: reqwest::Method, path: &str, body: Option<Value>| call(method, &format!("{url}{path}"), body);
    // A first load and unload initialise TensorFlow's process-wide state.
    let body = json!({"name": "cnn", "base_path": root.join("cnn")});
    assert_eq!(api(reqwest::Method::POST, "/tfserve/models", Some(body.clone())).0, 201);
    assert_eq!(api(reqwest::Method::DELETE, "/tfserve/models/cnn", None).0, 200);
    let before = rss_kib();
    assert_eq!(api(reqwest::Method::POST, "/tfserve/models", Some(body)).0, 201);
    let loaded = rss_kib();
    assert_eq!(api(reqwest::Method::DELETE, "/tfserve/models/cnn", None).0, 200);
    let after = rss_kib();
    println!("RSS before load {before} KiB, loaded {loaded} KiB, after unload {after} KiB");
    assert!(
        after as f64 <= before as f64 * 1.10,
        "RSS {before} KiB before, {after} KiB after unloading"
    );
}
