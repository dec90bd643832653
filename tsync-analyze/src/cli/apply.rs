//! `tsync-analyze apply`: the user's own events (application logs, spans, a Chrome trace, an
//! LTTng trace, OpenTelemetry traces of many nodes) rewritten onto the common timebase with the
//! maps `sync` computes.

use std::io::BufWriter;
use std::path::{Path, PathBuf};

use clap::Args;
use tsync_analyze::apply::otlp::{self, OtlpOptions, OtlpSummary};
use tsync_analyze::apply::stream::{self, Sink};
use tsync_analyze::apply::{chrome, csv, ctf, lines};
use tsync_analyze::output::{InputIds, OutputDir, OutputFile};
use tsync_analyze::{ApplyError, ApplySummary, CommonTimebase, InputSet, NodeClock};

use super::{CliError, CmdResult, SyncArgs, progress};

#[derive(Args)]
pub struct ApplyCmd {
    /// The node's events: a JSON Lines, CSV, Chrome trace or OTLP (JSON or protobuf) file (`-`
    /// for standard input; gzip is recognized), or an LTTng trace directory (ctf).
    #[arg(long, value_name = "FILE")]
    pub events: PathBuf,
    /// The node (trace name, or index) that stamped the events. Required except with --format
    /// otlp, where each resource names its node (and --node forces one for all).
    #[arg(long, value_name = "NAME")]
    pub node: Option<String>,
    /// The clock the events were stamped with: the node's CLOCK_MONOTONIC (as its trace records
    /// it; the result is on the reference's), or CLOCK_REALTIME (through both nodes' clock
    /// samples; the result is on the reference's realtime clock) [default: realtime for otlp,
    /// else monotonic].
    #[arg(long, value_enum)]
    pub clock: Option<ClockArg>,
    /// Format of FILE and of the output [default: ctf for a directory, csv for *.csv, chrome for
    /// *.json, else jsonl; otlp is never guessed].
    #[arg(long, value_enum)]
    pub format: Option<ApplyFormat>,
    /// jsonl, csv, chrome: also write each time's guaranteed interval on the reference's
    /// timebase, as <FIELD>_lo and <FIELD>_hi (chrome: in `args`, µs rounded outwards); empty
    /// where no guarantee holds (outside the node's recorded span). otlp always writes it.
    #[arg(long)]
    pub interval: bool,
    /// The time field [default: ts_ns (integer ns) for jsonl and csv, ts (µs) for chrome]. The
    /// original is kept as <FIELD>_local.
    #[arg(long, value_name = "NAME")]
    pub field: Option<String>,
    /// Output file (`-` for stdout; gzip-compressed if it ends in `.gz`), or for ctf a new
    /// directory. Written under a temporary name and renamed into place once complete; an input
    /// is never accepted as the output.
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
    /// OpenTelemetry traces as the Collector's file exporter writes them, spans of many nodes:
    /// OTLP/JSON (one `TracesData` per line) or protobuf (length-prefixed), written back alike.
    Otlp,
}

