//! The HTTP transport: one port, every dialect. It binds the listener
//! (`server`), wraps requests in the middleware (`middleware`), and composes
//! the route table: tfserve's own routes (health, metrics, management API,
//! dashboard) and one line per dialect.

mod dashboard;
mod front;
#[doc(hidden)]
pub use front::{FrontReader, FrontReading};
pub mod middleware;
pub mod panics;
mod routes;
mod server;

use actix_web::{web, HttpRequest, HttpResponse};

pub use server::{serve, stop};

use crate::error::{error_response, ApiError};
use crate::server::ServerState;

/// The route table: TF Serving's inference calls, the management API and
/// pages, then each dialect's routes. Order matters where paths overlap (health and `gen_json` under
/// `/v1/`): the first route whose path and method match answers.
pub fn configure(cfg: &mut web::ServiceConfig) {
    crate::dialects::tfs::configure_inference(cfg);
    routes::configure(cfg);
    // Two dialects share `/`: the dashboard's page (and KServe v1's liveness)
    // and Simple TensorFlow Serving's predict.
    cfg.service(
        crate::call::http::resource("/", "GET, POST")
            .route(web::get().to(dashboard::root))
            .route(web::post().to(crate::dialects::stfs::routes::infer_route)),
    );
    dashboard::configure(cfg);
    crate::dialects::stfs::configure(cfg);
    crate::dialects::sagemaker::configure(cfg);
    crate::dialects::tfs::configure(cfg);
    crate::dialects::kserve::rest::configure(cfg);
    cfg.default_service(web::to(fallback));
}

/// TF Serving's routes are case-insensitive (`/V1/Models/...`); anything
/// else unmatched is a JSON 404.
async fn fallback(req: HttpRequest, payload: web::Payload, state: web::Data<ServerState>) -> HttpResponse {
    if crate::dialects::tfs::claims(req.path()) {
        return crate::dialects::tfs::route(req, payload, state).await;
    }
    if req.method() == actix_web::http::Method::GET && state.metrics_path.as_deref() == Some(req.path()) {
        return routes::metrics(state).await;
    }
    let error = ApiError::RouteNotFound {
        method: req.method().to_string(),
        path: req.path().to_string(),
    };
    error_response(error.status(), &error.to_string())
}

#[cfg(test)]
mod tests;
