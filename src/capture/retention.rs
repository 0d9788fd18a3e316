//! Retention: a capture directory kept within a size and an age, by removing
//! its oldest closed files first. Captures of every request fill a disk at
//! tens of MB/s; Model Monitor and warm-up read recent files only.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::metrics::METRICS;

/// The limits one sink's files are kept within.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Limits {
    pub max_bytes: Option<u64>,
    pub max_age: Option<Duration>,
}

impl Limits {
    pub fn any(&self) -> bool {
        self.max_bytes.is_some() || self.max_age.is_some()
    }
}

/// Where one sink's files lie.
pub enum Files<'a> {
    /// Every `*.jsonl` under a directory (SageMaker's dated tree).
    Jsonl(&'a Path),
    /// `PREFIX-*.tfrecord` beside a prefix.
    TfRecord(&'a str),
}

struct Found {
    path: PathBuf,
    bytes: u64,
    modified: SystemTime,
}

/// Removes the oldest of `files` until they fit `limits`, never one of
/// `open`; empty directories left in a JSON Lines tree go too. Returns how
/// many files went.
pub fn enforce(files: &Files<'_>, limits: Limits, open: &[&Path], now: SystemTime) -> usize {
    let (mut found, sink) = match files {
        Files::Jsonl(dir) => {
            let mut found = Vec::new();
            walk(dir, &mut found);
            (found, "jsonl")
        }
        Files::TfRecord(prefix) => (tfrecords(prefix), "tfrecord"),
    };
    found.retain(|f| !open.contains(&f.path.as_path()));
    // Oldest first; the open files count toward the size as well.
    found.sort_by_key(|f| f.modified);
    let open_bytes: u64 = open
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum();
    let mut total: u64 = open_bytes + found.iter().map(|f| f.bytes).sum::<u64>();
    let mut removed = 0;
    for file in &found {
        let too_old = limits
            .max_age
            .is_some_and(|age| now.duration_since(file.modified).unwrap_or_default() > age);
        let too_big = limits.max_bytes.is_some_and(|max| total > max);
        if !too_old && !too_big {
            // Oldest first: the rest are newer and the total fits.
            break;
        }
        match std::fs::remove_file(&file.path) {
            Ok(()) => {
                removed += 1;
                total = total.saturating_sub(file.bytes);
                if let Files::Jsonl(root) = files {
                    remove_empty_parents(&file.path, root);
                }
            }
            Err(e) => log::debug!("capture retention: cannot remove {}: {e}", file.path.display()),
        }
    }
    if removed > 0 {
        METRICS
            .capture_files_removed
            .with_label_values(&[sink])
            .inc_by(removed as u64);
    }
    removed
}

fn walk(dir: &Path, found: &mut Vec<Found>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(meta) = entry.metadata() else {
            continue;
        };
        let path = entry.path();
        if meta.is_dir() {
            walk(&path, found);
        } else if path.extension().is_some_and(|e| e == "jsonl") {
            found.push(Found {
                bytes: meta.len(),
                modified: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                path,
            });
        }
    }
}

fn tfrecords(prefix: &str) -> Vec<Found> {
    crate::warmup::records::capture_files(prefix)
        .into_iter()
        .filter_map(|path| {
            let meta = std::fs::metadata(&path).ok().filter(|m| m.is_file())?;
            Some(Found {
                bytes: meta.len(),
                modified: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                path,
            })
        })
        .collect()
}

/// Removes the directories between `file` and `root` that its removal emptied.
fn remove_empty_parents(file: &Path, root: &Path) {
    let mut dir = file.parent();
    while let Some(at) = dir.filter(|d| d.starts_with(root) && *d != root) {
        if std::fs::remove_dir(at).is_err() {
            break;
        }
        dir = at.parent();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &Path, bytes: usize, age_s: u64) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, vec![b'x'; bytes]).unwrap();
        let at = SystemTime::now() - Duration::from_secs(age_s);
        std::fs::File::options()
            .write(true)
            .open(path)
            .unwrap()
            .set_modified(at)
            .unwrap();
    }

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tfserve-retention-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn the_oldest_closed_files_go_until_the_rest_fit() {
        let root = temp("size");
        let old = root.join("m/2026/11/25/01/a.jsonl");
        let mid = root.join("m/2026/11/25/02/b.jsonl");
        let new = root.join("m/2026/11/25/03/c.jsonl");
        let open = root.join("m/2026/11/25/03/d.jsonl");
        file(&old, 100, 300);
        file(&mid, 100, 200);
        file(&new, 100, 100);
        file(&open, 100, 0);
        std::fs::write(root.join("m/notes.txt"), b"not capture").unwrap();
        let limits = Limits {
            max_bytes: Some(250),
            max_age: None,
        };
        let removed = enforce(&Files::Jsonl(&root), limits, &[open.as_path()], SystemTime::now());
        assert_eq!(removed, 2);
        assert!(!old.exists() && !mid.exists() && new.exists() && open.exists());
        // Emptied hour directories go with their files.
        assert!(!root.join("m/2026/11/25/01").exists());
        assert!(root.join("m/notes.txt").exists());
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn files_past_the_age_go_and_only_the_prefixs_own() {
        let root = temp("age");
        file(&root.join("half-20261125T010000-1.tfrecord"), 10, 7200);
        file(&root.join("half-20261125T030000-2.tfrecord"), 10, 60);
        file(&root.join("halfway-20261125T010000-1.tfrecord"), 10, 7200);
        let limits = Limits {
            max_bytes: None,
            max_age: Some(Duration::from_secs(3600)),
        };
        let prefix = root.join("half").display().to_string();
        assert_eq!(enforce(&Files::TfRecord(&prefix), limits, &[], SystemTime::now()), 1);
        assert!(!root.join("half-20261125T010000-1.tfrecord").exists());
        assert!(root.join("half-20261125T030000-2.tfrecord").exists());
        assert!(root.join("halfway-20261125T010000-1.tfrecord").exists());
        let _ = std::fs::remove_dir_all(&root);
    }
}
