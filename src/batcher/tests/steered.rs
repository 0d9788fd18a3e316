//! Queues with a latency objective, on real batch threads: what they
//! refuse, what they count as waiting, and when their callers run them.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::*;

/// Passes its inputs through once the test lets each run go, and says when
/// one has started.
pub(super) struct Gate {
    entered: Mutex<Sender<()>>,
    release: Mutex<Receiver<()>>,
}

impl Gate {
    /// The gate, where each run it starts is told, and where the test lets
    /// each go.
    pub(super) fn new() -> (Arc<Gate>, Receiver<()>, Sender<()>) {
        let (entered, runs) = channel();
        let (go, release) = channel();
        let gate = Gate {
            entered: Mutex::new(entered),
            release: Mutex::new(release),
        };
        (Arc::new(gate), runs, go)
    }
}

impl Runner for Gate {
    fn run(&self, inputs: Vec<Tensor>) -> Result<Vec<Tensor>, RuntimeError> {
        let _ = self.entered.lock().unwrap().send(());
        let _ = self.release.lock().unwrap().recv();
        Ok(inputs)
    }
}

#[test]
fn a_latency_objective_refuses_a_request_the_queue_would_make_late() {
    // Made first, dropped last, as in `rows_given_up_on_count_neither_as_pending_nor_as_running`.
    let batcher = Batcher::new(1).unwrap();
    let (gate, runs, go) = Gate::new();
    let params = BatchParams {
        target_latency_micros: 10_000,
        ..params(8, Duration::ZERO)
    };
    let mut metrics = QueueMetrics::new("batcher-test", 1, "objective");
    let gauges = metrics.steered().clone();
    let handle = batcher.add_queue("q".into(), params, true, gate, metrics.clone());
    // A size's first run pays its one-time costs (as warm-up's) and is not
    // measured.
    let warm = handle.submit(vec![rows(&[0.0])], &["x"], None).unwrap();
    runs.recv().unwrap();
    go.send(()).unwrap();
    answer(warm).unwrap();
    // The next takes 20 ms: a run of one is all the 10 ms objective allows.
    let first = handle.submit(vec![rows(&[1.0])], &["x"], None).unwrap();
    runs.recv().unwrap();
    std::thread::sleep(Duration::from_millis(20));
    go.send(()).unwrap();
    answer(first).unwrap();
    assert_eq!(gauges.cap.get(), 1);
    // The answer can arrive before its batch thread counts the run finished:
    // wait until the queue is idle (asking counts nothing).
    let deadline = Instant::now() + Duration::from_secs(10);
    while handle.late_now(Duration::ZERO).is_some() {
        assert!(Instant::now() < deadline, "the queue never went idle");
        std::thread::sleep(Duration::from_millis(1));
    }
    // An idle queue takes the next; one behind it would wait 20 ms and run 20.
    let second = handle.submit(vec![rows(&[2.0])], &["x"], None).unwrap();
    runs.recv().unwrap();
    // Asked before a body is read: the same refusal, counted only by its caller.
    assert!(crate::batcher::any_steered());
    let early = handle.late_now(Duration::ZERO).expect("late before reading");
    assert_eq!(early.code(), Code::Unavailable);
    assert_eq!(metrics.rejected_late.get(), 0);
    let late = handle.submit(vec![rows(&[3.0])], &["x"], None).unwrap_err();
    assert_eq!(late.code(), Code::Unavailable);
    let message = late.to_string();
    assert!(
        message.contains("latency objective of 10.0 ms (p99)") && message.contains("the batching queue of q"),
        "{message}"
    );
    assert_eq!(metrics.rejected_late.get(), 1);
    go.send(()).unwrap();
    assert_eq!(floats(&answer(second)), vec![2.0]);
}

/// Runs that take `per_row` milliseconds a row (one by default); records
/// each batch's thread and rows.
struct MillisecondRows {
    per_row: u64,
    batches: Mutex<Vec<(std::thread::ThreadId, usize)>>,
}

impl Default for MillisecondRows {
    fn default() -> MillisecondRows {
        MillisecondRows::per_row(1)
    }
}

impl MillisecondRows {
    fn per_row(per_row: u64) -> MillisecondRows {
        MillisecondRows {
            per_row,
            batches: Mutex::default(),
        }
    }
}

