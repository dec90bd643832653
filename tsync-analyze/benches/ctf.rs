//! Decoding an LTTng kernel trace: events per second when network events are one in twenty
//! among scheduler and syscall events (a kernel trace is mostly those), every event's header
//! decoded, the others' payloads jumped over, the network ones decoded into digests. The trace
//! is written by the writer of LTTng 2.10-shaped traces (4 CPU streams, 256 KiB packets); the
//! issue's goal is 10 M events/s per core.
//!
//! `cargo bench -p tsync-analyze --bench ctf`

mod common;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use tsync_analyze::ctf::CtfTrace;
use tsync_analyze::ctf::writer::KernelTrace;
use tsync_common::{ETH_P_IP, IPPROTO_TCP, PacketEvent, kind, tcp_flag};

/// Network events written; 19 scheduler or syscall events come before each.
const NETWORK: u32 = 100_000;
const FILLER: u32 = 19;

fn trace(dir: &std::path::Path) -> u64 {
    let mut ts = 1_000_000_000u64;
    let events: Vec<PacketEvent> = (0..NETWORK)
        .map(|n| {
            ts += 20_000 + u64::from(n % 13) * 1_000;
            let mut e = PacketEvent {
                ts_ns: ts,
                ifindex: 2,
                cpu: (n % 4) as u16,
                direction: (n % 2) as u8,
                kind: kind::TCP4,
                network_protocol: ETH_P_IP,
                tot_len: 1500,
                source: 5201,
                dest: 40_000,
                seq: n.wrapping_mul(1448),
                ack_seq: 1,
                transport_protocol: IPPROTO_TCP,
                ihl: 5,
                doff: 8,
                tcp_flags: tcp_flag::ACK,
                ..PacketEvent::default()
            };
            e.saddr[..4].copy_from_slice(&[10, 0, 0, 1]);
            e.daddr[..4].copy_from_slice(&[10, 0, 0, 2]);
            e
        })
        .collect();
    let w = KernelTrace {
        hostname: "bench".into(),
        uuid: [7; 16],
        clock_offset_ns: 1_700_000_000_000_000_000,
        cpus: 4,
        filler: FILLER,
        packet_len: 256 << 10,
    }
    .write(dir, &events)
    .expect("write the trace");
    w.network + w.filler
}

fn decode(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let total = trace(dir.path());
    let mut g = c.benchmark_group("ctf_decode");
    g.sample_size(10);
    g.throughput(Throughput::Elements(total));
    g.bench_function("kernel_trace_5pct_network", |b| {
        b.iter(|| {
            let mut t = CtfTrace::open(dir.path()).expect("open");
            let mut n = 0usize;
            while let Some(chunk) = t.next_chunk() {
                n += chunk.len();
            }
            assert_eq!(n as u32, NETWORK);
            black_box(n)
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = decode
}
criterion_main!(benches);
