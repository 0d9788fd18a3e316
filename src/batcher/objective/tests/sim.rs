//! A discrete-event simulation of one queue: seeded arrivals (Poisson,
//! on-off bursts, closed-loop callers), a runner whose run of b rows takes
//! α + βb times skewed noise, with a heavy tail and stalls, on one or more
//! batch threads; the real [`QueueState`] (lanes, controller, running
//! batches) decides, through the same events the server gives it. No
//! threads, no sleeps: time is a number.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use super::super::lanes::Lanes;
use super::super::{Admission, Controller, Objective};
use super::arrivals::{next_open_arrival, Random};
use super::setup::{Arrivals, Outcome, Policy, Setup};
use crate::batcher::queue::{Queue, Task};
use crate::batcher::state::QueueState;
use crate::batcher::BatchParams;

/// What the simulation knows of a request; tasks carry its index.
struct Request {
    arrived: u64,
    caller: Option<usize>,
    /// Admitted on time (its answer reported, as a caller reports it); and
    /// of those, against measured plans (counted), once warm.
    reported: bool,
    on_time: bool,
    warm_admitted: bool,
    /// Answered, or dropped: no longer queued.
    done: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// A request from a caller (closed loop), or the next open arrival.
    Arrive(Option<usize>),
    Done(usize),
    /// A request's caller has its answer.
    Taken(usize),
    Wake,
}

struct Running {
    rows: usize,
    run_id: Option<u64>,
    tasks: Vec<Task<usize>>,
    started: u64,
}

fn queue_state(setup: &Setup) -> (QueueState<usize>, Duration) {
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
    // The late lane is as bounded as the queue, as it is when serving.
    let mut lanes = Lanes::new(queue);
    lanes.late = Queue::new(params, true);
    let controller = match setup.policy {
        Policy::Objective(action) => {
            let objective = Objective {
                latency: setup.objective,
                percentile: setup.percentile,
            };
            let mut controller = Controller::new(objective, action, setup.max_batch, setup.threads);
            controller.fault = setup.fault;
            Some(controller)
        }
        _ => None,
    };
    (QueueState::new(lanes, controller, None), queue_timeout)
}

