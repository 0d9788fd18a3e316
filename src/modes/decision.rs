//! A trial's outcome: what each mode showed (its answers against FP32's,
//! its rounds against FP32's), the mode chosen by the module's rule, and how
//! both are told: the log block, `tfserve inspect` and `/metrics`.

use std::fmt::Write as _;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::agreement::Agreement;
use super::rounds::{Judged, Speed, MIN_GAIN};
use super::Mode;
use crate::runtime::precision::Tolerance;

/// What the trial found for one mode.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tried {
    pub mode: Mode,
    /// FP32's time over this mode's, over its rounds (`None`: not timed).
    pub speedup: Option<f64>,
    /// The rounds' verdict and the speed-up's bounds.
    pub judged: Option<Judged>,
    pub agreement: Option<Agreement>,
    pub verdict: String,
}

/// The mode a model runs with, and why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    pub chosen: Mode,
    /// The chosen mode's speed-up over FP32 (1 for FP32).
    pub speedup: f64,
    /// Where the probes came from and what each round ran: `signature × rows`.
    pub probes: Vec<String>,
    pub tolerance: Tolerance,
    pub tried: Vec<Tried>,
    pub reason: String,
    /// The file this decision was read from, when a trial was not run.
    #[serde(skip)]
    pub reused: Option<PathBuf>,
}

/// What one candidate mode came to: its answers' agreement and, when they
/// were within tolerance, its rounds against FP32; `Err`: it failed.
pub struct Outcome {
    pub agreement: Agreement,
    pub judged: Option<Judged>,
}

impl Decision {
    pub fn float32(probes: Vec<String>, tolerance: Tolerance, tried: Vec<Tried>, reason: String) -> Decision {
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
            "\n  tolerance: column error ≤ {}, agreement ≥ {}",
            tolerance.max_relative_error, tolerance.min_top1_agreement
        );
        for tried in &self.tried {
            let speed = tried.speedup.map_or("    -".to_string(), |s| format!("{s:.2}×"));
            let error = tried.agreement.as_ref().map_or(String::new(), |a| {
                let top1 = a.top1.map_or(String::new(), |t| {
                    format!(", agreement {:.1}% of {}", t * 100.0, a.decisions)
                });
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

/// Chooses among the candidates' outcomes by the module's rule: a mode
/// within tolerance whose rounds show it faster than FP32 by more than
/// `MIN_GAIN`; of several, the one with the highest lower bound; else FP32.
pub fn decide(probes: Vec<String>, tolerance: Tolerance, outcomes: Vec<(Mode, Result<Outcome, String>)>) -> Decision {
    let mut tried = vec![Tried {
        mode: Mode::FLOAT32,
        speedup: Some(1.0),
        judged: None,
        agreement: None,
        verdict: "the reference".into(),
    }];
    let mut best: Option<(usize, Judged)> = None;
    for (mode, outcome) in outcomes {
        let (agreement, judged, verdict) = match outcome {
            Err(e) => (None, None, format!("failed: {e}")),
            Ok(Outcome { agreement, judged }) => {
                let verdict = verdict(&agreement, judged.as_ref());
                if let Some(j) = judged.filter(|j| j.speed == Speed::Faster) {
                    if best.is_none_or(|(_, b)| j.lower > b.lower) {
                        best = Some((tried.len(), j));
                    }
                }
                (Some(agreement), judged, verdict)
            }
        };
        tried.push(Tried {
            mode,
            speedup: judged.map(|j| j.speedup),
            judged,
            agreement,
            verdict,
        });
    }
    let Some((index, judged)) = best else {
        let reason = "no other mode is both within tolerance and surely faster".to_string();
        return Decision::float32(probes, tolerance, tried, reason);
    };
    tried[index].verdict = format!("chosen: {}", tried[index].verdict);
    Decision {
        chosen: tried[index].mode,
        speedup: judged.speedup,
        probes,
        tolerance,
        reason: format!(
            "{:.2}× float32's speed ({:.2}–{:.2}× at 95% over {} rounds)",
            judged.speedup, judged.lower, judged.upper, judged.rounds
        ),
        tried,
        reused: None,
    }
}

fn verdict(agreement: &Agreement, judged: Option<&Judged>) -> String {
    if let Some(why) = &agreement.refused {
        return format!("refused: {why}");
    }
    let Some(j) = judged else {
        return "not timed".into();
    };
    let bounds = format!("{:.2}–{:.2}× over {} rounds", j.lower, j.upper, j.rounds);
    match j.speed {
        Speed::Faster => format!("within tolerance and faster ({bounds})"),
        Speed::NotFaster => format!("not {:.0}% faster than float32 ({bounds})", MIN_GAIN * 100.0),
        Speed::Tie => format!("a tie with float32 ({bounds}): float32 stays"),
    }
}
