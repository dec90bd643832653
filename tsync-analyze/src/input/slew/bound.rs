//! The bound: per interval between samples, the region f can be in under the documented
//! assumption (or the worst case where the samples contradict it), and the fitted map's
//! largest distance from that region's edges.

use crate::input::slew::samples::Prepared;
use crate::input::slew::{DENSE_GAP_NS, RATE_DRIFT_PPM_PER_S, WORST_RATE_PPM};
use crate::model::PiecewiseMap;

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
pub(super) fn interval_bound(
    p: &Prepared,
    i: usize,
    g: &PiecewiseMap,
    candidates: &mut Vec<f64>,
) -> f64 {
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
