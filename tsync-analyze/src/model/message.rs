//! A message: one packet seen leaving one trace and entering another, the unit every algorithm
//! uses; its provenance, exchanges of two messages, and references to its events.

/// One matched message: sent on `send_trace` at `send_ns` (its local clock), received on
/// `recv_trace` at `recv_ns` (that trace's local clock). Times are integer nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Message {
    /// Index of the sending trace (position in the analyzer's trace list).
    pub send_trace: u32,
    /// Index of the receiving trace.
    pub recv_trace: u32,
    /// Send time on the sender's clock, ns.
    pub send_ns: i64,
    /// Receive time on the receiver's clock, ns.
    pub recv_ns: i64,
}

impl Message {
    /// Apparent transfer time `recv_ns − send_ns` (negative for an inversion once the times are
    /// on one timebase).
    pub fn transfer_ns(&self) -> i64 {
        self.recv_ns - self.send_ns
    }
}

/// Where a message came from, so that tools can point back at the raw data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A line of a text message file (1-based line number), or of a span file (the line of the
    /// message's child span: `crate::spans`).
    TextLine(u64),
    /// Two events of trace files: `send_index` is the index of the send event in the sending trace's
    /// file (events counted from 0 in file order), `recv_index` that of the receive event.
    Events {
        /// Index of the send event in the sending trace's file.
        send_index: u64,
        /// Index of the receive event in the receiving trace's file.
        recv_index: u64,
    },
}

/// A matched message with its provenance and, for trace-file inputs, the packet digest.
#[derive(Clone, Copy, Debug)]
pub struct MatchedMessage<'a> {
    /// The message, times on each trace's local clock.
    pub message: Message,
    /// Where the message came from in the inputs.
    pub origin: Origin,
    /// The send event's record (trace-file inputs only).
    pub send_event: Option<&'a tsync_common::PacketEvent>,
    /// The receive event's record (trace-file inputs only).
    pub recv_event: Option<&'a tsync_common::PacketEvent>,
}

/// An exchange (NTP style round trip): `request` from trace i to trace j, then `reply` from j back
/// to i, sent by j after it received the request (checked on j's clock). For TCP the reply is the
/// ACK that acknowledges the request's data; for text inputs, the next message the other way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exchange {
    /// The first message, from trace i to trace j.
    pub request: Message,
    /// The answer, from j back to i, sent after j received the request.
    pub reply: Message,
}

impl Exchange {
    /// Round-trip time minus the time the remote side held the request, ns (both spans measured on
    /// one clock each, so no synchronization is needed).
    pub fn rtt_ns(&self) -> i64 {
        (self.reply.recv_ns - self.request.send_ns) - (self.reply.send_ns - self.request.recv_ns)
    }
}

/// One event: the `index`-th event (0-based, in file order, which is time order) of trace `trace`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct EventRef {
    /// Index of the trace.
    pub trace: usize,
    /// Index of the event in its trace.
    pub index: usize,
}

impl EventRef {
    /// The `index`-th event of `trace`, as the matcher and the readers number them.
    pub fn new(trace: u32, index: u64) -> Self {
        EventRef {
            trace: trace as usize,
            index: index as usize,
        }
    }
}

/// A message given by its two events rather than their times: what the controlled logical clock
/// and the exports work on, since they move or rewrite the events themselves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MessageRef {
    /// The send event.
    pub send: EventRef,
    /// The receive event.
    pub recv: EventRef,
}

/// Receives what the message stage produces. `sync`, `messages`, and the evaluation tools implement it.
pub trait MessageSink {
    /// One matched message (never a same-trace one).
    fn message(&mut self, m: &MatchedMessage<'_>);
    /// One exchange; only called when exchanges were asked for.
    fn exchange(&mut self, _e: &Exchange) {}
    /// Whether [`MatchedMessage::send_event`]/`recv_event` are needed (rebuilding them costs time
    /// on the hot path); when false they may be None.
    fn wants_events(&self) -> bool {
        true
    }
}
