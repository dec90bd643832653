//! Piecewise synchronization of one pair: where one line no longer fits two clocks (crystal
//! wander over hours, slewing that no clock samples undid), the pair's time is cut into segments,
//! each estimated with the exact hull and accuracy machinery, and the segments are joined into one
//! continuous, strictly increasing map.
//!
//! Why not cut where the half hulls cross: the corridor between them is as wide as the minimum
//! round trip (tens of µs across a network), so a clock can bend by that much before any line
//! becomes infeasible — far more than the estimate may err. The bend shows much earlier in the
//! *centre* of the corridor. So the messages are kept in fixed buckets of time (a half hull per
//! bucket and direction, which is all the hull method needs: the hull of a union of buckets is
//! the hull of their hulls' vertices), and each bucket's corridor centre at one common slope is a
//! sample of the clocks' residual offset. Those residuals are cut top-down (halving) wherever one
//! line leaves a residual larger than their own noise allows (5σ, σ from second differences, which
//! a straight trend does not affect), then neighbours are joined again while one line still fits
//! them. A linear clock thus gives one segment — the whole pair's hulls, today's exact result —
//! unless its noise is wildly non-Gaussian; a bent one gets short segments where it bends and long
//! ones where it is steady.
//!
//! Guarantee: the hull method assumes the clocks linear over a segment. A segment of a
//! multi-segment pair is only linear up to the residual its fit left (plus 2σ); that much is added
//! to its interval by relaxing the hull points before the accuracy is computed (Poirier's
//! constraints with the bend allowed) and widening the result by it. A single-segment pair keeps
//! the classic assumption and today's interval.

use crate::estimate::corridor::exact_f64;
use crate::estimate::hull::{HalfHull, Point, Side};
use crate::model::Affine;

/// Width of a bucket on the pair's first clock: the shortest a segment can be. Four seconds keep
/// the bend of a crystal wandering by 4 ppm/h inside a bucket below 0.1 ns, and still give a
/// 60-second trace 15 buckets.
pub const BUCKET_NS: i64 = 4_000_000_000;

/// How many noise deviations a residual may reach before a segment is cut.
const NOISE_SIGMAS: f64 = 5.0;
/// Floor of the cutting threshold, ns (residuals are rounded integer times).
const THRESHOLD_FLOOR_NS: f64 = 10.0;
/// Buckets averaged when looking for a bend.
const SMOOTHING: usize = 8;

pub(crate) use crate::estimate::buckets::{Buckets, HullBucket};

/// The hull of several buckets' hulls (exactly the hull of all their points).
pub(crate) fn union_hull(side: Side, parts: &[&[Point]]) -> Vec<Point> {
    let mut hull = HalfHull::new(side);
    for part in parts {
        for &p in *part {
            hull.push(p);
        }
    }
    hull.finish().to_vec()
}

/// A segment: a run of buckets `first..=last` and how far its clocks may bend from one line.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Cut {
    pub first: usize,
    pub last: usize,
    /// Largest residual its line left, plus 2σ (ns); 0 for a single-segment pair.
    pub bend_ns: f64,
}

/// The residual offset of a bucket at the common slope: the centre of its corridor (ns, relative
/// to an arbitrary origin), at abscissa `t` (ns relative to the same origin).
#[derive(Clone, Copy, Debug)]
struct Residual {
    bucket: usize,
    t: f64,
    centre: f64,
}

