//! The model registry: models → versions → loaded servables, with the version
//! states TF Serving reports, version selection for requests, and the changes
//! (config syncs, file-system polls, HTTP management) that load and unload
//! versions while traffic flows.

mod discover;
mod modes;
mod servable;

use crate::status::{Code, HasCode};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

pub use discover::{discover_models, discover_versions};
pub use servable::{BatchingPolicy, LoadOptions, Servable, SwapPolicy};

pub use crate::model_config::ModelSource;

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

#[derive(Clone, Debug)]
pub struct VersionStatus {
    pub version: i64,
    pub state: VersionState,
    /// Why loading failed, for END versions that never became available.
    pub error: Option<String>,
    /// What its signatures reach outside the request, once loaded (the audit's summary).
    pub access: Option<String>,
    /// Under `mixed_precision: auto`, the mode it serves in and its trial's progress (filled when listed).
    pub mode: Option<String>,
}

struct VersionSlot {
    status: VersionStatus,
    servable: Option<Arc<Servable>>,
    /// What the version's directory held when its load failed: a failed
    /// version is retried once its files change (a copy that was still in progress).
    failed_files: Option<discover::DirectoryStamp>,
}

impl VersionSlot {
    /// Its status as the management API lists it: with its mode.
    fn listed(&self) -> VersionStatus {
        let mode = self
            .servable
            .as_ref()
            .and_then(|s| s.mode.as_ref())
            .map(|m| m.summary());
        VersionStatus {
            mode,
            ..self.status.clone()
        }
    }
}

struct ModelEntry {
    source: ModelSource,
    versions: BTreeMap<i64, VersionSlot>,
    labels: BTreeMap<String, i64>,
    /// What the last look at the base path told the log, so a poll repeats nothing.
    layout: reconcile::Layout,
}

/// A model as listed by the management API.
#[derive(Clone, Debug)]
pub struct ModelInfo {
    pub name: String,
    pub base_path: String,
    pub versions: Vec<VersionStatus>,
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
    #[error("model {0} is already loaded")]
    AlreadyLoaded(String),
    #[error("model {name}: no version could be loaded from {path}: {message}")]
    LoadFailed {
        name: String,
        path: String,
        message: String,
    },
}

impl HasCode for RegistryError {
    fn code(&self) -> Code {
        match self {
            RegistryError::NotFound(_) | RegistryError::UnknownModel(_) => Code::NotFound,
            // TF Serving's InvalidArgument: a label is checked like the rest of the request.
            RegistryError::UnknownLabel(_) | RegistryError::LoadFailed { .. } => Code::InvalidArgument,
            RegistryError::BadBasePath { .. } | RegistryError::LabelTarget { .. } => Code::Internal,
            RegistryError::AlreadyLoaded(_) => Code::AlreadyExists,
        }
    }
}

/// How long an unloading version waits for its in-flight requests.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(60);

pub struct Registry {
    models: RwLock<BTreeMap<String, ModelEntry>>,
    options: Arc<LoadOptions>,
    /// Serializes changes (polls, config syncs, HTTP management); reads never wait on it.
    changes: Mutex<()>,
    /// Told the sources of every sync, before the registry applies them.
    sync_listener: std::sync::OnceLock<SyncListener>,
    /// The last statuses of models no longer served (all END), for the status
    /// API as TF Serving keeps them; at most [`RETIRED_MODELS`] names.
    retired: RwLock<BTreeMap<String, Vec<VersionStatus>>>,
    /// The thread `mixed_precision: auto`'s trials run on, one at a time.
    trials: crate::modes::background::Trials,
    /// This registry, for the trials that switch its versions' modes later.
    me: Weak<Registry>,
}

/// How many unloaded models' statuses are remembered.
const RETIRED_MODELS: usize = 1024;

type SyncListener = Box<dyn Fn(&[ModelSource]) + Send + Sync>;

impl Registry {
    pub fn new(options: LoadOptions) -> std::io::Result<Arc<Registry>> {
        let trials = crate::modes::background::Trials::start()?;
        Ok(Arc::new_cyclic(|me| Registry {
            models: RwLock::new(BTreeMap::new()),
            options: Arc::new(options),
            changes: Mutex::new(()),
            sync_listener: std::sync::OnceLock::new(),
            retired: RwLock::new(BTreeMap::new()),
            trials,
            me: me.clone(),
        }))
    }

