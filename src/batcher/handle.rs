//! A queue's handle, what the service holds per servable signature: submits
//! a request's tensors, reports the queue's parameters, and runs a batch on
//! the caller's thread when no batch thread was asked to.

use super::*;

/// A handle on one queue; dropping it lets the queue drain and disappear.
pub struct QueueHandle {
    pub(super) id: u64,
    pub(super) name: String,
    pub(super) merge: bool,
    pub(super) shared: Arc<Shared>,
    pub(super) context: Arc<QueueContext>,
    /// Where requests run by their callers queue (see [`super::inline`]).
    pub(super) shards: Shards,
    pub(super) inline_limit: Duration,
}

/// A queued request: its answer, and whether its caller runs the batch.
pub struct Submitted {
    pub pending: Pending,
    /// No batch thread was asked: the caller yields once, then calls
    /// [`QueueHandle::run_ready`] with this until its answer is in or the
    /// shard is empty.
    pub drive: Option<Drive>,
}

/// Where a request run by its caller queued: its thread's shard (batching
/// on), or the shared queue (batching off, where a request is a batch of its
/// own and any caller may run any of them).
#[derive(Clone, Copy, Debug)]
pub enum Drive {
    Shard(usize),
    Shared,
}

impl QueueHandle {
    /// The batching parameters this queue runs with.
    pub fn params(&self) -> &BatchParams {
        &self.context.params
    }

    /// Queues a request for the batch threads. `input_names` label the
    /// tensors in error messages.
    pub fn submit(
        &self,
        inputs: Vec<Tensor>,
        input_names: &[&str],
        request_id: Option<Arc<str>>,
    ) -> Result<Pending, BatchError> {
        self.queue_request(inputs, input_names, request_id, None)
            .map(|submitted| submitted.pending)
    }

    /// Queues a request, to be run by its caller when the queue is fast
    /// enough ([`Submitted::drive`]), else by the batch threads.
    pub fn submit_or_drive(
        &self,
        inputs: Vec<Tensor>,
        input_names: &[&str],
        request_id: Option<Arc<str>>,
    ) -> Result<Submitted, BatchError> {
        self.queue_request(
            inputs,
            input_names,
            request_id,
            self.context
                .inline_cap()
                .filter(|_| self.context.clock.within(self.inline_limit)),
        )
    }

    /// Takes the ready batch of the shard a request queued on and runs it on
    /// the calling thread; false when there was none.
    pub fn run_ready(&self, drive: Drive) -> bool {
        let work = match drive {
            Drive::Shard(shard) => self.shards.pop_ready(shard, Instant::now()).map(|batch| {
                // A steered queue counts every running batch, wherever it
                // runs, for its controller's estimate (`Shared::finished`
                // counts it out).
                if self.context.counts_running() {
                    self.context.running.fetch_add(1, Ordering::Relaxed);
                }
                let merge = self.merge && !batch.runs_alone();
                Work {
                    batch,
                    context: self.context.clone(),
                    merge,
                }
            }),
            Drive::Shared => self.shared.lock().take_from(self.id, Instant::now()),
        };
        match work {
            Some(work) => {
                worker::run_contained(work);
                self.shared.finished(&self.context);
                true
            }
            None => false,
        }
    }

    /// Queues a request; `inline`: the largest batch its caller may run
    /// (see [`super::context::QueueContext::inline_cap`]), None when the
    /// batch threads run it.
    fn queue_request(
        &self,
        inputs: Vec<Tensor>,
        input_names: &[&str],
        request_id: Option<Arc<str>>,
        inline: Option<usize>,
    ) -> Result<Submitted, BatchError> {
        let (rows, alone) = self.rows_of(&inputs, input_names);
        let (sender, receiver) = oneshot::channel();
        // Counted before it queues, so that no check ever finds it queued
        // and uncounted; a refusal drops it, and its count, on the way out.
        let pending = Pending::new(receiver, &self.context, rows);
        let params = &self.context.params;
        let splitting = !alone && rows > params.max_batch_size && params.enable_large_batch_splitting;
        // Pieces of a split request may land in batches its caller never
        // sees: the batch threads run them.
        if splitting {
            let tasks = self.split_tasks(inputs, rows, request_id, sender);
            self.enqueue(tasks, false, None)?;
            return Ok(Submitted { pending, drive: None });
        }
        let task = Task {
            inputs,
            rows,
            alone,
            request_id,
            enqueued: Instant::now(),
            reply: Reply::Whole(sender),
        };
        let drive = match self.shards.this_thread().zip(inline) {
            Some((shard, cap)) => {
                if self.shared.shutting_down.load(std::sync::atomic::Ordering::Acquire) {
                    return Err(BatchError::ShuttingDown);
                }
                let admitted = self.admit_inline(rows)?;
                match self.shards.push(shard, task, cap) {
                    Ok(()) => Some(Drive::Shard(shard)),
                    // The shared queue takes it or refuses it, in its own words.
                    Err(task) => {
                        self.enqueue(vec![task], true, admitted)?;
                        Some(Drive::Shared)
                    }
                }
            }
            None => {
                self.enqueue(vec![task], inline.is_some(), None)?;
                inline.map(|_| Drive::Shared)
            }
        };
        Ok(Submitted { pending, drive })
    }

