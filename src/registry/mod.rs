//! The model registry: models → versions → loaded servables, with the version
//! states TF Serving reports, version selection for requests, and the changes
//! (config syncs, file-system polls, HTTP management) that load and unload
//! versions while traffic flows.

mod discover;
mod servable;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

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
}

struct VersionSlot {
    status: VersionStatus,
    servable: Option<Arc<Servable>>,
}

struct ModelEntry {
    source: ModelSource,
    versions: BTreeMap<i64, VersionSlot>,
    labels: BTreeMap<String, i64>,
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

/// How long an unloading version waits for its in-flight requests.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(60);

pub struct Registry {
    models: RwLock<BTreeMap<String, ModelEntry>>,
    options: LoadOptions,
    /// Serializes changes (polls, config syncs, HTTP management); reads never wait on it.
    changes: Mutex<()>,
    /// Told the sources of every sync, before the registry applies them.
    sync_listener: std::sync::OnceLock<SyncListener>,
}

type SyncListener = Box<dyn Fn(&[ModelSource]) + Send + Sync>;

impl Registry {
    pub fn new(options: LoadOptions) -> Registry {
        Registry {
            models: RwLock::new(BTreeMap::new()),
            options,
            changes: Mutex::new(()),
            sync_listener: std::sync::OnceLock::new(),
        }
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
        self.read().keys().cloned().collect()
    }

