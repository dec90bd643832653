//! The true relation between two guests' clocks, from what the guests measured against the
//! host's TSC: each guest's TSC offset from the host's (the shared page) and its clock readings
//! bracketed by TSC readings (every 10 ms). A CLOCK_MONOTONIC time of guest k becomes its TSC,
//! then the host's TSC, then the reference guest's TSC, then the reference's CLOCK_MONOTONIC —
//! with nothing of the analyzer's in the way.
//!
//! An arm64 guest's counter (CNTVCT_EL0: QEMU's virtual clock, i.e. the host's CLOCK_MONOTONIC,
//! in generic-timer ticks) is not the host's TSC plus a constant: its handshakes, every 250 ms
//! over the run, give the line from its counter to the host's TSC (least squares through their
//! middles), and the truth is as wide as the farthest handshake lies from that line plus its
//! half-width ([`HostMap`]).
use super::report::GuestReport;
use super::tscpage::Handshake;

/// How much wider than the median a handshake may be and still count ([`HostMap::fit`]).
const WIDTH_FACTOR: u64 = 4;

/// A guest counter → host TSC map: `host = slope · counter + intercept`, known to `± error`
/// host ticks at the handshakes it was fitted to.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HostMap {
    pub slope: f64,
    pub intercept: f64,
    /// Host ticks: the farthest a handshake's bracket lets the truth be from the line.
    pub error: f64,
    /// Host ticks: the largest distance of a handshake's middle from the line (how straight the
    /// counter runs against the host's TSC).
    pub max_residual: f64,
    /// Handshakes the line went through (of those measured, the narrow ones).
    pub used: usize,
}

impl HostMap {
    /// The counter is the host's TSC plus `offset` (x86_64 under TCG), known to `± half_width`.
    fn offset(offset: f64, half_width: f64) -> HostMap {
        HostMap {
            slope: 1.0,
            intercept: -offset,
            error: half_width,
            max_residual: 0.0,
            used: 1,
        }
    }

    /// The least-squares line through the middles of the narrow handshakes — at most
    /// [`WIDTH_FACTOR`] times the median width: a handshake the emulation stalled in is
    /// hundreds of µs wide, and its middle, though a true bound, would pull the line (seen:
    /// 650 µs off with two such among 36, 0.13 µs without them). None with fewer than two.
    pub fn fit(handshakes: &[Handshake]) -> Option<HostMap> {
        let mut widths: Vec<u64> = handshakes.iter().map(|h| h.g2 - h.g1).collect();
        widths.sort_unstable();
        let median = *widths.get(widths.len() / 2)?;
        let narrow: Vec<Handshake> = handshakes
            .iter()
            .copied()
            .filter(|h| h.g2 - h.g1 <= WIDTH_FACTOR * median.max(1))
            .collect();
        let handshakes = &narrow[..];
        if handshakes.len() < 2 {
            return None;
        }
        // Centred sums, so that 10¹⁸-sized counters lose no precision.
        let g0 = handshakes[0].g1 as f64;
        let h0 = handshakes[0].host as f64;
        let pts: Vec<(f64, f64, f64)> = handshakes
            .iter()
            .map(|h| {
                let mid = (h.g1 as f64 + h.g2 as f64) / 2.0 - g0;
                (mid, h.host as f64 - h0, (h.g2 - h.g1) as f64 / 2.0)
            })
            .collect();
        let n = pts.len() as f64;
        let (mx, my) = (
            pts.iter().map(|p| p.0).sum::<f64>() / n,
            pts.iter().map(|p| p.1).sum::<f64>() / n,
        );
        let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
        let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
        if sxx <= 0.0 {
            return None;
        }
        let slope = sxy / sxx;
        let b = my - slope * mx;
        let (mut error, mut max_residual) = (0.0f64, 0.0f64);
        for &(x, y, half) in &pts {
            let residual = (y - (slope * x + b)).abs();
            max_residual = max_residual.max(residual);
            error = error.max(residual + half * slope);
        }
        Some(HostMap {
            slope,
            intercept: h0 + b - slope * g0,
            error,
            max_residual,
            used: handshakes.len(),
        })
    }

    fn host(&self, counter: f64) -> f64 {
        self.slope * counter + self.intercept
    }

    fn counter(&self, host: f64) -> f64 {
        (host - self.intercept) / self.slope
    }
}

/// One guest's clock against its counter, and its counter against the host's TSC.
pub struct GuestClock {
    /// (CLOCK_MONOTONIC ns, counter at that reading: the middle of its bracket), in time order.
    mono: Vec<(f64, f64)>,
    /// Counter → host TSC.
    pub map: HostMap,
    /// Half the widest pair bracket, in counter ticks.
    pair_ticks: f64,
    /// Counter ticks per ns of CLOCK_MONOTONIC_RAW.
    ticks_per_ns: f64,
}

