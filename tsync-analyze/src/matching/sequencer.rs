//! What matching does after the hash join, in the canonical order of the decisions (see
//! [`super::order`]): pairing by sequence range, exchanges, and handing the messages to the sink.
//! It runs on one thread: these steps relate keys of any partition (a connection's segments and
//! their ACKs, the bytes of a flow), and they cost little next to the join.

use super::exchange::AckPairing;
use super::keys::Recordings;
use super::order::{Out, Outbox, What};
use super::ranges::RangeMatcher;
use super::{MatchOptions, MatchStats};
use crate::model::{MatchedMessage, MessageSink};

pub(crate) struct Sequencer {
    window: i64,
    /// Pairs by sequence range what the digest could not (None: `by_range` off).
    ranges: Option<RangeMatcher>,
    exchanges: Option<AckPairing>,
    /// What this stage counted (range matches, exchanges, what ranges left unmatched).
    pub stats: MatchStats,
    pub recordings: Recordings,
}

impl Sequencer {
    pub fn new(options: &MatchOptions, events_wanted: bool) -> Self {
        let window = options.window_ns.max(1);
        Sequencer {
            window,
            ranges: options.by_range.then(|| {
                let mut r = RangeMatcher::new(window);
                r.events_wanted = events_wanted;
                r
            }),
            exchanges: options.exchanges.then(AckPairing::default),
            stats: MatchStats::default(),
            recordings: Recordings::default(),
        }
    }

    /// Whether the join must keep each message's events (for the sink, or for exchanges).
    pub fn needs_events(&self, sink_wants: bool) -> bool {
        sink_wants || self.exchanges.is_some()
    }

    /// Passes on one decision of `from`; decisions must come in tag order.
    #[inline]
    pub fn item<S: MessageSink + ?Sized>(&mut self, o: &Out, from: &Outbox, sink: &mut S) {
        if let Some(r) = self.ranges.as_mut()
            && r.holds_any()
        {
            r.expire(o.tag.due, false, &mut self.stats, &self.recordings, sink);
        }
        match o.what {
            What::Message {
                message,
                origin,
                events,
            } => {
                let events = from.events_of(events);
                sink.message(&MatchedMessage {
                    message,
                    origin,
                    send_event: events.map(|e| &e[0]),
                    recv_event: events.map(|e| &e[1]),
                });
                if let Some(p) = self.exchanges.as_mut()
                    && let Some(events) = events
                    && let Some(x) = p.push(&events[0], message, self.window)
                {
                    self.stats.exchanges += 1;
                    sink.exchange(&x);
                }
            }
            What::Candidate(i) => {
                if let Some(r) = self.ranges.as_mut() {
                    r.add(from.candidates[i as usize]);
                }
            }
        }
    }

    /// Takes every remaining decision of the range matcher; returns this stage's counts.
    pub fn finish<S: MessageSink + ?Sized>(mut self, sink: &mut S) -> MatchStats {
        if let Some(r) = self.ranges.as_mut() {
            r.expire(i64::MAX, true, &mut self.stats, &self.recordings, sink);
        }
        self.stats
    }
}
