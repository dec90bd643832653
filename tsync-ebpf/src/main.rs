//! Kernel side of tsync: one program on each of the `net:net_dev_queue` (send) and
//! `net:netif_receive_skb` (receive) tracepoints, attached as BTF-enabled raw tracepoints
//! (`tp_btf`), so the `struct sk_buff *` arrives directly as argument 0 and every interface —
//! including ones created while recording — is covered.
//!
//! Per IPv4/TCP, IPv6/TCP and IPv4/UDP packet the programs write one [`PacketEvent`] (a header
//! digest, never payload beyond UDP's first 8 bytes) into the `EVENTS` ring buffer. A failed
//! reservation is counted per CPU and direction in `LOST`, so losses are never silent.
//!
//! Rare conditions — headers that could not be copied, an IP packet without a network header
//! offset or whose network header is not the IP header its EtherType announces — are logged with
//! aya-log (the agent prints them with `-v`), never on the per-packet path. Each is counted per
//! CPU in `NOTICES` and logged at its 1st, 2nd, 4th, 8th… occurrence, so a flood of odd packets
//! cannot flood the log. All are at level info: the agent switches off (`AYA_LOG_LEVEL`) the
//! levels it will not show, and a statement at its default level (warn) would be verified at
//! every start for nothing (a log statement is ~7 KiB of instructions, ~20 ms of the agent's CPU
//! to verify); a lost event is counted and reported in the summary anyway. The names of
//! programs, maps and globals are `tsync_common::names`.
//!
//! aya-ebpf has no CO-RE relocations: the offsets of the kernel struct fields read here are resolved
//! by the agent from the running kernel's BTF and passed in as read-only globals before loading. The
//! verifier sees frozen read-only globals as constants, so they cost nothing at run time.
#![cfg_attr(target_arch = "bpf", no_std)]
#![cfg_attr(target_arch = "bpf", no_main)]
// On the host this crate is only type-checked (clippy); the programs run on the BPF target.
#![cfg_attr(not(target_arch = "bpf"), allow(dead_code))]

