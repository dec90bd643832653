//! The offset plot of a pair: every message as the offset it implies against the chosen line,
//! the half hulls, the limit lines and the guaranteed interval.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::*;

/// Above this many points per direction, only the per-column envelope (lowest and highest
/// residual in each of [`ENVELOPE_COLUMNS`] time columns) is drawn: that is what the eye and the
/// hull use, and it keeps SVG files small.
const MAX_POINTS: usize = 6000;
const ENVELOPE_COLUMNS: usize = 2000;

/// The plot's coordinates: x in s since `t0`, y in µs relative to the reference line.
struct Frame {
    t0: f64,
    reference: Affine,
}

impl Frame {
    fn point(&self, (t_a, t_b): (i64, i64)) -> (f64, f64) {
        self.xy(t_a as f64, t_b as f64)
    }
    fn xy(&self, t_a: f64, t_b: f64) -> (f64, f64) {
        (
            (t_a - self.t0) / 1e9,
            (t_b - self.reference.apply(t_a)) / 1e3,
        )
    }
    fn line_y(&self, line: &Affine, x_s: f64) -> f64 {
        let t_a = self.t0 + x_s * 1e9;
        (line.apply(t_a) - self.reference.apply(t_a)) / 1e3
    }
}

/// The line the residuals are taken against: the chosen line, else the corridor's middle, else
/// a drift-free line half-way between the two directions' offsets.
fn reference_line(plot: &SyncPlot<'_>) -> Affine {
    if let Some(chosen) = plot.chosen {
        return chosen;
    }
    if let (Some(lo), Some(hi)) = (plot.minslope, plot.maxslope) {
        return Affine {
            offset_ns: (lo.offset_ns + hi.offset_ns) / 2.0,
            drift: (lo.drift + hi.drift) / 2.0,
        };
    }
    if let Some(line) = plot.minslope.or(plot.maxslope) {
        return line;
    }
    let offset = |&(a, b): &(i64, i64)| (b - a) as f64;
    let above = plot.ab.iter().map(offset).reduce(f64::min);
    let below = plot.ba.iter().map(offset).reduce(f64::max);
    let a0_ns = match (above, below) {
        (Some(x), Some(y)) => (x + y) / 2.0,
        (Some(x), None) | (None, Some(x)) => x,
        (None, None) => 0.0,
    };
    Affine {
        offset_ns: a0_ns,
        drift: 1.0,
    }
}

/// The points to draw: all of them, or the per-column envelope of a large set.
fn decimate(points: Vec<(f64, f64)>, x_range: (f64, f64)) -> Vec<(f64, f64)> {
    if points.len() <= MAX_POINTS {
        return points;
    }
    let width = (x_range.1 - x_range.0).max(f64::MIN_POSITIVE);
    // Per column: the point with the lowest and the one with the highest residual.
    type Envelope = Option<((f64, f64), (f64, f64))>;
    let mut columns: Vec<Envelope> = vec![None; ENVELOPE_COLUMNS];
    for p in points {
        let c = (((p.0 - x_range.0) / width * ENVELOPE_COLUMNS as f64) as usize)
            .min(ENVELOPE_COLUMNS - 1);
        let slot = columns[c].get_or_insert((p, p));
        if p.1 < slot.0.1 {
            slot.0 = p;
        }
        if p.1 > slot.1.1 {
            slot.1 = p;
        }
    }
    columns
        .into_iter()
        .flatten()
        .flat_map(|(lo, hi)| if lo == hi { vec![lo] } else { vec![lo, hi] })
        .collect()
}

/// The value at quantile `q` of `values` (sorted in place).
fn quantile(values: &mut [f64], q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    Some(values[((values.len() - 1) as f64 * q).round() as usize])
}

/// The y range: the hull vertices, the band and the bulk of the points (1st to 99th
/// percentile of each direction), so that a few very slow messages do not flatten the picture.
fn y_range(
    frame: &Frame,
    plot: &SyncPlot<'_>,
    ab: &[(f64, f64)],
    ba: &[(f64, f64)],
    x_range: (f64, f64),
) -> (f64, f64) {
    let mut lo = f64::INFINITY;
    let mut hi = f64::NEG_INFINITY;
    let mut include = |y: f64| {
        if y.is_finite() {
            lo = lo.min(y);
            hi = hi.max(y);
        }
    };
    for pts in [ab, ba] {
        let mut ys: Vec<f64> = pts.iter().map(|p| p.1).collect();
        quantile(&mut ys, 0.01).map(&mut include);
        quantile(&mut ys, 0.99).map(&mut include);
    }
    for &p in plot.hull_ab.iter().chain(plot.hull_ba) {
        include(frame.point(p).1);
    }
    for a in plot.accuracy {
        include(frame.xy(a.t_a as f64, a.lo).1);
        include(frame.xy(a.t_a as f64, a.hi).1);
    }
    if let Some(c) = plot.chosen {
        include(frame.line_y(&c, x_range.0));
        include(frame.line_y(&c, x_range.1));
    }
    if !lo.is_finite() {
        return (-1.0, 1.0);
    }
    // Headroom above the data for the legend (upper right), a small margin below.
    let span = (hi - lo).max(1.0);
    (lo - 0.08 * span, hi + 0.55 * span)
}

