//! Exports of every captured event on the common timebase: pcapng (Wireshark, tshark), JSON
//! Lines, CSV and Chrome trace-event JSON (Perfetto).
//!
//! Users debug with the tools they know. After synchronization, an export puts the events of all
//! nodes on one timeline: each event carries its node, direction, original and corrected time,
//! the header digest and, where the matching found one, the peer event of the same packet.
//!
//! All writers are streaming ([`EventSink`]): events in, bytes out, nothing buffered beyond one
//! record, so a 10 GB trace set exports in constant memory. The caller feeds the events in the
//! order it wants them in the file, normally by corrected time ([`Timeline::export`](crate::Timeline::export) merges the
//! per-trace streams).
//!
//! pcapng: one interface per node (named after the node, link type raw IP, nanosecond
//! timestamps), direction in the packet flags, and packets rebuilt from the digests as valid
//! IPv4/IPv6 + TCP/UDP headers. The payload is never recorded, so each packet is stored
//! truncated, as a capture with a small snap length would: captured length = the rebuilt headers
//! (plus UDP's first 8 payload bytes), original length = the IP total length from the digest.
//! Fields the digest does not hold are filled with fixed values: IP ID 0, DF set, TTL/hop limit
//! 64, TCP window 65535, urgent pointer 0; the IP and TCP options, whose length the digest keeps
//! but not their content, become an End of Option List followed by zero padding.

use pcap_file::pcapng::PcapNgWriter;
use pcap_file::pcapng::blocks::enhanced_packet::{EnhancedPacketBlock, EnhancedPacketOption};
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::blocks::section_header::{SectionHeaderBlock, SectionHeaderOption};
use pcap_file::{DataLink, Endianness};
use serde::Serialize;

use crate::timeline::{EventSink, ExportEvent, SinkError};

mod chrome;
mod pcapng;
mod records;

pub use chrome::ChromeExporter;
pub use pcapng::{PcapngExporter, RebuiltPacket, rebuild_packet};
pub use records::{CSV_COLUMNS, CsvExporter, EventRecord, JsonlExporter};
use records::{direction_name, node_name};
use std::borrow::Cow;
use std::fmt;
use std::io::Write;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::str::FromStr;
use std::time::Duration;
use tsync_common::{ETH_P_IPV6, IPPROTO_TCP, IPPROTO_UDP, PacketEvent, direction, kind};

/// Output format of `tsync-analyze export --format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExportFormat {
    /// pcapng (Wireshark, tshark): packets rebuilt from the digests.
    Pcapng,
    /// JSON Lines: one [`EventRecord`] object per line.
    Jsonl,
    /// CSV with a header row: one [`EventRecord`] per row.
    Csv,
    /// Chrome trace-event JSON (Perfetto, chrome://tracing): a process per node, a flow per
    /// matched message.
    Chrome,
}

impl FromStr for ExportFormat {
    type Err = ExportError;
    fn from_str(s: &str) -> Result<Self, ExportError> {
        match s {
            "pcapng" => Ok(ExportFormat::Pcapng),
            "jsonl" => Ok(ExportFormat::Jsonl),
            "csv" => Ok(ExportFormat::Csv),
            "chrome" => Ok(ExportFormat::Chrome),
            other => Err(ExportError::UnknownFormat(other.to_string())),
        }
    }
}

impl fmt::Display for ExportFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ExportFormat::Pcapng => "pcapng",
            ExportFormat::Jsonl => "jsonl",
            ExportFormat::Csv => "csv",
            ExportFormat::Chrome => "chrome",
        })
    }
}

/// Settings of an export.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportOptions {
    /// pcapng only: added to every corrected time to make it an absolute (Unix epoch) time, as
    /// pcapng readers expect; e.g. the reference trace's `start_realtime_ns −
    /// start_monotonic_ns`. 0 keeps the corrected times as they are (shown as 1970 dates).
    pub pcap_time_base_ns: i64,
    /// pcapng only: a packet comment per event with its node, event number, original and
    /// corrected time and matched peer (about 100 bytes per packet; default on).
    pub pcap_comments: bool,
    /// chrome only: the document's `metadata` member (the pairs' accuracy, the reference).
    pub chrome_metadata: serde_json::Value,
}

impl Default for ExportOptions {
    fn default() -> Self {
        ExportOptions {
            pcap_time_base_ns: 0,
            pcap_comments: true,
            chrome_metadata: serde_json::Value::Null,
        }
    }
}

/// Why an export could not be written.
#[derive(thiserror::Error, Debug)]
pub enum ExportError {
    /// Writing the output failed.
    #[error("cannot write the export: {0}")]
    Io(#[from] std::io::Error),
    /// The pcapng writer failed.
    #[error("cannot write the pcapng export: {0}")]
    Pcap(#[from] pcap_file::PcapError),
    /// The CSV writer failed.
    #[error("cannot write the CSV export: {0}")]
    Csv(#[from] csv::Error),
    /// Not the name of a format (the name given).
    #[error("unknown export format `{0}`: use pcapng, jsonl, csv or chrome")]
    UnknownFormat(String),
    /// An event names a node index outside the node list.
    #[error("event {index} names node {node}, but only {nodes} nodes were given to the export")]
    NoSuchNode {
        /// The node index the event names.
        node: usize,
        /// Index of the event in its node's trace.
        index: u64,
        /// Number of node names the exporter was given.
        nodes: usize,
    },
    /// An event's pcapng time would be before the Unix epoch (no time base given, or a wrong one).
    #[error(
        "event {index} of node `{node}` would be stamped {ns} ns before 1970 in pcapng; give a \
         time base (the reference trace's realtime start) so corrected times become absolute"
    )]
    NegativeTime {
        /// Name of the event's node.
        node: String,
        /// Index of the event in its node's trace.
        index: u64,
        /// The pcapng time (corrected time plus time base) in ns, negative.
        ns: i64,
    },
}

/// The writer for `format` over `out` (pass a buffered writer). `nodes` are the node names, in
/// node-index order.
pub fn exporter<'w, W: Write + 'w>(
    format: ExportFormat,
    out: W,
    nodes: &[String],
    options: &ExportOptions,
) -> Result<Box<dyn EventSink + 'w>, ExportError> {
    Ok(match format {
        ExportFormat::Pcapng => Box::new(PcapngExporter::new(out, nodes, options)?),
        ExportFormat::Jsonl => Box::new(JsonlExporter::new(out, nodes)),
        ExportFormat::Csv => Box::new(CsvExporter::new(out, nodes)?),
        ExportFormat::Chrome => Box::new(ChromeExporter::new(
            out,
            nodes,
            options.chrome_metadata.clone(),
        )?),
    })
}

#[cfg(test)]
mod tests;

/// The exporters as sinks of the timeline's event stream.
macro_rules! event_sinks {
    ($($exporter:ident),*) => {$(
        impl<W: Write> EventSink for $exporter<W> {
            fn write_event(&mut self, e: &ExportEvent<'_>) -> Result<(), SinkError> {
                Ok(self.write(e)?)
            }

            fn finish(&mut self) -> Result<(), SinkError> {
                Ok(self.close()?)
            }
        }
    )*};
}

event_sinks!(PcapngExporter, JsonlExporter, CsvExporter, ChromeExporter);
