//! The figures of a run (`--plot DIR`): per trace pair, the offset plot and the transfer-time
//! histograms, assembled from the synchronization, the evaluation and the bounded sample of the
//! messages the timeline gathered ([`PairSamples`]). The hull vertices come exact from the
//! synchronization.

use std::path::{Path, PathBuf};

use crate::estimate::SyncResult;
use crate::eval::{EvalReport, PairEval};
use crate::output::plot::{self, HistogramPlot, HistogramSeries, PlotError, PlotFormat, SyncPlot};
use crate::timeline::PairSamples;

/// Writes the plots of every pair with messages into `dir`, in each format; returns the files.
/// `eval` provides the histograms (after the correction it was computed with).
pub fn write_plots(
    dir: &Path,
    sync: &SyncResult,
    samples: &PairSamples,
    eval: Option<&EvalReport>,
    formats: &[PlotFormat],
    inputs: &crate::output::InputIds,
) -> Result<Vec<PathBuf>, PlotError> {
    let mut written = Vec::new();
    for p in &sync.pairs {
        let Some([ab, ba]) = samples.pair(p.a, p.b) else {
            continue;
        };
        let (ab, ba) = (ab.points(), ba.points());
        if ab.is_empty() && ba.is_empty() {
            continue;
        }
        let a_name = &sync.traces[p.a as usize].name;
        let b_name = &sync.traces[p.b as usize].name;
        let hull =
            |h: &[crate::estimate::hull::Point]| h.iter().map(|q| (q.x, q.y)).collect::<Vec<_>>();
        // A pair cut into segments shows each segment's hulls (the whole pair's would draw
        // chords across the bends).
        let (hull_ab, hull_ba) = if p.segments.len() > 1 {
            let all =
                |side: fn(&crate::estimate::PairSegment) -> &[crate::estimate::hull::Point]| {
                    p.segments
                        .iter()
                        .flat_map(|s| side(s).iter().map(|q| (q.x, q.y)))
                        .collect::<Vec<_>>()
                };
            (all(|s| &s.hull_ab), all(|s| &s.hull_ba))
        } else {
            (hull(&p.hull_ab), hull(&p.hull_ba))
        };
        let accuracy = p.accuracy.as_ref().map_or(&[][..], |c| &c.points);
        let figure = SyncPlot {
            a_name,
            b_name,
            ab: &ab,
            ba: &ba,
            hull_ab: &hull_ab,
            hull_ba: &hull_ba,
            minslope: p.minslope.map(|l| l.line),
            maxslope: p.maxslope.map(|l| l.line),
            chosen: p.estimate,
            accuracy,
            segments: p.map.as_ref().filter(|m| !m.is_linear()),
            counts: Some((p.messages_ab, p.messages_ba)),
        };
        let labels = [
            format!("{a_name} → {b_name}"),
            format!("{b_name} → {a_name}"),
        ];
        let title = format!("Transfer times {a_name} ↔ {b_name}");
        let histograms =
            eval.map(|r| histogram_plot(r, p.a as usize, p.b as usize, &title, &labels));
        let histograms = histograms.filter(|h| !h.series.is_empty());
        written.extend(plot::write_pair_plots(
            dir,
            &figure,
            histograms.as_ref(),
            formats,
            inputs,
        )?);
    }
    Ok(written)
}

/// The histogram figure of a pair: one series per direction that has messages.
fn histogram_plot<'a>(
    report: &'a EvalReport,
    a: usize,
    b: usize,
    title: &'a str,
    labels: &'a [String; 2],
) -> HistogramPlot<'a> {
    let find = |from: usize, to: usize| -> Option<&'a PairEval> {
        report.pairs.iter().find(|q| q.from == from && q.to == to)
    };
    let series = [(a, b, &labels[0]), (b, a, &labels[1])]
        .into_iter()
        .filter_map(|(from, to, label)| {
            let e = find(from, to)?;
            Some(HistogramSeries {
                label,
                histogram: &e.histogram,
                l_min_ns: e.l_min_ns,
            })
        })
        .collect();
    HistogramPlot { title, series }
}
