//! The header digest of one packet: the ten words of its
//! [`PacketEvent`](tsync_common::PacketEvent), written straight into their slot of the batch.
//!
//! The per-packet path is kept short (about 120 instructions for a recorded TCP/IPv4 packet):
//! one copy of the headers into an 8-aligned buffer, so that every field is one load of its
//! width, and every word stored once. UDP costs more, and only UDP: its payload is hashed
//! ([`udp`]), and a datagram to a tunnel's port is looked into ([`crate::tunnel`]).

use aya_ebpf::helpers::bpf_get_smp_processor_id;
use tsync_common::{ETH_P_IP, IPPROTO_TCP, IPPROTO_UDP, UDP_HASHED_BYTES, direction, kind};

use crate::{
    Packet, SKB_DATA, SKB_DATA_LEN, SKB_HEAD, SKB_LEN, SKB_NETWORK_HEADER, SKB_TAIL, Words, field,
    global, ifindex, tunnel,
};

/// `network_header` value meaning "not set" (`(u16)~0U`).
const HEADER_UNSET: u16 = 0xffff;

/// What the hook makes of a packet it reads the time for.
pub enum Digest {
    /// A packet of a recorded kind: its words are written.
    Event,
    /// Not TCP/UDP, a later fragment, IPv6 extension headers, …
    NotOurs,
    /// An IP packet of ours whose headers could not be copied (counted as lost, and logged).
    Unreadable,
    /// A sent IP packet of ours without a network header offset (logged).
    NoNetworkHeader,
    /// An IP packet of ours whose network header does not hold the IP header its EtherType
    /// announces: a wrong version or an IPv4 header length under 20 bytes (logged).
    NotIp { first_byte: u8 },
}

/// Bytes of headers read at once from the network header: IPv4 (20) or IPv6 (40) plus TCP (20) or
/// UDP (8) and some UDP payload, rounded up to whole words. One copy is cheaper than one per
/// header. An IPv4 header with options needs a second copy, of the transport header.
pub const HEADERS: usize = 64;

/// Where the transport header lies in [`Headers`]: after a 20-byte IPv4 header (also with options:
/// it is copied there), or after IPv6's 40 bytes.
const L4_AFTER_V4: usize = 20;
const L4_AFTER_V6: usize = 40;
/// Bytes of transport header copied after IPv4 options: TCP's 20, or UDP's 8 and 8 of payload.
const L4_COPY: usize = 28;

/// The copied headers, 8-aligned: the verifier accepts only aligned loads from the stack, and
/// with the alignment known every field is one load of its width (a byte array was read byte by
/// byte and reassembled with shifts).
#[repr(C, align(8))]
pub struct Headers(pub [u8; HEADERS]);

impl Headers {
    /// The `T` at byte `at`, which must be a multiple of `T`'s size (all fields read here are).
    #[inline(always)]
    pub fn at<T: Copy>(&self, at: usize) -> T {
        // SAFETY: in bounds and aligned for every (constant) offset used below.
        unsafe { self.0.as_ptr().add(at).cast::<T>().read() }
    }

    /// [`at`](Self::at), loaded even where the same bytes were loaded before.
    #[inline(always)]
    pub fn at_volatile<T: Copy>(&self, at: usize) -> T {
        // SAFETY: as for `at`.
        unsafe { self.0.as_ptr().add(at).cast::<T>().read_volatile() }
    }
}

/// What an IP header of a recorded kind says, besides its addresses.
#[derive(Clone, Copy)]
pub struct Ip {
    /// `IPPROTO_TCP` or `IPPROTO_UDP`.
    pub transport: u8,
    pub v6: bool,
    /// IPv4 header length in words; 0 for IPv6.
    pub ihl: u8,
    /// IPv4 total length; IPv6 payload length plus its 40-byte header.
    pub tot_len: u16,
    /// IPv4 TTL, IPv6 hop limit.
    pub ttl: u8,
}

