//! The guaranteed interval of a converted time (Poirier §3.3.1, LP 3.6):
//! t_b ∈ [C(t_a) − Δ2, C(t_a) + Δ1] for every line consistent with the messages.
//!
//! LP 3.6 maximizes (minimizes) a0 + a1·t over the feasible set P of lines (a0, a1). P is a convex
//! polygon: for each slope s in [a1_min, a1_max], a0 ranges from g(s) = max_u(u.y − s·u.x) to
//! f(s) = min_l(l.y − s·l.x). Its vertices are the breakpoints of f and g, i.e. the lines along
//! lower-hull edges and along upper-hull edges whose slope lies in [a1_min, a1_max], plus the two
//! limit lines where f = g. A linear objective over a bounded polygon is optimal at a vertex, so
//! the exact LP optimum at t is the max (min) over at most |L| + |U| + 2 candidate lines — no
//! general LP solver. Adjacent vertices share a hull point, so the bounds are polygonal in t with
//! breakpoints at hull abscissae: solving at every hull abscissa and interpolating linearly between
//! them is exact. Cost O(h²) on top of the O(n) hulls.

use crate::estimate::corridor::ExactLine;
use crate::estimate::hull::Point;

/// The bounds at one abscissa.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct AccuracyPoint {
    /// Time on trace a (ns).
    pub t_a: i64,
    /// Smallest t_b any consistent line gives at t_a (ns, = C(t_a) − Δ2).
    pub lo: f64,
    /// Largest t_b any consistent line gives at t_a (ns, = C(t_a) + Δ1).
    pub hi: f64,
    /// hi − lo, computed without the cancellation of the absolute values.
    pub width: f64,
}

/// Summary of the interval width Δ1 + Δ2 over the pair's time span. The fields are in the
/// order of their sorted keys: `sync --json` prints a pair's document directly, without a value
/// to sort them (`output/report.rs`).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct AccuracyStats {
    /// Narrowest width at any hull abscissa (ns).
    pub best: f64,
    /// Time-weighted mean over [first, last] hull abscissa (the span of the pair's messages).
    pub mean: f64,
    /// Widest width at any hull abscissa (ns).
    pub worst: f64,
}

/// The accuracy curve of an accurate pair.
#[derive(Clone, Debug, PartialEq)]
pub struct AccuracyCurve {
    /// One point per distinct hull abscissa, sorted by t_a; linear in between.
    pub points: Vec<AccuracyPoint>,
    /// Width summary over the points.
    pub stats: AccuracyStats,
}

impl AccuracyCurve {
    /// A curve from its points (sorted here by abscissa), with their statistics.
    pub fn from_points(mut points: Vec<AccuracyPoint>) -> Self {
        points.sort_by_key(|p| p.t_a);
        let stats = stats(&points);
        AccuracyCurve { points, stats }
    }

    /// Interval at any t_a inside the curve's span (linear interpolation), None outside.
    pub fn at(&self, t_a: i64) -> Option<(f64, f64)> {
        let pts = &self.points;
        let i = pts.partition_point(|p| p.t_a < t_a);
        if i < pts.len() && pts[i].t_a == t_a {
            return Some((pts[i].lo, pts[i].hi));
        }
        if i == 0 || i == pts.len() {
            return None;
        }
        let (a, b) = (&pts[i - 1], &pts[i]);
        let f = (t_a - a.t_a) as f64 / (b.t_a - a.t_a) as f64;
        Some((a.lo + f * (b.lo - a.lo), a.hi + f * (b.hi - a.hi)))
    }
}