use aya_ebpf::{
    bindings::{BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    helpers::{bpf_get_smp_processor_id, bpf_ktime_get_ns, bpf_probe_read_kernel},
    macros::{btf_tracepoint, map},
    maps::{PerCpuArray, RingBuf},
    programs::BtfTracePointContext,
};
use aya_log_ebpf::info;
use tsync_common::{
    ETH_P_IP, ETH_P_IPV6, IPPROTO_TCP, IPPROTO_UDP, PacketEvent, direction, kind,
    names::{LOG_TARGET, notice},
};

// Program, map and global names are spelled as in `tsync_common::names` (the macros need
// literals and identifiers); the agent's tests check the built object against that module.

/// Packet digests for the agent. Its size is set by the agent at load time (`--ring-size`).
#[map]
static EVENTS: RingBuf = RingBuf::with_byte_size(1 << 24, 0);

/// Events dropped because the ring buffer was full, per CPU, indexed by direction.
#[map]
static LOST: PerCpuArray<u64> = PerCpuArray::with_max_entries(2, 0);

/// How often each rare condition was met, per CPU, indexed by `names::notice` (see [`notice`]).
#[map]
static NOTICES: PerCpuArray<u64> = PerCpuArray::with_max_entries(notice::COUNT, 0);

// Kernel struct field offsets in bytes, from the running kernel's BTF (set by the agent).
/// `sk_buff.dev` (`struct net_device *`).
#[unsafe(no_mangle)]
static SKB_DEV: u32 = 0;
/// `sk_buff.protocol` (`__be16`).
#[unsafe(no_mangle)]
static SKB_PROTOCOL: u32 = 0;
/// `sk_buff.network_header` (`__u16`, offset from `head`).
#[unsafe(no_mangle)]
static SKB_NETWORK_HEADER: u32 = 0;
/// `sk_buff.head` (`unsigned char *`).
#[unsafe(no_mangle)]
static SKB_HEAD: u32 = 0;
/// `sk_buff.data` (`unsigned char *`).
#[unsafe(no_mangle)]
static SKB_DATA: u32 = 0;
/// `net_device.ifindex` (`int`).
#[unsafe(no_mangle)]
static DEV_IFINDEX: u32 = 0;
/// `net_device.nd_net.net` (`struct net *`).
#[unsafe(no_mangle)]
static DEV_ND_NET: u32 = 0;
/// `net.ns.inum` (`unsigned int`): the network namespace's inode number.
#[unsafe(no_mangle)]
static NET_NS_INUM: u32 = 0;
/// Only packets of devices in the network namespace with this inode number are recorded; 0 = all.
#[unsafe(no_mangle)]
static NETNS_INUM: u32 = 0;

/// Wake the agent when this many bytes wait in the ring buffer (set by the agent). Below that it
/// drains on its own timer: a wakeup per event (the ring buffer's default) costs an interrupt per
/// packet, more than the whole digest.
#[unsafe(no_mangle)]
static WAKEUP_BYTES: u32 = 1 << 20;

/// `network_header` value meaning "not set" (`(u16)~0U`).
const HEADER_UNSET: u16 = 0xffff;

/// Send hook: `net:net_dev_queue(struct sk_buff *skb)`, inside `__dev_queue_xmit`.
#[btf_tracepoint(function = "net_dev_queue")]
pub fn net_dev_queue(ctx: BtfTracePointContext) -> i32 {
    record(&ctx, direction::SEND);
    0
}

/// Receive hook: `net:netif_receive_skb(struct sk_buff *skb)`.
#[btf_tracepoint(function = "netif_receive_skb")]
pub fn netif_receive_skb(ctx: BtfTracePointContext) -> i32 {
    record(&ctx, direction::RECV);
    0
}

/// Reads a global set by the agent; volatile so the compiler does not fold the default value.
#[inline(always)]
fn global(v: &'static u32) -> usize {
    // SAFETY: reading a plain static.
    unsafe { core::ptr::read_volatile(v) as usize }
}

/// Loads a field of a kernel struct the program holds a BTF-typed pointer to (`sk_buff`,
/// `net_device`, `net`). The verifier knows the pointer's type and, from the frozen globals, the
/// constant offset: it checks the access against the kernel's BTF and turns it into a single
/// fault-safe load, far cheaper than a `bpf_probe_read_kernel` call.
#[inline(always)]
fn field<T: Copy>(base: usize, off: usize) -> T {
    // SAFETY: `base` is a BTF-typed kernel pointer and `off` a field offset taken from the same
    // kernel's BTF; the verifier rejects the program otherwise, and the JIT-ed load cannot fault.
    unsafe { core::ptr::read_volatile((base + off) as *const T) }
}

/// Copies `T` from kernel memory that is not BTF-typed (the packet headers).
#[inline(always)]
fn read<T>(addr: usize) -> Option<T> {
    // SAFETY: bpf_probe_read_kernel copies through the kernel's fault-safe accessor; a bad address
    // yields an error, never a crash.
    unsafe { bpf_probe_read_kernel(addr as *const T).ok() }
}

/// Builds and submits the event for one packet; non-IP, other protocols and foreign namespaces are
/// skipped.
#[inline(always)]
fn record(ctx: &BtfTracePointContext, dir: u8) {
    let skb: usize = ctx.arg(0);
    let ev = match digest(skb, dir) {
        Digest::Event(ev) => ev,
        Digest::NotOurs => return,
        Digest::Unreadable { dev } => {
            count_lost(dir);
            if dir == direction::SEND {
                log_unreadable::<true>(ctx, dev);
            } else {
                log_unreadable::<false>(ctx, dev);
            }
            return;
        }
        Digest::NoNetworkHeader { dev, protocol } => {
            if dir == direction::SEND {
                log_no_network_header::<true>(ctx, dev, protocol);
            } else {
                log_no_network_header::<false>(ctx, dev, protocol);
            }
            return;
        }
        Digest::NotIp {
            dev,
            protocol,
            first_byte,
        } => {
            if dir == direction::SEND {
                log_not_ip::<true>(ctx, dev, protocol, first_byte);
            } else {
                log_not_ip::<false>(ctx, dev, protocol, first_byte);
            }
            return;
        }
    };
    match EVENTS.reserve::<PacketEvent>(0) {
        Some(mut entry) => {
            entry.write(ev);
            entry.submit(wakeup_flag());
        }
        None => count_lost(dir),
    }
}

// The log statements live in functions of their own (BPF-to-BPF calls, on rare paths only), one
// per hook (`SEND`), so that their buffers are not part of the per-packet frame and the hook's
// name is a constant (a string of either length was copied with a call to `memcpy`). Linux 6.1's
// verifier adds up the frames of a call chain, each rounded up to 32 bytes (an empty one counts
// as 32), against a limit of 512: inlined, the statements made a 488-byte frame that, with the
// call to `memcpy`, came to 544, and 6.1 refused the programs (found by `cargo xtask lab`; newer
// kernels round less). Now the chain is the hook's frame and one log function's.

/// Logs headers that could not be read (the event was counted as lost).
#[inline(never)]
fn log_unreadable<const SEND: bool>(ctx: &BtfTracePointContext, dev: usize) {
    if let Some((n, cpu)) = notice(notice::UNREADABLE) {
        info!(
            ctx,
            target: LOG_TARGET,
            "{} hook: the headers of an IP packet on ifindex {} could not be read; \
             counted as lost (occurrence {} on CPU {})",
            hook(SEND),
            ifindex(dev),
            n,
            cpu
        );
    }
}

/// Logs a sent IP packet without a network header offset.
#[inline(never)]
fn log_no_network_header<const SEND: bool>(ctx: &BtfTracePointContext, dev: usize, protocol: u16) {
    if let Some((n, cpu)) = notice(notice::NO_NETWORK_HEADER) {
        info!(
            ctx,
            target: LOG_TARGET,
            "{} hook: packet of EtherType 0x{:x} on ifindex {} has no network header \
             offset; not recorded (occurrence {} on CPU {})",
            hook(SEND),
            protocol,
            ifindex(dev),
            n,
            cpu
        );
    }
}

/// Logs a network header that is not the IP header its EtherType announces.
#[inline(never)]
fn log_not_ip<const SEND: bool>(
    ctx: &BtfTracePointContext,
    dev: usize,
    protocol: u16,
    first_byte: u8,
) {
    if let Some((n, cpu)) = notice(notice::NOT_IP) {
        info!(
            ctx,
            target: LOG_TARGET,
            "{} hook: packet of EtherType 0x{:x} on ifindex {} starts with 0x{:x} at its \
             network header, not an IP header of that version; not recorded \
             (occurrence {} on CPU {})",
            hook(SEND),
            protocol,
            ifindex(dev),
            first_byte,
            n,
            cpu
        );
    }
}

/// Counts a packet that should have been recorded but was not (ring buffer full, or its headers
/// could not be copied): lost events are never silent.
#[inline(always)]
fn count_lost(dir: u8) {
    if let Some(count) = LOST.get_ptr_mut(u32::from(dir)) {
        // SAFETY: per-CPU slot, only this CPU's program touches it while it runs.
        unsafe { *count += 1 };
    }
}

/// Counts one occurrence of a rare condition on this CPU; returns the count and the CPU when it is
/// a power of two (the occurrences that are logged).
#[inline(always)]
fn notice(which: u32) -> Option<(u64, u32)> {
    let count = NOTICES.get_ptr_mut(which)?;
    // SAFETY: per-CPU slot, only this CPU's program touches it while it runs.
    let n = unsafe {
        *count += 1;
        *count
    };
    if !n.is_power_of_two() {
        return None;
    }
    // SAFETY: helper without preconditions.
    let cpu = unsafe { bpf_get_smp_processor_id() };
    Some((n, cpu))
}

/// The hook's name in log messages.
#[inline(always)]
fn hook(send: bool) -> &'static str {
    if send { "send" } else { "receive" }
}

