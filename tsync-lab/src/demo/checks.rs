//! What the analyzer recovered, against the truth the demo injected: per node, the offset and
//! drift to node 0, the error at the middle and whether the truth lies in the guaranteed
//! interval; over all, messages received before they were sent after correction. The table, the
//! summary and the verdict (`demo: N passed, M failed`).
use std::path::{Path, PathBuf};

use anyhow::bail;
use tsync_analyze::{
    Algorithm, InputSet, MatchOptions, MatchStats, MatchedMessage, MessageSink, SyncOptions,
    SyncResult,
};
use tsync_common::format::ClockSkew;

use super::DemoOptions;
use super::app_logs::AppLogs;

/// What the demo found for one node, against the truth.
pub struct NodeCheck {
    pub node: String,
    pub injected: ClockSkew,
    /// The node's clock minus node 0's at the middle of the pair's span: true and recovered (ns).
    /// (The offset at time 0 — boot — is less telling: it extrapolates the drift over the
    /// machine's whole uptime.)
    pub true_offset_mid_ns: f64,
    pub recovered_offset_mid_ns: f64,
    /// The node's drift relative to node 0, as recovered from its map onto node 0.
    pub recovered_ppm: f64,
    pub quality: String,
    /// Estimated minus true time on the node's clock at the middle of the pair's span (ns).
    pub mid_error_ns: f64,
    /// The guaranteed interval at that time, relative to the truth (ns): (lo − truth, hi − truth).
    pub interval: Option<(f64, f64)>,
}

impl NodeCheck {
    /// True when the truth lies inside the reported interval (1 ns of slack for the rounding of
    /// written timestamps to whole nanoseconds).
    pub fn truth_inside(&self) -> bool {
        self.interval
            .is_some_and(|(lo, hi)| lo <= 1.0 && hi >= -1.0)
    }
}

/// Counts matched messages received before they were sent once every trace is mapped onto its
/// reference.
struct InversionCounter<'a> {
    sync: &'a SyncResult,
    messages: u64,
    inversions: u64,
}

impl MessageSink for InversionCounter<'_> {
    fn message(&mut self, m: &MatchedMessage<'_>) {
        let msg = &m.message;
        let send = self.sync.to_reference(msg.send_trace, msg.send_ns);
        let recv = self.sync.to_reference(msg.recv_trace, msg.recv_ns);
        self.messages += 1;
        self.inversions += u64::from(recv < send);
    }

    fn wants_events(&self) -> bool {
        false
    }
}

/// Synchronizes the traces with node 0 as reference and checks every node against its skew.
pub fn analyze(
    files: &[PathBuf],
    skews: &[ClockSkew],
) -> anyhow::Result<(SyncResult, Vec<NodeCheck>, u64)> {
    let inputs = InputSet::open(files)?;
    let options = SyncOptions {
        algorithm: Algorithm::Chull,
        reference: Some("node-0".into()),
        matching: MatchOptions::default(),
        linreg_filter_z: None,
        ..Default::default()
    };
    let sync = tsync_analyze::sync(&inputs, &options, &mut |_| {})?;
    let mut checks = Vec::new();
    for (k, skew) in skews.iter().enumerate().skip(1) {
        checks.push(check_node(&sync, k, *skew)?);
    }
    let mut counter = InversionCounter {
        sync: &sync,
        messages: 0,
        inversions: 0,
    };
    inputs.for_each_message(&MatchOptions::default(), &mut counter, &mut |_| {})?;
    let inversions = counter.inversions;
    Ok((sync, checks, inversions))
}

/// Compares trace k's map onto node 0 with the truth `t_k = skew(t_0)`, at the middle of the
/// pair (node 0, node k)'s messages. The pair itself is estimated on the nodes' raw clocks, where
/// the agent's `--clock-skew` (applied to CLOCK_MONOTONIC, like NTP's slewing) does not exist;
/// the trace map goes from node k's recorded clock to node 0's, skew included.
fn check_node(sync: &SyncResult, k: usize, skew: ClockSkew) -> anyhow::Result<NodeCheck> {
    let pair = sync
        .pair(0, k as u32)
        .ok_or_else(|| anyhow::anyhow!("no pair between node-0 and node-{k}"))?;
    let trace = &sync.traces[k];
    let drift = trace.line.drift;
    let truth = |t0: f64| t0 + skew.offset_ns as f64 + t0 * skew.drift_ppm * 1e-6;
    let (true_offset_mid_ns, recovered_offset_mid_ns, interval) = match pair.span {
        Some((start, end)) => {
            // The pair's span is on node 0's estimation clock; back to its recorded clock.
            let mid = start as f64 + (end - start) as f64 / 2.0;
            let t0 = sync.timebases.of(0).map_or(mid, |c| c.from_raw.apply(mid));
            let tk = truth(t0).round();
            let back = sync.to_reference(k as u32, tk as i64);
            let interval = sync
                .interval(k as u32, tk as i64)
                .map(|(lo, hi)| (t0 - hi, t0 - lo));
            (tk - t0, tk - back, interval)
        }
        _ => (f64::NAN, f64::NAN, None),
    };
    Ok(NodeCheck {
        node: trace.name.clone(),
        injected: skew,
        true_offset_mid_ns,
        recovered_offset_mid_ns,
        recovered_ppm: (1.0 / drift - 1.0) * 1e6,
        quality: pair.quality.as_str().to_owned(),
        mid_error_ns: recovered_offset_mid_ns - true_offset_mid_ns,
        interval,
    })
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
