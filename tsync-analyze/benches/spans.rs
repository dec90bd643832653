//! Reading span files: spans per second of `sync`'s two passes over an OpenTelemetry span file,
//! OTLP/JSON and OTLP protobuf (the Collector file exporter's two formats), on spans shaped like
//! those of OpenTelemetry's Python SDK: three services on three hosts (a frontend calling an
//! API that calls a database service, and a third of the calls going back to the frontend),
//! WSGI SERVER spans and `requests` CLIENT spans with their instrumentations' attributes, the
//! SDK's resource attributes (`telemetry.sdk.*`, `service.*`, `host.name`, `process.*`), spans
//! written in the order they end, in batches of about 200 per `TracesData`.
//!
//! * `scan`: the first pass (nodes and epoch): the reading alone.
//! * `read_join`: both passes, as `sync` and `info` make them (the second one joins parents and
//!   children within the window and judges each pair); its spans/s counts each span once.
//!
//! * memory (printed once, before the timings): the peak RSS of `tsync-analyze sync` over a
//!   tenth of the OTLP/JSON file and over all of it, with a window of a twentieth of the spans,
//!   so that both fill it: memory is bounded by the window, not the file, and the bench fails
//!   if the whole file takes more than 16 MiB above its tenth.
//!
//! The goal is 1 M spans/s on one core. `cargo bench -p tsync-analyze --bench spans`;
//! `TSYNC_BENCH_SPANS=N` sets the number of spans (100,000 by default), `-- --quick` makes a
//! short run (`cargo xtask bench spans --quick`), `TSYNC_BENCH_SPANS_DIR=DIR` keeps the files
//! it generates in DIR.

mod common;
#[path = "../tests/otlp_proto/mod.rs"]
mod otlp_proto;

use std::hint::black_box;
use std::io::Write;
use std::path::Path;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::{Value, json};
use tsync_analyze::spans::{SpanOptions, inspect, scan};

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
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const SERVICES: [(&str, &str, u16); 3] = [
    ("frontend", "node0", 8000),
    ("api", "node1", 8001),
    ("db", "node2", 8002),
];

/// The resource of service `n`, as the Python SDK fills it.
fn resource(n: usize) -> Value {
    let (service, host, _) = SERVICES[n];
    let s = |k: &str, v: &str| json!({"key": k, "value": {"stringValue": v}});
    json!({"attributes": [
        s("telemetry.sdk.language", "python"),
        s("telemetry.sdk.name", "opentelemetry"),
        s("telemetry.sdk.version", "1.45.2"),
        s("service.name", service),
        s("service.instance.id", &format!("{:032x}", 0xabcdef_u128 * (n as u128 + 1))),
        s("host.name", host),
        s("host.arch", "x86_64"),
        s("os.type", "linux"),
        json!({"key": "process.pid", "value": {"intValue": (41_000 + n).to_string()}}),
        s("process.executable.name", "python3"),
        s("process.runtime.name", "cpython"),
        s("process.runtime.version", "3.12.3"),
    ]})
}

struct Span {
    node: usize,
    json: Value,
    end: i64,
}

fn kv_s(k: &str, v: &str) -> Value {
    json!({"key": k, "value": {"stringValue": v}})
}

fn kv_i(k: &str, v: i64) -> Value {
    json!({"key": k, "value": {"intValue": v.to_string()}})
}

