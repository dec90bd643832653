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
    node: u32,
    line: u64,
    /// Arrival number: tells this entry from a later span with the same id.
    seq: u64,
    /// The parent's span id (same trace).
    parent: Option<u64>,
    /// The spans it links to (kept for CONSUMER spans only: the queue rule).
    links: Box<[SpanKey]>,
    span: Side,
    /// Children (and linking spans) joined to this span.
    joined: Vec<Joined>,
    /// The spans this one was joined to as child or linking span: (key, seq).
    joined_to: Vec<(SpanKey, u64)>,
    parent_found: bool,
    dup: bool,
    /// Pairs whose parent has left the window before this child: judged when this one leaves.
    deferred: Vec<Deferred>,
}

struct Joined {
    key: SpanKey,
    seq: u64,
    node: u32,
    line: u64,
    relation: Relation,
    span: Side,
    dup: bool,
}

struct Deferred {
    parent_node: u32,
    parent: Side,
    parent_dup: bool,
    servers: u32,
    relation: Relation,
}

/// The messages of one judged pair, to the caller.
pub(crate) struct PairOut<'a> {
    pub(crate) parent_node: u32,
    pub(crate) child_node: u32,
    /// The child's line in the file.
    pub(crate) line: u64,
    pub(crate) messages: &'a [PairMessage],
}

/// The join.
pub(crate) struct Joiner {
    window: usize,
    entries: FxHashMap<SpanKey, Entry>,
    order: VecDeque<(SpanKey, u64)>,
    waiting: FxHashMap<SpanKey, Vec<(SpanKey, Relation)>>,
    seq: u64,
    scratch: Vec<PairMessage>,
    pub(crate) counts: JoinCounts,
}

impl Joiner {
    /// A join keeping the last `window` spans (at least 1).
    pub(crate) fn new(window: usize) -> Joiner {
        Joiner {
            window: window.max(1),
            entries: FxHashMap::default(),
            order: VecDeque::new(),
            waiting: FxHashMap::default(),
            seq: 0,
            scratch: Vec::new(),
            counts: JoinCounts::default(),
        }
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
        let side = Side::of(&span);
        let links: Box<[SpanKey]> = if span.kind == Kind::Consumer {
            span.links.into_boxed_slice()
        } else {
            Box::default()
        };
        if let Some(first) = self.entries.get_mut(&key) {
            if first.node == node
                && first.parent == span.parent
                && first.links == links
                && first.span == side
            {
                self.counts.repeated += 1;
                return;
            }
            self.counts.duplicates += 1;
            first.dup = true;
            let parents = first.joined_to.clone();
            for (p, seq) in parents {
                if let Some(parent) = self.entries.get_mut(&p).filter(|e| e.seq == seq) {
                    for j in parent.joined.iter_mut().filter(|j| j.key == key) {
                        j.dup = true;
                    }
                }
            }
            return;
        }
        self.counts.spans += 1;
        self.counts.without_kind += u64::from(span.kind == Kind::Unspecified);
        self.seq += 1;
        let seq = self.seq;
        let mut relations: Vec<(SpanKey, Relation)> = Vec::new();
        match span.parent {
            Some(p) => relations.push(((key.0, p), Relation::Parent)),
            None => self.counts.roots += 1,
        }
        // Links count for the queue rule only, which needs a CONSUMER: other spans' links are
        // not kept.
        relations.extend(links.iter().map(|&l| (l, Relation::Link)));
        self.entries.insert(
            key,
            Entry {
                node,
                line,
                seq,
                parent: span.parent,
                links,
                span: side,
                joined: Vec::new(),
                joined_to: Vec::new(),
                parent_found: false,
                dup: false,
                deferred: Vec::new(),
            },
        );
        // A span naming itself as its parent or link is no pair.
        relations.retain(|(p, _)| *p != key);
        for (p, relation) in relations {
            if self.entries.contains_key(&p) {
                self.join(p, key, relation);
            } else {
                push_one(self.waiting.entry(p).or_default(), (key, relation));
            }
        }
        if let Some(children) = self.waiting.remove(&key) {
            for (c, relation) in children {
                if self.entries.contains_key(&c) {
                    self.join(key, c, relation);
                }
            }
        }
        self.order.push_back((key, seq));
        while self.order.len() > self.window {
            self.evict_oldest(emit);
        }
    }

    /// Judges every pair still open (at the end of the file).
    pub(crate) fn finish(&mut self, emit: &mut dyn FnMut(&PairOut)) {
        while !self.order.is_empty() {
            self.evict_oldest(emit);
        }
    }

