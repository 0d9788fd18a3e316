//! The batch threads: take a ready batch, drop abandoned requests, assemble
//! one tensor per input, run, split the outputs back, reply; a panic fails
//! the batch's requests and the thread goes on.

use std::time::{Duration, Instant};

use super::objective::lanes::Expired;
use super::objective::Late;
use super::queue::{self, Task};
use super::reply::Reply;
use super::{assemble, BatchError, BatchOutput, BatchParams, ReplyResult, Runner, Shared, Work};
use crate::runtime::RuntimeError;
use crate::status::{panic_message, Code};
use crate::tensor::Tensor;

pub(super) fn worker(shared: &Shared) {
    loop {
        let work = {
            let mut state = shared.lock();
            loop {
                let now = Instant::now();
                if let Some(work) = state.take_ready(now) {
                    break Some(work);
                }
                state.queues.retain(|_, e| !(e.closing && e.state.lanes.is_empty()));
                if state.shutdown && state.queues.values().all(|e| e.state.lanes.is_empty()) {
                    break None;
                }
                state.idle += 1;
                state = match state.next_deadline() {
                    Some(deadline) => {
                        shared
                            .wake
                            .wait_timeout(state, queue::until(deadline, now))
                            .unwrap_or_else(|p| p.into_inner())
                            .0
                    }
                    None => shared.wake.wait(state).unwrap_or_else(|p| p.into_inner()),
                };
                state.idle -= 1;
            }
        };
        match work {
            Some(work) => {
                let (id, run_id) = (work.id, work.run_id);
                let ran = run_contained(work);
                shared.finished(id, run_id, ran);
            }
            None => {
                // Let the other threads see the shutdown too.
                shared.wake.notify_all();
                return;
            }
        }
    }
}

/// Runs one batch, on a batch thread or inline on a request's: the rows
/// run (padding included) and the run's time, where a merged batch ran to
/// learn from. A panic anywhere in it must not end the thread: its
/// requests' reply channels close (they answer an error) and the thread
/// goes on serving.
pub(super) fn run_contained(work: Work) -> Option<(usize, Duration)> {
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| process(work)));
    ran.unwrap_or_else(|_| {
        log::error!("a batch panicked; its requests were answered with an error");
        None
    })
}

/// Runs one batch: drop abandoned requests, assemble, run, split, reply.
fn process(work: Work) -> Option<(usize, Duration)> {
    let Work {
        batch,
        expired,
        context,
        merge,
        ..
    } = work;
    if !expired.is_empty() {
        answer_expired(&context, expired);
    }
    let mut live = still_awaited(&context, batch?.tasks)?;
    let rows: usize = live.iter().map(|t| t.rows).sum();
    let run_rows = if merge { context.params.padded_size(rows) } else { rows };
    if run_rows > rows {
        context.metrics.padding_rows.inc_by((run_rows - rows) as u64);
    }
    let inputs = match assemble_inputs(&mut live, &context.params, run_rows) {
        Ok(inputs) => inputs,
        Err(message) => {
            reply_all(live, Err(BatchError::Inputs(message)));
            return None;
        }
    };
    let run_started = Instant::now();
    let result = run_guarded(context.runner.as_ref(), inputs);
    let ran = Ran {
        started: run_started,
        time: run_started.elapsed(),
        rows,
        run_rows,
    };
    record_run(&context, &ran, merge && result.is_ok());
    match result {
        Ok(outputs) => {
            log::debug!(
                "{}: ran {run_rows} rows in {:.3} ms ({})",
                context.name,
                ran.time.as_secs_f64() * 1000.0,
                request_ids(&live)
            );
            reply_rows(live, outputs, &ran);
            Some((ran.run_rows, ran.time))
        }
        Err(error) => {
            log::warn!(
                "{}: batch of {rows} rows failed ({}): {error}",
                context.name,
                request_ids(&live)
            );
            reply_all(live, Err(BatchError::Run(error)));
            None
        }
    }
}

/// The tasks whose callers still wait, their rows and waits observed, and
/// the others counted as dropped; `None` when no one waits.
fn still_awaited(context: &super::QueueContext, tasks: Vec<Task<Reply>>) -> Option<Vec<Task<Reply>>> {
    let started = Instant::now();
    let metrics = &context.metrics;
    let (live, gone): (Vec<Task<Reply>>, Vec<Task<Reply>>) = tasks.into_iter().partition(|t| !t.reply.is_closed());
    // Metric updates are atomics every thread shares: one per batch where
    // one will do, none for a zero.
    if !gone.is_empty() {
        metrics.dropped.inc_by(gone.len() as u64);
    }
    if live.is_empty() {
        return None;
    }
    let rows: usize = live.iter().map(|t| t.rows).sum();
    metrics.batch_rows.observe(rows as f64);
    let waited = |task: &Task<Reply>| started.duration_since(task.enqueued).as_secs_f64();
    match live.as_slice() {
        [task] => metrics.queue_wait.observe(waited(task)),
        tasks => {
            let queue_wait = metrics.queue_wait.local();
            tasks.iter().for_each(|task| queue_wait.observe(waited(task)));
            queue_wait.flush();
        }
    }
    Some(live)
}

/// A run's time, where the queue's estimates outside its state learn from
/// it: the clock always, the batch sizes' costs for a merged batch that ran
/// (`sized`). Its controller learns when the batch is finished.
fn record_run(context: &super::QueueContext, ran: &Ran, sized: bool) {
    context.metrics.run.observe(ran.time.as_secs_f64());
    context.clock.record(ran.time);
    if let Some(sizes) = context.sizes.as_ref().filter(|_| sized) {
        sizes.record(ran.run_rows, ran.time);
    }
}

