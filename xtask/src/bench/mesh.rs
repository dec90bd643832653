//! `cargo xtask bench mesh`: network-wide estimation on synthetic meshes, against the truth.
//!
//! `tsync-analyze`'s `synth` generator: N traces with random clocks (±10 s, ±200 ppm), every pair
//! linked, 20 µs minimum one-way delay plus an exponential tail of mean 30 µs. For each seed, the
//! same messages are synchronized with `--reduction path` and `--reduction joint`, and each trace's
//! map is compared with the generator's truth at the middle of the run and at 101 points across it;
//! the network-wide intervals are checked against the truth at the same points and compared in
//! width with the path composition's. Each seed runs twice: an even mesh, and an uneven one whose
//! pairs with the reference carry 20 times fewer messages than the others.

use anyhow::Result;
use tsync_analyze::synth::Workload;
use tsync_analyze::{Message, ReductionChoice, SyncOptions, SyncResult, sync_messages};

#[derive(clap::Args)]
pub struct Args {
    /// Traces in the mesh.
    #[arg(long, default_value_t = 16)]
    traces: usize,
    /// Messages per mesh.
    #[arg(long, default_value_t = 1_000_000)]
    messages: u64,
    /// Seeds, one mesh each.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3,4,5")]
    seeds: Vec<u64>,
}

/// One mesh, one reduction.
#[derive(Debug, Clone, Copy, Default)]
pub struct MeshError {
    /// Worst |map − truth| over the traces at the middle of the run (ns).
    pub worst_mid_ns: f64,
    /// Mean |map − truth| over the traces at the middle (ns).
    pub mean_mid_ns: f64,
    /// Worst |map − truth| over the traces and 101 points across the run (ns).
    pub worst_ns: f64,
    /// Checked points where the truth lies outside the trace's interval.
    pub outside: usize,
    /// Checked points with an interval.
    pub with_interval: usize,
    /// Mean network-wide interval width at the middle (ns).
    pub mean_width_ns: f64,
    /// Mean path-composed interval width at the middle (ns).
    pub mean_path_width_ns: f64,
}

impl Args {
    pub fn run(self) -> Result<()> {
        if cfg!(debug_assertions) {
            return super::rerun_in_release();
        }
        println!(
            "| seed | reduction | worst error at middle (µs) | mean error at middle (µs) | worst error over the run (µs) | mean interval width at middle: path → network (µs) | truth inside the network interval |\n|---|---|---:|---:|---:|---:|---|"
        );
        for &seed in &self.seeds {
            for (shape, w) in [
                (
                    "even",
                    Workload::benchmark(self.traces, self.messages, seed),
                ),
                ("uneven", uneven(self.traces, self.messages, seed)),
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
        Ok(())
    }
}

/// A mesh whose pairs with trace 0 (the reference) carry 20 times fewer messages than the others:
/// their own intervals are wide, and the network's detours are what bounds those traces.
pub fn uneven(traces: usize, messages: u64, seed: u64) -> Workload {
    let mut w = Workload::benchmark(traces, messages, seed);
    let others: Vec<(u32, u32)> = w.links.iter().copied().filter(|l| l.0 != 0).collect();
    for _ in 0..19 {
        w.links.extend_from_slice(&others);
    }
    w
}

/// Synchronizes the workload's messages with `reduction` (trace 0 the reference) and compares.
pub fn measure(w: &Workload, reduction: ReductionChoice) -> MeshError {
    let mut messages: Vec<Message> = Vec::with_capacity(w.messages as usize);
    w.generate(|m, _| messages.push(m));
    let names: Vec<String> = (0..w.clocks.len()).map(|i| i.to_string()).collect();
    let options = SyncOptions {
        reduction,
        ..Default::default()
    };
    let sync = sync_messages(&names, messages, &options, Some(0));
    compare(w, &sync)
}

/// Each trace's map and interval against the truth (trace 0's clock is the reference).
pub fn compare(w: &Workload, sync: &SyncResult) -> MeshError {
    let (start, end) = (
        w.start_ns + 1e9,
        w.start_ns + w.interval_ns * w.messages as f64 - 1e9,
    );
    let mid = (start + end) / 2.0;
    let reference = &w.clocks[0];
    let mut e = MeshError::default();
    let mut widths = 0.0;
    for (k, clock) in w.clocks.iter().enumerate().skip(1) {
        let at = |t: f64| {
            let local = clock.local(t);
            let truth = reference.local(t) as f64;
            (
                sync.to_reference(k as u32, local) - truth,
                sync.interval(k as u32, local),
                truth,
            )
        };
        let (mid_err, mid_interval, _) = at(mid);
        e.worst_mid_ns = e.worst_mid_ns.max(mid_err.abs());
        e.mean_mid_ns += mid_err.abs() / (w.clocks.len() - 1) as f64;
        if let Some((lo, hi)) = mid_interval {
            widths += (hi - lo) / (w.clocks.len() - 1) as f64;
        }
        if let Some((lo, hi)) = sync.path_interval(k as u32, clock.local(mid)) {
            e.mean_path_width_ns += (hi - lo) / (w.clocks.len() - 1) as f64;
        }
        for i in 0..=100 {
            let (err, interval, truth) = at(start + (end - start) * i as f64 / 100.0);
            e.worst_ns = e.worst_ns.max(err.abs());
            if let Some((lo, hi)) = interval {
                e.with_interval += 1;
                if truth < lo - 1.0 || truth > hi + 1.0 {
                    e.outside += 1;
                }
            }
        }
    }
    e.mean_width_ns = widths;
    e
}
