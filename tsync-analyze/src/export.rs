//! Exports of every captured event on the common timebase: pcapng (Wireshark, tshark), JSON
//! Lines and CSV.
//!
//! Users debug with the tools they know. After synchronization, an export puts the events of all
//! nodes on one timeline: each event carries its node, direction, original and corrected time,
//! the header digest and, where the matching found one, the peer event of the same packet.
//!
//! All writers are streaming ([`EventSink`]): events in, bytes out, nothing buffered beyond one
//! record, so a 10 GB trace set exports in constant memory. The caller feeds the events in the
//! order it wants them in the file, normally by corrected time ([`merge_by_time`] merges the
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
use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;
use std::io::Write;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::str::FromStr;
use std::time::Duration;
use tsync_common::{ETH_P_IPV6, IPPROTO_TCP, IPPROTO_UDP, PacketEvent, direction, kind};

/// The event of the same packet on the other side: the `index`-th event of node `node`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct PeerRef {
    pub node: usize,
    pub index: u64,
}

/// One event to export.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExportEvent<'a> {
    /// Index of the node (trace) in the `nodes` list given to the writer.
    pub node: usize,
    /// Index of the event in its trace (file order), the target of [`PeerRef::index`].
    pub index: u64,
    pub event: &'a PacketEvent,
    /// Time on the node's own clock (ns).
    pub original_ns: i64,
    /// Time on the common timebase (ns), after the linear correction (and the CLC, if used).
    pub corrected_ns: i64,
    /// The matched event of the same packet, if any.
    pub peer: Option<PeerRef>,
}

/// Output format of `tsync-analyze export --format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExportFormat {
    Pcapng,
    Jsonl,
    Csv,
}

