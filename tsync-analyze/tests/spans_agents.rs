//! Spans with agent traces (issue 34, "mixed inputs"): agent trace files of three nodes with
//! known skews (a `tsync_sim::Workload`) and an OTLP/JSON span file whose hosts are those nodes.
//! A span node with an agent trace of its name shares that trace's clock: one node, one map, the
//! packets' tight map correcting the spans; a node only in spans keeps a trace of its own, from
//! its span messages; the report says per pair how many messages came from spans.

mod common;

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use common::{realtime_base, run, s, stderr};
use serde_json::{Value, json};
use tsync_sim::{Delay, DelayTail, LinearClock, Workload};

/// splitmix64: the test's own reproducible random numbers.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn exp(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.unit()).ln()
    }
}

/// The simulation's true time → a node's CLOCK_REALTIME, ns. The agents' nodes read the true
/// realtime (the simulated samples carry `base` + the true time, as namespaces of one host
/// share one realtime clock); a node without agent may be off.
#[derive(Clone, Copy)]
struct Realtime {
    base: i64,
    offset_ns: f64,
    drift: f64,
}

impl Realtime {
    fn local(&self, t: f64) -> i64 {
        self.base + (t + self.offset_ns + self.drift * (t - 10e9)).round() as i64
    }
}

/// One span with its true times (the simulation's ns).
struct Span {
    node: usize,
    id: u64,
    parent: Option<u64>,
    kind: u8,
    start: f64,
    end: f64,
}

/// Calls among `nodes` nodes between true times 11 s and 38 s: a CLIENT span on one node, its
/// SERVER child on another, positive random latencies each way.
fn calls(nodes: usize, count: u64, seed: u64) -> Vec<Span> {
    let mut rng = Rng(seed);
    let mut spans = Vec::new();
    for i in 0..count {
        let t = 11e9 + i as f64 * 27e9 / count as f64 + rng.unit() * 1e6;
        let from = (rng.next() % nodes as u64) as usize;
        let to = (from + 1 + (rng.next() % (nodes as u64 - 1)) as usize) % nodes;
        let (client, server) = (rng.next(), rng.next());
        let arrival = t + 22_000.0 + rng.exp(40_000.0);
        let server_start = arrival + rng.unit() * 15_000.0;
        let reply = server_start + rng.exp(30_000.0);
        let back = reply + 22_000.0 + rng.exp(40_000.0);
        spans.push(Span {
            node: to,
            id: server,
            parent: Some(client),
            kind: 2,
            start: server_start,
            end: reply + rng.unit() * 300_000.0,
        });
        spans.push(Span {
            node: from,
            id: client,
            parent: None,
            kind: 3,
            start: t,
            end: back + rng.unit() * 8_000.0,
        });
    }
    spans
}

/// Writes the spans as the Collector's file exporter would, one resource per node (`host.name`
/// `node<K>`), 40 spans a line, each node's times on its realtime clock.
fn write_spans(path: &Path, spans: &[Span], clocks: &[Realtime]) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    for batch in spans.chunks(40) {
        let resources: Vec<Value> = (0..clocks.len())
            .filter(|n| batch.iter().any(|sp| sp.node == *n))
            .map(|n| {
                let spans: Vec<Value> = batch
                    .iter()
                    .filter(|sp| sp.node == n)
                    .map(|sp| {
                        json!({
                            "traceId": format!("{:032x}", sp.parent.unwrap_or(sp.id)),
                            "spanId": format!("{:016x}", sp.id),
                            "parentSpanId": sp.parent.map_or(String::new(), |p| format!("{p:016x}")),
                            "name": "GET /",
                            "kind": sp.kind,
                            "startTimeUnixNano": clocks[n].local(sp.start).to_string(),
                            "endTimeUnixNano": clocks[n].local(sp.end).to_string(),
                            "status": {}
                        })
                    })
                    .collect();
                json!({
                    "resource": {"attributes": [
                        {"key": "host.name", "value": {"stringValue": format!("node{n}")}}
                    ]},
                    "scopeSpans": [{"scope": {"name": "test"}, "spans": spans}]
                })
            })
            .collect();
        writeln!(f, "{}", json!({"resourceSpans": resources})).unwrap();
    }
    f.flush().unwrap();
}

