//! Matching send and receive events of the same packet across traces (hash join on the digest).
//!
//! Events of all traces arrive merged in (approximately aligned) time order. Each digest key lives
//! in a table until `window` after it was first seen; only then is it decided:
//! - one send and one receive on different traces: a message;
//! - one send and one receive on the same trace: loopback, counted as `same_trace`;
//! - more than one send or more than one receive: the key is `ambiguous` and dropped, because a
//!   retransmission (or a duplicate) could pair a reception with a later send — a non-causal
//!   message that would break the hull's guarantee;
//! - only one side: `unmatched` (packet from or to an untraced node, lost event, …) — unless it
//!   is a TCP segment with payload that segmentation or receive offloads cut differently on the
//!   two sides: then [`ranges`] pairs it by the sequence numbers it covers (`range_matched`).
//!
//! One exception to "more than one": a node whose address lives on a stacked device (a bridge, a
//! bond, a VLAN, …) records every packet once per device it crosses, with the same digest,
//! microseconds apart. A further event on the same trace, side and key, on another interface than
//! that side's first event and within [`STACKED_COPY_NS`] of it, is such a copy: it is counted
//! (`stacked_copies`) and otherwise ignored. The first copy is kept on both sides — the earliest
//! send and the earliest receive — so the pair stays causal whatever the copies really were (even
//! a fast retransmission through another interface: the earliest send precedes every reception).
//! A retransmission through the same device stack repeats the first interface and stays a
//! duplicate.
//!
//! Memory is bounded by the keys seen in one window, not by the trace length. The window must
//! exceed the largest one-way delay plus the residual misalignment of the traces' clocks (plus
//! the merge's slack of 1/16 window): then a
//! copy of a key that comes after the window cannot have caused a reception inside it, and the
//! key's earlier pair is causal.

pub mod alignment;
pub mod exchange;
pub mod merge;
mod ranges;

use std::collections::{HashMap, VecDeque};

use tsync_common::{PacketEvent, direction, kind, tcp_flag};

use crate::model::{Exchange, MatchedMessage, Message, MessageSink, Origin};

mod live;

use live::{KeyEq, LiveKeys};
use ranges::{RangeMatcher, Unpaired};

/// How far apart (ns, on one node's clock) the copies of one packet on stacked devices may be.
/// The kernel passes a packet through a bridge, a bond or a VLAN device and its lower device in
/// one call chain (microseconds); 1 ms leaves room for a deferred receive under load.
pub const STACKED_COPY_NS: u64 = 1_000_000;

/// Default matching window: longer than TCP's initial retransmission timeout (1 s), so that a
/// retransmitted segment is always recognised as such.
pub const DEFAULT_WINDOW_NS: i64 = 2_000_000_000;

/// Options of the message stage.
#[derive(Clone, Debug)]
pub struct MatchOptions {
    /// How long (ns) a key waits for its partner and for duplicates.
    pub window_ns: i64,
    /// Whether to form exchanges (needed by `linreg` and RTT statistics).
    pub exchanges: bool,
    /// Whether TCP segments left unmatched are paired by the sequence ranges they cover
    /// (segmentation and receive offloads; see `ranges`). On by default.
    pub by_range: bool,
}

impl Default for MatchOptions {
    fn default() -> Self {
        MatchOptions {
            window_ns: DEFAULT_WINDOW_NS,
            exchanges: false,
            by_range: true,
        }
    }
}

