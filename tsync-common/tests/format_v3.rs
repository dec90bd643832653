//! Format versions 3 to 5 (event and clock-sample chunks as compressed columns): exact round
//! trips of any records in each, and the damage semantics of versions 1 and 2 (format.rs) on
//! their chunks.
#![cfg(feature = "user")]

use std::io::Cursor;

use proptest::prelude::*;
use tsync_common::PacketEvent;
use tsync_common::format::{
    ClockSample, Footer, Header, LostCounts, MAX_CHUNK_PAYLOAD, TraceReader, TraceWriter, VERSION,
};

mod common;
use common::{chunks_of, read_all};

const EVENTS: u32 = 8;
const SAMPLES: u32 = 9;

fn header() -> Header {
    Header {
        node: "node-v3".into(),
        ..Header::default()
    }
}

/// A TCP event of one of three flows, its sequence numbers moving as TCP's do.
fn event(i: u64) -> PacketEvent {
    let flow = (i % 3) as u8;
    let mut e = PacketEvent {
        ts_ns: 5_000_000_000 + i * 12_345 + (i * i) % 1000,
        ifindex: 2,
        cpu: (i % 2) as u16,
        direction: flow % 2,
        kind: tsync_common::kind::TCP4,
        network_protocol: tsync_common::ETH_P_IP,
        tot_len: if i.is_multiple_of(4) { 52 } else { 1500 },
        source: 40_000 + u16::from(flow),
        dest: 5201,
        seq: (i as u32 / 3).wrapping_mul(1448),
        ack_seq: 77 + i as u32,
        transport_protocol: tsync_common::IPPROTO_TCP,
        ihl: 5,
        doff: 8,
        tcp_flags: tsync_common::tcp_flag::ACK,
        ..PacketEvent::default()
    };
    e.saddr[..4].copy_from_slice(&[10, 0, 0, 1]);
    e.daddr[..4].copy_from_slice(&[10, 0, 0, 2 + flow]);
    e
}

fn sample(i: u64) -> ClockSample {
    let t = 5_000_000_000 + i * 20_000_000 + i % 7 * 1_000;
    ClockSample {
        monotonic_ns: t,
        monotonic_raw_ns: t - 3_000_000 + i,
        realtime_ns: 1_700_000_000_000_000_000 + t as i64,
        tsc: 3 * t,
        monotonic_after_ns: t + 40 + i % 5,
    }
}

/// 2500 events flushed every 1000 (chunks of 1000, 1000 and 500), with samples and lost counts,
/// in the current format version.
fn small_file() -> Vec<u8> {
    small_file_of(VERSION)
}

/// [`small_file`] in format `version` (3 or later: compressed columns).
fn small_file_of(version: u32) -> Vec<u8> {
    let mut w = TraceWriter::with_version(Vec::new(), &header(), version).unwrap();
    for i in 0..2500u64 {
        w.write_event(&event(i)).unwrap();
        if i % 1000 == 999 || i == 2499 {
            for k in 0..5 {
                w.write_clock_sample(sample(i / 100 + k)).unwrap();
            }
            w.write_lost(&LostCounts {
                send: i,
                disk: 1,
                ..LostCounts::default()
            })
            .unwrap();
            w.flush().unwrap();
        }
    }
    w.finish(&Footer {
        events: 2500,
        ..Footer::default()
    })
    .unwrap()
}

/// Replaces the payload of the chunk at `at` (keeping its kind and count, fixing its length
/// and checksum): what a writer with a bug, or a forger, could produce.
fn replace_payload(bytes: &[u8], at: usize, payload: &[u8]) -> Vec<u8> {
    let len = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
    let end = at + 16 + len + (8 - len % 8) % 8;
    let mut out = bytes[..at + 4].to_vec();
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    out.extend_from_slice(&bytes[at + 12..at + 16]);
    out.extend_from_slice(payload);
    out.resize(out.len() + (8 - payload.len() % 8) % 8, 0);
    out.extend_from_slice(&bytes[end..]);
    out
}

