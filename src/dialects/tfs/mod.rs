//! TensorFlow Serving's REST API: `/v1/models/...` predict, classify, regress,
//! status and metadata, with TF Serving's routes matched the way it matches them.

use actix_web::http::Method;
use actix_web::{web, HttpRequest, HttpResponse};

use crate::call::http::{decode_segment as decode, read_body, Inference, Outcome};
use crate::error::ApiError;
use crate::server::ServerState;
use crate::service::VersionSelector;
use crate::signature::{CLASSIFY_METHOD, REGRESS_METHOD};
use crate::tfs::json as tfs_json;
use crate::tfs::TfsError;

pub mod vertex;

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

/// A model or label segment: TF Serving's `[^/:]+`.
fn name_segment(segment: &str) -> bool {
    !segment.is_empty() && !segment.contains(':')
}

/// What follows the model in a path: a version or label, then (GETs only)
/// `/metadata`, as `(?:/versions/(\d+)|/labels/([^/:]+))?(?:/metadata)?`.
#[derive(Debug, PartialEq)]
enum Tail<'a> {
    Latest,
    Version(&'a str),
    Label(&'a str),
}

fn tail<'a>(segments: &[&'a str], metadata_allowed: bool) -> Option<(Tail<'a>, bool)> {
    // The pattern's groups are greedy: a label named "metadata" is a label.
    if let Some(tail) = version_or_label(segments) {
        return Some((tail, false));
    }
    match segments.split_last() {
        Some((last, rest)) if metadata_allowed && last.eq_ignore_ascii_case("metadata") => {
            Some((version_or_label(rest)?, true))
        }
        _ => None,
    }
}

fn version_or_label<'a>(segments: &[&'a str]) -> Option<Tail<'a>> {
    match segments {
        [] => Some(Tail::Latest),
        [key, version] if key.eq_ignore_ascii_case("versions") => {
            (!version.is_empty() && version.bytes().all(|b| b.is_ascii_digit())).then_some(Tail::Version(version))
        }
        [key, label] if key.eq_ignore_ascii_case("labels") && name_segment(label) => Some(Tail::Label(label)),
        _ => None,
    }
}

/// `path` without a leading `prefix`, compared ignoring ASCII case.
fn strip_prefix_ignore_case<'a>(path: &'a str, prefix: &str) -> Option<&'a str> {
    let head = path.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix).then(|| &path[prefix.len()..])
}

/// Parses a `/v1/...` request line into a route, with TF Serving's errors.
/// The grammar is TF Serving's route patterns (case-insensitive), read
/// segment by segment rather than through a regex on every request.
// Kept whole: TF Serving's route grammar, read top to bottom one segment at a time.
pub fn parse_route(method: &Method, path: &str) -> Result<Route, ApiError> {
    let malformed = || -> ApiError {
        TfsError::MalformedRequest {
            method: method.to_string(),
            path: path.to_string(),
        }
        .into()
    };
    let selector = |tail: Tail<'_>| -> Result<VersionSelector, ApiError> {
        match tail {
            Tail::Version(v) => v.parse().map(VersionSelector::Specific).map_err(|_| malformed()),
            Tail::Label(label) => Ok(VersionSelector::Label(decode(label))),
            Tail::Latest => Ok(VersionSelector::Latest),
        }
    };
    let rest = strip_prefix_ignore_case(path, "/v1/models").ok_or_else(malformed)?;
    if method == Method::POST {
        // `/{model}[/versions/N | /labels/L]:{verb}`; verbs hold no ':'.
        let (target, verb) = rest.rsplit_once(':').ok_or_else(malformed)?;
        let verb = [
            ("predict", Verb::Predict),
            ("classify", Verb::Classify),
            ("regress", Verb::Regress),
        ]
        .into_iter()
        .find_map(|(name, v)| verb.eq_ignore_ascii_case(name).then_some(v))
        .ok_or_else(malformed)?;
        // At most `model/versions/N`: a longer path is malformed, and no
        // allocation is needed to find that out.
        let mut parts = target.strip_prefix('/').ok_or_else(malformed)?.split('/');
        let mut segments = [""; 3];
        let mut count = 0;
        for part in parts.by_ref().take(3) {
            segments[count] = part;
            count += 1;
        }
        if parts.next().is_some() {
            return Err(malformed());
        }
        let (model, rest) = segments[..count].split_first().ok_or_else(malformed)?;
        let (tail, _) = tail(rest, false)
            .filter(|_| name_segment(model))
            .ok_or_else(malformed)?;
        return Ok(Route::Infer {
            model: decode(model),
            selector: selector(tail)?,
            verb,
        });
    }
    if method == Method::GET {
        let segments: Vec<&str> = match rest {
            "" => Vec::new(),
            _ => rest.strip_prefix('/').ok_or_else(malformed)?.split('/').collect(),
        };
        // As the pattern's optional model group: taken when the rest then
        // matches, else left out (and the request has no model name).
        let with_model = segments
            .split_first()
            .filter(|(model, _)| name_segment(model))
            .and_then(|(model, rest)| Some((Some(*model), tail(rest, true)?)));
        let (model, (tail, metadata)) = match with_model {
            Some(found) => found,
            None => (None, tail(&segments, true).ok_or_else(malformed)?),
        };
        let Some(model) = model else {
            return Err(TfsError::MissingModelName.into());
        };
        let (model, selector) = (decode(model), selector(tail)?);
        return Ok(if metadata {
            Route::Metadata { model, selector }
        } else {
            Route::Status { model, selector }
        });
    }
    Err(malformed())
}

