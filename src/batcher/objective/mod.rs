//! A queue's latency objective and the controller that keeps it: from the
//! run times it measures per batch size and the rate requests arrive at, it
//! picks the largest batch whose run fits half the objective (a request may
//! wait behind one run and then take one; planned at the pace backlogs
//! clear, as the check below plans a batch ahead), how long a batch may
//! wait to fill (where several of the queue's batches run at once and
//! single runs fall behind: long enough for a batch that keeps up, not for
//! the largest), and refuses a request the queue ahead of it would make
//! late, planning the rows ahead as slower than their runs where backlogs
//! were seen to clear slower ([`clearing`]), for as long as refusing
//! shortens the waits ([`draining`]).
//! Free of threads and clocks: every input carries its time, so tests
//! drive it with a simulated one.

use std::time::{Duration, Instant};

use clearing::Clearing;
use draining::Draining;
use margin::Margin;

mod clearing;
mod draining;
mod margin;
mod terms;

pub use terms::{Ahead, Late, Objective, Steering};

/// Runs one after another: the sum of their mean times and of their
/// deviations' squares (independent runs' spreads add up as variances).
#[derive(Clone, Copy, Debug, Default)]
struct Runs {
    mean: f64,
    spread: f64,
}

impl Runs {
    fn add(&mut self, (mean, deviation): (f64, f64), count: usize) {
        self.mean += mean * count as f64;
        self.spread += deviation * deviation * count as f64;
    }
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
    /// Per power of two, whether a run of it was seen: the first pays
    /// TensorFlow's one-time costs for its shape and is not measured (warm-up
    /// runs each size once; a size no batch reached since would cap below it).
    seen: Vec<bool>,
    /// Mean seconds between arriving rows.
    row_gap: Option<f64>,
    last_arrival: Option<Instant>,
    /// How much longer than their runs backlogs were seen to take.
    clearing: Clearing,
    /// Whether refusing shortens the waits.
    draining: Draining,
    /// How far short of the objective a request is planned to be let in.
    margin: Margin,
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
            seen: vec![false; bucket(max_batch) + 1],
            row_gap: None,
            last_arrival: None,
            clearing: Clearing::default(),
            draining: Draining::default(),
            margin: Margin::default(),
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
        self.clearing.age(now, self.objective.latency);
    }

    /// A batch of `rows` rows (padding included) ran in `run`. Only run
    /// times steer: shrinking batches because requests were late would cut
    /// the throughput when the queue needs it most (lateness under load is
    /// queueing, and smaller batches queue longer).
    pub fn ran(&mut self, rows: usize, run: Duration) {
        let seconds = run.as_secs_f64();
        let size = bucket(rows.min(self.max_batch));
        if self
            .seen
            .get_mut(size)
            .is_some_and(|seen| !std::mem::replace(seen, true))
        {
            return;
        }
        if let Some(slot) = self.runs.get_mut(size) {
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

    /// A request of `rows` rows that queued behind a backlog of at least
    /// `cap` rows, the cap then (behind less, it mostly shared a batch with
    /// the rows ahead), took its answer at `now`, `spent` after: the queue
    /// learns how much longer than the runs it was planned to wait for and
    /// take (as [`Controller::check`] plans them) backlogs take to clear.
    pub fn taken(&mut self, found: Ahead, cap: usize, rows: usize, spent: Duration, now: Instant) {
        let planned = self.runs_ahead(cap, rows, found).map(|runs| runs.mean);
        if let Some(planned) = planned.filter(|&planned| planned > 0.0) {
            self.clearing.learn(spent.as_secs_f64() / planned, now);
        }
    }

    /// `late` requests let in took their answers past the objective, and
    /// `on_time` did not: the check's margin learns how far its plans fall short.
    pub fn answered(&mut self, late: u32, on_time: u32) {
        let allowed = (1.0 - self.objective.percentile / 100.0).max(0.0);
        self.margin.answered(late, on_time, self.budget(), allowed);
    }

    /// Whether the request would likely finish in time, as planned below,
    /// checked at `now`; let in while refusing was lately seen to shorten
    /// nothing (callers that come straight back after a refusal). The
    /// outcome teaches whether refusing shortens the waits ([`draining`]).
    pub fn check(&mut self, rows: usize, ahead: Ahead, waited: Duration, now: Instant) -> Result<(), Late> {
        let (verdict, planned) = self.judge(rows, ahead, waited);
        let refused = verdict.is_err() && self.draining.refusing(now);
        self.draining.checked(planned, refused, now, self.objective.latency);
        verdict.or_else(|late| if refused { Err(late) } else { Ok(()) })
    }

    /// The ratio backlogs are planned to clear at (at the percentile); `None` until taught.
    pub fn clearing_ratio(&self) -> Option<f64> {
        self.clearing.planned(self.objective.deviations())
    }

    /// How far short of the objective a request is planned to be let in.
    pub fn margin(&self) -> Duration {
        Duration::from_secs_f64(self.margin.seconds())
    }

    /// Whether the queue refuses requests it would make late at `now`.
    pub fn refusing(&self, now: Instant) -> bool {
        self.draining.refusing(now)
    }

    /// Whether a request of `rows` rows, behind what it finds `ahead`,
    /// would likely finish within the objective, counting the time it
    /// `waited` unread before the queue saw it. Rows answered whose callers
    /// have not yet taken their answers wait as if queued: they wait for
    /// the callers' threads. The runs ahead are planned at the objective's
    /// percentile, or at the percentile of how much longer than their runs
    /// backlogs took to clear where that is longer (where the callers'
    /// threads, not the runs, hold answers up). Without measurements it is
    /// let in, and so is a fresh one that finds the queue idle: nothing the
    /// server could refuse would make it faster. One that finds it idle
    /// after waiting past what its own run leaves is refused: the server
    /// has fallen behind its sockets, which no queue sees, and a refusal is
    /// the cheapest way to catch up. That takes a run that fits half the
    /// objective, as the cap does: with a longer one, a wait of a fraction
    /// of a millisecond would decide, and no wait is to blame for a run
    /// that overruns it alone. Planned to finish within the objective less
    /// the margin its answered requests taught ([`margin`]). With the time
    /// planned for it in all (its wait included; zero where nothing was
    /// planned).
    fn judge(&self, rows: usize, ahead: Ahead, waited: Duration) -> (Result<(), Late>, Duration) {
        let estimate = if ahead.rows == 0 && ahead.running < self.parallel {
            if waited.is_zero() {
                return (Ok(()), Duration::ZERO);
            }
            self.estimate(rows).filter(|&run| run <= self.budget() / 2.0)
        } else {
            let ratio = self.clearing_ratio();
            self.runs_ahead(self.steering.cap, rows, ahead)
                .map(|runs| self.planned(runs, ratio))
        };
        let Some(estimate) = estimate else {
            return (Ok(()), waited);
        };
        let estimate = Duration::try_from_secs_f64(estimate).unwrap_or(Duration::MAX);
        let planned = waited.saturating_add(estimate);
        if planned.as_secs_f64() <= self.budget() - self.margin.seconds() {
            return (Ok(()), planned);
        }
        let late = Late {
            estimate,
            waited,
            waiting_rows: ahead.rows,
        };
        (Err(late), planned)
    }

    /// The runs one after another that a request of `rows` rows waits for
    /// and takes behind what it finds `ahead`, at the sizes they run at:
    /// the batches running, where they hold every thread the queue runs on
    /// (one run at their mean size), then the batches of `cap` the rows
    /// ahead and its own make, as many at once as it runs, the last of them
    /// at the rows left over where they run alone (behind one row, a
    /// request takes a run of two, not of the cap). `None` before any run
    /// was measured.
    fn runs_ahead(&self, cap: usize, rows: usize, ahead: Ahead) -> Option<Runs> {
        let cap = cap.max(1);
        let mut runs = Runs::default();
        if ahead.running >= self.parallel {
            let size = ahead.running_rows.div_ceil(ahead.running).max(1);
            runs.add(self.measured(size)?, 1);
        }
        let queued = ahead.rows + rows;
        let (full, left) = (queued / cap, queued % cap);
        runs.add(self.measured(cap)?, full / self.parallel);
        if full % self.parallel > 0 {
            // A last wave short of full batches, with a thread to spare
            // for any rows left over.
            runs.add(self.measured(cap)?, 1);
        } else if left > 0 {
            runs.add(self.measured(left)?, 1);
        }
        Some(runs)
    }

    /// How long `runs` are planned to take: at the objective's percentile,
    /// or at the percentile of how much longer than their runs backlogs
    /// took to clear (`ratio`) where that is longer: where more than the
    /// runs stands between a row and its answer (its connection's thread,
    /// on a core the batches share), how backlogs cleared says so.
    fn planned(&self, runs: Runs, ratio: Option<f64>) -> f64 {
        let at_percentile = runs.mean + self.objective.deviations() * runs.spread.sqrt();
        ratio.map_or(at_percentile, |ratio| at_percentile.max(runs.mean * ratio))
    }

    fn budget(&self) -> f64 {
        self.objective.latency.as_secs_f64()
    }

    /// The run time planned for a batch of `rows`, at the objective's
    /// percentile.
    fn estimate(&self, rows: usize) -> Option<f64> {
        let (mean, deviation) = self.measured(rows)?;
        Some(mean + self.objective.deviations() * deviation)
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

    /// The largest batch whose run fits half the budget, planned as the
    /// check plans a batch ahead (slower where backlogs cleared slower than
    /// their runs: else a request behind one batch of the cap would be
    /// refused), and the wait that fills it when the queue's batches run
    /// side by side and its threads are busy enough to need batches at all.
    fn steer(&mut self) {
        let half = self.budget() / 2.0;
        let ratio = self.clearing_ratio();
        let mut cap = 1;
        let mut size = 1;
        loop {
            let planned = self.measured(size).map(|(mean, deviation)| {
                let run = Runs {
                    mean,
                    spread: deviation * deviation,
                };
                self.planned(run, ratio)
            });
            if planned.is_some_and(|planned| planned <= half) {
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
        // behind running ones, and waiting would only add latency. So they
        // do on a queue that runs one batch at a time whatever the load: the
        // rows that arrive during a run make the next batch, as large as the
        // rate brings, so a wait only delays it. Batches running side by side
        // split those rows between them, and each thread frees sooner than a
        // run: there a wait gathers what one thread alone would have.
        let one = self.runs[0].map_or(0.0, |(mean, _)| mean);
        let timeout = match self.row_gap {
            Some(gap) if self.parallel > 1 && gap > 0.0 && one / gap >= self.parallel as f64 => {
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
    /// [`KEEP_UP_SHARE`] of the time rows `gap` apart take to bring one
    /// batch of it for each thread: batches of it keep up with arrivals with
    /// room to spare. `cap` when none does.
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
mod tests;