/// What matching did with the events.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct MatchStats {
    /// Events read (text inputs: two per line).
    pub events: u64,
    /// Messages produced (`range_matched` included).
    pub matched: u64,
    /// Messages paired by TCP sequence range rather than by digest: a send and a receive that
    /// offloads cut differently (a TSO/GSO super-packet, a GRO-merged receive) covering a common
    /// byte, each the only one to cover it.
    pub range_matched: u64,
    /// Events left without a partner.
    pub unmatched: u64,
    /// Messages whose sender is the receiver (loopback), dropped.
    pub same_trace: u64,
    /// Keys seen more than once on a side within the window, dropped.
    pub ambiguous: u64,
    /// Events found earlier than their predecessor in their own file.
    pub out_of_order: u64,
    /// Exchanges formed.
    pub exchanges: u64,
    /// Extra events of a packet on stacked devices of one node (bridge, bond, VLAN, …), merged
    /// into the packet's first event on that node.
    pub stacked_copies: u64,
    /// Unmatched events of packets longer than 1500 bytes (Ethernet's MTU) between two traced
    /// nodes: the mark of segmentation offloads (TSO/GSO on send, GRO/LRO on receive), which hand
    /// the hooks super-packets that the other side never sees as such.
    pub oversize_unmatched: u64,
    /// What the user should know about the inputs (damaged files, lost events, …); the
    /// synchronization reports them with its own warnings, not in this record's JSON.
    #[serde(skip)]
    pub warnings: Vec<String>,
}

impl MatchStats {
    /// Adds the counts and warnings of `o` (the stats of another part of the inputs).
    pub fn add(&mut self, o: &MatchStats) {
        self.events += o.events;
        self.matched += o.matched;
        self.range_matched += o.range_matched;
        self.unmatched += o.unmatched;
        self.same_trace += o.same_trace;
        self.ambiguous += o.ambiguous;
        self.out_of_order += o.out_of_order;
        self.exchanges += o.exchanges;
        self.oversize_unmatched += o.oversize_unmatched;
        self.stacked_copies += o.stacked_copies;
        self.warnings.extend(o.warnings.iter().cloned());
    }
}

/// IP packets longer than this (Ethernet's MTU) that find no partner between two traced nodes are
/// counted as the work of segmentation offloads.
pub const OFFLOAD_SUSPECT_LEN: u16 = 1500;

/// The warning for inputs where offloads visibly broke matching, if they did: at least 10 such
/// events and 1 % of all events.
pub fn offload_warning(stats: &MatchStats) -> Option<String> {
    let n = stats.oversize_unmatched;
    (n >= 10 && n * 100 >= stats.events).then(|| {
        format!(
            "{n} packets of more than {OFFLOAD_SUSPECT_LEN} bytes between traced nodes found no \
             partner, by digest or by sequence range: segmentation offloads (TSO/GSO on the \
             sender, GRO/LRO on the receiver) hand the hooks super-packets that the other side \
             never sees as such, and bytes sent or received twice (retransmissions) cannot be \
             paired by range; turning receive offloads off on the traced interfaces may help \
             (ethtool -K DEV gro off lro off; TCP builds GSO super-packets on the sender whatever \
             its settings, so ethtool -K DEV tso off gso off changes nothing there)"
        )
    })
}

/// The hash of `e`'s packet key (both ends of a packet hash alike): for sampling keys.
pub(crate) fn key_hash(e: &PacketEvent) -> u64 {
    Key::of(e).hash()
}

/// The fields that identify a packet (LTTV's segment key, plus the UDP fields and the kind).
///
/// They are bytes 16..80 of the [`PacketEvent`] record — addresses, EtherType, IP total length,
/// ports, sequence and acknowledgment numbers, IP protocol, header lengths, TCP flags, UDP data and
/// length — read as eight words, with the TCP flags reduced to ACK, RST, SYN and FIN (PSH/URG may
/// differ between what is sent and what arrives after offloads, and the digest of the reference
/// never held them; LTTng's add-on digests, [`kind::TCP_ADDON`], keep them all) and the kind
/// stored in the record's reserved bytes. Building, hashing and
/// comparing a key is then a handful of word operations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
struct Key([u64; 8]);

const KEY_FLAGS: u8 = tcp_flag::ACK | tcp_flag::RST | tcp_flag::SYN | tcp_flag::FIN;
/// Byte offset of the key in the record.
const KEY_START: usize = 16;
/// Word 6 holds bytes 64..72: protocol, ihl, doff, flags (byte 3), udp_data[..4].
const FLAGS_MASK: u64 = !((!KEY_FLAGS as u64) << 24);
/// Word 7 holds bytes 72..80: udp_data[4..], udp_len, reserved (bytes 6, 7).
const RESERVED_MASK: u64 = 0x0000_FFFF_FFFF_FFFF;

