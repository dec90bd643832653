//! Format version 5: the events' `flags` in the flow table and `ttl` in a column of its own;
//! and files of versions 3 and 4 written by the agent before version 5 (`tests/data`), which must
//! read exactly as they did. (Round trips of arbitrary records in every columnar version:
//! format_v3.rs.)
#![cfg(feature = "user")]

use tsync_common::format::{Footer, Header, TraceWriter, VERSION};
use tsync_common::{PacketEvent, flag, kind};

mod common;
use common::{chunks_of, read_all};

/// Chunk kind of compressed event columns.
const EVENTS: u32 = 8;

/// The events of the golden files `tests/data/v{3,4}-events.tsync`: TCP over IPv4 and IPv6
/// (flows whose sequence numbers move as TCP's do, a few that jump), UDP with payload bytes,
/// CPUs and header lengths in the narrow columns.
fn golden_events() -> Vec<PacketEvent> {
    (0..300u32)
        .map(|i| {
            let flow = i % 5;
            let udp = flow == 4;
            let mut e = PacketEvent {
                ts_ns: 7_000_000_000 + u64::from(i) * 9_973 + u64::from(i * i % 777),
                ifindex: 2 + flow / 3,
                cpu: (i % 3) as u16,
                direction: (flow % 2) as u8,
                kind: match flow {
                    4 => tsync_common::kind::UDP4,
                    3 => tsync_common::kind::TCP6,
                    _ => tsync_common::kind::TCP4,
                },
                network_protocol: if flow == 3 { 0x86dd } else { 0x0800 },
                tot_len: if udp {
                    28 + (i % 50) as u16
                } else {
                    52 + (i % 4) as u16 * 700
                },
                source: 40_000 + flow as u16,
                dest: if udp { 53 } else { 5201 },
                seq: if udp {
                    0
                } else {
                    (i / 5).wrapping_mul(1448) ^ (i % 23 / 22)
                },
                ack_seq: if udp { 0 } else { 1000 + i / 2 },
                transport_protocol: if udp { 17 } else { 6 },
                ihl: if flow == 3 { 0 } else { 5 },
                doff: if udp { 0 } else { 8 },
                tcp_flags: if udp {
                    0
                } else {
                    0x10 | ((i % 7 / 6) as u8 * 0x08)
                },
                udp_data: if udp {
                    [i as u8, 1, 2, 3, 0, 0, 0, (i % 3) as u8]
                } else {
                    [0; 8]
                },
                udp_len: if udp { 8 + (i % 50) as u16 } else { 0 },
                ..PacketEvent::default()
            };
            let len = if flow == 3 { 16 } else { 4 };
            e.saddr[..len].fill(10 + flow as u8);
            e.daddr[..len].fill(20);
            e
        })
        .collect()
}

/// Written by the agent of format version 4 (commit 1a86de5, `TraceWriter::with_version` 3 and
/// 4, default level): [`golden_events`], flushed after the first 120.
const GOLDEN: [(u32, &[u8]); 2] = [
    (3, include_bytes!("data/v3-events.tsync")),
    (4, include_bytes!("data/v4-events.tsync")),
];

/// What a writer of `version` makes of the golden events, as the golden files were written.
fn write_golden(version: u32) -> Vec<u8> {
    let events = golden_events();
    let mut w = TraceWriter::with_version(Vec::new(), &Header::default(), version).unwrap();
    w.write_events(&events[..120]).unwrap();
    w.flush().unwrap();
    w.write_events(&events[120..]).unwrap();
    w.finish(&Footer {
        events: events.len() as u64,
        ..Footer::default()
    })
    .unwrap()
}

#[test]
fn files_of_versions_3_and_4_read_exactly_as_before() {
    for (version, bytes) in GOLDEN {
        let (events, r) = read_all(bytes).unwrap();
        assert_eq!(r.version(), version);
        assert_eq!(r.damage(), None);
        assert_eq!(events, golden_events(), "version {version}");
        assert!(events.iter().all(|e| e.flags == 0 && e.ttl == 0));
    }
}

