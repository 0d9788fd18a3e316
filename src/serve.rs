//! The server put together: the core, then gRPC and HTTP over it
//! ([`start`]), and the whole life of the process from start-up to a
//! drained shutdown ([`run`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use actix_web::web;

use crate::batcher::Batcher;
use crate::runtime::Loader;
use crate::server::{build_service, ServerState, StartError};
use crate::settings::Settings;
use crate::{grpc, http};

/// A started server: its address and the future that runs it until shutdown.
/// Dropping it after the server stops drains the batch queues.
pub struct Running {
    pub addrs: Vec<SocketAddr>,
    pub server: actix_web::dev::Server,
    /// The public listening sockets (duplicates of the server's), which the
    /// drain closes to refuse new connections.
    pub listeners: Vec<std::net::TcpListener>,
    pub batcher: Arc<Batcher>,
    /// What the handlers share: the service (registry, handlers) and limits.
    pub state: web::Data<ServerState>,
    /// The gRPC listener, which closes when the drain does.
    pub grpc: Option<grpc::GrpcServer>,
}

impl Running {
    /// The gRPC listener's address.
    pub fn grpc_addr(&self) -> Option<SocketAddr> {
        self.grpc.as_ref().map(|g| g.addr)
    }
}

/// Loads the models on TensorFlow, binds the ports and returns the server,
/// not yet awaited. Must be called inside an actix (tokio) runtime.
#[cfg(feature = "tensorflow")]
pub fn start(settings: &Settings) -> Result<Running, StartError> {
    start_with(settings, crate::server::start::tensorflow_loader(settings)?)
}

/// [`start`] on any runtime.
pub fn start_with(settings: &Settings, loader: Arc<dyn Loader>) -> Result<Running, StartError> {
    let started = Instant::now();
    // Once, so an operator sees what every layer merged to (passwords print as ***).
    log::info!("effective settings:\n{}", settings.summary());
    let (service, batcher) = build_service(settings, loader)?;
    let handlers = service.handlers().clone();
    let security = &settings.security;
    let credentials = match (security.enable_auth, &security.auth_username, &security.auth_password) {
        (true, Some(user), Some(password)) => Some((user.as_str(), password.0.as_str())),
        _ => None,
    };
    let state = web::Data::new(ServerState::new(settings, service)?);
    crate::server::memory::spawn_idle_release(&state.clone().into_inner()).map_err(StartError::Threads)?;
    let grpc = grpc::start(settings, state.clone().into_inner())?;
    handlers.set_grpc_address(grpc.addr);
    let (server, scheme, public, listeners) = http::serve(settings, state.clone(), |rest| {
        handlers.set_rest_address(rest, credentials);
    })?;
    let (serving, idle) = serving_and_idle(&state.service.models());
    log::info!(
        "serving {} model(s) [{}]{} on {} and gRPC on {} (ready in {:.0} ms)",
        serving.len(),
        serving.join(", "),
        if idle.is_empty() {
            String::new()
        } else {
            format!(" (no version serving yet: {})", idle.join(", "))
        },
        public
            .iter()
            .map(|a| format!("{scheme}://{a}"))
            .collect::<Vec<_>>()
            .join(", "),
        grpc.addr,
        started.elapsed().as_secs_f64() * 1000.0
    );
    Ok(Running {
        addrs: public,
        server,
        listeners,
        batcher,
        state,
        grpc: Some(grpc),
    })
}

/// Serves until SIGTERM or SIGINT, then shuts down in order: the drain
/// (readiness fails, connections close after their answer) for
/// `--drain_timeout`, HTTP stops accepting and refuses new connections,
/// gRPC closes, requests in flight are answered, and queued batches run
/// before the batch threads end. Returns once all of that is done.
#[cfg(feature = "tensorflow")]
pub fn run(settings: &Settings) -> Result<(), StartError> {
    // Before any thread of the server starts: each inherits the rules.
    crate::confine::confine(settings).map_err(StartError::Confine)?;
    let mut grpc = None;
    let mut batcher = None;
    let mut capture = None;
    let result = actix_web::rt::System::new().block_on(async {
        let mut running = start(settings)?;
        grpc = running.grpc.take();
        batcher = Some(running.batcher.clone());
        capture = Some(running.state.service.capture().clone());
        let drain_timeout = std::time::Duration::from_secs_f64(settings.http.drain_timeout);
        let listeners = std::mem::take(&mut running.listeners);
        let handle = running.server.handle();
        let state = running.state.clone();
        actix_web::rt::spawn(async move {
            if crate::server::drain::wait_for_signal(&state.drain, drain_timeout).await
                == crate::server::drain::Stop::Unwatchable
            {
                return;
            }
            http::stop(handle, &listeners, &state).await;
        });
        let served = running.server.await.map_err(|source| StartError::Bind {
            addr: "server".into(),
            source,
        });
        // However HTTP ended, gRPC follows; its calls in flight still finish.
        running.state.drain.close();
        served
    });
    if let Some(grpc) = grpc {
        grpc.wait();
    }
    // Batches already queued run to the end before the process goes.
    if let Some(batcher) = batcher {
        batcher.shutdown();
    }
    // Then every captured record still queued is written out, for at most
    // --capture_flush_seconds; what is left is counted and logged.
    if let Some(capture) = capture {
        let limit = std::time::Duration::from_secs_f64(settings.capture.capture_flush_seconds);
        if !capture.flush(limit) {
            log::warn!(
                "capture: the capture writer did not finish within {limit:?}; records still queued were not written"
            );
        }
    }
    result
}

/// The models with a version available, and the others (nothing to load
/// yet, or every version failed): the start line counts only the first.
fn serving_and_idle(models: &[crate::registry::ModelInfo]) -> (Vec<String>, Vec<String>) {
    let available = |m: &&crate::registry::ModelInfo| {
        m.versions
            .iter()
            .any(|v| v.state == crate::registry::VersionState::Available)
    };
    let (serving, idle): (Vec<_>, Vec<_>) = models.iter().partition(available);
    let names = |list: Vec<&crate::registry::ModelInfo>| list.into_iter().map(|m| m.name.clone()).collect();
    (names(serving), names(idle))
}
