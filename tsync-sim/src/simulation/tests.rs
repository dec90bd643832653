//! The simulator's own guarantees: clocks strictly increasing and exactly invertible, slewing on
//! CLOCK_MONOTONIC only, samples that bracket the truth, files that depend on the seed alone,
//! and `--clock linear` files unchanged by the kernel models.

use std::path::Path;

use rand::SeedableRng;
use tsync_common::format::{ClockSample, KernelClock, TraceReader};

use super::{Format, SimConfig, draw_clock, simulate};
use crate::Truth;
use crate::agent::{SAMPLE_INTERVAL_NS, SAMPLES_PER_FLUSH, Sampler};
use crate::clock::{BOOT_NS, ClockKind, ClockModel, Crystal, adjtimex_freq_tick};

const KINDS: [ClockKind; 4] = [
    ClockKind::Linear,
    ClockKind::Slewed,
    ClockKind::Curved,
    ClockKind::Disciplined,
];

fn config(clock: ClockKind, duration: f64) -> SimConfig {
    SimConfig {
        clock,
        duration,
        ..SimConfig::default()
    }
}

/// A scratch directory, removed when dropped.
fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("tsync-sim-test-{name}-"))
        .tempdir()
        .expect("temporary directory")
}

/// Every node's clocks for an hour of `kind`.
fn hour_of_clocks(kind: ClockKind) -> Vec<ClockModel> {
    let config = config(kind, 3600.0);
    let mut rng = rand::rngs::StdRng::seed_from_u64(config.seed);
    (0..config.nodes)
        .map(|k| draw_clock(&config, k, 3601e9, &mut rng).expect("valid config"))
        .collect()
}

/// True times to probe: a grid over the hour, and around every slew's start, where MONO bends.
fn probes(clock: &ClockModel) -> Vec<f64> {
    let mut ts: Vec<f64> = (0..=36_000).map(|i| i as f64 * 0.1e9 + 0.37).collect();
    for s in &clock.slews {
        for d in [-1e3, -1.0, 0.0, 1.0, 1e3] {
            ts.push(s.start_ns + d);
        }
    }
    ts.sort_by(f64::total_cmp);
    ts
}

#[test]
fn every_model_is_strictly_increasing_and_invertible_to_well_under_a_nanosecond() {
    for kind in KINDS {
        for (k, clock) in hour_of_clocks(kind).iter().enumerate() {
            assert_eq!(clock.slews.is_empty(), !kind.slewed(), "{kind:?} node {k}");
            let ts = probes(clock);
            let mut previous = (f64::NEG_INFINITY, f64::NEG_INFINITY);
            for &t in &ts {
                let (raw, mono) = (clock.raw(t), clock.mono(t));
                // Probes 1 ns apart must still advance (MONO by at least 1 − 10⁻³ ns).
                assert!(
                    raw > previous.0 && mono > previous.1,
                    "{kind:?} node {k} not increasing at {t}"
                );
                previous = (raw, mono);
                let back = clock.true_time(mono);
                assert!(
                    (back - t).abs() < 0.01,
                    "{kind:?} node {k}: true_time(mono({t})) = {back}"
                );
                assert!((clock.raw_of_mono(mono) - raw).abs() < 0.01);
                assert!((clock.raw.true_time(raw) - t).abs() < 0.01);
            }
        }
    }
}