impl Runner for MillisecondRows {
    fn run(&self, inputs: Vec<Tensor>) -> Result<Vec<Tensor>, RuntimeError> {
        let rows = inputs[0].shape[0];
        std::thread::sleep(Duration::from_millis(self.per_row * rows as u64));
        self.batches.lock().unwrap().push((std::thread::current().id(), rows));
        Ok(inputs)
    }
}

#[test]
fn a_steered_queue_that_waits_for_nothing_is_run_by_its_callers_within_its_cap() {
    let batcher = Batcher::with_inline_limit(1, Duration::from_secs(1)).unwrap();
    // Runs of 4 ms a row against a 40 ms objective: a loaded machine's
    // scheduling delays, added to each run, leave the plans below in time.
    let runner = Arc::new(MillisecondRows::per_row(4));
    let params = BatchParams {
        target_latency_micros: 40_000,
        ..params(8, Duration::ZERO)
    };
    let mut metrics = QueueMetrics::new("batcher-test", 1, "steered-inline");
    let gauges = metrics.steered().clone();
    let handle = batcher.add_queue("q".into(), params, true, runner.clone(), metrics);
    // Measured on the batch threads, one request at a time, far enough apart
    // that single runs keep up: the controller waits for nothing.
    for _ in 0..4 {
        let submitted = handle.submit_or_drive(vec![rows(&[0.0])], &["x"], None).unwrap();
        assert!(submitted.drive.is_none(), "unmeasured queues keep to the batch threads");
        answer(submitted.pending).unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(gauges.timeout.get(), 0.0);
    // A run takes at least 4 ms a row: 8 rows never fit half the 40 ms
    // objective, so the cap is 4 rows or fewer.
    let cap = gauges.cap.get() as usize;
    assert!((1..=4).contains(&cap), "cap {cap}");
    // Planned behind four rows, the last is let in unless a row takes 8 ms.
    let submitted: Vec<_> = (0..5)
        .map(|i| handle.submit_or_drive(vec![rows(&[i as f32])], &["x"], None).unwrap())
        .collect();
    let drive = submitted[0].drive.expect("run by its caller");
    assert!(submitted.iter().all(|s| s.drive.is_some()));
    while handle.run_ready(drive) {}
    let here = std::thread::current().id();
    let inline: Vec<usize> = runner.batches.lock().unwrap()[4..]
        .iter()
        .map(|&(thread, rows)| {
            assert_eq!(thread, here, "every batch ran on its caller's thread");
            rows
        })
        .collect();
    assert_eq!(inline.iter().sum::<usize>(), 5);
    assert!(
        inline.iter().all(|&rows| rows <= 4),
        "batches within the cap: {inline:?}"
    );
    assert!(inline.len() >= 2, "five rows are more than one batch: {inline:?}");
    for (i, submitted) in submitted.into_iter().enumerate() {
        assert_eq!(floats(&answer(submitted.pending)), vec![i as f32]);
    }
    // Inline runs are counted in and out: the idle queue takes the next request.
    assert!(handle.late_now(Duration::ZERO).is_none());
}

#[test]
fn callers_refused_for_an_unread_wait_that_never_falls_are_let_in() {
    let batcher = Batcher::new(1).unwrap();
    let params = BatchParams {
        target_latency_micros: 20_000,
        ..params(8, Duration::ZERO)
    };
    let mut metrics = QueueMetrics::new("batcher-test", 1, "unread");
    let gauges = metrics.steered().clone();
    let runner = Arc::new(MillisecondRows::default());
    let handle = batcher.add_queue("q".into(), params, true, runner, metrics);
    // The first run is not measured: the second is.
    for _ in 0..2 {
        answer(handle.submit(vec![rows(&[0.0])], &["x"], None).unwrap()).unwrap();
    }
    assert_eq!(gauges.refusing.get(), 1);
    // Callers whose bytes wait 30 ms unread however many of them are
    // refused (they come straight back): refused once the run is counted,
    // until two windows of 80 ms show that refusing drains nothing.
    let waited = Duration::from_millis(30);
    let deadline = Instant::now() + Duration::from_secs(10);
    while handle.late_now(waited).is_none() {
        assert!(Instant::now() < deadline, "the run was never counted");
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut refused = 1;
    while handle.late_now(waited).is_some() {
        assert!(Instant::now() < deadline, "still refused after {refused}");
        refused += 1;
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(refused >= 30, "two windows of at least 16: {refused}");
    assert_eq!(gauges.refusing.get(), 0);
}

#[test]
fn a_steered_queue_its_callers_run_refuses_what_its_shards_would_make_late() {
    // One batch thread: the controller never waits, so its callers run the
    // queue at any load, and the rows on their shards are all that is ahead.
    let batcher = Batcher::with_inline_limit(1, Duration::from_secs(1)).unwrap();
    let runner = Arc::new(MillisecondRows::default());
    let params = BatchParams {
        target_latency_micros: 10_000,
        ..params(8, Duration::ZERO)
    };
    let metrics = QueueMetrics::new("batcher-test", 1, "steered-shards");
    let handle = batcher.add_queue("q".into(), params, true, runner, metrics.clone());
    for _ in 0..4 {
        answer(handle.submit(vec![rows(&[0.0])], &["x"], None).unwrap()).unwrap();
    }
    // Nobody drives: the rows stay on the shard. Runs take a millisecond a
    // row, so a few batches ahead exceed the 10 ms objective, long before
    // the shards' 100 batches are full and the shared queue would refuse.
    let mut queued = Vec::new();
    let refusal = loop {
        assert!(queued.len() < 64, "64 rows on the shard and still taking requests");
        match handle.submit_or_drive(vec![rows(&[queued.len() as f32])], &["x"], None) {
            Ok(submitted) => {
                assert!(matches!(submitted.drive, Some(Drive::Shard(_))), "run by its caller");
                queued.push(submitted);
            }
            Err(refusal) => break refusal,
        }
    };
    assert!(
        queued.len() >= 2,
        "an idle queue takes a request and the next behind it"
    );
    assert_eq!(refusal.code(), Code::Unavailable);
    assert!(
        refusal.to_string().contains("latency objective of 10.0 ms"),
        "{refusal}"
    );
    assert_eq!(metrics.rejected_late.get(), 1);
    let drive = queued[0].drive.expect("driven");
    while handle.run_ready(drive) {}
    for (i, submitted) in queued.into_iter().enumerate() {
        assert_eq!(floats(&answer(submitted.pending)), vec![i as f32]);
    }
}

#[test]
fn answers_not_yet_taken_count_as_waiting_against_the_objective() {
    let batcher = Batcher::new(1).unwrap();
    let runner = Arc::new(MillisecondRows::default());
    let params = BatchParams {
        target_latency_micros: 10_000,
        ..params(8, Duration::ZERO)
    };
    let metrics = QueueMetrics::new("batcher-test", 1, "untaken");
    let handle = batcher.add_queue("q".into(), params, true, runner, metrics.clone());
    let answered = |pending: &Pending| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while pending.is_empty() {
            assert!(Instant::now() < deadline, "never answered");
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    // Runs of a row take a millisecond or more: batches of a few rows fit
    // half the 10 ms objective, and a handful of batches ahead do not.
    for _ in 0..4 {
        answer(handle.submit(vec![rows(&[0.0])], &["x"], None).unwrap()).unwrap();
    }
    // Each request is run and answered before the next comes, so the queue
    // is idle at every arrival; only the answers nobody has taken (a
    // transport thread that fell behind) say the server is behind.
    let mut untaken = Vec::new();
    let refusal = loop {
        assert!(untaken.len() < 64, "64 answers untaken and still taking requests");
        match handle.submit(vec![rows(&[untaken.len() as f32])], &["x"], None) {
            Ok(pending) => {
                answered(&pending);
                untaken.push(pending);
            }
            Err(refusal) => break refusal,
        }
    };
    assert!(!untaken.is_empty(), "an idle queue takes a request");
    assert_eq!(refusal.code(), Code::Unavailable);
    let message = refusal.to_string();
    // The last answer's batch may not yet have counted itself out of the running.
    let held = |rows: usize| message.contains(&format!("holds {rows} rows (queued, or answered and not yet taken)"));
    assert!(
        held(untaken.len()) || held(untaken.len() - 1),
        "{} untaken: {message}",
        untaken.len()
    );
    assert_eq!(metrics.rejected_late.get(), 1);
    for (i, pending) in untaken.into_iter().enumerate() {
        assert_eq!(floats(&answer(pending)), vec![i as f32]);
    }
    // Taken, they count no more: the queue takes requests again.
    let deadline = Instant::now() + Duration::from_secs(10);
    while handle.late_now(Duration::ZERO).is_some() {
        assert!(Instant::now() < deadline, "the queue never went idle");
        std::thread::sleep(Duration::from_millis(1));
    }
    answer(handle.submit(vec![rows(&[1.0])], &["x"], None).unwrap()).unwrap();
}
