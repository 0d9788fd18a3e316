//! Which threads run batches: callers running fast queues inline, per-thread
//! shards, the running limit, and a latency objective's refusals.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::*;

#[test]
fn a_fast_queue_is_run_by_its_callers_once_measured() {
    let batcher = Batcher::with_inline_limit(1, Duration::from_secs(1)).unwrap();
    let runner = Arc::new(ThreadRecorder::default());
    let metrics = QueueMetrics::new("batcher-test", 1, "serving_default");
    let handle = batcher.add_queue("q".into(), params(8, Duration::ZERO), true, runner.clone(), metrics);
    // Unmeasured: the batch threads run it, and measure it.
    for value in 0..4 {
        let submitted = handle
            .submit_or_drive(vec![rows(&[value as f32])], &["x"], None)
            .unwrap();
        assert!(submitted.drive.is_none());
        answer(submitted.pending).unwrap();
    }
    assert!(runner
        .threads
        .lock()
        .unwrap()
        .iter()
        .all(|t| *t != std::thread::current().id()));
    // Measured and fast: requests queued together are one batch, run here.
    let first = handle.submit_or_drive(vec![rows(&[1.0])], &["x"], None).unwrap();
    let second = handle.submit_or_drive(vec![rows(&[2.0, 3.0])], &["x"], None).unwrap();
    let (Some(drive), Some(_)) = (first.drive, second.drive) else {
        panic!("both requests are run by their caller");
    };
    assert!(handle.run_ready(drive));
    assert!(!handle.run_ready(drive), "one batch held both requests");
    let threads = runner.threads.lock().unwrap().clone();
    assert_eq!(threads.len(), 5);
    assert_eq!(threads[4], std::thread::current().id());
    let (mut first, mut second) = (first.pending, second.pending);
    assert_eq!(floats(&first.try_recv().unwrap()), vec![1.0]);
    assert_eq!(floats(&second.try_recv().unwrap()), vec![2.0, 3.0]);
}

#[test]
fn queues_with_a_batch_timeout_or_no_limit_keep_to_the_batch_threads() {
    for (limit, timeout) in [
        (Duration::ZERO, Duration::ZERO),
        (Duration::from_secs(1), Duration::from_micros(10)),
    ] {
        let batcher = Batcher::with_inline_limit(1, limit).unwrap();
        let runner = Arc::new(ThreadRecorder::default());
        let metrics = QueueMetrics::new("batcher-test", 1, "serving_default");
        let handle = batcher.add_queue("q".into(), params(8, timeout), true, runner, metrics);
        for _ in 0..8 {
            let submitted = handle.submit_or_drive(vec![rows(&[1.0])], &["x"], None).unwrap();
            assert!(submitted.drive.is_none(), "limit {limit:?}, timeout {timeout:?}");
            answer(submitted.pending).unwrap();
        }
    }
}

/// Measures a fast queue so that its requests are run by their callers.
fn measured_inline_queue(runner: Arc<ThreadRecorder>) -> (Arc<Batcher>, QueueHandle) {
    let batcher = Batcher::with_inline_limit(1, Duration::from_secs(1)).unwrap();
    let metrics = QueueMetrics::new("batcher-test", 1, "serving_default");
    let handle = batcher.add_queue("q".into(), params(8, Duration::ZERO), true, runner, metrics);
    for _ in 0..4 {
        let submitted = handle.submit_or_drive(vec![rows(&[0.0])], &["x"], None).unwrap();
        answer(submitted.pending).unwrap();
    }
    (batcher, handle)
}

