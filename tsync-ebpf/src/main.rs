//! Kernel side of tsync: one program on each of the `net:net_dev_queue` (send) and
//! `net:netif_receive_skb` (receive) tracepoints, attached as BTF-enabled raw tracepoints
//! (`tp_btf`), so the `struct sk_buff *` arrives directly as argument 0 and every interface —
//! including ones created while recording — is covered.
//!
//! Per TCP and UDP packet over IPv4 or IPv6 (no extension headers) the programs build one
//! [`PacketEvent`] (a header digest and the TTL; for UDP a hash of the first payload bytes, never
//! the payload; for a VXLAN or Geneve datagram the digest of the packet inside, [`tunnel`]:
//! [`digest`]) and append it to their CPU's batch, which
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
mod digest;
mod tunnel;
use digest::Digest;
use tsync_common::{
    ETH_P_IP, ETH_P_IPV6, MAX_NETNS, PacketEvent, direction,
    names::{LOG_TARGET, notice},
    netns_tag,
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
/// `sk_buff.tail` (`sk_buff_data_t`: on 64-bit kernels a u32 offset from `head`), `sk_buff.len`
/// and `sk_buff.data_len` (`unsigned int`): where the linear data ends. UDP payload is hashed,
/// and a tunnel's inner headers read, only up to there.
#[unsafe(no_mangle)]
static SKB_TAIL: u32 = 0;
#[unsafe(no_mangle)]
static SKB_LEN: u32 = 0;
#[unsafe(no_mangle)]
static SKB_DATA_LEN: u32 = 0;
/// `net_device.ifindex` (`int`).
#[unsafe(no_mangle)]
static DEV_IFINDEX: u32 = 0;
/// `net_device.nd_net.net` (`struct net *`).
#[unsafe(no_mangle)]
static DEV_ND_NET: u32 = 0;
/// `net.ns.inum` (`unsigned int`): the network namespace's inode number.
#[unsafe(no_mangle)]
static NET_NS_INUM: u32 = 0;
/// Only packets of devices in the network namespace with this inode number are recorded; 0 = no
/// namespace in particular (all of them, or those of `NETNS_LIST`).
#[unsafe(no_mangle)]
static NETNS_INUM: u32 = 0;
/// When several namespaces are recorded (`NETNS_INUM` 0): their inode numbers, then zeros; all
/// zeros otherwise.
#[unsafe(no_mangle)]
static NETNS_LIST: [u32; MAX_NETNS] = [0; MAX_NETNS];

/// Wake the agent when this many bytes wait in the ring buffer (set by the agent). Below that it
/// drains on its own timer: a wakeup per event (the ring buffer's default) costs an interrupt per
/// packet, more than the whole digest.
#[unsafe(no_mangle)]
static WAKEUP_BYTES: u32 = 1 << 20;

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
    // One digest for both ways out (a slot of the batch, or a record of its own): written
    // twice, it was verified twice, the tunnel's function with it.
    let mut slot = batch::Slot::claim();
    let mut own = core::mem::MaybeUninit::uninit();
    let w: *mut Words = match &mut slot {
        Some(slot) => slot.words(),
        None => zeroed(&mut own),
    };
    // SAFETY: the slot's words or `own`, both live until the end of this function, and
    // nothing else refers to them meanwhile.
    let outcome = digest::write(skb, dir, packet, ts_ns, unsafe { &mut *w });
    let event = matches!(outcome, Digest::Event);
    match slot {
        Some(slot) if event => slot.commit(dir, ts_ns),
        Some(slot) => slot.abandon(),
        // SAFETY: as above.
        None if event => batch::direct(unsafe { &*w }, dir),
        None => {}
    }
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

/// `w`'s ten words set to zero one by one, in place: `[0; EVENT_WORDS]` (or zeros moved into
/// place) became a call to `memset`, a loop of byte stores that the verifier walked byte by byte.
#[inline(always)]
fn zeroed(w: &mut core::mem::MaybeUninit<Words>) -> &mut Words {
    let at = w.as_mut_ptr().cast::<u64>();
    let mut i = 0;
    while i < EVENT_WORDS {
        // SAFETY: in bounds of the array.
        unsafe { at.add(i).write_volatile(0) };
        i += 1;
    }
    // SAFETY: every word was written.
    unsafe { w.assume_init_mut() }
}

/// A packet of a recorded namespace whose EtherType is IP: the one kind worth a clock read.
#[derive(Clone, Copy)]
struct Packet {
    /// EtherType, host order.
    protocol: u16,
    /// The `struct net_device *` it is sent or received on.
    dev: usize,
    /// [`netns_tag`] of the device's namespace where several are recorded, else 0: the
    /// event's [`flag::NETNS_TAG`](tsync_common::flag::NETNS_TAG) bits.
    tag: u8,
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
///
/// One namespace (the default: the agent's own) is one compare against a frozen global, as
/// before several could be recorded: the verifier knows `NETNS_INUM` is not 0 and drops the
/// list's branch. Several namespaces are compared one by one with the frozen list, whose end
/// (the first 0) the verifier knows too: a few instructions per namespace. A hash map (a
/// lookup per packet) cost 45–80 ns more per hook run than one namespace, side by side on the
/// same traffic; the list costs nothing measurable (docs/agent.md). Where several are
/// recorded (the list, or all of them), the namespace's inode is loaded anyway, or for the tag
/// (two loads, with `--all-netns`).
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
        return Some(Packet {
            protocol,
            dev,
            tag: 0,
        });
    }
    // Several namespaces: each event says which one it was seen in.
    let net: usize = field(dev, global(&DEV_ND_NET));
    if net == 0 {
        return None;
    }
    let inum = field::<u32>(net, global(&NET_NS_INUM));
    if global(&NETNS_LIST[0]) != 0 {
        let mut i = 0;
        loop {
            if i == MAX_NETNS {
                return None;
            }
            let listed = global(&NETNS_LIST[i]);
            if listed == 0 {
                return None;
            }
            if listed == inum as usize {
                break;
            }
            i += 1;
        }
    }
    Some(Packet {
        protocol,
        dev,
        tag: netns_tag(inum),
    })
}

#[cfg(target_arch = "bpf")]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[cfg(not(target_arch = "bpf"))]
fn main() {}
