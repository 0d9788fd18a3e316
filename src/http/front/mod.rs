//! The HTTP/1.1 front of plain REST connections. It reads each connection
//! itself and answers TF Serving's inference calls (`POST /v1/models/...:
//! predict|classify|regress` with a small body of declared length) without
//! actix-web's per-request machinery (app service, middleware futures,
//! request and header objects, per-request timers). At the first request it
//! does not take, it hands the connection, with the bytes it has read, to
//! actix-web, which serves that request and every later one on the
//! connection. The answers are built by the same code as actix-web's
//! route's (`dialects::tfs::infer`, `call::http::Inference::conclude`), so a request is
//! answered alike whichever side serves it. Used only where every request of
//! that shape would pass the middleware untouched: no TLS, auth or CORS, and
//! keep-alive on (`server::serve`).

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::time::{Duration, Instant};

use actix_http::Protocol;
use actix_service::{Service, ServiceFactory};
use actix_web::rt::net::TcpStream;
use actix_web::{web, HttpResponse};
use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::arrival as stamped;
use crate::call::http::PeerSocket;
use crate::error::ApiError;
use crate::server::ServerState;

mod parse;
mod prefixed;
mod request;
mod stopping;
mod write;

use parse::{parse, Head, LastHead, Parsed};
pub use parse::{FrontReader, FrontReading};
pub use prefixed::Prefixed;
use request::{Answered, Gate};
use stopping::Stopping;
use write::write_response;

/// Bodies the front reads itself; larger ones are decoded off the worker
/// thread, through actix-web.
const BODY_LIMIT: usize = 64 << 10;
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

/// The connection a request came on.
#[derive(Clone, Copy)]
struct Connection {
    peer: PeerSocket,
    client: Option<SocketAddr>,
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
    // Kept whole: the connection's state (its buffers, its one timer, the request whose body is
    // arriving) lives in locals across the awaits; split, every step would re-borrow all of it, on
    // the path every request takes.
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
        // Under a latency objective, how long the bytes last read waited
        // unread in the socket: it counts against the requests among them.
        let stamped = self.state.service.any_steered() && stamped::enable(&stream).is_ok();
        let mut unread_wait = Duration::ZERO;
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
                        None => self.gate(&head, unread_wait),
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
                read = stamped::read(&mut stream, &mut buf, stamped) => read,
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
                Ok((0, _)) | Err(_) => return,
                Ok((_, stamp)) => unread_wait = stamped::waited(stamp),
            }
        };
        if !out.is_empty() && stream.write_all(&out).await.is_err() {
            return;
        }
        end_connection(end, stream, buf, app, connection.client).await;
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
                    let gate = self.gate(&head, Duration::ZERO);
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
}

/// Closes a connection, or hands it to actix-web with the bytes already read.
async fn end_connection<A>(end: End, mut stream: TcpStream, buf: BytesMut, app: &A, client: Option<SocketAddr>)
where
    A: Service<(Prefixed, Protocol, Option<SocketAddr>), Response = ()>,
{
    match end {
        End::Close => {
            // Closing with bytes unread (a body not read, requests pipelined
            // after a `Connection: close` one) would reset the connection,
            // and the client could lose the answers: as actix-web does, read
            // and drop what still comes for a moment first.
            let _ = stream.shutdown().await;
            let mut sink = [0u8; 4096];
            let drain = async { while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {} };
            let _ = tokio::time::timeout(LINGER, drain).await;
        }
        End::HandOff => {
            let _ = app
                .call((Prefixed { head: buf, stream }, Protocol::Http1, client))
                .await;
        }
    }
}

#[cfg(test)]
mod tests;
