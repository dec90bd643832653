//! Exchanges (a request and the reply that followed it), for `linreg` and the joint estimate's
//! round trips. Two ways to find them:
//!
//! - [`AckPairing`], for TCP events: a segment and the matched ACK that covers it;
//! - [`ReplyPairing`], for inputs without TCP headers (text message files): a message i→j
//!   followed by the next message j→i that j sent after receiving it. The check uses only j's
//!   clock, so every exchange found is causal whatever the clock offsets. When several i→j
//!   messages precede the reply, the last one is used, which keeps the round trip short (as the
//!   LTTV code does for ACKs).

use std::collections::{HashMap, VecDeque};

use tsync_common::{PacketEvent, tcp_flag};

use crate::model::{Exchange, Message, PairTable};

/// Finds exchanges in a stream of messages among `traces` traces.
#[derive(Clone, Debug, Default)]
pub struct ReplyPairing {
    /// Latest unanswered message per ordered pair (sender, receiver).
    latest: PairTable<Message>,
}

impl ReplyPairing {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds a message; returns the exchange it completes, if any.
    pub fn push(&mut self, m: Message) -> Option<Exchange> {
        let (s, r) = (m.send_trace, m.recv_trace);
        let found = match self.latest.get(r, s) {
            Some(&req) if req.recv_ns <= m.send_ns => {
                self.latest.remove(r, s);
                Some(Exchange {
                    request: req,
                    reply: m,
                })
            }
            _ => None,
        };
        let slot = self.latest.get_or_insert_with(s, r, || m);
        if slot.send_ns <= m.send_ns {
            *slot = m;
        }
        found
    }
}

/// TCP exchanges: a segment that needs an acknowledgment (SYN, FIN or payload) and the matched
/// segment of the reverse connection whose ACK covers it (`SEQ_GT(ack_seq, seq)`, 32-bit
/// wrap-around). Among the covered segments the last one is used, which keeps the round trip short.
#[derive(Default)]
pub(crate) struct AckPairing {
    pending: HashMap<Conn, VecDeque<(u32, Message)>>,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Conn {
    saddr: [u8; 16],
    daddr: [u8; 16],
    source: u16,
    dest: u16,
}

/// Segments remembered per connection; older ones are dropped (their ACK would be too late to
/// give a useful round trip anyway).
const PENDING_PER_CONN: usize = 256;

#[inline]
fn seq_gt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

impl AckPairing {
    pub(crate) fn push(&mut self, e: &PacketEvent, m: Message, window: i64) -> Option<Exchange> {
        if !e.is_tcp() {
            return None;
        }
        let mut found = None;
        if e.tcp_flags & tcp_flag::ACK != 0 {
            let reverse = Conn {
                saddr: e.daddr,
                daddr: e.saddr,
                source: e.dest,
                dest: e.source,
            };
            if let Some(q) = self.pending.get_mut(&reverse) {
                let mut last = None;
                while let Some(&(seq, req)) = q.front() {
                    if !seq_gt(e.ack_seq, seq) {
                        break;
                    }
                    last = Some(req);
                    q.pop_front();
                }
                if q.is_empty() {
                    self.pending.remove(&reverse);
                }
                if let Some(req) = last
                    && req.send_trace == m.recv_trace
                    && req.recv_trace == m.send_trace
                    && req.recv_ns <= m.send_ns
                    && m.send_ns - req.recv_ns <= window
                {
                    found = Some(Exchange {
                        request: req,
                        reply: m,
                    });
                }
            }
        }
        let needs_ack =
            e.tcp_flags & (tcp_flag::SYN | tcp_flag::FIN) != 0 || e.tcp_payload_len() > 0;
        if needs_ack {
            let q = self
                .pending
                .entry(Conn {
                    saddr: e.saddr,
                    daddr: e.daddr,
                    source: e.source,
                    dest: e.dest,
                })
                .or_default();
            if q.len() == PENDING_PER_CONN {
                q.pop_front();
            }
            q.push_back((e.seq, m));
        }
        found
    }
}
