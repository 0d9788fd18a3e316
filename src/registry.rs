//! The model registry: models → versions → loaded servables, with the version
//! states TF Serving reports, and version selection for requests.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Instant;

use crate::batcher::{BatchParams, Batcher, ParamsOverride, QueueHandle, Runner};
use crate::metrics::QueueMetrics;
pub use crate::model_config::ModelSource;
use crate::runtime::{LoadedModel, RuntimeError, SessionConfig};
use crate::signature::SignatureSpec;
use crate::tensor::Tensor;

/// Which version a request addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VersionSelector {
    Latest,
    Specific(i64),
    Label(String),
}

/// Version lifecycle states, named as TF Serving names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VersionState {
    Start,
    Loading,
    Available,
    Unloading,
    End,
}

impl VersionState {
    pub fn as_str(self) -> &'static str {
        match self {
            VersionState::Start => "START",
            VersionState::Loading => "LOADING",
            VersionState::Available => "AVAILABLE",
            VersionState::Unloading => "UNLOADING",
            VersionState::End => "END",
        }
    }
}

/// One loaded model version, ready to run: its session and one batching queue
/// per signature.
pub struct Servable {
    pub model: String,
    pub version: i64,
    pub runtime: Arc<LoadedModel>,
    queues: BTreeMap<String, QueueHandle>,
}

impl std::fmt::Debug for Servable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Servable")
            .field("model", &self.model)
            .field("version", &self.version)
            .finish()
    }
}

impl Servable {
    pub fn signature(&self, name: &str) -> Option<&Arc<SignatureSpec>> {
        self.runtime.signatures().find(|s| s.name == name)
    }

    pub fn queue(&self, signature: &str) -> Option<&QueueHandle> {
        self.queues.get(signature)
    }
}

/// Runs a batch on one signature of a loaded model.
struct SignatureRunner {
    runtime: Arc<LoadedModel>,
    signature: String,
}

impl Runner for SignatureRunner {
    fn run(&self, inputs: Vec<Tensor>) -> Result<Vec<Tensor>, RuntimeError> {
        self.runtime.run(&self.signature, inputs)
    }
}

/// How each model's queues batch.
#[derive(Clone, Debug)]
pub struct BatchingPolicy {
    pub enabled: bool,
    pub params: BatchParams,
    /// Per-model changes to `params`, applied when batching is enabled.
    pub overrides: BTreeMap<String, ParamsOverride>,
    /// Requests waiting for a batch thread when batching is off.
    pub unbatched_queue: usize,
}

impl BatchingPolicy {
    /// The parameters for a model's queues, and whether they merge requests.
    pub fn for_model(&self, model: &str) -> (BatchParams, bool) {
        if !self.enabled {
            let params = BatchParams {
                max_enqueued_batches: self.unbatched_queue,
                ..BatchParams::default()
            };
            return (params, false);
        }
        match self.overrides.get(model) {
            Some(o) => (o.apply(&self.params), true),
            None => (self.params.clone(), true),
        }
    }
}

#[derive(Clone, Debug)]
pub struct VersionStatus {
    pub version: i64,
    pub state: VersionState,
    /// Why loading failed, for END versions that never became available.
    pub error: Option<String>,
}

struct VersionSlot {
    status: VersionStatus,
    servable: Option<Arc<Servable>>,
}

struct ModelEntry {
    versions: BTreeMap<i64, VersionSlot>,
    labels: BTreeMap<String, i64>,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum RegistryError {
    #[error("Servable not found for request: {0}")]
    NotFound(String),
    #[error("Could not find any versions of model {0}")]
    UnknownModel(String),
    #[error("Unrecognized servable version label: {0}")]
    UnknownLabel(String),
    #[error("model base path {path}: {message}")]
    BadBasePath { path: String, message: String },
    #[error("model {model}: version_labels {label} points at version {version}, which is not available")]
    LabelTarget { model: String, label: String, version: i64 },
}

pub struct LoadOptions {
    pub tags: Vec<String>,
    pub session: SessionConfig,
    pub batcher: Arc<Batcher>,
    pub batching: BatchingPolicy,
}

#[derive(Default)]
pub struct Registry {
    models: RwLock<BTreeMap<String, ModelEntry>>,
}

/// Numeric child directories of `base_path`, as (version, path), ascending.
pub fn discover_versions(base_path: &Path) -> Result<Vec<(i64, PathBuf)>, RegistryError> {
    let entries = std::fs::read_dir(base_path).map_err(|e| RegistryError::BadBasePath {
        path: base_path.display().to_string(),
        message: e.to_string(),
    })?;
    let mut versions: Vec<(i64, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_string();
            let version = name
                .parse::<i64>()
                .ok()
                .filter(|v| *v >= 0 && name.bytes().all(|b| b.is_ascii_digit()))?;
            Some((version, e.path()))
        })
        .collect();
    versions.sort();
    Ok(versions)
}

