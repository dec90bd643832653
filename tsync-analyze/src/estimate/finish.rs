//! The finishing pass: each pair's estimate from its hulls, the warnings about pairs that are
//! not used, the reduction of pair maps into one map per trace (joint or path), and the maps
//! carried back onto each trace's recorded clock.

use crate::estimate::accumulate::{PairAccumulator, sort_by_pair};
use crate::estimate::corridor::Quality;
use crate::estimate::joint::{self, JointEdge, ReductionChoice};
use crate::estimate::pair::pair_result;
use crate::estimate::parallel::map_in_order;
use crate::estimate::reduction::{self, Edge, Weight};
use crate::estimate::result::{PairResult, SyncResult, TraceResult};
use crate::estimate::timebase::{TimebaseChoice, Timebases};
use crate::estimate::{Algorithm, SyncOptions, network, warnings};
use crate::matching::MatchStats;

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
    let threads = options.matching.thread_count();
    let mut accumulated = acc.pairs;
    sort_by_pair(&mut accumulated);
    // In (a, b) order, as the states are.
    let mut pairs: Vec<PairResult> = map_in_order(threads, accumulated, |p| {
        // Converted times may be off by the conversions' bounds: the hull points move
        // outward by that much (the slope is within 0.1 % of 1) so that every interval
        // still holds the true line between the raw clocks.
        let relax = (timebases.bound_ns(p.a) * 1.001 + timebases.bound_ns(p.b)).ceil() as i64;
        pair_result(p, options, relax)
    });
    for p in &mut pairs {
        if let Some(counts) = matching.from_spans.get(&(p.a, p.b)) {
            p.from_spans = *counts;
        }
    }
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
    let (mut red, reference) =
        match reduction::reduce(trace_names.len(), &edges, reference, threads) {
            Ok(red) => (red, reference),
            Err(e) => {
                warnings.push(format!("{e}; references chosen automatically"));
                let red = reduction::reduce(trace_names.len(), &edges, None, threads)
                    .expect("no reference requested: nothing to reject");
                (red, None)
            }
        };
    let informed = match options.reduction {
        ReductionChoice::Path => vec![0; trace_names.len()],
        ReductionChoice::Joint => {
            let joint_edges: Vec<JointEdge<'_>> =
                map_in_order(threads, edges.iter().collect(), |e| {
                    let at = pairs
                        .binary_search_by_key(&(e.a, e.b), |p| (p.a, p.b))
                        .ok()?;
                    let pair = &pairs[at];
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
                .into_iter()
                .flatten()
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
        network: network::Network::new(threads),
    };
    for cycle in network::contradictions(&result, &result.inverses, 5, threads) {
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
