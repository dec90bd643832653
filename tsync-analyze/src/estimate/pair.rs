//! One pair's estimate from its accumulated hulls: corridor, limit lines, guaranteed interval
//! (with the conversion bounds), the regression for `linreg`, and the cut into segments where
//! the clocks bent.

use crate::estimate::accumulate::PairState;
use crate::estimate::accuracy::{self, AccuracyCurve};
use crate::estimate::corridor::{self, Quality};
use crate::estimate::hull::{Point, Side};
use crate::estimate::piecewise::piecewise;
use crate::estimate::result::{LimitLine, PairResult, PairSegment};
use crate::estimate::segments;
use crate::estimate::{Algorithm, SyncOptions};
use crate::model::PiecewiseMap;

pub(super) fn pair_result(mut p: PairState, options: &SyncOptions, relax: i64) -> PairResult {
    let out_of_order = p.buckets.out_of_order();
    let buckets = p.buckets.finish();
    let lowers: Vec<&[Point]> = buckets.iter().map(|b| &b.lower[..]).collect();
    let uppers: Vec<&[Point]> = buckets.iter().map(|b| &b.upper[..]).collect();
    let hull_ab = segments::union_hull(Side::Lower, &lowers);
    let hull_ba = segments::union_hull(Side::Upper, &uppers);
    let span = (p.x_min <= p.x_max).then_some((p.x_min, p.x_max));
    let c = corridor::analyze(&hull_ab, &hull_ba);
    let mut result = PairResult {
        a: p.a,
        b: p.b,
        quality: c.quality,
        estimate: c.estimate,
        map: c.estimate.map(PiecewiseMap::linear),
        segments: Vec::new(),
        minslope: c.minslope.map(LimitLine::from),
        maxslope: c.maxslope.map(LimitLine::from),
        messages_ab: p.messages_ab,
        messages_ba: p.messages_ba,
        out_of_order,
        accuracy: None,
        approx_error_ns: c.approx_error_ns,
        linreg: None,
        span,
        from_spans: [0, 0],
        hull_ab,
        hull_ba,
    };
    if c.quality == Quality::Accurate {
        result.accuracy = guaranteed(&result.hull_ab, &result.hull_ba, relax, 0);
    }
    if options.algorithm == Algorithm::Linreg {
        let fit = p.linreg.fit(options.linreg_filter_z);
        result.quality = if fit.is_some() {
            Quality::Approximate
        } else {
            Quality::Absent
        };
        result.estimate = fit.as_ref().map(|f| f.line);
        result.map = result.estimate.map(PiecewiseMap::linear);
        result.approx_error_ns = None;
        result.linreg = fit;
    } else if let (Some(line), Some((_, last))) = (c.estimate, span) {
        let cuts = segments::cut(&buckets, line.drift);
        if cuts.len() > 1 {
            piecewise(&mut result, &buckets, cuts, last, relax);
        }
    }
    if result.segments.is_empty() {
        result.segments.push(PairSegment {
            start_ns: span.map_or(0, |s| s.0),
            end_ns: span.map_or(0, |s| s.1),
            quality: result.quality,
            estimate: result.estimate,
            accuracy: result.accuracy.clone(),
            bend_ns: 0.0,
            approx_error_ns: result.approx_error_ns,
            messages_ab: result.messages_ab,
            messages_ba: result.messages_ba,
            hull_ab: Vec::new(),
            hull_ba: Vec::new(),
        });
    }
    result
}

/// The guaranteed interval of a corridor whose hull points may be off by `relax` ns (conversion
/// errors, a bend from one line): the points are moved outward by it, so that every line the
/// true relation allows still satisfies them, and the bounds are widened by `widen` (how far the
/// truth may lie from such a line). None when the moved hulls leave a bound open.
pub(super) fn guaranteed(
    lower: &[Point],
    upper: &[Point],
    relax: i64,
    widen: i64,
) -> Option<AccuracyCurve> {
    if relax == 0 {
        let c = corridor::analyze(lower, upper);
        return Some(accuracy::curve(lower, upper, &c.minslope?, &c.maxslope?));
    }
    let moved = |hull: &[Point], dy: i64| -> Vec<Point> {
        hull.iter()
            .map(|p| Point::new(p.x, p.y.saturating_add(dy)))
            .collect()
    };
    let (lower, upper) = (moved(lower, relax), moved(upper, -relax));
    let c = corridor::analyze(&lower, &upper);
    let curve = accuracy::curve(&lower, &upper, &c.minslope?, &c.maxslope?);
    let w = widen as f64;
    Some(AccuracyCurve::from_points(
        curve
            .points
            .into_iter()
            .map(|p| accuracy::AccuracyPoint {
                lo: p.lo - w,
                hi: p.hi + w,
                width: p.width + 2.0 * w,
                ..p
            })
            .collect(),
    ))
}
