//! Mode choice: the precision and compiler a model's sessions run with when
//! its `mixed_precision` is `auto`. It decides among the modes this host runs
//! fast (FP32 and, where the hardware has them, bfloat16 or float16, each
//! without and with XLA) from a trial at load: every mode runs the same
//! probes (the model's warm-up requests, else seeded inputs at each batch
//! size its queues emit), its answers are compared with FP32's and its runs
//! are timed. It guarantees that a mode whose answers leave the model's
//! tolerance (relative error over an output's scale, top-1 agreement on
//! class scores, a non-finite value where FP32's is finite) or that fails is
//! never chosen; that a mode replaces FP32 only if it is faster on every
//! probe and at least `MIN_GAIN` faster over all of them (the geometric mean),
//! so that noise cannot choose a slower mode; and that without a probe FP32
//! answers, FP32 stays and says why. A decision is kept on disk (`cache`),
//! keyed by the SavedModel's bytes and what the measurement depended on.

mod agreement;
pub mod cache;
#[cfg(test)]
mod tests;
pub mod trial;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use agreement::Agreement;
use agreement::Comparison;
use trial::{Clock, Probe};

use crate::runtime::precision::{MixedPrecision, Tolerance};
use crate::runtime::{Loader, Model, SessionConfig};
use crate::tensor::Tensor;

/// How much faster than FP32 a mode must be, over all probes, to replace it.
pub const MIN_GAIN: f64 = 0.05;

/// A session's precision and whether XLA compiles its graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mode {
    pub precision: Option<MixedPrecision>,
    pub xla: bool,
}

impl Mode {
    pub const FLOAT32: Mode = Mode {
        precision: None,
        xla: false,
    };

    pub fn name(&self) -> String {
        let precision = self.precision.map_or("float32", MixedPrecision::name);
        format!("{precision}{}", if self.xla { "+xla" } else { "" })
    }

    /// `base` running in this mode.
    pub fn session(&self, base: &SessionConfig) -> SessionConfig {
        SessionConfig {
            mixed_precision: self.precision,
            xla_jit: self.xla,
            choose_mode: false,
            ..base.clone()
        }
    }
}

/// FP32 first (the reference), then each of `precisions`; each without and with XLA.
pub fn candidates(precisions: &[MixedPrecision]) -> Vec<Mode> {
    std::iter::once(None)
        .chain(precisions.iter().copied().map(Some))
        .flat_map(|precision| [false, true].map(|xla| Mode { precision, xla }))
        .collect()
}

/// One mode's timings and answers.
pub struct Measured {
    /// Median seconds per run of each probe.
    pub seconds: Vec<f64>,
    pub agreement: Agreement,
}

/// What the trial found for one mode.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tried {
    pub mode: Mode,
    /// Median seconds per run of each probe; empty when the mode failed.
    pub seconds: Vec<f64>,
    /// FP32's time over this mode's, as a geometric mean over the probes.
    pub speedup: Option<f64>,
    pub agreement: Option<Agreement>,
    pub verdict: String,
}

/// The mode a model runs with, and why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    pub chosen: Mode,
    /// The chosen mode's speedup over FP32 (1 for FP32).
    pub speedup: f64,
    /// What each mode ran: `signature × rows`.
    pub probes: Vec<String>,
    pub tolerance: Tolerance,
    pub tried: Vec<Tried>,
    pub reason: String,
    /// The file this decision was read from, when a trial was not run.
    #[serde(skip)]
    pub reused: Option<PathBuf>,
}

impl Decision {
    fn float32(probes: Vec<String>, tolerance: Tolerance, tried: Vec<Tried>, reason: String) -> Decision {
        Decision {
            chosen: Mode::FLOAT32,
            speedup: 1.0,
            probes,
            tolerance,
            tried,
            reason,
            reused: None,
        }
    }

    /// Shows the loaded version's mode in `tfserve_model_mode_speedup`.
    pub fn count(&self, model: &str, version: i64) {
        crate::metrics::METRICS
            .model_mode
            .with_label_values(&[model, &version.to_string(), &self.chosen.name()])
            .set(self.speedup);
    }

    /// Takes an unloaded version's series out of `tfserve_model_mode_speedup`.
    pub fn uncount(&self, model: &str, version: i64) {
        let labels = [model, &version.to_string(), &self.chosen.name()];
        let _ = crate::metrics::METRICS.model_mode.remove_label_values(&labels);
    }

