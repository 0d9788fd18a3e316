//! `--enable_cors`: browsers on other origins may call the API (preflights
//! answered without credentials), and nothing changes when it is off.

use crate::common;

use common::{base_url, repo_path, spawn_server};
use serde_json::json;
use tfserve::settings::Secret;

const ORIGIN: &str = "https://app.example";

#[test]
fn cross_origin_requests_when_enabled() {
    let mut settings = common::model_settings("half", repo_path("models/half_plus_three"));
    settings.http.enable_cors = true;
    settings.security.enable_auth = true;
    settings.security.auth_username = Some("u".into());
    settings.security.auth_password = Some(Secret("p".into()));
    let base = format!("http://{}", spawn_server(settings));
    let client = reqwest::blocking::Client::new();
    // The preflight carries no credentials and still succeeds.
    let preflight = client
        .request(reqwest::Method::OPTIONS, format!("{base}/"))
        .header("Origin", ORIGIN)
        .header("Access-Control-Request-Method", "POST")
        .header("Access-Control-Request-Headers", "content-type, authorization")
        .send()
        .unwrap();
    assert_eq!(preflight.status().as_u16(), 200);
    let headers = preflight.headers();
    assert_eq!(headers["access-control-allow-origin"], ORIGIN);
    assert!(headers.get("access-control-allow-credentials").is_none());
    let response = client
        .post(format!("{base}/"))
        .basic_auth("u", Some("p"))
        .header("Origin", ORIGIN)
        .json(&json!({"model_name": "half", "data": {"x": [1.0]}}))
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.headers()["access-control-allow-origin"], ORIGIN);
    // Auth still applies to the request itself.
    let response = client
        .post(format!("{base}/"))
        .header("Origin", ORIGIN)
        .json(&json!({"model_name": "half", "data": {"x": [1.0]}}))
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 401);
}

#[test]
fn no_cors_headers_by_default() {
    let response = reqwest::blocking::Client::new()
        .post(format!("{}/", base_url()))
        .header("Origin", ORIGIN)
        .json(&json!({"model_name": "half_plus_three", "data": {"x": [1.0]}}))
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert!(response.headers().get("access-control-allow-origin").is_none());
}
