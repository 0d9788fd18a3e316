//! Model configuration files: TF Serving's `ModelServerConfig` in protobuf text
//! format or its JSON mapping, and Simple TensorFlow Serving's JSON list.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value as Json;

use crate::imaging::{ImagePolicy, StringEncoding};
use crate::runtime::SessionConfig;
use crate::textproto::{self, Message};

/// Which versions on disk are served.
#[derive(Clone, Debug, PartialEq)]
pub enum VersionPolicy {
    /// The highest N versions (TF Serving's default is N = 1).
    Latest(usize),
    All,
    Specific(Vec<i64>),
}

impl VersionPolicy {
    /// Filters discovered `(version, path)` pairs, ascending in and out.
    pub fn select<T: Clone>(&self, available: &[(i64, T)]) -> Vec<(i64, T)> {
        match self {
            VersionPolicy::All => available.to_vec(),
            VersionPolicy::Latest(n) => available[available.len().saturating_sub(*n)..].to_vec(),
            VersionPolicy::Specific(wanted) => available.iter().filter(|(v, _)| wanted.contains(v)).cloned().collect(),
        }
    }
}

/// Which versions a model found without a config file (`--model_base_path`,
/// `--models_dir`) serves: TF Serving's default, or every version (what the
/// SageMaker container and Simple TensorFlow Serving load).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum DefaultVersionPolicy {
    /// `latest { num_versions: 1 }`: a new version replaces the old one.
    #[default]
    Latest,
    All,
}

impl DefaultVersionPolicy {
    pub fn policy(self) -> VersionPolicy {
        match self {
            DefaultVersionPolicy::Latest => VersionPolicy::Latest(1),
            DefaultVersionPolicy::All => VersionPolicy::All,
        }
    }
}

/// One model as configured: where its versions live and which to serve.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelSource {
    pub name: String,
    pub base_path: PathBuf,
    pub policy: VersionPolicy,
    pub labels: BTreeMap<String, i64>,
    /// Simple TensorFlow Serving's per-model `session_config`.
    pub session: SessionOverrides,
    /// How uploaded images reach the model (JSON configs: `image_string_encoding`, `image_resize`).
    pub images: ImagePolicy,
    /// TF Serving's `logging_config`: requests sampled into `PredictionLog` files.
    pub logging: Option<std::sync::Arc<LoggingConfig>>,
}

/// TF Serving's `LoggingConfig`: the share of requests logged
/// (`sampling_config.sampling_rate`) and where
/// (`log_collector_config.filename_prefix`), as TFRecord files of `PredictionLog`.
#[derive(Clone, Debug, PartialEq)]
pub struct LoggingConfig {
    pub filename_prefix: String,
    pub sampling_rate: f64,
}

impl LoggingConfig {
    fn checked(
        model: &str,
        filename_prefix: Option<&str>,
        sampling_rate: f64,
    ) -> Result<Option<LoggingConfig>, String> {
        let Some(filename_prefix) = filename_prefix.filter(|p| !p.is_empty()) else {
            return Err(format!(
                "model '{model}': logging_config needs log_collector_config.filename_prefix"
            ));
        };
        if !(0.0..=1.0).contains(&sampling_rate) {
            return Err(format!(
                "model '{model}': logging_config.sampling_config.sampling_rate must be between 0 and 1, got {sampling_rate}"
            ));
        }
        Ok(Some(LoggingConfig {
            filename_prefix: filename_prefix.to_string(),
            sampling_rate,
        }))
    }

    fn from_textproto(model: &str, config: &Message) -> Result<Option<LoggingConfig>, String> {
        let Some(logging) = config.message("logging_config") else {
            return Ok(None);
        };
        let prefix = logging
            .message("log_collector_config")
            .and_then(|collector| collector.scalar("filename_prefix"));
        // An absent rate is proto3's zero: nothing is logged, as in TF Serving.
        let rate = logging
            .message("sampling_config")
            .and_then(|sampling| sampling.scalar("sampling_rate"))
            .unwrap_or("0");
        let rate = rate.parse::<f64>().map_err(|_| {
            format!("model '{model}': logging_config.sampling_config.sampling_rate must be a number, got '{rate}'")
        })?;
        LoggingConfig::checked(model, prefix, rate)
    }

