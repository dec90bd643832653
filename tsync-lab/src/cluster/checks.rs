//! What the analyzer makes of one topology's traces, against the truth: `tsync-analyze sync
//! --json` as a user runs it (its document, warnings and exit status kept), the same
//! synchronization through the analyzer's library for the truth checks the demo makes
//! ([`crate::known_skew`]: the error at the middle, the interval there, the truth at 11 times over
//! each pair's span), the share of the packets between nodes that were matched, per kind, and the
//! messages whose true receive precedes their true send ([`TrueOrder`]: wrong matches).
//!
//! The share's denominator comes from the traces themselves: every packet from one node to
//! another is sent exactly once on the sender's [`Topology::egress_device`] (`eth0`, or the tunnel
//! device whose packets are the pods' own), so the send events on that device, by kind, are the
//! packets between traced nodes. The numerator is the analyzer's messages between two traces, by
//! the kind of their send event. A tunnel's outer packet whose digest is still the tunnel's
//! (UDP to port 4789 or 8472 without [`flag::ENCAPSULATED`]) carries no kind of its own: its
//! matches are counted apart.
//!
//! [`Topology::egress_device`]: super::topology::Topology::egress_device
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result, bail};
use tsync_analyze::{InputSet, MatchOptions, MatchedMessage, MessageSink};
use tsync_common::format::{ClockSkew, TraceReader};
use tsync_common::{PacketEvent, direction, flag, kind};

use super::record::Written;
use super::topology::port;
use crate::known_skew::{InversionCounter, NodeCheck, check_node, synchronize, truth_over_span};

/// The kinds of packets a share is given for: by protocol and family, then the two kinds of UDP
/// that defeat a digest of the first payload bytes (both families).
pub const COLUMNS: [&str; 6] = [
    "TCP4",
    "TCP6",
    "UDP4",
    "UDP6",
    "UDP unconnected",
    "QUIC-like",
];
const UDP_UNCONNECTED: usize = 4;
const QUIC: usize = 5;

/// Times over each pair's span at which the truth is compared with the interval.
pub const TRUTH_POINTS: usize = 11;

/// The VXLAN ports: Linux's default (4789) and Flannel's (8472).
const TUNNEL_PORTS: [u16; 2] = [4789, 8472];

/// What an event counts as: `Some(columns)` (its kind's, then for UDP its client's if that is
/// one of the last two columns), `None` for a tunnel's outer packet digested as such.
pub fn columns(e: &PacketEvent) -> Option<(usize, Option<usize>)> {
    let udp_column = match e.kind {
        kind::TCP4 => return Some((0, None)),
        kind::TCP6 => return Some((1, None)),
        kind::UDP4 | kind::UDP4_HASHED => 2,
        kind::UDP6_HASHED => 3,
        _ => return None,
    };
    if e.flags & flag::ENCAPSULATED == 0 && TUNNEL_PORTS.contains(&e.dest) {
        return None;
    }
    // The server's port tells the client: a pod's own, or a published host port.
    let served = |p: u16| {
        let p = if p >= port::HOST_PORT_OFFSET + port::TCP {
            p - port::HOST_PORT_OFFSET
        } else {
            p
        };
        match p {
            port::UDP_UNCONNECTED => Some(UDP_UNCONNECTED),
            port::QUIC => Some(QUIC),
            _ => None,
        }
    };
    Some((udp_column, served(e.dest).or(served(e.source))))
}

/// Packets sent between nodes and messages matched, of one kind.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Share {
    pub packets: u64,
    pub matched: u64,
}

impl Share {
    /// Matched, in % of the packets; None without packets.
    pub fn percent(&self) -> Option<f64> {
        (self.packets > 0).then(|| 100.0 * self.matched as f64 / self.packets as f64)
    }
}

/// One node's figures against the truth.
pub struct NodeTruth {
    /// At the middle of its pair with node 0; None when there is no such pair.
    pub check: Option<NodeCheck>,
    /// Of [`TRUTH_POINTS`] times over the pair's span: those with an interval, and those of
    /// them holding the truth.
    pub points: usize,
    pub inside: usize,
    /// What the raw-clock conversions add to each side of its intervals (ns): its and node 0's
    /// conversion bounds, which every interval includes (docs/json.md, `conversion_bound_ns`).
    pub conversion_ns: f64,
}

