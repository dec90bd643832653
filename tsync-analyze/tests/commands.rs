//! The commands built on the linear correction — `info`, `correct`, `eval`, `export` and
//! `--plot` — run end to end on text message files and on agent trace files.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

mod common;
use common::{epoch_ns, lttv, tshark};
use tsync_common::format::{Footer, Header, TraceWriter};
use tsync_common::{ETH_P_IP, IPPROTO_TCP, PacketEvent, direction, kind, tcp_flag};
use tsync_sim::{Delay, DelayTail, LinearClock, Workload};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tsync-analyze"))
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("run tsync-analyze")
}

/// Runs a command that must succeed and returns its stdout.
fn ok(args: &[&str]) -> String {
    let o = run(args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{args:?} failed:\n{err}");
    assert!(!err.contains("panicked"), "{err}");
    String::from_utf8(o.stdout).unwrap()
}

fn ok_json(args: &[&str]) -> Value {
    let out = ok(args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}):\n{out}"))
}

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// One message of a hand-built scenario: sender, receiver, local send and receive times (ns).
type Msg = (u32, u32, i64, i64);

/// The clock offsets of [`stepped_clock_messages`].
const STEPPED_OFFSETS: [i64; 2] = [0, 7_000_000_000];

/// Two nodes; node 1's clock steps forward by 300 µs half-way through, which no single line can
/// follow: the linear correction leaves messages received before they were sent.
fn stepped_clock_messages() -> Vec<Msg> {
    let [_, offset] = STEPPED_OFFSETS;
    let local1 = |t: i64| t + offset + if t >= 2_000_000_000 { 300_000 } else { 0 };
    (0..2000i64)
        .map(|k| {
            let t = 1_000_000_000 + k * 1_000_000;
            let delay = 20_000 + (k * 7919 % 50) * 1000;
            if k % 2 == 0 {
                (0, 1, t, local1(t + delay))
            } else {
                (1, 0, local1(t), t + delay)
            }
        })
        .collect()
}

fn seconds(ns: i64) -> String {
    format!("{}.{:09}", ns / 1_000_000_000, ns % 1_000_000_000)
}

fn write_text(path: &Path, traces: u32, messages: &[Msg]) -> String {
    let mut text = format!("# hand-built\n{traces}\n");
    for &(a, b, t1, t2) in messages {
        text.push_str(&format!("{a} {b} {} {}\n", seconds(t1), seconds(t2)));
    }
    std::fs::write(path, text).unwrap();
    s(path)
}

fn addr(node: u32) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[..4].copy_from_slice(&[10, 1, 0, node as u8 + 1]);
    a
}

/// Writes the messages as agent trace files (one per node, events in time order), each
/// message a TCP segment with its own sequence number. `offsets[k]` is node k's rough clock
/// offset: the header's realtime start says it, as a node's NTP would, so that matching can
/// align the files.
fn write_traces(dir: &Path, offsets: &[i64], messages: &[Msg]) -> Vec<String> {
    let traces = offsets.len() as u32;
    let mut events: Vec<Vec<PacketEvent>> = vec![Vec::new(); traces as usize];
    for (k, &(a, b, t1, t2)) in messages.iter().enumerate() {
        let e = PacketEvent {
            ts_ns: t1 as u64,
            ifindex: 2,
            direction: direction::SEND,
            kind: kind::TCP4,
            saddr: addr(a),
            daddr: addr(b),
            network_protocol: ETH_P_IP,
            tot_len: 140,
            source: 40000 + a as u16,
            dest: 40000 + b as u16,
            seq: 1000 + 100 * k as u32,
            ack_seq: 1,
            transport_protocol: IPPROTO_TCP,
            ihl: 5,
            doff: 5,
            tcp_flags: tcp_flag::ACK | tcp_flag::PSH,
            ..PacketEvent::default()
        };
        events[a as usize].push(e);
        events[b as usize].push(PacketEvent {
            ts_ns: t2 as u64,
            direction: direction::RECV,
            ..e
        });
    }
    let mut paths = Vec::new();
    for (node, mut ev) in events.into_iter().enumerate() {
        ev.sort_by_key(|e| e.ts_ns);
        let path = dir.join(format!("n{node}.tsync"));
        let header = Header {
            node: format!("n{node}"),
            hostname: format!("host{node}"),
            start_realtime_ns: 1_700_000_000_000_000_000,
            start_monotonic_ns: (500_000_000 + offsets[node]) as u64,
            ..Header::default()
        };
        let mut w = TraceWriter::create(&path, &header).unwrap();
        w.write_events(&ev).unwrap();
        let sends = ev.iter().filter(|e| e.direction == direction::SEND).count() as u64;
        w.finish(&Footer {
            events: ev.len() as u64,
            send_events: sends,
            recv_events: ev.len() as u64 - sends,
            ..Footer::default()
        })
        .unwrap();
        paths.push(s(&path));
    }
    paths
}

