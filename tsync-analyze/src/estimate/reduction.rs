//! From pair estimates to one timebase per connected group of traces.
//!
//! Traces are vertices; every pair with a usable estimate is an edge weighted by how uncertain it is
//! (mean accuracy width for accurate pairs; Ashton's error or the regression residual otherwise,
//! with every best-effort edge ranked after any number of guaranteed ones). Shortest paths over
//! the pairs that exist (Dijkstra from every member: O(V·E log V), where Floyd–Warshall's V³ and
//! V² memory would not fit hundreds of sparsely linked traces) give, per connected group, the
//! reference trace with the smallest sum of distances to the others — unless the user named one —
//! and a tree of shortest paths along which the pair maps are composed exactly: the map of trace k is
//! map(parent→ref) ∘ map(k→parent), with a pair stored the other way round inverted
//! (a0' = −a0/a1, a1' = 1/a1). Each group has its own reference; a trace in a group of one is
//! reported unsynchronized, never silently mapped by the identity.

use crate::estimate::parallel::map_in_order;
use crate::model::{Affine, PiecewiseMap};

/// Edge weight: best-effort edges first by count, then the uncertainty in ns.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub struct Weight {
    /// Number of edges without a guarantee on the path.
    pub best_effort: u32,
    /// Sum of uncertainties, ns.
    pub ns: f64,
}

impl Weight {
    const ZERO: Weight = Weight {
        best_effort: 0,
        ns: 0.0,
    };

    fn add(self, o: Weight) -> Weight {
        Weight {
            best_effort: self.best_effort + o.best_effort,
            ns: self.ns + o.ns,
        }
    }

    fn lt(self, o: Weight) -> bool {
        (self.best_effort, self.ns) < (o.best_effort, o.ns)
    }
}

/// A usable pair estimate: `map` sends trace a's time onto trace b's.
#[derive(Clone, Debug)]
pub struct Edge {
    pub a: u32,
    pub b: u32,
    /// The pair's map (piecewise for a segmented pair).
    pub map: PiecewiseMap,
    /// The pair's best single line.
    pub line: Affine,
    pub weight: Weight,
}

/// How one trace relates to its group's reference.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceMap {
    /// Connected group number (0, 1, … in order of the lowest trace index of each group).
    pub group: u32,
    /// Reference trace of the group.
    pub reference: u32,
    /// t_ref = map(t_k).
    pub map: PiecewiseMap,
    /// The composed best single lines.
    pub line: Affine,
    /// False for a trace related to no other trace.
    pub synchronized: bool,
    /// Traces on the shortest path from the reference to this trace (both included).
    pub path: Vec<u32>,
}

/// Why the reduction could not honour a request.
#[derive(thiserror::Error, Debug, PartialEq)]
pub enum ReductionError {
    #[error("reference trace {0} does not exist")]
    NoSuchReference(u32),
}

/// Result of the reduction.
#[derive(Clone, Debug)]
pub struct Reduction {
    pub traces: Vec<TraceMap>,
    pub groups: u32,
}