fn payload(bytes: &[u8], at: usize) -> &[u8] {
    let len = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
    &bytes[at + 16..at + 16 + len]
}

/// Every version written as compressed columns.
const COLUMNAR: [u32; 4] = [3, 4, 5, 6];
const _: () = assert!(COLUMNAR[COLUMNAR.len() - 1] == VERSION);

#[test]
fn versions_3_to_5_are_written_as_compressed_chunks_and_read_back_whole() {
    for version in COLUMNAR {
        compressed_chunks_read_back_whole(version);
    }
}

fn compressed_chunks_read_back_whole(version: u32) {
    let bytes = small_file_of(version);
    assert_eq!(&bytes[8..12], &version.to_le_bytes());
    assert_eq!(chunks_of(&bytes, EVENTS).len(), 3, "one chunk per flush");
    assert_eq!(chunks_of(&bytes, SAMPLES).len(), 3);
    assert!(chunks_of(&bytes, 2).is_empty() && chunks_of(&bytes, 6).is_empty());
    let (events, r) = read_all(&bytes).unwrap();
    assert_eq!(r.version(), version);
    assert!(r.samples_bracketed());
    assert_eq!(events.len(), 2500);
    assert!(
        events
            .iter()
            .enumerate()
            .all(|(i, e)| *e == event(i as u64))
    );
    let samples: Vec<_> = [9, 19, 24]
        .iter()
        .flat_map(|&base| (0..5).map(move |k| sample(base + k)))
        .collect();
    assert_eq!(r.clock_samples(), samples.as_slice());
    assert_eq!(r.footer().unwrap().events, 2500);
    assert_eq!(r.lost().disk, 0, "the footer's counts win");
    assert_eq!(r.damage(), None);
    assert!(
        bytes.len() < 2500 * 10,
        "{} bytes: regular traffic compresses",
        bytes.len()
    );
}

#[test]
fn a_flush_writes_what_is_pending_as_a_smaller_chunk() {
    let mut w = TraceWriter::new(Vec::new(), &header()).unwrap();
    w.write_events(&(0..7).map(event).collect::<Vec<_>>())
        .unwrap();
    w.flush().unwrap();
    w.write_event(&event(7)).unwrap();
    let bytes = w.finish(&Footer::default()).unwrap();
    let chunks = chunks_of(&bytes, EVENTS);
    assert_eq!(chunks.len(), 2);
    let count = |at: usize| u32::from_le_bytes(bytes[at + 12..at + 16].try_into().unwrap());
    assert_eq!((count(chunks[0]), count(chunks[1])), (7, 1));
    let (events, _) = read_all(&bytes).unwrap();
    assert!(
        events.len() == 8
            && events
                .iter()
                .enumerate()
                .all(|(i, e)| *e == event(i as u64))
    );
}

#[test]
fn whole_chunks_are_written_as_they_come_and_the_rest_waits() {
    let events: Vec<PacketEvent> = (0..10_000).map(event).collect();
    let mut w = TraceWriter::new(Vec::new(), &header()).unwrap();
    w.write_event(&events[0]).unwrap();
    w.write_events(&events[1..5000]).unwrap();
    w.write_events(&events[5000..]).unwrap();
    let bytes = w.finish(&Footer::default()).unwrap();
    let chunks = chunks_of(&bytes, EVENTS);
    let count = |at: usize| u32::from_le_bytes(bytes[at + 12..at + 16].try_into().unwrap());
    let counts: Vec<u32> = chunks.iter().map(|&at| count(at)).collect();
    assert_eq!(counts, [4096, 4096, 1808]);
    let (back, r) = read_all(&bytes).unwrap();
    assert_eq!(r.damage(), None);
    assert_eq!(back, events);
    // Nothing pending: whole chunks straight from the slice, the rest buffered.
    let mut w = TraceWriter::new(Vec::new(), &header()).unwrap();
    w.write_events(&events).unwrap();
    assert_eq!(w.events_written(), 10_000);
    let bytes = w.finish(&Footer::default()).unwrap();
    let counts: Vec<u32> = chunks_of(&bytes, EVENTS)
        .iter()
        .map(|&at| count(at))
        .collect();
    assert_eq!(counts, [4096, 4096, 1808]);
    assert_eq!(read_all(&bytes).unwrap().0, events);
}

