//! What running one of a queue's batches needs, shared by the queue's entry
//! in the batch threads' table and by its handle: one reference count per
//! batch rather than one per part. Also where a steered queue's controller
//! learns from each run and publishes the cap it chose.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::inline::RunClock;
use super::objective::{Controller, Late};
use super::params::BatchParams;
use super::sizes::RunSizes;
use super::{BatchError, Runner};
use crate::metrics::QueueMetrics;

pub(super) struct QueueContext {
    /// Describes the queue in log lines and errors.
    pub(super) name: Arc<str>,
    pub(super) runner: Arc<dyn Runner>,
    pub(super) metrics: QueueMetrics,
    pub(super) params: BatchParams,
    pub(super) clock: Arc<RunClock>,
    /// Run times per allowed batch size, when sizes are allowed.
    pub(super) sizes: Option<Arc<RunSizes>>,
    /// At most this many of the queue's batches run at once (a model on a
    /// GPU: more at once only makes each batch smaller); None: no bound.
    pub(super) running_limit: Option<usize>,
    /// Batches of the queue running now, counted only under a limit or an objective.
    pub(super) running: AtomicUsize,
    /// The queue's latency objective and what it steers.
    pub(super) controller: Option<Mutex<Controller>>,
    /// Under an objective: rows of requests whose callers have not yet
    /// taken their answers ([`super::Pending`], counted from just before
    /// they queue), rows of batches running now for callers still waiting,
    /// and rows on the late lane. What is left of the pending is the on-time
    /// work that still waits, queued (on the shared queue or a caller's
    /// shard) or answered but not yet taken: an answer waits there for its
    /// caller's thread, and a transport thread that has fallen behind its
    /// requests shows nowhere else.
    pub(super) pending_rows: AtomicUsize,
    pub(super) running_rows: AtomicUsize,
    pub(super) late_rows: AtomicUsize,
    /// Under an objective, the batch cap its controller chose (0 without one).
    cap: AtomicUsize,
    /// Under an objective, on-time requests that took their answers past
    /// their deadlines, and in time, since its controller last counted them:
    /// counted without its lock, as each answer is taken.
    answered_late: AtomicU32,
    answered_on_time: AtomicU32,
}

impl QueueContext {
    pub(super) fn new(
        name: Arc<str>,
        runner: Arc<dyn Runner>,
        metrics: QueueMetrics,
        params: BatchParams,
        sizes: Option<Arc<RunSizes>>,
        running_limit: Option<usize>,
        controller: Option<Mutex<Controller>>,
    ) -> QueueContext {
        let cap = controller
            .as_ref()
            .map_or(0, |c| c.lock().unwrap_or_else(|p| p.into_inner()).cap());
        QueueContext {
            name,
            runner,
            metrics,
            params,
            clock: Arc::new(RunClock::default()),
            sizes,
            running_limit: running_limit.map(|limit| limit.max(1)),
            running: AtomicUsize::new(0),
            controller,
            pending_rows: AtomicUsize::new(0),
            running_rows: AtomicUsize::new(0),
            late_rows: AtomicUsize::new(0),
            cap: AtomicUsize::new(cap),
            answered_late: AtomicU32::new(0),
            answered_on_time: AtomicU32::new(0),
        }
    }

    /// The controller, locked, having counted the answers taken since last.
    pub(super) fn controller(&self) -> Option<MutexGuard<'_, Controller>> {
        let mut controller = self.controller.as_ref()?.lock().unwrap_or_else(|p| p.into_inner());
        let late = self.answered_late.swap(0, Ordering::Relaxed);
        let on_time = self.answered_on_time.swap(0, Ordering::Relaxed);
        if late + on_time > 0 {
            controller.answered(late, on_time);
        }
        Some(controller)
    }

    /// An on-time request's answer was taken at `taken`, due by `deadline`.
    pub(super) fn answered(&self, deadline: Instant, taken: Instant) {
        let count = match taken > deadline {
            true => &self.answered_late,
            false => &self.answered_on_time,
        };
        count.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether the queue counts its running batches.
    pub(super) fn counts_running(&self) -> bool {
        self.running_limit.is_some() || self.controller.is_some()
    }

    /// The batch `run_id` ended; nothing when its run was counted already.
    pub(super) fn ended(&self, run_id: Option<u64>) {
        if let (Some(run_id), Some(mut controller)) = (run_id, self.controller()) {
            controller.ended(run_id);
        }
    }

    /// The largest batch requests may run themselves: `usize::MAX` without
    /// an objective, else the cap it chose.
    pub(super) fn inline_cap(&self) -> usize {
        match self.controller {
            None => usize::MAX,
            Some(_) => self.cap(),
        }
    }

    /// The batch `run_id` of `rows` rows ran in `run`: the controller learns from it.
    pub(super) fn ran(&self, run_id: Option<u64>, rows: usize, run: Duration) {
        let (Some(run_id), Some(mut controller)) = (run_id, self.controller()) else {
            return;
        };
        controller.ran(run_id, rows, run, Instant::now());
        let (cap, margin) = (controller.cap(), controller.margin());
        // Under the lock: runs ending together publish in the order they steered.
        self.cap.store(cap, Ordering::Relaxed);
        drop(controller);
        if let Some(gauges) = &self.metrics.steering {
            gauges.cap.set(cap as i64);
            gauges.margin.set(margin.as_secs_f64());
        }
    }

    /// Under an objective, the batch cap its controller chose (at least 1).
    pub(super) fn cap(&self) -> usize {
        self.cap.load(Ordering::Relaxed).max(1)
    }

    /// The on-time rows that wait ahead of a request, its own `rows`
    /// (counted pending already) aside.
    pub(super) fn waiting(&self, rows: usize) -> usize {
        // A batch's rows count as running until all its answers are out, and
        // a caller may take its answer before: the running may outnumber the
        // pending for a moment.
        (self.pending_rows.load(Ordering::Relaxed))
            .saturating_sub(self.running_rows.load(Ordering::Relaxed))
            .saturating_sub(self.late_rows.load(Ordering::Relaxed))
            .saturating_sub(rows)
    }

    /// A batch of `rows` rows starts: the id its controller knows it by.
    pub(super) fn started(&self, rows: usize) -> Option<u64> {
        Some(self.controller()?.started(rows, Instant::now()))
    }

    /// A request predicted late, refused in the words that name the objective.
    pub(super) fn late(&self, late: Late) -> BatchError {
        let objective = self.params.objective();
        BatchError::Late {
            queue: self.name.to_string(),
            waiting_rows: late.waiting_rows,
            estimate_ms: late.estimate.as_secs_f64() * 1000.0,
            waited_ms: late.waited.as_secs_f64() * 1000.0,
            objective_ms: objective.map_or(0.0, |o| o.latency.as_secs_f64() * 1000.0),
            percentile: objective.map_or(0.0, |o| o.percentile),
        }
    }

    /// Whether the queue's running batches are at its limit: its ready batch waits.
    pub(super) fn at_running_limit(&self) -> bool {
        self.running_limit
            .is_some_and(|limit| self.running.load(Ordering::Relaxed) >= limit)
    }
}
