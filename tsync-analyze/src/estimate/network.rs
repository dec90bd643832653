//! Network-wide guaranteed intervals: every accurate pair bounds the difference of two clocks,
//! and the tightest bound of a trace against its reference is a shortest path over all of them.
//!
//! At one instant, let x_j be trace j's reading (on its estimation clock). An accurate pair (a, b)
//! guarantees x_b ∈ [lo_ab(x_a), hi_ab(x_a)] (its accuracy curve); an `incomplete` pair, whose
//! messages go one way only near x_a or whose corridor is open on one side, still bounds x_b on
//! one side by its hull chain (every message's receive is after its send). The bounds rise with
//! slope within ppm of 1, so around the estimates x̂ they are difference constraints
//! `x_b − x_a ≤ hi_ab(x̂_a) − x̂_a + s` and `x_a − x_b ≤ x̂_a − lo_ab(x̂_a) + s`, where the slack s
//! covers the slope's distance from 1 over how far a true reading can lie from its estimate.
//! Difference constraints are a graph: x_ref − x_k ≤ dist(k → ref) and x_k − x_ref ≤
//! dist(ref → k) (Bellman–Ford from both ends). One path's composition is one of the sums the
//! shortest path minimizes, so the network interval is never wider; and a negative cycle means
//! the constraints contradict each other: a clock that broke the model, or a wrong match.

use crate::estimate::corridor::Quality;
use crate::estimate::hull::Point;
use crate::estimate::{PairResult, SyncResult};
use crate::model::PiecewiseMap;

/// Largest group whose network-wide intervals are computed: Bellman–Ford costs up to traces ×
/// constraints per interval, and a report asks for a dozen per trace. Larger groups (a text file
/// can declare thousands of traces) get their path intervals.
pub const MAX_GROUP: usize = 256;

fn group_size(sync: &SyncResult, group: u32) -> usize {
    sync.traces.iter().filter(|t| t.group == group).count()
}

/// A trace's network-wide interval at one local time.
#[derive(Clone, Debug, PartialEq)]
pub struct NetworkInterval {
    /// Bounds of the reference's time (its recorded clock, ns) for the trace's local time.
    pub lo: f64,
    /// Upper bound.
    pub hi: f64,
    /// The interval composed along the trace's path alone, where it has one.
    pub path: Option<(f64, f64)>,
    /// The pairs (a < b) on the two shortest paths that give the bounds.
    pub pairs: Vec<(u32, u32)>,
}

/// One difference constraint `x[to] − x[from] ≤ bound`, from pair `pair`.
#[derive(Clone, Copy, Debug)]
struct Constraint {
    from: usize,
    to: usize,
    bound: f64,
    pair: (u32, u32),
}

/// The constraints every usable pair of `group` gives at the instant where trace `anchor` reads
/// `t` (recorded), and the estimation-clock readings they were taken at.
fn constraints(
    sync: &SyncResult,
    inverse: &[PiecewiseMap],
    group: u32,
    anchor: u32,
    t: f64,
) -> (Vec<Constraint>, Vec<Option<f64>>) {
    let n = sync.traces.len();
    let at_ref = sync.traces[anchor as usize].map.apply(t);
    let mut x: Vec<Option<f64>> = vec![None; n];
    for (j, tr) in sync.traces.iter().enumerate() {
        if tr.group == group && tr.synchronized {
            let recorded = inverse[j].apply(at_ref);
            x[j] = Some(match sync.timebases.of(j as u32) {
                Some(c) => c.to_raw.apply(recorded),
                None => recorded,
            });
        }
    }
    // How far a true reading may lie from its estimate: the widest pair interval times the
    // traces, far more than any real case; its product with a slope's distance from 1 is the
    // slack (ns for a 100 ppm drift and 10 ms).
    let widest = sync
        .pairs
        .iter()
        .filter_map(|p| p.accuracy.as_ref().map(|a| a.stats.worst))
        .fold(0.0, f64::max);
    let reach = widest * n as f64;
    let mut out = Vec::new();
    for p in &sync.pairs {
        let (a, b) = (p.a as usize, p.b as usize);
        let (Some(xa), Some(_)) = (x[a], x[b]) else {
            continue;
        };
        let drift = p.estimate.map_or(1.0, |e| e.drift);
        let slack = (drift - 1.0).abs() * reach + 1.0;
        let relax = sync.timebases.bound_ns(p.a) * 1.001 + sync.timebases.bound_ns(p.b);
        let (lo, hi) = pair_bounds(p, xa, relax);
        if let Some(hi) = hi {
            out.push(Constraint {
                from: a,
                to: b,
                bound: hi - xa + slack,
                pair: (p.a, p.b),
            });
        }
        if let Some(lo) = lo {
            out.push(Constraint {
                from: b,
                to: a,
                bound: xa - lo + slack,
                pair: (p.a, p.b),
            });
        }
    }
    (out, x)
}

