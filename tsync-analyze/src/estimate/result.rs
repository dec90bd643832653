//! What `sync` returns: per pair (its segments, corridor lines and guaranteed intervals), per
//! trace (its map onto the group's reference) and the whole result, with the interval queries
//! that walk from one to the other.

use crate::estimate::Algorithm;
use crate::estimate::accuracy::{self, AccuracyCurve};
use crate::estimate::corridor::{ExactLine, Quality};
use crate::estimate::hull::Point;
use crate::estimate::joint::ReductionChoice;
use crate::estimate::linreg::LinRegFit;
use crate::estimate::network;
use crate::estimate::timebase::{TimebaseChoice, Timebases};
use crate::matching::MatchStats;
use crate::model::{Affine, PiecewiseMap};

/// A limit line of the corridor: the map `t_b = offset_ns + drift · t_a` through two message
/// points (Poirier's minimum- and maximum-slope lines).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LimitLine {
    /// The line as a clock map from a's time to b's.
    pub line: Affine,
    /// The two hull points the line passes through (exact).
    pub through: (Point, Point),
}

impl From<ExactLine> for LimitLine {
    fn from(l: ExactLine) -> Self {
        LimitLine {
            line: l.affine(),
            through: (l.p, l.q),
        }
    }
}

/// One segment of a pair: a stretch of time over which one line relates the two clocks.
#[derive(Clone, Debug)]
pub struct PairSegment {
    /// Where the segment starts on a's clock (the first segment also covers what comes before).
    pub start_ns: i64,
    /// Where the next segment starts, or the pair's last message for the last segment.
    pub end_ns: i64,
    /// Quality of this segment's estimate.
    pub quality: Quality,
    /// The segment's line t_b = offset_ns + drift · t_a (None when there is none).
    pub estimate: Option<Affine>,
    /// Guaranteed interval over the segment (accurate segments, chull only), bend included.
    pub accuracy: Option<AccuracyCurve>,
    /// How far the clocks may bend from one line inside the segment, as measured (ns); added to
    /// its interval. 0 when the pair is one segment (the classic linear-clock assumption).
    pub bend_ns: f64,
    /// Ashton's error for an `approximate` segment (ns).
    pub approx_error_ns: Option<f64>,
    /// Messages a→b in the segment.
    pub messages_ab: u64,
    /// Messages b→a in the segment.
    pub messages_ba: u64,
    /// The segment's half hulls (empty for a one-segment pair, whose hulls are the pair's).
    pub hull_ab: Vec<Point>,
    /// Upper half hull of the segment's b→a points.
    pub hull_ba: Vec<Point>,
}

/// The result for one trace pair (a < b); maps are from a's clock to b's.
#[derive(Clone, Debug)]
pub struct PairResult {
    /// Lower trace index of the pair.
    pub a: u32,
    /// Higher trace index of the pair.
    pub b: u32,
    /// How good the estimate is; only accurate and approximate pairs are used.
    pub quality: Quality,
    /// The best single line t_b = offset_ns + drift · t_a over the whole pair (None when there is
    /// none); the map is [`map`](Self::map).
    pub estimate: Option<Affine>,
    /// The pair's map from a's clock to b's: the segments' lines joined continuously (one piece
    /// for a one-segment pair: then exactly `estimate`).
    pub map: Option<PiecewiseMap>,
    /// The segments, in time order (one for a linear pair).
    pub segments: Vec<PairSegment>,
    /// Minimum-slope limit line; None for absent and approximate pairs, or when unbounded.
    pub minslope: Option<LimitLine>,
    /// Maximum-slope limit line; None for absent and approximate pairs, or when unbounded.
    pub maxslope: Option<LimitLine>,
    /// Messages a→b and b→a.
    pub messages_ab: u64,
    /// Messages b→a.
    pub messages_ba: u64,
    /// Lower half hull of a→b points (x = send on a, y = receive on b).
    pub hull_ab: Vec<Point>,
    /// Upper half hull of b→a points (x = receive on a, y = send on b).
    pub hull_ba: Vec<Point>,
    /// Points that arrived out of time order (kept, not dropped).
    pub out_of_order: u64,
    /// Guaranteed interval at every hull abscissa (accurate pairs, chull only).
    pub accuracy: Option<AccuracyCurve>,
    /// Ashton's error for `approximate` chull pairs (ns).
    pub approx_error_ns: Option<f64>,
    /// The regression (linreg only).
    pub linreg: Option<LinRegFit>,
    /// Time span of the pair's messages on a's clock.
    pub span: Option<(i64, i64)>,
    /// Of the messages a→b and b→a, those that came from span files (the rest from packets or
    /// text lines).
    pub from_spans: [u64; 2],
}