/// The part of a line inside the plotted rectangle, as two points (None if it misses it).
fn clip_line(
    frame: &Frame,
    line: &Affine,
    x: (f64, f64),
    y: (f64, f64),
) -> Option<[(f64, f64); 2]> {
    let y0 = frame.line_y(line, x.0);
    let y1 = frame.line_y(line, x.1);
    let slope = (y1 - y0) / (x.1 - x.0);
    let mut from = x.0;
    let mut to = x.1;
    if slope.abs() > 0.0 {
        let xa = x.0 + (y.0 - y0) / slope;
        let xb = x.0 + (y.1 - y0) / slope;
        from = from.max(xa.min(xb));
        to = to.min(xa.max(xb));
    } else if y0 < y.0 || y0 > y.1 {
        return None;
    }
    (from < to).then_some([
        (from, y0 + slope * (from - x.0)),
        (to, y0 + slope * (to - x.0)),
    ])
}

pub(super) fn draw_sync<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    plot: &SyncPlot<'_>,
) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(err)?;
    let reference = reference_line(plot);
    let t0 = plot
        .ab
        .iter()
        .chain(plot.ba)
        .map(|p| p.0)
        .min()
        .unwrap_or(0) as f64;
    let frame = Frame { t0, reference };
    let ab_all: Vec<(f64, f64)> = plot.ab.iter().map(|&p| frame.point(p)).collect();
    let ba_all: Vec<(f64, f64)> = plot.ba.iter().map(|&p| frame.point(p)).collect();
    let x_max = ab_all
        .iter()
        .chain(&ba_all)
        .map(|p| p.0)
        .fold(0.0f64, f64::max);
    let x_range = (0.0, if x_max > 0.0 { x_max } else { 1.0 });
    let y = y_range(&frame, plot, &ab_all, &ba_all, x_range);
    let inside = |p: &(f64, f64)| p.1 >= y.0 && p.1 <= y.1;
    let ab_out = ab_all.iter().filter(|p| !inside(p)).count();
    let ba_out = ba_all.iter().filter(|p| !inside(p)).count();
    let ab: Vec<_> = decimate(ab_all.into_iter().filter(inside).collect(), x_range);
    let ba: Vec<_> = decimate(ba_all.into_iter().filter(inside).collect(), x_range);

    let (a, b) = (plot.a_name, plot.b_name);
    let caption = format!("{a} ↔ {b}: clock offset seen by each message");
    let subtitle = match plot.chosen {
        Some(c) => format!(
            "relative to the chosen line t_{b} = {:.1} ns + {:.10} · t_{a}",
            c.offset_ns, c.drift
        ),
        None => format!(
            "relative to t_{b} = {:.1} ns + {:.10} · t_{a} (no line was chosen)",
            reference.offset_ns, reference.drift
        ),
    };
    let (title_area, chart_area) = root.split_vertically(70);
    title_area
        .draw(&Text::new(
            caption,
            (20, 12),
            ("sans-serif", 26).into_font().color(&BLACK),
        ))
        .map_err(err)?;
    title_area
        .draw(&Text::new(
            subtitle,
            (20, 44),
            ("sans-serif", 16).into_font().color(&RGBColor(80, 80, 80)),
        ))
        .map_err(err)?;

    let mut chart = ChartBuilder::on(&chart_area)
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(90)
        .build_cartesian_2d(x_range.0..x_range.1, y.0..y.1)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(format!("time on {a} (s since {:.3} s)", t0 / 1e9))
        .y_desc(if plot.chosen.is_some() {
            format!("t_{b} − chosen line (µs)")
        } else {
            format!("t_{b} − reference line (µs)")
        })
        .axis_desc_style(("sans-serif", 18))
        .label_style(("sans-serif", 15))
        .y_label_formatter(&|v| format_offset_us(*v))
        .light_line_style(RGBColor(235, 235, 235))
        .bold_line_style(RGBColor(210, 210, 210))
        .draw()
        .map_err(err)?;

    // The accuracy band first, so that everything else is drawn over it.
    if plot.accuracy.len() >= 2 {
        let mut band: Vec<(f64, f64)> = plot
            .accuracy
            .iter()
            .map(|p| frame.xy(p.t_a as f64, p.hi))
            .collect();
        band.extend(
            plot.accuracy
                .iter()
                .rev()
                .map(|p| frame.xy(p.t_a as f64, p.lo)),
        );
        let band: Vec<(f64, f64)> = band
            .into_iter()
            .map(|(x, v)| (x.clamp(x_range.0, x_range.1), v.clamp(y.0, y.1)))
            .collect();
        chart
            .draw_series(std::iter::once(Polygon::new(
                band,
                BAND_COLOR.mix(0.25).filled(),
            )))
            .map_err(err)?
            .label("guaranteed interval (accuracy band)")
            .legend(|(x, y)| {
                Rectangle::new([(x, y - 6), (x + 20, y + 6)], BAND_COLOR.mix(0.25).filled())
            });
    }

    let direction_label = |from: &str, to: &str, n: usize, total: Option<u64>, out: usize| {
        let mut s = match total {
            Some(t) if t != n as u64 => {
                format!("{from} → {to} messages ({t}, envelope of {n} shown)")
            }
            _ => format!("{from} → {to} messages ({n})"),
        };
        if out > 0 {
            s.push_str(&format!(", {out} outside the view"));
        }
        s
    };
    let directions = [
        (
            &ab,
            AB_COLOR,
            (a, b),
            plot.ab.len(),
            plot.counts.map(|c| c.0),
            ab_out,
        ),
        (
            &ba,
            BA_COLOR,
            (b, a),
            plot.ba.len(),
            plot.counts.map(|c| c.1),
            ba_out,
        ),
    ];
    for (points, color, (from, to), n, total, out) in directions {
        chart
            .draw_series(
                points
                    .iter()
                    .map(|&p| Circle::new(p, 2, color.mix(0.6).filled())),
            )
            .map_err(err)?
            .label(direction_label(from, to, n, total, out))
            .legend(move |(x, y)| Circle::new((x + 10, y), 4, color.filled()));
    }

    let hulls = [
        (
            plot.hull_ab,
            format!("half-hull of {a} → {b}"),
            HULL_AB_COLOR,
        ),
        (
            plot.hull_ba,
            format!("half-hull of {b} → {a}"),
            HULL_BA_COLOR,
        ),
    ];
    for (hull, name, color) in hulls {
        if hull.is_empty() {
            continue;
        }
        let pts: Vec<(f64, f64)> = hull.iter().map(|&p| frame.point(p)).collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(1)))
            .map_err(err)?;
        let label = format!("{name} ({} vertices)", hull.len());
        chart
            .draw_series(
                pts.iter()
                    .map(|&p| TriangleMarker::new(p, 6, color.filled())),
            )
            .map_err(err)?
            .label(label)
            .legend(move |(x, y)| TriangleMarker::new((x + 10, y), 6, color.filled()));
    }

    let lines = [
        (plot.minslope, "min-slope limit line", MIN_COLOR, true),
        (plot.maxslope, "max-slope limit line", MAX_COLOR, true),
        (plot.chosen, "chosen line", CHOSEN_COLOR, false),
    ];
    for (line, label, color, dashed) in lines {
        let Some(line) = line else { continue };
        let Some(segment) = clip_line(&frame, &line, x_range, y) else {
            continue;
        };
        let anno = if dashed {
            chart
                .draw_series(DashedLineSeries::new(segment, 10, 6, color.stroke_width(2)))
                .map_err(err)?
        } else {
            chart
                .draw_series(LineSeries::new(segment, color.stroke_width(3)))
                .map_err(err)?
        };
        anno.label(label)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(3)));
    }

    if let Some(map) = plot.segments {
        let mut xs: Vec<f64> = map
            .pieces()
            .iter()
            .map(|p| p.start_ns)
            .filter(|&t| t.is_finite())
            .collect();
        let (t_lo, t_hi) = (frame.t0 + x_range.0 * 1e9, frame.t0 + x_range.1 * 1e9);
        xs.retain(|&t| t > t_lo && t < t_hi);
        xs.insert(0, t_lo);
        xs.push(t_hi);
        let knots: Vec<(f64, f64)> = xs.iter().map(|&t| frame.xy(t, map.apply(t))).collect();
        let starts = knots.len() - 2;
        chart
            .draw_series(LineSeries::new(
                knots.clone(),
                SEGMENTS_COLOR.stroke_width(3),
            ))
            .map_err(err)?
            .label(format!("piecewise map ({} pieces)", map.pieces().len()))
            .legend(move |(x, y)| {
                PathElement::new([(x, y), (x + 20, y)], SEGMENTS_COLOR.stroke_width(3))
            });
        chart
            .draw_series(
                knots[1..=starts]
                    .iter()
                    .map(|&p| Circle::new(p, 4, SEGMENTS_COLOR.filled())),
            )
            .map_err(err)?;
    }

    legend_and_present(&mut chart, &root)
}
