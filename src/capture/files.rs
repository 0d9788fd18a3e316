//! The capture writer's open files: where each is, when it was opened and
//! how much it holds, so rotation can tell when it gives way to a new one.

use std::path::{Path, PathBuf};
use std::time::Instant;

/// An open capture file and when it must give way to a new one.
pub(super) struct OpenFile {
    pub(super) file: std::io::BufWriter<std::fs::File>,
    pub(super) path: PathBuf,
    pub(super) opened: Instant,
    pub(super) written: u64,
    /// JSON Lines files hold one hour each (hours since the epoch).
    pub(super) hour: u64,
}

pub(super) fn open(path: &Path, hour: u64) -> std::io::Result<OpenFile> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    let file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
    Ok(OpenFile {
        file: std::io::BufWriter::with_capacity(64 * 1024, file),
        path: path.to_path_buf(),
        opened: Instant::now(),
        written: 0,
        hour,
    })
}

/// A file name part no other process's file shares: the process id and this
/// process's file count.
pub(super) fn unique(count: u64) -> String {
    format!("{:x}-{count}", std::process::id())
}
