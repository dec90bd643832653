//! OTLP protobuf span files (the Collector file exporter's `format: proto`) as a `sync` input:
//! the same spans written as OTLP/JSON and as protobuf (encoded with prost) give the very same
//! analysis, message for message; a cut last frame is counted like a cut last line, and a
//! frame that does not decode, a corrupt length or zstd compression is an error that names the
//! file and the frame's byte offset. `apply --format otlp` corrects a protobuf span file from
//! itself, as it corrects the JSON file of the same spans, and names its bad frames alike.

mod common;
mod otlp_proto;

use std::path::Path;

use common::{run, s, stderr};
use serde_json::{Value, json};

const BASE: i64 = 1_700_000_000_000_000_000;

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> i64 {
        (self.next() % n) as i64
    }
}

/// Node `n`'s clock: local = true + offset + drift·true.
fn local(n: usize, t: i64) -> i64 {
    let (offset, drift) = [(0.0, 0.0), (37_215_000.0, 40e-6), (-12_503_000.0, -25e-6)][n];
    BASE + (t as f64 + offset + drift * t as f64).round() as i64
}

fn kv_s(k: &str, v: &str) -> Value {
    json!({"key": k, "value": {"stringValue": v}})
}

/// Spans of `calls` calls among three nodes (clocks apart by tens of ms), each `(node, end,
/// span)`: CLIENT → SERVER pairs both ways, every fifth with gRPC's message events, every
/// seventh a PRODUCER and a CONSUMER linking to it, every eleventh client in ERROR.
fn workload(calls: i64) -> Vec<(usize, i64, Value)> {
    let mut rng = Rng(7);
    let mut out = Vec::new();
    for i in 0..calls {
        let t = 1_000_000_000 + i * 10_000_000 + rng.below(1_000_000);
        let from = rng.below(3) as usize;
        let to = (from + 1 + rng.below(2) as usize) % 3;
        let trace = format!("{:016x}{:016x}", rng.next(), rng.next());
        let (client, server) = (
            format!("{:016x}", rng.next()),
            format!("{:016x}", rng.next()),
        );
        let arrive = t + 30_000 + rng.below(50_000);
        let reply = arrive + 10_000 + rng.below(40_000);
        let back = reply + 30_000 + rng.below(50_000);
        let mut server_span = json!({
            "traceId": trace, "spanId": server, "parentSpanId": client, "name": "rpc", "kind": 2,
            "startTimeUnixNano": local(to, arrive).to_string(),
            "endTimeUnixNano": local(to, reply + 5_000).to_string(),
            "attributes": [kv_s("rpc.system", "grpc")], "status": {}
        });
        let mut client_span = json!({
            "traceId": trace, "spanId": client, "parentSpanId": "", "name": "rpc", "kind": 3,
            "startTimeUnixNano": local(from, t).to_string(),
            "endTimeUnixNano": local(from, back).to_string(),
            "attributes": [kv_s("rpc.system", "grpc")],
            "status": if i % 11 == 0 { json!({"code": 2}) } else { json!({}) }
        });
        if i % 5 == 0 {
            let event = |n: usize, at: i64, kind: &str| {
                json!({"name": "message", "timeUnixNano": local(n, at).to_string(),
                       "attributes": [kv_s("message.type", kind),
                                      {"key": "message.id", "value": {"intValue": "1"}}]})
            };
            client_span["events"] = json!([
                event(from, t + 5_000, "SENT"),
                event(from, back - 2_000, "RECEIVED")
            ]);
            server_span["events"] = json!([
                event(to, arrive + 1_000, "RECEIVED"),
                event(to, reply, "SENT")
            ]);
        }
        out.push((to, reply + 5_000, server_span));
        out.push((from, back, client_span));
        if i % 7 == 0 {
            let producer = format!("{:016x}", rng.next());
            out.push((
                from,
                t + 20_000,
                json!({"traceId": trace, "spanId": producer, "parentSpanId": "", "kind": 4,
                       "startTimeUnixNano": local(from, t).to_string(),
                       "endTimeUnixNano": local(from, t + 20_000).to_string()}),
            ));
            let other_trace = format!("{:032x}", rng.next());
            out.push((
                to,
                back + 90_000,
                json!({"traceId": other_trace, "spanId": format!("{:016x}", rng.next()),
                       "kind": 5,
                       "startTimeUnixNano": local(to, back).to_string(),
                       "endTimeUnixNano": local(to, back + 90_000).to_string(),
                       "links": [{"traceId": trace, "spanId": producer}]}),
            ));
        }
    }
    out.sort_by_key(|s| s.1);
    out
}

