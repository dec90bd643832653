//! The 12 LTTV reference cases (tests/data/lttv, from the original C implementation): same
//! quality, same pair factors and limit lines, same final per-trace factors (relative difference
//! ≤ 1e-6). Where the reference leaves a trace unsynchronized without saying so (incomplete pairs),
//! we give the same factors and additionally report `synchronized: false`.

use std::path::PathBuf;

use tsync_analyze::{InputSet, Quality, SyncOptions, sync};

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/lttv")
        .join(name)
}

fn close(what: &str, case: &str, got: f64, want: f64) {
    let scale = want.abs().max(1e-300);
    assert!(
        (got - want).abs() / scale <= 1e-6 || (got - want).abs() <= 1e-9,
        "{case}: {what} = {got}, reference {want}"
    );
}

fn opt(field: &str) -> Option<f64> {
    (!field.is_empty()).then(|| field.parse().expect("number in expected.csv"))
}

#[test]
fn lttv_reference_cases() {
    let csv = std::fs::read_to_string(data("expected.csv")).unwrap();
    let mut cases = 0;
    for row in csv.lines().skip(1) {
        let f: Vec<&str> = row.split(',').collect();
        let case = f[0];
        let inputs = InputSet::open(&[data(&format!("{case}.txt"))]).unwrap();
        let r = sync(&inputs, &SyncOptions::default(), &mut |_| {}).unwrap();
        let p = r.pair(0, 1).expect("pair 0-1");
        assert_eq!(p.quality.as_str(), f[1], "{case}: quality");
        match (opt(f[2]), opt(f[3]), p.estimate) {
            (Some(a0), Some(a1), Some(e)) => {
                close("a0", case, e.offset_ns, a0);
                close("a1", case, e.drift, a1);
            }
            (None, None, None) => {}
            other => panic!("{case}: estimate presence differs: {other:?}"),
        }
        for (name, a0, a1, line) in [
            ("minslope", opt(f[4]), opt(f[5]), p.minslope),
            ("maxslope", opt(f[6]), opt(f[7]), p.maxslope),
        ] {
            match (a0, a1, line) {
                (Some(a0), Some(a1), Some(l)) => {
                    close(&format!("{name} a0"), case, l.line.offset_ns, a0);
                    close(&format!("{name} a1"), case, l.line.drift, a1);
                }
                (None, None, None) => {}
                other => panic!("{case}: {name} presence differs: {other:?}"),
            }
        }
        let t1 = &r.traces[1];
        assert_eq!(
            t1.reference.to_string(),
            f[8],
            "{case}: reference of trace 1"
        );
        close("trace1 drift", case, t1.line.drift, opt(f[9]).unwrap());
        close(
            "trace1 offset",
            case,
            t1.line.offset_ns,
            opt(f[10]).unwrap(),
        );
        // LTTV's cases are linear clocks: one segment, the map exactly the line.
        assert!(
            t1.map.is_linear(),
            "{case}: {} pieces",
            t1.map.pieces().len()
        );
        assert_eq!(p.segments.len(), 1, "{case}: segments");
        assert_eq!(
            t1.map.apply(1e9),
            t1.line.apply(1e9),
            "{case}: map is the line"
        );
        // Where the reference silently leaves trace 1 alone, we say so.
        let usable = matches!(p.quality, Quality::Accurate | Quality::Approximate);
        assert_eq!(t1.synchronized, usable, "{case}: synchronized");
        if !usable {
            assert!(
                r.warnings.iter().any(|w| w.contains("NOT synchronized")),
                "{case}: no warning about the unsynchronized trace: {:?}",
                r.warnings
            );
        }
        if p.quality == Quality::Approximate {
            assert!(
                r.warnings
                    .iter()
                    .any(|w| w.contains("WITHOUT any guarantee"))
            );
        }
        cases += 1;
    }
    assert_eq!(cases, 12);
}

/// The accuracy interval of an accurate case contains every consistent line, and its width is
/// zero nowhere a corridor of positive width exists.
#[test]
fn accuracy_interval_contains_both_limit_lines() {
    for case in ["test1", "test2", "test3", "test9", "test11", "test12"] {
        let inputs = InputSet::open(&[data(&format!("{case}.txt"))]).unwrap();
        let r = sync(&inputs, &SyncOptions::default(), &mut |_| {}).unwrap();
        let p = r.pair(0, 1).unwrap();
        let acc = p.accuracy.as_ref().expect("accurate pairs have a curve");
        assert_eq!(
            acc.points.len(),
            {
                let mut xs: Vec<i64> = p.hull_ab.iter().chain(&p.hull_ba).map(|q| q.x).collect();
                xs.sort();
                xs.dedup();
                xs.len()
            },
            "{case}: one point per hull abscissa"
        );
        for pt in &acc.points {
            let t = pt.t_a as f64;
            for l in [p.minslope.unwrap(), p.maxslope.unwrap()] {
                let y = l.line.apply(t);
                assert!(
                    pt.lo - 1e-3 <= y && y <= pt.hi + 1e-3,
                    "{case}: limit line outside at {t}"
                );
            }
            let e = p.estimate.unwrap().apply(t);
            assert!(
                pt.lo - 1e-3 <= e && e <= pt.hi + 1e-3,
                "{case}: estimate outside at {t}"
            );
            assert!(pt.width > 0.0);
        }
        let s = acc.stats;
        assert!(s.best <= s.mean && s.mean <= s.worst, "{case}: {s:?}");
    }
}
