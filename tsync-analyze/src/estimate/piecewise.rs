//! A pair whose clocks bent: each cut estimated on its own, weak cuts joined to a neighbour,
//! and the segments' lines joined into one continuous map.

use crate::estimate::accuracy::AccuracyCurve;
use crate::estimate::corridor::{self, Quality};
use crate::estimate::hull::{Point, Side};
use crate::estimate::pair::guaranteed;
use crate::estimate::result::{PairResult, PairSegment};
use crate::estimate::segments::{self, Cut, HullBucket};
use crate::model::{Affine, PiecewiseMap};

/// Estimates each cut of a pair on its own, joins them into one map and makes the pair's
/// quality and accuracy theirs. A cut without an accurate estimate joins a neighbour; if that
/// leaves one cut, the pair stays whole.
pub(super) fn piecewise(
    result: &mut PairResult,
    buckets: &[HullBucket],
    mut cuts: Vec<Cut>,
    last_ns: i64,
    relax: i64,
) {
    let estimate = |cuts: &[Cut], k: usize| {
        let end = cuts
            .get(k + 1)
            .map_or(last_ns, |next| buckets[next.first].start_ns);
        segment(
            &buckets[cuts[k].first..=cuts[k].last],
            cuts[k].bend_ns,
            end,
            relax,
        )
    };
    let mut segments: Vec<PairSegment> = (0..cuts.len()).map(|k| estimate(&cuts, k)).collect();
    // A segment without an accurate estimate joins a neighbour when together they have one;
    // otherwise it stays as it is (best effort there only, not over the whole pair).
    let mut k = 0;
    while k < segments.len() {
        if segments[k].quality == Quality::Accurate {
            k += 1;
            continue;
        }
        let joined = [k.checked_sub(1), (k + 1 < cuts.len()).then_some(k + 1)]
            .into_iter()
            .flatten()
            .find_map(|with| {
                let (lo, hi) = (k.min(with), k.max(with));
                let mut trial = cuts.clone();
                trial[lo] = Cut {
                    first: cuts[lo].first,
                    last: cuts[hi].last,
                    bend_ns: cuts[lo].bend_ns.max(cuts[hi].bend_ns),
                };
                trial.remove(hi);
                let s = estimate(&trial, lo);
                (s.quality == Quality::Accurate).then_some((lo, trial, s))
            });
        match joined {
            Some((lo, trial, s)) => {
                cuts = trial;
                segments[lo] = s;
                segments.remove(lo + 1);
                k = lo;
            }
            None => k += 1,
        }
    }
    if segments.len() == 1 || segments.iter().any(|s| s.estimate.is_none()) {
        return;
    }
    let lines: Vec<(i64, i64, Affine)> = segments
        .iter()
        .map(|s| (s.start_ns, s.end_ns, s.estimate.expect("checked above")))
        .collect();
    let knots = segments::joined_knots(&lines);
    let last_drift = lines.last().map(|l| l.2.drift);
    let map = PiecewiseMap::through_knots(&knots, last_drift);
    if !map.is_continuous_and_increasing(1.0) {
        // Segments too short for their lines to meet in order (absurd data): the whole line.
        return;
    }
    result.map = Some(map);
    let all_accurate = segments.iter().all(|s| s.quality == Quality::Accurate);
    result.quality = if all_accurate {
        Quality::Accurate
    } else {
        Quality::Approximate
    };
    result.minslope = None;
    result.maxslope = None;
    result.approx_error_ns = segments
        .iter()
        .filter_map(|s| s.approx_error_ns)
        .reduce(f64::max);
    result.accuracy = all_accurate.then(|| {
        AccuracyCurve::from_points(
            segments
                .iter()
                .flat_map(|s| s.accuracy.iter().flat_map(|a| a.points.iter().copied()))
                .collect(),
        )
    });
    result.segments = segments;
}

/// One segment's estimate and interval from its buckets.
fn segment(buckets: &[HullBucket], bend_ns: f64, end_ns: i64, relax: i64) -> PairSegment {
    let lowers: Vec<&[Point]> = buckets.iter().map(|b| &b.lower[..]).collect();
    let uppers: Vec<&[Point]> = buckets.iter().map(|b| &b.upper[..]).collect();
    let lower = segments::union_hull(Side::Lower, &lowers);
    let upper = segments::union_hull(Side::Upper, &uppers);
    let c = corridor::analyze(&lower, &upper);
    let bend = bend_ns.ceil() as i64;
    let accuracy = match c.quality {
        Quality::Accurate => guaranteed(&lower, &upper, relax.saturating_add(bend), bend),
        _ => None,
    };
    PairSegment {
        start_ns: buckets[0].start_ns,
        end_ns,
        quality: if accuracy.is_some() {
            c.quality
        } else if c.quality == Quality::Accurate {
            Quality::Incomplete
        } else {
            c.quality
        },
        estimate: c.estimate,
        accuracy,
        bend_ns: bend as f64,
        approx_error_ns: c.approx_error_ns,
        messages_ab: buckets.iter().map(|b| b.messages_ab).sum(),
        messages_ba: buckets.iter().map(|b| b.messages_ba).sum(),
        hull_ab: lower,
        hull_ba: upper,
    }
}
