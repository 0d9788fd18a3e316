//! The gRPC listener: tonic's services on threads of their own beside actix,
//! serving TF Serving's and the Open Inference Protocol's services over the
//! same state (service core, registry, auth, in-flight bound, drain), plus
//! `grpc.health.v1.Health` and server reflection (v1 and v1alpha).

pub mod body;
pub mod channel_args;
mod connection;
mod health;
mod services;
mod transport;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use health::ServingStatus;
use tonic::codec::CompressionEncoding;

use crate::dialects::kserve::grpc::InferenceApi;
use crate::dialects::tfs_grpc::{ModelApi, PredictionApi};
use crate::proto::inference::grpc_inference_service_server::GrpcInferenceServiceServer;
use crate::proto::tensorflow::serving::model_service_server::ModelServiceServer;
use crate::proto::tensorflow::serving::prediction_service_server::PredictionServiceServer;
use crate::server::{ServerState, StartError};
use crate::settings::Settings;
use channel_args::ChannelArguments;

/// The services health answers for by name (besides the overall "").
const SERVICES: [&str; 3] = [
    "tensorflow.serving.PredictionService",
    "tensorflow.serving.ModelService",
    "inference.GRPCInferenceService",
];

/// A running gRPC listener: a runtime of `--grpc_num_threads` threads, where
/// each connection is one task (its calls run inside it) that an idle
/// thread may take over, so one busy connection slows no other.
pub struct GrpcServer {
    pub addr: SocketAddr,
    threads: Vec<std::thread::JoinHandle<()>>,
    /// Stops every thread at once when the server is dropped unwaited.
    stop: tokio::sync::watch::Sender<bool>,
}

impl GrpcServer {
    /// Blocks until the listener has shut down (after the drain closes it)
    /// and every call in flight has been answered. Call outside any runtime.
    pub fn wait(mut self) {
        for thread in std::mem::take(&mut self.threads) {
            if thread.join().is_err() {
                log::error!("a gRPC thread panicked");
            }
        }
    }
}

