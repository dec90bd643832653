//! `tsync-analyze apply --format otlp`: OpenTelemetry spans of several nodes in one OTLP/JSON
//! file land exactly where `apply --format jsonl` puts the same stamps, every span and span event
//! carries its original time and a guaranteed interval that holds the truth, everything else is
//! kept as it was, and the OpenTelemetry project's own protobuf definitions read the result. The
//! same spans as an OTLP protobuf file come out as protobuf with the very same times and
//! attributes, every byte `apply` does not map kept.

mod common;
mod otlp_proto;

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{realtime_base, run, s, stderr, two_traces};
use otlp_proto::{WireField, delimited, wire_fields};
use prost::Message;
use prost::encoding::{WireType, encode_key, encode_varint};
use serde_json::{Value, json};

/// One span of the test: its node, id, and true times (ns after the simulation's start).
struct Span {
    node: usize,
    id: String,
    start: f64,
    end: f64,
    events: Vec<f64>,
}

/// The spans: both nodes, over their recording, a few starting before it (outside the span).
fn spans() -> Vec<Span> {
    let mut v = Vec::new();
    for i in 0..300u64 {
        for node in 0..2 {
            let start = 10.2e9 + i as f64 * 61e6 + node as f64 * 7.3e6 - 1e9 * f64::from(i < 2);
            v.push(Span {
                node,
                id: format!("{:016x}", (i << 8) | node as u64 | 0x1000_0000),
                start,
                end: start + 2.5e6 + (i % 7) as f64 * 1e5,
                events: (0..(i % 3)).map(|e| start + 3e5 * (e + 1) as f64).collect(),
            });
        }
    }
    v
}

/// Writes the spans as OTLP/JSON batches (10 spans of each node per line), stamped with realtime
/// = `base` + true time, with the odd spellings a real file may have: numbers instead of strings
/// for some times, a span without attributes, an unset end, unknown fields (with `extras`), a
/// resource of an unknown node and one without `host.name`.
fn write_otlp(path: &Path, spans: &[Span], base: i64, extras: bool) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let t = |x: f64, k: usize| -> Value {
        let v = base + x as i64;
        if k % 5 == 4 {
            json!(v)
        } else {
            json!(v.to_string())
        }
    };
    for (b, batch) in spans.chunks(20).enumerate() {
        let mut resources = Vec::new();
        for node in 0..2 {
            let mut out = Vec::new();
            for (k, sp) in batch.iter().enumerate().filter(|(_, sp)| sp.node == node) {
                let mut span = json!({
                    "traceId": format!("5b8efff798038103d269b633813fc6{:02x}", b % 256),
                    "spanId": sp.id,
                    "name": format!("op {k}"),
                    "kind": 2,
                    "startTimeUnixNano": t(sp.start, k),
                    "endTimeUnixNano": t(sp.end, k + 1),
                    "attributes": [{"key": "http.method", "value": {"stringValue": "GET"}},
                                   {"key": "retries", "value": {"intValue": "3"}}],
                    "events": sp.events.iter().map(|&e| json!({
                        "timeUnixNano": t(e, k), "name": "retry",
                        "attributes": [{"key": "n", "value": {"intValue": "1"}}]
                    })).collect::<Vec<_>>(),
                    "links": [{"traceId": "00000000000000000000000000000001", "spanId": "0000000000000002"}],
                    "status": {"code": 1}
                });
                if k == 3 {
                    span.as_object_mut().unwrap().remove("attributes");
                }
                if extras && k == 5 {
                    span["futureField"] = json!({"x": [1.50, "y"]});
                }
                out.push(span);
            }
            resources.push(json!({
                "resource": {"attributes": [
                    {"key": "service.name", "value": {"stringValue": format!("svc-{node}")}},
                    {"key": "host.name", "value": {"stringValue": format!("node{node}")}}
                ]},
                "scopeSpans": [{"scope": {"name": "test"}, "spans": out}],
                "schemaUrl": "https://opentelemetry.io/schemas/1.21.0"
            }));
        }
        if extras && b == 0 {
            let stray = |attrs: Value| {
                json!({"resource": {"attributes": attrs}, "scopeSpans": [{"spans": [{
                    "traceId": "5b8efff798038103d269b633813fc600", "spanId": "00000000000000ff",
                    "name": "elsewhere", "startTimeUnixNano": "1700000000000000000",
                    "endTimeUnixNano": "0"}]}]})
            };
            resources.push(stray(
                json!([{"key": "host.name", "value": {"stringValue": "node7"}}]),
            ));
            resources.push(stray(json!([])));
        }
        writeln!(f, "{}", json!({"resourceSpans": resources})).unwrap();
    }
    f.flush().unwrap();
}

