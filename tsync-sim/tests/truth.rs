//! The simulator against the analyzer: on every kind of clock, what `cargo xtask simulate
//! --check` measures stays within the goals (every pair `accurate`, the truth inside every
//! interval given, intervals nearly everywhere, the largest error within 2 µs).

use tsync_analyze::{Algorithm, InputSet, MatchOptions, SyncOptions};
use tsync_sim::{ClockKind, Format, SimConfig, check, simulate};

fn config(clock: ClockKind, duration: f64) -> SimConfig {
    SimConfig {
        clock,
        duration,
        ..SimConfig::default()
    }
}

#[test]
fn the_check_finds_the_truth_inside_the_interval_on_linear_clocks_whichever_the_reference() {
    let dir = tempfile::tempdir().unwrap();
    let truth = simulate(&config(ClockKind::Linear, 20.0), dir.path()).expect("simulated");
    let files: Vec<std::path::PathBuf> = truth.nodes.iter().map(|n| n.file.clone()).collect();
    let inputs = InputSet::open(&files).expect("readable");
    // Node 0 is every pair's a (the interval is inverted), node 3 every pair's b (used as is).
    for reference in ["sim-0", "sim-3"] {
        let options = SyncOptions {
            algorithm: Algorithm::Chull,
            reference: Some(reference.into()),
            matching: MatchOptions::default(),
            linreg_filter_z: None,
            ..Default::default()
        };
        let sync = tsync_analyze::sync(&inputs, &options, &mut |_| {}).expect("synchronized");
        for row in check::compare(&truth, &sync) {
            if row.node == reference {
                continue;
            }
            assert_eq!(row.quality.as_deref(), Some("accurate"), "{row:?}");
            // The pair's hulls start and end a little inside the node's first and last events.
            assert!(row.with_interval + 5 >= row.points, "{row:?}");
            assert_eq!(row.outside, 0, "{row:?}");
            // Direct pairs give ~70 µs; at the very ends of the trace, where one pair's hulls
            // have not started yet, the network bounds the trace through a detour of two pairs.
            assert!(
                row.max_error_ns < 5e3 && row.max_width_ns < 200e3,
                "{row:?}"
            );
        }
    }
}

/// The goals of real clocks, checked on shorter runs than the benchmarks' hour: every pair
/// `accurate`, the truth inside every interval given (at one point per 100 ms), intervals nearly
/// everywhere, and the largest error over the whole trace within 2 µs.
fn check_real_clocks(clock: ClockKind, format: Format, seconds: f64) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(clock, seconds);
    config.format = format;
    if clock == ClockKind::Curved {
        config.wander_ppm_per_hour = 4.0;
    }
    let truth = simulate(&config, dir.path()).expect("simulated");
    let input = if format == Format::Text {
        check::Input::Text
    } else {
        check::Input::Traces
    };
    let rows = check::measure(&truth, input, Algorithm::Chull).expect("synchronized");
    for row in rows.iter().skip(1) {
        assert_eq!(row.quality.as_deref(), Some("accurate"), "{row:?}");
        assert_eq!(row.outside, 0, "{row:?}");
        assert!(row.with_interval + 5 >= row.points, "{row:?}");
        assert!(row.max_error_ns <= 2e3, "{row:?}");
    }
}

#[test]
fn slewed_clocks_are_undone_from_the_samples() {
    check_real_clocks(ClockKind::Slewed, Format::Trace, 600.0);
}

#[test]
fn disciplined_wandering_clocks_keep_their_guarantees() {
    check_real_clocks(ClockKind::Disciplined, Format::Trace, 600.0);
}

#[test]
fn wandering_clocks_without_samples_are_synchronized_piecewise() {
    check_real_clocks(ClockKind::Curved, Format::Text, 1800.0);
}
