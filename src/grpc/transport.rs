//! The gRPC connections: accepting on TCP (TLS when configured) and on a Unix
//! socket, serving each with hyper's HTTP/2 server, and handing every call
//! straight to its service by the path's service name, behind the basic-auth
//! check. The connection options (keepalive, concurrent streams, connection
//! age) are tonic's and gRPC's, with one difference from tonic: at the
//! maximum age a connection first gets GOAWAY and only after the grace period
//! is it closed, as gRPC's own servers do.
//!
//! Owning the connections here, instead of through tonic's server, leaves out
//! the layers each call went through there (a boxed service clone, URL
//! routing, a timeout wrapper that our deadline handling makes redundant, a
//! map of extensions): a sixth of a small Predict call's instructions.

use std::cell::RefCell;
use std::convert::Infallible;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::watch;
use tonic::body::Body;
use tonic::codegen::http::{Request, Response};
use tonic::codegen::BoxFuture;
use tonic::server::NamedService;
use tonic::transport::server::TcpConnectInfo;
use tonic::Status;

use super::health::HealthService;
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
pub type BoxedService = tower::util::BoxCloneService<Request<Incoming>, Response<Body>, Infallible>;

/// Every service the listener answers, as a connection's own copy.
#[derive(Clone)]
pub struct Services {
    pub state: Arc<ServerState>,
    pub prediction: PredictionServiceServer<PredictionApi>,
    pub model: ModelServiceServer<ModelApi>,
    pub inference: GrpcInferenceServiceServer<InferenceApi>,
    pub health: HealthServer<HealthService>,
    /// By service name: the server reflection services.
    pub others: Vec<(&'static str, BoxedService)>,
}

impl Services {
    fn route(&mut self, request: Request<Incoming>) -> BoxFuture<Response<Body>, Infallible> {
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

/// One connection's services. hyper calls them from the connection's own
/// task, one call at a time, so the copy needs no lock and no clone per call.
struct Connection {
    services: RefCell<Services>,
    /// The peer, for calls that log it; `None` on Unix sockets and when
    /// nothing logs peers (no access log), which spares an allocation per call.
    peer: Option<TcpConnectInfo>,
}

impl hyper::service::Service<Request<Incoming>> for Connection {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Response<Body>, Infallible>;

    fn call(&self, mut request: Request<Incoming>) -> Self::Future {
        if let Some(peer) = &self.peer {
            request.extensions_mut().insert(peer.clone());
        }
        match self.services.try_borrow_mut() {
            Ok(mut services) => services.route(request),
            Err(_) => answer(Status::internal("the connection's services are busy")),
        }
    }
}

/// How connections are served: HTTP/2 settings and the connection age.
pub struct ConnectionOptions {
    pub http2: hyper::server::conn::http2::Builder<TokioExecutor>,
    /// After this long a connection gets GOAWAY, then `grace` to finish its calls.
    pub max_age: Option<Duration>,
    pub grace: Option<Duration>,
}

impl ConnectionOptions {
    pub fn new(
        keepalive: Option<Duration>,
        keepalive_timeout: Option<Duration>,
        max_concurrent_streams: Option<u32>,
    ) -> ConnectionOptions {
        let mut http2 = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
        http2
            .timer(TokioTimer::new())
            .keep_alive_interval(keepalive)
            // tonic's default: a ping unanswered for 20 s closes the connection.
            .keep_alive_timeout(keepalive_timeout.unwrap_or(Duration::from_secs(20)))
            .max_concurrent_streams(max_concurrent_streams);
        ConnectionOptions {
            http2,
            max_age: None,
            grace: None,
        }
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
pub async fn serve(
    listener: Listener,
    services: Services,
    options: Arc<ConnectionOptions>,
    closing: impl Future<Output = ()>,
) {
    let (shutdown, connections) = watch::channel(false);
    let log_peers = services.state.access_log.enabled();
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
            let peer = peer.filter(|_| log_peers);
            let services = services.clone();
            let options = options.clone();
            let connections = connections.clone();
            match stream {
                Stream::Tcp(stream, None) => {
                    tokio::spawn(serve_connection(stream, services, peer, options, connections));
                }
                Stream::Tcp(stream, Some(tls)) => {
                    tokio::spawn(async move {
                        match tokio::time::timeout(TLS_HANDSHAKE, tls.accept(stream)).await {
                            Ok(Ok(stream)) => serve_connection(stream, services, peer, options, connections).await,
                            Ok(Err(error)) => log::debug!("gRPC TLS handshake failed: {error}"),
                            Err(_) => log::debug!("gRPC TLS handshake took over {TLS_HANDSHAKE:?}"),
                        }
                    });
                }
                Stream::Unix(stream) => {
                    tokio::spawn(serve_connection(stream, services, None, options, connections));
                }
            }
        }
    }
    // The listener is closed here: new clients are refused, not left waiting.
    drop(listener);
    let _ = shutdown.send(true);
    drop(connections);
    shutdown.closed().await;
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
    mut shutdown: watch::Receiver<bool>,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let connection = Connection {
        services: RefCell::new(services),
        peer,
    };
    let mut served = pin!(options.http2.serve_connection(TokioIo::new(io), connection));
    let mut aging = pin!(age(options.max_age));
    let mut grace = pin!(age(None));
    let mut going_away = false;
    loop {
        tokio::select! {
            result = &mut served => {
                if let Err(error) = result {
                    log::debug!("gRPC connection: {error}");
                }
                return;
            }
            () = &mut aging, if !going_away => {
                served.as_mut().graceful_shutdown();
                grace.set(age(options.grace));
                going_away = true;
            }
            changed = shutdown.wait_for(|closing| *closing), if !going_away => {
                served.as_mut().graceful_shutdown();
                going_away = true;
                if changed.is_err() {
                    return;
                }
            }
            () = &mut grace => {
                log::debug!("gRPC connection closed at the end of its grace period");
                return;
            }
        }
    }
}

/// Ends after `limit`, never without one.
async fn age(limit: Option<Duration>) {
    match limit {
        Some(limit) => tokio::time::sleep(limit).await,
        None => std::future::pending().await,
    }
}
