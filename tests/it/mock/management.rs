//! Loading and unloading models over HTTP: tfserve's management routes
//! (`/tfserve/models`) and SageMaker's multi-model routes (`/models`), confined
//! to `--model_roots` and bounded by `--max_models`, with their errors.

use crate::common;

use common::{call, copy_dir, repo_path, rest_server as server, temp_dir};
use serde_json::{json, Value};
use tfserve::settings::Settings;

#[test]
fn management_api_loads_and_unloads_within_the_roots() {
    let root = temp_dir("repo-roots");
    copy_dir(&repo_path("models/half_plus_three"), &root.join("half"));
    let outside = temp_dir("repo-outside");
    copy_dir(&repo_path("models/adder"), &outside.join("adder"));
    std::os::unix::fs::symlink(outside.join("adder"), root.join("escape")).unwrap();
    let url = server({
        let mut settings = Settings::default();
        settings.models.models_dir = temp_dir("repo-empty-models");
        settings.models.model_roots = vec![root.clone()];
        settings.models.max_models = 2;
        settings
    });
    let api = |method: reqwest::Method, path: &str, body: Option<Value>| call(method, &format!("{url}{path}"), body);
    use reqwest::Method;

    let half = root.join("half").display().to_string();
    let (status, body) = api(
        Method::POST,
        "/tfserve/models",
        Some(json!({"name": "half", "base_path": half})),
    );
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["versions"][0]["state"], "AVAILABLE");
    assert_eq!(
        api(
            Method::POST,
            "/v1/models/half:predict",
            Some(json!({"instances": [2.0]}))
        )
        .1,
        json!({"predictions": [4.0]})
    );
    let (status, body) = api(
        Method::POST,
        "/tfserve/models",
        Some(json!({"name": "half", "base_path": half})),
    );
    assert_eq!(status, 409, "{body}");

    let forbidden = [
        outside.join("adder").display().to_string(),
        format!(
            "{}/../{}/adder",
            root.display(),
            outside.file_name().unwrap().to_str().unwrap()
        ),
        root.join("escape").display().to_string(),
    ];
    for path in forbidden {
        let (status, body) = api(
            Method::POST,
            "/tfserve/models",
            Some(json!({"name": "x", "base_path": path})),
        );
        assert_eq!(status, 403, "{path}: {body}");
    }
    let (status, _) = api(
        Method::POST,
        "/tfserve/models",
        Some(json!({"name": "x", "base_path": root.join("nope")})),
    );
    assert_eq!(status, 404);

    // SageMaker's multi-model routes.
    // A SavedModel without a numeric version directory above it: the container's 404.
    copy_dir(&repo_path("models/adder/1"), &root.join("unversioned"));
    let url = root.join("unversioned");
    let (status, body) = api(
        Method::POST,
        "/models",
        Some(json!({"model_name": "unversioned", "url": url})),
    );
    assert_eq!(status, 404, "{body}");
    assert_eq!(
        body["error"],
        format!(
            "Could not find valid base path {} for servable unversioned",
            url.display()
        )
    );
    copy_dir(&repo_path("models/adder"), &root.join("adder"));
    let (status, body) = api(
        Method::POST,
        "/models",
        Some(json!({"model_name": "adder", "url": root.join("adder")})),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["success"], "Successfully loaded model adder");
    let (status, _) = api(
        Method::POST,
        "/models",
        Some(json!({"model_name": "adder", "url": root.join("adder")})),
    );
    assert_eq!(status, 409);
    let (_, body) = api(Method::GET, "/models", None);
    let names: Vec<&str> = body["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["modelName"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["adder", "half"]);
    let (status, body) = api(Method::POST, "/models/adder/invoke", Some(json!({"instances": [1.0]})));
    assert_eq!((status, body), (200, json!({"predictions": [3.0]})));
    assert_eq!(api(Method::GET, "/models/adder", None).1["modelName"], "adder");
    assert_eq!(api(Method::GET, "/models/nope", None).0, 404);
    // The limit of two models is reached.
    copy_dir(&repo_path("models/multi_io"), &root.join("multi"));
    let (status, body) = api(
        Method::POST,
        "/models",
        Some(json!({"model_name": "multi", "url": root.join("multi")})),
    );
    assert_eq!(status, 507, "{body}");
    assert!(body["error"].as_str().unwrap().contains("max_models"));

    let (status, body) = api(Method::DELETE, "/models/adder", None);
    assert_eq!(
        (status, body["success"].as_str()),
        (200, Some("Successfully unloaded model adder."))
    );
    assert_eq!(api(Method::DELETE, "/models/adder", None).0, 404);
    assert_eq!(
        api(Method::POST, "/models/adder/invoke", Some(json!({"instances": [1.0]}))).0,
        404
    );
    assert_eq!(api(Method::DELETE, "/tfserve/models/half", None).0, 200);
    assert_eq!(api(Method::DELETE, "/tfserve/models/half", None).0, 404);
    assert_eq!(
        api(
            Method::POST,
            "/v1/models/half:predict",
            Some(json!({"instances": [1.0]}))
        )
        .0,
        404
    );
    let (_, body) = api(Method::GET, "/tfserve/models", None);
    assert_eq!(body, json!({"models": []}));
}

/// Series of `/metrics` (lines that are not comments).
fn series(url: &str) -> Vec<String> {
    let text = reqwest::blocking::get(format!("{url}/metrics"))
        .unwrap()
        .text()
        .unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

#[test]
fn metrics_hold_only_the_models_served_however_many_came_and_went() {
    let root = temp_dir("metrics-churn");
    copy_dir(&repo_path("models/half_plus_three"), &root.join("half"));
    let url = server({
        let mut settings = Settings::default();
        settings.models.models_dir = temp_dir("metrics-churn-empty");
        settings.models.model_roots = vec![root.clone()];
        settings
    });
    let base_path = root.join("half").display().to_string();
    let cycle = |name: &str| {
        let load = json!({"name": name, "base_path": base_path});
        let (status, body) = call(reqwest::Method::POST, &format!("{url}/tfserve/models"), Some(load));
        assert_eq!(status, 201, "{body}");
        let predict = format!("{url}/v1/models/{name}:predict");
        let (status, _) = call(reqwest::Method::POST, &predict, Some(json!({"instances": [1.0]})));
        assert_eq!(status, 200);
        let (status, _) = call(reqwest::Method::POST, &predict, Some(json!({"instances": ["bad"]})));
        assert_eq!(status, 400);
        let own = format!("model=\"{name}\"");
        let counted = series(&url).iter().filter(|l| l.contains(&own)).count();
        assert!(counted > 0, "{name} is counted while it serves");
        let unload = format!("{url}/tfserve/models/{name}");
        assert_eq!(call(reqwest::Method::DELETE, &unload, None).0, 200);
        counted
    };
    // The registry of metrics is the process's: other tests' models come and
    // go beside these, so only this test's own names are looked at.
    let first = cycle("churn0");
    for i in 1..=300 {
        assert_eq!(cycle(&format!("churn{i}")), first, "each cycle counts the same series");
    }
    let left: Vec<String> = series(&url)
        .into_iter()
        .filter(|l| l.contains("model=\"churn"))
        .collect();
    assert!(
        left.is_empty(),
        "an unloaded model's series stayed: {:?}",
        &left[..left.len().min(5)]
    );
}
