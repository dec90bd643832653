//! `tsync-analyze sync`: the clock correction of every trace, and optionally its plots.

use super::progress;
use clap::Args;
use std::io::Write;
use tsync_analyze::output::report;
use tsync_analyze::{InputSet, SyncOptions, SyncResult, TimelineOptions};

use super::{CliError, CmdResult, PlotArgs, SyncArgs};

#[derive(Args)]
pub struct SyncCmd {
    #[command(flatten)]
    pub sync: SyncArgs,
    /// Print the JSON document (docs/json.md) instead of the report.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub plot: PlotArgs,
}

pub fn run(a: SyncCmd) -> CmdResult {
    let options = a.sync.options()?;
    let Some(dir) = &a.plot.plot else {
        let result = plain(&a.sync, &options)?;
        print(&result, a.json)?;
        let verdict = super::synchronized_enough(&result, a.sync.strict);
        // The process ends next, which returns the memory at once: freeing the result piece by
        // piece (a 600-trace mesh: 180,000 pairs' hulls and curves) took a tenth of `sync`.
        std::mem::forget(result);
        return verdict;
    };
    let options = TimelineOptions {
        sync: options,
        keep_messages: false,
        plot_samples: true,
    };
    let timeline = super::build_timeline(&a.sync, &options)?;
    // The histograms show the transfer times after this correction: a second, streaming pass
    // over the messages.
    let eval = timeline.evaluate(timeline.l_min(None), None, &mut |_| {})?;
    super::write_plots(dir, &timeline, Some(&eval), &a.plot.formats())?;
    print(&timeline.sync, a.json)?;
    super::synchronized_enough(&timeline.sync, a.sync.strict)
}

/// `sync` without plots: the hulls only, one pass, nothing gathered on the side.
fn plain(a: &SyncArgs, options: &SyncOptions) -> Result<SyncResult, CliError> {
    let inputs = InputSet::open_with(&a.inputs, &a.matching.span_options())?;
    let bar = progress::bar(inputs.total_bytes());
    let result = tsync_analyze::sync(&inputs, options, &mut |n| {
        if let Some(b) = &bar {
            b.inc(n)
        }
    })?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    Ok(result)
}

fn print(result: &SyncResult, json: bool) -> CmdResult {
    if json && super::spool::none() {
        for w in &result.warnings {
            super::warn(w);
        }
        // Streamed: a mesh of hundreds of traces makes a document of hundreds of megabytes.
        let mut o = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
        let written = report::write_json(result, &mut o)
            .map_err(std::io::Error::from)
            .and_then(|()| o.write_all(b"\n"))
            .and_then(|()| o.flush());
        return match written {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
            Err(e) => Err(super::CliError::msg(format!(
                "cannot write the output: {e}"
            ))),
        };
    }
    let out = if json {
        for w in &result.warnings {
            super::warn(w);
        }
        super::json(&report::to_json(result))?
    } else {
        report::to_text(result)
    };
    super::write_stdout(out.as_bytes())
}