/// What pair `p` guarantees about t_b at t_a: its interval if accurate, else the one-sided bounds
/// of its hull chains (an `incomplete` pair); nothing from an approximate pair, whose hulls cross.
fn pair_bounds(p: &PairResult, t_a: f64, relax: f64) -> (Option<f64>, Option<f64>) {
    match p.quality {
        Quality::Accurate => match p.interval_at(t_a.round() as i64) {
            Some((lo, hi)) => (Some(lo), Some(hi)),
            None => (None, None),
        },
        Quality::Incomplete | Quality::Absent => {
            // a→b messages (the lower hull) bound t_b from above, b→a ones from below; the
            // points may be off by the conversions' bounds.
            (
                chain(&p.hull_ba, t_a).map(|v| v - relax),
                chain(&p.hull_ab, t_a).map(|v| v + relax),
            )
        }
        _ => (None, None),
    }
}

/// A hull chain's value at x, inside its span.
fn chain(h: &[Point], x: f64) -> Option<f64> {
    let i = h.partition_point(|p| (p.x as f64) < x);
    let q = h.get(i)?;
    if q.x as f64 == x {
        return Some(q.y as f64);
    }
    let p = h.get(i.checked_sub(1)?)?;
    let f = (x - p.x as f64) / (q.x - p.x) as f64;
    Some(p.y as f64 + f * (q.y - p.y) as f64)
}

/// Shortest distances from `source` over the constraints, with each node's last constraint;
/// Err with a negative cycle's constraints if one is reachable.
#[allow(clippy::type_complexity)]
fn bellman_ford(
    n: usize,
    cs: &[Constraint],
    source: usize,
) -> Result<(Vec<f64>, Vec<Option<usize>>), Vec<(u32, u32)>> {
    let mut dist = vec![f64::INFINITY; n];
    let mut via: Vec<Option<usize>> = vec![None; n];
    dist[source] = 0.0;
    for _ in 0..n {
        let mut changed = false;
        for (k, c) in cs.iter().enumerate() {
            if dist[c.from] + c.bound < dist[c.to] {
                dist[c.to] = dist[c.from] + c.bound;
                via[c.to] = Some(k);
                changed = true;
            }
        }
        if !changed {
            return Ok((dist, via));
        }
    }
    // Still relaxing after n rounds: walk back n steps from a node that changed to land on the
    // cycle, then collect it.
    let Some(start) = cs
        .iter()
        .find(|c| dist[c.from] + c.bound < dist[c.to])
        .map(|c| c.to)
    else {
        return Ok((dist, via));
    };
    let mut v = start;
    for _ in 0..n {
        v = via[v].map_or(v, |k| cs[k].from);
    }
    let mut cycle = Vec::new();
    let mut u = v;
    while let Some(k) = via[u] {
        cycle.push(cs[k].pair);
        u = cs[k].from;
        if u == v || cycle.len() > n {
            break;
        }
    }
    cycle.reverse();
    cycle.dedup();
    Err(cycle)
}

