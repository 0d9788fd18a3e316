//! Batch transform's file side: finding the inputs, splitting them into
//! records, and reading and writing on threads of their own, so the loop
//! feeding the batcher never waits on the file system.

use std::path::{Path, PathBuf};

use super::{FileRead, FileResults, SplitType, TransformError};

pub(super) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> TransformError + '_ {
    move |source| TransformError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// `(input file, output file)` pairs, sorted, hidden files left out.
pub(super) fn files(input: &Path, output: &Path) -> Result<Vec<(PathBuf, PathBuf)>, TransformError> {
    let out_name = |rel: &Path| {
        let mut name = rel.as_os_str().to_owned();
        name.push(".out");
        output.join(name)
    };
    if input.is_file() {
        let name = input
            .file_name()
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("input"));
        return Ok(vec![(input.to_path_buf(), out_name(&name))]);
    }
    let mut found = Vec::new();
    let mut dirs = vec![input.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).map_err(io(&dir))? {
            let path = entry.map_err(io(&dir))?.path();
            if path.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.')) {
                continue;
            }
            if path.is_dir() {
                dirs.push(path);
            } else if let Ok(rel) = path.strip_prefix(input) {
                let out = out_name(rel);
                found.push((path, out));
            }
        }
    }
    found.sort();
    Ok(found)
}

pub(super) fn records(data: Vec<u8>, split: SplitType) -> Vec<Vec<u8>> {
    match split {
        SplitType::None => vec![data],
        SplitType::Line => data
            .split(|&b| b == b'\n')
            .map(|line| line.strip_suffix(b"\r").unwrap_or(line))
            .filter(|line| !line.iter().all(u8::is_ascii_whitespace))
            .map(<[u8]>::to_vec)
            .collect(),
    }
}

/// Writes `<output>.tmp` then renames it, so a crash or a full disk never
/// leaves a partial `.out` that a re-run would take as done; a write that
/// fails removes its partial `.tmp`.
fn write_output(path: &Path, results: FileResults, split: SplitType) -> Result<(), TransformError> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(io(parent))?;
    }
    let mut body = Vec::new();
    for result in results.into_iter().flatten() {
        match result {
            Ok(bytes) => body.extend_from_slice(&bytes),
            Err(error) => body.extend_from_slice(serde_json::json!({ "error": error }).to_string().as_bytes()),
        }
        if split == SplitType::Line {
            body.push(b'\n');
        }
    }
    let tmp = path.with_extension("out.tmp");
    let written = std::fs::write(&tmp, body)
        .map_err(io(&tmp))
        .and_then(|()| std::fs::rename(&tmp, path).map_err(io(path)));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

pub(super) fn spawn_reader(todo: Vec<(PathBuf, PathBuf)>) -> std::io::Result<tokio::sync::mpsc::Receiver<FileRead>> {
    let (to_loop, from_reader) = tokio::sync::mpsc::channel(256);
    std::thread::Builder::new()
        .name("tfserve-transform-read".into())
        .spawn(move || {
            for (index, (input, output)) in todo.into_iter().enumerate() {
                let data = std::fs::read(&input).map_err(|e| e.to_string());
                if to_loop.blocking_send((index, input, output, data)).is_err() {
                    return;
                }
            }
        })?;
    Ok(from_reader)
}

pub(super) type Writer = (
    std::sync::mpsc::SyncSender<(PathBuf, FileResults)>,
    std::thread::JoinHandle<Result<(), TransformError>>,
);

pub(super) fn spawn_writer(split: SplitType) -> std::io::Result<Writer> {
    let (to_writer, from_loop) = std::sync::mpsc::sync_channel::<(PathBuf, FileResults)>(1024);
    let writer = std::thread::Builder::new()
        .name("tfserve-transform-write".into())
        .spawn(move || -> Result<(), TransformError> {
            for (path, results) in from_loop {
                write_output(&path, results, split)?;
            }
            Ok(())
        })?;
    Ok((to_writer, writer))
}
