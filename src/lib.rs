//! tfserve: a native server for TensorFlow SavedModels.
//!
//! # Layout
//! - `settings`: flags, config file and environment, merged.
//! - `http`: the route table, middleware (request ids, auth, the in-flight
//!   bound), body reading, management API, health and the dashboard.
//! - `grpc`: the gRPC listener (its own runtime), health and reflection.
//! - `dialects`: one folder per dialect (`tfs`, `sagemaker`, `stfs` over
//!   HTTP, `tfs_grpc` over gRPC, `kserve` over both): its decoding, encoding
//!   and routes or services.
//! - `proto`: the protobuf messages and services generated from `proto/`.
//! - `service`: the request path shared by every dialect.
//! - `codec`: JSON ⇄ typed tensors, `tf.Example` building.
//! - `registry`: models, versions and their states.
//! - `batcher`: per-signature queues drained by the batch threads.
//! - `metrics`: Prometheus metrics (`gpu_metrics`: NVML's GPU readings); `warmup`: first runs before serving.
//! - `model_config`, `textproto`: model config files.
//! - `runtime`: everything that touches TensorFlow.
//! - `tensor`, `signature`: TensorFlow-free data types.

pub mod batcher;
pub mod codec;
pub mod dialects;
pub mod error;
pub mod gpu_metrics;
pub mod grpc;
pub mod handlers;
pub mod http;
pub mod imaging;
pub mod inspect;
pub mod metrics;
pub mod model_config;
pub mod proto;
pub mod registry;
pub mod runtime;
pub mod service;
pub mod settings;
pub mod signature;
pub mod tensor;
pub mod textproto;
pub mod tls;
pub mod transform;
pub mod warmup;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::{web, App, HttpServer};

use crate::batcher::Batcher;
use crate::handlers::HandlerSet;
use crate::registry::{discover_models, BatchingPolicy, LoadOptions, ModelSource, Registry};
use crate::service::Service;
use crate::settings::{Settings, SettingsError};

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Registry(#[from] registry::RegistryError),
    #[error(transparent)]
    ConfigFile(#[from] model_config::ConfigFileError),
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: String, source: std::io::Error },
    #[error("cannot start batch threads: {0}")]
    Threads(std::io::Error),
    #[error(transparent)]
    Settings(#[from] SettingsError),
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    #[error(transparent)]
    Handler(#[from] handlers::HandlerError),
    #[error("custom op library {path}: {message}")]
    CustomOp { path: String, message: String },
    #[error("gRPC: {0}")]
    Grpc(String),
    #[error("--gpu: TensorFlow sees no GPU ({0})")]
    NoGpu(String),
}

/// The models the settings name: none in multi-model mode, a
/// `--model_config_file`, one `--model_base_path` (every version), or the
/// models under `models_dir`.
pub fn model_sources(settings: &Settings) -> Result<Vec<ModelSource>, StartError> {
    if let Some(path) = &settings.models.model_config_file {
        return Ok(model_config::load(path)?);
    }
    if settings.models.multi_model {
        return Ok(Vec::new());
    }
    if let Some(base_path) = &settings.models.model_base_path {
        return Ok(vec![ModelSource::with_policy(
            settings.models.model_name.clone(),
            base_path.clone(),
            settings.models.model_version_policy.policy(),
        )]);
    }
    // Version directories straight inside the models directory (a SageMaker
    // model archive) make one model, named by $SAGEMAKER_TFS_DEFAULT_MODEL_NAME or the directory.
    if !registry::discover_versions(&settings.models.models_dir)
        .unwrap_or_default()
        .is_empty()
    {
        let name = settings
            .models
            .default_model_name
            .clone()
            .or_else(|| {
                settings
                    .models
                    .models_dir
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
            })
            .unwrap_or_else(|| settings.models.model_name.clone());
        let policy = settings.models.model_version_policy.policy();
        return Ok(vec![ModelSource::with_policy(
            name,
            settings.models.models_dir.clone(),
            policy,
        )]);
    }
    Ok(discover_models(
        &settings.models.models_dir,
        &settings.models.model_version_policy.policy(),
    )?)
}

/// Loads every custom op library a `--custom_op_paths` list names (files, or
/// directories whose `*.so` files load in name order), before any model.
pub fn load_custom_ops(paths: &str) -> Result<(), StartError> {
    let failure = |path: &std::path::Path, message: String| StartError::CustomOp {
        path: path.display().to_string(),
        message,
    };
    for entry in paths.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        // Canonical, so the loader never searches LD_LIBRARY_PATH for a bare name.
        let entry = std::path::Path::new(entry);
        let entry = &entry
            .canonicalize()
            .map_err(|e| failure(entry, format!("no such file or directory ({e})")))?;
        let libraries = if entry.is_dir() {
            let mut found: Vec<_> = std::fs::read_dir(entry)
                .map_err(|e| failure(entry, e.to_string()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "so"))
                .collect();
            found.sort();
            found
        } else {
            vec![entry.to_path_buf()]
        };
        for library in libraries {
            runtime::load_op_library(&library).map_err(|e| failure(&library, e.to_string()))?;
            log::info!("loaded custom op library {}", library.display());
        }
    }
    Ok(())
}

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
    pub state: web::Data<http::AppState>,
    /// The gRPC listener, which closes when the drain does.
    pub grpc: Option<grpc::GrpcServer>,
}

