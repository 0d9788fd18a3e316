//! The batcher end to end on scripted runners: real batch threads and queues,
//! no TensorFlow.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::handle::batch_rows;
use super::*;
use crate::status::Code;
use crate::tensor::TensorData;

/// Adds 1 to every float it gets and records the input shapes of every run.
#[derive(Default)]
struct Recorder {
    runs: Mutex<Vec<Vec<Vec<usize>>>>,
    fail: Mutex<bool>,
    delay: Duration,
}

impl Recorder {
    fn slow(delay: Duration) -> Recorder {
        Recorder {
            delay,
            ..Recorder::default()
        }
    }

    fn runs(&self) -> Vec<Vec<Vec<usize>>> {
        self.runs.lock().unwrap().clone()
    }

    fn batch_rows(&self) -> Vec<usize> {
        self.runs().iter().map(|r| r[0].first().copied().unwrap_or(0)).collect()
    }
}

impl Runner for Recorder {
    fn run(&self, inputs: Vec<Tensor>) -> Result<Vec<Tensor>, RuntimeError> {
        self.runs
            .lock()
            .unwrap()
            .push(inputs.iter().map(|t| t.shape.clone()).collect());
        std::thread::sleep(self.delay);
        if *self.fail.lock().unwrap() {
            return Err(RuntimeError::Run {
                code: Code::InvalidArgument,
                message: "scripted failure".into(),
            });
        }
        Ok(inputs
            .into_iter()
            .map(|mut t| {
                if let TensorData::Float(v) = &mut t.data {
                    v.iter_mut().for_each(|x| *x += 1.0);
                }
                t
            })
            .collect())
    }
}

fn rows(values: &[f32]) -> Tensor {
    Tensor::new(vec![values.len()], TensorData::Float(values.to_vec()))
}

fn params(max: usize, timeout: Duration) -> BatchParams {
    BatchParams {
        max_batch_size: max,
        batch_timeout_micros: timeout.as_micros() as u64,
        max_enqueued_batches: 100,
        ..BatchParams::default()
    }
}

fn queue(batcher: &Batcher, params: BatchParams, merge: bool, runner: Arc<Recorder>) -> QueueHandle {
    let metrics = QueueMetrics::new("batcher-test", 1, "serving_default");
    batcher.add_queue("test queue".into(), params, merge, runner, metrics)
}

fn answer(pending: Pending) -> ReplyResult {
    pending.blocking_recv().expect("the batcher replies")
}

