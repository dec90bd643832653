//! Undoing NTP slewing: from a trace's clock samples, the map from its recorded clock
//! (CLOCK_MONOTONIC, as the events carry it) to the node's CLOCK_MONOTONIC_RAW, with a bound on
//! its error. Pure functions over the samples; no I/O.
//!
//! # The relation
//!
//! The kernel derives both clocks from one clocksource counter. CLOCK_MONOTONIC_RAW (RAW) runs at
//! the counter's nominal rate; CLOCK_MONOTONIC (MONO) runs at that rate times the frequency
//! correction NTP or chrony asked for (`adjtimex`), which the kernel changes at discrete instants
//! (a daemon's update, the kernel PLL's once-a-second step, a slew's start and end). So MONO =
//! f(RAW) with f continuous, increasing and piecewise linear. Each sample of format version 2
//! reads MONO, RAW, MONO back to back: the true f(raw) lies in `[monotonic_ns,
//! monotonic_after_ns]` (the bracket; 40–60 ns wide on a development VM).
//!
//! # The fit
//!
//! The samples are cut greedily into maximal runs through which one straight line passes inside
//! every bracket (the test is exact: the upper hull of the brackets' lower ends must stay below
//! the lower hull of their upper ends); each run gets the line with the most room on both sides.
//! Consecutive runs are joined where their lines meet when that is between the last sample of one
//! and the first of the next (the instant the rate switched, reconstructed from both sides, so a
//! 500 ppm step between two samples 20 ms apart leaves no chord error of microseconds), and by
//! the chord between the two lines' values at those samples otherwise (nearly parallel lines). A
//! linear clock gives one piece; an hour of samples with a few rate changes gives a few pieces.
//! [`SlewCorrection::to_raw`] is the inverse of that map.
//!
//! # The bound
//!
//! The bound does not trust the fit: for every interval between two samples it computes where f
//! can be under the following **assumption**, and how far the fitted map can be from there.
//!
//! > f's rate changes at instants with at least two whole intervals between samples between any
//! > two of them (so at least 60 ms apart at the agent's 20 ms period; NTP daemons change it
//! > seconds apart). Hence within an interval between two consecutive samples the rate changes at
//! > most once, from the rate f has over the previous interval to the rate it has over the next
//! > one (both known from the brackets to within their widths over the interval's length).
//! > Apart from such changes, the rate drifts by at most [`RATE_DRIFT_PPM_PER_S`] (a crystal's
//! > temperature moves it by ppm per minute). The readings are integers: each bracket is widened
//! > by [`READING_SLACK_NS`] on both sides. In the first (last) interval the rate before (after)
//! > the change is unknown, so f is only known to lie between the chord and the next (previous)
//! > interval's line; with two samples only, f's rate is taken to stay within
//! > [`WORST_RATE_PPM`] of the chord's.
//!
//! Concretely, inside interval `i` f is one of: the line of interval `i − 1` continued up to the
//! switch, then the line of interval `i + 1` (the maximum of the two lines when the rate rose,
//! their minimum when it fell, either when the data cannot tell). Every line is taken over all
//! the slopes and values its brackets allow, so the set is larger than needed, never smaller;
//! it is also cut by the lines through the interval's own brackets at the lowest and highest
//! possible rate. The bound in an interval is the largest distance from the fitted map to the
//! edge of that set (found at the set's corners), plus the drift allowance, converted from
//! MONO to RAW by the lowest rate possible there. Where the samples visibly contradict the
//! assumption — the set is empty, or the rates over intervals `i − 1`, `i` and `i + 1` all
//! differ (beyond what the brackets allow) while `i − 2` or `i + 2` differs from its neighbour
//! too, which takes two changes too close together — the interval gets the bound of a rate
//! anywhere within [`WORST_RATE_PPM`] of the rates around it. (Two changes too close together
//! can also go unseen, when the rates they leave look like one change: the assumption is
//! needed.)
//!
//! Outside the samples' span the first and last pieces continue, and the bound grows with the
//! distance at [`WORST_RATE_PPM`] (plus the last interval's slope uncertainty): nothing is known
//! of what the daemon did there.
//!
//! The code follows that order: `samples` (checks, relative coordinates), `fit` (runs and their
//! junctions), `bound` (the region f can be in, per interval), `summary` (what `info` shows).

mod bound;
mod fit;
mod samples;
mod summary;

pub use summary::{RateHistory, SlewSummary};

use tsync_common::format::ClockSample;

use crate::input::slew::bound::interval_bound;
use crate::input::slew::fit::{fit_runs, join};
use crate::input::slew::samples::{Prepared, check};
use crate::input::slew::summary::{history, summarize};
use crate::model::PiecewiseMap;

