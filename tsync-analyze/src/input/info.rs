//! `tsync-analyze info`: what a trace file holds, read in one streaming pass.
//!
//! A user collecting files from many nodes first wants to know whether each recording is whole:
//! which node, how many events, how many the kernel lost, whether the file was cut short, and how
//! the node's clocks behaved (NTP slewing shows as a CLOCK_MONOTONIC vs CLOCK_MONOTONIC_RAW rate).

use std::path::{Path, PathBuf};

use serde::Serialize;
use tsync_common::format::{ClockSample, Header, LostCounts};

use crate::input::InputError;
use crate::input::tracefile::TraceFile;
use tsync_common::{PacketEvent, direction, kind};

/// Everything `info` reports about one file.
#[derive(Serialize, Debug, Clone)]
pub struct TraceSummary {
    /// The file, as given.
    pub path: PathBuf,
    /// The file's header: node, boot, clocksource, interfaces and agent options.
    pub header: Header,
    /// Events read, by direction and kind.
    pub events: EventCounts,
    /// Lost-event counters (the footer's, or the last ones written before a cut).
    pub lost: LostCounts,
    /// First and last event time (ns, as written: after `--clock-skew`).
    pub first_ns: Option<u64>,
    /// Last event time in the file (ns, as written); None when the file has no events.
    pub last_ns: Option<u64>,
    /// What the node's clock samples say about its clocks.
    pub clock: ClockSummary,
    /// True when the file ends with its end chunk.
    pub complete: bool,
    /// What could not be read, if anything.
    pub damage: Option<DamageInfo>,
}

/// Event counts by direction and kind.
#[derive(Serialize, Debug, Clone, Default, PartialEq, Eq)]
pub struct EventCounts {
    /// All events read.
    pub total: u64,
    /// Events seen by the send hook (`net_dev_queue`).
    pub send: u64,
    /// Events seen by the receive hook (`netif_receive_skb`).
    pub recv: u64,
    /// IPv4 + TCP events.
    pub tcp4: u64,
    /// IPv6 + TCP events.
    pub tcp6: u64,
    /// IPv4 + UDP events (any kind that is not TCP is counted here).
    pub udp4: u64,
    /// Events whose time is earlier than the event before them in the file.
    pub out_of_order: u64,
}

/// The recorded clock samples, summarized.
#[derive(Serialize, Debug, Clone, Default, PartialEq)]
pub struct ClockSummary {
    /// Clock samples in the file (the rates below need two, spread over time).
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
    /// Byte offset of the first chunk that could not be read.
    pub offset: u64,
    /// Bytes from there to the end of the file, which were not read.
    pub bytes_discarded: u64,
    /// What was wrong with that chunk.
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
pub fn inspect(path: &Path) -> Result<TraceSummary, InputError> {
    let mut reader = TraceFile::open(path)?;
    let mut events = EventCounts::default();
    let (mut first_ns, mut last_ns) = (None, None);
    while let Some(chunk) = reader.next_chunk()? {
        if first_ns.is_none() {
            first_ns = chunk.first().map(|e| e.ts_ns);
        }
        events.add(chunk, &mut last_ns);
    }
    Ok(TraceSummary {
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
