//! Agent trace files as inputs: matching across files, alignment of unrelated monotonic clocks,
//! ambiguous keys (retransmissions), loopback, and agreement with the text route.

use std::path::Path;

use tsync_analyze::{
    Algorithm, InputSet, MatchOptions, MatchedMessage, Message, MessageSink, Origin, Quality,
    SyncOptions, SyncResult, sync,
};
use tsync_common::format::{ClockSample, Footer, Header, TraceWriter};
use tsync_common::{PacketEvent, direction, kind, tcp_flag};
use tsync_sim::{Delay, DelayTail, LinearClock, Workload};

fn workload(clocks: Vec<LinearClock>, messages: u64) -> Workload {
    let n = clocks.len() as u32;
    let links = (0..n)
        .flat_map(|a| (a + 1..n).map(move |b| (a, b)))
        .collect();
    Workload {
        clocks,
        links,
        messages,
        start_ns: 20e9,
        interval_ns: 200_000.0,
        delay: Delay {
            min_ns: 20_000.0,
            tail: DelayTail::Exponential { mean_ns: 40_000.0 },
            max_ns: 5_020_000.0,
        },
        seed: 42,
    }
}

#[derive(Default)]
struct Collect(Vec<(Message, Origin, u8)>);

impl MessageSink for Collect {
    fn message(&mut self, m: &MatchedMessage<'_>) {
        self.0
            .push((m.message, m.origin, m.send_event.unwrap().kind));
    }
}

/// Three nodes booted hours apart, with drifts of +120, −80 and +10 ppm.
fn booted_hours_apart() -> Vec<LinearClock> {
    vec![
        LinearClock {
            offset_ns: 5_000e9,
            drift_ppm: 120.0,
        },
        LinearClock {
            offset_ns: 90_000e9,
            drift_ppm: -80.0,
        },
        LinearClock {
            offset_ns: 3e9,
            drift_ppm: 10.0,
        },
    ]
}

/// Every pair accurate, with the true mapping inside the guaranteed interval at every hull point.
fn assert_accurate_around_the_truth(r: &SyncResult, clocks: &[LinearClock]) {
    for p in &r.pairs {
        assert_eq!(p.quality, Quality::Accurate);
        let acc = p.accuracy.as_ref().unwrap();
        let (ca, cb) = (clocks[p.a as usize], clocks[p.b as usize]);
        for pt in &acc.points {
            let truth = ca.map_to(&cb, pt.t_a as f64);
            assert!(pt.lo - 1e-3 <= truth && truth <= pt.hi + 1e-3);
        }
    }
}

#[test]
fn trace_files_synchronize_nodes_booted_hours_apart() {
    let clocks = booted_hours_apart();
    let w = workload(clocks.clone(), 20_000);
    let dir = tempfile::tempdir().unwrap();
    let paths = w.write_traces(dir.path()).unwrap();
    let inputs = InputSet::open(&paths).unwrap();
    assert_eq!(inputs.traces[1].name, "node1");
    let r = sync(&inputs, &SyncOptions::default(), &mut |_| {}).unwrap();
    assert_eq!(r.matching.matched, 20_000, "{:?}", r.matching);
    assert_eq!(
        r.matching.unmatched + r.matching.ambiguous + r.matching.same_trace,
        0
    );
    assert_eq!(r.matching.out_of_order, 0);
    assert_accurate_around_the_truth(&r, &clocks);
    // Same messages as the text route, and the same result.
    let mut text = Vec::new();
    w.write_text(&mut text).unwrap();
    let tp = dir.path().join("msgs.txt");
    std::fs::write(&tp, text).unwrap();
    let rt = sync(
        &InputSet::open(&[&tp]).unwrap(),
        &SyncOptions::default(),
        &mut |_| {},
    )
    .unwrap();
    for (a, b) in r.traces.iter().zip(&rt.traces) {
        assert_eq!(a.map, b.map);
        assert_eq!(a.reference, b.reference);
    }
    // Exchanges from TCP ACKs feed the regression.
    let lr = sync(
        &inputs,
        &SyncOptions {
            algorithm: Algorithm::Linreg,
            ..Default::default()
        },
        &mut |_| {},
    )
    .unwrap();
    assert!(lr.matching.exchanges > 1000, "{:?}", lr.matching);
    for t in &lr.traces {
        let c = clocks[t.index as usize];
        let rc = clocks[t.reference as usize];
        let local = c.local(21e9) as f64;
        assert!((t.map.apply(local) - c.map_to(&rc, local)).abs() < 50_000.0);
    }
}