/// Cuts the buckets into segments. `slope` is the whole pair's line slope (any reasonable one:
/// only the residuals' shape matters).
pub(crate) fn cut(buckets: &[HullBucket], slope: f64) -> Vec<Cut> {
    let whole = vec![Cut {
        first: 0,
        last: buckets.len().saturating_sub(1),
        bend_ns: 0.0,
    }];
    let residuals = residuals(buckets, slope);
    if residuals.len() < 6 {
        return whole;
    }
    let sigma = noise_sigma(&residuals);
    let mut runs = Vec::new();
    split(&residuals, sigma, &mut runs);
    if runs.len() == 1 {
        return whole;
    }
    let runs = join(&residuals, sigma, runs);
    if runs.len() == 1 {
        return whole;
    }
    // Runs of residuals → runs of buckets: each boundary halfway between two residual buckets.
    let mut cuts = Vec::with_capacity(runs.len());
    for (k, run) in runs.iter().enumerate() {
        let first = if k == 0 {
            0
        } else {
            residuals[run.start].bucket
        };
        let last = match runs.get(k + 1) {
            Some(next) => residuals[next.start].bucket - 1,
            None => buckets.len() - 1,
        };
        let part = &residuals[run.clone()];
        cuts.push(Cut {
            first,
            last,
            bend_ns: Fit::of(part).max_deviation(part) + 2.0 * sigma,
        });
    }
    cuts
}

/// The residual of every bucket that has messages both ways. A bucket's corridor centre depends
/// on the slope it is taken at: at the whole pair's slope, a clock whose rate wandered by a few
/// ppm tilts each bucket's corridor by microseconds, and which extreme points bound it becomes
/// random. So a first pass at the whole pair's slope gives the rough shape, and a second takes
/// each bucket at its local slope (its neighbours' chord).
fn residuals(buckets: &[HullBucket], slope: f64) -> Vec<Residual> {
    let Some(origin) = buckets
        .iter()
        .find_map(|b| b.lower.first().or(b.upper.first()))
        .copied()
    else {
        return Vec::new();
    };
    // A bucket's centre is the minimum of its delays: with few messages (the last bucket, cut
    // short by the end of the trace; a lull in traffic) it is far noisier than the others, and
    // one such outlier would cut a straight line. Buckets with less than a quarter of the usual
    // count in either direction give no residual (they still belong to a segment).
    let mut counts: Vec<u64> = buckets
        .iter()
        .map(|b| b.messages_ab.min(b.messages_ba))
        .collect();
    counts.sort_unstable();
    let usual = counts[counts.len() / 2];
    let usable: Vec<usize> = (0..buckets.len())
        .filter(|&i| {
            let b = &buckets[i];
            !b.lower.is_empty()
                && !b.upper.is_empty()
                && 4 * b.messages_ab.min(b.messages_ba) >= usual
        })
        .collect();
    let first: Vec<Residual> = usable
        .iter()
        .map(|&i| centre(&buckets[i], i, origin, slope, slope))
        .collect();
    const REACH: usize = 4;
    (0..first.len())
        .map(|k| {
            let (lo, hi) = (k.saturating_sub(REACH), (k + REACH).min(first.len() - 1));
            let local = if first[hi].t > first[lo].t {
                slope + (first[hi].centre - first[lo].centre) / (first[hi].t - first[lo].t)
            } else {
                slope
            };
            centre(&buckets[usable[k]], usable[k], origin, local, slope)
        })
        .collect()
}

/// A bucket's corridor centre at slope `local`, at the middle of its points, as a residual from
/// the line of slope `slope` through `origin`.
fn centre(b: &HullBucket, index: usize, origin: Point, local: f64, slope: f64) -> Residual {
    // Exact integer differences first, so that epoch-sized times keep their nanoseconds.
    let d = |p: &Point| {
        (
            exact_f64(p.x as i128 - origin.x as i128),
            exact_f64(p.y as i128 - origin.y as i128),
        )
    };
    let (lo, hi) = b
        .lower
        .iter()
        .chain(&b.upper)
        .map(|p| d(p).0)
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
            (lo.min(x), hi.max(x))
        });
    let t = (lo + hi) / 2.0;
    // Offsets of the lines of slope `local` through each point, measured at t: lower points (a→b)
    // bound the relation from above, upper points (b→a) from below.
    let at_t = |p: &Point| {
        let (x, y) = d(p);
        y + local * (t - x)
    };
    let above = b.lower.iter().map(at_t).fold(f64::INFINITY, f64::min);
    let below = b.upper.iter().map(at_t).fold(f64::NEG_INFINITY, f64::max);
    Residual {
        bucket: index,
        t,
        centre: (above + below) / 2.0 - slope * t,
    }
}

