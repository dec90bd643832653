//! Kernel side of tsync: one program on each of the `net:net_dev_queue` (send) and
//! `net:netif_receive_skb` (receive) tracepoints, attached as BTF-enabled raw tracepoints
//! (`tp_btf`), so the `struct sk_buff *` arrives directly as argument 0 and every interface —
//! including ones created while recording — is covered.
//!
//! Per IPv4/TCP, IPv6/TCP and IPv4/UDP packet the programs build one [`PacketEvent`] (a header
//! digest, never payload beyond UDP's first 8 bytes) and append it to their CPU's batch, which
//! goes into the `EVENTS` ring buffer as one record when full ([`batch`]; a third program,
//! `tsync_flush`, writes a quiet CPU's batch when the agent asks). A failed write is counted per
//! CPU and direction in `LOST`, so losses are never silent.
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
//! verifier sees frozen read-only globals as constants: it checks the accesses they offset against
//! the kernel's BTF, and prunes the branches they decide (the namespace filter with
//! `--all-netns`, the wakeup with a large ring); each still costs one load at run time.
//!
//! The per-packet path is kept short (about 120 instructions for a recorded TCP/IPv4 packet, from
//! 430): one copy of the headers into an 8-aligned buffer, so that every field is one load of its
//! width; the event's ten 8-byte words stored straight into its slot of the batch; one
//! ring-buffer write per 32 events; no ring buffer query unless the agent asked for wakeups.
//! `cargo xtask bench capture` measures what it costs.
#![cfg_attr(target_arch = "bpf", no_std)]
#![cfg_attr(target_arch = "bpf", no_main)]
// On the host this crate is only type-checked (clippy); the programs run on the BPF target.
#![cfg_attr(not(target_arch = "bpf"), allow(dead_code))]

