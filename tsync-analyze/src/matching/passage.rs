//! Keys seen more than once on a side: copies of one packet on stacked devices, and its passages
//! through nodes that forward it.
//!
//! A node that routes, bridges, NATs or tunnels a packet between a pod and the wire records it
//! as a receive and a send with one digest, microseconds apart: its *passage* through that node.
//! On a Kubernetes-style node (the agent in the node's namespace, the pods behind it) every
//! packet between pods of two nodes is seen that way on both nodes: two receives and two sends.
//! Such a key is resolved here, once its window is over, from all of its events:
//!
//! 1. Per trace, the events must form one passage: all within [`STACKED_COPY_NS`] of the first,
//!    and no interface seen twice in one direction (an interface: its index and its
//!    namespace's tag, [`flag::NETNS_TAG`]: a pod's `eth0` and its node's uplink often share
//!    index 2).
//!    Anything else is the packet sent or received
//!    again (a retransmission, a duplicate): the key stays ambiguous ([`Cause::Repeated`]), since
//!    a reception could then be paired with a later send.
//! 2. The passages are ordered along the packet's path, from evidence only — never from the
//!    times, which are the unknown being estimated:
//!    - a passage that starts with a send saw the packet (with these headers) created on its node:
//!      it is the first; one that ends with a receive saw it delivered: the last;
//!    - the trace whose node holds the packet's source address (interfaces and the namespaces of
//!      its pods, as the agent recorded them; an address two traces hold counts for neither) is
//!      the first, the one holding its destination the last;
//!    - a higher TTL (hop limit) when the packet entered the node: a router lowers it and nothing
//!      raises it (a tunnel carries the inner packet's unchanged), so the passage it entered with
//!      the higher one came first.
//!
//!    A tunnel's outer send ([`flag::ENCAPSULATED`]) on one trace and outer receive on another are
//!    no evidence that one came first: they may be the ends of two tunnels whose other ends were
//!    not traced.
//!
//!    The evidence must give one order of all passages and never contradict itself; otherwise the
//!    key stays ambiguous ([`Cause::Order`]), counted, never guessed.
//! 3. Each hop is a message: the last send of a passage (the copy closest to the wire: a
//!    tunnel's outer packet, a bridge's port) and the first receive of the next one. The
//!    passage's other events are its way through the node (`forwarded`, `stacked_copies`).
//!
//! A key with copies on one trace only is what [`super::keys`] decided before passages: copies
//! on stacked devices (counted as `stacked_copies`) of a send, a receive, or both (loopback).

use tsync_common::{direction, flag};

use super::STACKED_COPY_NS;
use super::keys::Seen;

/// Most passages one key may be ordered over (nodes on a packet's path); more stay ambiguous.
pub(super) const MAX_PASSAGES: usize = 8;

/// Most events kept for one key; a key with more is ambiguous whatever they are (more events than
/// any path of [`MAX_PASSAGES`] nodes shows), and only counted.
pub(super) const MAX_EVENTS: usize = 64;

/// Why a key with several events stays ambiguous.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Cause {
    /// A node saw the packet twice (a retransmission or a duplicate), or more events came than
    /// any path explains.
    Repeated,
    /// The packet crossed several traced nodes whose order on its path the evidence does not
    /// establish, or contradicts.
    Order,
}

/// What one key's events came to.
#[derive(Debug, PartialEq)]
pub(super) enum Resolution {
    /// Every event on one trace: its last send copy and first receive copy, and how many other
    /// copies there were.
    Local {
        send: Option<Seen>,
        recv: Option<Seen>,
        copies: u32,
    },
    /// The passages in path order: one (send, receive) message per hop; `copies` further events
    /// of one direction in a passage, `forwarded` passages that received and sent the packet.
    Path {
        hops: Vec<(Seen, Seen)>,
        copies: u32,
        forwarded: u32,
    },
    Ambiguous(Cause),
}

/// Which trace holds an address (network byte order, IPv4 in the first 4 bytes): `None` when no
/// trace or several do.
pub(super) trait Owners {
    fn owner(&self, address: &[u8; 16]) -> Option<u32>;
}

/// One trace's events of the key (indexes into the sorted events).
#[derive(Clone, Copy, Debug)]
struct Passage {
    trace: u32,
    first: usize,
    last: usize,
    /// The first receive and the last send.
    entry: Option<usize>,
    exit: Option<usize>,
    /// Events beyond the first in each direction.
    copies: u32,
}

