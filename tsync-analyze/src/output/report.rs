//! What `sync` prints: a report for people and, for programs, the `sync --json` document
//! (docs/json.md). Numbers are printed at full precision (shortest round-trip form of each f64):
//! the reference tool printed 6 significant digits and lost about a millisecond on offsets.

use serde::Serialize;
use serde_json::Value;

use crate::estimate::accuracy::AccuracyStats;
use crate::estimate::corridor::Quality;
use crate::estimate::parallel::map_in_order;
use crate::estimate::timebase::TimebaseChoice;
use crate::estimate::{LimitLine, PairResult, PairSegment, SyncResult, TraceResult};
use crate::matching::MatchStats;
use crate::model::PiecewiseMap;

/// The `sync --json` document: every trace's map onto its reference, every pair's estimate and
/// quality, what matching did, and the warnings. Field names are a contract (docs/json.md).
#[derive(Serialize)]
struct SyncDocument<'a> {
    algorithm: &'static str,
    reduction: &'static str,
    traces: Vec<TraceDocument<'a>>,
    pairs: Vec<PairDocument>,
    matching: &'a MatchStats,
    warnings: &'a [String],
}

/// One trace: its map `segments` (complete), and `t_ref = drift · t + offset_ns` its best single
/// line.
#[derive(Serialize)]
struct TraceDocument<'a> {
    index: u32,
    name: &'a str,
    group: u32,
    reference: u32,
    drift: f64,
    offset_ns: f64,
    segments: Vec<PieceDocument>,
    synchronized: bool,
    path: &'a [u32],
    timebase: TimebaseChoice,
    conversion_bound_ns: f64,
    pairs_used: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    span_ns: Option<[i64; 2]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    interval: Option<IntervalDocument>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    intervals: Vec<IntervalPoint>,
}

/// A trace's network-wide interval at the middle of its span.
#[derive(Serialize)]
struct IntervalDocument {
    at_ns: i64,
    lo_ns: f64,
    hi_ns: f64,
    width_ns: f64,
    path_width_ns: Option<f64>,
    pairs: Vec<[u32; 2]>,
}

/// The interval at one local time.
#[derive(Serialize)]
struct IntervalPoint {
    at_ns: i64,
    lo_ns: f64,
    hi_ns: f64,
}

/// Points across a trace's span where the JSON gives its interval.
const INTERVAL_POINTS: usize = 11;

fn intervals(r: &SyncResult, t: &TraceResult) -> (Option<IntervalDocument>, Vec<IntervalPoint>) {
    let Some((first, last)) = t
        .span_ns
        .filter(|_| t.synchronized && t.reference != t.index)
    else {
        return (None, Vec::new());
    };
    let mid = first + (last - first) / 2;
    let middle = r.network_interval(t.index, mid);
    let points = (0..INTERVAL_POINTS)
        .filter_map(|i| {
            let at =
                first + ((last - first) as f64 * i as f64 / (INTERVAL_POINTS - 1) as f64) as i64;
            // The point in the middle is `mid`: its network interval is solved above already
            // (a solve is a search over every pair of the group); the rest is `SyncResult::interval`.
            let interval = if at == mid {
                let network = middle.as_ref().map(|n| (n.lo, n.hi));
                network.or_else(|| r.path_interval(t.index, at))
            } else {
                r.interval(t.index, at)
            };
            interval.map(|(lo, hi)| IntervalPoint {
                at_ns: at,
                lo_ns: lo,
                hi_ns: hi,
            })
        })
        .collect();
    let middle = middle.map(|n| IntervalDocument {
        at_ns: mid,
        lo_ns: n.lo,
        hi_ns: n.hi,
        width_ns: n.hi - n.lo,
        path_width_ns: n.path.map(|(lo, hi)| hi - lo),
        pairs: n.pairs.iter().map(|&(a, b)| [a, b]).collect(),
    });
    (middle, points)
}

