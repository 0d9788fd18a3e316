//! The HTTP/1.1 front of plain REST connections. It reads each connection
//! itself and answers TF Serving's inference calls (`POST /v1/models/...:
//! predict|classify|regress` with a small body of declared length) without
//! actix-web's per-request machinery (app service, middleware futures,
//! request and header objects, per-request timers). At the first request it
//! does not take, it hands the connection, with the bytes it has read, to
//! actix-web, which serves that request and every later one on the
//! connection. The answers are built by the same code as actix-web's
//! route's (`dialects::tfs::infer`, `call::http::answer`), so a request is
//! answered alike whichever side serves it. Used only where every request of
//! that shape would pass the middleware untouched: no TLS, auth or CORS, and
//! keep-alive on (`server::serve`).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant, SystemTime};

use actix_http::Protocol;
use actix_service::{Service, ServiceFactory};
use actix_web::body::MessageBody;
use actix_web::http::header::{HeaderValue, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, DATE, TRANSFER_ENCODING};
use actix_web::http::{Method, StatusCode};
use actix_web::rt::net::TcpStream;
use actix_web::{web, HttpResponse};
use bytes::{Buf, Bytes, BytesMut};
use futures_util::FutureExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};

use super::middleware::REQUEST_ID;
use crate::call::http::{conclude, Answer, Exchange, PeerSocket};
use crate::dialects::tfs::{self, Route, Verb};
use crate::error::{error_response, ApiError};
use crate::server::access_log;
use crate::server::{Admitted, BytesBorrowed, RequestId, ServerState};
use crate::service::{Trace, VersionSelector};

/// Bodies the front reads itself; larger ones are decoded off the worker
/// thread, through actix-web.
const BODY_LIMIT: usize = 64 << 10;
/// Headers a request the front takes may carry.
const MAX_HEADERS: usize = 32;
/// A request head longer than this is actix-web's to refuse.
const HEAD_LIMIT: usize = 16 << 10;
/// Answers buffered past this are written before the next pipelined request is taken.
const FLUSH_AT: usize = 64 << 10;
/// How long a connection closed under an unread body keeps reading it.
const LINGER: Duration = Duration::from_secs(1);
/// What one read asks for at least.
const READ_SIZE: usize = 8 << 10;

/// What the front needs to serve a worker's connections.
pub struct Front {
    pub state: web::Data<ServerState>,
    /// How long an idle connection stays open (`--keep_alive_seconds`, not 0).
    pub keep_alive: Duration,
    /// How long a request's head may take to arrive (`--client_request_timeout_ms`).
    pub request_timeout: Duration,
    /// Set when the server stops: idle connections close.
    pub shutdown: actix_server::GracefulShutdownSignal,
}

/// Wraps actix-web's HTTP service (`app`) in the front: one service per
/// connection accepted, as `actix_server` wants for a listener.
pub fn factory<A>(
    front: Front,
    app: A,
) -> impl ServiceFactory<TcpStream, Config = (), Response = (), Error = (), InitError = ()>
where
    A: ServiceFactory<(Prefixed, Protocol, Option<SocketAddr>), Config = (), Response = (), InitError = ()> + 'static,
    A::Service: 'static,
{
    let front = Rc::new(front);
    actix_service::fn_factory(move || {
        let (front, app) = (front.clone(), app.new_service(()));
        async move {
            let app = Rc::new(app.await?);
            let stopping = Rc::new(Stopping::default());
            let signal = front.shutdown.clone();
            actix_web::rt::spawn({
                let stopping = stopping.clone();
                async move {
                    signal.notified().await;
                    stopping.stop();
                }
            });
            Ok::<_, ()>(actix_service::fn_service(move |stream: TcpStream| {
                let (front, app, stopping) = (front.clone(), app.clone(), stopping.clone());
                async move {
                    front.serve(stream, &*app, &stopping).await;
                    Ok::<_, ()>(())
                }
            }))
        }
    })
}

