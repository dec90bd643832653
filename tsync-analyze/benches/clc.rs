//! Controlled logical clock throughput: events per second on synthetic captures with clock
//! glitches (the issue asks for 10^7 events to be practical: O(n log n)).
//!
//! `cargo bench -p tsync-analyze --bench clc`

mod common;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use tsync_analyze::clc::{ClcInput, ClcParams, correct};
use tsync_analyze::{EventRef, MessageRef, PairLatency};

/// (true time, trace, Some((message id, is send))).
type TimelineEvent = (i64, usize, Option<(usize, bool)>);

/// `events` events on 8 traces, a quarter of them messages, latency 20–50 µs, and every trace
/// running 30 µs early for 5 ms out of every 100 ms (so a few % of messages violate l_min).
fn capture(events: usize) -> ClcInput {
    let nodes = 8;
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move |m: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % m
    };
    let glitch = |trace: usize, t: i64| {
        if (t / 5_000_000) % 20 == trace as i64 % 20 {
            t - 30_000
        } else {
            t
        }
    };
    let mut timeline: Vec<TimelineEvent> = Vec::with_capacity(events);
    let mut t = 0i64;
    let mut id = 0;
    while timeline.len() < events {
        t += 500 + next(1_000) as i64;
        let from = next(nodes as u64) as usize;
        if next(8) == 0 {
            let to = (from + 1 + next(nodes as u64 - 1) as usize) % nodes;
            timeline.push((t, from, Some((id, true))));
            timeline.push((t + 20_000 + next(30_000) as i64, to, Some((id, false))));
            id += 1;
        } else {
            timeline.push((t, from, None));
        }
    }
    timeline.sort_unstable_by_key(|e| e.0);
    let mut traces = vec![Vec::new(); nodes];
    let mut ends = vec![[EventRef { trace: 0, index: 0 }; 2]; id];
    for (t, trace, role) in timeline {
        let e = EventRef {
            trace,
            index: traces[trace].len(),
        };
        let prev = traces[trace].last().copied().unwrap_or(i64::MIN);
        traces[trace].push(glitch(trace, t).max(prev));
        if let Some((m, is_send)) = role {
            ends[m][usize::from(!is_send)] = e;
        }
    }
    let messages = ends
        .into_iter()
        .map(|[send, recv]| MessageRef { send, recv })
        .collect();
    ClcInput { traces, messages }
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("clc");
    group.sample_size(10);
    for events in [100_000usize, 1_000_000, 10_000_000] {
        let input = capture(events);
        let l_min = PairLatency::new(input.traces.len(), 20_000);
        group.throughput(Throughput::Elements(events as u64));
        group.bench_with_input(BenchmarkId::from_parameter(events), &input, |b, input| {
            b.iter(|| correct(black_box(input), &l_min, &ClcParams::default()).unwrap())
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = bench
}
criterion_main!(benches);
