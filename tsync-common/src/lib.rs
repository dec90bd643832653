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
        pub const DEV_IFINDEX: &str = "DEV_IFINDEX";
        pub const DEV_ND_NET: &str = "DEV_ND_NET";
        pub const NET_NS_INUM: &str = "NET_NS_INUM";
        pub const NETNS_INUM: &str = "NETNS_INUM";
        pub const WAKEUP_BYTES: &str = "WAKEUP_BYTES";
        /// 1 when the programs batch events per CPU ([`batch`](crate::batch)).
        pub const BATCHING: &str = "BATCHING";
        /// aya-log's level filter (declared by `aya-log-ebpf`).
        pub const LOG_LEVEL: &str = "AYA_LOG_LEVEL";
        /// Every global of the object.
        pub const ALL: [&str; 12] = [
            SKB_DEV,
            SKB_PROTOCOL,
            SKB_NETWORK_HEADER,
            SKB_HEAD,
            SKB_DATA,
            DEV_IFINDEX,
            DEV_ND_NET,
            NET_NS_INUM,
            NETNS_INUM,
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

/// One packet seen by a hook: a header digest (never payload, but UDP's first 8 bytes) and where and
/// when it was seen.
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
    /// [`kind::TCP4`], [`kind::TCP6`] or [`kind::UDP4`].
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
    /// UDP: the first 8 payload bytes, zero-padded. TCP: zero.
    pub udp_data: [u8; 8],
    /// UDP length field (0 for TCP).
    pub udp_len: u16,
    /// Zero; room for later versions.
    pub reserved: [u8; 2],
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
        (offset_of!(PacketEvent, reserved), 78),
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
