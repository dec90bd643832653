//! The pcapng writer: a section, one interface per node, one enhanced packet block per event,
//! packets rebuilt from the digests (see the module above for what is filled in).

use super::*;

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
    /// Writes the section header and one interface per node (`nodes`: names in node-index order)
    /// to `out`.
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

impl<W: Write> PcapngExporter<W> {
    /// Writes one event.
    pub fn write(&mut self, e: &ExportEvent<'_>) -> Result<(), ExportError> {
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

    /// Flushes everything; the writer must not be used afterwards.
    pub fn close(&mut self) -> Result<(), ExportError> {
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
    /// The captured data: the rebuilt IP and transport headers, plus UDP's recorded payload bytes.
    pub bytes: Vec<u8>,
    /// Length of the packet on the wire in bytes, from the IP total length.
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
    let total = if e.transport_protocol == IPPROTO_UDP && !tcp(e) {
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
    let checksum_at = if tcp(e) { 16 } else { 6 };
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
    if tcp(e) { IPPROTO_TCP } else { IPPROTO_UDP }
}

/// Whether the digest is of a TCP segment: LTTng's add-on events too (their addresses and ports,
/// which they do not record, are written as zeros).
fn tcp(e: &PacketEvent) -> bool {
    e.is_tcp() || e.kind == kind::TCP_ADDON
}

/// The TCP header (zeroed options up to the recorded data offset) or the UDP header plus the
/// recorded first payload bytes; checksum field zero.
fn transport_header(e: &PacketEvent) -> Vec<u8> {
    if tcp(e) {
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
        // The hashed kinds hold a hash of the payload, not its bytes: none is written.
        let recorded = if e.kind == kind::UDP4_HASHED || e.kind == kind::UDP6_HASHED {
            0
        } else {
            e.udp_data.len()
        };
        let data = usize::from(udp_len - 8).min(recorded);
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

pub(super) fn ones_complement_sum(data: &[u8]) -> u32 {
    let mut sum: u32 = 0;
    for chunk in data.chunks(2) {
        let word = u16::from_be_bytes([chunk[0], *chunk.get(1).unwrap_or(&0)]);
        sum += u32::from(word);
    }
    sum
}

/// RFC 1071 checksum of `data`, starting from a partial sum.
pub(super) fn internet_checksum(data: &[u8], initial: u32) -> u16 {
    let mut sum = initial as u64 + ones_complement_sum(data) as u64;
    while sum >> 16 != 0 {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
}
