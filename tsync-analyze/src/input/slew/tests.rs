//! Slew correction against synthetic clocks whose truth is known: linear, rate steps of ±500 ppm
//! at random instants, smooth frequency changes, bracket noise.

use super::*;
use proptest::prelude::*;

/// A node's true CLOCK_MONOTONIC as a function of its CLOCK_MONOTONIC_RAW: a base rate, rate
/// steps (each from its raw instant on) and a smooth sinusoidal rate component.
#[derive(Clone, Debug)]
struct Truth {
    raw0: f64,
    mono0: f64,
    base_rate: f64,
    /// (raw instant, rate change from then on), sorted.
    steps: Vec<(f64, f64)>,
    /// (amplitude of the rate, period in ns).
    smooth: Option<(f64, f64)>,
}

impl Truth {
    fn linear(rate: f64) -> Self {
        Truth {
            raw0: 3_600e9,
            mono0: 3_650e9,
            base_rate: rate,
            steps: Vec::new(),
            smooth: None,
        }
    }

    fn mono(&self, raw: f64) -> f64 {
        let dx = raw - self.raw0;
        let mut y = self.mono0 + self.base_rate * dx;
        for &(at, change) in &self.steps {
            if raw > at {
                y += change * (raw - at);
            }
        }
        if let Some((amp, period)) = self.smooth {
            let w = std::f64::consts::TAU / period;
            y += amp / w * (1.0 - (w * dx).cos());
        }
        y
    }