fn tcp(ts: u64, dir: u8, src: u8, dst: u8, seq: u32) -> PacketEvent {
    let mut saddr = [0u8; 16];
    saddr[..4].copy_from_slice(&[10, 0, 0, src]);
    let mut daddr = [0u8; 16];
    daddr[..4].copy_from_slice(&[10, 0, 0, dst]);
    PacketEvent {
        ts_ns: ts,
        direction: dir,
        kind: kind::TCP4,
        saddr,
        daddr,
        tot_len: 140,
        source: 1000,
        dest: 2000,
        seq,
        ihl: 5,
        doff: 5,
        tcp_flags: tcp_flag::ACK,
        ..PacketEvent::default()
    }
}

/// Matches the messages of `paths` with the default options.
fn match_with_defaults(paths: &[&Path]) -> tsync_analyze::MatchStats {
    InputSet::open(paths)
        .unwrap()
        .for_each_message(
            &MatchOptions::default(),
            &mut Collect::default(),
            &mut |_| {},
        )
        .unwrap()
}

fn write(path: &Path, node: &str, events: &[PacketEvent]) {
    write_node(path, node, None, events);
}

/// Writes a trace; its header lists `address` (e.g. `10.0.0.1/24`) on one interface, if given.
fn write_node(path: &Path, node: &str, address: Option<&str>, events: &[PacketEvent]) {
    let interfaces = address
        .map(|a| tsync_common::format::Interface {
            ifindex: 2,
            name: "eth0".into(),
            mac: None,
            addresses: vec![a.into(), "127.0.0.1/8".into()],
            ..Default::default()
        })
        .into_iter()
        .collect();
    let header = Header {
        node: node.into(),
        start_realtime_ns: 1_000_000_000_000,
        start_monotonic_ns: 1_000_000_000,
        interfaces,
        ..Header::default()
    };
    let mut w = TraceWriter::create(path, &header).unwrap();
    w.write_clock_sample(ClockSample {
        monotonic_ns: 1_000_000_000,
        monotonic_raw_ns: 1_000_000_000,
        realtime_ns: 1_000_000_000_000,
        tsc: 0,
        monotonic_after_ns: 1_000_000_000,
    })
    .unwrap();
    w.write_events(events).unwrap();
    w.finish(&Footer::default()).unwrap();
}

