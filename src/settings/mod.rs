//! Server settings, layered as defaults < other servers' variables
//! (`SAGEMAKER_*`, `STFS_*`) < settings file < `TFSERVE_*` variables < command
//! line. One grouped struct is both the flags (clap) and the file (serde);
//! flag names follow `tensorflow_model_server` where they overlap.

use std::collections::BTreeSet;
use std::path::PathBuf;

use clap::Args;
use serde::{Deserialize, Serialize};

use crate::batcher::{BatchParams, ParamsOverride};
use crate::capture::CaptureSettings;
use crate::model_config::SessionOverrides;
use crate::runtime::SessionConfig;

mod cli;
mod env;
mod groups;
mod listeners;
mod runtime;
mod subcommands;
mod summary;
mod tensorflow;

pub use cli::{Cli, Command};
use env::{sagemaker_anywhere, sagemaker_defaults, stfs_env, tfserve_vars, vertex_env};
pub use groups::{clap_defaults, cores, BatchingSettings, HandlerOptions, LogFormat, LoggingSettings, ModelSettings};
pub use listeners::{GrpcSettings, HttpSettings, SecuritySettings, VertexRoutes};
pub use subcommands::{InspectArgs, SplitType, TransformArgs};
pub use tensorflow::TensorFlowSettings;

/// Every setting, by concern. Flattened: the settings file and `TFSERVE_*`
/// variables use the flag names without group prefixes.
#[derive(Args, Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default)]
pub struct Settings {
    #[command(flatten)]
    #[serde(flatten)]
    pub http: HttpSettings,
    #[command(flatten)]
    #[serde(flatten)]
    pub grpc: GrpcSettings,
    #[command(flatten)]
    #[serde(flatten)]
    pub models: ModelSettings,
    #[command(flatten)]
    #[serde(flatten)]
    pub batching: BatchingSettings,
    #[command(flatten)]
    #[serde(flatten)]
    pub handlers: HandlerOptions,
    #[command(flatten)]
    #[serde(flatten)]
    pub security: SecuritySettings,
    #[command(flatten)]
    #[serde(flatten)]
    pub tensorflow: TensorFlowSettings,
    #[command(flatten)]
    #[serde(flatten)]
    pub logging: LoggingSettings,
    #[command(flatten)]
    #[serde(flatten)]
    pub capture: CaptureSettings,
}

/// A password: kept out of `Debug` output, so it never reaches a log.
#[derive(Clone, PartialEq, Deserialize, Serialize)]
#[serde(transparent)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("\"***\"")
    }
}