/// The interface index of a `net_device` (for log messages).
#[inline(always)]
fn ifindex(dev: usize) -> u32 {
    field::<i32>(dev, global(&DEV_IFINDEX)) as u32
}

/// What the hook makes of a packet.
enum Digest {
    /// A packet of a recorded kind.
    Event(PacketEvent),
    /// Another namespace, not IP, not TCP/UDP, a later fragment, IPv6 extension headers, …
    NotOurs,
    /// An IP packet of ours whose headers could not be copied (counted as lost, and logged).
    Unreadable { dev: usize },
    /// A sent IP packet of ours without a network header offset (logged).
    NoNetworkHeader { dev: usize, protocol: u16 },
    /// An IP packet of ours whose network header does not hold the IP header its EtherType
    /// announces: a wrong version or an IPv4 header length under 20 bytes (logged).
    NotIp {
        dev: usize,
        protocol: u16,
        first_byte: u8,
    },
}

/// Bytes of headers read at once from the network header: IPv4 (20) or IPv6 (40) plus TCP (20) or
/// UDP (8) and 8 UDP payload bytes. One copy is cheaper than one per header. An IPv4 header with
/// options needs a second copy for the transport header.
const HEADERS: usize = 60;

/// Submit flag: wake the agent only for the record that makes the waiting data cross
/// `WAKEUP_BYTES` (records racing on other CPUs may step over it; the agent's timer covers that).
#[inline(always)]
fn wakeup_flag() -> u64 {
    let waiting = EVENTS.query(BPF_RB_AVAIL_DATA.into());
    let threshold = global(&WAKEUP_BYTES) as u64;
    let record = (core::mem::size_of::<PacketEvent>() + 8) as u64;
    if waiting >= threshold && waiting < threshold + record {
        BPF_RB_FORCE_WAKEUP.into()
    } else {
        BPF_RB_NO_WAKEUP.into()
    }
}

