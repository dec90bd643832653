//! Clément & Dagenais (2009): least squares on NTP-style offset samples from exchanges.
//!
//! Each exchange between a and b gives the midpoint of its two events on each clock; their
//! difference d = mid_b − mid_a is the offset sample at t = mid_a (eq. 3), and half the round trip
//! net of the remote holding time is its error margin e (§12). A straight line d = d0 + x·t is
//! fitted by least squares (eqs. 4–6); the pair map is t_b = d0 + (1 + x)·t_a.
//!
//! The optional outlier filter drops exchanges whose e exceeds mean(e) + z·σ(e). It is one-sided,
//! unlike the paper's interval, because the smallest margins are the best samples. So that memory
//! does not grow with the trace, the sums of the fit are kept per bin of e (1/16 octave, ~4.4 %
//! wide); the filter keeps the bins that start below the threshold, which places the cut within
//! one bin of the exact one. The mean and σ of e are exact.

use crate::model::Affine;

const BINS_PER_OCTAVE: f64 = 16.0;
const BINS: usize = 64 * 16 + 2;

#[derive(Clone, Copy, Debug, Default)]
struct Sums {
    n: f64,
    t: f64,
    d: f64,
    tt: f64,
    td: f64,
    dd: f64,
}

impl Sums {
    fn add(&mut self, o: &Sums) {
        self.n += o.n;
        self.t += o.t;
        self.d += o.d;
        self.tt += o.tt;
        self.td += o.td;
        self.dd += o.dd;
    }
}

/// Accumulates the offset samples of one pair (a < b).
#[derive(Clone, Debug, Default)]
pub struct LinRegAccumulator {
    /// Origin of the local frame (first sample), doubled ns: (2·t, 2·d).
    origin: Option<(i64, i64)>,
    bins: Vec<Sums>,
    samples: u64,
    e_sum: f64,
    e_sq: f64,
}

/// The fit of one pair.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct LinRegFit {
    /// t_b = offset_ns + drift · t_a.
    pub line: Affine,
    /// Offset samples (one per exchange) accumulated, before the outlier filter.
    pub samples: u64,
    /// Samples left after the outlier filter.
    pub used: u64,
    /// Residual standard error of the offset samples (eq. 6), ns; None below 3 samples.
    pub residual_std_ns: Option<f64>,
    /// Mean per-exchange error margin e, ns.
    pub mean_error_ns: f64,
}

fn bin_of(e: f64) -> usize {
    if e < 1.0 {
        0
    } else {
        ((e.log2() * BINS_PER_OCTAVE) as usize + 1).min(BINS - 1)
    }
}

fn bin_start(i: usize) -> f64 {
    if i == 0 {
        0.0
    } else {
        ((i - 1) as f64 / BINS_PER_OCTAVE).exp2()
    }
}

impl LinRegAccumulator {
    /// Adds one exchange given as the sums of its two event times on each clock (2·midpoint, ns)
    /// and its error margin e (ns).
    pub fn add(&mut self, mid2_a: i64, mid2_b: i64, e: f64) {
        let d2 = mid2_b - mid2_a;
        let (t0, d0) = *self.origin.get_or_insert((mid2_a, d2));
        if self.bins.is_empty() {
            self.bins = vec![Sums::default(); BINS];
        }
        let t = (mid2_a - t0) as f64 / 2.0;
        let d = (d2 - d0) as f64 / 2.0;
        let b = &mut self.bins[bin_of(e)];
        b.n += 1.0;
        b.t += t;
        b.d += d;
        b.tt += t * t;
        b.td += t * d;
        b.dd += d * d;
        self.samples += 1;
        self.e_sum += e;
        self.e_sq += e * e;
    }

    /// Fits the line; `filter_z` enables the one-sided outlier filter (e.g. 1.64 for the paper's
    /// 90 %). None if fewer than two samples or all at one time.
    pub fn fit(&self, filter_z: Option<f64>) -> Option<LinRegFit> {
        let (t0, d0) = self.origin?;
        let n_all = self.samples as f64;
        let mean_e = self.e_sum / n_all;
        let threshold = match filter_z {
            Some(z) if self.samples > 2 => {
                let var = ((self.e_sq - n_all * mean_e * mean_e) / (n_all - 1.0)).max(0.0);
                mean_e + z * var.sqrt()
            }
            _ => f64::INFINITY,
        };
        let mut s = Sums::default();
        for (i, b) in self.bins.iter().enumerate() {
            if bin_start(i) <= threshold {
                s.add(b);
            }
        }
        let n = s.n;
        let delta = n * s.tt - s.t * s.t;
        if n < 2.0 || delta <= 0.0 {
            return None;
        }
        let x = (n * s.td - s.t * s.d) / delta;
        let d0_local = (s.tt * s.d - s.t * s.td) / delta;
        let residual_std_ns = (n > 2.0).then(|| {
            let ssr = (s.dd - d0_local * s.d - x * s.td).max(0.0);
            (ssr / (n - 2.0)).sqrt()
        });
        // d(t_a) = d0/2 + d0_local + x (t_a − t0/2);  t_b = t_a + d(t_a).
        let t0 = t0 as f64 / 2.0;
        let offset_ns = d0 as f64 / 2.0 + d0_local - x * t0;
        Some(LinRegFit {
            line: Affine {
                offset_ns,
                drift: 1.0 + x,
            },
            samples: self.samples,
            used: n as u64,
            residual_std_ns,
            mean_error_ns: mean_e,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovers_a_linear_offset() {
        // clock_b = 1000 + 1.0001 t_a; symmetric delay 50 µs.
        let mut acc = LinRegAccumulator::default();
        for k in 0..100i64 {
            let t1 = 1_000_000_000 + k * 10_000_000;
            let to_b = |t: i64| 1000 + t + t / 10_000;
            let t2 = to_b(t1 + 50_000);
            let t3 = t2 + 1000;
            let t4 = t1 + 50_000 + 1000 + 50_000;
            let _ = t3;
            acc.add(t1 + t4, t2 + t3, 50_000.0);
        }
        let fit = acc.fit(None).unwrap();
        assert!((fit.line.drift - 1.0001).abs() < 1e-9, "{fit:?}");
        assert!(
            (fit.line.apply(2e9) - (1000.0 + 2e9 + 2e5)).abs() < 2.0,
            "{fit:?}"
        );
    }

    #[test]
    fn filter_drops_delayed_exchanges() {
        // Offset 1000 ns, no drift; 10 % of the exchanges are delayed one way by 500 µs.
        let mut acc = LinRegAccumulator::default();
        for k in 0..1000i64 {
            let t1 = 1_000_000_000 + k * 1_000_000;
            let late = if k % 10 == 0 { 500_000 } else { 0 };
            let t2 = t1 + 1000 + 20_000 + late;
            let t3 = t2 + 1000;
            let t4 = t3 - 1000 + 20_000;
            let e = ((t4 - t1) - (t3 - t2)) as f64 / 2.0;
            acc.add(t1 + t4, t2 + t3, e);
        }
        let raw = acc.fit(None).unwrap();
        let filtered = acc.fit(Some(1.64)).unwrap();
        assert_eq!(filtered.used, 900);
        assert!(
            (filtered.line.apply(1.5e9) - 1.5e9 - 1000.0).abs() < 1.0,
            "{filtered:?}"
        );
        assert!(
            (raw.line.apply(1.5e9) - 1.5e9 - 1000.0).abs() > 10_000.0,
            "{raw:?}"
        );
        assert!(filtered.residual_std_ns.unwrap() < raw.residual_std_ns.unwrap());
    }
}
