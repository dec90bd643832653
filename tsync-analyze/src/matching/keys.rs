//! The hash join itself: the live keys of one partition of the digest space and the decision of
//! each key a window after it was first seen (see the [module documentation](super)).
//!
//! A [`KeyMatcher`] holds only what depends on the key: it can own any subset of the keys (a
//! hash partition, in [`super::parallel`]), and what it decides — messages, and the events the
//! range matcher should see — goes, tagged with its place in the canonical order
//! ([`super::order`]), to an [`Outbox`]. What depends on several keys (pairing by sequence range,
//! exchanges) happens after, in that order, in the [`super::sequencer`].

use std::collections::HashMap;

use tsync_common::{PacketEvent, direction};

use super::key::{Key, KeyLanes};
use super::live::{LiveKeys, Probe};
use super::order::{Decisions, Tag};
use super::passage::{self, Cause, Owners, Resolution};
use super::ranges::{RangeMatcher, Unpaired};
use super::{MatchStats, OFFLOAD_SUSPECT_LEN};
use crate::model::{Message, Origin};

/// One event of a key: what the key does not already hold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Seen {
    pub(super) time: i64,
    pub(super) index: u64,
    pub(super) trace: u32,
    pub(super) ifindex: u32,
    pub(super) cpu: u16,
    pub(super) tcp_flags: u8,
    /// [`direction::SEND`] or [`direction::RECV`].
    pub(super) dir: u8,
    /// The record's TTL and flags (evidence of a packet's path: see [`super::passage`]).
    pub(super) ttl: u8,
    pub(super) flags: u8,
}

impl Seen {
    /// What the key does not hold of `e`, the `index`th event of trace `trace`, at local `time`.
    #[inline(always)]
    pub(super) fn of(e: &PacketEvent, time: i64, index: u64, trace: u32) -> Seen {
        Seen {
            time,
            index,
            trace,
            ifindex: e.ifindex,
            cpu: e.cpu,
            tcp_flags: e.tcp_flags,
            dir: e.direction,
            ttl: e.ttl,
            flags: e.flags,
        }
    }
}

/// What the matcher remembers of a live key besides the key itself.
///
/// A key seen at most once per side (almost every key: one send, one receive) lives here alone.
/// A second event on a side (a copy on a stacked device, a forwarding node's passage, a
/// retransmission) moves all of the key's events to a list of [`Spills`], resolved when the key
/// is decided ([`super::passage`]); `sends` is then [`SPILLED`] and `recvs` the list's index.
#[derive(Clone, Copy, Debug, Default)]
struct Entry {
    /// Time of the first event on the merge axis: the key is decided `window` later.
    first_seen: i64,
    /// Position of the first event in the merged input (the canonical order's tie-break).
    seq: u64,
    /// The send event (valid when `sends` is 1).
    send: Seen,
    /// The receive event (valid when `recvs` is 1).
    recv: Seen,
    sends: u32,
    recvs: u32,
}

/// [`Entry::sends`] of a key whose events are in a spill list.
const SPILLED: u32 = u32::MAX;

/// The event lists of the keys seen more than once on a side, reused once decided.
#[derive(Default)]
struct Spills {
    lists: Vec<Spill>,
    free: Vec<u32>,
}

/// One key's events, the first [`passage::MAX_EVENTS`] + 1 of them; `extra` counts the rest.
#[derive(Default)]
struct Spill {
    events: Vec<Seen>,
    extra: u64,
}

impl Spills {
    /// A new list holding `events`; its index.
    fn open(&mut self, events: &[Seen]) -> u32 {
        let i = match self.free.pop() {
            Some(i) => i,
            None => {
                self.lists.push(Spill::default());
                (self.lists.len() - 1) as u32
            }
        };
        self.lists[i as usize].events.extend_from_slice(events);
        i
    }

    fn push(&mut self, i: u32, seen: Seen) {
        let list = &mut self.lists[i as usize];
        if list.events.len() <= passage::MAX_EVENTS {
            list.events.push(seen);
        } else {
            list.extra += 1;
        }
    }

    /// Empties list `i` for reuse.
    fn close(&mut self, i: u32) {
        let list = &mut self.lists[i as usize];
        list.events.clear();
        list.extra = 0;
        self.free.push(i);
    }
}

/// The recordings' extents, to tell offloads from traffic with nodes that were not recording
/// (see [`MatchStats::oversize_unmatched`]).
///
/// When a recording ends is only known once its file is read to the end; so that the answer does
/// not depend on when a key happens to be decided (which differs with the number of threads),
/// the end counts for decisions due after the merge axis reached the point where the file ended
/// (`ended_at`), and never for earlier ones — as if every decision were taken at its due time.
#[derive(Clone, Debug, Default)]
pub(super) struct Recordings {
    /// The traced nodes' addresses (network byte order, IPv4 in the first 4 bytes) and the trace
    /// each belongs to.
    addresses: HashMap<[u8; 16], u32>,
    /// Per trace: first event, last event (merge axis), and where the merge axis stood when its
    /// end was read (`i64::MAX` while it is still being read).
    spans: HashMap<u32, (i64, i64, i64)>,
}

