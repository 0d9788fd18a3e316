//! Model management, the one place every API that loads or unloads goes
//! through: tfserve's management API, SageMaker's multi-model routes,
//! KServe's repository extension and TF Serving's `HandleReloadConfigRequest`.
//! Paths from the network are confined to `--model_roots`; `--max_models`
//! bounds the count; loads run off the transport threads.

use std::path::{Component, Path, PathBuf};

use super::Service;
use crate::error::ApiError;
use crate::model_config::ModelSource;
use crate::registry::ModelInfo;
use crate::status::{Code, HasCode};

/// Why a model could not be loaded, unloaded or found, in the words TF
/// Serving and the SageMaker container use where they have them.
#[derive(Debug, thiserror::Error)]
pub enum ManageError {
    #[error("path {0} may not contain '..'")]
    ParentInPath(String),
    #[error("Could not find valid base path {path} for servable {model}")]
    NoBasePath { path: String, model: String },
    #[error("path {path} is outside the model roots ({roots}; model_roots)")]
    OutsideRoots { path: String, roots: String },
    #[error("cannot load model {model}: {served} models are loaded, the limit (max_models) is {limit}")]
    TooManyModels { model: String, served: usize, limit: usize },
    #[error("no --model_config_file to reload")]
    NoConfigFile,
    #[error("the model load failed: {0}")]
    TaskFailed(String),
}

impl HasCode for ManageError {
    fn code(&self) -> Code {
        match self {
            ManageError::ParentInPath(_) | ManageError::OutsideRoots { .. } => Code::PermissionDenied,
            ManageError::NoBasePath { .. } => Code::NotFound,
            ManageError::TooManyModels { .. } => Code::InsufficientStorage,
            ManageError::NoConfigFile => Code::InvalidArgument,
            ManageError::TaskFailed(_) => Code::Internal,
        }
    }
}

impl From<ManageError> for ApiError {
    fn from(error: ManageError) -> ApiError {
        ApiError::Request(Box::new(error))
    }
}

/// Where models loaded over the network may live, and how many may load.
#[derive(Clone, Debug, Default)]
pub struct ModelLimits {
    /// `--model_roots`: directories models loaded over the network must lie in.
    pub roots: Vec<PathBuf>,
    /// `--max_models` (0: no limit).
    pub max_models: usize,
}

/// Whether a directory holds numbered version directories (a servable base path).
pub fn has_versions(base_path: &Path) -> bool {
    crate::registry::discover_versions(base_path).is_ok_and(|v| !v.is_empty())
}

impl Service {
    /// One model's versions and states, when it is served.
    pub fn info(&self, name: &str) -> Option<ModelInfo> {
        self.models().into_iter().find(|m| m.name == name)
    }

    /// `--model_roots`, for a dialect that finds models by name in them (KServe's repository).
    pub fn model_roots(&self) -> &[PathBuf] {
        &self.limits.roots
    }

    /// Resolves a path given over the network inside the configured model
    /// roots: no `..`, and after following symlinks still under a root.
    pub fn confine(&self, path: &str, model: &str) -> Result<PathBuf, ApiError> {
        Ok(confine_to(path, &self.limits.roots, model)?)
    }

    /// Loads a model (or its new versions, when already served): its Python
    /// handler first (pip may run), so a model whose `inference.py` cannot load
    /// is not added.
    pub async fn load(&self, source: ModelSource) -> Result<(), ApiError> {
        let served = self.registry.model_names().len();
        let limit = self.limits.max_models;
        if limit > 0 && served >= limit {
            return Err(ManageError::TooManyModels {
                model: source.name,
                served,
                limit,
            }
            .into());
        }
        let registry = self.registry.clone();
        let handlers = self.handlers.clone();
        off_transport(move || -> Result<(), ApiError> {
            if registry.contains(&source.name) {
                return Ok(registry.add_model(source)?);
            }
            handlers.prepare(&source.name, &source.base_path)?;
            registry
                .add_model(source.clone())
                .inspect_err(|_| handlers.remove(&source.name))?;
            Ok(())
        })
        .await?
    }

    /// Unloads every version of a model and its Python handler.
    /// Re-reads a served model's versions from its base path.
    pub async fn refresh(&self, name: String) -> Result<(), ApiError> {
        let registry = self.registry.clone();
        Ok(off_transport(move || registry.refresh(&name)).await??)
    }

    pub async fn unload(&self, name: String) -> Result<(), ApiError> {
        let registry = self.registry.clone();
        let handlers = self.handlers.clone();
        off_transport(move || -> Result<(), ApiError> {
            registry.remove_model(&name)?;
            handlers.remove(&name);
            Ok(())
        })
        .await?
    }

    /// Serves exactly these models (as a new model config does): new ones load,
    /// missing ones unload. Returns the models served after.
    pub async fn replace_all(&self, sources: Vec<ModelSource>) -> Result<Vec<String>, ApiError> {
        let registry = self.registry.clone();
        off_transport(move || registry.sync(&sources)).await?;
        Ok(self.model_names())
    }

    /// Every model loaded and none failed; else why not.
    pub fn ready(&self) -> Result<(), String> {
        self.registry.ready()
    }
}

fn confine_to(path: &str, roots: &[PathBuf], model: &str) -> Result<PathBuf, ManageError> {
    let requested = Path::new(path);
    if requested.components().any(|c| c == Component::ParentDir) {
        return Err(ManageError::ParentInPath(path.to_string()));
    }
    let under_roots = |path: &Path| {
        roots
            .iter()
            .any(|root| path.starts_with(root) || root.canonicalize().is_ok_and(|root| path.starts_with(root)))
    };
    let outside = || {
        let roots: Vec<String> = roots.iter().map(|r| r.display().to_string()).collect();
        ManageError::OutsideRoots {
            path: path.to_string(),
            roots: roots.join(", "),
        }
    };
    match requested.canonicalize() {
        Ok(real) if under_roots(&real) => Ok(real),
        Ok(_) => Err(outside()),
        // Whether a path outside the roots exists is not the caller's to
        // learn: it gets the same answer as one that does.
        Err(_) if !std::path::absolute(requested).is_ok_and(|p| under_roots(&p)) => Err(outside()),
        Err(_) => Err(ManageError::NoBasePath {
            path: path.to_string(),
            model: model.to_string(),
        }),
    }
}

/// Loading and warm-up take seconds: never on a transport's event loop.
async fn off_transport<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ManageError::TaskFailed(e.to_string()).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_inside_the_roots() {
        let root = std::env::temp_dir().join(format!("tfserve-confine-{}", std::process::id()));
        let inside = root.join("model");
        std::fs::create_dir_all(&inside).unwrap();
        let roots = vec![root.clone()];
        assert_eq!(
            confine_to(inside.to_str().unwrap(), &roots, "m").unwrap(),
            inside.canonicalize().unwrap()
        );
        let dotted = format!("{}/../model", inside.display());
        assert!(matches!(
            confine_to(&dotted, &roots, "m"),
            Err(ManageError::ParentInPath(_))
        ));
        let outside = std::env::temp_dir();
        assert!(matches!(
            confine_to(outside.to_str().unwrap(), &roots, "m"),
            Err(ManageError::OutsideRoots { .. })
        ));
        // Outside the roots, a path that does not exist is answered as one that does.
        assert!(matches!(
            confine_to("/no/such/dir", &roots, "m"),
            Err(ManageError::OutsideRoots { .. })
        ));
        let missing = root.join("missing");
        assert!(matches!(
            confine_to(missing.to_str().unwrap(), &roots, "m"),
            Err(ManageError::NoBasePath { .. })
        ));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
