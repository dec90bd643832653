//! A large group's shortest-path trees at a grid of instants, and the bounds they give at any
//! instant: the tree paths of the two grid instants around it and the direct pair, each
//! evaluated exactly there (see the parent module for why that keeps the guarantee).

use super::constraints::{Layout, constraint, reading};
use super::{GRID, Instant};
use crate::estimate::SyncResult;
use crate::estimate::parallel::map_in_order;
use crate::model::PiecewiseMap;

/// No constraint: the root, or a node the tree does not reach.
const NONE: u32 = u32::MAX;

/// One grid instant's trees, as the constraint id each node's path starts with.
#[derive(Debug)]
struct Trees {
    at_ref: f64,
    up: Vec<u32>,
    down: Vec<u32>,
}

/// The trees of one group (None at an instant whose constraints contradict each other).
#[derive(Debug)]
pub(crate) struct Plan {
    group: u32,
    root: usize,
    grid: Vec<Option<Trees>>,
}

/// What a query gets: x_root − x_k ≤ up, x_k − x_root ≤ down, the trace's reading, and the
/// constraint ids of the two paths.
pub(crate) struct Bounds {
    pub up: f64,
    pub down: f64,
    pub xk: f64,
    pub ids: Vec<u32>,
}

impl Plan {
    /// The plan of `group`; None for a group without a span.
    pub fn new(
        sync: &SyncResult,
        inverse: &[PiecewiseMap],
        layout: &Layout,
        group: u32,
        threads: usize,
    ) -> Option<Plan> {
        let g = &layout.groups[group as usize];
        let first = *g.members.first()?;
        let reference = sync.traces[first as usize].reference;
        let root = layout.local[reference as usize] as usize;
        // The group's span on the reference's clock.
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for &m in &g.members {
            let t = &sync.traces[m as usize];
            if let Some((a, b)) = t.span_ns {
                lo = lo.min(t.map.apply(a as f64));
                hi = hi.max(t.map.apply(b as f64));
            }
        }
        if lo.partial_cmp(&hi) == Some(std::cmp::Ordering::Greater) || !lo.is_finite() {
            return None;
        }
        // The instants are independent: solved in parallel, kept in grid order.
        let grid = map_in_order(threads, (0..GRID).collect(), |i| {
            let at_ref = lo + (hi - lo) * i as f64 / (GRID - 1) as f64;
            let inst = Instant::solve(sync, inverse, layout, group, at_ref, root).ok()?;
            let ids = |via: &[Option<u32>]| {
                via.iter()
                    .map(|k| k.map_or(NONE, |k| inst.cs[k as usize].id))
                    .collect()
            };
            Some(Trees {
                at_ref,
                up: ids(&inst.up.via),
                down: ids(&inst.down.via),
            })
        });
        Some(Plan { group, root, grid })
    }

    /// The first and last grid instants (reference time).
    #[cfg(test)]
    pub fn span(&self) -> (f64, f64) {
        let at = |g: &Option<Trees>| g.as_ref().map(|g| g.at_ref);
        (
            self.grid.iter().find_map(at).unwrap_or(0.0),
            self.grid.iter().rev().find_map(at).unwrap_or(0.0),
        )
    }

    /// The bounds of local node `k` at reference time `at_ref`; None where no candidate path
    /// bounds a side.
    pub fn bounds(
        &self,
        sync: &SyncResult,
        inverse: &[PiecewiseMap],
        layout: &Layout,
        k: usize,
        at_ref: f64,
    ) -> Option<Bounds> {
        let at = self
            .grid
            .partition_point(|g| g.as_ref().is_none_or(|g| g.at_ref <= at_ref));
        let around = [at.checked_sub(1), Some(at)];
        let trees: Vec<&Trees> = around
            .into_iter()
            .flatten()
            .filter_map(|i| self.grid.get(i)?.as_ref())
            .collect();
        let eval = Evaluator {
            sync,
            inverse,
            layout,
            at_ref,
        };
        let direct = self.direct(sync, layout, k);
        let best = |up: bool| -> Option<(f64, Vec<u32>)> {
            let mut candidates: Vec<Vec<u32>> = trees
                .iter()
                .map(|t| {
                    walk(
                        sync,
                        layout,
                        if up { &t.up } else { &t.down },
                        up,
                        k,
                        self.root,
                    )
                })
                .collect();
            if let Some((to_root, from_root)) = direct {
                candidates.push(vec![if up { to_root } else { from_root }]);
            }
            candidates
                .into_iter()
                .filter_map(|ids| Some((eval.sum(&ids)?, ids)))
                .min_by(|a, b| a.0.total_cmp(&b.0))
        };
        let (up, up_ids) = best(true)?;
        let (down, down_ids) = best(false)?;
        let xk = reading(
            sync,
            inverse,
            layout.groups[self.group as usize].members[k],
            at_ref,
        );
        Some(Bounds {
            up,
            down,
            xk,
            ids: up_ids.into_iter().chain(down_ids).collect(),
        })
    }

    /// The constraint ids of the pair between node k and the root, towards the root and from
    /// it, if they share one.
    fn direct(&self, sync: &SyncResult, layout: &Layout, k: usize) -> Option<(u32, u32)> {
        let g = &layout.groups[self.group as usize];
        let (tk, tr) = (g.members[k], g.members[self.root]);
        let (a, b) = (tk.min(tr), tk.max(tr));
        let i = sync
            .pairs
            .binary_search_by_key(&(a, b), |p| (p.a, p.b))
            .ok()? as u32;
        // Side 0 leads a → b, side 1 b → a.
        Some(if tk == a {
            (2 * i, 2 * i + 1)
        } else {
            (2 * i + 1, 2 * i)
        })
    }
}

/// The constraint ids from node `v` to the root along a tree (`up`: the constraint out of each
/// node towards the root; else the one into it from the root's side).
fn walk(
    sync: &SyncResult,
    layout: &Layout,
    via: &[u32],
    up: bool,
    v: usize,
    root: usize,
) -> Vec<u32> {
    let mut out = Vec::new();
    let mut u = v;
    while u != root {
        let id = via[u];
        if id == NONE || out.len() > via.len() {
            return Vec::new();
        }
        out.push(id);
        let p = &sync.pairs[(id / 2) as usize];
        // Side 0 leads a → b, side 1 b → a; up goes to the head, down to the tail.
        let (tail, head) = if id.is_multiple_of(2) {
            (p.a, p.b)
        } else {
            (p.b, p.a)
        };
        u = layout.local[if up { head } else { tail } as usize] as usize;
    }
    out
}

/// Sums of constraints at one instant.
struct Evaluator<'a> {
    sync: &'a SyncResult,
    inverse: &'a [PiecewiseMap],
    layout: &'a Layout,
    at_ref: f64,
}

impl Evaluator<'_> {
    /// The sum of the constraints `ids` at the instant; None for an empty path or a constraint
    /// that does not hold then.
    fn sum(&self, ids: &[u32]) -> Option<f64> {
        if ids.is_empty() {
            return None;
        }
        let mut total = 0.0;
        for &id in ids {
            let a = self.sync.pairs[(id / 2) as usize].a;
            let xa = reading(self.sync, self.inverse, a, self.at_ref);
            total += constraint(self.sync, self.layout, id, xa)?.bound;
        }
        Some(total)
    }
}
