//! What the tsync kernel programs and the user-space tools share.
//!
//! The [`PacketEvent`] record is written by the eBPF programs into the ring buffer, copied unchanged
//! by the agent into the trace file, and read back by the analyzer without per-record decoding. Its
//! layout is therefore part of the file format: `#[repr(C)]`, no padding, little-endian (every
//! Linux target tsync runs on is little-endian; the file header records the byte order anyway).
#![cfg_attr(not(feature = "user"), no_std)]

#[cfg(feature = "user")]
pub mod build_info;
#[cfg(feature = "user")]
pub mod format;

/// Size in bytes of one [`PacketEvent`] (ring buffer entry and trace file record).
pub const EVENT_SIZE: usize = 80;

/// Which hook saw the packet.
pub mod direction {
    /// `net:net_dev_queue`, inside `dev_queue_xmit`: the packet leaves the node.
    pub const SEND: u8 = 0;
    /// `net:netif_receive_skb`: the packet enters the node.
    pub const RECV: u8 = 1;
}

/// What kind of packet the digest describes.
pub mod kind {
    /// IPv4 + TCP: the 31-byte digest of LTTng's `dev_xmit_extended`.
    pub const TCP4: u8 = 1;
    /// IPv6 + TCP (no extension headers): the same digest with 16-byte addresses.
    pub const TCP6: u8 = 2;
    /// IPv4 + UDP: ports, lengths and the first 8 payload bytes, as LTTng's `udpv4_rcv_extended`.
    pub const UDP4: u8 = 3;
    /// TCP seen by LTTng's old add-on events (`inet_sock_local_out`/`_in`, read from LTTng
    /// traces, never recorded by the agent): sequence and acknowledgment numbers, data offset
    /// and flags only — no addresses, ports or lengths. A kind of its own, so that such a
    /// digest only ever matches another add-on event.
    pub const TCP_ADDON: u8 = 4;
    /// IPv4 + UDP (format version 5 on): ports, lengths and, in `udp_data`, the
    /// [`udp_payload_hash`](crate::udp_payload_hash) of the first payload bytes instead of the
    /// bytes themselves. A kind of its own: its digest never matches a [`UDP4`] one.
    pub const UDP4_HASHED: u8 = 5;
    /// IPv6 + UDP (no extension headers; format version 5 on): as [`UDP4_HASHED`].
    pub const UDP6_HASHED: u8 = 6;
}

/// Bits of [`PacketEvent::flags`](crate::PacketEvent::flags) (format version 5 on).
pub mod flag {
    /// The event is a tunnel's outer packet (VXLAN on UDP ports 4789 or 8472, Geneve on 6081)
    /// seen on the interface that carries the tunnel: the digest describes the *inner* packet,
    /// so that the outer send on one node's wire and the outer receive on the other's match by
    /// the packet they carry.
    pub const ENCAPSULATED: u8 = 0x01;
    /// The other seven bits (format version 6 on): [`netns_tag`](crate::netns_tag) of the
    /// network namespace the packet was seen in, where the agent records several (`--netns`
    /// more than once, `--all-netns`); 0 where it records one. Interface indexes repeat across
    /// namespaces (a pod's `eth0` is often ifindex 2, as is its node's uplink), so an interface
    /// is its index *and* this tag: without it, a packet leaving a pod by its ifindex 2 and its
    /// node by ifindex 2 looked sent twice on one interface, a retransmission, and was never
    /// matched.
    pub const NETNS_TAG: u8 = 0xfe;
}

/// The 7-bit tag of network namespace `inum` (its inode number) in an event's
/// [`flags`](PacketEvent::flags) ([`flag::NETNS_TAG`]): a multiplicative hash, never 0. Two
/// namespaces may share a tag (1 in 127 pairs); then their interfaces of one index look like
/// one, and a packet crossing both stays unmatched as if repeated, never wrongly paired.
///
/// Not a hash of the device's address, which the hook holds already: the verifier refuses
/// arithmetic on a kernel pointer other than adding to it.
#[inline(always)]
pub const fn netns_tag(inum: u32) -> u8 {
    let h = (inum.wrapping_mul(0x9E37_79B1) >> 25) as u8;
    // 1 to 127, in the flag's upper seven bits.
    (h % 127 + 1) << 1
}

