//! A queue's run times per power-of-two batch size: the last [`RING`] warm
//! runs of each size, planned at the objective's percentile as their
//! empirical quantile (run times are skewed: no normal quantile is safe). A
//! size never measured is scaled linearly from the nearest smaller one
//! measured (a run grows at most linearly with its rows), else taken from
//! the nearest larger one.

/// Runs of one size kept, the most recent: enough for a p99 to be a run
/// that happened rather than the maximum of a few.
const RING: usize = 128;

#[derive(Default)]
struct Ring {
    /// The size's first run was seen: it pays TensorFlow's one-time costs
    /// for its shape (as warm-up's does) and is not kept.
    seen: bool,
    seconds: Vec<f64>,
    next: usize,
    planned: Option<f64>,
}

pub(super) struct RunTimes {
    sizes: Vec<Ring>,
    max_batch: usize,
    /// The share of runs (0–1) a plan covers.
    share: f64,
}

impl RunTimes {
    pub(super) fn new(max_batch: usize, percentile: f64) -> RunTimes {
        let max_batch = max_batch.max(1);
        RunTimes {
            sizes: (0..=bucket(max_batch)).map(|_| Ring::default()).collect(),
            max_batch,
            share: (percentile / 100.0).clamp(0.0, 1.0),
        }
    }

    /// A batch of `rows` ran in `seconds`.
    pub(super) fn record(&mut self, rows: usize, seconds: f64) {
        let share = self.share;
        let Some(ring) = self.sizes.get_mut(bucket(rows.min(self.max_batch))) else {
            return;
        };
        if !std::mem::replace(&mut ring.seen, true) || !seconds.is_finite() {
            return;
        }
        if ring.seconds.len() < RING {
            ring.seconds.push(seconds);
        } else {
            ring.seconds[ring.next] = seconds;
        }
        ring.next = (ring.next + 1) % RING;
        let mut sorted = ring.seconds.clone();
        let rank = ((share * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
        let (_, quantile, _) = sorted.select_nth_unstable_by(rank, f64::total_cmp);
        ring.planned = Some(*quantile);
    }

    /// The run planned for a batch of `rows`, in seconds; `None` before any
    /// run was measured.
    pub(super) fn planned(&self, rows: usize) -> Option<f64> {
        self.plan(rows, 1, true)
    }

    /// The run planned for a batch of `rows` from the sizes with runs
    /// enough to tell their percentile (a hundred for a p99; a p99 of fewer
    /// is their slowest): its own size's, or on the line through two such
    /// sizes below; `None` where no two are settled to draw it through (one
    /// size alone tells nothing of how runs grow, and a larger size's run
    /// only bounds it).
    pub(super) fn settled(&self, rows: usize) -> Option<f64> {
        let enough = (1.0 / (1.0 - self.share).max(1e-9)).ceil() as usize;
        self.plan(rows, enough.clamp(1, RING), false)
    }

    /// The plan from sizes with at least `least` runs kept: its own size's;
    /// else on the line through the two nearest smaller sizes (between
    /// the nearer one's run and that run scaled by rows), or the nearer's
    /// own run where there is one; else the nearest larger size's (those
    /// two only where `scaled`).
    fn plan(&self, rows: usize, least: usize, scaled: bool) -> Option<f64> {
        let target = bucket(rows.min(self.max_batch));
        let known = |b: usize| {
            let ring = &self.sizes[b];
            ring.planned.filter(|_| ring.seconds.len() >= least)
        };
        if let Some(planned) = known(target) {
            return Some(planned);
        }
        let mut below = (0..target)
            .rev()
            .filter_map(|b| known(b).map(|planned| (size(b), planned)));
        let wanted = size(target);
        match (below.next(), below.next()) {
            (Some((near, run)), Some((far, far_run))) => {
                let slope = (run - far_run) / (near - far);
                let line = run + slope * (wanted - near);
                Some(line.clamp(run, run * wanted / near))
            }
            // One size alone tells nothing of how runs grow: planned at its
            // run until the larger size is measured (first met, it is).
            (Some((_, run)), None) => scaled.then_some(run),
            _ if scaled => (target + 1..self.sizes.len()).find_map(known),
            _ => None,
        }
    }
}

/// The rows of the largest batch in bucket `b`.
fn size(b: usize) -> f64 {
    (1u64 << b) as f64
}

/// The power of two `rows` rounds up to, as an index: 1 → 0, 2 → 1, 3..4 → 2.
fn bucket(rows: usize) -> usize {
    rows.max(1).next_power_of_two().trailing_zeros() as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_the_empirical_quantile_of_recent_warm_runs() {
        let mut runs = RunTimes::new(64, 99.0);
        assert_eq!(runs.planned(8), None);
        runs.record(8, 9.0);
        assert_eq!(runs.planned(8), None, "a size's first run is not kept");
        // 99 runs of 1 s and one of 5 s: the p99 of 100 is the 99th, 1 s.
        for i in 0..100 {
            runs.record(8, if i == 50 { 5.0 } else { 1.0 });
        }
        assert_eq!(runs.planned(8), Some(1.0));
        runs.record(8, 5.0);
        assert_eq!(runs.planned(8), Some(5.0), "two slow in 101: the p99 is one");
        // The ring forgets: 128 fast runs later both slow ones are gone.
        for _ in 0..RING {
            runs.record(8, 2.0);
        }
        assert_eq!(runs.planned(8), Some(2.0));
    }

    #[test]
    fn unmeasured_sizes_scale_linearly_from_below_else_borrow_from_above() {
        let mut runs = RunTimes::new(64, 99.0);
        runs.record(16, 0.0);
        runs.record(16, 4.0);
        assert_eq!(runs.planned(4), Some(4.0), "only a larger size measured");
        assert_eq!(
            runs.planned(64),
            Some(4.0),
            "one size below: its own run until 64 is measured"
        );
        assert_eq!(runs.planned(1000), Some(4.0), "bounded by max_batch_size");
        assert_eq!(runs.planned(12), Some(4.0), "12 rows run in the bucket of 16");
        // Two sizes below: on their line.
        runs.record(4, 0.0);
        runs.record(4, 2.0);
        assert_eq!(runs.planned(64), Some(12.0), "their line: 4 + 48 × 2 / 12");
        runs.record(2, 0.0);
        runs.record(2, 3.0);
        assert_eq!(runs.planned(8), Some(2.0), "never below the nearer size's run");
    }

    #[test]
    fn a_size_is_settled_once_it_has_runs_enough_for_its_percentile() {
        let mut runs = RunTimes::new(64, 99.0);
        runs.record(8, 0.0);
        for _ in 0..100 {
            runs.record(8, 1.0);
        }
        runs.record(32, 0.0);
        runs.record(32, 9.0);
        assert_eq!(runs.planned(32), Some(9.0));
        assert_eq!(
            runs.settled(32),
            None,
            "one run of 32 is not enough, nor one size below"
        );
        assert_eq!(runs.settled(8), Some(1.0));
        assert_eq!(runs.settled(16), None, "never measured");
        runs.record(2, 0.0);
        for _ in 0..100 {
            runs.record(2, 0.5);
        }
        assert_eq!(
            runs.settled(32),
            Some(3.0),
            "on the line through 2 and 8: 1 + 24 × 0.5 / 6"
        );
    }
}
