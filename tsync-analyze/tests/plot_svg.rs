//! The plots are real, readable SVG: parse them and find the series a reader needs.
//!
//! Set `TSYNC_EXAMPLE_PLOT_DIR=DIR` to also keep the SVG and PNG files there (this is how
//! docs/example-sync.svg is made).

use std::path::Path;
use tsync_analyze::eval::histogram::LogHistogram;
use tsync_analyze::output::plot::{
    HistogramPlot, HistogramSeries, PlotFormat, SyncPlot, write_pair_plots,
};
use tsync_analyze::{AccuracyPoint, Affine};

/// A pair whose clock b runs 5 ms ahead of a with 20 ppm drift; latencies 40 µs + jitter.
struct Pair {
    ab: Vec<(i64, i64)>,
    ba: Vec<(i64, i64)>,
}

fn synthetic_pair(n: usize) -> Pair {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % 1_000_000) as f64 / 1_000_000.0
    };
    let clock_b = |t: f64| 5_000_000.0 + t * (1.0 + 20e-6);
    let latency = |r: f64| 40_000.0 + 60_000.0 * r * r * r;
    let start = 3_600_000_000_000.0; // an hour of uptime
    let mut ab = Vec::new();
    let mut ba = Vec::new();
    for k in 0..n {
        let t = start + k as f64 * 60e9 / n as f64;
        let l = latency(rnd());
        if k % 2 == 0 {
            ab.push((t as i64, clock_b(t + l) as i64));
        } else {
            ba.push(((t + l) as i64, clock_b(t) as i64));
        }
    }
    Pair { ab, ba }
}

fn cross(o: (i64, i64), a: (i64, i64), b: (i64, i64)) -> f64 {
    (a.0 - o.0) as f64 * (b.1 - o.1) as f64 - (a.1 - o.1) as f64 * (b.0 - o.0) as f64
}

/// Lower (upper = false) or upper convex hull of points sorted by x.
fn half_hull(points: &[(i64, i64)], lower: bool) -> Vec<(i64, i64)> {
    let mut hull: Vec<(i64, i64)> = Vec::new();
    for &p in points {
        while hull.len() >= 2 {
            let c = cross(hull[hull.len() - 2], hull[hull.len() - 1], p);
            if (lower && c <= 0.0) || (!lower && c >= 0.0) {
                hull.pop();
            } else {
                break;
            }
        }
        hull.push(p);
    }
    hull
}

/// Every line through two hull vertices that separates the hulls (brute force: fine here).
fn feasible_lines(lower: &[(i64, i64)], upper: &[(i64, i64)]) -> Vec<Affine> {
    let all: Vec<(i64, i64)> = lower.iter().chain(upper).copied().collect();
    let mut lines = Vec::new();
    for (i, p) in all.iter().enumerate() {
        for q in &all[i + 1..] {
            if p.0 == q.0 {
                continue;
            }
            let a1 = (q.1 - p.1) as f64 / (q.0 - p.0) as f64;
            let line = Affine {
                offset_ns: p.1 as f64 - a1 * p.0 as f64,
                drift: a1,
            };
            let ok = lower
                .iter()
                .all(|v| line.apply(v.0 as f64) <= v.1 as f64 + 1.0)
                && upper
                    .iter()
                    .all(|v| line.apply(v.0 as f64) >= v.1 as f64 - 1.0);
            if ok {
                lines.push(line);
            }
        }
    }
    lines
}

struct Figure {
    pair: Pair,
    hull_ab: Vec<(i64, i64)>,
    hull_ba: Vec<(i64, i64)>,
    minslope: Affine,
    maxslope: Affine,
    chosen: Affine,
    accuracy: Vec<AccuracyPoint>,
    hist_ab: LogHistogram,
    hist_ba: LogHistogram,
}

