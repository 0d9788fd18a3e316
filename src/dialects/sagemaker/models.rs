//! SageMaker's multi-model endpoint: `GET/POST /models`, `GET/DELETE
//! /models/{name}` and `POST /models/{name}/invoke`, on the core's model management.

use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::{json, Value};

use super::SageMakerError;
use crate::call::http::{body_json, json, read_body, resource, respond, versions_json};
use crate::error::ApiError;
use crate::model_config::ModelSource;
use crate::server::ServerState;
use crate::service::{has_versions, ManageError, ModelInfo, RegistryError};

/// The multi-model routes on actix's table; another method gets 405 with `Allow`.
pub fn configure(cfg: &mut web::ServiceConfig) {
    // Under a static prefix, so other paths never reach the patterns.
    cfg.service(
        web::scope("/models")
            .service(resource("/{name}/invoke", "POST").route(web::post().to(invoke)))
            .service(
                resource("", "GET, POST")
                    .route(web::get().to(list))
                    .route(web::post().to(load)),
            )
            .service(
                resource("/", "GET, POST")
                    .route(web::get().to(list))
                    .route(web::post().to(load)),
            )
            .service(
                resource("/{name}", "GET, DELETE")
                    .route(web::get().to(describe))
                    .route(web::delete().to(unload)),
            ),
    );
}

fn not_loaded(name: &str) -> ApiError {
    SageMakerError::NotLoaded(name.to_string()).into()
}

fn loaded(state: &ServerState, name: &str) -> Option<ModelInfo> {
    state.service.info(name)
}

async fn list(state: web::Data<ServerState>) -> HttpResponse {
    let models: Vec<Value> = state
        .service
        .models()
        .iter()
        .map(|m| json!({"modelName": m.name, "modelUrl": m.base_path}))
        .collect();
    json(StatusCode::OK, json!({"models": models}))
}

/// `{"model_name": ..., "url": ...}`: loads every version under `url`, which
/// must lie inside the model roots.
async fn load(req: HttpRequest, payload: web::Payload, state: web::Data<ServerState>) -> HttpResponse {
    let result = async {
        let body = body_json(&read_body(&req, payload, &state).await?)?;
        let field = |key: &str| body.get(key).and_then(Value::as_str).map(str::to_string);
        let name = field("model_name").ok_or(SageMakerError::MissingField("model_name"))?;
        if !super::valid_model_name(&name) {
            return Err(SageMakerError::InvalidModelName(name).into());
        }
        let url = field("url").ok_or(SageMakerError::MissingField("url"))?;
        let conflict = || ApiError::from(SageMakerError::AlreadyLoaded(name.clone()));
        if loaded(&state, &name).is_some() {
            return Err(conflict());
        }
        let base_path = state.service.confine(&url, &name)?;
        // As the container's validate_model_dir: no numeric version directory, no model.
        if !has_versions(&base_path) {
            return Err(ManageError::NoBasePath { path: url, model: name }.into());
        }
        match state
            .service
            .load(ModelSource::all_versions(name.clone(), base_path))
            .await
        {
            Err(ApiError::Registry(RegistryError::AlreadyLoaded(_))) => Err(conflict()),
            Err(other) => Err(other),
            Ok(_) => Ok(json(
                StatusCode::OK,
                json!({"success": format!("Successfully loaded model {name}")}),
            )),
        }
    }
    .await;
    respond(&req, result)
}

async fn describe(req: HttpRequest, name: web::Path<String>, state: web::Data<ServerState>) -> HttpResponse {
    let result = loaded(&state, &name).ok_or_else(|| not_loaded(&name)).map(|m| {
        json(
            StatusCode::OK,
            json!({"modelName": m.name, "modelUrl": m.base_path, "versions": versions_json(&m)}),
        )
    });
    respond(&req, result)
}

async fn unload(req: HttpRequest, name: web::Path<String>, state: web::Data<ServerState>) -> HttpResponse {
    let name = name.into_inner();
    let result = state
        .service
        .unload(name.clone())
        .await
        .map_err(|_| not_loaded(&name))
        .map(|_| {
            json(
                StatusCode::OK,
                json!({"success": format!("Successfully unloaded model {name}.")}),
            )
        });
    respond(&req, result)
}

async fn invoke(
    req: HttpRequest,
    name: web::Path<String>,
    payload: web::Payload,
    state: web::Data<ServerState>,
) -> HttpResponse {
    let name = name.into_inner();
    if loaded(&state, &name).is_none() {
        return respond(&req, Err(not_loaded(&name)));
    }
    super::routes::invocations(&req, payload, &state, Some(name)).await
}