/// Chooses references and composes maps. `reference` forces the reference of its group. The
/// searches that choose a reference (one per member of a group) run on up to `threads` threads.
pub fn reduce(
    traces: usize,
    edges: &[Edge],
    reference: Option<u32>,
    threads: usize,
) -> Result<Reduction, ReductionError> {
    if let Some(r) = reference
        && r as usize >= traces
    {
        return Err(ReductionError::NoSuchReference(r));
    }
    // Only traces that share a pair (and a forced reference) take part in the searches: a text
    // file may declare many traces that no message names.
    let mut members: Vec<usize> = edges
        .iter()
        .filter(|e| e.a != e.b)
        .flat_map(|e| [e.a as usize, e.b as usize])
        .chain(reference.map(|r| r as usize))
        .collect();
    members.sort_unstable();
    members.dedup();
    let mut local = vec![usize::MAX; traces];
    for (l, &t) in members.iter().enumerate() {
        local[t] = l;
    }
    let graph = Graph::new(members.len(), &local, edges);
    // Each edge's maps both ways, so that a path composes without inverting twice.
    let inverses: Vec<(PiecewiseMap, Affine)> = edges
        .iter()
        .map(|e| (e.map.inverse(), e.line.inverse()))
        .collect();
    // Groups, in order of their lowest member; a trace in no pair is a group of its own.
    let mut group = vec![u32::MAX; traces];
    let mut groups = 0u32;
    let mut group_members: Vec<Vec<usize>> = Vec::new();
    for t in 0..traces {
        if group[t] != u32::MAX {
            continue;
        }
        let reached = match local[t] {
            usize::MAX => Vec::new(),
            i => graph.reachable(i),
        };
        group[t] = groups;
        for &j in &reached {
            group[members[j]] = groups;
        }
        group_members.push(reached);
        groups += 1;
    }
    // Reference per group: the member with the smallest sum of distances to the others (ties:
    // the lowest index), or the lone trace itself.
    let mut reference_of_group = vec![u32::MAX; groups as usize];
    if let Some(r) = reference {
        reference_of_group[group[r as usize] as usize] = r;
    }
    for (t, &g) in group.iter().enumerate() {
        let g = g as usize;
        if reference_of_group[g] != u32::MAX {
            continue;
        }
        let candidates = group_members[g].clone();
        let sums = map_in_order(threads, candidates.clone(), |c| {
            graph
                .shortest(c)
                .0
                .into_iter()
                .flatten()
                .fold(Weight::ZERO, Weight::add)
        });
        let mut best: Option<(Weight, usize)> = None;
        for (sum, c) in sums.into_iter().zip(candidates) {
            if best.is_none_or(|(w, _)| sum.lt(w)) {
                best = Some((sum, c));
            }
        }
        reference_of_group[g] = best.map_or(t as u32, |(_, c)| members[c] as u32);
    }
    // The shortest-path tree of each reference: the edge (2k forward, 2k + 1 backward) that
    // reaches each member from its parent.
    let mut tree: Vec<Option<usize>> = vec![None; members.len()];
    for &r in &reference_of_group {
        if local[r as usize] != usize::MAX {
            let (_, via) = graph.shortest(local[r as usize]);
            for &j in &group_members[group[r as usize] as usize] {
                tree[j] = via[j];
            }
        }
    }
    let mut sizes = vec![0usize; groups as usize];
    for &g in &group {
        sizes[g as usize] += 1;
    }
    // Compose along the shortest-path tree of each reference.
    let mut out = Vec::with_capacity(traces);
    for k in 0..traces {
        let g = group[k];
        let r = reference_of_group[g as usize] as usize;
        let mut path = vec![k as u32];
        let mut map = PiecewiseMap::identity();
        let mut line = Affine::IDENTITY;
        if k != r {
            let (lr, mut v) = (local[r], local[k]);
            while v != lr {
                // The tree edge runs parent → v; the path goes v → parent, the other way.
                let into = tree[v].expect("every member of a group is on its reference's tree");
                let (parent, step) = (graph.tail(into), into ^ 1);
                let (step_map, step_line) = match step % 2 {
                    0 => (&edges[step / 2].map, edges[step / 2].line),
                    _ => (&inverses[step / 2].0, inverses[step / 2].1),
                };
                // The maps currently send k → v; extend them to k → parent.
                map = step_map.compose(&map);
                line = step_line.compose(&line);
                path.push(members[parent] as u32);
                v = parent;
            }
        }
        path.reverse();
        out.push(TraceMap {
            group: g,
            reference: r as u32,
            map,
            line,
            synchronized: sizes[g as usize] > 1,
            path,
        });
    }
    Ok(Reduction {
        traces: out,
        groups,
    })
}

/// The members and their usable pairs as adjacency lists, laid out flat (each member's
/// neighbours in one run of `targets`, `costs` and `edge_ids`); edge `2k` is edge k forward
/// (a → b), `2k + 1` backward.
///
/// Flat because choosing a reference runs one search per member over every edge: on a
/// 600-trace mesh, 600 scans of 360,000 neighbours, a fifth of the whole run. A scan reads a
/// neighbour's 4-byte index and its 16-byte weight, one after the other in memory; the edge id
/// is read only when the neighbour's distance improves (rarely, once the search has settled
/// the near members).
struct Graph {
    /// Member `v`'s neighbours are at `starts[v]..starts[v + 1]`.
    starts: Vec<usize>,
    targets: Vec<u32>,
    costs: Vec<Weight>,
    edge_ids: Vec<usize>,
    /// Tail of each edge id (local member).
    tails: Vec<usize>,
}

impl Graph {
    fn new(n: usize, local: &[usize], edges: &[Edge]) -> Graph {
        // The neighbours in the order the lists had them: per member, by edge id.
        let mut degree = vec![0usize; n + 1];
        let mut tails = vec![usize::MAX; 2 * edges.len()];
        for (k, e) in edges.iter().enumerate() {
            if e.a == e.b {
                continue;
            }
            let (a, b) = (local[e.a as usize], local[e.b as usize]);
            degree[a + 1] += 1;
            degree[b + 1] += 1;
            (tails[2 * k], tails[2 * k + 1]) = (a, b);
        }
        let mut starts = degree;
        for v in 0..n {
            starts[v + 1] += starts[v];
        }
        let total = starts[n];
        let mut targets = vec![0u32; total];
        let mut costs = vec![Weight::ZERO; total];
        let mut edge_ids = vec![0usize; total];
        let mut next = starts.clone();
        for (k, e) in edges.iter().enumerate() {
            if e.a == e.b {
                continue;
            }
            let (a, b) = (local[e.a as usize], local[e.b as usize]);
            for (from, to, id) in [(a, b, 2 * k), (b, a, 2 * k + 1)] {
                let i = next[from];
                next[from] += 1;
                (targets[i], costs[i], edge_ids[i]) = (to as u32, e.weight, id);
            }
        }
        Graph {
            starts,
            targets,
            costs,
            edge_ids,
            tails,
        }
    }