impl Running {
    /// The gRPC listener's address.
    pub fn grpc_addr(&self) -> Option<SocketAddr> {
        self.grpc.as_ref().map(|g| g.addr)
    }
}

/// Loads the models and starts the batch threads: everything but HTTP.
pub fn build_service(settings: &Settings) -> Result<(Service, Arc<Batcher>), StartError> {
    if settings.tensorflow.gpu {
        let gpus = runtime::build_info::gpus().map_err(StartError::NoGpu)?;
        log::info!("GPUs: {}", gpus.join(", "));
    }
    if let Some(paths) = &settings.tensorflow.custom_op_paths {
        load_custom_ops(paths)?;
    }
    let (options, batcher) = load_options(settings)?;
    let registry = Arc::new(Registry::new(options));
    let sources = model_sources(settings)?;
    registry.sync(&sources);
    registry.check_labels()?;
    let handlers = Arc::new(HandlerSet::new(settings.handler_settings()));
    for source in &sources {
        handlers.prepare(&source.name, &source.base_path)?;
    }
    let synced = handlers.clone();
    registry.on_sync(move |sources| synced.sync(sources));
    let models = &settings.models;
    let fs_poll = u64::try_from(models.file_system_poll_wait_seconds)
        .ok()
        .filter(|s| *s > 0)
        .map(Duration::from_secs);
    let config_poll = models
        .model_config_file
        .clone()
        .filter(|_| models.model_config_file_poll_wait_seconds > 0)
        .map(|path| (path, Duration::from_secs(models.model_config_file_poll_wait_seconds)));
    registry::spawn_poller(registry.clone(), fs_poll, config_poll).map_err(StartError::Threads)?;
    let service = Service::new(
        registry.clone(),
        handlers,
        Duration::from_millis(settings.http.rest_api_timeout_in_ms),
    )
    .with_method_name_check(models.enable_signature_method_name_check)
    .with_default_model(models.default_model_name.clone());
    Ok((service, batcher))
}

