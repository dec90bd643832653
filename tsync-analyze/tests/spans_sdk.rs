//! Spans from real instrumentation: three HTTP services instrumented with OpenTelemetry's own
//! Python SDK and instrumentations (`tests/otel_services.py`: WSGI servers, `requests` clients,
//! a chain, a fan-out, calls both ways) make real calls on loopback ports. They share one clock,
//! so the truth is known: each node's spans are then put on a clock of its own by a known affine
//! map (an offset of tens of ms and a drift of tens of ppm), and `sync` must bring them back:
//! every interval holds the truth, and `apply --format otlp` of the spans alone puts no
//! cross-host child before its parent.
//!
//! The Python packages live in `target/otel-venv`, which `cargo xtask setup` makes.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{run, s, stderr};
use serde_json::Value;

/// Node k's clock: local = t + offset + drift·(t − t0), t the shared clock's reading.
const SKEWS: [(f64, f64); 3] = [(0.0, 0.0), (25_300_000.0, 30e-6), (-41_700_000.0, -55e-6)];

/// The venv `cargo xtask setup` makes (`$CARGO_TARGET_DIR` or the workspace's `target/`).
fn venv_python() -> PathBuf {
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

fn node_of(resource: &Value) -> usize {
    let attrs = resource["resource"]["attributes"].as_array().unwrap();
    let name = attrs
        .iter()
        .find(|a| a["key"] == "host.name")
        .and_then(|a| a["value"]["stringValue"].as_str())
        .unwrap();
    name.strip_prefix("node").unwrap().parse().unwrap()
}

fn time(v: &Value) -> i64 {
    v.as_str().unwrap().parse().unwrap()
}

/// One span of the run: its node and its times on the shared clock.
struct Truth {
    node: usize,
    parent: Option<String>,
    start: i64,
}

/// Rewrites `raw` with each node's times on its own clock; the truth of every span by id.
fn skew(raw: &Path, out: &Path) -> (HashMap<String, Truth>, i64) {
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

#[test]
fn spans_of_the_opentelemetry_sdk_give_intervals_that_hold_the_truth() {
    let python = venv_python();
    let dir = tempfile::tempdir().unwrap();
    let raw = dir.path().join("raw.jsonl");
    let r = Command::new(&python)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/otel_services.py"))
        .args([&s(&raw), "300"])
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", stderr(&r));
    let spans = dir.path().join("skewed.jsonl");
    let (truth, t0) = skew(&raw, &spans);
    assert_eq!(truth.len(), 300 * 9, "9 spans per call");

    let out = run(&["sync", "--json", "--reference", "node0", &s(&spans)]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    for p in doc["pairs"].as_array().unwrap() {
        assert_eq!(p["quality"], "accurate", "{p}");
    }
    let summary = doc["warnings"][0].as_str().unwrap();
    let epoch: i64 = summary
        .rsplit("epoch ")
        .next()
        .unwrap()
        .trim_end_matches(" ns")
        .parse()
        .unwrap();
    // Node k's local time `at` (ns since the epoch) as the shared clock's, since the epoch
    // (relative values: f64 keeps their nanoseconds).
    let d = (epoch - t0) as f64;
    let truth_of = |k: usize, at: f64| {
        let (offset, drift) = SKEWS[k];
        (at + d - offset) / (1.0 + drift) - d
    };
    let mut checked = 0;
    for t in doc["traces"].as_array().unwrap() {
        let k: usize = t["name"].as_str().unwrap()[4..].parse().unwrap();
        if k == 0 {
            continue;
        }
        for p in t["intervals"].as_array().expect("intervals") {
            let truth = truth_of(k, p["at_ns"].as_f64().unwrap());
            let (lo, hi) = (p["lo_ns"].as_f64().unwrap(), p["hi_ns"].as_f64().unwrap());
            assert!(
                lo - 1.0 <= truth && truth <= hi + 1.0,
                "node{k}: {truth} not in [{lo}, {hi}]"
            );
            eprintln!(
                "node{k}: interval {:.1} µs wide, truth {:.1} µs from its middle",
                (hi - lo) / 1e3,
                (truth - (lo + hi) / 2.0) / 1e3
            );
            checked += 1;
        }
    }
    assert!(checked >= 18);

    // The spans corrected from themselves: every interval holds the truth (node0's clock is
    // the shared one), and no cross-host child starts before its parent.
    let synced = dir.path().join("synced.jsonl");
    let r = run(&[
        "apply",
        &s(&spans),
        "--reference",
        "node0",
        "--format",
        "otlp",
        "--events",
        &s(&spans),
        "-o",
        &s(&synced),
    ]);
    assert!(r.status.success(), "{}", stderr(&r));
    let said = stderr(&r);
    assert!(
        said.contains("cross-node order kept: none of the 2400 messages"),
        "{said}"
    );
    let mut corrected = HashMap::new();
    let mut bounded = 0;
    for line in std::fs::read_to_string(&synced).unwrap().lines() {
        let doc: Value = serde_json::from_str(line).unwrap();
        for rs in doc["resourceSpans"].as_array().unwrap() {
            for sp in rs["scopeSpans"][0]["spans"].as_array().unwrap() {
                let id = sp["spanId"].as_str().unwrap().to_string();
                let start = time(&sp["startTimeUnixNano"]);
                let attr = |key: &str| {
                    sp["attributes"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .find(|a| a["key"] == key)
                        .map(|a| time(&a["value"]["intValue"]))
                };
                if let (Some(lo), Some(hi)) = (
                    attr("tsync.start.lo_unix_nano"),
                    attr("tsync.start.hi_unix_nano"),
                ) {
                    let t = truth[&id].start;
                    assert!(lo <= t && t <= hi, "{id}: {t} not in [{lo}, {hi}]");
                    bounded += 1;
                }
                corrected.insert(id, start);
            }
        }
    }
    assert!(
        bounded * 20 > truth.len() * 19,
        "{bounded} of {} with bounds",
        truth.len()
    );
    let (mut cross, mut before) = (0, 0);
    for (id, t) in &truth {
        let Some(parent) = t
            .parent
            .as_ref()
            .and_then(|p| truth.get(p).map(|pt| (p, pt)))
        else {
            continue;
        };
        if parent.1.node == t.node {
            continue;
        }
        cross += 1;
        assert!(
            corrected[id] >= corrected[parent.0],
            "{id} starts before its parent once corrected"
        );
        let (skewed_child, skewed_parent) = (SKEWS[t.node], SKEWS[parent.1.node]);
        before += i32::from(
            t.start + (skewed_child.0 as i64) < parent.1.start + (skewed_parent.0 as i64),
        );
    }
    assert_eq!(cross, 300 * 4);
    assert!(
        before > 0,
        "the skews put some children before their parents"
    );
}