/// The most network namespaces one agent records by name (`tsync-agent record --netns`): the
/// programs compare a packet's namespace with each (`names::global::NETNS_LIST`). More are
/// recorded with `--all-netns`.
pub const MAX_NETNS: usize = 16;

/// Payload bytes a hashed UDP digest covers ([`kind::UDP4_HASHED`], [`kind::UDP6_HASHED`]).
///
/// 32: the application headers that tell datagrams apart lie there (DNS's id and question,
/// RTP's sequence number and timestamp, QUIC's connection id and packet number followed by
/// ciphertext), and over IPv4 the hook finds them in the bytes it copies for the headers
/// anyway (20 + 8 + 32 of its 64): a second copy, of 64 bytes, made a UDP event 33 % dearer.
pub const UDP_HASHED_BYTES: usize = 32;

/// The 64-bit hash of a UDP datagram's first payload bytes that stands in `udp_data` for the
/// hashed UDP kinds: it tells apart the datagrams of one flow where the IP ID cannot (Linux sends
/// 0 for every DF datagram of an unconnected socket) and the first bytes are alike (QUIC's flags
/// and connection ID), and no payload ever leaves the kernel.
///
/// `words` are the first `len` (at most [`UDP_HASHED_BYTES`]) payload bytes as little-endian
/// words, zero past `len`; the kernel programs and every user-space writer (the simulator, the
/// tests) compute it with this one function.
///
/// Two chains of multiply-xorshift steps, one over the even words and one over the odd ones,
/// combined by an exclusive or: the chains do not wait for each other (one chain over the four
/// words waits for the multiplier four times over), and each step is a bijection of its state
/// for a given word and of the word for a given state, so any one changed byte changes the
/// result. The xorshifts bring every bit of a word down before the next multiplication spreads
/// it up (a plain sum of products would let two words that differ in their top bytes only
/// cancel out, one time in 256), and the second chain is rotated by half a word before the two
/// are combined, so that their differences do not line up. No step after the combination: the
/// digest is compared for equality only, and the analyzer hashes its keys itself.
#[inline(always)]
pub fn udp_payload_hash(words: &[u64; UDP_HASHED_BYTES / 8], len: u32) -> u64 {
    /// Odd constants: the fractional digits of the golden ratio and of √3, as 64-bit integers.
    const K: [u64; 2] = [0x9E37_79B9_7F4A_7C15, 0xBB67_AE85_84CA_A73B];
    #[inline(always)]
    fn step(h: u64, word: u64, k: u64) -> u64 {
        let h = (h ^ word).wrapping_mul(k);
        h ^ h >> 29
    }
    let even = step(step(u64::from(len) ^ K[0], words[0], K[0]), words[2], K[0]);
    let odd = step(step(K[1], words[1], K[1]), words[3], K[1]);
    even ^ odd.rotate_left(32)
}

/// The `udp_data` of a hashed UDP digest ([`kind::UDP4_HASHED`], [`kind::UDP6_HASHED`]) of a
/// datagram whose payload begins with `payload`: [`udp_payload_hash`] of its first
/// [`UDP_HASHED_BYTES`] bytes (all of them if fewer), little-endian. For user-space writers of
/// digests (the simulator, tests), which hold payloads as byte strings.
pub fn udp_hashed_data(payload: &[u8]) -> [u8; 8] {
    let len = payload.len().min(UDP_HASHED_BYTES);
    let mut words = [0u64; UDP_HASHED_BYTES / 8];
    for (i, &b) in payload[..len].iter().enumerate() {
        words[i / 8] |= u64::from(b) << (8 * (i % 8));
    }
    udp_payload_hash(&words, len as u32).to_le_bytes()
}

