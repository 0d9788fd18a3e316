//! A queue's latency objective and the controller that keeps it: from the
//! run times it measures per batch size and the rate requests arrive at, it
//! picks the largest batch whose run fits half the objective (a request may
//! wait behind one run and then take one), how long a batch may wait to fill
//! (when single runs fall behind: long enough for a batch that keeps up, not
//! for the largest), and refuses a request the queue ahead of it would make late. Free of
//! threads and clocks: every input carries its time, so tests drive it with
//! a simulated one.

use std::time::{Duration, Instant};

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
    fn deviations(&self) -> f64 {
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

/// Why a request was refused: the time it would likely have taken.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Late {
    pub estimate: Duration,
    pub queued_rows: usize,
}

/// Each new run or arrival weighs this much in the running means.
const RUN_WEIGHT: f64 = 1.0 / 8.0;
const ARRIVAL_WEIGHT: f64 = 1.0 / 16.0;

pub struct Controller {
    objective: Objective,
    max_batch: usize,
    /// Batches of this queue that run at once.
    parallel: usize,
    /// Per power of two (index: log2 of the rows run, rounded up): the mean
    /// run time and its mean absolute deviation, in seconds.
    runs: Vec<Option<(f64, f64)>>,
    /// Mean seconds between arriving rows.
    row_gap: Option<f64>,
    last_arrival: Option<Instant>,
    steering: Steering,
}

impl Controller {
    pub fn new(objective: Objective, max_batch: usize, parallel: usize) -> Controller {
        let max_batch = max_batch.max(1);
        Controller {
            objective,
            max_batch,
            parallel: parallel.max(1),
            runs: vec![None; bucket(max_batch) + 1],
            row_gap: None,
            last_arrival: None,
            steering: Steering {
                cap: 1,
                timeout: Duration::ZERO,
            },
        }
    }

    pub fn steering(&self) -> Steering {
        self.steering
    }

    /// A request of `rows` rows arrives at `now`.
    pub fn arrived(&mut self, rows: usize, now: Instant) {
        if let Some(last) = self.last_arrival {
            let gap = now.saturating_duration_since(last).as_secs_f64() / rows.max(1) as f64;
            self.row_gap = Some(match self.row_gap {
                Some(mean) => mean + (gap - mean) * ARRIVAL_WEIGHT,
                None => gap,
            });
        }
        self.last_arrival = Some(now);
    }

    /// A batch of `rows` rows (padding included) ran in `run`. Only run
    /// times steer: shrinking batches because requests were late would cut
    /// the throughput when the queue needs it most (lateness under load is
    /// queueing, and smaller batches queue longer).
    pub fn ran(&mut self, rows: usize, run: Duration) {
        let seconds = run.as_secs_f64();
        if let Some(slot) = self.runs.get_mut(bucket(rows.min(self.max_batch))) {
            *slot = Some(match *slot {
                Some((mean, deviation)) => (
                    mean + (seconds - mean) * RUN_WEIGHT,
                    deviation + ((seconds - mean).abs() - deviation) * RUN_WEIGHT,
                ),
                None => (seconds, 0.0),
            });
        }
        self.steer();
    }

    /// Whether a request of `rows` rows, behind `queued_rows` rows and with
    /// `running` of this queue's batches running, would likely finish within
    /// the objective. Without measurements it is let in, and so is one that
    /// finds the queue idle: nothing the server could refuse would make it
    /// faster.
    pub fn admits(&self, rows: usize, queued_rows: usize, running: usize) -> Result<(), Late> {
        if queued_rows == 0 && running < self.parallel {
            return Ok(());
        }
        let cap = self.steering.cap;
        let batches = (queued_rows + rows).div_ceil(cap);
        let waves = batches.div_ceil(self.parallel);
        let behind_running = usize::from(running >= self.parallel);
        let Some(estimate) = self.estimate_runs(cap, behind_running + waves) else {
            return Ok(());
        };
        if estimate <= self.budget() {
            return Ok(());
        }
        Err(Late {
            estimate: Duration::from_secs_f64(estimate),
            queued_rows,
        })
    }