    /// The log block: what was tried, measured and chosen.
    pub fn report(&self, model: &str, version: i64) -> String {
        let mut out = match &self.reused {
            Some(path) => format!(
                "model {model} version {version}: mode decision reused from {}",
                path.display()
            ),
            None => format!(
                "model {model} version {version}: mode trial on {}",
                self.probes.join(", ")
            ),
        };
        let tolerance = &self.tolerance;
        let _ = write!(
            out,
            "\n  tolerance: relative error ≤ {}, top-1 agreement ≥ {}",
            tolerance.max_relative_error, tolerance.min_top1_agreement
        );
        for tried in &self.tried {
            let speed = tried.speedup.map_or("    -".to_string(), |s| format!("{s:.2}×"));
            let error = tried.agreement.as_ref().map_or(String::new(), |a| {
                let top1 = a.top1.map_or(String::new(), |t| format!(", top-1 {:.1}%", t * 100.0));
                format!("error {:.4}{top1}; ", a.relative_error)
            });
            let _ = write!(
                out,
                "\n  {:<13} {speed:>7}  {error}{}",
                tried.mode.name(),
                tried.verdict
            );
        }
        let _ = write!(out, "\n  runs with {}: {}", self.chosen.name(), self.reason);
        out
    }
}

/// Chooses among `results` (one per mode tried, FP32 among them) by the
/// module's rules. Pure: the trial's measurements in, the decision out.
// Kept whole: one verdict per mode, each rule in the order the module states it.
pub fn decide(probes: Vec<String>, tolerance: Tolerance, results: Vec<(Mode, Result<Measured, String>)>) -> Decision {
    let reference: Option<Vec<f64>> = results
        .iter()
        .find(|(mode, _)| *mode == Mode::FLOAT32)
        .and_then(|(_, result)| result.as_ref().ok())
        .map(|measured| measured.seconds.clone());
    let mut tried = Vec::with_capacity(results.len());
    let mut best: Option<(usize, f64)> = None;
    for (mode, result) in results {
        let measured = match result {
            Err(e) => {
                tried.push(Tried {
                    mode,
                    seconds: Vec::new(),
                    speedup: None,
                    agreement: None,
                    verdict: format!("failed: {e}"),
                });
                continue;
            }
            Ok(measured) => measured,
        };
        let ratios: Vec<f64> = reference
            .iter()
            .flat_map(|base| base.iter().zip(&measured.seconds).map(|(b, s)| b / s.max(1e-12)))
            .collect();
        let speedup =
            (!ratios.is_empty()).then(|| (ratios.iter().map(|r| r.ln()).sum::<f64>() / ratios.len() as f64).exp());
        let slowest = ratios.iter().copied().enumerate().min_by(|a, b| a.1.total_cmp(&b.1));
        let verdict = if mode == Mode::FLOAT32 {
            "the reference".to_string()
        } else if let Some(why) = &measured.agreement.refused {
            format!("refused: {why}")
        } else if let Some((probe, ratio)) = slowest.filter(|&(_, ratio)| ratio < 1.0) {
            format!("slower than float32 on {} ({ratio:.2}×)", probes[probe])
        } else if speedup.is_none_or(|s| s < 1.0 + MIN_GAIN) {
            format!("less than {:.0}% faster than float32", MIN_GAIN * 100.0)
        } else {
            let gain = speedup.unwrap_or(1.0);
            if best.is_none_or(|(_, fastest)| gain > fastest) {
                best = Some((tried.len(), gain));
            }
            "within tolerance and faster".to_string()
        };
        tried.push(Tried {
            mode,
            seconds: measured.seconds,
            speedup,
            agreement: Some(measured.agreement),
            verdict,
        });
    }
    if reference.is_none() {
        return Decision::float32(probes, tolerance, tried, "float32 itself failed the trial".into());
    }
    let Some((index, gain)) = best else {
        let reason = "no other mode is both within tolerance and faster".to_string();
        return Decision::float32(probes, tolerance, tried, reason);
    };
    tried[index].verdict = "chosen: the fastest within tolerance".into();
    Decision {
        chosen: tried[index].mode,
        speedup: gain,
        probes,
        tolerance,
        reason: format!("{gain:.2}× float32's speed over the probes"),
        tried,
        reused: None,
    }
}

/// What a trial needs beside the model's name.
pub struct Setup<'a> {
    pub loader: &'a dyn Loader,
    pub dir: &'a Path,
    pub tags: &'a [String],
    /// The model's session options; the trial sets precision and XLA.
    pub session: &'a SessionConfig,
    /// The batch sizes its queues emit.
    pub sizes: &'a [usize],
    pub candidates: Vec<Mode>,
    /// Where decisions are kept (`None`: not kept).
    pub cache_dir: Option<PathBuf>,
    /// The runtime's build and the device, which the decision holds for.
    pub tensorflow: String,
    pub device: String,
}