#[test]
fn the_first_pass_skips_event_chunks_and_keeps_the_samples() {
    let bytes = small_file();
    let mut r = TraceReader::new(Cursor::new(bytes.as_slice())).unwrap();
    r.skip_events();
    let mut chunks = 0;
    while let Some(events) = r.next_events().unwrap() {
        assert!(events.is_empty());
        chunks += 1;
    }
    assert_eq!(chunks, 3);
    assert_eq!(r.clock_samples().len(), 15);
    assert!(r.footer().is_some() && r.damage().is_none());
}

#[test]
fn a_corrupt_chunk_with_a_right_checksum_is_damage_with_a_reason() {
    let bytes = small_file();
    let second = chunks_of(&bytes, EVENTS)[1];
    // (A frame changed inside can still decompress, to other columns: only the checksum
    // catches that, as it catches any other change of a chunk.)
    let original = payload(&bytes, second).to_vec();
    let mut two_frames = original.clone();
    two_frames.extend_from_slice(&original);
    let cases: [(&str, Vec<u8>); 4] = [
        ("not zstd", b"definitely not a zstd frame".to_vec()),
        ("cut", original[..original.len() - 3].to_vec()),
        ("two frames", two_frames),
        ("empty", Vec::new()),
    ];
    for (what, payload) in cases {
        let corrupt = replace_payload(&bytes, second, &payload);
        let (events, r) = read_all(&corrupt).unwrap();
        assert_eq!(events.len(), 1000, "{what}");
        assert!(
            events
                .iter()
                .enumerate()
                .all(|(i, e)| *e == event(i as u64)),
            "{what}"
        );
        let damage = r.damage().unwrap_or_else(|| panic!("{what}: no damage"));
        assert_eq!(damage.offset, second as u64, "{what}");
        assert!(damage.reason.contains("chunk"), "{what}: {damage}");
        assert!(r.footer().is_none(), "{what}: nothing after the damage");
    }
}

#[test]
fn a_chunk_claiming_a_huge_decompressed_size_is_refused_before_allocating() {
    let bytes = small_file();
    let second = chunks_of(&bytes, EVENTS)[1];
    // A frame that declares 2³⁶ bytes (64 GiB) of content: magic, frame header descriptor
    // with an 8-byte content size and single segment, the size, then an empty raw block.
    let mut frame = vec![0x28, 0xb5, 0x2f, 0xfd, 0xe0];
    frame.extend_from_slice(&(1u64 << 36).to_le_bytes());
    frame.extend_from_slice(&[0x01, 0x00, 0x00]);
    let corrupt = replace_payload(&bytes, second, &frame);
    let (events, r) = read_all(&corrupt).unwrap();
    assert_eq!(events.len(), 1000);
    let damage = r.damage().unwrap();
    assert!(
        damage.reason.contains("claims 68719476736 bytes"),
        "{damage}"
    );
}

#[test]
fn a_huge_record_count_is_refused_before_allocating() {
    let mut bytes = small_file();
    let second = chunks_of(&bytes, EVENTS)[1];
    bytes[second + 12..second + 16].copy_from_slice(&u32::MAX.to_le_bytes());
    let (events, r) = read_all(&bytes).unwrap();
    assert_eq!(events.len(), 1000);
    let damage = r.damage().unwrap();
    assert!(
        damage.reason.contains("more than a chunk can hold"),
        "{damage}"
    );
    assert!(u64::from(u32::MAX) * 80 > u64::from(MAX_CHUNK_PAYLOAD));
}

