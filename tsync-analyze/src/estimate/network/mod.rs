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
//! dist(ref → k). One path's composition is one of the sums the shortest path minimizes, so the
//! network interval is never wider; and a negative cycle means the constraints contradict each
//! other: a clock that broke the model, or a wrong match.
//!
//! Cost. The graph has the pairs that exist, never the square of the traces: one instant costs
//! its constraints (one interval lookup per pair) and two Dijkstra searches from the reference
//! (`paths`: Johnson's potential from the estimates, then O(E log V)), which give every trace's
//! bounds at that instant at once. A query at an instant of its own (each trace has its own
//! times) is solved exactly where the group has at most [`EXACT_PAIRS`] pairs. In a larger group
//! (hundreds of traces: a dozen queries per trace would cost traces × pairs) the two trees are
//! solved once at [`GRID`] instants across the group's span (`plan`), and a query evaluates,
//! exactly at its own instant, the paths those trees give its trace at the two instants around
//! it, and the direct pair: every such path is a sum of constraints valid at that instant, so
//! the interval still holds the truth; it is the tightest where the best detour does not change
//! between two grid instants.

mod constraints;
mod paths;
mod plan;

use std::sync::OnceLock;

use crate::estimate::SyncResult;
use crate::estimate::parallel::map_in_order;
use crate::model::PiecewiseMap;

pub(crate) use constraints::Layout;
use constraints::{Constraint, at_instant};
use paths::{Adjacency, Tree, dijkstra, path, potential};

/// Largest group (in pairs) whose queries are each solved exactly at their own instant; larger
/// groups use the trees of a grid of instants (see the module documentation).
pub const EXACT_PAIRS: usize = 2048;

/// Instants of the grid of a large group.
pub const GRID: usize = 17;

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

/// What queries share, built on the first one: the groups' layout and each large group's plan.
#[derive(Debug, Default)]
pub(crate) struct Network {
    /// Threads a plan's grid instants are solved on (`--threads`; 0 or 1: this thread).
    threads: usize,
    layout: OnceLock<Layout>,
    plans: OnceLock<Vec<OnceLock<Option<plan::Plan>>>>,
}

impl Clone for Network {
    /// A copy starts empty: it is only a cache of what the result holds.
    fn clone(&self) -> Self {
        Network::new(self.threads)
    }
}

impl Network {
    /// An empty cache whose plans use up to `threads` threads.
    pub fn new(threads: usize) -> Self {
        Network {
            threads,
            ..Network::default()
        }
    }

    /// The threads its plans use (`--threads`; 0 or 1: this thread).
    pub(crate) fn threads(&self) -> usize {
        self.threads
    }

    fn layout(&self, sync: &SyncResult) -> &Layout {
        self.layout.get_or_init(|| Layout::new(sync))
    }

    fn plan(&self, sync: &SyncResult, inverse: &[PiecewiseMap], group: u32) -> Option<&plan::Plan> {
        let layout = self.layout(sync);
        let plans = self
            .plans
            .get_or_init(|| (0..layout.groups.len()).map(|_| OnceLock::new()).collect());
        plans[group as usize]
            .get_or_init(|| plan::Plan::new(sync, inverse, layout, group, self.threads))
            .as_ref()
    }
}

/// Both trees of one instant: distances to the root (`up`: x_root − x_v ≤ up[v]) and from it
/// (`down`: x_v − x_root ≤ down[v]), with the constraints they index.
pub(crate) struct Instant {
    pub cs: Vec<Constraint>,
    pub x: Vec<f64>,
    pub up: Tree,
    pub down: Tree,
}

impl Instant {
    /// The trees rooted at local node `root` over the constraints of `group` at `at_ref`; Err with
    /// a negative cycle's constraint ids.
    pub fn solve(
        sync: &SyncResult,
        inverse: &[PiecewiseMap],
        layout: &Layout,
        group: u32,
        at_ref: f64,
        root: usize,
    ) -> Result<Instant, Vec<u32>> {
        let g = &layout.groups[group as usize];
        let (cs, x) = at_instant(sync, inverse, layout, g, at_ref);
        let n = g.members.len();
        let p = potential(n, &cs, &x)?;
        let up = dijkstra(&cs, &Adjacency::new(n, &cs, true), true, &p, root);
        let down = dijkstra(&cs, &Adjacency::new(n, &cs, false), false, &p, root);
        Ok(Instant { cs, x, up, down })
    }

