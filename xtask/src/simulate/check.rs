//! Measures how close the analyzer's correction comes to a simulation's truth.

use std::path::PathBuf;

use tsync_analyze::{Algorithm, InputSet, MatchOptions, PairResult, SyncOptions, SyncResult};

use super::Truth;

/// How well one node was brought onto its reference's timebase by one algorithm.
#[derive(Debug, Clone)]
pub struct NodeAccuracy {
    pub node: String,
    pub reference: String,
    pub synchronized: bool,
    /// Quality of the pair (reference, node) when they exchanged messages directly.
    pub quality: Option<String>,
    /// Whether the truth lies inside the guaranteed interval at 1001 times across that pair's
    /// span (None when the pair has no interval: linreg, or not `accurate`).
    pub truth_inside: Option<bool>,
    /// |corrected − true| in the middle of the node's trace (ns).
    pub mid_error_ns: f64,
    /// Largest |corrected − true| over the trace, sampled at 1001 points (ns).
    pub max_error_ns: f64,
}

/// [`measure`] with each algorithm, convex hull first.
pub fn measure_both(truth: &Truth) -> anyhow::Result<Vec<(Algorithm, Vec<NodeAccuracy>)>> {
    [Algorithm::Chull, Algorithm::Linreg]
        .into_iter()
        .map(|algorithm| Ok((algorithm, measure(truth, algorithm)?)))
        .collect()
}

/// Synchronizes the simulated traces with `algorithm` (the first node, whose clock is true, as
/// reference) and measures each node's error against the truth.
pub fn measure(truth: &Truth, algorithm: Algorithm) -> anyhow::Result<Vec<NodeAccuracy>> {
    let files: Vec<PathBuf> = truth.nodes.iter().map(|n| n.file.clone()).collect();
    let inputs = InputSet::open(&files)?;
    let options = SyncOptions {
        algorithm,
        reference: Some(truth.nodes[0].name.clone()),
        matching: MatchOptions::default(),
        linreg_filter_z: None,
        ..Default::default()
    };
    let sync = tsync_analyze::sync(&inputs, &options, &mut |_| {})?;
    Ok(compare(truth, &sync))
}

/// Compares each trace's map onto its reference with the truth.
pub fn compare(truth: &Truth, sync: &SyncResult) -> Vec<NodeAccuracy> {
    sync.traces
        .iter()
        .enumerate()
        .map(|(k, t)| {
            let r = t.reference as usize;
            let node = &truth.nodes[k];
            let (first, last) = (node.first_ns as f64, node.last_ns as f64);
            let error = |t_k: f64| (t.map.apply(t_k) - truth.map(k, r, t_k)).abs();
            let max_error_ns = (0..=1000)
                .map(|i| error(first + (last - first) * i as f64 / 1000.0))
                .fold(0.0, f64::max);
            let pair = sync.pair(t.reference, k as u32);
            NodeAccuracy {
                node: node.name.clone(),
                reference: truth.nodes[r].name.clone(),
                synchronized: t.synchronized,
                quality: pair.map(|p| p.quality.as_str().to_owned()),
                truth_inside: pair.and_then(|p| truth_inside(truth, p)),
                mid_error_ns: error(0.5 * (first + last)),
                max_error_ns,
            }
        })
        .collect()
}

/// Whether the true t_b lies inside pair (a, b)'s guaranteed interval at 1001 times of its span
/// (1 ns of slack: written timestamps are rounded to whole nanoseconds).
fn truth_inside(truth: &Truth, pair: &PairResult) -> Option<bool> {
    let curve = pair.accuracy.as_ref()?;
    let (start, end) = pair.span?;
    let (a, b) = (pair.a as usize, pair.b as usize);
    let mut inside = true;
    for i in 0..=1000 {
        let t_a = start + ((end - start) as f64 * i as f64 / 1000.0) as i64;
        if let Some((lo, hi)) = curve.at(t_a) {
            let t_b = truth.map(a, b, t_a as f64);
            inside &= lo - 1.0 <= t_b && t_b <= hi + 1.0;
        }
    }
    Some(inside)
}

/// The accuracy table `cargo xtask simulate --check` prints (Markdown).
pub fn table(rows: &[(Algorithm, Vec<NodeAccuracy>)]) -> String {
    let mut out = String::from(
        "| algorithm | node | reference | pair quality | synchronized | error at middle (µs) | \
         max error (µs) | truth inside interval |\n\
         |---|---|---|---|---|---:|---:|---|\n",
    );
    for (algorithm, nodes) in rows {
        for n in nodes.iter().filter(|n| n.node != n.reference) {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {:.3} | {:.3} | {} |\n",
                algorithm.as_str(),
                n.node,
                n.reference,
                n.quality.as_deref().unwrap_or("(via other nodes)"),
                n.synchronized,
                n.mid_error_ns * 1e-3,
                n.max_error_ns * 1e-3,
                match n.truth_inside {
                    Some(true) => "yes",
                    Some(false) => "NO",
                    None => "–",
                }
            ));
        }
    }
    out
}