    /// The protobuf JSON mapping: camelCase or the proto's own names.
    fn from_json(model: &str, config: &Json) -> Result<Option<LoggingConfig>, String> {
        let field = |value: &Json, snake: &str, camel: &str| value.get(snake).or_else(|| value.get(camel)).cloned();
        let Some(logging) = field(config, "logging_config", "loggingConfig") else {
            return Ok(None);
        };
        let prefix = field(&logging, "log_collector_config", "logCollectorConfig")
            .and_then(|collector| field(&collector, "filename_prefix", "filenamePrefix"));
        let rate = field(&logging, "sampling_config", "samplingConfig")
            .and_then(|sampling| field(&sampling, "sampling_rate", "samplingRate"))
            .unwrap_or(Json::from(0.0));
        let rate = rate
            .as_f64()
            .or_else(|| rate.as_str().and_then(|s| s.parse().ok()))
            .ok_or(format!(
                "model '{model}': logging_config.sampling_config.sampling_rate must be a number, got {rate}"
            ))?;
        LoggingConfig::checked(model, prefix.as_ref().and_then(Json::as_str), rate)
    }
}

/// Per-model session options; unset fields keep the server-wide values.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SessionOverrides {
    pub intra_op_parallelism: Option<i32>,
    pub inter_op_parallelism: Option<i32>,
    pub per_process_gpu_memory_fraction: Option<f64>,
    pub gpu_allow_growth: Option<bool>,
    pub allow_soft_placement: Option<bool>,
    pub log_device_placement: Option<bool>,
    /// One replica on each of these GPUs (tfserve's own key).
    pub gpu_ids: Option<Vec<u32>>,
    /// XLA auto-clustering (tfserve's own key).
    pub xla_jit: Option<bool>,
}

impl SessionOverrides {
    pub fn apply(&self, base: &SessionConfig) -> SessionConfig {
        SessionConfig {
            intra_op_parallelism: self.intra_op_parallelism.unwrap_or(base.intra_op_parallelism),
            inter_op_parallelism: self.inter_op_parallelism.unwrap_or(base.inter_op_parallelism),
            per_process_gpu_memory_fraction: self
                .per_process_gpu_memory_fraction
                .unwrap_or(base.per_process_gpu_memory_fraction),
            gpu_allow_growth: self.gpu_allow_growth.unwrap_or(base.gpu_allow_growth),
            log_device_placement: self.log_device_placement.unwrap_or(base.log_device_placement),
            strict_placement: self
                .allow_soft_placement
                .map(|soft| !soft)
                .unwrap_or(base.strict_placement),
            cpu_only: base.cpu_only,
            gpu_ids: self.gpu_ids.clone().unwrap_or_else(|| base.gpu_ids.clone()),
            device: base.device.clone(),
            virtual_gpu_memory_mb: base.virtual_gpu_memory_mb.clone(),
            xla_jit: self.xla_jit.unwrap_or(base.xla_jit),
        }
    }