#[test]
fn slewing_moves_monotonic_only_and_raw_keeps_following_the_crystal() {
    for kind in [ClockKind::Slewed, ClockKind::Disciplined] {
        for (k, clock) in hour_of_clocks(kind).iter().enumerate() {
            let mut big_slews = 0;
            for (i, s) in clock.slews.iter().enumerate() {
                let end = clock.slews.get(i + 1).map_or(3600e9, |n| n.start_ns);
                if end - s.start_ns < 1e6 {
                    continue;
                }
                let (t1, t2) = (s.start_ns + 1e3, end - 1e3);
                let (raw1, raw2) = (clock.raw(t1), clock.raw(t2));
                // MONO runs at exactly 1 + ppm against RAW while the slew is in force…
                let mono_vs_raw = (clock.mono(t2) - clock.mono(t1)) / (raw2 - raw1) - 1.0;
                assert!(
                    (mono_vs_raw * 1e6 - s.ppm).abs() < 1e-3,
                    "{kind:?} node {k} slew {i}: {} ppm, not {}",
                    mono_vs_raw * 1e6,
                    s.ppm
                );
                // …while RAW against true time is the crystal's frequency, whatever the slew
                // (its wander moves by well under 0.01 ppm over one slew).
                let raw_ppm = ((raw2 - raw1) / (t2 - t1) - 1.0) * 1e6;
                let crystal_ppm = clock.raw.ppm(0.5 * (t1 + t2));
                assert!(
                    (raw_ppm - crystal_ppm).abs() < 0.01,
                    "{raw_ppm} vs {crystal_ppm}"
                );
                if let Crystal::Linear(linear) = clock.raw {
                    assert!((raw_ppm - linear.drift_ppm).abs() < 1e-3);
                }
                let (freq, tick) = adjtimex_freq_tick(s.ppm);
                assert!(
                    (freq as f64 / 65536.0 + (tick - 10_000) as f64 * 100.0 - s.ppm).abs() < 1e-9
                );
                big_slews += usize::from((s.ppm - s.freq_ppm).abs() > 100.0);
            }
            assert!(
                big_slews > 0,
                "{kind:?} node {k}: no phase slew over 100 ppm"
            );
        }
    }
}

#[test]
fn samples_bracket_the_true_monotonic_clock_at_the_raw_read() {
    for kind in KINDS {
        for (k, clock) in hour_of_clocks(kind).iter().enumerate() {
            let rng = rand::rngs::StdRng::seed_from_u64(k as u64);
            let mut sampler = Sampler::new(clock, kind.slewed(), rng);
            let mut previous: Option<ClockSample> = None;
            let mut states = 0;
            for n in 0..20_000u64 {
                let t = sampler.next_true_ns();
                let reading = sampler.take(clock);
                let s = reading.sample;
                let mono = clock.mono(t) + BOOT_NS;
                assert!(
                    s.monotonic_ns as f64 <= mono && mono <= s.monotonic_after_ns as f64,
                    "{kind:?} node {k} sample {n}: {s:?} does not hold {mono}"
                );
                assert!((20..=81).contains(&s.bracket_ns()), "{s:?}");
                assert_eq!(s.monotonic_raw_ns, (clock.raw(t) + BOOT_NS).floor() as u64);
                let realtime_as_mono = s.realtime_ns - clock.realtime_minus_monotonic_ns;
                assert!(
                    (s.monotonic_after_ns as i64..s.monotonic_after_ns as i64 + 20)
                        .contains(&realtime_as_mono)
                );
                if let Some(p) = previous {
                    // Every 20 ms of the node's CLOCK_MONOTONIC, give or take the wake-up.
                    let gap = s.monotonic_ns as f64 - p.monotonic_ns as f64;
                    assert!((gap - SAMPLE_INTERVAL_NS).abs() < 60e3, "gap {gap}");
                }
                assert_eq!(
                    reading.flush,
                    n % SAMPLES_PER_FLUSH == SAMPLES_PER_FLUSH - 1
                );
                if let Some(state) = reading.kernel {
                    states += 1;
                    let ppm = clock.slew_at(t).map_or(0.0, |s| s.ppm);
                    assert_eq!((state.freq, state.tick), adjtimex_freq_tick(ppm));
                    assert_eq!(state.monotonic_ns, s.monotonic_ns);
                }
                previous = Some(s);
            }
            let end = sampler.next_true_ns();
            let changes = clock
                .slews
                .windows(2)
                .filter(|w| w[1].start_ns < end)
                .filter(|w| adjtimex_freq_tick(w[0].ppm) != adjtimex_freq_tick(w[1].ppm))
                .count();
            assert_eq!(states, 1 + changes, "{kind:?} node {k}: a state per change");
        }
    }
}

/// FNV-1a over the events of every node's file, in order.
fn events_digest(truth: &Truth) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for node in &truth.nodes {
        let mut reader = TraceReader::open(&node.file).expect("readable");
        while let Some(events) = reader.next_events().expect("intact") {
            for byte in bytemuck::cast_slice::<_, u8>(events) {
                h = (h ^ u64::from(*byte)).wrapping_mul(0x100_0000_01b3);
            }
        }
    }
    h
}