/// Three nodes with linear clocks (hours apart) talking over every pair: an accurate hull.
fn linear_workload(dir: &Path) -> (Vec<String>, u64) {
    let clocks = vec![
        LinearClock {
            offset_ns: 5_000e9,
            drift_ppm: 120.0,
        },
        LinearClock {
            offset_ns: 9_000e9,
            drift_ppm: -80.0,
        },
        LinearClock {
            offset_ns: 3e9,
            drift_ppm: 10.0,
        },
    ];
    let w = Workload {
        clocks,
        links: vec![(0, 1), (0, 2), (1, 2)],
        messages: 3000,
        start_ns: 20e9,
        interval_ns: 200_000.0,
        delay: Delay {
            min_ns: 20_000.0,
            tail: DelayTail::Exponential { mean_ns: 40_000.0 },
            max_ns: 5_020_000.0,
        },
        seed: 7,
    };
    let paths = w.write_traces(dir).unwrap();
    (paths.iter().map(|p| s(p)).collect(), w.messages)
}

fn args<'a>(head: &[&'a str], inputs: &'a [String]) -> Vec<&'a str> {
    head.iter()
        .copied()
        .chain(inputs.iter().map(String::as_str))
        .collect()
}

// ---------------------------------------------------------------------------------------------

#[test]
fn info_describes_trace_and_text_files() {
    let dir = tempfile::tempdir().unwrap();
    let traces = write_traces(dir.path(), &STEPPED_OFFSETS, &stepped_clock_messages());
    let text = lttv("test1.txt");
    let v = ok_json(&["info", "--json", &traces[0], &text]);
    let files = v.as_array().unwrap();
    assert_eq!(files.len(), 2);
    assert_eq!(files[0]["format"], "trace");
    assert_eq!(files[0]["header"]["node"], "n0");
    assert_eq!(files[0]["events"]["total"], 2000);
    assert_eq!(files[0]["events"]["send"], 1000);
    assert_eq!(files[0]["complete"], true);
    assert_eq!(files[1]["format"], "text");
    assert_eq!(files[1]["traces"], 2);
    assert_eq!(files[1]["messages"], 4);
    let plain = ok(&["info", &traces[1]]);
    assert!(plain.contains("n1") && plain.contains("2000"), "{plain}");
    let o = run(&["info", "/nonexistent/x.tsync"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent/x.tsync"));
}

#[test]
fn correct_removes_injected_violations_on_text_and_trace_files() {
    let dir = tempfile::tempdir().unwrap();
    let messages = stepped_clock_messages();
    let text = vec![write_text(&dir.path().join("step.txt"), 2, &messages)];
    let traces = write_traces(dir.path(), &STEPPED_OFFSETS, &messages);
    for inputs in [&text, &traces] {
        let v = ok_json(&args(&["correct", "--json"], inputs));
        // The contract's fields, with their types.
        for key in [
            "violations_before",
            "violations_after",
            "corrected_explicitly",
        ] {
            assert!(v[key].is_u64(), "{key}: {v}");
        }
        assert_eq!(v["gamma"], 0.999);
        assert!(v["displacement_ns"]["mean"].is_f64() && v["displacement_ns"]["max"].is_f64());
        for key in ["gt_0_01_pct", "gt_1_pct", "gt_100_pct"] {
            assert!(v["interval_deviation_share"][key].is_f64(), "{key}: {v}");
        }
        assert!(
            v["violations_before"].as_u64().unwrap() > 0,
            "the step must leave violations: {v}"
        );
        assert_eq!(v["violations_after"], 0, "{v}");
        assert!(v["corrected_explicitly"].as_u64().unwrap() > 0);
        assert_eq!(v["messages"], 2000);
        assert_eq!(v["events"], 4000);
        // A larger l_min is honoured too, and the parameters are echoed.
        let v = ok_json(&args(
            &[
                "correct",
                "--json",
                "--l-min-ns",
                "15000",
                "--gamma",
                "0.99",
            ],
            inputs,
        ));
        assert_eq!(v["violations_after"], 0, "{v}");
        assert_eq!(v["gamma"], 0.99);
    }
    let report = ok(&args(&["correct"], &text));
    assert!(report.contains("violations after    0"), "{report}");
}

#[test]
fn eval_counts_a_hand_built_case() {
    // Same clocks; 0→1 messages of 10 µs (×2) and 1 ms (×3), 1→0 of 10 µs (×2) and 1 ms (×1).
    // With l_min = 50 µs, 2 + 2 are too fast whatever line inside the corridor is chosen
    // (the corridor is ±10 µs wide), and the hull guarantees no inversion.
    let ms = 1_000_000i64;
    let msgs: Vec<Msg> = vec![
        (0, 1, 1000 * ms, 1000 * ms + 10_000),
        (1, 0, 1100 * ms, 1100 * ms + 10_000),
        (0, 1, 1200 * ms, 1201 * ms),
        (0, 1, 1300 * ms, 1301 * ms),
        (1, 0, 1400 * ms, 1401 * ms),
        (0, 1, 1500 * ms, 1501 * ms),
        (1, 0, 1600 * ms, 1600 * ms + 10_000),
        (0, 1, 1700 * ms, 1700 * ms + 10_000),
    ];
    let dir = tempfile::tempdir().unwrap();
    let text = vec![write_text(&dir.path().join("hand.txt"), 2, &msgs)];
    let traces = write_traces(dir.path(), &[0, 0], &msgs);
    for inputs in [&text, &traces] {
        let v = ok_json(&args(&["eval", "--json", "--l-min-ns", "50000"], inputs));
        assert_eq!(v["clc"], false);
        let pairs = v["pairs"].as_array().unwrap();
        assert_eq!(pairs.len(), 2, "{v}");
        let got: Vec<(u64, u64, u64, u64, u64)> = pairs
            .iter()
            .map(|p| {
                (
                    p["from"].as_u64().unwrap(),
                    p["to"].as_u64().unwrap(),
                    p["messages"].as_u64().unwrap(),
                    p["inversions"].as_u64().unwrap(),
                    p["too_fast"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(got, vec![(0, 1, 5, 0, 2), (1, 0, 3, 0, 2)], "{v}");
        assert_eq!(pairs[0]["l_min_ns"], 50000.0);
        assert!(pairs[0].get("min_rtt_ns").is_some());
    }
}

#[test]
fn eval_shows_inversions_that_the_clc_removes() {
    // Next to a 10 µs message 0→1, a message 1→0 whose receive is stamped 1 ms before its
    // send: under any single line one of the two is received before it was sent.
    let ms = 1_000_000i64;
    let mut msgs: Vec<Msg> = Vec::new();
    for k in 0..20i64 {
        let t = 1000 * ms + k * 10 * ms;
        msgs.push((0, 1, t, t + 10_000));
        msgs.push((1, 0, t + 5 * ms, t + 5 * ms + 10_000));
    }
    msgs.push((0, 1, 1095 * ms, 1095 * ms + 10_000));
    msgs.push((1, 0, 1096 * ms, 1095 * ms));
    msgs.sort_by_key(|m| m.2.min(m.3));
    let dir = tempfile::tempdir().unwrap();
    let text = vec![write_text(&dir.path().join("inv.txt"), 2, &msgs)];
    let traces = write_traces(dir.path(), &[0, 0], &msgs);
    for inputs in [&text, &traces] {
        let v = ok_json(&args(&["eval", "--json", "--l-min-ns", "0"], inputs));
        let inversions: u64 = v["pairs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["inversions"].as_u64().unwrap())
            .sum();
        assert!(inversions >= 1, "{v}");
        let v = ok_json(&args(
            &["eval", "--json", "--clc", "--l-min-ns", "0"],
            inputs,
        ));
        assert_eq!(v["clc"], true);
        for p in v["pairs"].as_array().unwrap() {
            assert_eq!(p["inversions"], 0, "{v}");
            assert_eq!(p["too_fast"], 0, "{v}");
        }
    }
}

#[test]
fn eval_on_trace_files_counts_every_message() {
    let dir = tempfile::tempdir().unwrap();
    let (traces, messages) = linear_workload(dir.path());
    let v = ok_json(&args(&["eval", "--json"], &traces));
    let pairs = v["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 6, "every ordered pair talks: {v}");
    let total: u64 = pairs.iter().map(|p| p["messages"].as_u64().unwrap()).sum();
    assert_eq!(total, messages);
    for p in pairs {
        assert_eq!(p["inversions"], 0, "the hull allows no inversion: {p}");
    }
    assert_eq!(v["accuracy"].as_array().unwrap().len(), 3);
}

// ---------------------------------------------------------------------------------------------
// Exports

/// Reads a pcapng export back with tshark: per packet its interface, time and comment, and
/// checks the contract: one packet per event, one interface per node, and every receive
/// that names its send event at or after it.
fn check_pcapng(file: &str, nodes: &[&str], events: usize) {
    let out = tshark(&[
        "-r",
        file,
        "-T",
        "fields",
        "-E",
        "separator=|",
        "-e",
        "frame.interface_name",
        "-e",
        "frame.time_epoch",
        "-e",
        "frame.comment",
    ]);
    let rows: Vec<Vec<&str>> = out.lines().map(|l| l.split('|').collect()).collect();
    assert_eq!(rows.len(), events, "packet count");
    let mut seen: Vec<&str> = rows.iter().map(|r| r[0]).collect();
    seen.sort();
    seen.dedup();
    assert_eq!(seen, nodes, "one interface per node");
    // "tsync: recv event 3 of n1, original … ns, corrected … ns, peer event 2 of n0"
    let mut time: HashMap<(String, u64), i128> = HashMap::new();
    let mut receives = Vec::new();
    for r in &rows {
        let words: Vec<&str> = r[2].split([' ', ',']).filter(|w| !w.is_empty()).collect();
        assert_eq!(words[0], "tsync:", "{r:?}");
        let key = (words[5].to_string(), words[3].parse::<u64>().unwrap());
        let t = epoch_ns(r[1]);
        time.insert(key, t);
        if words[1] == "recv"
            && let Some(p) = words.iter().position(|w| *w == "peer")
        {
            let peer = (
                words[p + 4].to_string(),
                words[p + 2].parse::<u64>().unwrap(),
            );
            receives.push((t, peer));
        }
    }
    assert!(!receives.is_empty());
    for (t, peer) in receives {
        let sent = time[&peer];
        assert!(
            t >= sent,
            "received at {t} before sent at {sent} ({peer:?})"
        );
    }
    let ordered = rows
        .windows(2)
        .all(|w| epoch_ns(w[0][1]) <= epoch_ns(w[1][1]));
    assert!(ordered, "packets are in corrected-time order");
}

#[test]
fn pcapng_export_of_trace_files_reads_back_in_tshark() {
    let dir = tempfile::tempdir().unwrap();
    let (traces, messages) = linear_workload(dir.path());
    let out = s(&dir.path().join("all.pcapng"));
    ok(&args(
        &["export", "--format", "pcapng", "-o", &out],
        &traces,
    ));
    check_pcapng(&out, &["node0", "node1", "node2"], 2 * messages as usize);
}

#[test]
fn pcapng_export_of_text_messages_and_with_clc_reads_back_in_tshark() {
    let dir = tempfile::tempdir().unwrap();
    let out = s(&dir.path().join("t.pcapng"));
    ok(&[
        "export",
        "--format",
        "pcapng",
        "-o",
        &out,
        &lttv("test1.txt"),
    ]);
    check_pcapng(&out, &["0", "1"], 8);
    // The synthesized segments: SYN, per-sender sequence numbers, 10.0.0.(trace+1).
    let fields = tshark(&[
        "-r",
        &out,
        "-T",
        "fields",
        "-e",
        "ip.src",
        "-e",
        "tcp.seq_raw",
        "-e",
        "tcp.flags.syn",
    ]);
    assert!(fields.lines().all(|l| l.ends_with("\t1")), "{fields}");
    assert!(
        fields.contains("10.0.0.1\t1") && fields.contains("10.0.0.2\t0"),
        "{fields}"
    );

    // With the CLC on an input whose linear correction leaves inversions.
    let messages = stepped_clock_messages();
    let traces = write_traces(dir.path(), &STEPPED_OFFSETS, &messages);
    let out = s(&dir.path().join("clc.pcapng"));
    ok(&args(
        &[
            "export",
            "--clc",
            "--l-min-ns",
            "0",
            "--format",
            "pcapng",
            "-o",
            &out,
        ],
        &traces,
    ));
    check_pcapng(&out, &["n0", "n1"], 2 * messages.len());
}

/// Checks JSONL records: count, fields, and that every peer link is mutual with send ≤ receive.
fn check_records(records: &[HashMap<String, Value>], events: usize) {
    assert_eq!(records.len(), events);
    let mut by_event: HashMap<(u64, u64), &HashMap<String, Value>> = HashMap::new();
    for r in records {
        let key = (
            r["node_index"].as_u64().unwrap(),
            r["event_index"].as_u64().unwrap(),
        );
        assert!(
            by_event.insert(key, r).is_none(),
            "event listed twice: {key:?}"
        );
    }
    let mut linked = 0;
    for r in records {
        let Some(peer_node) = r["peer_node_index"].as_u64() else {
            continue;
        };
        let peer = by_event[&(peer_node, r["peer_event_index"].as_u64().unwrap())];
        assert_eq!(peer["peer_node_index"], r["node_index"]);
        assert_ne!(peer["direction"], r["direction"]);
        if r["direction"] == "recv" {
            linked += 1;
            let (recv, send) = (r["corrected_ns"].as_i64(), peer["corrected_ns"].as_i64());
            assert!(recv >= send, "{r:?} before {peer:?}");
        }
    }
    assert_eq!(linked * 2, events, "every event of these inputs is matched");
    // Each trace keeps its event order on the corrected timebase.
    let mut per_node: HashMap<u64, Vec<(u64, i64)>> = HashMap::new();
    for r in records {
        per_node
            .entry(r["node_index"].as_u64().unwrap())
            .or_default()
            .push((
                r["event_index"].as_u64().unwrap(),
                r["corrected_ns"].as_i64().unwrap(),
            ));
    }
    for (node, mut events) in per_node {
        events.sort_unstable();
        assert!(
            events.windows(2).all(|w| w[0].1 <= w[1].1),
            "node {node}: corrected times out of event order"
        );
    }
}

#[test]
fn jsonl_and_csv_exports_parse_back() {
    let dir = tempfile::tempdir().unwrap();
    let messages = stepped_clock_messages();
    let text = vec![write_text(&dir.path().join("step.txt"), 2, &messages)];
    let traces = write_traces(dir.path(), &STEPPED_OFFSETS, &messages);
    for inputs in [&text, &traces] {
        let out = s(&dir.path().join("e.jsonl"));
        ok(&args(
            &["export", "--clc", "--format", "jsonl", "-o", &out],
            inputs,
        ));
        let records: Vec<HashMap<String, Value>> = std::fs::read_to_string(&out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        check_records(&records, 2 * messages.len());
        assert_eq!(records[0]["kind"], "tcp4");

        let out = s(&dir.path().join("e.csv"));
        ok(&args(
            &["export", "--clc", "--format", "csv", "-o", &out],
            inputs,
        ));
        let mut reader = csv::Reader::from_path(&out).unwrap();
        let header: Vec<String> = reader.headers().unwrap().iter().map(String::from).collect();
        assert_eq!(
            header[..6],
            [
                "node",
                "node_index",
                "event_index",
                "direction",
                "original_ns",
                "corrected_ns"
            ]
        );
        let rows: Vec<HashMap<String, Value>> = reader
            .records()
            .map(|row| {
                let row = row.unwrap();
                header
                    .iter()
                    .zip(row.iter())
                    .map(|(k, v)| {
                        let v = match v.parse::<i64>() {
                            Ok(n) => Value::from(n),
                            Err(_) if v.is_empty() => Value::Null,
                            Err(_) => Value::from(v),
                        };
                        (k.clone(), v)
                    })
                    .collect()
            })
            .collect();
        check_records(&rows, 2 * messages.len());
    }
}

#[test]
fn export_errors_are_clear() {
    let dir = tempfile::tempdir().unwrap();
    let out = s(&dir.path().join("x.pcapng"));
    let o = run(&[
        "export",
        "--format",
        "pcapng",
        "-o",
        &out,
        "/nonexistent/in.tsync",
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("/nonexistent/in.tsync") && !err.contains("panicked"),
        "{err}"
    );
    let o = run(&[
        "export",
        "--format",
        "csv",
        "-o",
        "/nonexistent-dir/out.csv",
        &lttv("test1.txt"),
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("cannot create /nonexistent-dir/out.csv"),
        "{err}"
    );
    let o = run(&["correct", "--l-min-ns=-5", &lttv("test1.txt")]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--l-min-ns"));
}

// ---------------------------------------------------------------------------------------------
// Plots

fn check_svgs(dir: &Path, expected: &[&str]) {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    for e in expected {
        assert!(names.iter().any(|n| n == e), "{e} missing in {names:?}");
    }
    for n in names.iter().filter(|n| n.ends_with(".svg")) {
        let text = std::fs::read_to_string(dir.join(n)).unwrap();
        let doc = roxmltree::Document::parse(&text).unwrap_or_else(|e| panic!("{n}: {e}"));
        assert_eq!(doc.root_element().tag_name().name(), "svg");
        let shapes = doc
            .descendants()
            .filter(|d| matches!(d.tag_name().name(), "circle" | "polyline" | "rect" | "path"))
            .count();
        assert!(shapes > 10, "{n}: only {shapes} shapes");
    }
}

#[test]
fn plot_writes_valid_svg_for_trace_and_text_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let (traces, _) = linear_workload(dir.path());
    let plots = dir.path().join("plots");
    let p = s(&plots);
    ok(&args(
        &["eval", "--plot", &p, "--plot-format", "svg"],
        &traces,
    ));
    check_svgs(
        &plots,
        &[
            "sync-node0-node1.svg",
            "sync-node0-node2.svg",
            "sync-node1-node2.svg",
            "transfer-node0-node1.svg",
        ],
    );
    let plain = ok(&args(&["sync", "--json"], &traces));
    let with_plots = ok(&args(
        &[
            "sync",
            "--json",
            "--plot",
            &s(&dir.path().join("p2")),
            "--plot-format",
            "svg",
        ],
        &traces,
    ));
    assert_eq!(plain, with_plots, "--plot does not change what sync prints");
    let text_plots = dir.path().join("text-plots");
    let p = s(&text_plots);
    let v = ok_json(&["sync", "--json", "--plot", &p, &lttv("test1.txt")]);
    assert_eq!(
        v["pairs"][0]["quality"], "accurate",
        "sync output unchanged by --plot"
    );
    check_svgs(
        &text_plots,
        &["sync-0-1.svg", "sync-0-1.png", "transfer-0-1.svg"],
    );
}
