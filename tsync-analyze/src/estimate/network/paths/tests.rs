use super::*;
use proptest::prelude::*;

/// The textbook solver: Bellman–Ford from one node over every constraint (V rounds).
fn bellman_ford(n: usize, cs: &[Constraint], source: usize, reverse: bool) -> Vec<f64> {
    let mut d = vec![f64::INFINITY; n];
    d[source] = 0.0;
    for _ in 0..n {
        for c in cs {
            let (u, v) = if reverse {
                (c.to as usize, c.from as usize)
            } else {
                (c.from as usize, c.to as usize)
            };
            if d[u] + c.bound < d[v] {
                d[v] = d[u] + c.bound;
            }
        }
    }
    d
}

/// Constraints some hidden point satisfies (so no negative cycle), on a random sparse graph,
/// and estimates near that point (some constraints violated by them).
fn feasible() -> impl Strategy<Value = (usize, Vec<Constraint>, Vec<f64>)> {
    (2usize..24, any::<u64>()).prop_map(|(n, seed)| {
        let mut rng = tsync_sim::SplitMix64::new(seed);
        let truth: Vec<f64> = (0..n).map(|_| rng.unit() * 1e6 - 5e5).collect();
        let mut cs = Vec::new();
        for e in 0..(3 * n) {
            let (a, b) = (rng.below(n as u64) as usize, rng.below(n as u64) as usize);
            if a == b {
                continue;
            }
            cs.push(Constraint {
                from: a as u32,
                to: b as u32,
                bound: truth[b] - truth[a] + rng.unit() * 50.0,
                id: e as u32,
            });
        }
        let estimates = truth.iter().map(|t| t + rng.unit() * 80.0 - 40.0).collect();
        (n, cs, estimates)
    })
}

proptest! {
    #[test]
    fn dijkstra_under_the_potential_equals_bellman_ford((n, cs, x) in feasible()) {
        let p = potential(n, &cs, &x).expect("feasible");
        for c in &cs {
            prop_assert!(p[c.to as usize] <= p[c.from as usize] + c.bound + 1e-6);
        }
        for reverse in [false, true] {
            let adj = Adjacency::new(n, &cs, reverse);
            for root in 0..n {
                let tree = dijkstra(&cs, &adj, reverse, &p, root);
                let dense = bellman_ford(n, &cs, root, reverse);
                for (v, &b) in dense.iter().enumerate() {
                    let a = tree.dist[v];
                    prop_assert!(
                        a == b || (a - b).abs() <= 1e-6 * (1.0 + b.abs()),
                        "root {root} v {v}: {a} vs {b}"
                    );
                    // The path the tree names sums to the distance.
                    if b.is_finite() && v != root {
                        let ids = path(&cs, &tree, reverse, root, v);
                        let sum: f64 = ids
                            .iter()
                            .map(|&id| cs.iter().find(|c| c.id == id).unwrap().bound)
                            .sum();
                        prop_assert!((sum - b).abs() <= 1e-6 * (1.0 + b.abs()));
                    }
                }
            }
        }
    }
}

#[test]
fn a_negative_cycle_is_named() {
    let c = |from, to, bound, id| Constraint {
        from,
        to,
        bound,
        id,
    };
    // x1 − x0 ≤ 5, x2 − x1 ≤ −3, x0 − x2 ≤ −4: around the loop 0 ≤ −2.
    let cs = [
        c(0, 1, 5.0, 10),
        c(1, 2, -3.0, 11),
        c(2, 0, -4.0, 12),
        c(2, 3, 1.0, 13),
    ];
    let mut cycle = potential(4, &cs, &[0.0; 4]).unwrap_err();
    cycle.sort_unstable();
    assert_eq!(cycle, vec![10, 11, 12]);
}
