//! Which threads run batches: callers running fast queues inline, per-thread
//! shards, and the running limit.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::*;
use crate::metrics::QueueMetrics;

#[test]
fn a_fast_queue_is_run_by_its_callers_once_measured() {
    let batcher = Batcher::with_inline_limit(1, Duration::from_secs(1)).unwrap();
    let runner = Arc::new(ThreadRecorder::default());
    let metrics = QueueMetrics::new("batcher-test", 1, "serving_default");
    let handle = batcher.add_queue(
        "q".into(),
        params(8, Duration::ZERO),
        true,
        runner.clone(),
        metrics,
        None,
    );
    // Unmeasured: the batch threads run it, and measure it.
    for value in 0..4 {
        let submitted = handle
            .submit_or_drive(vec![rows(&[value as f32])], &["x"], None, None, None)
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
    let first = handle
        .submit_or_drive(vec![rows(&[1.0])], &["x"], None, None, None)
        .unwrap();
    let second = handle
        .submit_or_drive(vec![rows(&[2.0, 3.0])], &["x"], None, None, None)
        .unwrap();
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
        let handle = batcher.add_queue("q".into(), params(8, timeout), true, runner, metrics, None);
        for _ in 0..8 {
            let submitted = handle
                .submit_or_drive(vec![rows(&[1.0])], &["x"], None, None, None)
                .unwrap();
            assert!(submitted.drive.is_none(), "limit {limit:?}, timeout {timeout:?}");
            answer(submitted.pending).unwrap();
        }
    }
}

/// Measures a fast queue so that its requests are run by their callers.
fn measured_inline_queue(runner: Arc<ThreadRecorder>) -> (Arc<Batcher>, QueueHandle) {
    let batcher = Batcher::with_inline_limit(1, Duration::from_secs(1)).unwrap();
    let metrics = QueueMetrics::new("batcher-test", 1, "serving_default");
    let handle = batcher.add_queue("q".into(), params(8, Duration::ZERO), true, runner, metrics, None);
    for _ in 0..4 {
        let submitted = handle
            .submit_or_drive(vec![rows(&[0.0])], &["x"], None, None, None)
            .unwrap();
        answer(submitted.pending).unwrap();
    }
    (batcher, handle)
}

#[test]
fn each_thread_batches_its_own_requests_and_any_thread_can_drive_them() {
    let runner = Arc::new(ThreadRecorder::default());
    let (_batcher, handle) = measured_inline_queue(runner.clone());
    let here = handle
        .submit_or_drive(vec![rows(&[1.0])], &["x"], None, None, None)
        .unwrap();
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
                        .then(|| {
                            handle
                                .submit_or_drive(vec![rows(&[2.0])], &["x"], None, None, None)
                                .unwrap()
                        })
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
    let too_large = handle.submit_or_drive(vec![rows(&[0.0; 9])], &["x"], None, None, None);
    assert!(matches!(too_large, Err(BatchError::TooLarge { rows: 9, max: 8, .. })));
    batcher.shutdown();
    let closed = handle.submit_or_drive(vec![rows(&[0.0])], &["x"], None, None, None);
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
    let handle = batcher.add_queue("q".into(), params, true, runner, metrics, None);
    for _ in 0..4 {
        let submitted = handle
            .submit_or_drive(vec![rows(&[0.0])], &["x"], None, None, None)
            .unwrap();
        answer(submitted.pending).unwrap();
    }
    let first = handle
        .submit_or_drive(vec![rows(&[1.0])], &["x"], None, None, None)
        .unwrap();
    let second = handle
        .submit_or_drive(vec![rows(&[2.0])], &["x"], None, None, None)
        .unwrap();
    assert!(matches!(first.drive, Some(Drive::Shard(_))), "{:?}", first.drive);
    assert!(matches!(second.drive, Some(Drive::Shared)), "{:?}", second.drive);
    // The shards' one batch and the shared queue's one are taken: refused
    // in the shared queue's words.
    let third = handle.submit_or_drive(vec![rows(&[3.0])], &["x"], None, None, None);
    assert!(matches!(third, Err(BatchError::QueueFull { batches: 1, .. })));
    for (submitted, value) in [(second, 2.0), (first, 1.0)] {
        if let Some(drive) = submitted.drive {
            // A batch thread may have taken the shared one first; either way it runs.
            let _ = handle.run_ready(drive);
        }
        assert_eq!(floats(&answer(submitted.pending)), vec![value]);
    }
    let fourth = handle
        .submit_or_drive(vec![rows(&[4.0])], &["x"], None, None, None)
        .unwrap();
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
        let handle = batcher.add_queue(
            "limited".into(),
            params(2, timeout),
            true,
            runner.clone(),
            metrics,
            Some(limit),
        );
        let pending: Vec<Pending> = (0..12)
            .map(|i| handle.submit(vec![rows(&[i as f32])], &["x"], None, None).unwrap())
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
