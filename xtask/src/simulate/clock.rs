//! Clock models for simulated nodes: what a node's clock reads at true time `T`.
//!
//! The analyzer assumes linear clocks (Poirier §2.1). Real clocks are not: NTP slews the
//! frequency in steps, and temperature bends the drift. These models let us measure how far the
//! estimates go wrong on such clocks, which no namespace test on one shared clock can show.

use rand::Rng;
use serde::Serialize;
use std::f64::consts::TAU;

/// How a node's local clock relates to the true time; all times in ns.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(tag = "model", rename_all = "kebab-case")]
pub enum ClockModel {
    /// `L = offset + (1 + drift) T`: the model the analyzer assumes.
    Linear { offset_ns: f64, drift_ppm: f64 },
    /// NTP-style slewing: the frequency changes in steps. `steps` lists `(T_ns, drift_ppm)` from
    /// which on the rate is `1 + drift_ppm·1e-6`; the first step starts at T = 0.
    Slewed {
        offset_ns: f64,
        steps: Vec<(f64, f64)>,
    },
    /// Temperature-like drift: the rate swings sinusoidally around a mean,
    /// `rate = 1 + (drift + amplitude·sin(2πT/period))·1e-6`.
    Curved {
        offset_ns: f64,
        drift_ppm: f64,
        amplitude_ppm: f64,
        period_s: f64,
    },
}

/// Which family of clocks to draw.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClockKind {
    Linear,
    Slewed,
    Curved,
}

impl ClockModel {
    /// The identity clock (the reference node).
    pub fn perfect() -> Self {
        ClockModel::Linear {
            offset_ns: 0.0,
            drift_ppm: 0.0,
        }
    }

    /// Draws a clock of `kind` with offsets up to ±`max_offset_ns` and drifts up to ±`max_ppm`,
    /// over a run of `duration_ns`.
    pub fn random(
        kind: ClockKind,
        max_offset_ns: f64,
        max_ppm: f64,
        duration_ns: f64,
        rng: &mut impl Rng,
    ) -> Self {
        let offset_ns = rng.random_range(-max_offset_ns..=max_offset_ns);
        let drift_ppm = rng.random_range(-max_ppm..=max_ppm);
        match kind {
            ClockKind::Linear => ClockModel::Linear {
                offset_ns,
                drift_ppm,
            },
            ClockKind::Slewed => {
                // A step every 5–20 s, each moving the frequency by up to ±20 ppm (NTP corrects
                // by tens of ppm; its slew limit is 500 ppm).
                let mut steps = vec![(0.0, drift_ppm)];
                let mut t = 0.0;
                let mut ppm = drift_ppm;
                loop {
                    t += rng.random_range(5e9..20e9);
                    if t >= duration_ns {
                        break;
                    }
                    ppm = (ppm + rng.random_range(-20.0..20.0))
                        .clamp(-max_ppm - 20.0, max_ppm + 20.0);
                    steps.push((t, ppm));
                }
                ClockModel::Slewed { offset_ns, steps }
            }
            ClockKind::Curved => ClockModel::Curved {
                offset_ns,
                drift_ppm,
                amplitude_ppm: rng.random_range(0.5..2.0),
                period_s: rng.random_range(0.5..2.0) * duration_ns * 1e-9,
            },
        }
    }

    /// Local time at true time `t` (ns).
    pub fn local(&self, t: f64) -> f64 {
        match self {
            ClockModel::Linear {
                offset_ns,
                drift_ppm,
            } => offset_ns + t * (1.0 + drift_ppm * 1e-6),
            ClockModel::Slewed { offset_ns, steps } => {
                // Before the first step (T < 0, only asked for by the inverse's search) the
                // first rate extends backwards, so the clock stays strictly increasing.
                let (first_start, first_ppm) = steps.first().copied().unwrap_or((0.0, 0.0));
                if t < first_start {
                    return offset_ns + (t - first_start) * (1.0 + first_ppm * 1e-6);
                }
                let mut local = *offset_ns;
                for (i, &(start, ppm)) in steps.iter().enumerate() {
                    let end = steps.get(i + 1).map_or(f64::INFINITY, |s| s.0);
                    if t <= start {
                        break;
                    }
                    local += (t.min(end) - start) * (1.0 + ppm * 1e-6);
                }
                local
            }
            ClockModel::Curved {
                offset_ns,
                drift_ppm,
                amplitude_ppm,
                period_s,
            } => {
                let period = period_s * 1e9;
                offset_ns
                    + t * (1.0 + drift_ppm * 1e-6)
                    + amplitude_ppm * 1e-6 * period / TAU * (1.0 - (TAU * t / period).cos())
            }
        }
    }

    /// True time at which the clock reads `local` (the inverse of [`local`](Self::local)); every
    /// model is strictly increasing, so bisection converges.
    pub fn true_time(&self, local: f64) -> f64 {
        // Rates stay within 1 ± 1000 ppm, so the answer lies within 0.1 % of local − offset.
        let guess = local - self.local(0.0);
        let (mut lo, mut hi) = (
            guess - guess.abs() * 2e-3 - 1e9,
            guess + guess.abs() * 2e-3 + 1e9,
        );
        for _ in 0..200 {
            let mid = 0.5 * (lo + hi);
            if self.local(mid) < local {
                lo = mid;
            } else {
                hi = mid;
            }
            if hi - lo < 1e-3 {
                break;
            }
        }
        0.5 * (lo + hi)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn linear_matches_the_agent_clock_skew_formula() {
        let c = ClockModel::Linear {
            offset_ns: -5e6,
            drift_ppm: 100.0,
        };
        assert_eq!(c.local(1e12), 1e12 - 5e6 + 1e8);
    }

    #[test]
    fn every_model_is_increasing_and_invertible() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for kind in [ClockKind::Linear, ClockKind::Slewed, ClockKind::Curved] {
            let c = ClockModel::random(kind, 5e7, 100.0, 120e9, &mut rng);
            let mut prev = f64::NEG_INFINITY;
            for i in 0..1000 {
                let t = i as f64 * 0.12e9;
                let l = c.local(t);
                assert!(l > prev, "{kind:?} not increasing at {t}");
                prev = l;
                assert!((c.true_time(l) - t).abs() < 0.01, "{kind:?} inverse at {t}");
            }
        }
    }

    #[test]
    fn slewed_rate_follows_its_steps() {
        let c = ClockModel::Slewed {
            offset_ns: 0.0,
            steps: vec![(0.0, 0.0), (1e9, 100.0)],
        };
        assert_eq!(c.local(1e9), 1e9);
        assert!((c.local(2e9) - (2e9 + 1e5)).abs() < 1e-6);
    }
}
