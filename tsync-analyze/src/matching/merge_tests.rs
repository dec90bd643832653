//! A stream gives what reading its file gives, chunk by chunk, whether the file is read inline or
//! decoded on the pool (ahead, or on request).

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

/// Refills `a` and `b` to their ends, checking that each chunk looks the same from both. `b`'s
/// next chunk is asked for ahead every other time (a file decoded on request: the merge's
/// [`requests`] do that).
fn same_chunks(a: &mut Stream, b: &mut Stream) {
    for asked in (0..).map(|k| k % 2 == 0) {
        if asked {
            b.file.request_ahead();
        }
        let more = a.refill().unwrap();
        assert_eq!(more, b.refill().unwrap());
        assert_eq!(a.chunk(), b.chunk());
        assert_eq!((a.shift, a.offset), (b.shift, b.offset));
        assert_eq!(a.file.chunk_bytes(), b.file.chunk_bytes());
        if !more {
            break;
        }
    }
    assert_eq!(a.file.damage(), b.file.damage());
}

#[test]
fn chunks_decoded_on_the_pool_are_those_the_file_gives() {
    let dir = tempfile::tempdir().unwrap();
    let whole = trace(dir.path(), "whole", &[3, 5, 1, 4], 1.0);
    let cut = trace(dir.path(), "cut", &[300, 500, 100, 400], 0.6);
    let pool = Decoders::new(2, hash_keys);
    for path in [&whole, &cut] {
        for demand in [None, Some(Demand::Ahead), Some(Demand::Requested)] {
            let mut plain = Stream::new(0, TraceFile::open(path).unwrap());
            let mut pooled = Stream::new(
                0,
                match demand {
                    Some(demand) => TraceFile::open_ahead(path, &pool, demand).unwrap(),
                    None => TraceFile::open(path).unwrap(),
                },
            );
            pooled.coarse = -7;
            plain.coarse = -7;
            same_chunks(&mut plain, &mut pooled);
            assert_eq!(pooled.file.damage().is_some(), path == &cut);
        }
    }
}
