//! One batching queue's policy, free of threads and TensorFlow: which requests
//! share a batch, when a batch is ready, and when the queue is full.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::params::BatchParams;
use super::sizes::RunSizes;
use crate::tensor::Tensor;

/// A request (or a piece of a split one) waiting to run.
pub struct Task<R> {
    pub inputs: Vec<Tensor>,
    pub rows: usize,
    /// Inputs that cannot be concatenated with others (a scalar, or inputs
    /// disagreeing on the 0th dimension): the request runs as a batch of its own.
    pub alone: bool,
    /// The request's id, for log lines written on the batch thread.
    pub request_id: Option<Arc<str>>,
    pub enqueued: Instant,
    /// Under a latency objective: its arrival plus the objective, set once.
    pub deadline: Option<Instant>,
    pub reply: R,
}

/// The earlier of two deadlines, where either is set.
fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Whether two requests' inputs may share one tensor: per input, the same rank
/// and (unless variable-length padding is on) the same non-batch dimensions.
/// Compared in place, element by element: a key built per request would cost
/// an allocation, and comparing empty dimension lists through `memcmp` reads
/// from a dangling address, which the CPU answers with a slow microcode assist.
fn joinable(pad: bool, open: &[Tensor], inputs: &[Tensor]) -> bool {
    open.len() == inputs.len()
        && open.iter().zip(inputs).all(|(a, b)| {
            a.shape.len() == b.shape.len() && (pad || a.shape.iter().zip(&b.shape).skip(1).all(|(x, y)| x == y))
        })
}

pub struct Batch<R> {
    pub tasks: Vec<Task<R>>,
    pub rows: usize,
    pub opened: Instant,
    /// The earliest deadline in it: what a plan that grows it must still meet.
    due: Option<Instant>,
    /// The most rows it takes: the cap when it opened (a cap chosen later
    /// does not grow it past what the requests in it were planned to run at).
    cap: usize,
    /// One request that must run as it came (no merging, no padding).
    alone: bool,
}

impl<R> Batch<R> {
    /// Whether the batch is one request that must run as it came (no merging, no padding).
    pub fn runs_alone(&self) -> bool {
        self.alone
    }

    /// The earliest deadline of its requests, under a latency objective.
    pub fn due(&self) -> Option<Instant> {
        self.due
    }

    /// Recounts its rows and earliest deadline after requests were taken out.
    pub fn recount(&mut self) {
        self.rows = self.tasks.iter().map(|task| task.rows).sum();
        self.due = self.tasks.iter().filter_map(|task| task.deadline).min();
    }

    /// The inputs later requests must agree with to join, unless the batch runs alone.
    fn key(&self) -> Option<&[Tensor]> {
        match self.alone {
            true => None,
            false => self.tasks.first().map(|t| t.inputs.as_slice()),
        }
    }
}

#[derive(Debug, PartialEq)]
pub enum EnqueueError {
    TooLarge { rows: usize, max: usize },
    Full { batches: usize },
}

pub struct Queue<R> {
    params: BatchParams,
    /// Off: every request is a batch of its own and runs as soon as a thread is free.
    merge: bool,
    batches: VecDeque<Batch<R>>,
    tasks: usize,
    /// Rows waiting, over all tasks.
    rows: usize,
    /// The largest batch formed and how long one waits to fill: the
    /// parameters', unless a latency objective steers them.
    cap: usize,
    timeout: Duration,
    /// With `allowed_batch_sizes`: the measured run times that decide whether
    /// a batch between two sizes is padded or run at the smaller one.
    sizes: Option<Arc<RunSizes>>,
}

impl<R> Queue<R> {
    pub fn new(params: BatchParams, merge: bool) -> Self {
        Queue {
            cap: params.max_batch_size,
            timeout: params.timeout(),
            params,
            merge,
            batches: VecDeque::new(),
            tasks: 0,
            rows: 0,
            sizes: None,
        }
    }

    /// Forms batches of at most `cap` rows (within `max_batch_size`) that wait
    /// at most `timeout` to fill, from now on.
    pub fn steer(&mut self, cap: usize, timeout: Duration) {
        self.cap = cap.clamp(1, self.params.max_batch_size);
        self.timeout = timeout;
    }

