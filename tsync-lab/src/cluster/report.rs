//! The cluster lab's report — one markdown table row per topology run, the details below it, the
//! expectations — and its verdict: every figure against [`super::expectations`], plus what must
//! hold whatever the analyzer does (no event lost, the analyzer's binary agreeing with its
//! library).
use super::checks::{COLUMNS, Figures};
use super::expectations::{self, Expectation};
use super::record::AgentMode;
use super::topology::Topology;

/// One topology's run: its figures, or why it could not be measured.
pub struct Run {
    pub topology: Topology,
    pub agents: AgentMode,
    pub outcome: Result<Figures, String>,
}

fn pct(share: &super::checks::Share) -> String {
    match share.percent() {
        // Two decimals: 8 of 8567 packets missed must not read as 100.0 %.
        Some(p) => format!("{p:.2} % of {}", share.packets),
        None => "no packets".into(),
    }
}

fn us(ns: Option<f64>, digits: usize) -> String {
    ns.map_or("—".into(), |ns| format!("{:.digits$}", ns * 1e-3))
}

/// The widest interval the messages give in the flat network's run with the same agents, if it
/// ran.
fn flat_width(runs: &[Run], agents: AgentMode) -> Option<f64> {
    runs.iter()
        .filter(|r| r.topology == Topology::Flat && r.agents == agents)
        .find_map(|r| r.outcome.as_ref().ok()?.widest_message_width_ns())
}

/// The widest interval the messages give in `run`, relative to the flat network's.
fn width_vs_flat(runs: &[Run], run: &Run, figures: &Figures) -> Option<f64> {
    Some(figures.widest_message_width_ns()? / flat_width(runs, run.agents)?)
}

/// The widest interval at the middle, µs; with what the messages give where the raw-clock
/// conversions (a stalled clock sampler) make it a tenth wider or more.
fn width_cell(f: &Figures) -> String {
    match (f.widest_interval_ns(), f.widest_message_width_ns()) {
        (Some(w), Some(m)) if w > 1.1 * m => {
            format!("{:.2} ({:.2} from messages)", w * 1e-3, m * 1e-3)
        }
        (w, _) => us(w, 2),
    }
}

/// The table: one row per run.
pub fn table(runs: &[Run]) -> String {
    let mut out = format!(
        "| topology | agents | events (lost) | {} | accurate pairs | truth inside (times) | \
         max error at mid (µs) | widest interval at mid (µs) | vs flat (messages) | non-causal \
         (true time) | `sync` exit |\n\
         |---|---|---:|{}---:|---|---:|---:|---:|---:|---:|\n",
        COLUMNS.join(" | "),
        "---:|".repeat(COLUMNS.len())
    );
    for run in runs {
        let name = (run.topology.name(), run.agents.name());
        let f = match &run.outcome {
            Ok(f) => f,
            Err(e) => {
                let first = e.lines().next().unwrap_or_default();
                out.push_str(&format!(
                    "| {} | {} | not measured: {first} |\n",
                    name.0, name.1
                ));
                continue;
            }
        };
        let events: u64 = f.written.iter().map(|w| w.events).sum();
        let lost: u64 = f.written.iter().map(|w| w.lost).sum();
        let shares: Vec<String> = f.shares.iter().map(pct).collect();
        let (points, inside) = f.truth_points();
        let truth = if f.truth_inside() { "yes" } else { "NO" };
        out.push_str(&format!(
            "| {} | {} | {events} ({lost}) | {} | {}/{} | {truth} ({inside}/{points}) | {} | {} | \
             {} | {} | {} |\n",
            name.0,
            name.1,
            shares.join(" | "),
            f.accurate_pairs(),
            f.pairs.len().max(pairs_expected(f)),
            us(f.max_mid_error_ns(), 3),
            width_cell(f),
            width_vs_flat(runs, run, f).map_or("—".into(), |r| format!("{r:.2}×")),
            f.non_causal,
            f.analyzer_status,
        ));
    }
    out
}

/// Pairs among the nodes: every one should be estimated.
fn pairs_expected(f: &Figures) -> usize {
    let n = f.nodes.len() + 1;
    n * (n - 1) / 2
}

/// What the analyzer said about each run: its matching counts and warnings (from `sync.json`).
pub fn details(runs: &[Run]) -> String {
    let mut out = String::new();
    for run in runs {
        let Ok(f) = &run.outcome else { continue };
        let m = &f.matching;
        let count = |key: &str| m[key].as_u64().unwrap_or(0);
        out.push_str(&format!(
            "- {} ({} agents): {} events, {} messages matched ({} by sequence range), {} \
             ambiguous, {} left unmatched, {} stacked copies; tunnel packets matched by their \
             outer digest: {}; inversions after correction: {}; messages within one node: {}; \
             non-causal in true time: {}; clock samples at most {:.1} ms apart",
            run.topology.name(),
            run.agents.name(),
            count("events"),
            count("matched"),
            count("range_matched"),
            count("ambiguous"),
            count("unmatched"),
            count("stacked_copies"),
            f.outer_matched,
            f.inversions,
            f.within_node,
            f.non_causal,
            f.sample_gap_ns as f64 * 1e-6
        ));
        for w in &f.warnings {
            out.push_str(&format!("\n  - warning: {}", shorten(w, 300)));
        }
        out.push('\n');
    }
    out
}

