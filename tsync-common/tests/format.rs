//! The trace file format: round trip, and what a reader does with damaged files.
#![cfg(feature = "user")]

use std::io::Cursor;

use proptest::prelude::*;
use tsync_common::PacketEvent;
use tsync_common::format::{
    ClockSample, ClockSkew, EVENTS_PER_CHUNK, Footer, FormatError, Header, KernelClock, LostCounts,
    TraceReader, TraceWriter, VERSION,
};

mod common;
use common::{chunks, chunks_of, read_all};

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

/// A version 2 file (raw records: the layout these tests take apart; version 3 has the same
/// tests in format_v3.rs) with `n` events, flushed every 1000 events, with a clock sample per
/// flush.
fn write_file(n: u64, finish: bool) -> Vec<u8> {
    let mut w = TraceWriter::with_version(Vec::new(), &header(), 2).unwrap();
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
                disk: 0,
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
    chunks(bytes).last().expect("a complete file has chunks").0
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
    chunks_of(bytes, kind)[nth]
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
    for kind in [3u32, 4, 5, 6, 7, 0x5502] {
        let mut bytes = small_file();
        let second = find_chunk(&bytes, 2, 1);
        bytes[second..second + 4].copy_from_slice(&kind.to_le_bytes());
        let (events, r) = read_all(&bytes).unwrap();
        assert_eq!(events.len(), 1000, "kind {kind}");
        assert!(r.damage().is_some(), "kind {kind}: events dropped silently");
    }
}

/// A bracketed sample around monotonic time `t` (ns): raw 1 s behind, bracket `width` ns.
fn bracketed(t: u64, width: u64) -> ClockSample {
    ClockSample {
        monotonic_ns: t,
        monotonic_raw_ns: t - 1_000_000_000 + width / 2,
        realtime_ns: 1_700_000_000_000_000_000 + t as i64,
        tsc: 3 * t,
        monotonic_after_ns: t + width,
    }
}

fn kernel_state(t: u64, freq: i64) -> KernelClock {
    KernelClock {
        monotonic_ns: t,
        freq,
        offset: -1234,
        tick: 10_000,
        status: 0x2001, // STA_PLL | STA_NANO
        maxerror: 16_000,
        state: 0,
    }
}

#[test]
fn version_2_round_trip_keeps_bracketed_samples_and_kernel_clock_states() {
    let mut w = TraceWriter::with_version(Vec::new(), &header(), 2).unwrap();
    let mut samples = Vec::new();
    let mut states = Vec::new();
    for flush in 0..4u64 {
        for i in 0..25u64 {
            let t = 5_000_000_000 + (flush * 25 + i) * 20_000_000;
            w.write_event(&event(flush * 25 + i)).unwrap();
            let s = bracketed(t, 40 + i);
            w.write_clock_sample(s).unwrap();
            samples.push(s);
        }
        // A state at the start, then one per flush (NTP changed the frequency).
        let k = kernel_state(
            5_000_000_000 + flush * 500_000_000,
            -(flush as i64) * 65_536,
        );
        w.write_kernel_clock(k).unwrap();
        states.push(k);
        if flush == 2 {
            // Two changes within one flush period go out in one chunk.
            let k = kernel_state(6_100_000_000, 7);
            w.write_kernel_clock(k).unwrap();
            states.push(k);
        }
        w.flush().unwrap();
    }
    let bytes = w.finish(&Footer::default()).unwrap();
    assert_eq!(&bytes[8..12], &2u32.to_le_bytes(), "version 2 preamble");
    let default = TraceWriter::new(Vec::new(), &header())
        .unwrap()
        .finish(&Footer::default())
        .unwrap();
    assert_eq!(
        &default[8..12],
        &VERSION.to_le_bytes(),
        "version 2 is written on request only"
    );
    let (events, r) = read_all(&bytes).unwrap();
    assert_eq!(events.len(), 100);
    assert_eq!(r.version(), 2);
    assert!(r.samples_bracketed());
    assert_eq!(r.clock_samples(), samples.as_slice());
    assert_eq!(r.kernel_clock(), states.as_slice());
    assert!(r.clock_samples().iter().all(|s| s.bracket_ns() >= 40));
    assert_eq!(r.damage(), None);
    // Kind 6 holds 40-byte samples, kind 7 the states (one chunk per flush).
    let first = find_chunk(&bytes, 6, 0);
    let len = u32::from_le_bytes(bytes[first + 4..first + 8].try_into().unwrap());
    assert_eq!(len, 25 * 40);
    let third_states = find_chunk(&bytes, 7, 2);
    assert_eq!(
        u32::from_le_bytes(
            bytes[third_states + 12..third_states + 16]
                .try_into()
                .unwrap()
        ),
        2
    );
}