fn figure(n: usize) -> Figure {
    let pair = synthetic_pair(n);
    let hull_ab = half_hull(&pair.ab, true);
    let hull_ba = half_hull(&pair.ba, false);
    let lines = feasible_lines(&hull_ab, &hull_ba);
    let by_slope = |a: &&Affine, b: &&Affine| a.drift.total_cmp(&b.drift);
    let minslope = *lines.iter().min_by(by_slope).unwrap();
    let maxslope = *lines.iter().max_by(by_slope).unwrap();
    let chosen = Affine {
        offset_ns: (minslope.offset_ns + maxslope.offset_ns) / 2.0,
        drift: (minslope.drift + maxslope.drift) / 2.0,
    };
    let mut xs: Vec<i64> = hull_ab.iter().chain(&hull_ba).map(|p| p.0).collect();
    xs.sort();
    let accuracy = xs
        .iter()
        .map(|&t| {
            let at = lines.iter().map(|l| l.apply(t as f64));
            let (lo, hi) = (
                at.clone().fold(f64::INFINITY, f64::min),
                at.fold(f64::NEG_INFINITY, f64::max),
            );
            AccuracyPoint {
                t_a: t,
                lo,
                hi,
                width: hi - lo,
            }
        })
        .collect();
    // Transfer times after correction by the chosen line.
    let mut hist_ab = LogHistogram::new();
    let mut hist_ba = LogHistogram::new();
    for &(ta, tb) in &pair.ab {
        hist_ab.add((tb as f64 - chosen.apply(ta as f64)) as i64);
    }
    for &(ta, tb) in &pair.ba {
        hist_ba.add((ta as f64 - (tb as f64 - chosen.offset_ns) / chosen.drift) as i64);
    }
    Figure {
        pair,
        hull_ab,
        hull_ba,
        minslope,
        maxslope,
        chosen,
        accuracy,
        hist_ab,
        hist_ba,
    }
}

fn texts_of(doc: &roxmltree::Document<'_>) -> Vec<String> {
    doc.descendants()
        .filter(|n| n.has_tag_name("text"))
        .map(|n| n.descendants().filter_map(|t| t.text()).collect::<String>())
        .collect()
}

fn write(fig: &Figure, dir: &Path, formats: &[PlotFormat]) -> Vec<std::path::PathBuf> {
    let sync = SyncPlot {
        a_name: "alpha",
        b_name: "beta",
        ab: &fig.pair.ab,
        ba: &fig.pair.ba,
        hull_ab: &fig.hull_ab,
        hull_ba: &fig.hull_ba,
        minslope: Some(fig.minslope),
        maxslope: Some(fig.maxslope),
        chosen: Some(fig.chosen),
        accuracy: &fig.accuracy,
        counts: None,
        segments: None,
    };
    let hist = HistogramPlot {
        title: "alpha ↔ beta: transfer times",
        series: vec![
            HistogramSeries {
                label: "alpha → beta",
                histogram: &fig.hist_ab,
                l_min_ns: Some(40_000.0),
            },
            HistogramSeries {
                label: "beta → alpha",
                histogram: &fig.hist_ba,
                l_min_ns: Some(40_000.0),
            },
        ],
    };
    write_pair_plots(dir, &sync, Some(&hist), formats, &Default::default()).unwrap()
}

