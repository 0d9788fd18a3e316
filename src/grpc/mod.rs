//! The gRPC listener: tonic on its own multi-thread runtime beside actix,
//! serving TF Serving's and the Open Inference Protocol's services over the
//! same state (service core, registry, auth, in-flight bound, drain), plus
//! `grpc.health.v1.Health` and server reflection (v1 and v1alpha).

pub mod call;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tonic::codec::CompressionEncoding;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::server::TcpIncoming;
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

use crate::dialects::kserve::grpc::InferenceApi;
use crate::dialects::tfs_grpc::{ModelApi, PredictionApi};
use crate::http::AppState;
use crate::proto::inference::grpc_inference_service_server::GrpcInferenceServiceServer;
use crate::proto::tensorflow::serving::model_service_server::ModelServiceServer;
use crate::proto::tensorflow::serving::prediction_service_server::PredictionServiceServer;
use crate::settings::Settings;
use crate::StartError;

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
    served: Option<tokio::task::JoinHandle<Result<(), tonic::transport::Error>>>,
}

impl GrpcServer {
    /// Blocks until the listener has shut down (after the drain closes it)
    /// and every call in flight has been answered. Call outside any runtime.
    pub fn wait(mut self) {
        let (Some(runtime), Some(served)) = (self.runtime.take(), self.served.take()) else {
            return;
        };
        match runtime.block_on(served) {
            Ok(Ok(())) => {}
            Ok(Err(error)) => log::error!("gRPC server: {error}"),
            Err(error) => log::error!("gRPC server task: {error}"),
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
pub fn start(settings: &Settings, state: Arc<AppState>) -> Result<GrpcServer, StartError> {
    let addr = format!("{}:{}", settings.http.host, settings.grpc_port());
    let bind_error = |source| StartError::Bind {
        addr: addr.clone(),
        source,
    };
    let listener = std::net::TcpListener::bind(&addr).map_err(bind_error)?;
    listener.set_nonblocking(true).map_err(bind_error)?;
    let local = listener.local_addr().map_err(bind_error)?;
    let tls = match settings.tls_files() {
        Some(files) => {
            // The REST configuration checks the files and names what is wrong with them.
            files.rest()?;
            Some(files.grpc()?)
        }
        None => None,
    };
    let server = server_builder(settings, tls)?;
    let routes = routes(&state, settings.grpc.grpc_max_message_bytes)?;
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
        served: None,
    };
    let Some(runtime) = grpc.runtime.as_ref() else {
        return Err(StartError::Grpc("the gRPC runtime is gone".into()));
    };
    let _entered = runtime.enter();
    let listener = tokio::net::TcpListener::from_std(listener).map_err(bind_error)?;
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    let (reporter, health) = tonic_health::server::health_reporter();
    tokio::spawn(report_health(reporter, state.clone()));
    let mut closing = state.drain.subscribe();
    let shutdown = async move {
        // Both the close and a dropped sender (the server is going away) end it.
        let _ = closing
            .wait_for(|phase| *phase == crate::http::drain::Phase::Closing)
            .await;
    };
    let mut server = server;
    let router = server.add_routes(routes).add_service(health);
    grpc.served = Some(tokio::spawn(router.serve_with_incoming_shutdown(incoming, shutdown)));
    drop(_entered);
    Ok(grpc)
}

fn server_builder(
    settings: &Settings,
    tls: Option<tonic::transport::ServerTlsConfig>,
) -> Result<tonic::transport::Server, StartError> {
    let grpc = &settings.grpc;
    let seconds = |s: u64| (s > 0).then(|| Duration::from_secs(s));
    let mut server = tonic::transport::Server::builder()
        .http2_keepalive_interval(seconds(grpc.grpc_keepalive_seconds))
        .http2_keepalive_timeout(seconds(grpc.grpc_keepalive_timeout_seconds))
        .tcp_nodelay(true);
    if let Some(age) = seconds(grpc.grpc_max_connection_age_seconds) {
        server = server
            .max_connection_age(age)
            .max_connection_age_grace(Duration::from_secs(grpc.grpc_max_connection_age_grace_seconds));
    }
    if let Some(tls) = tls {
        server = server
            .tls_config(tls)
            .map_err(|e| crate::tls::TlsError::Pair(e.to_string()))?;
    }
    Ok(server)
}

/// Every service behind the auth interceptor, with TF Serving's message size
/// limit and gzip both ways.
fn routes(state: &Arc<AppState>, limit: usize) -> Result<tonic::service::Routes, StartError> {
    let auth = call::authenticate(state.clone());
    let prediction = PredictionServiceServer::new(PredictionApi { state: state.clone() })
        .max_decoding_message_size(limit)
        .max_encoding_message_size(limit)
        .accept_compressed(CompressionEncoding::Gzip)
        .send_compressed(CompressionEncoding::Gzip);
    let model = ModelServiceServer::new(ModelApi { state: state.clone() })
        .accept_compressed(CompressionEncoding::Gzip)
        .send_compressed(CompressionEncoding::Gzip);
    let inference = GrpcInferenceServiceServer::new(InferenceApi { state: state.clone() })
        .max_decoding_message_size(limit)
        .max_encoding_message_size(limit)
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
    let mut routes = tonic::service::Routes::builder();
    routes
        .add_service(InterceptedService::new(prediction, auth.clone()))
        .add_service(InterceptedService::new(model, auth.clone()))
        .add_service(InterceptedService::new(inference, auth.clone()))
        .add_service(InterceptedService::new(v1, auth.clone()))
        .add_service(InterceptedService::new(v1alpha, auth));
    Ok(routes.routes())
}

/// Keeps health in step with readiness: SERVING while every model is
/// available and the server is not draining, NOT_SERVING otherwise.
async fn report_health(reporter: HealthReporter, state: Arc<AppState>) {
    let mut drain = state.drain.subscribe();
    let mut last = None;
    loop {
        let status = match state.ready() {
            Ok(()) => ServingStatus::Serving,
            Err(_) => ServingStatus::NotServing,
        };
        if last != Some(status) {
            reporter.set_service_status("", status).await;
            for service in SERVICES {
                reporter.set_service_status(service, status).await;
            }
            last = Some(status);
        }
        tokio::select! {
            changed = drain.changed() => if changed.is_err() { return },
            () = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
    }
}
