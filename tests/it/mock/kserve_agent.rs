//! KServe's multi-model agent against the repository API, as its puller
//! calls it: the server starts ready with no models under `--model_roots`;
//! the agent downloads a model into `<root>/<name>/` beside a
//! `SUCCESS.<hashes>` file and POSTs `…/load` with `{}`; on delete it
//! removes the folder, then POSTs `…/unload`. Only success answers 200.

use crate::common;

use std::path::Path;

use common::{copy_dir, repo_path, spawn_server, temp_dir};
use serde_json::{json, Value};

fn call(base: &str, method: &str, path: &str, body: &str) -> (u16, Value) {
    let client = common::client();
    let request = match method {
        "GET" => client.get(format!("{base}{path}")),
        _ => client.post(format!("{base}{path}")).body(body.to_string()),
    };
    let answer = request.header("Content-Type", "application/json").send().unwrap();
    let status = answer.status().as_u16();
    let text = answer.text().unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// What the agent's puller leaves in a model's folder once its download is done.
fn download(root: &Path, name: &str, version: &str) {
    copy_dir(&repo_path("models/half_plus_three/1"), &root.join(name).join(version));
    std::fs::write(root.join(name).join("SUCCESS.3f2a.9bc1.e0d4"), b"").unwrap();
}

#[test]
fn the_agent_loads_and_unloads_models_from_an_empty_start() {
    let root = temp_dir("agent-root");
    let elsewhere = temp_dir("agent-cwd");
    let mut settings = common::local_settings();
    settings.models.model_roots = vec![root.clone()];
    // No models folder where the server runs: nothing is loaded at start.
    settings.models.models_dir = elsewhere.join("models");
    let base = format!("http://{}", spawn_server(settings));
    assert_eq!(
        call(&base, "GET", "/v2/health/ready", "").0,
        200,
        "ready with no models"
    );
    assert_eq!(call(&base, "POST", "/v2/repository/index", "{}").1, json!([]));

    download(&root, "fraud", "1");
    assert_eq!(
        call(&base, "POST", "/v2/repository/models/fraud/load", "{}"),
        (200, json!({}))
    );
    let index = call(&base, "POST", "/v2/repository/index", "{}").1;
    assert_eq!(
        index,
        json!([{"name": "fraud", "version": "1", "state": "READY", "reason": ""}])
    );
    let infer = json!({"inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [1.0, 2.0]}]});
    let answer = call(&base, "POST", "/v2/models/fraud/infer", &infer.to_string());
    assert_eq!(answer.0, 200, "{}", answer.1);
    assert_eq!(answer.1["outputs"][0]["data"], json!([3.5, 4.0]));

    // A new download of the same model and a second load: the new version serves.
    download(&root, "fraud", "2");
    assert_eq!(
        call(&base, "POST", "/v2/repository/models/fraud/load", "{}"),
        (200, json!({}))
    );
    assert_eq!(call(&base, "GET", "/v2/models/fraud/versions/2/ready", "").0, 200);

    // A model the agent has not downloaded is not loaded, and says why.
    let (status, error) = call(&base, "POST", "/v2/repository/models/missing/load", "{}");
    assert_eq!(status, 404, "{error}");
    assert!(error["error"].as_str().unwrap().contains("missing"), "{error}");

    // Delete: the folder goes first, then the unload.
    std::fs::remove_dir_all(root.join("fraud")).unwrap();
    assert_eq!(
        call(&base, "POST", "/v2/repository/models/fraud/unload", "{}"),
        (200, json!({}))
    );
    assert_eq!(call(&base, "GET", "/v2/models/fraud/ready", "").0, 404);
    assert_ne!(call(&base, "POST", "/v2/repository/models/fraud/unload", "{}").0, 200);
    assert_eq!(
        call(&base, "GET", "/v2/health/ready", "").0,
        200,
        "still ready with no models"
    );
    let _ = std::fs::remove_dir_all(&root);
}
