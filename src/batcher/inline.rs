//! Where a fast queue's batches run. Handing a batch to a batch thread costs
//! two thread wake-ups (the batch thread's, then the waiting request's),
//! several microseconds each on a loaded machine: more than a whole session
//! run of a small model. A queue whose recent runs are shorter than the
//! server's inline limit is therefore run by the requests themselves: the
//! submitting task yields once (so every request that arrived in the same
//! turn of its event loop joins the batch) and then runs the ready batch on
//! its own thread. Slower queues, queues that wait for a batch timeout, and
//! requests split across batches keep to the batch threads.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Runs measured before a queue may run inline: until then its speed is unknown.
const MEASURED_RUNS: u64 = 4;

/// A queue's recent session-run time (an exponentially weighted mean).
#[derive(Default)]
pub struct RunClock {
    mean_nanos: AtomicU64,
    runs: AtomicU64,
}

impl RunClock {
    /// Folds one run in; each new run weighs 1/8.
    pub fn record(&self, run: Duration) {
        let nanos = u64::try_from(run.as_nanos()).unwrap_or(u64::MAX);
        let runs = self.runs.fetch_add(1, Ordering::Relaxed);
        let mean = self.mean_nanos.load(Ordering::Relaxed);
        let next = if runs == 0 { nanos } else { mean - mean / 8 + nanos / 8 };
        // Racing batch threads may lose an update: the mean stays a fair estimate.
        self.mean_nanos.store(next, Ordering::Relaxed);
    }

    /// Whether runs measured so far average at most `limit`.
    pub fn within(&self, limit: Duration) -> bool {
        !limit.is_zero()
            && self.runs.load(Ordering::Relaxed) >= MEASURED_RUNS
            && u128::from(self.mean_nanos.load(Ordering::Relaxed)) <= limit.as_nanos()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_runs_inline_only_once_measured_and_fast() {
        let clock = RunClock::default();
        let limit = Duration::from_micros(100);
        assert!(!clock.within(limit), "unmeasured");
        for _ in 0..MEASURED_RUNS {
            clock.record(Duration::from_micros(10));
        }
        assert!(clock.within(limit));
        assert!(!clock.within(Duration::ZERO), "a zero limit turns inline runs off");
        for _ in 0..32 {
            clock.record(Duration::from_millis(5));
        }
        assert!(
            !clock.within(limit),
            "slow runs move the queue back to the batch threads"
        );
    }
}
