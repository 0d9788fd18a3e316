//! Run times per allowed batch size, and the choice they inform: whether a
//! batch whose rows fall between two allowed sizes is padded up to the larger
//! one or run at the smaller one with the rest left queued.
//!
//! Padding is computed like real rows. When a model's run time grows with its
//! rows (an image model), 17 queued rows padded to 32 cost nearly twice the
//! run of 16, and under a steady load the split persists: the next batch is
//! whatever the last one left, so batches of 17 and 15 keep alternating, each
//! padded, at two thirds of the throughput of 16 and 16. Running the 16 and
//! leaving 1 (it leads the next batch) ends that. When the run time hardly
//! depends on the rows (a small model), padding is nearly free and a second
//! run is not, so the batch is padded as before. Which applies is measured,
//! not configured: rows per second at the smaller size against the whole
//! batch's at the padded one, from the runs each size took. Triton's dynamic
//! batcher forms its preferred sizes the same way, leaving the remainder queued.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Mean run time of each allowed batch size (0 until that size has run).
#[derive(Debug)]
pub struct RunSizes {
    allowed: Vec<usize>,
    mean_nanos: Vec<AtomicU64>,
}

impl RunSizes {
    pub fn new(allowed: &[usize]) -> RunSizes {
        RunSizes {
            allowed: allowed.to_vec(),
            mean_nanos: allowed.iter().map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Folds in one run of `rows` rows (an allowed size, or it is not kept);
    /// each new run weighs 1/4.
    pub fn record(&self, rows: usize, run: Duration) {
        let Some(slot) = self.slot(rows) else { return };
        let nanos = u64::try_from(run.as_nanos()).unwrap_or(u64::MAX).max(1);
        let mean = slot.load(Ordering::Relaxed);
        let next = if mean == 0 { nanos } else { mean - mean / 4 + nanos / 4 };
        // Racing batch threads may lose an update: the mean stays a fair estimate.
        slot.store(next.max(1), Ordering::Relaxed);
    }

    /// How many of `rows` queued rows to run now: all of them (padded to the
    /// next allowed size), or the largest allowed size below them when its
    /// measured rows per second beat the padded batch's.
    pub fn rows_to_run(&self, rows: usize) -> usize {
        let Some(padded) = self.allowed.iter().copied().find(|&size| size >= rows) else {
            return rows;
        };
        let Some(smaller) = self.allowed.iter().copied().rev().find(|&size| size < rows) else {
            return rows;
        };
        if padded == rows {
            return rows;
        }
        let (Some(padded_nanos), Some(smaller_nanos)) = (self.mean(padded), self.mean(smaller)) else {
            return rows;
        };
        // smaller / t(smaller) > rows / t(padded), without division.
        let split = smaller as u128 * padded_nanos as u128 > rows as u128 * smaller_nanos as u128;
        if split {
            smaller
        } else {
            rows
        }
    }

    fn slot(&self, rows: usize) -> Option<&AtomicU64> {
        let index = self.allowed.iter().position(|&size| size == rows)?;
        self.mean_nanos.get(index)
    }

    fn mean(&self, rows: usize) -> Option<u64> {
        Some(self.slot(rows)?.load(Ordering::Relaxed)).filter(|&nanos| nanos > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(runs: &[(usize, u64)]) -> RunSizes {
        let sizes = RunSizes::new(&[1, 2, 4, 8, 16, 32]);
        for &(rows, millis) in runs {
            sizes.record(rows, Duration::from_millis(millis));
        }
        sizes
    }

    #[test]
    fn rows_that_fill_an_allowed_size_or_are_unmeasured_run_whole() {
        let image_model = sizes(&[(16, 800), (32, 1600)]);
        assert_eq!(image_model.rows_to_run(16), 16, "an allowed size runs as it is");
        assert_eq!(
            image_model.rows_to_run(40),
            40,
            "beyond the largest size nothing is chosen here"
        );
        assert_eq!(
            sizes(&[(16, 800)]).rows_to_run(17),
            17,
            "32 never ran: pad, as without measurements"
        );
        assert_eq!(sizes(&[]).rows_to_run(5), 5);
    }

    #[test]
    fn a_model_whose_run_grows_with_its_rows_runs_the_full_size_and_leaves_the_rest() {
        let image_model = sizes(&[(16, 800), (32, 1600), (4, 200), (8, 400)]);
        assert_eq!(image_model.rows_to_run(17), 16);
        assert_eq!(image_model.rows_to_run(31), 16, "16 rows in 0.8 s beat 31 in 1.6 s");
        assert_eq!(image_model.rows_to_run(5), 4);
    }

    #[test]
    fn a_model_whose_run_hardly_grows_pads_instead_of_running_twice() {
        let small_model = sizes(&[(16, 1), (32, 1)]);
        assert_eq!(small_model.rows_to_run(17), 17);
        // In between: 16 rows in 10 ms against 30 in 16 ms.
        let middling = sizes(&[(16, 10), (32, 16)]);
        assert_eq!(middling.rows_to_run(30), 30);
        assert_eq!(middling.rows_to_run(18), 16);
    }

    #[test]
    fn the_mean_follows_recent_runs() {
        let sizes = sizes(&[(32, 1600)]);
        for _ in 0..20 {
            sizes.record(32, Duration::from_millis(400));
        }
        let mean = sizes.mean(32).unwrap();
        assert!((390_000_000..=420_000_000).contains(&mean), "{mean}");
        sizes.record(3, Duration::from_millis(5));
        assert_eq!(sizes.mean(3), None, "not an allowed size: not kept");
    }
}
