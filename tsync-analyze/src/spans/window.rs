//! The join of parents and children (and linked spans) within a window of spans, so that memory
//! is bounded by the window, not by the file's length.
//!
//! Spans arrive in file order, which is roughly the order they ended in: a Collector writes each
//! batch its exporters sent, and a child usually ends (and is exported) before its parent. The
//! last `window` spans are kept, keyed by (trace id, span id). A span whose parent is kept is
//! joined to it at once; one whose parent is not yet there waits for it, and a parent arriving
//! later takes its waiting children. A span leaves the window when `window` newer spans have
//! arrived; a pair is judged (and its messages given) once both of its spans have left, so that
//! a duplicate of either seen while it was kept voids the pair. A child whose parent never came
//! while it was kept is counted as `parent_not_found`: its parent is missing from the file, or
//! more than `window` spans away from it in the file (the two cannot be told apart without
//! remembering every id, which the bound forbids).

use std::collections::VecDeque;
use std::num::{NonZeroI64, NonZeroU64};

use rustc_hash::FxHashMap;

use super::read::{Kind, SpanData, SpanKey};
use super::rules::{PairMessage, PairNotes, Relation, Side, pair_messages};

/// What the join counted.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct JoinCounts {
    /// Spans joined (duplicates and repeated copies not included).
    pub spans: u64,
    /// Spans without a parent (roots of their traces).
    pub roots: u64,
    /// Spans whose kind is unset (UNSPECIFIED).
    pub without_kind: u64,
    /// Spans whose parent did not come while they were kept: missing from the file, or farther
    /// than the window.
    pub parent_not_found: u64,
    /// Pairs whose two spans ran on one node: no message (one clock).
    pub same_node_pairs: u64,
    /// Parent/child (or linked) pairs across nodes.
    pub cross_node_pairs: u64,
    /// Of those, pairs with a span of unset kind: no message.
    pub without_kind_pairs: u64,
    /// Of those, pairs whose kinds fit no rule: no message.
    pub no_rule_pairs: u64,
    /// CLIENT spans in ERROR paired with a SERVER span: the response was not used.
    pub error_clients: u64,
    /// CLIENT spans with several SERVER children: their responses were not used.
    pub several_servers: u64,
    /// Pairs where a time a rule needs was unset.
    pub unset_times: u64,
    /// RPC message events whose id is not unique on their side: not used.
    pub ambiguous_message_events: u64,
    /// Span ids seen twice with different contents: every pair with either copy dropped.
    pub duplicates: u64,
    /// Exact copies of a span (an exporter's retry), dropped.
    pub repeated: u64,
    /// Pairs dropped because one of their spans' ids was duplicated.
    pub duplicate_pairs: u64,
    /// Spans that end before they start (the node's clock was stepped back while they ran): no
    /// message uses them.
    pub backwards: u64,
}

/// A span kept in the window. Every field counts: the window holds many of them.
struct Entry {
    line: u64,
    /// The parent's span id (same trace; never 0, OpenTelemetry's invalid id).
    parent: Option<NonZeroU64>,
    node: u32,
    /// SERVER children joined to this span (the response rule's condition).
    servers: u32,
    span: Side,
    /// The spans it links to (kept for CONSUMER spans only: the queue rule).
    links: Box<[SpanKey]>,
    parent_found: bool,
    dup: bool,
    /// The next older span waiting for the same parent ([`Slot::waiting`]), [`NONE`] at the
    /// list's end.
    next_waiting: u64,
    /// The spans joined to this one as its children (or linking spans): their arrival numbers.
    children: Few<Partner>,
    /// The spans this one was joined to as child (or linking span).
    parents: Few<Partner>,
    /// Partners that left the window before this span: their pairs are judged when it leaves.
    deferred: Few<Deferred>,
}

/// The other span of a joined pair, by arrival number.
#[derive(Clone, Copy)]
struct Partner {
    seq: u64,
    relation: Relation,
}

