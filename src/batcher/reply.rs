//! Where a batch's answers go: straight to a request's one-shot channel, or
//! into the gather of a request that was split across batches; and the
//! caller's end of that channel.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Instant;

use tokio::sync::oneshot;

use super::{assemble, BatchError, BatchOutput, ReplyResult, Shared};
use crate::tensor::Tensor;

/// A queued request's answer, to come. Under a latency objective, a request
/// admitted on time tells its queue, as its answer is taken, whether that
/// was by its deadline: what the controller's margin learns from.
pub struct Pending {
    receiver: oneshot::Receiver<ReplyResult>,
    /// Boxed: a request without a deadline to report carries one pointer's room for it.
    counted: Option<Box<Counted>>,
}

/// Where an on-time request's answer is reported.
struct Counted {
    shared: Arc<Shared>,
    queue: u64,
    deadline: Instant,
}

impl Pending {
    pub(super) fn new(receiver: oneshot::Receiver<ReplyResult>) -> Pending {
        Pending {
            receiver,
            counted: None,
        }
    }

    /// An on-time request of queue `queue`, due by `deadline`: its answer,
    /// once taken, is reported to the queue.
    pub(super) fn reported(mut self, shared: &Arc<Shared>, queue: u64, deadline: Instant) -> Pending {
        self.counted = Some(Box::new(Counted {
            shared: shared.clone(),
            queue,
            deadline,
        }));
        self
    }

    /// Whether the answer has not come yet.
    pub fn is_empty(&self) -> bool {
        self.receiver.is_empty()
    }

    pub fn try_recv(&mut self) -> Result<ReplyResult, oneshot::error::TryRecvError> {
        let answer = self.receiver.try_recv();
        if let Ok(Ok(_)) = &answer {
            self.taking();
        }
        answer
    }

    /// An answer was taken: an on-time request reports when, once.
    fn taking(&mut self) {
        let Some(counted) = self.counted.take() else {
            return;
        };
        let now = Instant::now();
        let mut state = counted.shared.lock();
        if let Some(entry) = state.queues.get_mut(&counted.queue) {
            entry.state.answered(counted.deadline, now);
        }
    }

    /// Waits for the answer on a thread outside any runtime.
    #[cfg(test)]
    pub fn blocking_recv(mut self) -> Result<ReplyResult, oneshot::error::RecvError> {
        let receiver = std::mem::replace(&mut self.receiver, oneshot::channel().1);
        let answer = receiver.blocking_recv();
        if let Ok(Ok(_)) = &answer {
            self.taking();
        }
        answer
    }
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending")
            .field("answered", &!self.receiver.is_empty())
            .field("reported", &self.counted.is_some())
            .finish()
    }
}

impl Future for Pending {
    type Output = Result<ReplyResult, oneshot::error::RecvError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let answer = Pin::new(&mut self.receiver).poll(cx);
        if let Poll::Ready(Ok(Ok(_))) = &answer {
            self.taking();
        }
        answer
    }
}

/// What a request keeps for as long as its work exists (its decoded inputs'
/// bytes of the REST budget): given back once its answer is sent or its
/// work is dropped, not when its caller stops waiting (a timeout, a client
/// gone) while the inputs are still queued or running.
pub type Held = Box<dyn Send + Sync>;

/// Where a task's result goes: straight to its request, or into the gather of
/// a request that was split across batches.
pub(super) enum Reply {
    Whole {
        sender: oneshot::Sender<ReplyResult>,
        held: Option<Held>,
    },
    Part {
        gather: Arc<Gather>,
        index: usize,
    },
}

impl Reply {
    pub(super) fn is_closed(&self) -> bool {
        match self {
            Reply::Whole { sender, .. } => sender.is_closed(),
            Reply::Part { gather, .. } => gather.is_closed(),
        }
    }

    pub(super) fn send(self, result: ReplyResult) {
        match self {
            // A closed receiver means the client went away; nothing to do.
            Reply::Whole { sender, held } => {
                drop(sender.send(result));
                drop(held);
            }
            Reply::Part { gather, index } => gather.complete(index, result),
        }
    }
}

/// Reassembles a split request's pieces, in order.
pub(super) struct Gather {
    pub(super) state: Mutex<GatherState>,
    /// Given back when the last piece's task is dropped.
    pub(super) _held: Option<Held>,
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
