//! What a mode trial runs: real requests only. Its probes are the version's
//! shipped warm-up requests, else the model's captured TFRecords (the
//! newest files under its capture prefix), else there are none and `auto`
//! does not apply to the model. Every recorded request is an accuracy probe
//! (up to [`ACCURACY_ROWS`] rows), answered once per mode; the timing probes
//! are the same rows put together at each batch size the model's queues
//! emit, which is what a round runs. Each mode's session runs every timing
//! probe twice before it is timed: TensorFlow specialises a shape on its
//! first run and XLA compiles it on its second.

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::batcher::assemble::{concat, slice_rows};
use crate::runtime::Model;
use crate::tensor::Tensor;
use crate::warmup::records::{self, WarmupRequest};
use crate::warmup::{self, WARMUP_FILE};

/// Rows compared between modes, at most (and read from captures).
pub const ACCURACY_ROWS: usize = 1024;
/// Captured files read, newest first, at most.
pub const CAPTURED_FILES: usize = 16;
/// Recorded requests run as they are when they cannot be put together, at most.
const UNBATCHED_TIMING_PROBES: usize = 16;

/// Seconds since some start: the wall clock, a simulated one in tests.
pub trait Clock {
    fn seconds(&self) -> f64;
}

pub struct WallClock(Instant);

impl WallClock {
    pub fn new() -> WallClock {
        WallClock(Instant::now())
    }
}

impl Default for WallClock {
    fn default() -> WallClock {
        WallClock::new()
    }
}

impl Clock for WallClock {
    fn seconds(&self) -> f64 {
        self.0.elapsed().as_secs_f64()
    }
}

/// Where a model's probes come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// The version's `assets.extra/tf_serving_warmup_requests`.
    WarmUp(PathBuf),
    /// `PREFIX-*.tfrecord` files of the model's captured requests.
    Captured(String),
}

impl Source {
    /// The version's warm-up file if it has one, else the first capture
    /// prefix holding a file; `None`: nothing real to try modes on.
    pub fn find(dir: &Path, capture_prefixes: &[String]) -> Option<Source> {
        let file = dir.join(WARMUP_FILE);
        if file.is_file() {
            return Some(Source::WarmUp(file));
        }
        capture_prefixes
            .iter()
            .find(|prefix| !records::capture_files(prefix).is_empty())
            .map(|prefix| Source::Captured(prefix.clone()))
    }

    /// What a kept decision's key holds of it: the warm-up file's digest (the
    /// probes themselves), or the capture prefix (a sample of the model's
    /// traffic, whose next sample is the same traffic).
    pub fn key(&self) -> String {
        match self {
            Source::WarmUp(file) => match std::fs::read(file) {
                Ok(bytes) => format!(
                    "warm-up {}",
                    super::cache::hex(ring::digest::digest(&ring::digest::SHA256, &bytes).as_ref())
                ),
                Err(e) => format!("warm-up unreadable: {e}"),
            },
            Source::Captured(prefix) => format!("captured {prefix}"),
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Source::WarmUp(_) => "its warm-up requests".to_string(),
            Source::Captured(prefix) => format!("its requests captured under {prefix}"),
        }
    }

    /// The recorded requests of `model` this source holds.
    fn requests(&self, model: &str) -> Result<Vec<WarmupRequest>, String> {
        match self {
            Source::WarmUp(file) => {
                let data = std::fs::read(file).map_err(|e| format!("{}: {e}", file.display()))?;
                records::parse(&data).map_err(|e| format!("{}: {e}", file.display()))
            }
            Source::Captured(prefix) => {
                let mut found = Vec::new();
                let mut rows = 0;
                for file in records::capture_files(prefix).into_iter().take(CAPTURED_FILES) {
                    // A file still being written may end in half a record.
                    let Ok(parsed) = std::fs::read(&file)
                        .map_err(|e| e.to_string())
                        .and_then(|d| records::parse(&d))
                    else {
                        continue;
                    };
                    for request in parsed.into_iter().filter(|r| r.model == model) {
                        rows += request.inputs.values().next().and_then(Tensor::batch_size).unwrap_or(1);
                        found.push(request);
                    }
                    if rows >= ACCURACY_ROWS {
                        break;
                    }
                }
                Ok(found)
            }
        }
    }
}

