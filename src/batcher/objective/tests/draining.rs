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
/// `start` until the queue stops refusing (and tries letting everyone in):
/// then, and how many got in.
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

/// Checks a request every millisecond from `start`, the `i`th having
/// waited `wait(i)` ms unread, all let in, until the queue refuses again:
/// then.
fn let_in(controller: &mut Controller, start: Instant, wait: impl Fn(u32) -> f64) -> Instant {
    for i in 0..20_000 {
        let now = start + MS * i;
        if controller.refusing(now) {
            return now;
        }
        let waited = Duration::from_secs_f64(wait(i) / 1000.0);
        assert_eq!(controller.check(1, ahead(0, 0), waited, now), Ok(()), "at {i} ms");
    }
    panic!("never refused again");
}

/// Checks a request every millisecond from `start`, all let in, their
/// unread waits growing from 12 ms by `growth` milliseconds a millisecond
/// (half of one: arrivals at 150% of what the server answers), until the
/// queue refuses again: how many milliseconds that took.
fn piling_up_until_refused(controller: &mut Controller, start: Instant, growth: f64) -> u32 {
    let mut i = 0;
    while !controller.refusing(start + MS * i) {
        let waited = Duration::from_secs_f64((12.0 + growth * f64::from(i)) / 1000.0);
        assert_eq!(controller.check(1, ahead(0, 0), waited, start + MS * i), Ok(()));
        i += 1;
        assert!(i < 1000, "still letting everyone in");
    }
    i
}

#[test]
fn callers_that_come_straight_back_stop_being_refused_for_their_wait() {
    let mut controller = idle_queue();
    let start = Instant::now();
    // 12 ms unread, whatever is refused (the callers' number times what a
    // request costs): two windows of 25 ms refuse everyone.
    let (trial, admitted) = until_held(&mut controller, start, 12);
    assert_eq!(admitted, 0);
    assert_eq!(trial - start, MS * 51);
    // Let in, each caller's wait rises once, to what an answer rather than
    // a refusal costs the others, and stays: the trial settles in three
    // windows and the queue lets everyone in for a second.
    let back = let_in(&mut controller, trial + MS, |i| if i < 30 { 20.0 } else { 30.0 });
    let held = back - trial;
    assert!(
        held > Duration::from_secs(1) && held < Duration::from_millis(1200),
        "{held:?}"
    );
    assert!(
        controller.admits(1, ahead(10_000, 1), MS * 30).is_err(),
        "the plan is unchanged"
    );
    // Then refusing is tried again: the waits fall from 30 ms to 12 in the
    // first window (draining), stay there for two more, and the next trial
    // settles in two windows: the hold that follows is twice as long.
    let (trial, admitted) = until_held(&mut controller, back, 12);
    assert_eq!(admitted, 0);
    assert_eq!(trial - back, MS * 77);
    let held = let_in(&mut controller, trial + MS, |_| 12.0) - trial;
    assert!(
        held > Duration::from_secs(2) && held < Duration::from_millis(2100),
        "{held:?}"
    );
}

#[test]
fn arrivals_that_pile_up_when_let_in_are_refused_again_at_once() {
    let mut controller = idle_queue();
    let start = Instant::now();
    // Everyone refused for two windows (the server stalled, say), then let
    // in: the waits grow half a millisecond a millisecond (arrivals at 150%
    // of what the server answers), up three windows in a row: about 100 ms.
    let (trial, _) = until_held(&mut controller, start, 12);
    let trial = trial + MS;
    let i = piling_up_until_refused(&mut controller, trial, 0.5);
    assert!(i < 120, "{i} ms let in");
    // Refusing again, it tries no other trial for a second, however futile.
    let again = trial + MS * i;
    assert_eq!(check(&mut controller, again, 900, |_| 12.0), 0);
    assert!(controller.refusing(again + MS * 900));
}