/// One chunk as the format lays it out: header, payload, padding to 8 bytes.
fn chunk(kind: u32, payload: &[u8], count: u32) -> Vec<u8> {
    let mut c = Vec::new();
    for word in [kind, payload.len() as u32, crc32fast::hash(payload), count] {
        c.extend_from_slice(&word.to_le_bytes());
    }
    c.extend_from_slice(payload);
    c.resize(c.len() + (8 - payload.len() % 8) % 8, 0);
    c
}

/// A version 1 sample as stored: monotonic, raw, realtime, TSC (32 bytes).
fn v1_sample(mono: u64, raw: u64) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&mono.to_le_bytes());
    b.extend_from_slice(&raw.to_le_bytes());
    b.extend_from_slice(&(1_700_000_000_000_000_000i64 + mono as i64).to_le_bytes());
    b.extend_from_slice(&(2 * mono).to_le_bytes());
    b
}

/// A version 1 file built byte by byte: preamble with version 1, the header chunk (its bincode
/// did not change between versions 1 and 2, so this build's version 2 writer makes it), 10
/// events, and `sample_chunks` kind-3 chunks of two 32-byte samples each, then `extra` chunks and
/// the end.
fn version_1_file(sample_chunks: u64, extra: &[Vec<u8>]) -> Vec<u8> {
    let current = TraceWriter::with_version(Vec::new(), &header(), 2)
        .unwrap()
        .finish(&Footer::default());
    let current = current.unwrap();
    let header_chunk = &current[16..end_chunk_offset(&current)];
    let mut bytes = Vec::new();
    bytes.extend_from_slice(b"TSYNCTRC");
    bytes.extend_from_slice(&1u32.to_le_bytes());
    bytes.extend_from_slice(&0u32.to_le_bytes());
    bytes.extend_from_slice(header_chunk);
    let events: Vec<PacketEvent> = (0..10).map(event).collect();
    bytes.extend(chunk(2, bytemuck::cast_slice(&events), 10));
    for c in 0..sample_chunks {
        let t = 1_000_000_000 + c * 1_000_000_000;
        let mut payload = v1_sample(t, t - 7);
        payload.extend(v1_sample(t + 500_000_000, t + 500_000_000 - 7));
        bytes.extend(chunk(3, &payload, 2));
    }
    for c in extra {
        bytes.extend_from_slice(c);
    }
    // The footer is bincode; take the current writer's end chunk (same in both versions).
    bytes.extend_from_slice(&current[end_chunk_offset(&current)..]);
    bytes
}

#[test]
fn a_version_1_file_still_reads_with_unbracketed_samples() {
    let bytes = version_1_file(3, &[]);
    let (events, r) = read_all(&bytes).unwrap();
    assert_eq!(r.version(), 1);
    assert!(!r.samples_bracketed());
    assert_eq!(r.header(), &header());
    assert_eq!(events.len(), 10);
    assert!(
        events
            .iter()
            .enumerate()
            .all(|(i, e)| *e == event(i as u64))
    );
    assert_eq!(r.damage(), None);
    assert!(r.footer().is_some());
    let samples = r.clock_samples();
    assert_eq!(samples.len(), 6);
    for (i, s) in samples.iter().enumerate() {
        let t = 1_000_000_000 + (i as u64 / 2) * 1_000_000_000 + (i as u64 % 2) * 500_000_000;
        assert_eq!(s.monotonic_ns, t);
        assert_eq!(s.monotonic_after_ns, t, "after == before in version 1");
        assert_eq!(s.bracket_ns(), 0);
        assert_eq!(s.monotonic_raw_ns, t - 7);
        assert_eq!(s.realtime_ns, 1_700_000_000_000_000_000 + t as i64);
        assert_eq!(s.tsc, 2 * t);
    }
    assert!(r.kernel_clock().is_empty());
}

