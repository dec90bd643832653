//! OpenTelemetry spans as a `sync` input: synthetic spans of three nodes whose realtime clocks
//! have known offsets and drifts, calls with positive random latencies (chains and fan-out,
//! servers whose spans often end after their client's), and the checks that every guaranteed
//! interval holds the truth, that a server's end never makes a message, that bad spans are
//! counted and never paired, and that `apply --format otlp` corrects the spans from themselves.

mod common;

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use common::{run, s, stderr};
use serde_json::{Value, json};

/// Realtime of the true time 0, ns.
const BASE: i64 = 1_700_000_000_000_000_000;

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
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Exponential of mean `mean`.
    fn exp(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.unit()).ln()
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A node's realtime clock: local = true + offset + drift·true (ns after the base).
#[derive(Clone, Copy)]
struct Clock {
    offset_ns: f64,
    drift: f64,
}

impl Clock {
    fn local(&self, t: f64) -> i64 {
        BASE + (t + self.offset_ns + self.drift * t).round() as i64
    }
    /// The true time of a local reading.
    fn truth(&self, local: f64) -> f64 {
        (local - BASE as f64 - self.offset_ns) / (1.0 + self.drift)
    }
}

const CLOCKS: [Clock; 3] = [
    Clock {
        offset_ns: 0.0,
        drift: 0.0,
    },
    Clock {
        offset_ns: 37_215_000.0,
        drift: 40e-6,
    },
    Clock {
        offset_ns: -12_503_000.0,
        drift: -25e-6,
    },
];

/// One span with true times (ns after the base).
#[derive(Clone)]
struct Span {
    node: usize,
    trace: u128,
    id: u64,
    parent: Option<u64>,
    kind: u8,
    start: f64,
    end: f64,
}

/// A call from a CLIENT span on `from` (opened at `t`) to a SERVER span on `to`, whose server
/// may call further nodes; returns the client's true end. Latencies are positive and random;
/// the server's span ends up to 400 µs after it sent the response, often after the client's
/// end.
fn call(
    rng: &mut Rng,
    spans: &mut Vec<Span>,
    trace: u128,
    parent: Option<u64>,
    from: usize,
    t: f64,
    depth: u32,
) -> f64 {
    let client = rng.next();
    let to = (from + 1 + rng.below(2) as usize) % 3;
    let arrival = t + 2_000.0 + 20_000.0 + rng.exp(40_000.0);
    let server = rng.next();
    let server_start = arrival + rng.unit() * 15_000.0;
    let mut now = server_start + rng.exp(30_000.0);
    if depth < 2 {
        // Fan-out: up to two calls from the server, one after the other.
        for _ in 0..rng.below(3) {
            now = call(
                rng,
                spans,
                trace,
                Some(server),
                to,
                now + 5_000.0,
                depth + 1,
            ) + 3_000.0;
        }
        // A call to a service on the same node: a same-node pair.
        if rng.below(4) == 0 {
            let local = rng.next();
            spans.push(Span {
                node: to,
                trace,
                id: local,
                parent: Some(server),
                kind: 3,
                start: now,
                end: now + 9_000.0,
            });
            spans.push(Span {
                node: to,
                trace,
                id: rng.next(),
                parent: Some(local),
                kind: 2,
                start: now + 2_000.0,
                end: now + 7_000.0,
            });
            now += 10_000.0;
        }
    }
    let reply = now + rng.unit() * 5_000.0;
    let back = reply + 20_000.0 + rng.exp(40_000.0);
    let end = back + rng.unit() * 8_000.0;
    spans.push(Span {
        node: to,
        trace,
        id: server,
        parent: Some(client),
        kind: 2,
        start: server_start,
        end: reply + rng.unit() * 400_000.0,
    });
    spans.push(Span {
        node: from,
        trace,
        id: client,
        parent,
        kind: 3,
        start: t,
        end,
    });
    end
}

/// Spans of `calls` root calls over about 20 s, in the order their spans end.
fn workload(seed: u64, calls: u64) -> Vec<Span> {
    let mut rng = Rng(seed);
    let mut spans = Vec::new();
    for i in 0..calls {
        let t = 1e9 + i as f64 * 20e9 / calls as f64 + rng.unit() * 1e6;
        let trace = (u128::from(rng.next()) << 64) | u128::from(rng.next());
        let from = rng.below(3) as usize;
        let root = rng.next();
        let end = call(
            &mut rng,
            &mut spans,
            trace,
            Some(root),
            from,
            t + 1_000.0,
            0,
        ) + 1_000.0;
        spans.push(Span {
            node: from,
            trace,
            id: root,
            parent: None,
            kind: 2,
            start: t,
            end,
        });
    }
    spans.sort_by(|a, b| a.end.total_cmp(&b.end));
    spans
}