fn shorten(s: &str, most: usize) -> String {
    match s.char_indices().nth(most) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

/// The expectations of the runs' topologies, as a table.
pub fn expectations_table(runs: &[Run]) -> String {
    let mut out = format!(
        "| topology | agents | least matched: {} (%) | truth inside | max error at mid (µs) | \
         pairs accurate | widest interval vs flat | inversions | non-causal (true time) \
         |\n|---|---|---|---|---:|---|---:|---:|---:|\n",
        COLUMNS.join(" / ")
    );
    for run in runs {
        let e = expectations::of(run.topology, run.agents);
        let mins: Vec<String> = e
            .min_matched_pct
            .iter()
            .map(|m| m.map_or("—".into(), |m| format!("{m}")))
            .collect();
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            run.topology.name(),
            run.agents.name(),
            mins.join(" / "),
            if e.truth_inside { "yes" } else { "—" },
            e.max_mid_error_us,
            if e.pairs_accurate { "yes" } else { "—" },
            e.max_width_vs_flat
                .map_or("—".into(), |r| format!("≤ {r}×")),
            e.max_inversions.map_or("—".into(), |n| n.to_string()),
            e.max_non_causal
        ));
    }
    out
}

/// Every failed check, one line each naming the topology and the figure.
pub fn failures(runs: &[Run]) -> Vec<String> {
    let mut failed = Vec::new();
    for run in runs {
        let name = format!("{} ({} agents)", run.topology.name(), run.agents.name());
        match &run.outcome {
            Err(e) => failed.push(format!("{name}: not measured: {e}")),
            Ok(f) => {
                let e = expectations::of(run.topology, run.agents);
                let mut fail = |what: String| failed.push(format!("{name}: {what}"));
                invariants(f, &mut fail);
                against(e, f, width_vs_flat(runs, run, f), &mut fail);
            }
        }
    }
    failed
}

/// What must hold whatever the analyzer achieves.
fn invariants(f: &Figures, fail: &mut impl FnMut(String)) {
    for (k, w) in f.written.iter().enumerate() {
        if w.lost > 0 {
            fail(format!("the agent of node-{k} lost {} events", w.lost));
        }
    }
    let binary = f.matching["matched"].as_u64();
    if binary != Some(f.library_matched) {
        fail(format!(
            "`tsync-analyze sync` matched {binary:?} messages, its library {}: is the binary \
             stale?",
            f.library_matched
        ));
    }
}

/// `f` against the expectation `e`.
fn against(
    e: &Expectation,
    f: &Figures,
    width_vs_flat: Option<f64>,
    fail: &mut impl FnMut(String),
) {
    for ((column, share), min) in COLUMNS.iter().zip(&f.shares).zip(e.min_matched_pct) {
        let Some(min) = min else { continue };
        match share.percent() {
            None => fail(format!(
                "{column}: no packet between nodes recorded on the egress device (expected ≥ {min} % \
                 of them matched)"
            )),
            Some(p) if p < min => fail(format!(
                "{column}: {p:.2} % of {} packets between nodes matched, expected ≥ {min} %",
                share.packets
            )),
            Some(_) => {}
        }
    }
    if e.truth_inside && !f.truth_inside() {
        let (points, inside) = f.truth_points();
        let missing: Vec<String> = f
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.check.is_none())
            .map(|(i, _)| format!("node-{}", i + 1))
            .collect();
        fail(format!(
            "truth not inside every interval: {inside} of {points} times inside{}",
            if missing.is_empty() {
                String::new()
            } else {
                format!("; no pair with node-0: {}", missing.join(", "))
            }
        ));
    }
    match f.max_mid_error_ns() {
        None => fail("no error at the middle: a node is not synchronized with node-0".into()),
        Some(err) if err > e.max_mid_error_us * 1e3 => fail(format!(
            "error at the middle {:.3} µs, expected ≤ {} µs",
            err * 1e-3,
            e.max_mid_error_us
        )),
        Some(_) => {}
    }
    if e.pairs_accurate {
        let bad: Vec<String> = f
            .pairs
            .iter()
            .filter(|p| p.2 != "accurate")
            .map(|p| format!("{}–{} {}", p.0, p.1, p.2))
            .collect();
        let missing = pairs_expected(f).saturating_sub(f.pairs.len());
        if !bad.is_empty() || missing > 0 {
            fail(format!(
                "pairs not accurate: {}{}",
                bad.join(", "),
                if missing > 0 {
                    format!(" ({missing} pair(s) without any message)")
                } else {
                    String::new()
                }
            ));
        }
    }
    if let (Some(most), Some(ratio)) = (e.max_width_vs_flat, width_vs_flat)
        && ratio > most
    {
        fail(format!(
            "widest interval (what the messages give) {ratio:.2} × the flat network's, expected \
             ≤ {most}×"
        ));
    }
    if f.non_causal > e.max_non_causal {
        fail(format!(
            "{} messages received before they were sent in true time: wrong matches (expected \
             ≤ {})",
            f.non_causal, e.max_non_causal
        ));
    }
    if let Some(most) = e.max_inversions.filter(|&most| f.inversions > most) {
        fail(format!(
            "{} messages received before they were sent after correction (expected ≤ {most})",
            f.inversions
        ));
    }
}
