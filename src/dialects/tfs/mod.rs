//! TensorFlow Serving's REST API: `/v1/models/...` predict, classify, regress,
//! status and metadata, with TF Serving's routes matched the way it matches them.

pub mod api;

use std::sync::OnceLock;
use std::time::Instant;

use actix_web::http::Method;
use actix_web::{web, HttpRequest, HttpResponse};
use percent_encoding::percent_decode_str;
use regex::Regex;

use crate::error::ApiError;
use crate::http::{answer, read_body, AppState};
use crate::registry::VersionSelector;
use crate::signature::{CLASSIFY_METHOD, REGRESS_METHOD};

#[derive(Debug, PartialEq)]
pub enum Verb {
    Predict,
    Classify,
    Regress,
}

#[derive(Debug, PartialEq)]
pub enum Route {
    Infer {
        model: String,
        selector: VersionSelector,
        verb: Verb,
    },
    Status {
        model: String,
        selector: VersionSelector,
    },
    Metadata {
        model: String,
        selector: VersionSelector,
    },
}

fn post_pattern() -> &'static Regex {
    static PATTERN: OnceLock<Regex> = OnceLock::new();
    PATTERN.get_or_init(|| {
        Regex::new(r"(?i)^/v1/models/([^/:]+)(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?:(classify|regress|predict)$")
            .expect("static regex")
    })
}

fn get_pattern() -> &'static Regex {
    static PATTERN: OnceLock<Regex> = OnceLock::new();
    PATTERN.get_or_init(|| {
        Regex::new(r"(?i)^/v1/models(?:/([^/:]+))?(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?(?:/(metadata))?$")
            .expect("static regex")
    })
}

fn decode(segment: &str) -> String {
    percent_decode_str(segment).decode_utf8_lossy().into_owned()
}

/// Parses a `/v1/...` request line into a route, with TF Serving's errors.
pub fn parse_route(method: &Method, path: &str) -> Result<Route, ApiError> {
    let malformed = || ApiError::BadRequest(format!("Malformed request: {method} {path}"));
    let selector = |caps: &regex::Captures<'_>| -> Result<VersionSelector, ApiError> {
        match (caps.get(2), caps.get(3)) {
            (Some(v), _) => v
                .as_str()
                .parse()
                .map(VersionSelector::Specific)
                .map_err(|_| malformed()),
            (None, Some(label)) => Ok(VersionSelector::Label(decode(label.as_str()))),
            (None, None) => Ok(VersionSelector::Latest),
        }
    };
    if method == Method::POST {
        let caps = post_pattern().captures(path).ok_or_else(malformed)?;
        let verb = match caps[4].to_ascii_lowercase().as_str() {
            "classify" => Verb::Classify,
            "regress" => Verb::Regress,
            _ => Verb::Predict,
        };
        return Ok(Route::Infer {
            model: decode(&caps[1]),
            selector: selector(&caps)?,
            verb,
        });
    }
    if method == Method::GET {
        let caps = get_pattern().captures(path).ok_or_else(malformed)?;
        let Some(model) = caps.get(1) else {
            return Err(ApiError::BadRequest("Missing model name in request.".into()));
        };
        let (model, selector) = (decode(model.as_str()), selector(&caps)?);
        return Ok(if caps.get(4).is_some() {
            Route::Metadata { model, selector }
        } else {
            Route::Status { model, selector }
        });
    }
    Err(malformed())
}

/// Everything under `/v1` (health answers first, registered earlier).
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/v1", web::route().to(route))
        .route("/v1/{tail:.*}", web::route().to(route));
}

/// Whether a path belongs to TF Serving's API whatever its case (`/V1/Models/...`).
pub fn claims(path: &str) -> bool {
    path.get(..4).is_some_and(|p| p.eq_ignore_ascii_case("/v1/")) || path.eq_ignore_ascii_case("/v1")
}

pub async fn route(req: HttpRequest, payload: web::Payload, state: web::Data<AppState>) -> HttpResponse {
    let result = handle(&req, payload, &state).await;
    crate::http::respond(&req, result)
}

pub async fn handle(req: &HttpRequest, payload: web::Payload, state: &AppState) -> Result<HttpResponse, ApiError> {
    let service = &state.service;
    match parse_route(req.method(), req.path())? {
        Route::Infer { model, selector, verb } => {
            let started = Instant::now();
            let mut trace = crate::http::trace(req);
            let result = async {
                let body = read_body(req, payload, state).await?;
                match verb {
                    Verb::Predict => api::predict(service, &model, &selector, &body, &mut trace).await,
                    Verb::Classify => {
                        api::classify_or_regress(service, &model, &selector, &body, CLASSIFY_METHOD, &mut trace).await
                    }
                    Verb::Regress => {
                        api::classify_or_regress(service, &model, &selector, &body, REGRESS_METHOD, &mut trace).await
                    }
                }
            }
            .await;
            Ok(answer(result, &model, verb.api(), &trace, started))
        }
        Route::Status { model, selector } => pretty(api::model_status(service, &model, &selector)?),
        Route::Metadata { model, selector } => pretty(api::model_metadata(service, &model, &selector)?),
    }
}

impl Verb {
    fn api(&self) -> &'static str {
        match self {
            Verb::Predict => "predict",
            Verb::Classify => "classify",
            Verb::Regress => "regress",
        }
    }
}

/// Status and metadata are printed with whitespace, as TF Serving prints them.
fn pretty(value: serde_json::Value) -> Result<HttpResponse, ApiError> {
    let body = serde_json::to_vec_pretty(&value).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    Ok(crate::http::json_response(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_match_tf_serving() {
        let post = |p: &str| parse_route(&Method::POST, p);
        let get = |p: &str| parse_route(&Method::GET, p);
        assert_eq!(
            post("/v1/models/half:predict").unwrap(),
            Route::Infer {
                model: "half".into(),
                selector: VersionSelector::Latest,
                verb: Verb::Predict
            }
        );
        assert_eq!(
            post("/V1/Models/m/versions/12:REGRESS").unwrap(),
            Route::Infer {
                model: "m".into(),
                selector: VersionSelector::Specific(12),
                verb: Verb::Regress
            }
        );
        assert_eq!(
            post("/v1/models/m%20x/labels/stable:classify").unwrap(),
            Route::Infer {
                model: "m x".into(),
                selector: VersionSelector::Label("stable".into()),
                verb: Verb::Classify
            }
        );
        assert_eq!(
            get("/v1/models/m/versions/3").unwrap(),
            Route::Status {
                model: "m".into(),
                selector: VersionSelector::Specific(3)
            }
        );
        assert_eq!(
            get("/v1/models/m/metadata").unwrap(),
            Route::Metadata {
                model: "m".into(),
                selector: VersionSelector::Latest
            }
        );
        assert!(get("/v1/models")
            .unwrap_err()
            .to_string()
            .contains("Missing model name"));
        for bad in [
            "/v1/models/m/versions/x:predict",
            "/v1/models/m:explain",
            "/v1/models/m/metadata",
        ] {
            assert!(
                post(bad).unwrap_err().to_string().starts_with("Malformed request"),
                "{bad}"
            );
        }
        assert!(parse_route(&Method::PUT, "/v1/models/m").is_err());
    }
}
