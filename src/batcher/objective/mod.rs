//! A queue's latency objective and the policy that keeps it. Every request
//! carries one deadline, set once: its arrival (the kernel's receive stamp,
//! else the time it was submitted) plus the objective. Runs are planned per
//! power-of-two batch size at the objective's percentile of that size's
//! recent warm runs, sizes not measured on the line through smaller ones
//! ([`runs`]). The cap is the largest batch whose plan, from sizes with runs
//! enough to tell their percentile, fits half the objective (a request may
//! wait behind one run and then take its own); it changes at most once per
//! [`CAP_HOLD`], and batches never wait to fill. A request is on time when
//! the time planned ahead of it (where the running batches hold every
//! thread, until the last is planned to end; then the rows waiting and its
//! own in full batches of the cap, as many at once as the queue runs) ends
//! by its deadline less a margin; it is checked before its body is read and
//! at enqueue, against the same deadline. One predicted late is refused
//! (`late_action: reject`) or queued on the late lane (`serve`, where no
//! on-time work waits or it is planned to end within a grace of the
//! objective once more past its deadline; and under either action one
//! whose run alone outlasts the objective on an idle queue), which runs only in capacity no on-time
//! request needs: when no on-time batch waits, and in the rows an on-time
//! batch has to spare while its planned run still meets every deadline in
//! it ([`lanes`]). When a thread takes a batch, requests its planned run
//! would finish past their deadlines (late ones: whose grace has passed)
//! are answered late at once. The margin is what the plans miss
//! outside the runs: answers taken past their deadlines raise it and ones
//! in time lower it, so that no more than 1 − percentile of them are late
//! ([`margin`]). Guaranteed, and asserted on a simulated clock (`tests`):
//! with runs within their plans and nothing outside them, no on-time request
//! finishes past its deadline; no late request runs while an on-time batch
//! waits; at a steady load the cap changes at most once per [`CAP_HOLD`].
//! Free of threads and clocks: every input carries its time.

use std::time::{Duration, Instant};

use margin::Margin;
use runs::RunTimes;

pub mod lanes;
mod margin;
mod runs;
mod terms;

pub use terms::{Admission, Late, LateAction, Objective};

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
    /// The queue's batches running now: an id, when each started, its rows.
    running: Vec<(u64, Instant, usize)>,
    next_run: u64,
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
            running: Vec::new(),
            next_run: 0,
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

    /// A batch of `rows` rows starts at `now`: the id it ends with.
    pub fn started(&mut self, rows: usize, now: Instant) -> u64 {
        self.next_run += 1;
        self.running.push((self.next_run, now, rows));
        self.next_run
    }

    /// The batch `run_id` ended without a run to learn from (it failed, or
    /// all its requests had gone); nothing when it was counted already.
    pub fn ended(&mut self, run_id: u64) {
        self.running.retain(|&(id, _, _)| id != run_id);
    }

    /// The batch `run_id` of `rows` rows (padding included) ran in `run`,
    /// ending at `now`.
    pub fn ran(&mut self, run_id: u64, rows: usize, run: Duration, now: Instant) {
        self.ended(run_id);
        self.runs.record(rows, run.as_secs_f64());
        if self.cap_changed.is_some_and(|changed| now < changed + CAP_HOLD) {
            return;
        }
        let Some(cap) = self.fitting_cap() else { return };
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

    /// The verdict on a request of `rows` rows due by `deadline`, behind
    /// `waiting` on-time rows (queued, or answered and not yet taken), at
    /// `now`. Before any run is measured only the time already past counts.
    pub fn admit(&self, rows: usize, waiting: usize, deadline: Instant, now: Instant) -> Admission {
        let estimate = self.planned_ahead(rows, waiting, now).unwrap_or(Duration::ZERO);
        let finish = now.checked_add(estimate.saturating_add(self.margin()));
        if finish.is_some_and(|finish| finish <= deadline) {
            return Admission::OnTime;
        }
        let arrived = deadline.checked_sub(self.objective.latency).unwrap_or(now);
        let late = Late {
            estimate,
            waited: now.saturating_duration_since(arrived),
            waiting_rows: waiting,
        };
        // Where the queue is idle and the run alone takes longer than the
        // objective, refusing would make no one faster: it runs, as late work.
        let idle = waiting == 0 && self.running.len() < self.parallel;
        // Late work is served where no on-time work waits, or within its
        // grace (the objective once more past its deadline).
        let within_grace = finish.is_some_and(|finish| finish <= deadline + self.objective.latency);
        match self.late_action {
            LateAction::Serve if waiting == 0 || within_grace => Admission::Delay(late),
            _ if idle && estimate > self.objective.latency => Admission::Delay(late),
            _ => Admission::Refuse(late),
        }
    }

    /// The run planned for a batch of `rows`; `None` before any was measured.
    pub fn planned_run(&self, rows: usize) -> Option<Duration> {
        self.runs.planned(rows).map(seconds)
    }

    /// The time a request of `rows` rows behind `waiting` rows is planned
    /// to take from `now`: where the running batches hold every thread the
    /// queue runs on, until the last is planned to end (from then every
    /// thread takes the next batch as it frees); then the batches of
    /// the cap the rows waiting and its own make, as many at once as the
    /// queue runs, each planned full (its own batch may fill behind it).
    /// `None` before any run was measured.
    fn planned_ahead(&self, rows: usize, waiting: usize, now: Instant) -> Option<Duration> {
        let mut total = Duration::ZERO;
        if self.running.len() >= self.parallel {
            let ends = self.running.iter().map(|&(_, started, rows)| {
                let run = self.planned_run(rows)?;
                Some(started.checked_add(run).unwrap_or(now).saturating_duration_since(now))
            });
            total += ends.collect::<Option<Vec<_>>>()?.into_iter().max()?;
        }
        let waves = (waiting + rows).div_ceil(self.cap).div_ceil(self.parallel);
        Some(total.saturating_add(seconds(self.runs.planned(self.cap)? * waves as f64)))
    }

    /// The largest batch whose settled plan fits half the objective (at
    /// least one row); `None` before any size has runs enough.
    fn fitting_cap(&self) -> Option<usize> {
        let half = self.objective.latency.as_secs_f64() / 2.0;
        self.runs.settled(1)?;
        let sizes = std::iter::successors(Some(1), |&size| {
            (size < self.max_batch).then(|| (size * 2).min(self.max_batch))
        });
        let fitting = sizes.filter(|&size| self.runs.settled(size).is_some_and(|run| run <= half));
        Some(fitting.last().unwrap_or(1))
    }
}

fn seconds(seconds: f64) -> Duration {
    Duration::try_from_secs_f64(seconds).unwrap_or(Duration::MAX)
}

#[cfg(test)]
mod tests;
