//! Model management over HTTP: tfserve's own API (`/tfserve/...`), SageMaker's
//! multi-model routes (`/models...`), and the health endpoints.

use std::path::{Component, Path, PathBuf};

use actix_web::http::{Method, StatusCode};
use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::{json, Value};

use super::{read_body, AppState};
use crate::error::{error_response, ApiError};
use crate::model_config::{self, ModelSource, VersionPolicy};
use crate::registry::ModelInfo;

pub fn json(status: StatusCode, value: Value) -> HttpResponse {
    HttpResponse::build(status)
        .content_type("application/json")
        .body(value.to_string())
}

/// Health, metrics and the management API.
pub fn configure(cfg: &mut web::ServiceConfig) {
    for path in [
        "/v1/health/live",
        "/v1/health/ready",
        "/v2/health/live",
        "/v2/health/ready",
    ] {
        cfg.route(path, web::route().to(health_route));
    }
    for path in ["/metrics", "/monitoring/prometheus/metrics"] {
        cfg.route(path, web::get().to(metrics));
    }
    // Under a static prefix, so other paths never reach the pattern.
    cfg.service(web::scope("/tfserve").route("/{tail:.*}", web::route().to(tfserve_route)));
}

async fn health_route(req: HttpRequest, state: web::Data<AppState>) -> HttpResponse {
    health(req.path(), &state).unwrap_or_else(|| HttpResponse::NotFound().finish())
}

pub async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    let metrics = &crate::metrics::METRICS;
    metrics.in_flight.set(state.in_flight.current() as i64);
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(crate::metrics::METRICS.render())
}

async fn tfserve_route(req: HttpRequest, payload: web::Payload, state: web::Data<AppState>) -> HttpResponse {
    let result = tfserve_api(&req, payload, &state).await;
    super::respond(&req, result)
}

/// `/v1/health/{live,ready}` and KServe's `/v2/health/{live,ready}`.
pub fn health(path: &str, state: &AppState) -> Option<HttpResponse> {
    match path {
        "/v1/health/live" => Some(json(StatusCode::OK, json!({"status": "live"}))),
        // The Open Inference Protocol's bodies, which KServe's client reads.
        "/v2/health/live" => Some(json(StatusCode::OK, json!({"live": true}))),
        "/v1/health/ready" | "/v2/health/ready" => Some(match state.ready() {
            Ok(()) if path == "/v2/health/ready" => json(StatusCode::OK, json!({"ready": true})),
            Ok(()) => json(StatusCode::OK, json!({"status": "ready"})),
            Err(reason) => {
                let error = ApiError::NotReady(reason);
                error_response(error.status(), &error.to_string())
            }
        }),
        _ => None,
    }
}

pub(crate) fn versions_json(info: &ModelInfo) -> Value {
    info.versions
        .iter()
        .map(|v| json!({"version": v.version.to_string(), "state": v.state.as_str(), "error": v.error.clone().unwrap_or_default()}))
        .collect()
}

/// Resolves a path given over HTTP inside the configured model roots: no
/// `..`, and after following symlinks still under a root.
pub fn confine(path: &str, roots: &[PathBuf], model: &str) -> Result<PathBuf, ApiError> {
    let requested = Path::new(path);
    if requested.components().any(|c| c == Component::ParentDir) {
        return Err(ApiError::Forbidden(format!("path {path} may not contain '..'")));
    }
    let real = requested
        .canonicalize()
        .map_err(|_| ApiError::NotFound(format!("Could not find valid base path {path} for servable {model}")))?;
    if roots
        .iter()
        .filter_map(|r| r.canonicalize().ok())
        .any(|root| real.starts_with(root))
    {
        return Ok(real);
    }
    let roots: Vec<String> = roots.iter().map(|r| r.display().to_string()).collect();
    Err(ApiError::Forbidden(format!(
        "path {path} is outside the model roots ({}; model_roots)",
        roots.join(", ")
    )))
}

