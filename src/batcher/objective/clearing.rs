//! How much longer than its runs a backlog takes to clear, per row: the
//! time requests queued behind a batch's worth of rows or more took to get
//! their answers, past the runs planned ahead of them, over the rows whose
//! answers went out before theirs or with them. Where the runs hold answers
//! up it stays near nothing; where something else does (each answer waits
//! for its connection's thread, on a core the batches share) it is what
//! that costs a row, and the controller plans backlogs by it. Per row, not
//! per run: learned behind batches of one, it would otherwise plan every
//! larger batch as that many times slower, and hold the cap at one.

use std::time::{Duration, Instant};

/// Each request weighs this much in the running mean, once it is seeded.
const WEIGHT: f64 = 1.0 / 64.0;
/// Requests whose median seeds the time per row: until this many have
/// taught it, it plans nothing, and a few stalled among them do not move a
/// median.
const SEEDS: usize = 16;
/// The median absolute deviation of normal samples times this is their
/// mean absolute deviation, which the objective's percentile is planned in.
const MEDIAN_TO_MEAN_DEVIATION: f64 = 1.18;
/// Once seeded, a request counts at most this many deviations (and at the
/// least one mean) above the mean: a stalled answer nudges the plan, a
/// lasting change moves it within a few hundred requests.
const CLIP_DEVIATIONS: f64 = 4.0;
/// The least spread, in seconds per row, the clip allows: seeded at
/// nothing (backlogs that cleared as their runs did), it still learns a
/// change.
const SMALLEST_SPREAD: f64 = 1e-6;
/// How long a time per row is kept with no backlog to confirm it, at the
/// least, and in objectives: learned under a load that has passed (a model slowed
/// down for a while), it would otherwise refuse the very backlog that could
/// show the queue is faster now.
const MEMORY: Duration = Duration::from_secs(1);
const MEMORY_OBJECTIVES: u32 = 20;

#[derive(Default)]
pub(super) struct Clearing {
    /// The first requests' times per row, until there are [`SEEDS`].
    seeds: Vec<f64>,
    /// The mean time per row and its mean absolute deviation, once seeded.
    per_row: Option<(f64, f64)>,
    seen: Option<Instant>,
}

impl Clearing {
    /// A request took `per_row` seconds per row through past the runs
    /// planned ahead of it, at `now`.
    pub(super) fn learn(&mut self, per_row: f64, now: Instant) {
        if !per_row.is_finite() || per_row < 0.0 {
            return;
        }
        self.seen = Some(now);
        let Some((mean, deviation)) = self.per_row else {
            self.seed(per_row);
            return;
        };
        let spread = deviation.max(mean / CLIP_DEVIATIONS).max(SMALLEST_SPREAD);
        let per_row = per_row.min(mean + CLIP_DEVIATIONS * spread);
        self.per_row = Some((
            mean + (per_row - mean) * WEIGHT,
            deviation + ((per_row - mean).abs() - deviation) * WEIGHT,
        ));
    }

    fn seed(&mut self, per_row: f64) {
        self.seeds.push(per_row);
        if self.seeds.len() < SEEDS {
            return;
        }
        let median = median_of(&mut self.seeds);
        let mut deviations: Vec<f64> = self.seeds.iter().map(|seed| (seed - median).abs()).collect();
        let deviation = median_of(&mut deviations) * MEDIAN_TO_MEAN_DEVIATION;
        self.per_row = Some((median, deviation));
        self.seeds = Vec::new();
    }

    /// Forgets a time per row no request has confirmed for long, at `now`.
    pub(super) fn age(&mut self, now: Instant, objective: Duration) {
        let memory = MEMORY.max(objective * MEMORY_OBJECTIVES);
        if self
            .seen
            .is_some_and(|seen| now.saturating_duration_since(seen) > memory)
        {
            *self = Clearing::default();
        }
    }

    /// The time per row planned at `deviations` above its mean, once seeded.
    pub(super) fn planned(&self, deviations: f64) -> Option<f64> {
        self.per_row.map(|(mean, deviation)| mean + deviations * deviation)
    }

