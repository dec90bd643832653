//! Matching by TCP sequence range: the segments that offloads cut differently on the two sides.
//!
//! With segmentation offloads (TSO/GSO) the send hook sees one super-packet covering many
//! segments' bytes, and with receive offloads (GRO/LRO) the receive hook sees several segments
//! merged into one: their digests differ from anything the other side recorded, so the exact
//! matcher leaves them unmatched. Yet they still bound the clocks. A send event covers a range
//! of sequence numbers whose bytes all leave at or after its time; a receive event covers a
//! range whose bytes all arrived at or before its time. So a send and a receive that cover a
//! common byte X give a causal point: send time ≤ X sent ≤ X received ≤ receive time.
//!
//! That holds only if the receive's copy of X came from that very send. A byte sent twice (a
//! retransmission) or received twice (a duplicate) could pair a reception with a later send, a
//! non-causal point that would break the hull's guarantee. So a pair is formed only when every
//! byte of the overlap is covered by exactly this one send and this one receive among the events
//! the exact matcher could not pair (its `ambiguous` keys included, with their multiplicity).
//! Events it did pair are not consulted: a byte delivered by an exactly matched pair and again
//! by this receive would need the network to deliver one transmission twice, which the traced
//! links (veth, virtio, Ethernet) do not; and a lost event (counted, reported) voids that, as it
//! voids exact matching.
//!
//! Events arrive here when the exact matcher decides their key (`window` after it was first
//! seen); a receive is decided one more window later, when every send that could overlap it has
//! arrived, and the events are forgotten a window after that. Memory is the unpaired payload
//! events of those windows.
use std::collections::{BTreeMap, VecDeque};

use rustc_hash::FxHashMap;

use tsync_common::{PacketEvent, direction};

use super::MatchStats;
use super::keys::Recordings;
use crate::model::{MatchedMessage, Message, MessageSink, Origin};

/// A TCP connection, one direction.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
struct Flow {
    saddr: [u8; 16],
    daddr: [u8; 16],
    source: u16,
    dest: u16,
}

/// An event the exact matcher could not pair, with the bytes it covers.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Unpaired {
    /// The event (its time as recorded; the local time is `time`).
    pub event: PacketEvent,
    pub trace: u32,
    /// Local time (ns).
    pub time: i64,
    /// Position in its file.
    pub index: u64,
    /// When the exact matcher first saw the key (merge axis).
    pub first_seen: i64,
    /// How many events of that side shared the key (more than one: a retransmission or a
    /// duplicate, never paired, but its bytes count as covered twice).
    pub count: u32,
}

/// An unpaired event in its flow: what the overlap tests read (the event itself waits in the
/// matcher's slab, so that the ordered maps move small values).
#[derive(Clone, Copy, Debug)]
struct Placed {
    /// One past the last byte (unwrapped); the first is the map key's.
    end: i64,
    trace: u32,
    count: u32,
    /// Where the [`Unpaired`] event lies in the slab.
    slot: u32,
    paired: bool,
}

/// The unpaired events of one flow, by side, keyed by (unwrapped start, arrival number).
#[derive(Default)]
struct FlowRanges {
    sides: [BTreeMap<(i64, u64), Placed>; 2],
    /// The last sequence number placed and its unwrapped value (32-bit wrap-around).
    last: Option<(u32, i64)>,
    /// The longest range placed, per side: ranges that overlap a byte start at most this far
    /// before it (super-packets on one side, segments on the other: scans stay short).
    longest: [i64; 2],
}

impl FlowRanges {
    fn unwrap(&mut self, seq: u32) -> i64 {
        let ext = match self.last {
            Some((s, e)) => e + i64::from(seq.wrapping_sub(s) as i32),
            None => i64::from(seq),
        };
        self.last = Some((seq, ext));
        ext
    }

    /// The entries of `side` that overlap `[start, end)`.
    fn overlapping(
        &self,
        side: usize,
        start: i64,
        end: i64,
    ) -> impl Iterator<Item = (&(i64, u64), &Placed)> {
        self.sides[side]
            .range((start - self.longest[side], 0)..(end, 0))
            .filter(move |(_, p)| p.end > start)
    }
}

/// Where an entry lives: flow, side, key.
type Slot = (Flow, usize, (i64, u64));

/// The range matcher (see the module documentation).
pub(crate) struct RangeMatcher {
    window: i64,
    flows: FxHashMap<Flow, FlowRanges>,
    /// The events themselves, indexed by [`Placed::slot`]; freed slots are reused.
    slab: Vec<Unpaired>,
    free: Vec<u32>,
    /// Receives to decide, in arrival order (= first-seen order), with their first-seen time.
    to_decide: VecDeque<(i64, Slot)>,
    /// Every entry, in arrival order, to forget once no later event can overlap it.
    to_forget: VecDeque<(i64, Slot)>,
    arrivals: u64,
    /// Whether the sink wants the event records of each message.
    pub events_wanted: bool,
}

const SEND: usize = 0;
const RECV: usize = 1;

impl RangeMatcher {
    pub fn new(window: i64) -> Self {
        RangeMatcher {
            window,
            flows: FxHashMap::default(),
            slab: Vec::new(),
            free: Vec::new(),
            to_decide: VecDeque::new(),
            to_forget: VecDeque::new(),
            arrivals: 0,
            events_wanted: true,
        }
    }

    /// Whether any event waits here (matching calls [`expire`](Self::expire) only then: on
    /// traces whose digests all match, the range matcher costs one test per event).
    #[inline]
    pub fn holds_any(&self) -> bool {
        !self.to_forget.is_empty()
    }