/// A span that left the window while its partner was kept: what judging their pair needs.
struct Deferred {
    span: Side,
    line: u64,
    node: u32,
    /// Its SERVER children, when it is the pair's parent.
    servers: u32,
    dup: bool,
    relation: Relation,
    /// It is the pair's parent (else its child).
    is_parent: bool,
}

/// No span (spans are numbered from 1): the end of a waiting list.
const NONE: u64 = 0;

/// What the join knows of an id: the kept span of that id, and the newest kept span waiting
/// for it as its parent, the head of a list through [`Entry::next_waiting`] (newest to oldest,
/// ending at [`NONE`] or at the first span that has left). Either is void once it has left
/// (its number is below [`Joiner::first`]): a slot is not removed when its span leaves, but
/// by a sweep once every `window / 4` spans, so that a span costs two lookups (its own id, its
/// parent's) and no removal.
#[derive(Clone, Copy, Default)]
struct Slot {
    kept: u64,
    waiting: u64,
}

/// A list that holds none or one item in nearly every case: those without an allocation.
enum Few<T> {
    Zero,
    One(T),
    Many(Vec<T>),
}

impl<T> Few<T> {
    fn push(&mut self, item: T) {
        match std::mem::replace(self, Few::Zero) {
            Few::Zero => *self = Few::One(item),
            Few::One(first) => *self = Few::Many(vec![first, item]),
            Few::Many(mut v) => {
                push_one(&mut v, item);
                *self = Few::Many(v);
            }
        }
    }

    fn as_slice(&self) -> &[T] {
        match self {
            Few::Zero => &[],
            Few::One(item) => std::slice::from_ref(item),
            Few::Many(v) => v,
        }
    }
}

/// The messages of one judged pair, to the caller.
pub(crate) struct PairOut<'a> {
    pub(crate) parent_node: u32,
    pub(crate) child_node: u32,
    /// The child's line in the file.
    pub(crate) line: u64,
    pub(crate) messages: &'a [PairMessage],
}

/// The join. Spans are numbered as they arrive (from 1); the kept ones are a queue in that
/// order, so that a number finds its span without a table, and the only table by id is
/// `index`, of small entries.
pub(crate) struct Joiner {
    window: usize,
    /// The kept spans, oldest first: the front one's number is `first`.
    kept: VecDeque<Entry>,
    first: u64,
    /// Per id, its kept span and the spans waiting for it ([`Slot`]).
    index: FxHashMap<SpanKey, Slot>,
    /// `first` at the last sweep of `index`.
    swept: u64,
    /// Per linked id not kept, the CONSUMER spans that link to it (rare).
    waiting_links: FxHashMap<SpanKey, Vec<u64>>,
    scratch: Vec<PairMessage>,
    pub(crate) counts: JoinCounts,
}

impl Joiner {
    /// A join keeping the last `window` spans (at least 1).
    pub(crate) fn new(window: usize) -> Joiner {
        Joiner {
            window: window.max(1),
            kept: VecDeque::new(),
            first: 1,
            index: FxHashMap::default(),
            swept: 1,
            waiting_links: FxHashMap::default(),
            scratch: Vec::new(),
            counts: JoinCounts::default(),
        }
    }

    /// The kept span numbered `seq`, if it is still kept.
    fn kept_mut(&mut self, seq: u64) -> Option<&mut Entry> {
        let i = seq.checked_sub(self.first)?;
        self.kept.get_mut(usize::try_from(i).ok()?)
    }