    fn members(&self) -> usize {
        self.starts.len() - 1
    }

    /// The neighbours of `v`, as positions in the flat arrays.
    fn around(&self, v: usize) -> std::ops::Range<usize> {
        self.starts[v]..self.starts[v + 1]
    }

    fn tail(&self, edge: usize) -> usize {
        self.tails[edge]
    }

    /// The members reachable from `source` (itself included), in ascending order.
    fn reachable(&self, source: usize) -> Vec<usize> {
        let mut seen = vec![false; self.members()];
        let mut stack = vec![source];
        seen[source] = true;
        let mut out = Vec::new();
        while let Some(v) = stack.pop() {
            out.push(v);
            for &w in &self.targets[self.around(v)] {
                let w = w as usize;
                if !seen[w] {
                    seen[w] = true;
                    stack.push(w);
                }
            }
        }
        out.sort_unstable();
        out
    }

    /// Dijkstra from `source`: each member's distance (None: unreachable) and the edge its
    /// shortest path arrives by. Ties keep the edge found first.
    ///
    /// The scan of a member's neighbours reads, per neighbour, its index, its weight and its
    /// tentative distance, which is [`UNREACHED`] before any path reaches the neighbour (every
    /// path's weight is less) and [`SETTLED`] once its distance is final (no path's weight is
    /// less): one comparison says whether the path through the member is shorter, as "not
    /// settled, and unreached or shorter" did with a flag and an `Option`.
    fn shortest(&self, source: usize) -> (Vec<Option<Weight>>, Vec<Option<usize>>) {
        let n = self.members();
        let mut tentative = vec![UNREACHED; n];
        let mut dist: Vec<Option<Weight>> = vec![None; n];
        let mut via: Vec<Option<usize>> = vec![None; n];
        let mut heap = std::collections::BinaryHeap::new();
        tentative[source] = Weight::ZERO;
        heap.push(Queued(Weight::ZERO, source));
        while let Some(Queued(d, v)) = heap.pop() {
            if dist[v].is_some() {
                continue;
            }
            dist[v] = Some(d);
            tentative[v] = SETTLED;
            let around = self.around(v);
            let (targets, costs) = (&self.targets[around.clone()], &self.costs[around.clone()]);
            for (i, (&w, &weight)) in targets.iter().zip(costs).enumerate() {
                let w = w as usize;
                let through = d.add(weight);
                if through.lt(tentative[w]) {
                    tentative[w] = through;
                    via[w] = Some(self.edge_ids[around.start + i]);
                    heap.push(Queued(through, w));
                }
            }
        }
        (dist, via)
    }
}

/// The tentative distance of a member no path has reached: more than any path's weight (a path
/// crosses fewer than `u32::MAX` edges).
const UNREACHED: Weight = Weight {
    best_effort: u32::MAX,
    ns: f64::INFINITY,
};

/// The tentative distance of a member whose distance is final: no path's weight is less.
const SETTLED: Weight = Weight {
    best_effort: 0,
    ns: f64::NEG_INFINITY,
};

/// A heap entry: the smallest weight first.
struct Queued(Weight, usize);

impl PartialEq for Queued {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == std::cmp::Ordering::Equal
    }
}

impl Eq for Queued {}