/// Everything checked about one topology's run.
pub struct Figures {
    pub written: Vec<Written>,
    pub shares: [Share; 6],
    /// Messages whose send event is a tunnel's outer packet digested as such.
    pub outer_matched: u64,
    /// `tsync-analyze sync`'s exit status (0, or 3: not on one timebase).
    pub analyzer_status: i32,
    /// Its `matching` object and warnings (`sync.json`).
    pub matching: serde_json::Value,
    pub warnings: Vec<String>,
    /// The library's messages, which must be the binary's.
    pub library_matched: u64,
    /// Node 1 on (node 0 is the reference).
    pub nodes: Vec<NodeTruth>,
    /// The largest gap between two clock samples of any trace (ns): the agents sample every
    /// 10 ms; a machine that stalls (seen here: 100–220 ms, all namespaces at once) leaves
    /// longer ones, and wide raw-clock conversion bounds around them.
    pub sample_gap_ns: u64,
    /// (a, b, quality) of every pair.
    pub pairs: Vec<(String, String, String)>,
    pub inversions: u64,
    /// Messages received before they were sent in true time ([`TrueOrder`]): a wrong match,
    /// whatever the estimate.
    pub non_causal: u64,
    /// Messages sent and received on one node (within one trace: the `nat` hairpin, with
    /// node+pods agents), counted in [`Figures::non_causal`] like the others.
    pub within_node: u64,
}

impl Figures {
    /// The largest |error at the middle| over the nodes (ns); None if any node has none.
    pub fn max_mid_error_ns(&self) -> Option<f64> {
        self.nodes.iter().try_fold(0.0f64, |most, n| {
            let e = n.check.as_ref()?.mid_error_ns;
            (!e.is_nan()).then(|| most.max(e.abs()))
        })
    }

    /// The widest guaranteed interval at the middle over the nodes (ns); None if any has none.
    pub fn widest_interval_ns(&self) -> Option<f64> {
        self.nodes.iter().try_fold(0.0f64, |most, n| {
            let (lo, hi) = n.check.as_ref()?.interval?;
            Some(most.max(hi - lo))
        })
    }

    /// The widest interval at the middle that the messages give (ns): each node's less what the
    /// raw-clock conversions add to it (a machine stall widens every topology alike, so the
    /// topologies are compared on this); None if any node has none.
    pub fn widest_message_width_ns(&self) -> Option<f64> {
        self.nodes.iter().try_fold(0.0f64, |most, n| {
            let (lo, hi) = n.check.as_ref()?.interval?;
            Some(most.max((hi - lo - 2.0 * n.conversion_ns).max(0.0)))
        })
    }

    /// True when every node's intervals hold the truth: at the middle, and at every one of the
    /// times over its span that has an interval (at least one).
    pub fn truth_inside(&self) -> bool {
        self.nodes.iter().all(|n| {
            n.check.as_ref().is_some_and(NodeCheck::truth_inside)
                && n.points > 0
                && n.inside == n.points
        })
    }

    /// (times with an interval, of which holding the truth) over all nodes.
    pub fn truth_points(&self) -> (usize, usize) {
        self.nodes
            .iter()
            .fold((0, 0), |(p, i), n| (p + n.points, i + n.inside))
    }

    pub fn accurate_pairs(&self) -> usize {
        self.pairs.iter().filter(|p| p.2 == "accurate").count()
    }
}

