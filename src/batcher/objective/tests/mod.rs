//! The controller on a simulated clock: models that speed up, slow down
//! and spread, arrivals that change rate, queues of every depth.

use super::*;

mod draining;
mod refusing;
mod steering;

/// What the tests read of a controller beyond what the batcher does.
impl Controller {
    /// The mean of how much longer than their runs backlogs took to clear.
    pub fn cleared(&self) -> Option<f64> {
        self.clearing.mean()
    }

    /// Whether any request has taught how backlogs clear.
    pub fn clearing_taught(&self) -> bool {
        self.clearing.taught()
    }

    /// The verdict alone.
    pub fn admits(&self, rows: usize, ahead: Ahead, waited: Duration) -> Result<(), Late> {
        self.judge(rows, ahead, waited).0
    }
}

fn objective(ms: u64) -> Objective {
    Objective {
        latency: Duration::from_millis(ms),
        percentile: 99.0,
    }
}

/// A model whose run takes `fixed + per_row × rows` milliseconds.
fn runs(controller: &mut Controller, fixed: f64, per_row: f64, sizes: &[usize]) {
    for _ in 0..20 {
        for &rows in sizes {
            let run = Duration::from_secs_f64((fixed + per_row * rows as f64) / 1000.0);
            controller.ran(rows, run);
        }
    }
}

/// `rows` rows waiting, behind `running` batches of 32 rows running.
fn ahead(rows: usize, running: usize) -> Ahead {
    Ahead {
        rows,
        running,
        running_rows: running * 32,
    }
}

/// One row arriving every `interval`, `count` times from `start`.
fn arrive_every(controller: &mut Controller, count: u32, start: Instant, interval: Duration) {
    for i in 0..count {
        controller.arrived(1, start + interval * i);
    }
}

/// `count` requests that queued behind `ahead` rows, the runs idle and the
/// cap 32, took `spent` each.
fn backlogs(controller: &mut Controller, count: usize, ahead: usize, spent: &[f64], now: Instant) {
    for _ in 0..count {
        for &ms in spent {
            controller.taken(self::ahead(ahead, 0), 32, 1, Duration::from_secs_f64(ms / 1000.0), now);
        }
    }
}
