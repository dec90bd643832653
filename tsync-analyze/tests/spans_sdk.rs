//! Spans from real instrumentation: three HTTP services instrumented with OpenTelemetry's own
//! Python SDK and instrumentations (`tests/otel_services.py`: WSGI servers, `requests` clients,
//! a chain, a fan-out, calls both ways) make real calls on loopback ports. They share one clock,
//! so the truth is known: each node's spans are then put on a clock of its own by a known affine
//! map (an offset of tens of ms and a drift of tens of ppm), and `sync` must bring them back:
//! every interval holds the truth, and `apply --format otlp` of the spans alone puts no
//! cross-host child before its parent; and, on the same spans, tsync's worst error on every node
//! is at most half that of a reimplementation of Jaeger's clock-skew adjuster's published rule
//! (`tests/sdk_spans/jaeger.rs`).
//!
//! The Python packages live in `target/otel-venv`, which `cargo xtask setup` makes. One
//! recording (300 calls) serves every test here.

mod sdk_spans;

use std::collections::HashMap;
use std::sync::OnceLock;

use sdk_spans::{Recording, SKEWS, SPANS_PER_CALL, analyzer as run, s, stderr, time};
use serde_json::Value;

/// Root calls of the recording.
const CALLS: usize = 300;

/// The one recording of this test binary.
fn rec() -> &'static Recording {
    static REC: OnceLock<Recording> = OnceLock::new();
    REC.get_or_init(|| sdk_spans::recording(CALLS))
}

#[test]
fn spans_of_the_opentelemetry_sdk_give_intervals_that_hold_the_truth() {
    let rec = rec();
    let (spans, truth, t0) = (&rec.spans, &rec.truth, rec.t0);
    assert_eq!(truth.len(), CALLS * SPANS_PER_CALL, "9 spans per call");

    let out = run(&["sync", "--json", "--reference", "node0", &s(spans)]);
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
    let synced = rec.dir.path().join("synced.jsonl");
    let r = run(&[
        "apply",
        &s(spans),
        "--reference",
        "node0",
        "--format",
        "otlp",
        "--events",
        &s(spans),
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
    for (id, t) in truth {
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
    assert_eq!(cross, CALLS * 4);
    assert!(
        before > 0,
        "the skews put some children before their parents"
    );
}

/// Issue 34's goal, on the real SDK's spans: corrected by tsync from the spans alone, every
/// node's worst start-time error is at most half that of Jaeger's clock-skew adjuster's rule (a
/// reimplementation of its published rule, `sdk_spans::jaeger`) on the same spans, and no
/// cross-host child starts before its parent.
#[test]
fn tsync_corrects_the_sdk_spans_at_least_twice_as_well_as_the_jaeger_rule() {
    let rec = rec();
    let skewed = sdk_spans::figures(&rec.truth, &sdk_spans::starts(&rec.spans));
    let (starts, _) = sdk_spans::tsync_starts(rec, &rec.dir.path().join("tsync.jsonl"));
    let tsync = sdk_spans::figures(&rec.truth, &starts);
    let jaeger = sdk_spans::figures(&rec.truth, &sdk_spans::jaeger_starts(rec));
    eprintln!("{}", sdk_spans::table(&skewed, &tsync, &jaeger));
    assert!(
        skewed.iter().map(|f| f.before_parent).sum::<usize>() > 0,
        "the skews put some children before their parents"
    );
    for (k, (t, j)) in tsync.iter().zip(&jaeger).enumerate() {
        assert_eq!(t.before_parent, 0, "node{k}: children before their parents");
        assert!(
            2 * t.worst_ns <= j.worst_ns,
            "node{k}: tsync's worst error {} ns, the Jaeger rule's {} ns",
            t.worst_ns,
            j.worst_ns
        );
    }
}
