//! Server settings, layered as defaults < config file < `TFSERVE_*` environment
//! < command line. Flag names follow `tensorflow_model_server` where they overlap.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::batcher::{BatchParams, ParamsOverride};
use crate::model_config::{DefaultVersionPolicy, SessionOverrides};
use crate::registry::SwapPolicy;
use crate::runtime::SessionConfig;

mod cli;
mod env;

pub use cli::{Cli, Command};
use env::{sagemaker_defaults, settings_from_env, stfs_env};

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    pub rest_api_port: Option<u16>,
    pub port: Option<u16>,
    pub host: String,
    pub model_name: String,
    /// The model `/invocations` and `/ping` serve without `tfs-model-name`
    /// (`SAGEMAKER_TFS_DEFAULT_MODEL_NAME`); unset: the first model by name.
    pub default_model_name: Option<String>,
    pub model_base_path: Option<PathBuf>,
    pub model_config_file: Option<PathBuf>,
    pub file_system_poll_wait_seconds: i64,
    pub model_config_file_poll_wait_seconds: u64,
    pub swap_policy: SwapPolicy,
    /// Versions served from `--model_base_path` and `--models_dir` (a config file names its own).
    pub model_version_policy: DefaultVersionPolicy,
    pub model_roots: Vec<PathBuf>,
    pub max_models: usize,
    pub session_config: Option<String>,
    pub enable_auth: bool,
    pub auth_username: Option<String>,
    pub auth_password: Option<Secret>,
    pub enable_cors: bool,
    /// `:classify`/`:regress` only on signatures whose method_name says so (TF Serving's flag, off by default).
    pub enable_signature_method_name_check: bool,
    pub enable_ssl: bool,
    pub secret_pem: Option<PathBuf>,
    pub secret_key: Option<PathBuf>,
    pub custom_op_paths: Option<String>,
    pub python_workers: usize,
    pub handler_path: Option<PathBuf>,
    pub handler_deps_dir: Option<PathBuf>,
    pub models_dir: PathBuf,
    /// Start with no models; they are loaded over HTTP (SageMaker's multi-model endpoint).
    pub multi_model: bool,
    pub rest_api_num_threads: usize,
    pub enable_batching: bool,
    pub batching_parameters_file: Option<PathBuf>,
    pub num_batch_threads: Option<usize>,
    /// Per-model batching overrides (settings file only), keyed by model name.
    pub model_batching: BTreeMap<String, ParamsOverride>,
    pub max_queued_runs: usize,
    pub rest_api_timeout_in_ms: u64,
    pub max_request_bytes: usize,
    /// Inference and management requests (POST) handled at once; more answer 503.
    pub max_in_flight_requests: usize,
    pub tensorflow_intra_op_parallelism: Option<i32>,
    pub tensorflow_inter_op_parallelism: Option<i32>,
    pub saved_model_tags: String,
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

pub fn cores() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2)
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            rest_api_port: None,
            port: None,
            host: "0.0.0.0".into(),
            model_name: "default".into(),
            default_model_name: None,
            model_base_path: None,
            model_config_file: None,
            file_system_poll_wait_seconds: 1,
            model_config_file_poll_wait_seconds: 0,
            swap_policy: SwapPolicy::default(),
            model_version_policy: DefaultVersionPolicy::default(),
            model_roots: Vec::new(),
            max_models: 0,
            session_config: None,
            enable_auth: false,
            auth_username: None,
            auth_password: None,
            enable_cors: false,
            enable_signature_method_name_check: false,
            enable_ssl: false,
            secret_pem: None,
            secret_key: None,
            custom_op_paths: None,
            python_workers: cores(),
            handler_path: None,
            handler_deps_dir: None,
            models_dir: "models".into(),
            multi_model: false,
            rest_api_num_threads: cores(),
            enable_batching: false,
            batching_parameters_file: None,
            num_batch_threads: None,
            model_batching: BTreeMap::new(),
            max_queued_runs: 1024,
            rest_api_timeout_in_ms: 30_000,
            max_request_bytes: 256 << 20,
            max_in_flight_requests: 4096,
            tensorflow_intra_op_parallelism: None,
            tensorflow_inter_op_parallelism: None,
            saved_model_tags: "serve".into(),
        }
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
    #[error("invalid setting {name}={value}: {reason}")]
    Invalid {
        name: &'static str,
        value: String,
        reason: &'static str,
    },
}