impl GuestClock {
    /// None for a guest whose handshakes do not give a line.
    pub fn new(r: &GuestReport) -> Option<GuestClock> {
        let mono: Vec<(f64, f64)> = r
            .pairs
            .iter()
            .map(|p| (p.mono as f64, (p.t1 as f64 + p.t2 as f64) / 2.0))
            .collect();
        let widest = r.pairs.iter().map(|p| p.t2 - p.t1).max().unwrap_or(0) as f64;
        let map = if r.handshakes.is_empty() {
            HostMap::offset(r.offset_start.mid(), r.offset_start.width() as f64 / 2.0)
        } else {
            HostMap::fit(&r.handshakes)?
        };
        Some(GuestClock {
            mono,
            map,
            pair_ticks: widest / 2.0,
            ticks_per_ns: r.tsc_hz * 1e-9,
        })
    }

    /// The guest's counter at its CLOCK_MONOTONIC time `t` (linear between readings; outside
    /// them, None).
    fn tsc_at(&self, t: f64) -> Option<f64> {
        interpolate(&self.mono, t, |p| p.0, |p| p.1)
    }

    /// The guest's CLOCK_MONOTONIC when its counter read `tsc`.
    fn mono_at(&self, tsc: f64) -> Option<f64> {
        interpolate(&self.mono, tsc, |p| p.1, |p| p.0)
    }

    /// Host TSC ticks per ns of this guest's CLOCK_MONOTONIC_RAW.
    fn host_ticks_per_ns(&self) -> f64 {
        self.ticks_per_ns * self.map.slope
    }

    /// The map's error and its largest residual in ns of this guest's raw clock.
    pub fn map_error_ns(&self) -> (f64, f64) {
        let per_ns = self.host_ticks_per_ns();
        (self.map.error / per_ns, self.map.max_residual / per_ns)
    }

    /// How far this guest's part of the truth may be off, ns: the map's error and the widest
    /// clock reading.
    fn uncertainty_ns(&self) -> f64 {
        self.map.error / self.host_ticks_per_ns() + self.pair_ticks / self.ticks_per_ns
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
        let host = self.guest.map.host(self.guest.tsc_at(t)?);
        self.reference.mono_at(self.reference.map.counter(host))
    }

    /// How far the truth itself may be off (ns): both counter → host maps and both clock
    /// readings.
    pub fn uncertainty_ns(&self) -> f64 {
        self.guest.uncertainty_ns() + self.reference.uncertainty_ns()
    }

    /// The true rate of the guest's CLOCK_MONOTONIC_RAW against the reference's, ppm (both
    /// count the host's TSC — directly or through the map — each through its own calibration).
    pub fn raw_rate_ppm(&self) -> f64 {
        (self.reference.host_ticks_per_ns() / self.guest.host_ticks_per_ns() - 1.0) * 1e6
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock(offset: f64, points: &[(f64, f64)]) -> GuestClock {
        GuestClock {
            mono: points.to_vec(),
            map: HostMap::offset(offset, 5.0),
            pair_ticks: 5.0,
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

    #[test]
    fn a_counter_at_another_rate_maps_through_the_fitted_line() {
        // An arm64-like guest: counter = (host − 3·10⁹) / 40 (62.5 MHz against a 2.5 GHz TSC),
        // handshakes 16 counter ticks wide, one of them 3 host ticks off the line.
        let hs: Vec<Handshake> = (0..9u64)
            .map(|i| {
                let host = 3_000_000_000 + i * 10_000_000;
                let g = (host - 3_000_000_000) / 40 + 1_000_000;
                Handshake {
                    g1: g - 8,
                    host: host + if i == 4 { 3 } else { 0 },
                    g2: g + 8,
                }
            })
            .collect();
        let m = HostMap::fit(&hs).unwrap();
        assert!((m.slope - 40.0).abs() < 1e-6, "{m:?}");
        let g = 1_000_000.0 + 1_000.0;
        assert!(
            (m.host(g) - (3_000_000_000.0 + 40_000.0)).abs() < 3.0,
            "{m:?}"
        );
        assert!((m.counter(m.host(g)) - g).abs() < 1e-6);
        assert!(m.max_residual > 2.0 && m.max_residual < 3.0, "{m:?}");
        assert!(m.error >= 8.0 * 40.0 && m.error < 8.0 * 40.0 + 3.0, "{m:?}");
        assert_eq!(m.used, 9);
        assert_eq!(HostMap::fit(&hs[..1]), None);
        // A stalled handshake (its bracket 2000 ticks wide, its middle far off) is left out.
        let mut stalled = hs.clone();
        stalled[2].g2 += 2000;
        let s = HostMap::fit(&stalled).unwrap();
        assert_eq!(s.used, 8);
        assert!(
            (s.slope - 40.0).abs() < 1e-6 && s.max_residual < 3.0,
            "{s:?}"
        );
    }
}