#[test]
fn versions_3_and_4_are_still_written_byte_for_byte() {
    for (version, golden) in GOLDEN {
        let ours = write_golden(version);
        let payloads = |bytes: &[u8]| -> Vec<Vec<u8>> {
            chunks_of(bytes, EVENTS)
                .into_iter()
                .map(|at| {
                    let len = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap());
                    bytes[at..at + 16 + len as usize].to_vec()
                })
                .collect()
        };
        assert_eq!(payloads(&ours), payloads(golden), "version {version}");
        assert_eq!(payloads(golden).len(), 2);
    }
}

/// A recording's TCP events of a few flows, each with the TTL it arrived with (64, or 63 from
/// a flow that crossed a router), some flows a tunnel's outer packets.
fn tcp_with_ttl(n: u32) -> Vec<PacketEvent> {
    golden_events()
        .into_iter()
        .cycle()
        .take(n as usize)
        .enumerate()
        .map(|(i, mut e)| {
            e.ts_ns += i as u64 / 300 * 3_000_000;
            e.seq = e.seq.wrapping_add(i as u32 / 300 * 300 * 1448);
            e.ttl = if e.source == 40_001 { 63 } else { 64 };
            e.flags = if e.source == 40_002 {
                flag::ENCAPSULATED
            } else {
                0
            };
            e
        })
        .collect()
}

#[test]
fn flags_and_ttls_cost_version_5_almost_nothing() {
    let events = tcp_with_ttl(3000);
    let file = |version: u32, events: &[PacketEvent]| {
        let mut w = TraceWriter::with_version(Vec::new(), &Header::default(), version).unwrap();
        for chunk in events.chunks(1000) {
            w.write_events(chunk).unwrap();
            w.flush().unwrap();
        }
        let bytes = w.finish(&Footer::default()).unwrap();
        let (back, r) = read_all(&bytes).unwrap();
        assert_eq!(
            (back.as_slice(), r.damage()),
            (events, None),
            "version {version}"
        );
        bytes.len()
    };
    let bare: Vec<PacketEvent> = events
        .iter()
        .map(|e| PacketEvent {
            flags: 0,
            ttl: 0,
            ..*e
        })
        .collect();
    let (v5, v5_bare, v4) = (
        file(VERSION, &events),
        file(VERSION, &bare),
        file(4, &events),
    );
    // Three chunks, each: a TTL per flow, a flag per flow, a section length (16 bytes in all
    // when this was written).
    assert!(
        v5 <= v5_bare + 3 * 24,
        "{v5} bytes against {v5_bare} without them"
    );
    // Version 4 keeps them in every event's extras: a third more here.
    assert!(5 * v4 > 6 * v5, "version 4: {v4} bytes, version 5: {v5}");
}

#[test]
fn a_flow_is_its_flags_too() {
    // The same packets seen once plain and once as a tunnel's outer packets: two flows in
    // version 5 (the flag is the flow's), one flow with per-event extras in version 4.
    let plain: Vec<PacketEvent> = tcp_with_ttl(20)
        .into_iter()
        .filter(|e| e.kind == kind::TCP4)
        .collect();
    let mut events = Vec::new();
    for (i, e) in plain.iter().enumerate() {
        events.push(*e);
        events.push(PacketEvent {
            flags: flag::ENCAPSULATED,
            ttl: e.ttl ^ (i as u8 & 1),
            ts_ns: e.ts_ns + 1,
            ..*e
        });
    }
    for version in [3, 4, VERSION] {
        let mut w = TraceWriter::with_version(Vec::new(), &Header::default(), version).unwrap();
        w.write_events(&events).unwrap();
        let bytes = w.finish(&Footer::default()).unwrap();
        let (back, r) = read_all(&bytes).unwrap();
        assert_eq!(r.damage(), None, "version {version}");
        assert_eq!(back, events, "version {version}");
    }
}