#[test]
fn linear_clocks_give_the_events_they_gave_before_the_kernel_models() {
    // The digest of `cargo xtask simulate --duration 20` before clock samples were simulated,
    // since with the TTL (64) in every event (format version 5; before, 0xa42d_fa14_6992_d4a7,
    // which a TTL of 0 still gives). If a change to the traffic or the file format is intended,
    // update it.
    let dir = scratch("linear");
    let truth = simulate(&config(ClockKind::Linear, 20.0), dir.path()).expect("simulated");
    assert_eq!(events_digest(&truth), 0x9714_46f8_9d74_a727);
}

fn read_back(path: &Path) -> (Vec<ClockSample>, Vec<KernelClock>, u64) {
    let mut reader = TraceReader::open(path).expect("readable");
    let mut last_ts = 0;
    while let Some(events) = reader.next_events().expect("intact") {
        for e in events {
            assert!(e.ts_ns >= last_ts, "events in time order");
            last_ts = e.ts_ns;
        }
    }
    assert!(reader.footer().is_some() && reader.damage().is_none());
    assert!(reader.samples_bracketed());
    (
        reader.clock_samples().to_vec(),
        reader.kernel_clock().to_vec(),
        last_ts,
    )
}

#[test]
fn files_hold_samples_and_kernel_states_and_the_truth_orders_every_message() {
    for kind in KINDS {
        let dir = scratch(&format!("{kind:?}"));
        let mut config = config(kind, 30.0);
        config.format = Format::Both;
        let truth = simulate(&config, dir.path()).expect("simulated");
        for node in &truth.nodes {
            let (samples, states, last_event) = read_back(&node.file);
            assert_eq!(samples.len() as u64, node.samples);
            assert_eq!(states.len() as u64, node.kernel_states);
            // 50 a second from the start to half a second after the traffic, and a last one.
            assert!((1525..=1527).contains(&samples.len()), "{}", samples.len());
            assert!(
                samples
                    .windows(2)
                    .all(|w| w[0].monotonic_ns < w[1].monotonic_ns)
            );
            assert!(samples.last().expect("samples").monotonic_ns > last_event);
            assert_eq!(states.len() > 1, kind.slewed(), "{kind:?}");
        }
        // Every message of the text file, mapped onto its receiver's clock by the truth, arrives
        // at least the minimum delay (30 µs, at most 5 µs more one way) after it was sent.
        let text = std::fs::read_to_string(truth.text.as_ref().expect("written")).expect("read");
        let mut least = vec![f64::INFINITY; config.nodes * config.nodes];
        let mut lines = 0;
        for line in text.lines().filter(|l| !l.starts_with('#')).skip(1) {
            let f: Vec<&str> = line.split(' ').collect();
            let (s, r): (usize, usize) = (f[0].parse().expect("s"), f[1].parse().expect("r"));
            let ns = |x: &str| (x.parse::<f64>().expect("time") * 1e9).round();
            let delay = ns(f[3]) - truth.map(s, r, ns(f[2]));
            least[s * config.nodes + r] = least[s * config.nodes + r].min(delay);
            lines += 1;
        }
        assert_eq!(lines, truth.messages);
        for (i, &d) in least.iter().enumerate() {
            if i / config.nodes != i % config.nodes {
                assert!(
                    (29.97e3..35.1e3).contains(&d),
                    "{kind:?} pair {i}: least delay {d} ns"
                );
            }
        }
    }
}

#[test]
fn the_same_seed_gives_the_same_files() {
    let (a, b) = (scratch("seed-a"), scratch("seed-b"));
    let mut config = config(ClockKind::Disciplined, 3.0);
    config.format = Format::Both;
    simulate(&config, a.path()).expect("simulated");
    simulate(&config, b.path()).expect("simulated");
    for name in ["node-0.tsync", "node-3.tsync", "messages.txt", "truth.json"] {
        // truth.json names the files, in their own directory.
        let read = |dir: &Path| {
            let bytes = std::fs::read(dir.join(name)).expect("written");
            match String::from_utf8(bytes) {
                Ok(text) => text.replace(&*dir.to_string_lossy(), "DIR").into_bytes(),
                Err(binary) => binary.into_bytes(),
            }
        };
        assert!(read(a.path()) == read(b.path()), "{name} differs");
    }
    config.seed += 1;
    let c = scratch("seed-c");
    simulate(&config, c.path()).expect("simulated");
    assert!(
        std::fs::read(a.path().join("node-1.tsync")).ok()
            != std::fs::read(c.path().join("node-1.tsync")).ok()
    );
}
