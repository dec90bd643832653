//! Network-wide estimation on random meshes of linear clocks with known truth: the joint estimate
//! does better than one path on average, the network-wide interval always holds the truth and is
//! never wider than the path's, contradictions are named, and two traces give exactly the path
//! result.

mod common;

use proptest::prelude::*;
use tsync_analyze::{Message, ReductionChoice, SyncOptions, SyncResult, sync_messages};
use tsync_sim::{Delay, DelayTail, LinearClock, Workload};

const PERFECT: LinearClock = LinearClock {
    offset_ns: 0.0,
    drift_ppm: 0.0,
};

fn names(n: usize) -> Vec<String> {
    (0..n).map(|i| i.to_string()).collect()
}

fn run(w: &Workload, reduction: ReductionChoice) -> SyncResult {
    let mut v = Vec::new();
    w.generate(|m, _| v.push(common::message(m)));
    let options = SyncOptions {
        reduction,
        ..Default::default()
    };
    sync_messages(&names(w.clocks.len()), v, &options, Some(0))
}

/// Worst |map − truth| over the traces at the middle of the run, and the truth/width checks of
/// the intervals at 21 points: (worst error, truth outside count, points where the network
/// interval is wider than the path's).
fn check(w: &Workload, r: &SyncResult) -> (f64, usize, usize) {
    let (start, end) = (
        w.start_ns + 1e8,
        w.start_ns + w.interval_ns * w.messages as f64 - 1e8,
    );
    let reference = &w.clocks[0];
    let (mut worst, mut outside, mut wider) = (0.0f64, 0, 0);
    for (k, c) in w.clocks.iter().enumerate().skip(1) {
        let mid = (start + end) / 2.0;
        let err = r.to_reference(k as u32, c.local(mid)) - reference.local(mid) as f64;
        worst = worst.max(err.abs());
        for i in 0..=20 {
            let t = start + (end - start) * i as f64 / 20.0;
            let local = c.local(t);
            let truth = reference.local(t) as f64;
            if let Some(n) = r.network_interval(k as u32, local) {
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
    }
    (worst, outside, wider)
}

fn mesh() -> impl Strategy<Value = Workload> {
    (4usize..8, any::<u64>(), 0.3f64..1.0).prop_map(|(n, seed, density)| {
        let mut w = Workload::benchmark(n, 60_000, seed);
        // A ring keeps the mesh connected; the other links are kept at random.
        let mut state = seed | 1;
        let mut coin = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        w.links
            .retain(|&(a, b)| b == a + 1 || (a == 0 && b as usize == n - 1) || coin() < density);
        w
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn the_network_interval_holds_the_truth_and_is_never_wider_than_the_path(w in mesh()) {
        let r = run(&w, ReductionChoice::Joint);
        let (_, outside, wider) = check(&w, &r);
        prop_assert_eq!(outside, 0);
        prop_assert_eq!(wider, 0);
        prop_assert!(!r.warnings.iter().any(|w| w.contains("contradict")), "{:?}", r.warnings);
    }
}

#[test]
fn the_joint_estimate_beats_one_path_on_average() {
    let (mut path, mut joint) = (0.0, 0.0);
    for seed in 1..=8 {
        let w = Workload::benchmark(8, 200_000, seed);
        path += check(&w, &run(&w, ReductionChoice::Path)).0;
        joint += check(&w, &run(&w, ReductionChoice::Joint)).0;
    }
    assert!(
        joint < 0.6 * path,
        "joint {joint} ns, path {path} ns (sums over 8 meshes)"
    );
}

#[test]
fn two_traces_give_exactly_the_path_result() {
    let w = Workload::benchmark(2, 50_000, 3);
    let (a, b) = (
        run(&w, ReductionChoice::Path),
        run(&w, ReductionChoice::Joint),
    );
    assert_eq!(a.traces[1].map, b.traces[1].map);
    assert_eq!(a.traces[1].line, b.traces[1].line);
    assert_eq!(b.traces[1].pairs_used, 0);
}

#[test]
fn the_result_does_not_depend_on_the_reference_but_for_the_frame() {
    let w = Workload::benchmark(6, 100_000, 9);
    let mut v = Vec::new();
    w.generate(|m, _| v.push(common::message(m)));
    let r0 = sync_messages(&names(6), v.clone(), &SyncOptions::default(), Some(0));
    let r3 = sync_messages(&names(6), v, &SyncOptions::default(), Some(3));
    // Trace 5 onto trace 4, through either frame.
    let t = w.clocks[5].local(w.start_ns + 5e9);
    let via = |r: &SyncResult| r.traces[4].map.inverse().apply(r.to_reference(5, t));
    assert!(
        (via(&r0) - via(&r3)).abs() < 1.0,
        "{} vs {}",
        via(&r0),
        via(&r3)
    );
}

#[test]
fn contradicting_pairs_are_named() {
    // Three traces; every message of pair 1–2 is recorded 1 ms late on trace 2 (a wrong match,
    // or a clock that jumped): each pair alone is consistent, the loop is not.
    let w = Workload {
        clocks: vec![PERFECT; 3],
        links: vec![(0, 1), (0, 2), (1, 2)],
        messages: 30_000,
        start_ns: 20e9,
        interval_ns: 100_000.0,
        delay: Delay {
            min_ns: 20_000.0,
            tail: DelayTail::Exponential { mean_ns: 30_000.0 },
            max_ns: 5_020_000.0,
        },
        seed: 4,
    };
    let mut v: Vec<Message> = Vec::new();
    w.generate(|m, _| {
        let mut m = common::message(m);
        if (m.send_trace, m.recv_trace) == (1, 2) || (m.send_trace, m.recv_trace) == (2, 1) {
            if m.recv_trace == 2 {
                m.recv_ns += 1_000_000;
            } else {
                m.send_ns += 1_000_000;
            }
        }
        v.push(m)
    });
    let r = sync_messages(&names(3), v, &SyncOptions::default(), Some(0));
    assert!(
        r.warnings
            .iter()
            .any(|w| w.contains("contradict") && w.contains("1–2")),
        "{:?}",
        r.warnings
    );
}

#[test]
fn where_a_pair_falls_silent_the_network_still_bounds_its_traces() {
    // Pair 0–1 exchanges messages in the first half only; 0–2 and 2–1 all along. Trace 1's path
    // goes through pair 0–1 (the tightest on average), which bounds nothing in the second half;
    // the network does, through trace 2.
    let w = Workload::benchmark(3, 60_000, 5);
    let half = w.start_ns + w.interval_ns * w.messages as f64 / 2.0;
    let mut v: Vec<Message> = Vec::new();
    w.generate(|m, t| {
        let pair = (
            m.send_trace.min(m.recv_trace),
            m.send_trace.max(m.recv_trace),
        );
        if pair != (0, 1) || t < half {
            v.push(common::message(m))
        }
    });
    let r = sync_messages(&names(3), v, &SyncOptions::default(), Some(0));
    let late = w.clocks[1].local(half + 0.25 * w.interval_ns * w.messages as f64);
    let n = r
        .network_interval(1, late)
        .expect("the network bounds trace 1");
    let truth = w.clocks[0].local(half + 0.25 * w.interval_ns * w.messages as f64) as f64;
    assert!(n.lo - 1.0 <= truth && truth <= n.hi + 1.0);
    assert!(n.path.is_none(), "{:?}", n.path);
    assert!(
        n.pairs.contains(&(0, 2)) && n.pairs.contains(&(1, 2)),
        "{:?}",
        n.pairs
    );
}