    /// Reads Simple TensorFlow Serving's `session_config` object.
    pub fn from_json(model: &str, config: &Json) -> Result<SessionOverrides, String> {
        let Some(object) = config.as_object() else {
            return Err(format!("model '{model}': session_config must be an object"));
        };
        let known = [
            "intra_op_parallelism_threads",
            "inter_op_parallelism_threads",
            "per_process_gpu_memory_fraction",
            "allow_growth",
            "allow_soft_placement",
            "log_device_placement",
            "gpu_ids",
            "xla_jit",
        ];
        if let Some(unknown) = object.keys().find(|k| !known.contains(&k.as_str())) {
            return Err(format!(
                "model '{model}': unknown session_config key '{unknown}' (known: {})",
                known.join(", ")
            ));
        }
        let int = |key: &str| -> Result<Option<i32>, String> {
            object
                .get(key)
                .map(|v| {
                    v.as_i64()
                        .and_then(|n| i32::try_from(n).ok())
                        .ok_or(format!("model '{model}': session_config.{key} must be an integer"))
                })
                .transpose()
        };
        let flag = |key: &str| -> Result<Option<bool>, String> {
            object
                .get(key)
                .map(|v| {
                    v.as_bool()
                        .ok_or(format!("model '{model}': session_config.{key} must be true or false"))
                })
                .transpose()
        };
        Ok(SessionOverrides {
            intra_op_parallelism: int("intra_op_parallelism_threads")?,
            inter_op_parallelism: int("inter_op_parallelism_threads")?,
            per_process_gpu_memory_fraction: object
                .get("per_process_gpu_memory_fraction")
                .map(|v| {
                    v.as_f64().ok_or(format!(
                        "model '{model}': session_config.per_process_gpu_memory_fraction must be a number"
                    ))
                })
                .transpose()?,
            gpu_allow_growth: flag("allow_growth")?,
            allow_soft_placement: flag("allow_soft_placement")?,
            log_device_placement: flag("log_device_placement")?,
            xla_jit: flag("xla_jit")?,
            gpu_ids: object
                .get("gpu_ids")
                .map(|v| {
                    v.as_array()
                        .and_then(|ids| {
                            ids.iter()
                                .map(|id| id.as_u64().and_then(|n| u32::try_from(n).ok()))
                                .collect::<Option<Vec<u32>>>()
                        })
                        .ok_or(format!(
                            "model '{model}': session_config.gpu_ids must be a list of GPU numbers (e.g. [0, 1]), got {v}"
                        ))
                })
                .transpose()?,
        })
    }
}

impl ModelSource {
    pub fn all_versions(name: impl Into<String>, base_path: impl Into<PathBuf>) -> ModelSource {
        ModelSource::with_policy(name, base_path, VersionPolicy::All)
    }

