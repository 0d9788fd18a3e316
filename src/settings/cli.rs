//! Command-line flags and subcommands. Every flag is also a settings key
//! (config file, `TFSERVE_*`), merged in `Settings::load`.

use std::path::PathBuf;

use clap::Parser;
use serde::Serialize;

/// Command-line flags. Every flag is also accepted with dashes
/// (`--rest-api-port`), as `--flag=value` or `--flag value`.
#[derive(Parser, Debug, Default, Serialize)]
#[command(
    name = "tfserve",
    version,
    about = "Serves TensorFlow SavedModels over the TF Serving REST API"
)]
pub struct Cli {
    #[command(subcommand)]
    #[serde(skip)]
    pub command: Option<Command>,

    /// Settings file (TOML, YAML or JSON); keys are the flag names.
    #[arg(long, global = true)]
    #[serde(skip)]
    pub config: Option<PathBuf>,

    /// HTTP port for every API (TF Serving's REST port). Default 8501.
    #[arg(long = "rest_api_port", alias = "rest-api-port", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rest_api_port: Option<u16>,

    /// TF Serving's gRPC port. tfserve has no gRPC API: given alone, it sets the HTTP port.
    #[arg(long, global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,

    /// Address to bind. Default 0.0.0.0.
    #[arg(long, global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,

    /// Name of the model given by --model_base_path. Default "default".
    #[arg(long = "model_name", alias = "model-name", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_name: Option<String>,

    /// The model SageMaker's /invocations and /ping serve without
    /// tfs-model-name (SAGEMAKER_TFS_DEFAULT_MODEL_NAME). Default: the first by name.
    #[arg(long = "default_model_name", alias = "default-model-name", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_model_name: Option<String>,

    /// Directory whose numeric subdirectories are versions of one model.
    #[arg(long = "model_base_path", alias = "model-base-path", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_base_path: Option<PathBuf>,

    /// TF Serving model config (protobuf text format or JSON, or Simple
    /// TensorFlow Serving's JSON list); takes precedence over --model_base_path.
    #[arg(long = "model_config_file", alias = "model-config-file", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_config_file: Option<PathBuf>,

    /// Seconds between scans of each base path for new and removed versions
    /// (TF Serving's flag). 0: scan once at start; negative: never. Default 1.
    #[arg(
        long = "file_system_poll_wait_seconds",
        alias = "file-system-poll-wait-seconds",
        allow_hyphen_values = true
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file_system_poll_wait_seconds: Option<i64>,

    /// Seconds between re-reads of --model_config_file; 0 (default): read once.
    #[arg(
        long = "model_config_file_poll_wait_seconds",
        alias = "model-config-file-poll-wait-seconds"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_config_file_poll_wait_seconds: Option<u64>,

    /// Version swaps: availability_preserving (new version serves before the
    /// old unloads; default) or resource_preserving (unload first).
    #[arg(long = "swap_policy", alias = "swap-policy", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swap_policy: Option<String>,

    /// Versions served from --model_base_path and --models_dir: latest (TF
    /// Serving's default: only the highest version) or all. Default latest;
    /// all under SageMaker and Simple TensorFlow Serving's variables.
    #[arg(long = "model_version_policy", alias = "model-version-policy", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_version_policy: Option<String>,

    /// Comma-separated directories that models loaded over HTTP must live in.
    /// Default: --models_dir.
    #[arg(long = "model_roots", alias = "model-roots", value_delimiter = ',', global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_roots: Option<Vec<PathBuf>>,

    /// Most models loaded at once; loads over HTTP beyond it answer 507. 0: no limit.
    #[arg(long = "max_models", alias = "max-models", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_models: Option<usize>,

    /// Directory whose subdirectories are models (each holding numeric version
    /// directories). Used when --model_base_path is not given. Default "models".
    #[arg(long = "models_dir", alias = "models-dir", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub models_dir: Option<PathBuf>,

    /// HTTP worker threads. Default: number of cores.
    #[arg(long = "rest_api_num_threads", alias = "rest-api-num-threads", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rest_api_num_threads: Option<usize>,

    /// Session options for every model as Simple TensorFlow Serving's JSON, e.g.
    /// '{"intra_op_parallelism_threads": 2, "allow_growth": true}'.
    #[arg(long = "session_config", alias = "session-config", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_config: Option<String>,

    /// Require HTTP basic auth on every route but liveness (Simple TensorFlow Serving's flag).
    #[arg(long = "enable_auth", alias = "enable-auth", num_args = 0..=1, default_missing_value = "true", value_parser = boolean(), global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enable_auth: Option<bool>,

    /// The basic-auth user name (needs --enable_auth).
    #[arg(long = "auth_username", alias = "auth-username", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth_username: Option<String>,

    /// The basic-auth password (needs --enable_auth). Never logged.
    #[arg(long = "auth_password", alias = "auth-password", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth_password: Option<String>,

    /// Answer cross-origin browser requests (CORS: any origin, without credentials).
    #[arg(long = "enable_cors", alias = "enable-cors", num_args = 0..=1, default_missing_value = "true", value_parser = boolean(), global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enable_cors: Option<bool>,

    /// Run :classify and :regress only on signatures whose method_name is
    /// classify or regress (TF Serving's flag). Default false: any signature
    /// of the right structure answers.
    #[arg(long = "enable_signature_method_name_check", alias = "enable-signature-method-name-check", num_args = 0..=1, default_missing_value = "true", value_parser = boolean(), global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enable_signature_method_name_check: Option<bool>,

