//! The gRPC connections: accepting on TCP (TLS when configured) and on a Unix
//! socket up to the connection cap, serving each on the `h2` crate
//! (`super::connection`), and handing every call straight to its service by
//! the path's service name, behind the basic-auth check. The connection
//! options (keepalive, concurrent streams, connection age and idle time) are
//! tonic's and gRPC's, with one difference from tonic: at the maximum age a
//! connection first gets GOAWAY and only after the grace period is it
//! closed, as gRPC's own servers do.

use std::convert::Infallible;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::watch;
use tonic::body::Body;
use tonic::codegen::http::{Request, Response};
use tonic::codegen::BoxFuture;
use tonic::server::NamedService;
use tonic::transport::server::TcpConnectInfo;
use tonic::Status;

use super::connection::RecvBody;
use super::health::HealthService;
use crate::arrival::{LastArrival, Stamped};
use crate::dialects::kserve::grpc::InferenceApi;
use crate::dialects::tfs_grpc::{ModelApi, PredictionApi};
use crate::error::ApiError;
use crate::proto::inference::grpc_inference_service_server::GrpcInferenceServiceServer;
use crate::proto::tensorflow::serving::model_service_server::ModelServiceServer;
use crate::proto::tensorflow::serving::prediction_service_server::PredictionServiceServer;
use crate::server::ServerState;
use tonic_health::pb::health_server::HealthServer;

const PREDICTION: &str = <PredictionServiceServer<PredictionApi> as NamedService>::NAME;
const MODEL: &str = <ModelServiceServer<ModelApi> as NamedService>::NAME;
const INFERENCE: &str = <GrpcInferenceServiceServer<InferenceApi> as NamedService>::NAME;
const HEALTH: &str = <HealthServer<HealthService> as NamedService>::NAME;
/// A TLS handshake longer than this gives up the connection, so a silent
/// client cannot hold one open.
const TLS_HANDSHAKE: Duration = Duration::from_secs(10);

/// A service whose type cannot be named (reflection's), boxed: its calls are rare.
pub type BoxedService = tower::util::BoxCloneSyncService<Request<RecvBody>, Response<Body>, Infallible>;

