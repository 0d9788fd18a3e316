//! A queue's latency objective and the policy that keeps it, for an
//! objective of latency L at percentile p:
//!
//! ```text
//! deadline  d = arrival + L              (the kernel's receive stamp, else submission; set once)
//! plan(b)   = the p-quantile of the last 128 warm runs of b's power-of-two size; a size not
//!             measured: on the line through the two nearest smaller ones, else the nearer's
//! cap       = the largest b up to which no plan from sizes with runs enough for p (their
//!             own, or on the line through two) passes L/2; changed at most once per CAP_HOLD
//! ahead     = while the running batches hold every thread, until the last is planned to
//!             end; then ⌈(waiting + rows) / cap / threads⌉ × plan(cap)
//! admit     = on time iff now + ahead ≤ d − m
//! margin m  = +L/64·(1−p) per request admitted on time answered past d or dropped,
//!             −L/64·p per one answered by d; within 0 and min(L/4, L − plan(1))
//! late      = reject: refused; serve: on the late lane, due by d + L, where no on-time
//!             row waits or now + ahead ≤ d + L, else refused; either way, one whose run
//!             alone outlasts L on an idle queue runs
//! drop      = on time: when taken, if now + plan(batch) > d;
//!             late: once d + L has passed, by the batch threads' timer
//! ```
//!
//! Late batches run only where no on-time batch waits, at most the cap in
//! rows: an on-time request that arrives as one starts waits at most its
//! plan, half the objective, and has the other half for a batch of its own.
//! An on-time batch that leaves none waiting takes late rows into the room
//! it has while its plan still meets every deadline in it less the margin.
//!
//! Guaranteed, and asserted on a simulated clock (`tests`), each against a
//! deliberately broken controller that fails it:
//! - G1: with runs within their plans and nothing outside them, no request
//!   admitted on time once every size it runs was measured misses its
//!   deadline (answered late, or dropped unrun).
//! - G5: no late request runs while an on-time batch waits.
//! - G8: at a steady load the cap changes at most once per [`CAP_HOLD`].
//!
//! Free of threads and clocks: every input carries its time.

use std::time::{Duration, Instant};

use margin::Margin;
use runs::RunTimes;

pub mod lanes;
mod margin;
mod plan;
mod runs;
mod terms;

use lanes::Lanes;
pub use plan::Running;
pub use terms::{Admission, Late, LateAction, Objective};

/// The cap changes at most this often: a steady load sees a steady batch size.
const CAP_HOLD: Duration = Duration::from_secs(1);