impl Recordings {
    pub(super) fn set_addresses(&mut self, addresses: HashMap<[u8; 16], u32>) {
        self.addresses = addresses;
    }

    pub(super) fn starts(&mut self, trace: u32, first: i64) {
        self.spans.insert(trace, (first, i64::MAX, i64::MAX));
    }

    pub(super) fn ends(&mut self, trace: u32, last: i64, ended_at: i64) {
        if let Some(span) = self.spans.get_mut(&trace) {
            span.1 = last;
            span.2 = ended_at;
        }
    }

    /// Whether `e`, first seen at `t` and decided at `due` (merge axis), is an oversized packet
    /// between two traced nodes that were both recording at `t`.
    pub(super) fn suspect(&self, e: &PacketEvent, t: i64, due: i64) -> bool {
        let recording = |addr: &[u8; 16]| {
            self.addresses.get(addr).is_some_and(|trace| {
                self.spans
                    .get(trace)
                    .is_none_or(|&(first, last, ended_at)| {
                        first <= t && (t <= last || ended_at >= due)
                    })
            })
        };
        e.tot_len > OFFLOAD_SUSPECT_LEN && recording(&e.saddr) && recording(&e.daddr)
    }
}

/// The live keys of one partition and their decisions. Feed it events in merged order with
/// [`event`](Self::event), then call [`finish`](Self::finish).
///
/// The live keys are kept in creation order (the order they are decided in) with a compact hash
/// index over them (see [`super::live`]): expiring needs no search and the index stays small
/// enough for the cache.
pub(crate) struct KeyMatcher {
    live: LiveKeys<Key, Entry>,
    /// No live key is due before this: the due time of the oldest one or earlier (`i64::MAX`
    /// when none is live). Every event asks whether something is due, and almost always nothing
    /// is: one comparison answers it, without looking at the oldest entry.
    next_due: i64,
    rules: Rules,
    spills: Spills,
    pub(super) stats: MatchStats,
    pub(super) recordings: Recordings,
}

/// How keys are decided (fixed for the whole run): apart from the live keys, so that a key is
/// decided where it lies in the table, without copying it out first.
struct Rules {
    window: i64,
    /// Whether messages carry their event records (the sink wants them, or exchanges are formed).
    events_wanted: bool,
    /// Whether undecided TCP payload events go on to the range matcher.
    by_range: bool,
}

impl KeyMatcher {
    pub(super) fn new(window: i64, by_range: bool) -> Self {
        KeyMatcher {
            live: LiveKeys::with_capacity(1 << 12),
            next_due: i64::MAX,
            rules: Rules {
                window: window.max(1),
                events_wanted: true,
                by_range,
            },
            spills: Spills::default(),
            stats: MatchStats::default(),
            recordings: Recordings::default(),
        }
    }

    pub(super) fn set_events_wanted(&mut self, wanted: bool) {
        self.rules.events_wanted = wanted;
    }

    /// Hints that an event whose key hashes to `hash` will be passed to
    /// [`event_hashed`](Self::event_hashed) soon: starts loading the part of the index it will
    /// probe, so that the probe does not wait for memory.
    #[inline]
    pub(super) fn prefetch(&self, hash: u64) {
        self.live.prefetch_home(hash);
    }

