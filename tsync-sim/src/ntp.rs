//! A simulated NTP/chrony daemon: the slews it makes the kernel apply to CLOCK_MONOTONIC.
//!
//! Real daemons keep CLOCK_REALTIME (= CLOCK_MONOTONIC + a constant) on UTC by changing the
//! kernel's frequency correction, never by stepping once running. This one is a closed loop
//! with the two kinds of change the analyzer must undo:
//!
//! * **Frequency steps.** At every poll (every `--ntp-poll` s, ±25 %) the daemon measures its
//!   offset to UTC with some noise (`--ntp-noise-us`, Gaussian; a share `--ntp-outliers` of the
//!   measurements is off by 1–4 ms instead, as over a congested path) and moves its frequency
//!   estimate by a quarter of the apparent frequency error (offset / time since the last poll,
//!   clamped to ±10 ppm so an outlier moves it by at most 2.5 ppm), held until the next poll.
//! * **Phase slews** (chrony-like). It also removes the measured offset by adding
//!   `−offset / D` to the frequency for `D` seconds, `D` uniform in 1–8 s but longer when the
//!   rate would exceed `--max-slew-ppm`: an outlier gives 500 ppm for up to 8 s, then back. A
//!   poll that comes before a slew has ended replaces it, as a new `adjtimex` offset does.
//!
//! The daemon starts synchronized as a node that has run for a while would be: its frequency
//! estimate cancels the crystal's error to within ±1 ppm and its realtime clock is within ±2 ms
//! of UTC, so the first poll slews that away.

use rand::Rng;
use rand_distr::{Distribution, Normal};

use crate::clock::{ClockModel, Slew, quantize_ppm};

/// The daemon's settings (from the command line).
#[derive(Clone, Copy, Debug)]
pub struct Daemon {
    /// Mean time between polls (s).
    pub poll_s: f64,
    /// Standard deviation of an offset measurement (ns).
    pub noise_ns: f64,
    /// Share of measurements that are outliers.
    pub outliers: f64,
    /// Largest phase-slew rate (ppm).
    pub max_slew_ppm: f64,
}

/// How much of the apparent frequency error each poll corrects.
const FREQUENCY_GAIN: f64 = 0.25;
/// Clamp of the apparent frequency error (ppm) before the gain.
const MAX_FREQUENCY_ERROR_PPM: f64 = 10.0;

impl Daemon {
    /// Replaces `clock`'s slews by those this daemon makes from true time 0 to `end_ns`, MONO −
    /// boot reading `mono0` at true time 0. Returns the realtime clock's error against UTC at
    /// true time 0 (ns), from which CLOCK_REALTIME − CLOCK_MONOTONIC follows.
    pub fn discipline(
        &self,
        clock: &mut ClockModel,
        mono0: f64,
        end_ns: f64,
        rng: &mut impl Rng,
    ) -> f64 {
        let crystal_ppm = clock.raw.ppm(0.0);
        // The frequency that makes MONO run at the true rate, give or take the daemon's error.
        let mut freq = (1.0 / (1.0 + crystal_ppm * 1e-6) - 1.0) * 1e6 + rng.random_range(-1.0..1.0);
        clock.slews.clear();
        clock.slews.push(Slew {
            start_ns: 0.0,
            raw_ns: clock.raw.raw(0.0),
            mono_ns: mono0,
            ppm: quantize_ppm(freq),
            freq_ppm: freq,
        });
        let realtime_error0 = rng.random_range(-2e6..2e6);
        let noise = Normal::new(0.0, self.noise_ns.max(0.0)).expect("finite deviation");
        let poll_ns = self.poll_s * 1e9;
        let mut last_poll = 0.0;
        let mut t = rng.random_range(0.0..poll_ns);
        while t < end_ns {
            // Realtime − UTC: MONO's advance against true time's, plus the initial error.
            let offset = clock.mono(t) - mono0 - t + realtime_error0;
            let measured = offset
                + if rng.random_bool(self.outliers.clamp(0.0, 1.0)) {
                    rng.random_range(1e6..4e6) * if rng.random_bool(0.5) { 1.0 } else { -1.0 }
                } else {
                    noise.sample(rng)
                };
            let since = (t - last_poll).max(1e9);
            let apparent_ppm =
                (measured / since * 1e6).clamp(-MAX_FREQUENCY_ERROR_PPM, MAX_FREQUENCY_ERROR_PPM);
            freq -= FREQUENCY_GAIN * apparent_ppm;
            let mut duration = rng.random_range(1e9..8e9);
            let mut slew_ppm = -measured / duration * 1e6;
            if slew_ppm.abs() > self.max_slew_ppm {
                slew_ppm = self.max_slew_ppm.copysign(slew_ppm);
                duration = measured.abs() / self.max_slew_ppm * 1e6;
            }
            clock.push_slew(t, freq + slew_ppm, freq);
            let next = t + poll_ns * rng.random_range(0.75..1.25);
            if t + duration < next.min(end_ns) {
                clock.push_slew(t + duration, freq, freq);
            }
            last_poll = t;
            t = next;
        }
        realtime_error0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Crystal, LinearClock};
    use rand::SeedableRng;

    fn daemon() -> Daemon {
        Daemon {
            poll_s: 16.0,
            noise_ns: 50e3,
            outliers: 0.05,
            max_slew_ppm: 500.0,
        }
    }

    #[test]
    fn keeps_realtime_near_utc_with_bounded_slews() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let mut clock = ClockModel::unslewed(
            Crystal::Linear(LinearClock {
                offset_ns: 3e6,
                drift_ppm: 80.0,
            }),
            0,
        );
        let mono0 = 3e6;
        let error0 = daemon().discipline(&mut clock, mono0, 3600e9, &mut rng);
        assert!(clock.slews.len() > 300, "{} slews", clock.slews.len());
        for s in &clock.slews {
            // The frequency estimate cancels the crystal's 80 ppm; slews stay within the limit.
            assert!((s.ppm - s.freq_ppm).abs() <= 500.0 + 1e-4, "{s:?}");
            assert!((s.freq_ppm + 80.0).abs() < 10.0, "{s:?}");
        }
        assert!(
            clock
                .slews
                .iter()
                .any(|s| (s.ppm - s.freq_ppm).abs() > 499.0)
        );
        // Realtime stays within a few ms of UTC over the hour.
        for i in 0..3600 {
            let t = i as f64 * 1e9;
            let offset = clock.mono(t) - mono0 - t + error0;
            assert!(offset.abs() < 6e6, "{offset} ns off at {i} s");
        }
    }
}
