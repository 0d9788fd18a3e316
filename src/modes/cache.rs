//! Decisions kept on disk, so a restart reuses a trial instead of running it
//! again: one JSON file per SavedModel and trial setting, in `modes/` under
//! `--model_cache_dir`. The file name starts with the digest of the
//! SavedModel's bytes (`saved_model.pb`, `variables/`, `assets/`), which is
//! how `tfserve inspect` finds a model's decisions; the rest is the digest of
//! what else the measurement depended on: the TensorFlow build, the device,
//! the session's threads, the batch sizes, the modes tried and the tolerance.
//! A kept file is used only if it names, inside, the same SavedModel digest
//! and setting as its name says: the name holds 16 hex digits of each, and a
//! file copied or written under another model's name is not its decision.
//! The folder itself is one only the server's user may write
//! ([`crate::storage::private`]).

use std::io::Read;
use std::path::{Path, PathBuf};

use ring::digest::{Context, SHA256};
use serde::{Deserialize, Serialize};

use super::Decision;

/// A decision and what it was measured on.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CachedDecision {
    pub saved_model: String,
    /// What else the measurement depended on, as `path`'s `setting`.
    pub setting: String,
    pub tensorflow: String,
    pub device: String,
    pub decision: Decision,
}

/// The digest of a SavedModel's files, in name order; `fingerprint.pb`
/// (written anew by each export) and the warm-up requests aside.
pub fn saved_model_digest(dir: &Path) -> Result<String, String> {
    let mut files = Vec::new();
    list(dir, dir, &mut files).map_err(|e| format!("{}: {e}", dir.display()))?;
    files.sort();
    let mut context = Context::new(&SHA256);
    let mut buffer = vec![0u8; 1 << 20];
    for name in files {
        context.update(name.as_bytes());
        context.update(&[0]);
        let mut file = std::fs::File::open(dir.join(&name)).map_err(|e| format!("{name}: {e}"))?;
        loop {
            let read = file.read(&mut buffer).map_err(|e| format!("{name}: {e}"))?;
            if read == 0 {
                break;
            }
            context.update(&buffer[..read]);
        }
    }
    Ok(hex(context.finish().as_ref()))
}

fn list(root: &Path, dir: &Path, found: &mut Vec<String>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let Ok(relative) = path.strip_prefix(root) else {
            continue;
        };
        let name = relative.to_string_lossy().to_string();
        if name == "fingerprint.pb" || name == "assets.extra" {
            continue;
        }
        if path.is_dir() {
            list(root, &path, found)?;
        } else {
            found.push(name);
        }
    }
    Ok(())
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Where the decision for `saved_model` under `setting` lives.
pub fn path(cache_dir: &Path, saved_model: &str, setting: &str) -> PathBuf {
    let setting = hex(ring::digest::digest(&SHA256, setting.as_bytes()).as_ref());
    cache_dir.join(format!("{}-{}.json", &saved_model[..16], &setting[..16]))
}

pub fn read(path: &Path) -> Option<CachedDecision> {
    let text = std::fs::read(path).ok()?;
    serde_json::from_slice(&text).ok()
}

/// The decision kept at `path` for this SavedModel and setting: `Ok(None)`
/// where none is kept, `Err` naming what a kept file holds instead.
pub fn read_for(path: &Path, saved_model: &str, setting: &str) -> Result<Option<CachedDecision>, String> {
    if !path.exists() {
        return Ok(None);
    }
    let entry = read(path).ok_or_else(|| format!("{} is not a decision this server wrote", path.display()))?;
    if entry.saved_model != saved_model || entry.setting != setting {
        return Err(format!(
            "{} holds a decision for SavedModel {} under setting {:?}, not for this one ({saved_model}) under {setting:?}",
            path.display(),
            entry.saved_model,
            entry.setting
        ));
    }
    Ok(Some(entry))
}

/// Writes through a temporary file, so a reader never sees half of one.
pub fn write(path: &Path, entry: &CachedDecision) -> Result<(), String> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let text = serde_json::to_vec_pretty(entry).map_err(|e| e.to_string())?;
    let partial = path.with_extension(format!("partial-{}", std::process::id()));
    std::fs::write(&partial, text).map_err(|e| format!("{}: {e}", partial.display()))?;
    std::fs::rename(&partial, path).map_err(|e| format!("{}: {e}", path.display()))
}

/// Every decision kept for the SavedModel whose digest is `saved_model`.
pub fn for_saved_model(cache_dir: &Path, saved_model: &str) -> Vec<(PathBuf, CachedDecision)> {
    let Ok(entries) = std::fs::read_dir(cache_dir) else {
        return Vec::new();
    };
    let prefix = format!("{}-", &saved_model[..16]);
    let mut found: Vec<(PathBuf, CachedDecision)> = entries
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| {
            path.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".json"))
        })
        .filter_map(|path| read(&path).map(|entry| (path, entry)))
        .filter(|(_, entry)| entry.saved_model == saved_model)
        .collect();
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}
