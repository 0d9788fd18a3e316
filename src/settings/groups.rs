//! The settings, grouped by concern. Each field is a flag (`--name` or
//! `--na-me`), a key of the settings file and a `TFSERVE_NAME` variable; its
//! doc comment is its `--help` text and its `default_value_t` the only place
//! its default is written ([`crate::flags::clap_defaults`] reads them for serde too).

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::{ArgAction, Args};
use serde::{Deserialize, Serialize};

use crate::batcher::ParamsOverride;
pub use crate::flags::clap_defaults;
use crate::model_config::DefaultVersionPolicy;
use crate::registry::SwapPolicy;

/// The number of cores, the default for every thread count.
pub fn cores() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2)
}

/// Boolean flags take true/false, 1/0, yes/no, on/off in any case, or no
/// value (Simple TensorFlow Serving's scripts write `--enable_auth=True`).
pub(super) fn boolean() -> clap::builder::BoolishValueParser {
    clap::builder::BoolishValueParser::new()
}

/// `Default` from the flags' declared defaults, for each group.
macro_rules! defaults_from_flags {
    ($($group:ty),*) => {$(
        impl Default for $group {
            fn default() -> Self {
                clap_defaults()
            }
        }
    )*};
}
defaults_from_flags!(ModelSettings, BatchingSettings, HandlerOptions, LoggingSettings);

/// Which models are served, from where, and how versions come and go.
#[derive(Args, Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default)]
#[command(next_help_heading = "Models")]
pub struct ModelSettings {
    /// Name of the model given by --model_base_path.
    #[arg(long = "model_name", alias = "model-name", global = true, default_value_t = String::from("default"))]
    pub model_name: String,

    /// Directory whose numeric subdirectories are versions of one model, or
    /// an s3://, gs:// or az:// URL whose numeric prefixes are.
    #[arg(long = "model_base_path", alias = "model-base-path", global = true)]
    pub model_base_path: Option<PathBuf>,

    /// Local folder that base paths in object storage (s3://, gs://, az://)
    /// are downloaded into, version by version, and where the decisions of
    /// `mixed_precision: auto` are kept (its `modes` folder). Default:
    /// tfserve-models in the system's temp folder.
    #[arg(long = "model_cache_dir", alias = "model-cache-dir", global = true)]
    pub model_cache_dir: Option<PathBuf>,

    /// Directory whose subdirectories are models (each holding numeric version
    /// directories). Used when --model_base_path is not given.
    #[arg(long = "models_dir", alias = "models-dir", global = true, default_value = "models")]
    pub models_dir: PathBuf,

    /// TF Serving model config (protobuf text format or JSON, or Simple
    /// TensorFlow Serving's JSON list); takes precedence over --model_base_path.
    #[arg(long = "model_config_file", alias = "model-config-file", global = true)]
    pub model_config_file: Option<PathBuf>,

    /// The model SageMaker's /invocations and /ping serve without
    /// tfs-model-name (SAGEMAKER_TFS_DEFAULT_MODEL_NAME). Default: the first by name.
    #[arg(long = "default_model_name", alias = "default-model-name", global = true)]
    pub default_model_name: Option<String>,

