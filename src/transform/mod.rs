//! `tfserve transform`: SageMaker batch transform without the cloud. Every
//! record goes through the same conversion, batcher and encoding as
//! `/invocations`, in process; each input file gets a `<name>.out`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use futures_util::StreamExt;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::dialects::sagemaker::Invocation;
use files::{files, io, records, spawn_reader, spawn_writer};

mod files;
use crate::error::ApiError;
use crate::service::{Service, Trace};
pub use crate::settings::{SplitType, TransformArgs};

#[derive(Debug, thiserror::Error)]
pub enum TransformError {
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("--max_concurrent_transforms must be at least 1")]
    Concurrency,
    #[error("the output writer thread failed")]
    Writer,
}

#[derive(Debug, Default, PartialEq)]
pub struct Summary {
    pub records_ok: usize,
    pub records_failed: usize,
    pub files_written: usize,
    pub files_skipped: usize,
}

/// One file's records as they complete.
struct Pending {
    output: PathBuf,
    results: FileResults,
    left: usize,
}

/// One input file as read: its position in the job, where its output goes,
/// and its bytes (or why they could not be read).
type FileRead = (usize, PathBuf, PathBuf, Result<Vec<u8>, String>);
type FileResults = Vec<Option<Result<Vec<u8>, String>>>;

/// One record of one file, and later its answer.
struct Record<T> {
    file: usize,
    input: PathBuf,
    output: PathBuf,
    index: usize,
    count: usize,
    data: T,
}

pub async fn run(service: &Service, args: &TransformArgs) -> Result<Summary, TransformError> {
    if args.max_concurrent_transforms == 0 {
        return Err(TransformError::Concurrency);
    }
    std::fs::create_dir_all(&args.output).map_err(io(&args.output))?;
    let all = files(&args.input, &args.output)?;
    let (done, todo): (Vec<_>, Vec<_>) = all.into_iter().partition(|(_, out)| out.exists());
    let mut tally = Tally {
        summary: Summary {
            files_skipped: done.len(),
            ..Summary::default()
        },
        pending: HashMap::new(),
        failures: Vec::new(),
        progress: progress_bar(todo.len()),
        started: Instant::now(),
    };
    let invocation = Invocation::new(
        None,
        args.content_type.clone(),
        args.custom_attributes.clone().unwrap_or_default(),
        args.accept.clone(),
    );
    // File reads and writes run on their own threads, so that the loop feeding
    // the batcher never waits on the file system.
    let from_reader = spawn_reader(todo).map_err(io(&args.input))?;
    let (to_writer, writer) = spawn_writer(args.split_type).map_err(io(&args.output))?;
    let files = futures_util::stream::unfold(from_reader, |mut receiver| async move {
        receiver.recv().await.map(|item| (item, receiver))
    });
    let work = files
        .flat_map(|file| futures_util::stream::iter(split_file(file, args.split_type)))
        .map(|record| answer(service, &invocation, args, record))
        .buffer_unordered(args.max_concurrent_transforms);
    futures_util::pin_mut!(work);
    while let Some(record) = work.next().await {
        if let Some(file) = tally.add(record) {
            if to_writer.send(file).is_err() {
                break;
            }
        }
    }
    drop(to_writer);
    writer.join().map_err(|_| TransformError::Writer)??;
    tally.progress.finish_and_clear();
    tally.finish(&args.output)
}

