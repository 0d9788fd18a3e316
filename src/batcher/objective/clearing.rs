//! How much longer than its runs a backlog takes to clear: the ratio of the
//! time requests queued behind a batch's worth of rows or more took to get
//! their answers to the time the runs ahead of them were planned to take.
//! Where the runs hold answers up it stays near 1; where something else
//! does (an answer waits for its connection's thread, on a core the
//! batches share) it grows, and the controller plans backlogs by it.

use std::time::{Duration, Instant};

/// Each request weighs this much in the running mean, once it is seeded.
const WEIGHT: f64 = 1.0 / 64.0;
/// Requests whose median seeds the ratio: until this many have taught it,
/// it plans nothing, and a few stalled among them do not move a median.
const SEEDS: usize = 16;
/// The median absolute deviation of normal samples times this is their
/// mean absolute deviation, which the objective's percentile is planned in.
const MEDIAN_TO_MEAN_DEVIATION: f64 = 1.18;
/// Once seeded, a request counts at most this many deviations (and at the
/// least one mean) above the mean: a stalled answer nudges the plan, a
/// lasting change moves it within a few hundred requests.
const CLIP_DEVIATIONS: f64 = 4.0;
/// How long a ratio is kept with no backlog to confirm it, at the least,
/// and in objectives: learned under a load that has passed (a model slowed
/// down for a while), it would otherwise refuse the very backlog that could
/// show the queue is faster now.
const MEMORY: Duration = Duration::from_secs(1);
const MEMORY_OBJECTIVES: u32 = 20;

#[derive(Default)]
pub(super) struct Clearing {
    /// The first requests' ratios, until there are [`SEEDS`].
    seeds: Vec<f64>,
    /// The mean ratio and its mean absolute deviation, once seeded.
    ratio: Option<(f64, f64)>,
    seen: Option<Instant>,
}

impl Clearing {
    /// A request took `ratio` times the runs planned ahead of it, at `now`.
    pub(super) fn learn(&mut self, ratio: f64, now: Instant) {
        if !ratio.is_finite() || ratio < 0.0 {
            return;
        }
        self.seen = Some(now);
        let Some((mean, deviation)) = self.ratio else {
            self.seed(ratio);
            return;
        };
        let ratio = ratio.min(mean + CLIP_DEVIATIONS * deviation.max(mean / CLIP_DEVIATIONS));
        self.ratio = Some((
            mean + (ratio - mean) * WEIGHT,
            deviation + ((ratio - mean).abs() - deviation) * WEIGHT,
        ));
    }

    fn seed(&mut self, ratio: f64) {
        self.seeds.push(ratio);
        if self.seeds.len() < SEEDS {
            return;
        }
        let median = median_of(&mut self.seeds);
        let mut deviations: Vec<f64> = self.seeds.iter().map(|seed| (seed - median).abs()).collect();
        let deviation = median_of(&mut deviations) * MEDIAN_TO_MEAN_DEVIATION;
        self.ratio = Some((median, deviation));
        self.seeds = Vec::new();
    }

    /// Forgets a ratio no request has confirmed for long, at `now`.
    pub(super) fn age(&mut self, now: Instant, objective: Duration) {
        let memory = MEMORY.max(objective * MEMORY_OBJECTIVES);
        if self
            .seen
            .is_some_and(|seen| now.saturating_duration_since(seen) > memory)
        {
            *self = Clearing::default();
        }
    }

    /// The ratio planned at `deviations` above its mean, once seeded.
    pub(super) fn planned(&self, deviations: f64) -> Option<f64> {
        self.ratio.map(|(mean, deviation)| mean + deviations * deviation)
    }

    #[cfg(test)]
    pub(super) fn mean(&self) -> Option<f64> {
        self.ratio.map(|(mean, _)| mean)
    }

    /// Whether any request has taught it since it was last forgotten.
    #[cfg(test)]
    pub(super) fn taught(&self) -> bool {
        self.ratio.is_some() || !self.seeds.is_empty()
    }
}

/// The median of finite `values` (the upper one of an even count).
fn median_of(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn learned(ratios: &[f64]) -> Clearing {
        let now = Instant::now();
        let mut clearing = Clearing::default();
        for &ratio in ratios {
            clearing.learn(ratio, now);
        }
        clearing
    }

    #[test]
    fn a_stalled_request_among_the_seeds_moves_nothing_and_too_few_plan_nothing() {
        let mut seeds = vec![9.0];
        seeds.extend([1.0; 14]);
        assert_eq!(learned(&seeds).planned(2.33), None, "fifteen requests plan nothing");
        seeds.push(1.0);
        assert_eq!(
            learned(&seeds).planned(2.33),
            Some(1.0),
            "the median of sixteen, not the stalled one"
        );
        // Spread seeds plan their spread: 1 and 2 alike, a median of 2 and
        // a median deviation of 1.
        let spread = learned(&[1.0, 2.0].repeat(8)).planned(1.0).unwrap();
        assert!((spread - (2.0 + MEDIAN_TO_MEAN_DEVIATION)).abs() < 1e-9, "{spread}");
        // Ratios that cannot be are not learned.
        assert_eq!(learned(&[f64::INFINITY, f64::NAN, -1.0].repeat(8)).planned(0.0), None);
    }

    #[test]
    fn once_seeded_a_stall_nudges_the_plan_and_a_lasting_change_moves_it() {
        let mut clearing = learned(&[1.0; 16]);
        // Twenty times the runs counts as two (the mean, as one deviation
        // above it while none was seen), a 64th of the way.
        clearing.learn(20.0, Instant::now());
        let nudged = clearing.planned(2.33).unwrap();
        assert!(nudged < 1.1, "{nudged}");
        let mut slower = learned(&[1.0; 16]);
        for _ in 0..400 {
            slower.learn(3.0, Instant::now());
        }
        let mean = slower.mean().unwrap();
        assert!((mean - 3.0).abs() < 0.1, "{mean}");
    }

    #[test]
    fn a_ratio_unconfirmed_for_long_is_forgotten_and_seeded_afresh() {
        let now = Instant::now();
        let mut clearing = learned(&[2.0; 16]);
        let objective = Duration::from_millis(20);
        clearing.age(now + Duration::from_millis(900), objective);
        assert!(clearing.planned(0.0).is_some(), "a second is kept");
        clearing.age(now + Duration::from_millis(1100), objective);
        assert_eq!(clearing.planned(0.0), None);
        clearing.learn(2.0, now);
        assert_eq!(clearing.planned(0.0), None, "one request does not seed it again");
        // A slow objective keeps it twenty objectives.
        let mut clearing = learned(&[2.0; 16]);
        clearing.age(now + Duration::from_secs(15), Duration::from_secs(1));
        assert!(clearing.planned(0.0).is_some());
        clearing.age(now + Duration::from_secs(21), Duration::from_secs(1));
        assert_eq!(clearing.planned(0.0), None);
    }
}
