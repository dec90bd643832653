//! Spans of OpenTelemetry's own Python SDK with known clocks, shared by `tests/spans_sdk.rs`
//! and `benches/spans_adjuster.rs`: three HTTP services instrumented with the SDK
//! (`tests/otel_services.py`) make real calls on loopback ports, on one shared clock; each node's
//! spans are then put on a clock of its own by a known affine map, so every span's true time is
//! known. Also: the two corrections the benchmark compares (tsync's `apply --format otlp`, and
//! [`jaeger`], a reimplementation of Jaeger's clock-skew adjuster's published rule) and the
//! figures it reports.
//!
//! The Python packages live in `target/otel-venv`, which `cargo xtask setup` makes.
#![allow(dead_code)]

pub mod jaeger;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// Node k's clock: local = t + offset + drift·(t − t0), t the shared clock's reading.
pub const SKEWS: [(f64, f64); 3] = [(0.0, 0.0), (25_300_000.0, 30e-6), (-41_700_000.0, -55e-6)];

/// Spans per call of `otel_services.py` (4 of them cross-host children).
pub const SPANS_PER_CALL: usize = 9;

/// The venv `cargo xtask setup` makes (`$CARGO_TARGET_DIR` or the workspace's `target/`).
pub fn venv_python() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"),
        PathBuf::from,
    );
    let python = target.join("otel-venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: `cargo xtask setup` installs OpenTelemetry's Python SDK there",
        python.display()
    );
    python
}