#[test]
fn each_thread_batches_its_own_requests_and_any_thread_can_drive_them() {
    let runner = Arc::new(ThreadRecorder::default());
    let (_batcher, handle) = measured_inline_queue(runner.clone());
    let here = handle.submit_or_drive(vec![rows(&[1.0])], &["x"], None).unwrap();
    // Threads take shards in turn; other tests' threads may take turns too,
    // so try threads until one lands on another shard.
    let there = (0..100)
        .find_map(|_| {
            std::thread::scope(|scope| {
                scope
                    .spawn(|| {
                        (handle.shards.this_thread()
                            != here.drive.and_then(|d| match d {
                                Drive::Shard(s) => Some(s),
                                Drive::Shared => None,
                            }))
                        .then(|| handle.submit_or_drive(vec![rows(&[2.0])], &["x"], None).unwrap())
                    })
                    .join()
                    .unwrap()
            })
        })
        .expect("a thread on another shard");
    let (Some(here_drive), Some(there_drive)) = (here.drive, there.drive) else {
        panic!("both requests are run by their callers");
    };
    // This thread's batch holds only its own request ...
    assert!(handle.run_ready(here_drive));
    assert!(!handle.run_ready(here_drive));
    let (mut here, mut there) = (here.pending, there.pending);
    assert_eq!(floats(&here.try_recv().unwrap()), vec![1.0]);
    assert!(
        there.try_recv().is_err(),
        "the other thread's request is in its own batch"
    );
    // ... and a request whose task resumed on another thread is still run.
    assert!(handle.run_ready(there_drive));
    assert_eq!(floats(&there.try_recv().unwrap()), vec![2.0]);
    assert_eq!(runner.threads.lock().unwrap().len(), 6);
    let threads = runner.threads.lock().unwrap().clone();
    assert!(threads[4..].iter().all(|t| *t == std::thread::current().id()));
}

#[test]
fn shards_refuse_as_the_shared_queue_does() {
    let runner = Arc::new(ThreadRecorder::default());
    let (batcher, handle) = measured_inline_queue(runner);
    let too_large = handle.submit_or_drive(vec![rows(&[0.0; 9])], &["x"], None);
    assert!(matches!(too_large, Err(BatchError::TooLarge { rows: 9, max: 8, .. })));
    batcher.shutdown();
    let closed = handle.submit_or_drive(vec![rows(&[0.0])], &["x"], None);
    assert!(matches!(closed, Err(BatchError::ShuttingDown)));
}

#[test]
fn shards_hold_at_most_max_enqueued_batches_and_the_rest_take_the_shared_queue() {
    let batcher = Batcher::with_inline_limit(1, Duration::from_secs(1)).unwrap();
    let runner = Arc::new(ThreadRecorder::default());
    let metrics = QueueMetrics::new("batcher-test", 1, "serving_default");
    let params = BatchParams {
        max_batch_size: 1,
        batch_timeout_micros: 0,
        max_enqueued_batches: 1,
        ..BatchParams::default()
    };
    let handle = batcher.add_queue("q".into(), params, true, runner, metrics);
    for _ in 0..4 {
        let submitted = handle.submit_or_drive(vec![rows(&[0.0])], &["x"], None).unwrap();
        answer(submitted.pending).unwrap();
    }
    let first = handle.submit_or_drive(vec![rows(&[1.0])], &["x"], None).unwrap();
    let second = handle.submit_or_drive(vec![rows(&[2.0])], &["x"], None).unwrap();
    assert!(matches!(first.drive, Some(Drive::Shard(_))), "{:?}", first.drive);
    assert!(matches!(second.drive, Some(Drive::Shared)), "{:?}", second.drive);
    // The shards' one batch and the shared queue's one are taken: refused
    // in the shared queue's words.
    let third = handle.submit_or_drive(vec![rows(&[3.0])], &["x"], None);
    assert!(matches!(third, Err(BatchError::QueueFull { batches: 1, .. })));
    for (submitted, value) in [(second, 2.0), (first, 1.0)] {
        if let Some(drive) = submitted.drive {
            // A batch thread may have taken the shared one first; either way it runs.
            let _ = handle.run_ready(drive);
        }
        assert_eq!(floats(&answer(submitted.pending)), vec![value]);
    }
    let fourth = handle.submit_or_drive(vec![rows(&[4.0])], &["x"], None).unwrap();
    assert!(
        matches!(fourth.drive, Some(Drive::Shard(_))),
        "the shards' batch was given back"
    );
}

/// Counts the runs in progress and the most seen at once.
#[derive(Default)]
struct Overlap {
    now: Mutex<(usize, usize)>,
}

