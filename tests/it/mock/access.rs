//! The load-time audit on the mock runtime: the models of `tests/access`
//! whose signatures reach files are refused with a message naming the op,
//! its node and its class, load when their config entry or the server
//! allows that class, and the benign one (stderr prints, an asset table)
//! loads by default. What confinement does to a model allowed to run:
//! `tensorflow/access.rs`.

use crate::common;

use common::{call, config_settings, repo_path, spawn_server, temp_dir, wait_for};
use reqwest::Method;
use serde_json::{json, Value};

fn model(name: &str) -> Value {
    json!({"name": name, "base_path": repo_path(&format!("tests/access/models/{name}")).display().to_string()})
}

fn status(url: &str, name: &str) -> Value {
    call(Method::GET, &format!("{url}/v1/models/{name}"), None).1["model_version_status"][0].clone()
}

/// Waits until the model's version 1 has ended or become available.
fn settled(url: &str, name: &str) -> Value {
    let mut last = Value::Null;
    wait_for(&format!("{name} to settle"), || {
        last = status(url, name);
        last["state"] == "END" || last["state"] == "AVAILABLE"
    });
    last
}

const EVIL: [(&str, &str, &str); 6] = [
    ("read_file", "ReadFile", "files_read"),
    ("list_files", "MatchingFiles", "files_read"),
    ("read_lines", "TextLineDataset", "files_read"),
    ("write_file", "WriteFile", "files_write"),
    ("summary_writer", "CreateSummaryFileWriter", "files_write"),
    ("print_to_file", "PrintV2", "files_write"),
];

#[test]
fn models_reaching_files_are_refused_by_default_and_the_others_serve() {
    let dir = temp_dir("access-default");
    let mut models: Vec<Value> = EVIL.iter().map(|(name, _, _)| model(name)).collect();
    models.push(model("benign"));
    let mut allowed = model("write_file");
    allowed["name"] = json!("write_file_allowed");
    allowed["allow_access"] = json!(["files_write"]);
    models.push(allowed);
    let url = format!(
        "http://{}",
        spawn_server(config_settings(&json!({"model_config_list": models}), &dir))
    );

    for (name, op, class) in EVIL {
        let version = settled(&url, name);
        assert_eq!(version["state"], "END", "{name}: {version}");
        let message = version["status"]["error_message"].as_str().unwrap_or_default();
        assert!(
            message.contains("model is refused: signature 'serving_default' reaches")
                && message.contains(&format!("class {class}"))
                && message.contains("--allow_model_access="),
            "{name}: {message}"
        );
        // The op the model was written to reach is named (the first refused
        // op is named in full; the message's count covers the others).
        let listed = call(Method::GET, &format!("{url}/tfserve/models"), None).1;
        assert!(
            listed.to_string().contains(op) || message.contains(op),
            "{name}: {message}"
        );
    }
    assert_eq!(settled(&url, "benign")["state"], "AVAILABLE");
    let metrics = reqwest::blocking::get(format!("{url}/metrics"))
        .unwrap()
        .text()
        .unwrap();
    assert!(
        metrics.contains("tfserve_model_loads_refused_total{class=\"files_read\"}")
            && metrics.contains("tfserve_model_loads_refused_total{class=\"files_write\"}"),
        "{metrics}"
    );
    assert_eq!(settled(&url, "write_file_allowed")["state"], "AVAILABLE");

    // The audit's summary is shown for what serves, in tfserve's own listing.
    let listed = call(Method::GET, &format!("{url}/tfserve/models"), None).1;
    let access = |name: &str| {
        listed["models"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == name)
            .map(|m| m["versions"][0]["access"].clone())
            .unwrap_or_default()
    };
    assert_eq!(access("benign"), "serving_default: nothing outside the request");
    assert_eq!(access("write_file_allowed"), "serving_default: files_write (WriteFile)");
    // Only tfserve's own listing grows a field: TF Serving's status stays its own.
    assert_eq!(
        status(&url, "benign")["status"],
        json!({"error_code": "OK", "error_message": ""})
    );
}