impl ApplyFormat {
    fn name(self) -> &'static str {
        match self {
            ApplyFormat::Jsonl => "jsonl",
            ApplyFormat::Csv => "csv",
            ApplyFormat::Chrome => "chrome",
            ApplyFormat::Ctf => "ctf",
            ApplyFormat::Otlp => "otlp",
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
        Some(ClockArg::Monotonic) => NodeClock::Monotonic,
        Some(ClockArg::Realtime) => NodeClock::Realtime,
        None if format == ApplyFormat::Otlp => NodeClock::Realtime,
        None => NodeClock::Monotonic,
    };
    let field = match (&a.field, format) {
        (Some(_), ApplyFormat::Ctf | ApplyFormat::Otlp) => {
            return Err(CliError::usage(format!(
                "--field does not apply with --format {} (its time fields are known)",
                format.name()
            )));
        }
        (Some(f), _) => f.clone(),
        (None, ApplyFormat::Chrome) => "ts".into(),
        (None, _) => "ts_ns".into(),
    };
    if a.node.is_none() && format != ApplyFormat::Otlp {
        return Err(CliError::usage(
            "--node NAME is required (the node that stamped the events); only --format otlp \
             takes each span's node from its resource",
        ));
    }
    if format == ApplyFormat::Ctf {
        if clock == NodeClock::Realtime {
            return Err(CliError::usage(
                "--clock realtime does not apply with --format ctf (LTTng's clock is CLOCK_MONOTONIC)",
            ));
        }
        if a.interval {
            return Err(CliError::usage(
                "--interval does not apply with --format ctf (the clock class holds one line)",
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
    let inputs = InputSet::open_with(&a.sync.inputs, &a.sync.matching.span_options())?;
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
    let forced = a.node.as_deref().map(|n| timebase.node(n)).transpose()?;
    if format == ApplyFormat::Otlp {
        let options = OtlpOptions {
            attribution: a.sync.matching.span_options().attribution,
            node: forced,
            clock,
        };
        let summary = rewrite(&a, |reader, shown, writer| {
            otlp::apply_otlp(reader, shown, writer, &timebase, &options)
        })?;
        let Some(summary) = summary else {
            return Ok(());
        };
        report_otlp(&summary, &options, &timebase, &a.output);
        check_span_order(&a, &inputs)?;
        let unsynchronized: Vec<&str> = summary
            .spans
            .keys()
            .filter(|n| {
                timebase
                    .node(n)
                    .is_ok_and(|k| !timebase.sync.traces[k as usize].synchronized)
            })
            .map(String::as_str)
            .collect();
        if !unsynchronized.is_empty() {
            return Err(CliError::NotSynchronized(format!(
                "{} not synchronized with any other trace: their spans were written through the \
                 identity map (see the warnings above)",
                unsynchronized.join(", ")
            )));
        }
        return super::synchronized_enough(&timebase.sync, a.sync.strict);
    }
    let node = forced.expect("checked above: --node is required here");
    let name = timebase.names()[node as usize].clone();
    let reference = timebase.names()[timebase.reference(node) as usize].clone();
    if format == ApplyFormat::Ctf {
        let out = OutputDir::create(&a.output, &[a.events.as_path()])?;
        let traces = ctf::apply_dir(&a.events, out.path(), &timebase, node)?;
        out.commit()?;
        report_ctf(&traces, &name, &reference, &timebase, node, &a.output);
    } else {
        let mut mapper = timebase.mapper(node, clock)?;
        let interval = a.interval;
        let summary = rewrite(&a, |reader, shown, writer| match format {
            ApplyFormat::Jsonl => {
                lines::apply_jsonl(reader, shown, writer, &field, interval, &mut mapper)
            }
            ApplyFormat::Csv => {
                csv::apply_csv(reader, shown, writer, &field, interval, &mut mapper)
            }
            ApplyFormat::Chrome => {
                chrome::apply_chrome(reader, shown, writer, &field, interval, &mut mapper)
            }
            ApplyFormat::Ctf | ApplyFormat::Otlp => unreachable!("handled above"),
        })?;
        let Some(summary) = summary else {
            return Ok(());
        };
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

/// Runs `apply` from the events file (gzip or not) to the output (temporary file, renamed into
/// place; gzip for `*.gz`). None when the reader of standard output went away (nothing more to
/// say).
fn rewrite<S>(
    a: &ApplyCmd,
    apply: impl FnOnce(
        Box<dyn std::io::BufRead>,
        &str,
        &mut Sink<BufWriter<&mut OutputFile>>,
    ) -> Result<S, ApplyError>,
) -> Result<Option<S>, CliError> {
    let shown = a.events.display().to_string();
    let ids = InputIds::of(&protected_inputs(a));
    let mut out = OutputFile::create(&a.output, "", &ids)?;
    let reader =
        stream::open(&a.events).map_err(|e| CliError::msg(format!("cannot read {shown}: {e}")))?;
    let mut sink = Sink::new(BufWriter::with_capacity(1 << 20, &mut out), &a.output);
    let done = apply(reader, &shown, &mut sink).and_then(|s| {
        sink.finish().map_err(|source| ApplyError::Io {
            what: "cannot write the output".into(),
            source,
        })?;
        Ok(s)
    });
    let summary = match done {
        Ok(s) => s,
        Err(ApplyError::Io { source, .. }) if source.kind() == std::io::ErrorKind::BrokenPipe => {
            return Ok(None);
        }
        // Dropping `out` removes the partial file: the target stays as it was.
        Err(e @ ApplyError::Io { .. }) if out.io_error().is_some() => {
            return Err(CliError::msg(out.failure(&e)));
        }
        Err(e) => return Err(e.into()),
    };
    out.commit()?;
    Ok(Some(summary))
}

/// Where the events were one of the span inputs (spans corrected from themselves) and went to
/// a file: the corrected file read again as spans, and how many of its cross-node messages still
/// run backwards said (a child before its parent; none is expected, and one would be named).
fn check_span_order(a: &ApplyCmd, inputs: &InputSet) -> CmdResult {
    let events = std::fs::canonicalize(&a.events).ok();
    let is_span_input = events.is_some()
        && inputs.sources.iter().any(|s| {
            matches!(s.kind, tsync_analyze::SourceKind::Spans { .. })
                && std::fs::canonicalize(&s.path).ok() == events
        });
    if !is_span_input
        || a.output.as_os_str() == "-"
        || a.output.extension().is_some_and(|e| e == "gz")
    {
        return Ok(());
    }
    let order = tsync_analyze::spans::inversions(&a.output, &a.sync.matching.span_options())?;
    if order.inverted == 0 {
        eprintln!(
            "tsync-analyze: apply: cross-node order kept: none of the {} messages of the \
             corrected spans runs backwards (no child starts before its parent)",
            order.messages
        );
    } else {
        eprintln!(
            "tsync-analyze: apply: warning: {} of the {} messages of the corrected spans run \
             backwards (a child starting before its parent, or a client ending before its server \
             started): the maps of those pairs were composed through other nodes; their \
             intervals overlap, and the order within them is not certain",
            order.inverted, order.messages
        );
    }
    Ok(())
}

fn report_otlp(s: &OtlpSummary, o: &OtlpOptions, timebase: &CommonTimebase, out: &Path) {
    let spans: u64 = s.spans.values().sum();
    let per_node: Vec<String> = s.spans.iter().map(|(n, k)| format!("{n}: {k}")).collect();
    eprintln!(
        "tsync-analyze: apply: {spans} OTLP spans ({}) and {} span events in {} batches mapped \
         ({}) onto their references' timebase to {}; {} times mapped, {} of them with a \
         guaranteed interval",
        per_node.join(", "),
        s.span_events,
        s.batches,
        o.clock.as_str(),
        out.display(),
        s.times,
        s.times - s.without_interval
    );
    let known = timebase.names().join(", ");
    for (name, n) in &s.unknown_nodes {
        eprintln!(
            "tsync-analyze: apply: warning: {n} spans of resources whose node (by their {}) is \
             `{name}` left unchanged: no trace of that name (the traces are: {known})",
            o.attribution.describe()
        );
    }
    if s.without_node > 0 {
        eprintln!(
            "tsync-analyze: apply: warning: {} spans of resources without {} left unchanged \
             (name the attribute with --node-attribute, or the node with --node)",
            s.without_node,
            o.attribution.describe()
        );
    }
    if s.outside_span > 0 {
        eprintln!(
            "tsync-analyze: apply: {} times lie outside their node's recorded span: mapped with \
             the nearest segment's line, continued, without an interval (no message backs the \
             map there)",
            s.outside_span
        );
    }
    if s.without_interval > s.outside_span {
        eprintln!(
            "tsync-analyze: apply: {} times inside the recorded spans have no guaranteed \
             interval (no accurate pair on their node's path)",
            s.without_interval - s.outside_span
        );
    }
    if s.unset > 0 {
        eprintln!(
            "tsync-analyze: apply: {} times are unset (0 or absent) and were kept",
            s.unset
        );
    }
    if s.ambiguous > 0 {
        eprintln!(
            "tsync-analyze: apply: {} realtime stamps occurred twice on their node (its \
             realtime clock was stepped back): taken in file order",
            s.ambiguous
        );
    }
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
    if s.without_interval > 0 {
        eprintln!(
            "tsync-analyze: apply: {} events have no guaranteed interval (outside the recorded \
             span, or no accurate pair on {node}'s path): their bounds are empty",
            s.without_interval
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
