//! Matching send and receive events of the same packet across traces (hash join on the digest).
//!
//! Events of all traces arrive merged in (approximately aligned) time order. Each digest key lives
//! in a table until `window` after it was first seen; only then is it decided:
//! - one send and one receive on different traces: a message;
//! - one send and one receive on the same trace: loopback, counted as `same_trace`;
//! - more than one send or more than one receive: the key is `ambiguous` and dropped, because a
//!   retransmission (or a duplicate) could pair a reception with a later send — a non-causal
//!   message that would break the hull's guarantee;
//! - only one side: `unmatched` (packet from or to an untraced node, lost event, …) — unless it
//!   is a TCP segment with payload that segmentation or receive offloads cut differently on the
//!   two sides: then [`ranges`] pairs it by the sequence numbers it covers (`range_matched`).
//!
//! One exception to "more than one": a node whose address lives on a stacked device (a bridge, a
//! bond, a VLAN, …) records every packet once per device it crosses, with the same digest,
//! microseconds apart. A further event on the same trace, side and key, on another interface than
//! that side's first event and within [`STACKED_COPY_NS`] of it, is such a copy: it is counted
//! (`stacked_copies`) and otherwise ignored. The first copy is kept on both sides — the earliest
//! send and the earliest receive — so the pair stays causal whatever the copies really were (even
//! a fast retransmission through another interface: the earliest send precedes every reception).
//! A retransmission through the same device stack repeats the first interface and stays a
//! duplicate.
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
    /// Keys seen more than once on a side within the window, dropped.
    pub ambiguous: u64,
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
        self.out_of_order += o.out_of_order;
        self.exchanges += o.exchanges;
        self.oversize_unmatched += o.oversize_unmatched;
        self.stacked_copies += o.stacked_copies;
        self.warnings.extend(o.warnings.iter().cloned());
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
