//! Queues with a latency objective or a queue timeout, on real batch
//! threads: what they refuse, put on the late lane, take out of a batch,
//! and count as queued. Every bound here is one a loaded machine only
//! makes truer: runs held by the test, objectives of seconds, and waits
//! that only ever pass more time than they assert.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::*;
use crate::batcher::objective::LateAction;
use crate::metrics::QueueMetrics;

/// Passes its inputs through once the test lets each run go, and says when
/// one has started; unarmed, it runs at once.
pub(super) struct Gate {
    armed: Mutex<bool>,
    entered: Mutex<Sender<Vec<f32>>>,
    release: Mutex<Receiver<()>>,
}

impl Gate {
    fn new() -> (Arc<Gate>, Receiver<Vec<f32>>, Sender<()>) {
        let (entered, runs) = channel();
        let (go, release) = channel();
        let gate = Gate {
            armed: Mutex::new(false),
            entered: Mutex::new(entered),
            release: Mutex::new(release),
        };
        (Arc::new(gate), runs, go)
    }

    fn arm(&self, armed: bool) {
        *self.armed.lock().unwrap() = armed;
    }
}

impl Runner for Gate {
    fn run(&self, inputs: Vec<Tensor>) -> Result<Vec<Tensor>, RuntimeError> {
        if *self.armed.lock().unwrap() {
            let values = match &inputs[0].data {
                TensorData::Float(v) => v.clone(),
                _ => Vec::new(),
            };
            let _ = self.entered.lock().unwrap().send(values);
            let _ = self.release.lock().unwrap().recv();
        }
        Ok(inputs)
    }
}

/// A queue of up to 8 rows on one thread behind `gate`, with a latency
/// objective of `objective` and `late_action`, its runs measured (unarmed,
/// they take next to nothing).
fn steered_queue(batcher: &Batcher, gate: Arc<Gate>, objective: Duration, late_action: LateAction) -> QueueHandle {
    let params = BatchParams {
        target_latency_micros: objective.as_micros() as u64,
        late_action,
        ..params(8, Duration::ZERO)
    };
    let metrics = QueueMetrics::new("batcher-test", 1, "steered");
    let handle = batcher.add_queue("q".into(), params, true, gate, metrics, None);
    for _ in 0..4 {
        answer(handle.submit(vec![rows(&[0.0])], &["x"], None, None).unwrap()).unwrap();
    }
    handle
}

/// Submits a request whose run `gate` holds, once it has begun.
fn hold_a_run(handle: &QueueHandle, gate: &Gate, runs: &Receiver<Vec<f32>>) -> Pending {
    gate.arm(true);
    let held = handle.submit(vec![rows(&[1.0])], &["x"], None, None).unwrap();
    runs.recv().unwrap();
    held
}

fn late_ms(result: ReplyResult) -> f64 {
    match result {
        Err(BatchError::Late { estimate_ms, .. }) => estimate_ms,
        other => panic!("expected a late refusal, got {other:?}"),
    }
}

/// Reads the queue's state under the batcher's lock.
fn state<T>(handle: &QueueHandle, read: impl FnOnce(&state::QueueState<reply::Reply>) -> T) -> T {
    let state = handle.shared.lock();
    read(&state.queues[&handle.id].state)
}

#[test]
fn waiting_rows_are_the_on_time_lanes_and_a_request_given_up_on_runs_for_no_one() {
    // Made first, dropped last: a failing assertion drops `go` first, which
    // lets a held run go, so that the batcher's threads can end.
    let batcher = Batcher::new(1).unwrap();
    let (gate, runs, go) = Gate::new();
    let handle = steered_queue(&batcher, gate.clone(), Duration::from_secs(10), LateAction::Serve);
    let cap = state(&handle, |queue| queue.controller().map(|c| c.cap()));
    assert_eq!(cap, Some(8), "runs of next to nothing lift the cap to all 8");
    let first = hold_a_run(&handle, &gate, &runs);
    // Behind the running one, two requests join one batch; one is given up.
    let kept = handle.submit(vec![rows(&[2.0])], &["x"], None, None).unwrap();
    let given_up = handle.submit(vec![rows(&[3.0])], &["x"], None, None).unwrap();
    let queued = |handle| {
        state(handle, |queue| {
            (
                queue.lanes.on_time.rows(),
                queue.lanes.on_time.planned_batches().count(),
            )
        })
    };
    assert_eq!(queued(&handle), (2, 1));
    drop(given_up);
    go.send(()).unwrap();
    answer(first).unwrap();
    assert_eq!(runs.recv().unwrap(), vec![2.0], "the given-up row is not run");
    go.send(()).unwrap();
    assert_eq!(floats(&answer(kept)), vec![2.0]);
    assert_eq!(queued(&handle), (0, 0));
}

