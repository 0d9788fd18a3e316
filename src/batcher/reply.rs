//! Where a batch's answers go: straight to a request's one-shot channel, or
//! into the gather of a request that was split across batches; and the
//! caller's end of that channel.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Instant;

use tokio::sync::oneshot;

use super::context::QueueContext;
use super::objective::Ahead;
use super::{assemble, BatchError, BatchOutput, ReplyResult};
use crate::tensor::Tensor;

/// A queued request's answer, to come. Under a latency objective its rows
/// count on its queue ([`QueueContext::waiting_rows`]) from just before it
/// queues until it is dropped: once its answer is taken, when its caller
/// gives up, or when the queue refuses it.
pub struct Pending {
    receiver: oneshot::Receiver<ReplyResult>,
    /// Boxed: a queue without an objective carries one pointer's room for it.
    counted: Option<Box<Counted>>,
}

/// A steered queue's request, as its controller learns from it.
struct Counted {
    context: Arc<QueueContext>,
    rows: usize,
    /// When it queued: every answered request teaches whether it was late.
    queued: Instant,
    /// Queued behind at least a batch's worth of rows: what it found and
    /// the cap then. Only such a request teaches how fast a backlog clears.
    behind: Option<(Ahead, usize)>,
    /// When its answer was taken, if it was one.
    taken: Option<Instant>,
}

impl Pending {
    /// `rows` count on `context` while the answer is pending, if it has an objective.
    pub(super) fn new(receiver: oneshot::Receiver<ReplyResult>, context: &Arc<QueueContext>, rows: usize) -> Pending {
        let counted = context.controller.is_some().then(|| {
            let found = context.ahead(0);
            context.pending_rows.fetch_add(rows, Ordering::Relaxed);
            let cap = context.steered_cap();
            let behind = (found.rows >= cap).then_some((found, cap));
            Box::new(Counted {
                context: context.clone(),
                rows,
                queued: Instant::now(),
                behind,
                taken: None,
            })
        });
        Pending { receiver, counted }
    }

    /// Whether the answer has not come yet.
    pub fn is_empty(&self) -> bool {
        self.receiver.is_empty()
    }

    pub fn try_recv(&mut self) -> Result<ReplyResult, oneshot::error::TryRecvError> {
        let answer = self.receiver.try_recv();
        self.taking(matches!(answer, Ok(Ok(_))));
        answer
    }

    /// An answer was taken: the request notes when, for its controller to
    /// learn from when it drops.
    fn taking(&mut self, answered: bool) {
        let Some(counted) = self.counted.as_mut().filter(|_| answered) else {
            return;
        };
        if counted.taken.is_none() {
            counted.taken = Some(Instant::now());
        }
    }

    /// Waits for the answer on a thread outside any runtime.
    #[cfg(test)]
    pub fn blocking_recv(mut self) -> Result<ReplyResult, oneshot::error::RecvError> {
        // Its rows stop counting when `self` drops, after the answer came.
        let receiver = std::mem::replace(&mut self.receiver, oneshot::channel().1);
        let answer = receiver.blocking_recv();
        self.taking(matches!(answer, Ok(Ok(_))));
        answer
    }
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending")
            .field("answered", &!self.receiver.is_empty())
            .field("counted_rows", &self.counted.as_ref().map(|counted| counted.rows))
            .finish()
    }
}

impl Future for Pending {
    type Output = Result<ReplyResult, oneshot::error::RecvError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let answer = Pin::new(&mut self.receiver).poll(cx);
        self.taking(matches!(answer, Poll::Ready(Ok(Ok(_)))));
        answer
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        let Some(counted) = &self.counted else { return };
        let context = &counted.context;
        context.pending_rows.fetch_sub(counted.rows, Ordering::Relaxed);
        // Given up on, refused or failed: it says nothing of how fast
        // answers come (and takes no lock).
        let Some(taken) = counted.taken else { return };
        let spent = taken.saturating_duration_since(counted.queued);
        context.answered(spent);
        let Some((found, cap)) = counted.behind else { return };
        if let Some(controller) = &context.controller {
            let mut controller = controller.lock().unwrap_or_else(|p| p.into_inner());
            controller.taken(found, cap, counted.rows, spent, taken);
        }
    }
}

/// Where a task's result goes: straight to its request, or into the gather of
/// a request that was split across batches.
pub(super) enum Reply {
    Whole(oneshot::Sender<ReplyResult>),
    Part { gather: Arc<Gather>, index: usize },
}

impl Reply {
    pub(super) fn is_closed(&self) -> bool {
        match self {
            Reply::Whole(sender) => sender.is_closed(),
            Reply::Part { gather, .. } => gather.is_closed(),
        }
    }

    pub(super) fn send(self, result: ReplyResult) {
        match self {
            // A closed receiver means the client went away; nothing to do.
            Reply::Whole(sender) => drop(sender.send(result)),
            Reply::Part { gather, index } => gather.complete(index, result),
        }
    }
}

/// Reassembles a split request's pieces, in order.
pub(super) struct Gather {
    pub(super) state: Mutex<GatherState>,
}

pub(super) struct GatherState {
    pub(super) sender: Option<oneshot::Sender<ReplyResult>>,
    pub(super) parts: Vec<Option<BatchOutput>>,
    pub(super) remaining: usize,
}

impl Gather {
    pub(super) fn lock(&self) -> MutexGuard<'_, GatherState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn is_closed(&self) -> bool {
        self.lock().sender.as_ref().is_none_or(|s| s.is_closed())
    }

    pub(super) fn complete(&self, index: usize, result: ReplyResult) {
        let mut state = self.lock();
        match result {
            Err(error) => {
                if let Some(sender) = state.sender.take() {
                    drop(sender.send(Err(error)));
                }
            }
            Ok(output) => {
                state.parts[index] = Some(output);
                state.remaining -= 1;
                if state.remaining == 0 {
                    let parts: Vec<BatchOutput> = state.parts.drain(..).flatten().collect();
                    if let Some(sender) = state.sender.take() {
                        drop(sender.send(merge_parts(parts)));
                    }
                }
            }
        }
    }
}

fn merge_parts(parts: Vec<BatchOutput>) -> ReplyResult {
    let outputs = (0..parts[0].outputs.len())
        .map(|i| {
            let pieces: Vec<Tensor> = parts.iter().map(|p| p.outputs[i].clone()).collect();
            assemble::concat(&pieces).map_err(BatchError::Split)
        })
        .collect::<Result<_, _>>()?;
    Ok(BatchOutput {
        outputs,
        queue_time: parts.iter().map(|p| p.queue_time).max().unwrap_or_default(),
        run_time: parts.iter().map(|p| p.run_time).sum(),
        batch_rows: parts.iter().map(|p| p.batch_rows).max().unwrap_or_default(),
        answered_at: parts.iter().map(|p| p.answered_at).max().unwrap_or_else(Instant::now),
    })
}