    fn join(&mut self, parent: SpanKey, child: SpanKey, relation: Relation) {
        let c = self.entries.get_mut(&child).expect("the child is kept");
        if relation == Relation::Parent {
            c.parent_found = true;
        }
        let joined = Joined {
            key: child,
            seq: c.seq,
            node: c.node,
            line: c.line,
            relation,
            span: c.span.clone(),
            dup: c.dup,
        };
        let p = self.entries.get_mut(&parent).expect("the parent is kept");
        push_one(&mut p.joined, joined);
        let pseq = p.seq;
        let c = self.entries.get_mut(&child).expect("the child is kept");
        push_one(&mut c.joined_to, (parent, pseq));
    }

    fn evict_oldest(&mut self, emit: &mut dyn FnMut(&PairOut)) {
        let Some((key, seq)) = self.order.pop_front() else {
            return;
        };
        let Some(entry) = self.entries.remove(&key) else {
            return;
        };
        debug_assert_eq!(entry.seq, seq);
        let servers = entry
            .joined
            .iter()
            .filter(|j| j.relation == Relation::Parent && j.span.kind == Kind::Server)
            .count() as u32;
        for j in entry.joined {
            match self.entries.get_mut(&j.key).filter(|c| c.seq == j.seq) {
                // The child is still kept: the pair is judged when it leaves.
                Some(child) => push_one(
                    &mut child.deferred,
                    Deferred {
                        parent_node: entry.node,
                        parent: entry.span.clone(),
                        parent_dup: entry.dup,
                        servers,
                        relation: j.relation,
                    },
                ),
                None => {
                    let pair = PairSides {
                        parent_node: entry.node,
                        parent: &entry.span,
                        child_node: j.node,
                        child: &j.span,
                        line: j.line,
                        dup: entry.dup || j.dup,
                        servers,
                        relation: j.relation,
                    };
                    self.judge(&pair, emit);
                }
            }
        }
        for d in &entry.deferred {
            let pair = PairSides {
                parent_node: d.parent_node,
                parent: &d.parent,
                child_node: entry.node,
                child: &entry.span,
                line: entry.line,
                dup: d.parent_dup || entry.dup,
                servers: d.servers,
                relation: d.relation,
            };
            self.judge(&pair, emit);
        }
        if let Some(p) = entry.parent {
            if !entry.parent_found {
                self.counts.parent_not_found += 1;
            }
            self.unwait((key.0, p), key);
        }
        for l in &entry.links {
            self.unwait(*l, key);
        }
    }

    /// Takes `child` off the list of spans waiting for `parent`.
    fn unwait(&mut self, parent: SpanKey, child: SpanKey) {
        if let Some(list) = self.waiting.get_mut(&parent) {
            list.retain(|(c, _)| *c != child);
            if list.is_empty() {
                self.waiting.remove(&parent);
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
/// the four a `Vec` would make (the window keeps hundreds of thousands of these lists).
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

    proptest::proptest! {
        /// Against the naive join of every parent with every child: with a window holding the
        /// whole file the messages are exactly the naive ones, whatever the order of the spans
        /// and with exact copies among them; with any smaller window they are some of them,
        /// never one more.
        #[test]
        fn the_window_gives_the_naive_join_or_part_of_it(
            calls in proptest::collection::vec((0u32..3, 0u32..3, 1i64..50_000, proptest::bool::ANY), 1..40),
            order in proptest::num::u64::ANY,
            window in 1usize..60,
        ) {
            let mut spans = Vec::new();
            let mut expected = Vec::new();
            for (i, &(a, b, latency, repeat)) in calls.iter().enumerate() {
                let t = i as i64 * 1_000_000;
                let (c, sv) = (2 * i as u64 + 1, 2 * i as u64 + 2);
                let client = span(c, None, Kind::Client, t, t + 3 * latency);
                let server = span(sv, Some(c), Kind::Server, t + latency, t + 5 * latency);
                if a != b {
                    expected.push((a, b, t, t + latency));
                    expected.push((b, a, t + latency, t + 3 * latency));
                }
                spans.push((a, client.clone()));
                spans.push((b, server));
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
                    for g in &got {
                        let k = rest.iter().position(|e| e == g);
                        proptest::prop_assert!(k.is_some(), "{:?} is no message of the spans", g);
                        rest.remove(k.unwrap());
                    }
                }
                proptest::prop_assert!(j.entries.is_empty() && j.waiting.is_empty() && j.order.is_empty());
            }
        }
    }
}
