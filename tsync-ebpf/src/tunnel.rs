//! Tunnels: a UDP datagram to VXLAN's port (4789, or Flannel's 8472) or Geneve's (6081) is
//! digested as the packet it carries, with [`flag::ENCAPSULATED`].
//!
//! Why: every packet of an overlay crosses the wire inside such a datagram, and the outer
//! headers of one tunnel's datagrams differ in nothing but the length, so their own digests say
//! nothing about which packet is which. The inner packet's digest is the one the sender's and
//! the receiver's pods record too, so the outer send on one node's wire and the outer receive
//! on the other's (the tightest pair) match by it. The event keeps the interface it was seen on
//! (the one carrying the tunnel); the flag tells it from the inner packet's own events on the
//! tunnel device and in the pods.
//!
//! Only UDP to those ports gets here, so TCP and other UDP pay nothing but the port compare. A
//! datagram whose payload is not a tunnel header followed by an IPv4 or IPv6 header and a TCP
//! or UDP header, all inside the linear data, keeps its own (UDP) digest.

use tsync_common::{ETH_P_IP, ETH_P_IPV6, IPPROTO_TCP, flag, kind};

use crate::{
    Words,
    digest::{self, HEADERS, Headers, copy},
};

/// VXLAN (RFC 7348).
const VXLAN_PORT: u16 = 4789;
/// VXLAN on the port Linux's driver defaults to, which Flannel uses.
const VXLAN_LINUX_PORT: u16 = 8472;
/// Geneve (RFC 8926).
const GENEVE_PORT: u16 = 6081;

/// VXLAN's flag "the VNI is valid", set in every VXLAN header (the first byte).
const VXLAN_FLAG_VNI: u8 = 0x08;
/// Geneve's protocol type for an Ethernet frame (Transparent Ethernet Bridging).
const ETH_P_TEB: u16 = 0x6558;
/// Bytes of a VXLAN header and of Geneve's base header (its options follow).
const TUNNEL_HLEN: usize = 8;
/// Bytes of an Ethernet header without VLAN tags.
const ETH_HLEN: usize = 14;
/// The tunnel header and the EtherType of an Ethernet header right after it, in one copy.
const TUNNEL_COPY: usize = 24;
/// Bytes of a TCP and a UDP header that the digest reads.
const TCP_HLEN: usize = 20;
const UDP_HLEN: usize = 8;
/// The shortest IP header.
const IP_HLEN: usize = 20;

/// Whether a UDP datagram to `port` may carry a tunnel.
#[inline(always)]
pub fn is_port(port: u16) -> bool {
    port == VXLAN_PORT || port == VXLAN_LINUX_PORT || port == GENEVE_PORT
}

/// What [`inner`] made of a datagram to a tunnel's port: the kind of the inner packet whose
/// digest it wrote (with the flag), or one of these. A plain integer: a BPF function takes and
/// returns registers only (an enum with data is returned through a pointer, a sixth argument,
/// which BPF does not have).
pub type Inner = u8;
/// Not a tunnel of a recorded kind: nothing was written; the datagram gets its own digest.
pub const NOT_INNER: Inner = 0;
/// The inner packet is TCP or UDP but its payload could not be copied (counted as lost).
pub const UNREADABLE: Inner = 0xff;

/// Writes words 2 to 9 of the digest of the packet inside the tunnel datagram to destination
/// port `port` whose UDP header lies `udp` bytes after the network header at `network`, if it
/// carries TCP or UDP. Of the packet, `linear` bytes from the network header on are linear
/// data: the tunnel and inner headers must lie there. Offsets are from the outer network
/// header, as integers (see `digest::linear_after_network`).
///
/// A function of its own (a BPF-to-BPF call, on this path only): its buffer and its copy of
/// the digest code stay out of the hook's frame and instructions. The frames of a call chain
/// add up against 512 bytes (main.rs says how Linux 6.1 counts them): the hook's and this one's.
#[inline(never)]
pub fn inner(network: usize, udp: usize, linear: usize, port: u16, w: &mut Words) -> Inner {
    let tunnel = udp + UDP_HLEN;
    if tunnel + TUNNEL_COPY > linear {
        return NOT_INNER;
    }
    // Not zeroed first (that is a call to `memset`, a byte loop the verifier walks byte by
    // byte): only the bytes copied in are read.
    let mut h = core::mem::MaybeUninit::<Headers>::uninit();
    // SAFETY: 24 bytes fit the buffer; the source is the packet's linear data. The buffer is
    // read below only where a copy filled it.
    let h = unsafe {
        if copy(h.as_mut_ptr().cast(), network + tunnel, TUNNEL_COPY) != 0 {
            return NOT_INNER;
        }
        h.assume_init_mut()
    };
    let first = h.at::<u8>(0);
    // Where the inner network header lies, and its EtherType.
    let (inner, protocol) = if port == GENEVE_PORT {
        // Version 0; the options' length in 4-byte words in the low 6 bits.
        if first >> 6 != 0 {
            return NOT_INNER;
        }
        let after = tunnel + TUNNEL_HLEN + 4 * (first & 0x3f) as usize;
        match u16::from_be(h.at::<u16>(2)) {
            ETH_P_TEB if first & 0x3f == 0 => (after + ETH_HLEN, u16::from_be(h.at::<u16>(20))),
            ETH_P_TEB => {
                let mut ethertype = 0u16;
                // SAFETY: two bytes into a u16; the source is checked below with the rest.
                let copied = unsafe {
                    copy(
                        (&raw mut ethertype).cast(),
                        network + after + ETH_HLEN - 2,
                        2,
                    )
                };
                if copied != 0 {
                    return NOT_INNER;
                }
                (after + ETH_HLEN, u16::from_be(ethertype))
            }
            // A layer-3 Geneve tunnel: the IP header follows the options.
            p @ (ETH_P_IP | ETH_P_IPV6) => (after, p),
            _ => return NOT_INNER,
        }
    } else {
        if first & VXLAN_FLAG_VNI == 0 {
            return NOT_INNER;
        }
        (
            tunnel + TUNNEL_HLEN + ETH_HLEN,
            u16::from_be(h.at::<u16>(TUNNEL_HLEN + ETH_HLEN - 2)),
        )
    };
    if (protocol != ETH_P_IP && protocol != ETH_P_IPV6) || inner + IP_HLEN > linear {
        return NOT_INNER;
    }
    // SAFETY: as above, the whole buffer.
    if unsafe { copy(h.0.as_mut_ptr(), network + inner, HEADERS) } != 0 {
        return NOT_INNER;
    }
    let Ok(ip) = digest::ip(h, network + inner, protocol) else {
        return NOT_INNER;
    };
    let at = inner + ip.l4_offset();
    let tcp = ip.transport == IPPROTO_TCP;
    if at + if tcp { TCP_HLEN } else { UDP_HLEN } > linear {
        return NOT_INNER;
    }
    digest::addresses(h, ip.v6, w);
    if tcp {
        digest::tcp(h, protocol, ip, flag::ENCAPSULATED, w);
        if ip.v6 { kind::TCP6 } else { kind::TCP4 }
    } else {
        digest::udp(h, protocol, ip, network, at, linear, flag::ENCAPSULATED, w)
            .unwrap_or(UNREADABLE)
    }
}