/// One piece of a map: `t_to = drift · t + offset_ns` from `start_ns` to the next piece's start
/// (the first piece also before, the last after).
#[derive(Serialize)]
struct PieceDocument {
    drift: f64,
    offset_ns: f64,
    start_ns: f64,
}

/// The pieces of a map; a first piece without an earlier bound starts at 0 (it applies before
/// its start anyway).
fn pieces(map: &PiecewiseMap) -> Vec<PieceDocument> {
    map.pieces()
        .iter()
        .map(|p| PieceDocument {
            start_ns: if p.start_ns.is_finite() {
                p.start_ns
            } else {
                0.0
            },
            drift: p.line.drift,
            offset_ns: p.line.offset_ns,
        })
        .collect()
}

/// One segment of a pair.
#[derive(Serialize)]
struct SegmentDocument {
    a0_ns: Option<f64>,
    a1: Option<f64>,
    accuracy_ns: Option<AccuracyStats>,
    bend_ns: f64,
    end_ns: i64,
    messages_ab: u64,
    messages_ba: u64,
    quality: Quality,
    start_ns: i64,
}

impl From<&PairSegment> for SegmentDocument {
    fn from(s: &PairSegment) -> Self {
        SegmentDocument {
            start_ns: s.start_ns,
            end_ns: s.end_ns,
            quality: s.quality,
            a0_ns: s.estimate.map(|e| e.offset_ns),
            a1: s.estimate.map(|e| e.drift),
            accuracy_ns: s.accuracy.as_ref().map(|a| a.stats),
            bend_ns: s.bend_ns,
            messages_ab: s.messages_ab,
            messages_ba: s.messages_ba,
        }
    }
}

impl<'a> TraceDocument<'a> {
    fn new(r: &SyncResult, t: &'a TraceResult) -> Self {
        let (interval, intervals) = intervals(r, t);
        TraceDocument {
            index: t.index,
            name: &t.name,
            group: t.group,
            reference: t.reference,
            drift: t.line.drift,
            offset_ns: t.line.offset_ns,
            segments: pieces(&t.map),
            synchronized: t.synchronized,
            path: &t.path,
            timebase: t.timebase,
            conversion_bound_ns: t.conversion_bound_ns,
            pairs_used: t.pairs_used,
            span_ns: t.span_ns.map(|(a, b)| [a, b]),
            interval,
            intervals,
        }
    }
}

/// A line `t_b = a0_ns + a1 · t_a` as the document writes lines.
#[derive(Serialize)]
struct LineDocument {
    a0_ns: f64,
    a1: f64,
}

impl From<&LimitLine> for LineDocument {
    fn from(l: &LimitLine) -> Self {
        LineDocument {
            a0_ns: l.line.offset_ns,
            a1: l.line.drift,
        }
    }
}

/// The regression's figures of a `linreg` pair.
#[derive(Serialize)]
struct LinRegDocument {
    mean_error_ns: f64,
    residual_std_ns: Option<f64>,
    samples: u64,
    used: u64,
}

/// One pair (a < b): the estimate `t_b = a0_ns + a1 · t_a`, the limit lines, the guaranteed
/// interval's width. Extra fields appear only where they apply. The fields (and those of the
/// documents inside) are in the order the printed keys are sorted in: [`write_json`] prints a
/// pair directly, without a value to sort them (a report test compares it with [`to_json`]).
#[derive(Serialize)]
struct PairDocument {
    a: u32,
    a0_ns: Option<f64>,
    a1: Option<f64>,
    accuracy_ns: Option<AccuracyStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    approx_error_ns: Option<f64>,
    b: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    from_spans: Option<FromSpansDocument>,
    hull_points_ab: usize,
    hull_points_ba: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    linreg: Option<LinRegDocument>,
    #[serde(skip_serializing_if = "Option::is_none")]
    map: Option<Vec<PieceDocument>>,
    maxslope: Option<LineDocument>,
    messages_ab: u64,
    messages_ba: u64,
    minslope: Option<LineDocument>,
    out_of_order: u64,
    quality: Quality,
    segments: Vec<SegmentDocument>,
    #[serde(skip_serializing_if = "Option::is_none")]
    span_ns: Option<[i64; 2]>,
}

