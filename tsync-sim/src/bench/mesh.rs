//! Network-wide estimation on synthetic meshes against the truth (`cargo xtask bench mesh`).
//!
//! [`Workload::benchmark`]: N traces with random clocks (±10 s, ±200 ppm), every pair linked,
//! 20 µs minimum one-way delay plus an exponential tail of mean 30 µs. For each seed, the same
//! messages are synchronized with `--reduction path` and `--reduction joint`, and each trace's
//! map is compared with the truth at the middle of the run and at 101 points across it; the
//! network-wide intervals are checked against the truth at the same points and compared in width
//! with the path composition's. Each seed runs twice: an even mesh, and an uneven one whose pairs
//! with the reference carry 20 times fewer messages than the others ([`uneven`]).

use tsync_analyze::ReductionChoice;

use crate::Workload;
use crate::check::workload::{measure, uneven};

/// Prints the table, a row per seed, shape and reduction.
pub fn run(traces: usize, messages: u64, seeds: &[u64]) {
    println!(
        "| seed | reduction | worst error at middle (µs) | mean error at middle (µs) | worst error over the run (µs) | mean interval width at middle: path → network (µs) | truth inside the network interval |\n|---|---|---:|---:|---:|---:|---|"
    );
    for &seed in seeds {
        for (shape, w) in [
            ("even", Workload::benchmark(traces, messages, seed)),
            ("uneven", uneven(traces, messages, seed)),
        ] {
            for reduction in [ReductionChoice::Path, ReductionChoice::Joint] {
                let e = measure(&w, reduction);
                println!(
                    "| {seed} {shape} | {} | {:.3} | {:.3} | {:.3} | {:.3} → {:.3} | {} of {} |",
                    reduction.as_str(),
                    e.worst_mid_ns / 1e3,
                    e.mean_mid_ns / 1e3,
                    e.worst_ns / 1e3,
                    e.mean_path_width_ns / 1e3,
                    e.mean_width_ns / 1e3,
                    e.with_interval - e.outside,
                    e.with_interval
                );
            }
        }
    }
}
