//! Shortest paths over difference constraints, Johnson's way: one Bellman–Ford pass from the
//! estimates gives a potential (a point that satisfies every constraint), under which every
//! reduced bound `bound + p(from) − p(to)` is non-negative, and Dijkstra then runs over the
//! constraints that exist, in O(E log V), from or to the reference.
//!
//! The estimates almost satisfy every constraint already (each pair's interval holds its
//! estimate unless the joint estimate moved it out), so Bellman–Ford starting from them settles
//! in a round or two, not the V rounds of a search from one node. It still finds a negative
//! cycle, if there is one: constraints that no clocks satisfy.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::constraints::Constraint;

/// A point satisfying every constraint, reached from `start` (the estimates); Err with the
/// constraint ids of a negative cycle.
pub(crate) fn potential(n: usize, cs: &[Constraint], start: &[f64]) -> Result<Vec<f64>, Vec<u32>> {
    let mut p = start.to_vec();
    let mut via: Vec<Option<usize>> = vec![None; n];
    for _ in 0..n {
        let mut changed = false;
        for (k, c) in cs.iter().enumerate() {
            let through = p[c.from as usize] + c.bound;
            if through < p[c.to as usize] {
                p[c.to as usize] = through;
                via[c.to as usize] = Some(k);
                changed = true;
            }
        }
        if !changed {
            return Ok(p);
        }
    }
    // Still relaxing after n rounds: walk back n steps from a node that changed to land on the
    // cycle, then collect it.
    let Some(start) = cs
        .iter()
        .find(|c| p[c.from as usize] + c.bound < p[c.to as usize])
        .map(|c| c.to as usize)
    else {
        return Ok(p);
    };
    let mut v = start;
    for _ in 0..n {
        v = via[v].map_or(v, |k| cs[k].from as usize);
    }
    let mut cycle = Vec::new();
    let mut u = v;
    while let Some(k) = via[u] {
        cycle.push(cs[k].id);
        u = cs[k].from as usize;
        if u == v || cycle.len() > n {
            break;
        }
    }
    cycle.reverse();
    Err(cycle)
}

/// The constraints as adjacency lists (compressed rows), out of each node or into it.
pub(crate) struct Adjacency {
    start: Vec<u32>,
    /// Constraint index in the list the adjacency was built from.
    edges: Vec<u32>,
}

impl Adjacency {
    /// `reverse`: listed by the node they lead to.
    pub fn new(n: usize, cs: &[Constraint], reverse: bool) -> Adjacency {
        let key = |c: &Constraint| if reverse { c.to } else { c.from } as usize;
        let mut start = vec![0u32; n + 1];
        for c in cs {
            start[key(c) + 1] += 1;
        }
        for i in 0..n {
            start[i + 1] += start[i];
        }
        let mut fill = start.clone();
        let mut edges = vec![0u32; cs.len()];
        for (k, c) in cs.iter().enumerate() {
            let at = &mut fill[key(c)];
            edges[*at as usize] = k as u32;
            *at += 1;
        }
        Adjacency { start, edges }
    }

    fn of(&self, v: usize) -> &[u32] {
        &self.edges[self.start[v] as usize..self.start[v + 1] as usize]
    }
}

/// Shortest distances over the constraints and each node's last constraint on its path.
pub(crate) struct Tree {
    pub dist: Vec<f64>,
    /// Index (in the constraint list) of the constraint into the node (from the source) or out
    /// of it (to the target).
    pub via: Vec<Option<u32>>,
}

#[derive(PartialEq)]
struct Entry(f64, u32);

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

impl Ord for Entry {
    // Smallest distance first (a max-heap of reversed order).
    fn cmp(&self, o: &Self) -> Ordering {
        o.0.total_cmp(&self.0).then(o.1.cmp(&self.1))
    }
}

/// Dijkstra from `root` under potential `p`: with `adj` listing constraints out of each node,
/// the distances from `root`; listing them into each node, the distances to `root`. Reduced
/// bounds a rounding error made negative count as 0, which can only lengthen a path: the
/// distances never undercut the true shortest ones.
pub(crate) fn dijkstra(
    cs: &[Constraint],
    adj: &Adjacency,
    reverse: bool,
    p: &[f64],
    root: usize,
) -> Tree {
    let n = p.len();
    let mut reduced = vec![f64::INFINITY; n];
    let mut via: Vec<Option<u32>> = vec![None; n];
    let mut done = vec![false; n];
    let mut heap = BinaryHeap::new();
    reduced[root] = 0.0;
    heap.push(Entry(0.0, root as u32));
    while let Some(Entry(d, v)) = heap.pop() {
        let v = v as usize;
        if done[v] {
            continue;
        }
        done[v] = true;
        for &k in adj.of(v) {
            let c = &cs[k as usize];
            let (from, to) = (c.from as usize, c.to as usize);
            let w = (c.bound + p[from] - p[to]).max(0.0);
            let next = if reverse { from } else { to };
            if d + w < reduced[next] {
                reduced[next] = d + w;
                via[next] = Some(k);
                heap.push(Entry(d + w, next as u32));
            }
        }
    }
    let dist = (0..n)
        .map(|v| match reverse {
            false => reduced[v] - p[root] + p[v],
            true => reduced[v] - p[v] + p[root],
        })
        .collect();
    Tree { dist, via }
}

/// The constraint ids along `tree`'s path between `root` and `v`, in walking order from `v`
/// towards the root.
pub(crate) fn path(
    cs: &[Constraint],
    tree: &Tree,
    reverse: bool,
    root: usize,
    v: usize,
) -> Vec<u32> {
    let mut out = Vec::new();
    let mut u = v;
    while u != root {
        let Some(k) = tree.via[u] else { break };
        let c = &cs[k as usize];
        out.push(c.id);
        u = if reverse { c.to } else { c.from } as usize;
        if out.len() > tree.via.len() {
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests;