/// The digest of the packet in `skb`.
#[inline(always)]
fn digest(skb: usize, dir: u8) -> Digest {
    let protocol = u16::from_be(field::<u16>(skb, global(&SKB_PROTOCOL)));
    if protocol != ETH_P_IP && protocol != ETH_P_IPV6 {
        return Digest::NotOurs;
    }
    let dev: usize = field(skb, global(&SKB_DEV));
    if dev == 0 {
        return Digest::NotOurs;
    }
    let want_netns = global(&NETNS_INUM) as u32;
    if want_netns != 0 {
        let net: usize = field(dev, global(&DEV_ND_NET));
        if net == 0 || field::<u32>(net, global(&NET_NS_INUM)) != want_netns {
            return Digest::NotOurs;
        }
    }
    // The time is read once the packet is known to be ours (packets of other namespaces do not
    // pay for it) and before anything that depends on the packet's size: the few loads above
    // take the same time for every packet, in both directions.
    // SAFETY: helper without preconditions.
    let ts_ns = unsafe { bpf_ktime_get_ns() };
    // On receive the tracepoint fires before the network header offset is reset, but `data`
    // already points past the link-layer header; on transmit `data` points at the link-layer
    // header and `network_header` is set.
    let network = if dir == direction::RECV {
        field::<usize>(skb, global(&SKB_DATA))
    } else {
        let nh: u16 = field(skb, global(&SKB_NETWORK_HEADER));
        if nh == HEADER_UNSET {
            return Digest::NoNetworkHeader { dev, protocol };
        }
        field::<usize>(skb, global(&SKB_HEAD)) + nh as usize
    };
    let Some(h) = read::<[u8; HEADERS]>(network) else {
        return Digest::Unreadable { dev };
    };
    let mut ev = PacketEvent {
        ts_ns,
        ifindex: ifindex(dev),
        // SAFETY: helper without preconditions.
        cpu: unsafe { bpf_get_smp_processor_id() } as u16,
        direction: dir,
        network_protocol: protocol,
        ..PacketEvent::default()
    };
    let l4_at = if protocol == ETH_P_IP {
        ipv4(&h, &mut ev)
    } else {
        ipv6(&h, &mut ev)
    };
    let l4_at = match l4_at {
        Ip::Transport(at) => at,
        Ip::Other => return Digest::NotOurs,
        Ip::Malformed => {
            return Digest::NotIp {
                dev,
                protocol,
                first_byte: h[0],
            };
        }
    };
    // Transport header plus 8 bytes: inside `h`, or copied separately after IPv4 options.
    let mut l4 = [0u8; 28];
    if l4_at == 20 {
        l4.copy_from_slice(&h[20..48]);
    } else if l4_at == 40 {
        l4[..20].copy_from_slice(&h[40..60]);
    } else {
        let Some(copied) = read(network + l4_at) else {
            return Digest::Unreadable { dev };
        };
        l4 = copied;
    }
    if ev.transport_protocol == IPPROTO_TCP {
        tcp(&l4, &mut ev);
    } else {
        udp(&l4, &mut ev);
    }
    Digest::Event(ev)
}