/// A `requests` CLIENT span on `from` calling `to`, and the WSGI SERVER span it gets there.
#[allow(clippy::too_many_arguments)]
fn call(
    rng: &mut Rng,
    out: &mut Vec<Span>,
    trace: &str,
    parent: &str,
    from: usize,
    to: usize,
    t: i64,
    depth: u32,
) -> i64 {
    let client = format!("{:016x}", rng.next());
    let server = format!("{:016x}", rng.next());
    let (_, host, port) = SERVICES[to];
    let s_start = t + 900_000 + rng.below(2_000_000) as i64;
    let mut now = s_start + 200_000 + rng.below(1_000_000) as i64;
    if depth == 0 && to != 2 {
        now = call(rng, out, trace, &server, to, 2, now, depth + 1) + 100_000;
    }
    let s_end = now + 300_000;
    let c_end = s_end + 500_000 + rng.below(2_000_000) as i64;
    let path = if to == 2 { "/query" } else { "/api/items" };
    out.push(Span {
        node: to,
        end: s_end,
        json: json!({
            "traceId": trace, "spanId": server, "parentSpanId": client, "flags": 768,
            "name": format!("GET {path}"), "kind": 2,
            "startTimeUnixNano": s_start.to_string(), "endTimeUnixNano": s_end.to_string(),
            "attributes": [
                kv_s("http.method", "GET"), kv_s("http.server_name", host),
                kv_s("http.scheme", "http"), kv_i("net.host.port", i64::from(port)),
                kv_s("http.host", &format!("{host}:{port}")), kv_s("http.target", path),
                kv_s("net.peer.ip", "10.0.0.1"), kv_s("http.user_agent", "python-requests/2.32.3"),
                kv_i("net.peer.port", 40_000 + rng.below(20_000) as i64),
                kv_s("http.flavor", "1.1"), kv_s("http.route", path),
                kv_i("http.status_code", 200),
            ],
            "status": {}
        }),
    });
    out.push(Span {
        node: from,
        end: c_end,
        json: json!({
            "traceId": trace, "spanId": client, "parentSpanId": parent, "flags": 256,
            "name": "GET", "kind": 3,
            "startTimeUnixNano": t.to_string(), "endTimeUnixNano": c_end.to_string(),
            "attributes": [
                kv_s("http.method", "GET"),
                kv_s("http.url", &format!("http://{host}:{port}{path}")),
                kv_i("http.status_code", 200),
            ],
            "status": {}
        }),
    });
    c_end
}

/// About `n` spans, as OTLP/JSON lines: (the file's text, spans).
fn workload(n: usize) -> (String, u64) {
    let mut rng = Rng(34);
    let mut spans = Vec::with_capacity(n + 8);
    let mut t = 1_700_000_000_000_000_000i64;
    while spans.len() < n {
        t += 300_000 + rng.below(400_000) as i64;
        let trace = format!("{:016x}{:016x}", rng.next(), rng.next());
        let root = format!("{:016x}", rng.next());
        // The frontend's calls go to the API; the API's (a third of the roots) to the frontend.
        let (from, to) = if rng.below(3) == 0 { (1, 0) } else { (0, 1) };
        let end = call(&mut rng, &mut spans, &trace, &root, from, to, t + 50_000, 0) + 80_000;
        spans.push(Span {
            node: from,
            end,
            json: json!({
                "traceId": trace, "spanId": root, "parentSpanId": "", "flags": 256,
                "name": "GET /", "kind": 2,
                "startTimeUnixNano": t.to_string(), "endTimeUnixNano": end.to_string(),
                "attributes": [kv_s("http.method", "GET"), kv_s("http.target", "/"),
                               kv_i("http.status_code", 200)],
                "status": {}
            }),
        });
    }
    spans.sort_by_key(|s| s.end);
    let mut text = String::new();
    for batch in spans.chunks(200) {
        let resources: Vec<Value> = (0..3)
            .filter(|n| batch.iter().any(|s| s.node == *n))
            .map(|n| {
                let scope = |name: &str, kind: i64| {
                    json!({
                        "scope": {"name": name, "version": "0.54b1"},
                        "spans": batch.iter()
                            .filter(|s| s.node == n && s.json["kind"] == kind)
                            .map(|s| s.json.clone()).collect::<Vec<_>>()
                    })
                };
                json!({
                    "resource": resource(n),
                    "scopeSpans": [scope("opentelemetry.instrumentation.wsgi", 2),
                                   scope("opentelemetry.instrumentation.requests", 3)],
                    "schemaUrl": "https://opentelemetry.io/schemas/1.11.0"
                })
            })
            .collect();
        text.push_str(&json!({ "resourceSpans": resources }).to_string());
        text.push('\n');
    }
    (text, spans.len() as u64)
}