/// Every service the listener answers, as a connection's own copy.
#[derive(Clone)]
pub struct Services {
    pub state: Arc<ServerState>,
    /// Predict's own handler, which connections call on decoded messages.
    pub predict: Option<Arc<PredictionApi>>,
    /// The message sizes Predict takes and answers (tonic's limits).
    pub receive_limit: usize,
    pub send_limit: usize,
    pub prediction: PredictionServiceServer<PredictionApi>,
    pub model: ModelServiceServer<ModelApi>,
    pub inference: GrpcInferenceServiceServer<InferenceApi>,
    pub health: HealthServer<HealthService>,
    /// By service name: the server reflection services.
    pub others: Vec<(&'static str, BoxedService)>,
}

impl Services {
    pub fn route(&mut self, request: Request<RecvBody>) -> BoxFuture<Response<Body>, Infallible> {
        use tower::Service;
        // The generated services are always ready (`poll_ready` answers Ready),
        // so calls go straight in.
        let service = request
            .uri()
            .path()
            .strip_prefix('/')
            .and_then(|path| path.split_once('/'))
            .map_or("", |(service, _)| service);
        if service == HEALTH {
            return self.health.call(request);
        }
        if let Some(auth) = self.state.auth.as_ref() {
            let header = request.headers().get("authorization").and_then(|v| v.to_str().ok());
            if !auth.allows_header(header) {
                return answer(Status::unauthenticated(ApiError::Unauthorized.to_string()));
            }
        }
        match service {
            PREDICTION => self.prediction.call(request),
            INFERENCE => self.inference.call(request),
            MODEL => self.model.call(request),
            _ => match self.others.iter_mut().find(|(name, _)| *name == service) {
                Some((_, other)) => Box::pin(other.call(request)),
                None => answer(Status::unimplemented("")),
            },
        }
    }
}

/// A response carrying only a status, as gRPC's servers send for calls
/// they do not get to run.
fn answer(status: Status) -> BoxFuture<Response<Body>, Infallible> {
    let (parts, ()) = status.into_http::<()>().into_parts();
    Box::pin(std::future::ready(Ok(Response::from_parts(parts, Body::empty()))))
}

/// Each stream's receive window: a whole small request arrives without
/// waiting for a WINDOW_UPDATE.
const STREAM_WINDOW: u32 = 1 << 20;
/// The connection's receive window, shared by its streams.
const CONNECTION_WINDOW: u32 = 2 << 20;
/// The header list a request may carry (names, values and 32 bytes each).
const MAX_HEADER_LIST: u32 = 16 << 10;
/// The concurrent streams a client may open unless told otherwise.
const DEFAULT_MAX_STREAMS: u32 = 200;
/// Streams the client reset before they were accepted, held at once: more
/// is the rapid-reset attack, answered with GOAWAY ENHANCE_YOUR_CALM.
const MAX_PENDING_ACCEPT_RESETS: usize = 20;
/// Stream errors the server may answer on one connection before it sends
/// the client away (hyper's bound).
const MAX_LOCAL_ERROR_RESETS: usize = 1024;
/// Answer bytes the `h2` crate holds for one stream beyond what its window
/// takes; the rest waits in the call, counted against the pending budget.
const MAX_SEND_BUFFER: usize = 400 << 10;

/// How connections are served: HTTP/2 limits, keepalive pings, age, idle
/// time and the bounds on what one client may hold.
pub struct ConnectionOptions {
    /// A PING this often; unanswered for `keepalive_timeout`, the connection closes.
    pub keepalive: Option<Duration>,
    /// Also how long an answer may wait for a client's window before its stream is reset.
    pub keepalive_timeout: Duration,
    pub max_concurrent_streams: Option<u32>,
    /// After this long a connection gets GOAWAY, then `grace` to finish its calls.
    pub max_age: Option<Duration>,
    pub grace: Option<Duration>,
    /// A connection with no call open for this long gets GOAWAY.
    pub idle_timeout: Option<Duration>,
    /// The client's HTTP/2 preface must arrive within this (after TLS).
    pub handshake_timeout: Duration,
    /// Answer bytes one connection may hold for a client that does not open
    /// its window; an answer beyond it is refused (RESOURCE_EXHAUSTED).
    pub max_pending_answer_bytes: usize,
    /// Connections served at once; more are closed as they are accepted.
    pub max_connections: usize,
    /// What the server's drain leaves calls still open to finish (a health
    /// `Watch` never does) before they are reset.
    pub drain_grace: Duration,
}

impl ConnectionOptions {
    pub fn new(
        keepalive: Option<Duration>,
        keepalive_timeout: Option<Duration>,
        max_concurrent_streams: Option<u32>,
    ) -> ConnectionOptions {
        ConnectionOptions {
            keepalive,
            // tonic's default: a ping unanswered for 20 s closes the connection.
            keepalive_timeout: keepalive_timeout.unwrap_or(Duration::from_secs(20)),
            max_concurrent_streams,
            max_age: None,
            grace: None,
            idle_timeout: None,
            handshake_timeout: Duration::from_secs(10),
            max_pending_answer_bytes: 16 << 20,
            max_connections: usize::MAX,
            drain_grace: Duration::from_secs(30),
        }
    }

    /// The `h2` server's settings, every limit named rather than left to its defaults.
    pub fn http2(&self) -> h2::server::Builder {
        let mut builder = h2::server::Builder::new();
        builder
            .initial_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .max_header_list_size(MAX_HEADER_LIST)
            .max_concurrent_streams(self.max_concurrent_streams.unwrap_or(DEFAULT_MAX_STREAMS))
            .max_pending_accept_reset_streams(MAX_PENDING_ACCEPT_RESETS)
            .max_local_error_reset_streams(Some(MAX_LOCAL_ERROR_RESETS))
            .max_send_buffer_size(MAX_SEND_BUFFER);
        builder
    }
}

/// Where connections come from.
pub enum Listener {
    Tcp {
        listener: TcpListener,
        tls: Option<tokio_rustls::TlsAcceptor>,
    },
    Unix(UnixListener),
}

/// Accepts and serves connections until `closing` ends, then stops accepting
/// (closing the socket), sends every connection GOAWAY and returns once
/// their calls have been answered and they have closed.
/// Each connection is a task of the runtime this runs on.
// Kept whole: the accept loop and the drain share the listener and the set of live connections.
pub async fn serve(
    listener: Listener,
    services: Services,
    options: Arc<ConnectionOptions>,
    closing: impl Future<Output = ()>,
) {
    let (shutdown, connections) = watch::channel(false);
    let cap = Arc::new(tokio::sync::Semaphore::new(
        options.max_connections.min(tokio::sync::Semaphore::MAX_PERMITS),
    ));
    let log_peers = services.state.access_log.enabled();
    let (mut refused, mut warned) = (0u64, None);
    {
        let mut closing = pin!(closing);
        loop {
            let accepted = tokio::select! {
                () = &mut closing => break,
                accepted = accept(&listener) => accepted,
            };
            let (stream, peer) = match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    pause_after(&error).await;
                    continue;
                }
            };
            let Ok(permit) = cap.clone().try_acquire_owned() else {
                // Closed at once: gRPC clients retry with backoff. Said once
                // a minute at most, with the count, however many come.
                refused += 1;
                if warned.is_none_or(|at: std::time::Instant| at.elapsed() >= Duration::from_secs(60)) {
                    log::warn!(
                        "gRPC connections refused: {refused} so far, as {} are open (--grpc_max_connections)",
                        options.max_connections
                    );
                    warned = Some(std::time::Instant::now());
                }
                continue;
            };
            let accepted = Accepted {
                services: services.clone(),
                peer: peer.filter(|_| log_peers),
                options: options.clone(),
                shutdown: connections.clone(),
                permit,
            };
            match stream {
                // Under a latency objective a connection reads through the
                // stamping stream; any other keeps Tokio's as it is.
                Stream::Tcp(stream, tls) if crate::batcher::any_steered() => match Stamped::new(stream) {
                    Ok((stamped, arrivals)) => tokio::spawn(accepted.serve(stamped, tls, Some(arrivals))),
                    Err(stream) => tokio::spawn(accepted.serve(stream, tls, None)),
                },
                Stream::Tcp(stream, tls) => tokio::spawn(accepted.serve(stream, tls, None)),
                Stream::Unix(stream) => tokio::spawn(accepted.serve(stream, None, None)),
            };
        }
    }
    // The listener is closed here: new clients are refused, not left waiting.
    drop(listener);
    let _ = shutdown.send(true);
    drop(connections);
    shutdown.closed().await;
}