impl PartialOrd for Queued {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

impl Ord for Queued {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        o.0.best_effort
            .cmp(&self.0.best_effort)
            .then(o.0.ns.total_cmp(&self.0.ns))
            .then(o.1.cmp(&self.1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(ns: f64) -> Weight {
        Weight { best_effort: 0, ns }
    }

    fn edge(a: u32, b: u32, line: Affine, weight: Weight) -> Edge {
        Edge {
            a,
            b,
            map: line.into(),
            line,
            weight,
        }
    }

    #[test]
    fn composes_along_a_chain_with_inversions() {
        // t1 = 100 + 2 t0 (pair 0-1), t1 = 10 + 0.5 t2 (pair 1-2 stored as 1→2: t2 = 2 t1 − 20).
        let e01 = edge(
            0,
            1,
            Affine {
                offset_ns: 100.0,
                drift: 2.0,
            },
            w(1.0),
        );
        let e12 = edge(
            1,
            2,
            Affine {
                offset_ns: -20.0,
                drift: 2.0,
            },
            w(1.0),
        );
        let r = reduce(3, &[e01.clone(), e12.clone()], Some(0), 2).unwrap();
        // t2 = 2 t1 − 20 = 2 (100 + 2 t0) − 20 = 180 + 4 t0  ⇒  t0 = (t2 − 180) / 4.
        let m = &r.traces[2].map;
        assert_eq!(r.traces[2].path, vec![0, 1, 2]);
        assert!((m.apply(580.0) - 100.0).abs() < 1e-9, "{m:?}");
        // Trace 0 is the reference.
        assert_eq!(r.traces[0].map, PiecewiseMap::identity());
        assert!((r.traces[2].line.apply(580.0) - 100.0).abs() < 1e-9);
        // Automatic reference: the middle of the chain.
        let r = reduce(3, &[e01, e12], None, 1).unwrap();
        assert_eq!(r.traces[0].reference, 1);
        let m0 = &r.traces[0].map; // t1 = 100 + 2 t0
        assert!((m0.apply(1.0) - 102.0).abs() < 1e-9);
        let m2 = &r.traces[2].map; // t1 = (t2 + 20) / 2
        assert!((m2.apply(80.0) - 50.0).abs() < 1e-9);
    }

    #[test]
    fn separate_groups_and_lonely_traces() {
        let e = |a, b| edge(a, b, Affine::IDENTITY, w(1.0));
        let r = reduce(5, &[e(0, 1), e(2, 3)], None, 2).unwrap();
        assert_eq!(r.groups, 3);
        assert_eq!(
            r.traces.iter().map(|t| t.group).collect::<Vec<_>>(),
            vec![0, 0, 1, 1, 2]
        );
        assert!(!r.traces[4].synchronized);
        assert!(r.traces[3].synchronized);
        assert_eq!(r.traces[3].reference, 2);
        assert!(matches!(
            reduce(2, &[], Some(7), 1),
            Err(ReductionError::NoSuchReference(7))
        ));
    }

    /// Dijkstra as `Graph::shortest` ran before the flat layout: adjacency lists of (neighbour,
    /// edge id, weight) in edge order, `Option` distances and a settled flag.
    fn shortest_by_lists(
        n: usize,
        edges: &[(usize, usize, Weight)],
        source: usize,
    ) -> (Vec<Option<Weight>>, Vec<Option<usize>>) {
        let mut adjacent: Vec<Vec<(usize, usize, Weight)>> = vec![Vec::new(); n];
        for (k, &(a, b, weight)) in edges.iter().enumerate() {
            if a != b {
                adjacent[a].push((b, 2 * k, weight));
                adjacent[b].push((a, 2 * k + 1, weight));
            }
        }
        let mut dist: Vec<Option<Weight>> = vec![None; n];
        let mut via: Vec<Option<usize>> = vec![None; n];
        let mut done = vec![false; n];
        let mut heap = std::collections::BinaryHeap::new();
        dist[source] = Some(Weight::ZERO);
        heap.push(Queued(Weight::ZERO, source));
        while let Some(Queued(d, v)) = heap.pop() {
            if done[v] {
                continue;
            }
            done[v] = true;
            for &(w, edge, weight) in &adjacent[v] {
                let through = d.add(weight);
                if !done[w] && dist[w].is_none_or(|old| through.lt(old)) {
                    dist[w] = Some(through);
                    via[w] = Some(edge);
                    heap.push(Queued(through, w));
                }
            }
        }
        (dist, via)
    }

    proptest::proptest! {
        /// The flat graph's search gives every distance and every arrival edge the lists' did,
        /// ties included (weights from a handful of values, best-effort edges, self-pairs,
        /// parallel pairs and unreachable members).
        #[test]
        fn the_flat_search_is_the_lists_search(
            n in 1usize..24,
            raw in proptest::collection::vec((0usize..24, 0usize..24, 0u32..2, 0u8..4), 0..80),
        ) {
            let edges: Vec<(usize, usize, Weight)> = raw
                .iter()
                .map(|&(a, b, best_effort, ns)| {
                    (a % n, b % n, Weight { best_effort, ns: f64::from(ns) * 0.5 })
                })
                .collect();
            let local: Vec<usize> = (0..n).collect();
            let as_edges: Vec<Edge> = edges
                .iter()
                .map(|&(a, b, weight)| edge(a as u32, b as u32, Affine::IDENTITY, weight))
                .collect();
            let graph = Graph::new(n, &local, &as_edges);
            for source in 0..n {
                let (dist, via) = graph.shortest(source);
                let (want_dist, want_via) = shortest_by_lists(n, &edges, source);
                proptest::prop_assert_eq!(&via, &want_via, "source {}", source);
                proptest::prop_assert_eq!(dist, want_dist, "source {}", source);
            }
        }
    }
}
