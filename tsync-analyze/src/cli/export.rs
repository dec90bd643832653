//! `tsync-analyze export`: every captured event on the common timebase, as pcapng (Wireshark,
//! tshark), JSON Lines or CSV, streamed in corrected-time order.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use clap::Args;
use tsync_analyze::export::{ExportError, ExportFormat, ExportOptions, exporter};
use tsync_analyze::timeline::{ExportSummary, Timeline, TimelineError, TimelineOptions};

use super::{ClcArgs, CmdResult, SyncArgs};

#[derive(Args)]
pub struct ExportCmd {
    /// Output format.
    #[arg(long, value_enum)]
    pub format: FormatArg,
    /// Output file (`-` for stdout).
    #[arg(short, long, value_name = "OUT")]
    pub output: PathBuf,
    /// Apply the controlled logical clock after the linear correction (holds 8 bytes per event).
    #[arg(long)]
    pub clc: bool,
    #[command(flatten)]
    pub clc_params: ClcArgs,
    /// --clc: minimum message latency (ns) for every pair, instead of half the smallest round
    /// trip of each pair's exchanges.
    #[arg(long, value_name = "NS")]
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
}

impl FormatArg {
    fn format(self) -> ExportFormat {
        match self {
            FormatArg::Pcapng => ExportFormat::Pcapng,
            FormatArg::Jsonl => ExportFormat::Jsonl,
            FormatArg::Csv => ExportFormat::Csv,
        }
    }
}

pub fn run(a: ExportCmd) -> CmdResult {
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
        if a.l_min_ns.is_some() {
            return Err("--l-min-ns only applies with --clc".into());
        }
        let options = TimelineOptions {
            sync: a.sync.options()?,
            keep_messages: true,
            plot_samples: false,
        };
        (super::build_timeline(&a.sync.inputs, &options)?, None)
    };
    super::print_warnings(&timeline);
    let summary = if a.output == Path::new("-") {
        let out = BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
        match write(&timeline, corrected.as_deref(), &a, out) {
            // The reader (`| head`) has seen enough.
            Err(WriteError::ClosedPipe) => return Ok(()),
            other => other,
        }
    } else {
        let file = File::create(&a.output)
            .map_err(|e| format!("cannot create {}: {e}", a.output.display()))?;
        let result = write(&timeline, corrected.as_deref(), &a, BufWriter::new(file));
        if result.is_err() {
            // A partial export looks complete to the tools that read it.
            let _ = std::fs::remove_file(&a.output);
        }
        result
    }
    .map_err(|e| e.to_string())?;
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
    Ok(())
}

/// Why writing the export stopped.
enum WriteError {
    /// stdout was closed by its reader.
    ClosedPipe,
    Failed(String),
}

impl std::fmt::Display for WriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WriteError::ClosedPipe => f.write_str("the output was closed"),
            WriteError::Failed(m) => f.write_str(m),
        }
    }
}

fn write<W: Write>(
    timeline: &Timeline,
    corrected: Option<&[Vec<i64>]>,
    a: &ExportCmd,
    out: W,
) -> Result<ExportSummary, WriteError> {
    let failed = |e: &dyn std::fmt::Display| {
        WriteError::Failed(format!("export to {} failed: {e}", a.output.display()))
    };
    let nodes: Vec<String> = timeline
        .inputs
        .traces
        .iter()
        .map(|t| t.name.clone())
        .collect();
    let options = ExportOptions {
        pcap_time_base_ns: timeline.pcap_time_base_ns().map_err(|e| failed(&e))?,
        pcap_comments: !a.no_comments,
    };
    let mut sink = exporter(a.format.format(), out, &nodes, &options).map_err(|e| failed(&e))?;
    match timeline.export(corrected, sink.as_mut()) {
        Ok(summary) => Ok(summary),
        Err(TimelineError::Export(e)) if closed_pipe(&e) => Err(WriteError::ClosedPipe),
        Err(e) => Err(failed(&e)),
    }
}

/// Whether an export error is, at its root, the reader closing the pipe (the CSV and pcapng
/// writers wrap the I/O error in their own).
fn closed_pipe(e: &ExportError) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
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
