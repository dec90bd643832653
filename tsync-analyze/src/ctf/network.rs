//! LTTng's network events as the analyzer's [`PacketEvent`]s.
//!
//! - **Modern** (lttng-modules ≥ 2.9): `net_dev_queue` (send) and `net_if_receive_skb` (receive,
//!   the kernel's `netif_receive_skb`) carry the `network_header` variant — IPv4 or IPv6, then
//!   TCP (and UDP where the tracer declares it) headers. They become the same digest the agent
//!   records: addresses, EtherType, lengths, ports, TCP sequence and acknowledgment numbers,
//!   header lengths and flags. The device name stands for the interface index (numbered per
//!   trace in order of appearance), the packet context's `cpu_id` for the CPU. LTTng records no
//!   UDP payload, so UDP digests leave `udp_data` zero.
//! - **Add-on** (LTTng 2.x's `lttng-addons` module, as in Trace Compass's test traces):
//!   `inet_sock_local_out` (send) and `inet_sock_local_in` (receive) carry only `seq`,
//!   `ack_seq`, `check`, `window` and a `flags` word. Their digest is Trace Compass's key, `seq`,
//!   `ack_seq` and the flags (`check` differs across checksum offload), of its own kind
//!   [`kind::TCP_ADDON`], so that it can only match another add-on event.
//!
//! The add-on `flags` word is `res1 << 12 | doff << 8 | fin << 7 | syn << 6 | rst << 5 |
//! psh << 4 | ack << 3 | urg << 2 | ece << 1 | cwr`, computed in the host's byte order but
//! declared big-endian: on a little-endian host (every trace seen) a reader gets it byte-swapped.
//! The word whose `res1` is 0 and `doff` at least 5 is taken.

use tsync_common::{ETH_P_IP, ETH_P_IPV6, IPPROTO_TCP, IPPROTO_UDP, PacketEvent, direction, kind};

use super::decode::Sink;
use super::layout::Role;
use super::metadata::EventClass;
use super::metadata::types::{IntType, Type};

/// A field of a network event the digest needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetField {
    /// `network_header_type`: 1 IPv4, 2 IPv6, 0 other.
    HeaderType,
    /// IPv4 `ihl`.
    Ihl,
    /// IPv4 `tot_len`.
    TotLen,
    /// IPv4 `protocol`.
    Protocol,
    /// IPv6 `payload_len`.
    PayloadLen,
    /// IPv6 `nexthdr`.
    NextHdr,
    /// An element of `saddr` (bytes for IPv4, 16-bit words for IPv6).
    Saddr,
    /// An element of `daddr`.
    Daddr,
    /// TCP/UDP `source_port`.
    SourcePort,
    /// TCP/UDP `dest_port`.
    DestPort,
    /// TCP `seq`.
    Seq,
    /// TCP `ack_seq`.
    AckSeq,
    /// TCP `data_offset`.
    DataOffset,
    /// TCP `flags` (9 bits in the modern layout, the add-on's 16-bit word).
    Flags,
    /// `len`: the skb's length before the headers, UDP's length after them.
    Len,
    /// The device's name.
    Device,
}

/// Which way a network event's packet goes, and which layout it has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetEvent {
    /// [`direction::SEND`] or [`direction::RECV`].
    pub direction: u8,
    /// True for the add-on events.
    pub addon: bool,
    /// Whether the event carries what a digest needs (`net_dev_queue` of LTTng before 2.9 has
    /// no `network_header`).
    pub usable: bool,
}

fn bare(name: &str) -> &str {
    name.strip_prefix('_').unwrap_or(name)
}

/// Whether a struct type has a field of this (bare) name at its top level.
fn has_field(ty: Option<&Type>, name: &str) -> bool {
    matches!(ty, Some(Type::Struct { fields, .. }) if fields.iter().any(|(f, _)| bare(f) == name))
}

/// The network events among a trace's event classes.
pub fn classify(e: &EventClass) -> Option<NetEvent> {
    let fields = e.fields.as_deref();
    let (direction, addon, needs) = match e.name.as_str() {
        "net_dev_queue" => (direction::SEND, false, "network_header_type"),
        "net_if_receive_skb" | "netif_receive_skb" => {
            (direction::RECV, false, "network_header_type")
        }
        "inet_sock_local_out" => (direction::SEND, true, "seq"),
        "inet_sock_local_in" => (direction::RECV, true, "seq"),
        _ => return None,
    };
    Some(NetEvent {
        direction,
        addon,
        usable: has_field(fields, needs),
    })
}