    /// Whether `e` is an event this matcher takes: TCP with payload (whose bytes it covers).
    pub fn takes(e: &PacketEvent) -> bool {
        e.is_tcp() && e.tcp_payload_len() > 0
    }

    /// Adds an event the exact matcher could not pair (see [`takes`](Self::takes)).
    pub fn add(&mut self, u: Unpaired) {
        let e = &u.event;
        let flow = Flow {
            saddr: e.saddr,
            daddr: e.daddr,
            source: e.source,
            dest: e.dest,
        };
        let side = if e.direction == direction::SEND {
            SEND
        } else {
            RECV
        };
        let slot = match self.free.pop() {
            Some(i) => {
                self.slab[i as usize] = u;
                i
            }
            None => {
                self.slab.push(u);
                (self.slab.len() - 1) as u32
            }
        };
        let ranges = self.flows.entry(flow).or_default();
        let start = ranges.unwrap(e.seq);
        let end = start + i64::from(e.tcp_payload_len());
        ranges.longest[side] = ranges.longest[side].max(end - start);
        self.arrivals += 1;
        let key = (start, self.arrivals);
        ranges.sides[side].insert(
            key,
            Placed {
                end,
                trace: u.trace,
                count: u.count,
                slot,
                paired: false,
            },
        );
        if side == RECV {
            self.to_decide.push_back((u.first_seen, (flow, side, key)));
        }
        self.to_forget.push_back((u.first_seen, (flow, side, key)));
    }

    /// Decides the receives whose overlapping sends have all arrived by `now` (merge axis), and
    /// forgets what no later event can overlap. `all` decides and forgets everything (the end).
    ///
    /// Decisions (due `2·window` after the first sight) and forgetting (due `3·window` after)
    /// are taken in the order of their due times, decisions first on a tie, whenever this is
    /// called: the result depends on those times only, not on when the caller looks (see
    /// [`super::order`]).
    pub fn expire<S: MessageSink + ?Sized>(
        &mut self,
        now: i64,
        all: bool,
        stats: &mut MatchStats,
        recordings: &Recordings,
        sink: &mut S,
    ) {
        let window = self.window;
        let due = |first_seen: i64, windows: i64| first_seen.saturating_add(windows * window);
        loop {
            let decide = self.to_decide.front().map(|&(f, _)| due(f, 2));
            let forget = self.to_forget.front().map(|&(f, _)| due(f, 3));
            let (decide_first, at) = match (decide, forget) {
                (Some(d), Some(f)) => (d <= f, d.min(f)),
                (Some(d), None) => (true, d),
                (None, Some(f)) => (false, f),
                (None, None) => break,
            };
            if !(all || at < now) {
                break;
            }
            if decide_first {
                let (_, slot) = self.to_decide.pop_front().expect("looked at");
                self.decide(slot, stats, sink);
            } else {
                let (_, slot) = self.to_forget.pop_front().expect("looked at");
                self.forget(slot, stats, recordings);
            }
        }
    }

    /// Drops an entry no later event can overlap, counting it as unmatched if it never paired.
    fn forget(&mut self, (flow, side, key): Slot, stats: &mut MatchStats, recordings: &Recordings) {
        let Some(ranges) = self.flows.get_mut(&flow) else {
            return;
        };
        if let Some(p) = ranges.sides[side].remove(&key) {
            let u = &self.slab[p.slot as usize];
            if !p.paired {
                stats.unmatched += u64::from(p.count);
                let due = u.first_seen.saturating_add(3 * self.window);
                if p.count == 1 && recordings.suspect(&u.event, u.first_seen, due) {
                    stats.oversize_unmatched += 1;
                }
            }
            self.free.push(p.slot);
        }
        if ranges.sides.iter().all(BTreeMap::is_empty) {
            self.flows.remove(&flow);
        }
    }

    /// Pairs the receive at `slot` with every send it may (see the module documentation).
    fn decide<S: MessageSink + ?Sized>(
        &mut self,
        (flow, _, key): Slot,
        stats: &mut MatchStats,
        sink: &mut S,
    ) {
        let Some(ranges) = self.flows.get_mut(&flow) else {
            return;
        };
        let Some(&r) = ranges.sides[RECV].get(&key) else {
            return;
        };
        if r.count != 1 {
            return;
        }
        let r_start = key.0;
        let mut pairs = Vec::new();
        for (skey, s) in ranges.overlapping(SEND, r_start, r.end) {
            if s.count != 1 || s.trace == r.trace {
                continue;
            }
            let (lo, hi) = (skey.0.max(r_start), s.end.min(r.end));
            let other_send = ranges.overlapping(SEND, lo, hi).any(|(k, _)| k != skey);
            let other_recv = ranges.overlapping(RECV, lo, hi).any(|(k, _)| *k != key);
            if !other_send && !other_recv {
                pairs.push(*skey);
            }
        }
        let ru = &self.slab[r.slot as usize];
        for skey in &pairs {
            let s = ranges.sides[SEND].get_mut(skey).expect("just found");
            s.paired = true;
            let su = &self.slab[s.slot as usize];
            stats.matched += 1;
            stats.range_matched += 1;
            let m = MatchedMessage {
                message: Message {
                    send_trace: su.trace,
                    recv_trace: ru.trace,
                    send_ns: su.time,
                    recv_ns: ru.time,
                },
                origin: Origin::Events {
                    send_index: su.index,
                    recv_index: ru.index,
                },
                send_event: self.events_wanted.then_some(&su.event),
                recv_event: self.events_wanted.then_some(&ru.event),
            };
            sink.message(&m);
        }
        if !pairs.is_empty()
            && let Some(r) = ranges.sides[RECV].get_mut(&key)
        {
            r.paired = true;
        }
    }
}
