//! `tsync-analyze export`: every captured event on the common timebase, as pcapng (Wireshark,
//! tshark), JSON Lines, CSV or Chrome trace-event JSON (Perfetto), streamed in corrected-time
//! order.

use std::io::{BufWriter, Write};
use std::path::PathBuf;

use clap::Args;
use tsync_analyze::output::export::{ExportFormat, ExportOptions, exporter};
use tsync_analyze::output::{InputIds, OutputFile};
use tsync_analyze::{ExportSummary, Timeline, TimelineOptions};

use super::{ClcArgs, CliError, CmdResult, SyncArgs};

#[derive(Args)]
pub struct ExportCmd {
    /// Output format.
    #[arg(long, value_enum)]
    pub format: FormatArg,
    /// Output file (`-` for stdout). Written to a temporary file and renamed into place once
    /// complete; an input is never accepted as the output.
    #[arg(short, long, value_name = "OUT")]
    pub output: PathBuf,
    /// Apply the controlled logical clock after the clock maps (holds 8 bytes per event).
    #[arg(long)]
    pub clc: bool,
    #[command(flatten)]
    pub clc_params: ClcArgs,
    /// --clc: minimum message latency (ns) for every pair, instead of half the smallest round
    /// trip of each pair's exchanges.
    #[arg(long, value_name = "NS", requires = "clc")]
    pub l_min_ns: Option<f64>,
    /// pcapng: leave out the per-packet comment (node, event, original time, peer).
    #[arg(long)]
    pub no_comments: bool,
    #[command(flatten)]
    pub sync: SyncArgs,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum FormatArg {
    Pcapng,
    Jsonl,
    Csv,
    Chrome,
}

impl FormatArg {
    fn format(self) -> ExportFormat {
        match self {
            FormatArg::Pcapng => ExportFormat::Pcapng,
            FormatArg::Jsonl => ExportFormat::Jsonl,
            FormatArg::Csv => ExportFormat::Csv,
            FormatArg::Chrome => ExportFormat::Chrome,
        }
    }
}

pub fn run(a: ExportCmd) -> CmdResult {
    // `main` refused an output that is an input before anything was read; creating the output
    // checks again (the inputs here are as read, piped ones copied).
    let inputs = InputIds::of(&a.sync.inputs);
    a.clc_params.check_used(a.clc)?;
    if a.no_comments && !matches!(a.format, FormatArg::Pcapng) {
        return Err(CliError::usage(
            "--no-comments only applies with --format pcapng",
        ));
    }
    let (timeline, corrected) = if a.clc {
        let (timeline, _, outcome) =
            super::correct::clc_timeline(&a.sync, &a.clc_params, a.l_min_ns, false)?;
        let r = &outcome.report;
        eprintln!(
            "tsync-analyze: controlled logical clock: {} violations before, {} after, {} events moved",
            r.violations_before, r.violations_after, r.events_moved
        );
        (timeline, Some(outcome.corrected))
    } else {
        let options = TimelineOptions {
            sync: a.sync.options()?,
            keep_messages: true,
            plot_samples: false,
        };
        (super::build_timeline(&a.sync, &options)?, None)
    };
    super::print_warnings(&timeline);
    let mut out = OutputFile::create(&a.output, "", &inputs)?;
    let summary = match write(
        &timeline,
        corrected.as_deref(),
        &a,
        BufWriter::with_capacity(1 << 16, &mut out),
    ) {
        Ok(summary) => summary,
        // The reader (`| head`) has seen enough.
        Err(e)
            if closed_pipe(&e)
                || out
                    .io_error()
                    .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) =>
        {
            return Ok(());
        }
        // Dropping `out` removes the partial file: the target stays as it was.
        Err(e) => return Err(CliError::msg(out.failure(&e))),
    };
    out.commit()?;
    eprintln!(
        "tsync-analyze: exported {} events ({} with a matched peer) to {}{}",
        summary.events,
        summary.with_peer,
        a.output.display(),
        if summary.skipped > 0 {
            format!(
                "; {} events with an impossible time or direction skipped",
                summary.skipped
            )
        } else {
            String::new()
        }
    );
    super::synchronized_enough(&timeline.sync, a.sync.strict)
}

/// Why writing the export stopped: the format library's error (the I/O error underneath is kept
/// by the [`OutputFile`]).
type WriteError = Box<dyn std::error::Error>;

fn write<W: Write>(
    timeline: &Timeline,
    corrected: Option<&[Vec<i64>]>,
    a: &ExportCmd,
    out: W,
) -> Result<ExportSummary, WriteError> {
    let nodes: Vec<String> = timeline
        .inputs
        .traces
        .iter()
        .map(|t| t.name.clone())
        .collect();
    let options = ExportOptions {
        pcap_time_base_ns: timeline.pcap_time_base_ns()?,
        pcap_comments: !a.no_comments,
        chrome_metadata: chrome_metadata(timeline),
    };
    let mut sink = exporter(a.format.format(), out, &nodes, &options)?;
    let summary = timeline.export(corrected, sink.as_mut())?;
    Ok(summary)
}

/// Whether an export error is, at its root, the reader closing the pipe (the CSV and pcapng
/// writers wrap the I/O error in their own).
fn closed_pipe(e: &WriteError) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e.as_ref());
    while let Some(c) = cause {
        let io = c.downcast_ref::<std::io::Error>().or_else(|| {
            match c.downcast_ref::<csv::Error>()?.kind() {
                csv::ErrorKind::Io(io) => Some(io),
                _ => None,
            }
        });
        if io.is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe) {
            return true;
        }
        cause = c.source();
    }
    false
}

/// The Chrome export's `metadata`: what the timebase is and how good each pair is.
fn chrome_metadata(timeline: &Timeline) -> serde_json::Value {
    let sync = &timeline.sync;
    let name = |k: u32| sync.traces[k as usize].name.clone();
    let traces: Vec<serde_json::Value> = sync
        .traces
        .iter()
        .map(|t| {
            serde_json::json!({
                "name": t.name, "reference": name(t.reference), "group": t.group,
                "synchronized": t.synchronized, "segments": t.map.pieces().len(),
            })
        })
        .collect();
    let pairs: Vec<serde_json::Value> = sync
        .pairs
        .iter()
        .map(|p| {
            serde_json::json!({
                "a": name(p.a), "b": name(p.b), "quality": p.quality.as_str(),
                "messages_ab": p.messages_ab, "messages_ba": p.messages_ba,
                "accuracy_ns": p.accuracy.as_ref().map(|a| serde_json::json!({
                    "best": a.stats.best, "worst": a.stats.worst, "mean": a.stats.mean,
                })),
            })
        })
        .collect();
    serde_json::json!({
        "tsync": {
            "timebase": "corrected times in µs on each group's reference clock (its recorded CLOCK_MONOTONIC)",
            "algorithm": sync.algorithm.as_str(),
            "traces": traces,
            "pairs": pairs,
        }
    })
}