const _: () = assert!(std::mem::offset_of!(PacketEvent, saddr) == KEY_START);
const _: () = assert!(std::mem::offset_of!(PacketEvent, tcp_flags) == 67);
const _: () = assert!(std::mem::offset_of!(PacketEvent, reserved) == 78);

impl Key {
    #[inline]
    fn of(e: &PacketEvent) -> Key {
        let b: &[u8] = bytemuck::bytes_of(e);
        let mut w = [0u64; 8];
        for (i, x) in w.iter_mut().enumerate() {
            let o = KEY_START + 8 * i;
            *x = u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        }
        // LTTng's add-on events carry no lengths: their PSH flag is what tells a data segment
        // from the pure ACK before it with the same numbers, and no offload sits between their
        // socket-level hooks, so they keep every flag (Trace Compass's key).
        w[6] &= if e.kind == kind::TCP_ADDON {
            u64::MAX
        } else {
            FLAGS_MASK
        };
        w[7] = (w[7] & RESERVED_MASK) | u64::from(e.kind) << 48;
        Key(w)
    }

    /// A fast multiplicative hash over the key's words.
    #[inline]
    fn hash(&self) -> u64 {
        const K: u64 = 0x9E37_79B9_7F4A_7C15;
        let w = &self.0;
        // Two lanes for instruction-level parallelism, folded at the end.
        let mut h1 = w[0] ^ K;
        let mut h2 = w[4] ^ K.rotate_left(32);
        for i in 1..4 {
            h1 = (h1.rotate_left(23) ^ w[i]).wrapping_mul(K);
            h2 = (h2.rotate_left(23) ^ w[i + 4]).wrapping_mul(K);
        }
        let h = (h1 ^ h2.rotate_left(29)).wrapping_mul(K);
        h ^ (h >> 29)
    }

    fn kind(&self) -> u8 {
        (self.0[7] >> 48) as u8
    }

    /// Rebuilds the event record of one side.
    fn event(&self, s: &Seen, dir: u8) -> PacketEvent {
        let mut e = PacketEvent::default();
        {
            let b: &mut [u8] = bytemuck::bytes_of_mut(&mut e);
            for (i, x) in self.0.iter().enumerate() {
                let o = KEY_START + 8 * i;
                b[o..o + 8].copy_from_slice(&x.to_le_bytes());
            }
        }
        e.reserved = [0; 2];
        e.kind = self.kind();
        e.tcp_flags = s.tcp_flags;
        e.ts_ns = s.time as u64;
        e.ifindex = s.ifindex;
        e.cpu = s.cpu;
        e.direction = dir;
        e
    }
}

/// One side of a key: the first event seen on it (what the key does not already hold).
#[derive(Clone, Copy, Debug, Default)]
struct Seen {
    time: i64,
    index: u64,
    trace: u32,
    ifindex: u32,
    cpu: u16,
    tcp_flags: u8,
}

impl Seen {
    /// Whether `later`, seen on the same side of the same key, is a copy of this event on
    /// another device of a stack (see the module doc).
    #[inline]
    fn stacked_copy(&self, later: &Seen) -> bool {
        later.trace == self.trace
            && later.ifindex != self.ifindex
            && later.time.abs_diff(self.time) <= STACKED_COPY_NS
    }
}

/// What the matcher remembers of a live key besides the key itself.
#[derive(Clone, Copy, Debug, Default)]
struct Entry {
    /// Aligned time of the first event: the key is decided `window` later.
    first_seen: i64,
    /// The first send event (valid when `sends > 0`).
    send: Seen,
    /// The first receive event (valid when `recvs > 0`).
    recv: Seen,
    sends: u32,
    recvs: u32,
}

impl KeyEq for Key {
    #[inline]
    fn key_eq(&self, other: &Self) -> bool {
        // Branch-free: all eight words are compared (no call to memcmp).
        self.0
            .iter()
            .zip(&other.0)
            .fold(0, |acc, (a, b)| acc | (a ^ b))
            == 0
    }
}

