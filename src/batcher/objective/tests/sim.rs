//! A discrete-event simulation of one queue: seeded arrivals (Poisson,
//! on-off bursts, closed-loop callers), a runner whose run of b rows takes
//! α + βb times skewed noise, with stalls, on one or more batch threads; the
//! real [`Controller`], [`Lanes`] and [`Queue`] decide. No threads, no
//! sleeps: time is a number.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use super::super::lanes::Lanes;
use super::super::{Admission, Controller, LateAction, Objective};
use super::arrivals::{next_open_arrival, Random};
use crate::batcher::queue::{Queue, Task};
use crate::batcher::BatchParams;

/// What decides batches and admissions.
#[derive(Clone, Copy, Debug)]
pub enum Policy {
    Objective(LateAction),
    /// A fixed cap and batch timeout, everyone let in (the queue's bound aside).
    Static {
        cap: usize,
        timeout: Duration,
    },
    /// A fixed cap, no wait to fill, and requests queued past `timeout` dropped (Triton's).
    QueueTimeout {
        cap: usize,
        timeout: Duration,
    },
}

#[derive(Clone, Copy, Debug)]
pub enum Arrivals {
    Poisson {
        rate: f64,
    },
    /// Poisson at `rate` for `on`, then nothing for `off`, over and over.
    OnOff {
        rate: f64,
        on: Duration,
        off: Duration,
    },
    /// `callers` each sending again as soon as answered, or `retry` after a refusal.
    Closed {
        callers: usize,
        retry: Duration,
    },
}

#[derive(Clone, Debug)]
pub struct Setup {
    pub seed: u64,
    pub objective: Duration,
    pub percentile: f64,
    pub threads: usize,
    pub max_batch: usize,
    /// run(b) = fixed + per_row × b, in seconds, times (1 + noise) where
    /// noise is exponential with mean `spread`.
    pub fixed: f64,
    pub per_row: f64,
    pub spread: f64,
    /// Windows (start, length) in which a run does not end before the window does.
    pub stalls: Vec<(Duration, Duration)>,
    /// Every run cut to the controller's plan for its size.
    pub runs_within_plan: bool,
    /// Time between an answer and its caller having it (sockets, threads).
    pub outside: Duration,
    pub arrivals: Arrivals,
    pub length: Duration,
    pub policy: Policy,
}

impl Setup {
    /// One thread, 64 rows at most, runs of 0.5 ms + 0.05 ms a row with a
    /// twentieth's skewed noise (exponential: a p99 23% above the mean), a
    /// 10 ms p99 objective, for 5 s.
    pub fn new(seed: u64, arrivals: Arrivals, policy: Policy) -> Setup {
        Setup {
            seed,
            objective: Duration::from_millis(10),
            percentile: 99.0,
            threads: 1,
            max_batch: 64,
            fixed: 0.000_5,
            per_row: 0.000_05,
            spread: 0.05,
            stalls: Vec::new(),
            runs_within_plan: false,
            outside: Duration::ZERO,
            arrivals,
            length: Duration::from_secs(5),
            policy,
        }
    }

    /// Requests a second runs of the largest batch keep up with (mean noise included).
    pub fn capacity(&self) -> f64 {
        let run = (self.fixed + self.per_row * self.max_batch as f64) * (1.0 + self.spread);
        self.threads as f64 * self.max_batch as f64 / run
    }
}

#[derive(Debug, Default)]
pub struct Outcome {
    pub offered: u64,
    pub answered: u64,
    /// Answered within the objective.
    pub good: u64,
    pub refused: u64,
    /// Put on the late lane; batches run, and of them with late rows.
    pub delayed: u64,
    pub batches: u64,
    pub late_batches: u64,
    /// Taken out of their batch as late, or past the queue timeout.
    pub expired: u64,
    /// Admitted on time, answered past the deadline (of those, against a plan).
    pub on_time_late: u64,
    pub planned_late: u64,
    /// Late answers of on-time requests in the second half, of all answered there.
    pub late_second_half: u64,
    pub answered_second_half: u64,
    /// Rows run, and rows run for requests answered past the objective.
    pub rows_run: u64,
    pub rows_run_late: u64,
    /// A late batch ran while an on-time batch waited.
    pub late_before_on_time: u64,
    /// Latencies of answered requests, seconds.
    pub latencies: Vec<f64>,
    /// When the cap changed (after its first choice), seconds.
    pub cap_changes: Vec<f64>,
    pub seconds: f64,
}

impl Outcome {
    pub fn goodput(&self) -> f64 {
        self.good as f64 / self.seconds
    }

