//! `tsync-analyze info`: what each input holds — for a trace file its header, event counts,
//! lost events, clock samples and time span; for a text message file its traces and messages;
//! for an LTTng (CTF) trace directory, per trace: tracer, host, clock, events, the network
//! events found and what the tracer discarded; for a span file its nodes, spans and the
//! messages their pairs give, with every count of what could not be paired.

use std::path::{Path, PathBuf};

use clap::Args;
use serde::Serialize;
use tsync_analyze::ctf::{self, summary::CtfSummary};
use tsync_analyze::{SourceKind, TraceSummary, sniff, text};

use super::{CliError, CmdResult};

#[derive(Args)]
pub struct InfoCmd {
    /// Trace files (tsync-agent), text message files, OpenTelemetry span files and/or LTTng
    /// (CTF) trace directories.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Print a JSON array with one object per file (`"format": "trace"`, `"text"`, `"spans"` or
    /// `"ctf"`, one per trace of a directory).
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

/// One input's reports as JSON and as text (a directory: one per CTF trace in it).
fn describe(path: &Path) -> Result<Vec<(serde_json::Value, String)>, CliError> {
    if path.is_dir() {
        let traces = ctf::find_traces(path)?;
        if traces.is_empty() {
            sniff(path)?; // says what is wrong
        }
        return traces
            .iter()
            .map(|t| {
                let s = ctf::summary::inspect(t)?;
                Ok((serde_json::to_value(&s)?, render_ctf(&s)))
            })
            .collect();
    }
    Ok(vec![describe_file(path)?])
}

fn describe_file(path: &Path) -> Result<(serde_json::Value, String), CliError> {
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
        SourceKind::Spans { .. } => {
            let options = tsync_analyze::spans::SpanOptions::default();
            let stats = tsync_analyze::spans::inspect(path, &options)?;
            let mut v = serde_json::to_value(&stats)?;
            if let Some(o) = v.as_object_mut() {
                o.insert("format".into(), "spans".into());
            }
            let mut prefix = Vec::with_capacity(4096);
            std::io::Read::read_to_end(
                &mut std::io::Read::take(std::fs::File::open(path)?, 4096),
                &mut prefix,
            )?;
            let format = tsync_analyze::spans::format_name(&prefix);
            let mut text = format!("{}\n  format         {format}\n", path.display());
            for line in stats.warnings() {
                let line = line.split_once(": ").map_or(line.as_str(), |(_, l)| l);
                text.push_str(&format!("  {line}\n"));
            }
            Ok((v, text))
        }
        SourceKind::Ctf => unreachable!("directories are described above"),
    }
}

pub fn run(a: InfoCmd) -> CmdResult {
    let mut values = Vec::new();
    let mut texts = Vec::new();
    for f in &a.files {
        for (v, t) in describe(f)? {
            values.push(v);
            texts.push(t);
        }
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
    // Interface indexes repeat across namespaces: name the namespace when there are several.
    let several = h
        .interfaces
        .iter()
        .any(|i| i.netns_inode != h.interfaces[0].netns_inode);
    for iface in &h.interfaces {
        let netns = if several {
            format!(" (netns {})", iface.netns_inode)
        } else {
            String::new()
        };
        line(
            "interface",
            format!(
                "{} #{}{netns} {}",
                iface.name,
                iface.ifindex,
                iface.addresses.join(" ")
            ),
        );
    }
    for (key, value) in info.namespaces.lines(info.format_version) {
        line(key, value);
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
            "{} ({} sent, {} received; TCP/IPv4 {}, TCP/IPv6 {}, UDP/IPv4 {}, UDP/IPv6 {})",
            e.total, e.send, e.recv, e.tcp4, e.tcp6, e.udp4, e.udp6
        ),
    );
    if e.forwarded > 0 || e.encapsulated > 0 {
        line(
            "forwarded",
            format!(
                "{} packets received and sent on by the node (its pods' traffic, routed or \
                 bridged; a NAT changes the digest); {} events of tunnels' outer packets, \
                 digested by the packet inside",
                e.forwarded, e.encapsulated
            ),
        );
    }
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

/// The human-readable report for one CTF trace.
fn render_ctf(info: &CtfSummary) -> String {
    let mut out = format!("{}\n", info.path.display());
    let mut line = |key: &str, value: String| out.push_str(&format!("  {key:<14} {value}\n"));
    line("format", format!("CTF (LTTng), {} domain", info.domain));
    line("tracer", info.tracer.clone());
    line("host", info.host.clone());
    if let Some(k) = info.env.get("kernel_release") {
        line(
            "kernel",
            format!("{}", serde_json::to_value(k).unwrap_or_default()).replace('"', ""),
        );
    }
    match &info.clock {
        Some(c) => line(
            "clock",
            format!(
                "{} at {} Hz, offset {}.{:09} s from the epoch; no clock samples (LTTng \
                 records none): synchronized on this clock as recorded",
                c.name,
                c.freq,
                c.offset_ns.div_euclid(1_000_000_000),
                c.offset_ns.rem_euclid(1_000_000_000)
            ),
        ),
        None => line("clock", "none declared: timestamps taken as ns".into()),
    }
    line(
        "events",
        format!(
            "{} in {} stream file(s), {} event classes declared",
            info.events,
            info.streams.len(),
            info.event_classes
        ),
    );
    if let (Some(first), Some(last)) = (info.first_ns, info.last_ns) {
        line(
            "time span",
            format!(
                "{:.6} s ({:.9} .. {:.9} s)",
                last.saturating_sub(first) as f64 * 1e-9,
                first as f64 * 1e-9,
                last as f64 * 1e-9
            ),
        );
    }
    let mut top: Vec<(&String, &u64)> = info.per_class.iter().collect();
    top.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let shown: Vec<String> = top
        .iter()
        .take(5)
        .map(|(n, c)| format!("{n} {c}"))
        .collect();
    if !shown.is_empty() {
        line("most frequent", shown.join(", "));
    }
    if info.network_classes.is_empty() {
        line(
            "network",
            "no network event declared: nothing to synchronize on (record net_dev_queue and \
             netif_receive_skb)"
                .into(),
        );
    }
    for c in &info.network_classes {
        let layout = match c.layout {
            "network_header" => "with network_header",
            "addon" => "add-on (seq, ack_seq, flags)",
            _ => "WITHOUT network header: no digest",
        };
        line(
            "network event",
            format!(
                "{} ({}, {layout}): {} events",
                c.name, c.direction, c.events
            ),
        );
    }
    let n = &info.network;
    line(
        "digests",
        format!(
            "{} ({} sent, {} received; TCP/IPv4 {}, TCP/IPv6 {}, UDP/IPv4 {}, add-on {}); \
             skipped: {} not IP, {} other protocols, {} without header",
            n.send + n.recv,
            n.send,
            n.recv,
            n.tcp4,
            n.tcp6,
            n.udp4,
            n.tcp_addon,
            n.not_ip,
            n.other_protocol,
            n.no_header
        ),
    );
    if !info.devices.is_empty() {
        let d: Vec<String> = info
            .devices
            .iter()
            .map(|(i, n)| format!("{n} (#{i})"))
            .collect();
        line("devices", d.join(", "));
    }
    line(
        "lost",
        format!(
            "{} events discarded by the tracer, {} packets missing",
            info.events_discarded, info.lost_packets
        ),
    );
    for s in &info.streams {
        if let Some(d) = &s.damage {
            line("DAMAGED", d.clone());
        }
    }
    line(
        "trace",
        if info.complete {
            "complete".into()
        } else {
            "DAMAGED: the events before the damage were read".into()
        },
    );
    out
}