impl FromStr for ExportFormat {
    type Err = ExportError;
    fn from_str(s: &str) -> Result<Self, ExportError> {
        match s {
            "pcapng" => Ok(ExportFormat::Pcapng),
            "jsonl" => Ok(ExportFormat::Jsonl),
            "csv" => Ok(ExportFormat::Csv),
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
}

impl Default for ExportOptions {
    fn default() -> Self {
        ExportOptions {
            pcap_time_base_ns: 0,
            pcap_comments: true,
        }
    }
}

#[derive(thiserror::Error, Debug)]
pub enum ExportError {
    #[error("cannot write the export: {0}")]
    Io(#[from] std::io::Error),
    #[error("cannot write the pcapng export: {0}")]
    Pcap(#[from] pcap_file::PcapError),
    #[error("cannot write the CSV export: {0}")]
    Csv(#[from] csv::Error),
    #[error("unknown export format `{0}`: use pcapng, jsonl or csv")]
    UnknownFormat(String),
    #[error("event {index} names node {node}, but only {nodes} nodes were given to the export")]
    NoSuchNode {
        node: usize,
        index: u64,
        nodes: usize,
    },
    #[error(
        "event {index} of node `{node}` would be stamped {ns} ns before 1970 in pcapng; give a \
         time base (the reference trace's realtime start) so corrected times become absolute"
    )]
    NegativeTime { node: String, index: u64, ns: i64 },
}

/// A streaming exporter.
pub trait EventSink {
    /// Writes one event.
    fn write_event(&mut self, event: &ExportEvent<'_>) -> Result<(), ExportError>;
    /// Flushes everything; the sink must not be used afterwards.
    fn finish(&mut self) -> Result<(), ExportError>;
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
    })
}

/// Merges per-trace event streams, each sorted by `key`, into one sorted stream (k-way merge:
/// one pending item per stream in memory). Ties keep the stream order.
pub fn merge_by_time<T, I, K>(streams: Vec<I>, key: K) -> impl Iterator<Item = T>
where
    I: Iterator<Item = T>,
    K: Fn(&T) -> i64,
{
    let mut streams = streams;
    let mut pending: Vec<Option<T>> = streams.iter_mut().map(Iterator::next).collect();
    let mut heap: BinaryHeap<Reverse<(i64, usize)>> = pending
        .iter()
        .enumerate()
        .filter_map(|(i, item)| item.as_ref().map(|x| Reverse((key(x), i))))
        .collect();
    std::iter::from_fn(move || {
        let Reverse((_, i)) = heap.pop()?;
        let item = pending[i].take();
        pending[i] = streams[i].next();
        if let Some(next) = &pending[i] {
            heap.push(Reverse((key(next), i)));
        }
        item
    })
}

// ---------------------------------------------------------------------------------------------
// pcapng

/// Writes pcapng: a section, one interface per node, one enhanced packet block per event.
pub struct PcapngExporter<W: Write> {
    writer: PcapNgWriter<W>,
    nodes: Vec<String>,
    time_base_ns: i64,
    comments: bool,
}

/// pcapng `epb_flags` direction bits.
const EPB_INBOUND: u32 = 0b01;
const EPB_OUTBOUND: u32 = 0b10;

impl<W: Write> PcapngExporter<W> {
    pub fn new(out: W, nodes: &[String], options: &ExportOptions) -> Result<Self, ExportError> {
        let section = SectionHeaderBlock {
            endianness: Endianness::Little,
            options: vec![
                SectionHeaderOption::UserApplication(Cow::Owned(format!(
                    "tsync-analyze {}",
                    env!("CARGO_PKG_VERSION")
                ))),
                SectionHeaderOption::Comment(Cow::Borrowed(
                    "tsync export: packets rebuilt from header digests (no payload), \
                     timestamps on the common timebase",
                )),
            ],
            ..SectionHeaderBlock::default()
        };
        let mut writer = PcapNgWriter::with_section_header(out, section)?;
        for name in nodes {
            writer.write_pcapng_block(InterfaceDescriptionBlock {
                linktype: DataLink::RAW,
                snaplen: 0,
                options: vec![
                    InterfaceDescriptionOption::IfName(Cow::Owned(name.clone())),
                    InterfaceDescriptionOption::IfDescription(Cow::Owned(format!(
                        "tsync trace of node {name}"
                    ))),
                    InterfaceDescriptionOption::IfTsResol(9),
                ],
            })?;
        }
        Ok(PcapngExporter {
            writer,
            nodes: nodes.to_vec(),
            time_base_ns: options.pcap_time_base_ns,
            comments: options.pcap_comments,
        })
    }
}

impl<W: Write> EventSink for PcapngExporter<W> {
    fn write_event(&mut self, e: &ExportEvent<'_>) -> Result<(), ExportError> {
        let name = node_name(&self.nodes, e)?;
        let ns = e.corrected_ns.saturating_add(self.time_base_ns);
        if ns < 0 {
            return Err(ExportError::NegativeTime {
                node: name.to_string(),
                index: e.index,
                ns,
            });
        }
        let packet = rebuild_packet(e.event);
        let flags = if e.event.direction == direction::SEND {
            EPB_OUTBOUND
        } else {
            EPB_INBOUND
        };
        let mut options = vec![EnhancedPacketOption::Flags(flags)];
        if self.comments {
            options.push(EnhancedPacketOption::Comment(Cow::Owned(
                self.comment(e, name),
            )));
        }
        self.writer.write_pcapng_block(EnhancedPacketBlock {
            interface_id: e.node as u32,
            timestamp: Duration::from_nanos(ns as u64),
            original_len: packet.original_len,
            data: Cow::Borrowed(&packet.bytes),
            options,
        })?;
        Ok(())
    }

    fn finish(&mut self) -> Result<(), ExportError> {
        self.writer.get_mut().flush()?;
        Ok(())
    }
}

impl<W: Write> PcapngExporter<W> {
    fn comment(&self, e: &ExportEvent<'_>, name: &str) -> String {
        let mut comment = format!(
            "tsync: {} event {} of {}, original {} ns, corrected {} ns",
            direction_name(e.event.direction),
            e.index,
            name,
            e.original_ns,
            e.corrected_ns
        );
        if let Some(peer) = e.peer {
            let peer_name = self.nodes.get(peer.node).map_or("?", String::as_str);
            comment.push_str(&format!(", peer event {} of {}", peer.index, peer_name));
        }
        comment
    }
}

/// A packet rebuilt from a digest: the captured bytes and the original IP length.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RebuiltPacket {
    pub bytes: Vec<u8>,
    pub original_len: u32,
}

/// Rebuilds the IP and transport headers of a digest (see the module doc for the fixed fields).
///
/// Inconsistent digests are made consistent rather than rejected, so that readers never see a
/// malformed packet: the IP total length is at least the rebuilt headers, a UDP length at least 8.
pub fn rebuild_packet(e: &PacketEvent) -> RebuiltPacket {
    let is_v6 = e.kind == kind::TCP6 || e.network_protocol == ETH_P_IPV6;
    let transport = transport_header(e);
    let ip_header_len = if is_v6 {
        40
    } else {
        4 * usize::from(e.ihl.clamp(5, 15))
    };
    let captured_after_ip = transport.len();
    let min_total = ip_header_len + captured_after_ip;
    let total = if e.transport_protocol == IPPROTO_UDP && !e.is_tcp() {
        ip_header_len + usize::from(e.udp_len.max(8))
    } else {
        usize::from(e.tot_len)
    }
    .max(min_total)
    .min(usize::from(u16::MAX) + if is_v6 { 40 } else { 0 });
    let mut bytes = Vec::with_capacity(min_total);
    if is_v6 {
        bytes.extend_from_slice(&ipv6_header(e, total - 40));
    } else {
        bytes.extend_from_slice(&ipv4_header(e, ip_header_len, total));
    }
    let mut transport = transport;
    let checksum_at = if e.is_tcp() { 16 } else { 6 };
    let sum = transport_checksum(e, is_v6, &transport);
    transport[checksum_at..checksum_at + 2].copy_from_slice(&sum.to_be_bytes());
    bytes.extend_from_slice(&transport);
    RebuiltPacket {
        bytes,
        original_len: total as u32,
    }
}

fn ipv4_header(e: &PacketEvent, header_len: usize, total: usize) -> Vec<u8> {
    let mut h = vec![0u8; header_len];
    h[0] = 0x40 | (header_len / 4) as u8;
    h[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    h[6] = 0x40; // don't fragment
    h[8] = 64;
    h[9] = protocol(e);
    h[12..16].copy_from_slice(&e.saddr[..4]);
    h[16..20].copy_from_slice(&e.daddr[..4]);
    // Options (not recorded) stay zero: End of Option List, then padding.
    let sum = internet_checksum(&h, 0);
    h[10..12].copy_from_slice(&sum.to_be_bytes());
    h
}

fn ipv6_header(e: &PacketEvent, payload_len: usize) -> [u8; 40] {
    let mut h = [0u8; 40];
    h[0] = 0x60;
    h[4..6].copy_from_slice(&(payload_len as u16).to_be_bytes());
    h[6] = protocol(e);
    h[7] = 64;
    h[8..24].copy_from_slice(&e.saddr);
    h[24..40].copy_from_slice(&e.daddr);
    h
}

fn protocol(e: &PacketEvent) -> u8 {
    if e.is_tcp() { IPPROTO_TCP } else { IPPROTO_UDP }
}

/// The TCP header (zeroed options up to the recorded data offset) or the UDP header plus the
/// recorded first payload bytes; checksum field zero.
fn transport_header(e: &PacketEvent) -> Vec<u8> {
    if e.is_tcp() {
        let len = 4 * usize::from(e.doff.clamp(5, 15));
        let mut h = vec![0u8; len];
        h[0..2].copy_from_slice(&e.source.to_be_bytes());
        h[2..4].copy_from_slice(&e.dest.to_be_bytes());
        h[4..8].copy_from_slice(&e.seq.to_be_bytes());
        h[8..12].copy_from_slice(&e.ack_seq.to_be_bytes());
        h[12] = ((len / 4) as u8) << 4;
        h[13] = e.tcp_flags;
        h[14..16].copy_from_slice(&u16::MAX.to_be_bytes());
        // Options (not recorded) stay zero: End of Option List, then padding.
        h
    } else {
        let udp_len = e.udp_len.max(8);
        let data = usize::from(udp_len - 8).min(e.udp_data.len());
        let mut h = vec![0u8; 8 + data];
        h[0..2].copy_from_slice(&e.source.to_be_bytes());
        h[2..4].copy_from_slice(&e.dest.to_be_bytes());
        h[4..6].copy_from_slice(&udp_len.to_be_bytes());
        h[8..].copy_from_slice(&e.udp_data[..data]);
        h
    }
}

/// TCP/UDP checksum over the pseudo-header and the rebuilt (truncated) segment.
fn transport_checksum(e: &PacketEvent, is_v6: bool, segment: &[u8]) -> u16 {
    let mut pseudo = Vec::with_capacity(40);
    let len = segment.len() as u32;
    if is_v6 {
        pseudo.extend_from_slice(&e.saddr);
        pseudo.extend_from_slice(&e.daddr);
        pseudo.extend_from_slice(&len.to_be_bytes());
        pseudo.extend_from_slice(&[0, 0, 0, protocol(e)]);
    } else {
        pseudo.extend_from_slice(&e.saddr[..4]);
        pseudo.extend_from_slice(&e.daddr[..4]);
        pseudo.extend_from_slice(&[0, protocol(e)]);
        pseudo.extend_from_slice(&(len as u16).to_be_bytes());
    }
    let sum = internet_checksum(segment, ones_complement_sum(&pseudo));
    if sum == 0 && !e.is_tcp() {
        0xFFFF // UDP: 0 would mean "no checksum"
    } else {
        sum
    }
}

fn ones_complement_sum(data: &[u8]) -> u32 {
    let mut sum: u32 = 0;
    for chunk in data.chunks(2) {
        let word = u16::from_be_bytes([chunk[0], *chunk.get(1).unwrap_or(&0)]);
        sum += u32::from(word);
    }
    sum
}

/// RFC 1071 checksum of `data`, starting from a partial sum.
fn internet_checksum(data: &[u8], initial: u32) -> u16 {
    let mut sum = initial as u64 + ones_complement_sum(data) as u64;
    while sum >> 16 != 0 {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
}

// ---------------------------------------------------------------------------------------------
// JSON Lines and CSV

/// One exported event as a flat record (a JSON object per line, or a CSV row).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EventRecord<'a> {
    pub node: &'a str,
    pub node_index: usize,
    pub event_index: u64,
    pub direction: &'static str,
    pub original_ns: i64,
    pub corrected_ns: i64,
    pub kind: &'static str,
    pub ifindex: u32,
    pub cpu: u16,
    pub saddr: String,
    pub daddr: String,
    pub source: u16,
    pub dest: u16,
    pub tot_len: u16,
    pub seq: u32,
    pub ack_seq: u32,
    pub tcp_flags: String,
    pub udp_len: u16,
    /// UDP: the first payload bytes recorded, in hex.
    pub udp_data: String,
    pub peer_node: Option<&'a str>,
    pub peer_node_index: Option<usize>,
    pub peer_event_index: Option<u64>,
}

impl<'a> EventRecord<'a> {
    /// The record of `e`, with node names from `nodes`.
    pub fn new(e: &ExportEvent<'_>, nodes: &'a [String]) -> Result<Self, ExportError> {
        let ev = e.event;
        let is_v6 = ev.kind == kind::TCP6 || ev.network_protocol == ETH_P_IPV6;
        let udp_bytes = usize::from(ev.udp_len.saturating_sub(8)).min(8);
        Ok(EventRecord {
            node: node_name(nodes, e)?,
            node_index: e.node,
            event_index: e.index,
            direction: direction_name(ev.direction),
            original_ns: e.original_ns,
            corrected_ns: e.corrected_ns,
            kind: kind_name(ev.kind),
            ifindex: ev.ifindex,
            cpu: ev.cpu,
            saddr: address(&ev.saddr, is_v6),
            daddr: address(&ev.daddr, is_v6),
            source: ev.source,
            dest: ev.dest,
            tot_len: ev.tot_len,
            seq: ev.seq,
            ack_seq: ev.ack_seq,
            tcp_flags: tcp_flags(ev.tcp_flags),
            udp_len: ev.udp_len,
            udp_data: if ev.is_tcp() {
                String::new()
            } else {
                ev.udp_data[..udp_bytes]
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect()
            },
            peer_node: e.peer.and_then(|p| nodes.get(p.node)).map(String::as_str),
            peer_node_index: e.peer.map(|p| p.node),
            peer_event_index: e.peer.map(|p| p.index),
        })
    }
}

fn node_name<'n>(nodes: &'n [String], e: &ExportEvent<'_>) -> Result<&'n str, ExportError> {
    nodes
        .get(e.node)
        .map(String::as_str)
        .ok_or(ExportError::NoSuchNode {
            node: e.node,
            index: e.index,
            nodes: nodes.len(),
        })
}

fn direction_name(d: u8) -> &'static str {
    if d == direction::SEND { "send" } else { "recv" }
}

fn kind_name(k: u8) -> &'static str {
    match k {
        kind::TCP4 => "tcp4",
        kind::TCP6 => "tcp6",
        kind::UDP4 => "udp4",
        _ => "unknown",
    }
}

