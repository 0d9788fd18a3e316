//! What a simulated trace is made of (the policy, the arrivals, the
//! model's runs, what happens outside them) and what it counts.

use std::time::Duration;

use super::super::{Fault, LateAction};

/// What decides batches and admissions.
#[derive(Clone, Copy, Debug)]
pub enum Policy {
    Objective(LateAction),
    /// A fixed cap and batch timeout, everyone let in (the queue's bound aside).
    Static {
        cap: usize,
        timeout: Duration,
    },
    /// A fixed cap, no wait to fill, and requests queued past `timeout` dropped (Triton's).
    QueueTimeout {
        cap: usize,
        timeout: Duration,
    },
}

#[derive(Clone, Copy, Debug)]
pub enum Arrivals {
    Poisson {
        rate: f64,
    },
    /// Poisson at `rate` for `on`, then nothing for `off`, over and over.
    OnOff {
        rate: f64,
        on: Duration,
        off: Duration,
    },
    /// `callers` each sending again as soon as answered, or `retry` after a refusal.
    Closed {
        callers: usize,
        retry: Duration,
    },
}

#[derive(Clone, Debug)]
pub struct Setup {
    /// Seeds the arrivals; the runs' noise has a stream of its own, so that
    /// every policy meets the same arrivals.
    pub seed: u64,
    pub objective: Duration,
    pub percentile: f64,
    pub threads: usize,
    pub max_batch: usize,
    /// run(b) = fixed + per_row × b, in seconds, times (1 + noise) where
    /// noise is exponential with mean `spread`; `tail` of the runs (a share)
    /// take `tail_factor` times as long.
    pub fixed: f64,
    pub per_row: f64,
    pub spread: f64,
    pub tail: f64,
    pub tail_factor: f64,
    /// Windows (start, length) in which a run does not end before the window does.
    pub stalls: Vec<(Duration, Duration)>,
    /// Every run cut to the controller's plan for its size.
    pub runs_within_plan: bool,
    /// Time between an answer and its caller having it (sockets, threads).
    pub outside: Duration,
    pub arrivals: Arrivals,
    pub length: Duration,
    pub policy: Policy,
    pub fault: Option<Fault>,
}

impl Setup {
    /// One thread, 64 rows at most, runs of 0.5 ms + 0.05 ms a row with a
    /// twentieth's skewed noise (exponential: a p99 23% above the mean), a
    /// 10 ms p99 objective, for 5 s.
    pub fn new(seed: u64, arrivals: Arrivals, policy: Policy) -> Setup {
        Setup {
            seed,
            objective: Duration::from_millis(10),
            percentile: 99.0,
            threads: 1,
            max_batch: 64,
            fixed: 0.000_5,
            per_row: 0.000_05,
            spread: 0.05,
            tail: 0.0,
            tail_factor: 1.0,
            stalls: Vec::new(),
            runs_within_plan: false,
            outside: Duration::ZERO,
            arrivals,
            length: Duration::from_secs(5),
            policy,
            fault: None,
        }
    }

    /// Requests a second runs of the largest batch keep up with (mean noise included).
    pub fn capacity(&self) -> f64 {
        let noise = (1.0 + self.spread) * (1.0 + self.tail * (self.tail_factor - 1.0));
        let run = (self.fixed + self.per_row * self.max_batch as f64) * noise;
        self.threads as f64 * self.max_batch as f64 / run
    }
}

#[derive(Debug, Default)]
pub struct Outcome {
    pub offered: u64,
    pub answered: u64,
    /// Answered within the objective.
    pub good: u64,
    pub refused: u64,
    /// Put on the late lane; batches run, and of them with late rows.
    pub delayed: u64,
    pub batches: u64,
    pub late_batches: u64,
    /// Taken out of their batch as late, or past the queue timeout.
    pub expired: u64,
    /// Admitted on time against measured plans; of them, missed their
    /// deadline (answered past it, dropped unrun, or still queued past it
    /// at the end), and of those, admitted once every size was measured.
    pub admitted: u64,
    pub missed: u64,
    pub missed_warm: u64,
    /// Still queued or running when the trace ended.
    pub left: u64,
    /// Late answers of on-time requests in the second half, of all answered there.
    pub late_second_half: u64,
    pub answered_second_half: u64,
    /// Rows run, and rows run for requests answered past the objective.
    pub rows_run: u64,
    pub rows_run_late: u64,
    /// A late batch ran while an on-time batch waited.
    pub late_before_on_time: u64,
    /// Latencies of answered requests, seconds.
    pub latencies: Vec<f64>,
    /// When the cap changed (after its first choice), seconds.
    pub cap_changes: Vec<f64>,
    pub seconds: f64,
}

impl Outcome {
    pub fn goodput(&self) -> f64 {
        self.good as f64 / self.seconds
    }

    pub fn throughput(&self) -> f64 {
        self.answered as f64 / self.seconds
    }

    pub fn p99(&self) -> f64 {
        let mut sorted = self.latencies.clone();
        sorted.sort_by(f64::total_cmp);
        sorted
            .get((sorted.len() * 99 / 100).min(sorted.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0.0)
    }

    pub fn late_run_share(&self) -> f64 {
        self.rows_run_late as f64 / self.rows_run.max(1) as f64
    }
}