#[test]
fn a_wrong_record_count_is_damage() {
    for count in [0u32, 999, 1001] {
        let mut bytes = small_file();
        let second = chunks_of(&bytes, EVENTS)[1];
        bytes[second + 12..second + 16].copy_from_slice(&count.to_le_bytes());
        let (events, r) = read_all(&bytes).unwrap();
        assert_eq!(events.len(), 1000, "count {count}");
        assert!(r.damage().is_some(), "count {count}");
    }
    let mut bytes = small_file();
    let samples = chunks_of(&bytes, SAMPLES)[0];
    bytes[samples + 12..samples + 16].copy_from_slice(&6u32.to_le_bytes());
    let (_, r) = read_all(&bytes).unwrap();
    assert!(r.clock_samples().is_empty(), "no sample of a damaged chunk");
    assert!(r.damage().unwrap().reason.contains("clock-sample"));
}

#[test]
fn chunks_relabelled_as_another_kind_are_damage_not_skipped() {
    // 2 and 6 are the raw chunks of version 2, which a version 3 file cannot hold.
    for kind in [2u32, 3, 4, 5, 6, 7, 9, 10, 0x5502] {
        let mut bytes = small_file();
        let second = chunks_of(&bytes, EVENTS)[1];
        bytes[second..second + 4].copy_from_slice(&kind.to_le_bytes());
        let (events, r) = read_all(&bytes).unwrap();
        assert_eq!(events.len(), 1000, "kind {kind}");
        assert!(r.damage().is_some(), "kind {kind}: events dropped silently");
    }
}

