//! Which requests the queue ahead of them would make late, and how the
//! rows ahead are planned: at the batches they make, the batches running,
//! and the pace backlogs were seen to clear at.

use super::*;

#[test]
fn a_request_the_queue_would_make_late_is_refused() {
    let mut controller = Controller::new(objective(20), 128, 2);
    assert_eq!(
        controller.admits(1, ahead(10_000, 2), Duration::ZERO),
        Ok(()),
        "unmeasured: let in"
    );
    runs(&mut controller, 1.0, 0.25, &[1, 2, 4, 8, 16, 32, 64]);
    assert_eq!(controller.steering().cap, 32);
    assert_eq!(
        controller.admits(1000, ahead(0, 1), Duration::ZERO),
        Ok(()),
        "an idle thread: let in"
    );
    // Behind 40 rows with both threads free: 2 batches, one wave of 9 ms.
    assert_eq!(controller.admits(1, ahead(40, 0), Duration::ZERO), Ok(()));
    // Behind 40 rows with both threads busy: 9 + 9 ms.
    assert_eq!(controller.admits(1, ahead(40, 2), Duration::ZERO), Ok(()));
    // Behind 100 rows, both busy: 9 + 2 waves × 9 = 27 ms.
    let late = controller.admits(1, ahead(100, 2), Duration::ZERO).unwrap_err();
    assert_eq!(late.waiting_rows, 100);
    assert!(late.estimate > Duration::from_millis(20), "{late:?}");
}

#[test]
fn a_request_that_waited_unread_is_refused_even_by_an_idle_queue() {
    let mut controller = Controller::new(objective(20), 128, 2);
    let waited = Duration::from_millis(50);
    assert_eq!(controller.admits(1, ahead(0, 0), waited), Ok(()), "unmeasured: let in");
    runs(&mut controller, 1.0, 0.25, &[1, 2, 4, 8, 16, 32, 64]);
    // One row runs in 1.25 ms: 18 ms waited leaves room for it, 19 ms does not.
    assert_eq!(controller.admits(1, ahead(0, 0), Duration::from_millis(18)), Ok(()));
    let late = controller
        .admits(1, ahead(0, 0), Duration::from_millis(19))
        .unwrap_err();
    assert_eq!((late.waited, late.waiting_rows), (Duration::from_millis(19), 0));
    // Behind 40 rows with both threads busy (18 ms), 1 ms waited fits and 3 ms do not.
    assert_eq!(controller.admits(1, ahead(40, 2), Duration::from_millis(1)), Ok(()));
    assert!(controller.admits(1, ahead(40, 2), Duration::from_millis(3)).is_err());
    // Lone runs past half the objective: an idle queue takes any wait, as
    // with 30 ms runs (which overrun it alone) or 12 ms ones.
    for ms in [30.0, 12.0] {
        let mut slow = Controller::new(objective(20), 128, 1);
        runs(&mut slow, ms, 0.0, &[1]);
        assert_eq!(
            slow.admits(1, ahead(0, 0), Duration::from_millis(19)),
            Ok(()),
            "{ms} ms runs"
        );
        assert!(slow.admits(1, ahead(1, 1), Duration::ZERO).is_err(), "{ms} ms runs");
    }
}

#[test]
fn a_deep_queue_is_planned_at_the_percentile_of_its_runs_together() {
    let mut controller = Controller::new(objective(100), 8, 1);
    // Runs of 8 rows alternate 6 and 12 ms: mean 9, deviation 3, one
    // planned at 9 + 2.33 × 3 = 16 ms.
    for i in 0..100 {
        controller.ran(8, Duration::from_millis(if i % 2 == 0 { 6 } else { 12 }));
    }
    assert_eq!(controller.steering().cap, 8);
    // Behind a running batch and 40 rows: 7 runs, 7 × 9 + 2.33 × 3 × √7
    // = 81.5 ms (7 × 16 = 112 would refuse it).
    assert_eq!(controller.admits(1, ahead(40, 1), Duration::ZERO), Ok(()));
    // Behind 80 rows: 12 runs, 108 + 24 = 132 ms.
    let late = controller.admits(1, ahead(80, 1), Duration::ZERO).unwrap_err();
    let ms = late.estimate.as_secs_f64() * 1000.0;
    assert!((125.0..140.0).contains(&ms), "{ms} ms");
}

#[test]
fn the_percentile_plans_for_the_spread_of_run_times() {
    let spread = |percentile: f64| {
        let mut controller = Controller::new(
            Objective {
                latency: Duration::from_millis(20),
                percentile,
            },
            128,
            1,
        );
        // Runs of 32 rows alternate 6 and 12 ms (mean 9, deviation 3).
        for i in 0..100 {
            let ms = if i % 2 == 0 { 6 } else { 12 };
            controller.ran(32, Duration::from_millis(ms));
        }
        controller.steering().cap
    };
    assert_eq!(spread(50.0), 32, "9 ms on average fits 10");
    assert!(spread(99.0) < 32, "9 + 2.33 × 3 ms does not");
}