impl PairResult {
    /// The guaranteed interval of t_b at `t_a` (ns on b's clock), bend and all; None where the
    /// pair gives none (outside its intervals' span, or no accurate estimate). Between two
    /// segments' intervals, the union of the two nearest, as offsets (a clock that bent is only
    /// known to lie between them).
    pub fn interval_at(&self, t_a: i64) -> Option<(f64, f64)> {
        if self.segments.len() <= 1 {
            return self.accuracy.as_ref()?.at(t_a);
        }
        let k = self
            .segments
            .partition_point(|s| s.start_ns <= t_a)
            .saturating_sub(1);
        let curve = self.segments[k].accuracy.as_ref()?;
        if let Some(interval) = curve.at(t_a) {
            return Some(interval);
        }
        // Before the segment's first interval point or after its last: the neighbour's nearest.
        let (first, last) = (curve.points.first()?, curve.points.last()?);
        let (near, other) = if t_a < first.t_a {
            let prev = self.segments.get(k.checked_sub(1)?)?.accuracy.as_ref()?;
            (first, prev.points.last()?)
        } else {
            let next = self.segments.get(k + 1)?.accuracy.as_ref()?;
            (last, next.points.first()?)
        };
        let t = t_a as f64;
        let off = |p: &accuracy::AccuracyPoint| (p.lo - p.t_a as f64, p.hi - p.t_a as f64);
        let ((l1, h1), (l2, h2)) = (off(near), off(other));
        Some((t + l1.min(l2), t + h1.max(h2)))
    }

    /// The guaranteed interval of t_a for a time `t_b` of b's clock: where the bounds of
    /// [`interval_at`](Self::interval_at) reach `t_b` (both rise with t_a).
    pub fn interval_back(&self, t_b: f64) -> Option<(f64, f64)> {
        let curve = self.accuracy.as_ref()?;
        let (first, last) = (curve.points.first()?.t_a, curve.points.last()?.t_a);
        // The smallest t_a whose upper bound reaches t_b, the largest whose lower bound does not
        // pass it.
        let lo = bisect(first, last, |t| self.interval_at(t).map(|i| i.1 >= t_b))?;
        let hi = bisect(first, last, |t| self.interval_at(t).map(|i| i.0 > t_b))?;
        Some((lo as f64 - 1.0, hi as f64))
    }
}

