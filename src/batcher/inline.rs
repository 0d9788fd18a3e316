//! Where a fast queue's batches run. Handing a batch to a batch thread costs
//! two thread wake-ups (the batch thread's, then the waiting request's),
//! several microseconds each on a loaded machine: more than a whole session
//! run of a small model. A queue whose recent runs are shorter than the
//! server's inline limit is therefore run by the requests themselves: the
//! submitting task yields once (so every request that arrived in the same
//! turn of its event loop joins the batch) and then runs the ready batch on
//! its own thread. Slower queues, queues that wait for a batch timeout, and
//! requests split across batches keep to the batch threads.
//!
//! Such requests queue on their thread's own shard of the queue, not on the
//! queue the batch threads share: a batch then holds one thread's requests,
//! so its answers wake no other thread, and the threads do not contend for
//! one lock. A queue with a latency objective has no shards: its requests
//! are placed, and run by their callers, on the queue its controller sees.
//! A request drives the shard it queued
//! on, wherever its task resumes (a multi-thread runtime may move it), so
//! none waits on a shard nobody drives.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::params::BatchParams;
use super::queue::{Batch, Queue, Task};
use super::reply::Reply;

/// Runs measured before a queue may run inline: until then its speed is unknown.
const MEASURED_RUNS: u64 = 4;

/// A queue's recent session-run time (an exponentially weighted mean).
#[derive(Default)]
pub struct RunClock {
    mean_nanos: AtomicU64,
    runs: AtomicU64,
}

impl RunClock {
    /// Folds one run in; each new run weighs 1/8.
    pub fn record(&self, run: Duration) {
        let nanos = u64::try_from(run.as_nanos()).unwrap_or(u64::MAX);
        let runs = self.runs.fetch_add(1, Ordering::Relaxed);
        let mean = self.mean_nanos.load(Ordering::Relaxed);
        let next = if runs == 0 { nanos } else { mean - mean / 8 + nanos / 8 };
        // Racing batch threads may lose an update: the mean stays a fair estimate.
        self.mean_nanos.store(next, Ordering::Relaxed);
    }

    /// Whether runs measured so far average at most `limit`.
    pub fn within(&self, limit: Duration) -> bool {
        !limit.is_zero()
            && self.runs.load(Ordering::Relaxed) >= MEASURED_RUNS
            && u128::from(self.mean_nanos.load(Ordering::Relaxed)) <= limit.as_nanos()
    }
}

/// A fast queue's per-thread shards. Together they hold at most
/// `max_enqueued_batches` batches; a request that would open one more (or
/// that a shard's queue refuses) queues on the shared queue instead, which
/// takes it or refuses it as TF Serving does. A batch left on a shard by a
/// request given up before it ran therefore never makes the queue refuse work.
pub(super) struct Shards {
    queues: Box<[Mutex<Queue<Reply>>]>,
    /// Batches on every shard together, and their bound.
    batches: AtomicUsize,
    limit: usize,
}

impl Shards {
    /// No shards: the queue never runs inline.
    pub(super) fn none() -> Shards {
        Shards {
            queues: Box::new([]),
            batches: AtomicUsize::new(0),
            limit: 0,
        }
    }

    /// Twice as many shards as cores, so that the HTTP and gRPC threads
    /// rarely share one (sharing is correct, only slower).
    pub(super) fn new(params: &BatchParams, merge: bool) -> Shards {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let count = (2 * cores).clamp(2, 128);
        Shards {
            queues: (0..count)
                .map(|_| Mutex::new(Queue::new(params.clone(), merge)))
                .collect(),
            batches: AtomicUsize::new(0),
            limit: params.max_enqueued_batches,
        }
    }

    /// Queues a task on a shard, or gives it back for the shared queue: the
    /// shards' batches are all taken, or the shard's queue refuses it.
    pub(super) fn push(&self, shard: usize, task: Task<Reply>) -> Result<(), Task<Reply>> {
        let Some(mut queue) = self.lock(shard) else {
            return Err(task);
        };
        let opens = queue.opens_batch(&task);
        if opens && self.batches.fetch_add(1, Ordering::AcqRel) >= self.limit {
            self.batches.fetch_sub(1, Ordering::AcqRel);
            return Err(task);
        }
        queue.enqueue_one(task).map_err(|(_, task)| {
            if opens {
                self.batches.fetch_sub(1, Ordering::AcqRel);
            }
            task
        })
    }

    /// A shard's ready batch, if it has one.
    pub(super) fn pop_ready(&self, shard: usize, now: Instant) -> Option<Batch<Reply>> {
        let batch = self.lock(shard)?.pop_ready(now)?;
        self.batches.fetch_sub(1, Ordering::AcqRel);
        Some(batch)
    }

    /// The calling thread's shard, when there are shards.
    pub(super) fn this_thread(&self) -> Option<usize> {
        (!self.queues.is_empty()).then(|| thread_index() % self.queues.len())
    }

    fn lock(&self, shard: usize) -> Option<MutexGuard<'_, Queue<Reply>>> {
        let queue = self.queues.get(shard)?;
        Some(queue.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// A number per thread, given out in the order threads first ask.
fn thread_index() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static INDEX: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    INDEX.with(|index| *index)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_runs_inline_only_once_measured_and_fast() {
        let clock = RunClock::default();
        let limit = Duration::from_micros(100);
        assert!(!clock.within(limit), "unmeasured");
        for _ in 0..MEASURED_RUNS {
            clock.record(Duration::from_micros(10));
        }
        assert!(clock.within(limit));
        assert!(!clock.within(Duration::ZERO), "a zero limit turns inline runs off");
        for _ in 0..32 {
            clock.record(Duration::from_millis(5));
        }
        assert!(
            !clock.within(limit),
            "slow runs move the queue back to the batch threads"
        );
    }
}
