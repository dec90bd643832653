//! `tsync-analyze info`: what each input holds — for a trace file its header, event counts,
//! lost events, clock samples and time span; for a text message file its traces and messages.

use std::path::{Path, PathBuf};

use clap::Args;
use serde::Serialize;
use tsync_analyze::{SourceKind, TraceSummary, sniff, text};

use super::{CliError, CmdResult};

#[derive(Args)]
pub struct InfoCmd {
    /// Trace files (tsync-agent) and/or text message files.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Print a JSON array with one object per file (`"format": "trace"` or `"text"`).
    #[arg(long)]
    pub json: bool,
}

/// What a text message file holds.
#[derive(Serialize)]
struct TextSummary {
    path: PathBuf,
    format: &'static str,
    traces: u32,
    messages: u64,
    same_trace: u64,
    per_trace: Vec<TextTrace>,
}

/// One trace of a text message file: messages sent and received, first and last local time.
#[derive(Serialize, Default)]
struct TextTrace {
    index: u32,
    sent: u64,
    received: u64,
    first_ns: Option<i64>,
    last_ns: Option<i64>,
}

impl TextTrace {
    fn saw(&mut self, t: i64) {
        self.first_ns = Some(self.first_ns.map_or(t, |f| f.min(t)));
        self.last_ns = Some(self.last_ns.map_or(t, |l| l.max(t)));
    }
}

fn text_summary(path: &Path) -> Result<TextSummary, CliError> {
    let header = text::read_header(path)?;
    let mut per_trace: Vec<TextTrace> = (0..header.traces)
        .map(|index| TextTrace {
            index,
            ..TextTrace::default()
        })
        .collect();
    let stats = text::for_each_message(path, 0, &mut |m, _| {
        let s = &mut per_trace[m.send_trace as usize];
        s.sent += 1;
        s.saw(m.send_ns);
        let r = &mut per_trace[m.recv_trace as usize];
        r.received += 1;
        r.saw(m.recv_ns);
    })?;
    Ok(TextSummary {
        path: path.to_path_buf(),
        format: "text",
        traces: header.traces,
        messages: stats.messages,
        same_trace: stats.same_trace,
        per_trace,
    })
}

fn render_text(s: &TextSummary) -> String {
    let mut out = format!(
        "{}\n  format         text messages\n  traces         {}\n  messages       {} ({} same-trace lines dropped)\n",
        s.path.display(),
        s.traces,
        s.messages,
        s.same_trace
    );
    for t in &s.per_trace {
        let span = match (t.first_ns, t.last_ns) {
            (Some(f), Some(l)) => format!("{:.9} s .. {:.9} s", f as f64 / 1e9, l as f64 / 1e9),
            _ => "no messages".into(),
        };
        out.push_str(&format!(
            "  trace {:<8} {} sent, {} received, {span}\n",
            t.index, t.sent, t.received
        ));
    }
    out
}

/// One file's report as JSON and as text.
fn describe(path: &Path) -> Result<(serde_json::Value, String), CliError> {
    match sniff(path)? {
        SourceKind::Trace => {
            let i = tsync_analyze::inspect(path)?;
            let mut v = serde_json::to_value(&i)?;
            if let Some(o) = v.as_object_mut() {
                o.insert("format".into(), "trace".into());
            }
            Ok((v, render_trace(&i)))
        }
        SourceKind::Text { .. } => {
            let s = text_summary(path)?;
            let v = serde_json::to_value(&s)?;
            Ok((v, render_text(&s)))
        }
    }
}

pub fn run(a: InfoCmd) -> CmdResult {
    let mut values = Vec::new();
    let mut texts = Vec::new();
    for f in &a.files {
        let (v, t) = describe(f)?;
        values.push(v);
        texts.push(t);
    }
    let out = if a.json {
        super::json(&values)?
    } else {
        texts.join("\n")
    };
    super::write_stdout(out.as_bytes())
}

/// The human-readable report for one file.
fn render_trace(info: &TraceSummary) -> String {
    let h = &info.header;
    let mut out = format!("{}\n", info.path.display());
    let mut line = |key: &str, value: String| out.push_str(&format!("  {key:<14} {value}\n"));
    line("node", format!("{} (host {})", h.node, h.hostname));
    line(
        "kernel",
        format!("{}, clocksource {}", h.kernel_release, h.clocksource),
    );
    line("boot id", h.boot_id.clone());
    for iface in &h.interfaces {
        line(
            "interface",
            format!(
                "{} #{} {}",
                iface.name,
                iface.ifindex,
                iface.addresses.join(" ")
            ),
        );
    }
    if let Some(skew) = &h.options.clock_skew {
        line(
            "clock skew",
            format!(
                "{} ns, {} ppm (injected on purpose)",
                skew.offset_ns, skew.drift_ppm
            ),
        );
    }
    let e = &info.events;
    line(
        "events",
        format!(
            "{} ({} sent, {} received; TCP/IPv4 {}, TCP/IPv6 {}, UDP/IPv4 {})",
            e.total, e.send, e.recv, e.tcp4, e.tcp6, e.udp4
        ),
    );
    if e.out_of_order > 0 {
        line(
            "out of order",
            format!("{} events (file not time-sorted)", e.out_of_order),
        );
    }
    line("size", info.size.describe());
    line(
        "lost",
        format!(
            "{} ({} send, {} receive, {} on the way to disk)",
            info.lost.total(),
            info.lost.send,
            info.lost.recv,
            info.lost.disk
        ),
    );
    if let (Some(first), Some(last)) = (info.first_ns, info.last_ns) {
        line(
            "time span",
            format!(
                "{:.6} s ({:.9} .. {:.9} s)",
                (last - first) as f64 * 1e-9,
                first as f64 * 1e-9,
                last as f64 * 1e-9
            ),
        );
    }
    let c = &info.clock;
    let mut clock = format!("{} samples", c.samples);
    if let Some(ppm) = c.monotonic_vs_raw_ppm {
        clock.push_str(&format!(", monotonic vs raw {ppm:+.3} ppm"));
    }
    if let Some(hz) = c.tsc_hz {
        clock.push_str(&format!(", TSC {:.3} MHz", hz * 1e-6));
    }
    line("clock", clock);
    for (key, value) in c.detail_lines() {
        line(key, value);
    }
    match &info.damage {
        None => line("file", "complete".into()),
        Some(d) => line(
            "file",
            format!(
                "DAMAGED: {} at byte {}; {} byte(s) not read",
                d.reason, d.offset, d.bytes_discarded
            ),
        ),
    }
    out
}