/// A worker's connections, woken when the server stops so that idle ones
/// close. One task per worker waits for the stop, and each connection gives
/// its waker once: waiting for a request then touches nothing another
/// thread writes (the stop signal's own channel is shared by every worker).
#[derive(Default)]
struct Stopping {
    stopped: Cell<bool>,
    next: Cell<u64>,
    waiting: RefCell<HashMap<u64, Waker>>,
}

impl Stopping {
    fn stop(&self) {
        self.stopped.set(true);
        let waiting = std::mem::take(&mut *self.waiting.borrow_mut());
        waiting.into_values().for_each(Waker::wake);
    }

    /// Wakes the calling task when the server stops, until the registration drops.
    async fn register(&self) -> Registered<'_> {
        let key = self.next.get();
        self.next.set(key + 1);
        let waker = std::future::poll_fn(|cx| Poll::Ready(cx.waker().clone())).await;
        self.waiting.borrow_mut().insert(key, waker);
        Registered { stopping: self, key }
    }

    /// Ready once the server stops; polling it costs a flag's read.
    fn stopped(&self) -> impl std::future::Future<Output = ()> + '_ {
        std::future::poll_fn(|_| match self.stopped.get() {
            true => Poll::Ready(()),
            false => Poll::Pending,
        })
    }
}

struct Registered<'a> {
    stopping: &'a Stopping,
    key: u64,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.stopping.waiting.borrow_mut().remove(&self.key);
    }
}

/// A request the front takes: its route, and where its parts lie in the
/// connection's buffer.
struct Head {
    /// Bytes of the request line and headers.
    len: usize,
    /// Bytes of the body (its `Content-Length`).
    body: usize,
    path: Range<usize>,
    request_id: Option<Range<usize>>,
    content_type: Option<Range<usize>>,
    /// KServe's `Ce-Id`, which a capture's events keep as their id.
    ce_id: Option<Range<usize>>,
    /// The client asked to close the connection after this answer.
    close: bool,
    model: String,
    selector: VersionSelector,
    verb: Verb,
}

enum Parsed {
    Take(Rc<Head>),
    /// The head has not all arrived.
    Partial,
    /// A request the front leaves to actix-web.
    HandOff,
}

/// Reads the request at the start of `buf`: the front takes HTTP/1.1 POSTs
/// of TF Serving's inference routes with exactly one `Host`, a declared body
/// of at most `body_limit` bytes, no transfer or content coding, and no
/// `Expect`, `Upgrade` or query string. It never answers a request it has
/// not checked as actix-web would: anything else goes to actix-web, which
/// refuses what is malformed (a missing `Host` among it: RFC 9112 §3.2) and
/// answers the rest as it always has.
fn parse(buf: &[u8], body_limit: usize) -> Parsed {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    let len = match request.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() < HEAD_LIMIT => return Parsed::Partial,
        _ => return Parsed::HandOff,
    };
    let (Some("POST"), Some(1), Some(path)) = (request.method, request.version, request.path) else {
        return Parsed::HandOff;
    };
    // Paths the `http` crate's URI parser refuses are actix-web's to refuse
    // (400); a query string or fragment is for actix-web's routing to read.
    if !path.bytes().all(uri_path_byte) {
        return Parsed::HandOff;
    }
    let Ok(Route::Infer { model, selector, verb }) = tfs::parse_route(&Method::POST, path) else {
        return Parsed::HandOff;
    };
    let at = |part: &[u8]| {
        let start = part.as_ptr() as usize - buf.as_ptr() as usize;
        start..start + part.len()
    };
    let mut head = Head {
        len,
        body: usize::MAX,
        path: at(path.as_bytes()),
        request_id: None,
        content_type: None,
        ce_id: None,
        close: false,
        model,
        selector,
        verb,
    };
    let mut seen_host = false;
    for header in request.headers.iter() {
        let name = header.name;
        let is = |wanted: &str| name.eq_ignore_ascii_case(wanted);
        if is("content-length") {
            match content_length(header.value) {
                Some(length) if head.body == usize::MAX => head.body = length,
                _ => return Parsed::HandOff,
            }
        } else if is("connection") {
            for token in header.value.split(|&b| b == b',') {
                match token.trim_ascii() {
                    t if t.eq_ignore_ascii_case(b"close") => head.close = true,
                    t if t.eq_ignore_ascii_case(b"keep-alive") => {}
                    _ => return Parsed::HandOff,
                }
            }
        } else if is("x-request-id") {
            // Repeated headers are read as actix-web reads them: the first.
            head.request_id.get_or_insert_with(|| at(header.value));
        } else if is("content-type") {
            head.content_type.get_or_insert_with(|| at(header.value));
        } else if is("ce-id") {
            head.ce_id.get_or_insert_with(|| at(header.value));
        } else if is("host") {
            if std::mem::replace(&mut seen_host, true) {
                return Parsed::HandOff;
            }
        } else if is("transfer-encoding") || is("content-encoding") || is("expect") || is("upgrade") {
            return Parsed::HandOff;
        }
    }
    if head.body > body_limit || !seen_host {
        return Parsed::HandOff;
    }
    Parsed::Take(Rc::new(head))
}

