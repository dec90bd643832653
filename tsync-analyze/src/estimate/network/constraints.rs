//! The difference constraints of one group at one instant: each usable pair's guaranteed bounds
//! around the estimates, `x[to] − x[from] ≤ bound`.
//!
//! A constraint is named by its pair and side (`2·pair + side`, the pair's index in
//! `SyncResult::pairs`): the same name at every instant, so that a path found at one instant can
//! be evaluated exactly at another.

use crate::estimate::corridor::Quality;
use crate::estimate::hull::Point;
use crate::estimate::{PairResult, SyncResult};
use crate::model::PiecewiseMap;
use crate::prefetch::prefetch;

/// The traces and pairs of one group, with local node numbers for the path searches.
#[derive(Clone, Debug, Default)]
pub(crate) struct Group {
    /// The synchronized traces of the group (local node i is `members[i]`).
    pub members: Vec<u32>,
    /// Indices in `SyncResult::pairs` of the pairs with both traces among the members.
    pub pairs: Vec<u32>,
}

/// One difference constraint `x[to] − x[from] ≤ bound` between local nodes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Constraint {
    pub from: u32,
    pub to: u32,
    pub bound: f64,
    /// `2·pair + side`: side 0 bounds x_b from above (a → b), side 1 from below (b → a).
    pub id: u32,
}

/// Every trace's group, its local node number, and how far a true reading may lie from its
/// estimate (the slack's reach): what every instant of every query shares.
#[derive(Clone, Debug, Default)]
pub(crate) struct Layout {
    pub groups: Vec<Group>,
    /// Local node number of each trace in its group (`u32::MAX`: not synchronized).
    pub local: Vec<u32>,
    /// The widest pair interval times the traces, far more than any real case.
    pub reach: f64,
}

impl Layout {
    pub fn new(sync: &SyncResult) -> Layout {
        let n = sync.traces.len();
        let groups_count = sync.traces.iter().map(|t| t.group + 1).max().unwrap_or(0);
        let mut groups = vec![Group::default(); groups_count as usize];
        let mut local = vec![u32::MAX; n];
        for t in &sync.traces {
            if t.synchronized {
                let g = &mut groups[t.group as usize];
                local[t.index as usize] = g.members.len() as u32;
                g.members.push(t.index);
            }
        }
        for (i, p) in sync.pairs.iter().enumerate() {
            let (ta, tb) = (&sync.traces[p.a as usize], &sync.traces[p.b as usize]);
            if ta.group == tb.group && ta.synchronized && tb.synchronized {
                groups[ta.group as usize].pairs.push(i as u32);
            }
        }
        let widest = sync
            .pairs
            .iter()
            .filter_map(|p| p.accuracy.as_ref().map(|a| a.stats.worst))
            .fold(0.0, f64::max);
        Layout {
            groups,
            local,
            reach: widest * n as f64,
        }
    }
}

/// The estimation-clock reading of trace `j` at reference time `at_ref`.
#[inline]
pub(crate) fn reading(sync: &SyncResult, inverse: &[PiecewiseMap], j: u32, at_ref: f64) -> f64 {
    let recorded = inverse[j as usize].apply(at_ref);
    match sync.timebases.of(j) {
        Some(c) => c.to_raw.apply(recorded),
        None => recorded,
    }
}

/// The constraint `id` at the instant where pair's first trace reads `xa`; None where the pair
/// bounds nothing on that side then.
#[inline]
pub(crate) fn constraint(
    sync: &SyncResult,
    layout: &Layout,
    id: u32,
    xa: f64,
) -> Option<Constraint> {
    both(sync, layout, id / 2, xa)[(id % 2) as usize]
}

/// Both constraints of pair `pair` (side 0, side 1) at the instant where its first trace reads
/// `xa`.
#[inline]
fn both(sync: &SyncResult, layout: &Layout, pair: u32, xa: f64) -> [Option<Constraint>; 2] {
    let p = &sync.pairs[pair as usize];
    let drift = p.estimate.map_or(1.0, |e| e.drift);
    // The slope's distance from 1 over how far a true reading may lie from its estimate (ns for
    // a 100 ppm drift and 10 ms).
    let slack = (drift - 1.0).abs() * layout.reach + 1.0;
    let relax = sync.timebases.bound_ns(p.a) * 1.001 + sync.timebases.bound_ns(p.b);
    let (lo, hi) = pair_bounds(p, xa, relax);
    let (la, lb) = (layout.local[p.a as usize], layout.local[p.b as usize]);
    [
        hi.map(|hi| Constraint {
            from: la,
            to: lb,
            bound: hi - xa + slack,
            id: 2 * pair,
        }),
        lo.map(|lo| Constraint {
            from: lb,
            to: la,
            bound: xa - lo + slack,
            id: 2 * pair + 1,
        }),
    ]
}

/// Every constraint of `group` at reference time `at_ref`, with the members' readings then.
pub(crate) fn at_instant(
    sync: &SyncResult,
    inverse: &[PiecewiseMap],
    layout: &Layout,
    group: &Group,
    at_ref: f64,
) -> (Vec<Constraint>, Vec<f64>) {
    let x: Vec<f64> = group
        .members
        .iter()
        .map(|&j| reading(sync, inverse, j, at_ref))
        .collect();
    let mut out = Vec::with_capacity(2 * group.pairs.len());
    for (n, &i) in group.pairs.iter().enumerate() {
        // (A hint: the results do not depend on it.)
        if let Some(&ahead) = group.pairs.get(n + AHEAD) {
            prefetch_curve(&sync.pairs[ahead as usize]);
        }
        let xa = x[layout.local[sync.pairs[i as usize].a as usize] as usize];
        out.extend(both(sync, layout, i, xa).into_iter().flatten());
    }
    (out, x)
}

/// What pair `p` guarantees about t_b at t_a (lower, upper): its interval if accurate, else the
/// one-sided bounds of its hull chains (an `incomplete` pair); nothing from an approximate pair,
/// whose hulls cross.
fn pair_bounds(p: &PairResult, t_a: f64, relax: f64) -> (Option<f64>, Option<f64>) {
    match p.quality {
        Quality::Accurate => match p.interval_at(t_a.round() as i64) {
            Some((lo, hi)) => (Some(lo), Some(hi)),
            None => (None, None),
        },
        // a→b messages (the lower hull) bound t_b from above, b→a ones from below; the points
        // may be off by the conversions' bounds.
        Quality::Incomplete | Quality::Absent => (
            chain(&p.hull_ba, t_a).map(|v| v - relax),
            chain(&p.hull_ab, t_a).map(|v| v + relax),
        ),
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

/// Pairs ahead whose interval curve [`at_instant`] asks for (see [`prefetch_curve`]).
const AHEAD: usize = 8;

/// Starts loading the interval curve `both` will read for `p`: the curves lie wherever their
/// pairs' finishing put them, so on a mesh of hundreds of thousands of pairs each read waits on
/// memory, at every one of a plan's instants.
#[inline]
fn prefetch_curve(p: &PairResult) {
    let curve = match p.segments.as_slice() {
        [] | [_] => p.accuracy.as_ref().map(|a| a.points.as_ptr()),
        segments => Some(segments.as_ptr().cast()),
    };
    if let Some(c) = curve {
        prefetch(c);
    }
}