impl Drop for GrpcServer {
    /// Dropped without `wait` (tests, batch transform), possibly inside
    /// another runtime: the threads stop in the background.
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// Binds `--port` and starts serving; the listener closes when the drain does.
pub fn start(settings: &Settings, state: Arc<ServerState>) -> Result<GrpcServer, StartError> {
    let addr = format!("{}:{}", settings.http.host, settings.grpc_port());
    let bind_error = |source| StartError::Bind {
        addr: addr.clone(),
        source,
    };
    let listener = crate::server::listen::tcp_first(&addr).map_err(bind_error)?;
    listener.set_nonblocking(true).map_err(bind_error)?;
    let local = listener.local_addr().map_err(bind_error)?;
    let tls = tls_acceptor(settings)?;
    let channel_args = channel_arguments(settings)?;
    let unix = match &settings.grpc.grpc_socket_path {
        Some(path) => {
            let listener = unix_listener(path)?;
            log::info!("gRPC also on Unix socket {}", path.display());
            Some(listener)
        }
        None => None,
    };
    let health = health::HealthService::new();
    let services = services(&state, &health, settings.grpc.grpc_max_message_bytes, &channel_args)?;
    let options = Arc::new(connection_options(settings, &channel_args));
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(settings.grpc.grpc_num_threads.max(1))
        .thread_name("tfserve-grpc")
        .enable_all()
        .build()
        .map_err(StartError::Threads)?;
    let sockets = Sockets { listener, tls, unix };
    let (started, starts) = std::sync::mpsc::channel();
    let work = Work {
        sockets,
        services,
        options,
        state,
        health,
        stopping,
    };
    let thread = std::thread::Builder::new()
        .name("tfserve-grpc-accept".into())
        .spawn(move || serve_listeners(runtime, work, started))
        .map_err(StartError::Threads)?;
    let grpc = GrpcServer {
        addr: local,
        threads: vec![thread],
        stop,
    };
    match starts.recv() {
        Ok(Ok(())) => Ok(grpc),
        Ok(Err(error)) => Err(StartError::Threads(error)),
        Err(_) => Err(StartError::Grpc("the gRPC thread ended while starting".into())),
    }
}

/// The listening sockets.
struct Sockets {
    listener: std::net::TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    unix: Option<std::os::unix::net::UnixListener>,
}

struct Work {
    sockets: Sockets,
    services: services::Services,
    options: Arc<connection::ConnectionOptions>,
    state: Arc<ServerState>,
    health: health::HealthService,
    stopping: tokio::sync::watch::Receiver<bool>,
}

/// Accepts on the runtime until the drain closes the listeners and every
/// connection has finished, keeping health in step with readiness meanwhile.
fn serve_listeners(
    runtime: tokio::runtime::Runtime,
    work: Work,
    started: std::sync::mpsc::Sender<std::io::Result<()>>,
) {
    runtime.block_on(work.serve(started));
    // Whatever is left (a connection past its drain, stopped unwaited) ends with the runtime.
    runtime.shutdown_timeout(Duration::from_secs(1));
}

impl Work {
    /// Serves every listener until all have finished or the server stops;
    /// `started` hears whether the listeners came up.
    async fn serve(self, started: std::sync::mpsc::Sender<std::io::Result<()>>) {
        let Work {
            sockets,
            services,
            options,
            state,
            health,
            mut stopping,
        } = self;
        let listeners = match sockets.listeners() {
            Ok(listeners) => listeners,
            Err(error) => {
                let _ = started.send(Err(error));
                return;
            }
        };
        tokio::spawn(report_health(health, state.clone()));
        let accepting: Vec<_> = listeners
            .into_iter()
            .map(|listener| {
                let serving = transport::serve(listener, services.clone(), options.clone(), closing(&state));
                tokio::spawn(serving)
            })
            .collect();
        let _ = started.send(Ok(()));
        let all = async {
            for task in accepting {
                if let Err(error) = task.await {
                    log::error!("gRPC server task: {error}");
                }
            }
        };
        tokio::select! {
            () = all => {}
            _ = stopping.wait_for(|stop| *stop) => {}
        }
    }
}

impl Sockets {
    /// The sockets on the runtime: TCP with its TLS, and the Unix socket for
    /// local callers only, as TF Serving's (no TLS on it).
    fn listeners(self) -> std::io::Result<Vec<transport::Listener>> {
        let mut listeners = vec![transport::Listener::Tcp {
            listener: tokio::net::TcpListener::from_std(self.listener)?,
            tls: self.tls,
        }];
        if let Some(unix) = self.unix {
            listeners.push(transport::Listener::Unix(tokio::net::UnixListener::from_std(unix)?));
        }
        Ok(listeners)
    }
}

/// Ends when the server's drain closes the listeners, or when the server
/// goes away (its sender dropped).
fn closing(state: &ServerState) -> impl std::future::Future<Output = ()> + use<> {
    let mut closing = state.drain.subscribe();
    async move {
        let _ = closing.wait_for(|phase| *phase == crate::server::Phase::Closing).await;
    }
}

/// The listener's TLS, when `--enable_ssl` gives the files.
fn tls_acceptor(settings: &Settings) -> Result<Option<tokio_rustls::TlsAcceptor>, StartError> {
    let Some(files) = settings.tls_files() else {
        return Ok(None);
    };
    Ok(Some(tokio_rustls::TlsAcceptor::from(Arc::new(files.grpc()?))))
}

/// `--grpc_channel_arguments`, saying once which of them have no effect here.
fn channel_arguments(settings: &Settings) -> Result<ChannelArguments, StartError> {
    let arguments = ChannelArguments::parse(&settings.grpc.grpc_channel_arguments).map_err(StartError::Grpc)?;
    if !arguments.ignored.is_empty() {
        log::info!(
            "gRPC channel arguments without effect here: {}",
            arguments.ignored.join(", ")
        );
    }
    Ok(arguments)
}

/// Binds `--grpc_socket_path`, replacing a socket a previous run left behind
/// (gRPC does the same) but never another kind of file.
fn unix_listener(path: &std::path::Path) -> Result<std::os::unix::net::UnixListener, StartError> {
    use std::os::unix::fs::FileTypeExt;
    let bind_error = |source| StartError::Bind {
        addr: format!("unix:{}", path.display()),
        source,
    };
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if meta.file_type().is_socket() {
            std::fs::remove_file(path).map_err(bind_error)?;
        }
    }
    let listener = std::os::unix::net::UnixListener::bind(path).map_err(bind_error)?;
    listener.set_nonblocking(true).map_err(bind_error)?;
    Ok(listener)
}