#[test]
fn retransmissions_are_ambiguous_and_loopback_is_dropped() {
    let s = 1_000_000_000u64;
    let a = vec![
        tcp(s + 1_000, direction::SEND, 1, 2, 1), // matched once
        tcp(s + 2_000, direction::SEND, 1, 2, 2), // sent...
        tcp(s + 300_000_000, direction::SEND, 1, 2, 2), // ...and retransmitted: ambiguous
        tcp(s + 400_000_000, direction::SEND, 1, 1, 9), // loopback send
        tcp(s + 400_000_100, direction::RECV, 1, 1, 9), // loopback receive
        tcp(s + 500_000_000, direction::SEND, 1, 2, 3), // never received: unmatched
    ];
    let b = vec![
        tcp(s + 60_000, direction::RECV, 1, 2, 1),
        tcp(s + 300_060_000, direction::RECV, 1, 2, 2),
    ];
    let dir = tempfile::tempdir().unwrap();
    let (pa, pb) = (dir.path().join("a.trace"), dir.path().join("b.trace"));
    write(&pa, "a", &a);
    write(&pb, "b", &b);
    let inputs = InputSet::open(&[&pa, &pb]).unwrap();
    let mut c = Collect::default();
    let st = inputs
        .for_each_message(&MatchOptions::default(), &mut c, &mut |_| {})
        .unwrap();
    assert_eq!(st.events, 8);
    assert_eq!(st.matched, 1);
    assert_eq!(st.ambiguous, 1);
    assert_eq!(st.same_trace, 1);
    assert_eq!(
        st.unmatched, 4,
        "3 of the ambiguous key + 1 never received: {st:?}"
    );
    assert_eq!(c.0.len(), 1);
    let (m, origin, k) = c.0[0];
    assert_eq!(
        (m.send_trace, m.recv_trace, m.send_ns, m.recv_ns),
        (0, 1, 1_000_001_000, 1_000_060_000)
    );
    assert_eq!(
        origin,
        Origin::Events {
            send_index: 0,
            recv_index: 0
        }
    );
    assert_eq!(k, kind::TCP4);
    // With a window shorter than the retransmission delay, the key is decided per window: the
    // first send (whose reception never came within the window) is unmatched and the
    // retransmission pairs with the receive that follows it.
    let short = MatchOptions {
        window_ns: 100_000_000,
        ..MatchOptions::default()
    };
    let mut c = Collect::default();
    let st = inputs
        .for_each_message(&short, &mut c, &mut |_| {})
        .unwrap();
    assert_eq!(st.ambiguous, 0);
    assert_eq!(st.matched, 2);
    assert_eq!(c.0[1].0.send_ns, 1_300_000_000);
}

#[test]
fn a_text_file_is_not_mistaken_for_a_trace_and_vice_versa() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("looks.txt");
    write(&p, "x", &[]);
    let inputs = InputSet::open(&[&p]).unwrap();
    assert_eq!(inputs.traces.len(), 1);
    assert_eq!(inputs.traces[0].name, "x");
    let bad = dir.path().join("cut.trace");
    std::fs::write(&bad, b"TSYNCTRC\x01\x00").unwrap();
    let e = InputSet::open(&[&bad]).unwrap_err().to_string();
    assert!(e.contains("cut.trace"), "{e}");
}

/// Rewrites a trace file as if its node's realtime clock had been `delta_ns` off.
fn shift_realtime(path: &Path, delta_ns: i64) {
    let mut r = tsync_common::format::TraceReader::open(path).unwrap();
    let mut header = r.header().clone();
    header.start_realtime_ns += delta_ns;
    let mut events = Vec::new();
    while let Some(chunk) = r.next_events().unwrap() {
        events.extend_from_slice(chunk);
    }
    let samples: Vec<ClockSample> = r
        .clock_samples()
        .iter()
        .map(|s| ClockSample {
            realtime_ns: s.realtime_ns + delta_ns,
            ..*s
        })
        .collect();
    let footer = r.footer().cloned().unwrap();
    drop(r);
    let mut w = TraceWriter::create(path, &header).unwrap();
    // Interleaved as the agent writes them: a sample, then the events up to the next one.
    let mut rest = &events[..];
    for (i, s) in samples.iter().enumerate() {
        w.write_clock_sample(*s).unwrap();
        let next = samples.get(i + 1).map_or(u64::MAX, |n| n.monotonic_ns);
        let k = rest.partition_point(|e| e.ts_ns < next);
        w.write_events(&rest[..k]).unwrap();
        rest = &rest[k..];
    }
    w.write_events(rest).unwrap();
    w.finish(&footer).unwrap();
}

