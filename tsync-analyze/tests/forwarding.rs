//! Nodes that forward their pods' packets (a Kubernetes node with the agent in the node's
//! namespace): trace files of format 5 whose every packet between the nodes is a passage through
//! both, received from a pod's veth and sent on the wire, then received from the wire and sent to
//! the other pod. Routed (the TTL drops at each node) or bridged (the TTL stays; the address
//! tables say whose pods are whose); the messages must be the wire hops, and the truth inside
//! every interval.

use std::path::{Path, PathBuf};

use tsync_analyze::{InputSet, Quality, SyncOptions, SyncResult, sync};
use tsync_common::format::{
    AddressTable, ClockSample, Footer, Header, IpPrefix, NamespaceAddresses, TraceWriter,
};
use tsync_common::{PacketEvent, direction, kind, tcp_flag};

/// Node B's clock against node A's (the truth): offset and drift.
const OFFSET_NS: f64 = 7_000_000.0;
const DRIFT: f64 = 20e-6;
/// Packets each way.
const PACKETS: u32 = 2_000;

/// The pod behind node A and the one behind node B.
const POD_A: [u8; 4] = [10, 244, 1, 5];
const POD_B: [u8; 4] = [10, 244, 2, 7];

fn local_b(true_ns: u64) -> u64 {
    (true_ns as f64 + OFFSET_NS + true_ns as f64 * DRIFT).round() as u64
}

fn packet(
    ts: u64,
    dir: u8,
    ifindex: u32,
    ttl: u8,
    from: [u8; 4],
    to: [u8; 4],
    seq: u32,
) -> PacketEvent {
    let mut saddr = [0u8; 16];
    saddr[..4].copy_from_slice(&from);
    let mut daddr = [0u8; 16];
    daddr[..4].copy_from_slice(&to);
    PacketEvent {
        ts_ns: ts,
        ifindex,
        direction: dir,
        kind: kind::TCP4,
        saddr,
        daddr,
        network_protocol: tsync_common::ETH_P_IP,
        tot_len: 140,
        source: 40_000,
        dest: 8_080,
        seq,
        ihl: 5,
        doff: 5,
        tcp_flags: tcp_flag::ACK,
        transport_protocol: tsync_common::IPPROTO_TCP,
        ttl,
        ..PacketEvent::default()
    }
}

/// The events of both nodes: `PACKETS` from pod A to pod B and as many back, each through both
/// nodes (pod veth 4 or 5, wire 2); `routes`: each node lowers the TTL as it forwards.
fn events(routes: bool) -> (Vec<PacketEvent>, Vec<PacketEvent>) {
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let hop = |ttl: u8| if routes { ttl - 1 } else { ttl };
    for i in 0..PACKETS {
        let t = 2_000_000_000 + u64::from(i) * 200_000;
        // A one-way delay on the wire of 20 to 69 µs, 3 µs through each node.
        let wire = 20_000 + u64::from(i * 7919 % 50) * 1_000;
        let (ta, tb) = (t, t + 3_000 + wire);
        a.push(packet(ta, direction::RECV, 4, 64, POD_A, POD_B, i));
        a.push(packet(
            ta + 3_000,
            direction::SEND,
            2,
            hop(64),
            POD_A,
            POD_B,
            i,
        ));
        b.push(packet(
            local_b(tb),
            direction::RECV,
            2,
            hop(64),
            POD_A,
            POD_B,
            i,
        ));
        b.push(packet(
            local_b(tb + 3_000),
            direction::SEND,
            5,
            hop(hop(64)),
            POD_A,
            POD_B,
            i,
        ));
        // The answer, 100 µs later, the other way.
        let (tb, ta) = (t + 100_000, t + 103_000 + wire);
        let seq = 1_000_000 + i;
        b.push(packet(
            local_b(tb),
            direction::RECV,
            5,
            64,
            POD_B,
            POD_A,
            seq,
        ));
        b.push(packet(
            local_b(tb + 3_000),
            direction::SEND,
            2,
            hop(64),
            POD_B,
            POD_A,
            seq,
        ));
        a.push(packet(ta, direction::RECV, 2, hop(64), POD_B, POD_A, seq));
        a.push(packet(
            ta + 3_000,
            direction::SEND,
            4,
            hop(hop(64)),
            POD_B,
            POD_A,
            seq,
        ));
    }
    (a, b)
}