impl std::str::FromStr for Secret {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Secret(s.to_string()))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("invalid setting {name}={path}: {reason}")]
    File {
        name: &'static str,
        path: String,
        reason: String,
    },
    #[error(transparent)]
    Batching(#[from] crate::batcher::ParamsError),
    #[error("invalid settings: {0}")]
    Config(#[from] config::ConfigError),
    #[error("unknown setting '{0}' (settings are named as the flags, e.g. rest_api_port)")]
    Unknown(String),
    #[error("invalid setting {name}={value}: {reason}")]
    Invalid {
        name: &'static str,
        value: String,
        reason: &'static str,
    },
    #[error("invalid setting {name}={value}: {reason}")]
    InvalidCapture {
        name: String,
        value: String,
        reason: &'static str,
    },
}

impl Settings {
    /// Where handlers come from and how they run.
    pub fn handler_settings(&self) -> crate::python_handlers::HandlerSettings {
        let options = &self.handlers;
        let cache = options.cache_dir.clone().unwrap_or_else(default_cache_dir);
        crate::python_handlers::HandlerSettings {
            handler_path: options.handler_path.clone(),
            shared_code_dir: (!self.models.multi_model).then(|| self.models.models_dir.join("code")),
            deps_dir: options
                .handler_deps_dir
                .clone()
                .unwrap_or_else(|| cache.join("handler-deps")),
            workers: crate::python_handlers::WorkerSettings {
                python: options.python_executable.clone(),
                workers: options.python_workers,
                queue: options.python_workers * 64,
                max_rss_bytes: options.python_worker_max_rss_mb.saturating_mul(1 << 20),
                max_calls: options.python_worker_max_requests,
            },
        }
    }

    /// Merges every layer, reading this process's environment.
    pub fn load(cli: &Cli) -> Result<Settings, SettingsError> {
        Settings::load_with(cli, &std::env::vars().collect::<Vec<_>>())
    }

    /// Merges defaults, other servers' variables, the `--config` file,
    /// `TFSERVE_*` variables and the flags given, with `vars` as the environment.
    pub fn load_with(cli: &Cli, vars: &[(String, String)]) -> Result<Settings, SettingsError> {
        let env = |name: &str| vars.iter().find(|(key, _)| key == name).map(|(_, value)| value.clone());
        let layer = |map: &serde_json::Map<String, serde_json::Value>| config::Config::try_from(map);
        let mut builder = config::Config::builder().add_source(config::Config::try_from(&Settings::default())?);
        if cli.command == Some(Command::Serve) {
            builder = builder.add_source(layer(&sagemaker_defaults(&env)?)?);
        }
        builder = builder
            .add_source(layer(&sagemaker_anywhere(&env)?)?)
            .add_source(layer(&stfs_env(&env)?)?)
            .add_source(layer(&vertex_env(&env)?)?);
        if let Some(path) = &cli.config {
            builder = builder.add_source(config::File::from(path.as_path()));
        }
        let merged = builder
            .add_source(
                config::Environment::with_prefix("TFSERVE")
                    .prefix_separator("_")
                    .source(Some(tfserve_vars(vars)?))
                    .try_parsing(true)
                    // The list settings take a comma-separated value, as their flags do.
                    .list_separator(",")
                    .with_list_parse_key("model_roots")
                    .with_list_parse_key("capture_metadata_headers"),
            )
            .add_source(layer(&cli.given_settings()?)?)
            .build()?;
        let known = known_keys()?;
        let keys = merged
            .clone()
            .try_deserialize::<std::collections::BTreeMap<String, serde::de::IgnoredAny>>()?;
        if let Some(unknown) = keys.into_keys().find(|key| !known.contains(key)) {
            return Err(SettingsError::Unknown(unknown));
        }
        let settings: Settings = merged.try_deserialize()?;
        settings.validate()?;
        Ok(settings)
    }

    // Kept whole: one check per setting, read top to bottom.
    fn validate(&self) -> Result<(), SettingsError> {
        let positive = |name: &'static str, value: u64| {
            if value == 0 {
                Err(SettingsError::Invalid {
                    name,
                    value: "0".into(),
                    reason: "must be at least 1",
                })
            } else {
                Ok(())
            }
        };
        let count = |n: usize| n as u64;
        positive("rest_api_num_threads", count(self.http.rest_api_num_threads))?;
        positive("num_batch_threads", count(self.batching.num_batch_threads.unwrap_or(1)))?;
        positive("max_queued_runs", count(self.batching.max_queued_runs))?;
        positive("max_request_bytes", count(self.http.max_request_bytes))?;
        positive("max_in_flight_requests", count(self.http.max_in_flight_requests))?;
        positive("python_workers", count(self.handlers.python_workers))?;
        positive("rest_api_timeout_in_ms", self.http.rest_api_timeout_in_ms)?;
        let drain = self.http.drain_timeout;
        if !(drain.is_finite() && (0.0..=86_400.0).contains(&drain)) {
            return Err(SettingsError::Invalid {
                name: "drain_timeout",
                value: drain.to_string(),
                reason: "must be between 0 and 86400 seconds",
            });
        }
        let rate = self.logging.access_log_sampling_rate;
        if !(0.0..=1.0).contains(&rate) {
            return Err(SettingsError::Invalid {
                name: "access_log_sampling_rate",
                value: rate.to_string(),
                reason: "must be between 0 and 1",
            });
        }
        if let Some((name, value, reason)) = self.capture.invalid() {
            return Err(SettingsError::InvalidCapture { name, value, reason });
        }
        if self.tensorflow.gpu && self.tensorflow.cpu_only {
            return Err(SettingsError::Invalid {
                name: "gpu",
                value: "true".into(),
                reason: "contradicts cpu_only=true: choose one",
            });
        }
        if self.tensorflow.cpu_only && !self.tensorflow.gpu_ids.is_empty() {
            return Err(SettingsError::Invalid {
                name: "gpu_ids",
                value: ids(&self.tensorflow.gpu_ids),
                reason: "contradicts cpu_only=true: choose one",
            });
        }
        if let Some(size) = self
            .tensorflow
            .virtual_gpu_memory_mb
            .iter()
            .find(|mb| !(mb.is_finite() && **mb >= 1.0))
        {
            return Err(SettingsError::Invalid {
                name: "virtual_gpu_memory_mb",
                value: size.to_string(),
                reason: "each logical GPU needs at least 1 MiB",
            });
        }
        if let Some(dir) = self.tensorflow.gpu_compile_cache_dir.as_ref().filter(|d| d.is_file()) {
            return Err(SettingsError::Invalid {
                name: "gpu_compile_cache_dir",
                value: dir.display().to_string(),
                reason: "is a file, not a directory",
            });
        }
        if self.models.saved_model_tags.split(',').all(|t| t.trim().is_empty()) {
            return Err(SettingsError::Invalid {
                name: "saved_model_tags",
                value: self.models.saved_model_tags.clone(),
                reason: "names no tag",
            });
        }
        self.security.validate()
    }

    /// The extra metrics path `--monitoring_config_file` asks for (TF Serving's
    /// `MonitoringConfig`), checked at start-up like TF Serving does.
    pub fn metrics_path(&self) -> Result<Option<String>, SettingsError> {
        let Some(path) = &self.http.monitoring_config_file else {
            return Ok(None);
        };
        let invalid = |reason: String| SettingsError::File {
            name: "monitoring_config_file",
            path: path.display().to_string(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| invalid(e.to_string()))?;
        let config = crate::textproto::parse(&text).map_err(|e| {
            invalid(format!(
                "Error parsing text-format tensorflow.serving.MonitoringConfig: {e}"
            ))
        })?;
        let Some(prometheus) = config.message("prometheus_config") else {
            return Ok(None);
        };
        if prometheus.scalar("enable") != Some("true") {
            return Ok(None);
        }
        let path = prometheus.scalar("path").unwrap_or("/monitoring/prometheus/metrics");
        if !path.starts_with('/') {
            return Err(invalid(format!("prometheus_config.path {path:?} must start with '/'")));
        }
        Ok(Some(path.to_string()))
    }

    /// The HTTP port: `rest_api_port`, else a lone `port` (Simple TensorFlow
    /// Serving style), else 8501.
    pub fn http_port(&self) -> u16 {
        self.http.rest_api_port.unwrap_or(8501)
    }

    /// TF Serving's `--port`; ephemeral beside an ephemeral REST port, so
    /// servers started on port 0 (tests, batch transform) never collide.
    pub fn grpc_port(&self) -> u16 {
        match (self.http.port, self.http.rest_api_port) {
            (Some(port), _) => port,
            (None, Some(0)) => 0,
            (None, _) => 8500,
        }
    }

    /// The TLS files REST and gRPC serve with, when `--enable_ssl` has both.
    pub fn tls_files(&self) -> Option<crate::tls::TlsFiles> {
        let security = &self.security;
        match (&security.secret_pem, &security.secret_key) {
            (Some(certificate), Some(key)) if security.enable_ssl => Some(crate::tls::TlsFiles {
                certificate: certificate.clone(),
                key: key.clone(),
                client_ca: security.ssl_client_ca.clone(),
            }),
            _ => None,
        }
    }

    /// Directories models loaded over the network must live in (`--model_roots`).
    pub fn roots(&self) -> Vec<PathBuf> {
        if self.models.model_roots.is_empty() {
            vec![self.models.models_dir.clone()]
        } else {
            self.models.model_roots.clone()
        }
    }

    pub fn tags(&self) -> Vec<String> {
        self.models
            .saved_model_tags
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(String::from)
            .collect()
    }
}

impl SecuritySettings {
    /// Auth needs both credentials; TLS needs a certificate and a key that
    /// exist; the allowed access names known classes.
    fn validate(&self) -> Result<(), SettingsError> {
        let invalid =
            |name: &'static str, value: String, reason: &'static str| SettingsError::Invalid { name, value, reason };
        self.check_access()?;
        if self.enable_auth {
            if self.auth_username.as_deref().is_none_or(str::is_empty) {
                return Err(invalid("auth_username", String::new(), "is required with enable_auth"));
            }
            if self.auth_password.as_ref().is_none_or(|p| p.0.is_empty()) {
                return Err(invalid("auth_password", String::new(), "is required with enable_auth"));
            }
        }
        if !self.enable_ssl {
            return Ok(());
        }
        for (name, path) in [("secret_pem", &self.secret_pem), ("secret_key", &self.secret_key)] {
            match path {
                None => return Err(invalid(name, String::new(), "is required with enable_ssl")),
                Some(path) if !path.is_file() => {
                    return Err(invalid(name, path.display().to_string(), "is not a readable file"))
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
}

/// `$HOME/.cache/tfserve` (the set-up scripts' default), else the temporary directory.
fn default_cache_dir() -> PathBuf {
    std::env::var_os("HOME")
        .map(|home| PathBuf::from(home).join(".cache").join("tfserve"))
        .unwrap_or_else(std::env::temp_dir)
}

/// Every settings key: the flag names, and `model_batching`.
fn known_keys() -> Result<BTreeSet<String>, SettingsError> {
    let defaults = serde_json::to_value(Settings::default()).map_err(|e| config::ConfigError::Foreign(Box::new(e)))?;
    Ok(defaults
        .as_object()
        .map(|object| object.keys().cloned().collect())
        .unwrap_or_default())
}

#[cfg(test)]
mod tests;

fn ids(ids: &[u32]) -> String {
    ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}
