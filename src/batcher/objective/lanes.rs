//! A queue's two lanes and what leaves them. On-time requests queue in
//! arrival order, which under one objective is deadline order; requests
//! predicted late queue on the late lane, due one objective past their
//! deadlines, which runs only while no on-time batch waits. When a batch
//! thread takes a batch, the on-time requests in it that its planned run
//! would finish past their deadlines, and those that waited past a queue
//! timeout (Triton's), are taken out and answered
//! at once: a wasted run would delay everyone behind them. The batch is not
//! shrunk for them; it runs with the rest. Late requests whose due has
//! passed are taken out by the batch threads' timer, whatever the on-time
//! lane holds.

use std::time::{Duration, Instant};

use super::Controller;
use crate::batcher::queue::{drain_where, Batch, Queue, Task};

/// Why a request left its batch unrun.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Expired {
    /// Its batch's planned run (`run`) ends past its deadline, or, late,
    /// its due passed before it ran.
    Deadline { run: Duration },
    /// It waited longer than the queue timeout.
    QueueTimeout,
}

/// A batch taken to run (none: only requests taken out), the requests taken
/// out, how many of those were on time, and the rows taken off the late lane.
pub struct Taken<R> {
    pub batch: Option<Batch<R>>,
    pub expired: Vec<(Task<R>, Expired)>,
    pub on_time_expired: usize,
    pub late_rows: usize,
}

pub struct Lanes<R> {
    pub on_time: Queue<R>,
    pub late: Queue<R>,
}

impl<R> Lanes<R> {
    pub fn new(on_time: Queue<R>) -> Lanes<R> {
        let late = Queue::new(on_time.params().clone(), on_time.merges());
        Lanes { on_time, late }
    }

    /// The next batch to run at `now`: the on-time lane's ready batch, else,
    /// with no on-time batch waiting at all, the late lane's. An on-time
    /// batch that leaves no on-time batch waiting takes late requests into
    /// the rows it has to spare, up to the cap, as far as its planned run
    /// still meets every deadline in it. Before either, late requests whose
    /// due has passed are taken out.
    pub fn take(&mut self, now: Instant, controller: Option<&Controller>, queue_timeout: Duration) -> Option<Taken<R>> {
        let mut expired = self.expire_passed(now, controller, queue_timeout);
        #[cfg(test)]
        let late_first = controller.is_some_and(|c| c.fault == Some(super::Fault::LateFirst));
        #[cfg(not(test))]
        let late_first = false;
        let on_time_batch = match late_first && !self.late.is_empty() {
            true => None,
            false => self.on_time.pop_ready(now),
        };
        let mut taken = match on_time_batch {
            Some(batch) => self.on_time_batch(batch, now, controller, queue_timeout),
            None if self.on_time.is_empty() || late_first => self.late_batch(now, queue_timeout),
            None => None,
        }
        .unwrap_or(Taken {
            batch: None,
            expired: Vec::new(),
            on_time_expired: 0,
            late_rows: 0,
        });
        if taken.batch.is_none() && expired.is_empty() && taken.expired.is_empty() {
            return None;
        }
        expired.append(&mut taken.expired);
        taken.expired = expired;
        Some(taken)
    }

    /// An on-time batch taken: its requests past saving taken out, late
    /// rows let into its room.
    fn on_time_batch(
        &mut self,
        mut batch: Batch<R>,
        now: Instant,
        controller: Option<&Controller>,
        queue_timeout: Duration,
    ) -> Option<Taken<R>> {
        let run = controller.and_then(|c| c.planned_run(batch.rows));
        let why = |task: &Task<R>| match (task.deadline, run) {
            (Some(deadline), Some(run)) if now + run > deadline => Some(Expired::Deadline { run }),
            _ => waited_past(task, now, queue_timeout),
        };
        let (mut expired, on_time_expired) = drain_where(&mut batch.tasks, why);
        batch.recount();
        let mut late = 0;
        if let Some(controller) = controller.filter(|_| self.on_time.is_empty() && !self.late.is_empty()) {
            let fits = |rows| {
                let end = controller.planned_run(rows).map(|run| now + run);
                batch.tasks.is_empty()
                    || end
                        .zip(batch.due())
                        .is_some_and(|(end, due)| controller.meets(end, due))
            };
            let room = (1..=controller.cap().saturating_sub(batch.rows))
                .rev()
                .find(|&extra| !batch.runs_alone() && fits(batch.rows + extra));
            let joining = room.map(|extra| self.late.take_joining(&batch, extra));
            for task in joining.unwrap_or_default() {
                late += task.rows;
                match late_expired(&task, now, queue_timeout) {
                    Some(reason) => expired.push((task, reason)),
                    None => batch.tasks.push(task),
                }
            }
            batch.recount();
        }
        Some(Taken {
            batch: Some(batch),
            expired,
            on_time_expired,
            late_rows: late,
        })
    }

    /// A late batch taken: it runs however long its run.
    fn late_batch(&mut self, now: Instant, queue_timeout: Duration) -> Option<Taken<R>> {
        let mut batch = self.late.pop_ready(now)?;
        let (expired, _) = drain_where(&mut batch.tasks, |task| late_expired(task, now, queue_timeout));
        batch.recount();
        Some(Taken {
            late_rows: batch.rows + expired.iter().map(|(task, _)| task.rows).sum::<usize>(),
            batch: Some(batch),
            expired,
            on_time_expired: 0,
        })
    }

    /// The late requests at the front of the late lane whose due has passed
    /// (or that waited past the queue timeout).
    fn expire_passed(
        &mut self,
        now: Instant,
        controller: Option<&Controller>,
        queue_timeout: Duration,
    ) -> Vec<(Task<R>, Expired)> {
        if controller.is_none() && queue_timeout.is_zero() {
            return Vec::new();
        }
        self.late
            .take_front_where(|task| late_expired(task, now, queue_timeout))
    }

    pub fn is_empty(&self) -> bool {
        self.on_time.is_empty() && self.late.is_empty()
    }

    pub fn depth(&self) -> usize {
        self.on_time.depth() + self.late.depth()
    }

    /// When a batch thread should look again: the on-time lane's batch
    /// timeout, else the late lane's, and the late lane's earliest due.
    pub fn deadline(&self) -> Option<Instant> {
        let timeout = self.on_time.deadline().or_else(|| self.late.deadline());
        let due = self.late.planned_batches().next().and_then(|(_, due)| due);
        match (timeout, due) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// Whether a late request's due has passed, or it waited past the queue timeout.
fn late_expired<R>(task: &Task<R>, now: Instant, queue_timeout: Duration) -> Option<Expired> {
    match task.deadline {
        Some(due) if now > due => Some(Expired::Deadline { run: Duration::ZERO }),
        _ => waited_past(task, now, queue_timeout),
    }
}

/// Whether a request waited past `queue_timeout` (zero: none does).
pub fn waited_past<R>(task: &Task<R>, now: Instant, queue_timeout: Duration) -> Option<Expired> {
    let waited = now.saturating_duration_since(task.enqueued);
    (!queue_timeout.is_zero() && waited > queue_timeout).then_some(Expired::QueueTimeout)
}
