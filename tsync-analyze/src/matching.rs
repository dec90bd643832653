//! Matching send and receive events of the same packet across traces (hash join on the digest).
//!
//! Events of all traces arrive merged in (approximately aligned) time order. Each digest key lives
//! in a table until `window` after it was first seen; only then is it decided:
//! - one send and one receive on different traces: a message;
//! - one send and one receive on the same trace: loopback, counted as `same_trace`;
//! - more than one send or more than one receive: the key is `ambiguous` and dropped, because a
//!   retransmission (or a duplicate) could pair a reception with a later send — a non-causal
//!   message that would break the hull's guarantee;
//! - only one side: `unmatched` (packet from or to an untraced node, lost event, …).
//!
//! Memory is bounded by the keys seen in one window, not by the trace length. The window must
//! exceed the largest one-way delay plus the residual misalignment of the traces' clocks (plus
//! the merge's slack of 1/16 window): then a
//! copy of a key that comes after the window cannot have caused a reception inside it, and the
//! key's earlier pair is causal.

use std::collections::{HashMap, VecDeque};

use hashbrown::HashTable;
use tsync_common::{PacketEvent, direction, tcp_flag};

use crate::message::{Exchange, MatchedMessage, Message, MessageSink, Origin};

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
}

impl Default for MatchOptions {
    fn default() -> Self {
        MatchOptions {
            window_ns: DEFAULT_WINDOW_NS,
            exchanges: false,
        }
    }
}

/// What matching did with the events.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct MatchStats {
    /// Events read (text inputs: two per line).
    pub events: u64,
    /// Messages produced.
    pub matched: u64,
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
    /// What the user should know about the inputs (damaged files, lost events, …).
    pub warnings: Vec<String>,
}

impl MatchStats {
    pub fn add(&mut self, o: &MatchStats) {
        self.events += o.events;
        self.matched += o.matched;
        self.unmatched += o.unmatched;
        self.same_trace += o.same_trace;
        self.ambiguous += o.ambiguous;
        self.out_of_order += o.out_of_order;
        self.exchanges += o.exchanges;
        self.warnings.extend(o.warnings.iter().cloned());
    }
}

/// The fields that identify a packet (LTTV's segment key, plus the UDP fields).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Key {
    saddr: [u8; 16],
    daddr: [u8; 16],
    seq: u32,
    ack_seq: u32,
    tot_len: u16,
    source: u16,
    dest: u16,
    udp_len: u16,
    udp_data: [u8; 8],
    kind: u8,
    ihl: u8,
    doff: u8,
    /// ACK, RST, SYN, FIN only: PSH/URG may differ between what is sent and what arrives after
    /// offloads, and the digest of the reference never held them.
    flags: u8,
}

const KEY_FLAGS: u8 = tcp_flag::ACK | tcp_flag::RST | tcp_flag::SYN | tcp_flag::FIN;

impl Key {
    #[inline]
    fn of(e: &PacketEvent) -> Key {
        Key {
            saddr: e.saddr,
            daddr: e.daddr,
            seq: e.seq,
            ack_seq: e.ack_seq,
            tot_len: e.tot_len,
            source: e.source,
            dest: e.dest,
            udp_len: e.udp_len,
            udp_data: e.udp_data,
            kind: e.kind,
            ihl: e.ihl,
            doff: e.doff,
            flags: e.tcp_flags & KEY_FLAGS,
        }
    }

    /// A fast multiplicative hash over the key's words.
    #[inline]
    fn hash(&self) -> u64 {
        #[inline]
        fn w(b: &[u8; 16]) -> (u64, u64) {
            (
                u64::from_le_bytes(b[..8].try_into().unwrap()),
                u64::from_le_bytes(b[8..].try_into().unwrap()),
            )
        }
        const K: u64 = 0x9E37_79B9_7F4A_7C15;
        let (s0, s1) = w(&self.saddr);
        let (d0, d1) = w(&self.daddr);
        let a = u64::from(self.seq) | u64::from(self.ack_seq) << 32;
        let b = u64::from(self.tot_len)
            | u64::from(self.source) << 16
            | u64::from(self.dest) << 32
            | u64::from(self.udp_len) << 48;
        let c = u64::from_le_bytes(self.udp_data);
        let d = u64::from(self.kind)
            | u64::from(self.ihl) << 8
            | u64::from(self.doff) << 16
            | u64::from(self.flags) << 24;
        let mut h = (s0 ^ K).wrapping_mul(K);
        for x in [s1, d0, d1, a, b, c, d] {
            h = (h.rotate_left(23) ^ x).wrapping_mul(K);
        }
        h ^ (h >> 29)
    }
}

/// One side of a key: the first event seen on it (what the key does not already hold).
#[derive(Clone, Copy, Debug)]
struct Seen {
    time: i64,
    index: u64,
    trace: u32,
    ifindex: u32,
    cpu: u16,
    tcp_flags: u8,
}

/// The hot part of a live key (the key itself lives in a parallel ring, touched only to compare
/// and, when the sink wants them, to rebuild the event records).
#[derive(Clone, Debug)]
struct Entry {
    hash: u64,
    /// Aligned time of the first event: the key is decided `window` later.
    first_seen: i64,
    send: Option<Seen>,
    recv: Option<Seen>,
    sends: u32,
    recvs: u32,
}