    /// Serve HTTPS only (rustls), with --secret_pem and --secret_key.
    #[arg(long = "enable_ssl", alias = "enable-ssl", num_args = 0..=1, default_missing_value = "true", value_parser = boolean(), global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enable_ssl: Option<bool>,

    /// PEM certificate chain for --enable_ssl (server certificate first).
    #[arg(long = "secret_pem", alias = "secret-pem", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_pem: Option<PathBuf>,

    /// PEM private key (PKCS#8, PKCS#1 or SEC1) for --enable_ssl.
    #[arg(long = "secret_key", alias = "secret-key", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_key: Option<PathBuf>,

    /// Custom op libraries loaded before any model: a comma-separated list of
    /// `.so` files or directories (every `*.so` in them).
    #[arg(long = "custom_op_paths", alias = "custom-op-paths", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub custom_op_paths: Option<String>,

    /// Python threads running models' inference.py handlers. Default: number of cores
    /// (`serve`: SAGEMAKER_GUNICORN_WORKERS when set).
    #[arg(long = "python_workers", alias = "python-workers", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub python_workers: Option<usize>,

    /// One inference.py for every model, instead of each model's code/inference.py.
    #[arg(long = "handler_path", alias = "handler-path", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handler_path: Option<PathBuf>,

    /// Where models' code/requirements.txt are installed. Default: <cache>/handler-deps.
    #[arg(long = "handler_deps_dir", alias = "handler-deps-dir", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handler_deps_dir: Option<PathBuf>,

    /// Merge concurrent requests into batches (TF Serving's flag).
    #[arg(long = "enable_batching", alias = "enable-batching", num_args = 0..=1, default_missing_value = "true", value_parser = boolean(), global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enable_batching: Option<bool>,

    /// TF Serving's BatchingParameters in protobuf text format (needs --enable_batching).
    #[arg(long = "batching_parameters_file", alias = "batching-parameters-file", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batching_parameters_file: Option<PathBuf>,

    /// Threads that run batches (TensorFlow sessions). Default: the parameters
    /// file's num_batch_threads, else the number of cores.
    #[arg(long = "num_batch_threads", alias = "num-batch-threads", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub num_batch_threads: Option<usize>,

    /// With batching off: requests that may wait for a batch thread before 503. Default 1024.
    #[arg(long = "max_queued_runs", alias = "max-queued-runs", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_queued_runs: Option<usize>,

    /// Per-request deadline in milliseconds; expiry answers 504. Default 30000.
    #[arg(long = "rest_api_timeout_in_ms", alias = "rest-api-timeout-in-ms", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rest_api_timeout_in_ms: Option<u64>,

    /// POST requests (inference, management) handled at once, image decodes
    /// included; more answer 503 with Retry-After at once. Default 4096.
    #[arg(long = "max_in_flight_requests", alias = "max-in-flight-requests", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_in_flight_requests: Option<usize>,

    /// Largest accepted request body in bytes; larger ones answer 413. Default 256 MiB.
    #[arg(long = "max_request_bytes", alias = "max-request-bytes", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_request_bytes: Option<usize>,

    /// Threads one op (a matmul, a convolution) may use; 0 lets TensorFlow
    /// choose. Default: cores / num_batch_threads, so concurrent batches don't
    /// oversubscribe the cores.
    #[arg(
        long = "tensorflow_intra_op_parallelism",
        alias = "tensorflow-intra-op-parallelism",
        global = true
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tensorflow_intra_op_parallelism: Option<i32>,

    /// Threads running independent ops of one run concurrently; 0 lets
    /// TensorFlow choose. Default -1: ops run on the batch thread itself,
    /// which saves a thread handoff per run.
    #[arg(
        long = "tensorflow_inter_op_parallelism",
        alias = "tensorflow-inter-op-parallelism",
        global = true
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tensorflow_inter_op_parallelism: Option<i32>,

    /// Comma-separated SavedModel tags to load. Default "serve".
    #[arg(long = "saved_model_tags", alias = "saved-model-tags", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub saved_model_tags: Option<String>,
}

#[derive(clap::Subcommand, Debug, Clone, PartialEq)]
pub enum Command {
    /// Run as the SageMaker TensorFlow Serving container does (`docker run IMAGE serve`):
    /// port $SAGEMAKER_BIND_TO_PORT (8080), models from /opt/ml/model, or loaded
    /// into /opt/ml/models over HTTP with SAGEMAKER_MULTI_MODEL=true.
    Serve,
    /// Batch transform, offline: run every record of the input files through
    /// the /invocations path in process and write `<name>.out` files.
    Transform(crate::transform::TransformArgs),
    /// Show a SavedModel's tag-sets and signatures (dtypes, declared shapes,
    /// method names), warn where a declared shape is inexact, and with --run
    /// answer one TF Serving REST body through the server's own request path.
    Inspect(crate::inspect::InspectArgs),
}

/// Boolean flags take true/false, 1/0, yes/no, on/off in any case
/// (Simple TensorFlow Serving's scripts write `--enable_auth=True`).
fn boolean() -> clap::builder::BoolishValueParser {
    clap::builder::BoolishValueParser::new()
}