impl Ip {
    /// Where the transport header lies in [`Headers`].
    #[inline(always)]
    pub fn l4(self) -> usize {
        if self.v6 { L4_AFTER_V6 } else { L4_AFTER_V4 }
    }

    /// How far the transport header lies from the network header in the packet.
    #[inline(always)]
    pub fn l4_offset(self) -> usize {
        if self.v6 { 40 } else { 4 * self.ihl as usize }
    }
}

/// Writes the digest of `packet` (the one in `skb`, read at `ts_ns`) into `w`, every word of it
/// when the outcome is [`Digest::Event`].
#[inline(always)]
pub fn write(skb: usize, dir: u8, packet: Packet, ts_ns: u64, w: &mut Words) -> Digest {
    let Packet { protocol, dev, tag } = packet;
    // On receive the tracepoint fires before the network header offset is reset, but `data`
    // already points past the link-layer header; on transmit `data` points at the link-layer
    // header and `network_header` is set.
    let network = if dir == direction::RECV {
        field::<usize>(skb, global(&SKB_DATA))
    } else {
        let nh: u16 = field(skb, global(&SKB_NETWORK_HEADER));
        if nh == HEADER_UNSET {
            return Digest::NoNetworkHeader;
        }
        field::<usize>(skb, global(&SKB_HEAD)) + nh as usize
    };
    let mut h = core::mem::MaybeUninit::<Headers>::uninit();
    // SAFETY: bpf_probe_read_kernel copies through the kernel's fault-safe accessor (a bad
    // address yields an error, never a crash) and fills the whole buffer, with zeros on failure.
    let h = unsafe {
        if copy(h.as_mut_ptr().cast(), network, HEADERS) != 0 {
            return Digest::Unreadable;
        }
        h.assume_init_mut()
    };
    let ip = match ip(h, network, protocol) {
        Ok(ip) => ip,
        Err(outcome) => return outcome,
    };
    addresses(h, ip.v6, w);
    w[0] = ts_ns;
    // SAFETY: helper without preconditions.
    let cpu = unsafe { bpf_get_smp_processor_id() } as u16;
    let seen = u64::from(ifindex(dev)) | u64::from(cpu) << 32 | u64::from(dir) << 48;
    if ip.transport == IPPROTO_TCP {
        let kind = if ip.v6 { kind::TCP6 } else { kind::TCP4 };
        w[1] = seen | u64::from(kind) << 56;
        tcp(h, protocol, ip, tag, w);
        return Digest::Event;
    }
    // UDP, in a path of its own that shares nothing with TCP's after this point, and placed
    // after it: with the hash and the tunnel check amid the TCP path's code, and values kept
    // across their calls, a TCP event cost ~25 ns more of ~250 (`tsync-lab` side by side, the
    // agent before format 5 against this one). Not a BPF function of its own either: LLVM kept
    // values in argument registers across such a call, which the verifier refuses (they are
    // scratch after a call).
    core::hint::cold_path();
    let at = ip.l4_offset();
    let linear = linear_after_network(skb, dir);
    let dest = u16::from_be(h.at::<u16>(ip.l4() + 2));
    let kind = 'kind: {
        if tunnel::is_port(dest) {
            // A tunnel's outer packet is digested as the packet it carries. The port loaded
            // again, as a value the verifier knows nothing about: it knows `dest` exactly after
            // the comparisons above, and verified the tunnel's function once per port.
            let port = u16::from_be(h.at_volatile::<u16>(ip.l4() + 2));
            match tunnel::inner(network, at, linear, port, w) {
                tunnel::NOT_INNER => {}
                kind => {
                    // The tunnel's function wrote its flag; the namespace's tag joins it (a
                    // BPF function takes five arguments, all taken).
                    w[9] |= u64::from(tag) << 48;
                    break 'kind kind;
                }
            }
        }
        udp(h, protocol, ip, network, at, linear, tag, w).unwrap_or(tunnel::UNREADABLE)
    };
    if kind == tunnel::UNREADABLE {
        return Digest::Unreadable;
    }
    w[1] = seen | u64::from(kind) << 56;
    Digest::Event
}

