//! What `info` reports about a CTF trace, read in one streaming pass: who recorded it (tracer,
//! host, kernel), its clock, its events (all of them, by class), the network events found and
//! what became of them, and what the tracer lost (discarded events, missing packets) or what
//! could not be read.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::CtfError;
use super::metadata::EnvValue;
use super::trace::{CtfTrace, NetCounts};

/// The trace's clock class.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ClockInfo {
    /// `name`.
    pub name: String,
    /// `freq`, Hz.
    pub freq: u64,
    /// `offset_s`.
    pub offset_s: i64,
    /// `offset` (cycles).
    pub offset: i64,
    /// The offset from the epoch in ns: realtime = this + the clock's value in ns.
    pub offset_ns: i64,
    /// `uuid`.
    pub uuid: Option<String>,
    /// `description`.
    pub description: Option<String>,
}

/// One stream file.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct StreamInfo {
    /// File name.
    pub file: String,
    /// Packets read.
    pub packets: u64,
    /// Events read.
    pub events: u64,
    /// The tracer's count of discarded events for this stream (its last packet's).
    pub events_discarded: u64,
    /// Packets missing from `packet_seq_num`.
    pub lost_packets: u64,
    /// Where the stream stopped being readable, if it did.
    pub damage: Option<String>,
}

/// A network event class the trace declares.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct NetClassInfo {
    /// Event name.
    pub name: String,
    /// `"send"` or `"recv"`.
    pub direction: &'static str,
    /// `"network_header"` (LTTng ≥ 2.9), `"addon"` (`lttng-addons`) or `"no_header"` (no
    /// digest possible).
    pub layout: &'static str,
    /// Events of the class read.
    pub events: u64,
}

/// Everything `info` reports about a CTF trace.
#[derive(Clone, Debug, Serialize)]
pub struct CtfSummary {
    /// The trace directory.
    pub path: PathBuf,
    /// `"ctf"`.
    pub format: &'static str,
    /// Tracer name and version from `env` (`lttng-modules 2.10.0`).
    pub tracer: String,
    /// `env.hostname`: the node's name.
    pub host: String,
    /// `env.domain` (`kernel`, `ust`).
    pub domain: String,
    /// Trace UUID.
    pub uuid: Option<String>,
    /// The whole `env` block.
    pub env: BTreeMap<String, EnvValue>,
    /// The clock the timestamps count.
    pub clock: Option<ClockInfo>,
    /// Event classes declared.
    pub event_classes: usize,
    /// Events read, all classes.
    pub events: u64,
    /// Events read per class (classes with events only).
    pub per_class: BTreeMap<String, u64>,
    /// First and last event, ns on the trace's clock (add `clock.offset_ns` for realtime).
    pub first_ns: Option<u64>,
    /// Last event, ns on the trace's clock.
    pub last_ns: Option<u64>,
    /// The network event classes declared.
    pub network_classes: Vec<NetClassInfo>,
    /// The network events read, by what became of them.
    pub network: NetCounts,
    /// Devices the network events went through (`[number, name]`: the number stands for the
    /// interface index in exports).
    pub devices: Vec<(u32, String)>,
    /// Events the tracer discarded (all kinds; LTTng's `events_discarded`, summed over streams).
    pub events_discarded: u64,
    /// Packets missing from the streams' sequence numbers.
    pub lost_packets: u64,
    /// The stream files.
    pub streams: Vec<StreamInfo>,
    /// Whether every stream was read to its end.
    pub complete: bool,
}

/// Reads the CTF trace in `dir` once, start to end, one packet per stream in memory.
pub fn inspect(dir: &Path) -> Result<CtfSummary, CtfError> {
    let mut t = CtfTrace::open(dir)?;
    while t.next_chunk().is_some() {}
    let class = t.class();
    let clock = t.program().clock.clone();
    let mut per_class: BTreeMap<String, u64> = BTreeMap::new();
    let mut class_counts = vec![0u64; class.events.len()];
    let mut span: Option<(u64, u64)> = None;
    let mut streams = Vec::new();
    for (file, s) in t.stream_stats() {
        for (k, n) in s.per_class.iter().enumerate() {
            class_counts[k] += n;
        }
        if let Some((a, b)) = s.span {
            span = Some(span.map_or((a, b), |(x, y)| (x.min(a), y.max(b))));
        }
        streams.push(StreamInfo {
            file: file.to_string(),
            packets: s.packets,
            events: s.events,
            events_discarded: s.discarded,
            lost_packets: s.lost_packets,
            damage: None,
        });
    }
    for (s, d) in streams.iter_mut().zip(t.stream_damages()) {
        s.damage = d.map(|d| d.to_string());
    }
    let complete = streams.iter().all(|s| s.damage.is_none());
    let mut network_classes = Vec::new();
    for (k, e) in class.events.iter().enumerate() {
        if class_counts[k] > 0 {
            *per_class.entry(e.name.clone()).or_default() += class_counts[k];
        }
        if let Some(n) = t.program().events[k].net {
            network_classes.push(NetClassInfo {
                name: e.name.clone(),
                direction: if n.direction == tsync_common::direction::SEND {
                    "send"
                } else {
                    "recv"
                },
                layout: match (n.usable, n.addon) {
                    (false, _) => "no_header",
                    (true, true) => "addon",
                    (true, false) => "network_header",
                },
                events: class_counts[k],
            });
        }
    }
    let ns = |c: u64| clock.as_ref().map_or(c, |k| k.ns(c));
    Ok(CtfSummary {
        path: dir.to_path_buf(),
        format: "ctf",
        tracer: t.header().options.agent_version.clone(),
        host: class.env("hostname").unwrap_or_default(),
        domain: class.env("domain").unwrap_or_default(),
        uuid: class.uuid.as_ref().map(super::metadata::uuid_text),
        env: class.env.iter().cloned().collect(),
        clock: clock.as_ref().map(|c| ClockInfo {
            name: c.name.clone(),
            freq: c.freq,
            offset_s: c.offset_s,
            offset: c.offset,
            offset_ns: c.offset_ns(),
            uuid: c.uuid.clone(),
            description: c.description.clone(),
        }),
        event_classes: class.events.len(),
        events: streams.iter().map(|s| s.events).sum(),
        per_class,
        first_ns: span.map(|s| ns(s.0)),
        last_ns: span.map(|s| ns(s.1)),
        network_classes,
        network: t.net_counts().clone(),
        devices: t.devices(),
        events_discarded: t.discarded(),
        lost_packets: t.lost_packets(),
        complete,
        streams,
    })
}
