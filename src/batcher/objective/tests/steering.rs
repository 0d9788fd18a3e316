//! The cap and the wait the controller steers a queue's batches by.

use super::*;

#[test]
fn the_cap_is_the_largest_batch_whose_run_fits_half_the_objective() {
    let mut controller = Controller::new(objective(20), 128, 1);
    assert_eq!(controller.steering().cap, 1, "nothing measured yet");
    // 1 ms + 0.25 ms per row: 32 rows take 9 ms, 64 take 17.
    runs(&mut controller, 1.0, 0.25, &[1, 2, 4, 8, 16, 32, 64]);
    assert_eq!(controller.steering().cap, 32);
    let mut tight = Controller::new(objective(5), 128, 1);
    runs(&mut tight, 1.0, 0.25, &[1, 2, 4, 8, 16, 32, 64]);
    assert_eq!(tight.steering().cap, 4, "4 rows take 2 ms, 8 take 3");
}

#[test]
fn unmeasured_sizes_are_planned_linearly_so_the_cap_grows_as_it_learns() {
    let mut controller = Controller::new(objective(21), 128, 1);
    runs(&mut controller, 1.0, 0.25, &[1]);
    // 1.25 ms at 1 row, so 8 rows are planned at 10 ms: the cap.
    assert_eq!(controller.steering().cap, 8);
    runs(&mut controller, 1.0, 0.25, &[8]);
    // 8 rows measured at 3 ms: 16 planned at 6, 32 at 12.
    assert_eq!(controller.steering().cap, 16);
    runs(&mut controller, 1.0, 0.25, &[16]);
    assert_eq!(controller.steering().cap, 32);
}

#[test]
fn a_sizes_first_run_which_pays_its_one_time_costs_caps_nothing() {
    let mut controller = Controller::new(objective(5), 64, 1);
    // Warm-up runs every size once, the first run at each slow (2 ms), then
    // traffic runs up to 8 rows at 0.25 ms + 0.01 ms a row: 16 rows are
    // planned at 0.66 ms, 32 at 1.3, 64 at 2.6 (past half the objective).
    for rows in [1, 2, 4, 8, 16, 32, 64] {
        controller.ran(rows, Duration::from_millis(2));
    }
    runs(&mut controller, 0.25, 0.01, &[1, 2, 4, 8]);
    assert_eq!(controller.steering().cap, 32);
    // The first run at a size is not measured, however fast.
    let mut fresh = Controller::new(objective(5), 64, 1);
    fresh.ran(1, Duration::from_micros(10));
    assert_eq!(fresh.steering().cap, 1, "nothing measured yet");
}

#[test]
fn a_model_that_slows_down_gets_smaller_batches() {
    let mut controller = Controller::new(objective(20), 128, 1);
    runs(&mut controller, 1.0, 0.25, &[1, 2, 4, 8, 16, 32, 64]);
    assert_eq!(controller.steering().cap, 32);
    // Now four times slower (another tenant on the cores): 4 rows take
    // 8 ms, 8 take 12.
    for _ in 0..3 {
        runs(&mut controller, 4.0, 1.0, &[1, 2, 4, 8, 16, 32, 64]);
    }
    assert_eq!(controller.steering().cap, 4);
}

#[test]
fn batches_wait_to_fill_only_when_single_runs_cannot_keep_up() {
    let mut controller = Controller::new(objective(20), 128, 2);
    let start = Instant::now();
    // One row every 5 ms against two threads' 1.25 ms runs: no waiting.
    arrive_every(&mut controller, 50, start, Duration::from_millis(5));
    runs(&mut controller, 1.0, 0.25, &[1, 2, 4, 8, 16, 32, 64]);
    assert_eq!(controller.steering().timeout, Duration::ZERO);
    // One row every 0.5 ms: two threads' runs of one would fall behind.
    let later = start + Duration::from_secs(1);
    arrive_every(&mut controller, 200, later, Duration::from_micros(500));
    runs(&mut controller, 1.0, 0.25, &[32]);
    let steering = controller.steering();
    assert_eq!(steering.cap, 32);
    // 4 rows a thread keep up (2 ms of runs for 4 ms of arrivals): filled
    // in 2 ms, which 20 - 2 × 9 also leaves.
    let timeout = steering.timeout.as_secs_f64() * 1000.0;
    assert!((1.5..=2.5).contains(&timeout), "{timeout} ms");
    // A queue that has only run large batches has no measured run of one:
    // it does not wait on a guess.
    let mut busy = Controller::new(objective(20), 128, 2);
    arrive_every(&mut busy, 200, later, Duration::from_micros(500));
    runs(&mut busy, 1.0, 0.25, &[32]);
    assert_eq!(busy.steering().timeout, Duration::ZERO);
}

