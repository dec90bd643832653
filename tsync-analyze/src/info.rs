//! `tsync-analyze info`: what a trace file holds, read in one streaming pass.
//!
//! A user collecting files from many nodes first wants to know whether each recording is whole:
//! which node, how many events, how many the kernel lost, whether the file was cut short, and how
//! the node's clocks behaved (NTP slewing shows as a CLOCK_MONOTONIC vs CLOCK_MONOTONIC_RAW rate).

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Serialize;
use tsync_common::format::{ClockSample, Header, LostCounts, TraceReader};
use tsync_common::{PacketEvent, direction, kind};

/// Everything `info` reports about one file.
#[derive(Serialize, Debug, Clone)]
pub struct TraceInfo {
    pub path: PathBuf,
    pub header: Header,
    pub events: EventCounts,
    /// Lost-event counters (the footer's, or the last ones written before a cut).
    pub lost: LostCounts,
    /// First and last event time (ns, as written: after `--clock-skew`).
    pub first_ns: Option<u64>,
    pub last_ns: Option<u64>,
    pub clock: ClockSummary,
    /// True when the file ends with its end chunk.
    pub complete: bool,
    /// What could not be read, if anything.
    pub damage: Option<DamageInfo>,
}

/// Event counts by direction and kind.
#[derive(Serialize, Debug, Clone, Default, PartialEq, Eq)]
pub struct EventCounts {
    pub total: u64,
    pub send: u64,
    pub recv: u64,
    pub tcp4: u64,
    pub tcp6: u64,
    pub udp4: u64,
    /// Events whose time is earlier than the event before them in the file.
    pub out_of_order: u64,
}

/// The recorded clock samples, summarized.
#[derive(Serialize, Debug, Clone, Default, PartialEq)]
pub struct ClockSummary {
    pub samples: usize,
    /// CLOCK_REALTIME − CLOCK_MONOTONIC at the first sample (ns): maps event times to wall time.
    pub realtime_minus_monotonic_ns: Option<i64>,
    /// Rate of CLOCK_MONOTONIC against CLOCK_MONOTONIC_RAW over the samples, in ppm (NTP slewing
    /// and `--clock-skew` show here).
    pub monotonic_vs_raw_ppm: Option<f64>,
    /// TSC ticks per CLOCK_MONOTONIC_RAW second, where the CPU has a TSC.
    pub tsc_hz: Option<f64>,
}

/// Where a file is damaged.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct DamageInfo {
    pub offset: u64,
    pub bytes_discarded: u64,
    pub reason: String,
}

impl EventCounts {
    fn add(&mut self, events: &[PacketEvent], last_ns: &mut Option<u64>) {
        for e in events {
            self.total += 1;
            match e.direction {
                direction::SEND => self.send += 1,
                _ => self.recv += 1,
            }
            match e.kind {
                kind::TCP4 => self.tcp4 += 1,
                kind::TCP6 => self.tcp6 += 1,
                _ => self.udp4 += 1,
            }
            if last_ns.is_some_and(|last| e.ts_ns < last) {
                self.out_of_order += 1;
            }
            *last_ns = Some(e.ts_ns);
        }
    }
}

impl ClockSummary {
    fn from_samples(samples: &[ClockSample]) -> Self {
        let (Some(first), Some(last)) = (samples.first(), samples.last()) else {
            return ClockSummary::default();
        };
        let raw_span = last.monotonic_raw_ns as f64 - first.monotonic_raw_ns as f64;
        let rate = |span: f64| (raw_span > 0.0).then(|| span / raw_span);
        ClockSummary {
            samples: samples.len(),
            realtime_minus_monotonic_ns: Some(
                first.realtime_ns.wrapping_sub(first.monotonic_ns as i64),
            ),
            monotonic_vs_raw_ppm: rate(last.monotonic_ns as f64 - first.monotonic_ns as f64)
                .map(|r| (r - 1.0) * 1e6),
            tsc_hz: rate(last.tsc as f64 - first.tsc as f64)
                .filter(|&r| r > 0.0)
                .map(|r| r * 1e9),
        }
    }
}

/// Reads `path` once, start to end, in constant memory.
pub fn inspect(path: &Path) -> anyhow::Result<TraceInfo> {
    let mut reader =
        TraceReader::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut events = EventCounts::default();
    let (mut first_ns, mut last_ns) = (None, None);
    while let Some(chunk) = reader
        .next_events()
        .with_context(|| format!("cannot read {}", path.display()))?
    {
        if first_ns.is_none() {
            first_ns = chunk.first().map(|e| e.ts_ns);
        }
        events.add(chunk, &mut last_ns);
    }
    Ok(TraceInfo {
        path: path.to_owned(),
        header: reader.header().clone(),
        events,
        lost: reader.lost().clone(),
        first_ns,
        last_ns,
        clock: ClockSummary::from_samples(reader.clock_samples()),
        complete: reader.footer().is_some(),
        damage: reader.damage().map(|d| DamageInfo {
            offset: d.offset,
            bytes_discarded: d.bytes_discarded,
            reason: d.reason.clone(),
        }),
    })
}

/// The human-readable report for one file.
pub fn render(info: &TraceInfo) -> String {
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
    line(
        "lost",
        format!(
            "{} ({} send, {} receive)",
            info.lost.total(),
            info.lost.send,
            info.lost.recv
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
