//! The web dashboard: one self-contained page (no external assets) and the
//! JSON it polls for models, versions, signatures and live metrics.

use actix_web::{web, HttpResponse};
use serde_json::{json, Value};

use crate::call::http::{json_response, resource};
use crate::metrics::METRICS;
use crate::server::ServerState;
use crate::service::VersionSelector;
use crate::signature::TensorSpec;

const PAGE: &str = include_str!("dashboard.html");

/// The page at `/dashboard` (and `GET /`, in the route table's `/`), and the
/// state it polls.
pub fn configure(cfg: &mut web::ServiceConfig) {
    for path in ["/dashboard", "/dashboard/"] {
        cfg.service(resource(path, "GET").route(web::get().to(page)));
    }
    cfg.service(resource("/dashboard/state", "GET").route(web::get().to(state_route)));
}

async fn state_route(state: web::Data<ServerState>) -> HttpResponse {
    self::state(&state)
}

/// `GET /`: the page for a browser; for a client that does not ask for HTML,
/// KServe's liveness answer, which its v1 client reads from the root.
pub(super) async fn root(req: actix_web::HttpRequest) -> HttpResponse {
    let wants_html = req
        .headers()
        .get(actix_web::http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| accept.contains("text/html"));
    if wants_html {
        page().await
    } else {
        json_response(json!({"status": "alive"}).to_string().into_bytes())
    }
}

pub async fn page() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .insert_header(("Cache-Control", "no-cache"))
        .body(PAGE)
}

/// A version's mode: its trial's progress while it serves FP32, then the decision.
fn mode_state(status: &crate::modes::ModeStatus) -> Value {
    use crate::modes::ModeStatus;
    let decision = match status {
        ModeStatus::Waiting => {
            return json!({"state": "waiting", "chosen": "float32", "progress": "waiting for the trial thread"})
        }
        ModeStatus::Trial(progress) => return json!({"state": "trial", "chosen": "float32", "progress": progress}),
        ModeStatus::Decided(decision) => decision,
    };
    json!({"state": "decided", "chosen": decision.chosen.name(), "speedup": decision.speedup,
           "reason": decision.reason, "reused": decision.reused.is_some(), "probes": decision.probes,
           "tried": decision.tried.iter().map(|t| json!({"mode": t.mode.name(), "speedup": t.speedup,
               "lower": t.judged.map(|j| j.lower), "upper": t.judged.map(|j| j.upper),
               "rounds": t.judged.map(|j| j.rounds), "verdict": t.verdict})).collect::<Vec<_>>()})
}

/// `GET /dashboard/state`: every model with its versions' states, the
/// signatures of the loaded ones, the mode a trial chose for them and whether invocations go through its
/// `inference.py`, and the metric totals.
pub fn state(state: &ServerState) -> HttpResponse {
    let service = &state.service;
    let models: Vec<Value> = service
        .models()
        .into_iter()
        .map(|model| {
            let versions: Vec<Value> = model
                .versions
                .iter()
                .rev()
                .map(|status| {
                    let servable = service.servable(&model.name, &VersionSelector::Specific(status.version));
                    let mode = servable
                        .as_ref()
                        .ok()
                        .and_then(|s| s.mode.as_ref())
                        .map(|m| mode_state(&m.status()));
                    let signatures: Vec<Value> = servable
                        .map(|servable| {
                            servable
                                .runtime
                                .signatures()
                                .iter()
                                .map(|s| {
                                    // What the load audit found this signature reaching, when it read the model.
                                    let reaches = servable
                                        .audit
                                        .as_ref()
                                        .and_then(|a| a.signatures.iter().find(|a| a.signature == s.name))
                                        .map(|a| crate::audit::reach_list(&a.reaches));
                                    json!({"name": s.name, "method": s.method_name, "reaches": reaches,
                                           "inputs": tensors(&s.inputs), "outputs": tensors(&s.outputs)})
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    json!({"version": status.version, "state": status.state.as_str(),
                           "error": status.error, "signatures": signatures, "mode": mode})
                })
                .collect();
            let handlers = state.service.handlers().get(&model.name).is_some();
            json!({"name": model.name, "versions": versions, "handlers": handlers})
        })
        .collect();
    let body = json!({"models": models, "metrics": METRICS.summary()});
    json_response(body.to_string().into_bytes())
}

fn tensors(specs: &[TensorSpec]) -> Vec<Value> {
    specs
        .iter()
        .map(|t| json!({"key": t.key, "dtype": t.dtype.proto_name(), "shape": t.shape}))
        .collect()
}