fn address(bytes: &[u8; 16], is_v6: bool) -> String {
    if is_v6 {
        Ipv6Addr::from(*bytes).to_string()
    } else {
        Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3]).to_string()
    }
}

/// TCP flags as letters in tcpdump's order (`S`, `F`, `R`, `P`, `.` for ACK, `U`).
fn tcp_flags(flags: u8) -> String {
    use tsync_common::tcp_flag::*;
    [
        (SYN, 'S'),
        (FIN, 'F'),
        (RST, 'R'),
        (PSH, 'P'),
        (ACK, '.'),
        (URG, 'U'),
    ]
    .iter()
    .filter(|(bit, _)| flags & bit != 0)
    .map(|&(_, c)| c)
    .collect()
}

/// Writes one JSON object per event and line.
pub struct JsonlExporter<W: Write> {
    out: W,
    nodes: Vec<String>,
}

impl<W: Write> JsonlExporter<W> {
    pub fn new(out: W, nodes: &[String]) -> Self {
        JsonlExporter {
            out,
            nodes: nodes.to_vec(),
        }
    }
}

impl<W: Write> EventSink for JsonlExporter<W> {
    fn write_event(&mut self, e: &ExportEvent<'_>) -> Result<(), ExportError> {
        let record = EventRecord::new(e, &self.nodes)?;
        serde_json::to_writer(&mut self.out, &record).map_err(std::io::Error::from)?;
        self.out.write_all(b"\n")?;
        Ok(())
    }