    /// One span of `node`, from line `line`; pairs that are judged go to `emit`.
    pub(crate) fn push(
        &mut self,
        node: u32,
        mut span: SpanData,
        line: u64,
        emit: &mut dyn FnMut(&PairOut),
    ) {
        if let (Some(s), Some(e)) = (span.start, span.end)
            && e < s
        {
            // The clock went back while the span ran: none of its times can be trusted.
            self.counts.backwards += 1;
            span.start = None;
            span.end = None;
            span.messages.clear();
        }
        let key = span.key;
        let links: Box<[SpanKey]> = if span.kind == Kind::Consumer {
            std::mem::take(&mut span.links).into_boxed_slice()
        } else {
            Box::default()
        };
        let side = Side {
            kind: span.kind,
            error: span.error,
            start: span.start.and_then(NonZeroI64::new),
            end: span.end.and_then(NonZeroI64::new),
            messages: std::mem::take(&mut span.messages).into_boxed_slice(),
        };
        let seq = self.first + self.kept.len() as u64;
        let slot = self.index.entry(key).or_default();
        if slot.kept >= self.first {
            let kept = slot.kept;
            let first = self.kept_mut(kept).expect("a span of the window");
            if first.node == node
                && first.parent == span.parent.and_then(NonZeroU64::new)
                && first.links == links
                && first.span == side
            {
                self.counts.repeated += 1;
            } else {
                first.dup = true;
                self.counts.duplicates += 1;
            }
            return;
        }
        slot.kept = seq;
        let waiting = std::mem::replace(&mut slot.waiting, NONE);
        self.counts.spans += 1;
        self.counts.without_kind += u64::from(side.kind == Kind::Unspecified);
        self.kept.push_back(Entry {
            line,
            parent: span.parent.and_then(NonZeroU64::new),
            node,
            servers: 0,
            span: side,
            links,
            parent_found: false,
            dup: false,
            next_waiting: NONE,
            children: Few::Zero,
            parents: Few::Zero,
            deferred: Few::Zero,
        });
        // A span naming itself as its parent or link is no pair.
        match span.parent.map(|p| (key.0, p)).filter(|&p| p != key) {
            None => self.counts.roots += u64::from(span.parent.is_none()),
            Some(p) => {
                let slot = self.index.entry(p).or_default();
                if slot.kept >= self.first {
                    let parent = slot.kept;
                    self.join(parent, seq, Relation::Parent);
                } else {
                    let next = std::mem::replace(&mut slot.waiting, seq);
                    self.kept.back_mut().expect("just pushed").next_waiting = next;
                }
            }
        }
        // Links count for the queue rule only, which needs a CONSUMER: other spans' links are
        // not kept.
        let links = self.kept.back().map_or(0, |e| e.links.len());
        for i in 0..links {
            let l = self.kept.back().expect("just pushed").links[i];
            if l == key {
                continue;
            }
            match self.index.get(&l) {
                Some(linked) if linked.kept >= self.first => {
                    self.join(linked.kept, seq, Relation::Link)
                }
                _ => push_one(self.waiting_links.entry(l).or_default(), seq),
            }
        }
        // The spans that came before it, waiting for it.
        let mut child = waiting;
        while child >= self.first {
            let next = self.kept_mut(child).expect("kept").next_waiting;
            self.join(seq, child, Relation::Parent);
            child = next;
        }
        if let Some(children) = self.waiting_links.remove(&key) {
            for child in children {
                if child >= self.first {
                    self.join(seq, child, Relation::Link);
                }
            }
        }
        while self.kept.len() > self.window {
            self.evict_oldest(emit);
        }
    }

    /// Looks up the ids `spans` will look up when they come (their own, their parents'), all
    /// at once: each lookup misses the cache (the table is as large as the window), and
    /// independent misses overlap, where one span's lookups wait for the previous span's.
    pub(crate) fn ahead(&self, spans: &[Option<SpanData>]) {
        let mut found = 0u32;
        for s in spans.iter().flatten() {
            found += u32::from(self.index.contains_key(&s.key));
            if let Some(p) = s.parent {
                found += u32::from(self.index.contains_key(&(s.key.0, p)));
            }
        }
        std::hint::black_box(found);
    }

    /// Judges every pair still open (at the end of the file).
    pub(crate) fn finish(&mut self, emit: &mut dyn FnMut(&PairOut)) {
        while !self.kept.is_empty() {
            self.evict_oldest(emit);
        }
        self.sweep();
    }