/// The pairs along the shortest path to `target`.
fn path_pairs(
    cs: &[Constraint],
    via: &[Option<usize>],
    source: usize,
    target: usize,
) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    let mut v = target;
    while v != source {
        let Some(k) = via[v] else { break };
        out.push(cs[k].pair);
        v = cs[k].from;
        if out.len() > via.len() {
            break;
        }
    }
    out
}

/// The network-wide interval of `trace`'s local time `t_ns` on its reference's recorded clock.
/// None for a trace without a group, where the constraints leave a side open, or where they
/// contradict each other.
pub fn interval(
    sync: &SyncResult,
    inverse: &[PiecewiseMap],
    trace: u32,
    t_ns: i64,
) -> Option<NetworkInterval> {
    let tr = &sync.traces[trace as usize];
    if !tr.synchronized || group_size(sync, tr.group) > MAX_GROUP {
        return None;
    }
    let t = t_ns as f64;
    let reference = tr.reference as usize;
    if reference == trace as usize {
        return Some(NetworkInterval {
            lo: t,
            hi: t,
            path: Some((t, t)),
            pairs: Vec::new(),
        });
    }
    let (cs, x) = constraints(sync, inverse, tr.group, trace, t);
    let n = sync.traces.len();
    let (from_k, via_k) = bellman_ford(n, &cs, trace as usize).ok()?;
    let (from_ref, via_ref) = bellman_ford(n, &cs, reference).ok()?;
    let (up, down) = (from_k[reference], from_ref[trace as usize]);
    if !up.is_finite() || !down.is_finite() {
        return None;
    }
    // The trace's own reading on its estimation clock, and that conversion's error.
    let xk = x[trace as usize]?;
    let (xk, ek) = match sync.timebases.of(trace) {
        Some(c) => (c.to_raw.apply(t), c.bound_at(t) + 0.5),
        None => (xk, 0.0),
    };
    // x_ref − x_k ∈ [−down, up].
    let (mut lo, mut hi) = (xk - ek - down, xk + ek + up);
    if let Some(c) = sync.timebases.of(reference as u32) {
        let (lo_rec, hi_rec) = (c.from_raw.apply(lo), c.from_raw.apply(hi));
        let e = |t: f64| (c.bound_at(t) + 0.5) * 1.001;
        (lo, hi) = (lo_rec - e(lo_rec), hi_rec + e(hi_rec));
    }
    let path = sync.path_interval(trace, t_ns);
    if let Some((plo, phi)) = path {
        // Both are guaranteed: their intersection is too (and never wider than the path's).
        lo = lo.max(plo);
        hi = hi.min(phi);
    }
    let mut pairs = path_pairs(&cs, &via_k, trace as usize, reference);
    pairs.extend(path_pairs(&cs, &via_ref, reference, trace as usize));
    pairs.sort_unstable();
    pairs.dedup();
    Some(NetworkInterval {
        lo,
        hi,
        path,
        pairs,
    })
}

/// Contradictions: at `points` times across each group's span, the pairs of every negative
/// cycle of the constraints (each cycle once).
pub fn contradictions(
    sync: &SyncResult,
    inverse: &[PiecewiseMap],
    points: usize,
) -> Vec<Vec<(u32, u32)>> {
    let mut found: Vec<Vec<(u32, u32)>> = Vec::new();
    let n = sync.traces.len();
    for tr in &sync.traces {
        if !tr.synchronized || tr.reference != tr.index || group_size(sync, tr.group) > MAX_GROUP {
            continue;
        }
        let Some((first, last)) = tr.span_ns else {
            continue;
        };
        for i in 0..points {
            let t = first as f64 + (last - first) as f64 * (i as f64 + 0.5) / points as f64;
            let (cs, _) = constraints(sync, inverse, tr.group, tr.index, t);
            if let Err(mut cycle) = bellman_ford(n, &cs, tr.index as usize) {
                cycle.sort_unstable();
                if !cycle.is_empty() && !found.contains(&cycle) {
                    found.push(cycle);
                }
            }
        }
    }
    found
}
