//! The simulation's seeded randomness: uniform and exponential draws, and
//! when the next open-loop request arrives.

use super::setup::Arrivals;

/// splitmix64: a seeded stream of uniform numbers.
pub struct Random(pub u64);

impl Random {
    pub fn unit(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn exponential(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.unit()).ln()
    }
}

pub fn next_open_arrival(arrivals: Arrivals, now: u64, random: &mut Random) -> Option<u64> {
    let gap = |rate: f64, random: &mut Random| (random.exponential(1.0 / rate) * 1e9) as u64;
    match arrivals {
        Arrivals::Poisson { rate } => Some(now + gap(rate, random)),
        Arrivals::OnOff { rate, on, off } => {
            let period = (on + off).as_nanos() as u64;
            let next = now + gap(rate, random);
            let phase = next % period;
            Some(match phase < on.as_nanos() as u64 {
                true => next,
                false => next - phase + period,
            })
        }
        Arrivals::Closed { .. } => None,
    }
}
