//! The gRPC listener: tonic's services on threads of their own beside actix,
//! serving TF Serving's and the Open Inference Protocol's services over the
//! same state (service core, registry, auth, in-flight bound, drain), plus
//! `grpc.health.v1.Health` and server reflection (v1 and v1alpha).

pub mod channel_args;
mod h2;
mod health;
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

/// A running gRPC listener: `--grpc_num_threads` threads, each with its own
/// single-threaded runtime; one accepts and hands connections out in turn,
/// and a connection and every call on it stay on its thread (no task
/// hand-offs between threads, no work stealing), as REST's workers do.
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
    let listener = std::net::TcpListener::bind(&addr).map_err(bind_error)?;
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
    let mut grpc = GrpcServer {
        addr: local,
        threads: Vec::new(),
        stop,
    };
    let count = settings.grpc.grpc_num_threads.max(1);
    let runtimes = (0..count)
        .map(|_| tokio::runtime::Builder::new_current_thread().enable_all().build())
        .collect::<Result<Vec<_>, _>>()
        .map_err(StartError::Threads)?;
    let handles: Arc<[tokio::runtime::Handle]> = runtimes.iter().map(|r| r.handle().clone()).collect();
    // One thread accepts, so the listener closes at once when the drain
    // says so; every thread serves the connections it is handed.
    let (served, serving) = tokio::sync::watch::channel(false);
    let served = Arc::new(served);
    let mut sockets = Some(Sockets { listener, tls, unix });
    let (started, starts) = std::sync::mpsc::channel();
    for runtime in runtimes {
        let work = ThreadWork {
            sockets: sockets.take(),
            services: services.clone(),
            options: options.clone(),
            state: state.clone(),
            health: health.clone(),
            threads: handles.clone(),
            served: served.clone(),
            serving: serving.clone(),
            stopping: stopping.clone(),
        };
        let started = started.clone();
        let handle = std::thread::Builder::new()
            .name("tfserve-grpc".into())
            .spawn(move || serve_thread(runtime, work, started))
            .map_err(StartError::Threads)?;
        grpc.threads.push(handle);
    }
    drop(started);
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

struct ThreadWork {
    /// The accepting thread's: the sockets.
    sockets: Option<Sockets>,
    services: transport::Services,
    options: Arc<transport::ConnectionOptions>,
    state: Arc<ServerState>,
    health: health::HealthService,
    threads: Arc<[tokio::runtime::Handle]>,
    /// Set by the accepting thread once every connection has closed.
    served: Arc<tokio::sync::watch::Sender<bool>>,
    serving: tokio::sync::watch::Receiver<bool>,
    stopping: tokio::sync::watch::Receiver<bool>,
}

/// A gRPC thread: its runtime serving the connections handed to it, until
/// the drain closes the listener and every connection has finished. The
/// accepting thread also keeps health in step with readiness.
fn serve_thread(
    runtime: tokio::runtime::Runtime,
    work: ThreadWork,
    started: std::sync::mpsc::Sender<std::io::Result<()>>,
) {
    let ThreadWork {
        sockets,
        services,
        options,
        state,
        health,
        threads,
        served,
        mut serving,
        mut stopping,
    } = work;
    runtime.block_on(async move {
        let Some(sockets) = sockets else {
            tokio::select! {
                _ = serving.wait_for(|done| *done) => {}
                _ = stopping.wait_for(|stop| *stop) => {}
            }
            return;
        };
        let closing = |state: &ServerState| {
            let mut closing = state.drain.subscribe();
            async move {
                // Both the close and a dropped sender (the server is going away) end it.
                let _ = closing.wait_for(|phase| *phase == crate::server::Phase::Closing).await;
            }
        };
        let listeners = (|| {
            let tcp = tokio::net::TcpListener::from_std(sockets.listener)?;
            let unix = sockets.unix.map(tokio::net::UnixListener::from_std).transpose()?;
            Ok::<_, std::io::Error>((tcp, unix))
        })();
        let (tcp, unix) = match listeners {
            Ok(listeners) => listeners,
            Err(error) => {
                let _ = started.send(Err(error));
                return;
            }
        };
        tokio::spawn(report_health(health, state.clone()));
        let mut accepting = vec![tokio::spawn(transport::serve(
            transport::Listener::Tcp {
                listener: tcp,
                tls: sockets.tls,
            },
            services.clone(),
            options.clone(),
            closing(&state),
            threads.clone(),
        ))];
        if let Some(unix) = unix {
            // Local callers only, as TF Serving's socket: no TLS on it.
            accepting.push(tokio::spawn(transport::serve(
                transport::Listener::Unix(unix),
                services,
                options,
                closing(&state),
                threads,
            )));
        }
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
        let _ = served.send(true);
    });
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
fn connection_options(settings: &Settings, args: &ChannelArguments) -> transport::ConnectionOptions {
    let grpc = &settings.grpc;
    let seconds = |s: u64| (s > 0).then(|| Duration::from_secs(s));
    let nonzero = |d: Option<Duration>| d.filter(|d| !d.is_zero());
    let keepalive = args
        .keepalive_time
        .map_or(seconds(grpc.grpc_keepalive_seconds), |d| nonzero(Some(d)));
    let keepalive_timeout = args
        .keepalive_timeout
        .map_or(seconds(grpc.grpc_keepalive_timeout_seconds), |d| nonzero(Some(d)));
    let mut options = transport::ConnectionOptions::new(keepalive, keepalive_timeout, args.max_concurrent_streams);
    options.max_age = args
        .max_connection_age
        .map_or(seconds(grpc.grpc_max_connection_age_seconds), |d| nonzero(Some(d)));
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
) -> Result<transport::Services, StartError> {
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
    Ok(transport::Services {
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

fn boxed<S>(service: S) -> transport::BoxedService
where
    S: tower::Service<
            tonic::codegen::http::Request<h2::RecvBody>,
            Response = tonic::codegen::http::Response<tonic::body::Body>,
            Error = std::convert::Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    tower::util::BoxCloneService::new(service)
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
