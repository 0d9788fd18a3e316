//! The gRPC connections: accepting on TCP (TLS when configured) and on a Unix
//! socket up to the connection cap, each served on the `h2` crate
//! (`super::connection`), whose calls go to `super::services`. The
//! connection options (keepalive, concurrent streams, connection age and
//! idle time) are tonic's and gRPC's, with one difference from tonic: at the
//! maximum age a connection first gets GOAWAY and only after the grace
//! period is it closed, as gRPC's own servers do.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::watch;
use tonic::transport::server::TcpConnectInfo;

use super::connection::{self, ConnectionOptions};
use super::services::Services;
use crate::arrival::{LastArrival, Stamped};

/// A TLS handshake longer than this gives up the connection, so a silent
/// client cannot hold one open.
const TLS_HANDSHAKE: Duration = Duration::from_secs(10);

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
                Stream::Tcp(stream, tls) if services.state.service.any_steered() => match Stamped::new(stream) {
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
            None => connection::serve(io, services, peer, options, shutdown, arrivals).await,
            Some(tls) => match tokio::time::timeout(TLS_HANDSHAKE, tls.accept(io)).await {
                Ok(Ok(io)) => connection::serve(io, services, peer, options, shutdown, arrivals).await,
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
