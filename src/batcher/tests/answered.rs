//! What a steered queue learns from its requests' answers: rows counted
//! until their answers are taken, backlogs that teach how fast they clear,
//! and answers past the objective that teach its check a margin.

use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::Duration;

use super::steered::Gate;
use super::*;

/// A queue of up to 8 rows behind `gate`, with an objective far off
/// (nothing is refused, only counted), whose measured runs (of next to
/// nothing) have lifted its cap from one row to all 8.
fn counting_queue(batcher: &Batcher, gate: Arc<Gate>, runs: &Receiver<()>, go: &Sender<()>, name: &str) -> QueueHandle {
    let params = BatchParams {
        target_latency_micros: 10_000_000,
        ..params(8, Duration::ZERO)
    };
    let metrics = QueueMetrics::new("batcher-test", 1, name);
    let handle = batcher.add_queue("q".into(), params, true, gate, metrics);
    for _ in 0..4 {
        go.send(()).unwrap();
        answer(handle.submit(vec![rows(&[0.0])], &["x"], None).unwrap()).unwrap();
        runs.recv().unwrap();
    }
    assert_eq!(handle.context.steered_cap(), 8);
    handle
}

#[test]
fn rows_given_up_on_count_neither_as_pending_nor_as_running() {
    // Made first, dropped last: a failing assertion drops `go` first, which
    // lets a held run go, so that the batcher's threads can end.
    let batcher = Batcher::new(1).unwrap();
    let (gate, runs, go) = Gate::new();
    let handle = counting_queue(&batcher, gate, &runs, &go, "given-up");
    let first = handle.submit(vec![rows(&[1.0])], &["x"], None).unwrap();
    runs.recv().unwrap();
    // Behind the running one, two requests queue into one batch; one is given up.
    let kept = handle.submit(vec![rows(&[2.0])], &["x"], None).unwrap();
    let given_up = handle.submit(vec![rows(&[3.0])], &["x"], None).unwrap();
    assert_eq!(handle.context.waiting_rows(), 2);
    drop(given_up);
    assert_eq!(handle.context.waiting_rows(), 1);
    go.send(()).unwrap();
    answer(first).unwrap();
    runs.recv().unwrap();
    // The kept request runs; one queued behind it is all that waits.
    let last = handle.submit(vec![rows(&[4.0])], &["x"], None).unwrap();
    assert_eq!(
        handle.context.waiting_rows(),
        1,
        "the given-up row hides no waiting one"
    );
    go.send(()).unwrap();
    assert_eq!(floats(&answer(kept)), vec![2.0]);
    runs.recv().unwrap();
    go.send(()).unwrap();
    assert_eq!(floats(&answer(last)), vec![4.0]);
}

#[test]
fn only_answers_taken_from_behind_a_batchs_worth_teach_how_backlogs_clear() {
    // Made first, dropped last, as in `rows_given_up_on_count_neither_as_pending_nor_as_running`.
    let batcher = Batcher::new(1).unwrap();
    let (gate, runs, go) = Gate::new();
    let handle = counting_queue(&batcher, gate, &runs, &go, "clearing");
    let taught = || {
        let controller = handle.context.controller.as_ref().unwrap();
        controller.lock().unwrap().clearing_taught()
    };
    let submit = |value: f32| handle.submit(vec![rows(&[value])], &["x"], None).unwrap();
    let first = submit(1.0);
    runs.recv().unwrap();
    // Behind the running one: eight requests, each behind fewer than 8
    // rows; then one behind all 8, and one behind 9 that is given up.
    let batch: Vec<Pending> = (0..8).map(|i| submit(i as f32)).collect();
    let behind = submit(10.0);
    drop(submit(11.0));
    go.send(()).unwrap();
    answer(first).unwrap();
    runs.recv().unwrap();
    go.send(()).unwrap();
    for pending in batch {
        answer(pending).unwrap();
    }
    assert!(!taught(), "behind less than a batch, or given up: nothing learned");
    runs.recv().unwrap();
    go.send(()).unwrap();
    assert_eq!(floats(&answer(behind)), vec![10.0]);
    // Its ratio plans once enough requests have taught it; that it taught
    // is what this checks.
    assert!(taught());
}

#[test]
fn answers_taken_past_the_objective_teach_its_check_a_margin() {
    // Made first, dropped last, as in `rows_given_up_on_count_neither_as_pending_nor_as_running`.
    let batcher = Batcher::new(1).unwrap();
    let (gate, runs, go) = Gate::new();
    let params = BatchParams {
        target_latency_micros: 20_000,
        ..params(8, Duration::ZERO)
    };
    let handle = batcher.add_queue(
        "q".into(),
        params,
        true,
        gate,
        QueueMetrics::new("batcher-test", 1, "margin"),
    );
    let margin = || handle.context.controller.as_ref().unwrap().lock().unwrap().margin();
    let submit = |value: f32| handle.submit(vec![rows(&[value])], &["x"], None).unwrap();
    let late = submit(1.0);
    runs.recv().unwrap();
    // Held past the 20 ms objective before it runs.
    std::thread::sleep(Duration::from_millis(25));
    go.send(()).unwrap();
    assert_eq!(floats(&answer(late)), vec![1.0]);
    assert_eq!(
        margin(),
        Duration::ZERO,
        "counted as it dropped, taught at the next check"
    );
    go.send(()).unwrap();
    let next = submit(2.0);
    assert!(margin() > Duration::ZERO);
    assert_eq!(floats(&answer(next)), vec![2.0]);
    runs.recv().unwrap();
}
