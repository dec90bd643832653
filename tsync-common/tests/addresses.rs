//! Format version 5's node addresses (chunk kind 10) and header: round trips, the pass that
//! reads only the address tables, damage, and the header layouts of versions 1 to 4.
#![cfg(feature = "user")]

use std::io::Cursor;

use serde::Serialize;
use tsync_common::format::{
    AddressTable, AgentOptions, ClockSample, Footer, Header, Interface, IpPrefix, LostCounts,
    NamespaceAddresses, RecordedNetns, TraceReader, TraceWriter, held_addresses,
    read_address_tables,
};
use tsync_common::{PacketEvent, kind};

mod common;
use common::{chunks, chunks_of, read_all};

/// Chunk kind of the address tables.
const ADDRESSES: u32 = 10;
/// Chunk kind of compressed events.
const EVENTS: u32 = 8;

fn prefix(s: &str) -> IpPrefix {
    let (ip, len) = s.split_once('/').unwrap();
    IpPrefix {
        ip: ip.parse().unwrap(),
        len: len.parse().unwrap(),
    }
}

/// A node recording two namespaces whose interfaces share ifindex 2.
fn header() -> Header {
    let iface = |inode: u64, addr: &str| Interface {
        ifindex: 2,
        name: "eth0".into(),
        mac: Some([2, 0, 0, 0, 0, inode as u8]),
        addresses: vec![addr.into()],
        netns_inode: inode,
    };
    Header {
        node: "node-a".into(),
        interfaces: vec![
            iface(4026532001, "10.0.0.1/24"),
            iface(4026532002, "10.244.1.5/24"),
        ],
        options: AgentOptions {
            netns_inode: None,
            recorded_netns: vec![
                RecordedNetns {
                    inode: 4026532001,
                    path: "/run/netns/node".into(),
                },
                RecordedNetns {
                    inode: 4026532002,
                    path: "/proc/77/ns/net".into(),
                },
            ],
            ..Default::default()
        },
        ..Default::default()
    }
}

fn table(t: u64, pods: &[(u64, &str)]) -> AddressTable {
    let mut namespaces = vec![NamespaceAddresses {
        inode: 4026532001,
        recorded: true,
        addresses: vec![prefix("10.0.0.1/24"), prefix("fd00::1/64")],
    }];
    namespaces.extend(pods.iter().map(|&(inode, addr)| NamespaceAddresses {
        inode,
        recorded: false,
        addresses: vec![prefix(addr)],
    }));
    AddressTable {
        monotonic_ns: t,
        namespaces,
    }
}

fn tables() -> Vec<AddressTable> {
    vec![
        table(1_000, &[(4026532010, "10.244.1.7/24")]),
        table(3_000, &[]),
        table(5_000, &[(4026532011, "10.244.1.8/24")]),
    ]
}

fn event(i: u64) -> PacketEvent {
    PacketEvent {
        ts_ns: 1_000 + i * 10,
        ifindex: 2,
        kind: kind::TCP4,
        seq: i as u32,
        tot_len: 52,
        ihl: 5,
        doff: 8,
        ..Default::default()
    }
}

/// A file of the current version (5 on): the header, then per table 300 events and a clock sample (flushed), and
/// the table; then the end.
fn file() -> Vec<u8> {
    let mut w = TraceWriter::new(Vec::new(), &header()).unwrap();
    for (k, t) in tables().iter().enumerate() {
        for i in 0..300 {
            w.write_event(&event(k as u64 * 300 + i)).unwrap();
        }
        w.write_clock_sample(ClockSample {
            monotonic_ns: t.monotonic_ns,
            monotonic_after_ns: t.monotonic_ns + 40,
            ..Default::default()
        })
        .unwrap();
        w.flush().unwrap();
        w.write_addresses(t).unwrap();
    }
    w.finish(&Footer {
        events: 900,
        ..Default::default()
    })
    .unwrap()
}

#[test]
fn address_tables_and_namespaces_round_trip() {
    let bytes = file();
    assert_eq!(chunks_of(&bytes, ADDRESSES).len(), 3);
    let (events, r) = read_all(&bytes).unwrap();
    assert_eq!(events.len(), 900);
    assert!(r.damage().is_none(), "{:?}", r.damage());
    assert_eq!(r.header(), &header());
    assert_eq!(r.address_tables(), tables());
    assert_eq!(r.clock_samples().len(), 3);
}

