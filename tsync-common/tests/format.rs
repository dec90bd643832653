//! The trace file format: round trip, and what a reader does with damaged files.
#![cfg(feature = "user")]

use std::io::Cursor;

use proptest::prelude::*;
use tsync_common::PacketEvent;
use tsync_common::format::{
    ClockSample, ClockSkew, EVENTS_PER_CHUNK, Footer, FormatError, Header, LostCounts, TraceReader,
    TraceWriter,
};

fn header() -> Header {
    Header {
        node: "node-a".into(),
        hostname: "host".into(),
        boot_id: "b0".into(),
        kernel_release: "6.18.0".into(),
        clocksource: "tsc".into(),
        start_realtime_ns: 1_700_000_000_000_000_000,
        start_monotonic_ns: 42,
        options: tsync_common::format::AgentOptions {
            clock_skew: Some(ClockSkew {
                offset_ns: -5,
                drift_ppm: 12.5,
            }),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn event(i: u64) -> PacketEvent {
    PacketEvent {
        ts_ns: 1000 + i,
        seq: i as u32,
        kind: tsync_common::kind::TCP4,
        ..Default::default()
    }
}

/// A file with `n` events, flushed every 1000 events, with a clock sample per flush.
fn write_file(n: u64, finish: bool) -> Vec<u8> {
    let mut w = TraceWriter::new(Vec::new(), &header()).unwrap();
    for i in 0..n {
        w.write_event(&event(i)).unwrap();
        if i % 1000 == 999 {
            w.write_clock_sample(ClockSample {
                monotonic_ns: i,
                ..Default::default()
            })
            .unwrap();
            w.write_lost(&LostCounts {
                send: i,
                recv: 1,
                per_cpu: vec![[i, 1]],
            })
            .unwrap();
            w.flush().unwrap();
        }
    }
    let footer = Footer {
        events: n,
        ..Default::default()
    };
    let bytes = w.finish(&footer).unwrap();
    if finish {
        bytes
    } else {
        // What a killed agent leaves behind: everything but the end chunk.
        bytes[..end_chunk_offset(&bytes)].to_vec()
    }
}

/// Offset of the last chunk (the end chunk) of a complete file.
fn end_chunk_offset(bytes: &[u8]) -> usize {
    let mut off = 16;
    let mut last = off;
    while off < bytes.len() {
        last = off;
        let len = u32::from_le_bytes(bytes[off + 4..off + 8].try_into().unwrap()) as usize;
        off += 16 + len + (8 - len % 8) % 8;
    }
    last
}

/// Everything a reader yields from a file, and the reader for its final state.
type ReadBack<'a> = (Vec<PacketEvent>, TraceReader<Cursor<&'a [u8]>>);

fn read_all(bytes: &[u8]) -> Result<ReadBack<'_>, FormatError> {
    let mut r = TraceReader::new(Cursor::new(bytes))?;
    let mut events = Vec::new();
    while let Some(chunk) = r.next_events()? {
        events.extend_from_slice(chunk);
    }
    Ok((events, r))
}

#[test]
fn round_trip_keeps_everything() {
    let n = 3 * EVENTS_PER_CHUNK as u64 + 17;
    let bytes = write_file(n, true);
    let (events, r) = read_all(&bytes).unwrap();
    assert_eq!(r.header(), &header());
    assert_eq!(events.len() as u64, n);
    assert!(
        events
            .iter()
            .enumerate()
            .all(|(i, e)| *e == event(i as u64))
    );
    assert_eq!(r.clock_samples().len() as u64, n / 1000);
    assert_eq!(r.footer().unwrap().events, n);
    assert_eq!(r.damage(), None);
}

#[test]
fn file_without_end_chunk_is_read_whole_and_reported() {
    let bytes = write_file(2500, false);
    let (events, r) = read_all(&bytes).unwrap();
    assert_eq!(events.len(), 2500);
    assert!(r.footer().is_none());
    let damage = r.damage().expect("a missing end chunk is reported");
    assert_eq!(damage.bytes_discarded, 0);
    assert!(damage.reason.contains("cut short"), "{damage}");
    // The lost counters of the last complete chunk survive.
    assert_eq!(r.lost().send, 1999);
}

#[test]
fn corrupt_chunk_stops_reading_there() {
    let bytes = write_file(5000, true);
    // Flip one byte inside the second event chunk's payload (events 1000..2000).
    let mut corrupt = bytes.clone();
    let (_, clean) = read_all(&bytes).unwrap();
    assert!(clean.damage().is_none());
    let second_chunk = find_chunk(&corrupt, 2, 1);
    corrupt[second_chunk + 16 + 100] ^= 0x55;
    let (events, r) = read_all(&corrupt).unwrap();
    assert_eq!(
        events.len(),
        1000,
        "only the chunk before the damage is read"
    );
    let damage = r.damage().unwrap();
    assert!(damage.reason.contains("checksum"), "{damage}");
    assert_eq!(damage.offset, second_chunk as u64);
    assert_eq!(
        damage.bytes_discarded,
        (corrupt.len() - second_chunk) as u64
    );
    assert!(r.footer().is_none(), "nothing past the damage is read");
}

/// Offset of the `nth` (0-based) chunk of `kind`.
fn find_chunk(bytes: &[u8], kind: u32, nth: usize) -> usize {
    let mut off = 16;
    let mut seen = 0;
    loop {
        let k = u32::from_le_bytes(bytes[off..off + 4].try_into().unwrap());
        let len = u32::from_le_bytes(bytes[off + 4..off + 8].try_into().unwrap()) as usize;
        if k == kind {
            if seen == nth {
                return off;
            }
            seen += 1;
        }
        off += 16 + len + (8 - len % 8) % 8;
    }
}

#[test]
fn corrupt_length_field_is_damage_not_a_huge_allocation() {
    let mut bytes = write_file(1500, true);
    let second = find_chunk(&bytes, 2, 1);
    bytes[second + 4..second + 8].copy_from_slice(&u32::MAX.to_le_bytes());
    let (events, r) = read_all(&bytes).unwrap();
    assert_eq!(events.len(), 1000);
    assert!(r.damage().unwrap().reason.contains("implausible"));
}

#[test]
fn wrong_magic_is_not_a_trace() {
    let mut bytes = write_file(10, true);
    bytes[0] = b'X';
    assert!(matches!(
        TraceReader::new(Cursor::new(&bytes)),
        Err(FormatError::NotATrace)
    ));
    assert!(matches!(
        TraceReader::new(Cursor::new(b"0 1 2.0 3.0\n")),
        Err(FormatError::NotATrace)
    ));
    assert!(matches!(
        TraceReader::new(Cursor::new(b"")),
        Err(FormatError::NotATrace)
    ));
}

#[test]
fn future_version_is_refused_with_upgrade_hint() {
    let mut bytes = write_file(10, true);
    bytes[8..12].copy_from_slice(&99u32.to_le_bytes());
    let err = TraceReader::new(Cursor::new(&bytes)).err().unwrap();
    assert!(matches!(err, FormatError::FutureVersion { found: 99, .. }));
    assert!(err.to_string().contains("upgrade"), "{err}");
}

#[test]
fn damaged_header_is_an_error() {
    let mut bytes = write_file(10, true);
    bytes[16 + 16 + 2] ^= 0xff;
    let err = TraceReader::new(Cursor::new(&bytes)).err().unwrap();
    assert!(matches!(err, FormatError::Header(_)), "{err}");
}

#[test]
fn created_file_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.tsync");
    std::fs::write(&path, b"old").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut w = TraceWriter::create(&path, &header()).unwrap();
    w.write_event(&event(1)).unwrap();
    w.finish(&Footer::default()).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let mut r = TraceReader::open(&path).unwrap();
    assert_eq!(r.next_events().unwrap().unwrap(), &[event(1)]);
}

