//! The SageMaker container's routes: `/ping`, `/invocations`, and the body of
//! `/models/{name}/invoke`.

use std::time::Instant;

use actix_web::http::header::{HeaderValue, ACCEPT, CONTENT_TYPE};
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};

use super::{answer, read_body, AppState};
use crate::codec::RequestFormat;
use crate::error::{error_response, ApiError};
use crate::registry::{VersionSelector, VersionState};
use crate::sagemaker::convert::{image_input, is_image, media_type, takes_scalar_instances, to_tfs_json};
use crate::sagemaker::{default_model, CustomAttributes};
use crate::service::Trace;
use crate::signature::{CLASSIFY_METHOD, REGRESS_METHOD};

const CUSTOM_ATTRIBUTES: &str = "x-amzn-sagemaker-custom-attributes";

fn default_model_name(state: &AppState) -> Option<String> {
    default_model(
        std::env::var("SAGEMAKER_TFS_DEFAULT_MODEL_NAME").ok(),
        &state.service.registry.model_names(),
    )
}

/// 200 once the default model has an available version (always, with no
/// models: a multi-model endpoint starts empty); 502 otherwise, as the container.
pub fn ping(state: &AppState) -> HttpResponse {
    let Some(model) = default_model_name(state) else {
        return HttpResponse::Ok().finish();
    };
    match state.service.registry.status(&model, &VersionSelector::Latest) {
        Ok(versions) if versions.iter().any(|v| v.state == VersionState::Available) => HttpResponse::Ok().finish(),
        _ => error_response(StatusCode::BAD_GATEWAY, &format!("model {model} is not available")),
    }
}

/// `POST /invocations`, or `POST /models/{name}/invoke` with `model` set.
pub async fn invocations(
    req: &HttpRequest,
    payload: web::Payload,
    state: &AppState,
    model: Option<String>,
) -> HttpResponse {
    let started = Instant::now();
    let mut trace = Trace {
        client_gone: super::client_gone(req),
        ..Trace::default()
    };
    let header = |name| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let attributes = CustomAttributes::parse(&header(CUSTOM_ATTRIBUTES));
    let method = attributes.method.clone().unwrap_or_else(|| "predict".into());
    let model = model
        .or(attributes.model_name.clone())
        .or_else(|| default_model_name(state))
        .unwrap_or_default();
    let result = async {
        let selector =
            match &attributes.model_version {
                None => VersionSelector::Latest,
                Some(v) => VersionSelector::Specific(v.parse().map_err(|_| {
                    ApiError::BadRequest(format!("tfs-model-version must be a version number, got '{v}'"))
                })?),
            };
        let body = read_body(req, payload, state.max_request_bytes).await?;
        let media = media_type(&header(CONTENT_TYPE.as_str()));
        let service = &state.service;
        if is_image(&media) {
            if method != "predict" {
                return Err(ApiError::BadRequest(format!(
                    "image requests support tfs-method=predict only, got '{method}'"
                )));
            }
            let (servable, signature) = service.resolve(&model, &selector, None)?;
            trace.version = Some(servable.version);
            let input = image_input(&body, &signature)?;
            return service
                .predict_inputs(&servable, &signature, vec![input], RequestFormat::Row, &mut trace)
                .await;
        }
        let scalar_instances = media == "text/csv"
            && service
                .resolve(&model, &selector, None)
                .is_ok_and(|(_, signature)| takes_scalar_instances(&signature));
        let tfs_body = to_tfs_json(&media, &body, scalar_instances)?;
        match method.as_str() {
            "predict" => service.predict(&model, &selector, &tfs_body, &mut trace).await,
            "classify" => {
                service
                    .classify_or_regress(&model, &selector, &tfs_body, CLASSIFY_METHOD, &mut trace)
                    .await
            }
            "regress" => {
                service
                    .classify_or_regress(&model, &selector, &tfs_body, REGRESS_METHOD, &mut trace)
                    .await
            }
            other => Err(ApiError::BadRequest(format!(
                "tfs-method must be predict, classify or regress, got '{other}'"
            ))),
        }
    }
    .await;
    let mut response = answer(result, &model, "invocations", &trace, started);
    if response.status().is_success() {
        let content_type = accept_type(&header(ACCEPT.as_str()));
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    }
    response
}

/// The first of `application/json` and `application/jsonlines` the client
/// accepts; JSON otherwise. The body is one line either way.
fn accept_type(accept: &str) -> &'static str {
    let json = accept
        .find("application/json")
        .filter(|&i| !accept[i..].starts_with("application/jsonlines"));
    match (json, accept.find("application/jsonlines")) {
        (Some(j), Some(l)) if l < j => "application/jsonlines",
        (None, Some(_)) => "application/jsonlines",
        _ => "application/json",
    }
}

#[cfg(test)]
mod tests {
    use super::accept_type;

    #[test]
    fn accept_picks_the_first_listed_json_type() {
        assert_eq!(accept_type(""), "application/json");
        assert_eq!(accept_type("application/jsonlines"), "application/jsonlines");
        assert_eq!(
            accept_type("application/jsonlines, application/json"),
            "application/jsonlines"
        );
        assert_eq!(
            accept_type("application/json, application/jsonlines"),
            "application/json"
        );
        assert_eq!(accept_type("*/*"), "application/json");
    }
}