    pub fn with_policy(name: impl Into<String>, base_path: impl Into<PathBuf>, policy: VersionPolicy) -> ModelSource {
        ModelSource {
            name: name.into(),
            base_path: base_path.into(),
            policy,
            labels: BTreeMap::new(),
            session: SessionOverrides::default(),
            images: ImagePolicy::default(),
            logging: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("model config file {path}: {message}")]
pub struct ConfigFileError {
    pub path: String,
    pub message: String,
}

/// Reads a config file in any of the supported forms. Relative base paths are
/// taken relative to the file's directory.
pub fn load(path: &Path) -> Result<Vec<ModelSource>, ConfigFileError> {
    let error = |message: String| ConfigFileError {
        path: path.display().to_string(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| error(e.to_string()))?;
    let sources = parse(&text).map_err(error)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    Ok(sources
        .into_iter()
        .map(|mut s| {
            if s.base_path.is_relative() {
                s.base_path = dir.join(&s.base_path);
            }
            s
        })
        .collect())
}

/// `ModelServerConfig`'s fields: anything else is a file that is not a config.
const ROOT_FIELDS: [&str; 2] = ["model_config_list", "custom_model_config"];

pub fn parse(text: &str) -> Result<Vec<ModelSource>, String> {
    let sources = if text.trim_start().starts_with('{') {
        let json: Json = serde_json::from_str(text).map_err(|e| format!("invalid JSON: {e}"))?;
        from_json(&json)?
    } else {
        // TF Serving's wording, which tools and tests look for in the log.
        let syntax = |e: String| format!("Error parsing text-format tensorflow.serving.ModelServerConfig: {e}");
        let root = textproto::parse(text).map_err(|e| syntax(e.to_string()))?;
        if let Some((field, _)) = root.0.iter().find(|(field, _)| !ROOT_FIELDS.contains(&field.as_str())) {
            return Err(syntax(format!(
                "Message type \"tensorflow.serving.ModelServerConfig\" has no field named \"{field}\""
            )));
        }
        from_textproto(&root)?
    };
    let mut names = std::collections::BTreeSet::new();
    for source in &sources {
        if !names.insert(source.name.as_str()) {
            return Err(format!("model name '{}' is configured twice", source.name));
        }
    }
    for prefix in shared_log_prefixes(&sources) {
        // TF Serving's warning: the models' logs interleave in one set of
        // files, which a reader can still tell apart by their model spec.
        log::warn!("Duplicate LogCollectorConfig::filename_prefix(): {prefix}. Possibly a misconfiguration.");
    }
    Ok(sources)
}

/// `logging_config` filename prefixes that more than one model names.
fn shared_log_prefixes(sources: &[ModelSource]) -> Vec<&str> {
    let mut seen = std::collections::BTreeSet::new();
    let mut shared: Vec<&str> = Vec::new();
    for logging in sources.iter().filter_map(|s| s.logging.as_deref()) {
        let prefix = logging.filename_prefix.as_str();
        if !seen.insert(prefix) && !shared.contains(&prefix) {
            shared.push(prefix);
        }
    }
    shared
}

fn check_platform(name: &str, platform: Option<&str>) -> Result<(), String> {
    match platform {
        None | Some("tensorflow") | Some("") => Ok(()),
        Some(other) => Err(format!(
            "model '{name}': model_platform '{other}' is not supported (only 'tensorflow')"
        )),
    }
}

fn from_textproto(root: &Message) -> Result<Vec<ModelSource>, String> {
    if root.message("custom_model_config").is_some() {
        return Err("custom_model_config is not supported; use model_config_list".into());
    }
    let list = root
        .message("model_config_list")
        .ok_or("no model_config_list in the file")?;
    list.messages("config")
        .map(|config| {
            let name = config.scalar("name").ok_or("a config has no name")?.to_string();
            let base_path = config
                .scalar("base_path")
                .ok_or(format!("model '{name}' has no base_path"))?;
            check_platform(&name, config.scalar("model_platform"))?;
            let policy = match config.message("model_version_policy") {
                None => VersionPolicy::Latest(1),
                Some(policy) => {
                    if let Some(latest) = policy.message("latest") {
                        VersionPolicy::Latest(parse_number(
                            &name,
                            "num_versions",
                            latest.scalar("num_versions").unwrap_or("1"),
                        )?)
                    } else if policy.message("all").is_some() {
                        VersionPolicy::All
                    } else if let Some(specific) = policy.message("specific") {
                        let versions = specific
                            .scalars("versions")
                            .map(|v| parse_number(&name, "versions", v))
                            .collect::<Result<_, _>>()?;
                        VersionPolicy::Specific(versions)
                    } else {
                        let fields: Vec<&str> = policy.field_names().collect();
                        return Err(format!(
                            "model '{name}': model_version_policy must be latest, all or specific, got {fields:?}"
                        ));
                    }
                }
            };
            let mut labels = BTreeMap::new();
            for label in config.messages("version_labels") {
                let key = label
                    .scalar("key")
                    .ok_or(format!("model '{name}': a version_labels entry has no key"))?;
                let value = parse_number(&name, "version_labels value", label.scalar("value").unwrap_or(""))?;
                labels.insert(key.to_string(), value);
            }
            let logging = LoggingConfig::from_textproto(&name, config)?.map(std::sync::Arc::new);
            Ok(ModelSource {
                name,
                base_path: base_path.into(),
                policy,
                labels,
                session: SessionOverrides::default(),
                images: ImagePolicy::default(),
                logging,
            })
        })
        .collect()
}

fn parse_number<T: std::str::FromStr>(model: &str, field: &str, text: &str) -> Result<T, String> {
    text.parse()
        .map_err(|_| format!("model '{model}': {field} must be a non-negative integer, got '{text}'"))
}

fn from_json(root: &Json) -> Result<Vec<ModelSource>, String> {
    let configs = match root.get("model_config_list") {
        // Simple TensorFlow Serving: a plain list of models.
        Some(Json::Array(list)) => list.clone(),
        // The protobuf JSON mapping of TF Serving's ModelServerConfig.
        Some(Json::Object(list)) => match list.get("config") {
            Some(Json::Array(configs)) => configs.clone(),
            _ => return Err("model_config_list.config must be a list".into()),
        },
        _ => return Err("no model_config_list in the file".into()),
    };
    configs.iter().map(json_source).collect()
}

/// One model from its JSON description (TF Serving's JSON mapping or Simple
/// TensorFlow Serving's keys).
pub fn json_source(config: &Json) -> Result<ModelSource, String> {
    let text = |key: &str| config.get(key).and_then(Json::as_str);
    let name = text("name").ok_or("a config has no name")?.to_string();
    let base_path = text("base_path").ok_or(format!("model '{name}' has no base_path"))?;
    check_platform(&name, text("model_platform").or(text("platform")))?;
    let version = |v: &Json| -> Result<i64, String> {
        v.as_i64()
            .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
            .ok_or(format!("model '{name}': version {v} is not an integer"))
    };
    let policy = match config.get("model_version_policy") {
        None if config.get("platform").is_some() => VersionPolicy::All,
        None => VersionPolicy::Latest(1),
        Some(policy) => {
            if let Some(latest) = policy.get("latest") {
                let n = latest.get("num_versions").map(&version).transpose()?.unwrap_or(1);
                VersionPolicy::Latest(n.max(0) as usize)
            } else if policy.get("all").is_some() {
                VersionPolicy::All
            } else if let Some(specific) = policy.get("specific") {
                let versions = specific
                    .get("versions")
                    .and_then(Json::as_array)
                    .ok_or(format!("model '{name}': specific.versions must be a list"))?;
                VersionPolicy::Specific(versions.iter().map(&version).collect::<Result<_, _>>()?)
            } else {
                return Err(format!(
                    "model '{name}': model_version_policy must be latest, all or specific"
                ));
            }
        }
    };
    let mut labels = BTreeMap::new();
    if let Some(map) = config.get("version_labels").and_then(Json::as_object) {
        for (key, value) in map {
            labels.insert(key.clone(), version(value)?);
        }
    }
    let session = match config.get("session_config") {
        Some(session) => SessionOverrides::from_json(&name, session)?,
        None => SessionOverrides::default(),
    };
    let images = image_policy(&name, config)?;
    let logging = LoggingConfig::from_json(&name, config)?.map(std::sync::Arc::new);
    Ok(ModelSource {
        name,
        base_path: base_path.into(),
        policy,
        labels,
        session,
        images,
        logging,
    })
}

/// `image_string_encoding` ("raw" or "base64"; absent: read off the graph)
/// and `image_resize` (default true).
fn image_policy(name: &str, config: &Json) -> Result<ImagePolicy, String> {
    let string_encoding = match config.get("image_string_encoding") {
        None | Some(Json::Null) => None,
        Some(Json::String(s)) if s == "raw" => Some(StringEncoding::Raw),
        Some(Json::String(s)) if s == "base64" => Some(StringEncoding::Base64),
        Some(other) => {
            return Err(format!(
                "model '{name}': image_string_encoding must be \"raw\" or \"base64\", got {other}"
            ))
        }
    };
    let resize = match config.get("image_resize") {
        None | Some(Json::Null) => true,
        Some(Json::Bool(b)) => *b,
        Some(other) => {
            return Err(format!(
                "model '{name}': image_resize must be true or false, got {other}"
            ))
        }
    };
    Ok(ImagePolicy {
        string_encoding,
        resize,
    })
}

#[cfg(test)]
mod tests;