    /// The raw time at which the clock read `mono` (bisection).
    fn raw(&self, mono: f64) -> f64 {
        let (mut lo, mut hi) = (self.raw0 - 1e12, self.raw0 + 1e14);
        for _ in 0..200 {
            let mid = (lo + hi) / 2.0;
            if self.mono(mid) < mono {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        (lo + hi) / 2.0
    }
}

/// A small deterministic generator (xorshift64*), for the example-based tests.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Samples of `truth` as the agent writes them: every `period_ns` (± 0.1 ms), the raw reading an
/// integer, the bracket `[floor(m − u·w), ceil(m + (1 − u)·w)]` around the true monotonic time
/// `m`, of width `w` drawn from `widths` and position `u` uniform.
fn samples(
    truth: &Truth,
    span_ns: f64,
    period_ns: f64,
    widths: (f64, f64),
    rng: &mut Rng,
) -> Vec<ClockSample> {
    let mut out = Vec::new();
    let mut t = 0.0;
    while t <= span_ns {
        let jitter = if t == 0.0 {
            0.0
        } else {
            (rng.unit() - 0.5) * 2e5
        };
        let raw = (truth.raw0 + t + jitter).round();
        let m = truth.mono(raw);
        let w = widths.0 + (widths.1 - widths.0) * rng.unit();
        let u = rng.unit();
        out.push(ClockSample {
            monotonic_ns: (m - u * w).floor() as u64,
            monotonic_raw_ns: raw as u64,
            realtime_ns: 0,
            tsc: 0,
            monotonic_after_ns: (m + (1.0 - u) * w).ceil() as u64,
        });
        t += period_ns;
    }
    out
}

/// Checks the truth against the bound at `points` recorded times spread over the span and a
/// little beyond it; returns the largest error seen inside the span.
fn check_truth(c: &SlewCorrection, truth: &Truth, points: usize, rng: &mut Rng) -> f64 {
    let (first, last) = c.span_ns;
    let mut worst: f64 = 0.0;
    for k in 0..points {
        // A fifth of the points outside the span, up to 1 s away.
        let t = if k % 5 == 4 {
            if rng.unit() < 0.5 {
                first - rng.unit() * 1e9
            } else {
                last + rng.unit() * 1e9
            }
        } else {
            first + (last - first) * rng.unit()
        };
        let error = (c.to_raw.apply(t) - truth.raw(t)).abs();
        let bound = c.bound_at(t);
        assert!(
            error <= bound + 1e-3,
            "at {t}: error {error:.3} ns > bound {bound:.3} ns (span {first}..{last})"
        );
        if (first..=last).contains(&t) {
            assert!(bound <= c.bound_ns + 1e-9);
            worst = worst.max(error);
        }
    }
    // And at every sample, where the bracket holds the truth.
    worst
}

#[test]
fn a_linear_clock_gives_one_piece_and_a_bound_near_the_bracket() {
    let mut rng = Rng(7);
    let truth = Truth::linear(1.0 + 37e-6);
    let s = samples(&truth, 10e9, 20e6, (40.0, 60.0), &mut rng);
    let c = SlewCorrection::from_samples(&s, true).unwrap();
    assert_eq!(c.to_raw.pieces().len(), 1, "{:?}", c.to_raw.pieces());
    let worst = check_truth(&c, &truth, 2000, &mut rng);
    let summary = c.summary();
    assert_eq!(summary.pieces, 1);
    assert!((summary.rate_mean_ppm - 37.0).abs() < 0.01, "{summary:?}");
    assert!((summary.rate_min_ppm - 37.0).abs() < 0.01);
    assert!(summary.max_phase_ns < 60.0, "{summary:?}");
    // Brackets of 40–60 ns: the bound is a few bracket widths.
    assert!(c.bound_ns < 250.0, "bound {} ns", c.bound_ns);
    eprintln!(
        "linear, 10 s, brackets 40–60 ns: 1 piece, max error {worst:.1} ns, bound {:.1} ns",
        c.bound_ns
    );
}

/// A clock whose rate steps by ±500 ppm at `count` random instants at least `min_apart_ns` apart
/// (a slew starting and ending, a frequency step), over `span_ns`.
fn stepped(rng: &mut Rng, count: usize, span_ns: f64, min_apart_ns: f64) -> Truth {
    let mut truth = Truth::linear(1.0 - 12e-6);
    let mut at = truth.raw0;
    let mut rate_offset = 0.0;
    for _ in 0..count {
        at += min_apart_ns + rng.unit() * (span_ns / count as f64 - min_apart_ns);
        // Alternate up and down so the rate stays within ±500 ppm of the base.
        let change = if rate_offset == 0.0 {
            if rng.unit() < 0.5 { 500e-6 } else { -500e-6 }
        } else {
            -rate_offset
        };
        rate_offset += change;
        truth.steps.push((at, change));
    }
    truth
}

#[test]
fn rate_steps_of_500_ppm_between_samples_leave_no_chord_error() {
    let mut rng = Rng(11);
    let truth = stepped(&mut rng, 8, 10e9, 200e6);
    let s = samples(&truth, 10e9, 20e6, (40.0, 60.0), &mut rng);
    let c = SlewCorrection::from_samples(&s, true).unwrap();
    let worst = check_truth(&c, &truth, 5000, &mut rng);
    let pieces = c.to_raw.pieces().len();
    // One piece per rate, and a knot where each step happened (sometimes a short chord).
    assert!(pieces <= 2 * 8 + 1, "{pieces} pieces");
    assert!(c.bound_ns < 1000.0, "bound {} ns", c.bound_ns);
    // A chord across a step 20 ms wide would be off by up to 2.5 µs.
    assert!(worst < 300.0, "max error {worst} ns");
    let summary = c.summary();
    assert!(
        summary.rate_max_ppm > 480.0 && summary.rate_min_ppm < -480.0
            || summary.rate_max_ppm - summary.rate_min_ppm > 480.0,
        "{summary:?}"
    );
    eprintln!(
        "steps ±500 ppm (8 in 10 s), brackets 40–60 ns: {pieces} pieces, max error {worst:.1} ns, bound {:.1} ns",
        c.bound_ns
    );
}

#[test]
fn a_smooth_frequency_change_stays_inside_the_bound() {
    let mut rng = Rng(3);
    let mut truth = Truth::linear(1.0 + 5e-6);
    // 5 ppm amplitude over 4 s: the rate moves by up to 7.9 ppm/s (the assumption allows 10).
    truth.smooth = Some((5e-6, 4e9));
    let s = samples(&truth, 12e9, 20e6, (40.0, 60.0), &mut rng);
    let c = SlewCorrection::from_samples(&s, true).unwrap();
    let worst = check_truth(&c, &truth, 5000, &mut rng);
    assert!(c.bound_ns < 1000.0, "bound {} ns", c.bound_ns);
    let summary = c.summary();
    assert!(
        (summary.rate_max_ppm - 10.0).abs() < 2.0 && summary.rate_min_ppm.abs() < 2.0,
        "{summary:?}"
    );
    eprintln!(
        "smooth ±5 ppm over 4 s, brackets 40–60 ns: {} pieces, max error {worst:.1} ns, bound {:.1} ns, phase moved {:.0} ns",
        c.to_raw.pieces().len(),
        c.bound_ns,
        summary.max_phase_ns
    );
}

#[test]
fn wide_brackets_give_a_wider_bound_but_still_hold() {
    let mut rng = Rng(5);
    let truth = stepped(&mut rng, 4, 5e9, 200e6);
    let s = samples(&truth, 5e9, 20e6, (500.0, 5000.0), &mut rng);
    let c = SlewCorrection::from_samples(&s, true).unwrap();
    check_truth(&c, &truth, 3000, &mut rng);
    assert!(c.bound_ns > 500.0);
}

#[test]
fn an_hour_at_20_ms_with_occasional_changes_stays_a_few_pieces() {
    let mut rng = Rng(17);
    // chrony-like: a frequency step of up to ±1 ppm every minute, and two 500 ppm slews of
    // 3 s each.
    let mut truth = Truth::linear(1.0 + 3e-6);
    for minute in 1..60 {
        let at = truth.raw0 + minute as f64 * 60e9 + rng.unit() * 1e9;
        truth.steps.push((at, (rng.unit() - 0.5) * 2e-6));
    }
    for start in [600e9, 2400e9] {
        truth.steps.push((truth.raw0 + start + 7e6, 500e-6));
        truth.steps.push((truth.raw0 + start + 3e9 + 11e6, -500e-6));
    }
    truth.steps.sort_by(|a, b| a.0.total_cmp(&b.0));
    let s = samples(&truth, 3600e9, 20e6, (40.0, 60.0), &mut rng);
    assert!(s.len() > 179_000);
    let started = std::time::Instant::now();
    let c = SlewCorrection::from_samples(&s, true).unwrap();
    let took = started.elapsed();
    let pieces = c.to_raw.pieces().len();
    assert!(pieces < 400, "{pieces} pieces for 63 changes");
    let worst = check_truth(&c, &truth, 20_000, &mut rng);
    assert!(c.bound_ns < 1000.0, "bound {} ns", c.bound_ns);
    let summary = c.summary();
    assert_eq!(summary.history.step_s, 60.0);
    // 3600 s of RAW are a little more on the recorded clock (+3 ppm): 61 steps.
    assert!((60..=61).contains(&summary.history.ppm.len()));
    assert!(summary.rate_max_ppm > 490.0, "{summary:?}");
    // Each slew moved the phase by 1.5 ms.
    assert!(summary.max_phase_ns > 1e6, "{summary:?}");
    eprintln!(
        "1 h at 20 ms ({} samples), 63 rate changes: {pieces} pieces in {took:?}, max error {worst:.1} ns, bound {:.1} ns",
        s.len(),
        c.bound_ns
    );
}

#[test]
fn two_changes_one_interval_apart_are_seen_and_widen_the_bound() {
    // 500 ppm up at 1.010 s and back down at 1.050 s: the changes fall into intervals i − 1 and
    // i + 1 of interval i = [1.020, 1.040] s, which the assumption excludes. The rates over the
    // three intervals all differ: the bound there falls back to the worst case, and holds.
    let mut truth = Truth::linear(1.0);
    truth.steps = vec![
        (truth.raw0 + 1.010e9, 500e-6),
        (truth.raw0 + 1.050e9, -500e-6),
    ];
    let mut rng = Rng(13);
    let s = samples(&truth, 2e9, 20e6, (40.0, 60.0), &mut rng);
    let c = SlewCorrection::from_samples(&s, true).unwrap();
    check_truth(&c, &truth, 4000, &mut rng);
    let inside = c.bound_at(truth.mono(truth.raw0 + 1.030e9));
    assert!(inside > 1000.0, "{inside}");
    // Elsewhere the bound stays tight.
    assert!(c.bound_at(truth.mono(truth.raw0 + 1.5e9)) < 200.0);
}

#[test]
fn two_samples_are_enough_with_the_worst_case_rate() {
    let truth = Truth::linear(1.0);
    let s = samples(&truth, 20e6, 20e6, (50.0, 50.0), &mut Rng(1));
    assert_eq!(s.len(), 2);
    let c = SlewCorrection::from_samples(&s, true).unwrap();
    check_truth(&c, &truth, 200, &mut Rng(2));
    // 500 ppm over 20 ms could hide a few µs.
    assert!(
        c.bound_ns > 1000.0 && c.bound_ns < 10_000.0,
        "{}",
        c.bound_ns
    );
}

#[test]
fn the_bound_grows_outside_the_span_at_the_worst_case_rate() {
    let mut rng = Rng(9);
    let truth = Truth::linear(1.0 + 1e-6);
    let s = samples(&truth, 1e9, 20e6, (40.0, 60.0), &mut rng);
    let c = SlewCorrection::from_samples(&s, true).unwrap();
    let (first, last) = c.span_ns;
    let inside = c.bound_at(last);
    let after = c.bound_at(last + 1e9);
    // 500 ppm, plus the last interval's slope uncertainty (~5 ppm with 50 ns brackets).
    assert!((after - inside - 500e3).abs() < 10e3, "{inside} → {after}");
    assert!(c.bound_at(first - 1e8) > c.bound_at(first) + 49e3);
}

#[test]
fn what_cannot_be_undone_says_why() {
    let truth = Truth::linear(1.0);
    let s = samples(&truth, 1e9, 20e6, (50.0, 50.0), &mut Rng(4));
    let e = SlewCorrection::from_samples(&s, false).unwrap_err();
    assert_eq!(e, SlewUnavailable::Unbracketed);
    assert_eq!(
        e.to_string(),
        "format version 1 samples carry no bracket; the recorded timebase is used"
    );
    let e = SlewCorrection::from_samples(&s[..1], true).unwrap_err();
    assert!(e.to_string().contains("1 clock sample(s)"), "{e}");
    // A 0.32 s gap (a stalled sampler) after sample 9: undone, with the worst-case bound there
    // (a 500 ppm rate change could hide up to ~80 µs in 0.32 s) and the usual one elsewhere.
    let sparse: Vec<ClockSample> = s[..10].iter().chain(&s[25..]).copied().collect();
    let c = SlewCorrection::from_samples(&sparse, true).unwrap();
    let gap_mid = (sparse[9].monotonic_ns + sparse[10].monotonic_ns) as f64 / 2.0;
    assert!(c.bound_at(gap_mid) > 30e3, "{}", c.bound_at(gap_mid));
    assert!(c.bound_at(sparse[20].monotonic_ns as f64) < 1e3);
    for t in [gap_mid, sparse[9].monotonic_ns as f64 + 1e8] {
        let truth_raw = truth.raw(t);
        assert!((c.to_raw.apply(t) - truth_raw).abs() <= c.bound_at(t));
    }
    // A 20 s gap (an interrupted recording, or samples never dense): refused.
    let mut far = s[..10].to_vec();
    far.extend(s[10..].iter().map(|x| ClockSample {
        monotonic_ns: x.monotonic_ns + 20_000_000_000,
        monotonic_after_ns: x.monotonic_after_ns + 20_000_000_000,
        monotonic_raw_ns: x.monotonic_raw_ns + 20_000_000_000,
        ..*x
    }));
    let e = SlewCorrection::from_samples(&far, true).unwrap_err();
    assert!(
        matches!(e, SlewUnavailable::TooSparse { index: 9, gap_ns, .. } if gap_ns > 19_000_000_000),
        "{e:?}"
    );
    let text = e.to_string();
    assert!(
        text.contains("samples 9 and 10") && text.contains("ms apart") && text.contains("500 ms"),
        "{text}"
    );
    let mut backwards = s.clone();
    backwards.swap(4, 5);
    let e = SlewCorrection::from_samples(&backwards, true).unwrap_err();
    assert!(
        matches!(e, SlewUnavailable::NotIncreasing { index: 5, .. }),
        "{e:?}"
    );
    let mut inverted = s.clone();
    inverted[3].monotonic_after_ns = inverted[3].monotonic_ns - 1;
    let e = SlewCorrection::from_samples(&inverted, true).unwrap_err();
    assert!(
        e.to_string().starts_with("clock sample 3: its second"),
        "{e}"
    );
}

#[test]
fn the_maps_are_inverse_continuous_and_increasing() {
    let mut rng = Rng(21);
    let truth = stepped(&mut rng, 5, 4e9, 150e6);
    let s = samples(&truth, 4e9, 20e6, (40.0, 80.0), &mut rng);
    let c = SlewCorrection::from_samples(&s, true).unwrap();
    assert!(c.from_raw.is_continuous_and_increasing(1e-3));
    assert!(c.to_raw.is_continuous_and_increasing(1e-3));
    for s in &s {
        let mono = (s.monotonic_ns + s.monotonic_after_ns) as f64 / 2.0;
        let back = c.from_raw.apply(c.to_raw.apply(mono));
        assert!((back - mono).abs() < 1e-3);
        // The fitted map passes through every (widened) bracket.
        let at = c.from_raw.apply(s.monotonic_raw_ns as f64);
        assert!(
            at >= s.monotonic_ns as f64 - READING_SLACK_NS - 1e-3
                && at <= s.monotonic_after_ns as f64 + READING_SLACK_NS + 1e-3,
            "{at} outside {s:?}"
        );
    }
}

/// Parameters of a random clock: base rate (ppm), steps (fraction of the span, up or down),
/// smooth amplitude (ppm) and period (s), bracket widths (ns), seed.
type ClockParameters = (f64, Vec<(f64, bool)>, f64, f64, (f64, f64), u64);

fn clock() -> impl Strategy<Value = ClockParameters> {
    (
        -100.0f64..100.0,
        prop::collection::vec((0.0f64..1.0, any::<bool>()), 0..8),
        0.0f64..4.0,
        3.0f64..20.0,
        (10.0f64..300.0, 0.0f64..2000.0),
        any::<u64>(),
    )
        .prop_map(|(base, steps, amp, period, (w, extra), seed)| {
            (base, steps, amp, period, (w, w + extra), seed)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever the clock does within the assumption (rate steps of up to 500 ppm at least
    /// 80 ms apart, a smooth drift of under 10 ppm/s, any bracket widths), the truth is
    /// within the bound everywhere, inside the span and outside it.
    #[test]
    fn the_truth_is_always_within_the_bound(
        (base, steps, amp, period, widths, seed) in clock(),
    ) {
        let span = 6e9;
        let mut truth = Truth::linear(1.0 + base * 1e-6);
        let mut at: Vec<f64> = steps.iter().map(|s| truth.raw0 + s.0 * span).collect();
        at.sort_by(f64::total_cmp);
        at.dedup_by(|b, a| *b - *a < 80e6);
        let mut offset = 0.0;
        for (k, &instant) in at.iter().enumerate() {
            let change = if offset != 0.0 {
                -offset
            } else if steps[k].1 {
                500e-6
            } else {
                -500e-6
            };
            offset += change;
            truth.steps.push((instant, change));
        }
        // Under 10 ppm/s: 2π · amplitude / period.
        let amp = amp.min(9.0 * period / std::f64::consts::TAU);
        if amp > 0.0 {
            truth.smooth = Some((amp * 1e-6, period * 1e9));
        }
        let mut rng = Rng(seed | 1);
        let s = samples(&truth, span, 20e6, widths, &mut rng);
        let c = SlewCorrection::from_samples(&s, true).unwrap();
        prop_assert!(c.to_raw.is_continuous_and_increasing(1e-3));
        check_truth(&c, &truth, 400, &mut rng);
        if at.is_empty() && amp == 0.0 {
            prop_assert_eq!(c.to_raw.pieces().len(), 1);
        }
    }
}
