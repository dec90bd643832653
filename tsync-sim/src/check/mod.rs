//! Measures how close the analyzer's correction comes to a simulation's truth, over each trace's
//! whole span: the error at its middle, the largest error, and whether the truth stays inside
//! the guaranteed interval at every checked point (`cargo xtask simulate --check`); and the same
//! for a message workload's meshes ([`workload`], `cargo xtask bench mesh`).

pub mod workload;

use std::path::PathBuf;

use tsync_analyze::{Algorithm, InputSet, MatchOptions, SyncOptions, SyncResult};

use crate::Truth;

/// Which of the written inputs to synchronize.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    /// The agent trace files (`node-K.tsync`), with their clock samples.
    Traces,
    /// The text message file (`messages.txt`): the same messages, no clock samples.
    Text,
}

impl Input {
    fn describe(self) -> &'static str {
        match self {
            Input::Traces => "trace files",
            Input::Text => "text message file",
        }
    }
}

/// How well one node was brought onto its reference's timebase by one algorithm.
#[derive(Debug, Clone)]
pub struct NodeAccuracy {
    /// The node's name.
    pub node: String,
    /// Its reference's name.
    pub reference: String,
    /// Whether the analyzer synchronized it.
    pub synchronized: bool,
    /// Quality of the pair (reference, node) when they exchanged messages directly.
    pub quality: Option<String>,
    /// Points checked across the node's trace, first to last event: one every 100 ms, at least
    /// 1001, both ends included.
    pub points: usize,
    /// Checked points where the analyzer guarantees an interval (`SyncResult::interval`).
    pub with_interval: usize,
    /// Checked points where the truth lies outside that interval (1 ns of slack: written
    /// timestamps are rounded to whole nanoseconds).
    pub outside: usize,
    /// Whether the truth lies inside the interval wherever there is one (None: nowhere is).
    pub truth_inside: Option<bool>,
    /// |corrected − true| in the middle of the node's trace (ns).
    pub mid_error_ns: f64,
    /// Largest |corrected − true| over the checked points (ns), and where (seconds after the
    /// node's first event).
    pub max_error_ns: f64,
    /// See `max_error_ns`.
    pub max_error_at_s: f64,
    /// Widest guaranteed interval at the checked points (ns; 0 when there is none).
    pub max_width_ns: f64,
}

/// [`measure`] with each algorithm, convex hull first, on the trace files (or, when only the
/// text file was written, on it).
pub fn measure_both(truth: &Truth) -> anyhow::Result<Vec<(Algorithm, Vec<NodeAccuracy>)>> {
    let input = if truth.config.format.traces() {
        Input::Traces
    } else {
        Input::Text
    };
    measure_input(truth, input)
}

/// [`measure`] with each algorithm, convex hull first, on `input`.
pub fn measure_input(
    truth: &Truth,
    input: Input,
) -> anyhow::Result<Vec<(Algorithm, Vec<NodeAccuracy>)>> {
    [Algorithm::Chull, Algorithm::Linreg]
        .into_iter()
        .map(|algorithm| Ok((algorithm, measure(truth, input, algorithm)?)))
        .collect()
}

/// What `--check` prints: a table per input written, both algorithms each.
pub fn report(truth: &Truth) -> anyhow::Result<String> {
    let mut out = String::new();
    let format = truth.config.format;
    for input in [Input::Traces, Input::Text] {
        if (input == Input::Traces && !format.traces()) || (input == Input::Text && !format.text())
        {
            continue;
        }
        let started = std::time::Instant::now();
        let rows = measure_input(truth, input)?;
        out.push_str(&format!(
            "\n{} (synchronized and checked in {:.1} s):\n\n{}",
            input.describe(),
            started.elapsed().as_secs_f64(),
            table(&rows)
        ));
    }
    Ok(out)
}

/// Synchronizes the simulated `input` with `algorithm` (the first node, whose crystal is true,
/// as reference) and measures each node's error against the truth.
pub fn measure(
    truth: &Truth,
    input: Input,
    algorithm: Algorithm,
) -> anyhow::Result<Vec<NodeAccuracy>> {
    let (files, reference): (Vec<PathBuf>, String) = match input {
        Input::Traces => (
            truth.nodes.iter().map(|n| n.file.clone()).collect(),
            truth.nodes[0].name.clone(),
        ),
        Input::Text => (
            vec![
                truth
                    .text
                    .clone()
                    .ok_or_else(|| anyhow::anyhow!("no text message file was written"))?,
            ],
            // Traces of a text file are named by their index.
            "0".into(),
        ),
    };
    let inputs = InputSet::open(&files)?;
    let options = SyncOptions {
        algorithm,
        reference: Some(reference),
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
            let points = (((last - first) / 100e6) as usize + 1).max(1001);
            let at = |i: usize| (first + (last - first) * i as f64 / (points - 1) as f64).round();
            let error =
                |t_k: f64| (sync.to_reference(k as u32, t_k as i64) - truth.map(k, r, t_k)).abs();
            let mut row = NodeAccuracy {
                node: node.name.clone(),
                reference: truth.nodes[r].name.clone(),
                synchronized: t.synchronized,
                quality: sync
                    .pair(t.reference, k as u32)
                    .map(|p| p.quality.as_str().to_owned()),
                points,
                with_interval: 0,
                outside: 0,
                truth_inside: None,
                mid_error_ns: error((0.5 * (first + last)).round()),
                max_error_ns: 0.0,
                max_error_at_s: 0.0,
                max_width_ns: 0.0,
            };
            for i in 0..points {
                let t_k = at(i);
                let e = error(t_k);
                if e > row.max_error_ns {
                    row.max_error_ns = e;
                    row.max_error_at_s = (t_k - first) * 1e-9;
                }
                if let Some((lo, hi)) = sync.interval(k as u32, t_k as i64) {
                    let truth_r = truth.map(k, r, t_k);
                    row.with_interval += 1;
                    row.max_width_ns = row.max_width_ns.max(hi - lo);
                    if !(lo - 1.0 <= truth_r && truth_r <= hi + 1.0) {
                        row.outside += 1;
                    }
                }
            }
            row.truth_inside = (row.with_interval > 0).then_some(row.outside == 0);
            row
        })
        .collect()
}

/// The accuracy table `cargo xtask simulate --check` prints (Markdown).
pub fn table(rows: &[(Algorithm, Vec<NodeAccuracy>)]) -> String {
    let mut out = String::from(
        "| algorithm | node | reference | pair quality | synchronized | error at middle (µs) | \
         max error (µs) | at (s) | widest interval (µs) | truth inside interval |\n\
         |---|---|---|---|---|---:|---:|---:|---:|---|\n",
    );
    for (algorithm, nodes) in rows {
        for n in nodes.iter().filter(|n| n.node != n.reference) {
            let inside = match n.truth_inside {
                None => "–".to_owned(),
                Some(true) if n.with_interval == n.points => "yes".to_owned(),
                Some(true) => format!("yes where given ({}/{} points)", n.with_interval, n.points),
                Some(false) => format!("NO ({} of {} points outside)", n.outside, n.with_interval),
            };
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {:.3} | {:.3} | {:.1} | {} | {} |\n",
                algorithm.as_str(),
                n.node,
                n.reference,
                n.quality.as_deref().unwrap_or("(via other nodes)"),
                n.synchronized,
                n.mid_error_ns * 1e-3,
                n.max_error_ns * 1e-3,
                n.max_error_at_s,
                if n.with_interval > 0 {
                    format!("{:.3}", n.max_width_ns * 1e-3)
                } else {
                    "–".into()
                },
                inside,
            ));
        }
    }
    out
}
