//! Simple TensorFlow Serving's routes: `POST /`, `GET /health`,
//! `GET /v1/models/{m}/gen_json`.

use std::collections::HashMap;

use futures_util::StreamExt;

use actix_web::http::header::CONTENT_TYPE;
use actix_web::{web, HttpRequest, HttpResponse};

use super::StfsError;
use crate::call::http::{
    declared_length, hold_until_done, json_response, read_body, resource, within_body_timeout, Inference, Outcome,
};
use crate::dialects::stfs;
use crate::error::ApiError;
use crate::imaging::ImageFile;
use crate::server::{BytesHeld, ServerState};
use crate::service::VersionSelector;

/// `GET /health`, `GET /v1/models/{m}/gen_json` and `.../gen_client`,
/// registered before TF Serving's `/v1/` routes, which would take them.
/// (`POST /` is in the route table's `/`, which two dialects share.)
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(resource("/health", "GET").route(web::get().to(health_route)))
        // Guarded by the path's end, so TF Serving's requests never try the patterns.
        .service(
            web::scope("/v1/models")
                .guard(actix_web::guard::fn_guard(|ctx| {
                    let path = ctx.head().uri.path();
                    ctx.head().method == actix_web::http::Method::GET
                        && (path.ends_with("/gen_json") || path.ends_with("/gen_client"))
                }))
                .route("/{model}/gen_json", web::get().to(gen_json_route))
                .route("/{model}/gen_client", web::get().to(gen_client_route)),
        );
}

/// `POST /` (in the route table's `/`, beside the dashboard's `GET /`).
pub async fn infer_route(req: HttpRequest, payload: web::Payload, state: web::Data<ServerState>) -> HttpResponse {
    infer(&req, payload, &state).await
}

async fn health_route() -> HttpResponse {
    health()
}

/// The `{model}` segment as sent, percent-decoded once.
fn model_segment(req: &HttpRequest) -> String {
    crate::call::http::decode_segment(req.match_info().query("model"))
}

async fn gen_json_route(req: HttpRequest, state: web::Data<ServerState>) -> HttpResponse {
    let result = gen_json(&state, &model_segment(&req));
    crate::call::http::respond(&req, result)
}

async fn gen_client_route(req: HttpRequest, state: web::Data<ServerState>) -> HttpResponse {
    let result = gen_client(&req, &state, &model_segment(&req));
    crate::call::http::respond(&req, result)
}

/// `POST /` with a JSON body, or a form upload of image files.
pub async fn infer(req: &HttpRequest, payload: web::Payload, state: &ServerState) -> HttpResponse {
    let mut inference = Inference::begin(req);
    let trace = &mut inference.trace;
    let content_type = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let media = crate::codec::payload::media_type(content_type);
    let result = async {
        if media == "multipart/form-data" {
            let upload = read_upload(req, payload, state).await?;
            return stfs::infer_images(&state.service, upload.fields, upload.files, trace).await;
        }
        // Otherwise the body is JSON whatever the header says (`curl -d`
        // labels it a form), as TF Serving's routes take it.
        let body = read_body(req, payload, state).await?;
        crate::call::http::keep_body(state, trace, &body);
        stfs::infer(&state.service, &body, trace).await
    }
    .await;
    let outcome = Outcome {
        result,
        content_type: None,
        model: "",
        api: "stfs",
    };
    inference.conclude(req, outcome).into_response()
}

/// A `multipart/form-data` body: its files and text fields.
struct Upload {
    files: Vec<ImageFile>,
    fields: HashMap<String, String>,
}

/// Reads a form upload as [`read_body`] reads a body: at most
/// `max_request_bytes` across all parts, its bytes held of the budget until
/// the request is done, and within the body timeout. Files are the `image`
/// and `images` parts; other parts are text fields.
async fn read_upload(req: &HttpRequest, payload: web::Payload, state: &ServerState) -> Result<Upload, ApiError> {
    let limit = state.max_request_bytes;
    let declared = declared_length(req, limit)?;
    let mut held = state.service.body_budget().start();
    held.grow(declared.unwrap_or(0))?;
    let upload = within_body_timeout(state, read_parts(req, payload, limit, &mut held)).await?;
    hold_until_done(req, held);
    Ok(upload)
}

async fn read_parts(
    req: &HttpRequest,
    payload: web::Payload,
    limit: usize,
    held: &mut BytesHeld,
) -> Result<Upload, ApiError> {
    let mut form = actix_multipart::Multipart::new(req.headers(), payload);
    let mut upload = Upload {
        files: Vec::new(),
        fields: HashMap::new(),
    };
    let mut total = 0usize;
    while let Some(part) = form.next().await {
        let mut part = part.map_err(|e| StfsError::Multipart(e.to_string()))?;
        let name = part.name().unwrap_or_default().to_string();
        let file_name = part
            .content_disposition()
            .and_then(|d| d.get_filename())
            .map(str::to_string);
        let mut bytes = Vec::new();
        while let Some(chunk) = part.next().await {
            let chunk = chunk.map_err(|e| StfsError::FormField {
                field: name.clone(),
                reason: e.to_string(),
            })?;
            total += chunk.len();
            if total > limit {
                return Err(ApiError::PayloadTooLarge { limit, got: None });
            }
            // An undeclared (chunked) upload holds what it grows to.
            if total > held.bytes() {
                held.grow(total - held.bytes())?;
            }
            bytes.extend_from_slice(&chunk);
        }
        if name == "image" || name == "images" {
            let name = file_name.unwrap_or_else(|| format!("{name}[{}]", upload.files.len()));
            upload.files.push(ImageFile {
                name,
                bytes: bytes.into(),
            });
        } else if file_name.is_some() {
            return Err(StfsError::FileField(name).into());
        } else {
            let text = String::from_utf8(bytes).map_err(|_| StfsError::NotText(name.clone()))?;
            upload.fields.insert(name, text);
        }
    }
    Ok(upload)
}

/// `GET /v1/models/{model}/gen_json`: an example body for `POST /`.
pub fn gen_json(state: &ServerState, model: &str) -> Result<HttpResponse, ApiError> {
    stfs::known_model(&state.service, model)?;
    let (_, signature) = state.service.resolve(model, &VersionSelector::Latest, None)?;
    // STFS answers `{"data": {...}}` and nothing else.
    Ok(json_response(stfs::gen_json(&signature).to_string().into_bytes()))
}

/// Liveness, as STFS answers it.
pub fn health() -> HttpResponse {
    HttpResponse::Ok().content_type("text/plain").body("healthy")
}

/// `GET /v1/models/{model}/gen_client?language=...` (default bash): a client
/// that posts the `gen_json` example to this server.
pub fn gen_client(req: &HttpRequest, state: &ServerState, model: &str) -> Result<HttpResponse, ApiError> {
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
        StfsError::ClientLanguage {
            language: language.clone(),
            supported: stfs::CLIENT_LANGUAGES.join(", "),
        }
    })?;
    Ok(HttpResponse::Ok()
        .content_type("text/plain; charset=utf-8")
        .body(client))
}
