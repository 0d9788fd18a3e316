//! The dynamic batcher: one queue per (model, version, signature), drained by a
//! shared pool of OS threads (`num_batch_threads`) that merge waiting requests
//! into one session run and hand each request its own rows back.
//!
//! A handler submits decoded tensors and awaits a one-shot reply; the batch
//! threads run the model, or, for a queue whose runs are shorter than the
//! inline limit, the submitting requests themselves ([`inline`]). Batches
//! form while earlier ones run; requests whose client has gone, that waited
//! past the queue timeout, or that a latency objective's deadline can no
//! longer be met for ([`objective`]) are taken out before compute.

pub mod assemble;
mod context;
mod handle;
mod inline;
pub mod objective;
pub mod params;
pub mod queue;
mod register;
mod reply;
mod sizes;
mod state;
mod worker;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use context::QueueContext;
pub use handle::{Drive, QueueHandle, Submitted};
use inline::Shards;
use objective::lanes::{Expired, Taken};
pub use params::{BatchParams, ParamsError, ParamsOverride};
use queue::{Batch, EnqueueError, Task};
use reply::{Gather, GatherState, Reply};
pub use reply::{Held, Pending};
use state::QueueState;

use crate::runtime::RuntimeError;
use crate::status::{Code, HasCode};
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
    /// When the batch's outputs were ready: the request's answer waited from
    /// then for its caller (on the HTTP front, its connection's thread).
    pub answered_at: std::time::Instant,
}

#[derive(Clone, Debug, thiserror::Error)]
pub enum BatchError {
    #[error("the batching queue of {queue} is full ({batches} batches, max_enqueued_batches); retry later")]
    QueueFull { queue: String, batches: usize },
    #[error(
        "request has {rows} rows, more than max_batch_size {max} of {queue}; send smaller requests or set enable_large_batch_splitting"
    )]
    TooLarge { queue: String, rows: usize, max: usize },
    #[error(
        "the batching queue of {queue} holds {waiting_rows} rows: this request{read}would likely spend {estimate_ms:.1} ms \
         in it, past its latency objective of {objective_ms:.1} ms (p{percentile}); retry later",
        read = read_after(*waited_ms)
    )]
    Late {
        queue: String,
        waiting_rows: usize,
        estimate_ms: f64,
        waited_ms: f64,
        objective_ms: f64,
        percentile: f64,
    },
    #[error(
        "the request waited {waited_ms:.1} ms in the batching queue of {queue}, past its queue_timeout_micros \
         ({timeout_ms:.1} ms); retry later"
    )]
    QueueTimeout {
        queue: String,
        waited_ms: f64,
        timeout_ms: f64,
    },
    #[error("{0}")]
    Inputs(String),
    #[error(transparent)]
    Run(RuntimeError),
    #[error("{0}")]
    Split(String),
    #[error("server is shutting down")]
    ShuttingDown,
}

/// How long a refused request had waited unread, where it was measured (on
/// the HTTP front, under an objective), as its message says it.
fn read_after(waited_ms: f64) -> String {
    match waited_ms > 0.0 {
        true => format!(", read {waited_ms:.1} ms after it arrived, "),
        false => " ".to_string(),
    }
}

impl HasCode for BatchError {
    fn code(&self) -> Code {
        match self {
            BatchError::QueueFull { .. }
            | BatchError::Late { .. }
            | BatchError::QueueTimeout { .. }
            | BatchError::ShuttingDown => Code::Unavailable,
            BatchError::TooLarge { .. } | BatchError::Inputs(_) => Code::InvalidArgument,
            BatchError::Run(error) => error.code(),
            BatchError::Split(_) => Code::Internal,
        }
    }
}

type ReplyResult = Result<BatchOutput, BatchError>;

