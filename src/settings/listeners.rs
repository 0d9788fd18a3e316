//! The settings of the two listeners and who may call them: HTTP, gRPC and
//! security. Like every group (see `groups.rs`), each field is a flag, a key
//! of the settings file and a `TFSERVE_NAME` variable, its default written once.

use std::path::PathBuf;

use clap::{ArgAction, Args};
use serde::{Deserialize, Serialize};

use super::groups::{boolean, clap_defaults, cores};
use super::{Secret, SettingsError};

/// The HTTP listener and what it admits.
#[derive(Args, Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default)]
#[command(next_help_heading = "HTTP")]
pub struct HttpSettings {
    /// HTTP port for every REST API (TF Serving's, KServe v2's, SageMaker's,
    /// Simple TensorFlow Serving's). Default 8501.
    #[arg(long = "rest_api_port", alias = "rest-api-port", global = true)]
    pub rest_api_port: Option<u16>,

    /// gRPC port (TF Serving's PredictionService and ModelService, KServe v2's
    /// GRPCInferenceService, health, reflection). Default 8500; an ephemeral one
    /// when --rest_api_port is 0.
    #[arg(long, global = true)]
    pub port: Option<u16>,

    /// Address to bind.
    #[arg(long, global = true, default_value_t = String::from("0.0.0.0"))]
    pub host: String,

    /// Vertex AI's health route (AIP_HEALTH_ROUTE): GET answers 200 once
    /// every model serves, 503 before.
    #[arg(long = "vertex_health_route", alias = "vertex-health-route", global = true)]
    pub vertex_health_route: Option<String>,

    /// Vertex AI's predict route (AIP_PREDICT_ROUTE): TF Serving's predict
    /// request on the served model, answered as {"predictions": ...}.
    #[arg(long = "vertex_predict_route", alias = "vertex-predict-route", global = true)]
    pub vertex_predict_route: Option<String>,

    /// HTTP worker threads. Default: number of cores.
    #[arg(long = "rest_api_num_threads", alias = "rest-api-num-threads", global = true, default_value_t = cores())]
    pub rest_api_num_threads: usize,

    /// Per-request deadline in milliseconds; expiry answers 504.
    #[arg(
        long = "rest_api_timeout_in_ms",
        alias = "rest-api-timeout-in-ms",
        global = true,
        default_value_t = 30_000
    )]
    pub rest_api_timeout_in_ms: u64,

    /// Largest accepted request body in bytes; larger ones answer 413. Default 256 MiB.
    #[arg(long = "max_request_bytes", alias = "max-request-bytes", global = true, default_value_t = 256 << 20)]
    pub max_request_bytes: usize,

    /// POST requests (inference, management) handled at once, image decodes
    /// included; more answer 503 with Retry-After at once.
    #[arg(
        long = "max_in_flight_requests",
        alias = "max-in-flight-requests",
        global = true,
        default_value_t = 4096
    )]
    pub max_in_flight_requests: usize,

    /// Bytes REST requests hold at once: their bodies and the tensors decoded
    /// from them; a request past it answers 503 with Retry-After before the
    /// allocation. Default 1 GiB.
    #[arg(long = "max_in_flight_bytes", alias = "max-in-flight-bytes", global = true, default_value_t = 1 << 30)]
    pub max_in_flight_bytes: usize,

    /// Seconds between SIGTERM and closing the listener: readiness answers 503
    /// and responses close their connections meanwhile (SIGINT does not wait).
    #[arg(
        long = "drain_timeout",
        alias = "drain-timeout",
        global = true,
        default_value_t = 5.0
    )]
    pub drain_timeout: f64,

    /// Milliseconds a client may take to send a request's headers (slow clients get 408).
    #[arg(
        long = "client_request_timeout_ms",
        alias = "client-request-timeout-ms",
        global = true,
        default_value_t = 5_000
    )]
    pub client_request_timeout_ms: u64,

    /// Milliseconds a request body may take to arrive (slow bodies get 408).
    #[arg(
        long = "client_body_timeout_ms",
        alias = "client-body-timeout-ms",
        global = true,
        default_value_t = 60_000
    )]
    pub client_body_timeout_ms: u64,

    /// Seconds an idle keep-alive connection stays open; 0 closes each after its response.
    #[arg(
        long = "keep_alive_seconds",
        alias = "keep-alive-seconds",
        global = true,
        default_value_t = 5
    )]
    pub keep_alive_seconds: u64,

    /// Connections each HTTP worker holds at once; more wait in the kernel's accept queue.
    #[arg(
        long = "max_connections",
        alias = "max-connections",
        global = true,
        default_value_t = 25_000
    )]
    pub max_connections: usize,

    /// Answer cross-origin browser requests (CORS: any origin, without credentials).
    #[arg(long = "enable_cors", alias = "enable-cors", num_args = 0..=1, default_missing_value = "true", default_value_t = false, action = ArgAction::Set, value_parser = boolean(), global = true)]
    pub enable_cors: bool,

    /// TF Serving's monitoring config (text format): `prometheus_config { enable:
    /// true path: "..." }` also serves the metrics at that path.
    #[arg(long = "monitoring_config_file", alias = "monitoring-config-file", global = true)]
    pub monitoring_config_file: Option<PathBuf>,
}