/// Each subdirectory of `root` holding numeric version directories is a model.
pub fn discover_models(root: &Path) -> Result<Vec<ModelSource>, RegistryError> {
    let entries = std::fs::read_dir(root).map_err(|e| RegistryError::BadBasePath {
        path: root.display().to_string(),
        message: e.to_string(),
    })?;
    let mut models: Vec<ModelSource> = entries
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .filter(|e| discover_versions(&e.path()).map(|v| !v.is_empty()).unwrap_or(false))
        .filter_map(|e| Some(ModelSource::all_versions(e.file_name().to_str()?, e.path())))
        .collect();
    models.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(models)
}

impl Registry {
    /// Loads every version of every source. A version that fails to load is
    /// recorded as END with its error; other versions and models still serve.
    pub fn load(&self, sources: &[ModelSource], options: &LoadOptions) -> Result<(), RegistryError> {
        for source in sources {
            let versions = source.policy.select(&discover_versions(&source.base_path)?);
            if versions.is_empty() {
                log::warn!(
                    "model {}: no version to serve under {} ({:?})",
                    source.name,
                    source.base_path.display(),
                    source.policy
                );
            }
            for (version, path) in versions {
                self.load_version(&source.name, version, &path, options);
            }
            for (label, &version) in &source.labels {
                self.set_label(&source.name, label, version)?;
            }
        }
        Ok(())
    }

    /// Points a label at a version; only available versions may be labelled.
    pub fn set_label(&self, model: &str, label: &str, version: i64) -> Result<(), RegistryError> {
        let mut models = self.models.write().unwrap_or_else(|p| p.into_inner());
        let target = || RegistryError::LabelTarget {
            model: model.into(),
            label: label.into(),
            version,
        };
        let entry = models.get_mut(model).ok_or_else(target)?;
        match entry.versions.get(&version) {
            Some(slot) if slot.status.state == VersionState::Available => {
                entry.labels.insert(label.to_string(), version);
                Ok(())
            }
            _ => Err(target()),
        }
    }

    fn set_slot(&self, model: &str, slot: VersionSlot) {
        let mut models = self.models.write().unwrap_or_else(|p| p.into_inner());
        let entry = models.entry(model.to_string()).or_insert_with(|| ModelEntry {
            versions: BTreeMap::new(),
            labels: BTreeMap::new(),
        });
        entry.versions.insert(slot.status.version, slot);
    }

    pub fn load_version(&self, model: &str, version: i64, path: &Path, options: &LoadOptions) {
        let status = |state, error| VersionStatus { version, state, error };
        self.set_slot(
            model,
            VersionSlot {
                status: status(VersionState::Loading, None),
                servable: None,
            },
        );
        let started = Instant::now();
        match LoadedModel::load(path, &options.tags, &options.session) {
            Ok(runtime) => {
                let signatures: Vec<&str> = runtime.signatures().map(|s| s.name.as_str()).collect();
                log::info!(
                    "model {model} version {version} loaded in {:.0} ms from {} (signatures: {})",
                    started.elapsed().as_secs_f64() * 1000.0,
                    path.display(),
                    signatures.join(", ")
                );
                let servable = Arc::new(Self::servable(model, version, Arc::new(runtime), options));
                self.set_slot(
                    model,
                    VersionSlot {
                        status: status(VersionState::Available, None),
                        servable: Some(servable),
                    },
                );
            }
            Err(err) => {
                log::error!("model {model} version {version}: {err}");
                self.set_slot(
                    model,
                    VersionSlot {
                        status: status(VersionState::End, Some(err.to_string())),
                        servable: None,
                    },
                );
            }
        }
    }

