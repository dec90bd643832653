//! Piecewise synchronization of clocks that bend: crystal wander over up to an hour, with random
//! delays. What a user relies on: the map is continuous and strictly increasing, the truth lies
//! inside every guaranteed interval, and a clock that does not bend keeps one segment.

use proptest::prelude::*;
use tsync_analyze::{Message, Quality, SyncOptions, sync_messages};

/// Trace 1's clock at true time `t` (trace 0's clock is true): an offset, a drift, a frequency
/// that wanders linearly (`wander_ppm_per_h`) and a temperature-like swing.
#[derive(Clone, Copy, Debug)]
struct Bend {
    offset_ns: f64,
    drift_ppm: f64,
    wander_ppm_per_h: f64,
    swing_ppm: f64,
    period_s: f64,
}

impl Bend {
    fn local(&self, t: f64) -> f64 {
        let s = (t - START_NS) * 1e-9;
        let wander = self.wander_ppm_per_h / 3600.0 * 1e-6 / 2.0 * s * s;
        let swing = self.swing_ppm * 1e-6 * self.period_s / std::f64::consts::TAU
            * (1.0 - (std::f64::consts::TAU * s / self.period_s).cos());
        t + self.offset_ns + self.drift_ppm * 1e-6 * (t - START_NS) + (wander + swing) * 1e9
    }
}

const START_NS: f64 = 1e12;

/// A xorshift generator (the test needs no statistics, only varied delays).
struct Rng(u64);

impl Rng {
    fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        ((self.0 >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }

    fn delay(&mut self, min_ns: f64, mean_ns: f64) -> f64 {
        min_ns - mean_ns * self.uniform().ln()
    }
}

/// Messages both ways every `step_ms`, over `seconds`.
fn messages(bend: &Bend, seconds: f64, step_ms: f64, mean_ns: f64, seed: u64) -> Vec<Message> {
    let mut rng = Rng(seed | 1);
    let mut out = Vec::new();
    let mut t = START_NS;
    while t < START_NS + seconds * 1e9 {
        let d = rng.delay(30_000.0, mean_ns);
        out.push(Message {
            send_trace: 0,
            recv_trace: 1,
            send_ns: t as i64,
            recv_ns: bend.local(t + d) as i64,
        });
        let u = t + step_ms * 0.5e6;
        let d = rng.delay(30_000.0, mean_ns);
        out.push(Message {
            send_trace: 1,
            recv_trace: 0,
            send_ns: bend.local(u) as i64,
            recv_ns: (u + d) as i64,
        });
        t += step_ms * 1e6;
    }
    out
}

fn bend() -> impl Strategy<Value = Bend> {
    (
        -1e9..1e9f64,
        -100.0..100.0f64,
        -4.0..4.0f64,
        0.0..1.0f64,
        300.0..3600.0f64,
    )
        .prop_map(
            |(offset_ns, drift_ppm, wander_ppm_per_h, swing_ppm, period_s)| Bend {
                offset_ns,
                drift_ppm,
                wander_ppm_per_h,
                swing_ppm,
                period_s,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn bent_clocks_keep_their_guarantees(
        b in bend(),
        seconds in 600.0..3600.0f64,
        mean_ns in 2_000.0..40_000.0f64,
        seed in any::<u64>(),
    ) {
        let names = vec!["a".to_string(), "b".to_string()];
        let msgs = messages(&b, seconds, 100.0, mean_ns, seed);
        let r = sync_messages(&names, msgs, &SyncOptions::default(), Some(0));
        let pair = r.pair(0, 1).unwrap();
        let map = pair.map.as_ref().expect("a map");
        prop_assert!(map.is_continuous_and_increasing(1e-3), "{:?}", map.pieces());
        // The trace's map onto the reference is the inverse of the pair's (b → a).
        let (first, last) = pair.span.unwrap();
        let mut checked = 0;
        for i in 0..=400 {
            let t_a = first + ((last - first) as f64 * i as f64 / 400.0) as i64;
            let truth = b.local(t_a as f64);
            if let Some((lo, hi)) = pair.interval_at(t_a) {
                checked += 1;
                prop_assert!(
                    lo - 1.0 <= truth && truth <= hi + 1.0,
                    "t_a {}: truth {} outside [{}, {}] ({} segments)",
                    t_a, truth, lo, hi, pair.segments.len()
                );
            }
        }
        if pair.quality == Quality::Accurate {
            prop_assert!(checked >= 360, "only {} points with an interval", checked);
        }
        // The trace map (b → a) sends b's clock back to the truth within the pair's intervals.
        let t = &r.traces[1];
        let mid = (first + last) / 2;
        let back = t.map.apply(b.local(mid as f64));
        prop_assert!((back - mid as f64).abs() < 20_000.0, "{} vs {}", back, mid);
    }
}

#[test]
fn a_linear_clock_keeps_one_segment_and_the_classic_result() {
    let b = Bend {
        offset_ns: 2.5e8,
        drift_ppm: 37.0,
        wander_ppm_per_h: 0.0,
        swing_ppm: 0.0,
        period_s: 1000.0,
    };
    let names = vec!["a".to_string(), "b".to_string()];
    let r = sync_messages(
        &names,
        messages(&b, 3600.0, 50.0, 10_000.0, 3),
        &SyncOptions::default(),
        Some(0),
    );
    let pair = r.pair(0, 1).unwrap();
    assert_eq!(pair.segments.len(), 1);
    assert!(pair.map.as_ref().unwrap().is_linear());
    assert_eq!(pair.quality, Quality::Accurate);
    assert!(pair.minslope.is_some() && pair.maxslope.is_some());
}

#[test]
fn wandering_clocks_over_two_hours_stay_within_two_microseconds() {
    // 4 ppm/h of wander over 2 h: one line is off by milliseconds.
    let b = Bend {
        offset_ns: -3e8,
        drift_ppm: -20.0,
        wander_ppm_per_h: 4.0,
        swing_ppm: 0.0,
        period_s: 1000.0,
    };
    let names = vec!["a".to_string(), "b".to_string()];
    let r = sync_messages(
        &names,
        messages(&b, 7200.0, 50.0, 10_000.0, 11),
        &SyncOptions::default(),
        Some(0),
    );
    let pair = r.pair(0, 1).unwrap();
    assert_eq!(pair.quality, Quality::Accurate, "{:?}", r.warnings);
    assert!(pair.segments.len() > 1);
    let (first, last) = pair.span.unwrap();
    let t = &r.traces[1];
    let mut worst: f64 = 0.0;
    for i in 0..=1000 {
        let t_a = first as f64 + (last - first) as f64 * i as f64 / 1000.0;
        worst = worst.max((t.map.apply(b.local(t_a)) - t_a).abs());
    }
    assert!(
        worst <= 2_000.0,
        "worst error {worst} ns over {} segments",
        pair.segments.len()
    );
}
