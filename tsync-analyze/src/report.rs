//! What `sync` prints: a report for people and the JSON of contracts.md for programs. Numbers are
//! printed at full precision (shortest round-trip form of each f64): the reference tool printed 6
//! significant digits and lost about a millisecond on offsets.

use serde_json::{Value, json};

use crate::accuracy::AccuracyStats;
use crate::corridor::Quality;
use crate::sync::{LimitLine, PairResult, SyncResult};

fn num(x: f64) -> Value {
    serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number)
}

fn line(l: &Option<LimitLine>) -> Value {
    match l {
        Some(l) => json!({ "a0_ns": num(l.a0_ns), "a1": num(l.a1) }),
        None => Value::Null,
    }
}

fn accuracy(s: Option<&AccuracyStats>) -> Value {
    match s {
        Some(s) => json!({ "best": num(s.best), "worst": num(s.worst), "mean": num(s.mean) }),
        None => Value::Null,
    }
}

fn pair_json(p: &PairResult) -> Value {
    let mut v = json!({
        "a": p.a,
        "b": p.b,
        "quality": p.quality.as_str(),
        "a0_ns": p.estimate.map_or(Value::Null, |e| num(e.offset_ns)),
        "a1": p.estimate.map_or(Value::Null, |e| num(e.drift)),
        "minslope": line(&p.minslope),
        "maxslope": line(&p.maxslope),
        "messages_ab": p.messages_ab,
        "messages_ba": p.messages_ba,
        "hull_points_ab": p.hull_ab.len(),
        "hull_points_ba": p.hull_ba.len(),
        "accuracy_ns": accuracy(p.accuracy.as_ref().map(|a| &a.stats)),
        "out_of_order": p.out_of_order,
    });
    let o = v.as_object_mut().expect("object");
    if let Some(e) = p.approx_error_ns {
        o.insert("approx_error_ns".into(), num(e));
    }
    if let Some(l) = &p.linreg {
        o.insert(
            "linreg".into(),
            json!({
                "samples": l.samples,
                "used": l.used,
                "residual_std_ns": l.residual_std_ns.map_or(Value::Null, num),
                "mean_error_ns": num(l.mean_error_ns),
            }),
        );
    }
    if let Some((lo, hi)) = p.span {
        o.insert("span_ns".into(), json!([lo, hi]));
    }
    v
}

/// The `sync --json` document (contracts.md; extra fields: `name`s, `path`, `out_of_order`,
/// `approx_error_ns`, `linreg`, `span_ns`, `warnings`, matching `out_of_order`/`exchanges`).
pub fn to_json(r: &SyncResult) -> Value {
    let traces: Vec<Value> = r
        .traces
        .iter()
        .map(|t| {
            json!({
                "index": t.index,
                "name": t.name,
                "group": t.group,
                "reference": t.reference,
                "drift": num(t.map.drift),
                "offset_ns": num(t.map.offset_ns),
                "synchronized": t.synchronized,
                "path": t.path,
            })
        })
        .collect();
    json!({
        "algorithm": r.algorithm.as_str(),
        "traces": traces,
        "pairs": r.pairs.iter().map(pair_json).collect::<Vec<_>>(),
        "matching": {
            "events": r.matching.events,
            "matched": r.matching.matched,
            "unmatched": r.matching.unmatched,
            "same_trace": r.matching.same_trace,
            "ambiguous": r.matching.ambiguous,
            "out_of_order": r.matching.out_of_order,
            "exchanges": r.matching.exchanges,
            "stacked_copies": r.matching.stacked_copies,
            "oversize_unmatched": r.matching.oversize_unmatched,
        },
        "warnings": r.warnings,
    })
}

fn us(ns: f64) -> String {
    format!("{:.3} µs", ns / 1000.0)
}

/// The human report.
pub fn to_text(r: &SyncResult) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let name = |i: u32| r.traces[i as usize].name.as_str();
    let m = &r.matching;
    // A count worth a mention only when it is not zero.
    let extra = |n: u64, what: &str| {
        if n > 0 {
            format!(", {n} {what}")
        } else {
            String::new()
        }
    };
    let _ = writeln!(
        s,
        "Messages: {} matched from {} events ({} unmatched, {} same-trace, {} ambiguous keys dropped{}{})",
        m.matched,
        m.events,
        m.unmatched,
        m.same_trace,
        m.ambiguous,
        extra(
            m.stacked_copies,
            "copies on stacked devices (bridge, bond, VLAN) merged"
        ),
        extra(m.out_of_order, "events out of order in their file"),
    );
    let _ = writeln!(s, "Algorithm: {}", r.algorithm.as_str());
    let _ = writeln!(s, "\nPairs (t_b = a0 + a1·t_a, local ns):");
    for p in &r.pairs {
        let _ = writeln!(
            s,
            "  {} → {}: {}   messages {} a→b, {} b→a; hull points {} + {}",
            name(p.a),
            name(p.b),
            p.quality.as_str(),
            p.messages_ab,
            p.messages_ba,
            p.hull_ab.len(),
            p.hull_ba.len()
        );
        if let Some(e) = p.estimate {
            let _ = writeln!(
                s,
                "      estimate  a0 = {} ns, a1 = {}",
                e.offset_ns, e.drift
            );
        }
        if let Some(l) = &p.minslope {
            let _ = writeln!(s, "      min slope a0 = {} ns, a1 = {}", l.a0_ns, l.a1);
        }
        if let Some(l) = &p.maxslope {
            let _ = writeln!(s, "      max slope a0 = {} ns, a1 = {}", l.a0_ns, l.a1);
        }
        match (&p.accuracy, p.quality) {
            (Some(a), _) => {
                let _ = writeln!(
                    s,
                    "      accuracy (guaranteed interval width): best {}, worst {}, mean {}",
                    us(a.stats.best),
                    us(a.stats.worst),
                    us(a.stats.mean)
                );
            }
            (None, Quality::Approximate) => {
                let _ = writeln!(s, "      accuracy: NO GUARANTEE (best-effort estimate)");
            }
            _ => {}
        }
        if let Some(l) = &p.linreg {
            let _ = writeln!(
                s,
                "      regression: {} of {} exchanges used, residual std {}, mean error margin {}",
                l.used,
                l.samples,
                l.residual_std_ns.map_or("n/a".into(), us),
                us(l.mean_error_ns)
            );
        }
        if p.out_of_order > 0 {
            let _ = writeln!(
                s,
                "      {} points reached the hull out of time order (normal for matched traces; all kept)",
                p.out_of_order
            );
        }
    }
    let _ = writeln!(s, "\nTraces (t_ref = drift·t + offset):");
    for t in &r.traces {
        if !t.synchronized {
            let _ = writeln!(s, "  {} (group {}): NOT SYNCHRONIZED", t.name, t.group);
        } else if t.reference == t.index {
            let _ = writeln!(s, "  {} (group {}): reference", t.name, t.group);
        } else {
            let _ = writeln!(
                s,
                "  {} (group {}): reference {}, drift {} ({:+.4} ppm), offset {} ns (pair maps composed along {})",
                t.name,
                t.group,
                name(t.reference),
                t.map.drift,
                (t.map.drift - 1.0) * 1e6,
                t.map.offset_ns,
                // `path` runs from the reference to the trace; print it the way the map goes.
                t.path
                    .iter()
                    .rev()
                    .map(|&i| name(i))
                    .collect::<Vec<_>>()
                    .join(" → ")
            );
        }
    }
    if !r.warnings.is_empty() {
        let _ = writeln!(s);
        for w in &r.warnings {
            let _ = writeln!(s, "WARNING: {w}");
        }
    }
    s
}
