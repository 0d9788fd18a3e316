//! How far short of its deadline a request must be planned to end to be
//! let in, learned from the requests admitted on time. Each says whether
//! it missed its deadline (its answer taken past it, or dropped unrun); the
//! margin moves up by a step times 1 − α for one that did and down by a
//! step times α (α = 1 − p, a hundredth for p99) for one that did not, so
//! it settles where a share α of them misses (a stochastic approximation
//! of the quantile). Whatever the plans miss outside the runs (stalls, a
//! thread the answers wait for, a model that slowed down) raises it, and it
//! comes back down within a second once the plans hold.

/// A missed request moves the margin by this share of the objective.
const STEP: f64 = 1.0 / 64.0;
/// The margin stays below this share of the objective. Where the objective
/// cannot be met at the load (mlp's 5 ms on one core at 90% of its
/// capacity, late past 8 ms however much it refused), the margin rises to
/// its bound and only refuses more: bounds of a half and three quarters
/// refused 46–75% there against a median of 30% without a margin.
pub(super) const MOST: f64 = 0.25;

#[derive(Default)]
pub(super) struct Margin {
    /// Seconds taken off the objective for the check.
    seconds: f64,
}

impl Margin {
    /// `missed` requests missed their deadlines (or were dropped) and
    /// `met` did not, under an objective of `objective` seconds where a
    /// share `allowed` (0.01 for p99) may be late. The margin stays within
    /// zero and `most`.
    pub(super) fn learn(&mut self, missed: u32, met: u32, objective: f64, allowed: f64, most: f64) {
        if missed == 0 && met == 0 {
            return;
        }
        let step = STEP * objective;
        let moved = step * (f64::from(missed) * (1.0 - allowed) - f64::from(met) * allowed);
        self.seconds = (self.seconds + moved).clamp(0.0, most.max(0.0));
    }

    pub(super) fn seconds(&self) -> f64 {
        self.seconds
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One request in 40 misses while the margin is below `needed` (of a
    /// 20 ms objective), none above it: the margin finds `needed`.
    fn settle(needed: f64, rounds: usize) -> f64 {
        let mut margin = Margin::default();
        for round in 0..rounds {
            let missed = u32::from(margin.seconds() < needed && round % 40 == 0);
            margin.learn(missed, 1 - missed, 0.020, 0.01, 0.005);
        }
        margin.seconds()
    }

    #[test]
    fn settles_where_the_allowed_share_misses() {
        let settled = settle(0.003, 40_000);
        assert!((0.0025..=0.0035).contains(&settled), "{settled}");
        assert_eq!(settle(0.0, 40_000), 0.0);
    }

    #[test]
    fn a_stall_raises_it_at_most_to_its_bound_and_a_second_of_answers_on_time_brings_it_down() {
        let mut margin = Margin::default();
        margin.learn(500, 0, 0.020, 0.01, 0.005);
        assert!((margin.seconds() - 0.005).abs() < 1e-9, "{}", margin.seconds());
        // 10,000 requests a second, all on time.
        margin.learn(0, 10_000, 0.020, 0.01, 0.005);
        assert_eq!(margin.seconds(), 0.0);
    }
}