/// The first t in [lo, hi] where `above` turns true (it must be monotone); None when `above` is
/// unknown or never true there — or already true at `lo` (t_b lies before the span).
fn bisect(lo: i64, hi: i64, above: impl Fn(i64) -> Option<bool>) -> Option<i64> {
    if above(lo)? || !above(hi)? {
        return None;
    }
    let (mut lo, mut hi) = (lo, hi);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if above(mid)? {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Some(hi)
}

/// The result for one trace.
#[derive(Clone, Debug)]
pub struct TraceResult {
    /// Position of the trace in the inputs.
    pub index: u32,
    /// Trace name, as in the inputs.
    pub name: String,
    /// Connected group number (0, 1, … in order of each group's lowest trace index).
    pub group: u32,
    /// Reference trace of the group: its clock is the group's timebase.
    pub reference: u32,
    /// t_ref = map(t_k): the pair maps composed along the path, piecewise where a pair is.
    pub map: PiecewiseMap,
    /// The best single line t_ref = drift · t_k + offset_ns (each pair's whole-trace line
    /// composed), for readers that take one line.
    pub line: Affine,
    /// False for a trace related to no other trace (its map is then the identity).
    pub synchronized: bool,
    /// The clock its messages were estimated on: `raw` when its recorded times were converted
    /// to its raw clock (the map still starts from the recorded clock).
    pub timebase: TimebaseChoice,
    /// Error bound of that conversion (ns; 0 on the recorded clock).
    pub conversion_bound_ns: f64,
    /// Pairs the joint estimate combined into this trace's map (0 where the path maps were kept:
    /// `--reduction path`, a reference, or a group whose pairs form no loop).
    pub pairs_used: usize,
    /// First and last local time (recorded clock) of the trace's messages.
    pub span_ns: Option<(i64, i64)>,
    /// Traces from the reference to this one along which pair maps were composed.
    pub path: Vec<u32>,
}

/// Everything `sync` found.
#[derive(Clone, Debug)]
pub struct SyncResult {
    /// Estimator that was used.
    pub algorithm: Algorithm,
    /// One result per input trace, in input order.
    pub traces: Vec<TraceResult>,
    /// Pairs with at least one message, sorted by (a, b).
    pub pairs: Vec<PairResult>,
    /// What matching did with the events, with the input warnings.
    pub matching: MatchStats,
    /// Things the user must know (unsynchronized traces, crossing hulls, several groups, …).
    pub warnings: Vec<String>,
    /// How each trace's times were converted before estimation.
    pub timebases: Timebases,
    /// How the pair maps became trace maps.
    pub reduction: ReductionChoice,
    /// Each trace's map inverted (reference time → the trace's recorded clock).
    pub(super) inverses: Vec<PiecewiseMap>,
    /// What the network-wide intervals share, built by the first query.
    pub(super) network: network::Network,
}

impl SyncResult {
    /// The threads the queries' searches use (`--threads`; 0 or 1: the calling thread).
    pub(crate) fn threads(&self) -> usize {
        self.network.threads()
    }

    /// The pair (a, b), in either order.
    pub fn pair(&self, a: u32, b: u32) -> Option<&PairResult> {
        let (a, b) = (a.min(b), a.max(b));
        let i = self
            .pairs
            .binary_search_by_key(&(a, b), |p| (p.a, p.b))
            .ok()?;
        Some(&self.pairs[i])
    }

    /// Maps a local time of trace k onto its group's reference timebase.
    pub fn to_reference(&self, trace: u32, t_ns: i64) -> f64 {
        self.traces[trace as usize].map.apply(t_ns as f64)
    }

    /// The guaranteed interval of `trace`'s local time `t_ns` on its reference's timebase: the
    /// network-wide one (every accurate or one-sided pair of the group, [`network`]), which is
    /// never wider than the path's; the path's where the network leaves a side open or
    /// contradicts itself. None where neither gives a guarantee.
    pub fn interval(&self, trace: u32, t_ns: i64) -> Option<(f64, f64)> {
        match self.network_interval(trace, t_ns) {
            Some(n) => Some((n.lo, n.hi)),
            None => self.path_interval(trace, t_ns),
        }
    }

    /// The network-wide interval with its path counterpart and the pairs that bound it.
    pub fn network_interval(&self, trace: u32, t_ns: i64) -> Option<network::NetworkInterval> {
        network::interval(self, &self.inverses, trace, t_ns)
    }

    /// The guaranteed interval of `trace`'s local time `t_ns` on its reference's timebase along
    /// the trace's path alone: the pairs' intervals carried from pair to pair (each bound through
    /// the bound of the same side, as every bound rises with time). None where a pair on the path
    /// gives no guarantee (approximate, or outside its messages' span); the reference itself is
    /// exact.
    pub fn path_interval(&self, trace: u32, t_ns: i64) -> Option<(f64, f64)> {
        let t = &self.traces[trace as usize];
        if !t.synchronized {
            return None;
        }
        let (mut lo, mut hi) = (t_ns as f64, t_ns as f64);
        if t.reference == trace {
            return Some((lo, hi));
        }
        if let Some(c) = self.timebases.of(trace) {
            let raw = c.to_raw.apply(t_ns as f64);
            let e = c.bound_at(t_ns as f64) + 0.5;
            (lo, hi) = (raw - e, raw + e);
        }
        for step in t.path.windows(2).rev() {
            let (to, from) = (step[0], step[1]);
            let pair = self.pair(from, to)?;
            (lo, hi) = if pair.a == from {
                let low = pair.interval_at(lo.floor() as i64)?.0;
                let high = pair.interval_at(hi.ceil() as i64)?.1;
                (low, high)
            } else {
                let low = pair.interval_back(lo)?.0;
                let high = pair.interval_back(hi)?.1;
                (low, high)
            };
        }
        if let Some(c) = self.timebases.of(t.reference) {
            let (lo_rec, hi_rec) = (c.from_raw.apply(lo), c.from_raw.apply(hi));
            // The bound is in ns of RAW; the recorded clock runs within 0.1 % of it.
            let e = |t: f64| (c.bound_at(t) + 0.5) * 1.001;
            (lo, hi) = (lo_rec - e(lo_rec), hi_rec + e(hi_rec));
        }
        Some((lo, hi))
    }
}