/// The gRPC listener's limits and connection management.
#[derive(Args, Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default)]
#[command(next_help_heading = "gRPC")]
pub struct GrpcSettings {
    /// Largest gRPC message received or sent, in bytes (TF Serving's limit: 2 GiB).
    #[arg(long = "grpc_max_message_bytes", alias = "grpc-max-message-bytes", global = true, default_value_t = i32::MAX as usize)]
    pub grpc_max_message_bytes: usize,

    /// Threads serving gRPC calls. Default: number of cores.
    #[arg(long = "grpc_num_threads", alias = "grpc-num-threads", global = true, default_value_t = cores())]
    pub grpc_num_threads: usize,

    /// Seconds between HTTP/2 keepalive pings on idle connections; 0: none.
    #[arg(
        long = "grpc_keepalive_seconds",
        alias = "grpc-keepalive-seconds",
        global = true,
        default_value_t = 0
    )]
    pub grpc_keepalive_seconds: u64,

    /// Seconds a keepalive ping may go unanswered before the connection closes.
    #[arg(
        long = "grpc_keepalive_timeout_seconds",
        alias = "grpc-keepalive-timeout-seconds",
        global = true,
        default_value_t = 20
    )]
    pub grpc_keepalive_timeout_seconds: u64,

    /// Seconds after which a connection is asked to go away (GOAWAY), so clients
    /// re-resolve and spread over replicas; 0: never.
    #[arg(
        long = "grpc_max_connection_age_seconds",
        alias = "grpc-max-connection-age-seconds",
        global = true,
        default_value_t = 0
    )]
    pub grpc_max_connection_age_seconds: u64,

    /// Seconds calls on a connection past its age may take to finish.
    #[arg(
        long = "grpc_max_connection_age_grace_seconds",
        alias = "grpc-max-connection-age-grace-seconds",
        global = true,
        default_value_t = 30
    )]
    pub grpc_max_connection_age_grace_seconds: u64,

    /// Seconds a gRPC connection may have no call open before it is asked
    /// to go away (GOAWAY; clients reconnect when they next call); 0: never.
    #[arg(
        long = "grpc_max_connection_idle_seconds",
        alias = "grpc-max-connection-idle-seconds",
        global = true,
        default_value_t = 300
    )]
    pub grpc_max_connection_idle_seconds: u64,

    /// gRPC connections served at once; more are closed as they are accepted.
    #[arg(
        long = "grpc_max_connections",
        alias = "grpc-max-connections",
        global = true,
        default_value_t = 4096
    )]
    pub grpc_max_connections: usize,

    /// Answer bytes one gRPC connection may hold for a client that does not
    /// read them (opens no flow-control window); answers beyond it are
    /// refused with RESOURCE_EXHAUSTED. One answer alone may be larger.
    #[arg(
        long = "grpc_max_pending_answer_bytes",
        alias = "grpc-max-pending-answer-bytes",
        global = true,
        default_value_t = 16 << 20
    )]
    pub grpc_max_pending_answer_bytes: usize,

    /// Also serve gRPC on this Unix domain socket (TF Serving's flag).
    #[arg(long = "grpc_socket_path", alias = "grpc-socket-path", global = true)]
    pub grpc_socket_path: Option<PathBuf>,

    /// gRPC server arguments, `key=value,...` as TF Serving takes them
    /// (`grpc.max_connection_age_ms`, `grpc.keepalive_time_ms`, ...); the ones
    /// this server has no use for are logged and ignored, as gRPC does.
    #[arg(
        long = "grpc_channel_arguments",
        alias = "grpc-channel-arguments",
        global = true,
        default_value = ""
    )]
    pub grpc_channel_arguments: String,
}