/// The matcher state. Feed it events in merged time order with [`Matcher::event`], then call
/// [`Matcher::finish`].
///
/// The live keys are kept in creation order (the order they are decided in) with a compact hash
/// index over them (see [`live`]): expiring needs no search and the index stays small enough for
/// the cache.
pub struct Matcher {
    live: LiveKeys<Key, Entry>,
    decider: Decider,
    /// Pairs by sequence range what the digest could not (None: `by_range` off).
    ranges: Option<RangeMatcher>,
}

/// What decides expired keys (apart from the live keys, so that a key can be decided where it
/// lies in the ring, without copying it out).
struct Decider {
    window: i64,
    /// Whether the sink wants the event records of each message.
    events_wanted: bool,
    stats: MatchStats,
    exchanges: Option<AckPairing>,
    /// The traced nodes' own addresses (network byte order, IPv4 in the first 4 bytes).
    /// The traced nodes' addresses and the trace each belongs to.
    node_addresses: HashMap<[u8; 16], u32>,
    /// Per trace, the span of its recording on the merge axis: from its first event to its last
    /// (`i64::MAX` while it is still being read).
    spans: HashMap<u32, (i64, i64)>,
}

impl Matcher {
    pub fn new(options: &MatchOptions) -> Self {
        Matcher {
            live: LiveKeys::with_capacity(1 << 12),
            decider: Decider {
                window: options.window_ns.max(1),
                events_wanted: true,
                stats: MatchStats::default(),
                exchanges: options.exchanges.then(AckPairing::default),
                node_addresses: HashMap::new(),
                spans: HashMap::new(),
            },
            ranges: options
                .by_range
                .then(|| RangeMatcher::new(options.window_ns.max(1))),
        }
    }

    /// Hints that `e` will be passed to [`event`](Self::event) soon: starts loading the part of
    /// the index it will probe, so that the probe does not wait for memory.
    #[inline]
    pub fn prefetch(&self, e: &PacketEvent) {
        self.live.prefetch_home(Key::of(e).hash());
    }

    /// Adds an event of trace `trace`: `time` is its local time (ns), `aligned` its time on the
    /// common merge axis, `index` its position in its file.
    #[inline]
    pub fn event<S: MessageSink + ?Sized>(
        &mut self,
        trace: u32,
        e: &PacketEvent,
        time: i64,
        aligned: i64,
        index: u64,
        sink: &mut S,
    ) {
        self.decider.stats.events += 1;
        self.expire(aligned, sink);
        let key = Key::of(e);
        let hash = key.hash();
        let seen = Seen {
            time,
            index,
            trace,
            ifindex: e.ifindex,
            cpu: e.cpu,
            tcp_flags: e.tcp_flags,
        };
        let is_send = e.direction == direction::SEND;
        if let Some(entry) = self.live.find_mut(hash, &key) {
            let (first, count) = if is_send {
                (&mut entry.send, &mut entry.sends)
            } else {
                (&mut entry.recv, &mut entry.recvs)
            };
            if *count == 0 {
                *first = seen;
                *count = 1;
            } else if first.stacked_copy(&seen) {
                self.decider.stats.stacked_copies += 1;
            } else {
                *count = count.saturating_add(1);
            }
            return;
        }
        self.live.push_back(
            hash,
            key,
            Entry {
                first_seen: aligned,
                send: seen,
                recv: seen,
                sends: u32::from(is_send),
                recvs: u32::from(!is_send),
            },
        );
    }

    /// The traced nodes' addresses, so that unmatched oversized packets between them can be
    /// told apart (offloads) from traffic with the outside world.
    pub fn set_node_addresses(&mut self, addresses: HashMap<[u8; 16], u32>) {
        self.decider.node_addresses = addresses;
    }

    /// Says that `trace`'s recording starts at `first` (merge axis): packets to or from it before
    /// are not its to miss.
    pub fn trace_starts(&mut self, trace: u32, first: i64) {
        self.decider.spans.insert(trace, (first, i64::MAX));
    }

    /// Says that `trace`'s recording ended with an event at `last` (merge axis), cut short or not.
    pub fn trace_ends(&mut self, trace: u32, last: i64) {
        if let Some(span) = self.decider.spans.get_mut(&trace) {
            span.1 = last;
        }
    }