/// Synchronizes the traces and checks them (see the module doc); `egress[k]` is node k's egress
/// device's interface index, `out` where `sync.json` and the analyzer's stderr go.
pub fn analyze(
    analyzer: &Path,
    files: &[PathBuf],
    egress: &[u32],
    skews: &[ClockSkew],
    written: Vec<Written>,
    out: &Path,
) -> Result<Figures> {
    let (analyzer_status, document) = run_sync(analyzer, files, out)?;
    let inputs = InputSet::open(files)?;
    for (k, trace) in inputs.traces.iter().enumerate() {
        if trace.name != format!("node-{k}") {
            bail!(
                "trace {k} is named {:?}, not node-{k}: its known skew is unknown",
                trace.name
            );
        }
    }
    let sync = synchronize(&inputs)?;
    let nodes = (1..skews.len())
        .map(|k| {
            let (points, inside) = truth_over_span(&sync, k, skews[k], TRUTH_POINTS);
            NodeTruth {
                check: check_node(&sync, k, skews[k]).ok(),
                points,
                inside,
                conversion_ns: sync.traces[0].conversion_bound_ns
                    + sync.traces[k].conversion_bound_ns,
            }
        })
        .collect();
    let pairs = sync
        .pairs
        .iter()
        .map(|p| {
            (
                sync.traces[p.a as usize].name.clone(),
                sync.traces[p.b as usize].name.clone(),
                p.quality.as_str().to_owned(),
            )
        })
        .collect();
    let mut sink = Counter {
        inversions: InversionCounter::new(&sync),
        truth: TrueOrder {
            skews,
            non_causal: 0,
        },
        matched: [0; 6],
        outer: 0,
        within_node: 0,
    };
    inputs.for_each_message(&MatchOptions::default(), &mut sink, &mut |_| {})?;
    let mut shares = [Share::default(); 6];
    for (share, matched) in shares.iter_mut().zip(sink.matched) {
        share.matched = matched;
    }
    let mut sample_gap_ns = 0;
    for (file, &ifindex) in files.iter().zip(egress) {
        let scan = scan(file, ifindex)?;
        for (share, packets) in shares.iter_mut().zip(scan.packets) {
            share.packets += packets;
        }
        sample_gap_ns = sample_gap_ns.max(scan.sample_gap_ns);
    }
    Ok(Figures {
        written,
        shares,
        outer_matched: sink.outer,
        analyzer_status,
        matching: document["matching"].clone(),
        warnings: document["warnings"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|w| w.as_str().map(str::to_owned))
            .collect(),
        library_matched: sync.matching.matched,
        nodes,
        sample_gap_ns,
        pairs,
        inversions: sink.inversions.inversions,
        non_causal: sink.truth.non_causal,
        within_node: sink.within_node,
    })
}

/// `tsync-analyze sync --json --reference node-0 FILES`: its exit status and document (also
/// written to `sync.json`, its stderr to `sync.log`). Fails if it failed (status 1 or 2).
fn run_sync(analyzer: &Path, files: &[PathBuf], out: &Path) -> Result<(i32, serde_json::Value)> {
    let output = Command::new(analyzer)
        .args(["sync", "--json", "--reference", "node-0"])
        .args(files)
        .output()
        .with_context(|| format!("cannot run {}", analyzer.display()))?;
    std::fs::write(out.join("sync.json"), &output.stdout)?;
    std::fs::write(out.join("sync.log"), &output.stderr)?;
    let status = output.status.code().unwrap_or(-1);
    if !matches!(status, 0 | 3) {
        bail!(
            "tsync-analyze sync failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let document = serde_json::from_slice(&output.stdout)
        .context("tsync-analyze sync --json printed no JSON document")?;
    Ok((status, document))
}

/// The true time of a time `recorded_ns` written through `skew`: the inverse of
/// [`ClockSkew::apply`] (every namespace of the lab reads one CLOCK_MONOTONIC, so true times of
/// all nodes compare).
pub fn true_ns(skew: ClockSkew, recorded_ns: i64) -> f64 {
    (recorded_ns as f64 - skew.offset_ns as f64) / (1.0 + skew.drift_ppm * 1e-6)
}

/// Counts the messages whose true receive time precedes their true send time: with the skews
/// known, this needs no estimate, so any such message is a send and a receive the matching
/// paired wrongly (not the same packet, or its passages through a node taken in the wrong
/// order). 1 ns of slack for the rounding of [`ClockSkew::apply`] and of its inverse.
pub struct TrueOrder<'a> {
    /// Of each trace, by its index among the inputs (trace k is node k).
    pub skews: &'a [ClockSkew],
    pub non_causal: u64,
}

impl TrueOrder<'_> {
    pub fn count(&mut self, m: &tsync_analyze::Message) {
        let at = |trace: u32, ns: i64| true_ns(self.skews[trace as usize], ns);
        let (send, recv) = (at(m.send_trace, m.send_ns), at(m.recv_trace, m.recv_ns));
        self.non_causal += u64::from(recv + 1.0 < send);
    }
}

/// Counts the messages by column, the inversions and the non-causal ones, in one pass.
struct Counter<'a> {
    inversions: InversionCounter<'a>,
    truth: TrueOrder<'a>,
    matched: [u64; 6],
    outer: u64,
    within_node: u64,
}

impl MessageSink for Counter<'_> {
    fn message(&mut self, m: &MatchedMessage<'_>) {
        self.inversions.count(m);
        self.truth.count(&m.message);
        self.within_node += u64::from(m.message.send_trace == m.message.recv_trace);
        let Some(e) = m.send_event else { return };
        match columns(e) {
            Some((kind, mode)) => {
                self.matched[kind] += 1;
                if let Some(mode) = mode {
                    self.matched[mode] += 1;
                }
            }
            None => self.outer += 1,
        }
    }

    fn wants_events(&self) -> bool {
        true
    }
}

