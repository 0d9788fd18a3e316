//! SageMaker's multi-model endpoint: `GET/POST /models`, `GET/DELETE
//! /models/{name}` and `POST /models/{name}/invoke`, on the shared registry.

use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::http::manage::{add_model, body_json, confine, json, remove_model, versions_json};
use crate::http::{read_body, AppState};
use crate::model_config::ModelSource;
use crate::registry::RegistryError;

/// SageMaker's multi-model endpoint routes.
pub async fn sagemaker_models(
    req: &HttpRequest,
    payload: web::Payload,
    state: &AppState,
) -> Result<HttpResponse, ApiError> {
    let path = req.path().trim_end_matches('/');
    let method = req.method().clone();
    let rest = path.strip_prefix("/models").unwrap_or_default();
    let not_loaded = |name: &str| ApiError::NotFound(format!("Model {name} is not loaded yet."));
    let info = |name: &str| state.service.registry.list().into_iter().find(|m| m.name == name);
    match (
        method.as_str(),
        rest.trim_start_matches('/').split('/').collect::<Vec<_>>().as_slice(),
    ) {
        ("GET", [""]) => {
            let models: Vec<Value> = state
                .service
                .registry
                .list()
                .iter()
                .map(|m| json!({"modelName": m.name, "modelUrl": m.base_path}))
                .collect();
            Ok(json(StatusCode::OK, json!({"models": models})))
        }
        ("POST", [""]) => {
            let body = body_json(&read_body(req, payload, state.max_request_bytes).await?)?;
            let field = |key: &str| body.get(key).and_then(Value::as_str).map(str::to_string);
            let name =
                field("model_name").ok_or_else(|| ApiError::BadRequest("missing 'model_name' in the body".into()))?;
            let url = field("url").ok_or_else(|| ApiError::BadRequest("missing 'url' in the body".into()))?;
            if info(&name).is_some() {
                return Err(ApiError::Conflict(format!("Model {name} is already loaded.")));
            }
            let base_path = confine(&url, &state.model_roots, &name)?;
            // As the container's validate_model_dir: no numeric version directory, no model.
            let has_versions = crate::registry::discover_versions(&base_path).is_ok_and(|v| !v.is_empty());
            if !has_versions {
                return Err(ApiError::NotFound(format!(
                    "Could not find valid base path {url} for servable {name}"
                )));
            }
            add_model(state, ModelSource::all_versions(name.clone(), base_path))
                .await
                .map_err(|e| match e {
                    ApiError::Registry(RegistryError::AlreadyLoaded(_)) => {
                        ApiError::Conflict(format!("Model {name} is already loaded."))
                    }
                    other => other,
                })?;
            Ok(json(
                StatusCode::OK,
                json!({"success": format!("Successfully loaded model {name}")}),
            ))
        }
        ("GET", [name]) => {
            let name = crate::http::decode_segment(name);
            let m = info(&name).ok_or_else(|| not_loaded(&name))?;
            Ok(json(
                StatusCode::OK,
                json!({"modelName": m.name, "modelUrl": m.base_path, "versions": versions_json(&m)}),
            ))
        }
        ("DELETE", [name]) => {
            let name = crate::http::decode_segment(name);
            remove_model(state, name.clone()).await.map_err(|_| not_loaded(&name))?;
            Ok(json(
                StatusCode::OK,
                json!({"success": format!("Successfully unloaded model {name}.")}),
            ))
        }
        ("POST", [name, "invoke"]) => {
            let name = crate::http::decode_segment(name);
            if info(&name).is_none() {
                return Err(not_loaded(&name));
            }
            Ok(super::routes::invocations(req, payload, state, Some(name)).await)
        }
        _ => Err(ApiError::NotFound(format!("Not found: {method} {path}"))),
    }
}