/// What the network header holds.
enum Ip {
    /// A recorded kind; the transport header's offset from the network header.
    Transport(usize),
    /// Another transport protocol, a later fragment, IPv6 extension headers.
    Other,
    /// Not the IP header the EtherType announces.
    Malformed,
}

/// Fills the IPv4 part of the digest.
#[inline(always)]
fn ipv4(h: &[u8; HEADERS], ev: &mut PacketEvent) -> Ip {
    let ihl = h[0] & 0x0f;
    if h[0] >> 4 != 4 || ihl < 5 {
        return Ip::Malformed;
    }
    // Only the first fragment carries the transport header.
    if u16::from_be_bytes([h[6], h[7]]) & 0x1fff != 0 {
        return Ip::Other;
    }
    let proto = h[9];
    ev.kind = match proto {
        IPPROTO_TCP => kind::TCP4,
        IPPROTO_UDP => kind::UDP4,
        _ => return Ip::Other,
    };
    ev.transport_protocol = proto;
    ev.ihl = ihl;
    ev.tot_len = u16::from_be_bytes([h[2], h[3]]);
    ev.saddr[..4].copy_from_slice(&h[12..16]);
    ev.daddr[..4].copy_from_slice(&h[16..20]);
    Ip::Transport(4 * ihl as usize)
}

/// Fills the IPv6 part of the digest (TCP directly after the fixed header only).
#[inline(always)]
fn ipv6(h: &[u8; HEADERS], ev: &mut PacketEvent) -> Ip {
    if h[0] >> 4 != 6 {
        return Ip::Malformed;
    }
    if h[6] != IPPROTO_TCP {
        return Ip::Other;
    }
    ev.kind = kind::TCP6;
    ev.transport_protocol = IPPROTO_TCP;
    ev.tot_len = u16::from_be_bytes([h[4], h[5]]).saturating_add(40);
    ev.saddr.copy_from_slice(&h[8..24]);
    ev.daddr.copy_from_slice(&h[24..40]);
    Ip::Transport(40)
}

/// Fills the TCP part of the digest.
#[inline(always)]
fn tcp(h: &[u8; 28], ev: &mut PacketEvent) {
    ev.source = u16::from_be_bytes([h[0], h[1]]);
    ev.dest = u16::from_be_bytes([h[2], h[3]]);
    ev.seq = u32::from_be_bytes([h[4], h[5], h[6], h[7]]);
    ev.ack_seq = u32::from_be_bytes([h[8], h[9], h[10], h[11]]);
    ev.doff = h[12] >> 4;
    ev.tcp_flags = h[13];
}

/// Fills the UDP part of the digest: ports, length and at most the first 8 payload bytes.
#[inline(always)]
fn udp(h: &[u8; 28], ev: &mut PacketEvent) {
    ev.source = u16::from_be_bytes([h[0], h[1]]);
    ev.dest = u16::from_be_bytes([h[2], h[3]]);
    ev.udp_len = u16::from_be_bytes([h[4], h[5]]);
    let payload_len = ev.udp_len.saturating_sub(8) as usize;
    // Keep only bytes inside the datagram: the rest of the copy is not this packet's.
    let mut i = 0;
    while i < 8 {
        if i < payload_len {
            ev.udp_data[i] = h[8 + i];
        }
        i += 1;
    }
}

#[cfg(target_arch = "bpf")]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[cfg(not(target_arch = "bpf"))]
fn main() {}