#[test]
fn nodes_whose_realtime_clocks_disagree_by_seconds_or_years_still_match() {
    let clocks = booted_hours_apart();
    let w = workload(clocks.clone(), 20_000);
    let dir = tempfile::tempdir().unwrap();
    let paths = w.write_traces(dir.path()).unwrap();
    // node1 without NTP, 7.5 s fast; node2 a board without a real-time clock, back in 1970.
    shift_realtime(&paths[1], 7_500_000_000);
    shift_realtime(&paths[2], -1_767_225_600_000_000_000);
    let inputs = InputSet::open(&paths).unwrap();
    let r = sync(&inputs, &SyncOptions::default(), &mut |_| {}).unwrap();
    assert_eq!(r.matching.matched, 20_000, "{:?}", r.matching);
    assert_eq!(r.matching.unmatched + r.matching.ambiguous, 0);
    assert_accurate_around_the_truth(&r, &clocks);
    // The user is told which clocks were off, and by how much.
    let said = r.matching.warnings.join("\n");
    assert!(
        said.contains("node1: its realtime clock is about 7.500 s"),
        "{said}"
    );
    assert!(said.contains("ahead of node0"), "{said}");
    assert!(
        said.contains("node2: its realtime clock is about 1767225600.000 s"),
        "{said}"
    );
    assert!(said.contains("behind node0"), "{said}");
}

