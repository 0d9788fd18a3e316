//! The gRPC listener: tonic's services on their own multi-thread runtime beside actix,
//! serving TF Serving's and the Open Inference Protocol's services over the
//! same state (service core, registry, auth, in-flight bound, drain), plus
//! `grpc.health.v1.Health` and server reflection (v1 and v1alpha).

pub mod channel_args;
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

/// A running gRPC listener on its own runtime.
pub struct GrpcServer {
    pub addr: SocketAddr,
    runtime: Option<tokio::runtime::Runtime>,
    served: Vec<tokio::task::JoinHandle<()>>,
}

impl GrpcServer {
    /// Blocks until the listener has shut down (after the drain closes it)
    /// and every call in flight has been answered. Call outside any runtime.
    pub fn wait(mut self) {
        let Some(runtime) = self.runtime.take() else {
            return;
        };
        for served in std::mem::take(&mut self.served) {
            if let Err(error) = runtime.block_on(served) {
                log::error!("gRPC server task: {error}");
            }
        }
    }
}

impl Drop for GrpcServer {
    /// Dropped without `wait` (tests, batch transform), possibly inside
    /// another runtime, where only a background shutdown is allowed.
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
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
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(settings.grpc.grpc_num_threads.max(1))
        .thread_name("tfserve-grpc")
        .enable_all()
        .build()
        .map_err(StartError::Threads)?;
    // Owned by the server from here, so an early return shuts the runtime down
    // in the background (this runs inside actix's runtime, where blocking is refused).
    let mut grpc = GrpcServer {
        addr: local,
        runtime: Some(runtime),
        served: Vec::new(),
    };
    let Some(runtime) = grpc.runtime.as_ref() else {
        return Err(StartError::Grpc("the gRPC runtime is gone".into()));
    };
    let _entered = runtime.enter();
    let listener = tokio::net::TcpListener::from_std(listener).map_err(bind_error)?;
    let health = health::HealthService::new();
    tokio::spawn(report_health(health.clone(), state.clone()));
    let closing = |state: &ServerState| {
        let mut closing = state.drain.subscribe();
        async move {
            // Both the close and a dropped sender (the server is going away) end it.
            let _ = closing.wait_for(|phase| *phase == crate::server::Phase::Closing).await;
        }
    };
    let services = services(&state, &health, settings.grpc.grpc_max_message_bytes, &channel_args)?;
    let options = Arc::new(connection_options(settings, &channel_args));
    let tcp = transport::Listener::Tcp { listener, tls };
    grpc.served.push(tokio::spawn(transport::serve(
        tcp,
        services.clone(),
        options.clone(),
        closing(&state),
    )));
    if let Some(path) = &settings.grpc.grpc_socket_path {
        // Local callers only, as TF Serving's socket: no TLS on it.
        let unix = transport::Listener::Unix(unix_listener(path)?);
        grpc.served
            .push(tokio::spawn(transport::serve(unix, services, options, closing(&state))));
        log::info!("gRPC also on Unix socket {}", path.display());
    }
    drop(_entered);
    Ok(grpc)
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
fn unix_listener(path: &std::path::Path) -> Result<tokio::net::UnixListener, StartError> {
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
    tokio::net::UnixListener::bind(path).map_err(bind_error)
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
            tonic::codegen::http::Request<hyper::body::Incoming>,
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