/// The residuals' noise: the median absolute second difference, scaled to a Gaussian σ (a
/// straight trend has no second difference, and a smooth bend a small one).
fn noise_sigma(r: &[Residual]) -> f64 {
    let mut d: Vec<f64> = r
        .windows(3)
        .map(|w| (w[2].centre - 2.0 * w[1].centre + w[0].centre).abs())
        .collect();
    d.sort_by(f64::total_cmp);
    let median = d[d.len() / 2];
    1.4826 * median / 6f64.sqrt()
}

/// A least-squares line through residuals.
#[derive(Clone, Copy, Debug)]
struct Fit {
    slope: f64,
    at_mean: f64,
    mean_t: f64,
}

impl Fit {
    fn of(r: &[Residual]) -> Fit {
        let n = r.len() as f64;
        let mean_t = r.iter().map(|p| p.t).sum::<f64>() / n;
        let mean_c = r.iter().map(|p| p.centre).sum::<f64>() / n;
        let (mut sxy, mut sxx) = (0.0, 0.0);
        for p in r {
            sxy += (p.t - mean_t) * (p.centre - mean_c);
            sxx += (p.t - mean_t) * (p.t - mean_t);
        }
        Fit {
            slope: if sxx > 0.0 { sxy / sxx } else { 0.0 },
            at_mean: mean_c,
            mean_t,
        }
    }

    /// The largest deviation of the residuals from the line, averaged over `SMOOTHING`
    /// neighbours: a bend is smooth and survives the average, while the noise of single buckets
    /// (the minimum of a few delays: one-sided and long-tailed) shrinks.
    fn max_deviation(&self, r: &[Residual]) -> f64 {
        let d: Vec<f64> = r
            .iter()
            .map(|p| p.centre - (self.at_mean + self.slope * (p.t - self.mean_t)))
            .collect();
        let w = SMOOTHING.min(d.len()).max(1);
        d.windows(w)
            .map(|win| (win.iter().sum::<f64>() / w as f64).abs())
            .fold(0.0, f64::max)
    }

    /// Whether one line fits the residuals: their smoothed deviation stays within what noise of
    /// deviation `sigma` allows.
    fn fits(r: &[Residual], sigma: f64) -> (bool, f64) {
        let w = SMOOTHING.min(r.len()).max(1) as f64;
        let deviation = Fit::of(r).max_deviation(r);
        (
            deviation <= NOISE_SIGMAS * sigma / w.sqrt() + THRESHOLD_FLOOR_NS,
            deviation,
        )
    }
}

/// Halves runs of residuals until one line fits each (at least 3 residuals per run).
fn split(r: &[Residual], sigma: f64, runs: &mut Vec<std::ops::Range<usize>>) {
    if r.len() < 6 || Fit::fits(r, sigma).0 {
        runs.push(0..r.len());
        return;
    }
    let mid = r.len() / 2;
    let mut left = Vec::new();
    split(&r[..mid], sigma, &mut left);
    let mut right = Vec::new();
    split(&r[mid..], sigma, &mut right);
    runs.extend(left);
    runs.extend(right.into_iter().map(|x| x.start + mid..x.end + mid));
}

