//! Clock models for simulated nodes: what a node's two clocks read at true time `T`.
//!
//! The analyzer's first model is linear clocks (Poirier §2.1). A real node is not: its crystal
//! wanders with temperature, and NTP or chrony slews the kernel's clock. Linux keeps both sides
//! apart, and so does the simulator:
//!
//! * **RAW** (CLOCK_MONOTONIC_RAW) follows the crystal ([`Crystal`]): an offset, a constant drift
//!   and, for wandering crystals, a smooth frequency change of a few ppm per hour.
//! * **MONO** (CLOCK_MONOTONIC, what `bpf_ktime_get_ns` reads and the events are stamped with)
//!   is RAW multiplied by the kernel's frequency correction ([`Slew`]): piecewise constant, as
//!   `adjtimex` sets it. NTP's frequency steps and chrony's phase slews only act here; RAW never
//!   sees them.
//!
//! Every function is strictly increasing and has an inverse that is exact (closed form) or
//! converges to well under a nanosecond (Newton on a rate within 1 ± 10⁻³), so that
//! [`Truth::map`](crate::Truth::map) is the exact truth the analyzer's maps are checked against.
//! All values here are without [`BOOT_NS`]: the files hold `value + BOOT_NS`.
//!
//! [`LinearClock`] alone is also the clock of the fast message workloads
//! ([`Workload`](crate::Workload)), where true time and local time need no boot offset.

use std::f64::consts::TAU;

use rand::Rng;
use serde::Serialize;

/// Simulated nodes' clocks start at this value (ns), as a node's monotonic clock reads its
/// uptime, so that negative offsets still give positive times.
pub const BOOT_NS: f64 = 1000e9;

/// A linear clock: `local = offset + (1 + drift·10⁻⁶) · true` (ns), the model the analyzer
/// assumes (Poirier §2.1).
#[derive(Serialize, Clone, Copy, Debug, PartialEq)]
pub struct LinearClock {
    /// Local time at true time 0, ns.
    pub offset_ns: f64,
    /// How much faster than true time the clock runs, ppm.
    pub drift_ppm: f64,
}

impl LinearClock {
    /// Local time at true time `t` (ns), exact.
    #[inline]
    pub fn at(&self, t: f64) -> f64 {
        // This exact expression keeps `--clock linear` files bit-for-bit what they always were.
        self.offset_ns + t * (1.0 + self.drift_ppm * 1e-6)
    }

    /// Local time at true time `t`, rounded to the nanosecond, as a recorded event reads it.
    #[inline]
    pub fn local(&self, t: f64) -> i64 {
        self.at(t).round() as i64
    }

    /// True time at which the clock reads `local` (ns).
    pub fn true_time(&self, local: f64) -> f64 {
        (local - self.offset_ns) / (1.0 + self.drift_ppm * 1e-6)
    }

    /// What `other` reads at the instant this clock reads `local`: the exact map an estimate of
    /// this clock onto `other` is checked against.
    pub fn map_to(&self, other: &LinearClock, local: f64) -> f64 {
        other.at(self.true_time(local))
    }
}

/// The crystal behind CLOCK_MONOTONIC_RAW: RAW − boot as a function of true time (ns).
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(tag = "model", rename_all = "kebab-case")]
pub enum Crystal {
    /// `RAW = offset + (1 + drift) T`: the model the analyzer assumes.
    Linear(LinearClock),
    /// Temperature-like wander: the frequency is `drift + Σ aᵢ·sin(2πT/pᵢ + φᵢ)` ppm, a smooth
    /// random curve that moves by about the configured ppm per hour; RAW is its exact
    /// integral, `offset + T + (drift·T + Σ aᵢ·pᵢ/2π·(cos φᵢ − cos(2πT/pᵢ + φᵢ)))·10⁻⁶`.
    Wander {
        /// RAW − boot at true time 0, ns.
        offset_ns: f64,
        /// The mean frequency error, ppm.
        drift_ppm: f64,
        /// The frequency's sinusoidal terms.
        waves: Vec<Wave>,
    },
}

