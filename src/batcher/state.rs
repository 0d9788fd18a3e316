//! One queue's state, owned in one place and changed only by its events,
//! each under the batcher's lock: `submit` (a request's verdict, and its
//! tasks on the lane it says), `take` (a batch leaves the lanes and starts
//! running), `finish` (a batch ended, with the run it measured, if any) and
//! `answered` (an on-time request's caller took its answer, by its
//! deadline or not). The lanes, the latency controller and the one list of running
//! batches live here and nowhere else: the simulator in
//! `objective::tests` drives this same object.

use std::time::{Duration, Instant};

use super::objective::lanes::{Lanes, Taken};
use super::objective::{Admission, Controller, Late, Running};
use super::queue::{EnqueueError, Task};

/// Why a request was not queued.
#[derive(Debug)]
pub enum Refusal {
    Late(Late),
    Queue(EnqueueError),
}

pub struct QueueState<R> {
    pub lanes: Lanes<R>,
    controller: Option<Controller>,
    /// The batches running now, where they are counted: under a running
    /// limit or an objective.
    running: Vec<Running>,
    running_limit: Option<usize>,
    next_run: u64,
}

impl<R> QueueState<R> {
    pub fn new(lanes: Lanes<R>, controller: Option<Controller>, running_limit: Option<usize>) -> QueueState<R> {
        QueueState {
            lanes,
            controller,
            running: Vec::new(),
            running_limit: running_limit.map(|limit| limit.max(1)),
            next_run: 0,
        }
    }

    pub fn controller(&self) -> Option<&Controller> {
        self.controller.as_ref()
    }

    /// The verdict on `rows` rows due by `deadline` at `now`, were they
    /// queued now. On time without an objective.
    pub fn verdict(&self, rows: usize, deadline: Instant, now: Instant) -> Admission {
        match &self.controller {
            Some(controller) => controller.admit(rows, deadline, now, &self.lanes, &self.running),
            None => Admission::OnTime,
        }
    }

    /// A request's tasks (`rows` in all, due by `deadline`), given their
    /// verdict and queued on the lane it names (a late request's tasks due
    /// by the end planned for them there), or refused with them all.
    pub fn submit(
        &mut self,
        mut tasks: Vec<Task<R>>,
        rows: usize,
        deadline: Option<Instant>,
        now: Instant,
    ) -> Result<Admission, (Refusal, Vec<Task<R>>)> {
        let admission = match deadline {
            Some(deadline) => self.verdict(rows, deadline, now),
            None => Admission::OnTime,
        };
        let cap = self.controller.as_ref().map(Controller::cap);
        let lane = match admission {
            Admission::Refuse(late) => return Err((Refusal::Late(late), tasks)),
            Admission::OnTime => &mut self.lanes.on_time,
            Admission::Delay { due, .. } => {
                tasks.iter_mut().for_each(|task| task.deadline = Some(due));
                &mut self.lanes.late
            }
        };
        if let Some(cap) = cap {
            lane.steer(cap, Duration::ZERO);
        }
        lane.enqueue(tasks)
            .map_err(|(error, tasks)| (Refusal::Queue(error), tasks))?;
        Ok(admission)
    }

    /// Whether the queue's running batches are at its limit: its ready batch waits.
    pub fn at_running_limit(&self) -> bool {
        self.running_limit.is_some_and(|limit| self.running.len() >= limit)
    }

    /// The batch to run at `now`, or requests to answer unrun; a batch taken
    /// is counted running (where the queue counts them), with the id it ends
    /// by. Dropped on-time requests count as missed.
    pub fn take(&mut self, now: Instant, queue_timeout: Duration) -> Option<(Taken<R>, Option<u64>)> {
        if self.at_running_limit() {
            return None;
        }
        let taken = self.lanes.take(now, self.controller.as_ref(), queue_timeout)?;
        if let Some(controller) = self.controller.as_mut().filter(|_| taken.on_time_expired > 0) {
            controller.dropped(taken.on_time_expired as u32);
        }
        let counted = self.running_limit.is_some() || self.controller.is_some();
        let run_id = match &taken.batch {
            Some(batch) if counted => Some(self.started(batch.rows, now)),
            _ => None,
        };
        Some((taken, run_id))
    }

    /// A batch of `rows` rows starts at `now`, run by its caller or a batch
    /// thread: counted running under the id returned.
    pub fn started(&mut self, rows: usize, now: Instant) -> u64 {
        self.next_run += 1;
        self.running.push(Running {
            id: self.next_run,
            started: now,
            rows,
        });
        self.next_run
    }

    /// The batch `run_id` ended at `now`, having run `ran` (its rows,
    /// padding included, and its time) when there is a run to learn from.
    pub fn finish(&mut self, run_id: u64, ran: Option<(usize, Duration)>, now: Instant) {
        self.running.retain(|run| run.id != run_id);
        if let (Some(controller), Some((rows, run))) = (self.controller.as_mut(), ran) {
            controller.ran(rows, run, now);
        }
    }

    /// An on-time request's answer was taken at `at`, due by `deadline`.
    pub fn answered(&mut self, deadline: Instant, at: Instant) {
        if let Some(controller) = self.controller.as_mut() {
            controller.answered(at > deadline);
        }
    }

    /// Whether the queue has a running limit: a batch's end may let the next start.
    pub fn limited(&self) -> bool {
        self.running_limit.is_some()
    }
}
