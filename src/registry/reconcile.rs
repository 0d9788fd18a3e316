//! How one model's versions are brought in line with its base path and
//! version policy: the versions on disk, which to load and unload, and the
//! swap policy's order for doing it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::discover::{holds_saved_model, DirectoryStamp};
use super::poll::release_freed_memory;
use super::{discover_versions, ModelSource, Registry, SwapPolicy, VersionSlot};

impl Registry {
    /// Brings one model's versions in line with its base path and policy.
    pub(super) fn reconcile(&self, name: &str) {
        let Some(source) = self.read().get(name).map(|e| e.source.clone()) else {
            return;
        };
        let on_disk = self.versions_on_disk(name, &source);
        let wanted: BTreeMap<i64, PathBuf> = source.policy.select(&on_disk).into_iter().collect();
        let (to_load, to_unload) = self.changes(name, &wanted);
        self.swap(name, &source, &wanted, &to_load, &to_unload);
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

    /// The version folders under the model's base path that hold a SavedModel;
    /// a base path that holds one itself is version 1 (as from a bucket, and
    /// Vertex AI's `AIP_STORAGE_URI`). What it found is logged when it changes.
    fn versions_on_disk(&self, name: &str, source: &ModelSource) -> Vec<(i64, PathBuf)> {
        let base_path = self.options.storage.local_base(source);
        let (layout, versions) = match discover_versions(&base_path) {
            Ok(versions) => {
                let versions: Vec<(i64, PathBuf)> =
                    versions.into_iter().filter(|(_, p)| holds_saved_model(p)).collect();
                if !versions.is_empty() {
                    (Layout::Versions, versions)
                } else if holds_saved_model(&base_path) {
                    (Layout::Flat, vec![(1, base_path.clone())])
                } else {
                    (Layout::Empty, versions)
                }
            }
            Err(err) => (Layout::Unreadable(err.to_string()), Vec::new()),
        };
        let changed = self
            .write()
            .get_mut(name)
            .is_some_and(|entry| std::mem::replace(&mut entry.layout, layout.clone()) != layout);
        if changed {
            layout.log(name, &base_path);
        }
        versions
    }

    /// What to load (wanted, not yet tried, or failed and changed since) and
    /// what to unload (serving, no longer wanted), over one snapshot of the
    /// model's versions.
    fn changes(&self, name: &str, wanted: &BTreeMap<i64, PathBuf>) -> (Vec<(i64, PathBuf)>, Vec<i64>) {
        let models = self.read();
        let versions = models.get(name).map(|e| &e.versions);
        let all = versions.into_iter().flat_map(|v| v.iter());
        // A failed version is tried again once its files have changed.
        let retry = |v: &i64, slot: &VersionSlot| match (&slot.failed_files, wanted.get(v)) {
            (Some(stamp), Some(path)) => *stamp != DirectoryStamp::of(path),
            _ => false,
        };
        let tried: Vec<i64> = all
            .clone()
            .filter(|(v, slot)| !retry(v, slot))
            .map(|(v, _)| *v)
            .collect();
        let to_load = wanted
            .iter()
            .filter(|(v, _)| !tried.contains(v))
            .map(|(v, p)| (*v, p.clone()))
            .collect();
        let to_unload = all
            .filter(|(v, slot)| slot.servable.is_some() && !wanted.contains_key(v))
            .map(|(v, _)| *v)
            .collect();
        (to_load, to_unload)
    }

    /// Loads and unloads in the swap policy's order.
    fn swap(
        &self,
        name: &str,
        source: &ModelSource,
        wanted: &BTreeMap<i64, PathBuf>,
        to_load: &[(i64, PathBuf)],
        to_unload: &[i64],
    ) {
        if self.options.swap == SwapPolicy::ResourcePreserving {
            to_unload.iter().for_each(|&v| self.unload(name, v));
        }
        for (version, path) in to_load {
            self.load(name, *version, path, source);
        }
        if self.options.swap == SwapPolicy::AvailabilityPreserving {
            // The old versions go only once a wanted one serves: a new version
            // that fails to load leaves the model answering from the old.
            if to_unload.is_empty() || self.serves_any(name, wanted.keys()) {
                to_unload.iter().for_each(|&v| self.unload(name, v));
            } else {
                log::warn!(
                    "model {name}: no wanted version loaded; versions {to_unload:?} keep serving until one does"
                );
            }
        }
        if !to_unload.is_empty() {
            release_freed_memory();
        }
    }

    fn serves_any<'v>(&self, model: &str, mut versions: impl Iterator<Item = &'v i64>) -> bool {
        let models = self.read();
        let Some(entry) = models.get(model) else {
            return false;
        };
        versions.any(|v| entry.versions.get(v).is_some_and(|slot| slot.servable.is_some()))
    }
}

/// What a model's base path held at the last look.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) enum Layout {
    /// Not looked at yet.
    #[default]
    Unknown,
    /// Numeric version folders holding SavedModels.
    Versions,
    /// A SavedModel itself, served as version 1.
    Flat,
    /// Nothing to load.
    Empty,
    Unreadable(String),
}

impl Layout {
    fn log(&self, name: &str, base_path: &std::path::Path) {
        let path = base_path.display();
        match self {
            Layout::Unknown | Layout::Versions => {}
            Layout::Flat => log::info!(
                "model {name}: the base path {path} holds a SavedModel itself (no numeric version folder); \
                 serving it as version 1"
            ),
            // TF Serving's words, which operators search their logs for.
            Layout::Empty => log::warn!(
                "No versions of servable {name} found under base path {path}. Did you forget to name your leaf \
                 directory as a number (eg. '/1/')?"
            ),
            Layout::Unreadable(err) => log::warn!("model {name}: {err}"),
        }
    }
}
