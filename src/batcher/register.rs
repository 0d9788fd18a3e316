//! Registering a queue: its parts derived from its parameters in turn (the
//! inline limit, the shards callers run from, the batch sizes' costs and
//! the latency controller), then the queue entered for the batch threads.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::context::QueueContext;
use super::handle::QueueHandle;
use super::inline::Shards;
use super::objective::lanes::Lanes;
use super::objective::Controller;
use super::queue::Queue;
use super::sizes::RunSizes;
use super::{BatchParams, Batcher, Entry, Runner};
use crate::metrics::QueueMetrics;

impl Batcher {
    /// Adds a queue. `merge` false runs every request alone (batching off).
    /// `name` describes the queue in error messages. At most `running_limit`
    /// of its batches run at once (None: as many as there are batch threads);
    /// such a queue's batches always run on the batch threads.
    pub fn add_queue(
        &self,
        name: String,
        params: BatchParams,
        merge: bool,
        runner: Arc<dyn Runner>,
        metrics: QueueMetrics,
        running_limit: Option<usize>,
    ) -> QueueHandle {
        let inline_limit = self.inline_limit_for(&params, merge, running_limit);
        // Without merging, every request is a batch of its own: callers may
        // as well run whichever is first, so they share the queue.
        let shards = match inline_limit.is_zero() || !merge {
            true => Shards::none(),
            false => Shards::new(&params, merge),
        };
        let context = self.context_for(name.as_str(), params, merge, runner, metrics, running_limit);
        let id = self.register(&context, merge);
        QueueHandle {
            id,
            name,
            merge,
            shared: self.shared.clone(),
            context,
            shards,
            inline_limit,
        }
    }

    /// How long a run may take and still run on its caller's thread: zero
    /// where a batch waits for its timeout (a thread must watch the clock;
    /// a latency objective never waits to fill) or its runs are limited.
    fn inline_limit_for(&self, params: &BatchParams, merge: bool, running_limit: Option<usize>) -> Duration {
        let objective = params.objective().filter(|_| merge);
        match (params.batch_timeout_micros, objective) {
            (0, _) | (_, Some(_)) if running_limit.is_none() => self.inline_limit,
            _ => Duration::ZERO,
        }
    }

    /// What the queue's batches share: its runner and metrics, the batch
    /// sizes' costs where sizes are allowed, and the controller under a
    /// latency objective.
    fn context_for(
        &self,
        name: &str,
        params: BatchParams,
        merge: bool,
        runner: Arc<dyn Runner>,
        mut metrics: QueueMetrics,
        running_limit: Option<usize>,
    ) -> Arc<QueueContext> {
        let objective = params.objective().filter(|_| merge);
        let sizes = (merge && !params.allowed_batch_sizes.is_empty())
            .then(|| Arc::new(RunSizes::new(&params.allowed_batch_sizes)));
        let parallel = running_limit.unwrap_or(self.thread_count).min(self.thread_count);
        let controller =
            objective.map(|objective| Controller::new(objective, params.late_action, params.max_batch_size, parallel));
        self.shared
            .steered_queues
            .fetch_add(usize::from(controller.is_some()), Ordering::Relaxed);
        if let Some(controller) = &controller {
            metrics.steered().cap.set(controller.cap() as i64);
        }
        Arc::new(QueueContext::new(
            name.into(),
            runner,
            metrics,
            params,
            sizes,
            running_limit,
            controller.map(Mutex::new),
        ))
    }

    /// Enters the queue for the batch threads; its id.
    fn register(&self, context: &Arc<QueueContext>, merge: bool) -> u64 {
        let mut queue = match &context.sizes {
            Some(sizes) => Queue::new(context.params.clone(), merge).with_run_sizes(sizes.clone()),
            None => Queue::new(context.params.clone(), merge),
        };
        if context.controller.is_some() {
            queue.steer(context.cap(), Duration::ZERO);
        }
        let mut state = self.shared.lock();
        state.next_id += 1;
        let id = state.next_id;
        state.queues.insert(
            id,
            Entry {
                lanes: Lanes::new(queue),
                context: context.clone(),
                closing: false,
            },
        );
        id
    }
}
