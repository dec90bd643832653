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

use crate::estimate::accuracy::AccuracyPoint;
use crate::eval::histogram::{BINS, LogHistogram};
use crate::model::Affine;
use crate::output::{InputIds, OutputError, OutputFile};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

mod histogram;
mod offset;

use histogram::draw_histograms;
use offset::draw_sync;

/// What the offset plot of one pair (a, b) shows. All times are local ns; every point is
/// `(t_a, t_b)`.
#[derive(Clone, Copy, Debug, Default)]
pub struct SyncPlot<'a> {
    /// Name of trace a (title, legend and file name).
    pub a_name: &'a str,
    /// Name of trace b (title, legend and file name).
    pub b_name: &'a str,
    /// a→b messages: (send time on a, receive time on b).
    pub ab: &'a [(i64, i64)],
    /// b→a messages: (receive time on a, send time on b).
    pub ba: &'a [(i64, i64)],
    /// Vertices of the lower half-hull of the a→b points, in x order.
    pub hull_ab: &'a [(i64, i64)],
    /// Vertices of the upper half-hull of the b→a points, in x order.
    pub hull_ba: &'a [(i64, i64)],
    /// Minimum-slope limit line (t_b from t_a), if the corridor has one.
    pub minslope: Option<Affine>,
    /// Maximum-slope limit line (t_b from t_a), if the corridor has one.
    pub maxslope: Option<Affine>,
    /// The pair's estimate, if any: the offsets are drawn relative to it (else to the corridor's
    /// middle).
    pub chosen: Option<Affine>,
    /// The guaranteed interval of `t_b` over `t_a` (may be empty).
    pub accuracy: &'a [AccuracyPoint],
    /// The pair's map when it has several segments (drawn as a broken line, one vertex per
    /// segment start); None for a one-line pair, whose map is `chosen`.
    pub segments: Option<&'a crate::model::PiecewiseMap>,
    /// The real message counts (a→b, b→a) when `ab`/`ba` are only a sample of them (an
    /// envelope kept while streaming): the legend then says how many there were.
    pub counts: Option<(u64, u64)>,
}

/// One direction's transfer times in a histogram plot.
#[derive(Clone, Copy, Debug)]
pub struct HistogramSeries<'a> {
    /// E.g. "alpha → beta".
    pub label: &'a str,
    /// Transfer times of this direction.
    pub histogram: &'a LogHistogram,
    /// The minimum latency of this direction, marked with a vertical line.
    pub l_min_ns: Option<f64>,
}

/// The transfer-time histograms of a pair (usually both directions).
#[derive(Clone, Debug)]
pub struct HistogramPlot<'a> {
    /// Figure title, also used in error messages.
    pub title: &'a str,
    /// One series per direction, drawn in order.
    pub series: Vec<HistogramSeries<'a>>,
}

/// Image format of a plot file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlotFormat {
    /// SVG: scalable text, the default.
    Svg,
    /// PNG bitmap.
    Png,
}

impl PlotFormat {
    /// File name extension, without the dot.
    pub fn extension(&self) -> &'static str {
        match self {
            PlotFormat::Svg => "svg",
            PlotFormat::Png => "png",
        }
    }
}

/// Why a plot could not be drawn or written.
#[derive(thiserror::Error, Debug)]
pub enum PlotError {
    /// No TrueType font could be loaded (the paths tried and why they failed).
    #[error(
        "no TrueType font for the plot text: install Debian's fonts-dejavu-core, or set \
         TSYNC_PLOT_FONT to a .ttf file ({0})"
    )]
    NoFont(String),
    /// The plot directory cannot be created.
    #[error("cannot create the plot directory {path}: {message}")]
    Dir {
        /// The directory.
        path: PathBuf,
        /// Why, in words.
        message: String,
    },
    /// Drawing or encoding the figure failed.
    #[error("cannot draw {what}: {message}")]
    Draw {
        /// The figure's name.
        what: String,
        /// The drawing library's or the PNG encoder's error.
        message: String,
    },
    /// The plot file cannot be created or committed (or is an input).
    #[error(transparent)]
    Output(#[from] OutputError),
    /// Writing the plot file's bytes failed (the error in words).
    #[error("{0}")]
    Write(String),
    /// The figure has no data (its name): no messages, or only empty histograms.
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
        message: if dir.exists() && !dir.is_dir() {
            "it exists and is not a directory; --plot names a directory".into()
        } else {
            crate::output::describe_io(&source)
        },
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

/// Draws the series legend (upper right, on a light box) and writes the figure out: the common
/// end of both figures.
fn legend_and_present<'a, DB: DrawingBackend + 'a, CT: plotters::coord::CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    root: &DrawingArea<DB, Shift>,
) -> Result<(), String> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(160, 160, 160))
        .label_font(("sans-serif", 15))
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}

/// The palette: one color per series, the same in both figures.
pub(super) const AB_COLOR: RGBColor = RGBColor(31, 119, 180);
pub(super) const BA_COLOR: RGBColor = RGBColor(214, 95, 14);
pub(super) const HULL_AB_COLOR: RGBColor = RGBColor(10, 50, 110);
pub(super) const HULL_BA_COLOR: RGBColor = RGBColor(120, 45, 0);
pub(super) const MIN_COLOR: RGBColor = RGBColor(44, 160, 44);
pub(super) const MAX_COLOR: RGBColor = RGBColor(148, 103, 189);
pub(super) const CHOSEN_COLOR: RGBColor = RGBColor(200, 20, 40);
pub(super) const SEGMENTS_COLOR: RGBColor = RGBColor(0, 150, 150);
pub(super) const BAND_COLOR: RGBColor = RGBColor(120, 120, 120);

/// A µs value for an axis label: "0.1", "1", "10", "1000", "1e5" style, without noise digits.
/// An offset tick in µs: no decimals where they say nothing (LTTV's toy cases span seconds,
/// which would otherwise read "15000000.0").
pub(super) fn format_offset_us(v: f64) -> String {
    if v == 0.0 || v.abs() >= 10.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

pub(super) fn format_us(v: f64) -> String {
    if v >= 1e5 {
        format!("{v:.0e}")
    } else if v >= 1.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}