    /// A steered queue's controller counts the arrivals its callers run too
    /// (where several batch threads share the queue and single runs stop
    /// keeping up, it chooses to wait, and the batches go back to the batch
    /// threads), and refuses those the rows ahead would make late, as the
    /// shared queue does: a queue that runs one batch at a time never
    /// waits, so its callers may run its batches at any load. Says what the
    /// controller chose, for a request the shards then have no room for.
    fn admit_inline(&self, rows: usize) -> Result<Option<objective::Steering>, BatchError> {
        self.context
            .controller
            .as_ref()
            .map(|controller| self.admit(controller, rows))
            .transpose()
    }

    /// The request's rows, and whether it must run alone. As TF Serving's
    /// batching session: requests merge along the 0th dimension; one whose
    /// inputs have none (or disagree on it) cannot be merged, so it runs alone
    /// and the graph decides whether it is valid.
    fn rows_of(&self, inputs: &[Tensor], input_names: &[&str]) -> (usize, bool) {
        match (self.merge, batch_rows(inputs)) {
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
        }
    }

    /// A request larger than `max_batch_size` as pieces that fill the open
    /// batch and then whole batches; the reply gathers them in order.
    fn split_tasks(
        &self,
        inputs: Vec<Tensor>,
        rows: usize,
        request_id: Option<Arc<str>>,
        sender: oneshot::Sender<ReplyResult>,
    ) -> Vec<Task<Reply>> {
        let enqueued = Instant::now();
        // Slicing happens outside the lock; if the open batch fills meanwhile,
        // the first piece simply opens a new batch.
        let room = self
            .shared
            .lock()
            .queues
            .get(&self.id)
            .map(|e| e.queue.room_for(&inputs))
            .unwrap_or(0);
        let sizes = queue::chunk_sizes(rows, room, self.context.params.max_batch_size);
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
    }

    /// A refusal in the batcher's words, counted.
    fn refused(&self, error: EnqueueError) -> BatchError {
        let metrics = &self.context.metrics;
        match error {
            EnqueueError::Full { batches } => {
                metrics.rejected_full.inc();
                BatchError::QueueFull {
                    queue: self.name.clone(),
                    batches,
                }
            }
            EnqueueError::TooLarge { rows, max } => {
                metrics.rejected_too_large.inc();
                BatchError::TooLarge {
                    queue: self.name.clone(),
                    rows,
                    max,
                }
            }
        }
    }

    /// Under the queue's latency objective: counts the arrival of `rows`,
    /// refuses them when the queue ahead would make them late, and says what
    /// the controller chose.
    fn admit(&self, controller: &Mutex<objective::Controller>, rows: usize) -> Result<objective::Steering, BatchError> {
        // The rows are counted pending already.
        let ahead = self.context.ahead(rows);
        let mut controller = controller.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        self.context.teach_answered(&mut controller);
        controller.arrived(rows, now);
        let verdict = controller.check(rows, ahead, Duration::ZERO, now);
        self.show_refusing(controller.refusing(now));
        if let Err(late) = verdict {
            self.context.metrics.rejected_late.inc();
            return Err(self.late(late));
        }
        Ok(controller.steering())
    }

    /// Whether the objective refuses, in `/metrics`.
    fn show_refusing(&self, refusing: bool) {
        if let Some(gauges) = &self.context.metrics.steering {
            gauges.refusing.set(i64::from(refusing));
        }
    }