use aya_ebpf::{
    bindings::{BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    helpers::{bpf_get_smp_processor_id, bpf_ktime_get_ns},
    macros::{btf_tracepoint, map},
    maps::{PerCpuArray, RingBuf},
    programs::BtfTracePointContext,
};
use aya_log_ebpf::info;

mod batch;
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

/// Builds and submits the event for one packet; non-IP, other protocols and foreign namespaces are
/// skipped.
///
/// The digest is written straight into its slot of this CPU's batch: built on the stack, its ten
/// words were spilled there (only four BPF registers survive a helper call) and copied again.
#[inline(always)]
fn record(ctx: &BtfTracePointContext, dir: u8) {
    let skb: usize = ctx.arg(0);
    let Some(packet) = ours(skb) else {
        return;
    };
    // The time is read once the packet is known to be ours (packets of other namespaces do not
    // pay for it) and before anything that depends on the packet's size: the few loads above
    // take the same time for every packet, in both directions.
    // SAFETY: helper without preconditions.
    let ts_ns = unsafe { bpf_ktime_get_ns() };
    let outcome = match batch::Slot::claim() {
        Some(mut slot) => {
            let outcome = digest(skb, dir, packet, ts_ns, slot.words());
            if matches!(outcome, Digest::Event) {
                slot.commit(dir, ts_ns);
            } else {
                slot.abandon();
            }
            outcome
        }
        None => {
            let mut w = [0; EVENT_WORDS];
            let outcome = digest(skb, dir, packet, ts_ns, &mut w);
            if matches!(outcome, Digest::Event) {
                batch::direct(&w, dir);
            }
            outcome
        }
    };
    match outcome {
        Digest::Event | Digest::NotOurs => {}
        Digest::Unreadable => {
            count_lost(dir, 1);
            if dir == direction::SEND {
                log_unreadable::<true>(ctx, packet.dev);
            } else {
                log_unreadable::<false>(ctx, packet.dev);
            }
        }
        Digest::NoNetworkHeader => {
            if dir == direction::SEND {
                log_no_network_header::<true>(ctx, packet.dev, packet.protocol);
            } else {
                log_no_network_header::<false>(ctx, packet.dev, packet.protocol);
            }
        }
        Digest::NotIp { first_byte } => {
            if dir == direction::SEND {
                log_not_ip::<true>(ctx, packet.dev, packet.protocol, first_byte);
            } else {
                log_not_ip::<false>(ctx, packet.dev, packet.protocol, first_byte);
            }
        }
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
fn count_lost(dir: u8, events: u64) {
    if let Some(count) = LOST.get_ptr_mut(u32::from(dir)) {
        // SAFETY: per-CPU slot, only this CPU's programs touch it.
        unsafe { *count += events };
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

/// A [`PacketEvent`] as the ten 8-byte words it is stored as: built in registers and stored
/// word by word (the struct built field by field was built, and stored, byte by byte).
type Words = [u64; EVENT_WORDS];

const EVENT_WORDS: usize = core::mem::size_of::<PacketEvent>() / 8;

/// A packet of a recorded namespace whose EtherType is IP: the one kind worth a clock read.
#[derive(Clone, Copy)]
struct Packet {
    /// EtherType, host order.
    protocol: u16,
    /// The `struct net_device *` it is sent or received on.
    dev: usize,
}

/// What the hook makes of a packet it reads the time for.
enum Digest {
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
/// UDP (8) and 8 UDP payload bytes, rounded up to whole words. One copy is cheaper than one per
/// header. An IPv4 header with options needs a second copy, of the transport header.
const HEADERS: usize = 64;

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
struct Headers([u8; HEADERS]);

impl Headers {
    /// The `T` at byte `at`, which must be a multiple of `T`'s size (all fields read here are).
    #[inline(always)]
    fn at<T: Copy>(&self, at: usize) -> T {
        // SAFETY: in bounds and aligned for every (constant) offset used below.
        unsafe { self.0.as_ptr().add(at).cast::<T>().read() }
    }
}

/// Submit flag for a record of `bytes`: wake the agent only for the record that makes the waiting
/// data cross `WAKEUP_BYTES` (records racing on other CPUs may step over it; the agent's timer
/// covers that). With `WAKEUP_BYTES` 0 (the agent's choice for rings its timer drains in time)
/// there is no wakeup, and the verifier drops the query as dead code.
#[inline(always)]
fn wakeup_flag(bytes: usize) -> u64 {
    let threshold = global(&WAKEUP_BYTES) as u64;
    if threshold == 0 {
        return BPF_RB_NO_WAKEUP.into();
    }
    let waiting = EVENTS.query(BPF_RB_AVAIL_DATA.into());
    // The record and its 8-byte header.
    let record = (bytes + 8) as u64;
    if waiting >= threshold && waiting < threshold + record {
        BPF_RB_FORCE_WAKEUP.into()
    } else {
        BPF_RB_NO_WAKEUP.into()
    }
}

/// The packet in `skb` if its EtherType is IP and it belongs to a recorded namespace.
#[inline(always)]
fn ours(skb: usize) -> Option<Packet> {
    let protocol = u16::from_be(field::<u16>(skb, global(&SKB_PROTOCOL)));
    if protocol != ETH_P_IP && protocol != ETH_P_IPV6 {
        return None;
    }
    let dev: usize = field(skb, global(&SKB_DEV));
    if dev == 0 {
        return None;
    }
    let want_netns = global(&NETNS_INUM) as u32;
    if want_netns != 0 {
        let net: usize = field(dev, global(&DEV_ND_NET));
        if net == 0 || field::<u32>(net, global(&NET_NS_INUM)) != want_netns {
            return None;
        }
    }
    Some(Packet { protocol, dev })
}

/// Writes the digest of `packet` (the one in `skb`, read at `ts_ns`) into `w`, every word of it
/// when the outcome is [`Digest::Event`].
#[inline(always)]
fn digest(skb: usize, dir: u8, packet: Packet, ts_ns: u64, w: &mut Words) -> Digest {
    let Packet { protocol, dev } = packet;
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
    let first = h.at::<u8>(0);
    // Per IP version: kind, IPv4 header length (0 for IPv6), total length, where the transport
    // header is in `h`; the addresses go straight into their words.
    let (kind, ihl, tot_len, l4) = if protocol == ETH_P_IP {
        let ihl = first & 0x0f;
        if first >> 4 != 4 || ihl < 5 {
            return Digest::NotIp { first_byte: first };
        }
        // Only the first fragment carries the transport header: the 13-bit fragment offset of
        // bytes 6 and 7, read as a little-endian u16, is the mask 0xff1f.
        if h.at::<u16>(6) & 0xff1f != 0 {
            return Digest::NotOurs;
        }
        let kind = match h.at::<u8>(9) {
            IPPROTO_TCP => kind::TCP4,
            IPPROTO_UDP => kind::UDP4,
            _ => return Digest::NotOurs,
        };
        if ihl != 5 {
            // Options: the transport header is further on; copy it where it would have been.
            // SAFETY: as above; 20 + 28 bytes lie inside `h`.
            let dst = unsafe { h.0.as_mut_ptr().add(L4_AFTER_V4) };
            if unsafe { copy(dst, network + 4 * ihl as usize, L4_COPY) } != 0 {
                return Digest::Unreadable;
            }
        }
        // Addresses keep network byte order: loaded and stored little-endian, bytes unchanged.
        w[2] = u64::from(h.at::<u32>(12));
        w[3] = 0;
        w[4] = u64::from(h.at::<u32>(16));
        w[5] = 0;
        (kind, ihl, u16::from_be(h.at::<u16>(2)), L4_AFTER_V4)
    } else {
        if first >> 4 != 6 {
            return Digest::NotIp { first_byte: first };
        }
        // TCP directly after the fixed header only.
        if h.at::<u8>(6) != IPPROTO_TCP {
            return Digest::NotOurs;
        }
        w[2] = h.at::<u64>(8);
        w[3] = h.at::<u64>(16);
        w[4] = h.at::<u64>(24);
        w[5] = h.at::<u64>(32);
        let payload = u16::from_be(h.at::<u16>(4));
        (kind::TCP6, 0, payload.saturating_add(40), L4_AFTER_V6)
    };
    w[0] = ts_ns;
    // SAFETY: helper without preconditions.
    let cpu = unsafe { bpf_get_smp_processor_id() } as u16;
    w[1] = u64::from(ifindex(dev))
        | u64::from(cpu) << 32
        | u64::from(dir) << 48
        | u64::from(kind) << 56;
    let ports = h.at::<u32>(l4);
    let (source, dest) = (
        u16::from_be(ports as u16),
        u16::from_be((ports >> 16) as u16),
    );
    w[6] = u64::from(protocol)
        | u64::from(tot_len) << 16
        | u64::from(source) << 32
        | u64::from(dest) << 48;
    if kind == kind::UDP4 {
        udp(h, l4, ihl, w);
    } else {
        tcp(h, l4, ihl, w);
    }
    Digest::Event
}

/// Copies `len` bytes of kernel memory at `src` that is not BTF-typed (the packet headers) to
/// `dst`; 0 on success.
///
/// # Safety
/// `dst` must be valid for `len` bytes of writes.
#[inline(always)]
unsafe fn copy(dst: *mut u8, src: usize, len: usize) -> i64 {
    // SAFETY: per the contract; the helper's reads of `src` are fault-safe.
    unsafe {
        aya_ebpf::helpers::generated::bpf_probe_read_kernel(
            dst.cast(),
            len as u32,
            src as *const core::ffi::c_void,
        )
    }
}

/// Fills the TCP words of the digest: sequence and acknowledgment numbers, data offset, flags.
#[inline(always)]
fn tcp(h: &Headers, l4: usize, ihl: u8, w: &mut Words) {
    let seq = u32::from_be(h.at::<u32>(l4 + 4));
    let ack = u32::from_be(h.at::<u32>(l4 + 8));
    let offset_flags = h.at::<u16>(l4 + 12);
    let doff = (offset_flags & 0xff) >> 4;
    let flags = offset_flags >> 8;
    w[7] = u64::from(seq) | u64::from(ack) << 32;
    w[8] = u64::from(IPPROTO_TCP)
        | u64::from(ihl) << 8
        | u64::from(doff) << 16
        | u64::from(flags) << 24;
    w[9] = 0;
}

/// Fills the UDP words of the digest: length and at most the first 8 payload bytes.
#[inline(always)]
fn udp(h: &Headers, l4: usize, ihl: u8, w: &mut Words) {
    let udp_len = u16::from_be(h.at::<u16>(l4 + 4));
    // Keep only bytes inside the datagram: the rest of the copy is not this packet's.
    let inside = u64::from(udp_len.saturating_sub(8).min(8));
    let mask = if inside == 8 {
        u64::MAX
    } else {
        (1u64 << (8 * inside)) - 1
    };
    let data = (u64::from(h.at::<u32>(l4 + 8)) | u64::from(h.at::<u32>(l4 + 12)) << 32) & mask;
    w[7] = 0;
    w[8] = u64::from(IPPROTO_UDP) | u64::from(ihl) << 8 | (data & 0xffff_ffff) << 32;
    w[9] = data >> 32 | u64::from(udp_len) << 32;
}

#[cfg(target_arch = "bpf")]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[cfg(not(target_arch = "bpf"))]
fn main() {}