/// Where a pair's messages came from, when some came from span files: messages a→b and b→a
/// from spans; the rest of `messages_ab`/`messages_ba` came from packets (or text lines).
#[derive(Serialize)]
struct FromSpansDocument {
    messages_ab: u64,
    messages_ba: u64,
}

impl From<&PairResult> for PairDocument {
    fn from(p: &PairResult) -> Self {
        PairDocument {
            a: p.a,
            b: p.b,
            from_spans: (p.from_spans != [0, 0]).then_some(FromSpansDocument {
                messages_ab: p.from_spans[0],
                messages_ba: p.from_spans[1],
            }),
            quality: p.quality,
            a0_ns: p.estimate.map(|e| e.offset_ns),
            a1: p.estimate.map(|e| e.drift),
            minslope: p.minslope.as_ref().map(LineDocument::from),
            maxslope: p.maxslope.as_ref().map(LineDocument::from),
            messages_ab: p.messages_ab,
            messages_ba: p.messages_ba,
            hull_points_ab: p.hull_ab.len(),
            hull_points_ba: p.hull_ba.len(),
            accuracy_ns: p.accuracy.as_ref().map(|a| a.stats),
            out_of_order: p.out_of_order,
            approx_error_ns: p.approx_error_ns,
            linreg: p.linreg.as_ref().map(|l| LinRegDocument {
                samples: l.samples,
                used: l.used,
                residual_std_ns: l.residual_std_ns,
                mean_error_ns: l.mean_error_ns,
            }),
            span_ns: p.span.map(|(lo, hi)| [lo, hi]),
            segments: p.segments.iter().map(SegmentDocument::from).collect(),
            map: p.map.as_ref().map(pieces),
        }
    }
}

/// The `sync --json` document as a JSON value (object keys in alphabetical order, as printed).
pub fn to_json(r: &SyncResult) -> Value {
    let document = SyncDocument {
        algorithm: r.algorithm.as_str(),
        reduction: r.reduction.as_str(),
        traces: r.traces.iter().map(|t| TraceDocument::new(r, t)).collect(),
        pairs: r.pairs.iter().map(PairDocument::from).collect(),
        matching: &r.matching,
        warnings: &r.warnings,
    };
    serde_json::to_value(&document).expect("the document is plain data")
}

/// Writes the `sync --json` document, pretty-printed, exactly as [`to_json`] would print: every
/// object's keys in alphabetical order. The pairs and traces go out one by one, each through its
/// own small value, so that memory does not hold the whole document (a mesh of hundreds of traces
/// has hundreds of thousands of pairs: the whole value tree would take kilobytes per pair). The
/// pairs and the traces are printed on the finishing's threads, a chunk at a time (one thread
/// would spend seconds on them while the others wait), and written in order.
pub fn write_json(r: &SyncResult, mut out: impl std::io::Write) -> serde_json::Result<()> {
    let io = serde_json::Error::io;
    // The keys in alphabetical order, as the value's map sorts them.
    out.write_all(b"{\n  \"algorithm\": ").map_err(io)?;
    out.write_all(&pretty_at(&r.algorithm.as_str(), 1)?)
        .map_err(io)?;
    out.write_all(b",\n  \"matching\": ").map_err(io)?;
    out.write_all(&pretty_at(&serde_json::to_value(&r.matching)?, 1)?)
        .map_err(io)?;
    out.write_all(b",\n  \"pairs\": ").map_err(io)?;
    Elements::new(&mut out).write_on_threads(r.threads(), &r.pairs, PAIR_CHUNK, |p| {
        pretty_at(&PairDocument::from(p), 2)
    })?;
    out.write_all(b",\n  \"reduction\": ").map_err(io)?;
    out.write_all(&pretty_at(&r.reduction.as_str(), 1)?)
        .map_err(io)?;
    out.write_all(b",\n  \"traces\": ").map_err(io)?;
    // A trace's document solves its network-wide interval at 11 instants (each a search over
    // its group's pairs): on the threads too.
    Elements::new(&mut out).write_on_threads(r.threads(), &r.traces, TRACE_CHUNK, |t| {
        pretty_at(&serde_json::to_value(TraceDocument::new(r, t))?, 2)
    })?;
    out.write_all(b",\n  \"warnings\": ").map_err(io)?;
    out.write_all(&pretty_at(&r.warnings, 1)?).map_err(io)?;
    out.write_all(b"\n}").map_err(io)
}

