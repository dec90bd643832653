//! The transfer-time histograms of a pair: both directions on a logarithmic axis, `l_min`
//! marked.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::*;

const SERIES_COLORS: [RGBColor; 4] = [AB_COLOR, BA_COLOR, MIN_COLOR, MAX_COLOR];
/// Bars drawn per decade: the 166 log bins per decade of the histogram are merged by groups.
const BARS_PER_DECADE: usize = 20;

/// The logarithmic bins merged into bars: (lo µs, hi µs, count).
fn bars(h: &LogHistogram) -> Vec<(f64, f64, u64)> {
    let group = ((BINS - 3) / 6 / BARS_PER_DECADE).max(1);
    let mut out = Vec::new();
    let mut bin = 2;
    while bin < BINS - 1 {
        let last = (bin + group - 1).min(BINS - 2);
        let count: u64 = (bin..=last).map(|i| h.count(i)).sum();
        if count > 0 {
            let lo = LogHistogram::edges(bin).0.unwrap_or(1e3);
            let hi = LogHistogram::edges(last).1.unwrap_or(1e9);
            out.push((lo / 1e3, hi / 1e3, count));
        }
        bin = last + 1;
    }
    out
}

pub(super) fn draw_histograms<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    plot: &HistogramPlot<'_>,
) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(err)?;
    let series: Vec<_> = plot.series.iter().map(|s| (s, bars(s.histogram))).collect();
    let mut x_lo = f64::INFINITY;
    let mut x_hi = f64::NEG_INFINITY;
    let mut y_hi = 1u64;
    for (s, bars) in &series {
        for &(lo, hi, count) in bars {
            x_lo = x_lo.min(lo);
            x_hi = x_hi.max(hi);
            y_hi = y_hi.max(count);
        }
        if let Some(l) = s.l_min_ns.filter(|l| *l > 0.0) {
            x_lo = x_lo.min(l / 1e3);
            x_hi = x_hi.max(l / 1e3);
        }
    }
    if !x_lo.is_finite() {
        (x_lo, x_hi) = (1.0, 1e3);
    }
    // Whole decades around the data, at least two.
    let x_lo = 10f64.powf(x_lo.log10().floor());
    let x_hi = 10f64.powf(x_hi.log10().ceil()).max(x_lo * 100.0);

    let mut chart = ChartBuilder::on(&root)
        .caption(plot.title, ("sans-serif", 26))
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d((x_lo..x_hi).log_scale(), 0u64..(y_hi + y_hi / 8 + 1))
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("transfer time after correction (µs, log scale)")
        .y_desc("messages per bin")
        .axis_desc_style(("sans-serif", 18))
        .label_style(("sans-serif", 15))
        .x_label_formatter(&|v| format_us(*v))
        .light_line_style(RGBColor(235, 235, 235))
        .bold_line_style(RGBColor(210, 210, 210))
        .draw()
        .map_err(err)?;

    for (k, (s, bars)) in series.iter().enumerate() {
        let color = SERIES_COLORS[k % SERIES_COLORS.len()];
        let h = s.histogram;
        let mut label = format!("{}: {} messages", s.label, h.total());
        let below = h.count(0);
        let sub_us = h.count(1);
        let over = h.count(BINS - 1);
        if below > 0 {
            label.push_str(&format!(", {below} ≤ 0 (inversions)"));
        }
        if sub_us > 0 {
            label.push_str(&format!(", {sub_us} < 1 µs"));
        }
        if over > 0 {
            label.push_str(&format!(", {over} ≥ 1 s"));
        }
        chart
            .draw_series(bars.iter().map(|&(lo, hi, count)| {
                Rectangle::new([(lo, 0), (hi, count)], color.mix(0.35).filled())
            }))
            .map_err(err)?
            .label(label)
            .legend(move |(x, y)| {
                Rectangle::new([(x, y - 6), (x + 20, y + 6)], color.mix(0.45).filled())
            });
        chart
            .draw_series(bars.iter().map(|&(lo, hi, count)| {
                Rectangle::new([(lo, 0), (hi, count)], color.stroke_width(1))
            }))
            .map_err(err)?;
        if let Some(l) = s.l_min_ns.filter(|l| *l > 0.0) {
            let x = l / 1e3;
            chart
                .draw_series(DashedLineSeries::new(
                    [(x, 0), (x, y_hi + y_hi / 8)],
                    8,
                    5,
                    color.stroke_width(2),
                ))
                .map_err(err)?
                .label(format!("l_min {} = {} µs", s.label, format_us(x)))
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2))
                });
        }
    }
    legend_and_present(&mut chart, &root)
}
