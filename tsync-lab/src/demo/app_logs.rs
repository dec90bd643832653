//! The nodes' application logs (written by the traffic generator, stamped with each node's skewed
//! clock) put on node-0's timebase with `tsync-analyze apply --interval`, merged into one timeline
//! by `tsync-analyze merge`, and checked: every logged exchange must read in causal order once
//! applied (it need not before), every `wall_ns` interval must hold the shared realtime clock's
//! truth, and the report counts the events whose order the intervals guarantee.
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// The order of an exchange's four logged events when time is right.
const CAUSAL_ORDER: [&str; 4] = [
    "request sent",
    "request received",
    "response sent",
    "response received",
];

/// The nodes' application logs after `tsync-analyze apply --interval`, merged by
/// `tsync-analyze merge`.
pub struct AppLogs {
    /// The merged log's first lines, as written.
    pub head: Vec<String>,
    /// Events, and exchanges logged on both sides.
    pub events: usize,
    pub exchanges: usize,
    /// Exchanges whose four events are out of causal order: merged by the recorded times, and
    /// by the applied ones.
    pub out_of_order_before: usize,
    pub out_of_order_after: usize,
    /// Largest |corrected wall_ns − recorded wall_ns| (ns): the nodes share the machine's
    /// realtime clock, so the realtime path must give it back.
    pub wall_error_ns: i64,
    /// The exchanges' events whose place `merge` guarantees (`certain`), and the others.
    pub certain: usize,
    pub uncertain: usize,
    /// Events with a `wall_ns` interval, and those whose interval misses the shared realtime
    /// clock's truth (the recorded `wall_ns`): must be none.
    pub wall_bounded: usize,
    pub wall_missed: usize,
}

impl AppLogs {
    /// The report's paragraph on the logs.
    pub fn report(&self) -> String {
        format!(
            "\napplication logs: {} events of {} exchanges, put on node-0's timebase with \
             `tsync-analyze apply --interval` (ts_ns: each node's skewed CLOCK_MONOTONIC; \
             wall_ns: CLOCK_REALTIME); exchanges out of causal order merged by the recorded \
             ts_ns: {}, after apply: {}; corrected wall_ns off the shared realtime clock by at \
             most {:.3} µs; wall_ns intervals holding the truth: {} of {} ({} missed it)\n\
             merged by `tsync-analyze merge` (app-merged.jsonl): of the {} exchanges' events, {} \
             certain (their order against every earlier event of another node guaranteed by the \
             intervals), {} uncertain; first lines:\n{}\n",
            self.events,
            self.exchanges,
            self.out_of_order_before,
            self.out_of_order_after,
            self.wall_error_ns as f64 * 1e-3,
            self.wall_bounded - self.wall_missed,
            self.wall_bounded,
            self.wall_missed,
            self.exchanges,
            self.certain,
            self.uncertain,
            self.head.join("\n")
        )
    }
}

/// Applies each node's map to its application log with `--interval` (`ts_ns` as monotonic, then
/// `wall_ns` as realtime) into `app-K.applied.jsonl`, merges the results with `tsync-analyze
/// merge` into `app-merged.jsonl`, and checks every logged exchange (request sent < received <
/// response sent < received), every `wall_ns` interval against the shared realtime clock, and
/// counts the exchanges' events whose order `merge` calls certain.
pub fn apply_and_merge(
    analyzer: &Path,
    files: &[PathBuf],
    nodes: usize,
    out: &Path,
) -> anyhow::Result<AppLogs> {
    let mut applied: Vec<OsString> = vec!["merge".into()];
    for k in 0..nodes {
        applied.push(apply(analyzer, files, k, out)?.into());
    }
    let merged = out.join("app-merged.jsonl");
    applied.extend(["-o".into(), merged.clone().into()]);
    super::run_analyzer(analyzer, "merge of the applied logs", &applied, &[])?;
    let text = std::fs::read_to_string(&merged)?;
    let all: Vec<Value> = text
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    let wall_error_ns = all
        .iter()
        .map(|e| (time(e, "wall_ns") - time(e, "wall_ns_local")).abs())
        .max()
        .unwrap_or(0);
    // Every namespace reads the machine's one CLOCK_REALTIME: the recorded wall_ns is the truth.
    let bounded: Vec<&Value> = all.iter().filter(|e| e["wall_ns_lo"].is_i64()).collect();
    let wall_missed = bounded
        .iter()
        .filter(|e| {
            let truth = time(e, "wall_ns_local");
            !(time(e, "wall_ns_lo") <= truth && truth <= time(e, "wall_ns_hi"))
        })
        .count();
    let (exchanges, out_of_order_before) = out_of_order(&all, "ts_ns_local");
    let (_, out_of_order_after) = out_of_order(&all, "ts_ns");
    let (certain, uncertain) = order_verdicts(&all);
    Ok(AppLogs {
        head: text.lines().take(8).map(str::to_owned).collect(),
        events: all.len(),
        exchanges,
        out_of_order_before,
        out_of_order_after,
        wall_error_ns,
        certain,
        uncertain,
        wall_bounded: bounded.len(),
        wall_missed,
    })
}

