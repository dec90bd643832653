//! Simulated network: one-way delays with a floor and a tail, for the simulator and the fast
//! message workloads alike.
//!
//! Real LAN delays have a hard floor (wire + stack), mostly small extras, and rare large ones
//! (interrupt moderation, queueing, scheduling). The floor may differ per direction: that
//! asymmetry is exactly what no offline method can tell from clock offset (Haddad), so the
//! simulator makes it adjustable to show its effect. The draws are `rand_distr`'s, from any
//! generator (the simulator's `StdRng`, the workloads' [`SplitMix64`](crate::SplitMix64)).

use rand::Rng;
use rand_distr::{Distribution, Exp, Pareto};
use serde::Serialize;

/// Distribution of the delay beyond the floor (ns).
#[derive(Serialize, Clone, Copy, Debug, PartialEq)]
#[serde(tag = "distribution", rename_all = "kebab-case")]
pub enum DelayTail {
    /// Exponential with this mean.
    Exponential {
        /// Mean extra delay, ns.
        mean_ns: f64,
    },
    /// Pareto: never below `scale_ns`, a heavy tail for `shape` ≤ 2 (infinite mean for ≤ 1).
    Pareto {
        /// Scale: the smallest extra delay, ns.
        scale_ns: f64,
        /// Shape α (a heavier tail for a smaller α).
        shape: f64,
    },
    /// What a LAN shows: exponential with mean `mean_ns`, except a share `heavy_share` of the
    /// packets, drawn from a Pareto tail of scale `mean_ns` and `shape`.
    Mixed {
        /// Mean of the common, exponential extra delay, ns.
        mean_ns: f64,
        /// Share of packets that take the heavy tail instead.
        heavy_share: f64,
        /// Shape of the heavy tail.
        shape: f64,
    },
}

impl DelayTail {
    /// Draws one extra delay (ns).
    pub fn sample(&self, rng: &mut impl Rng) -> f64 {
        match *self {
            DelayTail::Exponential { mean_ns } => {
                Exp::new(1.0 / mean_ns).expect("positive mean").sample(rng)
            }
            DelayTail::Pareto { scale_ns, shape } => Pareto::new(scale_ns, shape)
                .expect("positive scale and shape")
                .sample(rng),
            DelayTail::Mixed {
                mean_ns,
                heavy_share,
                shape,
            } => {
                let tail = if rng.random_bool(heavy_share) {
                    DelayTail::Pareto {
                        scale_ns: mean_ns,
                        shape,
                    }
                } else {
                    DelayTail::Exponential { mean_ns }
                };
                tail.sample(rng)
            }
        }
    }
}

/// Delay distribution of one direction of one link, in ns.
#[derive(Serialize, Clone, Copy, Debug, PartialEq)]
pub struct Delay {
    /// The floor: no packet is faster.
    pub min_ns: f64,
    /// The extra delay above the floor.
    pub tail: DelayTail,
    /// Largest delay (a packet slower than this would be a retransmission); it also bounds how
    /// far a receive event can trail its send, which the writers' reorder buffers rely on.
    pub max_ns: f64,
}

impl Delay {
    /// Draws one delay.
    pub fn sample(&self, rng: &mut impl Rng) -> f64 {
        (self.min_ns + self.tail.sample(rng)).min(self.max_ns)
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
            tail: DelayTail::Mixed {
                mean_ns: 5_000.0,
                heavy_share: 0.05,
                shape: 1.5,
            },
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

    #[test]
    fn each_tail_has_its_mean_or_floor_whatever_the_generator() {
        let mut rng = crate::SplitMix64::new(5);
        let n = 200_000;
        let mean = |tail: DelayTail, rng: &mut crate::SplitMix64| {
            (0..n).map(|_| tail.sample(rng)).sum::<f64>() / n as f64
        };
        let exp = mean(DelayTail::Exponential { mean_ns: 30e3 }, &mut rng);
        assert!((exp / 30e3 - 1.0).abs() < 0.01, "exponential mean {exp}");
        // Pareto of shape 3: mean = scale·α/(α − 1) = 1.5·scale, never below the scale.
        let pareto = DelayTail::Pareto {
            scale_ns: 10e3,
            shape: 3.0,
        };
        assert!((0..n).all(|_| pareto.sample(&mut rng) >= 10e3));
        let m = mean(pareto, &mut rng);
        assert!((m / 15e3 - 1.0).abs() < 0.02, "pareto mean {m}");
    }
}