    /// Skips rebuilding the event records of messages when the sink does not need them.
    pub fn set_events_wanted(&mut self, wanted: bool) {
        self.decider.events_wanted = wanted;
        if let Some(r) = self.ranges.as_mut() {
            r.events_wanted = wanted;
        }
    }

    /// Counts an event found out of order in its file.
    pub fn out_of_order(&mut self) {
        self.decider.stats.out_of_order += 1;
    }

    /// Decides every key whose window ended before `now`.
    #[inline]
    fn expire<S: MessageSink + ?Sized>(&mut self, now: i64, sink: &mut S) {
        while let Some(front) = self.live.front() {
            if front.value.first_seen.saturating_add(self.decider.window) >= now {
                break;
            }
            self.decider
                .decide(&front.value, &front.key, self.ranges.as_mut(), sink);
            self.live.drop_front();
        }
        if let Some(r) = self.ranges.as_mut()
            && r.holds_any()
        {
            let d = &mut self.decider;
            let suspect = |e: &PacketEvent, t: i64| d_suspect(&d.node_addresses, &d.spans, e, t);
            r.expire(now, false, &mut d.stats, &suspect, sink);
        }
    }

    /// Decides every remaining key and returns the counts.
    pub fn finish<S: MessageSink + ?Sized>(mut self, sink: &mut S) -> MatchStats {
        while let Some(front) = self.live.front() {
            self.decider
                .decide(&front.value, &front.key, self.ranges.as_mut(), sink);
            self.live.drop_front();
        }
        if let Some(r) = self.ranges.as_mut() {
            let d = &mut self.decider;
            let suspect = |e: &PacketEvent, t: i64| d_suspect(&d.node_addresses, &d.spans, e, t);
            r.expire(i64::MAX, true, &mut d.stats, &suspect, sink);
        }
        self.decider.stats
    }
}

/// An oversized packet between two traced nodes, seen at `t` while both were recording (see
/// [`MatchStats::oversize_unmatched`]): a packet sent after the receiver's trace ended (a file
/// cut short, recordings that stop at different times) is no sign of offloads.
fn d_suspect(
    node_addresses: &HashMap<[u8; 16], u32>,
    spans: &HashMap<u32, (i64, i64)>,
    e: &PacketEvent,
    t: i64,
) -> bool {
    let recording = |addr: &[u8; 16]| {
        node_addresses.get(addr).is_some_and(|trace| {
            spans
                .get(trace)
                .is_none_or(|&(first, last)| first <= t && t <= last)
        })
    };
    e.tot_len > OFFLOAD_SUSPECT_LEN && recording(&e.saddr) && recording(&e.daddr)
}

impl Decider {
    /// See [`d_suspect`]. Only unmatched keys get here, so rebuilding the record (which knows
    /// the key's layout) is cheap enough.
    fn offload_suspect(&self, key: &Key, t: i64) -> bool {
        let e = key.event(&Seen::default(), direction::SEND);
        d_suspect(&self.node_addresses, &self.spans, &e, t)
    }

    /// Hands the sides of an undecided key to the range matcher, if it takes them; false when
    /// it does not (then they are unmatched here).
    fn to_ranges(&self, e: &Entry, key: &Key, ranges: Option<&mut RangeMatcher>) -> bool {
        let Some(ranges) = ranges else {
            return false;
        };
        let probe = key.event(&Seen::default(), direction::SEND);
        if !RangeMatcher::takes(&probe) {
            return false;
        }
        for (seen, count, dir) in [
            (&e.send, e.sends, direction::SEND),
            (&e.recv, e.recvs, direction::RECV),
        ] {
            if count > 0 {
                ranges.add(Unpaired {
                    event: key.event(seen, dir),
                    trace: seen.trace,
                    time: seen.time,
                    index: seen.index,
                    first_seen: e.first_seen,
                    count,
                });
            }
        }
        true
    }

