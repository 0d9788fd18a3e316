//! The speed half of `mixed_precision: auto`: whether a candidate mode is
//! faster than FP32 on this host, judged from interleaved rounds.
//!
//! It decides, for each candidate, *faster*, *not faster* or a *tie*, from
//! paired timings. A round runs every timing probe once in FP32 and once in
//! the candidate, the order reversed from one round to the next (AB, BA,
//! AB, ...), and scores ln(FP32's time / the candidate's) over the whole
//! round. Drift slower than a round (this host's speed moves 2× over
//! minutes) slows both halves of a round alike and cancels in its score; a
//! step or a stall inside one round spoils that round alone; a round during
//! which the server ran a request is thrown away and run again (`Rounds`).
//! After 8, 16, 32 and 64 rounds — or when the candidate's time is up, read
//! as the next of those looks — the rounds' median speed-up is bounded by
//! order statistics (the sign test's interval) at confidence
//! 1 − α / (candidates × looks): the candidate is faster when the lower
//! bound is above 1 + [`MIN_GAIN`], not faster when the upper bound is
//! below it, and a tie after the last look keeps FP32.
//!
//! What it guarantees, with rounds independent of each other and nothing
//! assumed of their distribution (stalls and steps included): a mode whose
//! median speed-up is at most 1 + `MIN_GAIN` is chosen with probability at
//! most α = 5 %, over every look of every candidate (Bonferroni). The
//! simulated-clock tests (`tests/drift.rs`) hold it to that under waves,
//! sudden 2× steps and stalls, and hold a mode 1.25× faster, with 10 % noise
//! per round, to a false reject below 5 % under each; a block-sequential
//! schedule (every FP32 run, then every candidate run) fails the same
//! false-accept test under steps.

use serde::{Deserialize, Serialize};

/// How much faster than FP32 a mode must be, for sure, to replace it.
pub const MIN_GAIN: f64 = 0.05;
/// The rounds after which the bounds are read.
pub const LOOKS: [usize; 4] = [8, 16, 32, 64];
/// The chance, over a whole trial, of choosing a mode not `MIN_GAIN` faster.
pub const ALPHA: f64 = 0.05;

/// What the rounds showed about one candidate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Speed {
    Faster,
    NotFaster,
    Tie,
}

/// One candidate's judgement: the verdict, the speed-up's estimate and its bounds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Judged {
    pub speed: Speed,
    /// exp(mean score): FP32's time over the candidate's.
    pub speedup: f64,
    pub lower: f64,
    pub upper: f64,
    pub rounds: usize,
}

/// Reads the bounds of `scores` (one per round) for one of `candidates`:
/// order statistics of the rounds, so that a stalled round moves nothing.
pub fn judge(scores: &[f64], candidates: usize) -> Judged {
    let mut sorted = scores.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let per_test = ALPHA / (candidates.max(1) * LOOKS.len()) as f64;
    // The k-th smallest score is below the median unless at most k − 1 of
    // the n scores are: a chance of P(Binomial(n, ½) ≤ k − 1).
    let k = (1..=n)
        .take_while(|&k| binomial_at_most(k - 1, n, 0.5) <= per_test)
        .last();
    let (lower, upper) = match k {
        Some(k) => (sorted[k - 1], sorted[n - k]),
        None => (f64::NEG_INFINITY, f64::INFINITY),
    };
    let median = match n {
        0 => 0.0,
        _ if n % 2 == 1 => sorted[n / 2],
        _ => 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]),
    };
    let threshold = (1.0 + MIN_GAIN).ln();
    let speed = if lower > threshold {
        Speed::Faster
    } else if upper < threshold {
        Speed::NotFaster
    } else {
        Speed::Tie
    };
    Judged {
        speed,
        // Finite, so that a kept decision reads back from JSON.
        speedup: median.exp(),
        lower: lower.exp(),
        upper: upper.exp().min(f64::MAX),
        rounds: n,
    }
}

/// P(X ≤ k) for X ~ Binomial(n, p).
pub fn binomial_at_most(k: usize, n: usize, p: f64) -> f64 {
    if p <= 0.0 {
        return 1.0;
    }
    if p >= 1.0 {
        return if k >= n { 1.0 } else { 0.0 };
    }
    let (ln_p, ln_q) = (p.ln(), (1.0 - p).ln());
    let mut ln_choose = 0.0;
    let mut total = 0.0;
    for i in 0..=k.min(n) {
        if i > 0 {
            ln_choose += ((n - i + 1) as f64).ln() - (i as f64).ln();
        }
        total += (ln_choose + i as f64 * ln_p + (n - i) as f64 * ln_q).exp();
    }
    total.min(1.0)
}

/// Whether the bounds are read after `rounds` rounds.
pub fn is_look(rounds: usize) -> bool {
    LOOKS.contains(&rounds)
}

/// One side of a round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Float32,
    Candidate,
}

/// What the rounds need from their surroundings: a pass over the timing
/// probes on one side (its seconds), and whether the server is quiet.
pub trait Rounds {
    /// Seconds one pass over every timing probe took on `side`.
    fn pass(&mut self, side: Side) -> Result<f64, String>;
    /// Waits until the server runs nothing else; `Err` abandons the trial.
    fn wait_quiet(&mut self) -> Result<(), String>;
    /// Whether the server ran anything since the last `wait_quiet`.
    fn disturbed(&mut self) -> bool;
    /// The clock's seconds, for the trial's time budget.
    fn now(&self) -> f64;
    /// Told after each kept round.
    fn progress(&mut self, _rounds: usize) {}
}

/// Runs rounds for one of `candidates` until a look decides, the last look
/// is reached or `budget` seconds have passed (then read as the next look).
/// Rounds the server disturbed are run again, at most `LOOKS`' last times
/// over, so a server never quiet for a round ends the candidate as a tie.
pub fn race(rounds: &mut dyn Rounds, candidates: usize, budget: f64) -> Result<Judged, String> {
    let began = rounds.now();
    let last_look = LOOKS[LOOKS.len() - 1];
    let mut scores = Vec::with_capacity(last_look);
    let mut disturbed = 0;
    while scores.len() < last_look {
        rounds.wait_quiet()?;
        let candidate_first = scores.len() % 2 == 1;
        let (fp32, candidate) = if candidate_first {
            let candidate = rounds.pass(Side::Candidate)?;
            (rounds.pass(Side::Float32)?, candidate)
        } else {
            let fp32 = rounds.pass(Side::Float32)?;
            (fp32, rounds.pass(Side::Candidate)?)
        };
        let out_of_time = rounds.now() - began > budget;
        if rounds.disturbed() {
            disturbed += 1;
            if disturbed > last_look || out_of_time {
                return Ok(judge(&scores, candidates));
            }
            continue;
        }
        scores.push((fp32.max(1e-12) / candidate.max(1e-12)).ln());
        rounds.progress(scores.len());
        let at_look = is_look(scores.len());
        if at_look || out_of_time {
            let judged = judge(&scores, candidates);
            if judged.speed != Speed::Tie || out_of_time || scores.len() == last_look {
                return Ok(judged);
            }
        }
    }
    Ok(judge(&scores, candidates))
}
