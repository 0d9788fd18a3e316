//! The HTTP front end: one port, every dialect. Routing lives here; handlers
//! stay thin and call into `service`.

mod tfs;

use actix_web::dev::Decompress;
use actix_web::http::header::CONTENT_LENGTH;
use actix_web::http::StatusCode;
use actix_web::web::{self, Bytes, BytesMut};
use actix_web::{HttpRequest, HttpResponse};
use futures_util::StreamExt;

use crate::error::{error_response, ApiError};
use crate::service::Service;

pub struct AppState {
    pub service: Service,
    pub max_request_bytes: usize,
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.default_service(web::to(dispatch));
}

async fn dispatch(req: HttpRequest, payload: web::Payload, state: web::Data<AppState>) -> HttpResponse {
    let path = req.path();
    let result = if path.len() >= 4 && path[..4].eq_ignore_ascii_case("/v1/") || path.eq_ignore_ascii_case("/v1") {
        tfs::handle(&req, payload, &state).await
    } else {
        Err(ApiError::NotFound(format!("Not found: {} {}", req.method(), path)))
    };
    result.unwrap_or_else(|err| {
        if err.status().is_server_error() {
            log::warn!("{} {}: {err}", req.method(), req.path());
        }
        error_response(err.status(), &err.to_string())
    })
}

/// Reads the whole body (gzip already undone by actix), refusing bodies over the limit.
pub async fn read_body(req: &HttpRequest, payload: web::Payload, limit: usize) -> Result<Bytes, ApiError> {
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if let Some(length) = declared.filter(|&l| l > limit) {
        return Err(ApiError::PayloadTooLarge {
            limit,
            got: Some(length),
        });
    }
    // The limit applies to the decoded bytes, so a small gzip body cannot expand past it.
    let mut decoded = Decompress::from_headers(payload.into_inner(), req.headers());
    let mut body = BytesMut::with_capacity(declared.unwrap_or(0).min(limit));
    while let Some(chunk) = decoded.next().await {
        let chunk = chunk.map_err(|e| ApiError::BadRequest(format!("failed to read the request body: {e}")))?;
        if body.len() + chunk.len() > limit {
            return Err(ApiError::PayloadTooLarge { limit, got: None });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

pub fn json_response(body: Vec<u8>) -> HttpResponse {
    HttpResponse::build(StatusCode::OK)
        .content_type("application/json")
        .body(body)
}