    /// Adds an event of trace `trace`: `time` is its local time (ns), `aligned` its time on the
    /// merge axis, `index` its position in its file, `seq` its position in the merged input.
    #[cfg(test)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn event<O: Decisions>(
        &mut self,
        trace: u32,
        e: &PacketEvent,
        time: i64,
        aligned: i64,
        index: u64,
        seq: u64,
        out: &mut O,
    ) {
        let hash = Key::of(e).hash();
        self.event_hashed(trace, e, hash, time, aligned, index, seq, out);
    }

    /// Adds an event whose key hashes to `hash` (the reader hashes each key once, for the
    /// prefetch, the partition and this lookup): see `event` for the other arguments.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn event_hashed<O: Decisions>(
        &mut self,
        trace: u32,
        e: &PacketEvent,
        hash: u64,
        time: i64,
        aligned: i64,
        index: u64,
        seq: u64,
        out: &mut O,
    ) {
        self.stats.events += 1;
        self.expire(aligned, out);
        let key = KeyLanes::of(e);
        debug_assert_eq!(key.key().hash(), hash);
        let is_send = e.direction == direction::SEND;
        let seen = Seen::of(e, time, index, trace);
        let cell = match self.live.probe(hash, &key) {
            Probe::Vacant(cell) => cell,
            Probe::Found(p) => {
                let entry = self.live.value_mut(p);
                if entry.sends == SPILLED {
                    self.spills.push(entry.recvs, seen);
                    return;
                }
                let (side, count) = if is_send {
                    (&mut entry.send, &mut entry.sends)
                } else {
                    (&mut entry.recv, &mut entry.recvs)
                };
                if *count == 0 {
                    (*side, *count) = (seen, 1);
                    return;
                }
                // A second event on a side: the key's events go to a list, for `passage`.
                let mut held = [Seen::default(); 3];
                let mut n = 0;
                for (s, c) in [
                    (entry.send, entry.sends),
                    (entry.recv, entry.recvs),
                    (seen, 1),
                ] {
                    if c > 0 {
                        held[n] = s;
                        n += 1;
                    }
                }
                entry.recvs = self.spills.open(&held[..n]);
                entry.sends = SPILLED;
                return;
            }
        };
        // Only the side seen is written: the other one is read only once its count is set. The
        // probe's empty cell takes the key's cell: no second probe.
        let entry = self.live.push_back_at(cell, hash, key.key());
        entry.first_seen = aligned;
        entry.seq = seq;
        if is_send {
            (entry.send, entry.sends, entry.recvs) = (seen, 1, 0);
        } else {
            (entry.recv, entry.sends, entry.recvs) = (seen, 0, 1);
        }
        self.next_due = self.next_due.min(aligned.saturating_add(self.rules.window));
    }

    /// Decides every key whose window ended before `now`.
    #[inline(always)]
    pub(super) fn expire<O: Decisions>(&mut self, now: i64, out: &mut O) {
        if now > self.next_due {
            self.expire_due(now, out);
        }
    }

    /// [`expire`](Self::expire) when a key may be due: decides the due keys, oldest first, and
    /// notes when the next one is.
    fn expire_due<O: Decisions>(&mut self, now: i64, out: &mut O) {
        let window = self.rules.window;
        while let Some(front) = self.live.front() {
            let due = front.value.first_seen.saturating_add(window);
            if due >= now {
                self.next_due = due;
                return;
            }
            self.rules.decide(
                &front.value,
                &front.key,
                &mut self.stats,
                &self.recordings,
                &mut self.spills,
                out,
            );
            self.live.drop_front();
        }
        self.next_due = i64::MAX;
    }

    /// Decides every remaining key and returns the counts.
    pub(super) fn finish<O: Decisions>(mut self, out: &mut O) -> (MatchStats, Recordings) {
        self.expire(i64::MAX, out);
        (self.stats, self.recordings)
    }
}

impl Rules {
    /// Hands the sides of an undecided key to the range matcher, if it takes them; false when
    /// it does not (then they are unmatched here).
    fn to_ranges<O: Decisions>(&self, e: &Entry, key: &Key, tag: Tag, out: &mut O) -> bool {
        if !self.by_range {
            return false;
        }
        let probe = key.event(&Seen::default(), direction::SEND);
        if !RangeMatcher::takes(&probe) {
            return false;
        }
        for (side, (seen, count, dir)) in [
            (&e.send, e.sends, direction::SEND),
            (&e.recv, e.recvs, direction::RECV),
        ]
        .into_iter()
        .enumerate()
        {
            if count > 0 {
                out.candidate(
                    Tag {
                        sub: side as u32,
                        ..tag
                    },
                    Unpaired {
                        event: key.event(seen, dir),
                        trace: seen.trace,
                        time: seen.time,
                        index: seen.index,
                        first_seen: e.first_seen,
                        count,
                    },
                );
            }
        }
        true
    }

    /// Decides the key `key` (its entry `e`): a message, an event for the range matcher, or a
    /// count.
    #[inline]
    fn decide<O: Decisions>(
        &self,
        e: &Entry,
        key: &Key,
        stats: &mut MatchStats,
        recordings: &Recordings,
        spills: &mut Spills,
        out: &mut O,
    ) {
        let due = e.first_seen.saturating_add(self.window);
        let tag = Tag::decided(due, e.seq);
        if e.sends == SPILLED {
            self.decide_spilled(e, key, tag, stats, recordings, spills, out);
            return;
        }
        if e.sends == 0 || e.recvs == 0 {
            self.one_side(e, key, tag, stats, recordings, out);
            return;
        }
        self.pair(&e.send, &e.recv, key, tag, stats, out);
    }

