//! The rounds' error rates on a simulated host whose speed drifts: slow
//! waves, sudden 2× steps and stalls. Each case runs 2,000 seeded trials of
//! one candidate; a mode no more than `MIN_GAIN` faster is chosen at most
//! α = 5 % of the time, and a mode 1.25× faster with 7 % noise per pass
//! (10 % per round) is kept out less than 5 % of the time. A schedule that
//! times every FP32 run before every candidate run fails the first under
//! sudden steps.

use crate::modes::rounds::{race, Rounds, Side, Speed, ALPHA, MIN_GAIN};

/// How the host's speed moves over the simulated seconds.
#[derive(Clone, Copy, Debug)]
enum Drift {
    /// Slower and faster by up to 1.5× over a minute.
    Waves,
    /// Twice as slow, or twice as fast, at random moments (every 5 s on average).
    Steps,
    /// One pass in 50 takes 5× longer.
    Stalls,
}

/// A seeded host: one pass over the probes takes `base` seconds in FP32,
/// `base / speedup` in the candidate, times the drift and 7 % noise.
struct Host {
    state: u64,
    clock: f64,
    speedup: f64,
    drift: Drift,
    /// Steps: the current factor and when it changes next.
    factor: f64,
    next_step: f64,
}

impl Host {
    fn new(seed: u64, speedup: f64, drift: Drift) -> Host {
        let mut host = Host {
            state: seed.wrapping_mul(0x9e3779b97f4a7c15) | 1,
            clock: 0.0,
            speedup,
            drift,
            factor: 1.0,
            next_step: 0.0,
        };
        host.next_step = host.exponential(5.0);
        host
    }

    fn uniform(&mut self) -> f64 {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        ((self.state >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    fn normal(&mut self) -> f64 {
        let (u, v) = (self.uniform(), self.uniform());
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }

    fn exponential(&mut self, mean: f64) -> f64 {
        -mean * self.uniform().ln()
    }

    fn slowness(&mut self) -> f64 {
        match self.drift {
            Drift::Waves => 1.5f64.powf((2.0 * std::f64::consts::PI * self.clock / 60.0).sin()),
            Drift::Steps => {
                while self.clock >= self.next_step {
                    self.factor = if self.uniform() < 0.5 { 2.0 } else { 1.0 };
                    self.next_step += self.exponential(5.0);
                }
                self.factor
            }
            Drift::Stalls => {
                if self.uniform() < 0.02 {
                    5.0
                } else {
                    1.0
                }
            }
        }
    }

    fn run(&mut self, side: Side) -> f64 {
        let base = 0.2 / if side == Side::Candidate { self.speedup } else { 1.0 };
        let seconds = base * self.slowness() * (0.07 * self.normal()).exp();
        self.clock += seconds;
        seconds
    }
}

impl Rounds for Host {
    fn pass(&mut self, side: Side) -> Result<f64, String> {
        Ok(self.run(side))
    }

    fn wait_quiet(&mut self) -> Result<(), String> {
        Ok(())
    }

    fn disturbed(&mut self) -> bool {
        false
    }

    fn now(&self) -> f64 {
        self.clock
    }
}

const TRIALS: u64 = 2000;

/// The share of `TRIALS` seeded trials that judge the candidate faster.
fn accepted(speedup: f64, drift: Drift, schedule: fn(&mut Host) -> bool) -> f64 {
    let faster = (0..TRIALS)
        .filter(|&seed| schedule(&mut Host::new(seed + 1, speedup, drift)))
        .count();
    faster as f64 / TRIALS as f64
}

fn interleaved(host: &mut Host) -> bool {
    race(host, 1, 600.0).unwrap().speed == Speed::Faster
}

/// The schedule the rounds replace: five FP32 runs, then five of the
/// candidate, medians compared.
fn block_sequential(host: &mut Host) -> bool {
    let mut median = |side| {
        let mut times: Vec<f64> = (0..5).map(|_| host.run(side)).collect();
        times.sort_by(f64::total_cmp);
        times[2]
    };
    let fp32 = median(Side::Float32);
    let candidate = median(Side::Candidate);
    fp32 / candidate >= 1.0 + MIN_GAIN
}

const DRIFTS: [Drift; 3] = [Drift::Waves, Drift::Steps, Drift::Stalls];

#[test]
fn a_mode_no_faster_than_the_gain_is_chosen_at_most_alpha_of_the_time() {
    for drift in DRIFTS {
        for speedup in [1.0, 1.0 + MIN_GAIN] {
            let rate = accepted(speedup, drift, interleaved);
            assert!(
                rate <= ALPHA,
                "{drift:?} at {speedup}×: chosen in {:.1}% of trials",
                rate * 100.0
            );
        }
    }
}

#[test]
fn a_mode_a_quarter_faster_is_rarely_kept_out() {
    for drift in DRIFTS {
        let rate = 1.0 - accepted(1.25, drift, interleaved);
        assert!(rate < 0.05, "{drift:?}: kept out in {:.1}% of trials", rate * 100.0);
    }
}

#[test]
fn timing_fp32_first_then_the_candidate_fails_under_sudden_steps() {
    let rate = accepted(1.0, Drift::Steps, block_sequential);
    assert!(
        rate > ALPHA,
        "a block-sequential schedule chose an equal mode in {:.1}%",
        rate * 100.0
    );
}
