//! How the registry changes: config syncs, polls of the base paths, models
//! added and removed over HTTP, and each version's load, drain and unload.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use crate::runtime::precision;

use super::discover::DirectoryStamp;
use super::poll::release_freed_memory;
use super::{
    servable, ModelEntry, ModelSource, Registry, RegistryError, Servable, VersionSlot, VersionState, VersionStatus,
    DRAIN_TIMEOUT,
};

impl Registry {
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
            self.unretire(&source.name);
            self.write()
                .entry(source.name.clone())
                .and_modify(|e| e.source = source.clone())
                .or_insert_with(|| ModelEntry {
                    source: source.clone(),
                    versions: BTreeMap::new(),
                    labels: BTreeMap::new(),
                    layout: Default::default(),
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
            self.unretire(&name);
            models.insert(
                name.clone(),
                ModelEntry {
                    source,
                    versions: BTreeMap::new(),
                    labels: BTreeMap::new(),
                    layout: Default::default(),
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

    /// Re-reads a served model's base path now (a repository load of a model
    /// already served, as Triton reloads): new versions load, removed ones
    /// unload. Fails if no version serves afterwards.
    pub fn refresh(&self, name: &str) -> Result<(), RegistryError> {
        let _changes = self.changes.lock().unwrap_or_else(|p| p.into_inner());
        let Some(base_path) = self.read().get(name).map(|e| e.source.base_path.display().to_string()) else {
            return Err(RegistryError::UnknownModel(name.to_string()));
        };
        self.reconcile(name);
        let serving = self
            .read()
            .get(name)
            .is_some_and(|e| e.versions.values().any(|v| v.servable.is_some()));
        match serving {
            true => Ok(()),
            false => Err(RegistryError::LoadFailed {
                name: name.to_string(),
                path: base_path,
                message: "no version serves after re-reading it".into(),
            }),
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
        for version in &versions {
            self.unload(name, *version);
        }
        self.write().remove(name);
        // Its series without a version too (requests refused before one resolved).
        crate::metrics::METRICS.forget(name, None);
        self.retire(name, versions);
        release_freed_memory();
    }

    fn set_slot(
        &self,
        model: &str,
        version: i64,
        state: VersionState,
        error: Option<String>,
        servable: Option<Arc<Servable>>,
    ) {
        let access = servable.as_ref().and_then(|s| s.audit.as_ref()).map(|a| a.summary());
        if let Some(entry) = self.write().get_mut(model) {
            entry.versions.insert(
                version,
                VersionSlot {
                    status: VersionStatus {
                        version,
                        state,
                        error,
                        access,
                        mode: None,
                    },
                    servable,
                    failed_files: None,
                },
            );
        }
    }

    pub(super) fn load(&self, model: &str, version: i64, path: &std::path::Path, source: &ModelSource) {
        self.set_slot(model, version, VersionState::Loading, None, None);
        let started = Instant::now();
        match self.build_bounded(model, version, path, source) {
            Ok(servable) => {
                let signatures: Vec<String> = servable.runtime.signatures().iter().map(|s| s.name.clone()).collect();
                let access = servable.audit.as_ref().map(|a| a.summary());
                log::info!(
                    "model {model} version {version} available after {:.0} ms, from {} (signatures: {}; reaching {})",
                    started.elapsed().as_secs_f64() * 1000.0,
                    path.display(),
                    signatures.join(", "),
                    access
                        .as_deref()
                        .unwrap_or("not audited: no saved_model.pb for its tags")
                );
                let servable = Arc::new(servable);
                self.set_slot(model, version, VersionState::Available, None, Some(servable.clone()));
                self.queue_trial(&servable);
            }
            Err(err) => {
                log::error!("model {model} version {version}: {err}");
                self.set_slot(model, version, VersionState::End, Some(err.to_string()), None);
                if let Some(slot) = self.write().get_mut(model).and_then(|e| e.versions.get_mut(&version)) {
                    slot.failed_files = Some(DirectoryStamp::of(path));
                }
            }
        }
    }

    /// Builds a servable on a thread of its own, so that a load that hangs
    /// (a FIFO or a stalled network mount under the model, a session that
    /// never returns) or panics fails its version after `load_timeout`
    /// instead of stopping every later change to the registry.
    fn build_bounded(
        &self,
        model: &str,
        version: i64,
        path: &std::path::Path,
        source: &ModelSource,
    ) -> Result<Servable, String> {
        let (sender, receiver) = std::sync::mpsc::sync_channel(1);
        let options = self.options.clone();
        let session = source.session.apply(&options.session);
        source.session.check_shared_pools(&options.session)?;
        if let Some(lacks) = session
            .mixed_precision
            .and_then(|mode| precision::host_lacks(mode, options.loader.sees_gpu()).map(|lacks| (mode, lacks)))
        {
            return Err(format!("mixed_precision {} needs {}", lacks.0, lacks.1));
        }
        let (name, dir, images) = (model.to_string(), path.to_path_buf(), source.images);
        let logging = source.logging.clone();
        let allowed: std::collections::BTreeSet<_> =
            options.allow_access.union(&source.allow_access).copied().collect();
        let spawned = std::thread::Builder::new()
            .name(format!("tfserve-load-{model}"))
            .spawn(move || {
                let built = servable::audited(&dir, &allowed, &options).and_then(|audit| {
                    let loader = options.loader.as_ref();
                    let session = servable::session_for_modules((&name, version), audit.as_deref(), &session, loader)?;
                    let built = servable::build(&name, version, &dir, &session, images, logging, &options);
                    built.map_err(|e| e.to_string()).map(|mut servable| {
                        servable.audit = audit;
                        servable
                    })
                });
                // After a timeout nobody listens: the late servable is dropped here.
                let _ = sender.send(built);
            });
        if let Err(e) = spawned {
            return Err(format!("cannot start a thread to load it: {e}"));
        }
        let outcome = match self.options.load_timeout {
            Some(limit) => receiver.recv_timeout(limit).map_err(|e| match e {
                std::sync::mpsc::RecvTimeoutError::Timeout => format!(
                    "the load did not finish within {} s (model_load_timeout_seconds); other models go on",
                    limit.as_secs()
                ),
                std::sync::mpsc::RecvTimeoutError::Disconnected => "the load panicked".to_string(),
            }),
            None => receiver.recv().map_err(|_| "the load panicked".to_string()),
        };
        if outcome.as_ref().is_err_and(|e| e == "the load panicked") {
            crate::metrics::METRICS.panics.with_label_values(&["load"]).inc();
        }
        outcome?
    }

    /// Stops routing to a version, waits for its in-flight requests, then drops
    /// it (its queues drain and its session closes).
    pub(super) fn unload(&self, model: &str, version: i64) {
        let servable = {
            let mut models = self.write();
            let Some(slot) = models.get_mut(model).and_then(|e| e.versions.get_mut(&version)) else {
                return;
            };
            slot.status.state = VersionState::Unloading;
            slot.servable.take()
        };
        if let Some(servable) = servable {
            if let Some(mode) = &servable.mode {
                mode.uncount(model, version);
            }
            // Requests in flight keep the servable, queued batches its runners;
            // once both let go the session closes, and the memory is free to trim.
            let holds = servable.holds();
            drop(servable);
            if holds.wait_released(Instant::now() + DRAIN_TIMEOUT) {
                crate::metrics::METRICS.forget(model, Some(version));
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