    /// A key with one side only: the range matcher's, or unmatched.
    fn one_side<O: Decisions>(
        &self,
        e: &Entry,
        key: &Key,
        tag: Tag,
        stats: &mut MatchStats,
        recordings: &Recordings,
        out: &mut O,
    ) {
        if self.to_ranges(e, key, tag, out) {
            return;
        }
        stats.unmatched += 1;
        // Only unmatched keys get here, so rebuilding the record (which knows the key's
        // layout) is cheap enough.
        let probe = key.event(&Seen::default(), direction::SEND);
        if recordings.suspect(&probe, e.first_seen, tag.due) {
            stats.oversize_unmatched += 1;
        }
    }

    /// A key with one send and one receive: a message, or loopback.
    fn pair<O: Decisions>(
        &self,
        s: &Seen,
        r: &Seen,
        key: &Key,
        tag: Tag,
        stats: &mut MatchStats,
        out: &mut O,
    ) {
        if s.trace == r.trace {
            stats.same_trace += 1;
            return;
        }
        self.message(s, r, key, tag, stats, out);
    }

    #[inline(always)]
    fn message<O: Decisions>(
        &self,
        s: &Seen,
        r: &Seen,
        key: &Key,
        tag: Tag,
        stats: &mut MatchStats,
        out: &mut O,
    ) {
        stats.matched += 1;
        let message = Message {
            send_trace: s.trace,
            recv_trace: r.trace,
            send_ns: s.time,
            recv_ns: r.time,
        };
        let origin = Origin::Events {
            send_index: s.index,
            recv_index: r.index,
        };
        if self.events_wanted {
            out.message_with_events(
                tag,
                message,
                origin,
                [key.event(s, direction::SEND), key.event(r, direction::RECV)],
            );
        } else {
            out.message(tag, message, origin);
        }
    }

    /// Decides a key seen more than once on a side from all its events ([`passage`]), and
    /// empties its list.
    #[allow(clippy::too_many_arguments)]
    fn decide_spilled<O: Decisions>(
        &self,
        e: &Entry,
        key: &Key,
        tag: Tag,
        stats: &mut MatchStats,
        recordings: &Recordings,
        spills: &mut Spills,
        out: &mut O,
    ) {
        let list = &mut spills.lists[e.recvs as usize];
        let probe = key.event(&Seen::default(), direction::SEND);
        let resolution = if list.extra > 0 {
            Resolution::Ambiguous(Cause::Repeated)
        } else {
            passage::resolve(&mut list.events, &probe.saddr, &probe.daddr, recordings)
        };
        match resolution {
            Resolution::Local { send, recv, copies } => {
                stats.stacked_copies += u64::from(copies);
                match (send, recv) {
                    (Some(s), Some(r)) => self.pair(&s, &r, key, tag, stats, out),
                    (s, r) => {
                        let one = Entry {
                            send: s.unwrap_or_default(),
                            recv: r.unwrap_or_default(),
                            sends: u32::from(s.is_some()),
                            recvs: u32::from(r.is_some()),
                            ..*e
                        };
                        self.one_side(&one, key, tag, stats, recordings, out);
                    }
                }
            }
            Resolution::Path {
                hops,
                copies,
                forwarded,
            } => {
                stats.stacked_copies += u64::from(copies);
                stats.forwarded += u64::from(forwarded);
                for (hop, (s, r)) in hops.iter().enumerate() {
                    let tag = Tag {
                        sub: hop as u32,
                        ..tag
                    };
                    self.message(s, r, key, tag, stats, out);
                }
            }
            Resolution::Ambiguous(cause) => {
                stats.ambiguous += 1;
                match cause {
                    Cause::Repeated => stats.ambiguous_repeated += 1,
                    Cause::Order => stats.ambiguous_order += 1,
                }
                let count = |dir: u8| list.events.iter().filter(|s| s.dir == dir).count() as u32;
                let first = |dir: u8| list.events.iter().find(|s| s.dir == dir).copied();
                let (sends, recvs) = (count(direction::SEND), count(direction::RECV));
                // The range matcher pairs no byte that a count above 1 covers twice.
                let all = Entry {
                    send: first(direction::SEND).unwrap_or_default(),
                    recv: first(direction::RECV).unwrap_or_default(),
                    sends,
                    recvs,
                    ..*e
                };
                if !self.to_ranges(&all, key, tag, out) {
                    stats.unmatched += u64::from(sends) + u64::from(recvs) + list.extra;
                }
            }
        }
        spills.close(e.recvs);
    }
}

impl Owners for Recordings {
    fn owner(&self, address: &[u8; 16]) -> Option<u32> {
        self.addresses
            .get(address)
            .copied()
            .filter(|&t| t != CONTESTED)
    }
}

/// [`Recordings::addresses`]' trace for an address that several traces hold: traced, but owned
/// by none.
pub(super) const CONTESTED: u32 = u32::MAX;