#[test]
fn a_backlog_that_clears_slower_than_its_runs_is_planned_as_slower() {
    let mut controller = Controller::new(objective(20), 128, 1);
    runs(&mut controller, 1.0, 0.25, &[1, 2, 4, 8, 16, 32, 64]);
    assert_eq!(controller.steering().cap, 32);
    let now = Instant::now();
    // Behind 60 rows, the runs idle: two batches of 32, 9 ms each: let in.
    assert_eq!(controller.admits(1, ahead(60, 0), Duration::ZERO), Ok(()));
    // Backlogs that clear as their runs do change nothing.
    backlogs(&mut controller, 100, 60, &[18.0], now);
    assert_eq!(controller.admits(1, ahead(60, 0), Duration::ZERO), Ok(()));
    // Ones that take half as long again (their answers wait for their
    // threads) plan the two batches at 27 ms.
    backlogs(&mut controller, 400, 60, &[27.0], now);
    let late = controller.admits(1, ahead(60, 0), Duration::ZERO).unwrap_err();
    assert!((late.estimate.as_secs_f64() - 0.027).abs() < 0.001, "{late:?}");
    // One batch ahead takes 13.5 ms: let in. An idle queue takes any request.
    assert_eq!(controller.admits(1, ahead(20, 0), Duration::ZERO), Ok(()));
    assert_eq!(controller.admits(1, ahead(0, 0), Duration::ZERO), Ok(()));
}

#[test]
fn the_rows_ahead_are_planned_at_the_batches_they_make_not_at_the_cap() {
    // 1 ms + 0.25 ms per row against 10 ms: the cap is 16 rows (5 ms).
    let mut controller = Controller::new(objective(10), 128, 1);
    runs(&mut controller, 1.0, 0.25, &[1, 2, 4, 8, 16, 32, 64]);
    assert_eq!(controller.steering().cap, 16);
    // Backlogs took three times their runs: 41 rows, a batch of 32 (9 ms)
    // and one of 9 (planned at 16 rows, 5 ms), in 42 ms.
    backlogs(&mut controller, 100, 40, &[42.0], Instant::now());
    // Behind one row: a run of two (1.5 ms), planned at 4.5 ms, not a
    // run of the cap at 15.
    assert_eq!(controller.admits(1, ahead(1, 0), Duration::ZERO), Ok(()));
    // Behind a running batch of two: 1.5 + 1.25 ms, planned at 8.25.
    let small = Ahead {
        rows: 0,
        running: 1,
        running_rows: 2,
    };
    assert_eq!(controller.admits(1, small, Duration::ZERO), Ok(()));
    // Behind a running batch of 16: 5 + 1.25 ms, planned at 18.75.
    let large = Ahead {
        running_rows: 16,
        ..small
    };
    assert!(controller.admits(1, large, Duration::ZERO).is_err());
    // Behind 16 rows: a batch of 16 and one of its own, 18.75 ms too.
    assert!(controller.admits(1, ahead(16, 0), Duration::ZERO).is_err());
}

#[test]
fn rows_left_over_run_beside_the_last_full_batches_or_alone() {
    // Two threads; batches of 32 rows take 9 ms, of 8 rows 3, of one 1.25.
    let mut controller = Controller::new(objective(100), 128, 2);
    runs(&mut controller, 1.0, 0.25, &[1, 2, 4, 8, 16, 32, 64]);
    let planned = |rows: usize, running: usize, running_rows: usize| {
        let ahead = Ahead {
            rows,
            running,
            running_rows,
        };
        controller.runs_ahead(32, 1, ahead).map(|runs| runs.mean * 1000.0)
    };
    let close = |ms: Option<f64>, expected: f64| ms.is_some_and(|ms| (ms - expected).abs() < 1e-6);
    // 64 rows and its own: two batches of 32 side by side (9 ms), then its
    // row alone (1.25 ms).
    assert!(close(planned(63, 0, 0), 9.0), "{:?}", planned(63, 0, 0));
    assert!(close(planned(64, 0, 0), 10.25), "{:?}", planned(64, 0, 0));
    // 40 rows and its own: a batch of 32 and the 9 left beside it: 9 ms.
    assert!(close(planned(40, 0, 0), 9.0), "{:?}", planned(40, 0, 0));
    // Behind two running batches of 8 rows each (3 ms), its own alone.
    assert!(close(planned(0, 2, 16), 4.25), "{:?}", planned(0, 2, 16));
    // Running batches whose rows were all given up on plan as runs of one.
    assert!(close(planned(0, 2, 0), 2.5), "{:?}", planned(0, 2, 0));
    // One running of two threads holds none up.
    assert!(close(planned(0, 1, 32), 1.25), "{:?}", planned(0, 1, 32));
}