/// The analyzer of this build, run with `args`.
pub fn analyzer(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tsync-analyze"))
        .args(args)
        .output()
        .expect("run tsync-analyze")
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// Runs `otel_services.py`: `calls` root calls, their spans (on the shared clock) into `raw`.
pub fn record(raw: &Path, calls: usize) {
    let r = Command::new(venv_python())
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/otel_services.py"))
        .arg(raw)
        .arg(calls.to_string())
        .output()
        .expect("run otel_services.py");
    assert!(r.status.success(), "{}", stderr(&r));
}

pub fn node_of(resource: &Value) -> usize {
    let attrs = resource["resource"]["attributes"].as_array().unwrap();
    let name = attrs
        .iter()
        .find(|a| a["key"] == "host.name")
        .and_then(|a| a["value"]["stringValue"].as_str())
        .unwrap();
    name.strip_prefix("node").unwrap().parse().unwrap()
}

pub fn time(v: &Value) -> i64 {
    v.as_str().unwrap().parse().unwrap()
}

/// One span of the run: its node and its times on the shared clock.
pub struct Truth {
    pub node: usize,
    pub parent: Option<String>,
    pub start: i64,
}

/// Rewrites `raw` with each node's times on its own clock ([`SKEWS`]); the truth of every span
/// by id, and the shared clock's earliest start (the skews' t0).
pub fn skew(raw: &Path, out: &Path) -> (HashMap<String, Truth>, i64) {
    let text = std::fs::read_to_string(raw).unwrap();
    let mut docs: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let spans = |d: &Value| {
        d["resourceSpans"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|r| r["scopeSpans"][0]["spans"].as_array().unwrap().clone())
            .collect::<Vec<_>>()
    };
    let t0 = docs
        .iter()
        .flat_map(spans)
        .map(|sp| time(&sp["startTimeUnixNano"]))
        .min()
        .unwrap();
    let mut truth = HashMap::new();
    for doc in &mut docs {
        for rs in doc["resourceSpans"].as_array_mut().unwrap() {
            let k = node_of(rs);
            let (offset, drift) = SKEWS[k];
            let local = |t: i64| t + (offset + drift * (t - t0) as f64).round() as i64;
            for sp in rs["scopeSpans"][0]["spans"].as_array_mut().unwrap() {
                let (start, end) = (time(&sp["startTimeUnixNano"]), time(&sp["endTimeUnixNano"]));
                let parent = sp["parentSpanId"].as_str().filter(|p| !p.is_empty());
                truth.insert(
                    sp["spanId"].as_str().unwrap().to_string(),
                    Truth {
                        node: k,
                        parent: parent.map(str::to_string),
                        start,
                    },
                );
                sp["startTimeUnixNano"] = Value::String(local(start).to_string());
                sp["endTimeUnixNano"] = Value::String(local(end).to_string());
            }
        }
    }
    let body: String = docs.iter().map(|d| format!("{d}\n")).collect();
    std::fs::write(out, body).unwrap();
    (truth, t0)
}

/// A recording: the skewed spans and their truth.
pub struct Recording {
    /// Holds the files.
    pub dir: tempfile::TempDir,
    /// The spans, each node's on its own clock.
    pub spans: PathBuf,
    pub truth: HashMap<String, Truth>,
    pub t0: i64,
}

/// Records `calls` calls and skews their spans.
pub fn recording(calls: usize) -> Recording {
    let dir = tempfile::tempdir().unwrap();
    let raw = dir.path().join("raw.jsonl");
    record(&raw, calls);
    let spans = dir.path().join("skewed.jsonl");
    let (truth, t0) = skew(&raw, &spans);
    Recording {
        dir,
        spans,
        truth,
        t0,
    }
}

/// Every span's start by id, read from an OTLP/JSON file.
pub fn starts(path: &Path) -> HashMap<String, i64> {
    let text = std::fs::read_to_string(path).unwrap();
    jaeger::read(&text)
        .into_iter()
        .map(|sp| (sp.span_id, sp.start))
        .collect()
}

/// tsync's correction: `apply --format otlp` of the spans from themselves, onto node0's clock,
/// written to `synced`; every span's corrected start, and what `apply` said on stderr.
pub fn tsync_starts(rec: &Recording, synced: &Path) -> (HashMap<String, i64>, String) {
    let spans = s(&rec.spans);
    let r = analyzer(&[
        "apply",
        &spans,
        "--reference",
        "node0",
        "--format",
        "otlp",
        "--events",
        &spans,
        "-o",
        &s(synced),
    ]);
    assert!(r.status.success(), "{}", stderr(&r));
    (starts(synced), stderr(&r))
}

/// The Jaeger rule's correction ([`jaeger`], no limit on the delta): every span's start.
pub fn jaeger_starts(rec: &Recording) -> HashMap<String, i64> {
    let mut spans = jaeger::read(&std::fs::read_to_string(&rec.spans).unwrap());
    jaeger::adjust(&mut spans, None);
    spans.into_iter().map(|sp| (sp.span_id, sp.start)).collect()
}

/// One node's figures for one correction.
#[derive(Clone, Copy, Debug, Default)]
pub struct HostFigures {
    /// Spans of the node.
    pub spans: usize,
    /// The median, the 99th percentile and the largest |corrected start − true start|, ns.
    pub median_ns: i64,
    pub p99_ns: i64,
    pub worst_ns: i64,
    /// Cross-host children on this node, and how many of them start before their parent.
    pub cross: usize,
    pub before_parent: usize,
}

/// Per node (index = node number): the errors of `starts` against the truth, and the cross-host
/// children starting before their parents by `starts`.
pub fn figures(truth: &HashMap<String, Truth>, starts: &HashMap<String, i64>) -> Vec<HostFigures> {
    let mut errors = vec![Vec::new(); SKEWS.len()];
    let mut out = vec![HostFigures::default(); SKEWS.len()];
    for (id, t) in truth {
        errors[t.node].push((starts[id] - t.start).abs());
        let Some((pid, p)) = t
            .parent
            .as_ref()
            .and_then(|p| truth.get(p).map(|pt| (p, pt)))
        else {
            continue;
        };
        if p.node != t.node {
            out[t.node].cross += 1;
            out[t.node].before_parent += usize::from(starts[id] < starts[pid]);
        }
    }
    for (f, mut e) in out.iter_mut().zip(errors) {
        e.sort_unstable();
        f.spans = e.len();
        f.worst_ns = e.last().copied().unwrap_or(0);
        f.median_ns = e.get(e.len() / 2).copied().unwrap_or(0);
        f.p99_ns = e.get(e.len() * 99 / 100).copied().unwrap_or(0);
    }
    out
}

/// The comparison's table (Markdown), one row per node: `raw` the skewed spans' figures.
pub fn table(raw: &[HostFigures], tsync: &[HostFigures], jaeger: &[HostFigures]) -> String {
    let us = |ns: i64| format!("{:.0}", ns as f64 / 1e3);
    let errors = |f: &HostFigures| {
        format!(
            "{} / {} / **{}**",
            us(f.median_ns),
            us(f.p99_ns),
            us(f.worst_ns)
        )
    };
    let mut out = String::from(
        "| node | its clock | spans | cross-host children | of them before their parent: skewed / tsync / Jaeger rule | tsync error (µs): median / p99 / worst | Jaeger rule error (µs): median / p99 / worst | worst: tsync ÷ Jaeger rule |\n\
         |---|---|---:|---:|---|---|---|---:|\n",
    );
    for k in 0..SKEWS.len() {
        let (offset, drift) = SKEWS[k];
        let ratio = if jaeger[k].worst_ns > 0 {
            format!(
                "{:.2}",
                tsync[k].worst_ns as f64 / jaeger[k].worst_ns as f64
            )
        } else {
            "–".into()
        };
        let clock = if k == 0 {
            "the truth's (reference)".to_string()
        } else {
            format!("{:+.1} ms, {:+.0} ppm", offset / 1e6, drift * 1e6)
        };
        out.push_str(&format!(
            "| node{k} | {clock} | {} | {} | {} / {} / {} | {} | {} | {ratio} |\n",
            tsync[k].spans,
            tsync[k].cross,
            raw[k].before_parent,
            tsync[k].before_parent,
            jaeger[k].before_parent,
            errors(&tsync[k]),
            errors(&jaeger[k]),
        ));
    }
    out
}