#[test]
fn the_server_wide_flag_allows_a_class_for_every_model() {
    let dir = temp_dir("access-flag");
    let config = json!({"model_config_list": [model("read_file"), model("write_file")]});
    let mut settings = config_settings(&config, &dir);
    settings.security.allow_model_access = "files_read".into();
    let url = format!("http://{}", spawn_server(settings));
    assert_eq!(settled(&url, "read_file")["state"], "AVAILABLE");
    let write = settled(&url, "write_file");
    assert_eq!(write["state"], "END");
    let message = write["status"]["error_message"].as_str().unwrap_or_default();
    assert!(
        message.contains("reaches WriteFile") && message.contains("class files_write"),
        "{message}"
    );
}

#[test]
fn access_is_not_granted_over_the_network() {
    let dir = temp_dir("access-network");
    let root = repo_path("tests/access/models");
    let mut settings = config_settings(&json!({"model_config_list": [model("benign")]}), &dir);
    settings.models.model_roots = vec![root.clone()];
    let url = format!("http://{}", spawn_server(settings));
    let body = json!({"name": "reader", "base_path": root.join("read_file").display().to_string(),
                      "allow_access": "files_read"});
    let (status, answer) = call(Method::POST, &format!("{url}/tfserve/models"), Some(body));
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer
            .to_string()
            .contains("allow_access cannot be set over the network"),
        "{answer}"
    );
    // Without it, the model is refused as any other: no version loads.
    let body = json!({"name": "reader", "base_path": root.join("read_file").display().to_string()});
    let (status, answer) = call(Method::POST, &format!("{url}/tfserve/models"), Some(body));
    assert_eq!(status, 400, "{answer}");
    assert!(answer.to_string().contains("reaches ReadFile"), "{answer}");
}

#[test]
fn inspect_lists_what_each_signature_reaches() {
    let report = tfserve::inspect::report(&repo_path("tests/access/models/read_file/1")).unwrap();
    assert!(report.contains("  Reaches: files_read: ReadFile (node '"), "{report}");
    let report = tfserve::inspect::report(&repo_path("tests/access/models/benign/1")).unwrap();
    assert!(report.contains("  Reaches: nothing outside the request"), "{report}");
}

/// A gzip body that expands to `expanded` bytes of spaces: one full-flushed
/// deflate segment of 1 MiB, repeated (a full flush drops the history, so
/// each copy decodes alone), then a final empty block. The trailer's CRC is
/// not that of the content: a server that reads that far has already failed.
fn gzip_bomb(expanded: usize) -> Vec<u8> {
    use flate2::{Compress, Compression, FlushCompress};
    let mut segment = Vec::with_capacity(64 << 10);
    Compress::new(Compression::best(), false)
        .compress_vec(&vec![b' '; 1 << 20], &mut segment, FlushCompress::Full)
        .unwrap();
    let mut body = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255];
    for _ in 0..expanded >> 20 {
        body.extend_from_slice(&segment);
    }
    body.extend_from_slice(&[0x03, 0x00]);
    body.extend_from_slice(&[0; 8]);
    body
}

#[test]
fn a_gigabyte_gzip_bomb_is_refused_at_the_body_limit() {
    let mut settings = common::model_settings("half", repo_path("models/half_plus_three"));
    settings.http.max_request_bytes = 16 << 20;
    let url = format!("http://{}", spawn_server(settings));
    let bomb = gzip_bomb(1 << 30);
    assert!(
        bomb.len() < 16 << 20,
        "the compressed body fits the limit: {} bytes",
        bomb.len()
    );
    let response = reqwest::blocking::Client::new()
        .post(format!("{url}/v1/models/half:predict"))
        .header("Content-Type", "application/json")
        .header("Content-Encoding", "gzip")
        .body(bomb)
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 413);
    let answer: Value = response.json().unwrap();
    assert!(answer.to_string().contains("max_request_bytes"), "{answer}");
    // And the server goes on.
    let (status, _) = call(
        Method::POST,
        &format!("{url}/v1/models/half:predict"),
        Some(json!({"instances": [1.0]})),
    );
    assert_eq!(status, 200);
}