impl Settings {
    /// Where handlers come from and how they run.
    pub fn handler_settings(&self) -> crate::handlers::HandlerSettings {
        let cache = std::env::var_os("TFSERVE_CACHE_DIR")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache").join("tfserve")))
            .unwrap_or_else(std::env::temp_dir);
        crate::handlers::HandlerSettings {
            handler_path: self.handler_path.clone(),
            shared_code_dir: (!self.multi_model).then(|| self.models_dir.join("code")),
            deps_dir: self
                .handler_deps_dir
                .clone()
                .unwrap_or_else(|| cache.join("handler-deps")),
            workers: self.python_workers,
            queue: self.python_workers * 64,
        }
    }

    /// Merges defaults, the `--config` file, `TFSERVE_*` variables and the flags.
    pub fn load(cli: &Cli) -> Result<Settings, SettingsError> {
        let mut builder = config::Config::builder().add_source(config::Config::try_from(&Settings::default())?);
        if cli.command == Some(Command::Serve) {
            builder = builder.add_source(config::Config::try_from(&sagemaker_defaults(&|name| {
                std::env::var(name).ok()
            })?)?);
        }
        builder = builder.add_source(config::Config::try_from(&stfs_env(&|name| std::env::var(name).ok())?)?);
        // Read in every mode: a SageMaker-style archive served without `serve` names its model too.
        if let Some(name) = std::env::var("SAGEMAKER_TFS_DEFAULT_MODEL_NAME")
            .ok()
            .filter(|n| !n.is_empty() && n != "None")
        {
            let mut map = serde_json::Map::new();
            map.insert("default_model_name".into(), name.into());
            builder = builder.add_source(config::Config::try_from(&map)?);
        }
        if let Some(path) = &cli.config {
            builder = builder.add_source(config::File::from(path.as_path()));
        }
        let settings: Settings = builder
            .add_source(
                config::Environment::with_prefix("TFSERVE")
                    .prefix_separator("_")
                    .source(Some(settings_from_env()?))
                    .try_parsing(true),
            )
            .add_source(config::Config::try_from(cli)?)
            .build()?
            .try_deserialize()?;
        settings.validate()?;
        Ok(settings)
    }

