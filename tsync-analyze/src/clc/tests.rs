use super::*;
use proptest::prelude::*;

fn msg(st: usize, si: usize, rt: usize, ri: usize) -> MessageRef {
    MessageRef {
        send: EventRef {
            trace: st,
            index: si,
        },
        recv: EventRef {
            trace: rt,
            index: ri,
        },
    }
}

/// A generated event: (true time, trace, Some((message id, is send))).
type TrueEvent = (i64, usize, Option<(usize, bool)>);

fn no_backward_ramp() -> ClcParams {
    ClcParams {
        rho: 0.0,
        ..ClcParams::default()
    }
}

#[test]
fn forward_amortization_follows_becker_eq_4() {
    // Trace 0 sends at 100; trace 1 receives it at 50 (a violation), then has events at 1050
    // and 1_000_000.
    let input = ClcInput {
        traces: vec![vec![100], vec![50, 1050, 1_000_000]],
        messages: vec![msg(0, 0, 1, 0)],
    };
    let mut l_min = PairLatency::new(2, 0);
    l_min.set(0, 1, 10);
    let out = correct(&input, &l_min, &no_backward_ramp()).unwrap();
    // The receive jumps to 100 + 10; the next event keeps γ of its interval; the far one
    // has caught up and keeps its time.
    assert_eq!(out.corrected[1], vec![110, 110 + 999, 1_000_000]);
    assert_eq!(out.corrected[0], vec![100]);
    let r = &out.report;
    assert_eq!(
        (
            r.violations_before,
            r.violations_after,
            r.corrected_explicitly
        ),
        (1, 0, 1)
    );
    assert_eq!(r.reversed_before, 1);
    assert_eq!(r.displacement_ns.max, 60.0);
    assert_eq!(r.events_moved, 2);
}

#[test]
fn receive_with_several_sends_follows_the_latest() {
    let input = ClcInput {
        traces: vec![vec![100], vec![300], vec![120]],
        messages: vec![msg(0, 0, 2, 0), msg(1, 0, 2, 0)],
    };
    let out = correct(&input, &PairLatency::new(3, 5), &no_backward_ramp()).unwrap();
    assert_eq!(out.corrected[2], vec![305]);
}

#[test]
fn backward_ramp_spreads_the_jump_and_respects_send_caps() {
    // Trace 1 has events every 1000 ns up to its receive at 100_000, which must move to
    // 110_000 (Δt = 10_000; with ρ = 0.1, L_A = 100_000: the ramp covers all of them).
    // Trace 1's event at 95_000 is a send whose receive on trace 0 is at 96_000: it may move
    // by at most 1_000 − l_min.
    let t1: Vec<i64> = (0..=100).map(|k| k * 1000).collect();
    let input = ClcInput {
        traces: vec![vec![96_000, 109_990], t1.clone()],
        messages: vec![msg(1, 95, 0, 0), msg(0, 1, 1, 100)],
    };
    let params = ClcParams {
        rho: 0.1,
        ..ClcParams::default()
    };
    let out = correct(&input, &PairLatency::new(2, 10), &params).unwrap();
    let c = &out.corrected[1];
    assert_eq!(c[100], 110_000);
    assert_eq!(out.report.violations_after, 0);
    // The capped send moved exactly up to its cap.
    assert_eq!(c[95], 96_000 - 10);
    // Before the send, the ramp rises linearly from 0 (at the window start) to the cap.
    assert_eq!(c[0], 0);
    assert!(c[50] > t1[50] && c[50] - t1[50] < 990);
    // After the send the ramp rises to the full jump; order is kept everywhere.
    assert!(c.windows(2).all(|w| w[0] <= w[1]));
    assert!(c[99] > t1[99] + 990 && c[99] <= 110_000);
    // No event moved further than the jump, none backward.
    assert!(c.iter().zip(&t1).all(|(a, b)| a >= b && a - b <= 10_000));
}

