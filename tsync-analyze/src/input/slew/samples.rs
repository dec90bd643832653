//! The samples as the fit and the bound read them: checked (increasing, dense enough), then
//! relative to the first one with each bracket widened by the readings' slack.

use tsync_common::format::ClockSample;

use crate::input::slew::{MAX_GAP_NS, READING_SLACK_NS, SlewUnavailable};

/// Checks that the samples describe increasing clocks, at most [`MAX_GAP_NS`] apart.
pub(super) fn check(samples: &[ClockSample]) -> Result<(), SlewUnavailable> {
    let not_increasing = |index, what| Err(SlewUnavailable::NotIncreasing { index, what });
    for (i, s) in samples.iter().enumerate() {
        if s.monotonic_after_ns < s.monotonic_ns {
            return not_increasing(i, "its second monotonic reading is before its first");
        }
        if i == 0 {
            continue;
        }
        let prev = &samples[i - 1];
        if s.monotonic_raw_ns <= prev.monotonic_raw_ns {
            return not_increasing(i, "the raw clock did not advance since the sample before");
        }
        if s.monotonic_ns <= prev.monotonic_ns || s.monotonic_after_ns <= prev.monotonic_after_ns {
            return not_increasing(
                i,
                "the monotonic clock did not advance since the sample before",
            );
        }
        let gap_ns = s.monotonic_raw_ns - prev.monotonic_raw_ns;
        if gap_ns > MAX_GAP_NS {
            return Err(SlewUnavailable::TooSparse {
                index: i - 1,
                gap_ns,
                at_ns: prev.monotonic_ns,
            });
        }
    }
    Ok(())
}

/// The samples relative to the first one (exact in f64 for traces up to 104 days long), each
/// bracket widened by [`READING_SLACK_NS`].
pub(super) struct Prepared {
    pub(super) raw0: u64,
    pub(super) mono0: u64,
    /// RAW − raw0.
    pub(super) x: Vec<f64>,
    /// Bracket low end − mono0 (widened).
    pub(super) a: Vec<f64>,
    /// Bracket high end − mono0 (widened).
    pub(super) b: Vec<f64>,
}

impl Prepared {
    pub(super) fn new(samples: &[ClockSample]) -> Self {
        let raw0 = samples[0].monotonic_raw_ns;
        let mono0 = samples[0].monotonic_ns;
        let rel = |v: u64, base: u64| (v as i128 - base as i128) as f64;
        Prepared {
            raw0,
            mono0,
            x: samples
                .iter()
                .map(|s| rel(s.monotonic_raw_ns, raw0))
                .collect(),
            a: samples
                .iter()
                .map(|s| rel(s.monotonic_ns, mono0) - READING_SLACK_NS)
                .collect(),
            b: samples
                .iter()
                .map(|s| rel(s.monotonic_after_ns, mono0) + READING_SLACK_NS)
                .collect(),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.x.len()
    }

    /// The slopes f can have on average over interval `i` (between samples `i` and `i + 1`).
    pub(super) fn slope_range(&self, i: usize) -> (f64, f64) {
        let h = self.x[i + 1] - self.x[i];
        (
            (self.a[i + 1] - self.b[i]) / h,
            (self.b[i + 1] - self.a[i]) / h,
        )
    }
}
