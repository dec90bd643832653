//! A message: one packet seen leaving one trace and entering another, the unit every algorithm uses.

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

/// Where a message came from, so that tools can point back at the raw data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A line of a text message file (1-based line number).
    TextLine(u64),
    /// Two events of trace files: `send_index` is the index of the send event in the sending trace's
    /// file (events counted from 0 in file order), `recv_index` that of the receive event.
    Events { send_index: u64, recv_index: u64 },
}

/// A matched message with its provenance and, for trace-file inputs, the packet digest.
#[derive(Clone, Copy, Debug)]
pub struct MatchedMessage<'a> {
    pub message: Message,
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
    pub request: Message,
    pub reply: Message,
}

impl Exchange {
    /// Round-trip time minus the time the remote side held the request, ns (both spans measured on
    /// one clock each, so no synchronization is needed).
    pub fn rtt_ns(&self) -> i64 {
        (self.reply.recv_ns - self.request.send_ns) - (self.reply.send_ns - self.request.recv_ns)
    }
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