#[test]
fn clock_skew_is_the_documented_linear_map() {
    let skew = ClockSkew {
        offset_ns: -50_000_000,
        drift_ppm: 100.0,
    };
    assert_eq!(
        skew.apply(1_000_000_000_000),
        1_000_000_000_000 - 50_000_000 + 100_000_000
    );
    assert_eq!(ClockSkew::default().apply(123), 123);
    assert_eq!(skew.apply(0), 0, "saturates instead of wrapping below zero");
}

proptest! {
    /// Cutting a file anywhere never panics, never yields an event that was not written, yields
    /// whole chunks only, and always reports the cut.
    #[test]
    fn any_cut_reads_a_prefix_and_reports(cut in 0usize..60_000) {
        let bytes = write_file(2500, true);
        let cut = cut.min(bytes.len() - 1);
        match read_all(&bytes[..cut]) {
            Ok((events, r)) => {
                prop_assert!(events.iter().enumerate().all(|(i, e)| *e == event(i as u64)));
                prop_assert!(events.len() % 1000 == 0 || events.len() == 2500);
                prop_assert!(r.damage().is_some());
            }
            Err(FormatError::NotATrace) | Err(FormatError::Header(_)) => prop_assert!(cut < 200),
            Err(e) => prop_assert!(false, "unexpected error {e}"),
        }
    }
}

