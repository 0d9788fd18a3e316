//! Vertex AI's custom-container contract: the health and predict routes the
//! platform names (`AIP_HEALTH_ROUTE`, `AIP_PREDICT_ROUTE`), any path,
//! `/v1/...` included, with TF Serving's request and `{"predictions": ...}`.

use crate::common;

use common::{repo_path, spawn_server};
use serde_json::{json, Value};

const HEALTH: &str = "/v1/endpoints/4242/deployedModels/77";
const PREDICT: &str = "/v1/endpoints/4242/deployedModels/77:predict";

fn server() -> String {
    let mut settings = common::local_settings();
    settings.http.vertex_health_route = Some(HEALTH.into());
    settings.http.vertex_predict_route = Some(PREDICT.into());
    settings.models.model_base_path = Some(repo_path("models/half_plus_three"));
    format!("http://{}", spawn_server(settings))
}

fn post(base: &str, path: &str, body: Value) -> (u16, Value) {
    let answer = common::client()
        .post(format!("{base}{path}"))
        .header("Content-Type", "application/json")
        .body(body.to_string())
        .send()
        .unwrap();
    let status = answer.status().as_u16();
    (status, answer.json().unwrap())
}

#[test]
fn health_and_predict_answer_on_the_routes_vertex_names() {
    let base = server();
    let health = common::client().get(format!("{base}{HEALTH}")).send().unwrap();
    assert_eq!(health.status().as_u16(), 200);
    let rows = json!({"instances": [1.0, 2.0], "parameters": {"threshold": 0.5}});
    assert_eq!(post(&base, PREDICT, rows), (200, json!({"predictions": [3.5, 4.0]})));
    let columns = json!({"inputs": [1.0, 2.0]});
    assert_eq!(post(&base, PREDICT, columns), (200, json!({"predictions": [3.5, 4.0]})));
    // A bad request is TF Serving's 400, with its error.
    let (status, error) = post(&base, PREDICT, json!({"instances": "nope"}));
    assert_eq!(status, 400, "{error}");
    assert!(error["error"].is_string(), "{error}");
    // The platform only GETs health and POSTs predictions: a GET there is
    // what TF Serving answers for its path (a 4xx), never a prediction.
    let wrong = common::client().get(format!("{base}{PREDICT}")).send().unwrap();
    assert!(wrong.status().is_client_error(), "{}", wrong.status());
    // TF Serving's own routes still answer beside them.
    let tfs = post(&base, "/v1/models/default:predict", json!({"instances": [2.0]}));
    assert_eq!(tfs, (200, json!({"predictions": [4.0]})));
}

/// A base path that is itself a SavedModel folder (a version folder given
/// one level too deep, or a Vertex model artifact) serves as version 1, as
/// the same layout from a bucket does; the health route follows.
#[test]
fn a_base_path_holding_a_saved_model_itself_serves_as_version_1() {
    let flat = common::temp_dir("vertex-flat").join("model");
    common::copy_dir(&common::repo_path("models/half_plus_three/1"), &flat);
    let mut settings = common::model_settings("m", flat.clone());
    settings.http.vertex_health_route = Some("/health".into());
    let url = format!("http://{}", common::spawn_server(settings));
    let (status, body) = common::call(reqwest::Method::GET, &format!("{url}/v1/models/m"), None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["model_version_status"][0]["version"], "1");
    assert_eq!(body["model_version_status"][0]["state"], "AVAILABLE");
    let (status, body) = common::call(
        reqwest::Method::POST,
        &format!("{url}/v1/models/m:predict"),
        Some(serde_json::json!({"instances": [1.0]})),
    );
    assert_eq!((status, body["predictions"][0].as_f64()), (200, Some(3.5)));
    assert_eq!(
        reqwest::blocking::get(format!("{url}/health"))
            .unwrap()
            .status()
            .as_u16(),
        200
    );
}
