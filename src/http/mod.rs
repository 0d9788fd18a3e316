//! The HTTP front end: one port, every dialect. It composes the dialects'
//! route tables and owns what they share: middleware (request ids, auth, the
//! in-flight bound), body reading, answers and their metrics.

mod dashboard;
pub mod drain;
pub mod manage;
pub mod panics;
pub mod request_id;

use actix_web::dev::Decompress;
use std::any::Any;
use std::mem::ManuallyDrop;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::time::Instant;

use actix_web::dev::Extensions;

use actix_web::http::header::{HeaderName, HeaderValue, CONTENT_LENGTH};
use actix_web::http::StatusCode;
use actix_web::web::{self, Bytes, BytesMut};
use actix_web::{HttpRequest, HttpResponse};
use futures_util::StreamExt;

use crate::error::{error_response, ApiError};
use crate::metrics::METRICS;
use crate::service::{Service, Trace};

pub struct AppState {
    pub service: Service,
    pub max_request_bytes: usize,
    /// The bound on POST requests being handled at once.
    pub in_flight: InFlight,
    /// The model config file, for reloads over HTTP.
    pub config_file: Option<std::path::PathBuf>,
    /// Directories models loaded over HTTP must live in.
    pub model_roots: Vec<std::path::PathBuf>,
    /// Most models loaded at once (0: no limit).
    pub max_models: usize,
    /// Basic-auth credentials every route but liveness requires, when set.
    pub auth: Option<BasicAuth>,
    /// Set on SIGTERM: readiness fails and connections close after their response.
    pub drain: drain::Drain,
    /// How long a request body may take to arrive (`--client_body_timeout_ms`).
    pub body_timeout: std::time::Duration,
    /// The bound on request-body bytes held at once (`--max_in_flight_bytes`).
    pub body_budget: ByteBudget,
    /// Another path the metrics answer on (`--monitoring_config_file`).
    pub metrics_path: Option<String>,
}

impl AppState {
    /// Ready for traffic: every model loaded and the server not draining.
    pub fn ready(&self) -> Result<(), String> {
        if self.drain.is_draining() {
            return Err("the server is shutting down".into());
        }
        self.service.registry.ready()
    }
}

/// A counter of requests being handled, refusing past its limit: overload
/// answers 503 at once instead of queueing without bound.
pub struct InFlight {
    count: std::sync::atomic::AtomicUsize,
    limit: usize,
}

/// One admitted request; leaves the count on drop.
pub struct Admitted<'a>(&'a InFlight);

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        self.0.count.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

impl InFlight {
    pub fn new(limit: usize) -> InFlight {
        InFlight {
            count: std::sync::atomic::AtomicUsize::new(0),
            limit,
        }
    }

    /// Requests being handled now.
    pub fn current(&self) -> usize {
        self.count.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn admit(&self) -> Result<Admitted<'_>, ApiError> {
        let before = self.count.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        let admitted = Admitted(self);
        if before >= self.limit {
            return Err(ApiError::Overloaded(self.limit));
        }
        Ok(admitted)
    }
}

/// A bound on the request-body bytes held at once, across every request:
/// past it, new bodies answer 503 before they are read, so many large
/// uploads at once cannot exhaust memory. One body is always admitted when
/// nothing else is held (its own limit is `max_request_bytes`).
pub struct ByteBudget {
    held: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    limit: usize,
}

/// Bytes a request holds of the budget; given back when the request is done.
pub struct BytesHeld {
    held: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    bytes: usize,
    limit: usize,
}

impl ByteBudget {
    pub fn new(limit: usize) -> ByteBudget {
        ByteBudget {
            held: Default::default(),
            limit,
        }
    }

    /// An empty reservation, grown as the body arrives.
    pub fn start(&self) -> BytesHeld {
        BytesHeld {
            held: self.held.clone(),
            bytes: 0,
            limit: self.limit,
        }
    }

