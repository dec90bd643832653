//! Trace file speed, format version 2 (raw records) against 3 (columns + zstd), in the same run:
//! decoding (events per second, from memory: what the analyzer's reading costs beyond the
//! kernel's copy) and encoding (time per event of `TraceWriter`, what the agent pays).
//!
//! ```text
//! cargo bench -p tsync-common --features user --bench format
//! TSYNC_BENCH_TRACE=target/demo/7/node-0.tsync cargo bench -p tsync-common --features user --bench format
//! ```
//!
//! Without `TSYNC_BENCH_TRACE`, the events are synthetic TCP traffic like the demo's (request and
//! response exchanges with two peers plus a bulk transfer, flushed every 1000 events); with it,
//! the events of that file (any version), in its own chunks.

use std::hint::black_box;
use std::io::Cursor;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use tsync_common::format::{Footer, Header, TraceReader, TraceWriter};
use tsync_common::{PacketEvent, direction, kind, tcp_flag};

/// The events to write, in the chunks the agent flushed them in.
fn chunks() -> Vec<Vec<PacketEvent>> {
    if let Some(path) = std::env::var_os("TSYNC_BENCH_TRACE") {
        let mut r = TraceReader::open(path.as_ref()).expect("TSYNC_BENCH_TRACE: a trace file");
        let mut chunks = Vec::new();
        while let Some(c) = r.next_events().expect("readable") {
            chunks.push(c.to_vec());
        }
        return chunks;
    }
    synthetic(200_000).chunks(1000).map(<[_]>::to_vec).collect()
}

/// `n` events of one node: exchanges of a 100-byte request and a 1000-byte response with two
/// peers (each direction acknowledged), and a bulk transfer of full segments to a third.
fn synthetic(n: usize) -> Vec<PacketEvent> {
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |m: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % m
    };
    let packet = |ts: u64, dir: u8, peer: u8, port: u16, seq: u32, ack: u32, payload: u16| {
        let (local, remote) = ([10, 0, 0, 1], [10, 0, 0, peer]);
        let (saddr, daddr, source, dest) = if dir == direction::SEND {
            (local, remote, 40_000 + port, 5201)
        } else {
            (remote, local, 5201, 40_000 + port)
        };
        let mut e = PacketEvent {
            ts_ns: ts,
            ifindex: 2,
            cpu: (ts / 7 % 2) as u16,
            direction: dir,
            kind: kind::TCP4,
            network_protocol: tsync_common::ETH_P_IP,
            tot_len: 52 + payload,
            source,
            dest,
            seq,
            ack_seq: ack,
            transport_protocol: tsync_common::IPPROTO_TCP,
            ihl: 5,
            doff: 8,
            tcp_flags: tcp_flag::ACK | if payload > 0 { tcp_flag::PSH } else { 0 },
            ..PacketEvent::default()
        };
        e.saddr[..4].copy_from_slice(&saddr);
        e.daddr[..4].copy_from_slice(&daddr);
        e
    };
    let mut events = Vec::with_capacity(n + 4);
    let (mut t, mut seqs) = (1_000_000_000_000u64, [[1u32, 7u32]; 3]);
    while events.len() < n {
        t += 20_000 + next(800_000);
        let peer = next(3) as usize;
        let [mine, theirs] = &mut seqs[peer];
        let p = peer as u8 + 2;
        if peer == 2 {
            // Bulk: a full segment out.
            events.push(packet(t, direction::SEND, p, 2, *mine, *theirs, 1448));
            *mine = mine.wrapping_add(1448);
            continue;
        }
        events.push(packet(
            t,
            direction::SEND,
            p,
            peer as u16,
            *mine,
            *theirs,
            100,
        ));
        *mine = mine.wrapping_add(100);
        t += 30_000 + next(20_000);
        events.push(packet(
            t,
            direction::RECV,
            p,
            peer as u16,
            *theirs,
            *mine,
            1000,
        ));
        *theirs = theirs.wrapping_add(1000);
        t += 5_000 + next(5_000);
        events.push(packet(
            t,
            direction::SEND,
            p,
            peer as u16,
            *mine,
            *theirs,
            0,
        ));
    }
    events.truncate(n);
    events
}

fn write(chunks: &[Vec<PacketEvent>], version: u32, level: Option<i32>) -> Vec<u8> {
    let mut w = TraceWriter::with_version(Vec::new(), &Header::default(), version).unwrap();
    if let Some(level) = level {
        w.set_compression_level(level).unwrap();
    }
    for chunk in chunks {
        w.write_events(chunk).unwrap();
        w.flush().unwrap();
    }
    w.finish(&Footer::default()).unwrap()
}

fn read(file: &[u8]) -> usize {
    let mut r = TraceReader::new(Cursor::new(file)).unwrap();
    let mut n = 0;
    while let Some(chunk) = r.next_events().unwrap() {
        n += black_box(chunk).len();
    }
    n
}

/// The versions and zstd levels compared: version 2, versions 3 and 4 at their default level,
/// and version 3 at a faster and a stronger level.
const WRITERS: [(&str, u32, Option<i32>); 5] = [
    ("v2", 2, None),
    ("v3", 3, None),
    ("v4", 4, None),
    ("v3 level -1", 3, Some(-1)),
    ("v3 level 9", 3, Some(9)),
];

fn bench(c: &mut Criterion) {
    let chunks = chunks();
    let events: usize = chunks.iter().map(Vec::len).sum();
    let mut decode = c.benchmark_group("decode");
    decode.throughput(Throughput::Elements(events as u64));
    for (name, version, level) in WRITERS {
        let file = write(&chunks, version, level);
        eprintln!(
            "{name}: {events} events, {:.2} bytes per event",
            file.len() as f64 / events as f64
        );
        decode.bench_with_input(BenchmarkId::from_parameter(name), &file, |b, file| {
            b.iter(|| assert_eq!(read(file), events))
        });
    }
    decode.finish();
    let mut encode = c.benchmark_group("encode");
    encode.throughput(Throughput::Elements(events as u64));
    for (name, version, level) in WRITERS {
        encode.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| black_box(write(&chunks, version, level)).len())
        });
    }
    encode.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = bench
}
criterion_main!(benches);
