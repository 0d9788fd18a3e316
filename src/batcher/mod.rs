//! The dynamic batcher: one queue per (model, version, signature), drained by a
//! shared pool of OS threads (`num_batch_threads`) that merge waiting requests
//! into one session run and hand each request its own rows back.
//!
//! A handler submits decoded tensors and awaits a one-shot reply; it never runs
//! a model itself. Batches form while earlier ones run; requests whose client
//! has gone are dropped before compute.

pub mod assemble;
pub mod params;
pub mod queue;

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

pub use params::{BatchParams, ParamsError, ParamsOverride};
use queue::{Batch, EnqueueError, Queue, Task};

use crate::metrics::QueueMetrics;
use crate::runtime::RuntimeError;
use crate::tensor::Tensor;

/// Runs one assembled batch; implemented over a loaded model's signature.
pub trait Runner: Send + Sync {
    fn run(&self, inputs: Vec<Tensor>) -> Result<Vec<Tensor>, RuntimeError>;
}

/// A request's outputs and where its time went.
#[derive(Clone, Debug)]
pub struct BatchOutput {
    pub outputs: Vec<Tensor>,
    pub queue_time: Duration,
    pub run_time: Duration,
    /// Rows in the (largest) batch the request ran in, before padding.
    pub batch_rows: usize,
}

#[derive(Clone, Debug, thiserror::Error)]
pub enum BatchError {
    #[error("the batching queue of {queue} is full ({batches} batches, max_enqueued_batches); retry later")]
    QueueFull { queue: String, batches: usize },
    #[error(
        "request has {rows} rows, more than max_batch_size {max} of {queue}; send smaller requests or set enable_large_batch_splitting"
    )]
    TooLarge { queue: String, rows: usize, max: usize },
    #[error("{0}")]
    Inputs(String),
    #[error(transparent)]
    Run(RuntimeError),
    #[error("{0}")]
    Split(String),
    #[error("server is shutting down")]
    ShuttingDown,
}

type ReplyResult = Result<BatchOutput, BatchError>;
pub type Pending = oneshot::Receiver<ReplyResult>;

/// Where a task's result goes: straight to its request, or into the gather of
/// a request that was split across batches.
enum Reply {
    Whole(oneshot::Sender<ReplyResult>),
    Part { gather: Arc<Gather>, index: usize },
}

impl Reply {
    fn is_closed(&self) -> bool {
        match self {
            Reply::Whole(sender) => sender.is_closed(),
            Reply::Part { gather, .. } => gather.is_closed(),
        }
    }

    fn send(self, result: ReplyResult) {
        match self {
            // A closed receiver means the client went away; nothing to do.
            Reply::Whole(sender) => drop(sender.send(result)),
            Reply::Part { gather, index } => gather.complete(index, result),
        }
    }
}

/// Reassembles a split request's pieces, in order.
struct Gather {
    state: Mutex<GatherState>,
}

struct GatherState {
    sender: Option<oneshot::Sender<ReplyResult>>,
    parts: Vec<Option<BatchOutput>>,
    remaining: usize,
}

impl Gather {
    fn lock(&self) -> MutexGuard<'_, GatherState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn is_closed(&self) -> bool {
        self.lock().sender.as_ref().is_none_or(|s| s.is_closed())
    }

    fn complete(&self, index: usize, result: ReplyResult) {
        let mut state = self.lock();
        match result {
            Err(error) => {
                if let Some(sender) = state.sender.take() {
                    drop(sender.send(Err(error)));
                }
            }
            Ok(output) => {
                state.parts[index] = Some(output);
                state.remaining -= 1;
                if state.remaining == 0 {
                    let parts: Vec<BatchOutput> = state.parts.drain(..).flatten().collect();
                    if let Some(sender) = state.sender.take() {
                        drop(sender.send(merge_parts(parts)));
                    }
                }
            }
        }
    }
}

fn merge_parts(parts: Vec<BatchOutput>) -> ReplyResult {
    let outputs = (0..parts[0].outputs.len())
        .map(|i| {
            let pieces: Vec<Tensor> = parts.iter().map(|p| p.outputs[i].clone()).collect();
            assemble::concat(&pieces).map_err(BatchError::Split)
        })
        .collect::<Result<_, _>>()?;
    Ok(BatchOutput {
        outputs,
        queue_time: parts.iter().map(|p| p.queue_time).max().unwrap_or_default(),
        run_time: parts.iter().map(|p| p.run_time).sum(),
        batch_rows: parts.iter().map(|p| p.batch_rows).max().unwrap_or_default(),
    })
}

struct Entry {
    /// Describes the queue in log lines and errors.
    name: Arc<str>,
    queue: Queue<Reply>,
    runner: Arc<dyn Runner>,
    metrics: QueueMetrics,
    /// Its handle was dropped: remove once drained.
    closing: bool,
}

