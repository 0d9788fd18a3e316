//! Refusing only while it shortens the waits: callers that come straight
//! back after a refusal against arrivals at their own pace. Each check's
//! planned time is its unread wait and the 0.1 ms run.

use super::*;

const MS: Duration = Duration::from_millis(1);

/// An idle queue with a 5 ms objective whose one-row runs take 0.1 ms.
fn idle_queue() -> Controller {
    let mut controller = Controller::new(objective(5), 32, 1);
    runs(&mut controller, 0.1, 0.0, &[1]);
    controller
}

/// Checks a request every millisecond for `ms` milliseconds from `start`,
/// the `i`th having waited `wait(i)` ms unread: how many got in.
fn check(controller: &mut Controller, start: Instant, ms: u32, wait: impl Fn(u32) -> f64) -> u32 {
    (0..ms)
        .filter(|&i| {
            let waited = Duration::from_secs_f64(wait(i) / 1000.0);
            controller.check(1, ahead(0, 0), waited, start + MS * i).is_ok()
        })
        .count() as u32
}

/// Checks a request that waited `wait_ms` unread every millisecond from
/// `start` until the queue stops refusing: then, and how many got in.
fn until_held(controller: &mut Controller, start: Instant, wait_ms: u64) -> (Instant, u32) {
    let mut admitted = 0;
    for i in 0..10_000 {
        let now = start + MS * i;
        admitted += u32::from(controller.check(1, ahead(0, 0), MS * wait_ms as u32, now).is_ok());
        if !controller.refusing(now) {
            return (now, admitted);
        }
    }
    panic!("refusing for a {wait_ms} ms wait never stopped");
}

/// How long from `from` until the queue refuses again, to the millisecond.
fn hold(controller: &Controller, from: Instant) -> Duration {
    (0..100_000)
        .map(|ms| MS * ms)
        .find(|&d| controller.refusing(from + d))
        .expect("held for good")
}

#[test]
fn callers_that_come_straight_back_stop_being_refused_for_their_wait() {
    let mut controller = idle_queue();
    let start = Instant::now();
    // 12 ms unread, whatever is refused (the callers' number times what a
    // request costs): two windows of 25 ms refuse everyone.
    let (held, admitted) = until_held(&mut controller, start, 12);
    assert_eq!(admitted, 0);
    assert_eq!(held - start, MS * 51);
    assert_eq!(hold(&controller, held), Duration::from_secs(1));
    // Held: the same waits get in, as do longer ones (answers cost more
    // than refusals), and so would a deep queue: only its static bounds
    // refuse.
    assert_eq!(check(&mut controller, held + MS, 900, |_| 30.0), 900);
    let deep = controller.check(1, ahead(10_000, 1), MS * 30, held + MS * 901);
    assert_eq!(deep, Ok(()));
    assert!(controller.admits(1, ahead(10_000, 1), MS * 30).is_err());
    // Then refusing is tried again: the waits fall from 30 ms to 12 in the
    // first window (draining), stay there for two more, and the hold that
    // follows is twice as long.
    let (again, admitted) = until_held(&mut controller, held + Duration::from_secs(1), 12);
    assert_eq!(admitted, 0);
    assert_eq!(again - held, Duration::from_secs(1) + MS * 77);
    assert_eq!(hold(&controller, again), Duration::from_secs(2));
}

#[test]
fn a_backlog_that_refusals_drain_stays_refused_for() {
    let mut controller = idle_queue();
    let start = Instant::now();
    // Arrivals at their own pace past capacity: refusing everyone, the
    // server catches up on 200 ms of backlog at 0.25 ms a millisecond, and
    // lets requests in from the 782nd, at 4.75 ms.
    let admitted = check(&mut controller, start, 900, |i| (200.0 - 0.25 * f64::from(i)).max(1.0));
    assert_eq!(admitted, 119);
    assert!(controller.refusing(start + MS * 900));
}

#[test]
fn a_steady_overload_that_lets_some_in_stays_refused_for() {
    let mut controller = idle_queue();
    let start = Instant::now();
    // One request in eight arrives within the objective (the backlog hovers
    // where refusals hold it): refusing works, and goes on.
    let admitted = check(&mut controller, start, 2000, |i| if i % 8 == 0 { 3.0 } else { 8.0 });
    assert_eq!(admitted, 250);
    assert!(controller.refusing(start + MS * 2000));
}

#[test]
fn callers_that_thin_out_reset_the_hold() {
    let mut controller = idle_queue();
    let start = Instant::now();
    let (held, _) = until_held(&mut controller, start, 12);
    let (held, _) = until_held(&mut controller, held + Duration::from_secs(1), 12);
    assert_eq!(hold(&controller, held), Duration::from_secs(2));
    // Fewer callers: their waits fit. When they grow again, refusing for
    // them stops after a first hold's second again.
    let thinner = held + Duration::from_secs(2);
    assert_eq!(check(&mut controller, thinner, 100, |_| 1.0), 100);
    let (held, admitted) = until_held(&mut controller, thinner + MS * 100, 12);
    assert_eq!(admitted, 0);
    assert_eq!(hold(&controller, held), Duration::from_secs(1));
}

#[test]
fn answers_that_wait_for_callers_coming_straight_back_stop_being_refused_for_too() {
    let mut controller = idle_queue();
    let start = Instant::now();
    // Backlogs took 100 times their runs to clear: their answers waited for
    // the connections' threads. Behind two rows, three runs of 0.1 ms are
    // planned at 30 ms.
    backlogs(&mut controller, 16, 40, &[480.0], start);
    runs(&mut controller, 0.1, 0.0, &[1]);
    assert_eq!(controller.steering().cap, 1);
    let mut i = 0;
    while controller.refusing(start + MS * i) {
        assert!(controller.check(1, ahead(2, 0), Duration::ZERO, start + MS * i).is_err());
        i += 1;
        assert!(i < 1000, "refusing for the clearing pace never stopped");
    }
    // Two windows of about 60 ms, then a second of letting them in.
    assert!((120..=124).contains(&i), "{i} ms");
    let held = start + MS * (i - 1);
    assert_eq!(controller.check(1, ahead(2, 0), Duration::ZERO, held + MS), Ok(()));
    assert_eq!(hold(&controller, held), Duration::from_secs(1));
}
