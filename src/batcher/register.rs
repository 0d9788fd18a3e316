//! Registering a queue: its parts derived from its parameters in turn (the
//! inline limit, the shards callers run from, the batch sizes' costs and
//! the latency controller), then the queue entered for the batch threads.

use std::sync::Arc;
use std::time::Duration;

use super::context::QueueContext;
use super::handle::QueueHandle;
use super::inline::Shards;
use super::objective::lanes::Lanes;
use super::objective::Controller;
use super::queue::Queue;
use super::sizes::RunSizes;
use super::state::QueueState;
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
        let steered = merge && params.objective().is_some();
        // Without merging, every request is a batch of its own: callers may
        // as well run whichever is first, so they share the queue; so do
        // requests placed by a latency objective.
        let shards = match inline_limit.is_zero() || !merge || steered {
            true => Shards::none(),
            false => Shards::new(&params, merge),
        };
        let context = Self::context_for(name.as_str(), params, (merge, steered), runner, metrics);
        let id = self.register(&context, merge, running_limit);
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

    /// What the queue's batches share: its runner and metrics, and the
    /// batch sizes' costs where sizes are allowed.
    fn context_for(
        name: &str,
        params: BatchParams,
        (merge, steered): (bool, bool),
        runner: Arc<dyn Runner>,
        mut metrics: QueueMetrics,
    ) -> Arc<QueueContext> {
        let sizes = (merge && !params.allowed_batch_sizes.is_empty())
            .then(|| Arc::new(RunSizes::new(&params.allowed_batch_sizes)));
        if steered {
            metrics.steered();
        }
        Arc::new(QueueContext {
            name: name.into(),
            runner,
            metrics,
            params,
            clock: Default::default(),
            sizes,
            steered,
        })
    }

    /// Enters the queue for the batch threads, with its controller under a
    /// latency objective; its id.
    fn register(&self, context: &Arc<QueueContext>, merge: bool, running_limit: Option<usize>) -> u64 {
        let params = &context.params;
        let mut queue = match &context.sizes {
            Some(sizes) => Queue::new(params.clone(), merge).with_run_sizes(sizes.clone()),
            None => Queue::new(params.clone(), merge),
        };
        let parallel = running_limit.unwrap_or(self.thread_count).min(self.thread_count);
        let controller = (params.objective().filter(|_| context.steered))
            .map(|objective| Controller::new(objective, params.late_action, params.max_batch_size, parallel));
        if let Some(controller) = &controller {
            queue.steer(controller.cap(), Duration::ZERO);
            context.steering(controller);
        }
        let state = QueueState::new(Lanes::new(queue), controller, running_limit);
        let mut shared = self.shared.lock();
        shared.next_id += 1;
        let id = shared.next_id;
        shared.queues.insert(
            id,
            Entry {
                state,
                context: context.clone(),
                closing: false,
            },
        );
        id
    }
}
