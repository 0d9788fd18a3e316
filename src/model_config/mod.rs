//! Model configuration files: TF Serving's `ModelServerConfig` in protobuf text
//! format or its JSON mapping, and Simple TensorFlow Serving's JSON list.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value as Json;

use crate::imaging::{ImagePolicy, StringEncoding};
use crate::runtime::SessionConfig;
use crate::textproto::{self, Message};

mod per_model;

pub use per_model::{LoggingConfig, SessionOverrides};

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
    /// What this model's signatures may reach outside the request, beyond
    /// `--allow_model_access` (tfserve's own `allow_access` key).
    pub allow_access: std::collections::BTreeSet<crate::audit::Access>,
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
            allow_access: Default::default(),
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
            // An object storage URL (`s3://…`) is not a path below the file's folder.
            let url = s.base_path.to_str().is_some_and(|p| p.contains("://"));
            if s.base_path.is_relative() && !url {
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

// Kept whole: one `ModelConfig` field after another, as the proto lists them.
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
                allow_access: allowed_access(&name, config.scalars("allow_access"))?,
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
    let allow_access = json_allow_access(&name, config)?;
    Ok(ModelSource {
        name,
        base_path: base_path.into(),
        policy,
        labels,
        session,
        images,
        logging,
        allow_access,
    })
}

/// A JSON config's `allow_access`: a string or a list of strings.
fn json_allow_access(name: &str, config: &Json) -> Result<std::collections::BTreeSet<crate::audit::Access>, String> {
    let wrong = |got: &Json| format!("model '{name}': allow_access must be a string or a list of strings, got {got}");
    match config.get("allow_access") {
        None | Some(Json::Null) => Ok(Default::default()),
        Some(Json::String(list)) => allowed_access(name, std::iter::once(list.as_str())),
        Some(Json::Array(items)) => {
            let texts: Option<Vec<&str>> = items.iter().map(Json::as_str).collect();
            allowed_access(
                name,
                texts.ok_or_else(|| wrong(&Json::Array(items.clone())))?.into_iter(),
            )
        }
        Some(other) => Err(wrong(other)),
    }
}

/// A model's `allow_access` entries, each a class or a comma-separated list.
fn allowed_access<'a>(
    model: &str,
    entries: impl Iterator<Item = &'a str>,
) -> Result<std::collections::BTreeSet<crate::audit::Access>, String> {
    let mut classes = std::collections::BTreeSet::new();
    for entry in entries {
        classes.extend(crate::audit::parse_classes(entry).map_err(|e| format!("model '{model}': allow_access: {e}"))?);
    }
    Ok(classes)
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