/// The head a connection's front last took, byte for byte. A keep-alive
/// client mostly repeats its head exactly (same path, same headers, same
/// body length); a head that starts the buffer with the same bytes, its
/// closing blank line included, parses to the same request, so it is not
/// parsed again.
#[derive(Default)]
struct LastHead {
    bytes: Vec<u8>,
    head: Option<Rc<Head>>,
}

impl LastHead {
    /// [`parse`], unless the buffer starts with the last head taken.
    fn parse(&mut self, buf: &[u8], body_limit: usize) -> Parsed {
        if let Some(head) = self.head.as_ref().filter(|_| buf.starts_with(&self.bytes)) {
            return Parsed::Take(head.clone());
        }
        let parsed = parse(buf, body_limit);
        if let Parsed::Take(head) = &parsed {
            self.bytes.clear();
            self.bytes.extend_from_slice(&buf[..head.len]);
            self.head = Some(head.clone());
        }
        parsed
    }
}

/// A byte the `http` crate takes in a URI's path as it is (not `?` or `#`,
/// which end the path).
fn uri_path_byte(b: u8) -> bool {
    matches!(b, 0x21..=0x22 | 0x24..=0x3B | 0x3D | 0x40..=0x5F | 0x61..=0x7E)
}

fn content_length(value: &[u8]) -> Option<usize> {
    if value.is_empty() || value.len() > 12 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value).ok()?.parse().ok()
}

/// A header value as actix-web's `HeaderValue::to_str` reads it: visible
/// ASCII (and tabs) only.
fn header_text(value: &[u8]) -> Option<&str> {
    value
        .iter()
        .all(|&b| b == b'\t' || (32..127).contains(&b))
        .then(|| std::str::from_utf8(value).ok())
        .flatten()
}

/// The connection a request came on.
#[derive(Clone, Copy)]
struct Connection {
    peer: PeerSocket,
    client: Option<SocketAddr>,
}

/// What a request holds from its head on.
struct Gate<'a> {
    /// Its in-flight slot, or why it has none.
    admitted: Result<Admitted<'a>, ApiError>,
    /// Its body's bytes of the budget, or why they do not fit.
    held: Option<Result<BytesBorrowed<'a>, ApiError>>,
}

impl Gate<'_> {
    /// Refused before its body is read.
    fn refused(&self) -> bool {
        self.admitted.is_err() || matches!(self.held, Some(Err(_)))
    }
}

/// How much of a request's body arrived.
struct Answered {
    /// The error reading it gave, if any.
    arrived: Result<(), ApiError>,
    /// Bytes of it are still on the connection: it closes after the answer.
    unread: bool,
}

/// What a request gets: an inference call's answer, or a response made
/// before the call (admission refused) or instead of it (a panic).
enum Reply {
    Answered(Answer),
    Refused(HttpResponse),
}

/// Why a connection's loop stopped reading requests.
enum End {
    /// Close, reading and dropping what the client still sends for a moment.
    Close,
    HandOff,
}