    fn finish(&mut self) -> Result<(), ExportError> {
        self.out.flush()?;
        Ok(())
    }
}

/// Writes a CSV file with a header row; the columns are the fields of [`EventRecord`].
pub struct CsvExporter<W: Write> {
    out: csv::Writer<W>,
    nodes: Vec<String>,
}

/// The CSV columns: the fields of [`EventRecord`], in order.
pub const CSV_COLUMNS: [&str; 22] = [
    "node",
    "node_index",
    "event_index",
    "direction",
    "original_ns",
    "corrected_ns",
    "kind",
    "ifindex",
    "cpu",
    "saddr",
    "daddr",
    "source",
    "dest",
    "tot_len",
    "seq",
    "ack_seq",
    "tcp_flags",
    "udp_len",
    "udp_data",
    "peer_node",
    "peer_node_index",
    "peer_event_index",
];

impl<W: Write> CsvExporter<W> {
    /// Writes the header row at once, so that an export without events is still a valid,
    /// self-describing CSV file.
    pub fn new(out: W, nodes: &[String]) -> Result<Self, ExportError> {
        let mut out = csv::WriterBuilder::new()
            .has_headers(false)
            .from_writer(out);
        out.write_record(CSV_COLUMNS)?;
        Ok(CsvExporter {
            out,
            nodes: nodes.to_vec(),
        })
    }
}

