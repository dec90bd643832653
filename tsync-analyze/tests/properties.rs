//! Property tests on simulated linear clocks: random offsets (±10 s) and drifts (±200 ppm), random
//! one-way delays of at least a minimum (exponential or heavy-tailed extra).

mod common;

use proptest::prelude::*;
use tsync_analyze::{Algorithm, Message, Quality, SyncOptions, sync_messages};
use tsync_sim::{Delay, DelayTail, LinearClock, Workload};

fn workload(
    clocks: Vec<LinearClock>,
    links: Vec<(u32, u32)>,
    messages: u64,
    min_delay_ns: f64,
    tail: DelayTail,
    seed: u64,
) -> Workload {
    Workload {
        clocks,
        links,
        messages,
        start_ns: 20e9,
        interval_ns: 1_000_000.0,
        delay: Delay {
            min_ns: min_delay_ns,
            tail,
            max_ns: min_delay_ns + 50_000_000.0,
        },
        seed,
    }
}

fn clock() -> impl Strategy<Value = LinearClock> {
    (-10e9..10e9f64, -200.0..200.0f64).prop_map(|(offset_ns, drift_ppm)| LinearClock {
        offset_ns,
        drift_ppm,
    })
}

fn tail() -> impl Strategy<Value = DelayTail> {
    prop_oneof![
        (1_000.0..200_000.0f64).prop_map(|mean_ns| DelayTail::Exponential { mean_ns }),
        (1_000.0..50_000.0f64, 0.8..3.0f64)
            .prop_map(|(scale_ns, shape)| DelayTail::Pareto { scale_ns, shape }),
    ]
}

fn names(n: usize) -> Vec<String> {
    (0..n).map(|i| i.to_string()).collect()
}

/// Messages of the workload plus one message each way at its start and end, so that both
/// directions interleave (otherwise `incomplete` is the right answer).
fn messages_with_both_directions(w: &Workload) -> Vec<Message> {
    let mut v = Vec::new();
    w.generate(|m, _| v.push(common::message(m)));
    let (c0, c1) = (w.clocks[0], w.clocks[1]);
    let end = w.start_ns + w.interval_ns * 2.0 * w.messages as f64 + 1e6;
    for (t, s) in [
        (w.start_ns - 5e6, 0u32),
        (w.start_ns - 4e6, 1),
        (end, 0),
        (end + 1e6, 1),
    ] {
        let (cs, cr) = if s == 0 { (c0, c1) } else { (c1, c0) };
        v.push(Message {
            send_trace: s,
            recv_trace: 1 - s,
            send_ns: cs.local(t),
            recv_ns: cr.local(t + w.delay.min_ns + 500.0),
        });
    }
    v
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn truth_inside_interval_and_no_inversions(
        c0 in clock(), c1 in clock(), tail in tail(),
        min_delay in 1_000.0..100_000.0f64, n in 4u64..400, seed in any::<u64>(),
        shuffle in any::<bool>(),
    ) {
        let w = workload(vec![c0, c1], vec![(0, 1)], n, min_delay, tail, seed);
        let mut msgs = messages_with_both_directions(&w);
        if shuffle {
            // Out-of-order input must give the same result.
            msgs.reverse();
        }
        let r = sync_messages(&names(2), msgs.iter().copied(), &SyncOptions::default(), None);
        let p = r.pair(0, 1).unwrap();
        prop_assert_eq!(p.quality, Quality::Accurate);
        let acc = p.accuracy.as_ref().unwrap();
        // The true map lies in the guaranteed interval at every message time (1e-3 ns slack for
        // the final float rounding).
        for m in &msgs {
            let t_a = if m.send_trace == 0 { m.send_ns } else { m.recv_ns };
            let truth = c0.map_to(&c1, t_a as f64);
            let (lo, hi) = acc.at(t_a).unwrap();
            prop_assert!(lo - 1e-3 <= truth && truth <= hi + 1e-3,
                "truth {} outside [{}, {}] at {}", truth, lo, hi, t_a);
        }
        // Applying the per-trace factors leaves no message inversion.
        for m in &msgs {
            let s = r.to_reference(m.send_trace, m.send_ns);
            let rcv = r.to_reference(m.recv_trace, m.recv_ns);
            prop_assert!(rcv > s, "inversion: {:?} → {} > {}", m, s, rcv);
        }
        prop_assert!(r.traces.iter().all(|t| t.synchronized));
    }

    #[test]
    fn one_direction_only_is_absent_and_unsynchronized(
        c0 in clock(), c1 in clock(), n in 1u64..50, seed in any::<u64>()
    ) {
        let w = workload(vec![c0, c1], vec![(0, 1)], n, 10_000.0,
            DelayTail::Exponential { mean_ns: 10_000.0 }, seed);
        let mut msgs = Vec::new();
        w.generate(|m, _| if m.send_trace == 0 { msgs.push(common::message(m)) });
        prop_assume!(!msgs.is_empty());
        let r = sync_messages(&names(2), msgs, &SyncOptions::default(), None);
        prop_assert_eq!(r.pair(0, 1).unwrap().quality, Quality::Absent);
        prop_assert!(!r.traces[1].synchronized);
    }

    #[test]
    fn linreg_is_close_to_truth_with_symmetric_delays(
        c0 in clock(), c1 in clock(), seed in any::<u64>()
    ) {
        let w = workload(vec![c0, c1], vec![(0, 1)], 2000, 20_000.0,
            DelayTail::Exponential { mean_ns: 2_000.0 }, seed);
        let msgs = messages_with_both_directions(&w);
        let opts = SyncOptions { algorithm: Algorithm::Linreg, ..Default::default() };
        let r = sync_messages(&names(2), msgs, &opts, None);
        let p = r.pair(0, 1).unwrap();
        let e = p.estimate.unwrap();
        let l = p.linreg.as_ref().unwrap();
        prop_assert!(l.samples > 100);
        for t in [20e9, 21e9] {
            let t_a = c0.local(t) as f64;
            let err = (e.apply(t_a) - c0.map_to(&c1, t_a)).abs();
            // Symmetric delays: the error is the delay noise, tens of µs at most.
            prop_assert!(err < 50_000.0, "error {} ns", err);
        }
    }
}