fn span_json(sp: &Span) -> Value {
    let c = CLOCKS[sp.node];
    json!({
        "traceId": format!("{:032x}", sp.trace),
        "spanId": format!("{:016x}", sp.id),
        "parentSpanId": sp.parent.map_or(String::new(), |p| format!("{p:016x}")),
        "name": "GET /",
        "kind": sp.kind,
        "startTimeUnixNano": c.local(sp.start).to_string(),
        "endTimeUnixNano": c.local(sp.end).to_string(),
        "attributes": [{"key": "http.method", "value": {"stringValue": "GET"}}],
        "status": {}
    })
}

/// Writes `spans` as the Collector's file exporter would: batches of 40 spans, one
/// `TracesData` per line, one resource per node.
fn write_spans(path: &Path, spans: &[Span]) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    for batch in spans.chunks(40) {
        let resources: Vec<Value> = (0..3)
            .filter(|n| batch.iter().any(|sp| sp.node == *n))
            .map(|n| {
                json!({
                    "resource": {"attributes": [
                        {"key": "service.name", "value": {"stringValue": format!("svc-{n}")}},
                        {"key": "host.name", "value": {"stringValue": format!("node{n}")}}
                    ]},
                    "scopeSpans": [{"scope": {"name": "test"},
                        "spans": batch.iter().filter(|sp| sp.node == n).map(span_json).collect::<Vec<_>>()}]
                })
            })
            .collect();
        writeln!(f, "{}", json!({"resourceSpans": resources})).unwrap();
    }
    f.flush().unwrap();
}

/// The span file's epoch: its earliest time, down to a whole second.
fn epoch(spans: &[Span]) -> i64 {
    let first = spans
        .iter()
        .map(|sp| CLOCKS[sp.node].local(sp.start))
        .min()
        .unwrap();
    first - first % 1_000_000_000
}

fn sync_json(args: &[&str]) -> Value {
    let out = run(&[&["sync", "--json"], args].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn every_interval_from_spans_holds_the_truth() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spans.jsonl");
    for seed in [1, 2, 3] {
        let spans = workload(seed, 1500);
        write_spans(&path, &spans);
        let epoch = epoch(&spans);
        for reduction in ["joint", "path"] {
            let doc = sync_json(&[&s(&path), "--reference", "node0", "--reduction", reduction]);
            let names: Vec<&str> = doc["traces"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["name"].as_str().unwrap())
                .collect();
            let mut sorted = names.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, ["node0", "node1", "node2"]);
            for p in doc["pairs"].as_array().unwrap() {
                assert_eq!(p["quality"], "accurate", "{p}");
            }
            let mut checked = 0;
            for t in doc["traces"].as_array().unwrap() {
                let name = t["name"].as_str().unwrap();
                let k: usize = name[4..].parse().unwrap();
                if k == 0 {
                    continue;
                }
                let points = t["intervals"].as_array().expect("intervals");
                assert!(points.len() >= 9, "{t}");
                for p in points {
                    // Times are ns since the file's epoch.
                    let at = p["at_ns"].as_f64().unwrap() + epoch as f64;
                    let truth = (CLOCKS[0].local(CLOCKS[k].truth(at)) - epoch) as f64;
                    let (lo, hi) = (p["lo_ns"].as_f64().unwrap(), p["hi_ns"].as_f64().unwrap());
                    assert!(
                        lo - 1.0 <= truth && truth <= hi + 1.0,
                        "seed {seed} {reduction} {name}: {truth} not in [{lo}, {hi}]"
                    );
                    assert!(hi - lo < 200_000.0, "seed {seed}: width {} ns", hi - lo);
                    checked += 1;
                }
            }
            assert!(checked >= 18);
            let warnings = doc["warnings"].as_array().unwrap();
            let summary = warnings[0].as_str().unwrap();
            assert!(
                summary.contains("named by its resource's `host.name` (node"),
                "{summary}"
            );
            assert!(
                summary.contains(&format!("since the file's epoch {epoch} ns")),
                "{summary}"
            );
        }
    }
}