/// TF Serving's inference calls (every POST under `/v1/models`), registered
/// first: the busiest route is found with one prefix comparison rather than
/// after every other route has been tried. No other dialect takes a POST there.
pub fn configure_inference(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::scope("/v1/models")
            // A plain check: actix's method guards record the methods they
            // tried in the request's extensions, a map allocated per request.
            .guard(actix_web::guard::fn_guard(|ctx| ctx.head().method == Method::POST))
            .default_service(web::to(route)),
    );
}

/// Everything under `/v1` (health answers first, registered earlier).
pub fn configure(cfg: &mut web::ServiceConfig) {
    // A static prefix: matched without a pattern, then parsed by `parse_route`.
    cfg.service(web::scope("/v1").default_service(web::to(route)));
}

/// Whether a path belongs to TF Serving's API whatever its case (`/V1/Models/...`).
pub fn claims(path: &str) -> bool {
    path.get(..4).is_some_and(|p| p.eq_ignore_ascii_case("/v1/")) || path.eq_ignore_ascii_case("/v1")
}

pub async fn route(req: HttpRequest, payload: web::Payload, state: web::Data<ServerState>) -> HttpResponse {
    let result = handle(&req, payload, &state).await;
    crate::call::http::respond(&req, result)
}

pub async fn handle(req: &HttpRequest, payload: web::Payload, state: &ServerState) -> Result<HttpResponse, ApiError> {
    let service = &state.service;
    match parse_route(req.method(), req.path())? {
        Route::Infer { model, selector, verb } => {
            let mut inference = Inference::begin(req);
            let trace = &mut inference.trace;
            let result = async {
                let body = read_body(req, payload, state).await?;
                infer(state, &model, &selector, &verb, &body, trace).await
            }
            .await;
            let outcome = Outcome {
                result,
                content_type: None,
                model: &model,
                api: verb.api(),
            };
            Ok(inference.conclude(req, outcome).into_response())
        }
        Route::Status { model, selector } => pretty(tfs_json::model_status(service, &model, &selector)?),
        Route::Metadata { model, selector } => pretty(tfs_json::model_metadata(service, &model, &selector)?),
    }
}

/// An inference call on its whole body, whichever side of the HTTP
/// transport read it (actix-web's route or the front, `crate::http::front`).
pub async fn infer(
    state: &ServerState,
    model: &str,
    selector: &VersionSelector,
    verb: &Verb,
    body: &bytes::Bytes,
    trace: &mut crate::service::Trace,
) -> Result<Vec<u8>, ApiError> {
    let service = &state.service;
    crate::call::http::keep_body(state, trace, body);
    match verb {
        Verb::Predict => tfs_json::predict(service, model, selector, body, trace).await,
        Verb::Classify => tfs_json::classify_or_regress(service, model, selector, body, CLASSIFY_METHOD, trace).await,
        Verb::Regress => tfs_json::classify_or_regress(service, model, selector, body, REGRESS_METHOD, trace).await,
    }
}

impl Verb {
    pub fn api(&self) -> &'static str {
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
    Ok(crate::call::http::json_response(body))
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
        // The pattern's corners: greedy groups, an optional model, case.
        assert_eq!(
            get("/v1/models/m/labels/metadata").unwrap(),
            Route::Status {
                model: "m".into(),
                selector: VersionSelector::Label("metadata".into())
            }
        );
        assert_eq!(
            get("/V1/MODELS/metadata").unwrap(),
            Route::Status {
                model: "metadata".into(),
                selector: VersionSelector::Latest
            }
        );
        assert_eq!(
            get("/v1/models/m/LABELS/x/Metadata").unwrap(),
            Route::Metadata {
                model: "m".into(),
                selector: VersionSelector::Label("x".into())
            }
        );
        for missing in ["/v1/models/versions/3", "/v1/models/labels/x/metadata"] {
            assert!(
                get(missing).unwrap_err().to_string().contains("Missing model name"),
                "{missing}"
            );
        }
        for bad in [
            "/v1/models/",
            "/v1/models/m/",
            "/v1/modelsx",
            "/v1/models/m:x",
            "/v1/models/m/versions/metadata",
            "/v1/models/m/versions/99999999999999999999",
            "/v1",
        ] {
            assert!(
                get(bad).unwrap_err().to_string().starts_with("Malformed request"),
                "{bad}"
            );
        }
        for bad in [
            "/v1/models/:predict",
            "/v1/models/a:b:predict",
            "/v1/models/m/labels/:predict",
            "/v1/models/m/x/y:predict",
        ] {
            assert!(
                post(bad).unwrap_err().to_string().starts_with("Malformed request"),
                "{bad}"
            );
        }
    }
}