/// OTLP/JSON lines of 25 spans each, one resource per node.
fn json_file(spans: &[(usize, i64, Value)]) -> String {
    let mut text = String::new();
    for batch in spans.chunks(25) {
        let resources: Vec<Value> = (0..3)
            .filter(|n| batch.iter().any(|s| s.0 == *n))
            .map(|n| {
                json!({
                    "resource": {"attributes": [kv_s("service.name", &format!("svc{n}")),
                                                kv_s("host.name", &format!("node{n}"))]},
                    "scopeSpans": [{"scope": {"name": "test", "version": "1"},
                        "spans": batch.iter().filter(|s| s.0 == n).map(|s| s.2.clone())
                            .collect::<Vec<_>>()}]
                })
            })
            .collect();
        text.push_str(&json!({ "resourceSpans": resources }).to_string());
        text.push('\n');
    }
    text
}

/// stdout of a successful `tsync-analyze ARGS`, the file's path replaced by `FILE`.
fn output(args: &[&str], path: &Path) -> String {
    let out = run(args);
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    String::from_utf8(out.stdout)
        .unwrap()
        .replace(&s(path), "FILE")
}

#[test]
fn json_and_protobuf_spans_give_the_same_analysis() {
    let dir = tempfile::tempdir().unwrap();
    let spans = workload(900);
    let text = json_file(&spans);
    let json_path = dir.path().join("spans.jsonl");
    let proto_path = dir.path().join("spans.pb");
    std::fs::write(&json_path, &text).unwrap();
    std::fs::write(&proto_path, otlp_proto::file_from_json(&text)).unwrap();
    for args in [
        &["sync", "--json", "--reference", "node0"][..],
        &[
            "sync",
            "--json",
            "--reference",
            "node0",
            "--reduction",
            "path",
        ],
        &["messages"],
        &["info", "--json"],
    ] {
        let a = output(&[args, &[&s(&json_path)]].concat(), &json_path);
        let b = output(&[args, &[&s(&proto_path)]].concat(), &proto_path);
        assert_eq!(a, b, "{args:?}");
        if args[0] == "sync" {
            let doc: Value = serde_json::from_str(&a).unwrap();
            for p in doc["pairs"].as_array().unwrap() {
                assert_eq!(p["quality"], "accurate", "{p}");
            }
            // Every rule gave messages: requests, responses, queues, message events.
            let summary = doc["warnings"][0].as_str().unwrap();
            for part in [
                " requests",
                " responses",
                " through queues",
                " RPC message events",
            ] {
                let n: u64 = summary
                    .split(part)
                    .next()
                    .and_then(|t| t.rsplit([' ', '(']).next())
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                assert!(n > 0, "no{part}: {summary}");
            }
            assert!(
                summary.contains("of 3 nodes, each named by its resource's `host.name`"),
                "{summary}"
            );
        }
    }
}

/// `sync` of a protobuf file with these bytes: exit status, stderr and stdout.
fn sync_of(dir: &Path, bytes: &[u8]) -> (Option<i32>, String) {
    let path = dir.join("bad.pb");
    std::fs::write(&path, bytes).unwrap();
    let out = run(&["sync", &s(&path)]);
    (
        out.status.code(),
        stderr(&out) + &String::from_utf8_lossy(&out.stdout),
    )
}