/// A connection let in under the cap, with what serving it takes.
struct Accepted {
    services: Services,
    peer: Option<TcpConnectInfo>,
    options: Arc<ConnectionOptions>,
    shutdown: watch::Receiver<bool>,
    permit: tokio::sync::OwnedSemaphorePermit,
}

impl Accepted {
    /// Serves the connection (after its TLS handshake, with `tls`) until it
    /// closes, then frees its place under the cap.
    async fn serve<IO>(self, io: IO, tls: Option<tokio_rustls::TlsAcceptor>, arrivals: Option<Arc<LastArrival>>)
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let Accepted {
            services,
            peer,
            options,
            shutdown,
            permit,
        } = self;
        match tls {
            None => serve_connection(io, services, peer, options, shutdown, arrivals).await,
            Some(tls) => match tokio::time::timeout(TLS_HANDSHAKE, tls.accept(io)).await {
                Ok(Ok(io)) => serve_connection(io, services, peer, options, shutdown, arrivals).await,
                Ok(Err(error)) => log::debug!("gRPC TLS handshake failed: {error}"),
                Err(_) => log::debug!("gRPC TLS handshake took over {TLS_HANDSHAKE:?}"),
            },
        }
        drop(permit);
    }
}

enum Stream {
    Tcp(tokio::net::TcpStream, Option<tokio_rustls::TlsAcceptor>),
    Unix(tokio::net::UnixStream),
}

async fn accept(listener: &Listener) -> std::io::Result<(Stream, Option<TcpConnectInfo>)> {
    match listener {
        Listener::Tcp { listener, tls } => {
            let (stream, remote) = listener.accept().await?;
            // Small answers go out at once, not after the peer's delayed ACK.
            stream.set_nodelay(true)?;
            let info = TcpConnectInfo {
                local_addr: stream.local_addr().ok(),
                remote_addr: Some(remote),
            };
            Ok((Stream::Tcp(stream, tls.clone()), Some(info)))
        }
        Listener::Unix(listener) => Ok((Stream::Unix(listener.accept().await?.0), None)),
    }
}

/// After a failed accept: out of file descriptors (or memory) would fail again
/// at once, so wait a little; a connection reset before it was accepted does not.
async fn pause_after(error: &std::io::Error) {
    use std::io::ErrorKind;
    if matches!(
        error.kind(),
        ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset | ErrorKind::Interrupted
    ) {
        return;
    }
    log::warn!("gRPC listener: accepting a connection failed: {error}");
    tokio::time::sleep(Duration::from_millis(50)).await;
}

/// Serves one connection until it closes, GOAWAY when the server drains or
/// the connection reaches its age, closing it when the grace after that ends.
pub async fn serve_connection<IO>(
    io: IO,
    services: Services,
    peer: Option<TcpConnectInfo>,
    options: Arc<ConnectionOptions>,
    shutdown: watch::Receiver<bool>,
    arrivals: Option<Arc<LastArrival>>,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    super::connection::serve(io, services, peer, options, shutdown, arrivals).await;
}
