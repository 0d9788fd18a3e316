//! A queue's handle, what the service holds per servable signature: submits
//! a request's tensors, reports the queue's parameters, and runs a batch on
//! the caller's thread when no batch thread was asked to.

use super::objective::Admission;
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
    /// tensors in error messages; `arrived`, when its transport knows it, is
    /// when its bytes arrived (else now), from which a latency objective's
    /// deadline counts.
    pub fn submit(
        &self,
        inputs: Vec<Tensor>,
        input_names: &[&str],
        request_id: Option<Arc<str>>,
        arrived: Option<Instant>,
    ) -> Result<Pending, BatchError> {
        self.queue_request(inputs, input_names, request_id, arrived, None, false)
            .map(|submitted| submitted.pending)
    }

    /// Queues a request, to be run by its caller when the queue is fast
    /// enough ([`Submitted::drive`]), else by the batch threads.
    pub fn submit_or_drive(
        &self,
        inputs: Vec<Tensor>,
        input_names: &[&str],
        request_id: Option<Arc<str>>,
        arrived: Option<Instant>,
        held: Option<Held>,
    ) -> Result<Submitted, BatchError> {
        let inline = self.context.clock.within(self.inline_limit);
        self.queue_request(inputs, input_names, request_id, arrived, held, inline)
    }

    /// Takes the ready batch of the shard a request queued on and runs it on
    /// the calling thread; false when there was none.
    pub fn run_ready(&self, drive: Drive) -> bool {
        let work = match drive {
            Drive::Shard(shard) => self.shards.pop_ready(shard, Instant::now()).map(|mut batch| {
                let context = &self.context;
                let run = context.controller().and_then(|c| c.planned_run(batch.rows));
                let expired = objective::lanes::expire(
                    &mut batch,
                    Instant::now(),
                    run,
                    Duration::ZERO,
                    context.params.queue_timeout(),
                );
                // A steered queue counts every running batch, wherever it
                // runs, for its controller's plans (`Shared::finished`
                // counts it out).
                if context.counts_running() {
                    context.running.fetch_add(1, Ordering::Relaxed);
                }
                let merge = self.merge && !batch.runs_alone();
                Work {
                    run_id: context.started(batch.rows),
                    batch,
                    expired,
                    context: context.clone(),
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

    /// Queues a request, on the caller's shard when `inline` (the caller
    /// runs it), else for the batch threads; under a latency objective, after
    /// its verdict: on time, refused, or on the late lane.
    // Kept whole: one request's verdict and the queue it then takes share its locals (rows,
    // deadline, the reply channel) and each path hands them on exactly once.
    fn queue_request(
        &self,
        inputs: Vec<Tensor>,
        input_names: &[&str],
        request_id: Option<Arc<str>>,
        arrived: Option<Instant>,
        held: Option<Held>,
        inline: bool,
    ) -> Result<Submitted, BatchError> {
        let (rows, alone) = self.rows_of(&inputs, input_names);
        let (sender, receiver) = oneshot::channel();
        let now = Instant::now();
        let objective = self.context.params.objective().filter(|_| self.merge);
        let deadline = objective.map(|objective| arrived.unwrap_or(now) + objective.latency);
        // Counted before it queues, so that no check ever finds it queued
        // and uncounted; a refusal drops it, and its count, on the way out.
        let mut pending = Pending::new(receiver, &self.context, rows, deadline);
        let admission = match deadline {
            Some(deadline) => self.admit(rows, deadline, now)?,
            None => Admission::OnTime,
        };
        let params = &self.context.params;
        let splitting = !alone && rows > params.max_batch_size && params.enable_large_batch_splitting;
        let delayed = matches!(admission, Admission::Delay(_));
        let task = |inputs, request_id, sender, held| Task {
            inputs,
            rows,
            alone,
            request_id,
            enqueued: now,
            deadline,
            reply: Reply::Whole { sender, held },
        };
        // Pieces of a split request may land in batches its caller never
        // sees, and late ones wait for idle batch threads: the batch threads run them.
        if splitting || delayed {
            let tasks = match splitting {
                true => self.split_tasks(inputs, rows, request_id, (sender, held), deadline),
                false => vec![task(inputs, request_id, sender, held)],
            };
            if delayed {
                pending.delayed();
            }
            self.enqueue(tasks, false, admission)?;
            return Ok(Submitted { pending, drive: None });
        }
        let task = task(inputs, request_id, sender, held);
        let drive = match self.shards.this_thread().filter(|_| inline) {
            Some(shard) => {
                if self.shared.shutting_down.load(std::sync::atomic::Ordering::Acquire) {
                    return Err(BatchError::ShuttingDown);
                }
                match self.shards.push(shard, task, self.context.inline_cap()) {
                    Ok(()) => Some(Drive::Shard(shard)),
                    // The shared queue takes it or refuses it, in its own words.
                    Err(task) => {
                        self.enqueue(vec![task], true, admission)?;
                        Some(Drive::Shared)
                    }
                }
            }
            None => {
                self.enqueue(vec![task], inline, admission)?;
                inline.then_some(Drive::Shared)
            }
        };
        Ok(Submitted { pending, drive })
    }

    /// The objective's verdict on a request of `rows` rows due by
    /// `deadline`, at `now`: a refusal is counted and returned.
    fn admit(&self, rows: usize, deadline: Instant, now: Instant) -> Result<Admission, BatchError> {
        // The rows are counted pending already.
        let waiting = self.context.waiting(rows);
        let Some(controller) = self.context.controller() else {
            return Ok(Admission::OnTime);
        };
        match controller.admit(rows, waiting, deadline, now) {
            Admission::Refuse(late) => {
                drop(controller);
                self.context.metrics.rejected_late.inc();
                Err(self.context.late(late))
            }
            admission => Ok(admission),
        }
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
        (sender, held): (oneshot::Sender<ReplyResult>, Option<Held>),
        deadline: Option<Instant>,
    ) -> Vec<Task<Reply>> {
        let enqueued = Instant::now();
        // Slicing happens outside the lock; if the open batch fills meanwhile,
        // the first piece simply opens a new batch.
        let room = self
            .shared
            .lock()
            .queues
            .get(&self.id)
            .map(|e| e.lanes.on_time.room_for(&inputs))
            .unwrap_or(0);
        let sizes = queue::chunk_sizes(rows, room, self.context.params.max_batch_size);
        let gather = Arc::new(Gather {
            state: Mutex::new(GatherState {
                sender: Some(sender),
                parts: vec![None; sizes.len()],
                remaining: sizes.len(),
            }),
            _held: held,
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
                deadline,
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

    /// Why a request of one row that arrived at `arrived` would be refused
    /// as late were it queued now: the check made before a request's body is
    /// read, so that a refusal costs no decoding. A question only: it
    /// changes nothing; the caller counts the refusal it makes
    /// ([`QueueHandle::count_late`]). `None` without an objective.
    pub fn late_at_head(&self, arrived: Instant) -> Option<BatchError> {
        let objective = self.context.params.objective().filter(|_| self.merge)?;
        let waiting = self.context.waiting(0);
        let admission = self
            .context
            .controller()?
            .admit(1, waiting, arrived + objective.latency, Instant::now());
        match admission {
            Admission::Refuse(late) => Some(self.context.late(late)),
            Admission::OnTime | Admission::Delay(_) => None,
        }
    }

    /// Counts a request refused as late before it was queued.
    pub fn count_late(&self) {
        self.context.metrics.rejected_late.inc();
    }

    /// Puts the tasks on the shared queue, on-time or late lane as
    /// `admission` says, or refuses them all (full, too large, shutting
    /// down); wakes an idle batch thread unless the caller drives.
    fn enqueue(&self, tasks: Vec<Task<Reply>>, drive: bool, admission: Admission) -> Result<(), BatchError> {
        let wake = {
            let mut state = self.shared.lock();
            if state.shutdown {
                return Err(BatchError::ShuttingDown);
            }
            let entry = state.queues.get_mut(&self.id).ok_or(BatchError::ShuttingDown)?;
            let steered = self.context.controller.is_some();
            let late = matches!(admission, Admission::Delay(_));
            let lane = match late {
                true => &mut entry.lanes.late,
                false => &mut entry.lanes.on_time,
            };
            if steered {
                lane.steer(self.context.cap(), Duration::ZERO);
            }
            let rows: usize = tasks.iter().map(|task| task.rows).sum();
            if let Err((error, _)) = lane.enqueue(tasks) {
                return Err(self.refused(error));
            }
            if late {
                self.context.late_rows.fetch_add(rows, Ordering::Relaxed);
            }
            entry.context.metrics.depth.set(entry.lanes.depth() as i64);
            // Late work is only ever run by a batch thread.
            (!drive || late) && state.idle > 0
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

impl Drop for QueueHandle {
    /// An empty queue goes at once (its runner, and so the model, with it);
    /// one still holding requests drains first and is removed by a batch thread.
    fn drop(&mut self) {
        if self.context.controller.is_some() {
            self.shared.steered_queues.fetch_sub(1, Ordering::Relaxed);
        }
        let removed = {
            let mut state = self.shared.lock();
            match state.queues.get_mut(&self.id) {
                Some(entry) if entry.lanes.is_empty() => state.queues.remove(&self.id),
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
