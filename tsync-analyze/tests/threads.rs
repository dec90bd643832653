//! `--threads`: matching on several threads gives exactly what one thread gives — the JSON, the
//! messages in their order, the exchanges, the counts and warnings, the figures and exports — on
//! simulated meshes and on TCP traffic that offloads cut differently on both sides (range
//! matching), with retransmissions, stacked devices and a recording that ends early.

use std::path::{Path, PathBuf};
use std::process::Command;

use tsync_analyze::{Exchange, InputSet, MatchOptions, MatchStats, MatchedMessage, MessageSink};
use tsync_common::format::{
    ClockSample, Footer, Header, Interface, KernelClock, LostCounts, TraceReader, TraceWriter,
};
use tsync_common::{PacketEvent, direction, kind, tcp_flag};
use tsync_sim::{Delay, DelayTail, LinearClock, Workload};

const THREADS: [usize; 3] = [1, 2, 7];

/// A full mesh of `n` traces with drifting clocks (tsync-sim's trace files: one TCP connection
/// per pair, cumulative ACKs, so exchanges are found too).
fn mesh(dir: &Path, n: usize, messages: u64) -> Vec<PathBuf> {
    let clock = |k: usize| LinearClock {
        offset_ns: (k as f64 * 7.3 - 11.0) * 1e9,
        drift_ppm: (k as f64 * 37.0) % 150.0 - 70.0,
    };
    let w = full_mesh(n, clock, messages, 50_000.0, 40_000.0, 7);
    w.write_traces(dir).unwrap()
}

/// A full mesh of `n` traces on `clock(k)`, starting at 20 s, a message every `interval_ns`,
/// delays of 20 µs plus an exponential tail of mean `tail_ns`.
fn full_mesh(
    n: usize,
    clock: impl Fn(usize) -> LinearClock,
    messages: u64,
    interval_ns: f64,
    tail_ns: f64,
    seed: u64,
) -> Workload {
    let links = (0..n as u32)
        .flat_map(|a| (a + 1..n as u32).map(move |b| (a, b)))
        .collect();
    Workload {
        clocks: (0..n).map(clock).collect(),
        links,
        messages,
        start_ns: 20e9,
        interval_ns,
        delay: Delay {
            min_ns: 20_000.0,
            tail: DelayTail::Exponential { mean_ns: tail_ns },
            max_ns: 5_020_000.0,
        },
        seed,
    }
}

fn segment(ts: u64, dir: u8, src: u8, dst: u8, port: u16, seq: u32, payload: u16) -> PacketEvent {
    let mut saddr = [0u8; 16];
    saddr[..4].copy_from_slice(&[10, 0, 0, src]);
    let mut daddr = [0u8; 16];
    daddr[..4].copy_from_slice(&[10, 0, 0, dst]);
    PacketEvent {
        ts_ns: ts,
        ifindex: 2,
        direction: dir,
        kind: kind::TCP4,
        saddr,
        daddr,
        network_protocol: tsync_common::ETH_P_IP,
        tot_len: 40 + payload,
        source: port,
        dest: 80,
        seq,
        ack_seq: 1,
        transport_protocol: tsync_common::IPPROTO_TCP,
        ihl: 5,
        doff: 5,
        tcp_flags: tcp_flag::ACK,
        ..PacketEvent::default()
    }
}

