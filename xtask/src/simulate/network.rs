//! Simulated network: one-way delays with a per-direction minimum and a heavy tail.
//!
//! Real LAN delays have a hard floor (wire + stack), mostly small extras, and rare large ones
//! (interrupt moderation, queueing, scheduling). The floor may differ per direction: that
//! asymmetry is exactly what no offline method can tell from clock offset (Haddad), so the
//! simulator makes it adjustable to show its effect.

use rand::Rng;
use rand_distr::{Distribution, Exp, Pareto};
use serde::Serialize;

/// Delay distribution of one direction of one link, in ns.
#[derive(Serialize, Clone, Debug)]
pub struct Delay {
    /// The floor: no packet is faster.
    pub min_ns: f64,
    /// Mean of the common, exponential extra delay.
    pub mean_extra_ns: f64,
    /// Share of packets that take the heavy (Pareto) tail instead.
    pub tail_share: f64,
    /// Largest delay (a packet slower than this would be a retransmission).
    pub max_ns: f64,
}

impl Delay {
    /// Draws one delay.
    pub fn sample(&self, rng: &mut impl Rng) -> f64 {
        let extra = if rng.random_bool(self.tail_share) {
            Pareto::new(self.mean_extra_ns, 1.5)
                .expect("positive scale and shape")
                .sample(rng)
        } else {
            Exp::new(1.0 / self.mean_extra_ns)
                .expect("positive rate")
                .sample(rng)
        };
        (self.min_ns + extra).min(self.max_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn delays_respect_floor_and_cap_and_have_a_tail() {
        let d = Delay {
            min_ns: 30_000.0,
            mean_extra_ns: 5_000.0,
            tail_share: 0.05,
            max_ns: 20e6,
        };
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let samples: Vec<f64> = (0..100_000).map(|_| d.sample(&mut rng)).collect();
        assert!(samples.iter().all(|&s| (30_000.0..=20e6).contains(&s)));
        let slow = samples
            .iter()
            .filter(|&&s| s > 30_000.0 + 100_000.0)
            .count();
        assert!(slow > 10, "a heavy tail: {slow} samples over 100 µs extra");
    }
}
