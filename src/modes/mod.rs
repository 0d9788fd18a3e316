//! Mode choice: the precision and compiler a model's sessions run with when
//! its `mixed_precision` is `auto`. The version serves in FP32 at once; a
//! trial on the server's one trial thread (`background`) decides among the
//! modes this host runs fast — FP32, bfloat16 on CPUs with its
//! instructions, float16 on GPUs with tensor cores, each also with XLA where
//! batches are padded to fixed sizes (a GPU's queues; a CPU's only with
//! `allowed_batch_sizes`), since XLA compiles every new shape — and the
//! registry then switches the version to the chosen mode by loading it
//! beside the serving one, readiness up throughout.
//!
//! It guarantees that a mode is chosen only if, on real requests (`trial`),
//! its answers stay within the model's tolerance (`agreement`) and its
//! interleaved rounds show it faster than FP32 by more than `MIN_GAIN` at
//! 95 % confidence (`rounds`); of several, the highest lower bound wins;
//! anything else — a tie, no real requests to try, a failure — keeps FP32
//! and says why. A decision is kept on disk (`cache`) under a key holding
//! everything it depended on ([`Key`]), so a restart reuses it and a changed
//! key measures again.

pub mod agreement;
pub mod background;
pub mod cache;
mod decision;
mod plan;
pub mod rounds;
mod state;
#[cfg(test)]
mod tests;
pub mod trial;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub use agreement::Agreement;
use agreement::Comparison;
pub use decision::{decide, Decision, Outcome, Tried};
pub use plan::{environment_switches, Key, Plan};
pub use state::{ModeState, ModeStatus};
use trial::{Clock, Probe, Source};

use crate::runtime::precision::MixedPrecision;
use crate::runtime::{Model, SessionConfig};

/// The version of the rule a kept decision was made by; a new rule measures again.
pub const RULE_VERSION: u32 = 2;
/// How long one candidate's rounds may take before their looks are read as the last.
pub const CANDIDATE_SECONDS: f64 = 600.0;

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

/// FP32 first (the reference), then each of `precisions`; each also with
/// XLA where `xla` (batches padded to fixed sizes).
pub fn candidates(precisions: &[MixedPrecision], xla: bool) -> Vec<Mode> {
    std::iter::once(None)
        .chain(precisions.iter().copied().map(Some))
        .flat_map(|precision| {
            let with_xla = xla.then_some(Mode { precision, xla: true });
            std::iter::once(Mode { precision, xla: false }).chain(with_xla)
        })
        .collect()
}

/// What a trial asks of the server around it.
pub trait Surroundings: Clock {
    /// Waits until the server runs nothing else; `Err` abandons the trial
    /// (the version unloaded, the server stopping).
    fn wait_quiet(&self) -> Result<(), String>;
    /// Whether the server ran anything since the last `wait_quiet`.
    fn disturbed(&self) -> bool;
    /// Where the trial is, in a few words.
    fn progress(&self, _what: String) {}
}

/// Why a trial did not decide.
#[derive(Debug)]
pub struct Abandoned(pub String);

/// Runs `plan`'s trial, logs and keeps its decision.
pub fn run(plan: &Plan, around: &dyn Surroundings) -> Result<Decision, Abandoned> {
    let decision = trial(plan, around)?;
    log::info!("{}", decision.report(&plan.model, plan.version));
    // Only a trial that ran: no probes, or FP32 failing, decides nothing to keep.
    if !decision.tried.is_empty() {
        plan.keep(&decision);
    }
    Ok(decision)
}