/// Chain a–b–c (no a–c traffic): c is mapped onto the reference through b, exactly composed.
#[test]
fn chain_composes_through_the_middle_trace() {
    let clocks = vec![
        LinearClock {
            offset_ns: 3e9,
            drift_ppm: 150.0,
        },
        LinearClock {
            offset_ns: -7e9,
            drift_ppm: -120.0,
        },
        LinearClock {
            offset_ns: 9e9,
            drift_ppm: 80.0,
        },
    ];
    let w = workload(
        clocks.clone(),
        vec![(0, 1), (1, 2)],
        3000,
        20_000.0,
        DelayTail::Exponential { mean_ns: 30_000.0 },
        7,
    );
    let mut msgs = Vec::new();
    w.generate(|m, _| msgs.push(common::message(m)));
    for reference in [None, Some(0), Some(2)] {
        let r = sync_messages(
            &names(3),
            msgs.iter().copied(),
            &SyncOptions::default(),
            reference,
        );
        assert!(r.pair(0, 2).is_none());
        let refi = r.traces[0].reference;
        assert_eq!(
            refi,
            reference.unwrap_or(1),
            "the middle trace is the best reference"
        );
        assert!(r.traces.iter().all(|t| t.synchronized && t.group == 0));
        if reference.is_some() {
            let via = r
                .traces
                .iter()
                .find(|t| t.path.len() == 3)
                .expect("a two-hop path");
            assert_eq!(via.path[1], 1);
        }
        // Every trace's map agrees with the truth within the pairs' accuracy (tens of µs here).
        for t in &r.traces {
            for true_ns in [20e9, 20.2e9] {
                let local = clocks[t.index as usize].local(true_ns) as f64;
                let want = clocks[t.index as usize].map_to(&clocks[refi as usize], local);
                let got = t.map.apply(local);
                assert!(
                    (got - want).abs() < 200_000.0,
                    "trace {}: {got} vs {want}",
                    t.index
                );
            }
        }
    }
}

/// Two groups with no traffic between them: each has its own reference and a warning says so.
#[test]
fn disconnected_groups_get_their_own_reference() {
    let clocks = (0..5)
        .map(|i| LinearClock {
            offset_ns: i as f64 * 1e9,
            drift_ppm: i as f64 * 10.0,
        })
        .collect();
    let w = workload(
        clocks,
        vec![(0, 1), (2, 3)],
        2000,
        20_000.0,
        DelayTail::Exponential { mean_ns: 30_000.0 },
        11,
    );
    let mut msgs = Vec::new();
    w.generate(|m, _| msgs.push(common::message(m)));
    let r = sync_messages(&names(5), msgs, &SyncOptions::default(), Some(3));
    let g: Vec<u32> = r.traces.iter().map(|t| t.group).collect();
    assert_eq!(g, vec![0, 0, 1, 1, 2]);
    assert_eq!(r.traces[0].reference, 0);
    assert_eq!(r.traces[2].reference, 3, "--reference applies to its group");
    assert!(!r.traces[4].synchronized);
    assert!(r.warnings.iter().any(|w| w.contains("2 groups")));
    assert!(
        r.warnings
            .iter()
            .any(|w| w.contains("trace 4") && w.contains("NOT synchronized"))
    );
}