fn floats(result: &ReplyResult) -> Vec<f32> {
    match &result.as_ref().expect("a successful run").outputs[0].data {
        TensorData::Float(v) => v.clone(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn concurrent_requests_merge_and_each_gets_its_own_rows() {
    let batcher = Batcher::new(1).unwrap();
    let runner = Arc::new(Recorder::default());
    let handle = queue(&batcher, params(4, Duration::from_secs(5)), true, runner.clone());
    let a = handle.submit(vec![rows(&[1.0])], &["x"], None).unwrap();
    let b = handle.submit(vec![rows(&[2.0, 3.0])], &["x"], None).unwrap();
    let c = handle.submit(vec![rows(&[4.0])], &["x"], None).unwrap();
    let (a, b, c) = (answer(a), answer(b), answer(c));
    assert_eq!(floats(&a), vec![2.0]);
    assert_eq!(floats(&b), vec![3.0, 4.0]);
    assert_eq!(floats(&c), vec![5.0]);
    assert_eq!(
        runner.batch_rows(),
        vec![4],
        "one full batch, no waiting for the timeout"
    );
    assert_eq!(b.unwrap().batch_rows, 4);
}

#[test]
fn an_underfull_batch_runs_at_its_timeout() {
    let batcher = Batcher::new(1).unwrap();
    let runner = Arc::new(Recorder::default());
    let handle = queue(&batcher, params(8, Duration::from_millis(50)), true, runner.clone());
    let started = Instant::now();
    let result = answer(handle.submit(vec![rows(&[1.0])], &["x"], None).unwrap());
    let waited = started.elapsed();
    assert_eq!(floats(&result), vec![2.0]);
    assert!(waited >= Duration::from_millis(50), "ran after {waited:?}");
    assert!(waited < Duration::from_secs(2), "ran after {waited:?}");
}

#[test]
fn scalar_inputs_run_alone_without_waiting() {
    let batcher = Batcher::new(1).unwrap();
    let runner = Arc::new(Recorder::default());
    let handle = queue(&batcher, params(8, Duration::from_secs(5)), true, runner.clone());
    let scalar = Tensor::new(vec![], TensorData::Float(vec![3.5]));
    let started = Instant::now();
    let result = answer(handle.submit(vec![scalar], &["x"], None).unwrap());
    assert!(started.elapsed() < Duration::from_secs(2));
    let output = result.unwrap();
    assert_eq!(output.outputs[0], Tensor::new(vec![], TensorData::Float(vec![4.5])));
    assert_eq!(runner.runs(), vec![vec![Vec::<usize>::new()]]);
}

#[test]
fn inputs_disagreeing_on_rows_run_alone() {
    let batcher = Batcher::new(1).unwrap();
    let runner = Arc::new(Recorder::default());
    let handle = queue(&batcher, params(8, Duration::from_secs(5)), true, runner.clone());
    let result = answer(
        handle
            .submit(vec![rows(&[1.0, 2.0]), rows(&[5.0])], &["a", "b"], None)
            .unwrap(),
    );
    let output = result.unwrap();
    assert_eq!(output.outputs.len(), 2);
    assert_eq!(output.outputs[1].data, TensorData::Float(vec![6.0]));
    assert_eq!(runner.runs(), vec![vec![vec![2], vec![1]]]);
}

#[test]
fn different_inner_shapes_form_different_batches() {
    let batcher = Batcher::new(1).unwrap();
    let runner = Arc::new(Recorder::default());
    let handle = queue(&batcher, params(8, Duration::from_millis(30)), true, runner.clone());
    let wide = Tensor::new(vec![1, 2], TensorData::Float(vec![1.0, 2.0]));
    let narrow = Tensor::new(vec![1, 1], TensorData::Float(vec![1.0]));
    let a = handle.submit(vec![wide.clone()], &["x"], None).unwrap();
    let b = handle.submit(vec![narrow], &["x"], None).unwrap();
    let c = handle.submit(vec![wide], &["x"], None).unwrap();
    for pending in [a, b, c] {
        answer(pending).unwrap();
    }
    let mut shapes: Vec<Vec<usize>> = runner.runs().into_iter().map(|r| r[0].clone()).collect();
    shapes.sort();
    assert_eq!(shapes.len(), 3, "{shapes:?}: a closed batch is not reopened");
}

#[test]
fn a_full_queue_answers_queue_full() {
    let batcher = Batcher::new(1).unwrap();
    let runner = Arc::new(Recorder::slow(Duration::from_millis(200)));
    let mut p = params(1, Duration::ZERO);
    p.max_enqueued_batches = 1;
    let handle = queue(&batcher, p, true, runner.clone());
    let first = handle.submit(vec![rows(&[1.0])], &["x"], None).unwrap();
    // The batch thread takes the first; the second waits; the third finds the queue full.
    std::thread::sleep(Duration::from_millis(50));
    let second = handle.submit(vec![rows(&[2.0])], &["x"], None).unwrap();
    let third = handle.submit(vec![rows(&[3.0])], &["x"], None);
    assert!(
        matches!(third, Err(BatchError::QueueFull { batches: 1, .. })),
        "{:?}",
        third.err()
    );
    assert_eq!(floats(&answer(first)), vec![2.0]);
    assert_eq!(floats(&answer(second)), vec![3.0]);
}

#[test]
fn requests_over_max_batch_size_are_refused_or_split() {
    let batcher = Batcher::new(1).unwrap();
    let runner = Arc::new(Recorder::default());
    let refusing = queue(&batcher, params(4, Duration::ZERO), true, runner.clone());
    let big = rows(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]);
    let refused = refusing.submit(vec![big.clone()], &["x"], None);
    assert!(matches!(refused, Err(BatchError::TooLarge { rows: 10, max: 4, .. })));

    let mut splitting = params(4, Duration::ZERO);
    splitting.enable_large_batch_splitting = true;
    let handle = queue(&batcher, splitting, true, runner.clone());
    let result = answer(handle.submit(vec![big], &["x"], None).unwrap());
    assert_eq!(floats(&result), (1..=10).map(|v| v as f32).collect::<Vec<_>>());
    assert_eq!(runner.batch_rows(), vec![4, 4, 2]);
}

#[test]
fn a_failed_run_fails_its_batch_only() {
    let batcher = Batcher::new(1).unwrap();
    let runner = Arc::new(Recorder::default());
    let handle = queue(&batcher, params(2, Duration::from_secs(5)), true, runner.clone());
    *runner.fail.lock().unwrap() = true;
    let a = handle.submit(vec![rows(&[1.0])], &["x"], None).unwrap();
    let b = handle.submit(vec![rows(&[2.0])], &["x"], None).unwrap();
    for pending in [a, b] {
        let error = answer(pending).unwrap_err();
        assert!(error.to_string().contains("scripted failure"), "{error}");
    }
    *runner.fail.lock().unwrap() = false;
    let c = handle.submit(vec![rows(&[3.0])], &["x"], None).unwrap();
    let d = handle.submit(vec![rows(&[4.0])], &["x"], None).unwrap();
    assert_eq!(floats(&answer(c)), vec![4.0]);
    assert_eq!(floats(&answer(d)), vec![5.0]);
}

#[test]
fn abandoned_requests_are_not_run() {
    let batcher = Batcher::new(1).unwrap();
    let runner = Arc::new(Recorder::default());
    let handle = queue(&batcher, params(2, Duration::from_millis(100)), true, runner.clone());
    drop(handle.submit(vec![rows(&[1.0])], &["x"], None).unwrap());
    std::thread::sleep(Duration::from_millis(250));
    assert!(runner.runs().is_empty(), "{:?}", runner.runs());
    let live = handle.submit(vec![rows(&[2.0])], &["x"], None).unwrap();
    assert_eq!(floats(&answer(live)), vec![3.0]);
}

#[test]
fn batches_pad_to_allowed_sizes_and_replies_drop_the_padding() {
    let batcher = Batcher::new(1).unwrap();
    let runner = Arc::new(Recorder::default());
    let mut p = params(4, Duration::from_millis(20));
    p.allowed_batch_sizes = vec![2, 4];
    let handle = queue(&batcher, p, true, runner.clone());
    let a = handle.submit(vec![rows(&[1.0, 2.0])], &["x"], None).unwrap();
    let b = handle.submit(vec![rows(&[3.0])], &["x"], None).unwrap();
    assert_eq!(floats(&answer(a)), vec![2.0, 3.0]);
    assert_eq!(floats(&answer(b)), vec![4.0]);
    assert_eq!(runner.batch_rows(), vec![4]);
}

#[test]
fn outputs_without_a_batch_dimension_cannot_be_split() {
    struct Scalar;
    impl Runner for Scalar {
        fn run(&self, _: Vec<Tensor>) -> Result<Vec<Tensor>, RuntimeError> {
            Ok(vec![Tensor::new(vec![], TensorData::Float(vec![0.0]))])
        }
    }
    let batcher = Batcher::new(1).unwrap();
    let metrics = QueueMetrics::new("batcher-test", 1, "scalar");
    let handle = batcher.add_queue(
        "q".into(),
        params(2, Duration::from_secs(5)),
        true,
        Arc::new(Scalar),
        metrics,
    );
    let a = handle.submit(vec![rows(&[1.0])], &["x"], None).unwrap();
    let b = handle.submit(vec![rows(&[2.0])], &["x"], None).unwrap();
    for pending in [a, b] {
        assert!(matches!(answer(pending), Err(BatchError::Split(_))));
    }
}

#[test]
fn without_batching_every_request_runs_alone_at_once() {
    let batcher = Batcher::new(2).unwrap();
    let runner = Arc::new(Recorder::default());
    let handle = queue(&batcher, params(100, Duration::from_secs(5)), false, runner.clone());
    let started = Instant::now();
    let pending: Vec<Pending> = (0..4)
        .map(|i| handle.submit(vec![rows(&[i as f32])], &["x"], None).unwrap())
        .collect();
    for (i, p) in pending.into_iter().enumerate() {
        assert_eq!(floats(&answer(p)), vec![i as f32 + 1.0]);
    }
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(runner.batch_rows(), vec![1, 1, 1, 1]);
}

#[test]
fn shutdown_runs_what_is_queued_and_refuses_the_rest() {
    let batcher = Batcher::new(1).unwrap();
    let runner = Arc::new(Recorder::default());
    let handle = queue(&batcher, params(8, Duration::from_millis(100)), true, runner.clone());
    let queued = handle.submit(vec![rows(&[1.0])], &["x"], None).unwrap();
    batcher.shutdown();
    assert_eq!(floats(&answer(queued)), vec![2.0]);
    assert!(matches!(
        handle.submit(vec![rows(&[1.0])], &["x"], None),
        Err(BatchError::ShuttingDown)
    ));
}

#[test]
fn a_dropped_queue_drains_before_it_goes() {
    let batcher = Batcher::new(1).unwrap();
    let runner = Arc::new(Recorder::default());
    let handle = queue(&batcher, params(8, Duration::from_millis(50)), true, runner.clone());
    let queued = handle.submit(vec![rows(&[1.0])], &["x"], None).unwrap();
    drop(handle);
    assert_eq!(floats(&answer(queued)), vec![2.0]);
    // Once drained, the queue (and with it the runner) is released.
    let deadline = Instant::now() + Duration::from_secs(2);
    while Arc::strong_count(&runner) > 1 {
        assert!(Instant::now() < deadline, "the runner is still held");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn batch_rows_need_a_shared_0th_dimension() {
    let shaped = |shape: Vec<usize>| {
        let len = shape.iter().product();
        Tensor::new(shape, TensorData::Float(vec![0.0; len]))
    };
    assert_eq!(batch_rows(&[shaped(vec![3]), shaped(vec![3, 2])]), Some(3));
    assert_eq!(batch_rows(&[shaped(vec![])]), None);
    assert_eq!(batch_rows(&[shaped(vec![3]), shaped(vec![])]), None);
    assert_eq!(batch_rows(&[shaped(vec![3]), shaped(vec![2])]), None);
}

#[test]
fn a_panicking_run_fails_its_batch_and_the_thread_lives() {
    struct Panicky(Mutex<bool>);
    impl Runner for Panicky {
        fn run(&self, inputs: Vec<Tensor>) -> Result<Vec<Tensor>, RuntimeError> {
            if std::mem::replace(&mut *self.0.lock().unwrap(), false) {
                panic!("kernel exploded");
            }
            Ok(inputs)
        }
    }
    let batcher = Batcher::new(1).unwrap();
    let metrics = QueueMetrics::new("batcher-test", 1, "panicky");
    let runner = Arc::new(Panicky(Mutex::new(true)));
    let handle = batcher.add_queue("q".into(), params(2, Duration::from_secs(5)), true, runner, metrics);
    let a = handle.submit(vec![rows(&[1.0])], &["x"], None).unwrap();
    let b = handle.submit(vec![rows(&[2.0])], &["x"], None).unwrap();
    for pending in [a, b] {
        let error = answer(pending).unwrap_err().to_string();
        assert!(error.contains("panicked: kernel exploded"), "{error}");
    }
    // The one batch thread is still there.
    let c = handle.submit(vec![rows(&[3.0])], &["x"], None).unwrap();
    let d = handle.submit(vec![rows(&[4.0])], &["x"], None).unwrap();
    assert_eq!(floats(&answer(c)), vec![3.0]);
    assert_eq!(floats(&answer(d)), vec![4.0]);
}

/// Records the threads its runs happen on.
#[derive(Default)]
struct ThreadRecorder {
    threads: Mutex<Vec<std::thread::ThreadId>>,
}

impl Runner for ThreadRecorder {
    fn run(&self, inputs: Vec<Tensor>) -> Result<Vec<Tensor>, RuntimeError> {
        self.threads.lock().unwrap().push(std::thread::current().id());
        Ok(inputs)
    }
}

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
    // An idle queue takes the next; one behind it would wait 20 ms and run 20.
    let second = handle.submit(vec![rows(&[2.0])], &["x"], None).unwrap();
    runs.recv().unwrap();
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