#[derive(Default)]
struct State {
    queues: BTreeMap<u64, Entry>,
    next_id: u64,
    /// The queue served last, for round-robin fairness.
    cursor: u64,
    /// Batch threads waiting for work: only then does a new request need to wake one.
    idle: usize,
    shutdown: bool,
}

/// A batch taken off a queue, with what is needed to run it.
struct Work {
    name: Arc<str>,
    batch: Batch<Reply>,
    runner: Arc<dyn Runner>,
    metrics: QueueMetrics,
    params: BatchParams,
    merge: bool,
}

impl State {
    fn take_ready(&mut self, now: Instant) -> Option<Work> {
        let cursor = self.cursor;
        let order: Vec<u64> = self
            .queues
            .range(cursor + 1..)
            .chain(self.queues.range(..=cursor))
            .map(|(id, _)| *id)
            .collect();
        for id in order {
            let entry = self.queues.get_mut(&id)?;
            if let Some(batch) = entry.queue.pop_ready(now) {
                let merge = entry.queue.merges() && !batch.runs_alone();
                self.cursor = id;
                entry.metrics.depth.set(entry.queue.depth() as i64);
                return Some(Work {
                    name: entry.name.clone(),
                    batch,
                    runner: entry.runner.clone(),
                    metrics: entry.metrics.clone(),
                    params: entry.queue.params().clone(),
                    merge,
                });
            }
        }
        None
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.queues.values().filter_map(|e| e.queue.deadline()).min()
    }
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The shared batch-thread pool and the queues it serves.
pub struct Batcher {
    shared: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Batcher {
    pub fn new(num_batch_threads: usize) -> std::io::Result<Arc<Batcher>> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
        });
        let threads = (0..num_batch_threads.max(1))
            .map(|i| {
                let shared = shared.clone();
                std::thread::Builder::new()
                    .name(format!("tfserve-batch-{i}"))
                    .spawn(move || worker(&shared))
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(Arc::new(Batcher {
            shared,
            threads: Mutex::new(threads),
        }))
    }

    /// Adds a queue. `merge` false runs every request alone (batching off).
    /// `name` describes the queue in error messages.
    pub fn add_queue(
        &self,
        name: String,
        params: BatchParams,
        merge: bool,
        runner: Arc<dyn Runner>,
        metrics: QueueMetrics,
    ) -> QueueHandle {
        let mut state = self.shared.lock();
        state.next_id += 1;
        let id = state.next_id;
        let queue = Queue::new(params.clone(), merge);
        state.queues.insert(
            id,
            Entry {
                name: name.as_str().into(),
                queue,
                runner,
                metrics: metrics.clone(),
                closing: false,
            },
        );
        QueueHandle {
            id,
            name,
            params,
            merge,
            shared: self.shared.clone(),
            metrics,
        }
    }

    /// Stops taking requests, lets queued batches run, and joins the threads.
    pub fn shutdown(&self) {
        self.shared.lock().shutdown = true;
        self.shared.wake.notify_all();
        let threads: Vec<_> = self
            .threads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
            .collect();
        for thread in threads {
            let _ = thread.join();
        }
    }
}

impl Drop for Batcher {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn worker(shared: &Shared) {
    loop {
        let work = {
            let mut state = shared.lock();
            loop {
                let now = Instant::now();
                if let Some(work) = state.take_ready(now) {
                    break Some(work);
                }
                state.queues.retain(|_, e| !(e.closing && e.queue.is_empty()));
                if state.shutdown && state.queues.values().all(|e| e.queue.is_empty()) {
                    break None;
                }
                state.idle += 1;
                state = match state.next_deadline() {
                    Some(deadline) => {
                        shared
                            .wake
                            .wait_timeout(state, queue::until(deadline, now))
                            .unwrap_or_else(|p| p.into_inner())
                            .0
                    }
                    None => shared.wake.wait(state).unwrap_or_else(|p| p.into_inner()),
                };
                state.idle -= 1;
            }
        };
        match work {
            Some(work) => {
                // A panic anywhere in a batch must not end the thread: its
                // requests' reply channels close (they answer an error) and
                // the thread goes on serving.
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| process(work))).is_err() {
                    log::error!("a batch panicked; its requests were answered with an error");
                }
            }
            None => {
                // Let the other threads see the shutdown too.
                shared.wake.notify_all();
                return;
            }
        }
    }
}

