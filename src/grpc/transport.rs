//! The gRPC connections: accepting on TCP (TLS when configured) and on a Unix
//! socket, serving each with the listener's own HTTP/2 (`super::h2`), and
//! handing every call straight to its service by the path's service name,
//! behind the basic-auth check. The connection options (keepalive,
//! concurrent streams, connection age) are tonic's and gRPC's, with one
//! difference from tonic: at the maximum age a connection first gets GOAWAY
//! and only after the grace period is it closed, as gRPC's own servers do.

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

use super::h2::RecvBody;
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
pub type BoxedService = tower::util::BoxCloneService<Request<RecvBody>, Response<Body>, Infallible>;

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

/// How connections are served: keepalive pings, concurrent streams and age.
pub struct ConnectionOptions {
    /// A PING after this long without a frame from the client.
    pub keepalive: Option<Duration>,
    /// An unanswered keepalive PING closes the connection after this long.
    pub keepalive_timeout: Duration,
    pub max_concurrent_streams: Option<u32>,
    /// After this long a connection gets GOAWAY, then `grace` to finish its calls.
    pub max_age: Option<Duration>,
    pub grace: Option<Duration>,
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
            drain_grace: Duration::from_secs(30),
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
/// Connections go to `threads` in turn, each served on that runtime.
pub async fn serve(
    listener: Listener,
    services: Services,
    options: Arc<ConnectionOptions>,
    closing: impl Future<Output = ()>,
    threads: Arc<[tokio::runtime::Handle]>,
) {
    let mut turn = 0usize;
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
            let thread = &threads[turn % threads.len()];
            turn = turn.wrapping_add(1);
            match stream {
                Stream::Tcp(stream, None) => {
                    thread.spawn(serve_connection(stream, services, peer, options, connections));
                }
                Stream::Tcp(stream, Some(tls)) => {
                    thread.spawn(async move {
                        match tokio::time::timeout(TLS_HANDSHAKE, tls.accept(stream)).await {
                            Ok(Ok(stream)) => serve_connection(stream, services, peer, options, connections).await,
                            Ok(Err(error)) => log::debug!("gRPC TLS handshake failed: {error}"),
                            Err(_) => log::debug!("gRPC TLS handshake took over {TLS_HANDSHAKE:?}"),
                        }
                    });
                }
                Stream::Unix(stream) => {
                    thread.spawn(serve_connection(stream, services, None, options, connections));
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
    shutdown: watch::Receiver<bool>,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    super::h2::serve(io, services, peer, options, shutdown).await;
}
