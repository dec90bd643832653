//! The fit: the samples cut greedily into maximal runs one line passes through (exact hull
//! test), each run's most centred line, and the runs joined where their lines meet.

use crate::input::slew::SlewUnavailable;
use crate::input::slew::samples::Prepared;

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
pub(super) struct Run {
    first: usize,
    last: usize,
    line: Line,
}

/// Cuts the samples into maximal runs a single line passes through (exponential, then binary
/// search for each run's end: feasibility only shrinks as samples are added). The hulls grow
/// point by point in x order, so each probe only adds the samples past the last feasible end:
/// linear time per run.
pub(super) fn fit_runs(p: &Prepared) -> Result<Vec<Run>, SlewUnavailable> {
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
pub(super) fn join(p: &Prepared, runs: &[Run]) -> Vec<(f64, f64)> {
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
