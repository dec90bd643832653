//! The subcommands, one module each, and the argument groups and helpers they share.

pub mod apply;
pub mod correct;
pub mod eval;
pub mod export;
pub mod info;
pub mod merge;
pub mod messages;
pub mod progress;
pub mod spool;
pub mod sync;

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use tsync_analyze::clc::ClcParams;
use tsync_analyze::output::figures;
use tsync_analyze::output::plot::PlotFormat;

use tsync_analyze::{
    Algorithm, DEFAULT_WINDOW_NS, InputSet, MatchOptions, Quality, ReductionChoice, SyncOptions,
    SyncResult, TimebaseChoice, Timeline, TimelineOptions,
};

/// A command's failure: the message printed after `tsync-analyze: error:`, and the exit status
/// it gives (documented in the README).
#[derive(Debug)]
pub enum CliError {
    /// Options that contradict each other or do nothing: status 2, as clap's own usage errors.
    Usage(String),
    /// The command could not do its work: status 1. The library's typed error, or a message.
    Failed(anyhow::Error),
    /// The command finished, but traces are not on one timebase (always when nothing was
    /// synchronized; with `--strict` also for any unsynchronized trace or approximate pair):
    /// status 3.
    NotSynchronized(String),
}

impl CliError {
    pub fn usage(msg: impl Into<String>) -> Self {
        CliError::Usage(msg.into())
    }

    /// A failure described by a message.
    pub fn msg(msg: impl std::fmt::Display) -> Self {
        CliError::Failed(anyhow::anyhow!("{msg}"))
    }

    pub fn exit_status(&self) -> u8 {
        match self {
            CliError::Failed(_) => 1,
            CliError::Usage(_) => 2,
            CliError::NotSynchronized(_) => 3,
        }
    }

    /// What to print after `tsync-analyze: error:`. The library's errors carry their cause in
    /// their own message, so only the outermost is printed (a whole chain would repeat it).
    pub fn message(&self) -> String {
        match self {
            CliError::Usage(m) | CliError::NotSynchronized(m) => m.clone(),
            CliError::Failed(e) => e.to_string(),
        }
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for CliError {
    fn from(e: E) -> Self {
        CliError::Failed(e.into())
    }
}

pub type CmdResult = Result<(), CliError>;

#[derive(Args)]
pub struct MatchArgs {
    /// How long (seconds) a packet key waits for its partner and for duplicates; keys seen twice
    /// on a side within it are dropped as ambiguous.
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_WINDOW_NS as f64 / 1e9)]
    pub match_window: f64,
    /// Threads matching the packets (default: one per core). The results are the same whatever
    /// the number.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub threads: Option<u32>,
    /// Span files: the resource attribute that names a span's node [default: host.name, else
    /// k8s.node.name, else service.instance.id]; apply --format otlp: the trace a resource's
    /// spans belong to.
    #[arg(long, value_name = "KEY")]
    pub node_attribute: Option<String>,
    /// Span files: how many spans are kept to join parents and children (memory: about 0.33 KB
    /// each); pairs farther apart in the file are counted, not joined.
    #[arg(long, value_name = "N", default_value_t = tsync_analyze::spans::DEFAULT_WINDOW as u64,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub span_window: u64,
}

impl MatchArgs {
    /// How span files are read.
    pub fn span_options(&self) -> tsync_analyze::spans::SpanOptions {
        tsync_analyze::spans::SpanOptions {
            attribution: self.node_attribute.as_deref().map_or_else(
                tsync_analyze::spans::NodeAttribution::default,
                tsync_analyze::spans::NodeAttribution::only,
            ),
            window: usize::try_from(self.span_window).unwrap_or(usize::MAX),
        }
    }
}

impl MatchArgs {
    pub fn options(&self) -> Result<MatchOptions, CliError> {
        if !(self.match_window.is_finite() && self.match_window > 0.0) {
            return Err(CliError::usage(format!(
                "--match-window {}: must be a positive number of seconds",
                self.match_window
            )));
        }
        Ok(MatchOptions {
            window_ns: (self.match_window * 1e9).round() as i64,
            exchanges: false,
            by_range: true,
            threads: self.threads.map_or(0, |n| n as usize),
        })
    }
}