/// How many bytes of the packet in `skb` lie in its linear data from the network header on.
///
/// Computed from integers only (the verifier types the pointers `head` and `data` as such, and
/// a size derived from them is not one it accepts): on receive the network header is at
/// `data`, and `len - data_len` bytes follow it there; on send it is `network_header` bytes
/// after `head`, where the linear data ends at `tail`.
#[inline(always)]
fn linear_after_network(skb: usize, dir: u8) -> usize {
    if dir == direction::RECV {
        let len = field::<u32>(skb, global(&SKB_LEN));
        len.saturating_sub(field::<u32>(skb, global(&SKB_DATA_LEN))) as usize
    } else {
        let tail = field::<u32>(skb, global(&SKB_TAIL));
        tail.saturating_sub(u32::from(field::<u16>(skb, global(&SKB_NETWORK_HEADER)))) as usize
    }
}

/// Checks the IP header in `h` (copied from `network`, of EtherType `protocol`) and returns what
/// it says if it heads a first fragment of TCP or UDP; copies the transport header of an IPv4
/// header with options to where it would be without them. Writes nothing of the event.
#[inline(always)]
pub fn ip(h: &mut Headers, network: usize, protocol: u16) -> Result<Ip, Digest> {
    let first = h.at::<u8>(0);
    if protocol == ETH_P_IP {
        let ihl = first & 0x0f;
        if first >> 4 != 4 || ihl < 5 {
            return Err(Digest::NotIp { first_byte: first });
        }
        // Only the first fragment carries the transport header: the 13-bit fragment offset of
        // bytes 6 and 7, read as a little-endian u16, is the mask 0xff1f.
        if h.at::<u16>(6) & 0xff1f != 0 {
            return Err(Digest::NotOurs);
        }
        let transport = h.at::<u8>(9);
        if transport != IPPROTO_TCP && transport != IPPROTO_UDP {
            return Err(Digest::NotOurs);
        }
        if ihl != 5 {
            // Options: the transport header is further on; copy it where it would have been.
            // SAFETY: as for the first copy; 20 + 28 bytes lie inside `h`.
            let dst = unsafe { h.0.as_mut_ptr().add(L4_AFTER_V4) };
            if unsafe { copy(dst, network + 4 * ihl as usize, L4_COPY) } != 0 {
                return Err(Digest::Unreadable);
            }
        }
        Ok(Ip {
            transport,
            v6: false,
            ihl,
            tot_len: u16::from_be(h.at::<u16>(2)),
            ttl: h.at::<u8>(8),
        })
    } else {
        if first >> 4 != 6 {
            return Err(Digest::NotIp { first_byte: first });
        }
        // TCP and UDP directly after the fixed header only.
        let transport = h.at::<u8>(6);
        if transport != IPPROTO_TCP && transport != IPPROTO_UDP {
            return Err(Digest::NotOurs);
        }
        let payload = u16::from_be(h.at::<u16>(4));
        Ok(Ip {
            transport,
            v6: true,
            ihl: 0,
            tot_len: payload.saturating_add(40),
            ttl: h.at::<u8>(7),
        })
    }
}

/// Writes the addresses of the IP header in `h` (words 2 to 5).
#[inline(always)]
pub fn addresses(h: &Headers, v6: bool, w: &mut Words) {
    if v6 {
        w[2] = h.at::<u64>(8);
        w[3] = h.at::<u64>(16);
        w[4] = h.at::<u64>(24);
        w[5] = h.at::<u64>(32);
    } else {
        // Addresses keep network byte order: loaded and stored little-endian, bytes unchanged.
        w[2] = u64::from(h.at::<u32>(12));
        w[3] = 0;
        w[4] = u64::from(h.at::<u32>(16));
        w[5] = 0;
    }
}