/// Pairs printed per round on the threads: a bound on the text held at once.
const PAIR_CHUNK: usize = 4096;

/// Traces printed per round on the threads: fewer than pairs, as a trace's document is larger
/// (its intervals name the pairs that bound them): 4096 of a 1000-trace mesh held at once took
/// 14 MiB more peak memory.
const TRACE_CHUNK: usize = 64;

/// `value` pretty-printed as it appears `depth` levels down in the document (its lines after the
/// first indented by `depth` steps): printed as the only element of `depth` nested arrays, whose
/// brackets and indentation are then cut off.
fn pretty_at(value: &impl Serialize, depth: usize) -> serde_json::Result<Vec<u8>> {
    struct Nested<'a, T>(&'a T, usize);
    impl<T: Serialize> Serialize for Nested<'_, T> {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            match self.1 {
                0 => self.0.serialize(s),
                d => [Nested(self.0, d - 1)].serialize(s),
            }
        }
    }
    let mut text = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(
        &mut text,
        serde_json::ser::PrettyFormatter::with_indent(b"  "),
    );
    Nested(value, depth).serialize(&mut ser)?;
    let open: usize = (1..=depth).map(|d| 2 + 2 * d).sum();
    let close: usize = (0..depth).map(|d| 2 + 2 * d).sum();
    text.truncate(text.len() - close);
    text.drain(..open);
    Ok(text)
}

/// An array of the document written element by element, two levels down, as the pretty printer
/// lays it out: `[]` when empty, else each element on its own line.
struct Elements<W: std::io::Write> {
    out: W,
    any: bool,
}

impl<W: std::io::Write> Elements<W> {
    fn new(out: W) -> Self {
        Elements { out, any: false }
    }

    fn write(&mut self, printed: &[u8]) -> serde_json::Result<()> {
        let sep: &[u8] = if self.any { b",\n    " } else { b"[\n    " };
        self.any = true;
        self.out.write_all(sep).map_err(serde_json::Error::io)?;
        self.out.write_all(printed).map_err(serde_json::Error::io)
    }

    /// Writes every one of `items`, each as `print` prints it, and ends the array: `print` runs
    /// on `threads` threads, `chunk` items per round (a bound on the text held at once), and the
    /// elements go out in order.
    fn write_on_threads<T: Sync>(
        mut self,
        threads: usize,
        items: &[T],
        chunk: usize,
        print: impl Fn(&T) -> serde_json::Result<Vec<u8>> + Sync + Send,
    ) -> serde_json::Result<()> {
        for round in items.chunks(chunk) {
            for printed in map_in_order(threads, round.iter().collect(), &print) {
                self.write(&printed?)?;
            }
        }
        self.end()
    }

    fn end(mut self) -> serde_json::Result<()> {
        let end: &[u8] = if self.any { b"\n  ]" } else { b"[]" };
        self.out.write_all(end).map_err(serde_json::Error::io)
    }
}

fn us(ns: f64) -> String {
    format!("{:.3} µs", ns / 1000.0)
}