#[test]
fn the_addresses_only_pass_reads_no_event_and_sees_every_table() {
    let mut bytes = file();
    // Corrupt every event chunk's payload: a pass that read them would stop at the first.
    for at in chunks_of(&bytes, EVENTS) {
        bytes[at + 16] ^= 0xff;
    }
    let (_, full) = read_all(&bytes).unwrap();
    assert!(full.damage().unwrap().reason.contains("checksum"));
    assert!(
        full.address_tables().is_empty(),
        "the first event chunk comes first"
    );

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("node.tsync");
    std::fs::write(&path, &bytes).unwrap();
    let read = read_address_tables(&path).unwrap();
    assert_eq!(read.tables, tables());
    assert!(read.damage.is_none(), "{:?}", read.damage);

    let mut r = TraceReader::new(Cursor::new(&bytes[..])).unwrap();
    r.only_address_tables();
    let mut chunks_met = 0;
    while let Some(events) = r.next_events().unwrap() {
        assert!(events.is_empty());
        chunks_met += 1;
    }
    assert_eq!(chunks_met, 3);
    assert!(
        r.clock_samples().is_empty(),
        "clock samples are passed over too"
    );
    assert!(r.footer().is_some());
}

#[test]
fn held_addresses_span_the_tables_that_list_them() {
    let held = held_addresses(&tables());
    let pod = |addr: &str| {
        held.iter()
            .filter(|h| h.address == prefix(addr))
            .map(|h| (h.netns_inode, h.recorded, h.from_ns, h.until_ns))
            .collect::<Vec<_>>()
    };
    assert_eq!(pod("10.0.0.1/24"), [(4026532001, true, 1_000, None)]);
    assert_eq!(
        pod("10.244.1.7/24"),
        [(4026532010, false, 1_000, Some(3_000))]
    );
    assert_eq!(pod("10.244.1.8/24"), [(4026532011, false, 5_000, None)]);
}

#[test]
fn an_address_chunk_in_a_version_4_file_is_damage_not_skipped() {
    let v5 = file();
    let at = chunks_of(&v5, ADDRESSES)[0];
    let next = chunks(&v5).into_iter().find(|c| c.0 > at).unwrap().0;
    let address_chunk = &v5[at..next];

    let mut w = TraceWriter::with_version(Vec::new(), &header(), 4).unwrap();
    assert!(
        w.write_addresses(&tables()[0])
            .unwrap_err()
            .to_string()
            .contains("version 4 file cannot hold the node's addresses")
    );
    for i in 0..10 {
        w.write_event(&event(i)).unwrap();
    }
    w.flush().unwrap();
    let v4 = w.finish(&Footer::default()).unwrap();
    let end = *chunks_of(&v4, 5).last().unwrap();
    let mut spliced = v4[..end].to_vec();
    spliced.extend_from_slice(address_chunk);
    spliced.extend_from_slice(&v4[end..]);

    let (events, r) = read_all(&spliced).unwrap();
    assert_eq!(events.len(), 10, "everything before is read");
    let damage = r.damage().unwrap();
    assert_eq!(damage.offset, end as u64);
    assert!(
        damage
            .reason
            .contains("kind 10, which a version 4 file cannot hold"),
        "{damage}"
    );
    // Also in the pass that skips chunks: a kind the version does not hold is never skipped.
    let mut r = TraceReader::new(Cursor::new(&spliced[..])).unwrap();
    r.only_address_tables();
    while r.next_events().unwrap().is_some() {}
    assert_eq!(r.damage().unwrap().offset, end as u64);
}

#[test]
fn an_address_chunk_whose_count_disagrees_is_damage() {
    let mut bytes = file();
    let at = chunks_of(&bytes, ADDRESSES)[1];
    // The count is outside the checksum: 1 namespace, the header says 7.
    bytes[at + 12..at + 16].copy_from_slice(&7u32.to_le_bytes());
    let (_, r) = read_all(&bytes).unwrap();
    let damage = r.damage().unwrap();
    assert_eq!(damage.offset, at as u64);
    assert!(
        damage
            .reason
            .contains("holds 1 namespace(s), its header says 7"),
        "{damage}"
    );
    assert_eq!(r.address_tables(), &tables()[..1]);
}

/// The header as versions 1 to 4 laid it out, spelled out here once more: the reader must keep
/// reading exactly this.
#[derive(Serialize)]
struct HeaderV4 {
    node: String,
    hostname: String,
    boot_id: String,
    kernel_release: String,
    clocksource: String,
    interfaces: Vec<InterfaceV4>,
    start_realtime_ns: i64,
    start_monotonic_ns: u64,
    options: OptionsV4,
}

#[derive(Serialize)]
struct InterfaceV4 {
    ifindex: u32,
    name: String,
    mac: Option<[u8; 6]>,
    addresses: Vec<String>,
}

#[derive(Serialize)]
struct OptionsV4 {
    agent_version: String,
    ring_size: u64,
    all_netns: bool,
    netns_inode: Option<u64>,
    duration_s: Option<f64>,
    /// `ClockSkew`: offset_ns, drift_ppm.
    clock_skew: Option<(i64, f64)>,
    command_line: Vec<String>,
}

