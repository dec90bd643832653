use serde_json::json;
use tsync_common::format::ClockSkew;

use super::app_logs::{AppLogs, out_of_order};
use super::checks::{NodeCheck, failures, table};
use super::*;

#[test]
fn skews_spare_node_0_stay_in_range_and_repeat_with_the_seed() {
    let s = skews(5, 42);
    assert_eq!(s[0], ClockSkew::default());
    for k in &s[1..] {
        assert!(
            k.offset_ns.abs() <= 50_000_000 && k.drift_ppm.abs() <= 100.0,
            "{k:?}"
        );
        assert_eq!((k.drift_ppm * 1000.0).round() / 1000.0, k.drift_ppm);
    }
    assert_eq!(s, skews(5, 42));
    assert_ne!(s, skews(5, 43));
}

fn event(exchange: &str, event: &str, ts: i64) -> serde_json::Value {
    json!({"exchange": exchange, "event": event, "ts_ns": ts})
}

#[test]
fn an_exchange_is_out_of_order_unless_its_four_events_are() {
    let mut events = Vec::new();
    for (i, name) in [
        "request sent",
        "request received",
        "response sent",
        "response received",
    ]
    .into_iter()
    .enumerate()
    {
        events.push(event("a", name, 10 + i as i64));
        // The response received before the request was: out of order.
        events.push(event("b", name, if i == 3 { 0 } else { 10 + i as i64 }));
        // Logged on one side only: not counted.
        if i < 2 {
            events.push(event("c", name, 10 + i as i64));
        }
    }
    assert_eq!(out_of_order(&events, "ts_ns"), (2, 1));
    // A missing time counts as out of order.
    assert_eq!(out_of_order(&events, "ts_ns_local"), (2, 2));
}

fn node(k: usize, mid_error_ns: f64, interval: Option<(f64, f64)>) -> NodeCheck {
    NodeCheck {
        node: format!("node-{k}"),
        injected: ClockSkew {
            offset_ns: 1_000,
            drift_ppm: 12.5,
        },
        true_offset_mid_ns: 1_000.0,
        recovered_offset_mid_ns: 1_000.0 + mid_error_ns,
        recovered_ppm: 12.5,
        quality: "accurate".into(),
        mid_error_ns,
        interval,
    }
}

fn logs(
    exchanges: usize,
    out_of_order_after: usize,
    wall_error_ns: i64,
    wall_missed: usize,
) -> AppLogs {
    AppLogs {
        head: Vec::new(),
        events: exchanges * 4,
        exchanges,
        out_of_order_before: exchanges,
        out_of_order_after,
        wall_error_ns,
        certain: exchanges * 3,
        uncertain: exchanges,
        wall_bounded: exchanges * 4,
        wall_missed,
    }
}

#[test]
fn three_nodes_make_twelve_checks_and_each_failure_is_named() {
    let pairs: Vec<_> = [(0, 1), (0, 2), (1, 2)]
        .map(|(a, b)| (a, b, "accurate".to_owned()))
        .into();
    let good = [
        node(1, 40.0, Some((-500.0, 600.0))),
        node(2, -90.0, Some((-0.5, 0.5))),
    ];
    let (checked, failed) = failures(5.0, &good, &pairs, 0, &logs(20, 0, 30, 0));
    assert_eq!((checked, failed.len()), (12, 0), "{failed:?}");

    let bad = [
        node(1, 6_000.0, Some((-500.0, 600.0))),
        node(2, 10.0, Some((2.0, 9.0))),
    ];
    let mut pairs = pairs;
    pairs[2].2 = "unreliable".into();
    let (checked, failed) = failures(5.0, &bad, &pairs, 3, &logs(0, 1, 9_000, 0));
    assert_eq!(checked, 12);
    let expected = [
        "node-1: error 6.000 µs exceeds 5 µs",
        "node-2: truth outside the reported interval",
        "pair 1–2 is unreliable",
        "3 messages inverted after correction",
        "no application-log exchange was logged on both sides",
        "1 of 0 logged exchanges out of causal order after apply",
        "0 of 0 applied wall_ns intervals miss the shared realtime clock",
        "applied wall_ns off the realtime clock by 9.000 µs (more than 5 µs)",
    ];
    assert_eq!(failed, expected);
}

#[test]
fn the_truth_is_inside_within_a_nanosecond_of_rounding() {
    assert!(node(1, 0.0, Some((-1.0, 1.0))).truth_inside());
    assert!(node(1, 0.0, Some((0.9, 3.0))).truth_inside());
    assert!(!node(1, 0.0, Some((1.5, 3.0))).truth_inside());
    assert!(!node(1, 0.0, None).truth_inside());
}

#[test]
fn the_table_has_a_row_per_node_and_says_where_the_truth_lies() {
    let t = table(&[node(1, 40.0, Some((-500.0, 600.0))), node(2, 0.0, None)]);
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(lines.len(), 4);
    assert!(lines[2].starts_with("| node-1 | 1000,12.5 |") && lines[2].ends_with("| yes |"));
    assert!(lines[2].contains("[-0.500, +0.600]"), "{}", lines[2]);
    assert!(lines[3].contains("| none | NO |"), "{}", lines[3]);
}