    /// Seconds between scans of each base path for new and removed versions
    /// (TF Serving's flag). 0: scan once at start; negative: never.
    #[arg(
        long = "file_system_poll_wait_seconds",
        alias = "file-system-poll-wait-seconds",
        allow_hyphen_values = true,
        global = true,
        default_value_t = 1
    )]
    pub file_system_poll_wait_seconds: i64,

    /// Seconds a version's load (session, warm-up) may take before it is marked
    /// failed and the registry moves on to other models; 0: no bound. A load
    /// past it goes on in the background and its result is dropped.
    #[arg(
        long = "model_load_timeout_seconds",
        alias = "model-load-timeout-seconds",
        global = true,
        default_value_t = 600
    )]
    pub model_load_timeout_seconds: u64,

    /// Seconds between re-reads of --model_config_file; 0: read once.
    #[arg(
        long = "model_config_file_poll_wait_seconds",
        alias = "model-config-file-poll-wait-seconds",
        global = true,
        default_value_t = 0
    )]
    pub model_config_file_poll_wait_seconds: u64,

    /// Version swaps: availability_preserving (the new version serves before
    /// the old unloads) or resource_preserving (unload first).
    #[arg(long = "swap_policy", alias = "swap-policy", global = true, value_enum, default_value_t = SwapPolicy::AvailabilityPreserving)]
    pub swap_policy: SwapPolicy,

    /// Versions served from --model_base_path and --models_dir: latest (TF
    /// Serving's default: only the highest version) or all (the default under
    /// SageMaker and Simple TensorFlow Serving's variables).
    #[arg(long = "model_version_policy", alias = "model-version-policy", global = true, value_enum, default_value_t = DefaultVersionPolicy::Latest)]
    pub model_version_policy: DefaultVersionPolicy,

    /// Comma-separated directories that models loaded over HTTP must live in.
    /// Default: --models_dir.
    #[arg(long = "model_roots", alias = "model-roots", value_delimiter = ',', global = true)]
    pub model_roots: Vec<PathBuf>,

    /// Most models loaded at once; loads over HTTP beyond it answer 507. 0: no limit.
    #[arg(long = "max_models", alias = "max-models", global = true, default_value_t = 0)]
    pub max_models: usize,

    /// Start with no models; they are loaded over HTTP (SageMaker's multi-model endpoint).
    #[arg(long = "multi_model", alias = "multi-model", num_args = 0..=1, default_missing_value = "true", default_value_t = false, action = ArgAction::Set, value_parser = boolean(), global = true)]
    pub multi_model: bool,

    /// Comma-separated SavedModel tags to load.
    #[arg(long = "saved_model_tags", alias = "saved-model-tags", global = true, default_value_t = String::from("serve"))]
    pub saved_model_tags: String,

    /// Run :classify and :regress only on signatures whose method_name is
    /// classify or regress (TF Serving's flag). Off: any signature of the
    /// right structure answers.
    #[arg(long = "enable_signature_method_name_check", alias = "enable-signature-method-name-check", num_args = 0..=1, default_missing_value = "true", default_value_t = false, action = ArgAction::Set, value_parser = boolean(), global = true)]
    pub enable_signature_method_name_check: bool,
}

/// How requests are merged into batches and queued.
#[derive(Args, Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default)]
#[command(next_help_heading = "Batching")]
pub struct BatchingSettings {
    /// Merge concurrent requests into batches (TF Serving's flag).
    #[arg(long = "enable_batching", alias = "enable-batching", num_args = 0..=1, default_missing_value = "true", default_value_t = false, action = ArgAction::Set, value_parser = boolean(), global = true)]
    pub enable_batching: bool,

    /// TF Serving's BatchingParameters in protobuf text format (needs --enable_batching).
    #[arg(long = "batching_parameters_file", alias = "batching-parameters-file", global = true)]
    pub batching_parameters_file: Option<PathBuf>,

    /// Largest batch in rows; overrides the parameters file. Default: the
    /// file's, else TF Serving's (1000).
    #[arg(long = "max_batch_size", alias = "max-batch-size", global = true)]
    pub max_batch_size: Option<usize>,

    /// How long an under-full batch waits for more requests; overrides the parameters file.
    #[arg(long = "batch_timeout_micros", alias = "batch-timeout-micros", global = true)]
    pub batch_timeout_micros: Option<u64>,

    /// Batches a model's queue holds before requests answer 503; overrides the parameters file.
    #[arg(long = "max_enqueued_batches", alias = "max-enqueued-batches", global = true)]
    pub max_enqueued_batches: Option<usize>,

