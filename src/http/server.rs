//! The HTTP listener: binds the REST port (TLS when configured), runs
//! actix-web's workers over the route table, and stops them in the drain's
//! order.

use std::any::Any;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::time::Duration;

use actix_web::dev::{Extensions, ServerHandle};
use actix_web::{web, App, HttpServer};

use super::middleware;
use crate::call::http::PeerSocket;
use crate::server::{ServerState, StartError};
use crate::settings::Settings;

/// The running server, its scheme, its public addresses, and handles on its
/// listening sockets.
type Served = (
    actix_web::dev::Server,
    &'static str,
    Vec<SocketAddr>,
    Vec<std::net::TcpListener>,
);

/// Binds the HTTP server and starts it: its port (HTTPS only, with TLS on),
/// and the address handlers' `context.rest_uri` calls (told to `rest_address`
/// before any request is taken). Under TLS that is a loopback-only plain
/// HTTP listener of its own; auth, when on, still applies. Returns the
/// server, its scheme and its public addresses.
pub fn serve(
    settings: &Settings,
    state: web::Data<ServerState>,
    rest_address: impl FnOnce(SocketAddr),
) -> Result<Served, StartError> {
    let addr = format!("{}:{}", settings.http.host, settings.http_port());
    let cors = settings.http.enable_cors;
    let server = HttpServer::new(move || {
        App::new()
            .wrap(actix_web::middleware::from_fn(middleware::gate))
            .wrap(actix_web::middleware::Condition::new(cors, self::cors()))
            .wrap(actix_web::middleware::from_fn(middleware::assign))
            .app_data(state.clone())
            .configure(super::configure)
    })
    .on_connect(on_connect)
    .workers(settings.http.rest_api_num_threads)
    .client_request_timeout(Duration::from_millis(settings.http.client_request_timeout_ms))
    .keep_alive(match settings.http.keep_alive_seconds {
        0 => actix_web::http::KeepAlive::Disabled,
        seconds => actix_web::http::KeepAlive::Timeout(Duration::from_secs(seconds)),
    })
    .max_connections(settings.http.max_connections)
    // Signals are the caller's: `crate::serve::run` drains first.
    .disable_signals()
    .shutdown_timeout(30);
    let bind_error = |addr: &str| {
        let addr = addr.to_string();
        move |source| StartError::Bind { addr, source }
    };
    // Bound here rather than by actix, so the drain can close them (see [`stop`]).
    let listeners = bind_listeners(&addr).map_err(bind_error(&addr))?;
    let handles = listeners
        .iter()
        .map(std::net::TcpListener::try_clone)
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(bind_error(&addr))?;
    let tls = settings.tls_files().map(|files| files.rest()).transpose()?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let mut server = server;
    for listener in listeners {
        server = match &tls {
            Some(config) => server.listen_rustls_0_23(listener, config.clone()),
            None => server.listen(listener),
        }
        .map_err(bind_error(&addr))?;
    }
    let public = server.addrs();
    let server = if scheme == "https" {
        server.bind("127.0.0.1:0").map_err(bind_error("127.0.0.1:0"))?
    } else {
        server
    };
    if let Some(rest) = server.addrs().last() {
        rest_address(*rest);
    }
    Ok((server.run(), scheme, public, handles))
}

/// A listening socket on every address `addr` resolves to.
fn bind_listeners(addr: &str) -> std::io::Result<Vec<std::net::TcpListener>> {
    use std::net::ToSocketAddrs;
    let mut listeners = Vec::new();
    let mut last_error = None;
    for resolved in addr.to_socket_addrs()? {
        match std::net::TcpListener::bind(resolved) {
            Ok(listener) => listeners.push(listener),
            Err(error) => last_error = Some(error),
        }
    }
    match (listeners.is_empty(), last_error) {
        (true, Some(error)) => Err(error),
        (true, None) => Err(std::io::Error::new(
            std::io::ErrorKind::AddrNotAvailable,
            "the address resolves to nothing",
        )),
        (false, _) => Ok(listeners),
    }
}
/// `HttpServer::on_connect` hook.
pub fn on_connect(connection: &dyn Any, extensions: &mut Extensions) {
    type TlsStream = actix_tls::accept::rustls_0_23::TlsStream<actix_web::rt::net::TcpStream>;
    if let Some(stream) = connection.downcast_ref::<actix_web::rt::net::TcpStream>() {
        extensions.insert(PeerSocket::new(stream.as_raw_fd()));
    } else if let Some(stream) = connection.downcast_ref::<TlsStream>() {
        // Peeking the TCP socket under TLS still tells a close from bytes waiting.
        extensions.insert(PeerSocket::new(stream.get_ref().0.as_raw_fd()));
    }
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

/// The end of the drain for HTTP: stop accepting, then refuse new connections
/// at once, and let every connection already accepted get its answer:
/// actix's stop drops connections accepted but not yet picked up by a
/// worker, whose requests would be lost. (A handshake the kernel completes
/// between the pause and the refusal sits in its accept queue and is reset:
/// TCP has no way to refuse it. Refusing first is worse: actix lags behind
/// the queue.) gRPC closes with the drain.
pub async fn stop(server: ServerHandle, listeners: &[std::net::TcpListener], state: &ServerState) {
    server.pause().await;
    state.drain.close();
    crate::logging::listeners_shut();
    refuse_connections(listeners);
    crate::server::drain::settle(&state.in_flight).await;
    log::info!("closing the listener; requests in flight finish");
    server.stop(true).await;
}

/// Stops the listening sockets: new connections are refused (RST) instead of
/// waiting in the kernel's accept queue for a server that will not accept them.
fn refuse_connections(listeners: &[std::net::TcpListener]) {
    use std::os::fd::AsRawFd;
    for listener in listeners {
        // SAFETY: shutdown(2) on a descriptor this process owns; it changes
        // the socket's state only, and the descriptor stays valid.
        let result = unsafe { libc::shutdown(listener.as_raw_fd(), libc::SHUT_RD) };
        if result != 0 {
            log::warn!(
                "cannot stop listening on {:?}: {}",
                listener.local_addr().ok(),
                std::io::Error::last_os_error()
            );
        }
    }
}