    /// Calls `listener` with the sources of every later [`Registry::sync`], first.
    pub fn on_sync(&self, listener: impl Fn(&[ModelSource]) + Send + Sync + 'static) {
        let _ = self.sync_listener.set(Box::new(listener));
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, ModelEntry>> {
        self.models.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, ModelEntry>> {
        self.models.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a model of this registry may have a latency objective: told
    /// at start by its batching settings (the global parameters or a
    /// model's own), which every model's queues take.
    pub fn any_steered(&self) -> bool {
        let batching = &self.options.batching;
        let own = batching.overrides.values().map(|o| o.apply(&batching.params));
        let mut all = std::iter::once(batching.params.clone()).chain(own);
        batching.enabled && all.any(|params| params.objective().is_some())
    }

    /// The servable a request addresses.
    pub fn resolve(&self, model: &str, selector: &VersionSelector) -> Result<Arc<Servable>, RegistryError> {
        let models = self.read();
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
        let models = self.read();
        let Some(entry) = models.get(model) else {
            return self.retired_status(model, selector);
        };
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

    /// A model no longer served: its versions as they ended.
    fn retired_status(&self, model: &str, selector: &VersionSelector) -> Result<Vec<VersionStatus>, RegistryError> {
        let retired = self.retired.read().unwrap_or_else(|p| p.into_inner());
        let versions = retired
            .get(model)
            .ok_or_else(|| RegistryError::UnknownModel(model.to_string()))?;
        match selector {
            VersionSelector::Latest => Ok(versions.clone()),
            VersionSelector::Specific(v) => versions
                .iter()
                .find(|s| s.version == *v)
                .map(|s| vec![s.clone()])
                .ok_or_else(|| RegistryError::NotFound(format!("Specific({model}, {v})"))),
            VersionSelector::Label(label) => Err(RegistryError::UnknownLabel(label.clone())),
        }
    }

    /// Remembers an unloaded model's versions, ended.
    fn retire(&self, model: &str, versions: Vec<i64>) {
        let mut retired = self.retired.write().unwrap_or_else(|p| p.into_inner());
        if retired.len() >= RETIRED_MODELS && !retired.contains_key(model) {
            retired.pop_first();
        }
        let statuses = versions
            .into_iter()
            .map(|version| VersionStatus {
                version,
                state: VersionState::End,
                error: None,
                access: None,
                mode: None,
            })
            .collect();
        retired.insert(model.to_string(), statuses);
    }

    /// A model served again is no longer retired.
    fn unretire(&self, model: &str) {
        self.retired.write().unwrap_or_else(|p| p.into_inner()).remove(model);
    }

    pub fn model_names(&self) -> Vec<String> {
        self.read().keys().cloned().collect()
    }

    /// Whether a model of this name is configured (loaded, loading or failed).
    pub fn contains(&self, model: &str) -> bool {
        self.read().contains_key(model)
    }

    pub fn list(&self) -> Vec<ModelInfo> {
        self.read()
            .iter()
            .map(|(name, entry)| ModelInfo {
                name: name.clone(),
                base_path: entry.source.base_path.display().to_string(),
                versions: entry.versions.values().map(VersionSlot::listed).collect(),
            })
            .collect()
    }

    /// Every configured model has a version serving and none is loading.
    pub fn ready(&self) -> Result<(), String> {
        let models = self.read();
        for (name, entry) in models.iter() {
            if entry.versions.values().any(|v| v.status.state == VersionState::Loading) {
                return Err(format!("model {name} is loading"));
            }
            if !entry
                .versions
                .values()
                .any(|v| v.status.state == VersionState::Available)
            {
                return Err(format!("model {name} has no available version"));
            }
        }
        Ok(())
    }
}

mod lifecycle;
mod poll;
mod reconcile;

pub use poll::{release_freed_memory, spawn_poller};

#[cfg(test)]
mod tests;