/// A file of 2500 events in three event chunks, with clock-sample and lost chunks between them.
fn small_file() -> Vec<u8> {
    write_file(2500, true)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Wherever a file is cut, the reader yields exactly the events of the complete chunks before
    /// the cut, and accounts for every byte after them.
    #[test]
    fn any_cut_yields_a_prefix_and_accounts_for_the_rest(cut_at in 0.0f64..1.0) {
        let bytes = small_file();
        let header_end = find_chunk(&bytes, 2, 0);
        let cut = header_end + ((bytes.len() - header_end) as f64 * cut_at) as usize;
        let (events, r) = read_all(&bytes[..cut]).unwrap();
        prop_assert!(events.iter().enumerate().all(|(i, e)| *e == event(i as u64)));
        let damage = r.damage().expect("a cut file is reported");
        prop_assert_eq!(damage.offset + damage.bytes_discarded, cut as u64);
        prop_assert!(r.footer().is_none());
    }

    /// One flipped byte anywhere after the header: the reader never panics, yields a prefix of the
    /// events, and reports damage whenever it yields fewer than all of them.
    #[test]
    fn any_flipped_byte_is_caught(at in 0.0f64..1.0, mask in 1u8..=255) {
        let mut bytes = small_file();
        let header_end = find_chunk(&bytes, 2, 0);
        let i = header_end + ((bytes.len() - header_end) as f64 * at) as usize;
        bytes[i] ^= mask;
        let (events, r) = read_all(&bytes).unwrap();
        prop_assert!(events.iter().enumerate().all(|(i, e)| *e == event(i as u64)));
        if events.len() < 2500 {
            prop_assert!(r.damage().is_some(), "{} events and no damage", events.len());
        }
    }
}

#[test]
fn event_chunk_with_a_wrong_record_count_is_damage() {
    let mut bytes = small_file();
    let second = find_chunk(&bytes, 2, 1);
    // The count field is not covered by the checksum.
    bytes[second + 12..second + 16].copy_from_slice(&999u32.to_le_bytes());
    let (events, r) = read_all(&bytes).unwrap();
    assert_eq!(events.len(), 1000);
    let damage = r.damage().unwrap();
    assert!(
        damage.reason.contains("does not hold 999 records"),
        "{damage}"
    );
    assert_eq!(damage.offset, second as u64);
}

#[test]
fn event_chunk_relabelled_as_another_kind_is_damage_not_skipped() {
    for kind in [3u32, 4, 5, 6, 0x5502] {
        let mut bytes = small_file();
        let second = find_chunk(&bytes, 2, 1);
        bytes[second..second + 4].copy_from_slice(&kind.to_le_bytes());
        let (events, r) = read_all(&bytes).unwrap();
        assert_eq!(events.len(), 1000, "kind {kind}");
        assert!(r.damage().is_some(), "kind {kind}: events dropped silently");
    }
}