/// The human report.
pub fn to_text(r: &SyncResult) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let name = |i: u32| r.traces[i as usize].name.as_str();
    let m = &r.matching;
    // A count worth a mention only when it is not zero.
    let extra = |n: u64, what: &str| {
        if n > 0 {
            format!(", {n} {what}")
        } else {
            String::new()
        }
    };
    let causes = if m.ambiguous > 0 {
        format!(
            " ({} seen twice on a node, {} through nodes in an unknown order)",
            m.ambiguous_repeated, m.ambiguous_order
        )
    } else {
        String::new()
    };
    let _ = writeln!(
        s,
        "Messages: {} matched from {} events ({} unmatched, {} same-trace, {} ambiguous keys dropped{causes}{}{}{})",
        m.matched,
        m.events,
        m.unmatched,
        m.same_trace,
        m.ambiguous,
        extra(
            m.forwarded,
            "passages through nodes that forwarded the packet"
        ),
        extra(
            m.stacked_copies,
            "copies on stacked devices (bridge, bond, VLAN, tunnel) merged"
        ),
        extra(m.out_of_order, "events out of order in their file"),
    );
    let _ = writeln!(s, "Algorithm: {}", r.algorithm.as_str());
    let _ = writeln!(s, "\nPairs (t_b = a0 + a1·t_a, local ns):");
    for p in &r.pairs {
        let origin = if p.from_spans == [0, 0] {
            String::new()
        } else {
            format!(
                " ({} + {} from packets, {} + {} from spans)",
                p.messages_ab.saturating_sub(p.from_spans[0]),
                p.messages_ba.saturating_sub(p.from_spans[1]),
                p.from_spans[0],
                p.from_spans[1]
            )
        };
        let _ = writeln!(
            s,
            "  {} → {}: {}   messages {} a→b, {} b→a{origin}; hull points {} + {}",
            name(p.a),
            name(p.b),
            p.quality.as_str(),
            p.messages_ab,
            p.messages_ba,
            p.hull_ab.len(),
            p.hull_ba.len()
        );
        if let Some(e) = p.estimate {
            let _ = writeln!(
                s,
                "      estimate  a0 = {} ns, a1 = {}",
                e.offset_ns, e.drift
            );
        }
        if let Some(l) = &p.minslope {
            let _ = writeln!(
                s,
                "      min slope a0 = {} ns, a1 = {}",
                l.line.offset_ns, l.line.drift
            );
        }
        if let Some(l) = &p.maxslope {
            let _ = writeln!(
                s,
                "      max slope a0 = {} ns, a1 = {}",
                l.line.offset_ns, l.line.drift
            );
        }
        match (&p.accuracy, p.quality) {
            (Some(a), _) => {
                let _ = writeln!(
                    s,
                    "      accuracy (guaranteed interval width): best {}, worst {}, mean {}",
                    us(a.stats.best),
                    us(a.stats.worst),
                    us(a.stats.mean)
                );
            }
            (None, Quality::Approximate) => {
                let _ = writeln!(s, "      accuracy: NO GUARANTEE (best-effort estimate)");
            }
            _ => {}
        }
        if p.segments.len() > 1 {
            let _ = writeln!(
                s,
                "      {} segments (the clocks bend; one line per segment, joined continuously):",
                p.segments.len()
            );
            for g in &p.segments {
                let _ = writeln!(
                    s,
                    "        from {} ns: {}, {} + {} messages, drift {:+.4} ppm, interval {}, bend {}",
                    g.start_ns,
                    g.quality.as_str(),
                    g.messages_ab,
                    g.messages_ba,
                    g.estimate.map_or(f64::NAN, |e| (e.drift - 1.0) * 1e6),
                    g.accuracy
                        .as_ref()
                        .map_or("none".into(), |a| us(a.stats.mean)),
                    us(g.bend_ns)
                );
            }
        }
        if let Some(l) = &p.linreg {
            let _ = writeln!(
                s,
                "      regression: {} of {} exchanges used, residual std {}, mean error margin {}",
                l.used,
                l.samples,
                l.residual_std_ns.map_or("n/a".into(), us),
                us(l.mean_error_ns)
            );
        }
        if p.out_of_order > 0 {
            let _ = writeln!(
                s,
                "      {} points reached the hull out of time order (normal for matched traces; all kept)",
                p.out_of_order
            );
        }
    }
    let _ = writeln!(s, "\nTraces (t_ref = drift·t + offset):");
    for t in &r.traces {
        if !t.synchronized {
            let _ = writeln!(s, "  {} (group {}): NOT SYNCHRONIZED", t.name, t.group);
        } else if t.reference == t.index {
            let _ = writeln!(s, "  {} (group {}): reference", t.name, t.group);
        } else {
            let _ = writeln!(
                s,
                "  {} (group {}): reference {}, drift {} ({:+.4} ppm), offset {} ns ({})",
                t.name,
                t.group,
                name(t.reference),
                t.line.drift,
                (t.line.drift - 1.0) * 1e6,
                t.line.offset_ns,
                if t.pairs_used > 0 {
                    format!(
                        "joint estimate over the {} pairs of its group",
                        t.pairs_used
                    )
                } else {
                    // `path` runs from the reference to the trace; print it the way the map goes.
                    format!(
                        "pair maps composed along {}",
                        t.path
                            .iter()
                            .rev()
                            .map(|&i| name(i))
                            .collect::<Vec<_>>()
                            .join(" → ")
                    )
                }
            );
            if !t.map.is_linear() {
                let _ = writeln!(
                    s,
                    "      piecewise: {} pieces (the line above is their chord; --json lists them)",
                    t.map.pieces().len()
                );
            }
        }
        if t.synchronized
            && t.reference != t.index
            && let Some(n) = t
                .span_ns
                .and_then(|(a, b)| r.network_interval(t.index, a + (b - a) / 2))
        {
            let _ = writeln!(
                s,
                "      guaranteed interval at its middle: {} wide{} (bounded by {})",
                us(n.hi - n.lo),
                n.path
                    .map_or(" (its path alone gives none)".into(), |(lo, hi)| {
                        if hi - lo > n.hi - n.lo + 0.5 {
                            format!(", {} along its path alone", us(hi - lo))
                        } else {
                            String::new()
                        }
                    }),
                n.pairs
                    .iter()
                    .map(|&(a, b)| format!("{}–{}", name(a), name(b)))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        if t.timebase == TimebaseChoice::Raw {
            let _ = writeln!(
                s,
                "      estimated on its raw clock (NTP slewing undone from its clock samples, within {})",
                us(t.conversion_bound_ns)
            );
        }
    }
    if !r.warnings.is_empty() {
        let _ = writeln!(s);
        for w in &r.warnings {
            let _ = writeln!(s, "WARNING: {w}");
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Message, SyncOptions, sync_messages};

    #[test]
    fn the_streamed_document_is_the_value_printed() {
        let w = tsync_sim::Workload::sparse(7, 4, 20_000, 5);
        let mut v = Vec::new();
        w.generate(|m, _| {
            v.push(Message {
                send_trace: m.send_trace,
                recv_trace: m.recv_trace,
                send_ns: m.send_ns,
                recv_ns: m.recv_ns,
            })
        });
        let names: Vec<String> = (0..7).map(|i| format!("n{i}")).collect();
        // A lone trace and a warning too.
        let mut names_lone = names.clone();
        names_lone.push("alone".into());
        let r = sync_messages(&names_lone, v.clone(), &SyncOptions::default(), None);
        assert!(!r.warnings.is_empty());
        // The regression's figures too.
        let linreg = SyncOptions {
            algorithm: crate::estimate::Algorithm::Linreg,
            ..SyncOptions::default()
        };
        let lr = sync_messages(&names, v, &linreg, None);
        assert!(lr.pairs.iter().any(|p| p.linreg.is_some()));
        // And a result without pairs (empty arrays print as `[]`).
        let empty = sync_messages(&names, Vec::new(), &SyncOptions::default(), None);
        assert!(empty.pairs.is_empty());
        for r in [&r, &lr, &empty] {
            let mut streamed = Vec::new();
            write_json(r, &mut streamed).unwrap();
            let printed = serde_json::to_string_pretty(&to_json(r)).unwrap();
            assert_eq!(String::from_utf8(streamed).unwrap(), printed);
        }
    }
}
