//! Whether refusing requests the queue would make late shortens anyone's
//! wait. A server fallen behind arrivals that come at their own pace
//! catches up by refusing (a refusal costs less than an answer): the waits
//! fall, and the requests it lets in meet the objective again. Callers that
//! send their next request the moment they have an answer, refused or not,
//! bring the same waits back whatever is refused: in the sockets before
//! their requests are read, and for the connections' threads after their
//! answers are ready, the callers' number times what a request costs.
//! Where that is past the objective, refusing answers nobody and shortens
//! nothing.
//!
//! So the queue watches windows of the requests it checks, with the time it
//! planned for each. Where it refused nearly every one of
//! [`FUTILE_WINDOWS`] windows and the planned times neither fell by a
//! quarter nor rose by an eighth, it tries letting everyone in (windows
//! that rose, a stall's or an overload's past what refusals keep up with,
//! wait for the next). Requests that come at their
//! own pace then pile up: the planned times go on rising, window after
//! window, and it refuses again at once (trying again later, each time
//! later). Callers that come straight back are as many as before: the
//! times rise once, to what an answer rather than a refusal costs each of
//! them, and stay. Then it stops refusing for a while (the queue's static
//! bounds still hold), and afterwards refuses again to see whether that
//! shortens the waits now, holding off longer each time it does not.

use std::time::{Duration, Instant};

/// A window decides once it has checked this many requests...
const WINDOW_REQUESTS: u32 = 16;
/// ...and lasted this many objectives, and twice the mean time planned for
/// its requests: long enough for the callers refused at its start to be
/// back (once the mean, while everyone is let in).
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
/// queue tries letting everyone in.
const FUTILE_WINDOWS: u32 = 2;
/// Planned times above this share of the window before's mean are rising:
/// while everyone is let in, arrivals past what the server answers pile up
/// (at 125% of capacity, over a window of its wait, by about 20%); while
/// nearly all are refused, past what even refusals keep up with.
const RISING_SHARE: f64 = 9.0 / 8.0;
/// Windows in a row rising while everyone is let in that tell arrivals at
/// their own pace: callers that come straight back rise for a window or
/// two, until each waits for an answer instead of a refusal (where an
/// answer costs several refusals, for longer: such callers go on being
/// refused, and the trial is made again later).
const TRIAL_RISES: u32 = 3;
/// How long the queue first stops refusing, and first waits before trying
/// again after a trial that piled up, and the longest: each hold that ends
/// in futile windows again, and each trial that piles up again, doubles
/// the next.
const FIRST_HOLD: Duration = Duration::from_secs(1);
const LONGEST_HOLD: Duration = Duration::from_secs(8);
/// The most a request's planned time counts for, in seconds.
const LONGEST_PLAN: f64 = 60.0;

pub(super) struct Draining {
    window: Window,
    /// The mean time planned in the last window that decided.
    last_mean: Option<f64>,
    state: State,
    /// The next hold, and the wait before the next trial.
    hold: Duration,
    retry: Duration,
    /// No trial before then: the last one piled up.
    no_trial_before: Option<Instant>,
}

enum State {
    /// Refusing late requests; `futile`: windows in a row that refused
    /// nearly all and shortened nothing.
    Refusing { futile: u32 },
    /// Letting everyone in to see whether the planned times pile up;
    /// `windows` decided so far, `rises` in a row.
    Trial { windows: u32, rises: u32 },
    /// Letting everyone in until then.
    Held { until: Instant },
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
            state: State::Refusing { futile: 0 },
            hold: FIRST_HOLD,
            retry: FIRST_HOLD,
            no_trial_before: None,
        }
    }
}

impl Draining {
    /// Whether the queue refuses requests it would make late at `now` (it
    /// does unless refusing was lately seen to shorten nothing).
    pub(super) fn refusing(&self, now: Instant) -> bool {
        match self.state {
            State::Refusing { .. } => true,
            State::Trial { .. } => false,
            State::Held { until } => now >= until,
        }
    }

