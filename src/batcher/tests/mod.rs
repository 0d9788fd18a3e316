//! The batcher end to end on scripted runners: real batch threads and queues,
//! no TensorFlow.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::handle::batch_rows;
use super::*;
use crate::metrics::QueueMetrics;
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
    batcher.add_queue("test queue".into(), params, merge, runner, metrics, None)
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
    let a = handle.submit(vec![rows(&[1.0])], &["x"], None, None).unwrap();
    let b = handle.submit(vec![rows(&[2.0, 3.0])], &["x"], None, None).unwrap();
    let c = handle.submit(vec![rows(&[4.0])], &["x"], None, None).unwrap();
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
    let result = answer(handle.submit(vec![rows(&[1.0])], &["x"], None, None).unwrap());
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
    let result = answer(handle.submit(vec![scalar], &["x"], None, None).unwrap());
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
            .submit(vec![rows(&[1.0, 2.0]), rows(&[5.0])], &["a", "b"], None, None)
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
    let a = handle.submit(vec![wide.clone()], &["x"], None, None).unwrap();
    let b = handle.submit(vec![narrow], &["x"], None, None).unwrap();
    let c = handle.submit(vec![wide], &["x"], None, None).unwrap();
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
    let first = handle.submit(vec![rows(&[1.0])], &["x"], None, None).unwrap();
    // The batch thread takes the first; the second waits; the third finds the queue full.
    std::thread::sleep(Duration::from_millis(50));
    let second = handle.submit(vec![rows(&[2.0])], &["x"], None, None).unwrap();
    let third = handle.submit(vec![rows(&[3.0])], &["x"], None, None);
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
    let refused = refusing.submit(vec![big.clone()], &["x"], None, None);
    assert!(matches!(refused, Err(BatchError::TooLarge { rows: 10, max: 4, .. })));

    let mut splitting = params(4, Duration::ZERO);
    splitting.enable_large_batch_splitting = true;
    let handle = queue(&batcher, splitting, true, runner.clone());
    let result = answer(handle.submit(vec![big], &["x"], None, None).unwrap());
    assert_eq!(floats(&result), (1..=10).map(|v| v as f32).collect::<Vec<_>>());
    assert_eq!(runner.batch_rows(), vec![4, 4, 2]);
}

#[test]
fn a_failed_run_fails_its_batch_only() {
    let batcher = Batcher::new(1).unwrap();
    let runner = Arc::new(Recorder::default());
    let handle = queue(&batcher, params(2, Duration::from_secs(5)), true, runner.clone());
    *runner.fail.lock().unwrap() = true;
    let a = handle.submit(vec![rows(&[1.0])], &["x"], None, None).unwrap();
    let b = handle.submit(vec![rows(&[2.0])], &["x"], None, None).unwrap();
    for pending in [a, b] {
        let error = answer(pending).unwrap_err();
        assert!(error.to_string().contains("scripted failure"), "{error}");
    }
    *runner.fail.lock().unwrap() = false;
    let c = handle.submit(vec![rows(&[3.0])], &["x"], None, None).unwrap();
    let d = handle.submit(vec![rows(&[4.0])], &["x"], None, None).unwrap();
    assert_eq!(floats(&answer(c)), vec![4.0]);
    assert_eq!(floats(&answer(d)), vec![5.0]);
}

#[test]
fn abandoned_requests_are_not_run() {
    let batcher = Batcher::new(1).unwrap();
    let runner = Arc::new(Recorder::default());
    let handle = queue(&batcher, params(2, Duration::from_millis(100)), true, runner.clone());
    drop(handle.submit(vec![rows(&[1.0])], &["x"], None, None).unwrap());
    std::thread::sleep(Duration::from_millis(250));
    assert!(runner.runs().is_empty(), "{:?}", runner.runs());
    let live = handle.submit(vec![rows(&[2.0])], &["x"], None, None).unwrap();
    assert_eq!(floats(&answer(live)), vec![3.0]);
}

#[test]
fn batches_pad_to_allowed_sizes_and_replies_drop_the_padding() {
    let batcher = Batcher::new(1).unwrap();
    let runner = Arc::new(Recorder::default());
    let mut p = params(4, Duration::from_millis(20));
    p.allowed_batch_sizes = vec![2, 4];
    let handle = queue(&batcher, p, true, runner.clone());
    let a = handle.submit(vec![rows(&[1.0, 2.0])], &["x"], None, None).unwrap();
    let b = handle.submit(vec![rows(&[3.0])], &["x"], None, None).unwrap();
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
        None,
    );
    let a = handle.submit(vec![rows(&[1.0])], &["x"], None, None).unwrap();
    let b = handle.submit(vec![rows(&[2.0])], &["x"], None, None).unwrap();
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
        .map(|i| handle.submit(vec![rows(&[i as f32])], &["x"], None, None).unwrap())
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
    let queued = handle.submit(vec![rows(&[1.0])], &["x"], None, None).unwrap();
    batcher.shutdown();
    assert_eq!(floats(&answer(queued)), vec![2.0]);
    assert!(matches!(
        handle.submit(vec![rows(&[1.0])], &["x"], None, None),
        Err(BatchError::ShuttingDown)
    ));
}

#[test]
fn a_dropped_queue_drains_before_it_goes() {
    let batcher = Batcher::new(1).unwrap();
    let runner = Arc::new(Recorder::default());
    let handle = queue(&batcher, params(8, Duration::from_millis(50)), true, runner.clone());
    let queued = handle.submit(vec![rows(&[1.0])], &["x"], None, None).unwrap();
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
    let handle = batcher.add_queue(
        "q".into(),
        params(2, Duration::from_secs(5)),
        true,
        runner,
        metrics,
        None,
    );
    let a = handle.submit(vec![rows(&[1.0])], &["x"], None, None).unwrap();
    let b = handle.submit(vec![rows(&[2.0])], &["x"], None, None).unwrap();
    for pending in [a, b] {
        let error = answer(pending).unwrap_err().to_string();
        assert!(error.contains("panicked: kernel exploded"), "{error}");
    }
    // The one batch thread is still there.
    let c = handle.submit(vec![rows(&[3.0])], &["x"], None, None).unwrap();
    let d = handle.submit(vec![rows(&[4.0])], &["x"], None, None).unwrap();
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

mod steered;
mod threads;
