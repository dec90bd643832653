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

use serde::Serialize;
use tsync_common::format::ClockSample;

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

/// What `info` shows of a trace's slewing: how much was undone, and how well.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct SlewSummary {
    /// Clock samples used.
    pub samples: usize,
    /// First and last sample on the recorded clock (ns).
    pub first_ns: f64,
    /// Last sample on the recorded clock (ns).
    pub last_ns: f64,
    /// Width of the samples' brackets (ns): smallest, median, largest.
    pub bracket_ns: [u64; 3],
    /// Largest interval between two samples (ns of RAW).
    pub max_gap_ns: u64,
    /// Lowest rate of the recorded clock against CLOCK_MONOTONIC_RAW over the pieces that last
    /// at least 100 ms (a shorter piece's rate is uncertain by ppm; all pieces if none does),
    /// ppm (`--clock-skew` included).
    pub rate_min_ppm: f64,
    /// Highest rate over those pieces, ppm.
    pub rate_max_ppm: f64,
    /// Mean rate over the span, ppm.
    pub rate_mean_ppm: f64,
    /// Largest distance of the recorded clock from its best straight line over RAW (least
    /// squares through the samples), ns: the phase the slewing moved (0 for one rate).
    pub max_phase_ns: f64,
    /// Pieces of the map.
    pub pieces: usize,
    /// Largest possible error of the map within the span, ns of RAW.
    pub bound_ns: f64,
    /// The rate over time.
    pub history: RateHistory,
}

/// The rate of the recorded clock against RAW, step by step over the span.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct RateHistory {
    /// Length of a step, s: 10 for spans up to 10 min, 60 up to 6 h, 600 beyond.
    pub step_s: f64,
    /// Where the first step starts, on the recorded clock (ns); the last one ends at `last_ns`.
    pub start_ns: f64,
    /// Mean rate over each step, ppm.
    pub ppm: Vec<f64>,
}

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

/// The summary of a fit, but for its bound and history, which the caller fills in.
fn summarize(
    samples: &[ClockSample],
    p: &Prepared,
    knots: &[(f64, f64)],
    g: &PiecewiseMap,
) -> SlewSummary {
    let n = samples.len();
    let mut widths: Vec<u64> = samples.iter().map(ClockSample::bracket_ns).collect();
    widths.sort_unstable();
    let max_gap_ns = samples
        .windows(2)
        .map(|w| w[1].monotonic_raw_ns - w[0].monotonic_raw_ns)
        .max()
        .unwrap_or(0);
    let ppm = |rate: f64| (rate - 1.0) * 1e6;
    // Each piece with its length (the last one ends with the span).
    let pieces = g.pieces();
    let lengths = pieces.iter().enumerate().map(|(k, piece)| {
        let end = pieces.get(k + 1).map_or(p.x[n - 1], |next| next.start_ns);
        (piece.line.drift, end - piece.start_ns)
    });
    let long: Vec<f64> = lengths
        .clone()
        .filter(|&(_, len)| len >= 100e6)
        .map(|(rate, _)| rate)
        .collect();
    let rates = if long.is_empty() {
        lengths.map(|(rate, _)| rate).collect()
    } else {
        long
    };
    let rate_min = rates.iter().copied().fold(f64::INFINITY, f64::min);
    let rate_max = rates.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let span_raw = p.x[n - 1];
    let rate_mean = (g.apply(span_raw) - g.apply(0.0)) / span_raw;
    // Least squares through the bracket midpoints; g minus that line is piecewise linear,
    // so its largest distance is at a knot.
    let mid: Vec<f64> = (0..n).map(|j| (p.a[j] + p.b[j]) / 2.0).collect();
    let mean_x = p.x.iter().sum::<f64>() / n as f64;
    let mean_y = mid.iter().sum::<f64>() / n as f64;
    let (sxy, sxx) =
        p.x.iter()
            .zip(&mid)
            .fold((0.0, 0.0), |(sxy, sxx), (&x, &y)| {
                (
                    sxy + (x - mean_x) * (y - mean_y),
                    sxx + (x - mean_x) * (x - mean_x),
                )
            });
    let slope = if sxx > 0.0 { sxy / sxx } else { 1.0 };
    let max_phase_ns = knots
        .iter()
        .map(|&(x, y)| (y - (mean_y + slope * (x - mean_x))).abs())
        .fold(0.0, f64::max);
    SlewSummary {
        samples: n,
        first_ns: knots[0].1 + p.mono0 as f64,
        last_ns: knots[knots.len() - 1].1 + p.mono0 as f64,
        bracket_ns: [widths[0], widths[n / 2], widths[n - 1]],
        max_gap_ns,
        rate_min_ppm: ppm(rate_min),
        rate_max_ppm: ppm(rate_max),
        rate_mean_ppm: ppm(rate_mean),
        max_phase_ns,
        pieces: g.pieces().len(),
        bound_ns: 0.0,
        history: RateHistory {
            step_s: 0.0,
            start_ns: 0.0,
            ppm: Vec::new(),
        },
    }
}