    /// The constraint ids of the paths between `v` and the root (up, down).
    pub fn paths(&self, root: usize, v: usize) -> (Vec<u32>, Vec<u32>) {
        (
            path(&self.cs, &self.up, true, root, v),
            path(&self.cs, &self.down, false, root, v),
        )
    }
}

/// The pair (a < b) of a constraint id.
fn pair_of(sync: &SyncResult, id: u32) -> (u32, u32) {
    let p = &sync.pairs[(id / 2) as usize];
    (p.a, p.b)
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
    if !tr.synchronized {
        return None;
    }
    let t = t_ns as f64;
    let reference = tr.reference;
    if reference == trace {
        return Some(NetworkInterval {
            lo: t,
            hi: t,
            path: Some((t, t)),
            pairs: Vec::new(),
        });
    }
    let network = &sync.network;
    let layout = network.layout(sync);
    let g = &layout.groups[tr.group as usize];
    let (k, root) = (
        layout.local[trace as usize] as usize,
        layout.local[reference as usize] as usize,
    );
    let at_ref = tr.map.apply(t);
    let (up, down, xk, ids) = if g.pairs.len() <= EXACT_PAIRS {
        let i = Instant::solve(sync, inverse, layout, tr.group, at_ref, root).ok()?;
        let (up_ids, down_ids) = i.paths(root, k);
        let ids: Vec<u32> = up_ids.into_iter().chain(down_ids).collect();
        (i.up.dist[k], i.down.dist[k], i.x[k], ids)
    } else {
        let b = network
            .plan(sync, inverse, tr.group)?
            .bounds(sync, inverse, layout, k, at_ref)?;
        (b.up, b.down, b.xk, b.ids)
    };
    if !up.is_finite() || !down.is_finite() {
        return None;
    }
    // The trace's own reading on its estimation clock, and that conversion's error.
    let (xk, ek) = match sync.timebases.of(trace) {
        Some(c) => (c.to_raw.apply(t), c.bound_at(t) + 0.5),
        None => (xk, 0.0),
    };
    // x_ref − x_k ∈ [−down, up].
    let (mut lo, mut hi) = (xk - ek - down, xk + ek + up);
    if let Some(c) = sync.timebases.of(reference) {
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
    let mut pairs: Vec<(u32, u32)> = ids.iter().map(|&id| pair_of(sync, id)).collect();
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
/// cycle of the constraints (each cycle once). The instants are checked on up to `threads`
/// threads (each is a lookup in every pair's intervals and a search of the constraints, the
/// largest cost left on one thread for meshes of hundreds of traces) and their cycles taken in
/// instant order, so the result is the same whatever `threads`.
pub fn contradictions(
    sync: &SyncResult,
    inverse: &[PiecewiseMap],
    points: usize,
    threads: usize,
) -> Vec<Vec<(u32, u32)>> {
    let layout = sync.network.layout(sync);
    let mut instants = Vec::new();
    for tr in &sync.traces {
        if !tr.synchronized || tr.reference != tr.index {
            continue;
        }
        let Some((first, last)) = tr.span_ns else {
            continue;
        };
        for i in 0..points {
            let t = first as f64 + (last - first) as f64 * (i as f64 + 0.5) / points as f64;
            instants.push((tr.group, tr.map.apply(t)));
        }
    }
    let cycles = map_in_order(threads, instants, |(group, at_ref)| {
        let g = &layout.groups[group as usize];
        let (cs, x) = at_instant(sync, inverse, layout, g, at_ref);
        let ids = potential(g.members.len(), &cs, &x).err()?;
        let mut cycle: Vec<(u32, u32)> = ids.iter().map(|&id| pair_of(sync, id)).collect();
        cycle.sort_unstable();
        cycle.dedup();
        Some(cycle)
    });
    let mut found: Vec<Vec<(u32, u32)>> = Vec::new();
    for cycle in cycles.into_iter().flatten() {
        if !cycle.is_empty() && !found.contains(&cycle) {
            found.push(cycle);
        }
    }
    found
}

#[cfg(test)]
mod tests;
