//! HTTP basic auth: every route but liveness needs the credentials.

mod common;

use std::sync::OnceLock;

use base64::Engine;
use common::{repo_path, spawn_server};
use serde_json::{json, Value};
use tfserve::settings::{Secret, Settings};

fn base_url() -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| {
        let mut settings = Settings::default();
        settings.http.host = "127.0.0.1".into();
        settings.http.rest_api_port = Some(0);
        settings.models.model_name = "half".into();
        settings.models.model_base_path = Some(repo_path("models/half_plus_three"));
        settings.security.enable_auth = true;
        settings.security.auth_username = Some("admin".into());
        settings.security.auth_password = Some(Secret("s3cret:with colon".into()));
        format!("http://{}", spawn_server(settings))
    })
}

fn predict(authorization: Option<String>) -> reqwest::blocking::Response {
    let mut request = reqwest::blocking::Client::new()
        .post(format!("{}/v1/models/half:predict", base_url()))
        .json(&json!({"instances": [1.0]}));
    if let Some(value) = authorization {
        request = request.header("Authorization", value);
    }
    request.send().unwrap()
}

fn basic(credentials: &str) -> Option<String> {
    Some(format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(credentials)
    ))
}

#[test]
fn credentials_are_required_and_checked() {
    let response = predict(None);
    assert_eq!(response.status().as_u16(), 401);
    assert_eq!(response.headers()["www-authenticate"], "Basic realm=\"tfserve\"");
    assert!(response.json::<Value>().unwrap()["error"]
        .as_str()
        .unwrap()
        .contains("basic credentials"));
    for wrong in [
        basic("admin:wrong"),
        basic("admin"),
        Some("Bearer abc".into()),
        Some("Basic !!!".into()),
    ] {
        assert_eq!(predict(wrong.clone()).status().as_u16(), 401, "{wrong:?}");
    }
    let response = predict(basic("admin:s3cret:with colon"));
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.json::<Value>().unwrap(), json!({"predictions": [3.5]}));
    let lower = predict(basic("admin:s3cret:with colon").map(|h| h.replace("Basic", "basic")));
    assert_eq!(lower.status().as_u16(), 200);
}

#[test]
fn liveness_stays_open_and_everything_else_is_closed() {
    for path in ["/v1/health/live", "/v2/health/live", "/health"] {
        assert_eq!(
            reqwest::blocking::get(format!("{}{path}", base_url()))
                .unwrap()
                .status()
                .as_u16(),
            200,
            "{path}"
        );
    }
    for path in [
        "/v1/health/ready",
        "/v1/models/half",
        "/metrics",
        "/ping",
        "/tfserve/models",
        "/models",
    ] {
        assert_eq!(
            reqwest::blocking::get(format!("{}{path}", base_url()))
                .unwrap()
                .status()
                .as_u16(),
            401,
            "{path}"
        );
    }
}