    /// A request was checked at `now`, `planned` to take that long in all
    /// (its unread wait included), and `refused`.
    pub(super) fn checked(&mut self, planned: Duration, refused: bool, now: Instant, objective: Duration) {
        if matches!(self.state, State::Held { until } if now >= until) {
            // The hold is over: a window begins with refusals, measured
            // against the level the planned times held at without them.
            self.state = State::Refusing { futile: 0 };
            let held = std::mem::take(&mut self.window);
            if held.checked > 0 {
                self.last_mean = Some(held.planned / f64::from(held.checked));
            }
        }
        let start = *self.window.start.get_or_insert(now);
        self.window.checked += 1;
        self.window.refused += u32::from(refused);
        // A plan past any objective (a stalled model's) counts as a minute,
        // so that one such request cannot hold a window open for ever.
        self.window.planned += planned.as_secs_f64().min(LONGEST_PLAN);
        let mean = self.window.planned / f64::from(self.window.checked);
        // A trial's windows are half as long (each lets a backlog pile up,
        // where arrivals come at their own pace), and at most twice the
        // mean of the window before: one as long as its own mean would
        // stretch with a pile-up planned to outgrow the time passing (on
        // mlp past capacity, one did for 2.6 s).
        let waits = match (&self.state, self.last_mean) {
            (State::Trial { .. }, Some(last)) => mean.min(2.0 * last),
            (State::Trial { .. }, None) => mean,
            _ => 2.0 * mean,
        };
        let length = (objective * WINDOW_OBJECTIVES).as_secs_f64().max(waits);
        if self.window.checked < WINDOW_REQUESTS || now.saturating_duration_since(start).as_secs_f64() < length {
            return;
        }
        let window = std::mem::take(&mut self.window);
        let last = self.last_mean.replace(mean);
        match self.state {
            State::Refusing { futile } => self.refused_window(&window, mean, last, futile, now),
            State::Trial { windows, rises } => {
                let rises = if last.is_some_and(|last| mean > last * RISING_SHARE) {
                    rises + 1
                } else {
                    0
                };
                self.trial_window(windows + 1, rises, now);
            }
            // Nothing was refused: the window only tells the level the
            // planned times hold at without refusals.
            State::Held { .. } => {}
        }
    }

    fn refused_window(&mut self, window: &Window, mean: f64, last: Option<f64>, futile: u32, now: Instant) {
        if window.refused * 16 < window.checked * REFUSED_SIXTEENTHS {
            // Requests get in: refusing drains, or the callers thinned.
            self.state = State::Refusing { futile: 0 };
            self.hold = FIRST_HOLD;
            self.retry = FIRST_HOLD;
            return;
        }
        if last.is_some_and(|last| mean < last * DRAINING_SHARE) {
            self.state = State::Refusing { futile: 0 };
            return;
        }
        if last.is_some_and(|last| mean > last * RISING_SHARE) {
            // Rising while nearly all are refused: arrivals at their own
            // pace outrunning even the refusals, or a stall piling them up
            // in the sockets. Callers that come straight back raise the
            // waits only to what their number costs; letting this rise in
            // would hand every request the pile-up. Neither futile nor
            // draining yet: the windows after it tell.
            return;
        }
        let futile = futile + 1;
        let may_try = self.no_trial_before.is_none_or(|then| now >= then);
        self.state = if futile >= FUTILE_WINDOWS && may_try {
            State::Trial { windows: 0, rises: 0 }
        } else {
            State::Refusing { futile }
        };
    }

    fn trial_window(&mut self, windows: u32, rises: u32, now: Instant) {
        if rises >= TRIAL_RISES {
            // Piling up: arrivals at their own pace, which refusals drain.
            self.state = State::Refusing { futile: 0 };
            self.no_trial_before = Some(now + self.retry);
            self.retry = (self.retry * 2).min(LONGEST_HOLD);
        } else if rises == 0 && windows > 1 {
            // Risen and settled (or never risen): the callers' own number.
            // Not on the first window alone: it is measured against a
            // refusing one, which a stall (the model's, or the server's
            // own) may have lifted past anything a pile-up reaches in one
            // window; the windows of the trial itself tell.
            self.state = State::Held { until: now + self.hold };
            self.hold = (self.hold * 2).min(LONGEST_HOLD);
        } else {
            self.state = State::Trial { windows, rises };
        }
    }
}