/// Writes a node's trace of format 5; with `pod`, its address table lists that pod's address.
fn write(path: &Path, node: &str, pod: Option<[u8; 4]>, events: &[PacketEvent]) {
    let start = events[0].ts_ns - 1_000_000;
    let header = Header {
        node: node.into(),
        start_realtime_ns: 1_700_000_000_000_000_000,
        start_monotonic_ns: start,
        ..Header::default()
    };
    let mut w = TraceWriter::create(path, &header).unwrap();
    w.write_clock_sample(ClockSample {
        monotonic_ns: start,
        monotonic_raw_ns: start,
        realtime_ns: 1_700_000_000_000_000_000,
        tsc: 0,
        monotonic_after_ns: start,
    })
    .unwrap();
    if let Some(pod) = pod {
        w.write_addresses(&AddressTable {
            monotonic_ns: start,
            namespaces: vec![NamespaceAddresses {
                inode: 4_026_532_000,
                recorded: false,
                addresses: vec![IpPrefix {
                    ip: pod.into(),
                    len: 24,
                }],
            }],
        })
        .unwrap();
    }
    w.write_events(events).unwrap();
    w.finish(&Footer::default()).unwrap();
}

fn run(routes: bool, tables: bool) -> (SyncResult, tempfile::TempDir) {
    let (a, b) = events(routes);
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<PathBuf> = ["a", "b"].iter().map(|n| dir.path().join(n)).collect();
    write(&paths[0], "node-a", tables.then_some(POD_A), &a);
    write(&paths[1], "node-b", tables.then_some(POD_B), &b);
    let inputs = InputSet::open(&paths).unwrap();
    let r = sync(&inputs, &SyncOptions::default(), &mut |_| {}).unwrap();
    (r, dir)
}

/// Both directions matched as wire hops, and the truth inside every guaranteed interval.
fn assert_synchronized(r: &SyncResult) {
    let m = &r.matching;
    assert_eq!(m.matched, 2 * u64::from(PACKETS), "{m:?}");
    assert_eq!((m.ambiguous, m.unmatched), (0, 0), "{m:?}");
    assert_eq!(m.forwarded, 4 * u64::from(PACKETS), "{m:?}");
    let p = &r.pairs[0];
    assert_eq!(p.quality, Quality::Accurate);
    assert_eq!((p.messages_ab, p.messages_ba), (2_000, 2_000));
    for pt in &p.accuracy.as_ref().unwrap().points {
        let t_a = pt.t_a as f64;
        let truth = t_a + OFFSET_NS + t_a * DRIFT;
        assert!(
            pt.lo - 1.0 <= truth && truth <= pt.hi + 1.0,
            "{pt:?} vs {truth}"
        );
        // The wire hops (at least 20 µs each way), not the pods' (26 µs): at most 40 µs
        // wide and a little for the drift's uncertainty, where the pods' would be 52 µs.
        assert!(pt.hi - pt.lo < 46_000.0, "{pt:?}");
    }
}

#[test]
fn routed_pods_are_synchronized_by_the_ttl() {
    let (r, _dir) = run(true, false);
    assert_synchronized(&r);
}

#[test]
fn bridged_pods_are_synchronized_by_their_addresses() {
    let (r, _dir) = run(false, true);
    assert_synchronized(&r);
}

#[test]
fn bridged_pods_without_addresses_stay_ambiguous_and_say_why() {
    let (r, _dir) = run(false, false);
    let m = &r.matching;
    assert_eq!(m.matched, 0, "{m:?}");
    assert_eq!(m.ambiguous_order, 2 * u64::from(PACKETS), "{m:?}");
    let all = r.warnings.join("\n");
    assert!(
        all.contains("forwarded them") && all.contains("hostPID"),
        "{all}"
    );
}
