//! Finding models and versions on disk.

use std::path::{Path, PathBuf};

use super::RegistryError;
use crate::model_config::{ModelSource, VersionPolicy};

/// Numeric child directories of `base_path`, as (version, path), ascending.
pub fn discover_versions(base_path: &Path) -> Result<Vec<(i64, PathBuf)>, RegistryError> {
    let entries = std::fs::read_dir(base_path).map_err(|e| RegistryError::BadBasePath {
        path: base_path.display().to_string(),
        message: match e.kind() {
            // Most often the confinement: its reads were fixed at start.
            std::io::ErrorKind::PermissionDenied => format!(
                "{e}; a confined server reads only beneath the folders it knew at start: name this one's in \
                 --model_roots (or start with --confine=false)"
            ),
            _ => e.to_string(),
        },
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

/// Whether a version directory holds a SavedModel yet (`saved_model.pb` or
/// `.pbtxt`); one still being copied in is not a version until it does.
pub fn holds_saved_model(version_dir: &Path) -> bool {
    version_dir.join("saved_model.pb").is_file() || version_dir.join("saved_model.pbtxt").is_file()
}

/// The files under a directory, summed up: how many, their total size and
/// the latest modification. Any copy still in progress changes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirectoryStamp {
    files: u64,
    bytes: u64,
    modified: Option<std::time::SystemTime>,
}

impl DirectoryStamp {
    pub fn of(dir: &Path) -> DirectoryStamp {
        let mut stamp = DirectoryStamp {
            files: 0,
            bytes: 0,
            modified: None,
        };
        stamp.add(dir, 0);
        stamp
    }

    fn add(&mut self, dir: &Path, depth: usize) {
        // SavedModels are shallow (variables/, assets/); a bound keeps symlink loops out.
        if depth > 8 {
            return;
        }
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.filter_map(Result::ok) {
            let Ok(metadata) = entry.metadata() else {
                continue;
            };
            if metadata.is_dir() {
                self.add(&entry.path(), depth + 1);
                continue;
            }
            self.files += 1;
            self.bytes += metadata.len();
            let modified = metadata.modified().ok();
            if modified > self.modified {
                self.modified = modified;
            }
        }
    }
}

/// Each subdirectory of `root` holding numeric version directories is a model.
pub fn discover_models(root: &Path, policy: &VersionPolicy) -> Result<Vec<ModelSource>, RegistryError> {
    let entries = std::fs::read_dir(root).map_err(|e| RegistryError::BadBasePath {
        path: root.display().to_string(),
        message: e.to_string(),
    })?;
    let mut models: Vec<ModelSource> = entries
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .filter(|e| discover_versions(&e.path()).map(|v| !v.is_empty()).unwrap_or(false))
        .filter_map(|e| {
            Some(ModelSource::with_policy(
                e.file_name().to_str()?,
                e.path(),
                policy.clone(),
            ))
        })
        .collect();
    models.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(models)
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
        let models: Vec<String> = discover_models(&dir, &VersionPolicy::Latest(1))
            .unwrap()
            .into_iter()
            .map(|m| m.name)
            .collect();
        assert_eq!(models, vec!["m"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