/// Agent trace files of `nodes` nodes with skewed monotonic clocks, 40 s of packets among all.
fn agent_traces(dir: &Path, nodes: usize) -> (Vec<PathBuf>, Workload) {
    let clocks = [(2e9, 30.0), (9e9, -40.0), (5.5e9, 55.0)];
    let w = Workload {
        clocks: clocks[..nodes]
            .iter()
            .map(|&(offset_ns, drift_ppm)| LinearClock {
                offset_ns,
                drift_ppm,
            })
            .collect(),
        links: (0..nodes as u32)
            .flat_map(|a| (a + 1..nodes as u32).map(move |b| (a, b)))
            .collect(),
        messages: 60_000,
        start_ns: 10e9,
        interval_ns: 500_000.0,
        delay: Delay {
            min_ns: 20_000.0,
            tail: DelayTail::Exponential { mean_ns: 30_000.0 },
            max_ns: 1_020_000.0,
        },
        seed: 11,
    };
    (w.write_traces(dir).unwrap(), w)
}

fn sync_json(args: &[String]) -> Value {
    let mut all = vec!["sync".to_string(), "--json".into()];
    all.extend(args.iter().cloned());
    let out = run(&all.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// An `int` attribute of a corrected span.
fn attribute(span: &Value, key: &str) -> Option<i64> {
    span["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)
        .and_then(|a| {
            let v = &a["value"]["intValue"];
            v.as_str().map_or_else(|| v.as_i64(), |t| t.parse().ok())
        })
}

/// What `apply --format otlp` made of every span: per span, the error of its corrected start and
/// end against the truth (the reference's realtime at the true instant), and whether each
/// interval held the truth; with the number of times that had no interval.
struct Applied {
    errors: Vec<(usize, f64)>,
    missed: Vec<String>,
    without_interval: usize,
}

fn apply_otlp(
    inputs: &[String],
    spans_path: &Path,
    out: &Path,
    truth: &[Span],
    base: i64,
) -> Applied {
    let mut args: Vec<String> = vec!["apply".into()];
    args.extend(inputs.iter().cloned());
    for a in [
        "--reference",
        "node0",
        "--format",
        "otlp",
        "--events",
        &s(spans_path),
        "-o",
        &s(out),
    ] {
        args.push(a.to_string());
    }
    let r = run(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(r.status.success(), "{}", stderr(&r));
    let by_id: HashMap<u64, &Span> = truth.iter().map(|sp| (sp.id, sp)).collect();
    let mut applied = Applied {
        errors: Vec::new(),
        missed: Vec::new(),
        without_interval: 0,
    };
    for line in std::fs::read_to_string(out).unwrap().lines() {
        let doc: Value = serde_json::from_str(line).unwrap();
        for rs in doc["resourceSpans"].as_array().unwrap() {
            for sp in rs["scopeSpans"][0]["spans"].as_array().unwrap() {
                let id = u64::from_str_radix(sp["spanId"].as_str().unwrap(), 16).unwrap();
                let t = by_id[&id];
                for (field, which, true_t) in [
                    ("startTimeUnixNano", "start", t.start),
                    ("endTimeUnixNano", "end", t.end),
                ] {
                    let got: i64 = sp[field].as_str().unwrap().parse().unwrap();
                    let want = base + true_t.round() as i64;
                    applied.errors.push((t.node, (got - want) as f64));
                    match (
                        attribute(sp, &format!("tsync.{which}.lo_unix_nano")),
                        attribute(sp, &format!("tsync.{which}.hi_unix_nano")),
                    ) {
                        (Some(lo), Some(hi)) => {
                            if !(lo <= want && want <= hi) {
                                applied.missed.push(format!(
                                    "node{} {id:x} {which}: {want} not in [{lo}, {hi}]",
                                    t.node
                                ));
                            }
                        }
                        _ => applied.without_interval += 1,
                    }
                }
            }
        }
    }
    applied
}

fn worst(errors: &[(usize, f64)], node: usize) -> f64 {
    errors
        .iter()
        .filter(|(n, _)| *n == node)
        .map(|(_, e)| e.abs())
        .fold(0.0, f64::max)
}

#[test]
fn spans_of_agent_nodes_share_their_maps_and_land_within_a_microsecond() {
    let dir = tempfile::tempdir().unwrap();
    let (traces, w) = agent_traces(dir.path(), 3);
    let traces: Vec<String> = traces.iter().map(|p| s(p)).collect();
    let base = realtime_base(&traces[0], w.start_ns);
    let clocks = [Realtime {
        base,
        offset_ns: 0.0,
        drift: 0.0,
    }; 3];
    let spans = calls(3, 600, 3);
    let spans_path = dir.path().join("spans.jsonl");
    write_spans(&spans_path, &spans, &clocks);

    // Today's way, spans alone: three traces of their own, loose.
    let alone = sync_json(&[s(&spans_path), "--reference".into(), "node0".into()]);
    assert_eq!(alone["traces"].as_array().unwrap().len(), 3);

    // Both: one trace per node, named as the agents name them; every pair says how many of its
    // messages came from spans.
    let mut inputs = traces.clone();
    inputs.push(s(&spans_path));
    let doc = sync_json(&[&inputs[..], &["--reference".into(), "node0".into()]].concat());
    let names: Vec<&str> = doc["traces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["node0", "node1", "node2"]);
    let mut from_spans = 0;
    for p in doc["pairs"].as_array().unwrap() {
        assert_eq!(p["quality"], "accurate", "{p}");
        let f = &p["from_spans"];
        let (ab, ba) = (
            f["messages_ab"].as_u64().unwrap(),
            f["messages_ba"].as_u64().unwrap(),
        );
        assert!(ab > 0 && ba > 0, "{p}");
        assert!(p["messages_ab"].as_u64().unwrap() > ab + 5_000, "{p}");
        from_spans += ab + ba;
    }
    // Every call gives a request and a response message; none was dropped.
    assert_eq!(from_spans, 2 * 600);
    let warnings = doc["warnings"].to_string();
    assert!(
        warnings.contains("have agent traces of their own"),
        "{warnings}"
    );
    assert!(!warnings.contains("dropped"), "{warnings}");
    // The text report says it too.
    let mut args: Vec<&str> = vec!["sync"];
    args.extend(inputs.iter().map(String::as_str));
    let report = run(&args);
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(
        text.contains("from packets,") && text.contains("from spans)"),
        "{text}"
    );

    // The spans corrected by the packets' maps: within 1 µs of the truth, every interval
    // holding it.
    let out = dir.path().join("synced.jsonl");
    let applied = apply_otlp(&inputs, &spans_path, &out, &spans, base);
    assert!(
        applied.missed.is_empty(),
        "{:?}",
        &applied.missed[..5.min(applied.missed.len())]
    );
    assert_eq!(applied.without_interval, 0);
    for node in 0..3 {
        let e = worst(&applied.errors, node);
        eprintln!("node{node}: worst error {e} ns");
        assert!(e <= 1_000.0, "node{node}: {e} ns off the truth");
    }
    // The order of the arguments does not matter: spans first.
    let mut first = vec![s(&spans_path)];
    first.extend(traces.iter().cloned());
    let again = sync_json(&[&first[..], &["--reference".into(), "node0".into()]].concat());
    let names: Vec<&str> = again["traces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["node0", "node1", "node2"]);
}

#[test]
fn a_node_only_in_spans_gets_its_own_map_from_its_span_messages() {
    let dir = tempfile::tempdir().unwrap();
    let (traces, w) = agent_traces(dir.path(), 2);
    let traces: Vec<String> = traces.iter().map(|p| s(p)).collect();
    let base = realtime_base(&traces[0], w.start_ns);
    // node2 has no agent; its realtime clock is 37 ms ahead and 40 ppm fast.
    let clocks = [
        Realtime {
            base,
            offset_ns: 0.0,
            drift: 0.0,
        },
        Realtime {
            base,
            offset_ns: 0.0,
            drift: 0.0,
        },
        Realtime {
            base,
            offset_ns: 37_215_000.0,
            drift: 40e-6,
        },
    ];
    let spans = calls(3, 900, 5);
    let spans_path = dir.path().join("spans.jsonl");
    write_spans(&spans_path, &spans, &clocks);
    let mut inputs = traces.clone();
    inputs.push(s(&spans_path));
    let doc = sync_json(&[&inputs[..], &["--reference".into(), "node0".into()]].concat());
    let names: Vec<&str> = doc["traces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["node0", "node1", "node2"]);
    for p in doc["pairs"].as_array().unwrap() {
        assert_eq!(p["quality"], "accurate", "{p}");
        let spans_only = p["b"] == 2;
        let (ab, all) = (
            p["from_spans"]["messages_ab"].as_u64().unwrap(),
            p["messages_ab"].as_u64().unwrap(),
        );
        // node2's pairs are spans only; node0–node1 has packets too.
        assert_eq!(ab == all, spans_only, "{p}");
    }
    let out = dir.path().join("synced.jsonl");
    let applied = apply_otlp(&inputs, &spans_path, &out, &spans, base);
    assert!(
        applied.missed.is_empty(),
        "{:?}",
        &applied.missed[..5.min(applied.missed.len())]
    );
    for node in 0..2 {
        let e = worst(&applied.errors, node);
        eprintln!("node{node}: worst error {e} ns");
        assert!(e <= 1_000.0, "node{node}: {e} ns off the truth");
    }
    // node2's map comes from its calls alone: tens of µs, with intervals around the truth.
    let e = worst(&applied.errors, 2);
    eprintln!("node2 (spans only): worst error {e} ns");
    assert!(e < 100_000.0, "node2: {e} ns");
    assert!(
        applied.without_interval * 10 < applied.errors.len(),
        "{} of {} without interval",
        applied.without_interval,
        applied.errors.len()
    );
}

#[test]
fn span_nodes_without_an_agent_trace_are_traces_of_their_own_as_before() {
    let dir = tempfile::tempdir().unwrap();
    // Agent traces of nodes the spans do not name: the spans' nodes stay their own traces, and
    // the two kinds of input are two groups.
    let (traces, w) = agent_traces(dir.path(), 2);
    let base = realtime_base(&s(&traces[0]), w.start_ns);
    let renamed: Vec<PathBuf> = traces
        .iter()
        .enumerate()
        .map(|(k, p)| {
            let to = dir.path().join(format!("agent{k}.tsync"));
            std::fs::rename(p, &to).unwrap();
            to
        })
        .collect();
    let clocks = [Realtime {
        base,
        offset_ns: 0.0,
        drift: 0.0,
    }; 3];
    let spans = calls(3, 300, 9);
    let spans_path = dir.path().join("spans.jsonl");
    write_spans(&spans_path, &spans, &clocks);
    let alone = sync_json(&[s(&spans_path)]);
    // The agents' files name their nodes node0 and node1, so rename the spans' hosts instead.
    let text = std::fs::read_to_string(&spans_path)
        .unwrap()
        .replace("\"node", "\"host");
    std::fs::write(&spans_path, text).unwrap();
    let mut args: Vec<&str> = vec!["sync", "--json"];
    let renamed: Vec<String> = renamed.iter().map(|p| s(p)).collect();
    args.extend(renamed.iter().map(String::as_str));
    let sp = s(&spans_path);
    args.push(&sp);
    let out = run(&args);
    // Two groups (warned about), as before.
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("2 groups"), "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = doc["traces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["node0", "node1", "host0", "host1", "host2"]);
    // The span traces' pairs are what the spans alone give, and say they all came from spans.
    let span_pairs: Vec<&Value> = doc["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["a"].as_u64().unwrap() >= 2)
        .collect();
    let alone_pairs = alone["pairs"].as_array().unwrap();
    assert_eq!(span_pairs.len(), alone_pairs.len());
    for (p, q) in span_pairs.iter().zip(alone_pairs) {
        for key in [
            "messages_ab",
            "messages_ba",
            "a0_ns",
            "a1",
            "accuracy_ns",
            "quality",
        ] {
            assert_eq!(p[key], q[key], "{key}: {p} vs {q}");
        }
        assert_eq!(p["from_spans"]["messages_ab"], p["messages_ab"]);
        assert_eq!(q["from_spans"]["messages_ba"], q["messages_ba"]);
    }
}
