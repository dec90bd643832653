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
///
/// This runs on the calling thread for every decision of every partition, so its cost per item
/// matters: partitions by key hash interleave item by item, so runs are short and each item costs
/// a comparison of heads. Two boxes (two cores) are merged with two cursors, more with a binary
/// heap of the boxes' heads (log k comparisons per item instead of a scan of every head).
pub(crate) fn merge(boxes: &mut [Outbox], mut f: impl FnMut(&Out, &Outbox)) {
    match boxes {
        [] => {}
        [only] => only.items.iter().for_each(|o| f(o, only)),
        [a, b] => merge_two(a, b, &mut f),
        _ => merge_many(boxes, &mut f),
    }
    for b in boxes {
        b.clear();
    }
}

/// [`merge`] of two boxes.
fn merge_two(a: &Outbox, b: &Outbox, f: &mut impl FnMut(&Out, &Outbox)) {
    let (mut x, mut y) = (a.items.as_slice(), b.items.as_slice());
    while let (Some(p), Some(q)) = (x.first(), y.first()) {
        if p.tag < q.tag {
            f(p, a);
            x = &x[1..];
        } else {
            f(q, b);
            y = &y[1..];
        }
    }
    x.iter().for_each(|o| f(o, a));
    y.iter().for_each(|o| f(o, b));
}

/// [`merge`] of three boxes or more: a min-heap of (head tag, box).
fn merge_many(boxes: &[Outbox], f: &mut impl FnMut(&Out, &Outbox)) {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    use std::collections::binary_heap::PeekMut;
    let mut next = vec![0usize; boxes.len()];
    let mut heads: BinaryHeap<Reverse<(Tag, usize)>> = boxes
        .iter()
        .enumerate()
        .filter_map(|(i, b)| b.items.first().map(|o| Reverse((o.tag, i))))
        .collect();
    while let Some(mut top) = heads.peek_mut() {
        let i = top.0.1;
        let b = &boxes[i];
        f(&b.items[next[i]], b);
        next[i] += 1;
        match b.items.get(next[i]) {
            Some(o) => top.0.0 = o.tag,
            None => {
                PeekMut::pop(top);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever the number of boxes and however their items interleave, the merge gives
        /// every item once, in tag order, each with its own box, and empties the boxes.
        #[test]
        fn merges_sorted_boxes_in_tag_order(
            parts in prop::collection::vec(prop::collection::vec((0i64..50, 0u64..4), 0..40), 1..7)
        ) {
            let mut boxes: Vec<Outbox> = Vec::new();
            let mut all = Vec::new();
            for (k, part) in parts.iter().enumerate() {
                let mut b = Outbox::default();
                // Unique tags: the box number goes into the sequence number.
                for &(due, seq) in part {
                    let tag = Tag::decided(due, seq * 8 + k as u64);
                    b.push(tag, What::Candidate(k as u32));
                    all.push((tag, k as u32));
                }
                b.sort();
                boxes.push(b);
            }
            all.sort();
            let mut seen = Vec::new();
            merge(&mut boxes, |o, from| {
                let What::Candidate(k) = o.what else { unreachable!() };
                // The box passed is the item's own.
                assert!(from.items.iter().any(|x| x.tag == o.tag));
                seen.push((o.tag, k));
            });
            prop_assert_eq!(seen, all);
            prop_assert!(boxes.iter().all(|b| b.items.is_empty()));
        }
    }
}