#[test]
fn a_single_batch_thread_never_waits_its_runs_clock_the_batches() {
    // Runs of one take 1.25 ms against a row every 0.25 ms: five times
    // what one thread keeps up with. The rows that arrive during a run
    // make the next batch; waiting would only hold them back.
    let mut controller = Controller::new(objective(20), 128, 1);
    let start = Instant::now();
    arrive_every(&mut controller, 400, start, Duration::from_micros(250));
    runs(&mut controller, 1.0, 0.25, &[1, 2, 4, 8, 16, 32, 64]);
    let steering = controller.steering();
    assert_eq!(steering.cap, 32);
    assert_eq!(steering.timeout, Duration::ZERO);
    // The same queue with two threads waits to fill them: no batch below
    // the cap keeps up, and its 8 ms of rows are cut to the 20 - 2 × 9 ms
    // the objective leaves.
    let mut two = Controller::new(objective(20), 128, 2);
    arrive_every(&mut two, 400, start, Duration::from_micros(250));
    runs(&mut two, 1.0, 0.25, &[1, 2, 4, 8, 16, 32, 64]);
    let timeout = two.steering().timeout.as_secs_f64() * 1000.0;
    assert!((1.5..=2.5).contains(&timeout), "{timeout} ms");
}

#[test]
fn a_batch_waits_for_the_rows_that_keep_up_not_for_the_cap() {
    // 0.5 ms per run and 0.01 ms per row: 128 rows run in 1.8 ms, so
    // the cap is 128, but two threads' single runs fall behind one row
    // every 0.25 ms.
    let mut controller = Controller::new(objective(20), 128, 2);
    let start = Instant::now();
    arrive_every(&mut controller, 400, start, Duration::from_micros(250));
    runs(&mut controller, 0.5, 0.01, &[1, 2, 4, 8, 16, 32, 64, 128]);
    let steering = controller.steering();
    assert_eq!(steering.cap, 128);
    // 4 rows run in 0.54 ms, under half of the 2 ms two threads' batches
    // of them take to arrive (2 rows: 0.52 of 1 ms): the wait fills 4,
    // in 1 ms, not 128 (32 ms, which the objective would have cut to 16).
    let timeout = steering.timeout.as_secs_f64() * 1000.0;
    assert!((0.8..=1.2).contains(&timeout), "{timeout} ms");
    // Arrivals twice as fast: 8 rows keep up (0.58 of 2 ms; 4 rows:
    // 0.54 of 1 ms do not), filled in the same 1 ms.
    let later = start + Duration::from_secs(1);
    arrive_every(&mut controller, 400, later, Duration::from_micros(125));
    runs(&mut controller, 0.5, 0.01, &[16]);
    let timeout = controller.steering().timeout.as_secs_f64() * 1000.0;
    assert!((0.8..=1.2).contains(&timeout), "{timeout} ms");
}

#[test]
fn where_backlogs_clear_slower_than_their_runs_the_cap_shrinks_to_match() {
    let mut controller = Controller::new(objective(20), 128, 1);
    runs(&mut controller, 1.0, 0.25, &[1, 2, 4, 8, 16, 32, 64]);
    assert_eq!(controller.steering().cap, 32, "9 ms fits 10");
    // Backlogs took three times their runs: a batch of 32 ahead is planned
    // at 27 ms, so a request behind one would be refused. Once the queue
    // runs again, its cap is the largest batch planned within 10 ms: 8 rows
    // (3 ms, planned at 9).
    backlogs(&mut controller, 100, 40, &[42.0], Instant::now());
    assert!(controller.admits(1, ahead(32, 0), Duration::ZERO).is_err());
    runs(&mut controller, 1.0, 0.25, &[8]);
    assert_eq!(controller.steering().cap, 8);
    // Behind one batch of it: 3 + 1.25 ms, planned at 12.75: let in.
    assert_eq!(controller.admits(1, ahead(8, 0), Duration::ZERO), Ok(()));
}
