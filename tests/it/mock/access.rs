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