#[test]
fn ramps_stop_at_the_previous_moved_receive() {
    // Trace 1: events every 1_000 ns; receives at index 2 (1_000 ns too early) and 6 (about
    // 13 µs too early). With ρ = 0.01 the second ramp would reach back 1.3 ms, over the whole
    // trace; it stops at the first receive instead.
    let t1: Vec<i64> = (0..8).map(|k| k * 1000).collect();
    let input = ClcInput {
        traces: vec![vec![3_000, 20_000], t1.clone()],
        messages: vec![msg(0, 0, 1, 2), msg(0, 1, 1, 6)],
    };
    let forward = correct(&input, &PairLatency::new(2, 0), &no_backward_ramp()).unwrap();
    assert_eq!(
        forward.corrected[1],
        vec![0, 1000, 3000, 3999, 4998, 5997, 20_000, 20_999]
    );
    let out = correct(&input, &PairLatency::new(2, 0), &ClcParams::default()).unwrap();
    let c = &out.corrected[1];
    assert_eq!(out.report.corrected_explicitly, 2);
    // Before the first receive only its own ramp acts (Δt = 1000 over 100 µs: offsets 980
    // and 990); the second ramp would have moved these by thousands of ns.
    assert_eq!(&c[..3], &[980, 1990, 3000]);
    // Between the receives: the ramp from 3000 (offset 0) to 6996 (offset 13_004).
    let ramp = |x: f64| x + 13_004.0 * (x - 3000.0) / 3996.0;
    for (k, x) in [(3, 3999.0), (4, 4998.0), (5, 5997.0)] {
        assert_eq!(c[k], ramp(x).floor() as i64, "event {k}");
    }
    assert_eq!(&c[6..], &[20_000, 20_999]);
    assert_eq!(out.report.violations_after, 0);
}

#[test]
fn causal_cycle_is_an_error_not_a_hang() {
    // Each trace receives, as its first event, what the other sends as its second.
    let input = ClcInput {
        traces: vec![vec![0, 10], vec![0, 10]],
        messages: vec![msg(0, 1, 1, 0), msg(1, 1, 0, 0)],
    };
    let err = correct(&input, &PairLatency::new(2, 0), &ClcParams::default()).unwrap_err();
    assert!(matches!(err, ClcError::CausalCycle { .. }), "{err}");
}

#[test]
fn bad_input_is_named() {
    let input = ClcInput {
        traces: vec![vec![0, 10], vec![5]],
        messages: vec![msg(0, 2, 1, 0)],
    };
    let err = correct(&input, &PairLatency::new(2, 0), &ClcParams::default()).unwrap_err();
    assert_eq!(
        err,
        ClcError::NoSuchEvent {
            message: 0,
            trace: 0,
            index: 2,
            len: 2
        }
    );
    let unsorted = ClcInput {
        traces: vec![vec![10, 5]],
        messages: vec![],
    };
    let err = correct(&unsorted, &PairLatency::new(1, 0), &ClcParams::default());
    assert!(matches!(
        err,
        Err(ClcError::Unsorted {
            trace: 0,
            index: 1,
            ..
        })
    ));
    let bad_gamma = ClcParams {
        gamma: 1.5,
        ..ClcParams::default()
    };
    assert!(correct(&unsorted, &PairLatency::new(1, 0), &bad_gamma).is_err());
    assert!(matches!(
        correct(&input, &PairLatency::new(3, 0), &ClcParams::default()),
        Err(ClcError::LatencyTableSize { table: 3, input: 2 })
    ));
}

#[test]
fn min_rtt_gives_half_in_both_directions() {
    let t = PairLatency::from_min_rtt(3, 0, [(0, 1, 42_000), (1, 0, 40_000), (1, 2, 7)]);
    assert_eq!(t.get(0, 1), 20_000);
    assert_eq!(t.get(1, 0), 20_000);
    assert_eq!(t.get(2, 1), 3);
    assert_eq!(t.known(0, 2), None);
    assert_eq!(PairLatency::uniform(2, 9).known(1, 0), Some(9));
}