/// What `apply --format jsonl --clock realtime --interval` gives for each stamp of a node:
/// stamp → (mapped, lo, hi).
fn jsonl_reference(
    dir: &Path,
    traces: &[String],
    node: usize,
    stamps: &[i64],
) -> HashMap<i64, (i64, Option<(i64, i64)>)> {
    let events = dir.join(format!("stamps-{node}.jsonl"));
    let body: String = stamps
        .iter()
        .map(|t| format!("{{\"ts_ns\":{t}}}\n"))
        .collect();
    std::fs::write(&events, body).unwrap();
    let out = dir.join(format!("stamps-{node}.out.jsonl"));
    let mut args = vec!["apply", "--reference", "node0"];
    args.extend(traces.iter().map(String::as_str));
    let (e, o, n) = (s(&events), s(&out), format!("node{node}"));
    args.extend([
        "--node",
        &n,
        "--events",
        &e,
        "--clock",
        "realtime",
        "--interval",
        "-o",
        &o,
    ]);
    let r = run(&args);
    assert!(r.status.success(), "{}", stderr(&r));
    std::fs::read_to_string(out)
        .unwrap()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let bound = |k: &str| v[k].as_i64();
            let interval = bound("ts_ns_lo").zip(bound("ts_ns_hi"));
            (
                v["ts_ns_local"].as_i64().unwrap(),
                (v["ts_ns"].as_i64().unwrap(), interval),
            )
        })
        .collect()
}

fn attrs(v: &Value) -> HashMap<String, Value> {
    v["attributes"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|kv| (kv["key"].as_str().unwrap().to_string(), kv["value"].clone()))
                .collect()
        })
        .unwrap_or_default()
}

fn int_attr(a: &HashMap<String, Value>, key: &str) -> Option<i64> {
    a.get(key)
        .map(|v| v["intValue"].as_str().unwrap().parse().unwrap())
}

fn time(v: &Value) -> i64 {
    match v {
        Value::String(s) => s.parse().unwrap(),
        n => n.as_i64().unwrap(),
    }
}

struct Setup {
    dir: tempfile::TempDir,
    traces: Vec<String>,
    spans: Vec<Span>,
    base: i64,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let (traces, w) = two_traces(dir.path());
    let traces: Vec<String> = traces.iter().map(|p| s(p)).collect();
    let base = realtime_base(&traces[1], w.start_ns);
    Setup {
        dir,
        traces,
        spans: spans(),
        base,
    }
}

fn apply_otlp(st: &Setup, input: &Path, out: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["apply", "--reference", "node0"];
    args.extend(st.traces.iter().map(String::as_str));
    let (e, o) = (s(input), s(out));
    args.extend(["--format", "otlp", "--events", &e, "-o", &o]);
    args.extend(extra);
    run(&args)
}

