//! Synchronization checked against known clock skews: each node's agent writes its timestamps
//! through a `--clock-skew` the lab chose (node 0 none), so the true map from any node's recorded
//! clock onto node 0's is known exactly, and every figure the analyzer reports can be compared
//! with it. Shared by the demo ([`crate::demo`]) and the cluster lab ([`crate::cluster`]).
use rand::{Rng, SeedableRng};
use tsync_analyze::{
    Algorithm, InputSet, MatchOptions, MatchedMessage, MessageSink, SyncOptions, SyncResult,
};
use tsync_common::format::ClockSkew;

/// The known skew of each node: node 0 none, the others up to ±50 ms and ±100 ppm.
pub fn skews(nodes: usize, seed: u64) -> Vec<ClockSkew> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..nodes)
        .map(|k| {
            if k == 0 {
                ClockSkew::default()
            } else {
                ClockSkew {
                    offset_ns: rng.random_range(-50_000_000..=50_000_000),
                    drift_ppm: (rng.random_range(-100.0..=100.0f64) * 1000.0).round() / 1000.0,
                }
            }
        })
        .collect()
}

/// Synchronizes the traces as `tsync-analyze sync --reference node-0` does (convex hull, default
/// matching): the result every check here compares with the truth.
pub fn synchronize(inputs: &InputSet) -> anyhow::Result<SyncResult> {
    let options = SyncOptions {
        algorithm: Algorithm::Chull,
        reference: Some("node-0".into()),
        matching: MatchOptions::default(),
        linreg_filter_z: None,
        ..Default::default()
    };
    Ok(tsync_analyze::sync(inputs, &options, &mut |_| {})?)
}

/// What the analyzer found for one node, against the truth.
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
        self.interval.is_some_and(inside)
    }
}

/// True when an interval relative to the truth, (lo − truth, hi − truth), holds it (1 ns of slack
/// for timestamps rounded to whole nanoseconds).
fn inside((lo, hi): (f64, f64)) -> bool {
    lo <= 1.0 && hi >= -1.0
}

/// The truth at one time `raw_t0` of node 0's estimation clock (the clock the pair (0, k) is
/// estimated on): node k's clock minus node 0's, true and recovered (ns), and the guaranteed
/// interval relative to the truth.
struct Truth {
    true_offset_ns: f64,
    recovered_offset_ns: f64,
    interval: Option<(f64, f64)>,
}

/// Compares trace k's map onto node 0 with the truth `t_k = skew(t_0)` at `raw_t0`. The pair itself
/// is estimated on the nodes' raw clocks, where the agent's `--clock-skew` (applied to
/// CLOCK_MONOTONIC, like NTP's slewing) does not exist; the trace map goes from node k's recorded
/// clock to node 0's, skew included.
fn truth_at(sync: &SyncResult, k: usize, skew: ClockSkew, raw_t0: f64) -> Truth {
    let truth = |t0: f64| t0 + skew.offset_ns as f64 + t0 * skew.drift_ppm * 1e-6;
    // Back from node 0's estimation clock to its recorded clock.
    let t0 = sync
        .timebases
        .of(0)
        .map_or(raw_t0, |c| c.from_raw.apply(raw_t0));
    let tk = truth(t0).round();
    let back = sync.to_reference(k as u32, tk as i64);
    Truth {
        true_offset_ns: tk - t0,
        recovered_offset_ns: tk - back,
        interval: sync
            .interval(k as u32, tk as i64)
            .map(|(lo, hi)| (t0 - hi, t0 - lo)),
    }
}

/// Compares trace k's map onto node 0 with the truth at the middle of the pair (node 0, node k)'s
/// messages; fails if the pair does not exist.
pub fn check_node(sync: &SyncResult, k: usize, skew: ClockSkew) -> anyhow::Result<NodeCheck> {
    let pair = sync
        .pair(0, k as u32)
        .ok_or_else(|| anyhow::anyhow!("no pair between node-0 and node-{k}"))?;
    let trace = &sync.traces[k];
    let drift = trace.line.drift;
    let (true_offset_mid_ns, recovered_offset_mid_ns, interval) = match pair.span {
        Some((start, end)) => {
            let mid = start as f64 + (end - start) as f64 / 2.0;
            let t = truth_at(sync, k, skew, mid);
            (t.true_offset_ns, t.recovered_offset_ns, t.interval)
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

/// The truth against node k's guaranteed interval at `points` (≥ 2) evenly spaced times over the
/// pair (node 0, node k)'s span, ends included: (times with an interval, of which holding the
/// truth). (0, 0) without the pair or its span.
pub fn truth_over_span(
    sync: &SyncResult,
    k: usize,
    skew: ClockSkew,
    points: usize,
) -> (usize, usize) {
    let Some((start, end)) = sync.pair(0, k as u32).and_then(|p| p.span) else {
        return (0, 0);
    };
    let intervals: Vec<(f64, f64)> = (0..points)
        .filter_map(|i| {
            let at = start as f64 + (end - start) as f64 * i as f64 / (points - 1).max(1) as f64;
            truth_at(sync, k, skew, at).interval
        })
        .collect();
    let held = intervals.iter().copied().filter(|&i| inside(i)).count();
    (intervals.len(), held)
}

/// Counts matched messages received before they were sent once every trace is mapped onto its
/// reference (give it to `InputSet::for_each_message`).
pub struct InversionCounter<'a> {
    pub sync: &'a SyncResult,
    pub messages: u64,
    pub inversions: u64,
}

impl<'a> InversionCounter<'a> {
    pub fn new(sync: &'a SyncResult) -> Self {
        InversionCounter {
            sync,
            messages: 0,
            inversions: 0,
        }
    }

    /// Counts `m`: for sinks that do more with each message.
    pub fn count(&mut self, m: &MatchedMessage<'_>) {
        let msg = &m.message;
        let send = self.sync.to_reference(msg.send_trace, msg.send_ns);
        let recv = self.sync.to_reference(msg.recv_trace, msg.recv_ns);
        self.messages += 1;
        self.inversions += u64::from(recv < send);
    }
}

impl MessageSink for InversionCounter<'_> {
    fn message(&mut self, m: &MatchedMessage<'_>) {
        self.count(m);
    }

    fn wants_events(&self) -> bool {
        false
    }
}