/// The mode a version runs with: a kept decision for the same SavedModel
/// and setting, else a trial's, kept for the next start.
pub fn choose(model: &str, version: i64, setup: &Setup, clock: &dyn Clock) -> Decision {
    let tolerance = setup.session.mode_tolerance;
    let kept = setup.cache_dir.as_ref().and_then(|dir| {
        let digest = cache::saved_model_digest(setup.dir)
            .map_err(|e| log::warn!("model {model} version {version}: mode decisions not kept: {e}"))
            .ok()?;
        Some((dir.join("modes"), digest))
    });
    let setting = format!(
        "1|{}|{}|{}|{}|{:?}|{}|{:?}",
        setup.tensorflow,
        setup.device,
        setup.session.intra_op_parallelism,
        setup.session.inter_op_parallelism,
        setup.sizes,
        setup.candidates.iter().map(Mode::name).collect::<Vec<_>>().join(","),
        tolerance
    );
    let path = kept.as_ref().map(|(dir, digest)| cache::path(dir, digest, &setting));
    if let (Some(path), Some((_, digest))) = (&path, &kept) {
        match cache::read_for(path, digest, &setting) {
            Ok(Some(entry)) => {
                let mut decision = entry.decision;
                decision.reused = Some(path.clone());
                log::info!("{}", decision.report(model, version));
                return decision;
            }
            Ok(None) => {}
            Err(e) => log::warn!("model {model} version {version}: kept mode decision not used, measuring again: {e}"),
        }
    }
    let decision = trial(setup, clock);
    log::info!("{}", decision.report(model, version));
    if let (Some(path), Some((_, digest))) = (path, kept) {
        let failed_itself = decision.tried.iter().all(|t| t.seconds.is_empty());
        let entry = cache::CachedDecision {
            saved_model: digest,
            setting: setting.clone(),
            tensorflow: setup.tensorflow.clone(),
            device: setup.device.clone(),
            decision: decision.clone(),
        };
        if !failed_itself {
            if let Err(e) = cache::write(&path, &entry) {
                log::warn!("model {model} version {version}: mode decision not kept: {e}");
            }
        }
    }
    decision
}

/// Runs every candidate on the probes FP32 answers, then decides.
fn trial(setup: &Setup, clock: &dyn Clock) -> Decision {
    let tolerance = setup.session.mode_tolerance;
    let reference = match reference_run(setup, clock) {
        Ok(reference) => reference,
        Err(reason) => return Decision::float32(Vec::new(), tolerance, Vec::new(), reason),
    };
    let (probes, keys, answers, fp32) = reference;
    let labels: Vec<String> = probes.iter().map(Probe::label).collect();
    let mut results = vec![(Mode::FLOAT32, Ok(fp32))];
    for &mode in setup.candidates.iter().filter(|&&mode| mode != Mode::FLOAT32) {
        let session = mode.session(setup.session);
        let outcome = setup
            .loader
            .load(setup.dir, setup.tags, &session)
            .map_err(|e| e.to_string())
            .and_then(|candidate| trial::measure(candidate.as_ref(), &probes, clock))
            .map(|runs| {
                let mut comparison = Comparison::default();
                for ((keys, expected), got) in keys.iter().zip(&answers).zip(&runs.answers) {
                    comparison.add(keys, expected, got);
                }
                Measured {
                    seconds: runs.seconds,
                    agreement: comparison.verdict(&tolerance),
                }
            });
        results.push((mode, outcome));
    }
    decide(labels, tolerance, results)
}

type Reference = (Vec<Probe>, Vec<Vec<String>>, Vec<Vec<Tensor>>, Measured);

/// FP32's session, the probes it answers, their output names, its answers and times.
fn reference_run(setup: &Setup, clock: &dyn Clock) -> Result<Reference, String> {
    let session = Mode::FLOAT32.session(setup.session);
    let model = setup
        .loader
        .load(setup.dir, setup.tags, &session)
        .map_err(|e| format!("float32 failed to load: {e}"))?;
    let probes: Vec<Probe> = trial::probes(setup.dir, model.as_ref(), setup.sizes)?
        .into_iter()
        .filter(|probe| model.run(&probe.signature, probe.inputs.clone()).is_ok())
        .collect();
    if probes.is_empty() {
        return Err(
            "no input the model answers in float32 to try modes on: ship warm-up requests \
                    (assets.extra/tf_serving_warmup_requests)"
                .into(),
        );
    }
    let keys = probes
        .iter()
        .map(|probe| output_keys(model.as_ref(), &probe.signature))
        .collect();
    let runs = trial::measure(model.as_ref(), &probes, clock)?;
    let measured = Measured {
        seconds: runs.seconds,
        agreement: Comparison::default().verdict(&setup.session.mode_tolerance),
    };
    Ok((probes, keys, runs.answers, measured))
}

fn output_keys(model: &dyn Model, signature: &str) -> Vec<String> {
    model
        .signature(signature)
        .map(|spec| spec.outputs.iter().map(|o| o.key.clone()).collect())
        .unwrap_or_default()
}