fn write(path: &Path, bytes: &[u8]) {
    let mut f = std::fs::File::create(path).expect("create");
    f.write_all(bytes).expect("write");
}

/// The peak RSS (KiB) of `tsync-analyze sync FILE --span-window WINDOW`: its `VmHWM`, read
/// while it runs (the peak `wait4` reports for a child counts this process's own, which the
/// generated spans make large, from before the child's `exec`).
fn sync_peak_rss_kib(file: &Path, window: u64) -> u64 {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tsync-analyze"))
        .arg("sync")
        .arg(file)
        .args(["--reference", "node0", "--span-window", &window.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("tsync-analyze");
    let status = format!("/proc/{}/status", child.id());
    let mut peak = 0;
    loop {
        // Read before checking for the exit: the last reading is taken at the end of its run.
        let hwm = std::fs::read_to_string(&status).ok().and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        });
        peak = peak.max(hwm.unwrap_or(0));
        if let Some(exit) = child.try_wait().expect("wait") {
            assert!(exit.success(), "tsync-analyze sync failed");
            return peak;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

/// Memory bounded by the window: `sync` of a tenth of the file and of all of it, both
/// filling a window of a twentieth of the spans.
fn memory(json: &Path, text: &str, spans: u64) {
    let lines: Vec<&str> = text.lines().collect();
    let part = json.with_file_name("spans.tenth.jsonl");
    write(
        &part,
        (lines[..lines.len() / 10].join("\n") + "\n").as_bytes(),
    );
    let window = (spans / 20).max(1);
    let (tenth, all) = (
        sync_peak_rss_kib(&part, window),
        sync_peak_rss_kib(json, window),
    );
    eprintln!(
        "spans bench: sync's peak RSS with a window of {window} spans: {:.1} MiB for {} spans, \
         {:.1} MiB for {spans}",
        tenth as f64 / 1024.0,
        spans / 10,
        all as f64 / 1024.0
    );
    assert!(
        all <= tenth + 16 * 1024,
        "memory grows with the file: {tenth} KiB for a tenth, {all} KiB for all"
    );
}

fn read(c: &mut Criterion) {
    let n: usize = std::env::var("TSYNC_BENCH_SPANS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let dir = tempfile::tempdir().expect("a temporary directory");
    // `TSYNC_BENCH_SPANS_DIR=DIR` keeps the files there (to time `tsync-analyze` binaries on).
    let dir = std::env::var_os("TSYNC_BENCH_SPANS_DIR").map_or(dir.path().to_owned(), Into::into);
    let (text, spans) = workload(n);
    let json = dir.join("spans.jsonl");
    let proto = dir.join("spans.pb");
    write(&json, text.as_bytes());
    write(&proto, &otlp_proto::file_from_json(&text));
    memory(&json, &text, spans);
    let options = SpanOptions::default();
    // Both formats give the same spans and pairs.
    let (a, b) = (
        inspect(&json, &options).expect("the JSON spans"),
        inspect(&proto, &options).expect("the protobuf spans"),
    );
    assert_eq!(a.join.spans, spans);
    assert_eq!((&a.join, a.messages()), (&b.join, b.messages()));
    assert!(a.messages() > spans / 2, "{} messages", a.messages());
    eprintln!(
        "spans bench: {spans} spans, {} messages; OTLP/JSON {:.1} MB ({} bytes/span), \
         protobuf {:.1} MB",
        a.messages(),
        text.len() as f64 / 1e6,
        text.len() as u64 / spans,
        std::fs::metadata(&proto).map_or(0, |m| m.len()) as f64 / 1e6
    );
    let mut g = c.benchmark_group("spans");
    g.sample_size(10);
    g.throughput(Throughput::Elements(spans));
    for (format, path) in [("json", &json), ("proto", &proto)] {
        g.bench_function(format!("{format}_scan"), |b| {
            b.iter(|| black_box(scan(path, &options).expect("scan").nodes.len()))
        });
        g.bench_function(format!("{format}_read_join"), |b| {
            b.iter(|| black_box(inspect(path, &options).expect("inspect").join.spans))
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = read
}
criterion_main!(benches);