/// Loads FP32 and each candidate, compares their answers on the accuracy
/// probes, races those within tolerance against FP32, and decides.
fn trial(plan: &Plan, around: &dyn Surroundings) -> Result<Decision, Abandoned> {
    let tolerance = plan.session.mode_tolerance;
    let float32 = |reason: String| Decision::float32(Vec::new(), tolerance, Vec::new(), reason);
    let Some(source) = &plan.source else {
        return Ok(float32(NO_PROBES.to_string()));
    };
    around.progress("loading float32".into());
    let reference = match reference(plan, source) {
        Ok(reference) => reference,
        Err(reason) => return Ok(float32(reason)),
    };
    let (fp32, probes, keys, answers) = reference;
    let others: Vec<Mode> = plan
        .key
        .candidates
        .iter()
        .filter_map(|n| mode_named(n))
        .filter(|m| *m != Mode::FLOAT32)
        .collect();
    let mut outcomes = Vec::with_capacity(others.len());
    for &mode in &others {
        around.progress(format!("{}: loading", mode.name()));
        let outcome = (|| {
            let candidate = plan
                .loader
                .load(&plan.dir, &plan.key.tags, &mode.session(&plan.session))
                .map_err(|e| e.to_string())?;
            let got = trial::answers(candidate.as_ref(), &probes.accuracy)?;
            let mut comparison = Comparison::default();
            for ((keys, expected), got) in keys.iter().zip(&answers).zip(&got) {
                comparison.add(keys, expected, got);
            }
            let agreement = comparison.verdict(&tolerance);
            if agreement.refused.is_some() {
                return Ok(Ok(Outcome {
                    agreement,
                    judged: None,
                }));
            }
            trial::warm(candidate.as_ref(), &probes.timing)?;
            let mut race = Race {
                fp32: fp32.as_ref(),
                candidate: candidate.as_ref(),
                probes: &probes.timing,
                around,
                mode,
            };
            Ok(
                rounds::race(&mut race, others.len(), CANDIDATE_SECONDS).map(|judged| Outcome {
                    agreement,
                    judged: Some(judged),
                }),
            )
        })();
        match outcome {
            Ok(Err(abandoned)) if race_abandoned(&abandoned) => return Err(Abandoned(abandoned)),
            Ok(result) => outcomes.push((mode, result)),
            Err(failed) => outcomes.push((mode, Err(failed))),
        }
    }
    let mut labels = vec![format!(
        "{} ({} rows compared)",
        source.describe(),
        probes.accuracy.iter().map(|p| p.rows).sum::<usize>()
    )];
    labels.extend(probes.timing.iter().map(Probe::label));
    Ok(decide(labels, tolerance, outcomes))
}

/// What a trial says when the model has no real requests to try.
pub const NO_PROBES: &str = "no real requests to try modes on: ship warm-up requests \
     (assets.extra/tf_serving_warmup_requests) or capture some (--capture_tfrecord_prefix, or the model's \
     logging_config), then load it again";

const ABANDONED: &str = "abandoned: ";

fn race_abandoned(error: &str) -> bool {
    error.starts_with(ABANDONED)
}

type Reference = (
    Arc<dyn Model>,
    trial::Probes,
    Vec<Vec<String>>,
    Vec<Vec<crate::tensor::Tensor>>,
);

/// FP32's session, the probes, their output names and FP32's answers.
fn reference(plan: &Plan, source: &Source) -> Result<Reference, String> {
    let session = Mode::FLOAT32.session(&plan.session);
    let model = plan
        .loader
        .load(&plan.dir, &plan.key.tags, &session)
        .map_err(|e| format!("float32 failed to load: {e}"))?;
    let probes = trial::probes(source, &plan.model, model.as_ref(), &plan.key.sizes)?;
    let answers = trial::answers(model.as_ref(), &probes.accuracy).map_err(|e| format!("float32 fails on {e}"))?;
    trial::warm(model.as_ref(), &probes.timing).map_err(|e| format!("float32 fails on {e}"))?;
    let keys = probes
        .accuracy
        .iter()
        .map(|probe| {
            model
                .signature(&probe.signature)
                .map(|spec| spec.outputs.iter().map(|o| o.key.clone()).collect())
                .unwrap_or_default()
        })
        .collect();
    Ok((model, probes, keys, answers))
}

fn mode_named(name: &str) -> Option<Mode> {
    let (precision, xla) = match name.strip_suffix("+xla") {
        Some(rest) => (rest, true),
        None => (name, false),
    };
    let precision = match precision {
        "float32" => None,
        "bfloat16" => Some(MixedPrecision::Bfloat16),
        "float16" => Some(MixedPrecision::Float16),
        _ => return None,
    };
    Some(Mode { precision, xla })
}

/// One candidate's rounds against FP32 on the timing probes.
struct Race<'a> {
    fp32: &'a dyn Model,
    candidate: &'a dyn Model,
    probes: &'a [Probe],
    around: &'a dyn Surroundings,
    mode: Mode,
}

impl rounds::Rounds for Race<'_> {
    fn pass(&mut self, side: rounds::Side) -> Result<f64, String> {
        let model = match side {
            rounds::Side::Float32 => self.fp32,
            rounds::Side::Candidate => self.candidate,
        };
        trial::pass(model, self.probes, self.around)
    }

    fn wait_quiet(&mut self) -> Result<(), String> {
        self.around.wait_quiet().map_err(|e| format!("{ABANDONED}{e}"))
    }

    fn disturbed(&mut self) -> bool {
        self.around.disturbed()
    }

    fn now(&self) -> f64 {
        self.around.seconds()
    }

    fn progress(&mut self, rounds: usize) {
        let last = rounds::LOOKS[rounds::LOOKS.len() - 1];
        self.around
            .progress(format!("{}: round {rounds} of at most {last}", self.mode.name()));
    }
}
