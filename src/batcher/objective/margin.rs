//! How far short of the objective a request must be planned to be let in:
//! the plan's error, learned from the requests answered. Each answered
//! request says whether it took longer than the objective; the margin moves
//! up by a step for one that did and down by a step times the share allowed
//! to (for p99, a hundredth) for one that did not, so it settles where that
//! share of the answered is late (a stochastic approximation of the
//! quantile). Whatever the plan misses (stalls, a thread the answers wait
//! for, a model that slowed down) moves it, and it comes back down within
//! a second once the plan holds.

/// A late request moves the margin by this share of the objective.
const STEP: f64 = 1.0 / 64.0;
/// The margin stays below this share of the objective. Where the objective
/// cannot be met at the load (mlp's 5 ms on one core at 90% of its
/// capacity, late past 8 ms however much it refused), the margin rises to
/// its bound and only refuses more: bounds of a half and three quarters
/// refused 46–75% there against a median of 30% without a margin.
const MOST: f64 = 0.25;

#[derive(Default)]
pub(super) struct Margin {
    /// Seconds taken off the objective for the check.
    seconds: f64,
}

impl Margin {
    /// `late` answered requests took longer than `objective` (seconds), and
    /// `on_time` did not, where `allowed` (0.01 for p99) may.
    pub(super) fn answered(&mut self, late: u32, on_time: u32, objective: f64, allowed: f64) {
        if late == 0 && on_time == 0 {
            return;
        }
        let step = STEP * objective;
        let moved = step * (f64::from(late) * (1.0 - allowed) - f64::from(on_time) * allowed);
        self.seconds = (self.seconds + moved).clamp(0.0, MOST * objective);
    }

    pub(super) fn seconds(&self) -> f64 {
        self.seconds
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One request in 40 late while the margin is below `needed` (of a
    /// 20 ms objective), none above it: the margin finds `needed`.
    fn settle(needed: f64, rounds: usize) -> f64 {
        let mut margin = Margin::default();
        for round in 0..rounds {
            // One late among 40 answered while short of what is needed.
            let late = u32::from(margin.seconds() < needed && round % 40 == 0);
            margin.answered(late, 1 - late, 0.020, 0.01);
        }
        margin.seconds()
    }

    #[test]
    fn settles_where_the_allowed_share_is_late() {
        let settled = settle(0.003, 40_000);
        assert!((0.0025..=0.0035).contains(&settled), "{settled}");
        assert_eq!(settle(0.0, 40_000), 0.0);
    }

    #[test]
    fn a_stall_raises_it_at_most_to_its_bound_and_a_second_of_answers_on_time_brings_it_down() {
        let mut margin = Margin::default();
        margin.answered(500, 0, 0.020, 0.01);
        assert!((margin.seconds() - 0.005).abs() < 1e-9, "{}", margin.seconds());
        // 10,000 requests a second, all on time.
        margin.answered(0, 10_000, 0.020, 0.01);
        assert_eq!(margin.seconds(), 0.0);
    }
}
