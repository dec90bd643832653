//! Trace files of format 5 and of a later format given together: their hashed UDP digests are
//! computed otherwise (format 6 hashes the first 32 payload bytes with another function), so
//! `sync` says that their datagrams cannot match, and which files are which.

use std::path::{Path, PathBuf};

use tsync_analyze::{InputSet, SyncOptions, sync};
use tsync_common::format::{ClockSample, Footer, Header, TraceWriter, VERSION};

const _: () = assert!(VERSION >= 6);
use tsync_common::{PacketEvent, direction, kind};

/// One datagram per millisecond from 10.0.0.1 to 10.0.0.2, seen in `dir`.
fn datagrams(dir: u8) -> Vec<PacketEvent> {
    (0..200u64)
        .map(|i| PacketEvent {
            ts_ns: 1_000_000_000 + i * 1_000_000 + if dir == direction::RECV { 50_000 } else { 0 },
            kind: kind::UDP4_HASHED,
            direction: dir,
            ifindex: 2,
            network_protocol: tsync_common::ETH_P_IP,
            saddr: [10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            daddr: [10, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            source: 4000,
            dest: 53,
            tot_len: 20 + 8 + 8,
            transport_protocol: tsync_common::IPPROTO_UDP,
            ihl: 5,
            udp_len: 16,
            udp_data: tsync_common::udp_hashed_data(&i.to_le_bytes()),
            ttl: 64,
            ..PacketEvent::default()
        })
        .collect()
}

fn write(path: &Path, node: &str, version: u32, events: &[PacketEvent]) {
    let header = Header {
        node: node.into(),
        start_realtime_ns: 1_700_000_000_000_000_000,
        start_monotonic_ns: 0,
        ..Header::default()
    };
    let mut w =
        TraceWriter::with_version(std::fs::File::create(path).unwrap(), &header, version).unwrap();
    w.write_clock_sample(ClockSample {
        realtime_ns: 1_700_000_000_000_000_000,
        ..ClockSample::default()
    })
    .unwrap();
    w.write_events(events).unwrap();
    w.finish(&Footer::default()).unwrap();
}

fn warnings(versions: [u32; 2]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<PathBuf> = ["a", "b"].iter().map(|n| dir.path().join(n)).collect();
    write(&paths[0], "a", versions[0], &datagrams(direction::SEND));
    write(&paths[1], "b", versions[1], &datagrams(direction::RECV));
    let inputs = InputSet::open(&paths).unwrap();
    let r = sync(&inputs, &SyncOptions::default(), &mut |_| {}).unwrap();
    r.warnings.join("\n")
}

#[test]
fn format_5_with_a_later_format_is_warned_about() {
    let all = warnings([5, VERSION]);
    assert!(
        all.contains("a: format 5") && all.contains("hashes UDP payloads otherwise"),
        "{all}"
    );
    assert!(all.contains("/b (format"), "{all}");
}

#[test]
fn files_of_one_format_are_not() {
    for v in [5, VERSION] {
        let all = warnings([v, v]);
        assert!(!all.contains("hashes UDP payloads otherwise"), "{all}");
    }
}