/// A message of `messages` output: sender, receiver, send ns, receive ns.
type TextMessage = (usize, usize, i64, i64);

/// Parses `messages` output: the trace names and the messages.
fn messages(path: &Path) -> (Vec<String>, Vec<TextMessage>) {
    let out = run(&["messages", &s(path)]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    let names = text
        .lines()
        .filter_map(|l| l.strip_prefix("# trace "))
        .map(|l| l.split_once(": ").unwrap().1.to_string())
        .collect();
    let ns = |t: &str| {
        let (a, b) = t.split_once('.').unwrap();
        a.parse::<i64>().unwrap() * 1_000_000_000 + b.parse::<i64>().unwrap()
    };
    let msgs = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (
                f[0].parse().unwrap(),
                f[1].parse().unwrap(),
                ns(f[2]),
                ns(f[3]),
            )
        })
        .collect();
    (names, msgs)
}

#[test]
fn a_server_span_ending_after_its_client_never_makes_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("late.jsonl");
    // Two nodes; every server span ends 300 µs after its client's end.
    let mut spans = Vec::new();
    for i in 0..50u64 {
        let t = 1e9 + i as f64 * 1e7;
        spans.push(Span {
            node: 1,
            trace: u128::from(i) + 1,
            id: 2 * i + 2,
            parent: Some(2 * i + 1),
            kind: 2,
            start: t + 100_000.0,
            end: t + 500_000.0,
        });
        spans.push(Span {
            node: 0,
            trace: u128::from(i) + 1,
            id: 2 * i + 1,
            parent: None,
            kind: 3,
            start: t,
            end: t + 200_000.0,
        });
    }
    write_spans(&path, &spans);
    let (names, msgs) = messages(&path);
    assert_eq!(names, ["node0", "node1"]);
    assert_eq!(msgs.len(), 100);
    let node = |trace: usize| if names[trace] == "node0" { 0 } else { 1 };
    let epoch = epoch(&spans);
    for (from, to, send, recv) in msgs {
        let (send, recv) = (send + epoch, recv + epoch);
        let (a, b) = (node(from), node(to));
        let sent = CLOCKS[a].truth(send as f64);
        let received = CLOCKS[b].truth(recv as f64);
        // Every message is causal on the true clocks, and none starts at a server's end.
        assert!(sent < received, "{send} → {recv}");
        let server_end = spans.iter().any(|sp| {
            sp.kind == 2 && (CLOCKS[1].local(sp.end) == send || CLOCKS[1].local(sp.end) == recv)
        });
        assert!(!server_end);
    }
}

