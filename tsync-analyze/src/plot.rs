//! Figures of a synchronization, for people: per trace pair, the message offsets over time with
//! the convex-hull corridor and the accuracy band, and the transfer-time histograms.
//!
//! **Offset plot.** Every message gives a point `(t_a, t_b)`: a→b messages as (send on a,
//! receive on b), b→a messages as (receive on a, send on b). Drawn raw, a drift of 100 ppm would
//! squeeze tens of µs of latency into an invisible band, so the plot shows `t_b − reference(t_a)`
//! in µs against `t_a` in s, where the reference is the chosen line. The a→b points then lie
//! above the chosen line (by their latency) and the b→a points below it; the half-hull vertices
//! are the points that bound the corridor, the two limit lines its extreme slopes, and the
//! shaded band the guaranteed interval (Poirier eq. 3.4).
//!
//! **Histogram plot.** Transfer times of both directions on a log axis, with `l_min` marked;
//! inversions and sub-µs times are counted in the legend since a log axis cannot show them.
//!
//! Output is SVG (the default, scalable and diff-able) or PNG. Text needs a TrueType font for
//! layout (and rendering in PNG): [`ensure_font`] loads DejaVu Sans (Debian `fonts-dejavu-core`)
//! or the file named by `TSYNC_PLOT_FONT`.

use crate::eval::AccuracyPoint;
use crate::histogram::{BINS, LogHistogram};
use crate::output::{InputIds, OutputError, OutputFile};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// A line `t_b = a0_ns + a1 · t_a` (local ns), as in the `sync --json` pairs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Line {
    pub a0_ns: f64,
    pub a1: f64,
}

impl Line {
    pub fn at(&self, t_a_ns: f64) -> f64 {
        self.a0_ns + self.a1 * t_a_ns
    }
}

/// What the offset plot of one pair (a, b) shows. All times are local ns; every point is
/// `(t_a, t_b)`.
#[derive(Clone, Copy, Debug, Default)]
pub struct SyncPlot<'a> {
    pub a_name: &'a str,
    pub b_name: &'a str,
    /// a→b messages: (send time on a, receive time on b).
    pub ab: &'a [(i64, i64)],
    /// b→a messages: (receive time on a, send time on b).
    pub ba: &'a [(i64, i64)],
    /// Vertices of the lower half-hull of the a→b points, in x order.
    pub hull_ab: &'a [(i64, i64)],
    /// Vertices of the upper half-hull of the b→a points, in x order.
    pub hull_ba: &'a [(i64, i64)],
    pub minslope: Option<Line>,
    pub maxslope: Option<Line>,
    pub chosen: Option<Line>,
    /// The guaranteed interval of `t_b` over `t_a` (may be empty).
    pub accuracy: &'a [AccuracyPoint],
    /// The real message counts (a→b, b→a) when `ab`/`ba` are only a sample of them (an
    /// envelope kept while streaming): the legend then says how many there were.
    pub counts: Option<(u64, u64)>,
}

/// One direction's transfer times in a histogram plot.
#[derive(Clone, Copy, Debug)]
pub struct HistogramSeries<'a> {
    /// E.g. "alpha → beta".
    pub label: &'a str,
    pub histogram: &'a LogHistogram,
    /// The minimum latency of this direction, marked with a vertical line.
    pub l_min_ns: Option<f64>,
}

/// The transfer-time histograms of a pair (usually both directions).
#[derive(Clone, Debug)]
pub struct HistogramPlot<'a> {
    pub title: &'a str,
    pub series: Vec<HistogramSeries<'a>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlotFormat {
    Svg,
    Png,
}

impl PlotFormat {
    pub fn extension(&self) -> &'static str {
        match self {
            PlotFormat::Svg => "svg",
            PlotFormat::Png => "png",
        }
    }
}

#[derive(thiserror::Error, Debug)]
pub enum PlotError {
    #[error(
        "no TrueType font for the plot text: install Debian's fonts-dejavu-core, or set \
         TSYNC_PLOT_FONT to a .ttf file ({0})"
    )]
    NoFont(String),
    #[error("cannot create the plot directory {path}: {message}")]
    Dir { path: PathBuf, message: String },
    #[error("cannot draw {what}: {message}")]
    Draw { what: String, message: String },
    #[error(transparent)]
    Output(#[from] OutputError),
    #[error("{0}")]
    Write(String),
    #[error("nothing to plot for {0}: no messages")]
    Empty(String),
}

/// Where fonts are looked for, after `TSYNC_PLOT_FONT`.
const FONT_CANDIDATES: [&str; 5] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/noto/NotoSans-Regular.ttf",
];