#[test]
fn spans_of_two_nodes_land_where_jsonl_puts_their_stamps() {
    let st = setup();
    let input = st.dir.path().join("traces.jsonl");
    write_otlp(&input, &st.spans, st.base, true);
    let out = st.dir.path().join("traces.synced.jsonl");
    let r = apply_otlp(&st, &input, &out, &[]);
    assert!(r.status.success(), "{}", stderr(&r));
    let err = stderr(&r);
    assert!(err.contains("node0: 300, node1: 300"), "{err}");
    assert!(
        err.contains(
            "1 spans of resources whose node (by their `host.name`, else `k8s.node.name`, else \
             `service.instance.id`) is `node7` left unchanged"
        ),
        "{err}"
    );
    assert!(
        err.contains("1 spans of resources without `host.name`, else"),
        "{err}"
    );
    assert!(
        err.contains("lie outside their node's recorded span"),
        "{err}"
    );
    // The same stamps through `apply --format jsonl`, node by node.
    let mut reference = Vec::new();
    for node in 0..2 {
        let stamps: Vec<i64> = st
            .spans
            .iter()
            .filter(|sp| sp.node == node)
            .flat_map(|sp| [sp.start, sp.end].into_iter().chain(sp.events.clone()))
            .map(|t| st.base + t as i64)
            .collect();
        reference.push(jsonl_reference(st.dir.path(), &st.traces, node, &stamps));
    }
    let by_id: HashMap<&str, &Span> = st.spans.iter().map(|sp| (sp.id.as_str(), sp)).collect();
    let before: Vec<Value> = std::fs::read_to_string(&input)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let text = std::fs::read_to_string(&out).unwrap();
    let (mut checked, mut events, mut with_interval) = (0, 0, 0);
    for (line, before) in text.lines().zip(&before) {
        let doc: Value = serde_json::from_str(line).unwrap();
        for (rs, rs_before) in doc["resourceSpans"]
            .as_array()
            .unwrap()
            .iter()
            .zip(before["resourceSpans"].as_array().unwrap())
        {
            assert_eq!(rs["resource"], rs_before["resource"]);
            assert_eq!(rs["schemaUrl"], rs_before["schemaUrl"]);
            let spans = rs["scopeSpans"][0]["spans"].as_array().unwrap();
            let spans_before = rs_before["scopeSpans"][0]["spans"].as_array().unwrap();
            for (span, span_before) in spans.iter().zip(spans_before) {
                let Some(sp) = by_id.get(span["spanId"].as_str().unwrap()) else {
                    // The unknown node's and the attribute-less resource's: unchanged.
                    assert_eq!(span, span_before);
                    continue;
                };
                let want = &reference[sp.node];
                let a = attrs(span);
                assert_eq!(a["tsync.node"]["stringValue"], format!("node{}", sp.node));
                assert_eq!(a["tsync.reference"]["stringValue"], "node0");
                assert_eq!(a["tsync.clock"]["stringValue"], "realtime");
                // Every other member as it was: ids, links, status, the user's attributes.
                for k in [
                    "traceId",
                    "spanId",
                    "name",
                    "kind",
                    "links",
                    "status",
                    "futureField",
                ] {
                    assert_eq!(span[k], span_before[k], "{k}");
                }
                let user: Vec<&Value> = span["attributes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|kv| !kv["key"].as_str().unwrap().starts_with("tsync."))
                    .collect();
                let user_before: Vec<&Value> = span_before["attributes"]
                    .as_array()
                    .map(|a| a.iter().collect())
                    .unwrap_or_default();
                assert_eq!(user, user_before);
                let mut times = vec![(
                    "start",
                    sp.start,
                    &span["startTimeUnixNano"],
                    &span_before["startTimeUnixNano"],
                )];
                times.push((
                    "end",
                    sp.end,
                    &span["endTimeUnixNano"],
                    &span_before["endTimeUnixNano"],
                ));
                let mut all_bounded = true;
                let mut worst = 0;
                for (which, truth, after, orig) in times {
                    // The spelling is kept: a string stays a string, a number a number.
                    assert_eq!(after.is_string(), orig.is_string());
                    let (stamp, mapped) = (time(orig), time(after));
                    let (want_t, want_i) = want[&stamp];
                    assert!(
                        (mapped - want_t).abs() <= 1,
                        "{which}: {mapped} vs {want_t}"
                    );
                    assert_eq!(
                        int_attr(&a, &format!("tsync.local.{which}_time_unix_nano")),
                        Some(stamp)
                    );
                    let got_i = int_attr(&a, &format!("tsync.{which}.lo_unix_nano"))
                        .zip(int_attr(&a, &format!("tsync.{which}.hi_unix_nano")));
                    assert_eq!(got_i, want_i, "{which}");
                    match got_i {
                        Some((lo, hi)) => {
                            // The nodes share realtime: the truth is the stamp itself.
                            let truth = st.base + truth as i64;
                            assert!(
                                lo <= truth && truth <= hi,
                                "{which}: {truth} ∉ [{lo}, {hi}]"
                            );
                            worst = worst.max(mapped - lo).max(hi - mapped);
                            with_interval += 1;
                        }
                        None => all_bounded = false,
                    }
                }
                let u = int_attr(&a, "tsync.uncertainty_ns");
                assert_eq!(u, all_bounded.then_some(worst));
                assert_eq!(a.contains_key("tsync.outside_span"), !all_bounded);
                // The span keeps its length, as its node's map has it.
                let (s0, e0) = (
                    time(&span_before["startTimeUnixNano"]),
                    time(&span_before["endTimeUnixNano"]),
                );
                let dur = time(&span["endTimeUnixNano"]) - time(&span["startTimeUnixNano"]);
                assert_eq!(dur, want[&e0].0 - want[&s0].0);
                assert!((dur - (e0 - s0)).abs() < 1_000, "{dur} vs {}", e0 - s0);
                for (ev, ev_before) in span["events"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .zip(span_before["events"].as_array().unwrap())
                {
                    let stamp = time(&ev_before["timeUnixNano"]);
                    let (want_t, want_i) = want[&stamp];
                    assert!((time(&ev["timeUnixNano"]) - want_t).abs() <= 1);
                    let ea = attrs(ev);
                    assert_eq!(ea["n"], json!({"intValue": "1"}));
                    assert_eq!(int_attr(&ea, "tsync.local.time_unix_nano"), Some(stamp));
                    let got_i = int_attr(&ea, "tsync.time.lo_unix_nano")
                        .zip(int_attr(&ea, "tsync.time.hi_unix_nano"));
                    assert_eq!(got_i, want_i);
                    assert_eq!(ev["name"], ev_before["name"]);
                    events += 1;
                }
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 600);
    assert_eq!(
        events,
        st.spans.iter().map(|sp| sp.events.len()).sum::<usize>()
    );
    assert!(
        with_interval > 1100,
        "{with_interval} of 1200 times with an interval"
    );
    // Applied twice: refused, nothing written.
    let again = st.dir.path().join("again.jsonl");
    let r = apply_otlp(&st, &out, &again, &[]);
    assert_eq!(r.status.code(), Some(1));
    assert!(
        stderr(&r).contains(":1: already has the attribute `tsync."),
        "{}",
        stderr(&r)
    );
    assert!(!again.exists());
}

#[test]
fn gzip_in_and_out_forced_node_and_bad_lines() {
    let st = setup();
    let plain = st.dir.path().join("t.jsonl");
    write_otlp(&plain, &st.spans[..40], st.base, false);
    let gz = st.dir.path().join("t.jsonl.gz");
    let mut enc = flate2::write::GzEncoder::new(
        std::fs::File::create(&gz).unwrap(),
        flate2::Compression::fast(),
    );
    enc.write_all(&std::fs::read(&plain).unwrap()).unwrap();
    enc.finish().unwrap();
    let (a, b) = (
        st.dir.path().join("a.jsonl"),
        st.dir.path().join("b.jsonl.gz"),
    );
    assert!(apply_otlp(&st, &plain, &a, &[]).status.success());
    let r = apply_otlp(&st, &gz, &b, &[]);
    assert!(r.status.success(), "{}", stderr(&r));
    let mut unzipped = String::new();
    std::io::Read::read_to_string(
        &mut flate2::read::GzDecoder::new(std::fs::File::open(&b).unwrap()),
        &mut unzipped,
    )
    .unwrap();
    assert_eq!(unzipped, std::fs::read_to_string(&a).unwrap());
    // --node forces every resource onto one node.
    let forced = st.dir.path().join("forced.jsonl");
    let r = apply_otlp(&st, &plain, &forced, &["--node", "node1"]);
    assert!(r.status.success(), "{}", stderr(&r));
    assert!(
        stderr(&r).contains("40 OTLP spans (node1: 40)"),
        "{}",
        stderr(&r)
    );
    // Another attribute names the node: service.name's svc-0/svc-1 are no trace.
    let r = apply_otlp(&st, &plain, &forced, &["--node-attribute", "service.name"]);
    assert!(r.status.success(), "{}", stderr(&r));
    assert!(
        stderr(&r).contains("is `svc-0` left unchanged"),
        "{}",
        stderr(&r)
    );
    // Bad lines name file:line; the output is not written.
    let check = |body: &str, want: &str| {
        let bad = st.dir.path().join("bad.jsonl");
        std::fs::write(&bad, body).unwrap();
        let out = st.dir.path().join("bad.out.jsonl");
        let r = apply_otlp(&st, &bad, &out, &[]);
        assert_eq!(r.status.code(), Some(1), "{}", stderr(&r));
        assert!(stderr(&r).contains(want), "`{want}` not in {}", stderr(&r));
        assert!(!out.exists());
    };
    let first = std::fs::read_to_string(&plain).unwrap();
    let first = first.lines().next().unwrap();
    check(
        &format!("{first}\n{{\"resourceSpans\":[}}\n"),
        "bad.jsonl:2: the line is not a JSON object",
    );
    check(
        "{\"resourceLogs\":[]}\n",
        "bad.jsonl:1: `resourceLogs`: this is not OTLP traces",
    );
    check(
        &first.replacen("\"startTimeUnixNano\":\"", "\"startTimeUnixNano\":\"x", 1),
        "bad.jsonl:1: \"x",
    );
    // --field does not apply; --node is required for the other formats.
    let r = apply_otlp(&st, &plain, &forced, &["--field", "t"]);
    assert_eq!(r.status.code(), Some(2));
    let r = run(&[
        "apply",
        &st.traces[0],
        &st.traces[1],
        "--events",
        &s(&plain),
        "-o",
        &s(&forced),
    ]);
    assert_eq!(r.status.code(), Some(2));
    assert!(
        stderr(&r).contains("--node NAME is required"),
        "{}",
        stderr(&r)
    );
}

/// `apply --format otlp` of the OTLP/JSON file `json_in` and of `proto`, the protobuf file of
/// the same spans: both succeed and say the same, and the protobuf output, decoded, is the JSON
/// output converted (`otlp_proto::from_json`: times, attributes in their order with their types,
/// ids, events, links, status). Returns the protobuf output.
fn apply_both_ways(st: &Setup, json_in: &Path, proto: &[u8]) -> Vec<u8> {
    let dir = st.dir.path();
    let proto_in = dir.join("traces.pb");
    std::fs::write(&proto_in, proto).unwrap();
    let (json_out, proto_out) = (dir.join("json.out.jsonl"), dir.join("proto.out.pb"));
    let rj = apply_otlp(st, json_in, &json_out, &[]);
    assert!(rj.status.success(), "{}", stderr(&rj));
    let rp = apply_otlp(st, &proto_in, &proto_out, &[]);
    assert!(rp.status.success(), "{}", stderr(&rp));
    assert_eq!(
        stderr(&rj).replace(&s(&json_out), "OUT"),
        stderr(&rp).replace(&s(&proto_out), "OUT")
    );
    let out = std::fs::read(&proto_out).unwrap();
    let decoded = otlp_proto::decode_file(&out);
    let text = std::fs::read_to_string(&json_out).unwrap();
    assert_eq!(decoded.len(), text.lines().count());
    for (line, p) in text.lines().zip(&decoded) {
        let j: Value = serde_json::from_str(line).unwrap();
        assert_eq!(otlp_proto::from_json(&j), *p);
    }
    out
}

#[test]
fn protobuf_spans_are_rewritten_as_their_json_is() {
    let st = setup();
    let input = st.dir.path().join("traces.jsonl");
    write_otlp(&input, &st.spans, st.base, true);
    let text = std::fs::read_to_string(&input).unwrap();
    let out = apply_both_ways(&st, &input, &otlp_proto::file_from_json(&text));
    // The times were mapped and the attributes added (and the stray resources kept).
    let before = otlp_proto::decode_file(&otlp_proto::file_from_json(&text));
    let after = otlp_proto::decode_file(&out);
    let spans = |d: &[otlp_proto::TracesData]| -> Vec<otlp_proto::Span> {
        d.iter()
            .flat_map(|t| &t.resource_spans)
            .flat_map(|r| &r.scope_spans)
            .flat_map(|s| s.spans.clone())
            .collect()
    };
    let (before, after) = (spans(&before), spans(&after));
    assert_eq!(before.len(), 602);
    // node1's spans move onto node0's clock; node0 is the reference.
    let moved = before
        .iter()
        .zip(&after)
        .filter(|(b, a)| b.start_time_unix_nano != a.start_time_unix_nano)
        .count();
    assert!(moved > 250, "{moved}");
    let keys = |sp: &otlp_proto::Span| -> Vec<String> {
        sp.attributes.iter().map(|kv| kv.key.clone()).collect()
    };
    let applied = after
        .iter()
        .filter(|sp| keys(sp).iter().any(|k| k == "tsync.node"))
        .count();
    assert_eq!(applied, 600);
    assert_eq!(
        keys(&after[0])[..5],
        [
            "http.method",
            "retries",
            "tsync.node",
            "tsync.reference",
            "tsync.clock"
        ]
    );
}

/// Unknown fields of every wire type (a newer OTLP's, another producer's), numbered past
/// OTLP's: a varint, a fixed64, a string, a group holding a varint, a fixed32.
fn unknown_fields(seed: u8) -> Vec<u8> {
    let mut out = Vec::new();
    encode_key(100, WireType::Varint, &mut out);
    encode_varint(300 + u64::from(seed), &mut out);
    encode_key(101, WireType::SixtyFourBit, &mut out);
    out.extend_from_slice(&[seed; 8]);
    out.extend(delimited(102, b"from the future"));
    encode_key(103, WireType::StartGroup, &mut out);
    encode_key(1, WireType::Varint, &mut out);
    encode_varint(7, &mut out);
    encode_key(103, WireType::EndGroup, &mut out);
    encode_key(104, WireType::ThirtyTwoBit, &mut out);
    out.extend_from_slice(&[seed; 4]);
    out
}

/// `message` as prost encodes it, then unknown fields, then its `children` (field number, the
/// child's bytes), each a length-delimited field.
fn with_unknown(message: &impl Message, children: Vec<(u32, Vec<u8>)>, seed: u8) -> Vec<u8> {
    let mut out = message.encode_to_vec();
    out.extend(unknown_fields(seed));
    for (tag, child) in children {
        out.extend(delimited(tag, &child));
    }
    out
}

/// A `TracesData` with unknown fields in every message on the way to the times: the message
/// itself (after its `resource_spans`: a file is told apart by its first field), each
/// `ResourceSpans`, `ScopeSpans`, `Span` and `Event`.
fn traces_with_unknown(td: &otlp_proto::TracesData) -> Vec<u8> {
    use otlp_proto::{ResourceSpans, ScopeSpans, Span};
    let rs = td.resource_spans.iter().map(|rs| {
        let ss = rs.scope_spans.iter().map(|ss| {
            let spans = ss.spans.iter().map(|sp| {
                let events = sp.events.iter().map(|e| (11, with_unknown(e, vec![], 5)));
                let bare = Span {
                    events: vec![],
                    ..sp.clone()
                };
                (2, with_unknown(&bare, events.collect(), 4))
            });
            let bare = ScopeSpans {
                spans: vec![],
                ..ss.clone()
            };
            (2, with_unknown(&bare, spans.collect(), 3))
        });
        let bare = ResourceSpans {
            scope_spans: vec![],
            ..rs.clone()
        };
        (1, with_unknown(&bare, ss.collect(), 2))
    });
    let mut out: Vec<u8> = rs.flat_map(|(tag, child)| delimited(tag, &child)).collect();
    out.extend(unknown_fields(1));
    out
}

/// The messages on the way to the times.
#[derive(Clone, Copy, Debug)]
enum Level {
    TracesData,
    ResourceSpans,
    ScopeSpans,
    Span,
    Event,
}

impl Level {
    /// The field holding the next messages down.
    fn child(self, tag: u32) -> Option<Level> {
        match (self, tag) {
            (Level::TracesData, 1) => Some(Level::ResourceSpans),
            (Level::ResourceSpans, 2) => Some(Level::ScopeSpans),
            (Level::ScopeSpans, 2) => Some(Level::Span),
            (Level::Span, 11) => Some(Level::Event),
            _ => None,
        }
    }

    /// The `fixed64` times, and the attributes' field.
    fn times(self) -> (&'static [u32], Option<u32>) {
        match self {
            Level::Span => (&[7, 8], Some(9)),
            Level::Event => (&[1], Some(3)),
            _ => (&[], None),
        }
    }
}

/// Checks that `after` is the message `before` but for what `apply` maps and adds: its times
/// (same key, 8 bytes), the messages on the way to them (checked alike), and `tsync.*`
/// attributes appended at its end. Every other field is byte for byte as it was, in its order.
/// Counts the messages checked, per level.
fn check_kept(before: &[u8], after: &[u8], level: Level, counts: &mut [usize; 5]) {
    let (b, a) = (wire_fields(before), wire_fields(after));
    assert!(a.len() >= b.len(), "{level:?}: fields lost");
    let (times, attributes) = level.times();
    for (fb, fa) in b.iter().zip(&a) {
        assert_eq!(fb.tag, fa.tag, "{level:?}: the fields' order");
        if let Some(child) = level.child(fb.tag) {
            check_kept(fb.payload.unwrap(), fa.payload.unwrap(), child, counts);
        } else if times.contains(&fb.tag) {
            assert_eq!((fa.bytes.len(), fa.bytes[0]), (9, fb.bytes[0]), "{level:?}");
        } else {
            assert_eq!(fa.bytes, fb.bytes, "{level:?}: field {}", fb.tag);
        }
    }
    for added in &a[b.len()..] {
        assert_eq!(Some(added.tag), attributes, "{level:?}: an added field");
        let key: WireField = wire_fields(added.payload.unwrap())[0];
        assert!(key.payload.unwrap().starts_with(b"tsync."), "{level:?}");
    }
    counts[level as usize] += 1;
}

#[test]
fn protobuf_unknown_fields_and_other_attributes_survive_byte_for_byte() {
    let st = setup();
    let input = st.dir.path().join("traces.jsonl");
    write_otlp(&input, &st.spans[..100], st.base, true);
    let text = std::fs::read_to_string(&input).unwrap();
    let mut proto = Vec::new();
    for line in text.lines() {
        let message =
            traces_with_unknown(&otlp_proto::from_json(&serde_json::from_str(line).unwrap()));
        proto.extend_from_slice(&(message.len() as u32).to_be_bytes());
        proto.extend(message);
    }
    let out = apply_both_ways(&st, &input, &proto);
    let (before, after) = (otlp_proto::messages(&proto), otlp_proto::messages(&out));
    assert_eq!(before.len(), after.len());
    let mut counts = [0; 5];
    for (b, a) in before.iter().zip(&after) {
        check_kept(b, a, Level::TracesData, &mut counts);
    }
    let events: usize = st.spans[..100].iter().map(|sp| sp.events.len()).sum();
    // 5 batches; the first with two stray resources, their spans unchanged.
    assert_eq!(counts, [5, 12, 12, 102, events]);
    // Every message on the way grew: each span and event holds new attributes.
    assert!(after.iter().zip(&before).all(|(a, b)| a.len() > b.len()));
}

/// The repository's `tsync-analyze/tests/otlp_client.py`.
fn client_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/otlp_client.py")
}

/// The OpenTelemetry project's own protobuf definitions (PyPI's `opentelemetry-proto`, with
/// `google.protobuf.json_format`) read every line of the output, and the times they see are the
/// ones `apply --format jsonl` gives for the same stamps. The venv is made here, in a temporary
/// directory; `cargo xtask setup` installs what `python3 -m venv` needs.
#[test]
fn the_opentelemetry_protobuf_definitions_read_the_output() {
    let st = setup();
    let input = st.dir.path().join("traces.jsonl");
    write_otlp(&input, &st.spans, st.base, false);
    let out = st.dir.path().join("traces.synced.jsonl");
    let r = apply_otlp(&st, &input, &out, &[]);
    assert!(r.status.success(), "{}", stderr(&r));
    // What the client must see: per span id, its start, end and event times.
    let mut expected = serde_json::Map::new();
    for node in 0..2 {
        let mine: Vec<&Span> = st.spans.iter().filter(|sp| sp.node == node).collect();
        let stamps: Vec<i64> = mine
            .iter()
            .flat_map(|sp| [sp.start, sp.end].into_iter().chain(sp.events.clone()))
            .map(|t| st.base + t as i64)
            .collect();
        let want = jsonl_reference(st.dir.path(), &st.traces, node, &stamps);
        for sp in mine {
            let m = |t: f64| want[&(st.base + t as i64)].0;
            expected.insert(
                sp.id.clone(),
                json!({"start": m(sp.start), "end": m(sp.end),
                       "events": sp.events.iter().map(|&e| m(e)).collect::<Vec<_>>(),
                       "local_start": st.base + sp.start as i64}),
            );
        }
    }
    let expected_path = st.dir.path().join("expected.json");
    std::fs::write(&expected_path, Value::Object(expected).to_string()).unwrap();
    let venv = st.dir.path().join("venv");
    let python = python_with_opentelemetry_proto(&venv);
    let r = Command::new(&python)
        .arg(client_script())
        .arg(&out)
        .arg(&expected_path)
        .output()
        .unwrap();
    assert!(
        r.status.success(),
        "the OpenTelemetry client failed:\n{}{}",
        String::from_utf8_lossy(&r.stdout),
        stderr(&r)
    );
    let said = String::from_utf8_lossy(&r.stdout);
    assert!(said.contains("600 spans"), "{said}");
}

/// A venv at `dir` with `opentelemetry-proto` and `protobuf` from PyPI; its python.
fn python_with_opentelemetry_proto(dir: &Path) -> PathBuf {
    let made = Command::new("python3")
        .args(["-m", "venv"])
        .arg(dir)
        .output()
        .expect(
            "python3 is needed to read the output with OpenTelemetry's own definitions \
             (`cargo xtask setup` installs python3 and python3-venv)",
        );
    assert!(
        made.status.success(),
        "python3 -m venv failed (install Debian's python3-venv; `cargo xtask setup` does): {}",
        stderr(&made)
    );
    let pip = Command::new(dir.join("bin/pip"))
        .args(["install", "--quiet", "--disable-pip-version-check"])
        .args(["opentelemetry-proto", "protobuf"])
        .output()
        .unwrap();
    assert!(
        pip.status.success(),
        "pip install opentelemetry-proto protobuf failed (PyPI must be reachable): {}",
        stderr(&pip)
    );
    dir.join("bin/python")
}