#[test]
fn a_version_1_sample_chunk_with_a_wrong_count_is_damage() {
    let mut bad = chunk(3, &v1_sample(5, 3), 1);
    bad[12..16].copy_from_slice(&2u32.to_le_bytes());
    let bytes = version_1_file(1, &[bad]);
    let (events, r) = read_all(&bytes).unwrap();
    assert_eq!(events.len(), 10);
    assert_eq!(r.clock_samples().len(), 2, "the good chunk before");
    let damage = r.damage().unwrap();
    assert!(
        damage.reason.contains("does not hold 2 records"),
        "{damage}"
    );
}

#[test]
fn version_2_chunks_in_a_version_1_file_are_damage_not_skipped() {
    let sample = bracketed(9_000_000_000, 50);
    let kinds: [(u32, Vec<u8>); 2] = [
        (6, bytemuck::bytes_of(&sample).to_vec()),
        // A kernel-clock payload as a version 2 writer makes it.
        (7, kernel_clock_payload()),
    ];
    for (kind, payload) in kinds {
        let bytes = version_1_file(2, &[chunk(kind, &payload, 1)]);
        let (events, r) = read_all(&bytes).unwrap();
        assert_eq!(events.len(), 10);
        assert_eq!(
            r.clock_samples().len(),
            4,
            "kind {kind}: the samples before"
        );
        assert!(
            r.footer().is_none(),
            "kind {kind}: nothing after the damage is read"
        );
        let damage = r.damage().unwrap_or_else(|| panic!("kind {kind} skipped"));
        assert!(
            damage.reason.contains(&format!("kind {kind}")) && damage.reason.contains("version 1"),
            "{damage}"
        );
    }
}

/// The payload of a kind-7 chunk holding one state, cut out of a file this build writes.
fn kernel_clock_payload() -> Vec<u8> {
    let mut w = TraceWriter::new(Vec::new(), &header()).unwrap();
    w.write_kernel_clock(kernel_state(1, 2)).unwrap();
    let bytes = w.finish(&Footer::default()).unwrap();
    let at = find_chunk(&bytes, 7, 0);
    let len = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
    bytes[at + 16..at + 16 + len].to_vec()
}

#[test]
fn a_version_1_sample_chunk_in_a_version_2_file_is_damage_not_skipped() {
    let mut w = TraceWriter::with_version(Vec::new(), &header(), 2).unwrap();
    w.write_events(&(0..10).map(event).collect::<Vec<_>>())
        .unwrap();
    w.write_clock_sample(bracketed(2_000_000_000, 50)).unwrap();
    let mut bytes = w.finish(&Footer::default()).unwrap();
    let end = end_chunk_offset(&bytes);
    let tail = bytes.split_off(end);
    bytes.extend(chunk(3, &v1_sample(3_000_000_000, 2_000_000_000), 1));
    bytes.extend(tail);
    let (events, r) = read_all(&bytes).unwrap();
    assert_eq!(events.len(), 10);
    assert_eq!(r.clock_samples().len(), 1, "the version 2 sample before it");
    assert!(r.footer().is_none());
    let damage = r.damage().expect("a kind-3 chunk is not skipped");
    assert!(
        damage.reason.contains("kind 3") && damage.reason.contains("version 2"),
        "{damage}"
    );
    assert_eq!(damage.offset, end as u64);
}

