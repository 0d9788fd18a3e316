//! Whether refusing requests the queue would make late shortens anyone's
//! wait. A server fallen behind arrivals that come at their own pace
//! catches up by refusing (a refusal costs less than an answer): the waits
//! fall, and the requests it lets in meet the objective again. Callers that
//! send their next request the moment they have an answer, refused or not,
//! bring the same waits back whatever is refused: in the sockets before
//! their requests are read, and for the connections' threads after their
//! answers are ready, the callers' number times what a request costs.
//! Where that is past the objective, refusing answers nobody and shortens
//! nothing. So the queue watches windows of the requests it checks, with
//! the time it planned for each. Where it refused nearly every one of a
//! window and the planned times did not fall by a quarter since the window
//! before, refusing shortened nothing; after [`FUTILE_WINDOWS`] such
//! windows in a row it stops refusing for a while (the queue's static
//! bounds still hold), then refuses again to see whether that shortens the
//! waits now, holding off longer each time it does not.

use std::time::{Duration, Instant};

/// A window decides once it has checked this many requests...
const WINDOW_REQUESTS: u32 = 16;
/// ...and lasted this many objectives, and twice the mean time planned for
/// its requests: long enough for the callers refused at its start to be
/// back.
const WINDOW_OBJECTIVES: u32 = 4;
/// Refused: at least this share of a window's checks (15 in 16) for it to
/// count as refusing nearly all.
const REFUSED_SIXTEENTHS: u32 = 15;
/// Planned times that fell below this share of the window before's mean:
/// a backlog draining, however many were refused meanwhile (a backlog
/// that refusing everyone clears at under an eighth of real time does not
/// count: over a window of twice its wait it falls by less).
const DRAINING_SHARE: f64 = 3.0 / 4.0;
/// Windows in a row that refused nearly all and drained nothing before the
/// queue stops refusing.
const FUTILE_WINDOWS: u32 = 2;
/// How long it first stops, and the longest: each hold that ends in futile
/// windows again doubles the next.
const FIRST_HOLD: Duration = Duration::from_secs(1);
const LONGEST_HOLD: Duration = Duration::from_secs(8);

pub(super) struct Draining {
    window: Window,
    /// The mean time planned in the last window that decided.
    last_mean: Option<f64>,
    /// Futile windows in a row.
    futile: u32,
    held_until: Option<Instant>,
    hold: Duration,
}

#[derive(Default)]
struct Window {
    start: Option<Instant>,
    checked: u32,
    refused: u32,
    /// The sum of the times planned for its checks, in seconds.
    planned: f64,
}

impl Default for Draining {
    fn default() -> Draining {
        Draining {
            window: Window::default(),
            last_mean: None,
            futile: 0,
            held_until: None,
            hold: FIRST_HOLD,
        }
    }
}

impl Draining {
    /// Whether the queue refuses requests it would make late at `now` (it
    /// does unless refusing was lately seen to shorten nothing).
    pub(super) fn refusing(&self, now: Instant) -> bool {
        self.held_until.is_none_or(|until| now >= until)
    }

    /// A request was checked at `now`, `planned` to take that long in all
    /// (its unread wait included), and `refused`.
    pub(super) fn checked(&mut self, planned: Duration, refused: bool, now: Instant, objective: Duration) {
        if self.held_until.is_some_and(|until| now >= until) {
            // The hold is over: a window begins with refusals, measured
            // against the level the planned times held at without them.
            self.held_until = None;
            let held = std::mem::take(&mut self.window);
            if held.checked > 0 {
                self.last_mean = Some(held.planned / f64::from(held.checked));
            }
        }
        let start = *self.window.start.get_or_insert(now);
        self.window.checked += 1;
        self.window.refused += u32::from(refused);
        self.window.planned += planned.as_secs_f64();
        let mean = self.window.planned / f64::from(self.window.checked);
        let length = (objective * WINDOW_OBJECTIVES).as_secs_f64().max(2.0 * mean);
        if self.window.checked < WINDOW_REQUESTS || now.saturating_duration_since(start).as_secs_f64() < length {
            return;
        }
        let window = std::mem::take(&mut self.window);
        let draining = self.last_mean.is_some_and(|last| mean < last * DRAINING_SHARE);
        self.last_mean = Some(mean);
        if !self.refusing(now) {
            // Held: nothing was refused, the window only tells the level
            // the planned times hold at without refusals.
            return;
        }
        if window.refused * 16 < window.checked * REFUSED_SIXTEENTHS {
            // Requests get in: refusing drains, or the callers thinned.
            self.futile = 0;
            self.hold = FIRST_HOLD;
            return;
        }
        if draining {
            self.futile = 0;
            return;
        }
        self.futile += 1;
        if self.futile >= FUTILE_WINDOWS {
            self.futile = 0;
            self.held_until = Some(now + self.hold);
            self.hold = (self.hold * 2).min(LONGEST_HOLD);
        }
    }
}