    #[inline]
    fn decide<S: MessageSink + ?Sized>(
        &mut self,
        e: &Entry,
        key: &Key,
        ranges: Option<&mut RangeMatcher>,
        sink: &mut S,
    ) {
        if e.sends > 1 || e.recvs > 1 {
            self.stats.ambiguous += 1;
            if !self.to_ranges(e, key, ranges) {
                self.stats.unmatched += u64::from(e.sends) + u64::from(e.recvs);
            }
            return;
        }
        if e.sends == 0 || e.recvs == 0 {
            if self.to_ranges(e, key, ranges) {
                return;
            }
            self.stats.unmatched += 1;
            if self.offload_suspect(key, e.first_seen) {
                self.stats.oversize_unmatched += 1;
            }
            return;
        }
        let (s, r) = (e.send, e.recv);
        if s.trace == r.trace {
            self.stats.same_trace += 1;
            return;
        }
        self.stats.matched += 1;
        let events = (self.events_wanted || self.exchanges.is_some()).then(|| {
            (
                key.event(&s, direction::SEND),
                key.event(&r, direction::RECV),
            )
        });
        let m = MatchedMessage {
            message: Message {
                send_trace: s.trace,
                recv_trace: r.trace,
                send_ns: s.time,
                recv_ns: r.time,
            },
            origin: Origin::Events {
                send_index: s.index,
                recv_index: r.index,
            },
            send_event: events.as_ref().map(|e| &e.0),
            recv_event: events.as_ref().map(|e| &e.1),
        };
        sink.message(&m);
        if let Some(p) = self.exchanges.as_mut()
            && let Some((send_event, _)) = &events
            && let Some(x) = p.push(send_event, m.message, self.window)
        {
            self.stats.exchanges += 1;
            sink.exchange(&x);
        }
    }
}

/// TCP exchanges: a segment that needs an acknowledgment (SYN, FIN or payload) and the matched
/// segment of the reverse connection whose ACK covers it (`SEQ_GT(ack_seq, seq)`, 32-bit
/// wrap-around). Among the covered segments the last one is used, which keeps the round trip short.
#[derive(Default)]
struct AckPairing {
    pending: HashMap<Conn, VecDeque<(u32, Message)>>,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Conn {
    saddr: [u8; 16],
    daddr: [u8; 16],
    source: u16,
    dest: u16,
}

/// Segments remembered per connection; older ones are dropped (their ACK would be too late to
/// give a useful round trip anyway).
const PENDING_PER_CONN: usize = 256;

#[inline]
fn seq_gt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

impl AckPairing {
    fn push(&mut self, e: &PacketEvent, m: Message, window: i64) -> Option<Exchange> {
        if !e.is_tcp() {
            return None;
        }
        let mut found = None;
        if e.tcp_flags & tcp_flag::ACK != 0 {
            let reverse = Conn {
                saddr: e.daddr,
                daddr: e.saddr,
                source: e.dest,
                dest: e.source,
            };
            if let Some(q) = self.pending.get_mut(&reverse) {
                let mut last = None;
                while let Some(&(seq, req)) = q.front() {
                    if !seq_gt(e.ack_seq, seq) {
                        break;
                    }
                    last = Some(req);
                    q.pop_front();
                }
                if q.is_empty() {
                    self.pending.remove(&reverse);
                }
                if let Some(req) = last
                    && req.send_trace == m.recv_trace
                    && req.recv_trace == m.send_trace
                    && req.recv_ns <= m.send_ns
                    && m.send_ns - req.recv_ns <= window
                {
                    found = Some(Exchange {
                        request: req,
                        reply: m,
                    });
                }
            }
        }
        let needs_ack =
            e.tcp_flags & (tcp_flag::SYN | tcp_flag::FIN) != 0 || e.tcp_payload_len() > 0;
        if needs_ack {
            let q = self
                .pending
                .entry(Conn {
                    saddr: e.saddr,
                    daddr: e.daddr,
                    source: e.source,
                    dest: e.dest,
                })
                .or_default();
            if q.len() == PENDING_PER_CONN {
                q.pop_front();
            }
            q.push_back((e.seq, m));
        }
        found
    }
}

#[cfg(test)]
mod tests;