/// Samples further apart than this (on RAW) are too sparse for the model of rate changes (at
/// most one per interval, the neighbours' rates before and after): such an interval gets the
/// worst-case bound, any rate within [`WORST_RATE_PPM`] of those seen around it (a 500 ppm slew
/// could hide 25 µs between two samples 100 ms apart). The agent samples every 20 ms; a loaded
/// virtual machine can stall it for a few hundred.
pub const DENSE_GAP_NS: u64 = 100_000_000;
/// Samples further apart than this are refused: the worst-case bound would exceed ~60 µs, and
/// such a gap means the samples were never dense (a version 1 agent sampled every 0.5 s, the
/// synthetic generator every second) or the recording was interrupted.
pub const MAX_GAP_NS: u64 = 500_000_000;
/// The largest rate difference assumed where nothing is known (outside the span, two samples
/// only): the kernel's limit on NTP's frequency correction and on `adjtime` slewing.
pub const WORST_RATE_PPM: f64 = 500.0;
/// How fast the rate may drift by itself between two changes, ppm per second.
pub const RATE_DRIFT_PPM_PER_S: f64 = 10.0;
/// Widening of every bracket, each side: the readings are integer nanoseconds (the raw reading is
/// rounded down, so is each monotonic one) and the kernel steps its clock multiplier by ±1
/// between ticks.
pub const READING_SLACK_NS: f64 = 2.0;

/// Why a trace's slewing cannot be undone; the recorded timebase is then used.
#[derive(Clone, Debug, PartialEq)]
pub enum SlewUnavailable {
    /// Format version 1: samples without the second monotonic reading.
    Unbracketed,
    /// Fewer than two samples.
    TooFewSamples {
        /// Samples in the trace.
        found: usize,
    },
    /// Two consecutive samples further apart than [`MAX_GAP_NS`].
    TooSparse {
        /// Index of the first sample of the gap.
        index: usize,
        /// The gap, ns of RAW.
        gap_ns: u64,
        /// Where the gap starts, on the recorded clock (ns).
        at_ns: u64,
    },
    /// The samples do not describe increasing clocks.
    NotIncreasing {
        /// Index of the sample where it shows.
        index: usize,
        /// What is wrong there.
        what: &'static str,
    },
}

impl std::fmt::Display for SlewUnavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SlewUnavailable::Unbracketed => write!(f, "format version 1 samples carry no bracket")?,
            SlewUnavailable::TooFewSamples { found } => write!(
                f,
                "{found} clock sample(s); undoing the slewing needs at least 2"
            )?,
            SlewUnavailable::TooSparse {
                index,
                gap_ns,
                at_ns,
            } => write!(
                f,
                "clock samples {index} and {} are {:.1} ms apart (from {:.6} s on the recorded \
                 clock); undoing the slewing needs them at most {} ms apart",
                index + 1,
                *gap_ns as f64 * 1e-6,
                *at_ns as f64 * 1e-9,
                MAX_GAP_NS / 1_000_000
            )?,
            SlewUnavailable::NotIncreasing { index, what } => {
                write!(f, "clock sample {index}: {what}")?
            }
        }
        f.write_str("; the recorded timebase is used")
    }
}

impl std::error::Error for SlewUnavailable {}

/// The map from a trace's recorded clock to its CLOCK_MONOTONIC_RAW, fitted through its
/// bracketed clock samples (see the module documentation for the method and the assumption
/// behind the bound).
#[derive(Clone, Debug)]
pub struct SlewCorrection {
    /// The trace's recorded clock (CLOCK_MONOTONIC as the events carry it) → its
    /// CLOCK_MONOTONIC_RAW.
    pub to_raw: PiecewiseMap,
    /// The inverse: CLOCK_MONOTONIC_RAW → the recorded clock.
    pub from_raw: PiecewiseMap,
    /// Largest possible |to_raw(t) − true RAW at t| for t within the samples' span (ns), under
    /// the documented assumption.
    pub bound_ns: f64,
    /// Span of the samples on the recorded clock (ns).
    pub span_ns: (f64, f64),
    /// Raw reading of every sample.
    raw: Vec<u64>,
    /// Bound per interval between samples (ns of RAW).
    bounds: Vec<f64>,
    /// Growth of the bound per ns outside the span: before the first sample, after the last.
    outside_rate: (f64, f64),
    summary: SlewSummary,
}