/// Loads and registers the plot font once per process (as plotters' "sans-serif").
pub fn ensure_font() -> Result<(), PlotError> {
    static FONT: OnceLock<Result<(), String>> = OnceLock::new();
    FONT.get_or_init(|| {
        let mut tried = Vec::new();
        let from_env = std::env::var_os("TSYNC_PLOT_FONT").map(PathBuf::from);
        for path in from_env
            .into_iter()
            .chain(FONT_CANDIDATES.iter().map(PathBuf::from))
        {
            match std::fs::read(&path) {
                Ok(bytes) => {
                    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                    return plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
                        .map_err(|_| format!("{} is not a usable font", path.display()));
                }
                Err(e) => tried.push(format!("{}: {e}", path.display())),
            }
        }
        Err(format!("tried {}", tried.join("; ")))
    })
    .clone()
    .map_err(PlotError::NoFont)
}

/// Renders the offset plot of a pair as the bytes of a file in `format`.
pub fn render_sync_plot(plot: &SyncPlot<'_>, format: PlotFormat) -> Result<Vec<u8>, PlotError> {
    ensure_font()?;
    let name = format!("{} ↔ {}", plot.a_name, plot.b_name);
    if plot.ab.is_empty() && plot.ba.is_empty() {
        return Err(PlotError::Empty(name));
    }
    render(
        format,
        (1280, 760),
        &name,
        |root| draw_sync(root, plot),
        |root| draw_sync(root, plot),
    )
}

/// Renders a transfer-time histogram plot as the bytes of a file in `format`.
pub fn render_histogram_plot(
    plot: &HistogramPlot<'_>,
    format: PlotFormat,
) -> Result<Vec<u8>, PlotError> {
    ensure_font()?;
    if plot.series.iter().all(|s| s.histogram.total() == 0) {
        return Err(PlotError::Empty(plot.title.to_string()));
    }
    render(
        format,
        (1100, 620),
        plot.title,
        |root| draw_histograms(root, plot),
        |root| draw_histograms(root, plot),
    )
}