/// One signature's inputs, run in every mode.
#[derive(Clone, Debug)]
pub struct Probe {
    pub signature: String,
    pub rows: usize,
    pub inputs: Vec<Tensor>,
}

impl Probe {
    pub fn label(&self) -> String {
        format!("{} × {}", self.signature, self.rows)
    }

    fn new(signature: String, inputs: Vec<Tensor>) -> Probe {
        Probe {
            rows: inputs.first().and_then(Tensor::batch_size).unwrap_or(1),
            signature,
            inputs,
        }
    }
}

/// What every mode runs: the recorded requests (compared), and the same rows
/// at the queues' batch sizes (timed).
pub struct Probes {
    pub accuracy: Vec<Probe>,
    pub timing: Vec<Probe>,
}

/// The probes `source` gives `model` (named `name`) at the batch sizes `sizes`.
pub fn probes(source: &Source, name: &str, model: &dyn Model, sizes: &[usize]) -> Result<Probes, String> {
    let requests = source.requests(name)?;
    if requests.is_empty() {
        return Err(format!("{} hold no request for model {name}", source.describe()));
    }
    let mut accuracy = Vec::new();
    let mut rows = 0;
    for (signature, inputs) in warmup::runs_of(requests, model)? {
        let probe = Probe::new(signature, inputs);
        rows += probe.rows;
        accuracy.push(probe);
        if rows >= ACCURACY_ROWS {
            break;
        }
    }
    let mut timing = Vec::new();
    let mut signatures: Vec<&str> = accuracy.iter().map(|p| p.signature.as_str()).collect();
    signatures.dedup();
    signatures.sort_unstable();
    signatures.dedup();
    for signature in signatures {
        let runs: Vec<&Probe> = accuracy.iter().filter(|p| p.signature == signature).collect();
        let batched: Option<Vec<Probe>> = sizes
            .iter()
            .map(|&size| together(&runs, size).map(|inputs| Probe::new(signature.to_string(), inputs)))
            .collect();
        match batched {
            Some(batched) if !batched.is_empty() => timing.extend(batched),
            _ => timing.extend(runs.into_iter().take(UNBATCHED_TIMING_PROBES).cloned()),
        }
    }
    Ok(Probes { accuracy, timing })
}

/// `rows` rows of `runs` put together, cycling through them: `None` where a
/// run has no batch dimension or its shapes cannot join the first's.
fn together(runs: &[&Probe], rows: usize) -> Option<Vec<Tensor>> {
    let first = runs.first()?;
    let inputs = first.inputs.len();
    let mut picked: Vec<&Probe> = Vec::new();
    let mut have = 0;
    for run in runs.iter().cycle().take(runs.len() * rows) {
        if have >= rows {
            break;
        }
        if run.inputs.iter().any(|t| t.batch_size() != Some(run.rows)) || run.rows == 0 {
            return None;
        }
        picked.push(run);
        have += run.rows;
    }
    (0..inputs)
        .map(|i| {
            let parts: Vec<Tensor> = picked.iter().map(|run| run.inputs[i].clone()).collect();
            concat(&parts).ok().map(|joined| slice_rows(&joined, 0, rows))
        })
        .collect()
}

/// `model`'s answers to every probe; an error names the probe.
pub fn answers(model: &dyn Model, probes: &[Probe]) -> Result<Vec<Vec<Tensor>>, String> {
    probes
        .iter()
        .map(|probe| {
            model
                .run(&probe.signature, probe.inputs.clone())
                .map_err(|e| format!("{}: {e}", probe.label()))
        })
        .collect()
}

/// Runs every probe twice, untimed: each shape specialised and compiled.
pub fn warm(model: &dyn Model, probes: &[Probe]) -> Result<(), String> {
    for _ in 0..2 {
        answers(model, probes)?;
    }
    Ok(())
}

/// Seconds one pass over every probe takes on `model`.
pub fn pass(model: &dyn Model, probes: &[Probe], clock: &dyn Clock) -> Result<f64, String> {
    let began = clock.seconds();
    for probe in probes {
        model
            .run(&probe.signature, probe.inputs.clone())
            .map_err(|e| format!("{}: {e}", probe.label()))?;
    }
    Ok(clock.seconds() - began)
}
