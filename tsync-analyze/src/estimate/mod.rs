//! `sync`: from inputs to one timebase per group of traces.
//!
//! One streaming pass over the messages feeds, per trace pair (a < b), the two half hulls (and,
//! for `linreg`, the offset samples of the exchanges). Then each pair's corridor, estimate and
//! accuracy curve are computed from its hulls, and the reduction composes the pair maps into one
//! map per trace.

pub mod accuracy;
pub mod corridor;
pub mod hull;
pub mod joint;
pub mod linreg;
pub mod network;
pub mod reduction;
mod segments;
pub mod timebase;
mod warnings;

use crate::estimate::accuracy::AccuracyCurve;
use crate::estimate::corridor::{ExactLine, Quality};
use crate::estimate::hull::{Point, Side};
use crate::estimate::joint::{JointEdge, ReductionChoice};
use crate::estimate::linreg::{LinRegAccumulator, LinRegFit};
use crate::estimate::reduction::{Edge, Weight};
use crate::estimate::segments::{Buckets, Cut, HullBucket};
use crate::estimate::timebase::{TimebaseChoice, Timebases};
use crate::input::InputSet;
use crate::input::error::InputError;
use crate::matching::{MatchOptions, MatchStats};
use crate::model::{Affine, PairTable, PiecewiseMap};
use crate::model::{Exchange, MatchedMessage, Message, MessageSink};

/// Which estimator to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Algorithm {
    /// Convex hull (Duda/Haddad/Poirier), with guaranteed accuracy.
    #[default]
    Chull,
    /// Linear regression on exchanges (Clément & Dagenais).
    Linreg,
}

impl Algorithm {
    /// Lowercase name, as in reports and JSON (the serde name).
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::Chull => "chull",
            Algorithm::Linreg => "linreg",
        }
    }
}

/// Options of [`run`].
#[derive(Clone, Debug, Default)]
pub struct SyncOptions {
    /// Estimator to use (default: convex hull).
    pub algorithm: Algorithm,
    /// Reference trace, by name or index (forces the reference of its group).
    pub reference: Option<String>,
    /// How events are matched into messages; `run` turns exchange pairing on for `linreg`.
    pub matching: MatchOptions,
    /// `linreg` only: one-sided outlier filter, drop exchanges whose error margin exceeds
    /// mean + z·σ (the paper's 90 % level is z = 1.64).
    pub linreg_filter_z: Option<f64>,
    /// The clocks to estimate on (default: each node's raw clock where its samples allow).
    pub timebase: TimebaseChoice,
    /// How pair maps become trace maps (default: the joint estimate over every pair).
    pub reduction: ReductionChoice,
}

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
    inverses: Vec<PiecewiseMap>,
}

