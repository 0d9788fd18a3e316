//! The HTTP middleware: request ids, contained panics, access lines and
//! closing connections while draining (the outermost layer), then auth and
//! admission (inside CORS). The checks themselves are the core's (`crate::server`).

use std::time::Instant;

use actix_web::body::{BodySize, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::http::ConnectionType;
use actix_web::middleware::Next;
use actix_web::{web, HttpRequest};
use futures_util::FutureExt;

use crate::call::http::RequestScope;
use crate::error::{error_response, ApiError};
use crate::server::access_log::{self, Served};
use crate::server::request_id::{RequestId, HEADER};

/// The request id's header, as actix names it.
pub const REQUEST_ID: HeaderName = HeaderName::from_static(HEADER);
use crate::server::{BasicAuth, ServerState};

/// The outermost middleware (`middleware::from_fn`), the one place that
/// wraps every request: gives it its id and the response the header; turns a
/// panic while handling it into its 500 ([`super::panics`]); and while the
/// server drains, asks the client to close the connection ([`crate::server::drain`]).
/// One layer rather than three: each `from_fn` layer costs a boxed future.
pub async fn assign(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let id = RequestId::from_header(req.headers().get(HEADER).and_then(|v| v.to_str().ok()));
    let state = req.app_data::<web::Data<ServerState>>();
    // Kept for the log line should the request panic (the request itself is
    // consumed by routing); both are cheap reference-counted clones.
    let (method, uri) = (req.method().clone(), req.uri().clone());
    let access = state.is_some_and(|s| s.access_log.sample()).then(|| {
        let bytes_in = req
            .headers()
            .get(actix_web::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse().ok());
        (Instant::now(), bytes_in, req.peer_addr())
    });
    let scope = RequestScope::new(id.clone(), access.is_some());
    let handled = std::panic::AssertUnwindSafe(scope.around(next.call(req)));
    let mut response = match handled.catch_unwind().await {
        Ok(result) => result?,
        Err(panic) => return Err(super::panics::contained(&id, &method, &uri, panic.as_ref())),
    };
    if let Some((started, bytes_in, client)) = access {
        let bytes_out = match response.response().body().size() {
            BodySize::Sized(n) => Some(n),
            BodySize::None => Some(0),
            BodySize::Stream => None,
        };
        let served = response.response().extensions().get::<Served>().cloned();
        access_log::write(&access_log::Line {
            protocol: "rest",
            request_id: &id.0,
            method: method.as_str(),
            path: uri.path(),
            status: response.status().as_u16(),
            grpc_code: None,
            named_model: None,
            bytes_in,
            bytes_out,
            client,
            total: started.elapsed(),
            served: served.as_ref(),
        });
    }
    if let Ok(value) = HeaderValue::from_str(&id.0) {
        response.headers_mut().insert(REQUEST_ID, value);
    }
    // The state is read through the response's request: a clone of its
    // `Arc` would touch a counter every worker thread shares.
    let draining = response
        .request()
        .app_data::<web::Data<ServerState>>()
        .is_some_and(|s| s.drain.is_draining());
    if draining {
        close_after(&mut response);
    }
    Ok(response)
}

/// Marks a response to close its connection once sent (while draining).
pub fn close_after<B>(response: &mut ServiceResponse<B>) {
    response
        .response_mut()
        .head_mut()
        .set_connection_type(ConnectionType::Close);
}

/// Middleware (`middleware::from_fn`), the gate every request passes inside
/// CORS (so browsers' preflight requests, which carry no credentials, are
/// answered): with `--enable_auth`, every route but liveness needs the
/// credentials; probes, metrics and pages (GET) always answer, while work
/// (POST) is bounded by `--max_in_flight_requests`. One layer for both:
/// each `from_fn` layer costs a boxed future per request.
pub async fn gate(
    req: actix_web::dev::ServiceRequest,
    next: actix_web::middleware::Next<impl actix_web::body::MessageBody + 'static>,
) -> Result<actix_web::dev::ServiceResponse<impl actix_web::body::MessageBody>, actix_web::Error> {
    // Cloned: the admission outlives the request, which routing consumes.
    let Some(state) = req.app_data::<web::Data<ServerState>>().cloned() else {
        return next
            .call(req)
            .await
            .map(actix_web::dev::ServiceResponse::map_into_left_body);
    };
    let denied = state
        .auth
        .as_ref()
        .is_some_and(|auth| !is_liveness(req.path()) && !allows(auth, req.request()));
    let admitted = match denied {
        true => Err(ApiError::Unauthorized),
        false if req.method() == actix_web::http::Method::POST => state.in_flight.admit().map(Some),
        false => Ok(None),
    };
    let admitted = match admitted {
        Ok(admitted) => admitted,
        Err(error) => {
            let response = error_response(error.status(), &error.to_string());
            return Ok(req.into_response(response).map_into_right_body());
        }
    };
    let response = next.call(req).await;
    drop(admitted);
    response.map(actix_web::dev::ServiceResponse::map_into_left_body)
}

/// Liveness stays open, so an orchestrator can probe without credentials.
fn is_liveness(path: &str) -> bool {
    matches!(path, "/v1/health/live" | "/v2/health/live" | "/health")
}

fn allows(auth: &BasicAuth, req: &HttpRequest) -> bool {
    let header = req
        .headers()
        .get(actix_web::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    auth.allows_header(header)
}
