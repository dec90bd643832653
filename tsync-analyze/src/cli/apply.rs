//! `tsync-analyze apply`: one node's own events (application logs, spans, a Chrome trace, an
//! LTTng trace) rewritten onto the common timebase with the maps `sync` computes.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter};
use std::path::{Path, PathBuf};

use clap::Args;
use tsync_analyze::apply::{chrome, csv, ctf, lines};
use tsync_analyze::output::{InputIds, OutputDir, OutputFile};
use tsync_analyze::{ApplyError, ApplySummary, CommonTimebase, InputSet, NodeClock};

use super::{CliError, CmdResult, SyncArgs, progress};

#[derive(Args)]
pub struct ApplyCmd {
    /// The node's events: a JSON Lines, CSV or Chrome trace file (`-` for standard input), or
    /// an LTTng trace directory (ctf).
    #[arg(long, value_name = "FILE")]
    pub events: PathBuf,
    /// The node (trace name, or index) that stamped the events.
    #[arg(long, value_name = "NAME")]
    pub node: String,
    /// The clock the events were stamped with: the node's CLOCK_MONOTONIC (as its trace records
    /// it; the result is on the reference's), or CLOCK_REALTIME (through both nodes' clock
    /// samples; the result is on the reference's realtime clock).
    #[arg(long, value_enum, default_value = "monotonic")]
    pub clock: ClockArg,
    /// Format of FILE and of the output [default: ctf for a directory, csv for *.csv, chrome for
    /// *.json, else jsonl].
    #[arg(long, value_enum)]
    pub format: Option<ApplyFormat>,
    /// The time field [default: ts_ns (integer ns) for jsonl and csv, ts (µs) for chrome]. The
    /// original is kept as <FIELD>_local.
    #[arg(long, value_name = "NAME")]
    pub field: Option<String>,
    /// Output file (`-` for stdout), or for ctf a new directory. Written under a temporary name
    /// and renamed into place once complete; an input is never accepted as the output.
    #[arg(short, long, value_name = "OUT")]
    pub output: PathBuf,
    #[command(flatten)]
    pub sync: SyncArgs,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum ClockArg {
    Monotonic,
    Realtime,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ApplyFormat {
    Jsonl,
    Csv,
    Chrome,
    Ctf,
}

impl ApplyFormat {
    fn name(self) -> &'static str {
        match self {
            ApplyFormat::Jsonl => "jsonl",
            ApplyFormat::Csv => "csv",
            ApplyFormat::Chrome => "chrome",
            ApplyFormat::Ctf => "ctf",
        }
    }

    /// The format a file's name and kind suggest.
    fn guess(events: &Path) -> ApplyFormat {
        if events.is_dir() {
            return ApplyFormat::Ctf;
        }
        match events.extension().and_then(|e| e.to_str()) {
            Some(e) if e.eq_ignore_ascii_case("csv") => ApplyFormat::Csv,
            Some(e) if e.eq_ignore_ascii_case("json") => ApplyFormat::Chrome,
            _ => ApplyFormat::Jsonl,
        }
    }
}

/// The output paths that must not be an input: the traces and the events file.
pub fn protected_inputs(a: &ApplyCmd) -> Vec<PathBuf> {
    let mut v = a.sync.inputs.clone();
    v.push(a.events.clone());
    v
}

pub fn run(a: ApplyCmd) -> CmdResult {
    let format = a.format.unwrap_or_else(|| ApplyFormat::guess(&a.events));
    let clock = match a.clock {
        ClockArg::Monotonic => NodeClock::Monotonic,
        ClockArg::Realtime => NodeClock::Realtime,
    };
    let field = match (&a.field, format) {
        (Some(_), ApplyFormat::Ctf) => {
            return Err(CliError::usage(
                "--field does not apply with --format ctf (the clock class is rewritten)",
            ));
        }
        (Some(f), _) => f.clone(),
        (None, ApplyFormat::Chrome) => "ts".into(),
        (None, _) => "ts_ns".into(),
    };
    if format == ApplyFormat::Ctf {
        if clock == NodeClock::Realtime {
            return Err(CliError::usage(
                "--clock realtime does not apply with --format ctf (LTTng's clock is CLOCK_MONOTONIC)",
            ));
        }
        if !a.events.is_dir() {
            return Err(CliError::msg(format!(
                "{}: --format ctf needs the trace directory (what `lttng create --output` wrote)",
                a.events.display()
            )));
        }
    } else if a.events.is_dir() {
        return Err(CliError::msg(format!(
            "{} is a directory: give a file, or --format ctf for an LTTng trace",
            a.events.display()
        )));
    }
    let options = a.sync.options()?;
    let inputs = InputSet::open(&a.sync.inputs)?;
    let bar = progress::bar(inputs.total_bytes());
    let result = tsync_analyze::sync(&inputs, &options, &mut |n| {
        if let Some(b) = &bar {
            b.inc(n)
        }
    })?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    for w in &result.warnings {
        super::warn(w);
    }
    let timebase = CommonTimebase::new(result, &inputs)?;
    let node = timebase.node(&a.node)?;
    let name = timebase.names()[node as usize].clone();
    let reference = timebase.names()[timebase.reference(node) as usize].clone();
    let shown = a.events.display().to_string();
    if format == ApplyFormat::Ctf {
        let out = OutputDir::create(&a.output, &[a.events.as_path()])?;
        let traces = ctf::apply_dir(&a.events, out.path(), &timebase, node)?;
        out.commit()?;
        report_ctf(&traces, &name, &reference, &timebase, node, &a.output);
    } else {
        let mut mapper = timebase.mapper(node, clock)?;
        let ids = InputIds::of(&protected_inputs(&a));
        let mut out = OutputFile::create(&a.output, "", &ids)?;
        let reader: Box<dyn BufRead> = if a.events == Path::new("-") {
            Box::new(BufReader::with_capacity(1 << 20, std::io::stdin().lock()))
        } else {
            let f = File::open(&a.events)
                .map_err(|e| CliError::msg(format!("cannot read {shown}: {e}")))?;
            Box::new(BufReader::with_capacity(1 << 20, f))
        };
        let writer = BufWriter::with_capacity(1 << 20, &mut out);
        let done = match format {
            ApplyFormat::Jsonl => lines::apply_jsonl(reader, &shown, writer, &field, &mut mapper),
            ApplyFormat::Csv => csv::apply_csv(reader, &shown, writer, &field, &mut mapper),
            ApplyFormat::Chrome => {
                chrome::apply_chrome(reader, &shown, writer, &field, &mut mapper)
            }
            ApplyFormat::Ctf => unreachable!("handled above"),
        };
        let summary = match done {
            Ok(s) => s,
            Err(ApplyError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::BrokenPipe =>
            {
                return Ok(());
            }
            // Dropping `out` removes the partial file: the target stays as it was.
            Err(e @ ApplyError::Io { .. }) if out.io_error().is_some() => {
                return Err(CliError::msg(out.failure(&e)));
            }
            Err(e) => return Err(e.into()),
        };
        out.commit()?;
        report(
            &summary, format, clock, &name, &reference, &timebase, node, &a.output,
        );
    }
    if !timebase.sync.traces[node as usize].synchronized {
        return Err(CliError::NotSynchronized(format!(
            "{name} is not synchronized with any other trace: its times were written through \
             the identity map (see the warnings above)"
        )));
    }
    super::synchronized_enough(&timebase.sync, a.sync.strict)
}

fn span_text(timebase: &CommonTimebase, node: u32) -> String {
    match timebase.span(node) {
        Some((a, b)) => format!(" [{:.9} s, {:.9} s]", a as f64 / 1e9, b as f64 / 1e9),
        None => String::new(),
    }
}

#[allow(clippy::too_many_arguments)]
fn report(
    s: &ApplySummary,
    format: ApplyFormat,
    clock: NodeClock,
    node: &str,
    reference: &str,
    timebase: &CommonTimebase,
    k: u32,
    out: &Path,
) {
    let mut line = format!(
        "tsync-analyze: apply: {} {} events of {node} ({}) mapped onto {reference}'s timebase \
         to {}",
        s.events,
        format.name(),
        clock.as_str(),
        out.display()
    );
    if s.passed_through > 0 {
        line.push_str(&format!(
            "; {} records without a time passed through",
            s.passed_through
        ));
    }
    eprintln!("{line}");
    if s.outside_span > 0 {
        eprintln!(
            "tsync-analyze: apply: {} events lie outside {node}'s recorded span{}: mapped with \
             the nearest segment's line, continued (no message backs the map there)",
            s.outside_span,
            span_text(timebase, k)
        );
    }
    if s.ambiguous > 0 {
        eprintln!(
            "tsync-analyze: apply: {} realtime stamps occurred twice on {node} (its realtime \
             clock was stepped back): taken in file order",
            s.ambiguous
        );
    }
}

fn report_ctf(
    traces: &[ctf::CtfTraceSummary],
    node: &str,
    reference: &str,
    timebase: &CommonTimebase,
    k: u32,
    out: &Path,
) {
    for t in traces {
        let which = if t.trace.as_os_str().is_empty() {
            ".".into()
        } else {
            t.trace.display().to_string()
        };
        eprintln!(
            "tsync-analyze: apply: CTF trace {which}: clock `monotonic` of {node} rewritten onto \
             {reference}'s timebase (freq = {}, offset_s = {}, offset = {}) in {}",
            t.clock.freq,
            t.clock.offset_s,
            t.clock.offset,
            out.display()
        );
        if t.knots_inside > 0 {
            eprintln!(
                "tsync-analyze: apply: warning: {node}'s map has {} knot(s) inside this trace's \
                 span; CTF's clock class holds one line, so the line closest to the map there \
                 was written: readers show times up to {:.0} ns off the map (use jsonl, csv or \
                 chrome where that matters)",
                t.knots_inside, t.max_error_ns
            );
        } else {
            eprintln!(
                "tsync-analyze: apply: one line covers the trace's span: readers show the map \
                 to within {:.1} ns (integer freq), plus their own truncation to whole ns",
                t.max_error_ns
            );
        }
        if t.packets_outside > 0 {
            eprintln!(
                "tsync-analyze: apply: {} of {} packets lie at least partly outside {node}'s \
                 recorded span{}: mapped with the nearest segment's line, continued",
                t.packets_outside,
                t.packets,
                span_text(timebase, k)
            );
        }
    }
    if ctf::epoch(timebase, k).is_none() {
        eprintln!(
            "tsync-analyze: apply: note: {reference} has no clock samples (a text input), so its \
             realtime − monotonic is unknown: each trace keeps its own clock offset (its session's \
             realtime − monotonic) to make times absolute"
        );
    }
}