#[test]
fn a_backlog_is_learned_against_the_runs_it_found_running() {
    let mut controller = Controller::new(objective(20), 128, 1);
    runs(&mut controller, 1.0, 0.25, &[1, 2, 4, 8, 16, 32, 64]);
    // Behind 20 rows and a running batch: two runs, 18 ms, as planned.
    let found = ahead(20, 1);
    for _ in 0..100 {
        controller.taken(found, 32, 1, Duration::from_millis(18), Instant::now());
    }
    let ratio = controller.cleared().unwrap();
    assert!((ratio - 1.0).abs() < 1e-9, "{ratio}");
    // Planned at the cap it found, not the cap now.
    let found = Ahead {
        running_rows: 16,
        ..found
    };
    for _ in 0..400 {
        // A running batch of 16 (5 ms), one more of 16 and one of the 5
        // rows left (2.25 ms, planned at 8 rows: 3 ms).
        controller.taken(found, 16, 1, Duration::from_millis(13), Instant::now());
    }
    let ratio = controller.cleared().unwrap();
    assert!((ratio - 1.0).abs() < 0.01, "{ratio}");
}

#[test]
fn a_backlog_is_planned_at_the_percentile_of_how_it_clears() {
    let controller = |percentile: f64| {
        let mut controller = Controller::new(
            Objective {
                percentile,
                ..objective(20)
            },
            128,
            1,
        );
        runs(&mut controller, 1.0, 0.25, &[1, 2, 4, 8, 16, 32, 64]);
        assert_eq!(controller.clearing_ratio(), None, "no backlog seen yet");
        // Behind 20 rows, one batch: 9 ms planned. Half took as long, half
        // twice: a ratio of 1.5 on average, 0.5 apart.
        backlogs(&mut controller, 400, 20, &[9.0, 18.0], Instant::now());
        controller
    };
    // At p99, one batch ahead is planned at 9 × (1.5 + 2.33 × 0.5) ms, the
    // ratio `/metrics` shows.
    let at_p99 = controller(99.0);
    let late = at_p99.admits(1, ahead(20, 0), Duration::ZERO).unwrap_err();
    assert!((late.estimate.as_secs_f64() - 0.024).abs() < 0.001, "{late:?}");
    let ratio = at_p99.clearing_ratio().unwrap();
    assert!((ratio - (1.5 + 2.33 * 0.5)).abs() < 0.05, "{ratio}");
    // At p50, at 9 × 1.5 ms.
    let at_p50 = controller(50.0);
    assert_eq!(at_p50.admits(1, ahead(20, 0), Duration::ZERO), Ok(()));
    let ratio = at_p50.clearing_ratio().unwrap();
    assert!((ratio - 1.5).abs() < 0.05, "{ratio}");
}

#[test]
fn how_backlogs_cleared_is_forgotten_once_none_confirms_it() {
    let mut controller = Controller::new(objective(20), 128, 1);
    runs(&mut controller, 1.0, 0.25, &[1, 2, 4, 8, 16, 32, 64]);
    let start = Instant::now();
    // A slow spell: backlogs of 41 rows (a batch of 32 and one of 9,
    // planned at 16 rows: 9 + 5 ms) took 81 ms, near six times their runs.
    backlogs(&mut controller, 100, 40, &[81.0], start);
    assert!(controller.admits(1, ahead(40, 0), Duration::ZERO).is_err());
    // Arrivals within a second keep it...
    controller.arrived(1, start + Duration::from_millis(900));
    assert!(controller.admits(1, ahead(40, 0), Duration::ZERO).is_err());
    // ...past it, the runs plan again: 14 ms.
    controller.arrived(1, start + Duration::from_millis(1100));
    assert_eq!(controller.admits(1, ahead(40, 0), Duration::ZERO), Ok(()));
}

#[test]
fn answers_late_past_the_objective_make_the_check_plan_short_of_it_until_answers_come_in_time() {
    let mut controller = Controller::new(objective(20), 128, 2);
    runs(&mut controller, 1.0, 0.25, &[1, 2, 4, 8, 16, 32, 64]);
    // Behind 40 rows with both threads busy: 18 ms planned.
    assert_eq!(controller.admits(1, ahead(40, 2), Duration::ZERO), Ok(()));
    // A stall: every answer late. The margin rises to its bound, 5 ms.
    controller.answered(200, 0);
    assert_eq!(controller.margin(), Duration::from_millis(5));
    assert!(controller.admits(1, ahead(40, 2), Duration::ZERO).is_err());
    // 9 ms planned still fits.
    assert_eq!(controller.admits(1, ahead(40, 0), Duration::ZERO), Ok(()));
    // Answers in time bring it back.
    controller.answered(0, 5_000);
    assert_eq!(controller.margin(), Duration::ZERO);
    assert_eq!(controller.admits(1, ahead(40, 2), Duration::ZERO), Ok(()));
}