/// The mean rate per step of 10 s, 1 min or 10 min over the span, on the recorded clock.
fn history(to_raw: &PiecewiseMap, (first, last): (f64, f64)) -> RateHistory {
    let span_s = (last - first) * 1e-9;
    let step_s = if span_s <= 600.0 {
        10.0
    } else if span_s <= 6.0 * 3600.0 {
        60.0
    } else {
        600.0
    };
    let step = step_s * 1e9;
    let mut ppm = Vec::new();
    let mut t = first;
    while t < last {
        let end = (t + step).min(last);
        let raw = to_raw.apply(end) - to_raw.apply(t);
        ppm.push(((end - t) / raw - 1.0) * 1e6);
        t = end;
    }
    RateHistory {
        step_s,
        start_ns: first,
        ppm,
    }
}

/// Checks that the samples describe increasing clocks, at most [`MAX_GAP_NS`] apart.
fn check(samples: &[ClockSample]) -> Result<(), SlewUnavailable> {
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
struct Prepared {
    raw0: u64,
    mono0: u64,
    /// RAW − raw0.
    x: Vec<f64>,
    /// Bracket low end − mono0 (widened).
    a: Vec<f64>,
    /// Bracket high end − mono0 (widened).
    b: Vec<f64>,
}

impl Prepared {
    fn new(samples: &[ClockSample]) -> Self {
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

    fn len(&self) -> usize {
        self.x.len()
    }

    /// The slopes f can have on average over interval `i` (between samples `i` and `i + 1`).
    fn slope_range(&self, i: usize) -> (f64, f64) {
        let h = self.x[i + 1] - self.x[i];
        (
            (self.a[i + 1] - self.b[i]) / h,
            (self.b[i + 1] - self.a[i]) / h,
        )
    }
}

/// A line `y = y0 + slope · (x − x0)` (relative coordinates).
#[derive(Clone, Copy, Debug)]
struct Line {
    x0: f64,
    y0: f64,
    slope: f64,
}

impl Line {
    fn at(&self, x: f64) -> f64 {
        self.y0 + self.slope * (x - self.x0)
    }
}

/// Samples `first..=last` and the line through all their brackets.
#[derive(Clone, Copy, Debug)]
struct Run {
    first: usize,
    last: usize,
    line: Line,
}

/// Cuts the samples into maximal runs a single line passes through (exponential, then binary
/// search for each run's end: feasibility only shrinks as samples are added). The hulls grow
/// point by point in x order, so each probe only adds the samples past the last feasible end:
/// linear time per run.
fn fit_runs(p: &Prepared) -> Result<Vec<Run>, SlewUnavailable> {
    let n = p.len();
    let mut runs = Vec::new();
    let mut s = 0;
    while s < n {
        if s == n - 1 {
            // A last sample alone: a line through its bracket's middle, joined by a chord.
            let y = (p.a[s] + p.b[s]) / 2.0;
            let slope = runs.last().map_or(1.0, |r: &Run| {
                (y - r.line.at(p.x[s - 1])) / (p.x[s] - p.x[s - 1])
            });
            runs.push(Run {
                first: s,
                last: s,
                line: Line {
                    x0: p.x[s],
                    y0: y,
                    slope,
                },
            });
            break;
        }
        // Two brackets always admit a line.
        let mut good = s + 1;
        let mut hulls = Hulls::new(p, s);
        hulls.extend(p, s..=good);
        // Whether the run can reach `end`: the hulls up to `good` extended to it.
        let reach = |hulls: &Hulls, good: usize, end: usize| {
            let mut longer = hulls.clone();
            longer.extend(p, good + 1..=end);
            longer.separated().then_some(longer)
        };
        let mut bad = None;
        let mut step = 2;
        while bad.is_none() && good < n - 1 {
            let probe = (s + step).min(n - 1);
            match reach(&hulls, good, probe) {
                Some(longer) => {
                    (good, hulls) = (probe, longer);
                    step *= 2;
                }
                None => bad = Some(probe),
            }
        }
        if let Some(mut bad) = bad {
            while bad - good > 1 {
                let mid = good + (bad - good) / 2;
                match reach(&hulls, good, mid) {
                    Some(longer) => (good, hulls) = (mid, longer),
                    None => bad = mid,
                }
            }
        }
        let line = hulls.centered_line(p, s, good);
        if line.slope <= 0.0 || !line.slope.is_finite() {
            return Err(SlewUnavailable::NotIncreasing {
                index: s,
                what: "the samples do not determine an increasing clock",
            });
        }
        runs.push(Run {
            first: s,
            last: good,
            line,
        });
        s = good + 1;
    }
    Ok(runs)
}

/// The upper hull of the brackets' low ends and the lower hull of their high ends, over one run,
/// in coordinates relative to the run's first sample.
#[derive(Clone)]
struct Hulls {
    origin: (f64, f64),
    low: Vec<(f64, f64)>,
    high: Vec<(f64, f64)>,
}

/// Cross product of `o→a` and `o→b`.
fn cross(o: (f64, f64), a: (f64, f64), b: (f64, f64)) -> f64 {
    (a.0 - o.0) * (b.1 - o.1) - (a.1 - o.1) * (b.0 - o.0)
}

/// The value at `x` of a chain of vertices (x ascending), walking `k` forward.
fn chain_at(chain: &[(f64, f64)], k: &mut usize, x: f64) -> f64 {
    while *k + 2 < chain.len() && chain[*k + 1].0 <= x {
        *k += 1;
    }
    let (p, q) = (chain[*k], chain[(*k + 1).min(chain.len() - 1)]);
    if q.0 > p.0 {
        p.1 + (q.1 - p.1) * (x - p.0) / (q.0 - p.0)
    } else {
        p.1
    }
}

impl Hulls {
    /// Empty hulls for a run starting at sample `s`.
    fn new(p: &Prepared, s: usize) -> Self {
        Hulls {
            origin: (p.x[s], p.a[s]),
            low: Vec::new(),
            high: Vec::new(),
        }
    }

    /// Adds the brackets of `samples` (after those already in, in order).
    fn extend(&mut self, p: &Prepared, samples: std::ops::RangeInclusive<usize>) {
        let (x0, y0) = self.origin;
        for j in samples {
            let lo = (p.x[j] - x0, p.a[j] - y0);
            while self.low.len() >= 2
                && cross(
                    self.low[self.low.len() - 2],
                    self.low[self.low.len() - 1],
                    lo,
                ) >= 0.0
            {
                self.low.pop();
            }
            self.low.push(lo);
            let hi = (p.x[j] - x0, p.b[j] - y0);
            while self.high.len() >= 2
                && cross(
                    self.high[self.high.len() - 2],
                    self.high[self.high.len() - 1],
                    hi,
                ) <= 0.0
            {
                self.high.pop();
            }
            self.high.push(hi);
        }
    }

    /// Whether a line passes above every low end and below every high end: the concave chain of
    /// the low ends stays below the convex chain of the high ends, checked at every vertex.
    fn separated(&self) -> bool {
        const TOLERANCE_NS: f64 = 1e-3;
        let (mut i, mut k) = (0, 0);
        let low_ok = self
            .low
            .iter()
            .all(|&(x, y)| y <= chain_at(&self.high, &mut k, x) + TOLERANCE_NS);
        let high_ok = self
            .high
            .iter()
            .all(|&(x, y)| y + TOLERANCE_NS >= chain_at(&self.low, &mut i, x));
        low_ok && high_ok
    }

    /// The line through the run with the most room above and below (the hulls are built over
    /// `s..=e`): the slope maximizing the vertical room (a concave function of the slope,
    /// maximized by golden-section search), centred in it.
    fn centered_line(&self, p: &Prepared, s: usize, e: usize) -> Line {
        let room = |slope: f64| {
            let top = self
                .high
                .iter()
                .map(|&(x, y)| y - slope * x)
                .fold(f64::INFINITY, f64::min);
            let bottom = self
                .low
                .iter()
                .map(|&(x, y)| y - slope * x)
                .fold(f64::NEG_INFINITY, f64::max);
            (top - bottom, (top + bottom) / 2.0)
        };
        let span = p.x[e] - p.x[s];
        // Every line through the first and last brackets has a slope in this range.
        let (mut lo, mut hi) = ((p.a[e] - p.b[s]) / span, (p.b[e] - p.a[s]) / span);
        const PHI: f64 = 0.618_033_988_749_894_8;
        let mut m1 = hi - PHI * (hi - lo);
        let mut m2 = lo + PHI * (hi - lo);
        let (mut f1, mut f2) = (room(m1).0, room(m2).0);
        for _ in 0..100 {
            if f1 < f2 {
                lo = m1;
                m1 = m2;
                f1 = f2;
                m2 = lo + PHI * (hi - lo);
                f2 = room(m2).0;
            } else {
                hi = m2;
                m2 = m1;
                f2 = f1;
                m1 = hi - PHI * (hi - lo);
                f1 = room(m1).0;
            }
            if hi - lo <= 1e-15 {
                break;
            }
        }
        let slope = (lo + hi) / 2.0;
        let (_, middle) = room(slope);
        Line {
            x0: p.x[s],
            y0: p.a[s] + middle,
            slope,
        }
    }
}

/// The knots of the map: the first run's start, each junction (where the two lines meet, or the
/// chord between them when they meet too far away), the last run's end.
fn join(p: &Prepared, runs: &[Run]) -> Vec<(f64, f64)> {
    let first = runs[0];
    let mut knots = vec![(p.x[first.first], first.line.at(p.x[first.first]))];
    for pair in runs.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        let (xe, xs) = (p.x[a.last], p.x[b.first]);
        let diff = a.line.slope - b.line.slope;
        let meet = xe + (b.line.at(xe) - a.line.at(xe)) / diff;
        let inside = |line: &Line, j: usize| (p.a[j]..=p.b[j]).contains(&line.at(p.x[j]));
        let after_last_knot = knots.last().is_some_and(|k| meet > k.0);
        // Where the lines meet: in the gap between the runs, or in the interval before (after)
        // it when the other line also passes through the sample there (a change just before
        // the last sample of a run, which still fitted the old line within its bracket).
        let meets = diff != 0.0
            && meet.is_finite()
            && after_last_knot
            && ((xe..=xs).contains(&meet)
                || (a.last > a.first
                    && (p.x[a.last - 1]..xe).contains(&meet)
                    && inside(&b.line, a.last))
                || (b.last > b.first
                    && meet > xs
                    && meet <= p.x[b.first + 1]
                    && inside(&a.line, b.first)));
        if meets {
            knots.push((meet, a.line.at(meet)));
        } else {
            knots.push((xe, a.line.at(xe)));
            knots.push((xs, b.line.at(xs)));
        }
    }
    let last = runs[runs.len() - 1];
    let x_end = p.x[last.last];
    if knots.last().is_some_and(|k| k.0 < x_end) {
        knots.push((x_end, last.line.at(x_end)));
    }
    knots
}

/// A line in an interval's local coordinate `d = x − x_i`: `v0 + slope · d`.
#[derive(Clone, Copy, Debug)]
struct Local {
    v0: f64,
    slope: f64,
}

impl Local {
    fn at(&self, d: f64) -> f64 {
        self.v0 + self.slope * d
    }

    /// Where two lines cross, if they do.
    fn crossing(&self, other: &Local) -> Option<f64> {
        let ds = self.slope - other.slope;
        (ds != 0.0).then(|| (other.v0 - self.v0) / ds)
    }
}

/// Lines whose minimum (on the low side) or maximum (on the high side) bounds f.
#[derive(Clone, Copy, Debug)]
struct Group {
    lines: [Local; 2],
    len: usize,
}

impl Group {
    fn one(l: Local) -> Self {
        Group {
            lines: [l, l],
            len: 1,
        }
    }

    fn two(l: Local, m: Local) -> Self {
        Group {
            lines: [l, m],
            len: 2,
        }
    }

    fn lines(&self) -> &[Local] {
        &self.lines[..self.len]
    }
}

/// Where f can be in one interval: above the largest of the low groups' minima, below the
/// smallest of the high groups' maxima. At most four groups a side.
#[derive(Clone, Copy, Debug)]
struct Region {
    low: [Group; 4],
    n_low: usize,
    high: [Group; 4],
    n_high: usize,
}

impl Region {
    fn new(low: &[Group], high: &[Group]) -> Self {
        let empty = Group::one(Local {
            v0: 0.0,
            slope: 0.0,
        });
        let mut r = Region {
            low: [empty; 4],
            n_low: low.len(),
            high: [empty; 4],
            n_high: high.len(),
        };
        r.low[..low.len()].copy_from_slice(low);
        r.high[..high.len()].copy_from_slice(high);
        r
    }

    fn low_at(&self, d: f64) -> f64 {
        self.low[..self.n_low]
            .iter()
            .map(|g| {
                g.lines()
                    .iter()
                    .map(|l| l.at(d))
                    .fold(f64::INFINITY, f64::min)
            })
            .fold(f64::NEG_INFINITY, f64::max)
    }

    fn high_at(&self, d: f64) -> f64 {
        self.high[..self.n_high]
            .iter()
            .map(|g| {
                g.lines()
                    .iter()
                    .map(|l| l.at(d))
                    .fold(f64::NEG_INFINITY, f64::max)
            })
            .fold(f64::INFINITY, f64::min)
    }

    /// Every line's crossing with every other line of the same side inside `(0, h)`: with the
    /// interval's ends and the fitted map's knots, the only places where a distance between the
    /// map and an edge can be largest (everything is piecewise linear).
    fn corners(&self, h: f64, out: &mut Vec<f64>) {
        for side in [&self.low[..self.n_low], &self.high[..self.n_high]] {
            let mut lines = [Local {
                v0: 0.0,
                slope: 0.0,
            }; 8];
            let mut len = 0;
            for l in side.iter().flat_map(Group::lines) {
                lines[len] = *l;
                len += 1;
            }
            for (k, l) in lines[..len].iter().enumerate() {
                for m in &lines[k + 1..len] {
                    if let Some(d) = l.crossing(m)
                        && d > 0.0
                        && d < h
                    {
                        out.push(d);
                    }
                }
            }
        }
    }
}

/// The bound in interval `i` (ns of RAW): see the module documentation. `candidates` is
/// scratch space.
fn interval_bound(p: &Prepared, i: usize, g: &PiecewiseMap, candidates: &mut Vec<f64>) -> f64 {
    let n = p.len();
    let (xi, h) = (p.x[i], p.x[i + 1] - p.x[i]);
    let (ai, bi, aj, bj) = (p.a[i], p.b[i], p.a[i + 1], p.b[i + 1]);
    let own = p.slope_range(i);
    let left = (i > 0).then(|| p.slope_range(i - 1));
    let right = (i + 2 < n).then(|| p.slope_range(i + 1));
    let line = |v0: f64, slope: f64| Local { v0, slope };
    // The line of the previous interval through sample i, and of the next one through sample
    // i + 1, at their lowest and highest.
    let l_lines = left.map(|(lo, hi)| (line(ai, lo), line(bi, hi)));
    let r_lines = right.map(|(lo, hi)| (line(aj - hi * h, hi), line(bj - lo * h, lo)));
    // The chord, at its lowest and highest.
    let chord = (line(ai, (aj - ai) / h), line(bi, (bj - bi) / h));
    // Lines through the interval's own brackets at the lowest and highest rate.
    let envelope = |s_min: f64, s_max: f64| {
        (
            [
                Group::one(line(ai, s_min)),
                Group::one(line(aj - s_max * h, s_max)),
            ],
            [
                Group::one(line(bi, s_max)),
                Group::one(line(bj - s_min * h, s_min)),
            ],
        )
    };
    let worst = WORST_RATE_PPM * 1e-6;
    let fallback = |lo_rate: f64, hi_rate: f64| {
        let (low, high) = envelope(lo_rate - worst, hi_rate + worst);
        Region::new(&low, &high)
    };
    // Where the assumption fails: any rate within the worst case of the rates seen around.
    let around = [left, Some(own), right];
    let lowest_around = || {
        around
            .iter()
            .flatten()
            .map(|r| r.0)
            .fold(f64::INFINITY, f64::min)
    };
    let highest_around = || {
        around
            .iter()
            .flatten()
            .map(|r| r.1)
            .fold(f64::NEG_INFINITY, f64::max)
    };
    let fallback_around = || fallback(lowest_around(), highest_around());
    // Two changes too close together (see the module documentation): fall back.
    let differ = |j: usize, k: usize| {
        let (rj, rk) = (p.slope_range(j), p.slope_range(k));
        rj.1 < rk.0 || rk.1 < rj.0
    };
    let too_close = i >= 1
        && i + 2 < n
        && differ(i - 1, i)
        && differ(i, i + 1)
        && ((i >= 2 && differ(i - 2, i - 1)) || (i + 3 < n && differ(i + 1, i + 2)));
    // A gap too long for the model (a stalled sampler): the worst case as well.
    let sparse = h > DENSE_GAP_NS as f64;
    let (region, lowest_rate) = match (l_lines, r_lines, left, right) {
        _ if too_close || sparse => (fallback_around(), lowest_around() - worst),
        (Some((l_lo, l_hi)), Some((r_lo, r_hi)), Some(sl), Some(sr)) => {
            let (s_min, s_max) = (sl.0.min(sr.0), sl.1.max(sr.1));
            let (env_low, env_high) = envelope(s_min, s_max);
            let region = if sl.1 < sr.0 {
                // The rate rose: f is the larger of the two lines.
                Region::new(
                    &[Group::one(l_lo), Group::one(r_lo), env_low[0], env_low[1]],
                    &[Group::two(l_hi, r_hi), env_high[0], env_high[1]],
                )
            } else if sl.0 > sr.1 {
                // It fell: the smaller.
                Region::new(
                    &[Group::two(l_lo, r_lo), env_low[0], env_low[1]],
                    &[Group::one(l_hi), Group::one(r_hi), env_high[0], env_high[1]],
                )
            } else {
                // Either.
                Region::new(
                    &[Group::two(l_lo, r_lo), env_low[0], env_low[1]],
                    &[Group::two(l_hi, r_hi), env_high[0], env_high[1]],
                )
            };
            (region, s_min)
        }
        // First interval: the rate before the change is unknown; f lies between the next
        // interval's line and the chord.
        (None, Some((r_lo, r_hi)), _, Some(sr)) => (
            Region::new(&[Group::two(r_lo, chord.0)], &[Group::two(r_hi, chord.1)]),
            sr.0.min(own.0),
        ),
        // Last interval: between the previous interval's line and the chord.
        (Some((l_lo, l_hi)), None, Some(sl), _) => (
            Region::new(&[Group::two(l_lo, chord.0)], &[Group::two(l_hi, chord.1)]),
            sl.0.min(own.0),
        ),
        _ => (fallback(own.0, own.1), own.0 - worst),
    };
    // The map's knots inside the interval.
    candidates.clear();
    candidates.extend([0.0, h]);
    let pieces = g.pieces();
    let first = pieces.partition_point(|piece| piece.start_ns <= xi);
    for piece in &pieces[first..] {
        let d = piece.start_ns - xi;
        if d >= h {
            break;
        }
        candidates.push(d);
    }
    let knots = candidates.len();
    // The pieces that apply inside the interval (usually one).
    let local = &pieces[first.saturating_sub(1)..first + knots - 2];
    let g_at = |x: f64| {
        let k = local
            .iter()
            .rposition(|piece| piece.start_ns <= x)
            .unwrap_or(0);
        local[k].line.apply(x)
    };
    let distance = |region: &Region, candidates: &[f64]| {
        let mut worst_distance: f64 = 0.0;
        let mut empty = false;
        for &d in candidates {
            let (lo, hi) = (region.low_at(d), region.high_at(d));
            if lo > hi + 1e-6 {
                empty = true;
            }
            let at = g_at(xi + d);
            worst_distance = worst_distance.max(hi - at).max(at - lo);
        }
        (worst_distance, empty)
    };
    region.corners(h, candidates);
    let (mut vertical, empty) = distance(&region, candidates);
    let mut lowest_rate = lowest_rate;
    if empty {
        // The samples contradict the assumption here.
        let region = fallback_around();
        candidates.truncate(knots);
        region.corners(h, candidates);
        vertical = distance(&region, candidates).0;
        lowest_rate = lowest_around() - worst;
    }
    // The rate's own drift between changes, for the lines taken from the neighbours.
    let h_next = if i + 2 < n {
        p.x[i + 2] - p.x[i + 1]
    } else {
        0.0
    };
    let h_prev = if i > 0 { p.x[i] - p.x[i - 1] } else { 0.0 };
    let drift = RATE_DRIFT_PPM_PER_S * 1e-6 * 1e-9 / 2.0 * (h + h_prev.max(h_next)) * h;
    // From MONO to RAW: divide by the lowest rate f can have here (never below half the
    // chord's, which only very short intervals with wide brackets would ask for).
    let chord_rate = (aj + bj - ai - bi) / (2.0 * h);
    let rate = lowest_rate.max(chord_rate / 2.0);
    (vertical + drift) / rate
}

#[cfg(test)]
mod tests;
