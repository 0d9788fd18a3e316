//! One mode's trial: the inputs every mode runs (the model's shipped warm-up
//! requests, else seeded inputs at each batch size), and a mode's session
//! running them: one untimed run per probe (compiles and caches, as a warm-up does)
//! whose answers are compared, then timed runs of each probe, read off a
//! clock that tests simulate.

use std::path::Path;
use std::time::Instant;

use crate::runtime::Model;
use crate::signature::{CLASSIFY_METHOD, REGRESS_METHOD};
use crate::tensor::{Tensor, TensorData};
use crate::warmup::{self, WARMUP_FILE};

/// Timed runs of a probe, at most; fewer once `PROBE_SECONDS` have passed
/// (a large model at its largest batch), never fewer than `MIN_TIMED_RUNS`.
pub const TIMED_RUNS: usize = 5;
pub const MIN_TIMED_RUNS: usize = 2;
pub const PROBE_SECONDS: f64 = 1.0;
/// Shipped warm-up records tried, at most.
pub const MAX_RECORDED_PROBES: usize = 16;

/// Seconds since some start: the wall clock at load, a simulated one in tests.
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
}

/// What the trial runs: the shipped warm-up requests when the version has
/// them, else each signature at each of `sizes` rows, its float inputs
/// filled from a fixed seed (zeros would let a broken mode agree with FP32).
pub fn probes(dir: &Path, model: &dyn Model, sizes: &[usize]) -> Result<Vec<Probe>, String> {
    let file = dir.join(WARMUP_FILE);
    if file.exists() {
        let recorded = warmup::recorded_runs(&file, model).map_err(|e| e.to_string())?;
        return Ok(recorded
            .into_iter()
            .take(MAX_RECORDED_PROBES)
            .map(|(signature, inputs)| Probe {
                rows: inputs.first().and_then(Tensor::batch_size).unwrap_or(1),
                signature,
                inputs,
            })
            .collect());
    }
    let mut found = Vec::new();
    for signature in model.signatures() {
        if [CLASSIFY_METHOD, REGRESS_METHOD].contains(&signature.method_name.as_str()) {
            continue;
        }
        for &rows in sizes {
            let Some(mut inputs) = warmup::synthetic_inputs(signature, rows) else {
                break;
            };
            inputs
                .iter_mut()
                .enumerate()
                .for_each(|(i, t)| fill(t, (rows * 31 + i) as u64));
            found.push(Probe {
                signature: signature.name.clone(),
                rows,
                inputs,
            });
        }
    }
    Ok(found)
}

/// Fills float inputs with values in [0, 1) from a linear congruential
/// sequence; other dtypes keep their zeros.
fn fill(tensor: &mut Tensor, seed: u64) {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let mut next = move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 40) as f64 / (1u64 << 24) as f64
    };
    match &mut tensor.data {
        TensorData::Float(v) => v.iter_mut().for_each(|x| *x = next() as f32),
        TensorData::Double(v) => v.iter_mut().for_each(|x| *x = next()),
        TensorData::Half(v) => v.iter_mut().for_each(|x| *x = half::f16::from_f64(next())),
        _ => {}
    }
}

/// A mode's run of every probe: its answers (from the untimed run) and the
/// median seconds of its timed runs, per probe.
pub struct Runs {
    pub answers: Vec<Vec<Tensor>>,
    pub seconds: Vec<f64>,
}

/// Runs every probe on `model`: once untimed (its answers), then timed.
/// An error names the probe that failed.
pub fn measure(model: &dyn Model, probes: &[Probe], clock: &dyn Clock) -> Result<Runs, String> {
    let mut runs = Runs {
        answers: Vec::with_capacity(probes.len()),
        seconds: Vec::with_capacity(probes.len()),
    };
    for probe in probes {
        let failed = |e: crate::runtime::RuntimeError| format!("{}: {e}", probe.label());
        runs.answers
            .push(model.run(&probe.signature, probe.inputs.clone()).map_err(failed)?);
        let mut times = Vec::with_capacity(TIMED_RUNS);
        let began = clock.seconds();
        while times.len() < MIN_TIMED_RUNS || (times.len() < TIMED_RUNS && clock.seconds() - began < PROBE_SECONDS) {
            let inputs = probe.inputs.clone();
            let start = clock.seconds();
            model.run(&probe.signature, inputs).map_err(failed)?;
            times.push(clock.seconds() - start);
        }
        times.sort_by(f64::total_cmp);
        runs.seconds.push(times[times.len() / 2]);
    }
    Ok(runs)
}