fn progress_bar(files: usize) -> ProgressBar {
    let progress = ProgressBar::with_draw_target(Some(files as u64), ProgressDrawTarget::stderr());
    progress.set_style(
        ProgressStyle::with_template("{spinner} {bar:30} {pos}/{len} files  {per_sec}  ETA {eta}  {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    progress
}

/// A file's records (or its read error, as its one failed record).
fn split_file((file, input, output, data): FileRead, split: SplitType) -> Vec<Record<Result<Vec<u8>, String>>> {
    let data = match data {
        Ok(data) => records(data, split),
        Err(error) => {
            return vec![Record {
                file,
                input,
                output,
                index: 0,
                count: 1,
                data: Err(error),
            }]
        }
    };
    let count = data.len();
    data.into_iter()
        .enumerate()
        .map(|(index, record)| Record {
            file,
            input: input.clone(),
            output: output.clone(),
            index,
            count,
            data: Ok(record),
        })
        .collect()
}

/// Runs one record through `/invocations`' path.
async fn answer(
    service: &Service,
    invocation: &Invocation,
    args: &TransformArgs,
    record: Record<Result<Vec<u8>, String>>,
) -> Record<Result<Vec<u8>, String>> {
    let limit = (args.max_payload_in_mb * 1024.0 * 1024.0) as usize;
    let result = match &record.data {
        Err(error) => Err(error.clone()),
        Ok(data) if data.len() > limit => Err(format!(
            "record of {} bytes exceeds max_payload_in_mb ({} MB = {limit} bytes)",
            data.len(),
            args.max_payload_in_mb
        )),
        Ok(data) => invocation
            .respond(service, data.as_slice(), &mut Trace::default())
            .await
            .map(|answer| answer.body)
            .map_err(|e: ApiError| e.to_string()),
    };
    Record { data: result, ..record }
}

/// Counts answers, collects each file's until it is complete, and reports.
struct Tally {
    summary: Summary,
    pending: HashMap<usize, Pending>,
    failures: Vec<serde_json::Value>,
    progress: ProgressBar,
    started: Instant,
}

impl Tally {
    /// Records an answer; returns a file's output once all its records are in.
    fn add(&mut self, record: Record<Result<Vec<u8>, String>>) -> Option<(PathBuf, FileResults)> {
        match &record.data {
            Ok(_) => self.summary.records_ok += 1,
            Err(error) => {
                self.summary.records_failed += 1;
                self.failures.push(serde_json::json!({
                    "file": record.input.display().to_string(), "record": record.index, "error": error
                }));
            }
        }
        let file = self.pending.entry(record.file).or_insert_with(|| Pending {
            output: record.output,
            results: vec![None; record.count],
            left: record.count,
        });
        file.results[record.index] = Some(record.data);
        file.left -= 1;
        if file.left > 0 {
            return None;
        }
        let file = self.pending.remove(&record.file)?;
        self.summary.files_written += 1;
        self.progress.inc(1);
        let done = self.summary.records_ok + self.summary.records_failed;
        let rate = done as f64 / self.started.elapsed().as_secs_f64();
        self.progress
            .set_message(format!("{rate:.1} records/s, {} failed", self.summary.records_failed));
        Some((file.output, file.results))
    }

    /// Appends the failures to `_failures.jsonl` (so a resumed run keeps those
    /// of the files it skipped) and prints the summary.
    fn finish(self, output: &Path) -> Result<Summary, TransformError> {
        let report = output.join("_failures.jsonl");
        if !self.failures.is_empty() {
            use std::io::Write;
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&report)
                .map_err(io(&report))?;
            for failure in &self.failures {
                writeln!(file, "{failure}").map_err(io(&report))?;
            }
        }
        let summary = self.summary;
        let elapsed = self.started.elapsed().as_secs_f64();
        println!(
            "transform: {} records ok, {} failed; {} files written, {} skipped (already done); {:.1} records/s{}",
            summary.records_ok,
            summary.records_failed,
            summary.files_written,
            summary.files_skipped,
            (summary.records_ok + summary.records_failed) as f64 / elapsed.max(1e-9),
            if self.failures.is_empty() {
                String::new()
            } else {
                format!("; failures listed in {}", report.display())
            }
        );
        Ok(summary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_lines_and_skips_blank_ones() {
        let split = records(b"1.0\r\n\n2.0\n  \n3.0".to_vec(), SplitType::Line);
        assert_eq!(split, vec![b"1.0".to_vec(), b"2.0".to_vec(), b"3.0".to_vec()]);
        assert_eq!(records(b"a\nb".to_vec(), SplitType::None).len(), 1);
    }

    #[test]
    fn outputs_mirror_the_input_tree() {
        let dir = std::env::temp_dir().join(format!("tfserve-transform-files-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("in/sub")).unwrap();
        for file in ["in/b.csv", "in/sub/a.csv", "in/.hidden"] {
            std::fs::write(dir.join(file), "1").unwrap();
        }
        let found = files(&dir.join("in"), &dir.join("out")).unwrap();
        let outputs: Vec<PathBuf> = found
            .into_iter()
            .map(|(_, out)| out.strip_prefix(&dir).unwrap().to_path_buf())
            .collect();
        assert_eq!(
            outputs,
            vec![PathBuf::from("out/b.csv.out"), PathBuf::from("out/sub/a.csv.out")]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