/// Runs one batch: drop abandoned requests, assemble, run, split, reply.
fn process(work: Work) {
    let Work {
        name,
        batch,
        runner,
        metrics,
        params,
        merge,
    } = work;
    let started = Instant::now();
    let (mut live, gone): (Vec<Task<Reply>>, Vec<Task<Reply>>) =
        batch.tasks.into_iter().partition(|t| !t.reply.is_closed());
    metrics.dropped.inc_by(gone.len() as u64);
    if live.is_empty() {
        return;
    }
    let rows: usize = live.iter().map(|t| t.rows).sum();
    metrics.batch_rows.observe(rows as f64);
    for task in &live {
        metrics
            .queue_wait
            .observe(started.duration_since(task.enqueued).as_secs_f64());
    }
    let run_rows = if merge { params.padded_size(rows) } else { rows };
    metrics.padding_rows.inc_by((run_rows - rows) as u64);
    let inputs = match assemble_inputs(&mut live, &params, run_rows) {
        Ok(inputs) => inputs,
        Err(message) => return reply_all(live, Err(BatchError::Inputs(message))),
    };
    let run_started = Instant::now();
    let result =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| runner.run(inputs))).unwrap_or_else(|panic| {
            Err(RuntimeError::Run {
                code: crate::runtime::StatusCode::Internal,
                message: format!("the model's run panicked: {}", panic_message(panic.as_ref())),
            })
        });
    let run_time = run_started.elapsed();
    metrics.run.observe(run_time.as_secs_f64());
    let outputs = match result {
        Ok(outputs) => outputs,
        Err(error) => {
            log::warn!("{name}: batch of {rows} rows failed ({}): {error}", request_ids(&live));
            return reply_all(live, Err(BatchError::Run(error)));
        }
    };
    log::debug!(
        "{name}: ran {run_rows} rows in {:.3} ms ({})",
        run_time.as_secs_f64() * 1000.0,
        request_ids(&live)
    );
    if live.len() == 1 && run_rows == rows {
        let task = live.pop().expect("one task");
        let queue_time = run_started.duration_since(task.enqueued);
        return task.reply.send(Ok(BatchOutput {
            outputs,
            queue_time,
            run_time,
            batch_rows: rows,
        }));
    }
    if let Some(bad) = outputs.iter().find(|o| o.shape.first() != Some(&run_rows)) {
        let message = format!(
            "the model returned an output of shape {:?} for a batch of {run_rows} rows; outputs without the batch \
             dimension cannot be split between batched requests (turn batching off for this model)",
            bad.shape
        );
        return reply_all(live, Err(BatchError::Split(message)));
    }
    let mut offset = 0;
    for task in live {
        let pieces = outputs
            .iter()
            .map(|o| assemble::slice_rows(o, offset, offset + task.rows))
            .collect();
        offset += task.rows;
        let queue_time = run_started.duration_since(task.enqueued);
        task.reply.send(Ok(BatchOutput {
            outputs: pieces,
            queue_time,
            run_time,
            batch_rows: rows,
        }));
    }
}