/// Names in the eBPF object that the programs (`tsync-ebpf`), the agent's loader and the test lab
/// share: programs, maps, read-only globals and the programs' log target.
///
/// aya-ebpf's `#[btf_tracepoint]` and `#[map]` and `#[unsafe(no_mangle)]` statics take their
/// names from literals and identifiers, not constants, so `tsync-ebpf` spells them out once more;
/// the agent's test `the_object_declares_the_shared_names` checks the built object against this
/// module.
pub mod names {
    /// The send program, named after the tracepoint it attaches to (`net:net_dev_queue`).
    pub const SEND_PROGRAM: &str = "net_dev_queue";
    /// The receive program and its tracepoint (`net:netif_receive_skb`).
    pub const RECV_PROGRAM: &str = "netif_receive_skb";
    /// Both programs, indexed by [`direction`](crate::direction).
    pub const PROGRAMS: [&str; 2] = [SEND_PROGRAM, RECV_PROGRAM];
    /// The program that writes out one CPU's batch of events ([`batch`](crate::batch)), run by
    /// the agent on that CPU, never attached.
    pub const FLUSH_PROGRAM: &str = "tsync_flush";

    /// Ring buffer of [`PacketEvent`](crate::PacketEvent)s.
    pub const EVENTS_MAP: &str = "EVENTS";
    /// Per-CPU counters of lost events, indexed by direction.
    pub const LOST_MAP: &str = "LOST";
    /// Per-CPU counters of the rare conditions the programs log, indexed by [`notice`].
    pub const NOTICES_MAP: &str = "NOTICES";
    /// aya-log's ring buffer of log records (declared by `aya-log-ebpf`).
    pub const LOG_MAP: &str = "AYA_LOGS";
    /// Per-CPU batches of events not yet in the ring buffer ([`batch`](crate::batch)).
    pub const BATCHES_MAP: &str = "BATCHES";
    /// Per CPU, the timestamp of the oldest event in its batch, 0 when empty.
    pub const PENDING_MAP: &str = "PENDING";
    /// Every map of the object.
    pub const MAPS: [&str; 6] = [
        EVENTS_MAP,
        LOST_MAP,
        NOTICES_MAP,
        LOG_MAP,
        BATCHES_MAP,
        PENDING_MAP,
    ];

    /// `log` target of the programs' messages (`RUST_LOG=tsync_ebpf=info`).
    pub const LOG_TARGET: &str = "tsync_ebpf";

    /// Read-only globals the agent sets before loading: kernel struct offsets from BTF, the
    /// namespace filter and the wakeup threshold.
    pub mod global {
        pub const SKB_DEV: &str = "SKB_DEV";
        pub const SKB_PROTOCOL: &str = "SKB_PROTOCOL";
        pub const SKB_NETWORK_HEADER: &str = "SKB_NETWORK_HEADER";
        pub const SKB_HEAD: &str = "SKB_HEAD";
        pub const SKB_DATA: &str = "SKB_DATA";
        /// `sk_buff.tail`, `len` and `data_len`: where the linear data ends (UDP payload
        /// hashes, tunnels).
        pub const SKB_TAIL: &str = "SKB_TAIL";
        pub const SKB_LEN: &str = "SKB_LEN";
        pub const SKB_DATA_LEN: &str = "SKB_DATA_LEN";
        pub const DEV_IFINDEX: &str = "DEV_IFINDEX";
        pub const DEV_ND_NET: &str = "DEV_ND_NET";
        pub const NET_NS_INUM: &str = "NET_NS_INUM";
        /// The one network namespace to record (its inode number); 0 for none in particular.
        pub const NETNS_INUM: &str = "NETNS_INUM";
        /// When several namespaces are recorded (`NETNS_INUM` 0): their inode numbers, then
        /// zeros (`[u32; MAX_NETNS]`, [`MAX_NETNS`](crate::MAX_NETNS)); all zeros otherwise.
        pub const NETNS_LIST: &str = "NETNS_LIST";
        pub const WAKEUP_BYTES: &str = "WAKEUP_BYTES";
        /// 1 when the programs batch events per CPU ([`batch`](crate::batch)).
        pub const BATCHING: &str = "BATCHING";
        /// aya-log's level filter (declared by `aya-log-ebpf`).
        pub const LOG_LEVEL: &str = "AYA_LOG_LEVEL";
        /// Every global of the object.
        pub const ALL: [&str; 16] = [
            SKB_DEV,
            SKB_PROTOCOL,
            SKB_NETWORK_HEADER,
            SKB_HEAD,
            SKB_DATA,
            SKB_TAIL,
            SKB_LEN,
            SKB_DATA_LEN,
            DEV_IFINDEX,
            DEV_ND_NET,
            NET_NS_INUM,
            NETNS_INUM,
            NETNS_LIST,
            WAKEUP_BYTES,
            BATCHING,
            LOG_LEVEL,
        ];
    }

