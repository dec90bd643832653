//! `sync`: from inputs to one timebase per group of traces.
//!
//! One streaming pass over the messages feeds, per trace pair (a < b), the two half hulls (and,
//! for `linreg`, the offset samples of the exchanges). Then each pair's corridor, estimate and
//! accuracy curve are computed from its hulls, and the reduction composes the pair maps into one
//! map per trace.

pub mod accuracy;
pub mod corridor;
pub mod hull;
pub mod linreg;
pub mod reduction;
mod warnings;

use crate::estimate::accuracy::AccuracyCurve;
use crate::estimate::corridor::{ExactLine, Quality};
use crate::estimate::hull::{HalfHull, Point, Side};
use crate::estimate::linreg::{LinRegAccumulator, LinRegFit};
use crate::estimate::reduction::{Edge, Weight};
use crate::input::InputSet;
use crate::input::error::InputError;
use crate::matching::{MatchOptions, MatchStats};
use crate::model::{Affine, PairTable};
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

/// The result for one trace pair (a < b); maps are from a's clock to b's.
#[derive(Clone, Debug)]
pub struct PairResult {
    /// Lower trace index of the pair.
    pub a: u32,
    /// Higher trace index of the pair.
    pub b: u32,
    /// How good the estimate is; only accurate and approximate pairs are used.
    pub quality: Quality,
    /// The estimate t_b = offset_ns + drift · t_a (None when there is none).
    pub estimate: Option<Affine>,
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
    /// t_ref = drift · t_k + offset_ns.
    pub map: Affine,
    /// False for a trace related to no other trace (its map is then the identity).
    pub synchronized: bool,
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
    lower: HalfHull,
    upper: HalfHull,
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
            lower: HalfHull::new(Side::Lower),
            upper: HalfHull::new(Side::Upper),
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
}

impl PairAccumulator {
    /// An empty accumulator.
    pub fn new() -> Self {
        Self::default()
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
        if m.send_trace < m.recv_trace {
            let p = self.slot(m.send_trace, m.recv_trace);
            p.messages_ab += 1;
            p.x_min = p.x_min.min(m.send_ns);
            p.x_max = p.x_max.max(m.send_ns);
            p.lower.push(Point::new(m.send_ns, m.recv_ns));
        } else {
            let p = self.slot(m.recv_trace, m.send_trace);
            p.messages_ba += 1;
            p.x_min = p.x_min.min(m.recv_ns);
            p.x_max = p.x_max.max(m.recv_ns);
            p.upper.push(Point::new(m.recv_ns, m.send_ns));
        }
    }

    /// Adds one exchange's offset sample.
    pub fn add_exchange(&mut self, x: &Exchange) {
        let (q, r) = (&x.request, &x.reply);
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
    let mut acc = PairAccumulator::new();
    let stats = inputs.for_each_message_in(&matching, &mut acc, progress)?;
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
    let mut pairs: Vec<PairResult> = acc
        .pairs
        .into_iter()
        .map(|p| pair_result(p, options))
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
        if let (Some(map), Some(weight)) = (p.estimate, edge_weight(p)) {
            edges.push(Edge {
                a: p.a,
                b: p.b,
                map,
                weight,
            });
        }
    }
    let (red, reference) = match reduction::reduce(trace_names.len(), &edges, reference) {
        Ok(red) => (red, reference),
        Err(e) => {
            warnings.push(format!("{e}; references chosen automatically"));
            let red = reduction::reduce(trace_names.len(), &edges, None)
                .expect("no reference requested: nothing to reject");
            (red, None)
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
    let traces = red
        .traces
        .into_iter()
        .enumerate()
        .map(|(i, t)| TraceResult {
            index: i as u32,
            name: trace_names[i].clone(),
            group: t.group,
            reference: t.reference,
            map: t.map,
            synchronized: t.synchronized,
            path: t.path,
        })
        .collect();
    SyncResult {
        algorithm: options.algorithm,
        traces,
        pairs,
        matching,
        warnings,
    }
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

fn pair_result(mut p: PairState, options: &SyncOptions) -> PairResult {
    let out_of_order = p.lower.out_of_order() + p.upper.out_of_order();
    let hull_ab = p.lower.finish().to_vec();
    let hull_ba = p.upper.finish().to_vec();
    let span = (p.x_min <= p.x_max).then_some((p.x_min, p.x_max));
    let c = corridor::analyze(&hull_ab, &hull_ba);
    let mut result = PairResult {
        a: p.a,
        b: p.b,
        quality: c.quality,
        estimate: c.estimate,
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
    if let (Quality::Accurate, Some(min), Some(max)) = (c.quality, c.minslope, c.maxslope) {
        result.accuracy = Some(accuracy::curve(
            &result.hull_ab,
            &result.hull_ba,
            &min,
            &max,
        ));
    }
    if options.algorithm == Algorithm::Linreg {
        let fit = p.linreg.fit(options.linreg_filter_z);
        result.quality = if fit.is_some() {
            Quality::Approximate
        } else {
            Quality::Absent
        };
        result.estimate = fit.as_ref().map(|f| f.line);
        result.approx_error_ns = None;
        result.linreg = fit;
    }
    result
}
