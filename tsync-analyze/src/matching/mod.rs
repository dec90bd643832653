//! Matching send and receive events of the same packet across traces (hash join on the digest).
//!
//! Events of all traces arrive merged in (approximately aligned) time order. Each digest key lives
//! in a table until `window` after it was first seen; only then is it decided:
//! - one send and one receive on different traces: a message;
//! - one send and one receive on the same trace: loopback, counted as `same_trace`;
//! - more than one event on a side: all of the key's events are kept and resolved together
//!   ([`passage`]): copies of the packet on stacked devices of one node (a bridge, a bond, a
//!   VLAN, a tunnel's inner and outer packet: `stacked_copies`), its passages through traced
//!   nodes that forward it (routing, bridging, NAT, tunnels: `forwarded`), which give one message
//!   per hop along a path the evidence establishes, or an `ambiguous` key, dropped: a node saw the
//!   packet twice (a retransmission or a duplicate could pair a reception with a later send — a
//!   non-causal message that would break the hull's guarantee), or the order of the nodes on its
//!   path is not established;
//! - only one side: `unmatched` (packet from or to an untraced node, lost event, …) — unless it
//!   is a TCP segment with payload that segmentation or receive offloads cut differently on the
//!   two sides: then [`ranges`] pairs it by the sequence numbers it covers (`range_matched`).
//!
//! Of a node's copies of one packet, the message takes the last send (the copy closest to the
//! wire: a bridge's port, a tunnel's outer packet) and the first receive. Copies are events on
//! one trace and side, on other interfaces, within [`STACKED_COPY_NS`] of the first: the kernel
//! passes a packet through a device stack in one call chain. A retransmission repeats the first
//! interface (the same stack), or comes later than that (TCP's timers wait longer, and a fast
//! retransmission waits for duplicate acknowledgments from the receiver), and makes the key
//! ambiguous.
//!
//! Memory is bounded by the keys seen in one window, not by the trace length. The window must
//! exceed the largest one-way delay plus the residual misalignment of the traces' clocks (plus
//! the merge's slack of 1/16 window): then a
//! copy of a key that comes after the window cannot have caused a reception inside it, and the
//! key's earlier pair is causal.

pub mod alignment;
pub mod exchange;
mod key;
mod keys;
mod live;
pub mod merge;
mod order;
mod parallel;
mod passage;
mod ranges;
mod sequencer;

pub(crate) use key::key_hash;
// The tests (`use super::*`) read these; the code here does not.
#[cfg(test)]
use {
    crate::model::{MatchedMessage, Message, MessageSink, Origin},
    key::{KEY_FLAGS, Key, KeyLanes},
    keys::Seen,
    tsync_common::{PacketEvent, direction, tcp_flag},
};

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
    /// Threads matching the digests (`--threads`); 0: one per core. The results are the same
    /// whatever the number (see `order`).
    pub threads: usize,
}

impl MatchOptions {
    /// The number of matching threads to run: `threads`, or one per core when 0.
    pub fn thread_count(&self) -> usize {
        match self.threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        }
    }
}