    /// Indexes of [`NOTICES_MAP`]: the rare conditions the programs report through aya-log.
    pub mod notice {
        /// A packet's headers could not be copied (the event is counted as lost).
        pub const UNREADABLE: u32 = 0;
        /// A sent IP packet without a network header offset.
        pub const NO_NETWORK_HEADER: u32 = 1;
        /// The bytes at the network header are not the IP header the EtherType announces.
        pub const NOT_IP: u32 = 2;
        /// Number of kinds.
        pub const COUNT: u32 = 3;
    }
}

/// The programs' per-CPU batches of events: a hook appends its event to its CPU's batch, and the
/// event that fills it writes the batch into the ring buffer as one record of `count ×`
/// [`EVENT_SIZE`] bytes (a ring-buffer write costs more than the rest of the hook). A quiet CPU's
/// partial batch is written when the agent runs the flush program ([`names::FLUSH_PROGRAM`]) on
/// that CPU.
pub mod batch {
    /// Events per batch.
    pub const EVENTS: usize = 32;

    /// One CPU's batch: the value of the per-CPU map `BATCHES`
    /// ([`names::BATCHES_MAP`](crate::names::BATCHES_MAP)). Only that CPU's programs touch it;
    /// the agent reads it only for a CPU that went offline, where nothing runs.
    #[repr(C)]
    #[derive(Clone, Copy)]
    #[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
    pub struct Batch {
        /// Events held, fewer than [`EVENTS`] between program runs.
        pub count: u32,
        /// Nonzero while a program on this CPU works on the batch.
        pub busy: u32,
        /// How many of the held events are sends: the lost counters are per direction.
        pub sends: u32,
        pub pad: u32,
        /// The events, as the ring buffer receives them ([`PacketEvent`](crate::PacketEvent)s
        /// as 8-byte words).
        pub events: [[u64; crate::EVENT_SIZE / 8]; EVENTS],
    }

    /// The flush program's return value when it interrupted a program working on the batch: the
    /// batch is left for a later flush.
    pub const FLUSH_BUSY: u32 = 1;
    /// The oldest kernel whose `BPF_PROG_TEST_RUN` runs a program on a chosen CPU
    /// (`BPF_F_TEST_RUN_ON_CPU`): older ones record without batches.
    pub const MIN_KERNEL: (u32, u32) = (5, 10);
}

/// TCP flag bits as they stand in byte 13 of the TCP header (`tcp_flags`).
pub mod tcp_flag {
    pub const FIN: u8 = 0x01;
    pub const SYN: u8 = 0x02;
    pub const RST: u8 = 0x04;
    pub const PSH: u8 = 0x08;
    pub const ACK: u8 = 0x10;
    pub const URG: u8 = 0x20;
}

/// The IPv4 EtherType, as stored in [`PacketEvent::network_protocol`].
pub const ETH_P_IP: u16 = 0x0800;
/// The IPv6 EtherType.
pub const ETH_P_IPV6: u16 = 0x86DD;
/// IP protocol number of TCP.
pub const IPPROTO_TCP: u8 = 6;
/// IP protocol number of UDP.
pub const IPPROTO_UDP: u8 = 17;

