//! HTTP basic auth: every route but liveness needs the credentials.

use crate::common;

use std::sync::OnceLock;

use base64::Engine;
use common::{repo_path, spawn_server};
use serde_json::{json, Value};
use tfserve::settings::Secret;

fn base_url() -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| {
        let mut settings = common::model_settings("half", repo_path("models/half_plus_three"));
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

/// One request as raw HTTP/1.1, so paths reach the server exactly as written
/// (a URL library would resolve `..` and re-encode); returns the status.
fn raw_status(method: &str, path: &str, authorization: Option<&str>) -> u16 {
    use std::io::{Read, Write};
    let addr = base_url().trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    let body = if method == "POST" {
        r#"{"instances": [1.0]}"#
    } else {
        ""
    };
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(value) = authorization {
        request.push_str(&format!("Authorization: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer);
    text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
}

#[test]
fn every_route_method_and_credential_is_checked() {
    let routes: &[(&str, &str)] = &[
        ("GET", "/v1/models/half"),
        ("GET", "/v1/models/half/versions/1"),
        ("GET", "/v1/models/half/metadata"),
        ("POST", "/v1/models/half:predict"),
        ("POST", "/v1/models/half/versions/1:predict"),
        ("POST", "/v1/models/half:classify"),
        ("POST", "/v1/models/half:regress"),
        ("GET", "/v1/health/ready"),
        ("GET", "/v2/health/ready"),
        ("GET", "/ping"),
        ("POST", "/invocations"),
        ("GET", "/models"),
        ("POST", "/models"),
        ("GET", "/models/half"),
        ("DELETE", "/models/nothing"),
        ("POST", "/models/half/invoke"),
        ("GET", "/"),
        ("POST", "/"),
        ("GET", "/dashboard"),
        ("GET", "/metrics"),
        ("GET", "/monitoring/prometheus/metrics"),
        ("GET", "/tfserve/models"),
        ("GET", "/no/such/route"),
    ];
    let right = basic("admin:s3cret:with colon").unwrap();
    let oversized = format!("Basic {}", "A".repeat(16 * 1024));
    let wrong = [
        None,
        basic("admin:wrong"),
        basic("Admin:s3cret:with colon"),
        basic("admin:s3cret:with colo"),
        basic(":"),
        Some("Basic".to_string()),
        Some("Basic !!!".to_string()),
        Some(format!("Bearer {}", right.trim_start_matches("Basic "))),
        Some(oversized),
    ];
    let mut checked = 0;
    for (method, path) in routes {
        for credentials in &wrong {
            let status = raw_status(method, path, credentials.as_deref());
            assert!(
                status == 401 || (credentials.as_ref().is_some_and(|c| c.len() > 8192) && (400..500).contains(&status)),
                "{method} {path} with {:?}: {status}",
                credentials.as_ref().map(|c| &c[..c.len().min(40)])
            );
            checked += 1;
        }
        let status = raw_status(method, path, Some(&right));
        assert_ne!(status, 401, "{method} {path} refused the right credentials");
        assert!(
            status != 0 && status < 500 || *path == "/no/such/route",
            "{method} {path}: {status}"
        );
        checked += 1;
    }
    assert_eq!(checked, routes.len() * (wrong.len() + 1));
}

#[test]
fn path_tricks_do_not_reach_a_route_without_credentials() {
    for path in [
        "/v1/health/live/../../v1/models/half",
        "/v1/health/live/%2E%2E/%2E%2E/v1/models/half",
        "/v1/health/live%2F..%2F..%2Fv1%2Fmodels%2Fhalf",
        "//v1/models/half",
        "/V1/MODELS/half",
        "/v1/models/half%3Apredict",
        "/v1/health/live/",
        "/v1/health/LIVE",
        "/./v1/models/half",
    ] {
        for method in ["GET", "POST"] {
            let status = raw_status(method, path, None);
            assert!(status == 401 || status == 400, "{method} {path}: {status}");
        }
    }
    // Liveness is open exactly, query string or not.
    assert_eq!(raw_status("GET", "/v1/health/live?next=/v1/models/half", None), 200);
}
