//! A reimplementation of Jaeger's clock-skew adjuster's published rule (`clockskew.go`), not
//! Jaeger itself: written in Rust from reading the Go source (jaegertracing/jaeger,
//! `model/adjuster/clockskew.go` and its successor
//! `cmd/jaeger/internal/extension/jaegerquery/internal/adjuster/clockskew.go`), for the
//! comparison of `tests/spans_sdk.rs` and `benches/spans_adjuster.rs`.
//!
//! The rule, per trace (the spans of one trace id; every trace is adjusted on its own):
//!
//! - a span's host is its resource's `host.id`, else `host.ip`, else `host.name` (the newer
//!   source; the older one read the process's `ip` tag); spans of one host share one clock;
//! - the spans form a tree by parent id; a span without a parent, or whose parent is not in the
//!   trace, is a root, and is never moved;
//! - walking down from each root, a span of the same (non-empty) host as its parent moves by its
//!   parent's delta; a span of another host (or of no host) gets a delta of its own, computed
//!   against its parent *after* the parent was moved:
//!   - the child lasted longer than the parent: moved to start with the parent if it started
//!     before it, else not moved;
//!   - the child lies within the parent (start ≥ parent start, end ≤ parent end): not moved;
//!   - otherwise centred in the parent: `latency = (parent duration − child duration) / 2`
//!     (Go's integer division of nanoseconds), delta = parent start + latency − child start
//!     ("assume that network latency is equally split between req and res");
//! - a span moves by its delta as a whole (start, end and its events);
//! - a delta whose magnitude exceeds `max_delta` is not applied (the query service's
//!   `max_clock_skew_adjust`; Jaeger's default 0 disables the adjuster). The comparison uses no
//!   limit: the rule as it acts when enabled with a limit above every delta.
//!
//! Duplicate span ids: Jaeger keeps the first and warns; so does this.

use std::collections::HashMap;

use serde_json::Value;

/// One span as the rule sees it.
#[derive(Clone, Debug)]
pub struct Span {
    pub trace_id: String,
    pub span_id: String,
    pub parent_id: Option<String>,
    /// The host key (`host.id`, else `host.ip`, else `host.name`; empty if none).
    pub host: String,
    pub start: i64,
    pub end: i64,
}

/// The host key of a resource, as the newer `clockskew.go` derives it.
fn host_key(resource: &Value) -> String {
    let attrs = resource["resource"]["attributes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let get = |key: &str| attrs.iter().find(|a| a["key"] == key).map(|a| &a["value"]);
    if let Some(v) = get("host.id") {
        return v["stringValue"].as_str().unwrap_or_default().to_string();
    }
    if let Some(v) = get("host.ip") {
        if let Some(s) = v["stringValue"].as_str() {
            return s.to_string();
        }
        if let Some(first) = v["arrayValue"]["values"].get(0) {
            return first["stringValue"]
                .as_str()
                .unwrap_or_default()
                .to_string();
        }
    }
    if let Some(v) = get("host.name") {
        return v["stringValue"].as_str().unwrap_or_default().to_string();
    }
    String::new()
}

fn nanos(v: &Value) -> i64 {
    match v {
        Value::String(s) => s.parse().expect("a time in ns"),
        v => v.as_i64().expect("a time in ns"),
    }
}

/// Every span of an OTLP/JSON file (one `TracesData` per line).
pub fn read(text: &str) -> Vec<Span> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let doc: Value = serde_json::from_str(line).expect("OTLP/JSON");
        for rs in doc["resourceSpans"].as_array().into_iter().flatten() {
            let host = host_key(rs);
            for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                for sp in ss["spans"].as_array().into_iter().flatten() {
                    out.push(Span {
                        trace_id: sp["traceId"].as_str().unwrap_or_default().to_string(),
                        span_id: sp["spanId"].as_str().unwrap_or_default().to_string(),
                        parent_id: sp["parentSpanId"]
                            .as_str()
                            .filter(|p| !p.is_empty())
                            .map(str::to_string),
                        host: host.clone(),
                        start: nanos(&sp["startTimeUnixNano"]),
                        end: nanos(&sp["endTimeUnixNano"]),
                    });
                }
            }
        }
    }
    out
}

