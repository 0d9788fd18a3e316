//! The HTTP listener: binds the REST port (TLS when configured), runs
//! actix-web's workers over the route table, and stops them in the drain's
//! order.

use std::any::Any;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::time::Duration;

use actix_service::IntoServiceFactory;
use actix_web::body::MessageBody;
use actix_web::dev::{AppConfig, Extensions, ServerHandle, ServiceFactory, ServiceRequest, ServiceResponse};
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
    // Bound here rather than by actix, so the drain can close them (see [`stop`]).
    let listeners = crate::server::listen::tcp_every(&addr).map_err(bind_error(&addr))?;
    let handles = listeners
        .iter()
        .map(std::net::TcpListener::try_clone)
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(bind_error(&addr))?;
    let tls = settings.tls_files().map(|files| files.rest()).transpose()?;
    if tls.is_none() && front_applies(settings, &state) {
        let (server, public) = serve_front(settings, state, listeners).map_err(bind_error(&addr))?;
        if let Some(rest) = public.last() {
            rest_address(*rest);
        }
        return Ok((server, "http", public, handles));
    }
    let (server, scheme, public) = serve_actix(settings, state, listeners, tls, &addr, rest_address)?;
    Ok((server, scheme, public, handles))
}

fn bind_error(addr: &str) -> impl FnOnce(std::io::Error) -> StartError + use<> {
    let addr = addr.to_string();
    move |source| StartError::Bind { addr, source }
}

/// Whether plain HTTP goes through the front. It answers inference calls
/// past the middleware, so only where the middleware would let them through
/// untouched, and reads no headers but its own, so not where a capture
/// keeps some.
fn front_applies(settings: &Settings, state: &ServerState) -> bool {
    !settings.http.enable_cors
        && state.auth.is_none()
        && settings.http.keep_alive_seconds > 0
        && settings.capture.capture_metadata_headers.is_empty()
}

/// actix-web's `HttpServer` on the listeners, with TLS when given, plus the
/// loopback plain listener the handlers call under TLS. Returns it
/// running, its scheme and its public addresses.
fn serve_actix(
    settings: &Settings,
    state: web::Data<ServerState>,
    listeners: Vec<std::net::TcpListener>,
    tls: Option<rustls::ServerConfig>,
    addr: &str,
    rest_address: impl FnOnce(SocketAddr),
) -> Result<(actix_web::dev::Server, &'static str, Vec<SocketAddr>), StartError> {
    let cors = settings.http.enable_cors;
    let mut server = HttpServer::new(move || app(state.clone(), cors))
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
        .shutdown_timeout(SHUTDOWN_SECONDS);
    for listener in listeners {
        server = match &tls {
            Some(config) => server.listen_rustls_0_23(listener, config.clone()),
            None => server.listen(listener),
        }
        .map_err(bind_error(addr))?;
    }
    let public = server.addrs();
    let scheme = if tls.is_some() { "https" } else { "http" };
    if tls.is_some() {
        server = server.bind("127.0.0.1:0").map_err(bind_error("127.0.0.1:0"))?;
    }
    if let Some(rest) = server.addrs().last() {
        rest_address(*rest);
    }
    Ok((server.run(), scheme, public))
}

/// How long a stop waits for connections still open.
const SHUTDOWN_SECONDS: u64 = 30;

/// The application every REST connection reaches through actix-web: the
/// middleware and the route table.
fn app(
    state: web::Data<ServerState>,
    cors: bool,
) -> App<
    impl ServiceFactory<
        ServiceRequest,
        Config = (),
        Response = ServiceResponse<impl MessageBody>,
        Error = actix_web::Error,
        InitError = (),
    >,
> {
    // Vertex AI's routes first: the contract may name any path, `/v1/...` included.
    let vertex = state.vertex.clone();
    App::new()
        .wrap(actix_web::middleware::from_fn(middleware::gate))
        .wrap(actix_web::middleware::Condition::new(cors, self::cors()))
        .wrap(actix_web::middleware::from_fn(middleware::assign))
        .app_data(state)
        .configure(|cfg| crate::dialects::tfs::vertex::configure(cfg, &vertex))
        .configure(super::configure)
}

/// Plain HTTP with the front (`super::front`) before actix-web on every
/// connection: the server actix-web's `HttpServer` would build, with the
/// same limits and timeouts. Returns it and its addresses.
fn serve_front(
    settings: &Settings,
    state: web::Data<ServerState>,
    listeners: Vec<std::net::TcpListener>,
) -> std::io::Result<(actix_web::dev::Server, Vec<SocketAddr>)> {
    use actix_service::ServiceFactoryExt;
    let http = &settings.http;
    let keep_alive = Duration::from_secs(http.keep_alive_seconds);
    let request_timeout = Duration::from_millis(http.client_request_timeout_ms);
    let mut builder = actix_server::Server::build()
        .workers(http.rest_api_num_threads)
        .max_concurrent_connections(http.max_connections)
        .disable_signals()
        .shutdown_timeout(SHUTDOWN_SECONDS);
    let shutdown = builder.graceful_shutdown_signal();
    let mut addrs = Vec::new();
    for listener in listeners {
        let addr = listener.local_addr()?;
        addrs.push(addr);
        let (state, shutdown) = (state.clone(), shutdown.clone());
        builder = builder.listen(format!("tfserve-rest-{addr}"), listener, move || {
            let signal = shutdown.clone();
            let app = app(state.clone(), false)
                .into_factory()
                .map_err(|error| error.error_response());
            let service = actix_http::HttpService::build()
                .keep_alive(keep_alive)
                .client_request_timeout(request_timeout)
                .client_disconnect_timeout(Duration::from_secs(1))
                .local_addr(addr)
                .graceful_shutdown_signal(move || {
                    let signal = signal.clone();
                    async move { signal.notified().await }
                })
                .on_connect_ext(|io: &_, extensions: _| on_connect(io as &dyn Any, extensions))
                .finish(actix_service::map_config(app, |_| AppConfig::default()))
                .map_err(|_| ());
            let front = super::front::Front {
                state: state.clone(),
                keep_alive,
                request_timeout,
                shutdown: shutdown.clone(),
            };
            super::front::factory(front, service)
        })?;
    }
    Ok((builder.run(), addrs))
}

/// `HttpServer::on_connect` hook.
pub fn on_connect(connection: &dyn Any, extensions: &mut Extensions) {
    type TlsStream = actix_tls::accept::rustls_0_23::TlsStream<actix_web::rt::net::TcpStream>;
    if let Some(stream) = connection.downcast_ref::<super::front::Prefixed>() {
        extensions.insert(PeerSocket::new(stream.socket().as_raw_fd()));
    } else if let Some(stream) = connection.downcast_ref::<actix_web::rt::net::TcpStream>() {
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