impl SyncResult {
    /// The pair (a, b), in either order.
    pub fn pair(&self, a: u32, b: u32) -> Option<&PairResult> {
        let (a, b) = (a.min(b), a.max(b));
        self.pairs.iter().find(|p| p.a == a && p.b == b)
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

/// Why `sync` could not run.
#[derive(thiserror::Error, Debug)]
pub enum SyncError {
    /// An input could not be read.
    #[error(transparent)]
    Input(#[from] InputError),
    /// `--reference` named no trace (the name or index given).
    #[error("--reference {0}: no trace has this name or index")]
    UnknownReference(String),
}

/// Per-pair accumulation during the message pass.
#[derive(Clone, Debug)]
struct PairState {
    a: u32,
    b: u32,
    buckets: Buckets,
    messages_ab: u64,
    messages_ba: u64,
    x_min: i64,
    x_max: i64,
    linreg: LinRegAccumulator,
}

impl PairState {
    fn new(a: u32, b: u32) -> Self {
        PairState {
            a,
            b,
            buckets: Buckets::default(),
            messages_ab: 0,
            messages_ba: 0,
            x_min: i64::MAX,
            x_max: i64::MIN,
            linreg: LinRegAccumulator::default(),
        }
    }
}

/// The message sink that builds the hulls: the per-message hot path.
#[derive(Clone, Debug, Default)]
pub struct PairAccumulator {
    /// Slot of pair (a, b) in `pairs`.
    index: PairTable<u32>,
    pairs: Vec<PairState>,
    /// Converts message times to the estimation clocks.
    timebases: Timebases,
    /// Whether any trace is converted (decided once: the per-message path then skips it).
    converting: bool,
}

impl PairAccumulator {
    /// An empty accumulator on the recorded clocks.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty accumulator that converts message times with `timebases` first.
    pub fn with_timebases(timebases: Timebases) -> Self {
        PairAccumulator {
            converting: !timebases.all_recorded(),
            timebases,
            ..Self::default()
        }
    }

    #[inline]
    fn slot(&mut self, a: u32, b: u32) -> &mut PairState {
        let pairs = &mut self.pairs;
        let s = *self.index.get_or_insert_with(a, b, || {
            pairs.push(PairState::new(a, b));
            (pairs.len() - 1) as u32
        });
        &mut self.pairs[s as usize]
    }

    /// Adds one message.
    #[inline]
    pub fn add(&mut self, m: &Message) {
        let Message {
            send_ns, recv_ns, ..
        } = self.converted(m);
        if m.send_trace < m.recv_trace {
            let p = self.slot(m.send_trace, m.recv_trace);
            p.messages_ab += 1;
            p.x_min = p.x_min.min(send_ns);
            p.x_max = p.x_max.max(send_ns);
            p.buckets.push_ab(Point::new(send_ns, recv_ns));
        } else {
            let p = self.slot(m.recv_trace, m.send_trace);
            p.messages_ba += 1;
            p.x_min = p.x_min.min(recv_ns);
            p.x_max = p.x_max.max(recv_ns);
            p.buckets.push_ba(Point::new(recv_ns, send_ns));
        }
    }

    /// A message with its times on the estimation clocks.
    #[inline]
    pub fn converted(&mut self, m: &Message) -> Message {
        if !self.converting {
            return *m;
        }
        Message {
            send_ns: self.timebases.convert(m.send_trace, m.send_ns),
            recv_ns: self.timebases.convert(m.recv_trace, m.recv_ns),
            ..*m
        }
    }

    /// Adds one exchange's offset sample.
    pub fn add_exchange(&mut self, x: &Exchange) {
        let (q, r) = (&self.converted(&x.request), &self.converted(&x.reply));
        // Times of the exchange on each clock: request send + reply receive on the initiator,
        // request receive + reply send on the responder.
        let (init_sum, resp_sum) = (q.send_ns + r.recv_ns, q.recv_ns + r.send_ns);
        let e = x.rtt_ns().max(0) as f64 / 2.0;
        let (a, b) = (
            q.send_trace.min(q.recv_trace),
            q.send_trace.max(q.recv_trace),
        );
        let (mid2_a, mid2_b) = if q.send_trace == a {
            (init_sum, resp_sum)
        } else {
            (resp_sum, init_sum)
        };
        self.slot(a, b).linreg.add(mid2_a, mid2_b, e);
    }
}

impl MessageSink for PairAccumulator {
    #[inline]
    fn message(&mut self, m: &MatchedMessage<'_>) {
        self.add(&m.message);
    }

    fn exchange(&mut self, e: &Exchange) {
        self.add_exchange(e);
    }

    fn wants_events(&self) -> bool {
        false
    }
}

/// The trace `options.reference` names (by name or index), if it names one.
pub(crate) fn reference_trace(
    inputs: &InputSet,
    options: &SyncOptions,
) -> Result<Option<u32>, SyncError> {
    options
        .reference
        .as_ref()
        .map(|r| {
            inputs
                .find_trace(r)
                .ok_or_else(|| SyncError::UnknownReference(r.clone()))
        })
        .transpose()
}

/// Runs `sync` on a set of inputs. `progress(bytes)` reports input consumption.
pub fn run(
    inputs: &InputSet,
    options: &SyncOptions,
    progress: &mut dyn FnMut(u64),
) -> Result<SyncResult, SyncError> {
    let reference = reference_trace(inputs, options)?;
    let mut matching = options.matching.clone();
    matching.exchanges |= options.algorithm == Algorithm::Linreg;
    let (timebases, mut notes) = timebase::resolve(inputs, options.timebase)?;
    let mut acc = PairAccumulator::with_timebases(timebases);
    let mut stats = inputs.for_each_message_in(&matching, &mut acc, progress)?;
    stats.warnings.append(&mut notes);
    let names: Vec<String> = inputs.traces.iter().map(|t| t.name.clone()).collect();
    Ok(finish(acc, &names, stats, options, reference))
}

/// Runs `sync` on messages given in memory (tests, simulations, other tools).
pub fn run_messages(
    trace_names: &[String],
    messages: impl IntoIterator<Item = Message>,
    options: &SyncOptions,
    reference: Option<u32>,
) -> SyncResult {
    let mut acc = PairAccumulator::new();
    let mut pairing = crate::matching::exchange::ReplyPairing::new();
    let mut stats = MatchStats::default();
    for m in messages {
        stats.events += 2;
        if m.send_trace == m.recv_trace {
            stats.same_trace += 1;
            continue;
        }
        stats.matched += 1;
        acc.add(&m);
        if options.algorithm == Algorithm::Linreg
            && let Some(x) = pairing.push(m)
        {
            stats.exchanges += 1;
            acc.add_exchange(&x);
        }
    }
    finish(acc, trace_names, stats, options, reference)
}

/// Computes pair results and the reduction from the accumulated hulls.
pub fn finish(
    acc: PairAccumulator,
    trace_names: &[String],
    matching: MatchStats,
    options: &SyncOptions,
    reference: Option<u32>,
) -> SyncResult {
    let mut warnings = matching.warnings.clone();
    let mut timebases = acc.timebases;
    timebases.settle_bounds();
    let mut pairs: Vec<PairResult> = acc
        .pairs
        .into_iter()
        .map(|p| {
            // Converted times may be off by the conversions' bounds: the hull points move
            // outward by that much (the slope is within 0.1 % of 1) so that every interval
            // still holds the true line between the raw clocks.
            let relax = (timebases.bound_ns(p.a) * 1.001 + timebases.bound_ns(p.b)).ceil() as i64;
            pair_result(p, options, relax)
        })
        .collect();
    pairs.sort_by_key(|p| (p.a, p.b));
    let name = |i: u32| &trace_names[i as usize];
    let mut edges = Vec::new();
    for p in &pairs {
        match p.quality {
            Quality::Accurate => {}
            Quality::Approximate if options.algorithm == Algorithm::Chull => {
                warnings.push(format!(
                    "pair {}–{}: the half hulls cross, no line separates the messages of the two \
                 directions (clocks not linear over the trace, or events misattributed); using \
                 Ashton's minimum-error line WITHOUT any guarantee — message inversions are \
                 possible. Try a shorter trace or --algorithm linreg.",
                    name(p.a),
                    name(p.b)
                ))
            }
            Quality::Approximate => {}
            Quality::Incomplete => warnings.push(format!(
                "pair {}–{}: one limit line is unbounded (the messages of one direction all come \
                 after those of the other); the pair is not used",
                name(p.a),
                name(p.b)
            )),
            Quality::Absent => warnings.push(format!(
                "pair {}–{}: messages in one direction only ({} a→b, {} b→a); the pair is not used",
                name(p.a),
                name(p.b),
                p.messages_ab,
                p.messages_ba
            )),
            Quality::Fail => warnings.push(format!(
                "pair {}–{}: no estimate could be computed; the pair is not used",
                name(p.a),
                name(p.b)
            )),
        }
        if let (Some(line), Some(map), Some(weight)) = (p.estimate, &p.map, edge_weight(p)) {
            edges.push(Edge {
                a: p.a,
                b: p.b,
                map: map.clone(),
                line,
                weight,
            });
        }
    }
    let (mut red, reference) = match reduction::reduce(trace_names.len(), &edges, reference) {
        Ok(red) => (red, reference),
        Err(e) => {
            warnings.push(format!("{e}; references chosen automatically"));
            let red = reduction::reduce(trace_names.len(), &edges, None)
                .expect("no reference requested: nothing to reject");
            (red, None)
        }
    };
    let informed = match options.reduction {
        ReductionChoice::Path => vec![0; trace_names.len()],
        ReductionChoice::Joint => {
            let joint_edges: Vec<JointEdge<'_>> = edges
                .iter()
                .filter_map(|e| {
                    let pair = pairs.iter().find(|p| p.a == e.a && p.b == e.b)?;
                    let span = pair.span?;
                    let sigma_ns = e.weight.ns * if e.weight.best_effort > 0 { 10.0 } else { 1.0 };
                    Some(JointEdge {
                        edge: e,
                        sigma_ns,
                        span,
                        centre: (pair.segments.len() == 1)
                            .then(|| {
                                let range = pair
                                    .minslope
                                    .zip(pair.maxslope)
                                    .map(|(lo, hi)| hi.line.drift - lo.line.drift);
                                joint::centre(&pair.hull_ab, &pair.hull_ba, range)
                            })
                            .flatten(),
                    })
                })
                .collect();
            joint::refine(&mut red, &joint_edges)
        }
    };
    warnings.extend(warnings::unsynchronized(&red, trace_names));
    if let Some(r) = reference {
        let g = red.traces[r as usize].group;
        if red.traces.iter().any(|t| t.group != g) {
            warnings.push(format!(
                "reference {} only applies to its own group; the other groups got automatic references",
                trace_names[r as usize]
            ));
        }
    }
    let spans = trace_spans(&pairs, &timebases, trace_names.len());
    let traces: Vec<TraceResult> = red
        .traces
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            let map = timebases.recorded_map(i as u32, t.reference, &t.map);
            let line = if timebases.all_recorded() && informed[i] == 0 {
                t.line
            } else {
                map.chord()
            };
            TraceResult {
                index: i as u32,
                name: trace_names[i].clone(),
                group: t.group,
                reference: t.reference,
                map,
                line,
                synchronized: t.synchronized,
                timebase: if timebases.of(i as u32).is_some() {
                    TimebaseChoice::Raw
                } else {
                    TimebaseChoice::Recorded
                },
                conversion_bound_ns: timebases.bound_ns(i as u32),
                pairs_used: informed[i],
                span_ns: spans[i],
                path: t.path,
            }
        })
        .collect();
    let inverses = traces
        .iter()
        .map(|t: &TraceResult| t.map.inverse())
        .collect();
    let mut result = SyncResult {
        algorithm: options.algorithm,
        traces,
        pairs,
        matching,
        warnings,
        timebases,
        reduction: options.reduction,
        inverses,
    };
    for cycle in network::contradictions(&result, &result.inverses, 5) {
        let names: Vec<String> = cycle
            .iter()
            .map(|&(a, b)| format!("{}–{}", trace_names[a as usize], trace_names[b as usize]))
            .collect();
        result.warnings.push(format!(
            "the guaranteed intervals of pairs {} contradict each other (no clocks satisfy them \
             all: a clock that broke the model, or wrongly matched messages); their network-wide \
             intervals are not used",
            names.join(", ")
        ));
    }
    result
}

/// Each trace's span of messages on its recorded clock, from the pairs' spans.
fn trace_spans(
    pairs: &[PairResult],
    timebases: &Timebases,
    traces: usize,
) -> Vec<Option<(i64, i64)>> {
    let mut spans: Vec<Option<(f64, f64)>> = vec![None; traces];
    let mut widen = |k: u32, lo: f64, hi: f64| {
        let s = &mut spans[k as usize];
        *s = Some(s.map_or((lo, hi), |(a, b)| (a.min(lo), b.max(hi))));
    };
    for p in pairs {
        let (Some((lo, hi)), Some(map)) = (p.span, &p.map) else {
            continue;
        };
        widen(p.a, lo as f64, hi as f64);
        widen(p.b, map.apply(lo as f64), map.apply(hi as f64));
    }
    spans
        .into_iter()
        .enumerate()
        .map(|(k, s)| {
            s.map(|(lo, hi)| {
                let back = |t: f64| match timebases.of(k as u32) {
                    Some(c) => c.from_raw.apply(t),
                    None => t,
                };
                (back(lo).floor() as i64, back(hi).ceil() as i64)
            })
        })
        .collect()
}

/// Uncertainty of a pair estimate for the choice of references and paths.
fn edge_weight(p: &PairResult) -> Option<Weight> {
    match p.quality {
        Quality::Accurate => Some(Weight {
            best_effort: 0,
            ns: p.accuracy.as_ref().map_or(0.0, |a| a.stats.mean),
        }),
        Quality::Approximate => {
            if let Some(l) = &p.linreg {
                Some(Weight {
                    best_effort: 0,
                    ns: l.residual_std_ns.unwrap_or(l.mean_error_ns),
                })
            } else {
                Some(Weight {
                    best_effort: 1,
                    ns: p.approx_error_ns.unwrap_or(0.0),
                })
            }
        }
        _ => None,
    }
}

fn pair_result(p: PairState, options: &SyncOptions, relax: i64) -> PairResult {
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

/// Estimates each cut of a pair on its own, joins them into one map and makes the pair's
/// quality and accuracy theirs. A cut without an accurate estimate joins a neighbour; if that
/// leaves one cut, the pair stays whole.
fn piecewise(
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

/// The guaranteed interval of a corridor whose hull points may be off by `relax` ns (conversion
/// errors, a bend from one line): the points are moved outward by it, so that every line the
/// true relation allows still satisfies them, and the bounds are widened by `widen` (how far the
/// truth may lie from such a line). None when the moved hulls leave a bound open.
fn guaranteed(lower: &[Point], upper: &[Point], relax: i64, widen: i64) -> Option<AccuracyCurve> {
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
