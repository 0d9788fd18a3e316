//! A queue's latency objective and the policy that keeps it. Every request
//! carries one deadline, set once: its arrival (the kernel's receive stamp,
//! else the time it was submitted) plus the objective. Runs are planned per
//! power-of-two batch size as the empirical quantile, at the objective's
//! percentile, of that size's recent warm runs ([`runs`]). Batches are capped
//! at the largest size whose planned run fits half the objective (a request
//! may wait behind one run and then take its own), chosen again at most
//! once per [`CAP_HOLD`], and never wait to fill: a free batch thread runs
//! what is queued, and batches grow behind running ones. A request is on
//! time when the runs planned ahead of it (the batches running, where they
//! hold every thread, then the rows queued and its own in batches of the
//! cap) end by its deadline less a margin; it is checked before its body is
//! read and again at enqueue, against the same deadline. One predicted late
//! is refused (`late_action: reject`), or (`serve`) refused only while
//! on-time rows wait and otherwise queued on a bounded late lane that runs
//! only while no on-time batch waits ([`lanes`]); so is one whose run alone
//! is longer than the objective on an idle queue, under either action. When a thread takes a
//! batch, requests its planned run would finish past their deadlines are
//! answered late at once. The margin is what the plans miss outside the
//! runs (sockets, the connections' threads): answers taken past their
//! deadlines raise it and ones in time lower it, so that 1 − percentile of
//! the answers are late ([`margin`]). Guaranteed, and asserted on a
//! simulated clock (`tests`): with runs within their plans and nothing
//! outside them, no on-time request finishes past its deadline; no late
//! request runs while an on-time batch waits; at a steady load the cap
//! changes at most once per [`CAP_HOLD`]. Free of threads and clocks: every
//! input carries its time.

use std::time::{Duration, Instant};

use margin::Margin;
use runs::RunTimes;

pub mod lanes;
mod margin;
mod runs;
mod terms;

pub use terms::{Admission, Ahead, Late, LateAction, Objective};

/// The cap changes at most this often: a steady load sees a steady batch size.
const CAP_HOLD: Duration = Duration::from_secs(1);

pub struct Controller {
    objective: Objective,
    late_action: LateAction,
    max_batch: usize,
    /// Batches of this queue that run at once.
    parallel: usize,
    runs: RunTimes,
    cap: usize,
    /// When the cap last changed.
    cap_changed: Option<Instant>,
    margin: Margin,
}

impl Controller {
    pub fn new(objective: Objective, late_action: LateAction, max_batch: usize, parallel: usize) -> Controller {
        let max_batch = max_batch.max(1);
        Controller {
            objective,
            late_action,
            max_batch,
            parallel: parallel.max(1),
            runs: RunTimes::new(max_batch, objective.percentile),
            cap: 1,
            cap_changed: None,
            margin: Margin::default(),
        }
    }

    /// The largest batch the queue forms.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// How far short of its deadline a request is planned to be let in.
    pub fn margin(&self) -> Duration {
        Duration::from_secs_f64(self.margin.seconds())
    }

    /// A batch of `rows` rows (padding included) ran in `run`, ending at `now`.
    pub fn ran(&mut self, rows: usize, run: Duration, now: Instant) {
        self.runs.record(rows, run.as_secs_f64());
        if self.cap_changed.is_some_and(|changed| now < changed + CAP_HOLD) {
            return;
        }
        let cap = self.fitting_cap();
        if cap != self.cap {
            self.cap = cap;
            self.cap_changed = Some(now);
        }
    }

    /// `late` on-time requests took their answers past their deadlines, and
    /// `on_time` did not.
    pub fn answered(&mut self, late: u32, on_time: u32) {
        let allowed = (1.0 - self.objective.percentile / 100.0).max(0.0);
        self.margin
            .answered(late, on_time, self.objective.latency.as_secs_f64(), allowed);
    }

    /// The verdict on a request of `rows` rows due by `deadline`, behind what
    /// it finds `ahead`, at `now`. Before any run is measured only the time
    /// already past counts.
    pub fn admit(&self, rows: usize, ahead: Ahead, deadline: Instant, now: Instant) -> Admission {
        let estimate = self.planned_ahead(rows, ahead).unwrap_or(Duration::ZERO);
        let finish = now.checked_add(estimate.saturating_add(self.margin()));
        if finish.is_some_and(|finish| finish <= deadline) {
            return Admission::OnTime;
        }
        let arrived = deadline.checked_sub(self.objective.latency).unwrap_or(now);
        let late = Late {
            estimate,
            waited: now.saturating_duration_since(arrived),
            waiting_rows: ahead.rows,
        };
        // Where the queue is idle and the run alone takes longer than the
        // objective, refusing would make no one faster: it runs, as late work.
        let idle = ahead.rows == 0 && ahead.running < self.parallel;
        match (self.late_action, ahead.rows) {
            (LateAction::Serve, 0) => Admission::Delay(late),
            _ if idle && estimate > self.objective.latency => Admission::Delay(late),
            _ => Admission::Refuse(late),
        }
    }

    /// The run planned for a batch of `rows`; `None` before any was measured.
    pub fn planned_run(&self, rows: usize) -> Option<Duration> {
        self.runs.planned(rows).map(seconds)
    }

    /// The runs one after another that a request of `rows` rows waits for
    /// and takes behind what it finds `ahead`: the batches running, where
    /// they hold every thread the queue runs on (one run at their mean
    /// size), then the batches of the cap the rows queued and its own make,
    /// as many at once as the queue runs, each planned full (its own batch
    /// may fill behind it). `None` before any run was measured.
    fn planned_ahead(&self, rows: usize, ahead: Ahead) -> Option<Duration> {
        let mut total = 0.0;
        if ahead.running >= self.parallel {
            total += self.runs.planned(ahead.running_rows.div_ceil(ahead.running).max(1))?;
        }
        let batches = (ahead.rows + rows).div_ceil(self.cap);
        total += self.runs.planned(self.cap)? * batches.div_ceil(self.parallel) as f64;
        Some(seconds(total))
    }

    /// The largest batch whose planned run fits half the objective (at
    /// least one row).
    fn fitting_cap(&self) -> usize {
        let half = self.objective.latency.as_secs_f64() / 2.0;
        let mut cap = 1;
        let mut size = 1;
        loop {
            if self.runs.planned(size).is_some_and(|run| run <= half) {
                cap = size;
            }
            if size >= self.max_batch {
                return cap;
            }
            size = (size * 2).min(self.max_batch);
        }
    }
}

fn seconds(seconds: f64) -> Duration {
    Duration::try_from_secs_f64(seconds).unwrap_or(Duration::MAX)
}

#[cfg(test)]
mod tests;
