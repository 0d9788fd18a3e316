//! The SageMaker container's routes: `/ping`, `/invocations`, and the body of
//! `/models/{name}/invoke`.

use actix_web::http::header::{HeaderValue, ACCEPT, CONTENT_TYPE};
use actix_web::{web, HttpRequest, HttpResponse};

use crate::call::http::{read_body, resource, Inference, Outcome};
use crate::dialects::sagemaker::{Invocation, CUSTOM_ATTRIBUTES};
use crate::error::{error_response, ApiError};
use crate::server::ServerState;
use crate::service::{VersionSelector, VersionState};

/// `/ping`, `/invocations` and the multi-model routes under `/models`.
pub fn configure(cfg: &mut web::ServiceConfig) {
    // Another method gets 405 with `Allow`.
    cfg.service(
        resource("/ping", "GET, HEAD")
            .route(web::get().to(ping_route))
            .route(web::head().to(ping_route)),
    )
    .service(resource("/invocations", "POST").route(web::post().to(invocations_route)))
    .configure(super::models::configure);
}

async fn ping_route(state: web::Data<ServerState>) -> HttpResponse {
    ping(&state)
}

async fn invocations_route(req: HttpRequest, payload: web::Payload, state: web::Data<ServerState>) -> HttpResponse {
    invocations(&req, payload, &state, None).await
}

/// 200 once the default model has an available version (always, with no
/// models: a multi-model endpoint starts empty); 502 otherwise, as the
/// container; 503 while the server drains.
pub fn ping(state: &ServerState) -> HttpResponse {
    if state.drain.is_draining() {
        let error = ApiError::NotReady("the server is shutting down".into());
        return error_response(error.status(), &error.to_string());
    }
    let Some(model) = state.service.default_model() else {
        return HttpResponse::Ok().finish();
    };
    match state.service.versions(&model, &VersionSelector::Latest) {
        Ok(versions) if versions.iter().any(|v| v.state == VersionState::Available) => HttpResponse::Ok().finish(),
        _ => {
            let error = ApiError::PingFailed(model);
            error_response(error.status(), &error.to_string())
        }
    }
}

/// `POST /invocations`, or `POST /models/{name}/invoke` with `model` set.
pub async fn invocations(
    req: &HttpRequest,
    payload: web::Payload,
    state: &ServerState,
    model: Option<String>,
) -> HttpResponse {
    let mut inference = Inference::begin(req);
    let trace = &mut inference.trace;
    let header = |name| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let invocation = Invocation::new(
        model,
        header(CONTENT_TYPE.as_str()),
        header(CUSTOM_ATTRIBUTES),
        header(ACCEPT.as_str()),
    );
    let model_label = invocation.model_name(&state.service);
    let result = async {
        let body = read_body(req, payload, state).await?;
        crate::call::http::keep_body(state, trace, &body);
        invocation.respond(&state.service, &body, trace).await
    }
    .await;
    // A handler's own content type wins; otherwise JSON (the TF Serving 2.20
    // container answers JSON and JSON Lines requests alike as
    // `application/json`, one line).
    let (result, handler_type) = match result {
        Ok(answer) => (Ok(answer.body), answer.content_type),
        Err(err) => (Err(err), None),
    };
    let content_type = handler_type.and_then(|t| HeaderValue::from_str(&t).ok());
    let outcome = Outcome {
        result,
        content_type,
        model: &model_label,
        api: "invocations",
    };
    inference.conclude(req, outcome).into_response()
}
