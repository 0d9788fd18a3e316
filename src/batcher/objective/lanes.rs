//! A queue's two lanes and what leaves them. On-time requests queue in
//! arrival order, which under one objective is deadline order; requests
//! predicted late queue on the late lane, which runs only while no on-time
//! batch waits. When a batch thread takes a batch, the requests in it that
//! its planned run would finish past their deadlines (late ones: whose grace
//! past their deadlines has passed), and those that waited past a queue timeout
//! (Triton's), are taken out and answered at once: a wasted run would delay
//! everyone behind them. The batch is not shrunk for them; it runs with the
//! rest.

use std::time::{Duration, Instant};

use crate::batcher::queue::{Batch, Queue, Task};

/// Why a request left its batch unrun.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Expired {
    /// Its batch's planned run (`run`) ends past its deadline.
    Deadline { run: Duration },
    /// It waited longer than the queue timeout.
    QueueTimeout,
}

/// A batch taken to run, the requests taken out of it, and the rows taken
/// off the late lane (in the batch, or expired).
pub struct Taken<R> {
    pub batch: Batch<R>,
    pub expired: Vec<(Task<R>, Expired)>,
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
    /// with no on-time batch waiting at all, the late lane's. `planned`
    /// gives a batch's planned run by its rows (None: not planned). An
    /// on-time batch that leaves no on-time batch waiting takes late
    /// requests into the rows it has to spare, as far as its planned run
    /// still ends by every deadline in it and `cap` allows. Late requests
    /// are given `grace` past their deadlines (the objective once more):
    /// those still queued when it has passed are taken out.
    pub fn take(
        &mut self,
        now: Instant,
        planned: impl Fn(usize) -> Option<Duration>,
        queue_timeout: Duration,
        grace: Duration,
        cap: usize,
    ) -> Option<Taken<R>> {
        if let Some(mut batch) = self.on_time.pop_ready(now) {
            let run = planned(batch.rows);
            let mut expired = expire(&mut batch, now, run, Duration::ZERO, queue_timeout);
            let mut late = 0;
            if self.on_time.is_empty() && !self.late.is_empty() && !batch.runs_alone() {
                let due = batch.tasks.iter().filter_map(|task| task.deadline).min();
                let fits = |rows| due.zip(planned(rows)).is_some_and(|(due, run)| now + run <= due);
                let room = (1..=cap.saturating_sub(batch.rows))
                    .rev()
                    .find(|&extra| fits(batch.rows + extra));
                let joining = room.map(|extra| self.late.take_joining(&batch, extra));
                for task in joining.unwrap_or_default() {
                    late += task.rows;
                    match why_expired(&task, now, Some(Duration::ZERO), grace, queue_timeout) {
                        Some(reason) => expired.push((task, reason)),
                        None => {
                            batch.rows += task.rows;
                            batch.tasks.push(task);
                        }
                    }
                }
            }
            return Some(Taken {
                batch,
                expired,
                late_rows: late,
            });
        }
        if !self.on_time.is_empty() {
            return None;
        }
        let mut batch = self.late.pop_ready(now)?;
        // Late work runs however long its run: only a grace already passed drops it.
        let expired = expire(&mut batch, now, Some(Duration::ZERO), grace, queue_timeout);
        Some(Taken {
            late_rows: batch.rows + expired.iter().map(|(task, _)| task.rows).sum::<usize>(),
            batch,
            expired,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.on_time.is_empty() && self.late.is_empty()
    }

    pub fn depth(&self) -> usize {
        self.on_time.depth() + self.late.depth()
    }

    /// When a batch is due: the on-time lane's, else the late lane's.
    pub fn deadline(&self) -> Option<Instant> {
        self.on_time.deadline().or_else(|| self.late.deadline())
    }
}

/// Takes out of `batch` the requests that its planned `run` from `now`
/// would answer more than `grace` past their deadlines, and those that
/// waited past `queue_timeout` (zero: none).
pub fn expire<R>(
    batch: &mut Batch<R>,
    now: Instant,
    run: Option<Duration>,
    grace: Duration,
    queue_timeout: Duration,
) -> Vec<(Task<R>, Expired)> {
    let why = |task: &Task<R>| why_expired(task, now, run, grace, queue_timeout);
    if !batch.tasks.iter().any(|task| why(task).is_some()) {
        return Vec::new();
    }
    let (mut expired, mut kept) = (Vec::new(), Vec::with_capacity(batch.tasks.len()));
    for task in batch.tasks.drain(..) {
        match why(&task) {
            Some(reason) => expired.push((task, reason)),
            None => kept.push(task),
        }
    }
    batch.rows = kept.iter().map(|task| task.rows).sum();
    batch.tasks = kept;
    expired
}

fn why_expired<R>(
    task: &Task<R>,
    now: Instant,
    run: Option<Duration>,
    grace: Duration,
    queue_timeout: Duration,
) -> Option<Expired> {
    match (task.deadline, run) {
        (Some(deadline), Some(run)) if now + run > deadline + grace => Some(Expired::Deadline { run }),
        _ if !queue_timeout.is_zero() && now.saturating_duration_since(task.enqueued) > queue_timeout => {
            Some(Expired::QueueTimeout)
        }
        _ => None,
    }
}
