//! JSON Lines and CSV: one flat record per event.

use super::*;

/// One exported event as a flat record (a JSON object per line, or a CSV row).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EventRecord<'a> {
    /// Name of the node (trace).
    pub node: &'a str,
    /// Index of the node (trace).
    pub node_index: usize,
    /// Index of the event in its node's trace (file order, from 0).
    pub event_index: u64,
    /// `send` or `recv`.
    pub direction: &'static str,
    /// Time on the node's own clock (ns).
    pub original_ns: i64,
    /// Time on the common timebase (ns), after the clock maps (and the CLC, if used).
    pub corrected_ns: i64,
    /// `tcp4`, `tcp6`, `udp4`, `udp4_hashed`, `udp6_hashed`, `tcp_addon` (`unknown` for anything
    /// else).
    pub kind: &'static str,
    /// Index of the interface the packet left or entered by, on its node.
    pub ifindex: u32,
    /// CPU the hook ran on.
    pub cpu: u16,
    /// Source IP address, as text.
    pub saddr: String,
    /// Destination IP address, as text.
    pub daddr: String,
    /// Source port.
    pub source: u16,
    /// Destination port.
    pub dest: u16,
    /// IP total length in bytes (IPv6: payload length plus the 40-byte header).
    pub tot_len: u16,
    /// TCP sequence number (0 for UDP).
    pub seq: u32,
    /// TCP acknowledgment number (0 for UDP).
    pub ack_seq: u32,
    /// TCP flags as letters in tcpdump's order (`S`, `F`, `R`, `P`, `.` for ACK, `U`); empty for
    /// UDP.
    pub tcp_flags: String,
    /// UDP length field in bytes (0 for TCP).
    pub udp_len: u16,
    /// UDP: the first payload bytes recorded, in hex.
    pub udp_data: String,
    /// Name of the node of the matched peer event; None without a peer.
    pub peer_node: Option<&'a str>,
    /// Index of the peer event's node; None without a peer.
    pub peer_node_index: Option<usize>,
    /// Index of the peer event in its node's trace; None without a peer.
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

pub(super) fn node_name<'n>(
    nodes: &'n [String],
    e: &ExportEvent<'_>,
) -> Result<&'n str, ExportError> {
    nodes
        .get(e.node)
        .map(String::as_str)
        .ok_or(ExportError::NoSuchNode {
            node: e.node,
            index: e.index,
            nodes: nodes.len(),
        })
}

pub(super) fn direction_name(d: u8) -> &'static str {
    if d == direction::SEND { "send" } else { "recv" }
}

fn kind_name(k: u8) -> &'static str {
    match k {
        kind::TCP4 => "tcp4",
        kind::TCP6 => "tcp6",
        kind::UDP4 => "udp4",
        kind::UDP4_HASHED => "udp4_hashed",
        kind::UDP6_HASHED => "udp6_hashed",
        kind::TCP_ADDON => "tcp_addon",
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
    /// A writer over `out`; `nodes` are the node names, in node-index order.
    pub fn new(out: W, nodes: &[String]) -> Self {
        JsonlExporter {
            out,
            nodes: nodes.to_vec(),
        }
    }
}

impl<W: Write> JsonlExporter<W> {
    /// Writes one event.
    pub fn write(&mut self, e: &ExportEvent<'_>) -> Result<(), ExportError> {
        let record = EventRecord::new(e, &self.nodes)?;
        serde_json::to_writer(&mut self.out, &record).map_err(std::io::Error::from)?;
        self.out.write_all(b"\n")?;
        Ok(())
    }

    /// Flushes everything; the writer must not be used afterwards.
    pub fn close(&mut self) -> Result<(), ExportError> {
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

impl<W: Write> CsvExporter<W> {
    /// Writes one event.
    pub fn write(&mut self, e: &ExportEvent<'_>) -> Result<(), ExportError> {
        let record = EventRecord::new(e, &self.nodes)?;
        self.out.serialize(&record)?;
        Ok(())
    }

    /// Flushes everything; the writer must not be used afterwards.
    pub fn close(&mut self) -> Result<(), ExportError> {
        self.out.flush()?;
        Ok(())
    }
}