#[test]
fn a_stall_that_lifted_the_refused_waits_does_not_hold_arrivals_that_pile_up() {
    let mut controller = idle_queue();
    let start = Instant::now();
    // The server stalled: everyone refused for two windows with 60 ms
    // unread. Let in, the waits start at 12 ms, far below, and grow half a
    // millisecond a millisecond: the first window does not rise against
    // the stalled ones, the trial's own windows do.
    let (trial, _) = until_held(&mut controller, start, 60);
    let i = piling_up_until_refused(&mut controller, trial + MS, 0.5);
    assert!(i < 200, "{i} ms let in");
}

#[test]
fn waits_that_go_on_rising_while_all_are_refused_are_not_let_in() {
    let mut controller = idle_queue();
    let start = Instant::now();
    // A stall, or arrivals past what even refusals keep up with: the
    // requests read have waited longer and longer unread, 12 ms and a
    // fifth of a millisecond more each millisecond. Every window refuses
    // all and rises by half: letting them in would hand each the pile-up.
    assert_eq!(check(&mut controller, start, 600, |i| 12.0 + 0.2 * f64::from(i)), 0);
    assert!(controller.refusing(start + MS * 600));
    // Level again (more callers coming straight back, say), two windows
    // that shorten nothing make the trial as before.
    let (trial, admitted) = until_held(&mut controller, start + MS * 600, 132);
    assert_eq!(admitted, 0);
    assert!(trial - start < Duration::from_millis(1300), "{:?}", trial - start);
}

#[test]
fn a_trial_planned_to_pile_up_faster_than_time_passes_still_ends() {
    let mut controller = idle_queue();
    let start = Instant::now();
    // Let in, the planned times grow two milliseconds a millisecond (a
    // backlog planned slower than it clears): a window as long as its own
    // mean would never close. At most twice the mean before its own, three
    // rise in about 380 ms.
    let (trial, _) = until_held(&mut controller, start, 12);
    let i = piling_up_until_refused(&mut controller, trial + MS, 2.0);
    assert!(i < 400, "{i} ms let in");
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
    let (trial, _) = until_held(&mut controller, start, 12);
    let back = let_in(&mut controller, trial + MS, |_| 12.0);
    let (trial, _) = until_held(&mut controller, back, 12);
    let back = let_in(&mut controller, trial + MS, |_| 12.0);
    assert!(back - trial > Duration::from_secs(2));
    // Fewer callers: their waits fit. When they grow again, the queue lets
    // them in after a first hold's second again.
    assert_eq!(check(&mut controller, back, 100, |_| 1.0), 100);
    let (trial, admitted) = until_held(&mut controller, back + MS * 100, 12);
    assert_eq!(admitted, 0);
    let held = let_in(&mut controller, trial + MS, |_| 12.0) - trial;
    assert!(
        held > Duration::from_secs(1) && held < Duration::from_millis(1100),
        "{held:?}"
    );
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
        assert!(controller
            .check(1, ahead(2, 0), Duration::ZERO, start + MS * i)
            .is_err());
        i += 1;
        assert!(i < 1000, "refusing for the clearing pace never stopped");
    }
    // Two windows of about 60 ms, then everyone is let in.
    assert!((120..=124).contains(&i), "{i} ms");
    let now = start + MS * i;
    assert_eq!(controller.check(1, ahead(2, 0), Duration::ZERO, now), Ok(()));
}

#[test]
fn one_request_planned_past_any_objective_does_not_hold_a_window_open() {
    let mut controller = idle_queue();
    let start = Instant::now();
    // An hour unread counts as a minute: the window closes once it has
    // lasted twice its mean, after some 350 requests.
    assert!(controller
        .check(1, ahead(0, 0), Duration::from_secs(3600), start)
        .is_err());
    let (trial, _) = until_held(&mut controller, start + MS, 12);
    assert!(trial - start < Duration::from_secs(1), "{:?}", trial - start);
}