/// A synthetic capture: `nodes` traces with an event every ~10 µs over one second, messages
/// between random pairs with a true latency ≥ 20 µs, and clock errors: trace 1 runs 30 µs
/// early between 0.4 s and 0.45 s (a local glitch that a linear correction would leave).
struct Synthetic {
    input: ClcInput,
    /// Input times of the glitch window on trace 1.
    glitch: (i64, i64),
}

fn synthetic(seed: u64) -> Synthetic {
    let mut rng = seed;
    let mut next = move |m: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % m
    };
    let nodes = 3;
    let glitch = (400_000_000, 450_000_000);
    let error = |trace: usize, t: i64| {
        if trace == 1 && t >= glitch.0 && t < glitch.1 {
            t - 30_000
        } else {
            t
        }
    };
    // True-time events: (true time, trace, message id, is_send).
    let mut events: Vec<TrueEvent> = Vec::new();
    let mut t = 0i64;
    let mut id = 0;
    while t < 1_000_000_000 {
        t += 5_000 + next(10_000) as i64;
        let from = next(nodes as u64) as usize;
        if next(4) == 0 {
            let to = (from + 1 + next(nodes as u64 - 1) as usize) % nodes;
            events.push((t, from, Some((id, true))));
            events.push((t + 20_000 + next(30_000) as i64, to, Some((id, false))));
            id += 1;
        } else {
            events.push((t, from, None));
        }
    }
    events.sort_by_key(|e| e.0);
    let mut traces = vec![Vec::new(); nodes];
    let mut ends = vec![
        (
            EventRef { trace: 0, index: 0 },
            EventRef { trace: 0, index: 0 }
        );
        id
    ];
    for (t, trace, role) in events {
        let e = EventRef {
            trace,
            index: traces[trace].len(),
        };
        traces[trace].push(error(trace, t));
        match role {
            Some((m, true)) => ends[m].0 = e,
            Some((m, false)) => ends[m].1 = e,
            None => {}
        }
    }
    for tr in &mut traces {
        // The glitch may reorder a trace around its edges; keep the input sorted as the
        // linear correction would deliver it.
        let mut prev = i64::MIN;
        for x in tr.iter_mut() {
            *x = (*x).max(prev);
            prev = *x;
        }
    }
    let messages = ends
        .into_iter()
        .map(|(send, recv)| MessageRef { send, recv })
        .collect();
    Synthetic {
        input: ClcInput { traces, messages },
        glitch,
    }
}

#[test]
fn injected_violations_are_removed_and_far_events_keep_their_time() {
    let s = synthetic(7);
    let l_min = PairLatency::new(3, 20_000);
    let params = ClcParams::default();
    let out = correct(&s.input, &l_min, &params).unwrap();
    let r = &out.report;
    assert!(
        r.violations_before > 10,
        "the glitch must cause violations: {r:?}"
    );
    assert_eq!(r.violations_after, 0);
    assert!(r.corrected_explicitly > 0 && r.corrected_explicitly <= r.violations_before);
    for (before, after) in s.input.traces.iter().zip(&out.corrected) {
        assert!(after.windows(2).all(|w| w[0] <= w[1]), "order kept");
        assert!(
            before.iter().zip(after).all(|(b, a)| a >= b),
            "forward only"
        );
    }
    // Jumps are ≤ 30 µs + l_min: ramps reach back ≤ 5 ms (ρ = 1 %), forward amortization
    // catches up within ≤ 50 ms (γ = 0.999). Far from the glitch nothing moves.
    let far_before = s.glitch.0 - 10_000_000;
    let far_after = s.glitch.1 + 100_000_000;
    let mut far = 0;
    for (before, after) in s.input.traces.iter().zip(&out.corrected) {
        for (b, a) in before.iter().zip(after) {
            if *b < far_before || *b > far_after {
                assert_eq!(a, b, "event at {b} ns is far from the glitch but moved");
                far += 1;
            }
        }
    }
    assert!(far > 100_000);
    let share = r.interval_deviation_share;
    assert!(
        share.gt_0_01_pct > 0.0 && share.gt_0_01_pct < 0.2,
        "{share:?}"
    );
    assert!(share.gt_100_pct <= share.gt_1_pct && share.gt_1_pct <= share.gt_0_01_pct);
    let json = serde_json::to_value(r).unwrap();
    for key in [
        "gamma",
        "violations_before",
        "violations_after",
        "corrected_explicitly",
    ] {
        assert!(json.get(key).is_some(), "{key}");
    }
    assert!(json["displacement_ns"]["mean"].is_number());
    assert!(json["displacement_ns"]["max"].is_number());
    assert!(json["interval_deviation_share"]["gt_0_01_pct"].is_number());
    assert!(json["interval_deviation_share"]["gt_1_pct"].is_number());
    assert!(json["interval_deviation_share"]["gt_100_pct"].is_number());
}