/// The connections' management: the flags, then `--grpc_channel_arguments`
/// where it says otherwise.
fn connection_options(settings: &Settings, args: &ChannelArguments) -> connection::ConnectionOptions {
    let grpc = &settings.grpc;
    let seconds = |s: u64| (s > 0).then(|| Duration::from_secs(s));
    let nonzero = |d: Option<Duration>| d.filter(|d| !d.is_zero());
    let keepalive = args
        .keepalive_time
        .map_or(seconds(grpc.grpc_keepalive_seconds), |d| nonzero(Some(d)));
    let keepalive_timeout = args
        .keepalive_timeout
        .map_or(seconds(grpc.grpc_keepalive_timeout_seconds), |d| nonzero(Some(d)));
    let mut options = connection::ConnectionOptions::new(keepalive, keepalive_timeout, args.max_concurrent_streams);
    options.max_age = args
        .max_connection_age
        .map_or(seconds(grpc.grpc_max_connection_age_seconds), |d| nonzero(Some(d)));
    options.idle_timeout = args
        .max_connection_idle
        .map_or(seconds(grpc.grpc_max_connection_idle_seconds), |d| nonzero(Some(d)));
    if let Some(handshake) = nonzero(args.handshake_timeout) {
        options.handshake_timeout = handshake;
    }
    options.max_pending_answer_bytes = grpc.grpc_max_pending_answer_bytes;
    options.max_connections = grpc.grpc_max_connections.max(1);
    if options.max_age.is_some() {
        options.grace = Some(
            args.max_connection_age_grace
                .unwrap_or(Duration::from_secs(grpc.grpc_max_connection_age_grace_seconds)),
        );
    }
    options
}

/// Every service, with TF Serving's message size limit and gzip both ways;
/// all but health sit behind `--enable_auth`'s check.
fn services(
    state: &Arc<ServerState>,
    health: &health::HealthService,
    limit: usize,
    args: &ChannelArguments,
) -> Result<services::Services, StartError> {
    let receive = args.max_receive_message_length.unwrap_or(limit);
    let send = args.max_send_message_length.unwrap_or(limit);
    let prediction = PredictionServiceServer::new(PredictionApi { state: state.clone() })
        .max_decoding_message_size(receive)
        .max_encoding_message_size(send)
        .accept_compressed(CompressionEncoding::Gzip)
        .send_compressed(CompressionEncoding::Gzip);
    let model = ModelServiceServer::new(ModelApi { state: state.clone() })
        .accept_compressed(CompressionEncoding::Gzip)
        .send_compressed(CompressionEncoding::Gzip);
    let inference = GrpcInferenceServiceServer::new(InferenceApi { state: state.clone() })
        .max_decoding_message_size(receive)
        .max_encoding_message_size(send)
        .accept_compressed(CompressionEncoding::Gzip)
        .send_compressed(CompressionEncoding::Gzip);
    let reflection = |error: tonic_reflection::server::Error| StartError::Grpc(error.to_string());
    let reflection_builder = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(crate::proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let v1 = reflection_builder().build_v1().map_err(reflection)?;
    let v1alpha = reflection_builder().build_v1alpha().map_err(reflection)?;
    Ok(services::Services {
        state: state.clone(),
        predict: Some(Arc::new(PredictionApi { state: state.clone() })),
        receive_limit: receive,
        send_limit: send,
        prediction,
        model,
        inference,
        health: health.server(),
        others: vec![(named(&v1), boxed(v1)), (named(&v1alpha), boxed(v1alpha))],
    })
}

fn named<S: tonic::server::NamedService>(_: &S) -> &'static str {
    S::NAME
}

fn boxed<S>(service: S) -> services::BoxedService
where
    S: tower::Service<
            tonic::codegen::http::Request<services::RecvBody>,
            Response = tonic::codegen::http::Response<tonic::body::Body>,
            Error = std::convert::Infallible,
        > + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
{
    tower::util::BoxCloneSyncService::new(service)
}

/// Keeps health in step with readiness: SERVING while every model is
/// available and the server is not draining, NOT_SERVING otherwise.
async fn report_health(reporter: health::HealthService, state: Arc<ServerState>) {
    let mut drain = state.drain.subscribe();
    let mut last = None;
    loop {
        let status = match state.ready() {
            Ok(()) => ServingStatus::Serving,
            Err(_) => ServingStatus::NotServing,
        };
        if last != Some(status) {
            reporter.set_status("", status);
            for service in SERVICES {
                reporter.set_status(service, status);
            }
            last = Some(status);
        }
        tokio::select! {
            changed = drain.changed() => if changed.is_err() { return },
            () = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
    }
}

#[cfg(test)]
mod tests;