/// `calculateSkew`: the delta that puts `child` where the rule wants it in its (already moved)
/// parent.
fn skew_of(child: &Span, parent: &Span) -> i64 {
    let parent_duration = parent.end - parent.start;
    let child_duration = child.end - child.start;
    if child_duration > parent_duration {
        // Async, or the parent timed out: only keep the child from starting before the parent.
        return if child.start < parent.start {
            parent.start - child.start
        } else {
            0
        };
    }
    if child.start >= parent.start && child.end <= parent.end {
        return 0;
    }
    let latency = (parent_duration - child_duration) / 2;
    parent.start + latency - child.start
}

/// Adjusts `spans` in place, trace by trace. `max_delta`: deltas of a larger magnitude are not
/// applied (`None`: no limit).
pub fn adjust(spans: &mut [Span], max_delta: Option<i64>) {
    let mut by_trace: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, s) in spans.iter().enumerate() {
        by_trace.entry(s.trace_id.as_str()).or_default().push(i);
    }
    let traces: Vec<Vec<usize>> = by_trace.into_values().collect();
    for members in traces {
        adjust_trace(spans, &members, max_delta);
    }
}

fn adjust_trace(spans: &mut [Span], members: &[usize], max_delta: Option<i64>) {
    // mapIDsToSpans: the first span of an id is kept.
    let mut by_id: HashMap<String, usize> = HashMap::new();
    for &i in members {
        by_id.entry(spans[i].span_id.clone()).or_insert(i);
    }
    // buildSubGraphs: children by parent; roots are spans without a parent in the trace.
    let mut children: HashMap<usize, Vec<usize>> = HashMap::new();
    let mut roots = Vec::new();
    for &i in by_id.values() {
        match spans[i].parent_id.as_ref().and_then(|p| by_id.get(p)) {
            Some(&p) => children.entry(p).or_default().push(i),
            None => roots.push(i),
        }
    }
    roots.sort_unstable();
    // adjustNode, depth first: (span, its parent, the delta and host key it inherits).
    for root in roots {
        let mut stack = vec![(root, None::<usize>, 0i64, spans[root].host.clone())];
        while let Some((n, parent, mut delta, mut host)) = stack.pop() {
            if let Some(p) = parent
                && (spans[n].host != host || spans[n].host.is_empty())
            {
                host = spans[n].host.clone();
                delta = skew_of(&spans[n], &spans[p]);
            }
            // adjustTimestamps
            if delta != 0 && max_delta.is_none_or(|m| delta.abs() <= m) {
                spans[n].start += delta;
                spans[n].end += delta;
            }
            for &c in children.get(&n).into_iter().flatten() {
                stack.push((c, Some(n), delta, host.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(id: &str, parent: Option<&str>, host: &str, start: i64, end: i64) -> Span {
        Span {
            trace_id: "t".into(),
            span_id: id.into(),
            parent_id: parent.map(str::to_string),
            host: host.into(),
            start,
            end,
        }
    }

    #[test]
    fn the_rule_centres_children_outside_their_parent_and_moves_their_host_subtree() {
        let mut s = vec![
            span("a", None, "h0", 1_000, 2_000),
            // 5 000 ns late, 400 ns long: centred in a (300 ns each side).
            span("b", Some("a"), "h1", 6_000, 6_400),
            // b's own host: moved with b.
            span("c", Some("b"), "h1", 6_100, 6_200),
            // Within its parent: left.
            span("d", Some("a"), "h2", 1_100, 1_900),
            // Longer than its parent and starting before it: aligned to its start.
            span("e", Some("a"), "h3", 500, 2_500),
        ];
        adjust(&mut s, None);
        let got: Vec<(i64, i64)> = s.iter().map(|s| (s.start, s.end)).collect();
        assert_eq!(
            got,
            [
                (1_000, 2_000),
                (1_300, 1_700),
                (1_400, 1_500),
                (1_100, 1_900),
                (1_000, 3_000)
            ]
        );
        let mut limited = s.clone();
        limited[1].start += 10_000;
        limited[1].end += 10_000;
        adjust(&mut limited, Some(1_000));
        assert_eq!(
            limited[1].start, 11_300,
            "a delta beyond the limit is not applied"
        );
    }
}