#[test]
fn cut_and_corrupt_frames_are_counted_or_named() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let text = json_file(&workload(60));
    let frames: Vec<Vec<u8>> = text
        .lines()
        .map(|l| otlp_proto::frame(&otlp_proto::from_json(&serde_json::from_str(l).unwrap())))
        .collect();
    let whole = frames.concat();
    let (code, said) = sync_of(d, &whole);
    assert_eq!(code, Some(0), "{said}");
    // The last frame cut short, in its message or in its length: counted and warned about.
    for cut in [
        whole.len() - 7,
        whole.len() - frames.last().unwrap().len() + 2,
    ] {
        let (code, said) = sync_of(d, &whole[..cut]);
        assert!(matches!(code, Some(0 | 3)), "{said}");
        assert!(said.contains("cut short"), "{said}");
    }
    // A frame that does not decode: the file, the frame and its offset.
    let second = frames[0].len();
    let mut corrupt = whole.clone();
    corrupt[second + 4] = 0xff;
    corrupt[second + 5] = 0xff;
    let (code, said) = sync_of(d, &corrupt);
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains(&format!(
            "bad.pb: frame 2 at byte {second}: not an OTLP `TracesData` message"
        )),
        "{said}"
    );
    // A length running past the end of the file, followed by no `TracesData`: a corrupt length.
    let mut long = whole.clone();
    long[second..second + 4].copy_from_slice(&u32::MAX.to_be_bytes());
    long[second + 4] = 0x55;
    let (code, said) = sync_of(d, &long);
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains(&format!(
            "frame 2 at byte {second}: its length, 4294967295 bytes, runs past"
        )),
        "{said}"
    );
    // A span id of the wrong length: the frame named, as a JSON line is.
    let mut bad =
        otlp_proto::from_json(&serde_json::from_str(text.lines().nth(1).unwrap()).unwrap());
    bad.resource_spans[0].scope_spans[0].spans[0].span_id = vec![1, 2, 3];
    let body = [frames[0].clone(), otlp_proto::frame(&bad)].concat();
    let (code, said) = sync_of(d, &body);
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains(&format!(
            "frame 2 at byte {second}: `span_id` of 3 bytes (an OTLP span_id has 8)"
        )),
        "{said}"
    );
    // zstd, per message (the exporter's `compression: zstd`) or as the whole file: refused.
    let mut per_message = vec![0, 0, 0, 9, 0x28, 0xb5, 0x2f, 0xfd];
    per_message.extend_from_slice(&[0; 5]);
    let (code, said) = sync_of(d, &per_message);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("zstd-compressed frames"), "{said}");
    let (code, said) = sync_of(d, &[0x28, 0xb5, 0x2f, 0xfd, 0, 0, 0, 0]);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("bad.pb: zstd-compressed"), "{said}");
}

/// `apply --format otlp` of `events` (a span file) with the span file `input` as the only input
/// (the nodes synchronized from the spans themselves), to `out`: exit status and stderr.
fn apply_spans(input: &Path, events: &Path, out: &Path) -> (Option<i32>, String) {
    let r = run(&[
        "apply",
        &s(input),
        "--reference",
        "node0",
        "--format",
        "otlp",
        "--events",
        &s(events),
        "-o",
        &s(out),
    ]);
    (r.status.code(), stderr(&r))
}

/// Each span's start, by span id, in a decoded protobuf span file.
fn starts(data: &[otlp_proto::TracesData]) -> Vec<(Vec<u8>, u64)> {
    data.iter()
        .flat_map(|t| &t.resource_spans)
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| &s.spans)
        .map(|sp| (sp.span_id.clone(), sp.start_time_unix_nano))
        .collect()
}