/// Word 6: EtherType, length and ports.
#[inline(always)]
fn lengths_and_ports(h: &Headers, protocol: u16, ip: Ip, w: &mut Words) {
    let ports = h.at::<u32>(ip.l4());
    let (source, dest) = (
        u16::from_be(ports as u16),
        u16::from_be((ports >> 16) as u16),
    );
    w[6] = u64::from(protocol)
        | u64::from(ip.tot_len) << 16
        | u64::from(source) << 32
        | u64::from(dest) << 48;
}

/// Fills the TCP words of the digest (6 to 9): ports, sequence and acknowledgment numbers, data
/// offset, flags, the event's `flags` and the TTL.
#[inline(always)]
pub fn tcp(h: &Headers, protocol: u16, ip: Ip, flags: u8, w: &mut Words) {
    lengths_and_ports(h, protocol, ip, w);
    let l4 = ip.l4();
    let seq = u32::from_be(h.at::<u32>(l4 + 4));
    let ack = u32::from_be(h.at::<u32>(l4 + 8));
    let offset_flags = h.at::<u16>(l4 + 12);
    let doff = (offset_flags & 0xff) >> 4;
    let tcp_flags = offset_flags >> 8;
    w[7] = u64::from(seq) | u64::from(ack) << 32;
    w[8] = u64::from(IPPROTO_TCP)
        | u64::from(ip.ihl) << 8
        | u64::from(doff) << 16
        | u64::from(tcp_flags) << 24;
    w[9] = u64::from(flags) << 48 | u64::from(ip.ttl) << 56;
}

/// Fills the UDP words of the digest (6 to 9): ports, length, the hash of the first payload
/// bytes, the event's `flags` and the TTL. The UDP header lies `at` bytes after the network
/// header at `network`, of which `linear` bytes are in the linear data. Returns the kind, or
/// `None` if the payload could not be copied.
///
/// The hash covers the first min([`UDP_HASHED_BYTES`], payload) bytes that lie in the socket
/// buffer's linear data, no further: the bytes after it are in page fragments, which a tracing
/// program cannot read, and the buffer past the tail is not the packet's. A datagram built by
/// `sendmsg` is linear when sent, and so it is when received over veth, bridges and VXLAN
/// devices; a NIC driver that copies only the headers into the linear part (and GRO) can leave
/// fewer bytes. Both ends then hash different byte counts, and the count goes into the hash:
/// the two digests differ, so the datagram stays unmatched rather than being paired with
/// another one, and its digest never equals that of a datagram hashed whole (which has
/// another `udp_len`, or other bytes).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub fn udp(
    h: &mut Headers,
    protocol: u16,
    ip: Ip,
    network: usize,
    at: usize,
    linear: usize,
    flags: u8,
    w: &mut Words,
) -> Option<u8> {
    lengths_and_ports(h, protocol, ip, w);
    let udp_len = u16::from_be(h.at::<u16>(ip.l4() + 4));
    let payload = at + 8;
    let n = (udp_len as usize)
        .saturating_sub(8)
        .min(linear.saturating_sub(payload))
        .min(UDP_HASHED_BYTES);
    // The payload goes where an IPv4 header without options puts it in the headers' copy:
    // there it already is; after IPv6's header or IPv4's options it is copied there.
    if (ip.v6 || ip.ihl != 5) && n != 0 {
        // SAFETY: at most UDP_HASHED_BYTES; the source is the packet's linear data.
        if unsafe { copy_payload(h, network + payload, n) } != 0 {
            return None;
        }
    }
    let hash = tsync_common::udp_payload_hash(&payload_words(h, n), n as u32);
    w[7] = 0;
    w[8] = u64::from(IPPROTO_UDP) | u64::from(ip.ihl) << 8 | (hash & 0xffff_ffff) << 32;
    w[9] = hash >> 32 | u64::from(udp_len) << 32 | u64::from(flags) << 48 | u64::from(ip.ttl) << 56;
    Some(if ip.v6 {
        kind::UDP6_HASHED
    } else {
        kind::UDP4_HASHED
    })
}