/// Joins neighbouring runs while one line still fits both (the halving cuts at fixed places,
/// often far from where the clock bends).
fn join(
    r: &[Residual],
    sigma: f64,
    mut runs: Vec<std::ops::Range<usize>>,
) -> Vec<std::ops::Range<usize>> {
    loop {
        // The join that leaves the smallest residual first.
        let best = runs
            .windows(2)
            .enumerate()
            .map(|(k, w)| {
                let (fits, deviation) = Fit::fits(&r[w[0].start..w[1].end], sigma);
                (k, deviation, fits)
            })
            .filter(|&(_, _, fits)| fits)
            .map(|(k, deviation, _)| (k, deviation))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        let Some((k, _)) = best else {
            return runs;
        };
        runs[k] = runs[k].start..runs[k + 1].end;
        runs.remove(k + 1);
    }
}

/// Joins segment lines into one continuous map: a knot at each boundary, halfway between the
/// two segments' lines there; the first and last segments' outer ends on their own line.
pub(crate) fn joined_knots(segments: &[(i64, i64, Affine)]) -> Vec<(f64, f64)> {
    let mut knots = Vec::with_capacity(segments.len() + 1);
    let (start, _, first) = segments[0];
    knots.push((start as f64, first.apply(start as f64)));
    for w in segments.windows(2) {
        let at = w[1].0 as f64;
        knots.push((at, (w[0].2.apply(at) + w[1].2.apply(at)) / 2.0));
    }
    let (_, end, last) = segments[segments.len() - 1];
    knots.push((end as f64, last.apply(end as f64)));
    knots.dedup_by(|b, a| b.0 <= a.0);
    knots
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator of uniform numbers in (0, 1] (xorshift64*).
    struct Uniform(u64);

    impl Uniform {
        fn next(&mut self) -> f64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            ((self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 + 1.0) / (1u64 << 53) as f64
        }
    }

    /// Buckets of messages between a clock `offset(t)` and a perfect one, with 30 µs minimum
    /// delay and exponential jitter.
    fn buckets(seconds: i64, offset: impl Fn(f64) -> f64) -> Vec<HullBucket> {
        let mut rng = Uniform(0x9e37_79b9_7f4a_7c15);
        let mut b = Buckets::default();
        let mut t = 1_000_000_000_000i64;
        let end = t + seconds * 1_000_000_000;
        while t < end {
            let delay = |rng: &mut Uniform| 30_000.0 - 10_000.0 * rng.next().ln();
            let x = t as f64;
            let d = delay(&mut rng);
            b.push_ab(Point::new(t, (x + offset(x) + d) as i64));
            let d = delay(&mut rng);
            b.push_ba(Point::new(
                t + 5_000_000,
                (x + 5e6 + offset(x + 5e6) - d) as i64,
            ));
            t += 20_000_000;
        }
        b.finish()
    }

    #[test]
    fn a_linear_clock_is_one_segment() {
        let b = buckets(1800, |t| 3e6 + 20e-6 * t);
        assert_eq!(cut(&b, 1.0 + 20e-6).len(), 1);
    }

    #[test]
    fn a_bending_clock_is_cut_where_it_bends() {
        // 4 ppm per hour of frequency change, over an hour: 0.5 ms of bend.
        let a = 4e-6 / 3600e9;
        let b = buckets(3600, |t| {
            let s = t - 1e12;
            a / 2.0 * s * s
        });
        let cuts = cut(&b, 1.0);
        assert!(cuts.len() > 4, "{} segments", cuts.len());
        for w in cuts.windows(2) {
            assert_eq!(w[0].last + 1, w[1].first);
        }
        assert_eq!(cuts[0].first, 0);
        assert_eq!(cuts.last().unwrap().last, b.len() - 1);
    }

    #[test]
    fn knots_join_segments_halfway() {
        let l1 = Affine {
            offset_ns: 0.0,
            drift: 1.0,
        };
        let l2 = Affine {
            offset_ns: 10.0,
            drift: 1.0,
        };
        let k = joined_knots(&[(0, 100, l1), (100, 200, l2)]);
        assert_eq!(k, vec![(0.0, 0.0), (100.0, 105.0), (200.0, 210.0)]);
    }
}