    /// A latency objective in milliseconds for the time a request spends
    /// queued and running: the batch timeout and the largest batch are then
    /// chosen online to meet it, and requests that would miss it answer 503
    /// early. Overrides the parameters file's target_latency_micros; 0: none.
    #[arg(
        long = "batching_target_latency_ms",
        alias = "batching-target-latency-ms",
        global = true
    )]
    pub batching_target_latency_ms: Option<f64>,

    /// The share of requests (percent) the latency objective is for (default 99).
    #[arg(
        long = "batching_target_percentile",
        alias = "batching-target-percentile",
        global = true
    )]
    pub batching_target_percentile: Option<f64>,

    /// A request the objective predicts late: `reject` (503) or `serve` (default; docs/batching.md).
    #[arg(long = "batching_late_action", alias = "batching-late-action", global = true)]
    pub batching_late_action: Option<crate::batcher::objective::LateAction>,

    /// A request still queued this long is answered 503 unrun (Triton's); 0: none.
    #[arg(long = "queue_timeout_micros", alias = "queue-timeout-micros", global = true)]
    pub queue_timeout_micros: Option<u64>,

    /// Threads that run batches (TensorFlow sessions). Default: the parameters
    /// file's num_batch_threads, else the number of cores.
    #[arg(long = "num_batch_threads", alias = "num-batch-threads", global = true)]
    pub num_batch_threads: Option<usize>,

    /// With batching off: requests that may wait for a batch thread before 503.
    #[arg(
        long = "max_queued_runs",
        alias = "max-queued-runs",
        global = true,
        default_value_t = 1024
    )]
    pub max_queued_runs: usize,

    /// Batches of one model that run at once on each GPU replica (a model on
    /// a GPU, batching on): more at once only makes every batch smaller, and
    /// a GPU is slower per image at small batches. 0: as many as there are
    /// batch threads.
    #[arg(
        long = "gpu_batches_in_flight",
        alias = "gpu-batches-in-flight",
        global = true,
        default_value_t = 2
    )]
    pub gpu_batches_in_flight: usize,

    /// A queue whose session runs average at most this many microseconds is
    /// run by its requests on their own threads, not handed to a batch thread
    /// (the hand-off costs more than such a run). Only for queues with no
    /// batch timeout; 0: always the batch threads.
    #[arg(
        long = "inline_run_max_micros",
        alias = "inline-run-max-micros",
        global = true,
        default_value_t = 100
    )]
    pub inline_run_max_micros: u64,

    /// Per-model batching overrides (settings file only), keyed by model name.
    #[arg(skip)]
    pub model_batching: BTreeMap<String, ParamsOverride>,
}

/// Models' `inference.py` handlers (SageMaker's pre/post-processing).
#[derive(Args, Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default)]
#[command(next_help_heading = "Handlers")]
pub struct HandlerOptions {
    /// Python processes running models' inference.py handlers, one call at a time
    /// each. Default: number of cores (`serve`: SAGEMAKER_GUNICORN_WORKERS when set).
    #[arg(long = "python_workers", alias = "python-workers", global = true, default_value_t = cores())]
    pub python_workers: usize,

    /// The Python 3 that runs handlers (only started when a model ships inference.py).
    #[arg(
        long = "python_executable",
        alias = "python-executable",
        global = true,
        default_value = "python3"
    )]
    pub python_executable: String,

    /// A handler worker whose resident memory passes this many MiB after a call
    /// is replaced by a fresh one (0: no bound).
    #[arg(
        long = "python_worker_max_rss_mb",
        alias = "python-worker-max-rss-mb",
        global = true,
        default_value_t = 0
    )]
    pub python_worker_max_rss_mb: u64,

    /// A handler worker is replaced after this many calls (0: never), as
    /// gunicorn's max_requests.
    #[arg(
        long = "python_worker_max_requests",
        alias = "python-worker-max-requests",
        global = true,
        default_value_t = 0
    )]
    pub python_worker_max_requests: u64,

    /// One inference.py for every model, instead of each model's code/inference.py.
    #[arg(long = "handler_path", alias = "handler-path", global = true)]
    pub handler_path: Option<PathBuf>,

    /// Where models' code/requirements.txt are installed. Default: <cache_dir>/handler-deps.
    #[arg(long = "handler_deps_dir", alias = "handler-deps-dir", global = true)]
    pub handler_deps_dir: Option<PathBuf>,

    /// tfserve's cache (also where the set-up scripts put libtensorflow).
    /// Default: $HOME/.cache/tfserve.
    #[arg(long = "cache_dir", alias = "cache-dir", global = true)]
    pub cache_dir: Option<PathBuf>,
}

/// How log lines are written: every line as text or as JSON.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum LogFormat {
    /// `[time LEVEL target] message key=value ...`
    #[default]
    Text,
    /// One JSON object per line: `time`, `level`, `target`, `message`, then the line's fields.
    Json,
}

/// What the server logs and how.
#[derive(Args, Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default)]
#[command(next_help_heading = "Logging")]
pub struct LoggingSettings {
    /// Every log line as `text` or `json` (one object per line with stable keys).
    #[arg(long = "log_format", alias = "log-format", global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// The share of requests, REST and gRPC, that get an access log line
    /// (target `access`: request id, protocol, route, model, version,
    /// signature, status, bytes in and out, queue, run and total time, client):
    /// 0 logs none, 1 every request, 0.01 one in a hundred, evenly spread.
    #[arg(
        long = "access_log_sampling_rate",
        alias = "access-log-sampling-rate",
        global = true,
        default_value_t = 0.0
    )]
    pub access_log_sampling_rate: f64,
}