/// Three nodes; node 0 sends to 1 and 2 over many connections: TSO super-packets received as
/// segments, GRO-merged receives of several segments, ordinary segments, retransmissions, copies
/// on a stacked device, and node 2's recording ends halfway.
fn offloaded(dir: &Path) -> Vec<PathBuf> {
    let s = 1_000_000_000u64;
    let mut nodes: [Vec<PacketEvent>; 3] = Default::default();
    for i in 0..3000u32 {
        let t = s + u64::from(i) * 200_000;
        let to = 1 + (i % 2) as u8;
        let port = 1000 + (i % 37) as u16;
        let seq = 1_000_000 + i * 10_000;
        let delay = 30_000 + u64::from(i % 13) * 1_000;
        let rx = to as usize;
        match i % 5 {
            // TSO: one 2920-byte send, two 1460-byte receives.
            0 => {
                nodes[0].push(segment(t, direction::SEND, 1, to + 1, port, seq, 2920));
                for half in 0..2u32 {
                    nodes[rx].push(segment(
                        t + delay + u64::from(half),
                        direction::RECV,
                        1,
                        to + 1,
                        port,
                        seq + 1460 * half,
                        1460,
                    ));
                }
            }
            // GRO: three sends, one merged receive.
            1 => {
                for k in 0..3u32 {
                    nodes[0].push(segment(
                        t + u64::from(k) * 10,
                        direction::SEND,
                        1,
                        to + 1,
                        port,
                        seq + 1000 * k,
                        1000,
                    ));
                }
                nodes[rx].push(segment(
                    t + delay,
                    direction::RECV,
                    1,
                    to + 1,
                    port,
                    seq,
                    3000,
                ));
            }
            // A retransmission: sent twice, received once (ambiguous, by digest and by range).
            2 => {
                let e = segment(t, direction::SEND, 1, to + 1, port, seq, 500);
                nodes[0].push(e);
                nodes[0].push(PacketEvent {
                    ts_ns: t + 50_000,
                    ..e
                });
                nodes[rx].push(segment(
                    t + delay,
                    direction::RECV,
                    1,
                    to + 1,
                    port,
                    seq,
                    500,
                ));
            }
            // Copies on a bridge and its port on the receiver.
            3 => {
                nodes[0].push(segment(t, direction::SEND, 1, to + 1, port, seq, 100));
                let r = segment(t + delay, direction::RECV, 1, to + 1, port, seq, 100);
                nodes[rx].push(r);
                nodes[rx].push(PacketEvent {
                    ts_ns: r.ts_ns + 3,
                    ifindex: 5,
                    ..r
                });
            }
            // An ordinary segment, and a reply the other way.
            _ => {
                nodes[0].push(segment(t, direction::SEND, 1, to + 1, port, seq, 100));
                nodes[rx].push(segment(
                    t + delay,
                    direction::RECV,
                    1,
                    to + 1,
                    port,
                    seq,
                    100,
                ));
                let mut back = segment(t + delay + 5_000, direction::SEND, to + 1, 1, 80, 7, 0);
                back.dest = port;
                back.ack_seq = seq + 100;
                nodes[rx].push(back);
                nodes[0].push(PacketEvent {
                    ts_ns: back.ts_ns + delay,
                    direction: direction::RECV,
                    ..back
                });
            }
        }
    }
    // Node 2 stops recording halfway through.
    let half = s + 1500 * 200_000;
    nodes[2].retain(|e| e.ts_ns < half);
    nodes
        .iter_mut()
        .enumerate()
        .map(|(k, events)| {
            events.sort_by_key(|e| e.ts_ns);
            let path = dir.join(format!("n{k}.tsync"));
            write_node(&path, k, events);
            path
        })
        .collect()
}

