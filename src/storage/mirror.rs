//! One remote model's cache brought in line with its store: list the version
//! prefixes, pick what the policy wants, download what is missing, remove
//! what is no longer wanted (the policy this module follows is stated in
//! [`super`]).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use futures_util::TryStreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectMeta, ObjectStore};
use serde::{Deserialize, Serialize};

use super::url::RemoteUrl;
use super::{errors, transfer, StorageError};
use crate::model_config::VersionPolicy;

/// What a cached version was downloaded from, kept in its folder: a restart
/// compares it with the store's listing to reuse the version.
const MANIFEST: &str = ".tfserve-objects.json";

pub struct Job<'a> {
    pub model: &'a str,
    pub url: &'a RemoteUrl,
    pub store: &'a dyn ObjectStore,
    pub cache: &'a Path,
    pub policy: &'a VersionPolicy,
    pub verified: &'a Mutex<HashSet<PathBuf>>,
}

/// A remote version the policy wants; `objects` is `None` where its cached
/// folder was already checked by this process.
struct Wanted {
    version: i64,
    prefix: ObjectPath,
    objects: Option<Vec<ObjectMeta>>,
}

#[derive(Serialize, Deserialize, PartialEq, Debug)]
struct Entry {
    path: String,
    size: u64,
    e_tag: Option<String>,
}

impl Job<'_> {
    pub async fn run(self) -> Result<(), StorageError> {
        let versions = self.versions().await?;
        let wanted = self.wanted(&versions).await?;
        for version in &wanted {
            self.ensure(version).await?;
        }
        let keep: Vec<i64> = wanted.iter().map(|w| w.version).collect();
        self.prune(&keep);
        Ok(())
    }

    fn store_error(&self, err: object_store::Error) -> StorageError {
        StorageError::Store {
            url: self.url.text().to_string(),
            cause: errors::describe(&err),
        }
    }

    fn cache_error(&self, err: std::io::Error) -> StorageError {
        StorageError::Cache {
            url: self.url.text().to_string(),
            cache: self.cache.display().to_string(),
            cause: err.to_string(),
        }
    }

    /// The numeric version prefixes, ascending; a base path holding a
    /// SavedModel itself is version 1.
    async fn versions(&self) -> Result<Vec<(i64, ObjectPath)>, StorageError> {
        let base = ObjectPath::from(self.url.prefix());
        let root = (!self.url.prefix().is_empty()).then_some(&base);
        let listing = self
            .store
            .list_with_delimiter(root)
            .await
            .map_err(|e| self.store_error(e))?;
        let mut versions: Vec<(i64, ObjectPath)> = listing
            .common_prefixes
            .iter()
            .filter_map(|prefix| {
                let name = prefix.filename()?;
                let numeric = !name.is_empty() && name.bytes().all(|b| b.is_ascii_digit());
                Some((name.parse::<i64>().ok().filter(|_| numeric)?, prefix.clone()))
            })
            .collect();
        versions.sort();
        if versions.is_empty() && listing.objects.iter().any(|o| is_saved_model(o.location.filename())) {
            versions.push((1, base));
        }
        if versions.is_empty() {
            return Err(StorageError::NoVersions {
                url: self.url.text().to_string(),
            });
        }
        Ok(versions)
    }

    /// The versions the policy serves among those holding a SavedModel
    /// (one still being uploaded is skipped), newest first.
    async fn wanted(&self, versions: &[(i64, ObjectPath)]) -> Result<Vec<Wanted>, StorageError> {
        let mut wanted = Vec::new();
        for (version, prefix) in versions.iter().rev() {
            if let VersionPolicy::Specific(listed) = self.policy {
                if !listed.contains(version) {
                    continue;
                }
            }
            let folder = self.cache.join(version.to_string());
            let objects = match self.is_verified(&folder) {
                true => None,
                false => {
                    let objects: Vec<ObjectMeta> = self
                        .store
                        .list(Some(prefix))
                        .try_collect()
                        .await
                        .map_err(|e| self.store_error(e))?;
                    let complete = objects.iter().any(|o| {
                        o.location.prefix_match(prefix).map(|rest| rest.count()) == Some(1)
                            && is_saved_model(o.location.filename())
                    });
                    if !complete {
                        log::debug!("model {}: version {version} holds no saved_model.pb yet", self.model);
                        continue;
                    }
                    Some(objects)
                }
            };
            wanted.push(Wanted {
                version: *version,
                prefix: prefix.clone(),
                objects,
            });
            if matches!(self.policy, VersionPolicy::Latest(n) if wanted.len() >= *n) {
                break;
            }
        }
        Ok(wanted)
    }

    /// A wanted version's folder, complete: reused where its manifest matches
    /// the store, else downloaded beside it and renamed into place.
    async fn ensure(&self, wanted: &Wanted) -> Result<(), StorageError> {
        let Some(objects) = &wanted.objects else {
            return Ok(());
        };
        let folder = self.cache.join(wanted.version.to_string());
        let manifest = manifest(objects, &wanted.prefix);
        let cached: Option<Vec<Entry>> = std::fs::read(folder.join(MANIFEST))
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok());
        if cached.as_ref() == Some(&manifest) {
            match on_disk_as_listed(&folder, &manifest) {
                Ok(()) => {
                    log::info!(
                        "model {}: version {} reused from the cache {}",
                        self.model,
                        wanted.version,
                        folder.display()
                    );
                    self.mark_verified(folder);
                    return Ok(());
                }
                Err(differs) => log::warn!(
                    "model {}: version {} in the cache {} is not what the store lists ({differs}); downloading it again",
                    self.model,
                    wanted.version,
                    folder.display()
                ),
            }
        }
        let partial = self
            .cache
            .join(format!(".partial-{}-{}", wanted.version, std::process::id()));
        let _ = std::fs::remove_dir_all(&partial);
        std::fs::create_dir_all(&partial).map_err(|e| self.cache_error(e))?;
        let download = transfer::Download {
            model: self.model,
            url: self.url,
            store: self.store,
            version: wanted.version,
            prefix: &wanted.prefix,
            objects,
            into: &partial,
        };
        if let Err(err) = download.run().await {
            let _ = std::fs::remove_dir_all(&partial);
            return Err(err);
        }
        let manifest = serde_json::to_vec(&manifest).unwrap_or_default();
        std::fs::write(partial.join(MANIFEST), manifest).map_err(|e| self.cache_error(e))?;
        self.swap_in(&partial, &folder, wanted.version)
            .map_err(|e| self.cache_error(e))?;
        self.mark_verified(folder);
        Ok(())
    }

    /// Renames a complete download over the version's folder (a folder that
    /// changed in the store is replaced as a whole).
    fn swap_in(&self, partial: &Path, folder: &Path, version: i64) -> std::io::Result<()> {
        if folder.exists() {
            let stale = self.cache.join(format!(".stale-{version}-{}", std::process::id()));
            std::fs::rename(folder, &stale)?;
            std::fs::rename(partial, folder)?;
            let _ = std::fs::remove_dir_all(&stale);
            return Ok(());
        }
        std::fs::rename(partial, folder)
    }

    /// Removes cached versions the policy no longer wants, and the leftovers
    /// of downloads whose process has ended.
    fn prune(&self, keep: &[i64]) {
        let Ok(entries) = std::fs::read_dir(self.cache) else {
            return;
        };
        for entry in entries.filter_map(Result::ok) {
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            let unwanted = name.parse::<i64>().is_ok_and(|v| !keep.contains(&v));
            if unwanted {
                log::info!("model {}: version {name} left the cache", self.model);
                self.verified.lock().unwrap_or_else(|p| p.into_inner()).remove(&path);
            }
            if unwanted || abandoned(&name) {
                let _ = std::fs::remove_dir_all(&path);
            }
        }
    }

    fn is_verified(&self, folder: &Path) -> bool {
        folder.is_dir() && self.verified.lock().unwrap_or_else(|p| p.into_inner()).contains(folder)
    }

    fn mark_verified(&self, folder: PathBuf) {
        self.verified.lock().unwrap_or_else(|p| p.into_inner()).insert(folder);
    }
}

