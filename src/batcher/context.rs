//! What running one of a queue's batches needs, shared by the queue's entry
//! in the batch threads' table and by its handle: one reference count per
//! batch rather than one per part. Also where a steered queue's controller
//! learns from each run and publishes what it chose.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::inline::RunClock;
use super::objective::{Ahead, Controller, Steering};
use super::params::BatchParams;
use super::sizes::RunSizes;
use super::Runner;
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
    /// they queue), and rows of batches running now for callers still
    /// waiting. Their difference is what still waits, queued (on the shared
    /// queue or a caller's shard) or answered but not yet taken: an answer
    /// waits there for its caller's thread, and a transport thread that has
    /// fallen behind its requests shows nowhere else.
    pub(super) pending_rows: AtomicUsize,
    pub(super) running_rows: AtomicUsize,
    /// Under an objective, the batch cap while the controller waits for
    /// nothing, when requests may run their batches themselves; 0 while
    /// it waits to fill batches, which takes a batch thread watching the clock.
    steered_inline_cap: AtomicUsize,
    /// Under an objective, the batch cap it chose.
    steered_cap: AtomicUsize,
    /// Under an objective, requests let in that took their answers past it,
    /// and in time, since its controller last counted them: counted without
    /// its lock, as each request drops.
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
        let steering = controller
            .as_ref()
            .map(|c| c.lock().unwrap_or_else(|p| p.into_inner()).steering());
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
            steered_inline_cap: AtomicUsize::new(steering.map_or(0, inline_cap)),
            steered_cap: AtomicUsize::new(steering.map_or(0, |s| s.cap)),
            answered_late: AtomicU32::new(0),
            answered_on_time: AtomicU32::new(0),
        }
    }

    /// A request let in under the objective took its answer `spent` after it queued.
    pub(super) fn answered(&self, spent: Duration) {
        let Some(objective) = self.params.objective() else {
            return;
        };
        let count = match spent > objective.latency {
            true => &self.answered_late,
            false => &self.answered_on_time,
        };
        count.fetch_add(1, Ordering::Relaxed);
    }

    /// Hands the answers counted since the last call to `controller`.
    pub(super) fn teach_answered(&self, controller: &mut Controller) {
        let late = self.answered_late.swap(0, Ordering::Relaxed);
        let on_time = self.answered_on_time.swap(0, Ordering::Relaxed);
        controller.answered(late, on_time);
    }

    /// Whether the queue counts its running batches.
    pub(super) fn counts_running(&self) -> bool {
        self.running_limit.is_some() || self.controller.is_some()
    }

    /// The largest batch requests may run themselves, as far as the
    /// queue's objective goes: `usize::MAX` without one; None while the
    /// controller waits to fill batches (that takes a batch thread watching
    /// the clock).
    pub(super) fn inline_cap(&self) -> Option<usize> {
        if self.controller.is_none() {
            return Some(usize::MAX);
        }
        match self.steered_inline_cap.load(Ordering::Relaxed) {
            0 => None,
            cap => Some(cap),
        }
    }

    /// One of the queue's batches ran: the controller learns from it.
    pub(super) fn ran(&self, rows: usize, run: Duration) {
        let Some(controller) = &self.controller else { return };
        let (steering, clearing, margin) = {
            let mut controller = controller.lock().unwrap_or_else(|p| p.into_inner());
            controller.ran(rows, run);
            let steering = controller.steering();
            // Under the lock: runs ending together store in the order they steered.
            self.steered_inline_cap.store(inline_cap(steering), Ordering::Relaxed);
            self.steered_cap.store(steering.cap, Ordering::Relaxed);
            (steering, controller.clearing_ratio(), controller.margin())
        };
        if let Some(gauges) = &self.metrics.steering {
            gauges.set(steering.cap, steering.timeout);
            gauges.clearing.set(clearing.unwrap_or(0.0));
            gauges.margin.set(margin.as_secs_f64());
        }
    }

    /// Under an objective, the batch cap its controller chose (at least 1).
    pub(super) fn steered_cap(&self) -> usize {
        self.steered_cap.load(Ordering::Relaxed).max(1)
    }

    /// Rows that wait in the queue or for their callers to take their
    /// answers (counted under an objective only).
    pub(super) fn waiting_rows(&self) -> usize {
        let running = self.running_rows.load(Ordering::Relaxed);
        // A batch's rows count as running until all its answers are out,
        // and a caller may take its answer before: the running may outnumber
        // the pending for a moment.
        self.pending_rows.load(Ordering::Relaxed).saturating_sub(running)
    }

    /// What a request finds ahead of it, its own `rows` (counted pending
    /// already) aside.
    pub(super) fn ahead(&self, rows: usize) -> Ahead {
        Ahead {
            rows: self.waiting_rows().saturating_sub(rows),
            running: self.running.load(Ordering::Relaxed),
            running_rows: self.running_rows.load(Ordering::Relaxed),
        }
    }

    /// Whether the queue's running batches are at its limit: its ready batch waits.
    pub(super) fn at_running_limit(&self) -> bool {
        self.running_limit
            .is_some_and(|limit| self.running.load(Ordering::Relaxed) >= limit)
    }
}

/// A steered queue's requests run its batches themselves, up to the cap,
/// while the controller waits for nothing: batches then form from the
/// requests of one turn of the caller's event loop, as they would behind a
/// running batch, without the two thread wake-ups a batch thread costs.
fn inline_cap(steering: Steering) -> usize {
    if steering.timeout.is_zero() {
        steering.cap.max(1)
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_steered_queue_runs_inline_only_while_its_controller_waits_for_nothing() {
        let steering = |cap, micros| Steering {
            cap,
            timeout: Duration::from_micros(micros),
        };
        assert_eq!(inline_cap(steering(16, 0)), 16);
        assert_eq!(inline_cap(steering(0, 0)), 1, "a cap is at least one row");
        assert_eq!(inline_cap(steering(16, 500)), 0, "a wait needs a batch thread's clock");
    }
}