    /// Rows waiting, over all requests.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Lets [`Queue::pop_ready`] run a batch at a smaller allowed size when
    /// `sizes` measures that faster than padding it (see `RunSizes`).
    pub fn with_run_sizes(mut self, sizes: Arc<RunSizes>) -> Self {
        self.sizes = Some(sizes);
        self
    }

    pub fn params(&self) -> &BatchParams {
        &self.params
    }

    pub fn merges(&self) -> bool {
        self.merge
    }

    /// Requests (or request pieces) waiting.
    pub fn depth(&self) -> usize {
        self.tasks
    }

    pub fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }

    /// Whether a request with these inputs may join the open batch `open`
    /// (a batch formed without merging runs alone, so it has no key).
    fn joins(&self, open: Option<&[Tensor]>, inputs: Option<&[Tensor]>) -> bool {
        match (open, inputs) {
            (Some(open), Some(inputs)) => joinable(self.params.pad_variable_length_inputs, open, inputs),
            _ => false,
        }
    }

    /// A task's inputs as a joining key: none when it must run alone.
    fn key(task: &Task<R>) -> Option<&[Tensor]> {
        (!task.alone).then_some(task.inputs.as_slice())
    }

    /// Rows the open batch can still take from a (batchable) request with these inputs.
    pub fn room_for(&self, inputs: &[Tensor]) -> usize {
        match self.batches.back() {
            Some(open) if self.joins(open.key(), Some(inputs)) => open.cap.saturating_sub(open.rows),
            _ => 0,
        }
    }

    /// Batches that these tasks, added in order, would open.
    fn new_batches_needed(&self, tasks: &[Task<R>]) -> usize {
        if !self.merge {
            return tasks.len();
        }
        let mut open = self.batches.back().map(|b| (b.key(), b.rows, b.cap));
        let mut opened = 0;
        for task in tasks {
            let key = Self::key(task);
            match &mut open {
                Some((k, rows, cap)) if self.joins(*k, key) && *rows + task.rows <= *cap => *rows += task.rows,
                _ => {
                    opened += 1;
                    open = Some((key, task.rows, self.cap));
                }
            }
        }
        opened
    }

    /// Adds tasks all together or not at all.
    pub fn enqueue(&mut self, tasks: Vec<Task<R>>) -> Result<(), (EnqueueError, Vec<Task<R>>)> {
        if let Err(error) = self.refusal(&tasks) {
            return Err((error, tasks));
        }
        tasks.into_iter().for_each(|task| self.push(task));
        Ok(())
    }

    /// Why these tasks may not be added: one is too large, or the batches
    /// they would open pass `max_enqueued_batches`.
    fn refusal(&self, tasks: &[Task<R>]) -> Result<(), EnqueueError> {
        let max = self.params.max_batch_size;
        if let Some(big) = tasks.iter().find(|t| self.merge && !t.alone && t.rows > max) {
            return Err(EnqueueError::TooLarge { rows: big.rows, max });
        }
        let batches = self.params.max_enqueued_batches;
        match self.batches.len() + self.new_batches_needed(tasks) > batches {
            true => Err(EnqueueError::Full { batches }),
            false => Ok(()),
        }
    }

    /// Whether adding this task would open a batch.
    pub fn opens_batch(&self, task: &Task<R>) -> bool {
        self.new_batches_needed(std::slice::from_ref(task)) > 0
    }

    /// Adds one task, or gives it back with the reason: `enqueue` without
    /// the vector.
    pub fn enqueue_one(&mut self, task: Task<R>) -> Result<(), (EnqueueError, Task<R>)> {
        if let Err(error) = self.refusal(std::slice::from_ref(&task)) {
            return Err((error, task));
        }
        self.push(task);
        Ok(())
    }

    fn push(&mut self, task: Task<R>) {
        self.tasks += 1;
        self.rows += task.rows;
        let joins = self
            .batches
            .back()
            .is_some_and(|open| self.joins(open.key(), Self::key(&task)) && open.rows + task.rows <= open.cap);
        if let Some(open) = self.batches.back_mut().filter(|_| joins) {
            open.rows += task.rows;
            open.due = earliest(open.due, task.deadline);
            open.tasks.push(task);
            return;
        }
        let (opened, alone) = (task.enqueued, task.alone || !self.merge);
        self.batches.push_back(Batch {
            due: task.deadline,
            rows: task.rows,
            tasks: vec![task],
            opened,
            cap: self.cap,
            alone,
        });
    }

    /// The front batch if it may run now: it is closed (a later batch exists),
    /// full, or its first request has waited `batch_timeout_micros`.
    pub fn pop_ready(&mut self, now: Instant) -> Option<Batch<R>> {
        let front = self.batches.front()?;
        let ready = !self.merge
            || front.runs_alone()
            || self.batches.len() > 1
            || front.rows >= front.cap
            || now >= front.opened + self.timeout;
        if !ready {
            return None;
        }
        let batch = match self.smaller_run() {
            Some(batch) => batch,
            None => self.batches.pop_front()?,
        };
        self.tasks -= batch.tasks.len();
        self.rows -= batch.rows;
        Some(batch)
    }

    /// The front batch's first requests, up to `rows` rows, where they may
    /// join a batch of `batch`'s inputs: taken out of the queue.
    pub fn take_joining(&mut self, batch: &Batch<R>, rows: usize) -> Vec<Task<R>> {
        let joins = match self.batches.front() {
            Some(front) => self.joins(batch.key(), front.key()),
            None => false,
        };
        let Some(front) = self.batches.front_mut().filter(|_| joins) else {
            return Vec::new();
        };
        let mut taken = 0;
        let count = front.tasks.iter().take_while(|task| {
            taken += task.rows;
            taken <= rows
        });
        let count = count.count();
        let tasks: Vec<Task<R>> = front.tasks.drain(..count).collect();
        let rows: usize = tasks.iter().map(|task| task.rows).sum();
        front.recount();
        if front.tasks.is_empty() {
            self.batches.pop_front();
        }
        self.tasks -= tasks.len();
        self.rows -= rows;
        tasks
    }

    /// The front batch's first requests, when running them at an allowed size
    /// beats padding the whole batch: they make a batch of their own and the
    /// rest stays at the front, first in line.
    fn smaller_run(&mut self) -> Option<Batch<R>> {
        let sizes = self.sizes.as_ref().filter(|_| self.merge)?;
        let front = self.batches.front_mut().filter(|b| !b.alone)?;
        let take = sizes.rows_to_run(front.rows);
        if take >= front.rows {
            return None;
        }
        let mut rows = 0;
        let count = front.tasks.iter().take_while(|t| {
            rows += t.rows;
            rows <= take
        });
        let count = count.count();
        let taken: usize = front.tasks[..count].iter().map(|t| t.rows).sum();
        // Requests of several rows may not add up to the size: then padding it is.
        if taken != take {
            return None;
        }
        let tasks: Vec<Task<R>> = front.tasks.drain(..count).collect();
        let opened = front.opened;
        front.recount();
        front.opened = front.tasks.first().map_or(opened, |t| t.enqueued);
        Some(Batch {
            due: tasks.iter().filter_map(|task| task.deadline).min(),
            tasks,
            rows: taken,
            opened,
            cap: take,
            alone: false,
        })
    }

    /// The batches waiting, front first: each one's rows and earliest deadline.
    pub fn planned_batches(&self) -> impl Iterator<Item = (usize, Option<Instant>)> + '_ {
        self.batches.iter().map(|batch| (batch.rows, batch.due))
    }

    /// Takes out of the front batch the requests `expired` says, with its
    /// verdict; drops the batch when none is left in it.
    pub fn take_front_where<W>(&mut self, expired: impl Fn(&Task<R>) -> Option<W>) -> Vec<(Task<R>, W)> {
        let Some(front) = self.batches.front_mut() else {
            return Vec::new();
        };
        let (out, count) = drain_where(&mut front.tasks, expired);
        if out.is_empty() {
            return out;
        }
        let rows_before = front.rows;
        front.recount();
        let (rows_after, empty) = (front.rows, front.tasks.is_empty());
        if empty {
            self.batches.pop_front();
        }
        self.tasks -= count;
        self.rows -= rows_before - rows_after;
        out
    }

    /// When the front batch times out, if it is waiting on its timeout.
    pub fn deadline(&self) -> Option<Instant> {
        self.batches.front().map(|b| b.opened + self.timeout)
    }
}

mod split;
pub use split::{chunk_sizes, drain_where, split_inputs, until};

#[cfg(test)]
mod tests;