    pub fn throughput(&self) -> f64 {
        self.answered as f64 / self.seconds
    }

    pub fn p99(&self) -> f64 {
        let mut sorted = self.latencies.clone();
        sorted.sort_by(f64::total_cmp);
        sorted
            .get((sorted.len() * 99 / 100).min(sorted.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0.0)
    }

    pub fn late_run_share(&self) -> f64 {
        self.rows_run_late as f64 / self.rows_run.max(1) as f64
    }
}

/// A request as the lanes carry it.
struct Request {
    arrived: u64,
    caller: Option<usize>,
    on_time: bool,
    /// Admitted against a plan (runs had been measured).
    planned: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// A request from a caller (closed loop), or the next open arrival.
    Arrive(Option<usize>),
    Done(usize),
    Wake,
}

struct Running {
    rows: usize,
    run_id: Option<u64>,
    tasks: Vec<Task<Request>>,
    started: u64,
}

pub fn run(setup: &Setup) -> Outcome {
    let base = Instant::now();
    let at = |nanos: u64| base + Duration::from_nanos(nanos);
    let nanos = |seconds: f64| (seconds * 1e9).max(0.0) as u64;
    let objective = setup.objective.as_nanos() as u64;
    let mut random = Random(setup.seed);
    let (cap, timeout, queue_timeout) = match setup.policy {
        Policy::Objective(_) => (setup.max_batch, Duration::ZERO, Duration::ZERO),
        Policy::Static { cap, timeout } => (cap, timeout, Duration::ZERO),
        Policy::QueueTimeout { cap, timeout } => (cap, Duration::ZERO, timeout),
    };
    let params = BatchParams {
        max_batch_size: setup.max_batch,
        batch_timeout_micros: timeout.as_micros() as u64,
        max_enqueued_batches: 1_000_000 / setup.max_batch,
        ..BatchParams::default()
    };
    let mut queue = Queue::new(params.clone(), true);
    queue.steer(cap, timeout);
    let mut lanes = Lanes::new(queue);
    lanes.late = Queue::new(
        BatchParams {
            max_enqueued_batches: 10,
            ..params
        },
        true,
    );
    let mut controller = match setup.policy {
        Policy::Objective(action) => Some(Controller::new(
            Objective {
                latency: setup.objective,
                percentile: setup.percentile,
            },
            action,
            setup.max_batch,
            setup.threads,
        )),
        _ => None,
    };
    let mut out = Outcome {
        seconds: setup.length.as_secs_f64(),
        ..Outcome::default()
    };
    let end = setup.length.as_nanos() as u64;
    let mut events = BinaryHeap::new();
    let mut seq = 0u64;
    let mut push = |events: &mut BinaryHeap<_>, time: u64, event: Event| {
        seq += 1;
        events.push(Reverse((time, seq, event)));
    };
    match setup.arrivals {
        Arrivals::Closed { callers, .. } => {
            for caller in 0..callers {
                push(&mut events, caller as u64 * 1000, Event::Arrive(Some(caller)));
            }
        }
        _ => push(&mut events, 0, Event::Arrive(None)),
    }
    let mut threads: Vec<Option<Running>> = (0..setup.threads).map(|_| None).collect();
    let mut last_cap = controller.as_ref().map(|c| c.cap());
    let mut first_choice = true;
    while let Some(Reverse((now, _, event))) = events.pop() {
        if now > end {
            break;
        }
        match event {
            Event::Arrive(caller) => {
                if caller.is_none() {
                    if let Some(next) = next_open_arrival(setup.arrivals, now, &mut random) {
                        push(&mut events, next, Event::Arrive(None));
                    }
                }
                out.offered += 1;
                let deadline = now + objective;
                let admission = match &controller {
                    Some(controller) => {
                        lanes.on_time.steer(controller.cap(), Duration::ZERO);
                        lanes.late.steer(controller.cap(), Duration::ZERO);
                        controller.admit(1, lanes.on_time.rows(), at(deadline), at(now))
                    }
                    None => Admission::OnTime,
                };
                let planned = controller.as_ref().is_some_and(|c| c.planned_run(1).is_some());
                let task = |on_time| Task {
                    inputs: Vec::new(),
                    rows: 1,
                    alone: false,
                    request_id: None,
                    enqueued: at(now),
                    deadline: controller.as_ref().map(|_| at(deadline)),
                    reply: Request {
                        arrived: now,
                        caller,
                        on_time,
                        planned,
                    },
                };
                let queued = match admission {
                    Admission::OnTime => lanes.on_time.enqueue_one(task(true)).is_ok(),
                    Admission::Delay(_) => {
                        out.delayed += 1;
                        lanes.late.enqueue_one(task(false)).is_ok()
                    }
                    Admission::Refuse(_) => false,
                };
                if !queued {
                    out.refused += 1;
                    if let (Some(caller), Arrivals::Closed { retry, .. }) = (caller, setup.arrivals) {
                        push(&mut events, now + retry.as_nanos() as u64, Event::Arrive(Some(caller)));
                    }
                }
            }
            Event::Done(thread) => {
                let Some(done) = threads[thread].take() else { continue };
                let run = Duration::from_nanos(now - done.started);
                out.rows_run += done.rows as u64;
                let answered = now + setup.outside.as_nanos() as u64;
                let (mut late, mut on_time) = (0, 0);
                for task in done.tasks {
                    let request = task.reply;
                    let latency = answered - request.arrived;
                    out.answered += 1;
                    out.latencies.push(latency as f64 / 1e9);
                    if latency <= objective {
                        out.good += 1;
                    } else {
                        out.rows_run_late += 1;
                    }
                    if request.on_time {
                        let is_late = latency > objective;
                        out.on_time_late += u64::from(is_late);
                        out.planned_late += u64::from(is_late && request.planned);
                        late += u32::from(is_late);
                        on_time += u32::from(!is_late);
                        if now > end / 2 {
                            out.answered_second_half += 1;
                            out.late_second_half += u64::from(is_late);
                        }
                    }
                    if let (Some(caller), Arrivals::Closed { .. }) = (request.caller, setup.arrivals) {
                        push(&mut events, answered, Event::Arrive(Some(caller)));
                    }
                }
                if let (Some(controller), Some(run_id)) = (controller.as_mut(), done.run_id) {
                    controller.ran(run_id, done.rows, run, at(now));
                    controller.answered(late, on_time);
                    if last_cap != Some(controller.cap()) {
                        if !first_choice {
                            out.cap_changes.push(now as f64 / 1e9);
                        }
                        first_choice = false;
                        last_cap = Some(controller.cap());
                    }
                }
            }
            Event::Wake => {}
        }
        // Every free thread takes what is ready.
        for (thread, slot) in threads.iter_mut().enumerate() {
            if slot.is_some() {
                continue;
            }
            let planned = |rows| controller.as_ref().and_then(|c| c.planned_run(rows));
            let cap = controller.as_ref().map_or(setup.max_batch, Controller::cap);
            let Some(taken) = lanes.take(at(now), planned, queue_timeout, setup.objective, cap) else {
                break;
            };
            let late = taken.late_rows > 0;
            // Late rows run only where no on-time batch is left waiting.
            if late && !lanes.on_time.is_empty() {
                out.late_before_on_time += 1;
            }
            out.expired += taken.expired.len() as u64;
            // A caller answered late comes back as a refused one does.
            for (task, _) in &taken.expired {
                if let (Some(caller), Arrivals::Closed { retry, .. }) = (task.reply.caller, setup.arrivals) {
                    push(&mut events, now + retry.as_nanos() as u64, Event::Arrive(Some(caller)));
                }
            }
            if taken.batch.tasks.is_empty() {
                continue;
            }
            let rows = taken.batch.rows;
            out.batches += 1;
            out.late_batches += u64::from(late);
            let mut seconds = (setup.fixed + setup.per_row * rows as f64) * (1.0 + random.exponential(setup.spread));
            if setup.runs_within_plan {
                if let Some(plan) = controller.as_ref().and_then(|c| c.planned_run(rows)) {
                    seconds = seconds.min(plan.as_secs_f64());
                }
            }
            let mut done = now + nanos(seconds);
            for &(start, length) in &setup.stalls {
                let (start, stop) = (start.as_nanos() as u64, (start + length).as_nanos() as u64);
                if now < stop && done > start {
                    done = done.max(stop);
                }
            }
            *slot = Some(Running {
                rows,
                run_id: controller.as_mut().map(|c| c.started(rows, at(now))),
                tasks: taken.batch.tasks,
                started: now,
            });
            push(&mut events, done, Event::Done(thread));
        }
        // A batch waiting on its timeout needs the clock to come back.
        if threads.iter().any(Option::is_none) {
            if let Some(due) = lanes.deadline() {
                let due = due.saturating_duration_since(base).as_nanos() as u64;
                if due > now {
                    push(&mut events, due, Event::Wake);
                }
            }
        }
    }
    out
}
