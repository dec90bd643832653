//! A stream that starts on the chunks the coarse alignment read gives what reading its file
//! would have given, chunk by chunk, whether the file is read inline or decoded on the pool
//! (ahead, or on request).

use std::path::{Path, PathBuf};

use tsync_common::format::{ClockSample, Footer, Header, TraceWriter};
use tsync_common::{direction, kind};

use super::*;

/// A trace file of chunks of `sizes` events, each after a clock sample that moves the realtime
/// shift by 5 µs; `keep` of its bytes (a file cut short: damaged).
fn trace(dir: &Path, name: &str, sizes: &[usize], keep: f64) -> PathBuf {
    let path = dir.join(name);
    let header = Header {
        node: name.into(),
        start_realtime_ns: 1_000_000_000,
        start_monotonic_ns: 10,
        ..Header::default()
    };
    let mut w = TraceWriter::create(&path, &header).unwrap();
    let mut ts = 1_000_000u64;
    for (c, &n) in sizes.iter().enumerate() {
        w.write_clock_sample(ClockSample {
            monotonic_ns: ts,
            monotonic_raw_ns: ts,
            realtime_ns: ts as i64 + 5_000 * c as i64,
            tsc: 0,
            monotonic_after_ns: ts,
        })
        .unwrap();
        let events: Vec<PacketEvent> = (0..n)
            .map(|i| {
                ts += 1_000;
                PacketEvent {
                    ts_ns: ts,
                    direction: [direction::SEND, direction::RECV][i % 2],
                    kind: kind::UDP4,
                    saddr: [10, 0, 0, c as u8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                    source: i as u16,
                    ..PacketEvent::default()
                }
            })
            .collect();
        w.write_events(&events).unwrap();
        w.flush().unwrap();
    }
    w.finish(&Footer::default()).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..(bytes.len() as f64 * keep) as usize]).unwrap();
    path
}

/// Reads up to `chunks` chunks of `st`'s file into its replay, as the alignment does.
fn read_ahead(st: &mut Stream, chunks: usize) {
    let mut shift = st.file.start_shift();
    for _ in 0..chunks {
        let read = alignment::read(&mut st.file, shift);
        let end = match &read {
            Read::Chunk(k) => {
                shift = k.shift;
                false
            }
            Read::End | Read::Failed(_) => true,
        };
        st.replay.push_back(read);
        if end {
            break;
        }
    }
}

/// Refills `a` and `b` to their ends, checking that each chunk looks the same from both. `b`'s
/// next chunk is asked for ahead every other time (a file decoded on request: the merge's
/// [`requests`] do that).
fn same_chunks(a: &mut Stream, b: &mut Stream) {
    for asked in (0..).map(|k| k % 2 == 0) {
        if asked && b.replay.is_empty() {
            b.file.request_ahead();
        }
        let more = a.refill().unwrap();
        assert_eq!(more, b.refill().unwrap());
        assert_eq!(a.chunk(), b.chunk());
        assert_eq!((a.shift, a.offset), (b.shift, b.offset));
        assert_eq!(a.take_bytes(), b.take_bytes());
        if !more {
            break;
        }
    }
    assert_eq!(a.file.damage(), b.file.damage());
}

#[test]
fn chunks_read_ahead_are_used_as_the_file_would_give_them() {
    let dir = tempfile::tempdir().unwrap();
    let whole = trace(dir.path(), "whole", &[3, 5, 1, 4], 1.0);
    let cut = trace(dir.path(), "cut", &[300, 500, 100, 400], 0.6);
    let pool = Decoders::new(2, hash_keys);
    for path in [&whole, &cut] {
        for demand in [None, Some(Demand::Ahead), Some(Demand::Requested)] {
            let open = || match demand {
                Some(demand) => TraceFile::open_ahead(path, &pool, demand).unwrap(),
                None => TraceFile::open(path).unwrap(),
            };
            // None read ahead, some, all of them, and past the end (a file shorter than the
            // sample).
            for chunks in 0..7 {
                let mut plain = Stream::new(0, TraceFile::open(path).unwrap());
                let mut replayed = Stream::new(0, open());
                replayed.coarse = -7;
                plain.coarse = -7;
                read_ahead(&mut replayed, chunks);
                same_chunks(&mut plain, &mut replayed);
                assert_eq!(replayed.file.damage().is_some(), path == &cut);
            }
        }
    }
}

#[test]
fn an_error_read_ahead_comes_where_the_file_gave_it_and_empty_chunks_count_their_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let path = trace(dir.path(), "t", &[3, 5], 1.0);
    let mut st = Stream::new(0, TraceFile::open(&path).unwrap());
    read_ahead(&mut st, 1);
    let empty = |bytes| {
        Read::Chunk(Kept {
            events: Vec::new(),
            hashes: vec![0; HASH_PADDING],
            shift: 42,
            bytes,
        })
    };
    st.replay.push_back(empty(7));
    st.replay.push_back(empty(3));
    st.replay.push_back(Read::Failed(InputError::io(
        &path,
        std::io::Error::other("gone"),
    )));
    assert!(st.refill().unwrap());
    assert_eq!(st.chunk().0.len(), 3);
    assert_eq!(st.take_bytes(), 3 * tsync_common::EVENT_SIZE as u64);
    // An empty chunk's bytes (a CTF trace's) are counted with the next chunk's, as by the file.
    assert!(st.refill().unwrap() && st.refill().unwrap());
    assert_eq!((st.chunk().0.len(), st.shift), (0, 42));
    assert_eq!(st.take_bytes(), 10);
    let e = st.refill().unwrap_err();
    assert!(e.to_string().contains("gone"), "{e}");
}

#[test]
fn the_sample_is_kept_for_up_to_its_budget_and_is_the_same_on_any_number_of_threads() {
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<PathBuf> = (0..17)
        .map(|k| trace(dir.path(), &format!("n{k}"), &[2, 3 + k], 1.0))
        .collect();
    let kept = |threads: usize| {
        let mut streams: Vec<Stream> = paths
            .iter()
            .map(|p| Stream::new(0, TraceFile::open(p).unwrap()))
            .collect();
        let mut files: Vec<SampleInput<'_>> =
            streams.iter_mut().map(Stream::sample_input).collect();
        alignment::estimate(&mut files, threads);
        let shape = |r: &Read| match r {
            Read::Chunk(k) => (k.events.len(), k.hashes.len(), k.shift, k.bytes),
            Read::End => (0, 0, 0, 1),
            Read::Failed(_) => (0, 0, 0, 2),
        };
        streams
            .iter()
            .map(|st| st.replay.iter().map(shape).collect::<Vec<_>>())
            .collect::<Vec<_>>()
    };
    let one = kept(1);
    // 17 files sample 2^14 events each, and the first 16 keep them (2^18): the last is sampled
    // from a copy of its own, and its stream reads it from the start.
    assert_eq!(one[0].len(), 3, "{:?}", one[0]);
    assert_eq!(one[15][1].0, 18);
    assert_eq!(one[15][2], (0, 0, 0, 1));
    assert!(one[16].is_empty());
    assert_eq!(kept(3), one);
}
