//! What running one of a queue's batches needs, shared by the queue's entry
//! in the batch threads' table and by its handle: one reference count per
//! batch rather than one per part. Its state (lanes, controller, running
//! batches) is not here: that is [`super::state::QueueState`], under the
//! batcher's lock.

use std::sync::Arc;

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
    /// Whether requests meet a latency objective here.
    pub(super) steered: bool,
}

impl QueueContext {
    /// Publishes what the queue's controller chose: its cap and margin.
    pub(super) fn steering(&self, controller: &Controller) {
        if let Some(gauges) = &self.metrics.steering {
            gauges.cap.set(controller.cap() as i64);
            gauges.margin.set(controller.margin());
        }
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
}