/// `info` names the format it read; `apply --format otlp` corrects a protobuf span file from
/// itself, as protobuf, exactly as it corrects the JSON file of the same spans: afterwards no
/// cross-node message runs backwards.
#[test]
fn info_names_protobuf_and_apply_corrects_it_from_itself() {
    let dir = tempfile::tempdir().unwrap();
    let text = json_file(&workload(300));
    let json_path = dir.path().join("spans.jsonl");
    let proto_path = dir.path().join("spans.pb");
    std::fs::write(&json_path, &text).unwrap();
    std::fs::write(&proto_path, otlp_proto::file_from_json(&text)).unwrap();
    let info = output(&["info", &s(&proto_path)], &proto_path);
    assert!(
        info.contains("format         OTLP protobuf spans"),
        "{info}"
    );
    let info = output(&["info", &s(&json_path)], &json_path);
    assert!(info.contains("format         OTLP/JSON spans"), "{info}");
    let before = tsync_analyze::spans::inversions(&proto_path, &Default::default()).unwrap();
    assert!(before.inverted > 0, "the clocks put some children first");
    // The nodes synchronized from the spans themselves, then the same file as the events.
    let out = dir.path().join("out.pb");
    let (code, said) = apply_spans(&proto_path, &proto_path, &out);
    assert_eq!(code, Some(0), "{said}");
    assert!(
        said.contains("cross-node order kept: none of the"),
        "{said}"
    );
    let order = tsync_analyze::spans::inversions(&out, &Default::default()).unwrap();
    assert_eq!((order.messages, order.inverted), (before.messages, 0));
    let info = output(&["info", &s(&out)], &out);
    assert!(
        info.contains("format         OTLP protobuf spans"),
        "{info}"
    );
    // The same corrections as the JSON file's.
    let json_out = dir.path().join("out.jsonl");
    let (code, said) = apply_spans(&json_path, &json_path, &json_out);
    assert_eq!(code, Some(0), "{said}");
    let corrected = otlp_proto::file_from_json(&std::fs::read_to_string(&json_out).unwrap());
    let want = starts(&otlp_proto::decode_file(&corrected));
    let got = starts(&otlp_proto::decode_file(&std::fs::read(&out).unwrap()));
    assert_eq!(got, want);
    let input = starts(&otlp_proto::decode_file(
        &std::fs::read(&proto_path).unwrap(),
    ));
    assert!(got.iter().zip(&input).any(|(a, b)| a.1 != b.1));
}

/// `apply --format otlp` of a bad protobuf span file: an error naming the file, the frame and
/// its offset, as `sync`'s, and nothing written. A cut last frame is an error too (`sync`
/// counts it), as a cut last OTLP/JSON line is for `apply`.
#[test]
fn apply_names_a_bad_frame_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let text = json_file(&workload(60));
    let good = d.join("good.pb");
    std::fs::write(&good, otlp_proto::file_from_json(&text)).unwrap();
    let frames: Vec<Vec<u8>> = text
        .lines()
        .map(|l| otlp_proto::frame(&otlp_proto::from_json(&serde_json::from_str(l).unwrap())))
        .collect();
    let whole = frames.concat();
    let second = frames[0].len();
    let check = |bytes: &[u8], want: &str| {
        let bad = d.join("bad.pb");
        std::fs::write(&bad, bytes).unwrap();
        let out = d.join("bad.out.pb");
        let (code, said) = apply_spans(&good, &bad, &out);
        assert_eq!(code, Some(1), "{said}");
        assert!(said.contains(want), "`{want}` not in {said}");
        assert!(!out.exists());
    };
    let mut corrupt = whole.clone();
    corrupt[second + 4] = 0xff;
    corrupt[second + 5] = 0xff;
    check(
        &corrupt,
        &format!("bad.pb: frame 2 at byte {second}: not an OTLP `TracesData` message"),
    );
    let last = whole.len() - frames.last().unwrap().len();
    check(
        &whole[..whole.len() - 7],
        &format!("bad.pb: frame {} at byte {last}: cut short", frames.len()),
    );
    // zstd, per message (the second frame) or as the whole file: refused by name.
    check(
        &[
            frames[0].clone(),
            vec![0, 0, 0, 9, 0x28, 0xb5, 0x2f, 0xfd, 0, 0, 0, 0, 0],
        ]
        .concat(),
        &format!("bad.pb: frame 2 at byte {second}: zstd-compressed frames"),
    );
    check(
        &[0x28, 0xb5, 0x2f, 0xfd, 0, 0, 0, 0],
        "bad.pb: zstd-compressed",
    );
}
