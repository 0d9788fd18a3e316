//! Vertex AI's custom-container contract over TF Serving's predict: the
//! health route (`AIP_HEALTH_ROUTE`) and the predict route
//! (`AIP_PREDICT_ROUTE`), whose `{"instances" | "inputs", "parameters"}`
//! request runs on the deployed model's one SavedModel and is answered
//! `{"predictions": ...}`, as Vertex's prebuilt TensorFlow images answer it.

use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};

use super::{infer, Verb};
use crate::call::http::{json, read_body, Inference, Outcome};
use crate::error::{error_response, ApiError};
use crate::server::ServerState;
use crate::service::VersionSelector;
use crate::settings::VertexRoutes;

pub fn configure(cfg: &mut web::ServiceConfig, routes: &VertexRoutes) {
    if let Some(path) = &routes.health {
        let get_or_head = actix_web::guard::Any(actix_web::guard::Get()).or(actix_web::guard::Head());
        cfg.route(path, web::route().guard(get_or_head).to(health));
    }
    if let Some(path) = &routes.predict {
        cfg.route(path, web::post().to(predict));
    }
}

async fn health(state: web::Data<ServerState>) -> HttpResponse {
    match state.ready() {
        Ok(()) => json(StatusCode::OK, serde_json::json!({"status": "ready"})),
        Err(reason) => {
            let error = ApiError::NotReady(reason);
            error_response(error.status(), &error.to_string())
        }
    }
}

async fn predict(req: HttpRequest, payload: web::Payload, state: web::Data<ServerState>) -> HttpResponse {
    let model = state.service.default_model().unwrap_or_default();
    let mut inference = Inference::begin(&req);
    let trace = &mut inference.trace;
    let result = async {
        let body = read_body(&req, payload, &state).await?;
        let answer = infer(&state, &model, &VersionSelector::Latest, &Verb::Predict, &body, trace).await?;
        Ok(as_predictions(answer))
    }
    .await;
    let outcome = Outcome {
        result,
        content_type: None,
        model: &model,
        api: "predict",
    };
    inference.conclude(&req, outcome).into_response()
}

/// TF Serving answers a columnar (`"inputs"`) request `{"outputs": ...}`;
/// Vertex's contract is `{"predictions": ...}` for both layouts.
fn as_predictions(mut answer: Vec<u8>) -> Vec<u8> {
    let key = b"\"outputs\"";
    let start = answer.iter().position(|b| !b.is_ascii_whitespace() && *b != b'{');
    let opens_with_brace = answer.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
    if let Some(at) = start.filter(|at| opens_with_brace && answer[*at..].starts_with(key)) {
        answer.splice(at..at + key.len(), b"\"predictions\"".iter().copied());
    }
    answer
}

#[cfg(test)]
mod tests {
    use super::as_predictions;

    #[test]
    fn columnar_answers_are_named_predictions() {
        let renamed = |text: &str| String::from_utf8(as_predictions(text.as_bytes().to_vec())).unwrap();
        assert_eq!(renamed(r#"{"outputs": [1.5]}"#), r#"{"predictions": [1.5]}"#);
        assert_eq!(renamed(r#"{ "outputs":{"y":[1]}}"#), r#"{ "predictions":{"y":[1]}}"#);
        assert_eq!(renamed(r#"{"predictions": [[1]]}"#), r#"{"predictions": [[1]]}"#);
    }
}