#[test]
fn headers_of_versions_1_to_4_read_as_the_agents_own_namespace() {
    let old = HeaderV4 {
        node: "old".into(),
        hostname: "host".into(),
        boot_id: "b".into(),
        kernel_release: "6.1.0".into(),
        clocksource: "tsc".into(),
        interfaces: vec![InterfaceV4 {
            ifindex: 2,
            name: "eth0".into(),
            mac: None,
            addresses: vec!["10.0.0.9/24".into()],
        }],
        start_realtime_ns: 7,
        start_monotonic_ns: 8,
        options: OptionsV4 {
            agent_version: "0.1.0".into(),
            ring_size: 1 << 24,
            all_netns: false,
            netns_inode: Some(4026531840),
            duration_s: Some(2.5),
            clock_skew: Some((-5, 1.5)),
            command_line: vec!["tsync-agent".into()],
        },
    };
    let payload = bincode::serde::encode_to_vec(&old, bincode::config::standard()).unwrap();
    for version in 1..=4u32 {
        let mut bytes = b"TSYNCTRC".to_vec();
        bytes.extend_from_slice(&version.to_le_bytes());
        bytes.extend_from_slice(&0u32.to_le_bytes());
        for word in [1, payload.len() as u32, crc32fast::hash(&payload), 1] {
            bytes.extend_from_slice(&word.to_le_bytes());
        }
        bytes.extend_from_slice(&payload);
        bytes.resize(bytes.len() + (8 - payload.len() % 8) % 8, 0);
        let r = TraceReader::new(Cursor::new(&bytes[..])).unwrap();
        let h = r.header();
        assert_eq!(h.node, "old");
        assert_eq!(h.interfaces[0].addresses, ["10.0.0.9/24"]);
        assert_eq!(h.interfaces[0].netns_inode, 4026531840, "version {version}");
        assert_eq!(h.options.netns_inode, Some(4026531840));
        assert_eq!(h.options.clock_skew.unwrap().offset_ns, -5);
        assert_eq!(
            h.options.recorded_netns,
            [RecordedNetns {
                inode: 4026531840,
                path: "/proc/self/ns/net".into()
            }]
        );
    }

    // And a writer of version 4 writes that layout, leaving out what it cannot hold.
    let mut new = header();
    new.node = "old".into();
    let bytes = TraceWriter::with_version(Vec::new(), &new, 4)
        .unwrap()
        .finish(&Footer::default())
        .unwrap();
    let r = TraceReader::new(Cursor::new(&bytes[..])).unwrap();
    assert_eq!(r.header().interfaces.len(), 2);
    assert!(r.header().interfaces.iter().all(|i| i.netns_inode == 0));
    assert!(r.header().options.recorded_netns.is_empty());
    assert_eq!(r.lost(), &LostCounts::default());
}

/// A reader that counts the bytes it hands out (in `read`, shared with the test).
struct Counting<R> {
    inner: R,
    read: std::rc::Rc<std::cell::Cell<u64>>,
}

impl<R: std::io::Read> std::io::Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.set(self.read.get() + n as u64);
        Ok(n)
    }
}

impl<R: std::io::Seek> std::io::Seek for Counting<R> {
    fn seek(&mut self, pos: std::io::SeekFrom) -> std::io::Result<u64> {
        self.inner.seek(pos)
    }
}

#[test]
fn a_pass_over_a_buffered_file_reads_no_byte_twice() {
    // Many small chunks: 40 flushes of 30 events. A skip that threw the buffer away (a plain
    // seek on a `BufReader`) read a buffer's worth again for every chunk header: here ~40 times
    // the file.
    let mut w = TraceWriter::new(Vec::new(), &header()).unwrap();
    for k in 0..40u64 {
        for i in 0..30 {
            w.write_event(&event(k * 30 + i)).unwrap();
        }
        w.flush().unwrap();
    }
    w.write_addresses(&tables()[0]).unwrap();
    let bytes = w
        .finish(&Footer {
            events: 1200,
            ..Default::default()
        })
        .unwrap();
    assert!(chunks_of(&bytes, EVENTS).len() >= 40);
    let read = std::rc::Rc::new(std::cell::Cell::new(0));
    let counting = Counting {
        inner: Cursor::new(&bytes[..]),
        read: read.clone(),
    };
    let mut r = TraceReader::new(std::io::BufReader::with_capacity(64 << 10, counting)).unwrap();
    r.only_address_tables();
    while r.next_events().unwrap().is_some() {}
    assert_eq!(r.address_tables(), &tables()[..1]);
    let read = read.get();
    assert!(
        read <= bytes.len() as u64,
        "{read} bytes read for a file of {}",
        bytes.len()
    );
}