/// Who may call, and over what.
#[derive(Args, Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default)]
#[command(next_help_heading = "Security")]
pub struct SecuritySettings {
    /// Require HTTP basic auth on every route but liveness (Simple TensorFlow Serving's flag).
    #[arg(long = "enable_auth", alias = "enable-auth", num_args = 0..=1, default_missing_value = "true", default_value_t = false, action = ArgAction::Set, value_parser = boolean(), global = true)]
    pub enable_auth: bool,

    /// The basic-auth user name (needs --enable_auth).
    #[arg(long = "auth_username", alias = "auth-username", global = true)]
    pub auth_username: Option<String>,

    /// The basic-auth password (needs --enable_auth). Never logged.
    #[arg(long = "auth_password", alias = "auth-password", global = true)]
    pub auth_password: Option<Secret>,

    /// Serve HTTPS only (rustls), with --secret_pem and --secret_key.
    #[arg(long = "enable_ssl", alias = "enable-ssl", num_args = 0..=1, default_missing_value = "true", default_value_t = false, action = ArgAction::Set, value_parser = boolean(), global = true)]
    pub enable_ssl: bool,

    /// PEM certificate chain for --enable_ssl (server certificate first).
    #[arg(long = "secret_pem", alias = "secret-pem", global = true)]
    pub secret_pem: Option<PathBuf>,

    /// PEM private key (PKCS#8, PKCS#1 or SEC1) for --enable_ssl.
    #[arg(long = "secret_key", alias = "secret-key", global = true)]
    pub secret_key: Option<PathBuf>,

    /// PEM CA certificates for mutual TLS (needs --enable_ssl): REST and gRPC
    /// clients must then present a certificate these signed.
    #[arg(long = "ssl_client_ca", alias = "ssl-client-ca", global = true)]
    pub ssl_client_ca: Option<PathBuf>,

    /// Comma-separated classes of access outside the request that every
    /// model's signatures may reach: files_read, files_write, network,
    /// custom_ops, or all. A model's config entry may allow more for itself
    /// (allow_access). Default: none; a model that reaches one does not load.
    #[arg(long = "allow_model_access", alias = "allow-model-access", global = true, default_value_t = String::new())]
    pub allow_model_access: String,

    /// Confine the process with Landlock (Linux 5.13 and later): once
    /// started it reads only its models, libraries and configuration, and
    /// writes only its caches, captures and logs. false: not confined.
    #[arg(long = "confine", num_args = 0..=1, default_missing_value = "true", default_value_t = true, action = ArgAction::Set, value_parser = boolean(), global = true)]
    pub confine: bool,
}

impl Default for HttpSettings {
    fn default() -> Self {
        clap_defaults()
    }
}

impl Default for GrpcSettings {
    fn default() -> Self {
        clap_defaults()
    }
}

impl SecuritySettings {
    /// The classes of access every model may reach (`--allow_model_access`, checked at load).
    pub fn allowed_access(&self) -> std::collections::BTreeSet<crate::audit::Access> {
        crate::audit::parse_classes(&self.allow_model_access).unwrap_or_default()
    }

    pub(super) fn check_access(&self) -> Result<(), SettingsError> {
        match crate::audit::parse_classes(&self.allow_model_access) {
            Ok(_) => Ok(()),
            Err(_) => Err(SettingsError::Invalid {
                name: "allow_model_access",
                value: self.allow_model_access.clone(),
                reason: "must list files_read, files_write, network, custom_ops or all, separated by commas",
            }),
        }
    }
}

impl Default for SecuritySettings {
    fn default() -> Self {
        clap_defaults()
    }
}

/// The routes Vertex AI's custom-container contract names, checked.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VertexRoutes {
    pub health: Option<String>,
    pub predict: Option<String>,
}

impl HttpSettings {
    pub fn vertex_routes(&self) -> Result<VertexRoutes, SettingsError> {
        let check = |name: &'static str, route: &Option<String>| match route {
            Some(path) if !path.starts_with('/') || path.contains(['{', '}', '?', '#']) => {
                Err(SettingsError::Invalid {
                    name,
                    value: path.clone(),
                    reason: "must be a path starting with '/', without '{', '}', '?' or '#'",
                })
            }
            _ => Ok(route.clone()),
        };
        Ok(VertexRoutes {
            health: check("vertex_health_route", &self.vertex_health_route)?,
            predict: check("vertex_predict_route", &self.vertex_predict_route)?,
        })
    }
}