/// Where a datagram's payload lies in [`Headers`] for the hash: where the headers' copy holds
/// it over IPv4 without options (20 + 8 bytes on), and where [`copy_payload`] puts it otherwise.
const PAYLOAD_AT: usize = L4_AFTER_V4 + 8;
const _: () = assert!(PAYLOAD_AT + UDP_HASHED_BYTES <= HEADERS);

/// The payload's first `n` bytes (at most [`UDP_HASHED_BYTES`]) as the little-endian words the
/// hash takes, zero past them: the buffer holds bytes after the datagram there (the tail of
/// the socket buffer, an Ethernet frame's padding), which differ from one end to the other.
/// Each word is two 4-aligned loads (byte 28 is not 8-aligned, and the verifier accepts aligned
/// loads only). A datagram of 32 bytes or more, the common case, costs one compare for the
/// masks.
#[inline(always)]
fn payload_words(h: &Headers, n: usize) -> [u64; UDP_HASHED_BYTES / 8] {
    let mut out = [0u64; UDP_HASHED_BYTES / 8];
    let mut i = 0;
    while i < out.len() {
        let at = PAYLOAD_AT + 8 * i;
        out[i] = u64::from(h.at::<u32>(at)) | u64::from(h.at::<u32>(at + 4)) << 32;
        i += 1;
    }
    if n < UDP_HASHED_BYTES {
        let mut i = 0;
        while i < out.len() {
            let start = 8 * i;
            if n <= start {
                out[i] = 0;
            } else if n < start + 8 {
                // 1 to 7 bytes of this word are the payload's.
                out[i] &= (1u64 << ((n - start) * 8)) - 1;
            }
            i += 1;
        }
    }
    out
}

/// Copies `n` (at most [`UDP_HASHED_BYTES`]) bytes of kernel memory at `src` into `h` at
/// [`PAYLOAD_AT`]; 0 on success.
///
/// The size a helper takes must be bounded on the very register that holds it. LLVM kept `n`
/// on the stack and loaded it into that register right before the call, and Linux 6.1's
/// verifier does not carry a bound learned on a register over to its stack copy ("R2 min value
/// is negative", found by `cargo xtask lab`; 6.12 and later do). So `n` goes through the stack
/// on purpose, is read back right before the call, and is bounded there: a compare (the copy
/// of the whole prefix) and a mask, on the register the call takes.
///
/// # Safety
/// `src` is read with the fault-safe helper; the buffer is `h`'s.
#[inline(always)]
unsafe fn copy_payload(h: &mut Headers, src: usize, n: usize) -> i64 {
    let mut spilled = core::mem::MaybeUninit::<usize>::uninit();
    // SAFETY: a slot of this frame, written before it is read; the copies stay inside `h`.
    unsafe {
        spilled.as_mut_ptr().write_volatile(n);
        let n = spilled.as_ptr().read_volatile();
        let dst = h.0.as_mut_ptr().add(PAYLOAD_AT);
        if n >= UDP_HASHED_BYTES {
            copy(dst, src, UDP_HASHED_BYTES)
        } else {
            copy(dst, src, n % UDP_HASHED_BYTES)
        }
    }
}

/// Copies `len` bytes of kernel memory at `src` that is not BTF-typed (the packet headers) to
/// `dst`; 0 on success.
///
/// # Safety
/// `dst` must be valid for `len` bytes of writes.
#[inline(always)]
pub unsafe fn copy(dst: *mut u8, src: usize, len: usize) -> i64 {
    // SAFETY: per the contract; the helper's reads of `src` are fault-safe.
    unsafe {
        aya_ebpf::helpers::generated::bpf_probe_read_kernel(
            dst.cast(),
            len as u32,
            src as *const core::ffi::c_void,
        )
    }
}
