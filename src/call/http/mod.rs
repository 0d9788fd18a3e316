//! What an HTTP dialect's handler needs to answer a request: its trace (id,
//! client-gone check), the body read under the limits, and the answer with
//! its timing headers and metrics, errors in the status table's words.

use std::cell::RefCell;
use std::future::Future;
use std::mem::ManuallyDrop;
use std::os::fd::{FromRawFd, RawFd};

use actix_web::dev::Decompress;
use actix_web::http::header::CONTENT_LENGTH;
use actix_web::http::StatusCode;
use actix_web::web::{self, Bytes, BytesMut};
use actix_web::{HttpRequest, HttpResponse};
use futures_util::StreamExt;
use serde_json::{json, Value};

use crate::error::{error_response, ApiError};
use crate::server::{BytesHeld, RequestId, ServerState};
use crate::service::ModelInfo;
use crate::service::Trace;

mod answer;

pub use answer::{keep_body, Answer, Exchange, Inference, Outcome};

/// A route-table entry for `path` whose routes take the methods `allow`
/// lists (as the `Allow` header writes them, `"GET, HEAD"`): any other
/// method is answered 405 with that header and a JSON error naming both.
pub fn resource(path: &str, allow: &'static str) -> actix_web::Resource {
    web::resource(path).default_service(web::to(move |req: HttpRequest| async move {
        let error = ApiError::MethodNotAllowed {
            method: req.method().to_string(),
            path: req.path().to_string(),
            allow,
        };
        let mut response = error_response(error.status(), &error.to_string());
        response.headers_mut().insert(
            actix_web::http::header::ALLOW,
            actix_web::http::header::HeaderValue::from_static(allow),
        );
        response
    }))
}

/// A URL path segment, percent-decoded.
pub fn decode_segment(segment: &str) -> String {
    // Most names carry no escapes: a copy, without the decoder's pass.
    if !segment.contains('%') {
        return segment.to_owned();
    }
    percent_encoding::percent_decode_str(segment)
        .decode_utf8_lossy()
        .into_owned()
}

/// The connection's socket, recorded when it is accepted, so a request can
/// tell whether its client is still there.
#[derive(Clone, Copy)]
pub struct PeerSocket(RawFd);

impl PeerSocket {
    pub fn new(descriptor: RawFd) -> PeerSocket {
        PeerSocket(descriptor)
    }

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

/// What the outermost middleware knows of the request its handler serves:
/// its id, whether it gets an access line, and the body bytes it holds of the
/// budget (given back when the request is done). A task-local rather than
/// request extensions: those cost a map and a box per value on every request.
pub struct RequestScope {
    pub id: RequestId,
    pub access_logged: bool,
    held: RefCell<Option<BytesHeld>>,
}

tokio::task_local! {
    static REQUEST: RequestScope;
}

impl RequestScope {
    pub fn new(id: RequestId, access_logged: bool) -> RequestScope {
        RequestScope {
            id,
            access_logged,
            held: RefCell::new(None),
        }
    }