/// The role of a payload field of a network event.
pub fn role(name: &str, _ty: &IntType) -> Role {
    let f = match bare(name) {
        "network_header_type" => NetField::HeaderType,
        "ihl" => NetField::Ihl,
        "tot_len" => NetField::TotLen,
        "protocol" => NetField::Protocol,
        "payload_len" => NetField::PayloadLen,
        "nexthdr" => NetField::NextHdr,
        "saddr" => NetField::Saddr,
        "daddr" => NetField::Daddr,
        "source_port" => NetField::SourcePort,
        "dest_port" => NetField::DestPort,
        "seq" => NetField::Seq,
        "ack_seq" => NetField::AckSeq,
        "data_offset" => NetField::DataOffset,
        "flags" => NetField::Flags,
        "len" => NetField::Len,
        "name" => NetField::Device,
        _ => return Role::None,
    };
    Role::Net(f)
}

/// Why a network event gave no digest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unusable {
    /// Not IPv4 nor IPv6 (`network_header_type` 0: ARP, …).
    NotIp,
    /// IP, but neither TCP nor UDP (nor UDP over IPv6, which the digest has no kind for).
    OtherProtocol,
    /// The event's layout has no network header (LTTng before 2.9).
    NoHeader,
}

/// The fields of one network event, as decoded.
#[derive(Clone, Debug, Default)]
pub struct NetSink {
    header_type: u64,
    ihl: u8,
    tot_len: u16,
    protocol: Option<u8>,
    payload_len: u16,
    saddr: [u8; 16],
    saddr_len: usize,
    daddr: [u8; 16],
    daddr_len: usize,
    ports: Option<(u16, u16)>,
    seq: u32,
    ack_seq: u32,
    doff: u8,
    flags: u16,
    udp_len: u16,
    seen_address: bool,
    /// The device name (at most 16 bytes, as the kernel's `IFNAMSIZ`).
    device: [u8; 16],
    device_len: usize,
}

fn push(buf: &mut [u8; 16], len: &mut usize, value: u64, bits: u8) {
    let bytes = usize::from(bits.div_ceil(8));
    for i in (0..bytes).rev() {
        if *len < 16 {
            buf[*len] = (value >> (8 * i)) as u8;
            *len += 1;
        }
    }
}

impl Sink for NetSink {
    #[inline]
    fn int(&mut self, role: Role, value: u64, bits: u8) {
        let Role::Net(f) = role else {
            return;
        };
        match f {
            NetField::HeaderType => self.header_type = value,
            NetField::Ihl => self.ihl = value as u8,
            NetField::TotLen => self.tot_len = value as u16,
            NetField::Protocol | NetField::NextHdr => self.protocol = Some(value as u8),
            NetField::PayloadLen => self.payload_len = value as u16,
            NetField::Saddr => {
                self.seen_address = true;
                push(&mut self.saddr, &mut self.saddr_len, value, bits);
            }
            NetField::Daddr => push(&mut self.daddr, &mut self.daddr_len, value, bits),
            NetField::SourcePort => self.ports = Some((value as u16, 0)),
            NetField::DestPort => {
                if let Some(p) = self.ports.as_mut() {
                    p.1 = value as u16;
                }
            }
            NetField::Seq => self.seq = value as u32,
            NetField::AckSeq => self.ack_seq = value as u32,
            NetField::DataOffset => self.doff = value as u8,
            NetField::Flags => self.flags = value as u16,
            NetField::Len => {
                if self.seen_address {
                    self.udp_len = value as u16;
                }
            }
            NetField::Device => {}
        }
    }

    fn string(&mut self, role: Role, bytes: &[u8]) {
        if role == Role::Net(NetField::Device) {
            let n = bytes.len().min(16);
            self.device[..n].copy_from_slice(&bytes[..n]);
            self.device_len = n;
        }
    }
}

/// An add-on `flags` word as the tracer computed it (see the module documentation).
fn addon_word(declared: u16) -> u16 {
    let valid = |w: u16| w >> 12 == 0 && (w >> 8) & 0xF >= 5;
    let swapped = declared.swap_bytes();
    if valid(swapped) || !valid(declared) {
        swapped
    } else {
        declared
    }
}

