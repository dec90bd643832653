//! The true relation between two guests' clocks, from what the guests measured against the
//! host's TSC: each guest's TSC offset from the host's (the shared page) and its clock readings
//! bracketed by TSC readings (every 10 ms). A CLOCK_MONOTONIC time of guest k becomes its TSC,
//! then the host's TSC, then the reference guest's TSC, then the reference's CLOCK_MONOTONIC —
//! with nothing of the analyzer's in the way.
use super::report::GuestReport;

/// One guest's clock against its TSC.
pub struct GuestClock {
    /// (CLOCK_MONOTONIC ns, TSC at that reading: the middle of its bracket), in time order.
    mono: Vec<(f64, f64)>,
    /// Guest TSC − host TSC (middle of the tightest bracket at the start).
    offset: f64,
    /// Half-width of that bracket plus half the widest pair bracket, in ticks.
    uncertainty_ticks: f64,
    /// TSC ticks per ns of CLOCK_MONOTONIC_RAW.
    ticks_per_ns: f64,
}

impl GuestClock {
    pub fn new(r: &GuestReport) -> GuestClock {
        let mono: Vec<(f64, f64)> = r
            .pairs
            .iter()
            .map(|p| (p.mono as f64, (p.t1 as f64 + p.t2 as f64) / 2.0))
            .collect();
        let widest = r.pairs.iter().map(|p| p.t2 - p.t1).max().unwrap_or(0) as f64;
        GuestClock {
            mono,
            offset: r.offset_start.mid(),
            uncertainty_ticks: r.offset_start.width() as f64 / 2.0 + widest / 2.0,
            ticks_per_ns: r.tsc_hz * 1e-9,
        }
    }

    /// The guest's TSC at its CLOCK_MONOTONIC time `t` (linear between readings; outside them,
    /// None).
    fn tsc_at(&self, t: f64) -> Option<f64> {
        interpolate(&self.mono, t, |p| p.0, |p| p.1)
    }

    /// The guest's CLOCK_MONOTONIC when its TSC read `tsc`.
    fn mono_at(&self, tsc: f64) -> Option<f64> {
        interpolate(&self.mono, tsc, |p| p.1, |p| p.0)
    }
}

/// Linear interpolation through points sorted by `x`.
fn interpolate<P>(
    points: &[P],
    at: f64,
    x: impl Fn(&P) -> f64,
    y: impl Fn(&P) -> f64,
) -> Option<f64> {
    let i = points.partition_point(|p| x(p) <= at);
    if i == 0 || i == points.len() {
        return None;
    }
    let (a, b) = (&points[i - 1], &points[i]);
    let f = (at - x(a)) / (x(b) - x(a));
    Some(y(a) + f * (y(b) - y(a)))
}

/// The truth between a guest and the reference guest.
pub struct Truth<'a> {
    pub guest: &'a GuestClock,
    pub reference: &'a GuestClock,
}

impl Truth<'_> {
    /// The reference's CLOCK_MONOTONIC at the instant the guest's read `t` (ns).
    pub fn at(&self, t: f64) -> Option<f64> {
        let host = self.guest.tsc_at(t)? - self.guest.offset;
        self.reference.mono_at(host + self.reference.offset)
    }

    /// How far the truth itself may be off (ns): both offset brackets and both clock readings.
    pub fn uncertainty_ns(&self) -> f64 {
        self.guest.uncertainty_ticks / self.guest.ticks_per_ns
            + self.reference.uncertainty_ticks / self.reference.ticks_per_ns
    }

    /// The true rate of the guest's CLOCK_MONOTONIC_RAW against the reference's, ppm (both
    /// count the host's TSC, each through its own calibration of it).
    pub fn raw_rate_ppm(&self) -> f64 {
        (self.reference.ticks_per_ns / self.guest.ticks_per_ns - 1.0) * 1e6
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock(offset: f64, points: &[(f64, f64)]) -> GuestClock {
        GuestClock {
            mono: points.to_vec(),
            offset,
            uncertainty_ticks: 10.0,
            ticks_per_ns: 2.0,
        }
    }

    #[test]
    fn maps_through_the_host_tsc() {
        // Guest: TSC = host + 1000, MONO = TSC / 2. Reference: TSC = host − 500, MONO = TSC / 2
        // + 7. At guest MONO 1000: guest TSC 2000, host 1000, reference TSC 500, MONO 257.
        let g = clock(1000.0, &[(0.0, 0.0), (10_000.0, 20_000.0)]);
        let r = clock(-500.0, &[(7.0, 0.0), (10_007.0, 20_000.0)]);
        let t = Truth {
            guest: &g,
            reference: &r,
        };
        assert!((t.at(1000.0).unwrap() - 257.0).abs() < 1e-9);
        assert_eq!(t.at(-5.0), None);
        assert!((t.uncertainty_ns() - 10.0).abs() < 1e-9);
        assert!(t.raw_rate_ppm().abs() < 1e-9);
    }
}
