//! The HTTP middleware: each request's [`Lifecycle`] (the outermost layer),
//! then auth and admission (inside CORS). The checks themselves are the
//! core's (`crate::server`).

use actix_web::body::{BodySize, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::http::ConnectionType;
use actix_web::middleware::Next;
use actix_web::{web, HttpRequest};

use crate::call::http::RequestScope;
use crate::error::{error_response, ApiError};
use crate::server::access_log::Served;
use crate::server::lifecycle::{self, closes_connection, Ending, Lifecycle};
use crate::server::request_id::HEADER;

/// The request id's header, as actix names it.
pub const REQUEST_ID: HeaderName = HeaderName::from_static(HEADER);
use crate::server::{BasicAuth, ServerState};

/// The outermost middleware (`middleware::from_fn`), the one place that
/// wraps every request in its [`Lifecycle`]: its id and the response's
/// header, a panic while handling it turned into its 500 ([`super::panics`]),
/// its access line, and while the server drains, asking the client to close
/// the connection. One layer rather than three: each `from_fn` layer costs a
/// boxed future.
pub async fn assign(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let state = req.app_data::<web::Data<ServerState>>();
    let lifecycle = Lifecycle::begin(
        state.map(|s| &s.access_log),
        req.headers().get(HEADER).and_then(|v| v.to_str().ok()),
        || {
            let bytes_in = req
                .headers()
                .get(actix_web::http::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok()?.parse().ok());
            (bytes_in, req.peer_addr())
        },
    );
    // Kept for the log lines (the request itself is consumed by routing);
    // both are cheap reference-counted clones.
    let (method, uri) = (req.method().clone(), req.uri().clone());
    let scope = RequestScope::new(lifecycle.id.clone(), lifecycle.access_logged());
    let handled = lifecycle.contain(method.as_str(), || uri.path(), scope.around(next.call(req)));
    let mut response = match handled.await {
        Ok(result) => result?,
        Err(panicked) => return Err(super::panics::answer(panicked)),
    };
    if lifecycle.access_logged() {
        let bytes_out = body_size(response.response().body());
        let served = response.response().extensions().get::<Served>().cloned();
        lifecycle.end(Ending {
            protocol: "rest",
            method: method.as_str(),
            path: uri.path(),
            status: response.status().as_u16(),
            grpc_code: None,
            named_model: None,
            bytes_out,
            served: served.as_ref(),
        });
    }
    if let Ok(value) = HeaderValue::from_str(&lifecycle.id.0) {
        response.headers_mut().insert(REQUEST_ID, value);
    }
    // The state is read through the response's request: a clone of its
    // `Arc` would touch a counter every worker thread shares.
    let closes = response
        .request()
        .app_data::<web::Data<ServerState>>()
        .is_some_and(|s| closes_connection(s));
    if closes {
        close_after(&mut response);
    }
    Ok(response)
}

/// A response body's size for the access line: `None` when streamed.
pub fn body_size(body: &impl MessageBody) -> Option<u64> {
    match body.size() {
        BodySize::Sized(n) => Some(n),
        BodySize::None => Some(0),
        BodySize::Stream => None,
    }
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
        false if req.method() == actix_web::http::Method::POST => lifecycle::admit(&state).map(Some),
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