/// The inputs and how to synchronize them: what `sync` takes, and what the commands that start
/// from its clock maps take too.
#[derive(Args)]
pub struct SyncArgs {
    /// Trace files (tsync-agent), text message files, OpenTelemetry span files (OTLP/JSON)
    /// and/or LTTng trace directories.
    #[arg(required = true, value_name = "INPUT")]
    pub inputs: Vec<PathBuf>,
    /// Estimator.
    #[arg(long, value_enum, default_value_t)]
    pub algorithm: Algorithm,
    /// Reference trace of its group, by name or index.
    #[arg(long, value_name = "NAME|INDEX")]
    pub reference: Option<String>,
    /// linreg: drop exchanges whose error margin exceeds mean + Z·σ (1.64 ≈ the paper's 90 %).
    #[arg(long, value_name = "Z")]
    pub filter: Option<f64>,
    /// Clocks to estimate on: `raw` converts each trace file's times to its node's raw clock
    /// (from its clock samples; text inputs and version-1 files stay as recorded). The maps
    /// always start from the recorded clock.
    #[arg(long, value_enum, default_value_t)]
    pub timebase: TimebaseChoice,
    /// How pair maps become one map per trace: `joint` combines every pair of a group (the
    /// result no longer depends on the reference but for its frame), `path` composes them along
    /// one shortest path.
    #[arg(long, value_enum, default_value_t)]
    pub reduction: ReductionChoice,
    /// Exit with status 3 when any trace is not synchronized, the traces form several groups, or
    /// any pair is only `approximate` (without it, status 3 only when nothing was synchronized).
    #[arg(long)]
    pub strict: bool,
    #[command(flatten)]
    pub matching: MatchArgs,
}

impl SyncArgs {
    pub fn options(&self) -> Result<SyncOptions, CliError> {
        if self.filter.is_some() && self.algorithm != Algorithm::Linreg {
            return Err(CliError::usage(
                "--filter only applies with --algorithm linreg (the convex hull uses every message)",
            ));
        }
        Ok(SyncOptions {
            algorithm: self.algorithm,
            reference: self.reference.clone(),
            matching: self.matching.options()?,
            linreg_filter_z: self.filter,
            reduction: self.reduction,
            timebase: self.timebase,
        })
    }
}

/// Tuning of the controlled logical clock (defaults: Becker et al.'s recommendations). The values
/// are optional so that a command can tell a value given from the default.
#[derive(Args)]
pub struct ClcArgs {
    /// Forward amortization γ in (0, 1]: after a jump the clock runs at γ times its speed until
    /// it meets the clock maps again [default: 0.999].
    #[arg(long, value_name = "G")]
    pub gamma: Option<f64>,
    /// Backward amortization slope ρ = jump / interval (0 disables it) [default: 0.01].
    #[arg(long, value_name = "R")]
    pub rho: Option<f64>,
    /// Minimum spacing δ (ns) kept between consecutive moved events of a trace [default: 0].
    #[arg(long, value_name = "NS")]
    pub delta_ns: Option<i64>,
}

impl ClcArgs {
    pub fn params(&self) -> ClcParams {
        let d = ClcParams::default();
        ClcParams {
            gamma: self.gamma.unwrap_or(d.gamma),
            delta_ns: self.delta_ns.unwrap_or(d.delta_ns),
            rho: self.rho.unwrap_or(d.rho),
        }
    }

    /// For commands where the CLC is optional: a tuning given without `--clc` does nothing,
    /// which is said rather than ignored.
    pub fn check_used(&self, clc: bool) -> Result<(), CliError> {
        let given: Vec<&str> = [
            self.gamma.is_some().then_some("--gamma"),
            self.rho.is_some().then_some("--rho"),
            self.delta_ns.is_some().then_some("--delta-ns"),
        ]
        .into_iter()
        .flatten()
        .collect();
        if clc || given.is_empty() {
            return Ok(());
        }
        Err(CliError::usage(format!(
            "{} only {} with --clc (the controlled logical clock)",
            given.join(", "),
            if given.len() == 1 { "applies" } else { "apply" }
        )))
    }
}