/// Resolves a key from its events (any order; sorted here by trace and position in the trace's
/// file) and the packet's addresses.
pub(super) fn resolve(
    events: &mut [Seen],
    saddr: &[u8; 16],
    daddr: &[u8; 16],
    owners: &impl Owners,
) -> Resolution {
    if events.len() > MAX_EVENTS {
        return Resolution::Ambiguous(Cause::Repeated);
    }
    events.sort_unstable_by_key(|s| (s.trace, s.index));
    let mut passages: Vec<Passage> = Vec::new();
    let mut start = 0;
    while start < events.len() {
        let trace = events[start].trace;
        let end = start + events[start..].partition_point(|s| s.trace == trace);
        match passage(events, start, end) {
            Some(p) => passages.push(p),
            None => return Resolution::Ambiguous(Cause::Repeated),
        }
        start = end;
    }
    let copies = passages.iter().map(|p| p.copies).sum();
    match passages[..] {
        [] => {
            return Resolution::Local {
                send: None,
                recv: None,
                copies,
            };
        }
        [p] => {
            return Resolution::Local {
                send: p.exit.map(|i| events[i]),
                recv: p.entry.map(|i| events[i]),
                copies,
            };
        }
        _ => {}
    }
    if passages.len() > MAX_PASSAGES {
        return Resolution::Ambiguous(Cause::Order);
    }
    let Some(order) = path_order(events, &passages, saddr, daddr, owners) else {
        return Resolution::Ambiguous(Cause::Order);
    };
    let mut hops = Vec::with_capacity(order.len() - 1);
    for pair in order.windows(2) {
        let (a, b) = (&passages[pair[0]], &passages[pair[1]]);
        let (Some(send), Some(recv)) = (a.exit, b.entry) else {
            return Resolution::Ambiguous(Cause::Order);
        };
        hops.push((events[send], events[recv]));
    }
    // A node inside the path must have received the packet before it sent it on.
    for &i in &order[1..order.len() - 1] {
        let p = &passages[i];
        match (p.entry, p.exit) {
            (Some(r), Some(s)) if r < s => {}
            _ => return Resolution::Ambiguous(Cause::Order),
        }
    }
    let forwarded = passages
        .iter()
        .filter(|p| p.entry.is_some() && p.exit.is_some())
        .count() as u32;
    Resolution::Path {
        hops,
        copies,
        forwarded,
    }
}

/// The passage of `events[start..end]` (one trace's, in file order), or `None` when they are not
/// one passage of one packet: spread over more than [`STACKED_COPY_NS`], or an interface seen
/// twice in the same direction.
/// Whether two events of one trace were seen on one interface: the same index and the same
/// namespace's tag (0 where the agent recorded one namespace, and before format 6).
fn same_interface(a: &Seen, b: &Seen) -> bool {
    a.ifindex == b.ifindex && a.flags & flag::NETNS_TAG == b.flags & flag::NETNS_TAG
}

fn passage(events: &[Seen], start: usize, end: usize) -> Option<Passage> {
    let run = &events[start..end];
    let first_time = run[0].time;
    let mut p = Passage {
        trace: run[0].trace,
        first: start,
        last: end - 1,
        entry: None,
        exit: None,
        copies: 0,
    };
    for (k, s) in run.iter().enumerate() {
        if s.time.abs_diff(first_time) > STACKED_COPY_NS {
            return None;
        }
        if run[..k]
            .iter()
            .any(|o| o.dir == s.dir && same_interface(o, s))
        {
            return None;
        }
        let i = start + k;
        if s.dir == direction::SEND {
            p.copies += u32::from(p.exit.is_some());
            p.exit = Some(i);
        } else if p.entry.is_none() {
            p.entry = Some(i);
        } else {
            p.copies += 1;
        }
    }
    Some(p)
}

/// The passages' order along the packet's path (indexes into `passages`), if the evidence
/// establishes one (see the module documentation).
fn path_order(
    events: &[Seen],
    passages: &[Passage],
    saddr: &[u8; 16],
    daddr: &[u8; 16],
    owners: &impl Owners,
) -> Option<Vec<usize>> {
    let n = passages.len();
    let source = owners.owner(saddr);
    let destination = owners.owner(daddr);
    let first = |p: &Passage| events[p.first].dir == direction::SEND || source == Some(p.trace);
    let last = |p: &Passage| events[p.last].dir == direction::RECV || destination == Some(p.trace);
    let entry_ttl = |p: &Passage| events[p.first].ttl;
    // before[i][j]: passage i comes before passage j on the path.
    let mut before = [[false; MAX_PASSAGES]; MAX_PASSAGES];
    for (i, p) in passages.iter().enumerate() {
        for (j, q) in passages.iter().enumerate() {
            if i == j {
                continue;
            }
            let (tp, tq) = (entry_ttl(p), entry_ttl(q));
            before[i][j] = first(p) || last(q) || (tp != 0 && tq != 0 && tp > tq);
        }
    }
    // The transitive closure; then every pair must be ordered one way, never both.
    for k in 0..n {
        for i in 0..n {
            for j in 0..n {
                before[i][j] |= before[i][k] && before[k][j];
            }
        }
    }
    let pairs = (0..n).flat_map(|i| (i + 1..n).map(move |j| (i, j)));
    if pairs.into_iter().any(|(i, j)| before[i][j] == before[j][i]) {
        return None;
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| (0..n).filter(|&j| before[j][i]).count());
    Some(order)
}

#[cfg(test)]
mod tests;