/// Answers the requests taken out of a batch unrun, each in the words of
/// why, counted as refusals.
fn answer_expired(context: &super::QueueContext, expired: Vec<(Task<Reply>, Expired)>) {
    let now = Instant::now();
    let objective = context.params.objective();
    for (task, why) in expired {
        let error = match why {
            Expired::Deadline { run } => {
                context.metrics.rejected_late.inc();
                let arrived = task
                    .deadline
                    .zip(objective)
                    .and_then(|(deadline, objective)| deadline.checked_sub(objective.latency));
                context.late(Late {
                    estimate: run,
                    waited: now.saturating_duration_since(arrived.unwrap_or(task.enqueued)),
                    waiting_rows: 0,
                })
            }
            Expired::QueueTimeout => {
                context.metrics.rejected_timeout.inc();
                BatchError::QueueTimeout {
                    queue: context.name.to_string(),
                    waited_ms: now.saturating_duration_since(task.enqueued).as_secs_f64() * 1000.0,
                    timeout_ms: context.params.queue_timeout().as_secs_f64() * 1000.0,
                }
            }
        };
        task.reply.send(Err(error));
    }
}

/// Runs a batch; a panic in the model's run becomes that batch's error and
/// the thread lives on.
fn run_guarded(runner: &dyn Runner, inputs: Vec<Tensor>) -> Result<Vec<Tensor>, RuntimeError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| runner.run(inputs))).unwrap_or_else(|panic| {
        crate::metrics::METRICS.panics.with_label_values(&["batch"]).inc();
        Err(RuntimeError::Run {
            code: Code::Internal,
            message: format!("the model's run panicked: {}", panic_message(panic.as_ref())),
        })
    })
}

/// When and how a batch ran.
struct Ran {
    started: Instant,
    time: Duration,
    /// The requests' rows, and the rows run (with padding).
    rows: usize,
    run_rows: usize,
}

/// Hands each request its own rows of the outputs (all of them, for a lone
/// unpadded request, whatever their shape).
fn reply_rows(mut live: Vec<Task<Reply>>, outputs: Vec<Tensor>, ran: &Ran) {
    let output = |outputs, task: &Task<Reply>| BatchOutput {
        outputs,
        queue_time: ran.started.duration_since(task.enqueued),
        run_time: ran.time,
        batch_rows: ran.rows,
        answered_at: ran.started + ran.time,
    };
    if live.len() == 1 && ran.run_rows == ran.rows {
        if let Some(task) = live.pop() {
            let answer = output(outputs, &task);
            task.reply.send(Ok(answer));
        }
        return;
    }
    if let Some(bad) = outputs.iter().find(|o| o.shape.first() != Some(&ran.run_rows)) {
        let message = format!(
            "the model returned an output of shape {:?} for a batch of {} rows; outputs without the batch \
             dimension cannot be split between batched requests (turn batching off for this model)",
            bad.shape, ran.run_rows
        );
        return reply_all(live, Err(BatchError::Split(message)));
    }
    let mut offset = 0;
    for task in live {
        let pieces = outputs
            .iter()
            .map(|o| assemble::slice_rows(o, offset, offset + task.rows))
            .collect();
        offset += task.rows;
        let answer = output(pieces, &task);
        task.reply.send(Ok(answer));
    }
}

/// The ids of a batch's requests, for log lines.
fn request_ids(tasks: &[Task<Reply>]) -> String {
    let ids: Vec<&str> = tasks.iter().filter_map(|t| t.request_id.as_deref()).collect();
    format!("requests {}", ids.join(","))
}

fn reply_all(tasks: Vec<Task<Reply>>, result: ReplyResult) {
    for task in tasks {
        task.reply.send(result.clone());
    }
}

/// One tensor per input, the tasks' rows concatenated (padded when allowed)
/// and extended to `run_rows`.
fn assemble_inputs(tasks: &mut [Task<Reply>], params: &BatchParams, run_rows: usize) -> Result<Vec<Tensor>, String> {
    let inputs = tasks[0].inputs.len();
    let mut assembled = Vec::with_capacity(inputs);
    for i in 0..inputs {
        let mut parts: Vec<Tensor> = tasks
            .iter_mut()
            .map(|t| std::mem::replace(&mut t.inputs[i], empty()))
            .collect();
        if params.pad_variable_length_inputs && parts.iter().any(|p| p.shape[1..] != parts[0].shape[1..]) {
            let rank = parts[0].shape.len();
            let target: Vec<usize> = (0..rank)
                .map(|d| {
                    parts
                        .iter()
                        .map(|p| p.shape.get(d).copied().unwrap_or(0))
                        .max()
                        .unwrap_or(0)
                })
                .collect();
            parts = parts
                .iter()
                .map(|p| assemble::pad_inner(p, &target))
                .collect::<Result<_, _>>()?;
        }
        let rows: usize = parts.iter().map(|p| p.shape.first().copied().unwrap_or(1)).sum();
        // A lone request's buffer is run as it is; otherwise one buffer of the
        // run's size takes every part and then the padding, with no second move.
        let mut tensor = if parts.len() == 1 && rows >= run_rows {
            parts.pop().expect("one part")
        } else {
            assemble::concat_padded(&parts, run_rows)?
        };
        if tensor.shape.first().is_some_and(|&r| r < run_rows) {
            assemble::pad_rows(&mut tensor, run_rows);
        }
        assembled.push(tensor);
    }
    Ok(assembled)
}

fn empty() -> Tensor {
    Tensor::new(vec![0], crate::tensor::TensorData::Bool(Vec::new()))
}