    fn budget(&self) -> f64 {
        self.objective.latency.as_secs_f64()
    }

    /// The run time planned for a batch of `rows`, at the objective's
    /// percentile.
    fn estimate(&self, rows: usize) -> Option<f64> {
        self.estimate_runs(rows, 1)
    }

    /// The time `count` runs of `rows` take one after another, at the
    /// objective's percentile: their means add up, but their spreads mostly
    /// cancel (as √count, for independent runs), so a queue several batches
    /// deep is not planned as if every batch were slow.
    fn estimate_runs(&self, rows: usize, count: usize) -> Option<f64> {
        let (mean, deviation) = self.measured(rows)?;
        let count = count as f64;
        Some(count * mean + self.objective.deviations() * deviation * count.sqrt())
    }

    /// The mean run time of a batch of `rows` and its deviation: measured at
    /// its power of two, else scaled linearly from the nearest smaller one
    /// measured (runs grow at most linearly with rows), else the nearest
    /// larger one's.
    fn measured(&self, rows: usize) -> Option<(f64, f64)> {
        let target = bucket(rows.min(self.max_batch));
        if let Some(Some(run)) = self.runs.get(target) {
            return Some(*run);
        }
        let below = (0..target).rev().find_map(|b| self.runs[b].map(|run| (b, run)));
        if let Some((b, (mean, deviation))) = below {
            let scale = (1u64 << (target - b)) as f64;
            return Some((mean * scale, deviation * scale));
        }
        self.runs.iter().skip(target + 1).flatten().next().copied()
    }

    /// The largest batch whose run fits half the budget, and the wait that
    /// fills it when the queue is busy enough to need batches at all.
    fn steer(&mut self) {
        let half = self.budget() / 2.0;
        let mut cap = 1;
        let mut size = 1;
        loop {
            if self.estimate(size).is_some_and(|run| run <= half) {
                cap = size;
            }
            if size >= self.max_batch {
                break;
            }
            size = (size * 2).min(self.max_batch);
        }
        let run = self.estimate(cap).unwrap_or(0.0);
        // Runs of one request, as measured (not planned from larger ones: a
        // busy queue rarely runs one, and a larger batch's time would make
        // it look slow): while they keep up, batches form by themselves
        // behind running ones, and waiting would only add latency.
        let one = self.runs[0].map_or(0.0, |(mean, _)| mean);
        let timeout = match self.row_gap {
            Some(gap) if gap > 0.0 && one / gap >= self.parallel as f64 => {
                // Waiting for the cap would spend the objective on every
                // request; a batch that keeps up is enough.
                let fill = self.keeping_up(gap, cap) as f64 * gap;
                fill.min(self.budget() - 2.0 * run).max(0.0)
            }
            _ => 0.0,
        };
        self.steering = Steering {
            cap,
            timeout: Duration::from_secs_f64(timeout),
        };
    }

    /// The smallest batch, up to `cap`, whose planned run takes at most
    /// [`KEEP_UP_SHARE`] of the time its rows take to arrive `gap` apart:
    /// batches of it keep up with arrivals with room to spare. `cap` when
    /// none does.
    fn keeping_up(&self, gap: f64, cap: usize) -> usize {
        let mut size = 1;
        while size < cap {
            let arriving = size as f64 * gap * self.parallel as f64;
            if self.estimate(size).is_some_and(|run| run <= KEEP_UP_SHARE * arriving) {
                return size;
            }
            size *= 2;
        }
        cap
    }
}

/// The share of their time a queue's batch threads may spend running while
/// it keeps up: the rest of the request path (reading, decoding, answering)
/// needs the same cores, and on a small model costs as much as the run.
const KEEP_UP_SHARE: f64 = 0.5;

