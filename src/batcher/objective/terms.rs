//! The terms a queue's controller is given and answers in: the objective,
//! what a request finds ahead of it, what the controller chose, and why it
//! refused.

use std::time::Duration;

/// What a queue promises: `percentile` of its requests spend at most
/// `latency` in the batcher (queue and run).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Objective {
    pub latency: Duration,
    pub percentile: f64,
}

impl Objective {
    /// Standard deviations above the mean a run is planned at, so that about
    /// `percentile` of runs take no longer (normal quantiles).
    pub(super) fn deviations(&self) -> f64 {
        match self.percentile {
            p if p >= 99.9 => 3.09,
            p if p >= 99.0 => 2.33,
            p if p >= 95.0 => 1.64,
            p if p >= 90.0 => 1.28,
            p if p >= 75.0 => 0.67,
            _ => 0.0,
        }
    }
}

/// What the controller has chosen: the largest batch it forms, and how long
/// a batch waits to fill when a thread is free.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Steering {
    pub cap: usize,
    pub timeout: Duration,
}

/// Why a request was refused: the time it would likely have spent in the
/// queue, after the time it had already waited to be read, and the rows
/// ahead of it (queued, or answered and not yet taken).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Late {
    pub estimate: Duration,
    pub waited: Duration,
    pub waiting_rows: usize,
}

/// What a request finds ahead of it: rows waiting (queued, or answered and
/// not yet taken), and the queue's batches running with their rows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ahead {
    pub rows: usize,
    pub running: usize,
    pub running_rows: usize,
}