    #[cfg(test)]
    pub(super) fn mean(&self) -> Option<f64> {
        self.per_row.map(|(mean, _)| mean)
    }

    /// Whether any request has taught it since it was last forgotten.
    #[cfg(test)]
    pub(super) fn taught(&self) -> bool {
        self.per_row.is_some() || !self.seeds.is_empty()
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

    /// Microseconds per row, in seconds.
    const US: f64 = 1e-6;

    fn learned(per_row_us: &[f64]) -> Clearing {
        let now = Instant::now();
        let mut clearing = Clearing::default();
        for &us in per_row_us {
            clearing.learn(us * US, now);
        }
        clearing
    }

    fn planned_us(clearing: &Clearing, deviations: f64) -> Option<f64> {
        clearing.planned(deviations).map(|seconds| seconds / US)
    }

    #[test]
    fn a_stalled_request_among_the_seeds_moves_nothing_and_too_few_plan_nothing() {
        let mut seeds = vec![900.0];
        seeds.extend([50.0; 14]);
        assert_eq!(learned(&seeds).planned(2.33), None, "fifteen requests plan nothing");
        seeds.push(50.0);
        let median = planned_us(&learned(&seeds), 2.33).unwrap();
        assert!(
            (median - 50.0).abs() < 1e-9,
            "the median of sixteen, not the stalled one: {median}"
        );
        // Spread seeds plan their spread: 50 and 100 alike, a median of 100
        // and a median deviation of 50.
        let spread = planned_us(&learned(&[50.0, 100.0].repeat(8)), 1.0).unwrap();
        assert!(
            (spread - (100.0 + 50.0 * MEDIAN_TO_MEAN_DEVIATION)).abs() < 1e-6,
            "{spread}"
        );
        // Times that cannot be are not learned.
        assert_eq!(learned(&[f64::INFINITY, f64::NAN, -1.0].repeat(8)).planned(0.0), None);
    }

    #[test]
    fn once_seeded_a_stall_nudges_the_plan_and_a_lasting_change_moves_it() {
        let mut clearing = learned(&[50.0; 16]);
        // A stalled 1000 µs a row counts as 100 (the mean, as one deviation
        // above it while none was seen), a 64th of the way.
        clearing.learn(1000.0 * US, Instant::now());
        let nudged = planned_us(&clearing, 2.33).unwrap();
        assert!(nudged < 55.0, "{nudged}");
        let mut slower = learned(&[50.0; 16]);
        for _ in 0..400 {
            slower.learn(150.0 * US, Instant::now());
        }
        let mean = slower.mean().unwrap() / US;
        assert!((mean - 150.0).abs() < 5.0, "{mean}");
        // Seeded at nothing (backlogs that cleared as their runs did), a
        // lasting 60 µs a row is still learned.
        let mut nothing = learned(&[0.0; 16]);
        for _ in 0..600 {
            nothing.learn(60.0 * US, Instant::now());
        }
        let mean = nothing.mean().unwrap() / US;
        assert!((mean - 60.0).abs() < 5.0, "{mean}");
    }

    #[test]
    fn a_time_unconfirmed_for_long_is_forgotten_and_seeded_afresh() {
        let now = Instant::now();
        let mut clearing = learned(&[80.0; 16]);
        let objective = Duration::from_millis(20);
        clearing.age(now + Duration::from_millis(900), objective);
        assert!(clearing.planned(0.0).is_some(), "a second is kept");
        clearing.age(now + Duration::from_millis(1100), objective);
        assert_eq!(clearing.planned(0.0), None);
        clearing.learn(80.0 * US, now);
        assert_eq!(clearing.planned(0.0), None, "one request does not seed it again");
        // A slow objective keeps it twenty objectives.
        let mut clearing = learned(&[80.0; 16]);
        clearing.age(now + Duration::from_secs(15), Duration::from_secs(1));
        assert!(clearing.planned(0.0).is_some());
        clearing.age(now + Duration::from_secs(21), Duration::from_secs(1));
        assert_eq!(clearing.planned(0.0), None);
    }
}