    /// Drops the slots whose spans have all left.
    fn sweep(&mut self) {
        let first = self.first;
        self.index
            .retain(|_, s| s.kept >= first || s.waiting >= first);
        self.swept = first;
    }

    /// Joins two kept spans.
    fn join(&mut self, parent: u64, child: u64, relation: Relation) {
        let c = self.kept_mut(child).expect("the child is kept");
        c.parents.push(Partner {
            seq: parent,
            relation,
        });
        let server = relation == Relation::Parent && c.span.kind == Kind::Server;
        if relation == Relation::Parent {
            c.parent_found = true;
        }
        let p = self.kept_mut(parent).expect("the parent is kept");
        p.servers += u32::from(server);
        p.children.push(Partner {
            seq: child,
            relation,
        });
    }

    fn evict_oldest(&mut self, emit: &mut dyn FnMut(&PairOut)) {
        let Some(entry) = self.kept.pop_front() else {
            return;
        };
        let seq = self.first;
        self.first += 1;
        if self.first - self.swept >= (self.window as u64 / 4).max(1) {
            self.sweep();
        }
        // Partners still kept (newer ones): their pairs are judged when they leave.
        for (partners, is_parent) in [(&entry.children, true), (&entry.parents, false)] {
            for p in partners.as_slice().iter().filter(|p| p.seq > seq) {
                let kept = self.kept_mut(p.seq).expect("a newer partner is kept");
                kept.deferred.push(Deferred {
                    span: entry.span.clone(),
                    line: entry.line,
                    node: entry.node,
                    servers: entry.servers,
                    dup: entry.dup,
                    relation: p.relation,
                    is_parent,
                });
            }
        }
        // Partners that left before it: children first, then parents.
        for parent_side in [false, true] {
            for d in entry
                .deferred
                .as_slice()
                .iter()
                .filter(|d| d.is_parent == parent_side)
            {
                let pair = if d.is_parent {
                    PairSides {
                        parent_node: d.node,
                        parent: &d.span,
                        child_node: entry.node,
                        child: &entry.span,
                        line: entry.line,
                        dup: d.dup || entry.dup,
                        servers: d.servers,
                        relation: d.relation,
                    }
                } else {
                    PairSides {
                        parent_node: entry.node,
                        parent: &entry.span,
                        child_node: d.node,
                        child: &d.span,
                        line: d.line,
                        dup: entry.dup || d.dup,
                        servers: entry.servers,
                        relation: d.relation,
                    }
                };
                self.judge(&pair, emit);
            }
        }
        if entry.parent.is_some() && !entry.parent_found {
            self.counts.parent_not_found += 1;
        }
        for l in &entry.links {
            if let Some(list) = self.waiting_links.get_mut(l) {
                list.retain(|&c| c != seq);
                if list.is_empty() {
                    self.waiting_links.remove(l);
                }
            }
        }
    }

    fn judge(&mut self, pair: &PairSides, emit: &mut dyn FnMut(&PairOut)) {
        if pair.parent_node == pair.child_node {
            self.counts.same_node_pairs += 1;
            return;
        }
        self.counts.cross_node_pairs += 1;
        if pair.dup {
            self.counts.duplicate_pairs += 1;
            return;
        }
        self.scratch.clear();
        let notes = pair_messages(
            pair.parent,
            pair.child,
            pair.relation,
            pair.servers,
            &mut self.scratch,
        );
        self.count(&notes);
        if !self.scratch.is_empty() {
            emit(&PairOut {
                parent_node: pair.parent_node,
                child_node: pair.child_node,
                line: pair.line,
                messages: &self.scratch,
            });
        }
    }

    fn count(&mut self, n: &PairNotes) {
        let c = &mut self.counts;
        c.without_kind_pairs += u64::from(n.without_kind);
        c.no_rule_pairs += u64::from(n.no_rule);
        c.error_clients += u64::from(n.error_client);
        c.several_servers += u64::from(n.several_servers);
        c.unset_times += u64::from(n.unset_time);
        c.ambiguous_message_events += n.ambiguous_events;
    }
}