/// One sinusoidal term of a wandering crystal's frequency.
#[derive(Serialize, Clone, Copy, Debug, PartialEq)]
pub struct Wave {
    /// Amplitude, ppm.
    pub amplitude_ppm: f64,
    /// Period, s.
    pub period_s: f64,
    /// Phase at true time 0, rad.
    pub phase_rad: f64,
}

impl Crystal {
    /// A wandering crystal whose frequency changes by about `ppm_per_hour` per hour: three waves
    /// with periods from 30 min to 6 h (log-uniform: room, rack and day temperature cycles) and
    /// random phases, scaled so that the frequency's slope has a root mean square of exactly
    /// `ppm_per_hour` per hour (its peak can reach √6 times that when the waves line up).
    pub fn wander(offset_ns: f64, drift_ppm: f64, ppm_per_hour: f64, rng: &mut impl Rng) -> Self {
        let mut waves: Vec<Wave> = (0..3)
            .map(|_| Wave {
                amplitude_ppm: rng.random_range(0.2..1.0),
                period_s: 1800.0 * 12f64.powf(rng.random_range(0.0..1.0)),
                phase_rad: rng.random_range(0.0..TAU),
            })
            .collect();
        // Each wave a·sin(2πT/p + φ) has slope a·2π/p·cos(…), whose mean square is half the
        // square of its peak; the waves' phases are independent.
        let mean_square: f64 = waves
            .iter()
            .map(|w| 0.5 * (w.amplitude_ppm * TAU / w.period_s).powi(2))
            .sum();
        let scale = ppm_per_hour / 3600.0 / mean_square.sqrt();
        for w in &mut waves {
            w.amplitude_ppm *= scale;
        }
        Crystal::Wander {
            offset_ns,
            drift_ppm,
            waves,
        }
    }

    /// RAW − boot at true time `t` (ns).
    pub fn raw(&self, t: f64) -> f64 {
        match self {
            Crystal::Linear(linear) => linear.at(t),
            Crystal::Wander {
                offset_ns,
                drift_ppm,
                waves,
            } => {
                let bend: f64 = waves
                    .iter()
                    .map(|w| {
                        let period = w.period_s * 1e9;
                        w.amplitude_ppm * period / TAU
                            * (w.phase_rad.cos() - (TAU * t / period + w.phase_rad).cos())
                    })
                    .sum();
                offset_ns + t + (drift_ppm * t + bend) * 1e-6
            }
        }
    }

    /// The crystal's frequency error at true time `t` (ppm): RAW advances `1 + ppm·10⁻⁶` ns per
    /// true ns.
    pub fn ppm(&self, t: f64) -> f64 {
        match self {
            Crystal::Linear(linear) => linear.drift_ppm,
            Crystal::Wander {
                drift_ppm, waves, ..
            } => {
                drift_ppm
                    + waves
                        .iter()
                        .map(|w| {
                            w.amplitude_ppm * (TAU * t / (w.period_s * 1e9) + w.phase_rad).sin()
                        })
                        .sum::<f64>()
            }
        }
    }

    /// True time at which RAW − boot reads `raw`: closed form for a linear crystal, Newton's
    /// method otherwise (the rate is within 1 ± 10⁻³, so each step gains ~3 digits: three or
    /// four steps reach the f64 resolution of ~10⁻⁴ ns at an hour).
    pub fn true_time(&self, raw: f64) -> f64 {
        match self {
            Crystal::Linear(linear) => linear.true_time(raw),
            Crystal::Wander {
                offset_ns,
                drift_ppm,
                ..
            } => {
                let mut t = (raw - offset_ns) / (1.0 + drift_ppm * 1e-6);
                for _ in 0..20 {
                    let step = (self.raw(t) - raw) / (1.0 + self.ppm(t) * 1e-6);
                    t -= step;
                    if step.abs() < 1e-6 {
                        break;
                    }
                }
                t
            }
        }
    }
}