proptest! {
    /// Any samples and kernel states, flushed at any points, come back as written.
    #[test]
    fn samples_and_kernel_states_round_trip(
        records in prop::collection::vec(
            (any::<u64>(), any::<u64>(), any::<u16>(), any::<i64>(), any::<i32>(), any::<bool>()),
            0..200,
        ),
    ) {
        let mut w = TraceWriter::new(Vec::new(), &header()).unwrap();
        let (mut samples, mut states) = (Vec::new(), Vec::new());
        for &(t, raw, width, freq, status, flush) in &records {
            let s = ClockSample {
                monotonic_ns: t,
                monotonic_raw_ns: raw,
                realtime_ns: freq,
                tsc: raw ^ t,
                monotonic_after_ns: t.saturating_add(u64::from(width)),
            };
            w.write_clock_sample(s).unwrap();
            samples.push(s);
            if status % 3 == 0 {
                let k = KernelClock { monotonic_ns: t, freq, offset: -freq / 2, tick: raw as i64,
                    status, maxerror: freq ^ 5, state: status / 7 };
                w.write_kernel_clock(k).unwrap();
                states.push(k);
            }
            if flush {
                w.flush().unwrap();
            }
        }
        let bytes = w.finish(&Footer::default()).unwrap();
        let (_, r) = read_all(&bytes).unwrap();
        prop_assert_eq!(r.damage(), None);
        prop_assert_eq!(r.clock_samples(), samples.as_slice());
        prop_assert_eq!(r.kernel_clock(), states.as_slice());
    }
}

fn lost(send: u64, recv: u64, disk: u64) -> LostCounts {
    LostCounts {
        send,
        recv,
        per_cpu: vec![[send, recv]],
        disk,
    }
}

#[test]
fn disk_losses_round_trip_in_version_3_and_count_in_the_total() {
    let mut w = TraceWriter::new(Vec::new(), &header()).unwrap();
    w.write_events(&[event(0)]).unwrap();
    w.write_lost(&lost(1, 2, 30)).unwrap();
    w.flush().unwrap();
    let cut = w.finish(&Footer::default()).unwrap();
    let mut w = TraceWriter::new(Vec::new(), &header()).unwrap();
    w.write_lost(&lost(1, 2, 30)).unwrap();
    let footer = Footer {
        events: 1,
        lost: lost(4, 5, 60),
        ..Default::default()
    };
    let whole = w.finish(&footer).unwrap();
    assert_eq!(&whole[8..12], &VERSION.to_le_bytes());

    let (_, r) = read_all(&cut[..end_chunk_offset(&cut)]).unwrap();
    assert_eq!(r.lost(), &lost(1, 2, 30), "the lost chunk's counts");
    assert_eq!(r.lost().total(), 33);
    assert_eq!(r.lost().kernel(), 3);
    let (_, r) = read_all(&whole).unwrap();
    assert_eq!(r.footer().unwrap(), &footer);
    assert_eq!(r.lost(), &lost(4, 5, 60), "the footer's counts win");
    assert_eq!(r.damage(), None);
}

#[test]
fn older_files_read_no_disk_losses_and_cannot_be_given_any() {
    let mut w = TraceWriter::with_version(Vec::new(), &header(), 2).unwrap();
    w.write_lost(&lost(1, 2, 0)).unwrap();
    let footer = Footer {
        lost: lost(3, 4, 0),
        ..Default::default()
    };
    let bytes = w.finish(&footer).unwrap();
    let (_, r) = read_all(&bytes).unwrap();
    assert_eq!(r.version(), 2);
    assert_eq!(r.footer().unwrap(), &footer);
    assert_eq!(r.lost().disk, 0);
    assert_eq!(r.damage(), None);

    let mut w = TraceWriter::with_version(Vec::new(), &header(), 2).unwrap();
    let err = w.write_lost(&lost(1, 2, 7)).unwrap_err();
    assert!(err.to_string().contains("7 event(s) dropped"), "{err}");
    let err = w
        .finish(&Footer {
            lost: lost(0, 0, 1),
            ..Default::default()
        })
        .unwrap_err();
    assert!(matches!(err, FormatError::Encode(_)), "{err}");
    for version in [0, 1, VERSION + 1] {
        assert!(TraceWriter::with_version(Vec::new(), &header(), version).is_err());
    }
}