/// The `tsync.*` attribute `key` of an OTLP/JSON span, as an integer.
fn attribute(span: &Value, key: &str) -> Option<i64> {
    span["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)
        .and_then(|a| {
            let v = &a["value"];
            v["intValue"]
                .as_str()
                .map(|t| t.parse().unwrap())
                .or_else(|| v["intValue"].as_i64())
        })
}

#[test]
fn apply_corrects_spans_from_themselves() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spans.jsonl");
    let out = dir.path().join("synced.jsonl");
    // One long workload, and short ones where fewer calls bound each pair.
    for (seed, calls, reduction) in [
        (7, 1500, "joint"),
        (7, 1500, "path"),
        (1, 45, "joint"),
        (2, 50, "joint"),
        (3, 55, "path"),
    ] {
        let spans = workload(seed, calls);
        write_spans(&path, &spans);
        let r = run(&[
            "apply",
            &s(&path),
            "--reference",
            "node0",
            "--reduction",
            reduction,
            "--format",
            "otlp",
            "--events",
            &s(&path),
            "-o",
            &s(&out),
        ]);
        assert!(r.status.success(), "{}", stderr(&r));
        let said = stderr(&r);
        assert!(
            said.contains(&format!("{} OTLP spans", spans.len())),
            "{said}"
        );
        assert!(
            said.contains("cross-node order kept: none of the"),
            "{said}"
        );
        // Every span keeps its original times and gets an interval that holds the truth.
        let truth: HashMap<u64, &Span> = spans.iter().map(|sp| (sp.id, sp)).collect();
        let mut corrected: HashMap<u64, (usize, i64)> = HashMap::new();
        let text = std::fs::read_to_string(&out).unwrap();
        let mut inversions_before = 0;
        let (mut within, mut outside) = (0, 0);
        for line in text.lines() {
            let doc: Value = serde_json::from_str(line).unwrap();
            for rs in doc["resourceSpans"].as_array().unwrap() {
                for sp in rs["scopeSpans"][0]["spans"].as_array().unwrap() {
                    let id = u64::from_str_radix(sp["spanId"].as_str().unwrap(), 16).unwrap();
                    let t = truth[&id];
                    let start: i64 = sp["startTimeUnixNano"].as_str().unwrap().parse().unwrap();
                    let local = attribute(sp, "tsync.local.start_time_unix_nano").unwrap();
                    assert_eq!(local, CLOCKS[t.node].local(t.start));
                    corrected.insert(id, (t.node, start));
                    // Where no guarantee holds (outside the node's messages: a root span opened
                    // before its node's first call; before the pair's first point each way)
                    // the span has no bounds.
                    let Some(lo) = attribute(sp, "tsync.start.lo_unix_nano") else {
                        outside += 1;
                        continue;
                    };
                    let hi = attribute(sp, "tsync.start.hi_unix_nano").unwrap();
                    let on_reference = CLOCKS[0].local(t.start);
                    assert!(
                        lo <= on_reference && on_reference <= hi,
                        "{lo} {on_reference} {hi}"
                    );
                    assert!(lo <= start && start <= hi);
                    within += 1;
                }
            }
        }
        // No cross-host child starts before its parent once corrected (some did before).
        let mut cross = 0;
        for sp in &spans {
            let Some(parent) = sp.parent.and_then(|p| truth.get(&p)) else {
                continue;
            };
            if parent.node == sp.node {
                continue;
            }
            cross += 1;
            let (_, child_start) = corrected[&sp.id];
            let (_, parent_start) = corrected[&parent.id];
            assert!(
                child_start >= parent_start,
                "{reduction}: child {:x} starts {} ns before its parent",
                sp.id,
                parent_start - child_start
            );
            inversions_before += i32::from(
                CLOCKS[sp.node].local(sp.start) < CLOCKS[parent.node].local(parent.start),
            );
        }
        assert!(cross as u64 > calls / 10);
        assert!(
            outside * 20 < within,
            "{outside} spans outside, {within} inside"
        );
        assert!(
            inversions_before > 0,
            "the skews put some children before their parents"
        );
    }
}

/// A span of [`line`]: node (None: no `host.name`), trace, id, parent (0: none), kind, start,
/// end.
type RawSpan = (Option<u32>, u64, u64, u64, u8, i64, i64);

/// One OTLP/JSON line of spans `(node, trace, id, parent, kind, start, end)` (times ns after the
/// base, on one clock), each node a resource; `None` as node: a resource without `host.name`.
fn line(spans: &[RawSpan]) -> String {
    let mut nodes: Vec<Option<u32>> = spans.iter().map(|s| s.0).collect();
    nodes.dedup();
    let resources: Vec<Value> = nodes
        .iter()
        .map(|n| {
            let attrs = match n {
                Some(n) => json!([{"key": "host.name", "value": {"stringValue": format!("h{n}")}}]),
                None => json!([{"key": "service.name", "value": {"stringValue": "x"}}]),
            };
            let spans: Vec<Value> = spans
                .iter()
                .filter(|s| s.0 == *n)
                .map(|&(_, trace, id, parent, kind, start, end)| {
                    json!({
                        "traceId": format!("{trace:032x}"), "spanId": format!("{id:016x}"),
                        "parentSpanId": if parent == 0 { String::new() } else { format!("{parent:016x}") },
                        "kind": kind, "startTimeUnixNano": (BASE + start).to_string(),
                        "endTimeUnixNano": (BASE + end).to_string()
                    })
                })
                .collect();
            json!({"resource": {"attributes": attrs}, "scopeSpans": [{"spans": spans}]})
        })
        .collect();
    format!("{}\n", json!({ "resourceSpans": resources }))
}

/// `sync` of `body`: exit status, stderr.
fn sync_of(dir: &Path, body: &str) -> (Option<i32>, String) {
    let path = dir.join("bad.jsonl");
    std::fs::write(&path, body).unwrap();
    let out = run(&["sync", &s(&path)]);
    (
        out.status.code(),
        stderr(&out) + &String::from_utf8_lossy(&out.stdout),
    )
}

/// `messages` of `body`: how many.
fn messages_of(dir: &Path, body: &str) -> usize {
    let path = dir.join("bad.jsonl");
    std::fs::write(&path, body).unwrap();
    messages(&path).1.len()
}