    pub fn list(&self) -> Vec<ModelInfo> {
        self.read()
            .iter()
            .map(|(name, entry)| ModelInfo {
                name: name.clone(),
                base_path: entry.source.base_path.display().to_string(),
                versions: entry.versions.values().map(|s| s.status.clone()).collect(),
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

    /// Makes the registry serve exactly `sources` (a config load or reload):
    /// new models load, changed ones reconcile, missing ones unload.
    pub fn sync(&self, sources: &[ModelSource]) {
        let _changes = self.changes.lock().unwrap_or_else(|p| p.into_inner());
        // Before the models: a new model's handlers are ready by the time it serves.
        if let Some(listener) = self.sync_listener.get() {
            listener(sources);
        }
        let wanted: BTreeMap<&str, &ModelSource> = sources.iter().map(|s| (s.name.as_str(), s)).collect();
        let gone: Vec<String> = self
            .read()
            .keys()
            .filter(|k| !wanted.contains_key(k.as_str()))
            .cloned()
            .collect();
        for name in gone {
            self.unload_model(&name);
        }
        for source in sources {
            self.write()
                .entry(source.name.clone())
                .and_modify(|e| e.source = source.clone())
                .or_insert_with(|| ModelEntry {
                    source: source.clone(),
                    versions: BTreeMap::new(),
                    labels: BTreeMap::new(),
                });
            self.reconcile(&source.name);
        }
    }

    /// Re-reads every model's base path and loads or unloads versions to match its policy.
    pub fn poll(&self) {
        let _changes = self.changes.lock().unwrap_or_else(|p| p.into_inner());
        for name in self.model_names() {
            self.reconcile(&name);
        }
    }

    /// Adds one model (the management API). Fails if the name is taken or no
    /// version loads.
    pub fn add_model(&self, source: ModelSource) -> Result<(), RegistryError> {
        let _changes = self.changes.lock().unwrap_or_else(|p| p.into_inner());
        let name = source.name.clone();
        let base_path = source.base_path.display().to_string();
        {
            let mut models = self.write();
            if models.contains_key(&name) {
                return Err(RegistryError::AlreadyLoaded(name));
            }
            models.insert(
                name.clone(),
                ModelEntry {
                    source,
                    versions: BTreeMap::new(),
                    labels: BTreeMap::new(),
                },
            );
        }
        self.reconcile(&name);
        let failure = {
            let models = self.read();
            let entry = models.get(&name);
            let versions: Vec<&VersionSlot> = entry.map(|e| e.versions.values().collect()).unwrap_or_default();
            if versions.iter().any(|v| v.status.state == VersionState::Available) {
                None
            } else {
                let errors: Vec<String> = versions.iter().filter_map(|v| v.status.error.clone()).collect();
                Some(if errors.is_empty() {
                    "no numeric version directory".to_string()
                } else {
                    errors.join("; ")
                })
            }
        };
        match failure {
            None => Ok(()),
            Some(message) => {
                self.write().remove(&name);
                Err(RegistryError::LoadFailed {
                    name,
                    path: base_path,
                    message,
                })
            }
        }
    }

    /// Drains and unloads every version of a model, then forgets it.
    pub fn remove_model(&self, name: &str) -> Result<(), RegistryError> {
        let _changes = self.changes.lock().unwrap_or_else(|p| p.into_inner());
        if !self.read().contains_key(name) {
            return Err(RegistryError::UnknownModel(name.to_string()));
        }
        self.unload_model(name);
        Ok(())
    }

    fn unload_model(&self, name: &str) {
        let versions: Vec<i64> = self
            .read()
            .get(name)
            .map(|e| e.versions.keys().copied().collect())
            .unwrap_or_default();
        for version in versions {
            self.unload(name, version);
        }
        self.write().remove(name);
        release_freed_memory();
    }

    /// Brings one model's versions in line with its base path and policy.
    fn reconcile(&self, name: &str) {
        let Some(source) = self.read().get(name).map(|e| e.source.clone()) else {
            return;
        };
        let on_disk = match discover_versions(&source.base_path) {
            Ok(versions) => versions,
            Err(err) => {
                log::warn!("model {name}: {err}");
                Vec::new()
            }
        };
        let wanted: BTreeMap<i64, std::path::PathBuf> = source.policy.select(&on_disk).into_iter().collect();
        let (serving, tried): (Vec<i64>, Vec<i64>) = {
            let models = self.read();
            let versions = models.get(name).map(|e| &e.versions);
            let all = versions.into_iter().flat_map(|v| v.iter());
            let serving = all
                .clone()
                .filter(|(_, s)| s.servable.is_some())
                .map(|(v, _)| *v)
                .collect();
            (serving, all.map(|(v, _)| *v).collect())
        };
        // A version that failed to load stays END until its directory goes away.
        let to_load: Vec<(i64, std::path::PathBuf)> = wanted
            .iter()
            .filter(|(v, _)| !tried.contains(v))
            .map(|(v, p)| (*v, p.clone()))
            .collect();
        let to_unload: Vec<i64> = serving.iter().filter(|v| !wanted.contains_key(v)).copied().collect();
        if self.options.swap == SwapPolicy::ResourcePreserving {
            to_unload.iter().for_each(|&v| self.unload(name, v));
        }
        for (version, path) in &to_load {
            self.load(name, *version, path, &source);
        }
        if self.options.swap == SwapPolicy::AvailabilityPreserving {
            to_unload.iter().for_each(|&v| self.unload(name, v));
        }
        if !to_unload.is_empty() {
            release_freed_memory();
        }
        // Forget ended versions whose directories are gone.
        if let Some(entry) = self.write().get_mut(name) {
            entry
                .versions
                .retain(|v, slot| slot.servable.is_some() || on_disk.iter().any(|(d, _)| d == v));
        }
        for (label, &version) in &source.labels {
            if let Err(err) = self.set_label(name, label, version) {
                log::warn!("{err}");
            }
        }
    }

    fn set_slot(
        &self,
        model: &str,
        version: i64,
        state: VersionState,
        error: Option<String>,
        servable: Option<Arc<Servable>>,
    ) {
        if let Some(entry) = self.write().get_mut(model) {
            entry.versions.insert(
                version,
                VersionSlot {
                    status: VersionStatus { version, state, error },
                    servable,
                },
            );
        }
    }

    fn load(&self, model: &str, version: i64, path: &std::path::Path, source: &ModelSource) {
        self.set_slot(model, version, VersionState::Loading, None, None);
        let started = Instant::now();
        let session = source.session.apply(&self.options.session);
        match servable::build(model, version, path, &session, source.images, &self.options) {
            Ok(servable) => {
                let signatures: Vec<String> = servable.runtime.signatures().iter().map(|s| s.name.clone()).collect();
                log::info!(
                    "model {model} version {version} available after {:.0} ms, from {} (signatures: {})",
                    started.elapsed().as_secs_f64() * 1000.0,
                    path.display(),
                    signatures.join(", ")
                );
                self.set_slot(model, version, VersionState::Available, None, Some(Arc::new(servable)));
            }
            Err(err) => {
                log::error!("model {model} version {version}: {err}");
                self.set_slot(model, version, VersionState::End, Some(err.to_string()), None);
            }
        }
    }

    /// Stops routing to a version, waits for its in-flight requests, then drops
    /// it (its queues drain and its session closes).
    fn unload(&self, model: &str, version: i64) {
        let servable = {
            let mut models = self.write();
            let Some(slot) = models.get_mut(model).and_then(|e| e.versions.get_mut(&version)) else {
                return;
            };
            slot.status.state = VersionState::Unloading;
            slot.servable.take()
        };
        if let Some(servable) = servable {
            // Requests in flight keep the servable, queued batches its runners;
            // once both let go the session closes, and the memory is free to trim.
            let holds = servable.holds();
            drop(servable);
            if holds.wait_released(Instant::now() + DRAIN_TIMEOUT) {
                log::info!("model {model} version {version} unloaded");
            } else {
                log::warn!(
                    "model {model} version {version}: requests still hold it after {} s; unloaded from routing",
                    DRAIN_TIMEOUT.as_secs()
                );
            }
        }
        self.set_slot(model, version, VersionState::End, None, None);
    }

    /// Points a label at a version; only available versions may be labelled.
    pub fn set_label(&self, model: &str, label: &str, version: i64) -> Result<(), RegistryError> {
        let mut models = self.write();
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

    /// Checks labels of the current sources (for start-up, where a label on a
    /// missing version is a configuration error).
    pub fn check_labels(&self) -> Result<(), RegistryError> {
        let models = self.read();
        for (name, entry) in models.iter() {
            for (label, version) in &entry.source.labels {
                if entry.labels.get(label) != Some(version) {
                    return Err(RegistryError::LabelTarget {
                        model: name.clone(),
                        label: label.clone(),
                        version: *version,
                    });
                }
            }
        }
        Ok(())
    }
}

/// Hands memory freed by an unloaded session back to the operating system
/// (glibc keeps freed heap pages otherwise, so RSS would not fall).
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        extern "C" {
            fn malloc_trim(pad: usize) -> i32;
        }
        // SAFETY: malloc_trim only releases free heap memory; it is thread-safe.
        unsafe {
            malloc_trim(0);
        }
    }
}

/// Polls base paths (`file_system_poll_wait_seconds`) and re-reads the config
/// file (`model_config_file_poll_wait_seconds`) on a background thread.
pub fn spawn_poller(
    registry: Arc<Registry>,
    file_system: Option<Duration>,
    config: Option<(std::path::PathBuf, Duration)>,
) -> std::io::Result<()> {
    if file_system.is_none() && config.is_none() {
        return Ok(());
    }
    let tick = [file_system, config.as_ref().map(|c| c.1)]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(Duration::from_secs(1));
    std::thread::Builder::new()
        .name("tfserve-poller".into())
        .spawn(move || {
            let (mut next_fs, mut next_config) = (Instant::now(), Instant::now());
            loop {
                std::thread::sleep(tick);
                let now = Instant::now();
                if let Some((path, every)) = &config {
                    if now >= next_config {
                        next_config = now + *every;
                        match crate::model_config::load(path) {
                            Ok(sources) => registry.sync(&sources),
                            Err(err) => log::error!("config reload skipped: {err}"),
                        }
                    }
                }
                if let Some(every) = file_system {
                    if now >= next_fs {
                        next_fs = now + every;
                        registry.poll();
                    }
                }
            }
        })?;
    Ok(())
}

#[cfg(test)]
mod tests;