#[test]
fn unmatched_super_packets_between_traced_nodes_point_at_offloads() {
    let s = 1_000_000_000u64;
    let mut a = Vec::new();
    let mut b = Vec::new();
    for i in 0..50u32 {
        let t = s + u64::from(i) * 1_000_000;
        // An ordinary segment, matched.
        a.push(tcp(t, direction::SEND, 1, 2, 10_000 + i));
        b.push(tcp(t + 50_000, direction::RECV, 1, 2, 10_000 + i));
        // A TSO super-packet of two segments on the sender, seen as two segments by the receiver.
        let mut big = tcp(t + 100_000, direction::SEND, 1, 2, 100_000 + 2920 * i);
        big.tot_len = 2960;
        a.push(big);
        for half in 0..2 {
            let mut seg = tcp(
                t + 150_000 + u64::from(half),
                direction::RECV,
                1,
                2,
                100_000 + 2920 * i + 1460 * half,
            );
            seg.tot_len = 1500;
            b.push(seg);
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let (pa, pb) = (dir.path().join("a.trace"), dir.path().join("b.trace"));
    let run = |b_address: Option<&str>, by_range: bool| {
        write_node(&pa, "a", Some("10.0.0.1/24"), &a);
        write_node(&pb, "b", b_address, &b);
        let inputs = InputSet::open(&[&pa, &pb]).unwrap();
        let options = MatchOptions {
            by_range,
            ..MatchOptions::default()
        };
        inputs
            .for_each_message(&options, &mut Collect::default(), &mut |_| {})
            .unwrap()
    };
    // By sequence range (the default) each super-packet pairs with both segments it became:
    // nothing is left, and no warning blames offloads.
    let st = run(Some("10.0.0.2/24"), true);
    assert_eq!((st.matched, st.range_matched, st.unmatched), (150, 100, 0));
    assert_eq!(st.oversize_unmatched, 0);
    assert!(!st.warnings.iter().any(|w| w.contains("offloads")));
    // By digest only, they are the mark of offloads.
    let st = run(Some("10.0.0.2/24"), false);
    assert_eq!(st.matched, 50);
    assert_eq!(st.unmatched, 150);
    assert_eq!(
        st.oversize_unmatched, 50,
        "the super-packets, not the segments"
    );
    assert!(
        st.warnings
            .iter()
            .any(|w| w.contains("offloads") && w.contains("ethtool -K")),
        "{:?}",
        st.warnings
    );
    // The same packets to a node that is not traced are traffic with the outside world.
    let st = run(None, false);
    assert_eq!(st.oversize_unmatched, 0);
    assert!(!st.warnings.iter().any(|w| w.contains("offloads")));
}

#[test]
fn super_packets_after_the_receivers_trace_ended_do_not_blame_offloads() {
    // b's recording stops (cut short, or stopped earlier) after 10 exchanges; a goes on sending
    // large packets to b for 40 more. Those find no partner because b was not recording.
    let s = 1_000_000_000u64;
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for i in 0..50u32 {
        let t = s + u64::from(i) * 100_000_000;
        let mut big = tcp(t, direction::SEND, 1, 2, 100_000 + 2920 * i);
        big.tot_len = 1500 + 1000;
        a.push(big);
        if i < 10 {
            let mut got = big;
            got.ts_ns = t + 50_000;
            got.direction = direction::RECV;
            b.push(got);
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let (pa, pb) = (dir.path().join("a.trace"), dir.path().join("b.trace"));
    write_node(&pa, "a", Some("10.0.0.1/24"), &a);
    write_node(&pb, "b", Some("10.0.0.2/24"), &b);
    let st = match_with_defaults(&[&pa, &pb]);
    assert_eq!(st.matched, 10);
    assert_eq!(st.unmatched, 40);
    assert_eq!(st.oversize_unmatched, 0, "b was not recording any more");
    assert!(!st.warnings.iter().any(|w| w.contains("offloads")));
}

#[test]
fn the_same_recording_twice_and_recordings_that_do_not_overlap_are_named() {
    let s = 1_000_000_000u64;
    let early: Vec<_> = (0..20u32)
        .map(|i| tcp(s + u64::from(i) * 1_000_000, direction::SEND, 1, 2, i))
        .collect();
    // b records an hour later.
    let late: Vec<_> = (0..20u32)
        .map(|i| {
            tcp(
                3_600 * s + u64::from(i) * 1_000_000,
                direction::RECV,
                1,
                2,
                500 + i,
            )
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let (pa, pb) = (dir.path().join("a.trace"), dir.path().join("b.trace"));
    write(&pa, "a", &early);
    write(&pb, "b", &late);
    let copy = dir.path().join("a-copy.trace");
    std::fs::copy(&pa, &copy).unwrap();
    let w = match_with_defaults(&[&pa, &pb]).warnings;
    assert!(
        w.iter()
            .any(|w| w.contains("do not overlap") && w.contains("3599.0")),
        "{w:?}"
    );
    let w = match_with_defaults(&[&pa, &copy]).warnings;
    assert!(
        w.iter()
            .any(|w| w.contains("same recording") && w.contains("a-copy.trace")),
        "{w:?}"
    );
}

#[test]
fn events_lost_in_the_kernel_and_on_the_way_to_disk_are_warned_apart() {
    let s = 1_000_000_000u64;
    let dir = tempfile::tempdir().unwrap();
    let (pa, pb) = (dir.path().join("a.trace"), dir.path().join("b.trace"));
    write(&pa, "a", &[tcp(s + 1_000, direction::SEND, 1, 2, 1)]);
    let mut w = TraceWriter::create(&pb, &Header::default()).unwrap();
    w.write_events(&[tcp(s + 60_000, direction::RECV, 1, 2, 1)])
        .unwrap();
    let lost = tsync_common::format::LostCounts {
        send: 2,
        recv: 3,
        per_cpu: vec![],
        disk: 700,
    };
    w.finish(&Footer {
        lost,
        ..Footer::default()
    })
    .unwrap();
    let st = match_with_defaults(&[&pa, &pb]);
    let w = &st.warnings;
    assert!(
        w.iter()
            .any(|w| w.contains("b.trace: the kernel lost 5 events")),
        "{w:?}"
    );
    assert!(
        w.iter()
            .any(|w| w.contains("b.trace: the agent dropped 700 events")
                && w.contains("disk did not keep up")),
        "{w:?}"
    );
    assert!(!w.iter().any(|w| w.starts_with(&pa.display().to_string())));
}
