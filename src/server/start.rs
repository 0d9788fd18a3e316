//! Start-up of the core: the models the settings name, the runtime, the
//! registry, the batch threads and the service over them.

use std::sync::Arc;
use std::time::Duration;

use crate::batcher::Batcher;
use crate::capture::Capture;
use crate::python_handlers::{self, HandlerSet};
use crate::registry::{self, discover_models, BatchingPolicy, LoadOptions, ModelSource, Registry};
#[cfg(feature = "tensorflow")]
use crate::runtime;
use crate::runtime::Loader;
use crate::service::{ModelLimits, Service};
use crate::settings::{Settings, SettingsError};
use crate::storage::Storage;
use crate::{model_config, tls};

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
    #[error("{0}")]
    Confine(String),
    #[error("{0}")]
    Cache(String),
    #[error(transparent)]
    Settings(#[from] SettingsError),
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    #[error(transparent)]
    Handler(#[from] python_handlers::HandlerError),
    #[error("custom op library {path}: {message}")]
    CustomOp { path: String, message: String },
    #[error("gRPC: {0}")]
    Grpc(String),
    #[error("model base path {0}")]
    Storage(#[from] crate::storage::StorageError),
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
    // A model repository and nothing to load at start (KServe's multi-model
    // agent, Triton's explicit mode): models arrive over the repository API.
    let models = &settings.models;
    if models.model_base_path.is_none() && !models.model_roots.is_empty() && !models.models_dir.is_dir() {
        log::info!(
            "no models at start; the repository API loads them from {:?}",
            models.model_roots
        );
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
#[cfg(feature = "tensorflow")]
pub fn load_custom_ops(paths: &str) -> Result<Vec<String>, StartError> {
    let failure = |path: &std::path::Path, message: String| StartError::CustomOp {
        path: path.display().to_string(),
        message,
    };
    let mut ops = Vec::new();
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
            let registered = runtime::load_op_library(&library).map_err(|e| failure(&library, e.to_string()))?;
            log::info!(
                "loaded custom op library {} (ops: {}; a model reaching them needs allow_access custom_ops)",
                library.display(),
                registered.join(", ")
            );
            ops.extend(registered);
        }
    }
    Ok(ops)
}

/// Loads the models and starts the batch threads: everything but the
/// transports. `loader` is the runtime (TensorFlow's, or the mock in tests).
pub fn build_service(settings: &Settings, loader: Arc<dyn Loader>) -> Result<(Service, Arc<Batcher>), StartError> {
    let (options, batcher) = load_options(settings, loader)?;
    let storage = options.storage.clone();
    let registry = Registry::new(options).map_err(StartError::Threads)?;
    let sources = model_sources(settings)?;
    // A base path in object storage that cannot be read stops the start, naming it.
    for source in &sources {
        storage.mirror(source)?;
    }
    registry.sync(&sources);
    registry.check_labels()?;
    let handlers = Arc::new(HandlerSet::new(settings.handler_settings()));
    for source in &sources {
        handlers.prepare(&source.name, &storage.folder_of(source))?;
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
    // A model config file may carry TF Serving's `logging_config`, now or after a reload.
    let capture =
        Capture::start(settings.capture.clone(), models.model_config_file.is_some()).map_err(StartError::Threads)?;
    let service = Service::new(
        registry.clone(),
        handlers,
        Duration::from_millis(settings.http.rest_api_timeout_in_ms),
    )
    .with_method_name_check(models.enable_signature_method_name_check)
    .with_default_model(models.default_model_name.clone())
    .with_model_limits(ModelLimits {
        roots: settings.roots(),
        max_models: models.max_models,
    })
    .with_capture(Arc::new(capture));
    Ok((service, batcher))
}

/// How every model loads and batches, and the batch threads that run them.
fn load_options(settings: &Settings, loader: Arc<dyn Loader>) -> Result<(LoadOptions, Arc<Batcher>), StartError> {
    let (batching, params, threads) = settings.batch_plan()?;
    let inline_limit = Duration::from_micros(settings.batching.inline_run_max_micros);
    let batcher = Batcher::with_inline_limit(threads, inline_limit).map_err(StartError::Threads)?;
    let session = settings.session(threads, loader.sees_gpu())?;
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
        loader,
        tags: settings.tags(),
        session,
        batcher: batcher.clone(),
        batching: BatchingPolicy {
            enabled: batching,
            params,
            overrides: settings.batching.model_batching.clone(),
            unbatched_queue: settings.batching.max_queued_runs,
            gpu_batches_in_flight: settings.batching.gpu_batches_in_flight,
        },
        swap: settings.models.swap_policy,
        load_timeout: match settings.models.model_load_timeout_seconds {
            0 => None,
            seconds => Some(Duration::from_secs(seconds)),
        },
        storage: Arc::new(Storage::new(private_cache_root(settings)?)),
        allow_access: settings.security.allowed_access(),
        activity: Default::default(),
        capture_prefix: Some({
            let policies = settings.capture.policies();
            Arc::new(move |model: &str| {
                let policy = policies.policy(model)?;
                policy.tfrecord_prefix.clone().filter(|_| policy.enabled())
            })
        }),
    };
    Ok((options, batcher))
}

/// `--model_cache_dir`, or the default, made or checked as a folder only
/// this user may write: what is read from it is loaded as models and
/// decisions.
fn private_cache_root(settings: &Settings) -> Result<std::path::PathBuf, StartError> {
    use crate::storage::private::{ensure_private, user_temp_dir};
    let root = match &settings.models.model_cache_dir {
        Some(dir) => {
            ensure_private(dir, "--model_cache_dir").map_err(StartError::Cache)?;
            dir.clone()
        }
        None => {
            let setting = "the default model cache (--model_cache_dir)";
            ensure_private(user_temp_dir(), setting).map_err(StartError::Cache)?;
            let root = Storage::default_cache_root();
            ensure_private(&root, setting).map_err(StartError::Cache)?;
            root
        }
    };
    Ok(root)
}

/// The TensorFlow runtime, after the checks and libraries it needs first:
/// `--gpu` fails when TensorFlow sees no GPU; `--custom_op_paths` load.
#[cfg(feature = "tensorflow")]
pub fn tensorflow_loader(settings: &Settings) -> Result<Arc<dyn Loader>, StartError> {
    if let Ok(dir) = std::env::var("CUDA_CACHE_PATH") {
        log::info!("CUDA keeps the kernels it compiles in {dir} (CUDA_CACHE_PATH)");
    }
    // Where the CUDA runtime loads, TensorFlow is asked for its GPUs: `--gpu`
    // requires one, and a GPU host's session defaults differ. The server's
    // own GPU options: TensorFlow makes its GPU devices (and their memory
    // pools) once, with the options of the first session.
    let mut sees_gpu = false;
    if settings.tensorflow.gpu || (!settings.tensorflow.cpu_only && runtime::build_info::cuda_runtime_loads()) {
        // The probe is TensorFlow's first session, whose intra-op size every
        // later session shares: the server's own.
        let (_, _, batch_threads) = settings.batch_plan()?;
        match runtime::build_info::gpus(&settings.session(batch_threads, false)?) {
            Ok(gpus) => {
                log::info!("GPUs: {}", gpus.join(", "));
                sees_gpu = true;
            }
            Err(reason) if settings.tensorflow.gpu => return Err(StartError::NoGpu(reason)),
            Err(reason) => log::info!("serving on the CPU: {reason}"),
        }
    }
    let custom_ops = match &settings.tensorflow.custom_op_paths {
        Some(paths) => load_custom_ops(paths)?,
        None => Vec::new(),
    };
    Ok(Arc::new(runtime::TensorFlowLoader { sees_gpu, custom_ops }))
}
