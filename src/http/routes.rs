//! tfserve's own HTTP routes: health (`/v1/health/*`, `/v2/health/*`),
//! metrics, and the management API (`/tfserve/...`) over the core's model
//! management.

use actix_web::http::{Method, StatusCode};
use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::{json, Value};

use crate::call::http::{body_json, decode_segment, json, read_body, resource, respond, versions_json};
use crate::error::{error_response, ApiError};
use crate::model_config::{self, VersionPolicy};
use crate::server::{models, ServerState};

/// Health, metrics and the management API.
pub fn configure(cfg: &mut web::ServiceConfig) {
    for path in ["/v1/health/live", "/v1/health/ready"] {
        // Under `/v1`, another method falls to TF Serving's answer for a
        // request it has no route for (400 `Malformed request`).
        let get_or_head = actix_web::guard::Any(actix_web::guard::Get()).or(actix_web::guard::Head());
        cfg.route(path, web::route().guard(get_or_head).to(health_route));
    }
    for path in ["/v2/health/live", "/v2/health/ready"] {
        cfg.service(
            resource(path, "GET, HEAD")
                .route(web::get().to(health_route))
                .route(web::head().to(health_route)),
        );
    }
    for path in ["/metrics", "/monitoring/prometheus/metrics"] {
        cfg.service(resource(path, "GET").route(web::get().to(metrics)));
    }
    // Under a static prefix, so other paths never reach the pattern.
    cfg.service(web::scope("/tfserve").route("/{tail:.*}", web::route().to(tfserve_route)));
}

async fn health_route(req: HttpRequest, state: web::Data<ServerState>) -> HttpResponse {
    health(req.path(), &state).unwrap_or_else(|| HttpResponse::NotFound().finish())
}

pub async fn metrics(state: web::Data<ServerState>) -> HttpResponse {
    let metrics = &crate::metrics::METRICS;
    metrics.in_flight.set(state.in_flight.current() as i64);
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(crate::metrics::METRICS.render())
}

async fn tfserve_route(req: HttpRequest, payload: web::Payload, state: web::Data<ServerState>) -> HttpResponse {
    let result = tfserve_api(&req, payload, &state).await;
    respond(&req, result)
}

/// `/v1/health/{live,ready}` and KServe's `/v2/health/{live,ready}`.
pub fn health(path: &str, state: &ServerState) -> Option<HttpResponse> {
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

/// tfserve's management API.
pub async fn tfserve_api(
    req: &HttpRequest,
    payload: web::Payload,
    state: &ServerState,
) -> Result<HttpResponse, ApiError> {
    let path = req.path().trim_end_matches('/');
    let method = req.method();
    if path == "/tfserve/models" && method == Method::GET {
        let models: Vec<Value> = state
            .service
            .models()
            .iter()
            .map(|m| json!({"name": m.name, "base_path": m.base_path, "versions": versions_json(m)}))
            .collect();
        return Ok(json(StatusCode::OK, json!({"models": models})));
    }
    if path == "/tfserve/models" && method == Method::POST {
        let body = body_json(&read_body(req, payload, state).await?)?;
        if body.get("allow_access").is_some() {
            // What a model may touch is the operator's decision, not the caller's.
            return Err(ApiError::BadRequest(
                "allow_access cannot be set over the network: --allow_model_access or the model config file allows access"
                    .into(),
            ));
        }
        let mut source = model_config::json_source(&body).map_err(ApiError::BadRequest)?;
        if body.get("model_version_policy").is_none() {
            source.policy = VersionPolicy::All;
        }
        source.base_path = state
            .service
            .confine(&source.base_path.display().to_string(), &source.name)?;
        let name = source.name.clone();
        state.service.load(source).await?;
        let info = state.service.info(&name);
        let versions = info.as_ref().map(versions_json).unwrap_or(Value::Null);
        return Ok(json(StatusCode::CREATED, json!({"name": name, "versions": versions})));
    }
    if let Some(name) = path.strip_prefix("/tfserve/models/").filter(|n| !n.contains('/')) {
        if method == Method::DELETE {
            let name = decode_segment(name);
            state.service.unload(name.clone()).await?;
            return Ok(json(StatusCode::OK, json!({"unloaded": name})));
        }
    }
    if path == "/tfserve/config:reload" && method == Method::POST {
        let names = models::reload_config_file(state).await?;
        return Ok(json(StatusCode::OK, json!({"models": names})));
    }
    Err(ApiError::RouteNotFound {
        method: method.to_string(),
        path: path.to_string(),
    })
}
