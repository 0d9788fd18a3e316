//! Simple TensorFlow Serving's routes: `POST /`, `GET /health`,
//! `GET /v1/models/{m}/gen_json`.

use std::time::Instant;

use actix_web::http::header::CONTENT_TYPE;
use actix_web::{web, HttpRequest, HttpResponse};

use super::{answer, json_response, read_body, AppState};
use crate::error::ApiError;
use crate::registry::VersionSelector;
use crate::service::Trace;
use crate::stfs;

/// `POST /` with a JSON body (any content type but multipart).
pub async fn infer(req: &HttpRequest, payload: web::Payload, state: &AppState) -> HttpResponse {
    let started = Instant::now();
    let mut trace = Trace {
        client_gone: super::client_gone(req),
        ..Trace::default()
    };
    let content_type = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let media = crate::sagemaker::convert::media_type(content_type);
    let result = async {
        // The body is JSON whatever the header says (`curl -d` labels it a
        // form), as TF Serving's routes take it; multipart uploads are not taken.
        if media.starts_with("multipart/") {
            return Err(ApiError::Convert(
                crate::sagemaker::convert::ConvertError::UnsupportedMediaType(format!(
                    "{media} (POST / takes a JSON body)"
                )),
            ));
        }
        let body = read_body(req, payload, state.max_request_bytes).await?;
        stfs::infer(&state.service, &body, &mut trace).await
    }
    .await;
    answer(result, "", "stfs", &trace, started)
}

/// `GET /v1/models/{model}/gen_json`: an example body for `POST /`.
pub fn gen_json(state: &AppState, model: &str) -> Result<HttpResponse, ApiError> {
    stfs::known_model(&state.service, model)?;
    let (_, signature) = state.service.resolve(model, &VersionSelector::Latest, None)?;
    let mut example = stfs::gen_json(&signature);
    example["model_name"] = model.into();
    Ok(json_response(example.to_string().into_bytes()))
}

/// Liveness, as STFS answers it.
pub fn health() -> HttpResponse {
    HttpResponse::Ok().content_type("text/plain").body("healthy")
}

/// `GET /v1/models/{model}/gen_client?language=...` (default bash): a client
/// that posts the `gen_json` example to this server.
pub fn gen_client(req: &HttpRequest, state: &AppState, model: &str) -> Result<HttpResponse, ApiError> {
    stfs::known_model(&state.service, model)?;
    let language = web::Query::<std::collections::HashMap<String, String>>::from_query(req.query_string())
        .ok()
        .and_then(|q| q.get("language").cloned())
        .unwrap_or_else(|| "bash".into());
    let (_, signature) = state.service.resolve(model, &VersionSelector::Latest, None)?;
    let mut example = stfs::gen_json(&signature);
    example["model_name"] = model.into();
    let info = req.connection_info();
    let base_url = format!("{}://{}", info.scheme(), info.host());
    let client = stfs::gen_client(&language.to_ascii_lowercase(), &base_url, model, &example).ok_or_else(|| {
        ApiError::BadRequest(format!(
            "language '{language}' is not supported; use one of: {}",
            stfs::CLIENT_LANGUAGES.join(", ")
        ))
    })?;
    Ok(HttpResponse::Ok()
        .content_type("text/plain; charset=utf-8")
        .body(client))
}