/// From `start_ns` (true time) on, until the next slew, CLOCK_MONOTONIC advances
/// `1 + ppm·10⁻⁶` ns per CLOCK_MONOTONIC_RAW ns: the kernel's frequency correction as
/// `adjtimex` sets it (the NTP frequency estimate plus any phase slew in progress).
#[derive(Serialize, Clone, Copy, Debug, PartialEq)]
pub struct Slew {
    /// True time from which this correction applies (ns).
    pub start_ns: f64,
    /// RAW − boot and MONO − boot at `start_ns`: MONO is continuous across slews, and storing
    /// both makes each piece evaluate (and invert) on its own, exactly.
    pub raw_ns: f64,
    /// See `raw_ns`.
    pub mono_ns: f64,
    /// Total correction (ppm), a multiple of 2⁻¹⁶ ppm: the kernel's resolution (`timex.freq`).
    pub ppm: f64,
    /// The part of `ppm` that is the daemon's frequency estimate; the rest is a phase slew.
    pub freq_ppm: f64,
}

/// What `adjtimex` (modes 0) reports while a correction of `ppm` is in force: a correction
/// beyond the kernel's ±500 ppm `freq` limit goes into `tick` (100 ppm per µs at USER_HZ 100),
/// as chrony does. Returns `(freq in ppm·2¹⁶, tick in µs)`.
pub fn adjtimex_freq_tick(ppm: f64) -> (i64, i64) {
    let tick_ppm = if ppm.abs() > 500.0 {
        (ppm / 100.0).trunc()
    } else {
        0.0
    };
    (
        ((ppm - tick_ppm * 100.0) * 65536.0).round() as i64,
        10_000 + tick_ppm as i64,
    )
}

/// Rounds a correction to the kernel's resolution of 2⁻¹⁶ ppm, so that `adjtimex` reports it
/// exactly.
pub fn quantize_ppm(ppm: f64) -> f64 {
    (ppm * 65536.0).round() / 65536.0
}

/// Which family of clocks to draw.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClockKind {
    /// Linear crystal, no slewing (MONO = RAW): the analyzer's model.
    Linear,
    /// Linear crystal; NTP/chrony slews MONO (frequency steps and phase slews up to
    /// --max-slew-ppm).
    Slewed,
    /// Wandering crystal (--wander-ppm-per-hour), no slewing (MONO = RAW): an undisciplined node.
    Curved,
    /// Wandering crystal and NTP/chrony slewing on MONO: what a real node does.
    Disciplined,
}

impl ClockKind {
    /// Whether a daemon slews CLOCK_MONOTONIC.
    pub fn slewed(self) -> bool {
        matches!(self, ClockKind::Slewed | ClockKind::Disciplined)
    }

    /// Whether the crystal wanders.
    pub fn wanders(self) -> bool {
        matches!(self, ClockKind::Curved | ClockKind::Disciplined)
    }
}

/// A node's clocks; all times in ns, without boot.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct ClockModel {
    /// CLOCK_MONOTONIC_RAW.
    pub raw: Crystal,
    /// The kernel's corrections in true-time order; empty when nothing slews the clock
    /// (MONO = RAW exactly). The first applies before its start too.
    pub slews: Vec<Slew>,
    /// CLOCK_REALTIME − CLOCK_MONOTONIC (ns): constant, since the simulated daemons never step
    /// the clock (a slew moves both alike).
    pub realtime_minus_monotonic_ns: i64,
}

impl ClockModel {
    /// A clock whose MONO is its RAW (no daemon).
    pub fn unslewed(raw: Crystal, realtime_minus_monotonic_ns: i64) -> Self {
        ClockModel {
            raw,
            slews: Vec::new(),
            realtime_minus_monotonic_ns,
        }
    }

    /// RAW − boot at true time `t`.
    pub fn raw(&self, t: f64) -> f64 {
        self.raw.raw(t)
    }