    /// Runs `future` (the rest of the request's handling) inside this scope.
    pub fn around<F: Future>(self, future: F) -> impl Future<Output = F::Output> {
        REQUEST.scope(self, future)
    }
}

/// The id the request-id middleware gave the request being handled.
pub fn request_id() -> Option<RequestId> {
    REQUEST.try_with(|scope| scope.id.clone()).ok()
}

/// A fresh trace for an inference request: its id and a way to tell its client left.
pub fn trace(req: &HttpRequest) -> Trace {
    let (request_id, access_logged) = REQUEST
        .try_with(|scope| (Some(scope.id.0.clone()), scope.access_logged))
        .unwrap_or_default();
    Trace {
        client_gone: client_gone(req),
        request_id,
        access_logged,
        ..Trace::default()
    }
}

/// A check for the request's client having gone, when the connection is known.
pub fn client_gone(req: &HttpRequest) -> Option<Box<dyn Fn() -> bool + Send + Sync>> {
    let peer = req.conn_data::<PeerSocket>().copied()?;
    Some(Box::new(move || peer.closed()))
}

/// A handler's result as a response; server-side failures are logged with the request id.
pub fn respond(req: &HttpRequest, result: Result<HttpResponse, ApiError>) -> HttpResponse {
    result.unwrap_or_else(|err| {
        if err.status().is_server_error() {
            let id = request_id().map(|id| id.0).unwrap_or_default();
            log::warn!("[{id}] {} {}: {err}", req.method(), req.path());
        }
        error_response(err.status(), &err.to_string())
    })
}

/// Reads the whole body (gzip already undone by actix), refusing bodies over
/// `max_request_bytes` and bodies that take longer than `--client_body_timeout_ms`
/// to arrive (a client trickling its body would hold an in-flight slot).
pub async fn read_body(req: &HttpRequest, payload: web::Payload, state: &ServerState) -> Result<Bytes, ApiError> {
    let limit = state.max_request_bytes;
    let mut held = state.service.body_budget().start();
    let body = within_body_timeout(state, read_limited(req, payload, limit, &mut held)).await?;
    hold_until_done(req, held);
    Ok(body)
}

/// Runs `read` (a body being read) within `--client_body_timeout_ms`: a
/// client that stops sending, or sends a body that never ends as its format
/// says it must, gets 408 instead of holding a slot and its bytes.
pub async fn within_body_timeout<T>(
    state: &ServerState,
    read: impl Future<Output = Result<T, ApiError>>,
) -> Result<T, ApiError> {
    let mut read = std::pin::pin!(read);
    // A body already in the connection's buffer (most small ones) needs no
    // timer: only one still arriving is raced against the timeout. The
    // connection hands a small body over just after the handler's first
    // poll, so the handler asks to be polled once more before arming one.
    let mut asked_again = false;
    let first = std::future::poll_fn(|cx| match Future::poll(read.as_mut(), cx) {
        std::task::Poll::Pending if !asked_again => {
            asked_again = true;
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        }
        polled => std::task::Poll::Ready(polled),
    })
    .await;
    match first {
        std::task::Poll::Ready(body) => body,
        std::task::Poll::Pending => match tokio::time::timeout(state.body_timeout, read).await {
            Ok(body) => body,
            Err(_) => Err(ApiError::BodyTimeout(state.body_timeout.as_millis() as u64)),
        },
    }
}

/// Keeps a body's bytes of the budget until its request is done: the
/// request's scope (or its extensions) drop with it.
pub fn hold_until_done(req: &HttpRequest, held: BytesHeld) {
    let mut held = Some(held);
    let _ = REQUEST.try_with(|scope| *scope.held.borrow_mut() = held.take());
    if let Some(held) = held {
        actix_web::HttpMessage::extensions_mut(req).insert(held);
    }
}

/// The body's declared length, refused at once when past `limit`.
pub fn declared_length(req: &HttpRequest, limit: usize) -> Result<Option<usize>, ApiError> {
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    match declared {
        Some(length) if length > limit => Err(ApiError::PayloadTooLarge {
            limit,
            got: Some(length),
        }),
        declared => Ok(declared),
    }
}

async fn read_limited(
    req: &HttpRequest,
    payload: web::Payload,
    limit: usize,
    held: &mut BytesHeld,
) -> Result<Bytes, ApiError> {
    let declared = declared_length(req, limit)?;
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
        if body.len() + chunk.len() > held.bytes() {
            held.grow(body.len() + chunk.len() - held.bytes())?;
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

// Constants, so each name is checked once at compile time, not per response.
pub fn json(status: StatusCode, value: Value) -> HttpResponse {
    HttpResponse::build(status)
        .content_type("application/json")
        .body(value.to_string())
}

/// A JSON body, or TF Serving's parse error.
pub fn body_json(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body).map_err(ApiError::JsonParse)
}

/// A model's versions and their states, as the management APIs list them.
pub fn versions_json(info: &ModelInfo) -> Value {
    info.versions
        .iter()
        .map(|v| {
            let mut entry = json!({"version": v.version.to_string(), "state": v.state.as_str(), "error": v.error.clone().unwrap_or_default()});
            if let Some(access) = &v.access {
                entry["access"] = json!(access);
            }
            if let Some(mode) = &v.mode {
                entry["mode"] = json!(mode);
            }
            entry
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_are_percent_decoded_only_when_escaped() {
        assert_eq!(decode_segment("half_plus_three"), "half_plus_three");
        assert_eq!(decode_segment("my%20model"), "my model");
        assert_eq!(decode_segment("bad%ff"), "bad\u{fffd}");
    }
}