/// `--l-min-ns`: checked here so that a bad value is a clear error, not a silent overcorrection.
pub fn l_min_arg(v: Option<f64>) -> Result<Option<i64>, CliError> {
    match v {
        None => Ok(None),
        Some(x) if (0.0..9.2e18).contains(&x) => Ok(Some(x.round() as i64)),
        Some(x) => Err(CliError::usage(format!(
            "--l-min-ns {x}: must be a non-negative number of nanoseconds"
        ))),
    }
}

/// `--plot DIR` and the formats to write there.
#[derive(Args)]
pub struct PlotArgs {
    /// Write per-pair offset plots and transfer-time histograms into DIR (created if needed).
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    /// Plot file formats, comma-separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "svg,png",
        requires = "plot"
    )]
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

/// The verdict on a finished synchronization: status 3 when no trace could be related to another,
/// and with `strict` when any trace is left out, the traces form several groups, or a pair is
/// only approximate. The warnings printed before say why in detail.
pub fn synchronized_enough(sync: &SyncResult, strict: bool) -> CmdResult {
    if !sync.traces.iter().any(|t| t.synchronized) {
        return Err(CliError::NotSynchronized(
            "nothing was synchronized: no trace could be related to another (see the warnings \
             above)"
                .into(),
        ));
    }
    if !strict {
        return Ok(());
    }
    let mut problems = Vec::new();
    let alone: Vec<&str> = sync
        .traces
        .iter()
        .filter(|t| !t.synchronized)
        .map(|t| t.name.as_str())
        .collect();
    if !alone.is_empty() {
        problems.push(format!("not synchronized: {}", alone.join(", ")));
    }
    let groups = sync
        .traces
        .iter()
        .filter(|t| t.synchronized)
        .map(|t| t.group)
        .collect::<std::collections::BTreeSet<_>>();
    if groups.len() > 1 {
        problems.push(format!("{} separate groups", groups.len()));
    }
    let name = |i: u32| sync.traces[i as usize].name.as_str();
    let approximate: Vec<String> = sync
        .pairs
        .iter()
        .filter(|p| p.quality == Quality::Approximate)
        .map(|p| format!("{}–{}", name(p.a), name(p.b)))
        .collect();
    if !approximate.is_empty() {
        problems.push(format!(
            "approximate (no guarantee): {}",
            approximate.join(", ")
        ));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(CliError::NotSynchronized(format!(
            "--strict: {}",
            problems.join("; ")
        )))
    }
}

/// Opens the inputs and builds the timeline, with a progress bar on large inputs.
pub fn build_timeline(args: &SyncArgs, options: &TimelineOptions) -> Result<Timeline, CliError> {
    let inputs = InputSet::open_with(&args.inputs, &args.matching.span_options())?;
    let bar = progress::bar(inputs.total_bytes());
    let timeline = Timeline::build(inputs, options, &mut |n| {
        if let Some(b) = &bar {
            b.inc(n)
        }
    })?;
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
        return Err(CliError::msg(
            "internal: the plot samples were not gathered",
        ));
    };
    let inputs: Vec<&std::path::Path> = timeline
        .inputs
        .sources
        .iter()
        .map(|s| s.path.as_path())
        .collect();
    let inputs = tsync_analyze::output::InputIds::of(&inputs);
    let written = figures::write_plots(dir, &timeline.sync, samples, eval, formats, &inputs)?;
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

/// Prints a warning, naming inputs as the user gave them.
pub fn warn(w: &str) {
    eprintln!("tsync-analyze: warning: {}", spool::as_given(w));
}

/// Prints the warnings of the synchronization and of the later steps.
pub fn print_warnings(timeline: &Timeline) {
    for w in timeline.sync.warnings.iter().chain(&timeline.warnings) {
        warn(w);
    }
}

/// Serializes `value` as pretty JSON plus a newline.
pub fn json<T: serde::Serialize>(value: &T) -> Result<String, CliError> {
    let mut s = serde_json::to_string_pretty(value)?;
    s.push('\n');
    Ok(s)
}

/// Writes a report or document to stdout, naming piped inputs as the user gave them; a closed
/// pipe (`| head`) is not an error.
pub fn write_stdout(b: &[u8]) -> CmdResult {
    let text = spool::as_given(&String::from_utf8_lossy(b));
    let mut o = std::io::stdout().lock();
    match o.write_all(text.as_bytes()).and_then(|_| o.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(CliError::msg(format!("cannot write the output: {e}"))),
    }
}