// Kept whole: one loop over the events, each arm a few lines that share the
// clock, the queue's state, the requests and the counts.
pub fn run(setup: &Setup) -> Outcome {
    let base = Instant::now();
    let at = |nanos: u64| base + Duration::from_nanos(nanos);
    let nanos = |seconds: f64| (seconds * 1e9).max(0.0) as u64;
    let objective = setup.objective.as_nanos() as u64;
    let mut arrivals = Random(setup.seed);
    let mut noise = Random(setup.seed ^ 0x05ee_d0f2_015e);
    let (mut state, queue_timeout) = queue_state(setup);
    let steered = state.controller().is_some();
    let mut requests: Vec<Request> = Vec::new();
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
    let retry = match setup.arrivals {
        Arrivals::Closed { callers, retry } => {
            (0..callers).for_each(|caller| push(&mut events, caller as u64 * 1000, Event::Arrive(Some(caller))));
            Some(retry.as_nanos() as u64)
        }
        _ => {
            push(&mut events, 0, Event::Arrive(None));
            None
        }
    };
    let mut threads: Vec<Option<Running>> = (0..setup.threads).map(|_| None).collect();
    let mut last_cap = state.controller().map(Controller::cap);
    let mut first_choice = true;
    while let Some(Reverse((now, _, event))) = events.pop() {
        if now > end {
            break;
        }
        match event {
            Event::Arrive(caller) => {
                if caller.is_none() {
                    if let Some(next) = next_open_arrival(setup.arrivals, now, &mut arrivals) {
                        push(&mut events, next, Event::Arrive(None));
                    }
                }
                out.offered += 1;
                let deadline = steered.then(|| at(now + objective));
                let index = requests.len();
                let planned = state.controller().is_some_and(|c| c.planned_run(1).is_some());
                // After the first half second every size the queue runs has
                // been measured: its plan no longer moves up as a size is first met.
                let warm = now >= 500_000_000;
                let warm_admitted = warm && planned;
                requests.push(Request {
                    arrived: now,
                    caller,
                    reported: false,
                    on_time: false,
                    warm_admitted,
                    done: false,
                });
                let task = Task {
                    inputs: Vec::new(),
                    rows: 1,
                    alone: false,
                    request_id: None,
                    enqueued: at(now),
                    deadline,
                    reply: index,
                };
                match state.submit(vec![task], 1, deadline, at(now)) {
                    // Counted where admitted against measured plans.
                    Ok(Admission::OnTime) => {
                        requests[index].on_time = planned;
                        requests[index].reported = true;
                        out.admitted += u64::from(planned);
                    }
                    Ok(_) => out.delayed += 1,
                    Err(_) => {
                        out.refused += 1;
                        requests[index].done = true;
                        if let (Some(caller), Some(retry)) = (caller, retry) {
                            push(&mut events, now + retry, Event::Arrive(Some(caller)));
                        }
                    }
                }
            }
            Event::Done(thread) => {
                let Some(done) = threads[thread].take() else { continue };
                let run = Duration::from_nanos(now - done.started);
                out.rows_run += done.rows as u64;
                let answered = now + setup.outside.as_nanos() as u64;
                for task in done.tasks {
                    let request = &mut requests[task.reply];
                    request.done = true;
                    let latency = answered - request.arrived;
                    out.answered += 1;
                    out.latencies.push(latency as f64 / 1e9);
                    if latency <= objective {
                        out.good += 1;
                    } else {
                        out.rows_run_late += 1;
                    }
                    if request.on_time && latency > objective {
                        out.missed += 1;
                        out.missed_warm += u64::from(request.warm_admitted);
                    }
                    if request.on_time && answered > end / 2 {
                        out.answered_second_half += 1;
                        out.late_second_half += u64::from(latency > objective);
                    }
                    push(&mut events, answered, Event::Taken(task.reply));
                }
                if let Some(run_id) = done.run_id {
                    state.finish(run_id, Some((done.rows, run)), at(now));
                }
                if let Some(cap) = state
                    .controller()
                    .map(Controller::cap)
                    .filter(|&cap| Some(cap) != last_cap)
                {
                    if !first_choice {
                        out.cap_changes.push(now as f64 / 1e9);
                    }
                    first_choice = false;
                    last_cap = Some(cap);
                }
            }
            Event::Taken(index) => {
                let request = &requests[index];
                if request.reported {
                    state.answered(at(request.arrived + objective), at(now));
                }
                if let (Some(caller), Some(_)) = (request.caller, retry) {
                    push(&mut events, now, Event::Arrive(Some(caller)));
                }
            }
            Event::Wake => {}
        }
        // Every free thread takes what is ready; requests taken out are answered 503.
        for (thread, slot) in threads.iter_mut().enumerate() {
            if slot.is_some() {
                continue;
            }
            let Some((taken, run_id)) = state.take(at(now), queue_timeout) else {
                break;
            };
            let late = taken.late_rows > 0;
            // Late rows run only where no on-time batch is left waiting.
            if late && !state.lanes.on_time.is_empty() {
                out.late_before_on_time += 1;
            }
            out.expired += taken.expired.len() as u64;
            for (task, _) in &taken.expired {
                let request = &mut requests[task.reply];
                request.done = true;
                if request.on_time {
                    out.missed += 1;
                    out.missed_warm += u64::from(request.warm_admitted);
                }
                if let (Some(caller), Some(retry)) = (request.caller, retry) {
                    push(&mut events, now + retry, Event::Arrive(Some(caller)));
                }
            }
            let Some(batch) = taken.batch.filter(|batch| !batch.tasks.is_empty()) else {
                if let Some(run_id) = run_id {
                    state.finish(run_id, None, at(now));
                }
                continue;
            };
            let rows = batch.rows;
            out.batches += 1;
            out.late_batches += u64::from(late);
            let tail = match noise.unit() < setup.tail {
                true => setup.tail_factor,
                false => 1.0,
            };
            let mut seconds =
                (setup.fixed + setup.per_row * rows as f64) * (1.0 + noise.exponential(setup.spread)) * tail;
            if setup.runs_within_plan {
                if let Some(plan) = state.controller().and_then(|c| c.planned_run(rows)) {
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
                run_id,
                tasks: batch.tasks,
                started: now,
            });
            push(&mut events, done, Event::Done(thread));
        }
        // A batch waiting on its timeout, or a late request's due, needs the clock to come back.
        if let Some(due) = state.lanes.deadline() {
            let due = due.saturating_duration_since(base).as_nanos() as u64;
            if due > now {
                push(&mut events, due + 1, Event::Wake);
            }
        }
    }
    // What is left counts: an on-time request still waiting past its deadline missed it.
    for request in requests.iter().filter(|request| !request.done) {
        out.left += 1;
        if request.on_time && request.arrived + objective < end {
            out.missed += 1;
            out.missed_warm += u64::from(request.warm_admitted);
        }
    }
    out
}
