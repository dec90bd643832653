//! The subcommands, one module each, and the argument groups and helpers they share.

pub mod correct;
pub mod eval;
pub mod export;
pub mod info;
pub mod messages;
pub mod sync;

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use tsync_analyze::clc::ClcParams;
use tsync_analyze::figures;
use tsync_analyze::input::InputSet;
use tsync_analyze::matching::{DEFAULT_WINDOW_NS, MatchOptions};
use tsync_analyze::plot::PlotFormat;
use tsync_analyze::progress;
use tsync_analyze::sync::{Algorithm, SyncOptions};
use tsync_analyze::timeline::{Timeline, TimelineOptions};

/// A command's failure: the message printed after `tsync-analyze: error:`.
pub type CmdResult = Result<(), String>;

#[derive(Args)]
pub struct MatchArgs {
    /// How long (seconds) a packet key waits for its partner and for duplicates; keys seen twice
    /// on a side within it are dropped as ambiguous.
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_WINDOW_NS as f64 / 1e9)]
    pub match_window: f64,
}

impl MatchArgs {
    pub fn options(&self) -> Result<MatchOptions, String> {
        if !(self.match_window.is_finite() && self.match_window > 0.0) {
            return Err(format!(
                "--match-window {}: must be a positive number of seconds",
                self.match_window
            ));
        }
        Ok(MatchOptions {
            window_ns: (self.match_window * 1e9).round() as i64,
            exchanges: false,
        })
    }
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum AlgorithmArg {
    Chull,
    Linreg,
}

/// The inputs and how to synchronize them: what `sync` takes, and what the commands that start
/// from its linear correction take too.
#[derive(Args)]
pub struct SyncArgs {
    /// Trace files (tsync-agent) and/or text message files.
    #[arg(required = true, value_name = "INPUT")]
    pub inputs: Vec<PathBuf>,
    /// Estimator.
    #[arg(long, value_enum, default_value = "chull")]
    pub algorithm: AlgorithmArg,
    /// Reference trace of its group, by name or index.
    #[arg(long, value_name = "NAME|INDEX")]
    pub reference: Option<String>,
    /// linreg: drop exchanges whose error margin exceeds mean + Z·σ (1.64 ≈ the paper's 90 %).
    #[arg(long, value_name = "Z")]
    pub filter: Option<f64>,
    #[command(flatten)]
    pub matching: MatchArgs,
}

impl SyncArgs {
    pub fn options(&self) -> Result<SyncOptions, String> {
        Ok(SyncOptions {
            algorithm: match self.algorithm {
                AlgorithmArg::Chull => Algorithm::Chull,
                AlgorithmArg::Linreg => Algorithm::Linreg,
            },
            reference: self.reference.clone(),
            matching: self.matching.options()?,
            linreg_filter_z: self.filter,
        })
    }
}

/// Tuning of the controlled logical clock (defaults: Becker et al.'s recommendations).
#[derive(Args)]
pub struct ClcArgs {
    /// Forward amortization γ in (0, 1]: after a jump the clock runs at γ times its speed until
    /// it meets the linear correction again.
    #[arg(long, value_name = "G", default_value_t = ClcParams::default().gamma)]
    pub gamma: f64,
    /// Backward amortization slope ρ = jump / interval (0 disables it).
    #[arg(long, value_name = "R", default_value_t = ClcParams::default().rho)]
    pub rho: f64,
    /// Minimum spacing δ (ns) kept between consecutive moved events of a trace.
    #[arg(long, value_name = "NS", default_value_t = ClcParams::default().delta_ns)]
    pub delta_ns: i64,
}

impl ClcArgs {
    pub fn params(&self) -> ClcParams {
        ClcParams {
            gamma: self.gamma,
            delta_ns: self.delta_ns,
            rho: self.rho,
        }
    }
}

/// `--l-min-ns`: checked here so that a bad value is a clear error, not a silent overcorrection.
pub fn l_min_arg(v: Option<f64>) -> Result<Option<i64>, String> {
    match v {
        None => Ok(None),
        Some(x) if (0.0..9.2e18).contains(&x) => Ok(Some(x.round() as i64)),
        Some(x) => Err(format!(
            "--l-min-ns {x}: must be a non-negative number of nanoseconds"
        )),
    }
}

/// `--plot DIR` and the formats to write there.
#[derive(Args)]
pub struct PlotArgs {
    /// Write per-pair offset plots and transfer-time histograms into DIR (created if needed).
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    /// Plot file formats, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "svg,png")]
    pub plot_format: Vec<PlotFormatArg>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum PlotFormatArg {
    Svg,
    Png,
}

impl PlotArgs {
    pub fn formats(&self) -> Vec<PlotFormat> {
        self.plot_format
            .iter()
            .map(|f| match f {
                PlotFormatArg::Svg => PlotFormat::Svg,
                PlotFormatArg::Png => PlotFormat::Png,
            })
            .collect()
    }
}

/// Opens the inputs and builds the timeline, with a progress bar on large inputs.
pub fn build_timeline(inputs: &[PathBuf], options: &TimelineOptions) -> Result<Timeline, String> {
    let inputs = InputSet::open(inputs).map_err(|e| e.to_string())?;
    let bar = progress::bar(inputs.total_bytes());
    let timeline = Timeline::build(inputs, options, &mut |n| {
        if let Some(b) = &bar {
            b.inc(n)
        }
    })
    .map_err(|e| e.to_string())?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    Ok(timeline)
}

/// Writes the plots of a run and says where they went (on stderr: stdout may be JSON).
pub fn write_plots(
    dir: &std::path::Path,
    timeline: &Timeline,
    eval: Option<&tsync_analyze::eval::EvalReport>,
    formats: &[PlotFormat],
) -> CmdResult {
    let Some(samples) = &timeline.samples else {
        return Err("internal: the plot samples were not gathered".into());
    };
    let written = figures::write_plots(dir, &timeline.sync, samples, eval, formats)
        .map_err(|e| e.to_string())?;
    if written.is_empty() {
        warn("--plot: no trace pair exchanged messages, nothing to draw");
    } else {
        eprintln!(
            "tsync-analyze: wrote {} plot files into {}",
            written.len(),
            dir.display()
        );
    }
    Ok(())
}

pub fn warn(w: &str) {
    eprintln!("tsync-analyze: warning: {w}");
}

/// Prints the warnings of the synchronization and of the later steps.
pub fn print_warnings(timeline: &Timeline) {
    for w in timeline.sync.warnings.iter().chain(&timeline.warnings) {
        warn(w);
    }
}

/// Serializes `value` as pretty JSON plus a newline.
pub fn json<T: serde::Serialize>(value: &T) -> Result<String, String> {
    let mut s = serde_json::to_string_pretty(value).map_err(|e| e.to_string())?;
    s.push('\n');
    Ok(s)
}

/// Writes to stdout; a closed pipe (`| head`) is not an error.
pub fn write_stdout(b: &[u8]) -> CmdResult {
    let mut o = std::io::stdout().lock();
    match o.write_all(b).and_then(|_| o.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(format!("cannot write the output: {e}")),
    }
}