impl<W: Write> EventSink for CsvExporter<W> {
    fn write_event(&mut self, e: &ExportEvent<'_>) -> Result<(), ExportError> {
        let record = EventRecord::new(e, &self.nodes)?;
        self.out.serialize(&record)?;
        Ok(())
    }

    fn finish(&mut self) -> Result<(), ExportError> {
        self.out.flush()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tsync_common::{ETH_P_IP, tcp_flag};

    pub(crate) fn tcp4(dir: u8, seq: u32) -> PacketEvent {
        PacketEvent {
            ts_ns: 1_000,
            ifindex: 2,
            cpu: 1,
            direction: dir,
            kind: kind::TCP4,
            saddr: [10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            daddr: [10, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            network_protocol: ETH_P_IP,
            tot_len: 1500,
            source: 40000,
            dest: 80,
            seq,
            ack_seq: 7,
            transport_protocol: IPPROTO_TCP,
            ihl: 5,
            doff: 8,
            tcp_flags: tcp_flag::ACK | tcp_flag::PSH,
            ..PacketEvent::default()
        }
    }

    #[test]
    fn ipv4_tcp_headers_are_valid_and_truncated() {
        let p = rebuild_packet(&tcp4(direction::SEND, 99));
        assert_eq!(p.bytes.len(), 20 + 32);
        assert_eq!(p.original_len, 1500);
        // The IP header checksums to zero, as a receiver verifies it.
        assert_eq!(internet_checksum(&p.bytes[..20], 0), 0);
        assert_eq!(&p.bytes[2..4], &1500u16.to_be_bytes());
        assert_eq!(&p.bytes[24..28], &99u32.to_be_bytes());
        assert_eq!(p.bytes[32] >> 4, 8);
        assert_eq!(p.bytes[33], tcp_flag::ACK | tcp_flag::PSH);
        // The TCP checksum verifies over pseudo-header + rebuilt segment.
        let e = tcp4(direction::SEND, 99);
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(&e.saddr[..4]);
        pseudo.extend_from_slice(&e.daddr[..4]);
        pseudo.extend_from_slice(&[0, 6, 0, 32]);
        assert_eq!(
            internet_checksum(&p.bytes[20..], ones_complement_sum(&pseudo)),
            0
        );
    }

    #[test]
    fn inconsistent_lengths_are_made_consistent() {
        let mut e = tcp4(direction::RECV, 1);
        e.tot_len = 3; // impossible: shorter than the headers
        let p = rebuild_packet(&e);
        assert_eq!(p.original_len as usize, p.bytes.len());
        assert_eq!(
            u16::from_be_bytes([p.bytes[2], p.bytes[3]]) as usize,
            p.bytes.len()
        );
    }

    fn events() -> Vec<PacketEvent> {
        vec![tcp4(direction::SEND, 5), tcp4(direction::RECV, 5)]
    }

    fn export(format: ExportFormat, evs: &[PacketEvent]) -> Vec<u8> {
        let nodes = vec!["alpha".to_string(), "beta".to_string()];
        let mut out = Vec::new();
        let mut sink = exporter(format, &mut out, &nodes, &ExportOptions::default()).unwrap();
        for (i, ev) in evs.iter().enumerate() {
            sink.write_event(&ExportEvent {
                node: i % 2,
                index: i as u64 / 2,
                event: ev,
                original_ns: 1_000 + i as i64,
                corrected_ns: 2_000 + i as i64,
                peer: (i < 2).then_some(PeerRef {
                    node: 1 - i % 2,
                    index: 0,
                }),
            })
            .unwrap();
        }
        sink.finish().unwrap();
        drop(sink);
        out
    }

    #[test]
    fn jsonl_parses_back() {
        let out = export(ExportFormat::Jsonl, &events());
        let lines: Vec<serde_json::Value> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["node"], "alpha");
        assert_eq!(lines[0]["direction"], "send");
        assert_eq!(lines[1]["direction"], "recv");
        assert_eq!(lines[1]["corrected_ns"], 2001);
        assert_eq!(lines[1]["original_ns"], 1001);
        assert_eq!(lines[0]["saddr"], "10.0.0.1");
        assert_eq!(lines[0]["tcp_flags"], "P.");
        assert_eq!(lines[0]["seq"], 5);
        assert_eq!(lines[0]["peer_node"], "beta");
        assert_eq!(lines[1]["peer_node_index"], 0);
    }

    #[test]
    fn jsonl_shows_udp_payload_bytes_and_ipv6_addresses() {
        let udp = PacketEvent {
            kind: kind::UDP4,
            transport_protocol: IPPROTO_UDP,
            udp_len: 8 + 3,
            udp_data: [0xde, 0xad, 0xbe, 0, 0, 0, 0, 0],
            ..tcp4(direction::SEND, 0)
        };
        let mut v6 = tcp4(direction::RECV, 1);
        v6.kind = kind::TCP6;
        v6.network_protocol = ETH_P_IPV6;
        v6.saddr = [0; 16];
        v6.saddr[0] = 0xfd;
        v6.saddr[15] = 1;
        let out = export(ExportFormat::Jsonl, &[udp, v6]);
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines[0]["kind"], "udp4");
        assert_eq!(lines[0]["udp_data"], "deadbe");
        assert_eq!(lines[1]["kind"], "tcp6");
        assert_eq!(lines[1]["saddr"], "fd00::1");
        // The rebuilt UDP packet carries exactly the recorded payload bytes.
        let p = rebuild_packet(&udp);
        assert_eq!(p.bytes.len(), 20 + 8 + 3);
        assert_eq!(&p.bytes[28..], &[0xde, 0xad, 0xbe]);
        assert_eq!(p.original_len, 20 + 11);
    }

    #[test]
    fn csv_parses_back_and_has_a_header_even_when_empty() {
        let out = export(ExportFormat::Csv, &events());
        let mut reader = csv::Reader::from_reader(out.as_slice());
        assert_eq!(reader.headers().unwrap(), CSV_COLUMNS.as_slice());
        let rows: Vec<std::collections::HashMap<String, String>> =
            reader.deserialize().map(Result::unwrap).collect();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0]["node"], "alpha");
        assert_eq!(rows[1]["node"], "beta");
        assert_eq!(rows[1]["peer_node"], "alpha");
        assert_eq!(rows[0]["corrected_ns"], "2000");
        let empty = export(ExportFormat::Csv, &[]);
        assert_eq!(
            String::from_utf8(empty).unwrap().trim_end(),
            CSV_COLUMNS.join(",")
        );
    }

    #[test]
    fn unknown_node_and_format_are_clear_errors() {
        assert!(
            "xml"
                .parse::<ExportFormat>()
                .unwrap_err()
                .to_string()
                .contains("pcapng")
        );
        let mut out = Vec::new();
        let mut sink = exporter(
            ExportFormat::Jsonl,
            &mut out,
            &[],
            &ExportOptions::default(),
        )
        .unwrap();
        let ev = tcp4(direction::SEND, 1);
        let err = sink
            .write_event(&ExportEvent {
                node: 3,
                index: 0,
                event: &ev,
                original_ns: 0,
                corrected_ns: 0,
                peer: None,
            })
            .unwrap_err();
        assert!(matches!(err, ExportError::NoSuchNode { node: 3, .. }));
    }

    #[test]
    fn merge_by_time_interleaves_sorted_streams() {
        let merged: Vec<i64> = merge_by_time(
            vec![
                vec![1, 4, 9].into_iter(),
                vec![2, 3, 10].into_iter(),
                vec![].into_iter(),
            ],
            |x| *x,
        )
        .collect();
        assert_eq!(merged, vec![1, 2, 3, 4, 9, 10]);
    }
}