    /// Bytes held now by every request.
    pub fn held(&self) -> usize {
        self.held.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl BytesHeld {
    /// Holds `more` bytes, unless that takes the budget past its limit while
    /// other requests hold some of it.
    pub fn grow(&mut self, more: usize) -> Result<(), ApiError> {
        use std::sync::atomic::Ordering;
        let before = self.held.fetch_add(more, Ordering::AcqRel);
        let others = before - self.bytes;
        if others > 0 && before.saturating_add(more) > self.limit {
            self.held.fetch_sub(more, Ordering::AcqRel);
            return Err(ApiError::BodiesOverBudget(self.limit));
        }
        self.bytes += more;
        Ok(())
    }
}

impl Drop for BytesHeld {
    fn drop(&mut self) {
        self.held.fetch_sub(self.bytes, std::sync::atomic::Ordering::AcqRel);
    }
}

/// HTTP basic auth: the expected `user:password`, compared in constant time.
pub struct BasicAuth {
    credentials: Vec<u8>,
}

impl BasicAuth {
    pub fn new(user: &str, password: &str) -> BasicAuth {
        BasicAuth {
            credentials: format!("{user}:{password}").into_bytes(),
        }
    }

    fn allows(&self, req: &HttpRequest) -> bool {
        let header = req
            .headers()
            .get(actix_web::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        self.allows_header(header)
    }

    /// Whether an `Authorization` value (HTTP header or gRPC metadata) carries the credentials.
    pub fn allows_header(&self, header: Option<&str>) -> bool {
        use base64::Engine;
        use subtle::ConstantTimeEq;
        let Some((scheme, encoded)) = header.and_then(|h| h.split_once(' ')) else {
            return false;
        };
        if !scheme.eq_ignore_ascii_case("basic") {
            return false;
        }
        match base64::engine::general_purpose::STANDARD.decode(encoded.trim()) {
            Ok(given) => given.ct_eq(&self.credentials).into(),
            Err(_) => false,
        }
    }
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
    let Some(state) = req.app_data::<web::Data<AppState>>().cloned() else {
        return next
            .call(req)
            .await
            .map(actix_web::dev::ServiceResponse::map_into_left_body);
    };
    let denied = state
        .auth
        .as_ref()
        .is_some_and(|auth| !is_liveness(req.path()) && !auth.allows(req.request()));
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

/// A URL path segment, percent-decoded.
pub fn decode_segment(segment: &str) -> String {
    percent_encoding::percent_decode_str(segment)
        .decode_utf8_lossy()
        .into_owned()
}

/// The connection's socket, recorded when it is accepted, so a request can
/// tell whether its client is still there.
#[derive(Clone, Copy)]
pub struct PeerSocket(RawFd);

/// `HttpServer::on_connect` hook.
pub fn on_connect(connection: &dyn Any, extensions: &mut Extensions) {
    type TlsStream = actix_tls::accept::rustls_0_23::TlsStream<actix_web::rt::net::TcpStream>;
    if let Some(stream) = connection.downcast_ref::<actix_web::rt::net::TcpStream>() {
        extensions.insert(PeerSocket(stream.as_raw_fd()));
    } else if let Some(stream) = connection.downcast_ref::<TlsStream>() {
        // Peeking the TCP socket under TLS still tells a close from bytes waiting.
        extensions.insert(PeerSocket(stream.get_ref().0.as_raw_fd()));
    }
}

impl PeerSocket {
    /// Whether the client closed or reset the connection. Called only while
    /// the request's handler runs, so the connection (and the descriptor) is open.
    pub fn closed(self) -> bool {
        // SAFETY: the descriptor stays owned by the connection; ManuallyDrop
        // keeps this borrowed view from closing it. The socket is non-blocking.
        let stream = ManuallyDrop::new(unsafe { std::net::TcpStream::from_raw_fd(self.0) });
        match stream.peek(&mut [0u8; 1]) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
            ),
        }
    }
}

/// The id the request-id middleware gave the request.
pub fn request_id(req: &HttpRequest) -> Option<request_id::RequestId> {
    use actix_web::HttpMessage;
    req.extensions().get::<request_id::RequestId>().cloned()
}

/// A fresh trace for an inference request: its id and a way to tell its client left.
pub fn trace(req: &HttpRequest) -> Trace {
    Trace {
        client_gone: client_gone(req),
        request_id: request_id(req).map(|id| id.0),
        ..Trace::default()
    }
}

/// A check for the request's client having gone, when the connection is known.
pub fn client_gone(req: &HttpRequest) -> Option<Box<dyn Fn() -> bool + Send + Sync>> {
    let peer = req.conn_data::<PeerSocket>().copied()?;
    Some(Box::new(move || peer.closed()))
}

/// CORS for `--enable_cors`: any origin, method and header, as Simple
/// TensorFlow Serving's flask_cors default; no credentials, so other sites
/// cannot ride on a browser's cached basic-auth login.
pub fn cors() -> actix_cors::Cors {
    actix_cors::Cors::default()
        .allow_any_origin()
        .allow_any_method()
        .allow_any_header()
        .expose_any_header()
        .max_age(3600)
}

/// The route table: the management API and pages, then each dialect's
/// routes. Order matters where paths overlap (health and `gen_json` under
/// `/v1/`): the first route whose path and method match answers.
pub fn configure(cfg: &mut web::ServiceConfig) {
    manage::configure(cfg);
    dashboard::configure(cfg);
    crate::dialects::stfs::configure(cfg);
    crate::dialects::sagemaker::configure(cfg);
    crate::dialects::tfs::configure(cfg);
    crate::dialects::kserve::rest::configure(cfg);
    cfg.default_service(web::to(fallback));
}

/// TF Serving's routes are case-insensitive (`/V1/Models/...`); anything
/// else unmatched is a JSON 404.
async fn fallback(req: HttpRequest, payload: web::Payload, state: web::Data<AppState>) -> HttpResponse {
    if crate::dialects::tfs::claims(req.path()) {
        return crate::dialects::tfs::route(req, payload, state).await;
    }
    if req.method() == actix_web::http::Method::GET && state.metrics_path.as_deref() == Some(req.path()) {
        return manage::metrics(state).await;
    }
    let error = ApiError::NotFound(format!("Not found: {} {}", req.method(), req.path()));
    error_response(error.status(), &error.to_string())
}

/// A handler's result as a response; server-side failures are logged with the request id.
pub fn respond(req: &HttpRequest, result: Result<HttpResponse, ApiError>) -> HttpResponse {
    result.unwrap_or_else(|err| {
        if err.status().is_server_error() {
            let id = request_id(req).map(|id| id.0).unwrap_or_default();
            log::warn!("[{id}] {} {}: {err}", req.method(), req.path());
        }
        error_response(err.status(), &err.to_string())
    })
}

/// Reads the whole body (gzip already undone by actix), refusing bodies over
/// `max_request_bytes` and bodies that take longer than `--client_body_timeout_ms`
/// to arrive (a client trickling its body would hold an in-flight slot).
pub async fn read_body(req: &HttpRequest, payload: web::Payload, state: &AppState) -> Result<Bytes, ApiError> {
    let limit = state.max_request_bytes;
    let mut held = state.body_budget.start();
    let body = {
        let mut read = std::pin::pin!(read_limited(req, payload, limit, &mut held));
        // A body already in the connection's buffer (most small ones) needs no
        // timer: only one still arriving is raced against the timeout.
        let first =
            std::future::poll_fn(|cx| std::task::Poll::Ready(std::future::Future::poll(read.as_mut(), cx))).await;
        match first {
            std::task::Poll::Ready(body) => body?,
            std::task::Poll::Pending => match tokio::time::timeout(state.body_timeout, read).await {
                Ok(body) => body?,
                Err(_) => return Err(ApiError::BodyTimeout(state.body_timeout.as_millis() as u64)),
            },
        }
    };
    // Held until the request is done (its extensions drop with it).
    actix_web::HttpMessage::extensions_mut(req).insert(held);
    Ok(body)
}

async fn read_limited(
    req: &HttpRequest,
    payload: web::Payload,
    limit: usize,
    held: &mut BytesHeld,
) -> Result<Bytes, ApiError> {
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
    // A declared length is held before reading: a refusal costs no memory.
    held.grow(declared.unwrap_or(0))?;
    // The limit applies to the decoded bytes, so a small gzip body cannot expand past it.
    let mut decoded = Decompress::from_headers(payload.into_inner(), req.headers());
    let mut body = BytesMut::with_capacity(declared.unwrap_or(0).min(limit));
    while let Some(chunk) = decoded.next().await {
        let chunk = chunk.map_err(|e| ApiError::BadRequest(format!("failed to read the request body: {e}")))?;
        if body.len() + chunk.len() > limit {
            return Err(ApiError::PayloadTooLarge { limit, got: None });
        }
        // Decompressed or undeclared bodies hold what they grow to.
        if body.len() + chunk.len() > held.bytes {
            held.grow(body.len() + chunk.len() - held.bytes)?;
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

/// The response to an inference request, with timing headers, recorded in the
/// request metrics.
pub fn answer(
    result: Result<Vec<u8>, ApiError>,
    model: &str,
    api: &str,
    trace: &Trace,
    started: Instant,
) -> HttpResponse {
    let mut response = match result {
        Ok(body) => json_response(body),
        Err(err) => {
            if err.status().is_server_error() {
                let id = trace.request_id.as_deref().unwrap_or_default();
                log::warn!("[{id}] {api} on model {model}: {err}");
            }
            error_response(err.status(), &err.to_string())
        }
    };
    let headers = response.headers_mut();
    if let Some(queue) = trace.queue_time {
        headers.insert(HeaderName::from_static("x-queue-time-ms"), millis_value(queue));
    }
    if let Some(run) = trace.run_time {
        headers.insert(HeaderName::from_static("x-inference-time-ms"), millis_value(run));
    }
    if let Some(rows) = trace.batch_rows {
        let mut digits = itoa::Buffer::new();
        headers.insert(
            HeaderName::from_static("x-batch-size"),
            header_value(digits.format(rows)),
        );
    }
    // Unresolved names are user input: keep them out of metric labels.
    let mut digits = itoa::Buffer::new();
    let (model, version) = match trace.version {
        Some(v) => (trace.model.as_deref().unwrap_or(model), digits.format(v)),
        None => ("", ""),
    };
    let signature = trace.signature.as_deref().unwrap_or("");
    let status = response.status();
    let status = status.as_str();
    log::debug!(
        "[{}] {api} {model} {version} {signature}: {status} in {:.3} ms",
        trace.request_id.as_deref().unwrap_or_default(),
        started.elapsed().as_secs_f64() * 1000.0
    );
    METRICS.record_request(
        &crate::metrics::RequestLabels {
            protocol: "rest",
            model,
            version,
            signature,
            api,
            status,
        },
        started.elapsed().as_secs_f64(),
    );
    response
}

fn header_value(text: &str) -> HeaderValue {
    HeaderValue::from_str(text).unwrap_or_else(|_| HeaderValue::from_static("0"))
}

/// A duration as milliseconds with three decimals (`12.345`), written
/// without float formatting: it goes on every inference response.
fn millis_value(duration: std::time::Duration) -> HeaderValue {
    let micros = u64::try_from(duration.as_micros()).unwrap_or(u64::MAX);
    let mut whole = itoa::Buffer::new();
    let whole = whole.format(micros / 1000).as_bytes();
    let fraction = micros % 1000;
    let mut text = [0u8; 24];
    text[..whole.len()].copy_from_slice(whole);
    let digits = [
        b'.',
        b'0' + (fraction / 100) as u8,
        b'0' + (fraction / 10 % 10) as u8,
        b'0' + (fraction % 10) as u8,
    ];
    text[whole.len()..whole.len() + 4].copy_from_slice(&digits);
    HeaderValue::from_bytes(&text[..whole.len() + 4]).unwrap_or_else(|_| HeaderValue::from_static("0"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_print_as_milliseconds_with_three_decimals() {
        use std::time::Duration;
        assert_eq!(millis_value(Duration::from_micros(12_345)), "12.345");
        assert_eq!(millis_value(Duration::from_nanos(7_999)), "0.007");
        assert_eq!(millis_value(Duration::from_secs(3)), "3000.000");
    }
}