#[test]
fn sync_and_histogram_plots_are_valid_svg_with_every_series() {
    let fig = figure(600);
    let dir = tempfile::tempdir().unwrap();
    let files = write(&fig, dir.path(), &[PlotFormat::Svg, PlotFormat::Png]);
    assert_eq!(files.len(), 4);
    if let Some(keep) = std::env::var_os("TSYNC_EXAMPLE_PLOT_DIR") {
        for f in &files {
            std::fs::copy(f, Path::new(&keep).join(f.file_name().unwrap())).unwrap();
        }
    }

    let svg = std::fs::read_to_string(dir.path().join("sync-alpha-beta.svg")).unwrap();
    let doc = roxmltree::Document::parse(&svg).expect("the sync plot is well-formed XML");
    assert!(doc.root_element().has_tag_name("svg"));
    let texts = texts_of(&doc);
    let has = |needle: &str| texts.iter().any(|t| t.contains(needle));
    for needle in [
        "alpha ↔ beta",
        "alpha → beta messages (300",
        "beta → alpha messages (300",
        "half-hull of alpha → beta",
        "half-hull of beta → alpha",
        "min-slope limit line",
        "max-slope limit line",
        "chosen line",
        "guaranteed interval",
        "time on alpha (s",
        "(µs)",
    ] {
        assert!(
            has(needle),
            "no text `{needle}` in the sync plot: {texts:?}"
        );
    }
    // One circle per message in view, plus the two legend markers.
    let outside: usize = texts
        .iter()
        .filter_map(|t| {
            t.split(", ")
                .nth(1)?
                .strip_suffix(" outside the view")?
                .parse::<usize>()
                .ok()
        })
        .sum();
    let circles = doc
        .descendants()
        .filter(|n| n.has_tag_name("circle"))
        .count();
    assert_eq!(circles, 600 - outside + 2);
    assert!(outside < 30, "{outside} points outside the view");
    // The accuracy band is a filled polygon, the lines are polylines.
    assert!(doc.descendants().any(|n| n.has_tag_name("polygon")));
    assert!(
        doc.descendants()
            .filter(|n| n.has_tag_name("polyline"))
            .count()
            >= 5
    );

    let svg = std::fs::read_to_string(dir.path().join("transfer-alpha-beta.svg")).unwrap();
    let doc = roxmltree::Document::parse(&svg).expect("the histogram plot is well-formed XML");
    let texts = texts_of(&doc);
    let has = |needle: &str| texts.iter().any(|t| t.contains(needle));
    for needle in [
        "transfer times",
        "alpha → beta: 300 messages",
        "beta → alpha: 300 messages",
        "l_min alpha → beta",
        "transfer time after correction (µs, log scale)",
        "messages per bin",
    ] {
        assert!(
            has(needle),
            "no text `{needle}` in the histogram plot: {texts:?}"
        );
    }
    assert!(doc.descendants().filter(|n| n.has_tag_name("rect")).count() > 10);

    let png = std::fs::read(dir.path().join("sync-alpha-beta.png")).unwrap();
    assert_eq!(&png[1..4], b"PNG");
}

#[test]
fn large_inputs_are_drawn_as_an_envelope() {
    let fig = figure(40_000);
    let dir = tempfile::tempdir().unwrap();
    write(&fig, dir.path(), &[PlotFormat::Svg]);
    let svg = std::fs::read_to_string(dir.path().join("sync-alpha-beta.svg")).unwrap();
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let circles = doc
        .descendants()
        .filter(|n| n.has_tag_name("circle"))
        .count();
    assert!(circles <= 2 * 2 * 2000 + 2, "{circles} circles");
    assert!(circles > 1000);
}

#[test]
fn a_pair_without_messages_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let sync = SyncPlot {
        a_name: "a",
        b_name: "b",
        ..SyncPlot::default()
    };
    let err = write_pair_plots(
        dir.path(),
        &sync,
        None,
        &[PlotFormat::Svg],
        &Default::default(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("no messages"), "{err}");
}

#[test]
fn a_pair_with_one_direction_and_no_line_still_plots() {
    // Only a→b traffic: no corridor, no chosen line (an `incomplete` pair).
    let pair = synthetic_pair(200);
    let dir = tempfile::tempdir().unwrap();
    let sync = SyncPlot {
        a_name: "client",
        b_name: "server 2",
        ab: &pair.ab,
        ..SyncPlot::default()
    };
    let files = write_pair_plots(
        dir.path(),
        &sync,
        None,
        &[PlotFormat::Svg],
        &Default::default(),
    )
    .unwrap();
    assert_eq!(files, vec![dir.path().join("sync-client-server_2.svg")]);
    if let Some(keep) = std::env::var_os("TSYNC_EXAMPLE_PLOT_DIR") {
        std::fs::copy(&files[0], Path::new(&keep).join("incomplete.svg")).unwrap();
    }
    let svg = std::fs::read_to_string(&files[0]).unwrap();
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let texts = texts_of(&doc);
    assert!(
        texts.iter().any(|t| t.contains("no line was chosen")),
        "{texts:?}"
    );
    assert!(texts.iter().any(|t| t.contains("reference line (µs)")));
    assert!(
        !texts
            .iter()
            .any(|t| t.contains("chosen line") && !t.contains("no line"))
    );
    let circles = doc
        .descendants()
        .filter(|n| n.has_tag_name("circle"))
        .count();
    assert!((95..=102).contains(&circles), "{circles}");
}