impl Key {
    /// Rebuilds the event record of one side.
    fn event(&self, s: &Seen, dir: u8) -> PacketEvent {
        let k = self;
        PacketEvent {
            ts_ns: s.time as u64,
            ifindex: s.ifindex,
            cpu: s.cpu,
            direction: dir,
            kind: k.kind,
            saddr: k.saddr,
            daddr: k.daddr,
            network_protocol: if k.kind == tsync_common::kind::TCP6 {
                tsync_common::ETH_P_IPV6
            } else {
                tsync_common::ETH_P_IP
            },
            tot_len: k.tot_len,
            source: k.source,
            dest: k.dest,
            seq: k.seq,
            ack_seq: k.ack_seq,
            transport_protocol: if k.kind == tsync_common::kind::UDP4 {
                tsync_common::IPPROTO_UDP
            } else {
                tsync_common::IPPROTO_TCP
            },
            ihl: k.ihl,
            doff: k.doff,
            tcp_flags: s.tcp_flags,
            udp_data: k.udp_data,
            udp_len: k.udp_len,
            reserved: [0; 2],
        }
    }
}

/// The matcher state. Feed it events in merged time order with [`Matcher::event`], then call
/// [`Matcher::finish`].
///
/// Keys are decided in the order they were created, so the entries live in a ring (a FIFO) and
/// the hash table only maps a key to its entry's sequence number: the table stays small enough
/// for the cache, and expiring needs no search.
pub struct Matcher {
    window: i64,
    /// Sequence numbers of the live entries, hashed by key.
    table: HashTable<u64>,
    /// Live entries; `ring[i]` has sequence number `base + i`.
    ring: VecDeque<Entry>,
    /// Their keys, same indexing.
    keys: VecDeque<Key>,
    /// Whether the sink wants the event records of each message.
    events_wanted: bool,
    base: u64,
    stats: MatchStats,
    exchanges: Option<AckPairing>,
}

impl Matcher {
    pub fn new(options: &MatchOptions) -> Self {
        Matcher {
            window: options.window_ns.max(1),
            table: HashTable::with_capacity(1 << 12),
            ring: VecDeque::with_capacity(1 << 12),
            keys: VecDeque::with_capacity(1 << 12),
            events_wanted: true,
            base: 0,
            stats: MatchStats::default(),
            exchanges: options.exchanges.then(AckPairing::default),
        }
    }

    /// Adds an event of trace `trace`: `time` is its local time (ns), `aligned` its time on the
    /// common merge axis, `index` its position in its file.
    #[inline]
    pub fn event(
        &mut self,
        trace: u32,
        e: &PacketEvent,
        time: i64,
        aligned: i64,
        index: u64,
        sink: &mut dyn MessageSink,
    ) {
        self.stats.events += 1;
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
        let base = self.base;
        let ring = &mut self.ring;
        let keys = &self.keys;
        if let Some(&id) = self
            .table
            .find(hash, |&id| id >= base && keys[(id - base) as usize] == key)
        {
            let entry = &mut ring[(id - base) as usize];
            if is_send {
                entry.sends += 1;
                entry.send.get_or_insert(seen);
            } else {
                entry.recvs += 1;
                entry.recv.get_or_insert(seen);
            }
            return;
        }
        let id = base + ring.len() as u64;
        self.keys.push_back(key);
        ring.push_back(Entry {
            hash,
            first_seen: aligned,
            send: is_send.then_some(seen),
            recv: (!is_send).then_some(seen),
            sends: u32::from(is_send),
            recvs: u32::from(!is_send),
        });
        if self.table.len() >= 2 * self.ring.len() + 4096 {
            // Sweep the sequence numbers of decided keys (amortized O(1) per event).
            self.table.retain(|&mut i| i >= base);
        }
        let ring = &self.ring;
        self.table.insert_unique(hash, id, |&i| {
            // Only live entries are rehashed: the sweep above ran if dead ones piled up, and a
            // dead one rehashed anyway is harmless (it can never be found live again).
            ring.get(i.wrapping_sub(base) as usize)
                .map_or(i, |e| e.hash)
        });
    }

    /// Skips rebuilding the event records of messages when the sink does not need them.
    pub fn set_events_wanted(&mut self, wanted: bool) {
        self.events_wanted = wanted;
    }

    /// Counts an event found out of order in its file.
    pub fn out_of_order(&mut self) {
        self.stats.out_of_order += 1;
    }

    /// Decides every key whose window ended before `now`.
    #[inline]
    fn expire(&mut self, now: i64, sink: &mut dyn MessageSink) {
        while let Some(front) = self.ring.front() {
            if front.first_seen.saturating_add(self.window) >= now {
                break;
            }
            let entry = self.ring.pop_front().expect("front exists");
            let key = self.keys.pop_front().expect("parallel ring");
            // The table keeps the dead sequence number until the next sweep (see `event`):
            // erasing here would cost a cache miss per key.
            self.base += 1;
            self.decide(entry, &key, sink);
        }
    }

    fn decide(&mut self, e: Entry, key: &Key, sink: &mut dyn MessageSink) {
        if e.sends > 1 || e.recvs > 1 {
            self.stats.ambiguous += 1;
            self.stats.unmatched += u64::from(e.sends + e.recvs);
            return;
        }
        let (Some(s), Some(r)) = (e.send, e.recv) else {
            self.stats.unmatched += 1;
            return;
        };
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

    /// Decides every remaining key and returns the counts.
    pub fn finish(mut self, sink: &mut dyn MessageSink) -> MatchStats {
        self.table.clear();
        while let (Some(e), Some(k)) = (self.ring.pop_front(), self.keys.pop_front()) {
            self.decide(e, &k, sink);
        }
        self.stats
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