/// A SageMaker multi-model server whose only model root is `root`; its URL.
fn multi_model_server(root: &std::path::Path) -> String {
    let mut settings = common::local_settings();
    settings.models.multi_model = true;
    settings.models.models_dir = root.to_path_buf();
    settings.models.model_roots = vec![root.to_path_buf()];
    format!("http://{}", spawn_server(settings))
}

#[test]
fn sagemaker_model_names_and_urls_with_dot_dot_stay_refused() {
    let root = temp_dir("access-mme-root");
    common::copy_dir(&repo_path("models/adder"), &root.join("adder"));
    let url = multi_model_server(&root);
    let load = |body: Value| call(Method::POST, &format!("{url}/models"), Some(body));
    let escaping = format!(
        "{}/../{}/adder",
        root.display(),
        root.file_name().unwrap().to_str().unwrap()
    );
    let outside = format!("{}/../../etc", root.display());
    for url_given in [escaping.as_str(), outside.as_str()] {
        let (status, answer) = load(json!({"model_name": "m", "url": url_given}));
        assert!(
            status == 403 || status == 404 || status == 400,
            "{url_given}: {status} {answer}"
        );
        let (status, _) = call(Method::GET, &format!("{url}/models/m"), None);
        assert_eq!(status, 404, "{url_given} loaded nothing");
    }
    for name in ["../adder", "a/../../b", ".."] {
        let (status, answer) = load(json!({"model_name": name, "url": root.join("adder")}));
        assert_eq!(status, 400, "{name}: {answer}");
        assert!(
            answer["error"]
                .as_str()
                .unwrap_or_default()
                .contains("model_name must be"),
            "{answer}"
        );
    }
    let (status, answer) = load(json!({"model_name": "adder", "url": root.join("adder")}));
    assert_eq!(status, 200, "{answer}");
}

/// A path outside `--model_roots` gets one answer whether or not it exists:
/// `POST /models` does not tell a caller what lies on the server's disk.
#[test]
fn sagemaker_loads_outside_the_roots_do_not_tell_whether_the_path_exists() {
    let root = temp_dir("access-mme-probe");
    let elsewhere = temp_dir("access-mme-elsewhere");
    common::copy_dir(&repo_path("models/adder"), &elsewhere.join("adder"));
    let url = multi_model_server(&root);
    let load = |path: &std::path::Path| {
        let (status, answer) = call(
            Method::POST,
            &format!("{url}/models"),
            Some(json!({"model_name": "m", "url": path})),
        );
        let path = path.display().to_string();
        (status, answer.to_string().replace(&path, "PATH"))
    };
    let existing = load(&elsewhere.join("adder"));
    assert_eq!(existing.0, 403, "{}", existing.1);
    assert!(existing.1.contains("outside the model roots"), "{}", existing.1);
    assert_eq!(load(&elsewhere.join("no-such-model")), existing);
    assert_eq!(load(std::path::Path::new("/no/such/folder")), existing);
    // Inside the roots, a missing path is said to be missing.
    let (status, answer) = load(&root.join("missing"));
    assert_eq!(status, 404, "{answer}");
}

/// What the cache holds is loaded as models and precision decisions: a
/// cache folder another user may write stops the start, naming it.
#[test]
fn a_model_cache_other_users_may_write_stops_the_start() {
    use std::os::unix::fs::PermissionsExt;
    let cache = temp_dir("shared-cache");
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).unwrap();
    let mut settings = common::model_settings("half", repo_path("models/half_plus_three"));
    settings.models.model_cache_dir = Some(cache.clone());
    let start = |settings: tfserve::settings::Settings| {
        actix_web::rt::System::new()
            .block_on(async move { common::start_server_result(&settings).map(|running| running.addrs[0]) })
    };
    let error = start(settings.clone()).expect_err("start-up fails").to_string();
    assert!(
        error.starts_with(&format!("--model_cache_dir: {} has mode 777", cache.display())),
        "{error}"
    );
    // Writable by its owner alone, it serves.
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert!(start(settings).is_ok());
}