    /// MONO − boot at true time `t`: what the events are stamped with.
    pub fn mono(&self, t: f64) -> f64 {
        let raw = self.raw.raw(t);
        match self.slew_at(t) {
            None => raw,
            Some(s) => s.mono_ns + (raw - s.raw_ns) * (1.0 + s.ppm * 1e-6),
        }
    }

    /// The correction in force at true time `t` (None without a daemon).
    pub fn slew_at(&self, t: f64) -> Option<&Slew> {
        let i = self.slews.partition_point(|s| s.start_ns <= t);
        self.slews.get(i.saturating_sub(1))
    }

    /// RAW − boot when MONO − boot reads `mono`: exact, MONO being linear in RAW on each slew.
    pub fn raw_of_mono(&self, mono: f64) -> f64 {
        if self.slews.is_empty() {
            return mono;
        }
        let i = self.slews.partition_point(|s| s.mono_ns <= mono);
        let s = &self.slews[i.saturating_sub(1)];
        s.raw_ns + (mono - s.mono_ns) / (1.0 + s.ppm * 1e-6)
    }

    /// True time at which MONO − boot reads `mono` (the inverse of [`mono`](Self::mono)).
    pub fn true_time(&self, mono: f64) -> f64 {
        self.raw.true_time(self.raw_of_mono(mono))
    }

    /// Appends a correction of `ppm` (of which `freq_ppm` is the frequency estimate) from true
    /// time `start_ns` on, MONO continuing where the previous one left it.
    pub fn push_slew(&mut self, start_ns: f64, ppm: f64, freq_ppm: f64) {
        debug_assert!(self.slews.last().is_none_or(|s| s.start_ns < start_ns));
        let mono_ns = self.mono(start_ns);
        self.slews.push(Slew {
            start_ns,
            raw_ns: self.raw.raw(start_ns),
            mono_ns,
            ppm: quantize_ppm(ppm),
            freq_ppm,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn linear_matches_the_agent_clock_skew_formula() {
        let c = Crystal::Linear(LinearClock {
            offset_ns: -5e6,
            drift_ppm: 100.0,
        });
        assert_eq!(c.raw(1e12), 1e12 - 5e6 + 1e8);
    }

    #[test]
    fn wander_is_the_integral_of_its_frequency_and_moves_at_its_rate() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let c = Crystal::wander(1e6, 30.0, 2.0, &mut rng);
        // Numerical derivative of RAW against the closed-form frequency.
        for i in 0..100 {
            let t = i as f64 * 73e9;
            let h = 1e9;
            let rate = (c.raw(t + h) - c.raw(t - h)) / (2.0 * h);
            assert!(((rate - 1.0) * 1e6 - c.ppm(t)).abs() < 1e-3, "at {t}");
        }
        // The frequency moves by 2 ppm per hour (root mean square over a long time), never
        // faster than √6 times that.
        let slopes: Vec<f64> = (0..100_000)
            .map(|i| (c.ppm(i as f64 * 7.3e9 + 1e9) - c.ppm(i as f64 * 7.3e9)) * 3600.0)
            .collect();
        let rms = (slopes.iter().map(|s| s * s).sum::<f64>() / slopes.len() as f64).sqrt();
        assert!((rms - 2.0).abs() < 0.1, "rms slope {rms} ppm/h");
        assert!(slopes.iter().all(|s| s.abs() <= 2.0 * 6f64.sqrt()));
    }

    #[test]
    fn adjtimex_puts_large_corrections_into_tick() {
        assert_eq!(adjtimex_freq_tick(12.5), (12 * 65536 + 32768, 10_000));
        assert_eq!(adjtimex_freq_tick(-480.0), (-480 * 65536, 10_000));
        assert_eq!(adjtimex_freq_tick(580.0), (80 * 65536, 10_005));
        assert_eq!(adjtimex_freq_tick(-650.0), (-50 * 65536, 9_994));
    }
}
