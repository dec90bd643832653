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
use super::ranges::{RangeMatcher, Unpaired};
use super::{MatchStats, OFFLOAD_SUSPECT_LEN, STACKED_COPY_NS};
use crate::model::{Message, Origin};

/// One side of a key: the first event seen on it (what the key does not already hold).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Seen {
    pub(super) time: i64,
    pub(super) index: u64,
    pub(super) trace: u32,
    pub(super) ifindex: u32,
    pub(super) cpu: u16,
    pub(super) tcp_flags: u8,
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
    /// Time of the first event on the merge axis: the key is decided `window` later.
    first_seen: i64,
    /// Position of the first event in the merged input (the canonical order's tie-break).
    seq: u64,
    /// The first send event (valid when `sends > 0`).
    send: Seen,
    /// The first receive event (valid when `recvs > 0`).
    recv: Seen,
    sends: u32,
    recvs: u32,
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
        let seen = Seen {
            time,
            index,
            trace,
            ifindex: e.ifindex,
            cpu: e.cpu,
            tcp_flags: e.tcp_flags,
        };
        let is_send = e.direction == direction::SEND;
        let cell = match self.live.probe(hash, &key) {
            Probe::Vacant(cell) => cell,
            Probe::Found(p) => {
                let entry = self.live.value_mut(p);
                let (first, count) = if is_send {
                    (&mut entry.send, &mut entry.sends)
                } else {
                    (&mut entry.recv, &mut entry.recvs)
                };
                if *count == 0 {
                    *first = seen;
                    *count = 1;
                } else if first.stacked_copy(&seen) {
                    self.stats.stacked_copies += 1;
                } else {
                    *count = count.saturating_add(1);
                }
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
        out: &mut O,
    ) {
        let due = e.first_seen.saturating_add(self.window);
        let tag = Tag::decided(due, e.seq);
        if e.sends > 1 || e.recvs > 1 {
            stats.ambiguous += 1;
            if !self.to_ranges(e, key, tag, out) {
                stats.unmatched += u64::from(e.sends) + u64::from(e.recvs);
            }
            return;
        }
        if e.sends == 0 || e.recvs == 0 {
            if self.to_ranges(e, key, tag, out) {
                return;
            }
            stats.unmatched += 1;
            // Only unmatched keys get here, so rebuilding the record (which knows the key's
            // layout) is cheap enough.
            let probe = key.event(&Seen::default(), direction::SEND);
            if recordings.suspect(&probe, e.first_seen, due) {
                stats.oversize_unmatched += 1;
            }
            return;
        }
        let (s, r) = (e.send, e.recv);
        if s.trace == r.trace {
            stats.same_trace += 1;
            return;
        }
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
                [
                    key.event(&s, direction::SEND),
                    key.event(&r, direction::RECV),
                ],
            );
        } else {
            out.message(tag, message, origin);
        }
    }
}