/// TCP's flags byte (FIN = 0x01 … CWR = 0x80) from an add-on word's low byte (FIN = 0x80 …
/// CWR = 0x01): the bit order reversed.
fn addon_flags(word: u16) -> u8 {
    (word as u8).reverse_bits()
}

impl NetSink {
    /// The device name, as recorded.
    pub fn device(&self) -> &[u8] {
        &self.device[..self.device_len]
    }

    /// The digest of the event (time, interface and CPU left for the caller).
    pub fn packet_event(&self, e: NetEvent) -> Result<PacketEvent, Unusable> {
        let mut p = PacketEvent {
            direction: e.direction,
            ..PacketEvent::default()
        };
        if !e.usable {
            return Err(Unusable::NoHeader);
        }
        if e.addon {
            let word = addon_word(self.flags);
            p.kind = kind::TCP_ADDON;
            p.transport_protocol = IPPROTO_TCP;
            p.seq = self.seq;
            p.ack_seq = self.ack_seq;
            p.doff = ((word >> 8) & 0xF) as u8;
            p.tcp_flags = addon_flags(word);
            return Ok(p);
        }
        let (ipv6, addr_len) = match self.header_type {
            1 => (false, 4),
            2 => (true, 16),
            _ => return Err(Unusable::NotIp),
        };
        if self.saddr_len != addr_len || self.daddr_len != addr_len {
            return Err(Unusable::NotIp);
        }
        p.saddr = self.saddr;
        p.daddr = self.daddr;
        if ipv6 {
            p.network_protocol = ETH_P_IPV6;
            p.tot_len = self.payload_len.saturating_add(40);
        } else {
            p.network_protocol = ETH_P_IP;
            p.tot_len = self.tot_len;
            p.ihl = self.ihl;
        }
        let Some((source, dest)) = self.ports else {
            return Err(Unusable::OtherProtocol);
        };
        p.source = source;
        p.dest = dest;
        match self.protocol {
            Some(IPPROTO_TCP) => {
                p.kind = if ipv6 { kind::TCP6 } else { kind::TCP4 };
                p.transport_protocol = IPPROTO_TCP;
                p.seq = self.seq;
                p.ack_seq = self.ack_seq;
                p.doff = self.doff;
                p.tcp_flags = self.flags as u8;
            }
            Some(IPPROTO_UDP) if !ipv6 => {
                p.kind = kind::UDP4;
                p.transport_protocol = IPPROTO_UDP;
                p.udp_len = self.udp_len;
            }
            _ => return Err(Unusable::OtherProtocol),
        }
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tsync_common::tcp_flag;

    #[test]
    fn addon_words_read_as_the_tracer_computed_them() {
        // Trace Compass's scp traces: SYN with 40 bytes of header, shown as 0x400A.
        let w = addon_word(0x400A);
        assert_eq!(w, 0x0A40);
        assert_eq!(addon_flags(w), tcp_flag::SYN);
        assert_eq!(
            addon_flags(addon_word(0x480A)),
            tcp_flag::SYN | tcp_flag::ACK
        );
        assert_eq!(
            addon_flags(addon_word(0x1808)),
            tcp_flag::PSH | tcp_flag::ACK
        );
        assert_eq!((addon_word(0x1808) >> 8) & 0xF, 8);
        // A big-endian host's word is already right.
        assert_eq!(addon_word(0x0A40), 0x0A40);
    }

    #[test]
    fn ipv6_words_become_address_bytes() {
        let mut s = NetSink::default();
        s.int(Role::Net(NetField::HeaderType), 2, 8);
        for w in [0xfd00u64, 0, 0, 0, 0, 0, 0, 1] {
            s.int(Role::Net(NetField::Saddr), w, 16);
            s.int(Role::Net(NetField::Daddr), w + 1, 16);
        }
        s.int(Role::Net(NetField::PayloadLen), 20, 16);
        s.int(Role::Net(NetField::NextHdr), 6, 8);
        s.int(Role::Net(NetField::SourcePort), 80, 16);
        s.int(Role::Net(NetField::DestPort), 4000, 16);
        let e = NetEvent {
            direction: direction::RECV,
            addon: false,
            usable: true,
        };
        let p = s.packet_event(e).unwrap();
        assert_eq!(p.kind, kind::TCP6);
        assert_eq!(&p.saddr[..2], &[0xfd, 0x00]);
        assert_eq!(p.saddr[15], 1);
        assert_eq!(p.daddr[15], 2);
        assert_eq!((p.tot_len, p.source, p.dest), (60, 80, 4000));
    }
}