/// The ids of a batch's requests, for log lines.
fn request_ids(tasks: &[Task<Reply>]) -> String {
    let ids: Vec<&str> = tasks.iter().filter_map(|t| t.request_id.as_deref()).collect();
    format!("requests {}", ids.join(","))
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

fn reply_all(tasks: Vec<Task<Reply>>, result: ReplyResult) {
    for task in tasks {
        task.reply.send(result.clone());
    }
}

/// One tensor per input, the tasks' rows concatenated (padded when allowed)
/// and extended to `run_rows`.
fn assemble_inputs(tasks: &mut [Task<Reply>], params: &BatchParams, run_rows: usize) -> Result<Vec<Tensor>, String> {
    let inputs = tasks[0].inputs.len();
    let mut assembled = Vec::with_capacity(inputs);
    for i in 0..inputs {
        let mut parts: Vec<Tensor> = tasks
            .iter_mut()
            .map(|t| std::mem::replace(&mut t.inputs[i], empty()))
            .collect();
        if params.pad_variable_length_inputs && parts.iter().any(|p| p.shape[1..] != parts[0].shape[1..]) {
            let rank = parts[0].shape.len();
            let target: Vec<usize> = (0..rank)
                .map(|d| {
                    parts
                        .iter()
                        .map(|p| p.shape.get(d).copied().unwrap_or(0))
                        .max()
                        .unwrap_or(0)
                })
                .collect();
            parts = parts
                .iter()
                .map(|p| assemble::pad_inner(p, &target))
                .collect::<Result<_, _>>()?;
        }
        let mut tensor = if parts.len() == 1 {
            parts.pop().expect("one part")
        } else {
            assemble::concat(&parts)?
        };
        if tensor.shape.first().is_some_and(|&r| r < run_rows) {
            assemble::pad_rows(&mut tensor, run_rows);
        }
        assembled.push(tensor);
    }
    Ok(assembled)
}

fn empty() -> Tensor {
    Tensor::new(vec![0], crate::tensor::TensorData::Bool(Vec::new()))
}

/// A handle on one queue; dropping it lets the queue drain and disappear.
pub struct QueueHandle {
    id: u64,
    name: String,
    params: BatchParams,
    merge: bool,
    shared: Arc<Shared>,
    metrics: QueueMetrics,
}

impl QueueHandle {
    /// Queues a request. `input_names` label the tensors in error messages.
    pub fn submit(
        &self,
        inputs: Vec<Tensor>,
        input_names: &[&str],
        request_id: Option<Arc<str>>,
    ) -> Result<Pending, BatchError> {
        // As TF Serving's batching session: requests merge along the 0th
        // dimension; one whose inputs have none (or disagree on it) cannot be
        // merged, so it runs alone and the graph decides whether it is valid.
        let (rows, alone) = match (self.merge, batch_rows(&inputs)) {
            (true, Some(rows)) => (rows, false),
            (true, None) => {
                log::debug!(
                    "{}: inputs {} have no common 0th dimension; running the request alone",
                    self.name,
                    input_names.join(",")
                );
                (1, true)
            }
            (false, _) => (1, true),
        };
        let (sender, receiver) = oneshot::channel();
        let enqueued = Instant::now();
        let splitting = !alone && rows > self.params.max_batch_size && self.params.enable_large_batch_splitting;
        let tasks = if splitting {
            // Slicing happens outside the lock; if the open batch fills meanwhile,
            // the first piece simply opens a new batch.
            let room = self
                .shared
                .lock()
                .queues
                .get(&self.id)
                .map(|e| e.queue.room_for(&inputs))
                .unwrap_or(0);
            let sizes = queue::chunk_sizes(rows, room, self.params.max_batch_size);
            let gather = Arc::new(Gather {
                state: Mutex::new(GatherState {
                    sender: Some(sender),
                    parts: vec![None; sizes.len()],
                    remaining: sizes.len(),
                }),
            });
            queue::split_inputs(&inputs, &sizes)
                .into_iter()
                .zip(&sizes)
                .enumerate()
                .map(|(index, (inputs, &rows))| Task {
                    inputs,
                    rows,
                    alone: false,
                    request_id: request_id.clone(),
                    enqueued,
                    reply: Reply::Part {
                        gather: gather.clone(),
                        index,
                    },
                })
                .collect()
        } else {
            vec![Task {
                inputs,
                rows,
                alone,
                request_id,
                enqueued,
                reply: Reply::Whole(sender),
            }]
        };
        let wake = {
            let mut state = self.shared.lock();
            if state.shutdown {
                return Err(BatchError::ShuttingDown);
            }
            let entry = state.queues.get_mut(&self.id).ok_or(BatchError::ShuttingDown)?;
            match entry.queue.enqueue(tasks) {
                Ok(()) => entry.metrics.depth.set(entry.queue.depth() as i64),
                Err((EnqueueError::Full { batches }, _)) => {
                    self.metrics.rejected_full.inc();
                    return Err(BatchError::QueueFull {
                        queue: self.name.clone(),
                        batches,
                    });
                }
                Err((EnqueueError::TooLarge { rows, max }, _)) => {
                    self.metrics.rejected_too_large.inc();
                    return Err(BatchError::TooLarge {
                        queue: self.name.clone(),
                        rows,
                        max,
                    });
                }
            }
            state.idle > 0
        };
        // A busy thread looks at the queues again when its batch is done.
        if wake {
            self.shared.wake.notify_one();
        }
        Ok(receiver)
    }
}

/// The 0th dimension all of a request's inputs share, or `None` when one is a
/// scalar or they disagree (such a request cannot be merged with others).
fn batch_rows(inputs: &[Tensor]) -> Option<usize> {
    let mut dims = inputs.iter().map(|t| t.shape.first().copied());
    let first = dims.next().unwrap_or(Some(0))?;
    dims.all(|d| d == Some(first)).then_some(first)
}

impl Drop for QueueHandle {
    /// An empty queue goes at once (its runner, and so the model, with it);
    /// one still holding requests drains first and is removed by a batch thread.
    fn drop(&mut self) {
        let removed = {
            let mut state = self.shared.lock();
            match state.queues.get_mut(&self.id) {
                Some(entry) if entry.queue.is_empty() => state.queues.remove(&self.id),
                Some(entry) => {
                    entry.closing = true;
                    None
                }
                None => None,
            }
        };
        // Outside the lock: dropping the last runner closes a TensorFlow session.
        drop(removed);
        self.shared.wake.notify_all();
    }
}

#[cfg(test)]
mod tests;