struct Entry {
    state: QueueState<Reply>,
    context: Arc<QueueContext>,
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

/// A batch taken off a queue, with what is needed to run it: the requests
/// taken out of it unrun are answered first (and may be all there is).
struct Work {
    /// The queue's id in the batcher's state.
    id: u64,
    batch: Option<Batch<Reply>>,
    expired: Vec<(Task<Reply>, Expired)>,
    context: Arc<QueueContext>,
    merge: bool,
    /// Where the queue counts its running batches, the id it knows this one by.
    run_id: Option<u64>,
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
            if let Some(work) = self.take_from(id, now) {
                self.cursor = id;
                return Some(work);
            }
        }
        None
    }

    /// One queue's ready batch, if it has one.
    fn take_from(&mut self, id: u64, now: Instant) -> Option<Work> {
        let entry = self.queues.get_mut(&id)?;
        let context = &entry.context;
        let (taken, run_id) = entry.state.take(now, context.params.queue_timeout())?;
        let Taken { batch, expired, .. } = taken;
        let merge = entry.state.lanes.on_time.merges() && !batch.as_ref().is_some_and(Batch::runs_alone);
        context.metrics.depth.set(entry.state.lanes.depth() as i64);
        if let Some(controller) = entry.state.controller() {
            context.steering(controller);
        }
        Some(Work {
            id,
            batch,
            expired,
            context: context.clone(),
            merge,
            run_id,
        })
    }

    /// The next time worth waking for: a batch timeout, or a late request's
    /// due; a queue at its running limit is woken by the end of one of its
    /// runs instead.
    fn next_deadline(&self) -> Option<Instant> {
        self.queues
            .values()
            .filter(|e| !e.state.at_running_limit())
            .filter_map(|e| e.state.lanes.deadline())
            .min()
    }
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    /// `State::shutdown`, readable without the lock by requests that queue
    /// on their own thread's shard.
    shutting_down: AtomicBool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The batch `run_id` of queue `id` ended, having run `ran` (rows and
    /// time) when it has a run to learn from: the queue counts it out, and
    /// under a running limit the waiting threads look again.
    fn finished(&self, id: u64, run_id: Option<u64>, ran: Option<(usize, Duration)>) {
        let Some(run_id) = run_id else { return };
        let mut state = self.lock();
        let Some(entry) = state.queues.get_mut(&id) else { return };
        entry.state.finish(run_id, ran, Instant::now());
        if let Some(controller) = entry.state.controller() {
            entry.context.steering(controller);
        }
        if entry.state.limited() {
            self.wake.notify_all();
        }
    }
}

/// The shared batch-thread pool and the queues it serves.
pub struct Batcher {
    shared: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// How many batch threads there are.
    thread_count: usize,
    /// Queues whose runs average at most this run on their requests' own
    /// threads (see [`inline`]); zero keeps every run on the batch threads.
    inline_limit: Duration,
}

impl Batcher {
    pub fn new(num_batch_threads: usize) -> std::io::Result<Arc<Batcher>> {
        Self::with_inline_limit(num_batch_threads, Duration::ZERO)
    }

    /// A pool whose fast queues (runs averaging at most `inline_limit`) run
    /// on the threads of the requests that wait for them.
    pub fn with_inline_limit(num_batch_threads: usize, inline_limit: Duration) -> std::io::Result<Arc<Batcher>> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            shutting_down: AtomicBool::new(false),
        });
        let threads = (0..num_batch_threads.max(1))
            .map(|i| {
                let shared = shared.clone();
                std::thread::Builder::new()
                    .name(format!("tfserve-batch-{i}"))
                    .spawn(move || worker::worker(&shared))
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(Arc::new(Batcher {
            shared,
            thread_count: threads.len(),
            threads: Mutex::new(threads),
            inline_limit,
        }))
    }

    /// How many batch threads run the queues.
    pub fn thread_count(&self) -> usize {
        self.thread_count
    }

    /// Stops taking requests, lets queued batches run, and joins the threads.
    pub fn shutdown(&self) {
        self.shared.lock().shutdown = true;
        self.shared.shutting_down.store(true, Ordering::Release);
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

#[cfg(test)]
mod tests;