/// Random causal histories seen through random per-trace clock offsets.
fn causal_input() -> impl Strategy<Value = (ClcInput, i64)> {
    (2usize..5, 1usize..60, 0i64..5_000).prop_flat_map(|(nodes, n, l_min)| {
        (
            proptest::collection::vec(-20_000i64..20_000, nodes),
            proptest::collection::vec(
                (
                    0..nodes,
                    0..nodes,
                    0i64..10_000,
                    0i64..10_000,
                    any::<bool>(),
                ),
                n,
            ),
        )
            .prop_map(move |(offsets, steps)| {
                let mut events: Vec<TrueEvent> = Vec::new();
                let mut t = 0;
                let mut id = 0;
                for (from, to, gap, latency, is_message) in steps {
                    t += gap;
                    if is_message && from != to {
                        events.push((t, from, Some((id, true))));
                        events.push((t + l_min + latency, to, Some((id, false))));
                        id += 1;
                    } else {
                        events.push((t, from, None));
                    }
                }
                events.sort_by_key(|e| e.0);
                let mut traces = vec![Vec::new(); nodes];
                let mut ends = vec![[EventRef { trace: 0, index: 0 }; 2]; id];
                for (t, trace, role) in events {
                    let e = EventRef {
                        trace,
                        index: traces[trace].len(),
                    };
                    traces[trace].push(t + offsets[trace]);
                    if let Some((m, is_send)) = role {
                        ends[m][usize::from(!is_send)] = e;
                    }
                }
                let messages = ends
                    .into_iter()
                    .map(|[send, recv]| MessageRef { send, recv })
                    .collect();
                (ClcInput { traces, messages }, l_min)
            })
    })
}

proptest! {
    #[test]
    fn clc_invariants_hold(
        (input, l_min) in causal_input(),
        rho in prop_oneof![Just(0.0), 0.001f64..0.5],
        gamma in 0.9f64..=1.0,
        delta in 0i64..3,
    ) {
        let table = PairLatency::new(input.traces.len(), l_min);
        let params = ClcParams { gamma, delta_ns: delta, rho };
        let out = correct(&input, &table, &params).unwrap();
        prop_assert_eq!(out.report.violations_after, 0);
        for m in &input.messages {
            let s = out.corrected[m.send.trace][m.send.index];
            let r = out.corrected[m.recv.trace][m.recv.index];
            prop_assert!(r >= s + l_min);
        }
        for (before, after) in input.traces.iter().zip(&out.corrected) {
            prop_assert_eq!(before.len(), after.len());
            prop_assert!(after.windows(2).all(|w| w[0] <= w[1]));
            prop_assert!(before.iter().zip(after).all(|(b, a)| a >= b));
        }
        if out.report.violations_before == 0 && delta == 0 {
            prop_assert_eq!(&out.corrected, &input.traces);
        }
    }
}