#[test]
fn a_late_request_is_served_after_on_time_work_in_the_rows_it_leaves() {
    let batcher = Batcher::new(1).unwrap();
    let (gate, runs, go) = Gate::new();
    let objective = Duration::from_secs(10);
    let handle = steered_queue(&batcher, gate.clone(), objective, LateAction::Serve);
    let held = hold_a_run(&handle, &gate, &runs);
    // Arrived one and a half objectives ago: past its deadline by more than
    // the margin, within the objective once more; not refused, queued late.
    let long_ago = Instant::now().checked_sub(objective * 3 / 2).unwrap();
    assert!(handle.late_at_head(long_ago).is_none());
    let late = handle.submit(vec![rows(&[9.0])], &["x"], None, Some(long_ago)).unwrap();
    let lanes = |handle| state(handle, |queue| (queue.lanes.on_time.rows(), queue.lanes.late.rows()));
    assert_eq!(lanes(&handle), (0, 1), "on the late lane");
    let on_time = handle.submit(vec![rows(&[2.0])], &["x"], None, None).unwrap();
    assert_eq!(lanes(&handle), (1, 1), "the late row waits apart");
    go.send(()).unwrap();
    answer(held).unwrap();
    // The on-time request runs first, and the late one in the rows its batch has to spare.
    assert_eq!(runs.recv().unwrap(), vec![2.0, 9.0]);
    go.send(()).unwrap();
    assert_eq!(floats(&answer(on_time)), vec![2.0]);
    assert_eq!(floats(&answer(late)), vec![9.0]);
    assert_eq!(lanes(&handle), (0, 0));
}

#[test]
fn with_reject_a_late_request_is_refused_at_once_naming_the_objective() {
    let batcher = Batcher::new(1).unwrap();
    let (gate, _runs, _go) = Gate::new();
    let objective = Duration::from_secs(10);
    let handle = steered_queue(&batcher, gate, objective, LateAction::Reject);
    let long_ago = Instant::now().checked_sub(objective * 2).unwrap();
    let refused = handle.submit(vec![rows(&[1.0])], &["x"], None, Some(long_ago));
    let message = refused.unwrap_err().to_string();
    assert!(message.contains("latency objective of 10000.0 ms (p99)"), "{message}");
    assert!(
        message.contains("read 2"),
        "its wait since it arrived is named: {message}"
    );
    assert!(handle.late_at_head(Instant::now()).is_none(), "a fresh one is on time");
}

#[test]
fn a_request_whose_deadline_passes_while_it_waits_is_answered_late_unrun() {
    let batcher = Batcher::new(1).unwrap();
    let (gate, runs, go) = Gate::new();
    let objective = Duration::from_secs(10);
    let handle = steered_queue(&batcher, gate.clone(), objective, LateAction::Serve);
    let held = hold_a_run(&handle, &gate, &runs);
    // Due in 2 s: on time behind a run of next to nothing...
    let arrived = Instant::now().checked_sub(objective - Duration::from_secs(2)).unwrap();
    let doomed = handle.submit(vec![rows(&[2.0])], &["x"], None, Some(arrived)).unwrap();
    let behind = handle.submit(vec![rows(&[3.0])], &["x"], None, None).unwrap();
    // ...but the run ahead is held past its deadline.
    std::thread::sleep(Duration::from_millis(2500));
    go.send(()).unwrap();
    answer(held).unwrap();
    assert_eq!(runs.recv().unwrap(), vec![3.0], "the batch runs without it, not shrunk");
    go.send(()).unwrap();
    late_ms(answer(doomed));
    assert_eq!(floats(&answer(behind)), vec![3.0]);
}

#[test]
fn a_queue_timeout_answers_what_waited_past_it_unrun() {
    // One batch thread, held by a run of another queue (which has no
    // timeout, so nothing of it can expire) while a request waits here.
    let batcher = Batcher::new(1).unwrap();
    let (gate, runs, go) = Gate::new();
    let metrics = QueueMetrics::new("batcher-test", 1, "holding");
    let holding = batcher.add_queue("h".into(), params(1, Duration::ZERO), true, gate.clone(), metrics, None);
    let held = hold_a_run(&holding, &gate, &runs);
    let params = BatchParams {
        queue_timeout_micros: 1_000,
        ..params(1, Duration::ZERO)
    };
    let metrics = QueueMetrics::new("batcher-test", 1, "queue-timeout");
    let (unheld, _, _) = Gate::new();
    let handle = batcher.add_queue("q".into(), params, true, unheld, metrics, None);
    let expired = handle.submit(vec![rows(&[2.0])], &["x"], None, None).unwrap();
    // Waits at least this long behind the held run: past its 1 ms.
    std::thread::sleep(Duration::from_millis(5));
    go.send(()).unwrap();
    answer(held).unwrap();
    let error = answer(expired).unwrap_err();
    assert!(matches!(error, BatchError::QueueTimeout { .. }), "{error:?}");
    assert!(error.to_string().contains("queue_timeout_micros (1.0 ms)"), "{error}");
    assert_eq!(error.code(), Code::Unavailable);
}
