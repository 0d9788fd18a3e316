//! The SageMaker container as its tests call it: one server on the committed
//! models with SageMaker's defaults, and `/invocations` with its headers.

use std::sync::OnceLock;

use serde_json::Value;

use super::{repo_path, spawn_server};

pub fn base_url() -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| {
        let mut settings = super::local_settings();
        settings.models.models_dir = repo_path("models");
        // SAGEMAKER_TFS_DEFAULT_MODEL_NAME's setting.
        settings.models.default_model_name = Some("half_plus_three".into());
        // What `tfserve serve` sets: the container serves every version it finds.
        settings.models.model_version_policy = tfserve::model_config::DefaultVersionPolicy::All;
        format!("http://{}", spawn_server(settings))
    })
}

pub fn invoke(
    content_type: Option<&str>,
    attributes: Option<&str>,
    accept: Option<&str>,
    body: impl Into<reqwest::blocking::Body>,
) -> (u16, String, Value) {
    let mut request = reqwest::blocking::Client::new()
        .post(format!("{}/invocations", base_url()))
        .body(body);
    if let Some(content_type) = content_type {
        request = request.header("Content-Type", content_type);
    }
    if let Some(attributes) = attributes {
        request = request.header("X-Amzn-SageMaker-Custom-Attributes", attributes);
    }
    if let Some(accept) = accept {
        request = request.header("Accept", accept);
    }
    let response = request.send().expect("request is answered");
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (status, content_type, response.json().unwrap_or(Value::Null))
}