/// A controller broken on purpose, to show that a guarantee's test can fail.
#[cfg(test)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fault {
    /// Every request is on time.
    AdmitAll,
    /// The late lane is taken before the on-time one.
    LateFirst,
    /// The cap flips between the largest batch and half of it on every run.
    FlippingCap,
}

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
    #[cfg(test)]
    pub fault: Option<Fault>,
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
            // Until a size has runs enough to choose by: the sizes warm-up ran.
            cap: max_batch.min(super::params::UNLISTED_WARMUP_LIMIT),
            cap_changed: None,
            margin: Margin::default(),
            #[cfg(test)]
            fault: None,
        }
    }

    /// The largest batch the queue forms.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// How far short of its deadline a request is planned to be let in, in
    /// seconds.
    pub fn margin(&self) -> f64 {
        self.margin.seconds()
    }

    /// A batch of `rows` rows (padding included) ran in `run`, ending at `now`.
    pub fn ran(&mut self, rows: usize, run: Duration, now: Instant) {
        self.runs.record(rows, run.as_secs_f64());
        #[cfg(test)]
        if self.fault == Some(Fault::FlippingCap) {
            self.cap = if self.cap == self.max_batch {
                self.max_batch / 2
            } else {
                self.max_batch
            };
            return;
        }
        if self.cap_changed.is_some_and(|changed| now < changed + CAP_HOLD) {
            return;
        }
        let Some(cap) = self.fitting_cap() else { return };
        if cap != self.cap {
            self.cap = cap;
            self.cap_changed = Some(now);
        }
    }

    /// A request admitted on time had its answer taken past its deadline
    /// (`late`) or by it.
    pub fn answered(&mut self, late: bool) {
        self.learn(u32::from(late), u32::from(!late));
    }

    /// `count` requests admitted on time were dropped unrun.
    pub fn dropped(&mut self, count: u32) {
        self.learn(count, 0);
    }

    fn learn(&mut self, above: u32, within: u32) {
        let allowed = (1.0 - self.objective.percentile / 100.0).max(0.0);
        let objective = self.objective.latency.as_secs_f64();
        // At most what still admits a request that finds the queue idle:
        // answers keep coming, and with them what brings the margin down.
        let most = (margin::MOST * objective).min(objective - self.runs.planned(1).unwrap_or(0.0));
        self.margin.learn(above, within, objective, allowed, most.max(0.0));
    }

    /// The run planned for a batch of `rows`; `None` before any was measured.
    pub fn planned_run(&self, rows: usize) -> Option<Duration> {
        self.runs.planned(rows).map(seconds)
    }

    /// Whether a request due by `deadline` is on time in a batch planned
    /// to end at `end`: by its deadline less the margin.
    pub fn meets(&self, end: Instant, deadline: Instant) -> bool {
        end.checked_add(seconds(self.margin.seconds()))
            .is_some_and(|end| end <= deadline)
    }

    /// The verdict on a request of `rows` rows due by `deadline`, at `now`,
    /// behind the on-time rows of `lanes` and the batches `running`. Before
    /// any run is measured only the time already past counts.
    pub fn admit<R>(
        &self,
        rows: usize,
        deadline: Instant,
        now: Instant,
        lanes: &Lanes<R>,
        running: &[Running],
    ) -> Admission {
        #[cfg(test)]
        if self.fault == Some(Fault::AdmitAll) {
            return Admission::OnTime;
        }
        let waiting = lanes.on_time.rows();
        let estimate = plan::ahead(self, (rows, waiting), now, running).unwrap_or_default();
        let end = now + estimate;
        if self.meets(end, deadline) {
            return Admission::OnTime;
        }
        let arrived = deadline.checked_sub(self.objective.latency).unwrap_or(now);
        let late = Late {
            estimate,
            waited: now.saturating_duration_since(arrived),
            waiting_rows: waiting,
        };
        let due = deadline + self.objective.latency;
        let idle = waiting == 0 && running.len() < self.parallel;
        match self.late_action {
            // Late work is served where no on-time work waits, or within
            // the objective once more past its deadline, and due by then.
            LateAction::Serve if waiting == 0 || end <= due => Admission::Delay { late, due },
            // Where the queue is idle and the run alone takes longer than the
            // objective, refusing would make no one faster: it runs, as late work.
            _ if idle && estimate > self.objective.latency => Admission::Delay { late, due: end },
            _ => Admission::Refuse(late),
        }
    }

    /// The cap: the largest size up to which no settled plan (runs enough
    /// to tell the percentile, of the size or on the line through two
    /// sizes) passes half the objective; a size with no settled plan does
    /// not hold it back, so that sizes the cap would keep out are measured
    /// before they are judged (admission plans every batch it grows, so an
    /// unjudged size is never planned past a deadline). `None` before the
    /// smallest size is settled.
    fn fitting_cap(&self) -> Option<usize> {
        let half = self.objective.latency.as_secs_f64() / 2.0;
        self.runs.settled(1)?;
        let mut sizes = std::iter::successors(Some(1), |&size| {
            (size < self.max_batch).then(|| (size * 2).min(self.max_batch))
        });
        let fits = |size: &usize| self.runs.settled(*size).is_none_or(|run| run <= half);
        Some(sizes.by_ref().take_while(fits).last().unwrap_or(1))
    }
}

fn seconds(seconds: f64) -> Duration {
    Duration::try_from_secs_f64(seconds).unwrap_or(Duration::MAX)
}

#[cfg(test)]
mod tests;