/// The power of two `rows` rounds up to, as an index: 1 → 0, 2 → 1, 3..4 → 2.
fn bucket(rows: usize) -> usize {
    rows.max(1).next_power_of_two().trailing_zeros() as usize
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn the_cap_is_the_largest_batch_whose_run_fits_half_the_objective() {
        let mut controller = Controller::new(objective(20), 128, 1);
        assert_eq!(controller.steering().cap, 1, "nothing measured yet");
        // 1 ms + 0.25 ms per row: 32 rows take 9 ms, 64 take 17.
        runs(&mut controller, 1.0, 0.25, &[1, 2, 4, 8, 16, 32, 64]);
        assert_eq!(controller.steering().cap, 32);
        let mut tight = Controller::new(objective(5), 128, 1);
        runs(&mut tight, 1.0, 0.25, &[1, 2, 4, 8, 16, 32, 64]);
        assert_eq!(tight.steering().cap, 4, "4 rows take 2 ms, 8 take 3");
    }

    #[test]
    fn unmeasured_sizes_are_planned_linearly_so_the_cap_grows_as_it_learns() {
        let mut controller = Controller::new(objective(21), 128, 1);
        runs(&mut controller, 1.0, 0.25, &[1]);
        // 1.25 ms at 1 row, so 8 rows are planned at 10 ms: the cap.
        assert_eq!(controller.steering().cap, 8);
        runs(&mut controller, 1.0, 0.25, &[8]);
        // 8 rows measured at 3 ms: 16 planned at 6, 32 at 12.
        assert_eq!(controller.steering().cap, 16);
        runs(&mut controller, 1.0, 0.25, &[16]);
        assert_eq!(controller.steering().cap, 32);
    }

    #[test]
    fn a_model_that_slows_down_gets_smaller_batches() {
        let mut controller = Controller::new(objective(20), 128, 1);
        runs(&mut controller, 1.0, 0.25, &[1, 2, 4, 8, 16, 32, 64]);
        assert_eq!(controller.steering().cap, 32);
        // Now four times slower (another tenant on the cores): 4 rows take
        // 8 ms, 8 take 12.
        for _ in 0..3 {
            runs(&mut controller, 4.0, 1.0, &[1, 2, 4, 8, 16, 32, 64]);
        }
        assert_eq!(controller.steering().cap, 4);
    }

    #[test]
    fn batches_wait_to_fill_only_when_single_runs_cannot_keep_up() {
        let mut controller = Controller::new(objective(20), 128, 1);
        let start = Instant::now();
        // One row every 10 ms against 1.25 ms runs: no waiting.
        for i in 0..50 {
            controller.arrived(1, start + Duration::from_millis(10 * i));
        }
        runs(&mut controller, 1.0, 0.25, &[1, 2, 4, 8, 16, 32, 64]);
        assert_eq!(controller.steering().timeout, Duration::ZERO);
        // One row every 0.5 ms: runs of one would fall behind.
        let later = start + Duration::from_secs(1);
        for i in 0..200 {
            controller.arrived(1, later + Duration::from_micros(500 * i));
        }
        runs(&mut controller, 1.0, 0.25, &[32]);
        let steering = controller.steering();
        assert_eq!(steering.cap, 32);
        // Filling 32 rows takes ~16 ms, but 20 - 2 × 9 leaves 2 ms.
        let timeout = steering.timeout.as_secs_f64() * 1000.0;
        assert!((1.5..=2.5).contains(&timeout), "{timeout} ms");
        // A queue that has only run large batches has no measured run of one:
        // it does not wait on a guess.
        let mut busy = Controller::new(objective(20), 128, 1);
        for i in 0..200 {
            busy.arrived(1, later + Duration::from_micros(500 * i));
        }
        runs(&mut busy, 1.0, 0.25, &[32]);
        assert_eq!(busy.steering().timeout, Duration::ZERO);
    }

    #[test]
    fn a_batch_waits_for_the_rows_that_keep_up_not_for_the_cap() {
        // 0.5 ms per run and 0.01 ms per row: 128 rows run in 1.8 ms, so
        // the cap is 128, but single runs fall behind one row every 0.25 ms.
        let mut controller = Controller::new(objective(20), 128, 1);
        let start = Instant::now();
        for i in 0..400 {
            controller.arrived(1, start + Duration::from_micros(250 * i));
        }
        runs(&mut controller, 0.5, 0.01, &[1, 2, 4, 8, 16, 32, 64, 128]);
        let steering = controller.steering();
        assert_eq!(steering.cap, 128);
        // 8 rows run in 0.58 ms, under half of the 2 ms they take to
        // arrive (4 rows: 0.54 of 1 ms): the wait fills 8, not 128 (32 ms,
        // which the objective would have cut to 16).
        let timeout = steering.timeout.as_secs_f64() * 1000.0;
        assert!((1.8..=2.2).contains(&timeout), "{timeout} ms");
        // Arrivals twice as fast: 16 rows keep up (0.66 of 2 ms; 8 rows:
        // 0.58 of 1 ms do not), filled in the same 2 ms.
        let later = start + Duration::from_secs(1);
        for i in 0..400 {
            controller.arrived(1, later + Duration::from_micros(125 * i));
        }
        runs(&mut controller, 0.5, 0.01, &[16]);
        let timeout = controller.steering().timeout.as_secs_f64() * 1000.0;
        assert!((1.8..=2.2).contains(&timeout), "{timeout} ms");
    }

    #[test]
    fn a_request_the_queue_would_make_late_is_refused() {
        let mut controller = Controller::new(objective(20), 128, 2);
        assert_eq!(controller.admits(1, 10_000, 2), Ok(()), "unmeasured: let in");
        runs(&mut controller, 1.0, 0.25, &[1, 2, 4, 8, 16, 32, 64]);
        assert_eq!(controller.steering().cap, 32);
        assert_eq!(controller.admits(1000, 0, 1), Ok(()), "an idle thread: let in");
        // Behind 40 rows with both threads free: 2 batches, one wave of 9 ms.
        assert_eq!(controller.admits(1, 40, 0), Ok(()));
        // Behind 40 rows with both threads busy: 9 + 9 ms.
        assert_eq!(controller.admits(1, 40, 2), Ok(()));
        // Behind 100 rows, both busy: 9 + 2 waves × 9 = 27 ms.
        let late = controller.admits(1, 100, 2).unwrap_err();
        assert_eq!(late.queued_rows, 100);
        assert!(late.estimate > Duration::from_millis(20), "{late:?}");
    }

    #[test]
    fn a_deep_queue_is_planned_at_the_percentile_of_its_runs_together() {
        let mut controller = Controller::new(objective(100), 8, 1);
        // Runs of 8 rows alternate 6 and 12 ms: mean 9, deviation 3, one
        // planned at 9 + 2.33 × 3 = 16 ms.
        for i in 0..100 {
            controller.ran(8, Duration::from_millis(if i % 2 == 0 { 6 } else { 12 }));
        }
        assert_eq!(controller.steering().cap, 8);
        // Behind a running batch and 40 rows: 7 runs, 7 × 9 + 2.33 × 3 × √7
        // = 81.5 ms (7 × 16 = 112 would refuse it).
        assert_eq!(controller.admits(1, 40, 1), Ok(()));
        // Behind 80 rows: 12 runs, 108 + 24 = 132 ms.
        let late = controller.admits(1, 80, 1).unwrap_err();
        let ms = late.estimate.as_secs_f64() * 1000.0;
        assert!((125.0..140.0).contains(&ms), "{ms} ms");
    }

    #[test]
    fn the_percentile_plans_for_the_spread_of_run_times() {
        let spread = |percentile: f64| {
            let mut controller = Controller::new(
                Objective {
                    latency: Duration::from_millis(20),
                    percentile,
                },
                128,
                1,
            );
            // Runs of 32 rows alternate 6 and 12 ms (mean 9, deviation 3).
            for i in 0..100 {
                let ms = if i % 2 == 0 { 6 } else { 12 };
                controller.ran(32, Duration::from_millis(ms));
            }
            controller.steering().cap
        };
        assert_eq!(spread(50.0), 32, "9 ms on average fits 10");
        assert!(spread(99.0) < 32, "9 + 2.33 × 3 ms does not");
    }
}