    fn validate(&self) -> Result<(), SettingsError> {
        let positive = |name: &'static str, value: usize| {
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
        positive("rest_api_num_threads", self.rest_api_num_threads)?;
        positive("num_batch_threads", self.num_batch_threads.unwrap_or(1))?;
        positive("max_queued_runs", self.max_queued_runs)?;
        positive("max_request_bytes", self.max_request_bytes)?;
        positive("max_in_flight_requests", self.max_in_flight_requests)?;
        positive("python_workers", self.python_workers)?;
        if self.enable_auth {
            let missing = |name: &'static str| SettingsError::Invalid {
                name,
                value: String::new(),
                reason: "is required with enable_auth",
            };
            if self.auth_username.as_deref().is_none_or(str::is_empty) {
                return Err(missing("auth_username"));
            }
            if self.auth_password.as_ref().is_none_or(|p| p.0.is_empty()) {
                return Err(missing("auth_password"));
            }
        }
        if self.enable_ssl {
            for (name, path) in [("secret_pem", &self.secret_pem), ("secret_key", &self.secret_key)] {
                match path {
                    None => {
                        return Err(SettingsError::Invalid {
                            name,
                            value: String::new(),
                            reason: "is required with enable_ssl",
                        })
                    }
                    Some(path) if !path.is_file() => {
                        return Err(SettingsError::Invalid {
                            name,
                            value: path.display().to_string(),
                            reason: "is not a readable file",
                        })
                    }
                    Some(_) => {}
                }
            }
        }
        if self.rest_api_timeout_in_ms == 0 {
            return Err(SettingsError::Invalid {
                name: "rest_api_timeout_in_ms",
                value: "0".into(),
                reason: "must be at least 1",
            });
        }
        if self.saved_model_tags.split(',').all(|t| t.trim().is_empty()) {
            return Err(SettingsError::Invalid {
                name: "saved_model_tags",
                value: self.saved_model_tags.clone(),
                reason: "names no tag",
            });
        }
        Ok(())
    }

    /// The HTTP port: `rest_api_port`, else a lone `port` (Simple TensorFlow
    /// Serving style), else 8501.
    pub fn http_port(&self) -> u16 {
        self.rest_api_port.or(self.port).unwrap_or(8501)
    }

    /// Session thread pools: the configured sizes, or defaults that fit
    /// `batch_threads` concurrent runs onto the cores.
    pub fn session_threads(&self, batch_threads: usize) -> (i32, i32) {
        let intra = self
            .tensorflow_intra_op_parallelism
            .unwrap_or((cores() / batch_threads.max(1)).max(1) as i32);
        (intra, self.tensorflow_inter_op_parallelism.unwrap_or(-1))
    }

    /// Every model's session options: the thread defaults above, then `--session_config`.
    pub fn session(&self, batch_threads: usize) -> Result<SessionConfig, SettingsError> {
        let (intra, inter) = self.session_threads(batch_threads);
        let base = SessionConfig {
            intra_op_parallelism: intra,
            inter_op_parallelism: inter,
            ..SessionConfig::default()
        };
        let Some(text) = &self.session_config else {
            return Ok(base);
        };
        let invalid = |reason: String| SettingsError::File {
            name: "session_config",
            path: text.clone(),
            reason,
        };
        let json: serde_json::Value = serde_json::from_str(text).map_err(|e| invalid(format!("invalid JSON: {e}")))?;
        let overrides = SessionOverrides::from_json("(all models)", &json).map_err(invalid)?;
        Ok(overrides.apply(&base))
    }

    /// The global batching parameters and thread count: TF Serving's
    /// `--batching_parameters_file`, else SageMaker's `SAGEMAKER_TFS_*`
    /// variables when `SAGEMAKER_TFS_ENABLE_BATCHING` is true, else TF Serving's
    /// defaults. Also returns whether batching is on.
    pub fn batching(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<(bool, BatchParams, usize), SettingsError> {
        let invalid =
            |name: &'static str, value: String, reason: &'static str| SettingsError::Invalid { name, value, reason };
        let sagemaker = match env("SAGEMAKER_TFS_ENABLE_BATCHING") {
            None => false,
            Some(v) => match v.to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" => true,
                "false" | "0" | "no" | "" => false,
                _ => return Err(invalid("SAGEMAKER_TFS_ENABLE_BATCHING", v, "must be true or false")),
            },
        };
        let enabled = self.enable_batching || sagemaker;
        let (params, file_threads) = match &self.batching_parameters_file {
            Some(path) if !self.enable_batching => {
                return Err(invalid(
                    "batching_parameters_file",
                    path.display().to_string(),
                    "needs enable_batching",
                ))
            }
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|_| invalid("batching_parameters_file", path.display().to_string(), "cannot be read"))?;
                BatchParams::from_textproto(&text).map_err(|reason| SettingsError::File {
                    name: "batching_parameters_file",
                    path: path.display().to_string(),
                    reason,
                })?
            }
            None if sagemaker && !self.enable_batching => {
                let number = |name: &'static str, default: usize| -> Result<usize, SettingsError> {
                    match env(name) {
                        None => Ok(default),
                        Some(v) => v
                            .trim()
                            .parse()
                            .map_err(|_| invalid(name, v, "must be a non-negative integer")),
                    }
                };
                let params = BatchParams {
                    max_batch_size: number("SAGEMAKER_TFS_MAX_BATCH_SIZE", 8)?,
                    batch_timeout_micros: number("SAGEMAKER_TFS_BATCH_TIMEOUT_MICROS", 1000)? as u64,
                    max_enqueued_batches: number("SAGEMAKER_TFS_MAX_ENQUEUED_BATCHES", cores())?,
                    ..BatchParams::default()
                };
                (params, Some(number("SAGEMAKER_TFS_NUM_BATCH_THREADS", cores())?))
            }
            None => (BatchParams::default(), None),
        };
        let threads = self.num_batch_threads.or(file_threads).unwrap_or_else(cores);
        if threads == 0 {
            return Err(invalid("num_batch_threads", "0".into(), "must be at least 1"));
        }
        if enabled {
            params.validate("").map_err(SettingsError::Batching)?;
            for (model, overrides) in &self.model_batching {
                overrides
                    .apply(&params)
                    .validate(&format!(" for model {model}"))
                    .map_err(SettingsError::Batching)?;
            }
        }
        Ok((enabled, params, threads))
    }

    /// Directories models loaded over HTTP must live in.
    pub fn roots(&self) -> Vec<PathBuf> {
        if self.model_roots.is_empty() {
            vec![self.models_dir.clone()]
        } else {
            self.model_roots.clone()
        }
    }

    pub fn tags(&self) -> Vec<String> {
        self.saved_model_tags
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(String::from)
            .collect()
    }
}

#[cfg(test)]
mod tests;
