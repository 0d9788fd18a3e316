//! Cutting requests out of a batch, or a request larger than a batch into
//! pieces; and the wait until a batch is due.

use std::time::{Duration, Instant};

use super::Task;
use crate::tensor::Tensor;

/// Splits a task's inputs into row chunks of the given sizes.
pub fn split_inputs(inputs: &[Tensor], sizes: &[usize]) -> Vec<Vec<Tensor>> {
    let mut start = 0;
    sizes
        .iter()
        .map(|&n| {
            let chunk = inputs
                .iter()
                .map(|t| crate::batcher::assemble::slice_rows(t, start, start + n))
                .collect();
            start += n;
            chunk
        })
        .collect()
}

/// Chunk sizes for a large request: first whatever fits the open batch, then
/// full batches.
pub fn chunk_sizes(rows: usize, room: usize, max: usize) -> Vec<usize> {
    let mut sizes = Vec::new();
    let mut left = rows;
    if room > 0 {
        let first = room.min(left);
        sizes.push(first);
        left -= first;
    }
    while left > 0 {
        let n = left.min(max);
        sizes.push(n);
        left -= n;
    }
    sizes
}

/// How long until `deadline`, for condition-variable waits.
pub fn until(deadline: Instant, now: Instant) -> Duration {
    deadline.saturating_duration_since(now)
}

/// Takes the tasks `expired` gives a verdict on out of `tasks`, in order;
/// with how many were taken.
pub fn drain_where<R, W>(
    tasks: &mut Vec<Task<R>>,
    expired: impl Fn(&Task<R>) -> Option<W>,
) -> (Vec<(Task<R>, W)>, usize) {
    if !tasks.iter().any(|task| expired(task).is_some()) {
        return (Vec::new(), 0);
    }
    let (mut out, mut kept) = (Vec::new(), Vec::with_capacity(tasks.len()));
    for task in tasks.drain(..) {
        match expired(&task) {
            Some(why) => out.push((task, why)),
            None => kept.push(task),
        }
    }
    *tasks = kept;
    let count = out.len();
    (out, count)
}