/// One packet seen by a hook: a header digest (never payload: a hash of UDP's first bytes; the
/// first 8 bytes themselves in [`kind::UDP4`] digests of format versions ≤ 4) and where and when
/// it was seen.
///
/// Multi-byte integers are in host (little-endian) order, converted from network order in the
/// kernel, except the addresses, which keep network order byte by byte (an IPv4 address fills the
/// first 4 bytes, the rest is zero).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct PacketEvent {
    /// `bpf_ktime_get_ns()` (CLOCK_MONOTONIC) at the hook; in a file, after `--clock-skew`.
    pub ts_ns: u64,
    /// Index of the interface the packet left or entered by.
    pub ifindex: u32,
    /// CPU the hook ran on.
    pub cpu: u16,
    /// [`direction::SEND`] or [`direction::RECV`].
    pub direction: u8,
    /// One of [`kind`]: the agent of format version 5 writes TCP4, TCP6, UDP4_HASHED and
    /// UDP6_HASHED.
    pub kind: u8,
    /// Source address, network byte order.
    pub saddr: [u8; 16],
    /// Destination address, network byte order.
    pub daddr: [u8; 16],
    /// EtherType of the network header ([`ETH_P_IP`] or [`ETH_P_IPV6`]).
    pub network_protocol: u16,
    /// IPv4 total length; for IPv6 the payload length plus the 40-byte fixed header.
    pub tot_len: u16,
    /// Source port.
    pub source: u16,
    /// Destination port.
    pub dest: u16,
    /// TCP sequence number (0 for UDP).
    pub seq: u32,
    /// TCP acknowledgment number (0 for UDP).
    pub ack_seq: u32,
    /// IP protocol number ([`IPPROTO_TCP`] or [`IPPROTO_UDP`]).
    pub transport_protocol: u8,
    /// IPv4 header length in 32-bit words (0 for IPv6).
    pub ihl: u8,
    /// TCP data offset in 32-bit words (0 for UDP).
    pub doff: u8,
    /// TCP flags byte (see [`tcp_flag`]; 0 for UDP).
    pub tcp_flags: u8,
    /// [`kind::UDP4`]: the first 8 payload bytes, zero-padded. The hashed UDP kinds: the
    /// [`udp_payload_hash`] of the first payload bytes, little-endian ([`udp_hashed_data`]).
    /// TCP: zero.
    pub udp_data: [u8; 8],
    /// UDP length field (0 for TCP).
    pub udp_len: u16,
    /// Bits of [`flag`] (format version 5 on; zero before).
    pub flags: u8,
    /// IPv4 TTL or IPv6 hop limit of the digested packet as the hook saw it (format version 5
    /// on; zero before, and in digests read from LTTng traces): a node that routes a packet
    /// lowers it between its receive and its send.
    pub ttl: u8,
}

const _: () = assert!(core::mem::size_of::<PacketEvent>() == EVENT_SIZE);
const _: () = assert!(core::mem::align_of::<PacketEvent>() == 8);
// The kernel programs (built once for `bpfel`) and the agents of every architecture (x86_64,
// aarch64) exchange this record byte for byte: its layout is pinned here, field by field, and so
// checked by every build, whatever its target.
const _: () = {
    use core::mem::offset_of;
    let offsets = [
        (offset_of!(PacketEvent, ts_ns), 0),
        (offset_of!(PacketEvent, ifindex), 8),
        (offset_of!(PacketEvent, cpu), 12),
        (offset_of!(PacketEvent, direction), 14),
        (offset_of!(PacketEvent, kind), 15),
        (offset_of!(PacketEvent, saddr), 16),
        (offset_of!(PacketEvent, daddr), 32),
        (offset_of!(PacketEvent, network_protocol), 48),
        (offset_of!(PacketEvent, tot_len), 50),
        (offset_of!(PacketEvent, source), 52),
        (offset_of!(PacketEvent, dest), 54),
        (offset_of!(PacketEvent, seq), 56),
        (offset_of!(PacketEvent, ack_seq), 60),
        (offset_of!(PacketEvent, transport_protocol), 64),
        (offset_of!(PacketEvent, ihl), 65),
        (offset_of!(PacketEvent, doff), 66),
        (offset_of!(PacketEvent, tcp_flags), 67),
        (offset_of!(PacketEvent, udp_data), 68),
        (offset_of!(PacketEvent, udp_len), 76),
        (offset_of!(PacketEvent, flags), 78),
        (offset_of!(PacketEvent, ttl), 79),
    ];
    let mut i = 0;
    while i < offsets.len() {
        assert!(offsets[i].0 == offsets[i].1, "PacketEvent layout changed");
        i += 1;
    }
};

impl PacketEvent {
    /// True for the TCP kinds.
    pub fn is_tcp(&self) -> bool {
        self.kind == kind::TCP4 || self.kind == kind::TCP6
    }

    /// TCP payload length in bytes, from the IP and TCP header lengths (saturating at 0).
    pub fn tcp_payload_len(&self) -> u32 {
        let ip_header = if self.kind == kind::TCP6 {
            40
        } else {
            4 * u32::from(self.ihl)
        };
        u32::from(self.tot_len).saturating_sub(ip_header + 4 * u32::from(self.doff))
    }
}
