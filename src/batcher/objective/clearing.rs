//! How much longer than its runs a backlog takes to clear: the ratio of the
//! time requests queued behind a batch's worth of rows or more took to get
//! their answers to the time the runs ahead of them were planned to take.
//! Where the runs hold answers up it stays near 1; where something else
//! does (an answer waits for its connection's thread, on a core the
//! batches share) it grows, and the controller plans backlogs by it.

use std::time::{Duration, Instant};

/// Each request weighs at least this much in the running mean: until this
/// many have taught it, the mean of those seen.
const WEIGHT: f64 = 1.0 / 64.0;
/// Requests that must have taught the ratio since it was last forgotten
/// before it plans anything: one stalled request alone does not refuse.
const SAMPLES: u32 = 8;
/// How long a ratio is kept with no backlog to confirm it, at the least,
/// and in objectives: learned under a load that has passed (a model slowed
/// down for a while), it would otherwise refuse the very backlog that could
/// show the queue is faster now.
const MEMORY: Duration = Duration::from_secs(1);
const MEMORY_OBJECTIVES: u32 = 20;

#[derive(Default)]
pub(super) struct Clearing {
    /// The mean ratio and its mean absolute deviation.
    ratio: Option<(f64, f64)>,
    samples: u32,
    seen: Option<Instant>,
}

impl Clearing {
    /// A request took `ratio` times the runs planned ahead of it, at `now`.
    pub(super) fn learn(&mut self, ratio: f64, now: Instant) {
        self.samples = self.samples.saturating_add(1);
        let weight = (1.0 / f64::from(self.samples)).max(WEIGHT);
        self.ratio = Some(match self.ratio {
            Some((mean, deviation)) => (
                mean + (ratio - mean) * weight,
                deviation + ((ratio - mean).abs() - deviation) * weight,
            ),
            None => (ratio, 0.0),
        });
        self.seen = Some(now);
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

    /// The ratio planned at `deviations` above its mean, once enough
    /// requests have taught it.
    pub(super) fn planned(&self, deviations: f64) -> Option<f64> {
        let (mean, deviation) = self.ratio.filter(|_| self.samples >= SAMPLES)?;
        Some(mean + deviations * deviation)
    }

    #[cfg(test)]
    pub(super) fn mean(&self) -> Option<f64> {
        self.ratio.map(|(mean, _)| mean)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_requests_weigh_alike_and_too_few_plan_nothing() {
        let now = Instant::now();
        let mut clearing = Clearing::default();
        // One stalled request, then seven that cleared as planned.
        clearing.learn(9.0, now);
        for _ in 0..6 {
            clearing.learn(1.0, now);
        }
        assert_eq!(clearing.planned(0.0), None, "seven requests plan nothing");
        clearing.learn(1.0, now);
        let planned = clearing.planned(0.0).unwrap();
        assert!(
            (planned - 2.0).abs() < 1e-9,
            "the mean of eight, not the first: {planned}"
        );
        // Past 64 requests, each weighs 1/64.
        for _ in 0..200 {
            clearing.learn(3.0, now);
        }
        let mean = clearing.mean().unwrap();
        assert!((mean - 3.0).abs() < 0.1, "{mean}");
    }

    #[test]
    fn a_ratio_unconfirmed_for_long_is_forgotten() {
        let now = Instant::now();
        let mut clearing = Clearing::default();
        for _ in 0..8 {
            clearing.learn(2.0, now);
        }
        let objective = Duration::from_millis(20);
        clearing.age(now + Duration::from_millis(900), objective);
        assert!(clearing.planned(0.0).is_some(), "a second is kept");
        clearing.age(now + Duration::from_millis(1100), objective);
        assert_eq!(clearing.planned(0.0), None);
        // A slow objective keeps it twenty objectives.
        for _ in 0..8 {
            clearing.learn(2.0, now);
        }
        clearing.age(now + Duration::from_secs(15), Duration::from_secs(1));
        assert!(clearing.planned(0.0).is_some());
        clearing.age(now + Duration::from_secs(21), Duration::from_secs(1));
        assert_eq!(clearing.planned(0.0), None);
    }
}