/// Draws a figure in memory (SVG text, or RGB pixels encoded as PNG): writing the file is then
/// the caller's, through [`OutputFile`] (atomic, errors in words).
fn render(
    format: PlotFormat,
    size: (u32, u32),
    what: &str,
    svg: impl FnOnce(DrawingArea<SVGBackend<'_>, Shift>) -> Result<(), String>,
    bitmap: impl FnOnce(DrawingArea<BitMapBackend<'_>, Shift>) -> Result<(), String>,
) -> Result<Vec<u8>, PlotError> {
    let failed = |message| PlotError::Draw {
        what: what.to_string(),
        message,
    };
    match format {
        PlotFormat::Svg => {
            let mut text = String::new();
            svg(SVGBackend::with_string(&mut text, size).into_drawing_area()).map_err(failed)?;
            Ok(text.into_bytes())
        }
        PlotFormat::Png => {
            let mut rgb = vec![0u8; size.0 as usize * size.1 as usize * 3];
            bitmap(BitMapBackend::with_buffer(&mut rgb, size).into_drawing_area())
                .map_err(failed)?;
            let mut bytes = Vec::new();
            let mut encoder = png::Encoder::new(&mut bytes, size.0, size.1);
            encoder.set_color(png::ColorType::Rgb);
            encoder.set_depth(png::BitDepth::Eight);
            encoder
                .write_header()
                .and_then(|mut w| w.write_image_data(&rgb))
                .map_err(|e| failed(format!("PNG encoding failed: {e}")))?;
            Ok(bytes)
        }
    }
}

/// Writes one plot file through a temporary file (see [`crate::output`]).
fn write_plot_file(path: &Path, bytes: &[u8], inputs: &InputIds) -> Result<(), PlotError> {
    let mut out = OutputFile::create(path, "", inputs)?;
    if let Err(e) = out.write_all(bytes).and_then(|_| out.flush()) {
        return Err(PlotError::Write(out.failure(&e)));
    }
    out.commit()?;
    Ok(())
}

/// Writes the offset plot (`sync-A-B.EXT`) and, if given, the histogram plot
/// (`transfer-A-B.EXT`) of a pair into `dir` (created if needed), in every format asked for.
/// Each file is complete or left as it was; none replaces one of `inputs`. Returns the files
/// written.
pub fn write_pair_plots(
    dir: &Path,
    sync: &SyncPlot<'_>,
    histograms: Option<&HistogramPlot<'_>>,
    formats: &[PlotFormat],
    inputs: &InputIds,
) -> Result<Vec<PathBuf>, PlotError> {
    std::fs::create_dir_all(dir).map_err(|source| PlotError::Dir {
        path: dir.to_path_buf(),
        message: crate::output::describe_io(&source),
    })?;
    let stem = format!("{}-{}", file_part(sync.a_name), file_part(sync.b_name));
    let mut written = Vec::new();
    for &format in formats {
        let path = dir.join(format!("sync-{stem}.{}", format.extension()));
        write_plot_file(&path, &render_sync_plot(sync, format)?, inputs)?;
        written.push(path);
        if let Some(h) = histograms {
            let path = dir.join(format!("transfer-{stem}.{}", format.extension()));
            write_plot_file(&path, &render_histogram_plot(h, format)?, inputs)?;
            written.push(path);
        }
    }
    Ok(written)
}

/// A node name made safe for a file name.
fn file_part(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Offset plot

/// Above this many points per direction, only the per-column envelope (lowest and highest
/// residual in each of [`ENVELOPE_COLUMNS`] time columns) is drawn: that is what the eye and the
/// hull use, and it keeps SVG files small.
const MAX_POINTS: usize = 6000;
const ENVELOPE_COLUMNS: usize = 2000;

const AB_COLOR: RGBColor = RGBColor(31, 119, 180);
const BA_COLOR: RGBColor = RGBColor(214, 95, 14);
const HULL_AB_COLOR: RGBColor = RGBColor(10, 50, 110);
const HULL_BA_COLOR: RGBColor = RGBColor(120, 45, 0);
const MIN_COLOR: RGBColor = RGBColor(44, 160, 44);
const MAX_COLOR: RGBColor = RGBColor(148, 103, 189);
const CHOSEN_COLOR: RGBColor = RGBColor(200, 20, 40);
const BAND_COLOR: RGBColor = RGBColor(120, 120, 120);

/// The plot's coordinates: x in s since `t0`, y in µs relative to the reference line.
struct Frame {
    t0: f64,
    reference: Line,
}

impl Frame {
    fn point(&self, (t_a, t_b): (i64, i64)) -> (f64, f64) {
        self.xy(t_a as f64, t_b as f64)
    }
    fn xy(&self, t_a: f64, t_b: f64) -> (f64, f64) {
        ((t_a - self.t0) / 1e9, (t_b - self.reference.at(t_a)) / 1e3)
    }
    fn line_y(&self, line: &Line, x_s: f64) -> f64 {
        let t_a = self.t0 + x_s * 1e9;
        (line.at(t_a) - self.reference.at(t_a)) / 1e3
    }
}

/// The line the residuals are taken against: the chosen line, else the corridor's middle, else
/// a drift-free line half-way between the two directions' offsets.
fn reference_line(plot: &SyncPlot<'_>) -> Line {
    if let Some(chosen) = plot.chosen {
        return chosen;
    }
    if let (Some(lo), Some(hi)) = (plot.minslope, plot.maxslope) {
        return Line {
            a0_ns: (lo.a0_ns + hi.a0_ns) / 2.0,
            a1: (lo.a1 + hi.a1) / 2.0,
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
    Line { a0_ns, a1: 1.0 }
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
        include(frame.xy(a.t_ns as f64, a.lo_ns).1);
        include(frame.xy(a.t_ns as f64, a.hi_ns).1);
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
fn clip_line(frame: &Frame, line: &Line, x: (f64, f64), y: (f64, f64)) -> Option<[(f64, f64); 2]> {
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

fn draw_sync<DB: DrawingBackend>(
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
            c.a0_ns, c.a1
        ),
        None => format!(
            "relative to t_{b} = {:.1} ns + {:.10} · t_{a} (no line was chosen)",
            reference.a0_ns, reference.a1
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
            .map(|p| frame.xy(p.t_ns as f64, p.hi_ns))
            .collect();
        band.extend(
            plot.accuracy
                .iter()
                .rev()
                .map(|p| frame.xy(p.t_ns as f64, p.lo_ns)),
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

    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(160, 160, 160))
        .label_font(("sans-serif", 15))
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Histogram plot

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

fn draw_histograms<DB: DrawingBackend>(
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
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(160, 160, 160))
        .label_font(("sans-serif", 15))
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

/// A µs value for an axis label: "0.1", "1", "10", "1000", "1e5" style, without noise digits.
/// An offset tick in µs: no decimals where they say nothing (LTTV's toy cases span seconds,
/// which would otherwise read "15000000.0").
fn format_offset_us(v: f64) -> String {
    if v == 0.0 || v.abs() >= 10.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn format_us(v: f64) -> String {
    if v >= 1e5 {
        format!("{v:.0e}")
    } else if v >= 1.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}