impl SlewCorrection {
    /// Fits the map through a trace's clock samples (in file order); `bracketed` is
    /// [`TraceReader::samples_bracketed`](tsync_common::format::TraceReader::samples_bracketed).
    pub fn from_samples(samples: &[ClockSample], bracketed: bool) -> Result<Self, SlewUnavailable> {
        if !bracketed {
            return Err(SlewUnavailable::Unbracketed);
        }
        if samples.len() < 2 {
            return Err(SlewUnavailable::TooFewSamples {
                found: samples.len(),
            });
        }
        check(samples)?;
        let p = Prepared::new(samples);
        let runs = fit_runs(&p)?;
        let knots = join(&p, &runs);
        if let Some(k) = knots.windows(2).position(|w| w[1].1 <= w[0].1) {
            let index =
                p.x.partition_point(|&x| x <= knots[k + 1].0)
                    .saturating_sub(1);
            return Err(SlewUnavailable::NotIncreasing {
                index,
                what: "the samples do not determine an increasing clock",
            });
        }
        // The last chord lies on the last run's line, which continues after it.
        let g = PiecewiseMap::through_knots(&knots, None);
        let n = samples.len();
        let mut scratch = Vec::new();
        let bounds: Vec<f64> = (0..n - 1)
            .map(|i| interval_bound(&p, i, &g, &mut scratch))
            .collect();
        // Rounding of absolute times in f64 (the maps work on absolute nanoseconds).
        let rounding = 16.0 * f64::EPSILON * (p.raw0 as f64 + p.x[n - 1]).max(p.mono0 as f64);
        let bounds: Vec<f64> = bounds.into_iter().map(|b| b + rounding).collect();
        let bound_ns = bounds.iter().copied().fold(0.0, f64::max);
        let slope_uncertainty = |i: usize| p.slope_range(i).1 - p.slope_range(i).0;
        let outside_rate = (
            WORST_RATE_PPM * 1e-6 + slope_uncertainty(0),
            WORST_RATE_PPM * 1e-6 + slope_uncertainty(n - 2),
        );
        let absolute: Vec<(f64, f64)> = knots
            .iter()
            .map(|&(x, y)| (x + p.raw0 as f64, y + p.mono0 as f64))
            .collect();
        let from_raw = PiecewiseMap::through_knots(&absolute, None);
        let to_raw = from_raw.inverse();
        let span_ns = (absolute[0].1, absolute[absolute.len() - 1].1);
        let mut summary = summarize(samples, &p, &knots, &g);
        summary.bound_ns = bound_ns;
        summary.history = history(&to_raw, span_ns);
        Ok(SlewCorrection {
            to_raw,
            from_raw,
            bound_ns,
            span_ns,
            raw: samples.iter().map(|s| s.monotonic_raw_ns).collect(),
            bounds,
            outside_rate,
            summary,
        })
    }

    /// The bound at recorded time `t_ns` (ns of RAW): the bound of the interval between samples
    /// that holds it (at most [`bound_ns`](Self::bound_ns)); outside the span, the bound at its
    /// edge plus the distance times [`WORST_RATE_PPM`] (and the edge's slope uncertainty).
    pub fn bound_at(&self, t_ns: f64) -> f64 {
        let x = self.to_raw.apply(t_ns);
        let first = self.raw[0] as f64;
        let last = self.raw[self.raw.len() - 1] as f64;
        if x < first {
            self.bounds[0] + (first - x) * self.outside_rate.0
        } else if x > last {
            self.bounds[self.bounds.len() - 1] + (x - last) * self.outside_rate.1
        } else {
            let i = self
                .raw
                .partition_point(|&r| r as f64 <= x)
                .saturating_sub(1)
                .min(self.bounds.len() - 1);
            self.bounds[i]
        }
    }

    /// The largest bound over recorded times `[t0, t1]`: what converting every event of that
    /// span may err by. Recordings take samples before their first event and after their last,
    /// so the edge intervals (whose rates before and after are unknown) usually hold no event.
    pub fn bound_between(&self, t0: f64, t1: f64) -> f64 {
        let (x0, x1) = (self.to_raw.apply(t0), self.to_raw.apply(t1.max(t0)));
        let interval = |x: f64| {
            self.raw
                .partition_point(|&r| r as f64 <= x)
                .saturating_sub(1)
                .min(self.bounds.len() - 1)
        };
        let inside = self.bounds[interval(x0)..=interval(x1)]
            .iter()
            .copied()
            .fold(0.0, f64::max);
        inside.max(self.bound_at(t0)).max(self.bound_at(t1))
    }

    /// What `info` shows: rates, phase moved, pieces, bound, rate history.
    pub fn summary(&self) -> SlewSummary {
        self.summary.clone()
    }
}

#[cfg(test)]
mod tests;