/// What a trace says beside its messages.
struct Scan {
    /// The packets its node sent to the other nodes, by column: its send events on the egress
    /// device.
    packets: [u64; 6],
    /// The largest gap between two of its clock samples (raw clock, ns).
    sample_gap_ns: u64,
}

/// Reads a trace for its [`Scan`]; `ifindex` is its node's egress device.
fn scan(file: &Path, ifindex: u32) -> Result<Scan> {
    let mut reader =
        TraceReader::open(file).with_context(|| format!("cannot read {}", file.display()))?;
    let mut counts = [0u64; 6];
    while let Some(events) = reader.next_events()? {
        for e in events
            .iter()
            .filter(|e| e.direction == direction::SEND && e.ifindex == ifindex)
        {
            if let Some((kind, mode)) = columns(e) {
                counts[kind] += 1;
                if let Some(mode) = mode {
                    counts[mode] += 1;
                }
            }
        }
    }
    let sample_gap_ns = reader
        .clock_samples()
        .windows(2)
        .map(|w| w[1].monotonic_raw_ns.saturating_sub(w[0].monotonic_raw_ns))
        .max()
        .unwrap_or(0);
    Ok(Scan {
        packets: counts,
        sample_gap_ns,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn udp(kind: u8, source: u16, dest: u16, flags: u8) -> PacketEvent {
        PacketEvent {
            kind,
            source,
            dest,
            flags,
            ..PacketEvent::default()
        }
    }

    #[test]
    fn events_count_by_kind_and_udp_by_the_server_port() {
        let tcp = PacketEvent {
            kind: kind::TCP6,
            dest: port::TCP,
            ..PacketEvent::default()
        };
        assert_eq!(columns(&tcp), Some((1, None)));
        assert_eq!(columns(&udp(kind::UDP4, 40000, 7001, 0)), Some((2, None)));
        assert_eq!(
            columns(&udp(kind::UDP6_HASHED, 7002, 40000, 0)),
            Some((3, Some(UDP_UNCONNECTED)))
        );
        // Through a published host port.
        assert_eq!(
            columns(&udp(kind::UDP4_HASHED, 40000, 30003, 0)),
            Some((2, Some(QUIC)))
        );
        assert_eq!(columns(&udp(kind::TCP_ADDON, 1, 2, 0)), None);
    }

    #[test]
    fn a_tunnel_packet_counts_by_what_it_carries_only_once_digested_so() {
        assert_eq!(columns(&udp(kind::UDP4, 51234, 8472, 0)), None);
        assert_eq!(columns(&udp(kind::UDP4_HASHED, 51234, 4789, 0)), None);
        // Encapsulated: the digest (kind, ports) is the inner packet's.
        let inner = udp(kind::UDP6_HASHED, 40000, 7003, flag::ENCAPSULATED);
        assert_eq!(columns(&inner), Some((3, Some(QUIC))));
    }

    #[test]
    fn true_time_inverts_the_skew_and_a_match_against_time_is_counted() {
        let skew = ClockSkew {
            offset_ns: -20_000_000,
            drift_ppm: 57.25,
        };
        for t in [20_000_000u64, 1_000_000_000, 123_456_789_012_345] {
            let back = true_ns(skew, skew.apply(t) as i64);
            assert!((back - t as f64).abs() <= 1.0, "{t}: {back}");
        }
        let skews = [ClockSkew::default(), skew];
        let mut order = TrueOrder {
            skews: &skews,
            non_causal: 0,
        };
        let t = 5_000_000_000u64;
        // Sent by node 0 at t, received by node 1 100 ns later, then 100 ns earlier.
        for (recv, non_causal) in [(t + 100, 0), (t - 100, 1)] {
            order.count(&tsync_analyze::Message {
                send_trace: 0,
                recv_trace: 1,
                send_ns: t as i64,
                recv_ns: skew.apply(recv) as i64,
            });
            assert_eq!(order.non_causal, non_causal);
        }
    }

    #[test]
    fn a_share_without_packets_has_no_percentage() {
        assert_eq!(Share::default().percent(), None);
        let s = Share {
            packets: 200,
            matched: 190,
        };
        assert_eq!(s.percent(), Some(95.0));
    }
}