fn is_saved_model(name: Option<&str>) -> bool {
    matches!(name, Some("saved_model.pb" | "saved_model.pbtxt"))
}

/// The objects under a version prefix, by path relative to it, sorted.
fn manifest(objects: &[ObjectMeta], prefix: &ObjectPath) -> Vec<Entry> {
    let mut entries: Vec<Entry> = objects
        .iter()
        .map(|o| Entry {
            path: transfer::relative(&o.location, prefix).join("/"),
            size: o.size,
            e_tag: o.e_tag.clone(),
        })
        .collect();
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    entries
}

/// Checks a cached version's files against the store's listing: each
/// object a file of the listed size, and no file the listing lacks. A
/// version changed on disk after its download (by hand, or by someone who
/// could write the cache) is not loaded as the store's.
fn on_disk_as_listed(folder: &Path, manifest: &[Entry]) -> Result<(), String> {
    let mut on_disk = Vec::new();
    files_under(folder, folder, &mut on_disk).map_err(|e| format!("{}: {e}", folder.display()))?;
    on_disk.retain(|(path, _)| path != MANIFEST);
    on_disk.sort();
    for entry in manifest {
        match on_disk.binary_search_by(|(path, _)| path.as_str().cmp(&entry.path)) {
            Ok(found) if on_disk[found].1 == entry.size => {}
            Ok(found) => {
                return Err(format!(
                    "{}: {} bytes on disk, {} listed",
                    entry.path, on_disk[found].1, entry.size
                ))
            }
            Err(_) => return Err(format!("{}: listed, not on disk", entry.path)),
        }
    }
    match on_disk
        .iter()
        .find(|(path, _)| !manifest.iter().any(|entry| entry.path == *path))
    {
        Some((extra, _)) => Err(format!("{extra}: on disk, not listed")),
        None => Ok(()),
    }
}

/// Every file beneath `dir`, by its path relative to `root` with `/`
/// between parts, and its size; links are not followed.
fn files_under(root: &Path, dir: &Path, found: &mut Vec<(String, u64)>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let path = entry.path();
        if kind.is_dir() {
            files_under(root, &path, found)?;
            continue;
        }
        let relative = path.strip_prefix(root).unwrap_or(&path);
        let name = relative
            .components()
            .map(|c| c.as_os_str().to_string_lossy())
            .collect::<Vec<_>>()
            .join("/");
        let size = match kind.is_file() {
            true => entry.metadata()?.len(),
            // A link in place of a listed file never matches its size.
            false => u64::MAX,
        };
        found.push((name, size));
    }
    Ok(())
}

/// `.partial-<version>-<pid>` or `.stale-<version>-<pid>` of a process no
/// longer running (a download cut by a crash or a kill).
fn abandoned(name: &str) -> bool {
    let Some(rest) = name.strip_prefix(".partial-").or_else(|| name.strip_prefix(".stale-")) else {
        return false;
    };
    let pid = rest.rsplit('-').next().and_then(|p| p.parse::<u32>().ok());
    pid.is_some_and(|pid| pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists())
}
