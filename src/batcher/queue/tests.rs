use super::*;
use crate::tensor::TensorData;

fn task(rows: usize, width: usize, at: Instant) -> Task<usize> {
    let inputs = vec![Tensor::new(
        vec![rows, width],
        TensorData::Float(vec![0.0; rows * width]),
    )];
    Task {
        inputs,
        rows,
        alone: false,
        request_id: None,
        enqueued: at,
        deadline: None,
        reply: rows,
    }
}

fn params(max: usize, timeout_us: u64, batches: usize) -> BatchParams {
    BatchParams {
        max_batch_size: max,
        batch_timeout_micros: timeout_us,
        max_enqueued_batches: batches,
        ..BatchParams::default()
    }
}

#[test]
fn a_steered_queue_forms_batches_of_its_cap_and_waits_its_timeout() {
    let now = Instant::now();
    let mut queue = Queue::new(params(8, 1_000_000, 10), true);
    queue.steer(2, Duration::from_millis(5));
    for _ in 0..3 {
        queue.enqueue_one(task(1, 1, now)).map_err(|(e, _)| e).unwrap();
    }
    assert_eq!(queue.rows(), 3);
    assert_eq!(queue.pop_ready(now).unwrap().rows, 2, "full at the cap");
    assert!(queue.pop_ready(now).is_none(), "the rest waits for its timeout");
    let later = now + Duration::from_millis(5);
    assert_eq!(queue.pop_ready(later).unwrap().rows, 1);
    assert_eq!(queue.rows(), 0);
    queue.steer(100, Duration::ZERO);
    assert_eq!(queue.cap, 8, "never past max_batch_size");
}

#[test]
fn merges_until_full_then_opens_a_new_batch() {
    let now = Instant::now();
    let mut queue = Queue::new(params(4, 1_000_000, 10), true);
    for rows in [1, 2, 1, 3] {
        queue.enqueue(vec![task(rows, 2, now)]).map_err(|e| e.0).unwrap();
    }
    let first = queue.pop_ready(now).expect("full batch is ready");
    assert_eq!((first.rows, first.tasks.len()), (4, 3));
    assert!(queue.pop_ready(now).is_none(), "the open batch waits for its timeout");
    let second = queue.pop_ready(now + Duration::from_secs(1)).expect("timed out");
    assert_eq!(second.rows, 3);
}

#[test]
fn a_batch_between_allowed_sizes_runs_the_smaller_when_that_measures_faster() {
    let now = Instant::now();
    let allowed = BatchParams {
        allowed_batch_sizes: vec![1, 2, 4, 8, 16, 32],
        ..params(32, 0, 10)
    };
    let image_model = Arc::new(RunSizes::new(&allowed.allowed_batch_sizes));
    image_model.record(16, Duration::from_millis(800));
    image_model.record(32, Duration::from_millis(1600));
    let mut queue = Queue::new(allowed.clone(), true).with_run_sizes(image_model);
    let later = now + Duration::from_millis(3);
    for i in 0..17 {
        let at = if i == 16 { later } else { now };
        queue.enqueue(vec![task(1, 2, at)]).map_err(|e| e.0).unwrap();
    }
    let first = queue.pop_ready(later).expect("ready");
    assert_eq!((first.rows, first.tasks.len(), first.opened), (16, 16, now));
    assert_eq!(queue.depth(), 1, "the 17th stays queued");
    queue.enqueue(vec![task(1, 2, later)]).map_err(|e| e.0).unwrap();
    let second = queue.pop_ready(later).expect("ready");
    assert_eq!(
        (second.rows, second.opened),
        (2, later),
        "the one left leads the next batch"
    );

    let small_model = Arc::new(RunSizes::new(&allowed.allowed_batch_sizes));
    small_model.record(16, Duration::from_micros(100));
    // 32 rows take 4% longer than 16: 17 padded beat 16 (and 1 more run).
    small_model.record(32, Duration::from_micros(104));
    let mut queue = Queue::new(allowed.clone(), true).with_run_sizes(small_model);
    for _ in 0..17 {
        queue.enqueue(vec![task(1, 2, now)]).map_err(|e| e.0).unwrap();
    }
    assert_eq!(queue.pop_ready(now).unwrap().rows, 17, "padded to 32: one run, not two");

    let unmeasured = Arc::new(RunSizes::new(&allowed.allowed_batch_sizes));
    let mut queue = Queue::new(allowed, true).with_run_sizes(unmeasured);
    for _ in 0..17 {
        queue.enqueue(vec![task(1, 2, now)]).map_err(|e| e.0).unwrap();
    }
    assert_eq!(
        queue.pop_ready(now).unwrap().rows,
        17,
        "as before until both sizes have run"
    );
}

