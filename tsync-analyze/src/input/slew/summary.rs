//! What `info` shows of a fit: the rates, the phase the slewing moved, the rate over time.

use serde::Serialize;
use tsync_common::format::ClockSample;

use crate::input::slew::samples::Prepared;
use crate::model::PiecewiseMap;

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

/// The summary of a fit, but for its bound and history, which the caller fills in.
pub(super) fn summarize(
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
pub(super) fn history(to_raw: &PiecewiseMap, (first, last): (f64, f64)) -> RateHistory {
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
