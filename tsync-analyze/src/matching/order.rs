//! The canonical order of what matching decides, which makes the results the same whatever the
//! number of threads.
//!
//! Everything downstream of the hash join depends on order: the range matcher (which events are
//! waiting when a receive is decided), exchanges (a segment and the next ACK of its connection),
//! the hulls' bucket origins and out-of-order counts, the regression's floating-point sums. So
//! decisions are not passed on in the order some thread happened to take them, but in the order
//! of their due time on the merge axis: a key first seen at `t` is decided at `t + window`, a
//! receive waiting for ranges at `t + 2·window`, and ties are broken by the position of the key's
//! first event in the merged input. Each partition decides its keys in that order; their outputs
//! are merged by [`Tag`] ([`merge`]), and the sequencer applies range matching and exchanges in
//! that order.

use tsync_common::PacketEvent;

use super::ranges::Unpaired;
use crate::model::{Message, Origin};

/// A decision's place in the canonical order (compared field by field).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Tag {
    /// Due time on the merge axis: first seen + window.
    pub due: i64,
    /// Position of the key's first event in the merged input.
    pub seq: u64,
    /// Which side of the key (range candidates: send 0, receive 1).
    pub sub: u32,
}

impl Tag {
    /// The tag of a key first seen at `seq`, due at `due`.
    pub fn decided(due: i64, seq: u64) -> Tag {
        Tag { due, seq, sub: 0 }
    }
}

/// What a decision produced.
#[derive(Clone, Copy, Debug)]
pub(crate) enum What {
    /// A message; `events` indexes [`Outbox::events`] (`u32::MAX`: not kept).
    Message {
        message: Message,
        origin: Origin,
        events: u32,
    },
    /// An event for the range matcher; indexes [`Outbox::candidates`].
    Candidate(u32),
}

/// One tagged decision.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Out {
    pub tag: Tag,
    pub what: What,
}

/// Where a partition's decisions go, in the order it takes them: an [`Outbox`] (several
/// partitions: merged later), or straight on (one partition, whose decisions already come in
/// tag order).
pub(crate) trait Decisions {
    /// A message without its events.
    fn message(&mut self, tag: Tag, message: Message, origin: Origin);
    /// A message with its send and receive events.
    fn message_with_events(
        &mut self,
        tag: Tag,
        message: Message,
        origin: Origin,
        events: [PacketEvent; 2],
    );
    /// An event for the range matcher.
    fn candidate(&mut self, tag: Tag, u: Unpaired);
}

/// The decisions of one partition in one stretch of input, in tag order once
/// [`sort`](Self::sort)ed. Bulky parts (event records, range candidates) live beside the items so
/// that the items stay small.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    pub items: Vec<Out>,
    pub events: Vec<[PacketEvent; 2]>,
    pub candidates: Vec<Unpaired>,
    /// Whether an item was pushed before one with a smaller tag.
    unsorted: bool,
}

impl Outbox {
    #[inline]
    fn push(&mut self, tag: Tag, what: What) {
        if let Some(last) = self.items.last() {
            self.unsorted |= last.tag > tag;
        }
        self.items.push(Out { tag, what });
    }
}

impl Decisions for Outbox {
    #[inline]
    fn message(&mut self, tag: Tag, message: Message, origin: Origin) {
        self.push(
            tag,
            What::Message {
                message,
                origin,
                events: u32::MAX,
            },
        );
    }

    #[inline]
    fn message_with_events(
        &mut self,
        tag: Tag,
        message: Message,
        origin: Origin,
        events: [PacketEvent; 2],
    ) {
        self.events.push(events);
        let events = (self.events.len() - 1) as u32;
        self.push(
            tag,
            What::Message {
                message,
                origin,
                events,
            },
        );
    }

    fn candidate(&mut self, tag: Tag, u: Unpaired) {
        self.candidates.push(u);
        let i = (self.candidates.len() - 1) as u32;
        self.push(tag, What::Candidate(i));
    }
}

impl Outbox {
    /// Puts the items in tag order (they almost always are: then this costs one pass).
    pub fn sort(&mut self) {
        if self.unsorted {
            self.items.sort_by_key(|o| o.tag);
            self.unsorted = false;
        }
    }

    pub fn clear(&mut self) {
        self.items.clear();
        self.events.clear();
        self.candidates.clear();
        self.unsorted = false;
    }

    /// The events of a message item, if kept.
    #[inline]
    pub fn events_of(&self, events: u32) -> Option<&[PacketEvent; 2]> {
        self.events.get(events as usize)
    }
}

/// Calls `f` on every item of the sorted `boxes`, in tag order (a k-way merge; tags are unique),
/// then empties them.
pub(crate) fn merge(boxes: &mut [Outbox], mut f: impl FnMut(&Out, &Outbox)) {
    if let [only] = boxes {
        for o in &only.items {
            f(o, only);
        }
        only.clear();
        return;
    }
    let mut next = vec![0usize; boxes.len()];
    loop {
        let mut best: Option<(usize, Tag)> = None;
        for (i, b) in boxes.iter().enumerate() {
            if let Some(o) = b.items.get(next[i])
                && best.is_none_or(|(_, t)| o.tag < t)
            {
                best = Some((i, o.tag));
            }
        }
        let Some((i, _)) = best else { break };
        let b = &boxes[i];
        // Take the whole run of this box that comes before every other box's head.
        let bound = boxes
            .iter()
            .enumerate()
            .filter(|&(j, _)| j != i)
            .filter_map(|(j, o)| o.items.get(next[j]).map(|o| o.tag))
            .min();
        let items = &b.items[next[i]..];
        let run = match bound {
            Some(bound) => items.iter().take_while(|o| o.tag < bound).count(),
            None => items.len(),
        };
        for o in &items[..run] {
            f(o, b);
        }
        next[i] += run;
    }
    for b in boxes {
        b.clear();
    }
}