#[test]
fn different_inner_shapes_never_share_a_batch() {
    let now = Instant::now();
    let mut queue = Queue::new(params(8, 0, 10), true);
    queue.enqueue(vec![task(1, 2, now)]).map_err(|e| e.0).unwrap();
    queue.enqueue(vec![task(1, 3, now)]).map_err(|e| e.0).unwrap();
    assert_eq!(queue.pop_ready(now).unwrap().tasks.len(), 1);
    assert_eq!(queue.pop_ready(now).unwrap().tasks.len(), 1);
    let mut padded = Queue::new(
        BatchParams {
            pad_variable_length_inputs: true,
            ..params(8, 0, 10)
        },
        true,
    );
    padded.enqueue(vec![task(1, 2, now)]).map_err(|e| e.0).unwrap();
    padded.enqueue(vec![task(1, 3, now)]).map_err(|e| e.0).unwrap();
    let mut rank_one = task(1, 1, now);
    rank_one.inputs = vec![Tensor::new(vec![1], TensorData::Float(vec![0.0]))];
    padded.enqueue(vec![rank_one]).map_err(|e| e.0).unwrap();
    assert_eq!(
        padded.pop_ready(now).unwrap().tasks.len(),
        2,
        "equal ranks join when padding"
    );
    assert_eq!(
        padded.pop_ready(now).unwrap().tasks.len(),
        1,
        "another rank never joins"
    );
}

#[test]
fn limits_are_enforced() {
    let now = Instant::now();
    let mut queue = Queue::new(params(4, 0, 2), true);
    let (error, _) = queue.enqueue(vec![task(5, 1, now)]).unwrap_err();
    assert_eq!(error, EnqueueError::TooLarge { rows: 5, max: 4 });
    queue.enqueue(vec![task(4, 1, now)]).map_err(|e| e.0).unwrap();
    queue.enqueue(vec![task(4, 1, now)]).map_err(|e| e.0).unwrap();
    let (error, returned) = queue.enqueue(vec![task(1, 1, now)]).unwrap_err();
    assert_eq!(error, EnqueueError::Full { batches: 2 });
    assert_eq!(returned.len(), 1);
    assert_eq!(queue.depth(), 2);
}

#[test]
fn without_merging_every_request_runs_alone_at_once() {
    let now = Instant::now();
    let mut queue = Queue::new(params(2, 1_000_000, 10), false);
    queue.enqueue(vec![task(1, 1, now)]).map_err(|e| e.0).unwrap();
    queue.enqueue(vec![task(9, 1, now)]).map_err(|e| e.0).unwrap();
    assert_eq!(queue.pop_ready(now).unwrap().rows, 1);
    assert_eq!(queue.pop_ready(now).unwrap().rows, 9);
}

#[test]
fn requests_that_cannot_be_batched_run_alone_at_once() {
    let now = Instant::now();
    let mut queue = Queue::new(params(8, 1_000_000, 10), true);
    let scalar = Task {
        inputs: vec![Tensor::new(vec![], TensorData::Float(vec![3.5]))],
        rows: 1,
        alone: true,
        request_id: None,
        enqueued: now,
        deadline: None,
        reply: 0,
    };
    queue.enqueue(vec![scalar]).map_err(|e| e.0).unwrap();
    queue.enqueue(vec![task(1, 1, now)]).map_err(|e| e.0).unwrap();
    let first = queue
        .pop_ready(now)
        .expect("a lone request does not wait for its timeout");
    assert!(first.runs_alone());
    assert_eq!(first.tasks.len(), 1);
    assert_eq!(first.tasks[0].inputs[0].shape, Vec::<usize>::new());
    assert!(queue.pop_ready(now).is_none(), "the batchable request still waits");
    let unmerged: Queue<usize> = Queue::new(params(8, 0, 10), false);
    assert_eq!(
        unmerged.room_for(&[Tensor::new(vec![], TensorData::Float(vec![1.0]))]),
        0
    );
}

#[test]
fn large_requests_split_into_the_open_batch_then_full_batches() {
    assert_eq!(chunk_sizes(10, 3, 4), vec![3, 4, 3]);
    assert_eq!(chunk_sizes(8, 0, 4), vec![4, 4]);
    let now = Instant::now();
    let mut queue = Queue::new(params(4, 0, 10), true);
    queue.enqueue(vec![task(1, 1, now)]).map_err(|e| e.0).unwrap();
    let big = task(6, 1, now);
    let sizes = chunk_sizes(big.rows, queue.room_for(&big.inputs), 4);
    let parts: Vec<Task<usize>> = split_inputs(&big.inputs, &sizes)
        .into_iter()
        .zip(&sizes)
        .map(|(inputs, &rows)| Task {
            inputs,
            rows,
            alone: false,
            request_id: None,
            enqueued: now,
            deadline: None,
            reply: rows,
        })
        .collect();
    queue.enqueue(parts).map_err(|e| e.0).unwrap();
    assert_eq!(queue.pop_ready(now).unwrap().rows, 4);
    assert_eq!(queue.pop_ready(now).unwrap().rows, 3);
}
