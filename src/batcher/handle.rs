//! A queue's handle, what the service holds per servable signature: submits
//! a request's tensors, reports the queue's parameters, and runs a batch on
//! the caller's thread when no batch thread was asked to.

use super::objective::Admission;
use super::state::Refusal;
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
                let queue_timeout = self.context.params.queue_timeout();
                let now = Instant::now();
                let (expired, _) = queue::drain_where(&mut batch.tasks, |task| {
                    objective::lanes::waited_past(task, now, queue_timeout)
                });
                batch.recount();
                Work {
                    id: self.id,
                    merge: self.merge && !batch.runs_alone(),
                    batch: Some(batch),
                    expired,
                    context: self.context.clone(),
                    run_id: None,
                }
            }),
            Drive::Shared => self.shared.lock().take_from(self.id, Instant::now()),
        };
        match work {
            Some(work) => {
                let (id, run_id) = (work.id, work.run_id);
                let ran = worker::run_contained(work);
                self.shared.finished(id, run_id, ran);
                true
            }
            None => false,
        }
    }

    /// Queues a request, on the caller's shard when `inline` (the caller
    /// runs it), else for the batch threads; under a latency objective, on
    /// the shared queue after its verdict: on time, refused, or on the late lane.
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
        let deadline = self
            .objective()
            .map(|objective| arrived.unwrap_or(now) + objective.latency);
        let params = &self.context.params;
        let pending = Pending::new(receiver);
        // Pieces of a split request may land in batches its caller never
        // sees: the batch threads run them.
        if !alone && rows > params.max_batch_size && params.enable_large_batch_splitting {
            let tasks = self.split_tasks(inputs, rows, request_id, (sender, held), deadline);
            let admission = self.enqueue(tasks, false, rows, deadline, now)?;
            let pending = self.reported(pending, admission, deadline);
            return Ok(Submitted { pending, drive: None });
        }
        let task = Task {
            inputs,
            rows,
            alone,
            request_id,
            enqueued: now,
            deadline,
            reply: Reply::Whole { sender, held },
        };
        let task = match inline {
            true => match self.on_shard(task)? {
                Ok(drive) => {
                    let drive = Some(drive);
                    return Ok(Submitted { pending, drive });
                }
                Err(task) => task,
            },
            false => task,
        };
        let admission = self.enqueue(vec![task], inline, rows, deadline, now)?;
        // Late ones wait for idle batch threads: the batch threads run them.
        let drive = match admission {
            Admission::OnTime if inline => Some(Drive::Shared),
            _ => None,
        };
        let pending = self.reported(pending, admission, deadline);
        Ok(Submitted { pending, drive })
    }

    /// An on-time request's answer, reported to the queue when it is taken.
    fn reported(&self, pending: Pending, admission: Admission, deadline: Option<Instant>) -> Pending {
        match (admission, deadline) {
            (Admission::OnTime, Some(deadline)) => pending.reported(&self.shared, self.id, deadline),
            _ => pending,
        }
    }

    /// Queues one request's task on the caller's shard, where the queue has
    /// shards; gives the task back for the shared queue where it has none
    /// or the shard does not take it.
    fn on_shard(&self, task: Task<Reply>) -> Result<Result<Drive, Task<Reply>>, BatchError> {
        let Some(shard) = self.shards.this_thread() else {
            return Ok(Err(task));
        };
        if self.shared.shutting_down.load(Ordering::Acquire) {
            return Err(BatchError::ShuttingDown);
        }
        // The shared queue takes what a shard does not, or refuses it in its own words.
        Ok(self.shards.push(shard, task).map(|()| Drive::Shard(shard)))
    }

    /// The latency objective requests meet here, if any.
    fn objective(&self) -> Option<objective::Objective> {
        self.context.params.objective().filter(|_| self.context.steered)
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
            .map(|e| e.state.lanes.on_time.room_for(&inputs))
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
    fn refused(&self, refusal: Refusal) -> BatchError {
        let metrics = &self.context.metrics;
        match refusal {
            Refusal::Late(late) => {
                metrics.rejected_late.inc();
                self.context.late(late)
            }
            Refusal::Queue(EnqueueError::Full { batches }) => {
                metrics.rejected_full.inc();
                BatchError::QueueFull {
                    queue: self.name.clone(),
                    batches,
                }
            }
            Refusal::Queue(EnqueueError::TooLarge { rows, max }) => {
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
        let objective = self.objective()?;
        let state = self.shared.lock();
        let queue = &state.queues.get(&self.id)?.state;
        match queue.verdict(1, arrived + objective.latency, Instant::now()) {
            Admission::Refuse(late) => Some(self.context.late(late)),
            Admission::OnTime | Admission::Delay { .. } => None,
        }
    }

    /// Counts a request refused as late before it was queued.
    pub fn count_late(&self) {
        self.context.metrics.rejected_late.inc();
    }

    /// Queues the tasks (`rows` in all, due by `deadline`) on the shared
    /// queue after their verdict, or refuses them all (late, full, too
    /// large, shutting down); wakes an idle batch thread unless the caller
    /// drives (`drive`).
    fn enqueue(
        &self,
        tasks: Vec<Task<Reply>>,
        drive: bool,
        rows: usize,
        deadline: Option<Instant>,
        now: Instant,
    ) -> Result<Admission, BatchError> {
        let (admission, wake) = {
            let mut state = self.shared.lock();
            if state.shutdown {
                return Err(BatchError::ShuttingDown);
            }
            let idle = state.idle > 0;
            let entry = state.queues.get_mut(&self.id).ok_or(BatchError::ShuttingDown)?;
            let admission = match entry.state.submit(tasks, rows, deadline, now) {
                Ok(admission) => admission,
                Err((refusal, _tasks)) => return Err(self.refused(refusal)),
            };
            entry.context.metrics.depth.set(entry.state.lanes.depth() as i64);
            // Late work is only ever run by a batch thread.
            let late = matches!(admission, Admission::Delay { .. });
            (admission, (!drive || late) && idle)
        };
        // A busy thread looks at the queues again when its batch is done.
        if wake {
            self.shared.wake.notify_one();
        }
        Ok(admission)
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
        let removed = {
            let mut state = self.shared.lock();
            match state.queues.get_mut(&self.id) {
                Some(entry) if entry.state.lanes.is_empty() => state.queues.remove(&self.id),
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