/// Pushes onto a list that holds one or two items in nearly every case: room for one more, not
/// the four a `Vec` would make.
fn push_one<T>(v: &mut Vec<T>, item: T) {
    if v.len() == v.capacity() {
        v.reserve_exact(1);
    }
    v.push(item);
}

/// A pair being judged.
struct PairSides<'a> {
    parent_node: u32,
    parent: &'a Side,
    child_node: u32,
    child: &'a Side,
    line: u64,
    dup: bool,
    servers: u32,
    relation: Relation,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(id: u64, parent: Option<u64>, kind: Kind, start: i64, end: i64) -> SpanData {
        SpanData {
            key: (7, id),
            parent,
            kind,
            start: Some(start),
            end: Some(end),
            error: false,
            messages: Vec::new(),
            links: Vec::new(),
        }
    }

    /// Pushes `spans` (node, span) through a join of `window`; the (parent node, child node,
    /// messages) judged.
    fn join(window: usize, spans: Vec<(u32, SpanData)>) -> (Vec<(u32, u32, usize)>, JoinCounts) {
        let mut j = Joiner::new(window);
        let mut out = Vec::new();
        let mut emit = |p: &PairOut| out.push((p.parent_node, p.child_node, p.messages.len()));
        for (line, (node, s)) in spans.into_iter().enumerate() {
            j.push(node, s, line as u64 + 1, &mut emit);
        }
        j.finish(&mut emit);
        (out, j.counts.clone())
    }

    #[test]
    fn children_before_or_after_their_parents_within_the_window() {
        let client = span(1, None, Kind::Client, 100, 900);
        let server = span(2, Some(1), Kind::Server, 300, 800);
        for spans in [
            vec![(0, client.clone()), (1, server.clone())],
            vec![(1, server.clone()), (0, client.clone())],
        ] {
            let (out, c) = join(10, spans);
            assert_eq!(out, vec![(0, 1, 2)]);
            assert_eq!((c.cross_node_pairs, c.parent_not_found, c.roots), (1, 0, 1));
        }
        // Same node: nothing. Farther apart than the window: counted, nothing.
        let (out, c) = join(10, vec![(0, client.clone()), (0, server.clone())]);
        assert!(out.is_empty() && c.same_node_pairs == 1);
        let filler: Vec<_> = (10..20)
            .map(|i| (2, span(i, None, Kind::Internal, 1, 2)))
            .collect();
        let mut spans = vec![(1, server.clone())];
        spans.extend(filler);
        spans.push((0, client.clone()));
        let (out, c) = join(5, spans);
        assert!(out.is_empty());
        assert_eq!(c.parent_not_found, 1);
    }

    #[test]
    fn duplicates_void_their_pairs_and_exact_copies_do_not() {
        let client = span(1, None, Kind::Client, 100, 900);
        let server = span(2, Some(1), Kind::Server, 300, 800);
        let (out, c) = join(
            10,
            vec![
                (0, client.clone()),
                (1, server.clone()),
                (1, server.clone()),
            ],
        );
        assert_eq!((out.len(), c.repeated, c.duplicates), (1, 1, 0));
        let mut other = server.clone();
        other.start = Some(310);
        for spans in [
            vec![(0, client.clone()), (1, server.clone()), (1, other.clone())],
            vec![(1, server.clone()), (0, client.clone()), (1, other.clone())],
            vec![
                (0, client.clone()),
                (1, server.clone()),
                (0, client.clone()),
                (2, client.clone()),
            ],
        ] {
            let (out, c) = join(10, spans);
            assert!(out.is_empty());
            assert_eq!((c.duplicates, c.duplicate_pairs), (1, 1));
        }
        // A span that ends before it starts gives no message.
        let (out, c) = join(
            10,
            vec![(0, span(1, None, Kind::Client, 900, 100)), (1, server)],
        );
        assert!(out.is_empty());
        assert_eq!((c.backwards, c.unset_times), (1, 1));
    }

    /// The window holds an entry per span: its size is the join's memory, and its time (each
    /// entry is written once and read back when it leaves).
    #[test]
    fn an_entry_stays_small() {
        assert!(
            std::mem::size_of::<Entry>() <= 208,
            "{}",
            std::mem::size_of::<Entry>()
        );
    }

    proptest::proptest! {
        /// Against the naive join of every parent with every child: with a window holding the
        /// whole file the messages are exactly the naive ones, whatever the order of the spans
        /// and with exact copies among them; with any smaller window they are some of them,
        /// never one more (but the response of a CLIENT whose second SERVER child was out of
        /// the window).
        #[test]
        fn the_window_gives_the_naive_join_or_part_of_it(
            calls in proptest::collection::vec((0u32..3, 0u32..3, 1i64..50_000, proptest::bool::ANY, 0u32..4), 1..40),
            order in proptest::num::u64::ANY,
            window in 1usize..60,
        ) {
            let mut spans = Vec::new();
            let mut expected = Vec::new();
            // The responses a window too small to hold every SERVER child may give.
            let mut possible = Vec::new();
            for (i, &(a, b, latency, repeat, second)) in calls.iter().enumerate() {
                // From 1 ms: a time of 0 is OTLP's "unset".
                let t = (i as i64 + 1) * 1_000_000;
                let (c, sv, sv2) = (3 * i as u64 + 1, 3 * i as u64 + 2, 3 * i as u64 + 3);
                let client = span(c, None, Kind::Client, t, t + 3 * latency);
                let server = span(sv, Some(c), Kind::Server, t + latency, t + 5 * latency);
                // A fan-out (three times in four): a second SERVER child, on node `second`.
                let fan_out = second < 3;
                let (b2, start2) = (second, t + 2 * latency);
                let responses = if fan_out { &mut possible } else { &mut expected };
                if a != b {
                    responses.push((b, a, t + latency, t + 3 * latency));
                    expected.push((a, b, t, t + latency));
                }
                if fan_out && a != b2 {
                    expected.push((a, b2, t, start2));
                    possible.push((b2, a, start2, t + 3 * latency));
                }
                spans.push((a, client.clone()));
                spans.push((b, server));
                if fan_out {
                    spans.push((b2, span(sv2, Some(c), Kind::Server, start2, t + 4 * latency)));
                }
                if repeat {
                    spans.push((a, client));
                }
            }
            // A shuffle from `order` (Fisher–Yates with an LCG).
            let mut x = order;
            for i in (1..spans.len()).rev() {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                spans.swap(i, (x >> 33) as usize % (i + 1));
            }
            expected.sort_unstable();
            for w in [spans.len(), window] {
                let mut got = Vec::new();
                let mut j = Joiner::new(w);
                let mut emit = |p: &PairOut| {
                    for m in p.messages {
                        let (s, r) = if m.parent_sends { (p.parent_node, p.child_node) } else { (p.child_node, p.parent_node) };
                        got.push((s, r, m.send_ns, m.recv_ns));
                    }
                };
                for (line, (node, sp)) in spans.iter().cloned().enumerate() {
                    j.push(node, sp, line as u64 + 1, &mut emit);
                }
                j.finish(&mut emit);
                got.sort_unstable();
                if w == spans.len() {
                    proptest::prop_assert_eq!(&got, &expected);
                } else {
                    let mut rest = expected.clone();
                    rest.extend(possible.iter().copied());
                    for g in &got {
                        let k = rest.iter().position(|e| e == g);
                        proptest::prop_assert!(k.is_some(), "{:?} is no message of the spans", g);
                        rest.remove(k.unwrap());
                    }
                }
                proptest::prop_assert!(j.kept.is_empty() && j.index.is_empty() && j.waiting_links.is_empty());
            }
        }
    }
}
