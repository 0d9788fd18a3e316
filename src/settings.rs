//! Server settings, layered as defaults < config file < `TFSERVE_*` environment
//! < command line. Flag names follow `tensorflow_model_server` where they overlap.

use std::path::PathBuf;

use clap::Parser;
use serde::{Deserialize, Serialize};

/// Command-line flags. Every flag is also accepted with dashes
/// (`--rest-api-port`), as `--flag=value` or `--flag value`.
#[derive(Parser, Debug, Default, Serialize)]
#[command(
    name = "tfserve",
    version,
    about = "Serves TensorFlow SavedModels over the TF Serving REST API"
)]
pub struct Cli {
    /// Settings file (TOML, YAML or JSON); keys are the flag names.
    #[arg(long)]
    #[serde(skip)]
    pub config: Option<PathBuf>,

    /// HTTP port for every API (TF Serving's REST port). Default 8501.
    #[arg(long = "rest_api_port", alias = "rest-api-port")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rest_api_port: Option<u16>,

    /// TF Serving's gRPC port. tfserve has no gRPC API: given alone, it sets the HTTP port.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,

    /// Address to bind. Default 0.0.0.0.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,

    /// Name of the model given by --model_base_path. Default "default".
    #[arg(long = "model_name", alias = "model-name")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_name: Option<String>,

    /// Directory whose numeric subdirectories are versions of one model.
    #[arg(long = "model_base_path", alias = "model-base-path")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_base_path: Option<PathBuf>,

    /// TF Serving model config (protobuf text format or JSON, or Simple
    /// TensorFlow Serving's JSON list); takes precedence over --model_base_path.
    #[arg(long = "model_config_file", alias = "model-config-file")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_config_file: Option<PathBuf>,

    /// Directory whose subdirectories are models (each holding numeric version
    /// directories). Used when --model_base_path is not given. Default "models".
    #[arg(long = "models_dir", alias = "models-dir")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub models_dir: Option<PathBuf>,

    /// HTTP worker threads. Default: number of cores.
    #[arg(long = "rest_api_num_threads", alias = "rest-api-num-threads")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rest_api_num_threads: Option<usize>,

    /// Threads that run TensorFlow sessions. Default: number of cores.
    #[arg(long = "session_run_threads", alias = "session-run-threads")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_run_threads: Option<usize>,

    /// Runs that may wait for a session thread before requests get 503. Default 1024.
    #[arg(long = "max_queued_runs", alias = "max-queued-runs")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_queued_runs: Option<usize>,

    /// Per-request deadline in milliseconds; expiry answers 504. Default 30000.
    #[arg(long = "rest_api_timeout_in_ms", alias = "rest-api-timeout-in-ms")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rest_api_timeout_in_ms: Option<u64>,

    /// Largest accepted request body in bytes; larger ones answer 413. Default 256 MiB.
    #[arg(long = "max_request_bytes", alias = "max-request-bytes")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_request_bytes: Option<usize>,

    /// TensorFlow intra-op thread pool size; 0 lets TensorFlow choose.
    #[arg(long = "tensorflow_intra_op_parallelism", alias = "tensorflow-intra-op-parallelism")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tensorflow_intra_op_parallelism: Option<i32>,

    /// TensorFlow inter-op thread pool size; 0 lets TensorFlow choose.
    #[arg(long = "tensorflow_inter_op_parallelism", alias = "tensorflow-inter-op-parallelism")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tensorflow_inter_op_parallelism: Option<i32>,

    /// Comma-separated SavedModel tags to load. Default "serve".
    #[arg(long = "saved_model_tags", alias = "saved-model-tags")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub saved_model_tags: Option<String>,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    pub rest_api_port: Option<u16>,
    pub port: Option<u16>,
    pub host: String,
    pub model_name: String,
    pub model_base_path: Option<PathBuf>,
    pub model_config_file: Option<PathBuf>,
    pub models_dir: PathBuf,
    pub rest_api_num_threads: usize,
    pub session_run_threads: usize,
    pub max_queued_runs: usize,
    pub rest_api_timeout_in_ms: u64,
    pub max_request_bytes: usize,
    pub tensorflow_intra_op_parallelism: i32,
    pub tensorflow_inter_op_parallelism: i32,
    pub saved_model_tags: String,
}

fn cores() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2)
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            rest_api_port: None,
            port: None,
            host: "0.0.0.0".into(),
            model_name: "default".into(),
            model_base_path: None,
            model_config_file: None,
            models_dir: "models".into(),
            rest_api_num_threads: cores(),
            session_run_threads: cores(),
            max_queued_runs: 1024,
            rest_api_timeout_in_ms: 30_000,
            max_request_bytes: 256 << 20,
            tensorflow_intra_op_parallelism: 0,
            tensorflow_inter_op_parallelism: 0,
            saved_model_tags: "serve".into(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
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
    /// Merges defaults, the `--config` file, `TFSERVE_*` variables and the flags.
    pub fn load(cli: &Cli) -> Result<Settings, SettingsError> {
        let mut builder = config::Config::builder().add_source(config::Config::try_from(&Settings::default())?);
        if let Some(path) = &cli.config {
            builder = builder.add_source(config::File::from(path.as_path()));
        }
        let settings: Settings = builder
            .add_source(
                config::Environment::with_prefix("TFSERVE")
                    .prefix_separator("_")
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
        positive("session_run_threads", self.session_run_threads)?;
        positive("max_queued_runs", self.max_queued_runs)?;
        positive("max_request_bytes", self.max_request_bytes)?;
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
mod tests {
    use super::*;

    #[test]
    fn flags_accept_both_spellings_and_forms() {
        let cli = Cli::try_parse_from([
            "tfserve",
            "--rest_api_port=9000",
            "--model-name",
            "m",
            "--model_base_path",
            "/x",
        ])
        .unwrap();
        let settings = Settings::load(&cli).unwrap();
        assert_eq!(settings.http_port(), 9000);
        assert_eq!(settings.model_name, "m");
        assert_eq!(settings.model_base_path, Some(PathBuf::from("/x")));
    }

    #[test]
    fn lone_port_sets_http_port() {
        let cli = Cli::try_parse_from(["tfserve", "--port", "8500"]).unwrap();
        assert_eq!(Settings::load(&cli).unwrap().http_port(), 8500);
        let both = Cli::try_parse_from(["tfserve", "--port", "8500", "--rest_api_port", "8502"]).unwrap();
        assert_eq!(Settings::load(&both).unwrap().http_port(), 8502);
        assert_eq!(Settings::default().http_port(), 8501);
    }

    #[test]
    fn file_is_overridden_by_flags() {
        let path = std::env::temp_dir().join(format!("tfserve-settings-{}.toml", std::process::id()));
        std::fs::write(&path, "model_name = \"from_file\"\nrest_api_port = 7000\n").unwrap();
        let cli =
            Cli::try_parse_from(["tfserve", "--config", path.to_str().unwrap(), "--rest_api_port", "7001"]).unwrap();
        let settings = Settings::load(&cli).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(settings.model_name, "from_file");
        assert_eq!(settings.http_port(), 7001);
    }

    #[test]
    fn invalid_values_name_the_setting() {
        let cli = Cli::try_parse_from(["tfserve", "--session_run_threads", "0"]).unwrap();
        let err = Settings::load(&cli).unwrap_err().to_string();
        assert!(err.contains("session_run_threads"), "{err}");
    }
}
