//! Transfer-time histograms with logarithmic bins (the layout of Poirier's LTTV evaluation module).
//!
//! Message transfer times span six decades (sub-µs on loopback, ms across a WAN), so linear bins
//! either hide the short times or need millions of bins. The layout, fixed so that histograms of
//! different runs compare bin by bin:
//! - bin 0: (−∞, 0] — inversions (received before sent, or at the same nanosecond);
//! - bin 1: (0, 1 µs);
//! - bins 2..=999: 998 logarithmic bins from 1 µs to 1 s, each 10^(6/998) times wider than the
//!   one before;
//! - bin 1000: [1 s, ∞).

use serde::Serialize;

/// Number of bins.
pub const BINS: usize = 1001;
/// Lower edge of the first logarithmic bin, in ns (1 µs).
const LOG_START_NS: f64 = 1e3;
/// Upper edge of the last logarithmic bin, in ns (1 s).
const LOG_END_NS: f64 = 1e9;
/// Number of logarithmic bins between 1 µs and 1 s.
const LOG_BINS: usize = BINS - 3;

/// A histogram of durations in ns (streaming: one `add` per value, constant memory).
#[derive(Clone, Debug, PartialEq)]
pub struct LogHistogram {
    counts: Vec<u64>,
}

/// One bin: `[lo_ns, hi_ns)` (bin 0 is `(−∞, 0]`, bin 1 is `(0, 1 µs)`); `None` is infinite.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Bin {
    /// Position of the bin, 0..[`BINS`].
    pub index: usize,
    /// Lower edge in ns; None for bin 0 (−∞).
    pub lo_ns: Option<f64>,
    /// Upper edge in ns; None for the last bin (+∞).
    pub hi_ns: Option<f64>,
    /// Values that fell in the bin.
    pub count: u64,
}

impl Default for LogHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl LogHistogram {
    /// An empty histogram with all [`BINS`] bins at 0.
    pub fn new() -> Self {
        LogHistogram {
            counts: vec![0; BINS],
        }
    }

    /// The bin a duration of `ns` falls in.
    pub fn bin_of(ns: i64) -> usize {
        if ns <= 0 {
            0
        } else if (ns as f64) < LOG_START_NS {
            1
        } else if (ns as f64) >= LOG_END_NS {
            BINS - 1
        } else {
            let position = (ns as f64 / LOG_START_NS).log10() / 6.0 * LOG_BINS as f64;
            // Guard the float edge cases against the exact edges.
            let mut k = (position.floor() as usize).min(LOG_BINS - 1);
            if (ns as f64) < Self::log_edge(k) {
                k -= 1;
            } else if k + 1 < LOG_BINS && (ns as f64) >= Self::log_edge(k + 1) {
                k += 1;
            }
            2 + k
        }
    }

    /// Lower edge in ns of logarithmic bin `k` (0..=998; 998 is 1 s).
    fn log_edge(k: usize) -> f64 {
        LOG_START_NS * 10f64.powf(6.0 * k as f64 / LOG_BINS as f64)
    }

    /// Edges of bin `index`: `(lo, hi)`, `None` for infinite.
    pub fn edges(index: usize) -> (Option<f64>, Option<f64>) {
        match index {
            0 => (None, Some(0.0)),
            1 => (Some(0.0), Some(LOG_START_NS)),
            i if i == BINS - 1 => (Some(LOG_END_NS), None),
            i => (Some(Self::log_edge(i - 2)), Some(Self::log_edge(i - 1))),
        }
    }

    /// Counts one duration of `ns` (≤ 0 for an inversion).
    pub fn add(&mut self, ns: i64) {
        self.counts[Self::bin_of(ns)] += 1;
    }

    /// Adds all counts of `other` (e.g. histograms of several runs or of both directions).
    pub fn merge(&mut self, other: &LogHistogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
    }

    /// Values counted in bin `index` (panics if `index ≥ BINS`).
    pub fn count(&self, index: usize) -> u64 {
        self.counts[index]
    }

    /// Values counted in all bins.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// All bins in order, including empty ones.
    pub fn bins(&self) -> impl Iterator<Item = Bin> + '_ {
        self.counts.iter().enumerate().map(|(index, &count)| {
            let (lo_ns, hi_ns) = Self::edges(index);
            Bin {
                index,
                lo_ns,
                hi_ns,
                count,
            }
        })
    }

    /// The bins that hold at least one value (what reports and plots show).
    pub fn non_empty(&self) -> Vec<Bin> {
        self.bins().filter(|b| b.count > 0).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn layout_matches_the_lttv_evaluation() {
        assert_eq!(LogHistogram::bin_of(-5), 0);
        assert_eq!(LogHistogram::bin_of(0), 0);
        assert_eq!(LogHistogram::bin_of(1), 1);
        assert_eq!(LogHistogram::bin_of(999), 1);
        assert_eq!(LogHistogram::bin_of(1000), 2);
        assert_eq!(LogHistogram::bin_of(999_999_999), 999);
        assert_eq!(LogHistogram::bin_of(1_000_000_000), 1000);
        assert_eq!(LogHistogram::edges(0), (None, Some(0.0)));
        assert_eq!(LogHistogram::edges(1000), (Some(1e9), None));
        let (lo, hi) = LogHistogram::edges(2);
        assert_eq!(lo, Some(1000.0));
        let ratio = hi.unwrap() / lo.unwrap();
        assert!((ratio - 10f64.powf(6.0 / 998.0)).abs() < 1e-12);
        // 1 ms = 10^3 µs is exactly 3/6 of the way: the edge of log bin 499.
        assert_eq!(LogHistogram::bin_of(1_000_000), 2 + 499);
    }

    #[test]
    fn counts_and_merges() {
        let mut h = LogHistogram::new();
        for ns in [-3, 0, 500, 20_000, 20_001, 2_000_000_000] {
            h.add(ns);
        }
        assert_eq!(h.total(), 6);
        assert_eq!(h.count(0), 2);
        let mut both = h.clone();
        both.merge(&h);
        assert_eq!(both.total(), 12);
        let bins = h.non_empty();
        assert_eq!(bins.len(), 4);
        assert_eq!(bins[2].count, 2);
    }

    proptest! {
        #[test]
        fn every_value_lies_inside_its_bin(ns in any::<i64>()) {
            let (lo, hi) = LogHistogram::edges(LogHistogram::bin_of(ns));
            let x = ns as f64;
            if let Some(hi) = hi {
                // bin 0 includes 0 itself.
                prop_assert!(x < hi || (x == 0.0 && hi == 0.0));
            }
            if let Some(lo) = lo {
                prop_assert!(x >= lo);
            }
        }
    }
}