    /// Warms a freshly loaded model up at every batch size its queues can run,
    /// then gives each signature its queue.
    fn servable(model: &str, version: i64, runtime: Arc<LoadedModel>, options: &LoadOptions) -> Servable {
        let (params, merge) = options.batching.for_model(model);
        let sizes = if merge { params.warmup_sizes() } else { vec![1] };
        crate::warmup::warm_up(model, version, &runtime, |_| sizes.clone());
        let queues = runtime
            .signatures()
            .map(|signature| {
                let name = signature.name.clone();
                let runner = Arc::new(SignatureRunner {
                    runtime: runtime.clone(),
                    signature: name.clone(),
                });
                let label = format!("model {model} version {version} signature {name}");
                let metrics = QueueMetrics::new(model, version, &name);
                let queue = options.batcher.add_queue(label, params.clone(), merge, runner, metrics);
                (name, queue)
            })
            .collect();
        Servable {
            model: model.to_string(),
            version,
            runtime,
            queues,
        }
    }

    /// The servable a request addresses.
    pub fn resolve(&self, model: &str, selector: &VersionSelector) -> Result<Arc<Servable>, RegistryError> {
        let models = self.models.read().unwrap_or_else(|p| p.into_inner());
        let not_found = || match selector {
            VersionSelector::Latest => RegistryError::NotFound(format!("Latest({model})")),
            VersionSelector::Specific(v) => RegistryError::NotFound(format!("Specific({model}, {v})")),
            VersionSelector::Label(l) => RegistryError::UnknownLabel(l.clone()),
        };
        let entry = models.get(model).ok_or_else(not_found)?;
        let servable = match selector {
            VersionSelector::Latest => entry.versions.values().rev().find_map(|slot| slot.servable.clone()),
            VersionSelector::Specific(v) => entry.versions.get(v).and_then(|slot| slot.servable.clone()),
            VersionSelector::Label(label) => {
                let version = entry.labels.get(label).ok_or_else(not_found)?;
                entry.versions.get(version).and_then(|slot| slot.servable.clone())
            }
        };
        servable.ok_or_else(not_found)
    }

    /// Version statuses for the status endpoint; all versions for `Latest`.
    pub fn status(&self, model: &str, selector: &VersionSelector) -> Result<Vec<VersionStatus>, RegistryError> {
        let models = self.models.read().unwrap_or_else(|p| p.into_inner());
        let entry = models
            .get(model)
            .ok_or_else(|| RegistryError::UnknownModel(model.to_string()))?;
        let version = match selector {
            VersionSelector::Latest => return Ok(entry.versions.values().map(|s| s.status.clone()).collect()),
            VersionSelector::Specific(v) => *v,
            VersionSelector::Label(label) => *entry
                .labels
                .get(label)
                .ok_or_else(|| RegistryError::UnknownLabel(label.clone()))?,
        };
        entry
            .versions
            .get(&version)
            .map(|slot| vec![slot.status.clone()])
            .ok_or_else(|| RegistryError::NotFound(format!("Specific({model}, {version})")))
    }

    pub fn model_names(&self) -> Vec<String> {
        let models = self.models.read().unwrap_or_else(|p| p.into_inner());
        models.keys().cloned().collect()
    }

    /// Whether every known version has finished loading and at least one
    /// version of each model is available.
    pub fn all_available(&self) -> bool {
        let models = self.models.read().unwrap_or_else(|p| p.into_inner());
        models
            .values()
            .all(|m| m.versions.values().any(|v| v.status.state == VersionState::Available))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovers_numeric_versions_only() {
        let dir = std::env::temp_dir().join(format!("tfserve-discover-{}", std::process::id()));
        for sub in ["m/1", "m/10", "m/2", "m/tmp", "m/3a", "empty/x"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        let versions: Vec<i64> = discover_versions(&dir.join("m"))
            .unwrap()
            .into_iter()
            .map(|v| v.0)
            .collect();
        assert_eq!(versions, vec![1, 2, 10]);
        let models: Vec<String> = discover_models(&dir).unwrap().into_iter().map(|m| m.name).collect();
        assert_eq!(models, vec!["m"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unknown_models_and_versions_are_not_found() {
        let registry = Registry::default();
        let err = registry.resolve("half", &VersionSelector::Latest).unwrap_err();
        assert_eq!(err.to_string(), "Servable not found for request: Latest(half)");
        let err = registry.resolve("foo", &VersionSelector::Specific(50)).unwrap_err();
        assert_eq!(err.to_string(), "Servable not found for request: Specific(foo, 50)");
        assert!(registry.status("foo", &VersionSelector::Latest).is_err());
    }
}