fn write_node(path: &Path, k: usize, events: &[PacketEvent]) {
    let header = Header {
        node: format!("n{k}"),
        start_realtime_ns: 1_000_000_000_000,
        start_monotonic_ns: 1_000_000_000,
        interfaces: vec![Interface {
            ifindex: 2,
            name: "eth0".into(),
            mac: None,
            addresses: vec![format!("10.0.0.{}/24", k + 1)],
            ..Default::default()
        }],
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
    // Several chunks, so that reading interleaves the files.
    for chunk in events.chunks(500) {
        w.write_events(chunk).unwrap();
    }
    w.finish(&Footer::default()).unwrap();
}

/// Everything a sink sees, in order.
#[derive(Default, PartialEq, Debug)]
struct Everything(Vec<String>);

impl MessageSink for Everything {
    fn message(&mut self, m: &MatchedMessage<'_>) {
        self.0.push(format!(
            "{:?} {:?} {:?} {:?}",
            m.message, m.origin, m.send_event, m.recv_event
        ));
    }

    fn exchange(&mut self, e: &Exchange) {
        self.0.push(format!("x {e:?}"));
    }
}

fn matched(paths: &[PathBuf], threads: usize, exchanges: bool) -> (Everything, MatchStats) {
    let options = MatchOptions {
        threads,
        exchanges,
        ..MatchOptions::default()
    };
    let mut sink = Everything::default();
    let stats = InputSet::open(paths)
        .unwrap()
        .for_each_message(&options, &mut sink, &mut |_| {})
        .unwrap();
    (sink, stats)
}

/// The sink's view and the counts (warnings included) are the same for every thread count.
fn same_stream(paths: &[PathBuf]) -> MatchStats {
    let (one, stats) = matched(paths, 1, true);
    assert!(!one.0.is_empty());
    for n in &THREADS[1..] {
        let (many, s) = matched(paths, *n, true);
        assert_eq!(s, stats, "{n} threads: counts");
        assert_eq!(s.warnings, stats.warnings, "{n} threads: warnings");
        assert!(many == one, "{n} threads: messages or exchanges differ");
    }
    stats
}

fn analyzer(args: &[String], threads: usize) -> Vec<u8> {
    let o = Command::new(env!("CARGO_BIN_EXE_tsync-analyze"))
        .args(args)
        .args(["--threads", &threads.to_string()])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o.stdout
}

/// Files and their bytes.
type Files = Vec<(PathBuf, Vec<u8>)>;

/// Every file under `dir`, with its bytes.
fn files(dir: &Path) -> Files {
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            (
                p.strip_prefix(dir).unwrap().to_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

/// The commands' outputs are byte for byte the same for every thread count.
fn same_outputs(paths: &[PathBuf], scratch: &Path) {
    let inputs: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    let with = |cmd: &[&str]| -> Vec<String> {
        cmd.iter()
            .map(|s| s.to_string())
            .chain(inputs.iter().cloned())
            .collect()
    };
    let commands = [
        with(&["sync", "--json"]),
        with(&["sync", "--json", "--algorithm", "linreg"]),
        with(&["messages"]),
        with(&["eval", "--json"]),
    ];
    for args in &commands {
        let one = analyzer(args, 1);
        for n in &THREADS[1..] {
            assert!(analyzer(args, *n) == one, "{args:?}: {n} threads differ");
        }
    }
    // Figures and an export, written to files.
    let mut first: Option<(Files, Vec<u8>)> = None;
    for n in THREADS {
        let plots = scratch.join(format!("plots{n}"));
        let export = scratch.join(format!("export{n}.jsonl"));
        let plots_arg = plots.to_str().unwrap();
        analyzer(
            &with(&["sync", "--plot", plots_arg, "--plot-format", "svg"]),
            n,
        );
        let export_arg = export.to_str().unwrap();
        analyzer(&with(&["export", "--format", "jsonl", "-o", export_arg]), n);
        let got = (files(&plots), std::fs::read(&export).unwrap());
        match &first {
            None => first = Some(got),
            Some(f) => assert!(*f == got, "{n} threads: figures or export differ"),
        }
    }
}

#[test]
fn a_simulated_mesh_gives_the_same_results_on_any_number_of_threads() {
    let dir = tempfile::tempdir().unwrap();
    let paths = mesh(dir.path(), 5, 40_000);
    let stats = same_stream(&paths);
    assert_eq!(stats.matched, 40_000);
    assert!(stats.exchanges > 1000, "{stats:?}");
    let scratch = tempfile::tempdir().unwrap();
    same_outputs(&paths, scratch.path());
}

#[test]
fn offloads_retransmissions_and_an_early_end_give_the_same_results_on_any_number_of_threads() {
    let dir = tempfile::tempdir().unwrap();
    let paths = offloaded(dir.path());
    let stats = same_stream(&paths);
    // Every kind of decision happened.
    assert!(stats.range_matched > 500, "{stats:?}");
    assert!(stats.ambiguous > 100, "{stats:?}");
    assert!(stats.stacked_copies > 100, "{stats:?}");
    assert!(stats.unmatched > 100, "{stats:?}");
    assert!(stats.exchanges > 100, "{stats:?}");
    let scratch = tempfile::tempdir().unwrap();
    same_outputs(&paths, scratch.path());
}

/// More files than are decoded ahead each (`input::ahead::MAX_FILES`): the pool decodes the
/// chunks the merge asks for, a budget shared by all files, with the alignment's sample read from
/// copies of the files (reusing each reading thread's tables), and a file cut short among them.
#[test]
fn more_files_than_are_decoded_ahead_give_the_same_results_on_any_number_of_threads() {
    let dir = tempfile::tempdir().unwrap();
    let paths = mesh(dir.path(), 70, 300_000);
    let bytes = std::fs::read(&paths[40]).unwrap();
    std::fs::write(&paths[40], &bytes[..bytes.len() * 2 / 3]).unwrap();
    let stats = same_stream(&paths);
    assert!(stats.matched > 250_000, "{stats:?}");
    assert!(
        stats
            .warnings
            .iter()
            .any(|w| w.contains("damaged or cut short")),
        "{:?}",
        stats.warnings
    );
    let args: Vec<String> = ["sync", "--json"]
        .into_iter()
        .map(String::from)
        .chain(paths.iter().map(|p| p.display().to_string()))
        .collect();
    let one = analyzer(&args, 1);
    for n in &THREADS[1..] {
        assert!(analyzer(&args, *n) == one, "{n} threads differ");
    }
}

/// What the reader meets between chunks travels with the chunks decoded ahead on other threads:
/// clock samples (the merge axis moves with each), lost counts, kernel clock states, and the
/// damage where a file was cut short.
#[test]
fn samples_losses_and_damage_between_chunks_give_the_same_results_on_any_number_of_threads() {
    let dir = tempfile::tempdir().unwrap();
    let paths = offloaded(dir.path());
    for (k, path) in paths.iter().enumerate() {
        let mut events = Vec::new();
        let mut r = TraceReader::open(path).unwrap();
        while let Some(chunk) = r.next_events().unwrap() {
            events.extend_from_slice(chunk);
        }
        let header = r.header().clone();
        drop(r);
        let mut w = TraceWriter::create(path, &header).unwrap();
        for (c, chunk) in events.chunks(300).enumerate() {
            // The realtime clock steps by 40 ms per chunk on node 0, 80 on node 1, 120 on node 2:
            // the merge axis moves with every chunk's sample.
            let monotonic = chunk[0].ts_ns;
            let realtime = 1_000_000_000_000 - 1_000_000_000 + monotonic as i64;
            w.write_clock_sample(ClockSample {
                monotonic_ns: monotonic,
                monotonic_raw_ns: monotonic,
                realtime_ns: realtime + (c * (k + 1) * 40_000_000) as i64,
                tsc: 0,
                monotonic_after_ns: monotonic,
            })
            .unwrap();
            if c % 3 == 1 {
                w.write_lost(&LostCounts {
                    send: c as u64,
                    recv: k as u64,
                    per_cpu: vec![[c as u64, k as u64]],
                    disk: 0,
                })
                .unwrap();
                w.write_kernel_clock(KernelClock {
                    monotonic_ns: monotonic,
                    ..KernelClock::default()
                })
                .unwrap();
            }
            w.write_events(chunk).unwrap();
            w.flush().unwrap();
        }
        w.finish(&Footer::default()).unwrap();
    }
    // Node 1's file is cut inside a chunk, two thirds in.
    let bytes = std::fs::read(&paths[1]).unwrap();
    std::fs::write(&paths[1], &bytes[..bytes.len() * 2 / 3]).unwrap();
    let stats = same_stream(&paths);
    let said = |what: &str| stats.warnings.iter().any(|w| w.contains(what));
    assert!(said("damaged or cut short"), "{:?}", stats.warnings);
    assert!(said("the kernel lost"), "{:?}", stats.warnings);
    let scratch = tempfile::tempdir().unwrap();
    same_outputs(&paths, scratch.path());
}

/// A full mesh of `n` traces as a text message file (many pairs, a few messages each: the
/// message pass splits them over the threads by pair).
fn text_mesh(path: &Path, n: usize, messages: u64, seed: u64) {
    let clock = |k: usize| LinearClock {
        offset_ns: (k as f64 * 0.37 - 5.0) * 1e9,
        drift_ppm: (k as f64 * 53.0) % 180.0 - 90.0,
    };
    let w = full_mesh(n, clock, messages, 20_000.0, 30_000.0, seed);
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    w.write_text(&mut out).unwrap();
}

#[test]
fn text_message_files_give_the_same_results_on_any_number_of_threads() {
    let dir = tempfile::tempdir().unwrap();
    let (big, small) = (dir.path().join("mesh.txt"), dir.path().join("small.txt"));
    text_mesh(&big, 30, 20_000, 11);
    text_mesh(&small, 4, 2_000, 12);
    let scratch = tempfile::tempdir().unwrap();
    same_outputs(&[big, small], scratch.path());
}