impl Front {
    /// Serves a connection until its client closes it, it idles out, the
    /// server stops, or a request goes to actix-web (`app`).
    async fn serve<A>(&self, mut stream: TcpStream, app: &A, stopping: &Stopping)
    where
        A: Service<(Prefixed, Protocol, Option<SocketAddr>), Response = ()>,
    {
        let connection = Connection {
            peer: PeerSocket::new(stream.as_raw_fd()),
            client: stream.peer_addr().ok(),
        };
        let body_limit = BODY_LIMIT.min(self.state.max_request_bytes);
        let mut buf = BytesMut::with_capacity(READ_SIZE);
        let mut out = Vec::with_capacity(512);
        // One timer for the connection's life, moved on only when it fires
        // early (a request came since it was set): no timer work per request.
        let mut last_request = Instant::now();
        let mut timer = std::pin::pin!(tokio::time::sleep(self.request_timeout));
        let _registered = stopping.register().await;
        let mut waiting_since: Option<Instant> = None;
        let mut idle_limit = self.request_timeout;
        // A request whose body is still arriving: its head, parsed once, and
        // the gate it passed.
        let mut arriving: Option<(Rc<Head>, Gate<'_>)> = None;
        let mut last_head = LastHead::default();
        let end = loop {
            if out.len() >= FLUSH_AT {
                if stream.write_all(&out).await.is_err() {
                    return;
                }
                out.clear();
            }
            let (parsed, gate) = match arriving.take() {
                Some((head, gate)) => (Parsed::Take(head), Some(gate)),
                None => (last_head.parse(&buf, body_limit), None),
            };
            let body_arriving = match parsed {
                Parsed::Take(head) => {
                    let passed = match gate {
                        Some(passed) => passed,
                        None => self.gate(&head),
                    };
                    let complete = buf.len() >= head.len + head.body;
                    if !complete && !passed.refused() {
                        arriving = Some((head, passed));
                        true
                    } else {
                        // A refused request is answered at once, its body unread.
                        waiting_since = None;
                        let request = match complete {
                            true => buf.split_to(head.len + head.body),
                            false => buf.split(),
                        };
                        let request = request.freeze();
                        let answered = Answered {
                            arrived: Ok(()),
                            unread: !complete,
                        };
                        let close = self
                            .answer((&request, &*head), passed, answered, connection, &mut out)
                            .await;
                        if !complete {
                            break End::Close;
                        }
                        last_request = Instant::now();
                        idle_limit = self.keep_alive;
                        if close {
                            break End::Close;
                        }
                        continue;
                    }
                }
                Parsed::HandOff => break End::HandOff,
                Parsed::Partial => false,
            };
            if !out.is_empty() {
                if stream.write_all(&out).await.is_err() {
                    return;
                }
                out.clear();
                // A large answer's buffer is not kept for the connection's life.
                out.shrink_to(FLUSH_AT);
            }
            // Nothing (more) to answer: wait for bytes, within the limit for
            // an idle connection, a request's head or its body.
            let limit = match (buf.is_empty(), body_arriving) {
                (true, _) => idle_limit,
                (false, false) => self.request_timeout,
                (false, true) => self.state.body_timeout,
            };
            let since = match buf.is_empty() {
                true => last_request,
                false => *waiting_since.get_or_insert_with(Instant::now),
            };
            let deadline = tokio::time::Instant::from_std(since + limit);
            if timer.deadline() > deadline {
                timer.as_mut().reset(deadline);
            }
            if buf.capacity() - buf.len() < READ_SIZE / 2 {
                buf.reserve(READ_SIZE);
            }
            let read = tokio::select! {
                biased;
                read = stream.read_buf(&mut buf) => read,
                () = &mut timer => {
                    if tokio::time::Instant::now() < deadline {
                        timer.as_mut().reset(deadline);
                        continue;
                    }
                    self.timed_out(&mut buf, body_limit, arriving.take(), connection, &mut out).await;
                    break End::Close;
                }
                () = stopping.stopped(), if buf.is_empty() => break End::Close,
            };
            match read {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        };
        if !out.is_empty() && stream.write_all(&out).await.is_err() {
            return;
        }
        match end {
            End::Close => {
                // Closing with bytes unread (a body not read, requests
                // pipelined after a `Connection: close` one) would reset the
                // connection, and the client could lose the answers: as
                // actix-web does, read and drop what still comes for a moment first.
                let _ = stream.shutdown().await;
                let mut sink = [0u8; 4096];
                let drain = async { while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {} };
                let _ = tokio::time::timeout(LINGER, drain).await;
            }
            End::HandOff => {
                let _ = app
                    .call((Prefixed { head: buf, stream }, Protocol::Http1, connection.client))
                    .await;
            }
        }
    }

    /// What a connection whose request did not all arrive in time is
    /// answered before it closes: an idle one nothing, a head 408 (as
    /// actix-web answers a slow first request), a body its request's answer
    /// with TF Serving's timeout error (as its route's body reader does).
    async fn timed_out(
        &self,
        buf: &mut BytesMut,
        body_limit: usize,
        arriving: Option<(Rc<Head>, Gate<'_>)>,
        connection: Connection,
        out: &mut Vec<u8>,
    ) {
        if buf.is_empty() {
            return;
        }
        let arriving = match arriving {
            Some(arriving) => Some(arriving),
            None => match parse(buf, body_limit) {
                Parsed::Take(head) => {
                    let gate = self.gate(&head);
                    Some((head, gate))
                }
                _ => None,
            },
        };
        match arriving {
            Some((head, passed)) => {
                let request = buf.split().freeze();
                let timeout = ApiError::BodyTimeout(self.state.body_timeout.as_millis() as u64);
                let answered = Answered {
                    arrived: Err(timeout),
                    unread: true,
                };
                self.answer((&request, &*head), passed, answered, connection, out).await;
            }
            None => {
                write_response(HttpResponse::RequestTimeout().finish(), true, out).await;
            }
        }
    }

    /// A request's admission and its declared body's bytes of the budget,
    /// taken when its head has arrived, as the gate middleware and the body
    /// reader take them.
    fn gate(&self, head: &Head) -> Gate<'_> {
        let admitted = self.state.in_flight.admit();
        // Only an admitted request reads its body.
        let held = admitted.is_ok().then(|| self.state.body_budget.hold(head.body));
        Gate { admitted, held }
    }

    /// Answers one request, as actix-web's middleware and TF Serving route
    /// would, into `out`. Whether the connection closes after it.
    async fn answer(
        &self,
        (request, head): (&Bytes, &Head),
        gate: Gate<'_>,
        answered: Answered,
        connection: Connection,
        out: &mut Vec<u8>,
    ) -> bool {
        let Connection { peer, client } = connection;
        let state = &*self.state;
        let text = |range: &Option<Range<usize>>| range.clone().and_then(|r| header_text(&request[r]));
        // Read only for a panic's or an access line's sake.
        let path = || std::str::from_utf8(&request[head.path.clone()]).unwrap_or_default();
        let id = RequestId::from_header(text(&head.request_id));
        let access = state.access_log.sample().then(Instant::now);
        let cut_short = answered.unread || answered.arrived.is_err();
        let handled =
            AssertUnwindSafe(self.handle((request, head), gate, answered.arrived, &id, access.is_some(), peer))
                .catch_unwind()
                .await;
        let reply = match handled {
            Ok(reply) => reply,
            Err(panic) => {
                let uri = actix_web::http::Uri::try_from(path()).unwrap_or_default();
                Reply::Refused(super::panics::contained(&id, &Method::POST, &uri, panic.as_ref()).error_response())
            }
        };
        if let Some(started) = access {
            let (status, bytes_out, served) = match &reply {
                Reply::Answered(answer) => (answer.status, Some(answer.body.len() as u64), answer.served.as_ref()),
                Reply::Refused(response) => (response.status(), Some(0), None),
            };
            let bytes_out = match &reply {
                Reply::Refused(response) => match response.body().size() {
                    actix_web::body::BodySize::Sized(n) => Some(n),
                    actix_web::body::BodySize::None => Some(0),
                    actix_web::body::BodySize::Stream => None,
                },
                Reply::Answered(_) => bytes_out,
            };
            access_log::write(&access_log::Line {
                protocol: "rest",
                request_id: &id.0,
                method: "POST",
                path: path(),
                status: status.as_u16(),
                grpc_code: None,
                named_model: None,
                bytes_in: Some(head.body as u64),
                bytes_out,
                client,
                total: started.elapsed(),
                served,
            });
        }
        let close = head.close || cut_short || state.drain.is_draining();
        match reply {
            Reply::Answered(answer) => write_answer(&answer, &id.0, close, out),
            Reply::Refused(mut response) => {
                if let Ok(value) = HeaderValue::from_str(&id.0) {
                    response.headers_mut().insert(REQUEST_ID, value);
                }
                write_response(response, close, out).await;
            }
        }
        close
    }

    /// The gate's admission, then TF Serving's route on the body read.
    async fn handle(
        &self,
        (request, head): (&Bytes, &Head),
        gate: Gate<'_>,
        arrived: Result<(), ApiError>,
        id: &RequestId,
        access_logged: bool,
        peer: PeerSocket,
    ) -> Reply {
        let state = &*self.state;
        let _admitted = match gate.admitted {
            Ok(admitted) => admitted,
            Err(error) => return Reply::Refused(error_response(error.status(), &error.to_string())),
        };
        let (_held, budget) = match gate.held {
            Some(Ok(held)) => (Some(held), Ok(())),
            Some(Err(error)) => (None, Err(error)),
            None => (None, Ok(())),
        };
        let started = Instant::now();
        let mut trace = Trace {
            client_gone: Some(Box::new(move || peer.closed())),
            request_id: Some(id.0.clone()),
            access_logged,
            ..Trace::default()
        };
        let body = request.slice(head.len.min(request.len())..);
        let result = match budget.and(arrived) {
            Ok(()) => tfs::infer(state, &head.model, &head.selector, &head.verb, &body, &mut trace).await,
            Err(error) => Err(error),
        };
        let content_type = head.content_type.clone().and_then(|r| header_text(&request[r]));
        let ce_id = head.ce_id.clone().and_then(|r| header_text(&request[r]));
        let exchange = Exchange::Front {
            state,
            content_type,
            ce_id,
        };
        let api = head.verb.api();
        Reply::Answered(conclude(exchange, result, None, &head.model, api, &mut trace, started))
    }
}

/// Writes an inference call's answer as [`write_response`] writes the
/// response actix-web's route makes of it, without making one.
fn write_answer(answer: &Answer, request_id: &str, close: bool, out: &mut Vec<u8>) {
    write_status(answer.status, answer.body.len(), close, out);
    let mut header = |name: &str, value: &[u8]| {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    };
    header(CONTENT_TYPE.as_str(), answer.content_type.as_bytes());
    answer.write_headers(&mut header);
    header(REQUEST_ID.as_str(), request_id.as_bytes());
    out.extend_from_slice(b"date: ");
    write_date(out);
    out.extend_from_slice(b"\r\n\r\n");
    out.extend_from_slice(&answer.body);
}

/// The status line, `content-length` and, when closing, `connection: close`.
fn write_status(status: StatusCode, length: usize, close: bool, out: &mut Vec<u8>) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("<unknown status code>").as_bytes());
    out.extend_from_slice(b"\r\ncontent-length: ");
    out.extend_from_slice(itoa::Buffer::new().format(length).as_bytes());
    out.extend_from_slice(b"\r\n");
    if close {
        out.extend_from_slice(b"connection: close\r\n");
    }
}

