//! Groups of hundreds of traces with known truth: sparse meshes larger than the old 256-trace
//! limit get their joint estimate and network-wide intervals, every interval holds the truth and
//! is never wider than the path's, both ways of solving the intervals (each query exactly, or
//! through a grid of instants in a group of more than `EXACT_PAIRS` pairs) are checked.

mod common;

use tsync_analyze::{NETWORK_EXACT_PAIRS as EXACT_PAIRS, SyncOptions, SyncResult, sync_messages};
use tsync_sim::Workload;

fn run(w: &Workload) -> SyncResult {
    let mut v = Vec::new();
    w.generate(|m, _| v.push(common::message(m)));
    let names: Vec<String> = (0..w.clocks.len()).map(|i| i.to_string()).collect();
    sync_messages(&names, v, &SyncOptions::default(), None)
}

/// Checks every trace at `points` times: (network intervals, truth outside, wider than the path).
fn check(w: &Workload, r: &SyncResult, points: usize) -> (usize, usize, usize) {
    let (start, end) = (w.start_ns + 1e9, w.end_ns() - 1e9);
    let (mut with, mut outside, mut wider) = (0, 0, 0);
    for (k, clock) in w.clocks.iter().enumerate() {
        let reference = r.traces[k].reference as usize;
        if reference == k {
            continue;
        }
        for i in 0..points {
            let t = start + (end - start) * i as f64 / (points - 1) as f64;
            let truth = w.clocks[reference].local(t) as f64;
            let Some(n) = r.network_interval(k as u32, clock.local(t)) else {
                continue;
            };
            with += 1;
            if truth < n.lo - 1.0 || truth > n.hi + 1.0 {
                outside += 1;
            }
            if let Some((lo, hi)) = n.path
                && n.hi - n.lo > hi - lo + 1e-6
            {
                wider += 1;
            }
        }
    }
    (with, outside, wider)
}

fn large_sparse_mesh(traces: usize, peers: usize, per_pair: u64, seed: u64) {
    let mut w = Workload::sparse(traces, peers, 0, seed);
    w.messages = per_pair * w.links.len() as u64;
    let r = run(&w);
    assert!(
        r.traces.iter().all(|t| t.synchronized && t.group == 0),
        "one group: {:?}",
        r.warnings
    );
    let pairs = r.pairs.len();
    assert_eq!(
        r.traces
            .iter()
            .filter(|t| t.pairs_used >= pairs * 9 / 10)
            .count(),
        traces - 1,
        "every trace but the reference takes the joint estimate over the {pairs} pairs"
    );
    let (with, outside, wider) = check(&w, &r, 5);
    let expected = 5 * (traces - 1);
    assert!(
        with >= expected * 9 / 10,
        "network intervals at {with} of {expected} points"
    );
    assert_eq!(outside, 0, "truth outside the network interval");
    assert_eq!(wider, 0, "network interval wider than the path's");
    assert!(
        !r.warnings.iter().any(|w| w.contains("contradict")),
        "{:?}",
        r.warnings
    );
}

#[test]
fn a_sparse_mesh_of_300_traces_solved_query_by_query() {
    // About 3 × 300 / 2 pairs: below EXACT_PAIRS, every query exact at its own instant.
    let w = Workload::sparse(300, 6, 0, 11);
    assert!(w.links.len() <= EXACT_PAIRS && w.clocks.len() > 256);
    large_sparse_mesh(300, 6, 40, 11);
}

#[test]
fn a_sparse_mesh_of_400_traces_solved_through_the_grid() {
    // About 12 × 400 / 2 pairs: above EXACT_PAIRS, the grid's trees.
    let w = Workload::sparse(400, 12, 0, 12);
    assert!(w.links.len() > EXACT_PAIRS);
    large_sparse_mesh(400, 12, 30, 12);
}
