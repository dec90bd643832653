//! What matching does after the hash join, in the canonical order of the decisions (see
//! [`super::order`]): pairing by sequence range, exchanges, and handing the messages to the sink.
//! It runs on one thread: these steps relate keys of any partition (a connection's segments and
//! their ACKs, the bytes of a flow), and they cost little next to the join.

use super::exchange::AckPairing;
use super::keys::Recordings;
use tsync_common::PacketEvent;

use super::order::{Decisions, Out, Outbox, Tag, What};
use super::ranges::RangeMatcher;
use super::ranges::Unpaired;
use super::{MatchOptions, MatchStats};
use crate::model::{MatchedMessage, Message, MessageSink, Origin};

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
        match o.what {
            What::Message {
                message,
                origin,
                events,
            } => self.message(o.tag, message, origin, from.events_of(events), sink),
            What::Candidate(i) => self.candidate(o.tag, from.candidates[i as usize], sink),
        }
    }

    /// Takes the range matcher's decisions due before `tag`.
    #[inline]
    fn until<S: MessageSink + ?Sized>(&mut self, tag: Tag, sink: &mut S) {
        if let Some(r) = self.ranges.as_mut()
            && r.holds_any()
        {
            r.expire(tag.due, false, &mut self.stats, &self.recordings, sink);
        }
    }

    /// A message decided at `tag`.
    #[inline(always)]
    fn message<S: MessageSink + ?Sized>(
        &mut self,
        tag: Tag,
        message: Message,
        origin: Origin,
        events: Option<&[PacketEvent; 2]>,
        sink: &mut S,
    ) {
        self.until(tag, sink);
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

    /// An event for the range matcher, decided at `tag`.
    fn candidate<S: MessageSink + ?Sized>(&mut self, tag: Tag, u: Unpaired, sink: &mut S) {
        self.until(tag, sink);
        if let Some(r) = self.ranges.as_mut() {
            r.add(u);
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

/// One partition's decisions passed straight on (they come in tag order): no buffering.
pub(crate) struct Direct<'a, S: MessageSink + ?Sized> {
    pub sequencer: &'a mut Sequencer,
    pub sink: &'a mut S,
}

impl<S: MessageSink + ?Sized> Decisions for Direct<'_, S> {
    #[inline(always)]
    fn message(&mut self, tag: Tag, message: Message, origin: Origin) {
        self.sequencer
            .message(tag, message, origin, None, &mut *self.sink);
    }

    #[inline]
    fn message_with_events(
        &mut self,
        tag: Tag,
        message: Message,
        origin: Origin,
        events: [PacketEvent; 2],
    ) {
        self.sequencer
            .message(tag, message, origin, Some(&events), &mut *self.sink);
    }

    fn candidate(&mut self, tag: Tag, u: Unpaired) {
        self.sequencer.candidate(tag, u, &mut *self.sink);
    }
}