/// How every model loads and batches, and the batch threads that run them.
fn load_options(settings: &Settings) -> Result<(LoadOptions, Arc<Batcher>), StartError> {
    let (batching, params, threads) = settings.batch_plan()?;
    let inline_limit = Duration::from_micros(settings.batching.inline_run_max_micros);
    let batcher = Batcher::with_inline_limit(threads, inline_limit).map_err(StartError::Threads)?;
    let session = settings.session(threads)?;
    log::info!(
        "{threads} batch thread(s), TensorFlow intra-op {} / inter-op {} threads; batching {}",
        session.intra_op_parallelism,
        session.inter_op_parallelism,
        if batching {
            format!("on: {params:?}")
        } else {
            "off".to_string()
        }
    );
    let options = LoadOptions {
        loader: Arc::new(runtime::TensorFlowLoader),
        tags: settings.tags(),
        session,
        batcher: batcher.clone(),
        batching: BatchingPolicy {
            enabled: batching,
            params,
            overrides: settings.batching.model_batching.clone(),
            unbatched_queue: settings.batching.max_queued_runs,
        },
        swap: settings.models.swap_policy,
        load_timeout: match settings.models.model_load_timeout_seconds {
            0 => None,
            seconds => Some(Duration::from_secs(seconds)),
        },
    };
    Ok((options, batcher))
}

/// Loads the models, binds the port and returns the server, not yet awaited.
/// Must be called inside an actix (tokio) runtime.
pub fn start(settings: &Settings) -> Result<Running, StartError> {
    let started = Instant::now();
    // Once, so an operator sees what every layer merged to (passwords print as ***).
    log::info!("effective settings: {settings:?}");
    let (service, batcher) = build_service(settings)?;
    let registry = service.registry.clone();
    let handlers = service.handlers.clone();
    let security = &settings.security;
    let credentials = match (security.enable_auth, &security.auth_username, &security.auth_password) {
        (true, Some(user), Some(password)) => Some((user.as_str(), password.0.as_str())),
        _ => None,
    };
    let state = web::Data::new(http::AppState {
        service,
        max_request_bytes: settings.http.max_request_bytes,
        in_flight: http::InFlight::new(settings.http.max_in_flight_requests),
        config_file: settings.models.model_config_file.clone(),
        model_roots: settings.roots(),
        max_models: settings.models.max_models,
        auth: credentials.map(|(user, password)| http::BasicAuth::new(user, password)),
        drain: http::drain::Drain::default(),
        body_timeout: Duration::from_millis(settings.http.client_body_timeout_ms),
        body_budget: http::ByteBudget::new(settings.http.max_in_flight_bytes),
        metrics_path: settings.metrics_path()?,
    });
    let grpc = grpc::start(settings, state.clone().into_inner())?;
    handlers.set_grpc_address(grpc.addr);
    let (server, scheme, public, listeners) = serve(settings, state.clone(), |rest| {
        handlers.set_rest_address(rest, credentials);
    })?;
    log::info!(
        "serving {} model(s) [{}] on {} and gRPC on {} (ready in {:.0} ms)",
        registry.model_names().len(),
        registry.model_names().join(", "),
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
fn serve(
    settings: &Settings,
    state: web::Data<http::AppState>,
    rest_address: impl FnOnce(SocketAddr),
) -> Result<Served, StartError> {
    let addr = format!("{}:{}", settings.http.host, settings.http_port());
    let cors = settings.http.enable_cors;
    let server = HttpServer::new(move || {
        App::new()
            .wrap(actix_web::middleware::from_fn(http::gate))
            .wrap(actix_web::middleware::Condition::new(cors, http::cors()))
            .wrap(actix_web::middleware::from_fn(http::request_id::assign))
            .app_data(state.clone())
            .configure(http::configure)
    })
    .on_connect(http::on_connect)
    .workers(settings.http.rest_api_num_threads)
    .client_request_timeout(Duration::from_millis(settings.http.client_request_timeout_ms))
    .keep_alive(match settings.http.keep_alive_seconds {
        0 => actix_web::http::KeepAlive::Disabled,
        seconds => actix_web::http::KeepAlive::Timeout(Duration::from_secs(seconds)),
    })
    .max_connections(settings.http.max_connections)
    // Signals are the caller's: `http::drain::stop_on_signal` drains first.
    .disable_signals()
    .shutdown_timeout(30);
    let bind_error = |addr: &str| {
        let addr = addr.to_string();
        move |source| StartError::Bind { addr, source }
    };
    // Bound here rather than by actix, so the drain can close them (see `http::drain`).
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
