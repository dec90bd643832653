//! What the analyzer recovered, against the truth the demo injected: per node, the offset and
//! drift to node 0, the error at the middle and whether the truth lies in the guaranteed
//! interval; over all, messages received before they were sent after correction. The table, the
//! summary and the verdict (`demo: N passed, M failed`).
use std::path::{Path, PathBuf};

use anyhow::bail;
use tsync_analyze::{InputSet, MatchOptions, MatchStats, SyncResult};
use tsync_common::format::ClockSkew;

use super::DemoOptions;
use super::app_logs::AppLogs;
pub use crate::known_skew::NodeCheck;
use crate::known_skew::{InversionCounter, check_node, synchronize};

/// Synchronizes the traces with node 0 as reference and checks every node against its skew.
pub fn analyze(
    files: &[PathBuf],
    skews: &[ClockSkew],
) -> anyhow::Result<(SyncResult, Vec<NodeCheck>, u64)> {
    let inputs = InputSet::open(files)?;
    let sync = synchronize(&inputs)?;
    let mut checks = Vec::new();
    for (k, skew) in skews.iter().enumerate().skip(1) {
        checks.push(check_node(&sync, k, *skew)?);
    }
    let mut counter = InversionCounter::new(&sync);
    inputs.for_each_message(&MatchOptions::default(), &mut counter, &mut |_| {})?;
    let inversions = counter.inversions;
    Ok((sync, checks, inversions))
}

/// The per-node table the demo prints.
pub fn table(checks: &[NodeCheck]) -> String {
    let mut out = String::from(
        "| node | --clock-skew | true offset at middle (µs) | recovered offset at middle (µs) | \
         true drift (ppm) | recovered drift (ppm) | quality | error at middle (µs) | \
         guaranteed interval around truth (µs) | truth inside |\n\
         |---|---|---:|---:|---:|---:|---|---:|---|---|\n",
    );
    for c in checks {
        let interval = c.interval.map_or("none".to_owned(), |(lo, hi)| {
            format!("[{:+.3}, {:+.3}]", lo * 1e-3, hi * 1e-3)
        });
        out.push_str(&format!(
            "| {} | {},{} | {:.3} | {:.3} | {:.3} | {:.4} | {} | {:+.3} | {} | {} |\n",
            c.node,
            c.injected.offset_ns,
            c.injected.drift_ppm,
            c.true_offset_mid_ns * 1e-3,
            c.recovered_offset_mid_ns * 1e-3,
            c.injected.drift_ppm,
            c.recovered_ppm,
            c.quality,
            c.mid_error_ns * 1e-3,
            interval,
            if c.truth_inside() { "yes" } else { "NO" }
        ));
    }
    out
}

/// The demo's report: setup, the per-node table, and the global checks.
pub fn summary(
    args: &DemoOptions,
    seed: u64,
    out: &Path,
    sync: &SyncResult,
    checks: &[NodeCheck],
    inversions: u64,
    by_digest: &MatchStats,
) -> String {
    let pairs: Vec<String> = sync
        .pairs
        .iter()
        .map(|p| {
            format!(
                "{}–{} {} ({} + {} messages)",
                sync.traces[p.a as usize].name,
                sync.traces[p.b as usize].name,
                p.quality.as_str(),
                p.messages_ab,
                p.messages_ba
            )
        })
        .collect();
    format!(
        "tsync demo: {} nodes, {} s of TCP traffic, seed {seed}\n\n{}\npairs: {}\n\
         matched messages: {} ({} by sequence range); events left unmatched: {} of {} \
         ({:.2} %); by digest alone: {} matched, {} left unmatched; offloads: {:?}; \
         inversions after correction: {inversions}\n\
         output: {} (traces, sync.json, plots/, timeline.pcapng, app-*.jsonl, report.md)\n",
        args.nodes,
        args.duration,
        table(checks),
        pairs.join("; "),
        sync.matching.matched,
        sync.matching.range_matched,
        sync.matching.unmatched,
        sync.matching.events,
        100.0 * sync.matching.unmatched as f64 / sync.matching.events.max(1) as f64,
        by_digest.matched,
        by_digest.unmatched,
        args.offloads,
        out.display()
    )
}

/// Fails unless the truth lies inside every interval, every pair is accurate, the error is
/// within bounds and nothing is inverted; prints `demo: N passed, M failed`.
pub fn verdict(
    args: &DemoOptions,
    sync: &SyncResult,
    checks: &[NodeCheck],
    inversions: u64,
    logs: &AppLogs,
) -> anyhow::Result<()> {
    let pairs: Vec<PairQuality> = sync
        .pairs
        .iter()
        .map(|p| (p.a, p.b, p.quality.as_str().to_owned()))
        .collect();
    let (checked, failures) = failures(args.max_error_us, checks, &pairs, inversions, logs);
    println!(
        "demo: {} passed, {} failed",
        checked - failures.len(),
        failures.len()
    );
    if failures.is_empty() {
        Ok(())
    } else {
        bail!("the demo's checks failed:\n  {}", failures.join("\n  "))
    }
}

/// A pair of traces and its quality (`accurate`, ...).
pub type PairQuality = (u32, u32, String);

/// The demo's checks: how many there are, and the failed ones, each a line. Two per node (truth
/// inside, error within `max_error_us`), one per pair (accurate), one for inversions and four
/// for the application logs.
pub fn failures(
    max_error_us: f64,
    checks: &[NodeCheck],
    pairs: &[PairQuality],
    inversions: u64,
    logs: &AppLogs,
) -> (usize, Vec<String>) {
    let mut failures = Vec::new();
    for c in checks {
        if !c.truth_inside() {
            failures.push(format!("{}: truth outside the reported interval", c.node));
        }
        if c.mid_error_ns.is_nan() || c.mid_error_ns.abs() > max_error_us * 1e3 {
            failures.push(format!(
                "{}: error {:.3} µs exceeds {} µs",
                c.node,
                c.mid_error_ns * 1e-3,
                max_error_us
            ));
        }
    }
    for (a, b, quality) in pairs {
        if quality != "accurate" {
            failures.push(format!("pair {a}–{b} is {quality}"));
        }
    }
    if inversions > 0 {
        failures.push(format!("{inversions} messages inverted after correction"));
    }
    if logs.exchanges == 0 {
        failures.push("no application-log exchange was logged on both sides".into());
    }
    if logs.out_of_order_after > 0 {
        failures.push(format!(
            "{} of {} logged exchanges out of causal order after apply",
            logs.out_of_order_after, logs.exchanges
        ));
    }
    if logs.wall_missed > 0 || logs.wall_bounded == 0 {
        failures.push(format!(
            "{} of {} applied wall_ns intervals miss the shared realtime clock",
            logs.wall_missed, logs.wall_bounded
        ));
    }
    if logs.wall_error_ns as f64 > max_error_us * 1e3 {
        failures.push(format!(
            "applied wall_ns off the realtime clock by {:.3} µs (more than {} µs)",
            logs.wall_error_ns as f64 * 1e-3,
            max_error_us
        ));
    }
    (checks.len() * 2 + pairs.len() + 1 + 4, failures)
}