    fn late(&self, late: objective::Late) -> BatchError {
        let objective = self.context.params.objective();
        BatchError::Late {
            queue: self.name.clone(),
            waiting_rows: late.waiting_rows,
            estimate_ms: late.estimate.as_secs_f64() * 1000.0,
            waited_ms: late.waited.as_secs_f64() * 1000.0,
            objective_ms: objective.map_or(0.0, |o| o.latency.as_secs_f64() * 1000.0),
            percentile: objective.map_or(0.0, |o| o.percentile),
        }
    }

    /// Whether a request of one row that has `waited` since its bytes
    /// arrived would be refused as late were it queued now: the check the
    /// queue makes at enqueue, made before the request's body is read so
    /// that a refusal costs no decoding. The controller learns from it
    /// whether refusing shortens the waits; the caller counts the refusal it
    /// makes ([`QueueHandle::count_late`]). `None` without an objective.
    pub fn late_now(&self, waited: Duration) -> Option<BatchError> {
        let controller = self.context.controller.as_ref()?;
        let ahead = self.context.ahead(0);
        let now = Instant::now();
        let (verdict, refusing) = {
            let mut controller = controller.lock().unwrap_or_else(|p| p.into_inner());
            self.context.teach_answered(&mut controller);
            let verdict = controller.check(1, ahead, waited, now);
            (verdict, controller.refusing(now))
        };
        self.show_refusing(refusing);
        verdict.err().map(|late| self.late(late))
    }

    /// Counts a request refused as late before it was queued.
    pub fn count_late(&self) {
        self.context.metrics.rejected_late.inc();
    }

    /// Puts the tasks on the shared queue, or refuses them all (full, too
    /// large, shutting down, or late: unless `admitted` says what a steered
    /// queue's controller chose when it counted and checked them already);
    /// wakes an idle batch thread unless the caller drives.
    fn enqueue(
        &self,
        tasks: Vec<Task<Reply>>,
        drive: bool,
        admitted: Option<objective::Steering>,
    ) -> Result<(), BatchError> {
        let wake = {
            let mut state = self.shared.lock();
            if state.shutdown {
                return Err(BatchError::ShuttingDown);
            }
            let entry = state.queues.get_mut(&self.id).ok_or(BatchError::ShuttingDown)?;
            if let Some(controller) = &self.context.controller {
                let steering = match admitted {
                    Some(steering) => steering,
                    None => self.admit(controller, tasks.iter().map(|t| t.rows).sum())?,
                };
                entry.queue.steer(steering.cap, steering.timeout);
            }
            if let Err((error, _)) = entry.queue.enqueue(tasks) {
                return Err(self.refused(error));
            }
            entry.context.metrics.depth.set(entry.queue.depth() as i64);
            // A steered queue's controller may have chosen to wait since its
            // caller chose to drive: then only a batch thread's clock runs it.
            (!drive || self.context.controller.is_some()) && state.idle > 0
        };
        // A busy thread looks at the queues again when its batch is done.
        if wake {
            self.shared.wake.notify_one();
        }
        Ok(())
    }
}

/// The 0th dimension all of a request's inputs share, or `None` when one is a
/// scalar or they disagree (such a request cannot be merged with others).
pub(super) fn batch_rows(inputs: &[Tensor]) -> Option<usize> {
    let mut dims = inputs.iter().map(|t| t.shape.first().copied());
    let first = dims.next().unwrap_or(Some(0))?;
    dims.all(|d| d == Some(first)).then_some(first)
}

/// How many queues in the process have a latency objective: while none
/// does, requests skip the check before their bodies are read.
pub(super) static STEERED_QUEUES: AtomicUsize = AtomicUsize::new(0);

/// Whether any queue has a latency objective.
pub fn any_steered() -> bool {
    STEERED_QUEUES.load(Ordering::Relaxed) > 0
}

impl Drop for QueueHandle {
    /// An empty queue goes at once (its runner, and so the model, with it);
    /// one still holding requests drains first and is removed by a batch thread.
    fn drop(&mut self) {
        if self.context.controller.is_some() {
            STEERED_QUEUES.fetch_sub(1, Ordering::Relaxed);
        }
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