/// Computes the curve for an accurate pair: `lower`/`upper` are the half hulls, `min`/`max` the
/// limit lines.
pub fn curve(lower: &[Point], upper: &[Point], min: &ExactLine, max: &ExactLine) -> AccuracyCurve {
    let mut candidates: Vec<ExactLine> = vec![*min, *max];
    let in_range = |e: &ExactLine| !e.slope_lt(min) && !max.slope_lt(e);
    for w in lower.windows(2).chain(upper.windows(2)) {
        let e = ExactLine { p: w[0], q: w[1] };
        if in_range(&e) {
            candidates.push(e);
        }
    }
    let mut xs: Vec<i64> = lower.iter().chain(upper).map(|p| p.x).collect();
    xs.sort_unstable();
    xs.dedup();
    // Values relative to y0 keep precision when absolute times are large.
    let y0 = max.p.y;
    let mut points = Vec::with_capacity(xs.len());
    for &t in &xs {
        let mut lo = f64::INFINITY;
        let mut hi = f64::NEG_INFINITY;
        for c in &candidates {
            let v = c.value_minus(t, y0);
            lo = lo.min(v);
            hi = hi.max(v);
        }
        points.push(AccuracyPoint {
            t_a: t,
            lo: y0 as f64 + lo,
            hi: y0 as f64 + hi,
            width: hi - lo,
        });
    }
    let stats = stats(&points);
    AccuracyCurve { points, stats }
}

fn stats(points: &[AccuracyPoint]) -> AccuracyStats {
    let best = points.iter().map(|p| p.width).fold(f64::INFINITY, f64::min);
    let worst = points.iter().map(|p| p.width).fold(0.0, f64::max);
    let span = (points.last().map_or(0, |p| p.t_a) - points.first().map_or(0, |p| p.t_a)) as f64;
    let mean = if span > 0.0 {
        points
            .windows(2)
            .map(|w| (w[1].t_a - w[0].t_a) as f64 * (w[0].width + w[1].width) / 2.0)
            .sum::<f64>()
            / span
    } else {
        points.first().map_or(0.0, |p| p.width)
    };
    AccuracyStats { best, worst, mean }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::corridor::{self, Quality};
    use crate::estimate::hull::{Side, cross, half_hull};
    use proptest::prelude::*;

    /// Brute-force LP 3.6: the optimum is attained by a line through two constraint points, so
    /// try every feasible line through two hull points.
    fn brute(lower: &[Point], upper: &[Point], t: i64) -> (f64, f64) {
        let all: Vec<Point> = lower.iter().chain(upper).copied().collect();
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for &p in &all {
            for &q in &all {
                if p.x >= q.x {
                    continue;
                }
                let feasible = lower.iter().all(|&l| cross(p, q, l) >= 0)
                    && upper.iter().all(|&u| cross(p, q, u) <= 0);
                if feasible {
                    let v = ExactLine { p, q }.value_minus(t, 0);
                    lo = lo.min(v);
                    hi = hi.max(v);
                }
            }
        }
        (lo, hi)
    }

    proptest! {
        #[test]
        fn vertex_enumeration_solves_the_lp_exactly(
            ab in prop::collection::vec((0i64..1000, 0i64..200), 1..12),
            ba in prop::collection::vec((0i64..1000, 0i64..200), 1..12),
        ) {
            // a→b points above the line y = x/2 + 100, b→a points below it.
            let lower: Vec<Point> = ab.iter().map(|&(x, d)| Point::new(x, x / 2 + 100 + d)).collect();
            let upper: Vec<Point> = ba.iter().map(|&(x, d)| Point::new(x, (x / 2 + 100 - d).max(0))).collect();
            let (l, u) = (half_hull(Side::Lower, &lower), half_hull(Side::Upper, &upper));
            let c = corridor::analyze(&l, &u);
            prop_assume!(c.quality == Quality::Accurate);
            let curve = curve(&l, &u, &c.minslope.unwrap(), &c.maxslope.unwrap());
            for p in &curve.points {
                let (lo, hi) = brute(&l, &u, p.t_a);
                prop_assert!((p.lo - lo).abs() < 1e-9 && (p.hi - hi).abs() < 1e-9,
                    "at {}: got [{}, {}], LP optimum [{}, {}]", p.t_a, p.lo, p.hi, lo, hi);
            }
            // Between abscissae, interpolation equals the LP optimum too.
            for w in curve.points.windows(2) {
                let t = (w[0].t_a + w[1].t_a) / 2;
                let (lo, hi) = brute(&l, &u, t);
                let (ilo, ihi) = curve.at(t).unwrap();
                prop_assert!((ilo - lo).abs() < 1e-6 && (ihi - hi).abs() < 1e-6,
                    "at {}: interpolated [{}, {}], LP optimum [{}, {}]", t, ilo, ihi, lo, hi);
            }
        }
    }
}
