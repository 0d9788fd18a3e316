//! What a queue's runs take per batch size: a running mean and mean
//! absolute deviation per power of two of the rows run, and how sizes not
//! measured (or not lately) are planned from the ones that were.

/// Each new run weighs this much in its size's running mean.
const RUN_WEIGHT: f64 = 1.0 / 8.0;
/// Runs of other sizes after which a size above the cap, not run since,
/// is measured afresh: a stall while it ran (the core taken away) would
/// otherwise keep it above the cap for good, as no batch of it runs again
/// to correct it. Until then it is planned from the sizes below it.
const STALE_RUNS: u64 = 512;

pub(super) struct RunTimes {
    max_batch: usize,
    /// Per power of two (index: log2 of the rows run, rounded up): the mean
    /// run time and its mean absolute deviation, in seconds.
    runs: Vec<Option<(f64, f64)>>,
    /// Per power of two, whether a run of it was seen: the first pays
    /// TensorFlow's one-time costs for its shape and is not measured (warm-up
    /// runs each size once; a size no batch reached since would cap below it).
    seen: Vec<bool>,
    /// Per power of two, the count of runs when one of it last ran.
    last_ran: Vec<u64>,
    counted: u64,
}

impl RunTimes {
    pub(super) fn new(max_batch: usize) -> RunTimes {
        let sizes = bucket(max_batch) + 1;
        RunTimes {
            max_batch,
            runs: vec![None; sizes],
            seen: vec![false; sizes],
            last_ran: vec![0; sizes],
            counted: 0,
        }
    }

    /// A batch of `rows` rows ran in `seconds`; sizes above `cap` that no
    /// batch ran for [`STALE_RUNS`] runs are forgotten.
    pub(super) fn record(&mut self, rows: usize, seconds: f64, cap: usize) {
        let size = bucket(rows.min(self.max_batch));
        self.counted += 1;
        self.last_ran[size] = self.counted;
        for stale in bucket(cap) + 1..self.runs.len() {
            if self.counted - self.last_ran[stale] > STALE_RUNS {
                self.runs[stale] = None;
            }
        }
        if !std::mem::replace(&mut self.seen[size], true) {
            return;
        }
        let slot = &mut self.runs[size];
        *slot = Some(match *slot {
            Some((mean, deviation)) => (
                mean + (seconds - mean) * RUN_WEIGHT,
                deviation + ((seconds - mean).abs() - deviation) * RUN_WEIGHT,
            ),
            None => (seconds, 0.0),
        });
    }

    /// The mean run time of a batch of `rows` and its deviation: measured at
    /// its power of two, else scaled linearly from the nearest smaller one
    /// measured (runs grow at most linearly with rows), else the nearest
    /// larger one's.
    pub(super) fn measured(&self, rows: usize) -> Option<(f64, f64)> {
        let target = bucket(rows.min(self.max_batch));
        if let Some(run) = self.runs[target] {
            return Some(run);
        }
        let below = (0..target).rev().find_map(|b| self.runs[b].map(|run| (b, run)));
        if let Some((b, (mean, deviation))) = below {
            let scale = (1u64 << (target - b)) as f64;
            return Some((mean * scale, deviation * scale));
        }
        self.runs.iter().skip(target + 1).flatten().next().copied()
    }

    /// The mean time of runs of one row, as measured (not planned from
    /// other sizes); zero until measured.
    pub(super) fn single(&self) -> f64 {
        self.runs[0].map_or(0.0, |(mean, _)| mean)
    }
}

/// The power of two `rows` rounds up to, as an index: 1 → 0, 2 → 1, 3..4 → 2.
fn bucket(rows: usize) -> usize {
    rows.max(1).next_power_of_two().trailing_zeros() as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_size_stalled_above_the_cap_is_measured_afresh_once_stale() {
        let mut times = RunTimes::new(64);
        for _ in 0..4 {
            times.record(32, 0.001, 32);
            times.record(8, 0.0004, 32);
        }
        // A stall: one run of 32 rows took 50 ms, and the cap fell to 8.
        times.record(32, 0.050, 8);
        let stalled = times.measured(32).unwrap().0;
        assert!(stalled > 0.005, "{stalled}");
        for _ in 0..STALE_RUNS {
            times.record(8, 0.0004, 8);
        }
        assert_eq!(times.measured(32).unwrap().0, stalled, "kept until stale");
        times.record(8, 0.0004, 8);
        // Planned from the batches of 8: four of them.
        let planned = times.measured(32).unwrap().0;
        assert!((planned - 0.0016).abs() < 1e-9, "{planned}");
        // Sizes within the cap are kept however long they wait.
        for _ in 0..=STALE_RUNS {
            times.record(1, 0.0001, 64);
        }
        assert!((times.measured(8).unwrap().0 - 0.0004).abs() < 1e-9);
    }

    #[test]
    fn rows_round_up_to_their_power_of_two() {
        assert_eq!([1, 2, 3, 4, 5, 64].map(bucket), [0, 1, 2, 2, 3, 6]);
    }
}