/// Among the events of exchanges logged on both sides: how many `merge` flagged `certain` and
/// how many `uncertain`.
fn order_verdicts(events: &[Value]) -> (usize, usize) {
    let mut by: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for e in events {
        by.entry(e["exchange"].as_str().unwrap_or(""))
            .or_default()
            .push(e["tsync_order"].as_str().unwrap_or(""));
    }
    let verdicts = || by.values().filter(|v| v.len() == 4).flatten();
    (
        verdicts().filter(|v| **v == "certain").count(),
        verdicts().filter(|v| **v == "uncertain").count(),
    )
}

/// Node k's log with both its clocks applied: `app-K.applied.jsonl` (the intermediate with
/// only `ts_ns` applied is removed).
fn apply(analyzer: &Path, files: &[PathBuf], k: usize, out: &Path) -> anyhow::Result<PathBuf> {
    let log = out.join(format!("app-{k}.jsonl"));
    let mono = out.join(format!("app-{k}.mono.jsonl"));
    let applied = out.join(format!("app-{k}.applied.jsonl"));
    for (from, to, field, clock) in [
        (&log, &mono, "ts_ns", "monotonic"),
        (&mono, &applied, "wall_ns", "realtime"),
    ] {
        let args: Vec<OsString> = vec![
            "apply".into(),
            "--reference".into(),
            "node-0".into(),
            "--node".into(),
            format!("node-{k}").into(),
            "--events".into(),
            from.into(),
            "--field".into(),
            field.into(),
            "--clock".into(),
            clock.into(),
            "--interval".into(),
            "-o".into(),
            to.into(),
        ];
        let what = format!("apply to {}", from.display());
        super::run_analyzer(analyzer, &what, &args, files)?;
    }
    std::fs::remove_file(&mono)?;
    Ok(applied)
}

/// An event's integer time field (`i64::MIN` when absent).
fn time(e: &Value, field: &str) -> i64 {
    e[field].as_i64().unwrap_or(i64::MIN)
}

/// Among the exchanges whose four events were all logged: how many, and how many of them are
/// out of [`CAUSAL_ORDER`] by the time `field` (an event missing its time counts as out of
/// order).
pub fn out_of_order(events: &[Value], field: &str) -> (usize, usize) {
    let mut by: BTreeMap<String, Vec<(&str, i64)>> = BTreeMap::new();
    for e in events {
        by.entry(e["exchange"].as_str().unwrap_or("").to_string())
            .or_default()
            .push((e["event"].as_str().unwrap_or(""), time(e, field)));
    }
    let complete: Vec<_> = by.values().filter(|v| v.len() == 4).collect();
    let bad = complete
        .iter()
        .filter(|v| {
            let t: Vec<i64> = CAUSAL_ORDER
                .iter()
                .map(|name| v.iter().find(|e| e.0 == *name).map_or(i64::MIN, |e| e.1))
                .collect();
            !t.windows(2).all(|w| w[0] <= w[1]) || t.contains(&i64::MIN)
        })
        .count();
    (complete.len(), bad)
}