/// Writes a response as actix-web's HTTP/1.1 encoder does: the status line,
/// `content-length`, `connection: close` when closing, the headers, `date`.
async fn write_response(response: HttpResponse, close: bool, out: &mut Vec<u8>) {
    let (response, body) = response.into_parts();
    let body = match body.try_into_bytes() {
        Ok(bytes) => bytes,
        Err(body) => actix_web::body::to_bytes(body).await.unwrap_or_default(),
    };
    write_status(response.status(), body.len(), close, out);
    let mut dated = false;
    for (name, value) in response.headers() {
        match *name {
            CONNECTION | CONTENT_LENGTH | TRANSFER_ENCODING => continue,
            DATE => dated = true,
            _ => {}
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if !dated {
        out.extend_from_slice(b"date: ");
        write_date(out);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&body);
}

/// Today's `Date` value, formatted once a second per worker thread.
fn write_date(out: &mut Vec<u8>) {
    thread_local! {
        static DATE: std::cell::RefCell<(u64, String)> = const { std::cell::RefCell::new((u64::MAX, String::new())) };
    }
    let now = SystemTime::now();
    let second = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    DATE.with_borrow_mut(|(cached, text)| {
        if *cached != second {
            *cached = second;
            *text = httpdate::fmt_http_date(now);
        }
        out.extend_from_slice(text.as_bytes());
    });
}

/// A connection handed to actix-web: the bytes the front read but did not
/// answer come first, then the socket's.
pub struct Prefixed {
    head: BytesMut,
    stream: TcpStream,
}

impl Prefixed {
    pub fn socket(&self) -> &TcpStream {
        &self.stream
    }
}

impl AsyncRead for Prefixed {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.head.is_empty() {
            return Pin::new(&mut this.stream).poll_read(cx, buf);
        }
        let n = this.head.len().min(buf.remaining());
        buf.put_slice(&this.head[..n]);
        this.head.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Prefixed {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

/// What the front makes of a connection's buffer, for the fuzz target that
/// holds it to actix-web's own parser: the lengths of the request it takes
/// (head, body), or whether it waits for more or hands the connection over.
#[doc(hidden)]
#[derive(Debug, PartialEq, Eq)]
pub enum FrontReading {
    Take { head: usize, body: usize },
    Partial,
    HandOff,
}

/// The front's reading of requests one after another on a connection, the
/// repeated-head shortcut included.
#[doc(hidden)]
#[derive(Default)]
pub struct FrontReader(LastHead);

impl FrontReader {
    pub fn read(&mut self, buf: &[u8]) -> FrontReading {
        match self.0.parse(buf, BODY_LIMIT) {
            Parsed::Take(head) => FrontReading::Take {
                head: head.len,
                body: head.body,
            },
            Parsed::Partial => FrontReading::Partial,
            Parsed::HandOff => FrontReading::HandOff,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taken(request: &[u8]) -> Option<Rc<Head>> {
        match parse(request, BODY_LIMIT) {
            Parsed::Take(head) => Some(head),
            _ => None,
        }
    }

    #[test]
    fn a_repeated_head_is_taken_without_parsing_it_again() {
        let mut last = LastHead::default();
        let first = b"POST /v1/models/half:predict HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n[]";
        let Parsed::Take(head) = last.parse(first, BODY_LIMIT) else {
            panic!("taken")
        };
        let Parsed::Take(again) = last.parse(first, BODY_LIMIT) else {
            panic!("taken again")
        };
        assert!(Rc::ptr_eq(&head, &again), "the same bytes reuse the parsed head");
        // Another body length, path or header is another head.
        let longer = b"POST /v1/models/half:predict HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\n[1]";
        let Parsed::Take(other) = last.parse(longer, BODY_LIMIT) else {
            panic!("taken")
        };
        assert!(!Rc::ptr_eq(&head, &other));
        assert_eq!(other.body, 3);
        let renamed = b"POST /v1/models/hal:predict HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\n[1]";
        let Parsed::Take(renamed) = last.parse(renamed, BODY_LIMIT) else {
            panic!("taken")
        };
        assert_eq!(renamed.model, "hal");
        // Part of the last head is still a partial one, and a head the front
        // leaves to actix-web is left to it whatever came before.
        assert!(matches!(last.parse(&longer[..30], BODY_LIMIT), Parsed::Partial));
        let handed =
            b"POST /v1/models/hal:predict HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n";
        assert!(matches!(last.parse(handed, BODY_LIMIT), Parsed::HandOff));
    }

    #[test]
    fn takes_tf_serving_inference_posts_only() {
        let head = taken(b"POST /v1/models/half/versions/2:predict HTTP/1.1\r\nHost: x\r\nContent-Length: 20\r\nX-Request-Id: abc\r\nConnection: keep-alive\r\n\r\n").unwrap();
        assert_eq!(
            (head.model.as_str(), &head.selector, &head.verb),
            ("half", &VersionSelector::Specific(2), &Verb::Predict)
        );
        assert_eq!(head.body, 20);
        assert!(!head.close);
        let close =
            taken(b"POST /V1/Models/m:Regress HTTP/1.1\r\nhost: x\r\nconnection: Close\r\ncontent-length: 0\r\n\r\n")
                .unwrap();
        assert!(close.close);
        assert_eq!(close.verb, Verb::Regress);
        for other in [
            &b"GET /v1/models/half HTTP/1.1\r\n\r\n"[..],
            b"POST /v1/models/half:predict HTTP/1.0\r\nContent-Length: 2\r\n\r\n",
            b"POST /v1/models/half:predict?x=1 HTTP/1.1\r\nContent-Length: 2\r\n\r\n",
            b"POST /v1/models/half:explain HTTP/1.1\r\nContent-Length: 2\r\n\r\n",
            b"POST /v2/models/half/infer HTTP/1.1\r\nContent-Length: 2\r\n\r\n",
            b"POST /v1/models/half:predict HTTP/1.1\r\n\r\n",
            b"POST /v1/models/half:predict HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n",
            b"POST /v1/models/half:predict HTTP/1.1\r\nContent-Length: +2\r\n\r\n",
            b"POST /v1/models/half:predict HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"POST /v1/models/half:predict HTTP/1.1\r\nContent-Length: 2\r\nContent-Encoding: gzip\r\n\r\n",
            b"POST /v1/models/half:predict HTTP/1.1\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n",
            b"POST /v1/models/half:predict HTTP/1.1\r\nContent-Length: 2\r\nConnection: upgrade\r\n\r\n",
            b"POST /v1/models/half:predict HTTP/1.1\r\nContent-Length: 65537\r\n\r\n",
            b"BREW /v1/models/half:predict HTTP/1.1\r\n\r\n",
            b"POST /v1/models/ha<lf:predict HTTP/1.1\r\nContent-Length: 2\r\n\r\n",
            "POST /v1/models/h\u{e9}:predict HTTP/1.1\r\nContent-Length: 2\r\n\r\n".as_bytes(),
            b"POST /v1/models/half:predict HTTP/1.1\r\nHost: a\r\nHost: b\r\nContent-Length: 2\r\n\r\n",
            b"POST /v1/models/half:predict HTTP/1.1\r\nContent-Length: 2\r\n\r\n[]",
            b"\x00garbage\r\n\r\n",
        ] {
            assert!(
                matches!(parse(other, BODY_LIMIT), Parsed::HandOff),
                "{}",
                String::from_utf8_lossy(other)
            );
        }
        assert!(matches!(
            parse(b"POST /v1/models/half:pre", BODY_LIMIT),
            Parsed::Partial
        ));
        assert!(matches!(
            parse(&vec![b'a'; HEAD_LIMIT + 1], BODY_LIMIT),
            Parsed::HandOff
        ));
    }

    #[test]
    fn header_values_read_as_actix_reads_them() {
        assert_eq!(header_text(b"abc-1"), Some("abc-1"));
        assert_eq!(header_text(b"a\tb"), Some("a\tb"));
        assert_eq!(header_text("é".as_bytes()), None);
        assert_eq!(header_text(b"a\x7fb"), None);
    }

    #[test]
    fn responses_are_written_as_actix_writes_them() {
        actix_web::rt::System::new().block_on(async {
            let mut out = Vec::new();
            let response = HttpResponse::Ok()
                .content_type("application/json")
                .insert_header(("x-batch-size", "3"))
                .body("{}");
            write_response(response, true, &mut out).await;
            let text = String::from_utf8(out).unwrap();
            let (head, body) = text.split_once("\r\n\r\n").unwrap();
            assert_eq!(body, "{}");
            let lines: Vec<&str> = head.split("\r\n").collect();
            assert_eq!(
                lines[..3],
                ["HTTP/1.1 200 OK", "content-length: 2", "connection: close"]
            );
            assert!(lines.contains(&"content-type: application/json"));
            assert!(lines.contains(&"x-batch-size: 3"));
            assert!(lines.last().unwrap().starts_with("date: "));
        });
    }
}