impl Runner for Overlap {
    fn run(&self, inputs: Vec<Tensor>) -> Result<Vec<Tensor>, RuntimeError> {
        {
            let mut now = self.now.lock().unwrap();
            now.0 += 1;
            now.1 = now.1.max(now.0);
        }
        std::thread::sleep(Duration::from_millis(20));
        self.now.lock().unwrap().0 -= 1;
        Ok(inputs)
    }
}

#[test]
fn a_queue_with_a_running_limit_never_runs_more_batches_at_once() {
    for (limit, timeout) in [(1, Duration::ZERO), (2, Duration::from_millis(1))] {
        let batcher = Batcher::new(4).unwrap();
        let runner = Arc::new(Overlap::default());
        let metrics = QueueMetrics::new("batcher-test", 1, "serving_default");
        let handle = batcher.add_limited_queue(
            "limited".into(),
            params(2, timeout),
            true,
            runner.clone(),
            metrics,
            Some(limit),
        );
        let pending: Vec<Pending> = (0..12)
            .map(|i| handle.submit(vec![rows(&[i as f32])], &["x"], None).unwrap())
            .collect();
        for (i, pending) in pending.into_iter().enumerate() {
            assert_eq!(floats(&answer(pending)), vec![i as f32]);
        }
        let most = runner.now.lock().unwrap().1;
        assert!(
            (1..=limit).contains(&most),
            "{most} batches ran at once under a limit of {limit}"
        );
    }
}

/// Passes its inputs through once the test lets each run go, and says when
/// one has started.
struct Gate {
    entered: Mutex<std::sync::mpsc::Sender<()>>,
    release: Mutex<std::sync::mpsc::Receiver<()>>,
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
    let (entered, runs) = std::sync::mpsc::channel();
    let (go, release) = std::sync::mpsc::channel();
    let gate = Arc::new(Gate {
        entered: Mutex::new(entered),
        release: Mutex::new(release),
    });
    let batcher = Batcher::new(1).unwrap();
    let params = BatchParams {
        target_latency_micros: 10_000,
        ..params(8, Duration::ZERO)
    };
    let mut metrics = QueueMetrics::new("batcher-test", 1, "objective");
    let gauges = metrics.steered().clone();
    let handle = batcher.add_queue("q".into(), params, true, gate, metrics.clone());
    // The first run takes 20 ms: a run of one is all the 10 ms objective allows.
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

/// Runs that take a millisecond a row; records each batch's thread and rows.
#[derive(Default)]
struct MillisecondRows {
    batches: Mutex<Vec<(std::thread::ThreadId, usize)>>,
}

impl Runner for MillisecondRows {
    fn run(&self, inputs: Vec<Tensor>) -> Result<Vec<Tensor>, RuntimeError> {
        let rows = inputs[0].shape[0];
        std::thread::sleep(Duration::from_millis(rows as u64));
        self.batches.lock().unwrap().push((std::thread::current().id(), rows));
        Ok(inputs)
    }
}

#[test]
fn a_steered_queue_that_waits_for_nothing_is_run_by_its_callers_within_its_cap() {
    let batcher = Batcher::with_inline_limit(1, Duration::from_secs(1)).unwrap();
    let runner = Arc::new(MillisecondRows::default());
    let params = BatchParams {
        target_latency_micros: 10_000,
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
    // A run takes at least a millisecond a row: 8 rows never fit half the
    // 10 ms objective, so the cap is 4 rows or fewer.
    let cap = gauges.cap.get() as usize;
    assert!((1..=4).contains(&cap), "cap {cap}");
    let submitted: Vec<_> = (0..6)
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
    assert_eq!(inline.iter().sum::<usize>(), 6);
    assert!(
        inline.iter().all(|&rows| rows <= 4),
        "batches within the cap: {inline:?}"
    );
    assert!(inline.len() >= 2, "six rows are more than one batch: {inline:?}");
    for (i, submitted) in submitted.into_iter().enumerate() {
        assert_eq!(floats(&answer(submitted.pending)), vec![i as f32]);
    }
    // Inline runs are counted in and out: the idle queue takes the next request.
    assert!(handle.late_now(Duration::ZERO).is_none());
}