#[test]
fn bad_spans_are_counted_and_never_paired() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A good call between h0 and h1: 2 messages, the baseline the others add to.
    let good = line(&[
        (Some(1), 1, 2, 1, 2, 300, 800),
        (Some(0), 1, 1, 0, 3, 100, 900),
    ]);
    assert_eq!(messages_of(d, &good), 2);
    // Roots only; no kinds; one host; a missing parent; a reused id; a backwards span; a
    // resource without a node attribute: each counted, none paired.
    let cases: [(&str, String, &str); 7] = [
        (
            "roots",
            line(&[
                (Some(0), 1, 1, 0, 3, 100, 900),
                (Some(1), 1, 2, 0, 2, 300, 800),
            ]),
            "no span has a parent",
        ),
        (
            "kinds",
            format!(
                "{good}{}",
                line(&[
                    (Some(1), 3, 6, 5, 0, 300, 800),
                    (Some(0), 3, 5, 0, 0, 100, 900)
                ])
            ),
            "1 cross-node pairs with such a span give no message",
        ),
        (
            "one host",
            line(&[
                (Some(0), 1, 2, 1, 2, 300, 800),
                (Some(0), 1, 1, 0, 3, 100, 900),
            ]),
            "every span ran on node h0",
        ),
        (
            "missing parent",
            format!("{good}{}", line(&[(Some(1), 4, 8, 7, 2, 300, 800)])),
            "1 spans whose parent did not come within",
        ),
        (
            "duplicate",
            format!("{good}{}", line(&[(Some(1), 1, 2, 1, 2, 310, 800)])),
            "1 span ids seen twice with different contents",
        ),
        (
            "backwards",
            format!(
                "{good}{}",
                line(&[
                    (Some(1), 5, 10, 9, 2, 300, 800),
                    (Some(0), 5, 9, 0, 3, 900, 100)
                ])
            ),
            "1 spans end before they start",
        ),
        (
            "no node",
            format!(
                "{good}{}",
                line(&[
                    (None, 6, 12, 11, 2, 300, 800),
                    (Some(0), 6, 11, 0, 3, 100, 900)
                ])
            ),
            "1 spans of resources without `host.name`, else `k8s.node.name`, else `service.instance.id` left out",
        ),
    ];
    for (what, body, warning) in &cases {
        let (code, said) = sync_of(d, body);
        assert!(matches!(code, Some(0 | 3)), "{what}: {code:?} {said}");
        assert!(said.contains(warning), "{what}: {said}");
        // The good call gives its 2 messages, but where its server's id was reused.
        let expected = if body.starts_with(&good) && *what != "duplicate" {
            2
        } else {
            0
        };
        assert_eq!(messages_of(d, body), expected, "{what}");
    }
    // What `apply` checks its corrected spans with: a child that starts before its parent on
    // another node is a message that runs backwards.
    let order = |body: &str| {
        let path = d.join("order.jsonl");
        std::fs::write(&path, body).unwrap();
        tsync_analyze::spans::inversions(&path, &Default::default()).unwrap()
    };
    let o = order(&good);
    assert_eq!((o.messages, o.inverted), (2, 0));
    let o = order(&line(&[
        (Some(1), 1, 2, 1, 2, 50, 800),
        (Some(0), 1, 1, 0, 3, 100, 900),
    ]));
    assert_eq!((o.messages, o.inverted), (2, 1));
    // A malformed line: file:line, status 1. A last line cut short: counted.
    let (code, said) = sync_of(d, &format!("{good}{{\"resourceSpans\": [oops\n{good}"));
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains("bad.jsonl:2: the line is not a JSON object"),
        "{said}"
    );
    let (code, said) = sync_of(d, &format!("{good}{}", &good[..60]));
    // (One call bounds the clocks on one side only: nothing synchronized, status 3.)
    assert_eq!(code, Some(3), "{said}");
    assert!(
        said.contains("the last line (or protobuf frame) is cut short"),
        "{said}"
    );
    // JSON that is not traces, and traces whose resources name no node.
    let (code, said) = sync_of(d, "{\"resourceLogs\": []}\n");
    assert_eq!(code, Some(1));
    assert!(said.contains("not OpenTelemetry traces"), "{said}");
    let (code, said) = sync_of(d, &line(&[(None, 1, 1, 0, 3, 100, 900)]));
    assert_eq!(code, Some(1));
    assert!(
        said.contains("no resource of the span file has `host.name`"),
        "{said}"
    );
}