/// Loads a model on a blocking thread (loading and warm-up take long).
pub async fn add_model(state: &AppState, source: ModelSource) -> Result<(), ApiError> {
    if state.max_models > 0 && state.service.registry.model_names().len() >= state.max_models {
        return Err(ApiError::InsufficientStorage(format!(
            "cannot load model {}: {} models are loaded, the limit (max_models) is {}",
            source.name,
            state.service.registry.model_names().len(),
            state.max_models
        )));
    }
    let registry = state.service.registry.clone();
    let handlers = state.service.handlers.clone();
    // Handlers first (pip may run): a model whose inference.py cannot load is not added.
    web::block(move || -> Result<(), ApiError> {
        if registry.model_names().contains(&source.name) {
            return Ok(registry.add_model(source)?);
        }
        handlers.prepare(&source.name, &source.base_path)?;
        registry
            .add_model(source.clone())
            .inspect_err(|_| handlers.remove(&source.name))?;
        Ok(())
    })
    .await
    .map_err(|e| ApiError::Internal(format!("the blocking pool failed: {e}")))??;
    Ok(())
}

pub async fn remove_model(state: &AppState, name: String) -> Result<(), ApiError> {
    let registry = state.service.registry.clone();
    let handlers = state.service.handlers.clone();
    web::block(move || {
        registry.remove_model(&name)?;
        handlers.remove(&name);
        Ok::<(), ApiError>(())
    })
    .await
    .map_err(|e| ApiError::Internal(format!("the blocking pool failed: {e}")))??;
    Ok(())
}

pub(crate) fn body_json(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::BadRequest(format!("JSON Parse error: {e}")))
}

/// tfserve's management API.
pub async fn tfserve_api(req: &HttpRequest, payload: web::Payload, state: &AppState) -> Result<HttpResponse, ApiError> {
    let path = req.path().trim_end_matches('/');
    let method = req.method();
    if path == "/tfserve/models" && method == Method::GET {
        let models: Vec<Value> = state
            .service
            .registry
            .list()
            .iter()
            .map(|m| json!({"name": m.name, "base_path": m.base_path, "versions": versions_json(m)}))
            .collect();
        return Ok(json(StatusCode::OK, json!({"models": models})));
    }
    if path == "/tfserve/models" && method == Method::POST {
        let body = body_json(&read_body(req, payload, state).await?)?;
        let mut source = model_config::json_source(&body).map_err(ApiError::BadRequest)?;
        if body.get("model_version_policy").is_none() {
            source.policy = VersionPolicy::All;
        }
        source.base_path = confine(
            &source.base_path.display().to_string(),
            &state.model_roots,
            &source.name,
        )?;
        let name = source.name.clone();
        add_model(state, source).await?;
        let info = state.service.registry.list().into_iter().find(|m| m.name == name);
        let versions = info.as_ref().map(versions_json).unwrap_or(Value::Null);
        return Ok(json(StatusCode::CREATED, json!({"name": name, "versions": versions})));
    }
    if let Some(name) = path.strip_prefix("/tfserve/models/").filter(|n| !n.contains('/')) {
        if method == Method::DELETE {
            let name = super::decode_segment(name);
            remove_model(state, name.clone()).await?;
            return Ok(json(StatusCode::OK, json!({"unloaded": name})));
        }
    }
    if path == "/tfserve/config:reload" && method == Method::POST {
        let file = state
            .config_file
            .clone()
            .ok_or_else(|| ApiError::BadRequest("no --model_config_file to reload".into()))?;
        let sources = model_config::load(&file).map_err(|e| ApiError::BadRequest(e.to_string()))?;
        let registry = state.service.registry.clone();
        web::block(move || registry.sync(&sources))
            .await
            .map_err(|e| ApiError::Internal(format!("the blocking pool failed: {e}")))?;
        let names = state.service.registry.model_names();
        return Ok(json(StatusCode::OK, json!({"models": names})));
    }
    Err(ApiError::NotFound(format!("Not found: {method} {path}")))
}