impl Default for MatchOptions {
    fn default() -> Self {
        MatchOptions {
            window_ns: DEFAULT_WINDOW_NS,
            exchanges: false,
            by_range: true,
            threads: 0,
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
    /// Keys seen more than once on a side within the window that no path explains, dropped:
    /// `ambiguous_repeated` + `ambiguous_order`.
    pub ambiguous: u64,
    /// Ambiguous keys that a node saw twice (a retransmission, a duplicate), or more often than
    /// any path explains.
    pub ambiguous_repeated: u64,
    /// Ambiguous keys that crossed several traced nodes in an order the evidence does not
    /// establish (see `passage`).
    pub ambiguous_order: u64,
    /// Passages of packets through traced nodes that forwarded them (received and sent them:
    /// routing, bridging, NAT, tunnels), each a hop of the path the packet's messages follow.
    pub forwarded: u64,
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
    /// Per pair of traces (a < b), the messages a→b and b→a that came from span files (the
    /// rest came from packets or text lines); reported with each pair.
    #[serde(skip)]
    pub from_spans: std::collections::BTreeMap<(u32, u32), [u64; 2]>,
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
        self.ambiguous_repeated += o.ambiguous_repeated;
        self.ambiguous_order += o.ambiguous_order;
        self.forwarded += o.forwarded;
        self.out_of_order += o.out_of_order;
        self.exchanges += o.exchanges;
        self.oversize_unmatched += o.oversize_unmatched;
        self.stacked_copies += o.stacked_copies;
        self.warnings.extend(o.warnings.iter().cloned());
        for (&pair, counts) in &o.from_spans {
            let mine = self.from_spans.entry(pair).or_default();
            mine[0] += counts[0];
            mine[1] += counts[1];
        }
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

/// The warning for inputs of which most events found no partner (at least 100 events, and
/// unmatched ones half of them or more), naming what the counts point at and what to do. Without
/// it a user whose nodes forward their pods' traffic, say, would only see traces that nothing
/// relates.
pub fn unmatched_warning(stats: &MatchStats) -> Option<String> {
    let (events, unmatched) = (stats.events, stats.unmatched);
    if events < 100 || unmatched * 2 < events {
        return None;
    }
    let share = 100.0 * unmatched as f64 / events as f64;
    let mut causes = Vec::new();
    if stats.ambiguous_order > 0 {
        causes.push(format!(
            "{} packets crossed several traced nodes that forwarded them (routing, bridging, NAT \
             or an overlay between pods and the wire) in an order the traces do not establish: \
             where the nodes bridge rather than route, let each agent see its pods (run it with \
             hostPID, or record the pods' namespaces with --netns or --all-netns) so that it \
             lists the pods' addresses; agents before format 5 record no TTL, which routing \
             lowers: upgrade them",
            stats.ambiguous_order
        ));
    }
    if stats.ambiguous_repeated > 0 {
        causes.push(format!(
            "{} packets were seen twice on one node (retransmissions or duplicates, or UDP \
             datagrams whose digests are alike: agents before format 5 keep only the first 8 \
             payload bytes, the same for every datagram of a QUIC connection; upgrade them)",
            stats.ambiguous_repeated
        ));
    }
    if stats.oversize_unmatched > 0 {
        causes.push(format!(
            "{} packets longer than {OFFLOAD_SUSPECT_LEN} bytes between traced nodes (offloads: \
             see the warning about them)",
            stats.oversize_unmatched
        ));
    }
    causes.push(
        "the rest: packets to or from hosts that were not recorded, addresses rewritten between \
         two traced hooks, or events lost while recording (tsync-analyze info shows losses)"
            .to_owned(),
    );
    Some(format!(
        "{unmatched} of {events} events ({share:.1} %) found no partner, so few messages relate \
         the traces: {}",
        causes.join("; ")
    ))
}

/// The whole matching stage on one thread, event by event: the tests' way in.
#[cfg(test)]
pub(crate) struct Matcher {
    keys: keys::KeyMatcher,
    sequencer: sequencer::Sequencer,
    out: order::Outbox,
}

#[cfg(test)]
impl Matcher {
    pub fn new(options: &MatchOptions) -> Self {
        Matcher {
            keys: keys::KeyMatcher::new(options.window_ns, options.by_range),
            sequencer: sequencer::Sequencer::new(options, true),
            out: order::Outbox::default(),
        }
    }

    /// Adds an event (see [`keys::KeyMatcher::event`]); its position in the input is the count
    /// of events so far.
    pub fn event<S: MessageSink + ?Sized>(
        &mut self,
        trace: u32,
        e: &PacketEvent,
        time: i64,
        aligned: i64,
        index: u64,
        sink: &mut S,
    ) {
        let seq = self.keys.stats.events;
        self.keys
            .event(trace, e, time, aligned, index, seq, &mut self.out);
        self.drain(sink);
    }

    fn drain<S: MessageSink + ?Sized>(&mut self, sink: &mut S) {
        drain(&mut self.out, &mut self.sequencer, sink);
    }

    pub fn finish<S: MessageSink + ?Sized>(self, sink: &mut S) -> MatchStats {
        let Matcher {
            keys,
            mut sequencer,
            mut out,
        } = self;
        let (mut stats, _) = keys.finish(&mut out);
        drain(&mut out, &mut sequencer, sink);
        stats.add(&sequencer.finish(sink));
        stats
    }
}

/// Passes `out`'s decisions, in the order they were taken, to the sequencer.
#[cfg(test)]
fn drain<S: MessageSink + ?Sized>(
    out: &mut order::Outbox,
    sequencer: &mut sequencer::Sequencer,
    sink: &mut S,
) {
    for o in &out.items {
        sequencer.item(o, out, sink);
    }
    out.clear();
}

#[cfg(test)]
mod tests;