#[test]
fn compressed_chunks_in_a_version_2_file_are_damage_not_skipped() {
    let v3 = small_file();
    let packed = chunks_of(&v3, EVENTS)[0];
    let mut w = TraceWriter::with_version(Vec::new(), &header(), 2).unwrap();
    w.write_events(&(0..10).map(event).collect::<Vec<_>>())
        .unwrap();
    let mut bytes = w.finish(&Footer::default()).unwrap();
    let end = chunks_of(&bytes, 5)[0];
    let tail = bytes.split_off(end);
    let len = u32::from_le_bytes(v3[packed + 4..packed + 8].try_into().unwrap()) as usize;
    bytes.extend_from_slice(&v3[packed..packed + 16 + len + (8 - len % 8) % 8]);
    bytes.extend(tail);
    let (events, r) = read_all(&bytes).unwrap();
    assert_eq!(events.len(), 10);
    let damage = r.damage().expect("a kind-8 chunk is not skipped");
    assert!(damage.reason.contains("kind 8"), "{damage}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Wherever a version 3 file is cut, the reader yields exactly the events of the complete
    /// chunks before the cut, and accounts for every byte after them.
    #[test]
    fn any_cut_yields_whole_chunks_and_accounts_for_the_rest(cut_at in 0.0f64..1.0) {
        let bytes = small_file();
        let first = chunks_of(&bytes, EVENTS)[0];
        let cut = first + ((bytes.len() - first) as f64 * cut_at) as usize;
        let (events, r) = read_all(&bytes[..cut]).unwrap();
        prop_assert!([0, 1000, 2000, 2500].contains(&events.len()), "{}", events.len());
        prop_assert!(events.iter().enumerate().all(|(i, e)| *e == event(i as u64)));
        let damage = r.damage().expect("a cut file is reported");
        prop_assert_eq!(damage.offset + damage.bytes_discarded, cut as u64);
        prop_assert!(r.footer().is_none());
    }

    /// One flipped byte anywhere after the header: no panic, a prefix of the events, and damage
    /// reported whenever fewer than all of them come back.
    #[test]
    fn any_flipped_byte_is_caught(at in 0.0f64..1.0, mask in 1u8..=255) {
        let mut bytes = small_file();
        let first = chunks_of(&bytes, EVENTS)[0];
        let i = first + ((bytes.len() - first) as f64 * at) as usize;
        bytes[i] ^= mask;
        let (events, r) = read_all(&bytes).unwrap();
        prop_assert!(events.iter().enumerate().all(|(i, e)| *e == event(i as u64)));
        if events.len() < 2500 {
            prop_assert!(r.damage().is_some(), "{} events and no damage", events.len());
        }
    }

    /// Any events (every field arbitrary) and samples, written in any pieces and flushed at any
    /// points, come back exactly.
    #[test]
    fn any_records_round_trip_exactly(
        raw in prop::collection::vec(any::<[u8; 80]>(), 0..300),
        samples in prop::collection::vec(any::<[u64; 5]>(), 0..60),
        cuts in prop::collection::vec(0usize..300, 0..6),
        level in prop::sample::select(vec![-5, 1, 3]),
        version in prop::sample::select(COLUMNAR.to_vec()),
    ) {
        let events: Vec<PacketEvent> = raw.iter().map(|b| bytemuck::pod_read_unaligned(b)).collect();
        let samples: Vec<ClockSample> = samples
            .iter()
            .map(|s| ClockSample {
                monotonic_ns: s[0],
                monotonic_raw_ns: s[1],
                realtime_ns: s[2] as i64,
                tsc: s[3],
                monotonic_after_ns: s[4],
            })
            .collect();
        let mut w = TraceWriter::with_version(Vec::new(), &header(), version).unwrap();
        w.set_compression_level(level).unwrap();
        let mut at = 0;
        let mut cuts = cuts.clone();
        cuts.push(events.len());
        cuts.sort_unstable();
        for (k, &cut) in cuts.iter().enumerate() {
            let cut = cut.min(events.len()).max(at);
            w.write_events(&events[at..cut]).unwrap();
            if let Some(s) = samples.get(k * 10..(k * 10 + 10).min(samples.len())) {
                for &s in s {
                    w.write_clock_sample(s).unwrap();
                }
            }
            w.flush().unwrap();
            at = cut;
        }
        for &s in samples.iter().skip(cuts.len() * 10) {
            w.write_clock_sample(s).unwrap();
        }
        let bytes = w.finish(&Footer::default()).unwrap();
        let (back, r) = read_all(&bytes).unwrap();
        prop_assert_eq!(r.damage(), None);
        prop_assert_eq!(back, events);
        prop_assert_eq!(r.clock_samples(), samples.as_slice());
    }

    /// Events of few flows with many fields alike (what compresses), arbitrary otherwise: their
    /// sequence numbers, lengths and flags exercise the flow expectations, every CPU and header
    /// length the narrow and the wide columns; the event flags (per flow in version 5: a flow
    /// whose events differ in them is two) and TTLs (mostly a flow's last) its new columns.
    #[test]
    fn flows_of_tcp_events_round_trip_exactly(
        steps in prop::collection::vec(
            (
                (0usize..4, any::<u16>(), any::<u32>(), any::<u16>()),
                (0u8..32, any::<u8>(), any::<bool>()),
                (prop::sample::select(vec![0u8, 0, 0, 1, 0x80]), prop::sample::select(vec![64u8, 64, 63, 0, 255])),
            ),
            1..400,
        ),
        version in prop::sample::select(COLUMNAR.to_vec()),
    ) {
        let mut events = Vec::new();
        for (i, &((flow, cpu, seq, len), (offsets, flags, jump), (event_flags, ttl))) in
            steps.iter().enumerate()
        {
            let mut e = event(flow as u64);
            e.ts_ns = if jump { u64::MAX - i as u64 } else { 1_000 * i as u64 };
            e.cpu = cpu % if jump { 4096 } else { 4 };
            e.seq = if jump { seq } else { e.seq.wrapping_add(i as u32 * 1448) };
            e.tot_len = len;
            (e.ihl, e.doff) = (offsets % 16, offsets);
            e.tcp_flags = flags;
            (e.flags, e.ttl) = (event_flags, ttl);
            events.push(e);
        }
        let mut w = TraceWriter::with_version(Vec::new(), &header(), version).unwrap();
        w.write_events(&events).unwrap();
        let bytes = w.finish(&Footer::default()).unwrap();
        let (back, r) = read_all(&bytes).unwrap();
        prop_assert_eq!(r.damage(), None);
        prop_assert_eq!(back, events);
    }
}
