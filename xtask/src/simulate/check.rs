//! Measures how close the analyzer's correction comes to a simulation's truth.

use serde::Serialize;

use super::Truth;

/// How well one node was brought onto its reference's timebase.
#[derive(Serialize, Debug, Clone)]
pub struct NodeAccuracy {
    pub node: String,
    pub reference: String,
    pub synchronized: bool,
    /// |corrected − true| in the middle of the node's trace (ns).
    pub mid_error_ns: f64,
    /// Largest |corrected − true| over the trace, sampled at 1001 points (ns).
    pub max_error_ns: f64,
}

/// Compares each trace's map onto its reference, from `sync --json` output, with the truth.
pub fn check(truth: &Truth, sync: &serde_json::Value) -> anyhow::Result<Vec<NodeAccuracy>> {
    let traces = sync["traces"]
        .as_array()
        .ok_or_else(|| anyhow::anyhow!("sync output has no \"traces\" array"))?;
    let mut out = Vec::new();
    for (k, t) in traces.iter().enumerate() {
        let field = |name: &str| {
            t[name]
                .as_f64()
                .ok_or_else(|| anyhow::anyhow!("trace {k} has no numeric \"{name}\""))
        };
        let (drift, offset) = (field("drift")?, field("offset_ns")?);
        let r = t["reference"]
            .as_u64()
            .ok_or_else(|| anyhow::anyhow!("trace {k} has no \"reference\""))?
            as usize;
        let node = &truth.nodes[k];
        let (first, last) = (node.first_ns as f64, node.last_ns as f64);
        let error = |t_k: f64| (drift * t_k + offset - truth.map(k, r, t_k)).abs();
        let max_error_ns = (0..=1000)
            .map(|i| error(first + (last - first) * i as f64 / 1000.0))
            .fold(0.0, f64::max);
        out.push(NodeAccuracy {
            node: node.name.clone(),
            reference: truth.nodes[r].name.clone(),
            synchronized: t["synchronized"].as_bool().unwrap_or(false),
            mid_error_ns: error(0.5 * (first + last)),
            max_error_ns,
        });
    }
    Ok(out)
}
